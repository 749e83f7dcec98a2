//===- Fragment.cpp - FiLayer's fragments and splits inside a device ------===//
#include "cost/Simulator.h"
#include "passes/BatchSplit.h"
#include "passes/Pass.h"
#include "passes/PassOptions.h"
#include "passes/TrainingSupport.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

namespace lwcc {

namespace {

/// Which dims a cut may take: the samples (fragments of the batch through
/// runs of layers, or one op), the channels of one op's result, or both.
enum class Along { Samples, Channels, Any };

/// What is cut: ops that run on fragments of the batch, and ops split
/// along their result's channels.
struct Cuts {
  std::set<const Op*> samples, channels;
  size_t size() const { return samples.size() + channels.size(); }
  bool empty() const { return samples.empty() && channels.empty(); }
};

/// Fragments and splits (FiLayer's inter- and intra-layer parallelism
/// inside a device, k=K), each piece on its own stream once stream-assign
/// places the chains:
///  - Fragments of the batch: K fragments flow through a run of layers, so
///    that fragment i of a layer runs beside fragment i+1 of the layer
///    before; a run of one heavy op is that op split along its samples. A
///    run is a connected set of ops that can run on fragments (they read
///    rows of the batch and their rule splits them along the samples into
///    results of rows: convolutions, pooling, activations, matrix products
///    of samples, concat of branches, residual adds, dropout); a batch
///    norm's statistics, a loss or a mean over samples ends a run. Ops that
///    run once read the fragments concatenated, fragments read slices of
///    what those ops give (a dropout mask: its fragment's rows, drawn as
///    for the whole batch); each fragment reads the same params, whose
///    gradients autodiff then sums over the fragments.
///  - Splits along the channels: one heavy op (a convolution, a matrix
///    product, a pooling) as K ops on K slices of its result's channels,
///    each reading the whole input and its rows of the weights (the parts
///    its parallel rule gives a channel shard), concatenated after: the
///    intra-layer split for a batch too small to cut (batch 1), or where
///    samples do not pay.
///  1. policy=sim (the default): runs in graph order, each kept where the
///     simulator predicts a shorter forward with it cut (piece 0 on stream
///     0, piece f on branch stream 2 + (f-1) mod (streams-2)) by more than
///     one wake-up and 1%; a run that does not pay is tried op by op, along
///     the samples, then along the channels. The cost model prices a kernel
///     that fills a share s of the device at s of its throughput, so a cut
///     pays only where the pieces overlap work that would leave the device
///     idle.
///  2. policy=all: every run with compute-bound work is cut along the
///     samples, and, where samples are not allowed (along=channels) or the
///     batch has fewer than K samples, every heavy op along the channels
///     (to measure, and to test the schedule).
///  3. along=samples|channels|any (the default) limits the cuts; a batch of
///     fewer than K samples is an error with along=samples.
/// Runs before autodiff, on one device (no micro-batches, not
/// materialized); the values of fragment f are named x.frF, those of
/// channel piece f x.chF. A note says what was cut and the predicted
/// forward. Options: k, streams (>= 3, as stream-assign's), policy=sim|all,
/// along, spec, devices_per_node, profile, tf32.
class FragmentPass : public Pass {
  static constexpr double kMinGain = 0.01;

public:
  FragmentPass(int64_t k, int64_t streams, bool simPolicy, Along along, CostModel cm)
      : k_(k), streams_(streams), simPolicy_(simPolicy), along_(along), cm_(std::move(cm)) {}
  std::string_view name() const override { return "fragment"; }

