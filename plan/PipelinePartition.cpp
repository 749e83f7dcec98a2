//===- PipelinePartition.cpp - Stages of a pipeline by PipeDream's DP -----===//
//
// The algorithm is described in PipelinePartition.h.
//
//===----------------------------------------------------------------------===//
#include "plan/PipelinePartition.h"

#include "ir/Params.h"
#include "plan/LayerwiseSearch.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <limits>
#include <unordered_map>
#include <unordered_set>

namespace lwcc {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

class Partitioner {
public:
  Partitioner(Graph& g, const CostModel& cm, const PipelineOptions& o) : g_(g), cm_(cm), o_(o) {}

  llvm::Error run(const DiagHandler& diag) {
    for (auto& op : g_.ops())
      if (op->kind() != OpKind::Constant && op->kind() != OpKind::Assign && op->numResults())
        units_.push_back(op.get());
    for (size_t i = 0; i < units_.size(); ++i)
      at_[units_[i]] = i;
    const int64_t S = o_.stages, L = static_cast<int64_t>(units_.size());
    if (o_.gpus % S != 0)
      return makeError(
          llvm::formatv("pipeline: {0} stages do not divide the {1} devices", S, o_.gpus).str());
    if (S > L)
      return makeError(llvm::formatv("pipeline: {0} stages for a step of {1} ops: at most one "
                                     "stage per op",
                                     S, L)
                           .str());
    replicas_ = o_.gpus / S;
    measure();
    // best[s][j]: the least slowest-stage time of units 0..j in stages 0..s.
    std::vector<std::vector<double>> best(S, std::vector<double>(L, kInf));
    std::vector<std::vector<int64_t>> from(S, std::vector<int64_t>(L, -1));
    for (int64_t j = 0; j < L; ++j)
      if (fits(0, 0, j))
        best[0][j] = stageSeconds(0, 0, j);
    // The last stage's first unit i from j down: its compute only grows
    // as i falls, so once it alone is slower than the best cut found, no
    // earlier i is faster. Of equal cuts the one of the smallest i wins.
    // (The loop asks stageSeconds for i..j in its parts: the compute, the
    // transfer after j, the same for every i, and the transfer before i.)
    for (int64_t s = 1; s < S; ++s) {
      const double* before = best[static_cast<size_t>(s - 1)].data();
      const double* in = transfers_[static_cast<size_t>(s - 1)].data();
      for (int64_t j = s; j < L; ++j) {
        double least = kInf;
        int64_t at = -1;
        const double out = transfer(j, s);
        for (int64_t i = j; i >= s; --i) {
          const double compute = computeSeconds(i, j);
          if (!(compute <= least))
            break;
          if (before[i - 1] == kInf || !fits(s, i, j))
            continue;
          const double t = std::max(before[i - 1], std::max(compute, in[i - 1] + out));
          if (t <= least) {
            least = t;
            at = i;
          }
        }
        best[static_cast<size_t>(s)][static_cast<size_t>(j)] = least;
        from[static_cast<size_t>(s)][static_cast<size_t>(j)] = at;
      }
    }
    if (best[S - 1][L - 1] == kInf)
      return makeError(llvm::formatv(
          "pipeline: no cut of the step into {0} stages fits a device of spec '{1}' ({2} "
          "bytes) with {3} micro-batches ({4}); use more stages or micro-batches",
          S, cm_.spec().name, cm_.spec().memoryBytes, o_.microbatches,
          o_.gpipe        ? "gpipe keeps every micro-batch's activations"
          : o_.zeroBubble ? "zb-h1"
                          : "1f1b"));
    std::vector<std::pair<int64_t, int64_t>> ranges(S);
    for (int64_t s = S - 1, j = L - 1; s >= 0; --s) {
      int64_t i = s == 0 ? 0 : from[s][j];
      ranges[s] = {i, j};
      j = i - 1;
    }
    std::vector<int64_t> stageOf(static_cast<size_t>(L));
    for (int64_t s = 0; s < S; ++s)
      for (int64_t u = ranges[s].first; u <= ranges[s].second; ++u)
        stageOf[static_cast<size_t>(u)] = s;
    keepStateWithItsInputs(stageOf);
    for (int64_t u = 0; u < L; ++u)
      assign(stageOf[static_cast<size_t>(u)], u);
    if (o_.report && diag)
      report(diag, ranges, best[S - 1][L - 1]);
    return llvm::Error::success();
  }

private:
  /// Per unit: forward and backward seconds of one micro-batch, the bytes
  /// of its results (the activations a micro-batch keeps for backward),
  /// the bytes of the trained params it reads first; per cut after unit c,
  /// the bytes of values that cross it (per micro-batch).
  void measure() {
    const size_t L = units_.size();
    std::unordered_set<const Value*> trained;
    for (const Value* p : trainableParams(g_))
      trained.insert(p);
    std::unordered_set<const Value*> seenParams;
    seconds_.assign(L + 1, 0);
    acts_.assign(L + 1, 0);
    params_.assign(L + 1, 0);
    std::vector<double> delta(L + 1, 0);
    const double share = 1.0 / static_cast<double>(o_.microbatches);
    for (size_t i = 0; i < L; ++i) {
      const Op& op = *units_[i];
      double f = cm_.computeSeconds(cm_.flops(op) * share, cm_.bytes(op) * share, &op,
                                    cm_.fill(op, share));
      if (auto measured = cm_.measuredSeconds(op))
        f = *measured * share;
      seconds_[i + 1] = seconds_[i] + f * (1 + backwardTimeFactor(op));
      double bytes = 0;
      for (unsigned r = 0; r < op.numResults(); ++r) {
        const Value* v = op.result(r);
        double vb = static_cast<double>(v->type().sizeInBytes()) * share;
        if (!op.info().view)
          bytes += vb;
        size_t last = i;
        for (const Use& u : v->uses())
          if (u.user && at_.count(u.user))
            last = std::max(last, at_.at(u.user));
        if (last > i && isFloat(v->type().dtype)) { // crosses the cuts i .. last-1
          delta[i] += vb;
          delta[last] -= vb;
        }
      }
      acts_[i + 1] = acts_[i] + bytes;
      double pb = 0;
      for (const Value* v : op.operands())
        if (trained.count(v) && seenParams.insert(v).second)
          pb += static_cast<double>(v->type().sizeInBytes());
      params_[i + 1] = params_[i] + pb;
    }
    cross_.assign(L, 0);
    double run = 0;
    for (size_t c = 0; c < L; ++c) {
      run += delta[c];
      cross_[c] = run;
    }
    // Each cut's transfer from each stage to the next, priced
    // once: the dynamic program asks for it O(L^2 S) times.
    transfers_.assign(static_cast<size_t>(o_.stages), std::vector<double>(L));
    for (size_t s = 0; s < transfers_.size(); ++s)
      for (size_t c = 0; c < L; ++c)
        transfers_[s][c] =
            2 * cm_.transferSeconds(
                    static_cast<int64_t>(cross_[c] / static_cast<double>(replicas_)),
                    firstDevice(static_cast<int64_t>(s)), firstDevice(static_cast<int64_t>(s) + 1));
  }

