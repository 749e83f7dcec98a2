//===- PlanSelector.h - One strategy's choice among its plans --*- C++ -*-===//
//
// Planner::select's work, inside plan/: the candidates of one strategy
// priced and the fastest that fits kept, in the steps Planner.h describes
// (1: the candidates; 2: each priced, several at a time on threads, in an
// order that lets the rules below leave most of a large search's pipelines
// out unpriced; 3: the variants for memory, sharded or recomputed, and the
// bisections of how much to shard or recompute; then more micro-batches
// for pipelines when none fits; 4: the one kept). Each of select()'s rules
// is a member function here, and what they share a member, under the names
// it had; PlanSelector.cpp has the rules, PlanSelectorSteps.cpp the steps.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Params.h"
#include "plan/Planner.h"

#include <atomic>
#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <vector>

namespace lwcc {

/// How much a plan shards: none, zero1, zero2, fsdp.
inline int shardRank(const std::string& shard) {
  return shard == "zero1" ? 1 : shard == "zero2" ? 2 : shard == "fsdp" ? 3 : 0;
}

/// Whether candidate `a` is kept over `b`, the fastest fitting one so far:
/// it is faster, and where it shards more than `b`, faster by more than 1%.
/// A sharded plan's simulated gain over one that fits unsharded is its
/// smaller update (a share of the optimizer's work) with gathers it takes to
/// be hidden behind compute: under 1% that is within the simulator's error,
/// and its extra communication a risk on real links.
inline bool faster(const PlanEvaluation& a, const PlanEvaluation& b) {
  const double margin = shardRank(a.plan.shard) > shardRank(b.plan.shard) ? 0.99 : 1.0;
  return a.sim.stepSeconds < b.sim.stepSeconds * margin;
}

/// The batch: dim 0 of the model's first input.
inline int64_t batchOf(const Graph& g) {
  for (const auto& in : g.inputs())
    if (in->type().rank() > 0)
      return in->type().shape[0];
  return 1;
}

/// The least size of the largest trained params that hold 90% of their
/// bytes, where smaller ones remain: FSDP's partial candidate shards those
/// and replicates the rest (biases and norms, whose gathers would cost more
/// latency than their bytes save); 0 where that would shard every param.
inline int64_t largeParamBytes(const Graph& g) {
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (const Value* p : trainableParams(g)) {
    sizes.push_back(p->type().sizeInBytes());
    total += sizes.back();
  }
  std::sort(sizes.rbegin(), sizes.rend());
  int64_t sum = 0;
  for (int64_t s : sizes) {
    sum += s;
    if (10 * sum >= 9 * total)
      return s > sizes.back() ? s : 0;
  }
  return 0;
}

/// Whether the model normalizes by batch statistics: micro-batches then
/// change what it computes (each micro-batch by its own).
inline bool normalizesByBatch(const Graph& g) {
  return std::any_of(g.ops().begin(), g.ops().end(), [](const auto& op) {
    return op->kind() == OpKind::BatchNorm || op->kind() == OpKind::BatchNormTrain;
  });
}

inline PlanChoice pipelinePlan(int64_t stages, int64_t microbatches) {
  PlanChoice p;
  p.strategy = "pipeline";
  p.stages = stages;
  p.microbatches = microbatches;
  return p;
}

/// A pipeline's step over a micro-batch's time at its busiest stage, for S
/// stages of M micro-batches under 1F1B or GPipe: (M + S - 1) / M.
inline double bubbleFactor(int64_t stages, int64_t microbatches) {
  return static_cast<double>(microbatches + stages - 1) / static_cast<double>(microbatches);
}

/// Whether the task of future `f` has ended (a deferred one has not).
template <class Future> bool isReady(const Future& f) {
  return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

class PlanSelector {
public:
  PlanSelector(Planner& planner, const Graph& g, const std::string& strat);
  /// Every step; the selection and the kept plan recorded in the planner.
  llvm::Error run();

private:
  using Priced = Planner::Priced;
  using FinishedAhead = Planner::FinishedAhead;
  using Key = Planner::Key;
  static constexpr double kCompactMargin = Planner::kCompactMargin;
  static Key keyOf(const PlanChoice& p) { return Planner::keyOf(p); }
  struct Variant { // what is added
    std::string shard;
    bool recompute;
    int64_t shardMinBytes = 0;
  };

  // The steps (PlanSelectorSteps.cpp).
  /// Step 1: the candidates (for the layer-wise strategy the search's plan,
  /// then data, OWT and model parallelism), then the pipelines.
  void gatherCandidates();
  /// Step 2's order, and the compact prices started ahead of it.
  void startCompactPrices();
  /// Step 2: each candidate in that order priced or left out.
  llvm::Error priceInOrder();
  /// The candidates built, back in their order.
  void restoreOrder();
  // Step 3: each candidate over memory that would be faster than the
  // fastest that fits (every one, when none fits) is priced again with its
  // optimizer state sharded (ZeRO-1, --shard=auto) and with recomputation
  // (--recompute=auto), and with both; then, for those still faster than
  // the fastest that fits, with its gradients sharded too (ZeRO-2) and with
  // its params sharded (FSDP: first only the largest params, those holding
  // 90% of the bytes, then every one), alone and with recomputation. The
  // fastest that fits is kept. Then, when none
  // fits, each pipeline tries twice as many micro-batches (fewer
  // activations per stage under 1F1B) until one fits.
  llvm::Error memoryVariants();
  // Step 3b: a candidate that fits only by recomputing every layer's cheap
  // values may fit recomputing fewer layers, which is faster (fewer copies
  // in the backward): the K layers whose values hold the most bytes
  // (recompute's top=K), the least K that fits found by bisection (its fit
  // taken as monotone in K). Not where the same plan without recomputation,
  // a bound on every K's step, is no faster than the fastest that fits.
  llvm::Error fewerRecomputed();
  // Step 3c: a candidate that fits with its params sharded (FSDP) may fit
  // sharding fewer, which is faster (fewer gathers): only those of at least
  // T bytes, the largest T among the trainable params' sizes that fits
  // found by bisection (its fit taken as monotone in T). Not where the same
  // plan unsharded (a bound on every T's step) is no faster than the
  // fastest that fits.
  llvm::Error fewerSharded();
  /// When none fits: each pipeline with twice as many micro-batches, plain
  /// and then with step 3's variants, until one fits.
  llvm::Error pipelinesUntilFit();
  /// Step 4: the fastest that fits kept (the first, when none fits), its
  /// step verified and handed to the planner.
  llvm::Error keep();

  // The rules (PlanSelector.cpp).
  std::optional<double> compactOf(size_t k);
  // `verified`: its verifyGraph error or "" where it was verified ahead.
  void verifyFastest(const std::optional<std::string>& verified);
  // Step 2 for one evaluated candidate; `step` is its built step when it was
  // priced just now, `ahead` what it was finished ahead with, if it was.
  void consider(const PlanEvaluation& ev, std::unique_ptr<Graph> step, FinishedAhead ahead = {});
  // Step 2 for a candidate not yet priced here.
  llvm::Error evaluateAndConsider(const PlanChoice& plan);
  // A pipeline of M micro-batches whose S-stage siblings of M/2 and M/4 are
  // candidates before it (4S after S and 2S) is priced only where it may be
  // kept. At S stages the step is taken as convex in M (the launches of
  // each micro-batch's ops grow with M, the bubble shrinks as 1/M): where
  // M/2's step is slower than M/4's, M's is slower still, and with one of
  // the two fitting M cannot be the fastest that fits. Returns the reason
  // to leave it out, or "".
  std::optional<std::pair<PlanChoice, PlanChoice>> halves(size_t k);
  std::string slowerThanFewer(size_t k);
  // The pipelines of S stages and fewer micro-batches than `k`'s, where `k`
  // is one of more than S (2S, 4S): their places in `plans`.
  std::vector<size_t> fewer(size_t k);
  // A pipeline of S stages and M micro-batches (1F1B or GPipe) takes about
  // (M + S - 1) times a micro-batch's time at its busiest stage (ZB-H1's
  // smaller bubble, (M + (S - 1) / 3), shrinks less with M), and a
  // micro-batch of 1/M of the batch takes no less than 1/M of the batch's
  // time (each op's roofline time and launch: per sample, a smaller
  // micro-batch is no faster); what does not shrink with M (the gradient
  // all-reduce after the last backward, the update) does not shrink. So
  // going from M' to M micro-batches shrinks the step by at most the bubble
  // factor g(M) / g(M') where g(M) = (M + S - 1) / M: where that bound from
  // a sibling of fewer micro-batches is slower than the fastest that fits,
  // the candidate cannot be kept (nor be made to fit by step 3, which
  // tries only those faster than the fastest that fits). Not on a
  // measured profile (--cost-profile), whose times need not scale so.
  // Returns the reason to leave it out, or "".
  std::string bubbleBound(size_t k);
  // A pipeline whose compact price is more than kCompactMargin times the
  // fastest that fits: its whole step is not simulated.
  // Likewise one of more micro-batches than stages whose sibling of fewer
  // has a compact price that, with the bubble bound above, is.
  // The step a compact price must pass to leave `k` out, where one may.
  std::optional<double> compactLimit(size_t k);
  // With `wait`, a sibling's compact price being computed is waited for:
  // what a decision knows does not depend on the threads.
  std::string siblingCompactBound(size_t k, bool wait);
  std::string compactBound(size_t k);
  std::string leftOut(size_t k);
  // A pipeline with a compact price is priced ahead only where no pipeline
  // before it (a lower compact price) could leave it out once simulated:
  // its compact price is within kCompactMargin of theirs (the compact
  // price being mostly below the simulated step).
  bool aheadOfCompact(size_t k, size_t at);
  bool pricedAhead(size_t k, size_t at);
  void orderPipelines(size_t at);
  // Candidate `k` priced on a thread of its own, and with `finish` its step
  // finished ahead (finishAhead) there too.
  void startPricing(size_t k, bool finish);
  // The compact prices of the pipelines of more micro-batches than stages
  // that no rule but their own compact price can leave out now, computed
  // side by side on threads of their own once every other candidate is
  // considered (when the planner's threads are free), not one after
  // another as each one's turn comes; one a sibling's compact price, not
  // known yet, would leave out is computed for nothing, on a thread that
  // would wait.
  void startCompact(size_t from);
  static PlanChoice withVariant(PlanChoice plan, const Variant& v);
  // A bisection's probe (steps 3b and 3c): whether `plan` fits, considered
  // here unless this selection has already.
  llvm::Expected<bool> probe(const PlanChoice& plan);

  // The planner's, under the names select() used.
  llvm::Expected<const PlanEvaluation*> evaluate(const Graph& graph, const PlanChoice& plan,
                                                 std::unique_ptr<Graph>* step, bool withMemory) {
    return planner_.evaluate(graph, plan, step, withMemory);
  }
  llvm::Expected<const PlanEvaluation*> record(Priced& priced, std::unique_ptr<Graph>* step) {
    return planner_.record(priced, step);
  }
  Priced price(const Graph& graph, const PlanChoice& plan, bool keepStep, bool withMemory) const {
    return planner_.price(graph, plan, keepStep, withMemory);
  }
  void finishAhead(Priced& priced, const PlanChoice& plan) const {
    planner_.finishAhead(priced, plan);
  }
  std::optional<double> compactPrice(const Graph& graph, const PlanChoice& plan) const {
    return planner_.compactPrice(graph, plan);
  }
  std::optional<double> knownCompactPrice(const PlanChoice& plan) const {
    return planner_.knownCompactPrice(plan);
  }
  bool compactAllowed(const PlanChoice& plan) const { return planner_.compactAllowed(plan); }
  bool priceSpare(const Graph& graph, const std::vector<PlanChoice>& candidates) {
    return planner_.priceSpare(graph, candidates);
  }
  size_t spareInFlight() const { return planner_.spareInFlight(); }
  std::vector<PlanChoice> pipelineCandidates(const Graph& graph) const {
    return planner_.pipelineCandidates(graph);
  }

  Planner& planner_;
  const Graph& g;
  const std::string& strat;
  const PlannerOptions& options_;
  const CostModel& model_;
  std::map<Key, PlanEvaluation>& evaluations_;
  std::unique_ptr<Planner::Freer>& freer_;

  /// The selection so far, and the candidates of step 1 in their order.
  PlanSelection sel;
  std::vector<PlanChoice> plans;
  /// Whether the selection keeps one device's step (the default strategy
  /// of a model with batch norm): no micro-batched candidate.
  bool keepsStep = false;
  // The pipelines' compact prices (plan/PipelinePreview.h): those that
  // step 2 orders started below, the others' computed where a rule needs
  // them.
  std::vector<std::shared_future<std::optional<double>>> compactSoon;
  // Those of more micro-batches than stages computed early (below): whether
  // each was.
  std::vector<std::shared_future<bool>> compactEarly;
  std::vector<const PlanEvaluation*> built; // the candidates built, in order
  std::string firstError;
  // The fastest that fits so far (the earliest of equal ones: a tie keeps
  // the search's plan, the first), and the steps that may be kept: the
  // fastest's, and the first's (kept when none fits). The other candidates'
  // steps are dropped once priced.
  std::optional<size_t> fastest;
  std::unique_ptr<Graph> fastestStep, firstStep;
  // The fastest's step verified on a thread of its own while the selection
  // goes on (the one kept is verified, and is most often the fastest found
  // before the last candidates are left out): its error, or "". Declared
  // after the step, so that it waits before the step is freed.
  std::future<std::string> fastestVerified;
  // What the fastest's step was finished ahead with (Planner::finishAhead).
  std::optional<MemoryPlanStats> fastestFinished;
  // Each built candidate's place in `plans` (after them: step 3's), the one
  // considered now, and the earliest built.
  std::vector<size_t> builtAt;
  size_t considering = 0;
  std::optional<size_t> firstAt;
  // Whether `k` is priced before it is the one considered: a pipeline of
  // more micro-batches than stages only once every other candidate is
  // considered and its siblings of fewer are priced, and where they do not
  // leave it out (decided again when it is considered, so that the choice
  // does not depend on the threads).
  size_t others = 0;    // the candidates considered before those pipelines
  bool ordered = false; // the pipelines before `others` ordered by their compact prices
  std::vector<size_t> order;
  // The candidates not priced yet, `threads` at a time from the one
  // considered on (an std::async future waits for its task when dropped).
  std::atomic<size_t> finishing{0}; // steps being finished ahead
  std::vector<std::future<Priced>> pricing;
  /// Step 3's variants, in two rounds.
  std::vector<std::vector<Variant>> rounds;
};

} // namespace lwcc