  llvm::Error run(Graph& g, PassContext& ctx) override {
    if (k_ == 1)
      return llvm::Error::success();
    if (llvm::Error e = requireNotDifferentiated(g, "fragment"))
      return e;
    for (const auto& op : g.ops()) {
      if (op->annotations().microBatch)
        return op->emitError("fragment: the graph has micro-batches already (fragments and "
                             "micro-batches both cut the batch: use one of them)");
      if (op->annotations().device || op->info().isCommunication() || op->annotations().par)
        return op->emitError("fragment: the graph is parallelized already (fragments cut the "
                             "batch of a one-device step)");
    }
    // Fragments of the batch need a sample each.
    bool bySamples = along_ != Along::Channels;
    int64_t smallBatch = 0;
    for (const auto& in : g.inputs()) {
      if (in->type().rank() == 0 || in->type().shape[0] >= k_)
        continue;
      if (along_ == Along::Samples)
        return makeError(in->loc(), llvm::formatv("fragment: {0} fragments of a batch of {1}: "
                                                  "at most one fragment per sample",
                                                  k_, in->type().shape[0])
                                        .str());
      bySamples = false;
      smallBatch = in->type().shape[0];
    }
    std::map<const Op*, size_t> position;
    for (auto& op : g.ops())
      position.emplace(op.get(), position.size());
    std::vector<std::vector<const Op*>> runs;
    if (bySamples) {
      auto r = sampleRuns(g, position);
      if (!r)
        return r.takeError();
      runs = std::move(*r);
    }

    Cuts cut;
    int64_t kept = 0, splits = 0, channelSplits = 0, candidates = 0;
    std::vector<std::string> named; // what was cut, first..last op of a run
    auto before = forwardSeconds(g, cut, position);
    if (!before)
      return before.takeError();
    double best = *before;
    // Keeps `with` where the simulator predicts a gain (policy=sim).
    auto tryCut = [&](Cuts with) -> llvm::Expected<bool> {
      if (!simPolicy_) {
        cut = std::move(with);
        return true;
      }
      auto t = forwardSeconds(g, with, position);
      if (!t)
        return t.takeError();
      // A gain must exceed one wake-up and 1% of the forward: less is
      // below what a model no GPU has calibrated resolves, and a cut adds
      // ops, events and memory.
      if (!(*t < best * (1 - kMinGain) - cm_.wakeSeconds()))
        return false;
      best = *t;
      cut = std::move(with);
      return true;
    };
    // One heavy op cut alone, along its samples or its channels.
    auto tryAlone = [&](const Op* op, Along dim) -> llvm::Expected<bool> {
      bool channels = dim == Along::Channels;
      if (channels && (along_ == Along::Samples || !channelPlan(*op)))
        return false;
      Cuts with = cut;
      (channels ? with.channels : with.samples).insert(op);
      auto one = tryCut(std::move(with));
      if (one && *one) {
        ++(channels ? channelSplits : splits);
        named.push_back(op->loc().name + (channels ? " (channels)" : " (alone)"));
      }
      return one;
    };
    std::set<const Op*> tried;
    for (const auto& run : runs) {
      std::vector<const Op*> heavy;
      for (const Op* op : run)
        if (isHeavy(*op))
          heavy.push_back(op);
      if (heavy.empty())
        continue;
      ++candidates;
      tried.insert(heavy.begin(), heavy.end());
      Cuts with = cut;
      with.samples.insert(run.begin(), run.end());
      auto whole = tryCut(std::move(with));
      if (!whole)
        return whole.takeError();
      if (*whole) {
        ++kept;
        named.push_back(run.size() == 1 ? run.front()->loc().name
                                        : run.front()->loc().name + ".." + run.back()->loc().name);
        continue;
      }
      for (const Op* op : heavy) {
        // A run of one op was just tried along its samples.
        auto one = run.size() > 1 ? tryAlone(op, Along::Samples) : llvm::Expected<bool>(false);
        if (one && !*one)
          one = tryAlone(op, Along::Channels);
        if (!one)
          return one.takeError();
      }
    }
    // Heavy ops no run holds (no samples to cut, or a rule that splits
    // them along the channels only).
    for (auto& op : g.ops())
      if (!tried.count(op.get()) && isHeavy(*op))
        if (auto one = tryAlone(op.get(), Along::Channels); !one)
          return one.takeError();

    double after = best;
    if (!simPolicy_) {
      auto t = forwardSeconds(g, cut, position);
      if (!t)
        return t.takeError();
      after = *t;
    }
    if (!cut.empty()) {
      if (llvm::Error e = apply(g, cut))
        return e;
      for (auto& op : g.ops())
        op->annotations().microBatch.reset();
    }
    std::string what;
    for (size_t i = 0; i < named.size() && i < 6; ++i)
      what += (i ? ", " : ": ") + named[i];
    if (named.size() > 6)
      what += llvm::formatv(" and {0} more", named.size() - 6).str();
    std::string small =
        smallBatch
            ? llvm::formatv(" (a batch of {0}: too few samples for {1} fragments)", smallBatch, k_)
                  .str()
            : "";
    if (ctx.diag)
      ctx.diag(Severity::Note, Location{},
               llvm::formatv("fragment: {0} of {1} runs with compute-bound work cut into {2} "
                             "fragments{3}, {4} ops split alone along the samples, {5} along "
                             "the channels ({6} ops cut){7}; predicted forward on {8}: {9:f3} "
                             "ms, {10:f3} ms uncut",
                             kept, candidates, k_, small, splits, channelSplits, cut.size(), what,
                             cm_.spec().name, after * 1e3, *before * 1e3)
                   .str());
    return llvm::Error::success();
  }

private:
  /// The runs: connected components of the ops that can run on fragments,
  /// joined by the values one of them gives another, in graph order.
  static llvm::Expected<std::vector<std::vector<const Op*>>>
  sampleRuns(Graph& g, const std::map<const Op*, size_t>& position) {
    auto splittable = batchSplittableOps(g);
    if (!splittable)
      return splittable.takeError();
    std::map<const Op*, const Op*> parent;
    for (Op* op : *splittable)
      parent[op] = op;
    std::function<const Op*(const Op*)> root = [&](const Op* op) {
      const Op* r = parent.at(op);
      return r == op ? r : parent[op] = root(r);
    };
    for (Op* op : *splittable)
      for (Value* v : op->operands())
        if (const Op* d = v->definingOp(); d && parent.count(d))
          parent[root(op)] = root(d);
    std::map<const Op*, std::vector<const Op*>> byRoot;
    for (Op* op : *splittable)
      byRoot[root(op)].push_back(op);
    std::vector<std::vector<const Op*>> runs;
    for (auto& [r, ops] : byRoot)
      runs.push_back(ops);
    std::sort(runs.begin(), runs.end(), [&](const auto& a, const auto& b) {
      return position.at(a.front()) < position.at(b.front());
    });
    return runs;
  }