  int64_t firstDevice(int64_t stage) const { return stage * replicas_; }

  /// The bytes crossing the cut after unit c, each way, moved per micro-
  /// batch between stage s and s+1 (a replica's share each).
  double transfer(int64_t c, int64_t s) const {
    if (c < 0 || c + 1 >= static_cast<int64_t>(cross_.size()))
      return 0;
    return transfers_[static_cast<size_t>(s)][static_cast<size_t>(c)];
  }

  /// Stage s holding units i..j: its compute per micro-batch (a replica's
  /// share), or the transfers at its ends when they take longer (they run
  /// beside the compute, on streams of their own).
  double stageSeconds(int64_t s, int64_t i, int64_t j) const {
    return std::max(computeSeconds(i, j), transfer(i - 1, s - 1) + transfer(j, s));
  }

  /// The compute of units i..j per micro-batch (a replica's share).
  double computeSeconds(int64_t i, int64_t j) const {
    return (seconds_[static_cast<size_t>(j + 1)] - seconds_[static_cast<size_t>(i)]) /
           static_cast<double>(replicas_);
  }

  /// Whether stage s holding units i..j fits a device: its params with
  /// their gradient and optimizer state, and the activations of the
  /// micro-batches it holds at once (1f1b: S-s of them, zb-h1: at most S,
  /// gpipe: all).
  bool fits(int64_t s, int64_t i, int64_t j) const {
    if (cm_.spec().memoryBytes <= 0)
      return true;
    double inFlight =
        static_cast<double>(o_.gpipe        ? o_.microbatches
                            : o_.zeroBubble ? std::min(o_.stages, o_.microbatches)
                                            : std::min(o_.stages - s, o_.microbatches));
    double params = params_[static_cast<size_t>(j + 1)] - params_[static_cast<size_t>(i)];
    double acts = (acts_[static_cast<size_t>(j + 1)] - acts_[static_cast<size_t>(i)]) /
                  static_cast<double>(replicas_);
    return 4 * params + inFlight * acts <= static_cast<double>(cm_.spec().memoryBytes);
  }

  /// What only updates state (batch norm's running statistics: ops whose
  /// results reach nothing but assigns) runs on the stage of the latest
  /// of its inputs, not where the cut falls in the op order: a running
  /// statistic updated partly on each side of a cut goes to the later
  /// stage and back once per micro-batch, and each micro-batch's update
  /// waits for the previous one's on both stages (Inception-v3 in 16
  /// stages of 32 micro-batches on h100: each micro-batch's forward a
  /// quarter of a millisecond later at each stage).
  void keepStateWithItsInputs(std::vector<int64_t>& stageOf) const {
    const size_t L = units_.size();
    std::unordered_set<const Value*> outputs(g_.outputs().begin(), g_.outputs().end());
    std::vector<bool> state(L, false);
    for (size_t i = L; i-- > 0;) {
      const Op& op = *units_[i];
      bool only = true, any = false;
      for (unsigned r = 0; r < op.numResults() && only; ++r) {
        only = !outputs.count(op.result(r));
        for (const Use& u : op.result(r)->uses()) {
          if (!u.user)
            continue;
          any = true;
          auto it = at_.find(u.user);
          only =
              only && (u.user->kind() == OpKind::Assign || (it != at_.end() && state[it->second]));
        }
      }
      state[i] = only && any;
    }
    for (size_t i = 0; i < L; ++i) {
      if (!state[i])
        continue;
      int64_t s = -1;
      for (const Value* v : units_[i]->operands())
        if (auto it = at_.find(v->definingOp()); v->definingOp() && it != at_.end())
          s = std::max(s, stageOf[it->second]);
      if (s >= 0)
        stageOf[i] = s;
    }
  }