  /// An op of more than a few FLOPs per element it writes (convolutions,
  /// matrix products, pooling), as stream-assign's branches.
  bool isHeavy(const Op& op) const {
    double written = 0;
    for (unsigned r = 0; r < op.numResults(); ++r)
      written += static_cast<double>(op.result(r)->type().numElements());
    return !op.info().view && cm_.flops(op) > 4 * written;
  }

  /// The op's split along the channels (dim 1) of its one result into K
  /// pieces, each result a slice of the whole (no partial sums), or
  /// nullopt.
  std::optional<SplitPlan> channelPlan(const Op& op) const {
    if (op.numResults() != 1 || !op.info().parallel || op.info().parOnOperand ||
        op.result()->type().rank() < 2 || op.result()->type().shape[1] < k_)
      return std::nullopt;
    auto plan = op.info().parallel(op, 1);
    if (!plan || plan->partial != SplitPlan::Partial::None || plan->resultDims[0] != 1)
      return std::nullopt;
    return plan;
  }

  /// Splits `op` into K ops on slices of its result's channels (piece f
  /// annotated @mb(f) until the caller drops it), their results
  /// concatenated in its place.
  llvm::Error splitChannels(Graph& g, Op& op, UniqueNames& names) const {
    auto plan = channelPlan(op);
    if (!plan)
      return op.emitError("fragment: the op cannot be split along its channels");
    Builder b(g);
    b.setInsertionPointBefore(&op);
    b.setLoc(op.loc());
    const int64_t channels = op.result()->type().shape[1];
    std::vector<Value*> pieces;
    for (int64_t f = 0, offset = 0; f < k_; ++f) {
      const int64_t size = channels / k_ + (f < channels % k_ ? 1 : 0);
      const std::string suffix = ".ch" + std::to_string(f);
      b.setMicroBatch(f);
      std::vector<Value*> ins;
      for (unsigned j = 0; j < op.numOperands(); ++j) {
        Value* v = op.operand(j);
        if (plan->operandDims[j] < 0) {
          ins.push_back(v);
          continue;
        }
        auto s =
            b.createInferred(OpKind::Slice, {v},
                             {{"starts", Attribute(std::vector<int64_t>{offset})},
                              {"ends", Attribute(std::vector<int64_t>{offset + size})},
                              {"axes", Attribute(std::vector<int64_t>{plan->operandDims[j]})}});
        if (!s)
          return op.emitError("fragment: a channel slice: " + llvm::toString(s.takeError()));
        (*s)->result()->setName(names((v->name().empty() ? "ch" : v->name()) + suffix));
        ins.push_back((*s)->result());
      }
      TensorType t = op.result()->type();
      t.shape[1] = size;
      Op* piece = b.create(op.kind(), ins, {t}, op.attrs());
      piece->annotations() = op.annotations();
      piece->annotations().microBatch = f;
      if (op.info().localize)
        op.info().localize(*piece, op, 1, offset);
      auto inferred = op.info().shapeRule(*piece);
      if (!inferred)
        return op.emitError("fragment: a channel piece is invalid: " +
                            llvm::toString(inferred.takeError()));
      if (*inferred != std::vector<TensorType>{t})
        return op.emitError("fragment: channel piece " + std::to_string(f) +
                            " does not have the shape of its channels");
      piece->result()->setName(
          names((op.result()->name().empty() ? "ch" : op.result()->name()) + suffix));
      pieces.push_back(piece->result());
      offset += size;
    }
    b.setMicroBatch(std::nullopt);
    auto whole = b.createInferred(OpKind::Concat, pieces, {{"axis", Attribute(int64_t{1})}});
    if (!whole)
      return op.emitError("fragment: joining the channels: " + llvm::toString(whole.takeError()));
    std::string name = op.result()->name();
    op.result()->replaceAllUsesWith((*whole)->result());
    op.dropOperands();
    g.eraseOp(&op);
    if (!name.empty())
      (*whole)->result()->setName(name);
    return llvm::Error::success();
  }

  /// Applies `cut` to `g`: the channel splits, then the fragments of the
  /// batch. Each piece keeps its @mb(f) (the caller places or drops them).
  llvm::Error apply(Graph& g, const Cuts& cut) const {
    UniqueNames names(g);
    std::vector<Op*> split;
    for (auto& op : g.ops())
      if (cut.channels.count(op.get()))
        split.push_back(op.get());
    for (Op* op : split)
      if (llvm::Error e = splitChannels(g, *op, names))
        return e;
    // The channel pieces run once on the whole batch (no op of a fragment).
    if (cut.samples.empty())
      return llvm::Error::success();
    return splitBatch(g, k_, &cut.samples, "fr");
  }

  /// The predicted forward with `cut` applied, each piece on its stream (on
  /// a copy of the graph).
  llvm::Expected<double> forwardSeconds(const Graph& g, const Cuts& cut,
                                        const std::map<const Op*, size_t>& position) {
    if (cut.empty()) {
      auto sim = simulate(g, simCosts(cm_));
      if (!sim)
        return sim.takeError();
      return sim->stepSeconds;
    }
    auto copy = g.clone();
    std::vector<Op*> ops;
    for (auto& op : copy->ops())
      ops.push_back(op.get());
    Cuts mapped;
    for (const Op* op : cut.samples)
      mapped.samples.insert(ops.at(position.at(op)));
    for (const Op* op : cut.channels)
      mapped.channels.insert(ops.at(position.at(op)));
    if (llvm::Error e = apply(*copy, mapped))
      return e;
    const int64_t branches = std::max<int64_t>(1, streams_ - 2);
    for (auto& op : copy->ops()) {
      auto f = op->annotations().microBatch;
      op->annotations().microBatch.reset();
      if (!f || *f == 0)
        continue;
      op->annotations().device = 0;
      op->annotations().stream = 2 + (*f - 1) % branches;
    }
    auto sim = simulate(*copy, simCosts(cm_));
    if (!sim)
      return sim.takeError();
    return sim->stepSeconds;
  }

  int64_t k_, streams_;
  bool simPolicy_;
  Along along_;
  CostModel cm_;
};

} // namespace

llvm::Expected<std::unique_ptr<Pass>> createFragmentPass(std::string_view options) {
  auto parsed = PassOptions::parse("fragment", options, "k",
                                   {"k", "streams", "policy", "along", "spec", "devices_per_node",
                                    "devices_per_gpu", "profile", "tf32"});
  if (!parsed)
    return parsed.takeError();
  auto k = parsed->getIntIn("k", 2, 1, 64);
  if (!k)
    return k.takeError();
  auto streams = parsed->getInt("streams", 3);
  if (!streams)
    return streams.takeError();
  if (*streams < 3 || *streams > 8)
    return makeError(llvm::formatv("fragment: streams={0}: fragments run on branch streams, "
                                   "which need streams in 3..8",
                                   *streams)
                         .str());
  auto policy = parsed->getChoice("policy", "sim", {"sim", "all"});
  if (!policy)
    return policy.takeError();
  auto along = parsed->getChoice("along", "any", {"samples", "channels", "any"});
  if (!along)
    return along.takeError();
  auto cm = costModelFromOptions(*parsed);
  if (!cm)
    return cm.takeError();
  Along a = *along == "samples"    ? Along::Samples
            : *along == "channels" ? Along::Channels
                                   : Along::Any;
  return std::make_unique<FragmentPass>(*k, *streams, *policy == "sim", a, std::move(*cm));
}

} // namespace lwcc