  /// The config of unit u on stage s: whole on the stage's device, or
  /// with replicas the samples split over them from the stage's inputs on
  /// (as data parallelism does), ops that cannot follow whole on each.
  void assign(int64_t s, int64_t u) {
    std::vector<int64_t> devices;
    for (int64_t k = 0; k < replicas_; ++k)
      devices.push_back(firstDevice(s) + k);
    Op& op = *units_[static_cast<size_t>(u)];
    ParallelConfig cfg;
    cfg.devices = devices;
    if (replicas_ > 1 && op.info().parallel) {
      const Value* sv = parSplitValue(op);
      for (int64_t d = 0; d < sv->type().rank(); ++d) {
        if (sv->type().shape[d] < replicas_)
          continue;
        auto plan = op.info().parallel(op, d);
        if (plan && splitUnits(*plan, sv->type().shape[d]) < replicas_)
          continue;
        bool follows = false;
        for (unsigned k = 0; plan && k < op.numOperands() && !follows; ++k) {
          const Value* v = op.operand(k);
          auto it = split_.find(v);
          int64_t have = it != split_.end() ? it->second
                         : v->kind() == ValueKind::Input && v->type().rank() > 0 &&
                                 v->type().shape[0] >= replicas_
                             ? 0
                             : -1;
          follows = have >= 0 && plan->operandDims[k] == have;
        }
        if (!follows)
          continue;
        cfg.degrees.emplace_back(parDimName(d, sv->type().rank()), replicas_);
        for (unsigned r = 0; r < op.numResults(); ++r)
          if (plan->resultDims[r] >= 0)
            split_[op.result(r)] = plan->resultDims[r];
        break;
      }
    }
    op.annotations().par = std::move(cfg);
  }

  void report(const DiagHandler& diag, const std::vector<std::pair<int64_t, int64_t>>& ranges,
              double slowest) {
    const int64_t S = o_.stages, M = o_.microbatches;
    for (int64_t s = 0; s < S; ++s) {
      auto [i, j] = ranges[static_cast<size_t>(s)];
      diag(Severity::Note, {},
           llvm::formatv("pipeline: stage {0}: {1} ops ({2} .. {3}) on devices {4}..{5}: "
                         "{6:e3} s per micro-batch, activations {7} bytes, {8} bytes out",
                         s, j - i + 1, units_[static_cast<size_t>(i)]->loc().name,
                         units_[static_cast<size_t>(j)]->loc().name, firstDevice(s),
                         firstDevice(s) + replicas_ - 1, stageSeconds(s, i, j),
                         static_cast<int64_t>(
                             (acts_[static_cast<size_t>(j + 1)] - acts_[static_cast<size_t>(i)]) /
                             static_cast<double>(replicas_)),
                         static_cast<int64_t>(s + 1 < S ? cross_[static_cast<size_t>(j)] : 0))
               .str());
    }
    diag(Severity::Note, {},
         llvm::formatv("pipeline: {0} stages x {1} replicas, {2} micro-batches ({3}): "
                       "slowest stage {4:e3} s, estimated step {5:e3} s, bubble {6:f3}",
                       S, replicas_, M,
                       o_.gpipe        ? "gpipe"
                       : o_.zeroBubble ? "zb-h1"
                                       : "1f1b",
                       slowest, slowest * static_cast<double>(M + S - 1),
                       static_cast<double>(S - 1) / static_cast<double>(M + S - 1))
             .str());
  }

  Graph& g_;
  const CostModel& cm_;
  PipelineOptions o_;
  std::vector<Op*> units_;
  std::unordered_map<const Op*, size_t> at_; ///< each unit's place in units_
  int64_t replicas_ = 1;
  std::vector<double> seconds_, acts_, params_, cross_;
  std::vector<std::vector<double>> transfers_; ///< [stage][cut]: transfer()
  std::unordered_map<const Value*, int64_t> split_;
};

} // namespace

llvm::Error partitionPipeline(Graph& g, const CostModel& cm, const PipelineOptions& o,
                              const DiagHandler& diag) {
  for (const auto& op : g.ops())
    if (op->annotations().par || op->annotations().device || op->info().isCommunication() ||
        op->annotations().microBatch)
      return op->emitError("pipeline: the graph is already parallelized");
  return Partitioner(g, cm, o).run(diag);
}

} // namespace lwcc
