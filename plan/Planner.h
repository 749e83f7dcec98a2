//===- Planner.h - Which plan lwcc builds for a strategy --------*- C++ -*-===//
//
// The planner selects the plan of a training step for a strategy:
//  1. its candidates: for layerwise, the search's plan beside data, owt and
//     model parallelism (configs inside the search's space); for both
//     layerwise and pipeline, pipeline plans of S stages for each S > 1
//     dividing the devices (only the stages given), of S, 2S and 4S
//     micro-batches (only the micro-batches given);
//  2. each candidate's step built, simulated and memory-planned (with the
//     devices that run another device's ops left out, that device's figures
//     theirs: fold-replicas, where the cost model allows it exactly; once: a
//     plan that several strategies' selections or the plan report ask for
//     is evaluated once, and only the fastest fitting candidate's step is
//     held while the others are priced); one the batch does not allow is
//     left out, and so is a pipeline of 4S micro-batches where 2S's step is
//     slower than S's and one of the two fits (at S stages the step is taken
//     as convex in the micro-batches: each one's launches add to it, the
//     bubble shrinks as 1/M; more micro-batches are then slower still).
//     The pipelines of more micro-batches than stages are priced after
//     every other candidate, and one is left out where a sibling of fewer
//     micro-batches bounds its step above the fastest that fits: going from
//     M' to M micro-batches shrinks a pipeline's step by at most its bubble,
//     (M + S - 1) / M over (M' + S - 1) / M' (a micro-batch's ops are no
//     faster per sample when smaller). Candidates not priced yet are priced
//     PlannerOptions::threads at a time, each on its own copy of the model;
//     their results (and what their builds log) are taken in that order,
//     so the choice and the output do not depend on the threads;
//  3. the fastest that fits the devices' memory kept (a tie keeps the
//     search's plan; one that shards more than the fastest before it must
//     be faster by more than 1%). When none fits, with --recompute=auto each candidate
//     is priced again with recomputation (its cheap activations computed
//     again for the backward: passes/Recompute.cpp; where that fits, with
//     the fewest of its layers that fit, the largest first; a plan that
//     fits with FSDP, with the fewest of its params sharded that fit, the
//     largest first), then each pipeline
//     tries 8S, 16S, ... micro-batches (fewer activations in flight) until
//     one does, then each of those with the variants above (sharding,
//     recomputation) until one does; when still none fits, the first
//     candidate is kept and the compile reports the memory it needs.
// The search minimises an additive cost (each op's compute, its operands'
// re-layouts, its params' gradient all-reduce), which cannot see the
// bucketed all-reduce overlapping backward that the simulator (and the
// trainer) has, nor pipelines: hence the simulated selection.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "cost/CostModel.h"
#include "cost/DeviceSpec.h"
#include "cost/Simulator.h"
#include "ir/IR.h"
#include "passes/MemoryPlan.h"
#include "plan/Pipelines.h"

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace lwcc {

/// One candidate plan's training step as the planner priced it.
struct PlanEvaluation {
  PlanChoice plan;
  std::string error;                    ///< why its step could not be built ("" when it was)
  SimResult sim;                        ///< its simulated step (the timeline left out)
  std::map<int64_t, int64_t> peakBytes; ///< its memory plan: arena per device
  /// Whether peakBytes holds its memory plan. A pipeline candidate whose
  /// results fit a device unshared (unsharedBytes) fits without one.
  bool memoryPlanned = false;
  bool fits = false;          ///< every device's arena and params fit
  double strategySeconds = 0; ///< its strategy pass (the search)
};

/// The planner's selection for one strategy: the candidates with their
/// simulated steps, and the one kept.
struct PlanSelection {
  std::vector<std::pair<std::string, double>> candidates; ///< plan name -> step seconds
  std::string kept;
  /// Candidates not simulated: plan name -> why (a bound from a sibling, a
  /// compact price).
  std::vector<std::pair<std::string, std::string>> leftOut;
  double searchSeconds = 0; ///< the first candidate's strategy pass (the search)
  /// Candidates left out because their step is not one device's (batch
  /// norm over micro-batches), and why; the report names the fastest.
  std::vector<std::string> changesStep;
  std::string changesStepWhy;
};

struct PlannerOptions {
  int64_t devices = 1;
  int64_t stages = 0;                  ///< pipeline stages; 0: every S > 1 dividing devices
  std::optional<int64_t> microbatches; ///< micro-batches when given
  /// Plans whose micro-batches change the step (batch norm normalizing each
  /// micro-batch by its own statistics) are candidates of the layer-wise
  /// selection (--batch-norm-per-microbatch). Without it, and without
  /// `microbatches`, that selection keeps only plans that compute one
  /// device's step, and names those it left out (PlanSelection::changesStep).
  bool microbatchStatistics = false;
  bool selectLayerwise = true; ///< layerwise's plan is selected, not the search's alone
  /// When no candidate fits a device's memory: each again with
  /// recomputation (--recompute=auto) before pipelines of more micro-batches.
  bool recomputeWhenOver = false;
  /// The same with ZeRO-1 (--shard=auto): optimizer state sharded, alone
  /// and with recomputation where that is allowed too; where none of those
  /// fits, ZeRO-2 and FSDP.
  bool shardWhenOver = false;
  /// --shard=zero1|zero2|fsdp: what every candidate's step shards, whatever
  /// its PlanChoice says ("none": each candidate's own).
  std::string shard = "none";
  bool verbose = false; ///< each candidate and the kept plan on stderr
  /// Each strategy's memory is reported (--emit=plan's rows): the
  /// candidates that are rows (data, owt, model, layerwise) are memory-
  /// planned when priced, not priced by their unshared bytes and built
  /// again for the report.
  bool reportsStrategies = false;
  int64_t threads = 1; ///< candidates priced at the same time
  /// Candidates priced with the devices that run another's ops left out
  /// (Graph::foldedInto), where the cost model allows it exactly (no
  /// measured profile, no cores shared by a node's devices); the plan kept
  /// is built whole.
  bool foldReplicas = true;
  /// Pipeline candidates priced first compactly (plan/PipelinePreview.h),
  /// on a cost model that allows folding: the most promising simulated
  /// first, one whose compact price exceeds kCompactMargin times the
  /// fastest that fits left out.
  bool compactPipelines = true;
  /// Whether the compact price models these pipelines: one compute stream
  /// per device (no --streams), the 1f1b or gpipe order of whole tasks.
  bool compactModels = true;
  bool gpipe = false;                      ///< the pipelines' order (else 1f1b)
  int64_t bucketBytes = int64_t{25} << 20; ///< grad-sync's buckets
};

class Planner {
public:
  /// Builds a plan's training step on a graph in place, writing what its
  /// passes report to `log`; returns the seconds its strategy pass took.
  /// Without `verify` the step is not verified (a candidate only priced; the
  /// planner verifies the one it keeps). With `fold` devices that run
  /// another device's ops may be left out (fold-replicas: a step only
  /// priced). It is called from several threads at once (each on its own
  /// graph) when PlannerOptions::threads > 1.
  using BuildStep = std::function<llvm::Expected<double>(
      Graph& g, const PlanChoice& plan, llvm::raw_ostream& log, bool verify, bool fold)>;
  /// The caller's passes after a kept step is built (its memory plan), run
  /// on the step of plan `plan`: the statistics they give.
  using FinishStep =
      std::function<llvm::Expected<MemoryPlanStats>(Graph& step, const PlanChoice& plan)>;

  /// `build` builds the candidates, `model` prices their steps, and each
  /// must fit a device of `memory`.
  Planner(PlannerOptions options, BuildStep build, CostModel model, DeviceSpec memory);

  /// Whether the planner selects strategy `strat`'s plan: layerwise on
  /// several devices (unless told not to), pipeline unless its stages and
  /// micro-batches are both given.
  bool selects(const std::string& strat) const;
  /// The plan of `strat` for the graph `g`: the selection (made once) where
  /// the planner selects, else `fixed`.
  llvm::Expected<PlanChoice> plan(const Graph& g, const std::string& strat,
                                  const PlanChoice& fixed);
  /// The selection made for `strat`, or null.
  const PlanSelection* selection(const std::string& strat) const;
  /// Where this planner chose micro-batches for `strat`'s plan of a model
  /// with batch norm (each micro-batch then normalized by its own
  /// statistics) and the user gave none: the warning that says so, else "".
  std::string batchNormWarning(const Graph& g, const std::string& strat,
                               const PlanChoice& plan) const;
  const std::map<std::string, PlanSelection>& selections() const { return selections_; }
  /// The kept candidate's training step, built whole while selecting (once;
  /// null after, or when its evaluation was made for an earlier selection).
  std::unique_ptr<Graph> takeKeptStep(const std::string& strat);
  /// With a FinishStep: a pipeline whose compact price is the lowest and
  /// below the fastest step priced so far (the likeliest kept) is, once
  /// priced, verified and finished on its thread, while the other
  /// candidates are priced. Where it is kept, its step comes finished:
  /// what `finish` gave for it (keptStepFinished), and the caller need not
  /// run those passes again.
  void setFinish(FinishStep finish) { finish_ = std::move(finish); }
  /// What FinishStep gave for strategy `strat`'s kept step, where it was
  /// finished ahead.
  std::optional<MemoryPlanStats> keptStepFinished(const std::string& strat) const {
    auto it = keptFinished_.find(strat);
    return it == keptFinished_.end() ? std::nullopt : std::optional<MemoryPlanStats>(it->second);
  }
  /// Plans the memory of the step `strat` kept (for --emit=plan's row),
  /// where it is still held and was not planned when priced; the step the
  /// caller takes (takeKeptStep) is planned by the caller's own passes.
  llvm::Error planKeptMemory(const std::string& strat);
  /// Leaves the kept steps still held unfreed (the process is ending).
  void buryKeptSteps();
  /// The evaluation of `plan` made so far (perhaps without its memory
  /// plan), or null.
  const PlanEvaluation* evaluated(const PlanChoice& plan) const {
    auto it = evaluations_.find(keyOf(plan));
    return it == evaluations_.end() ? nullptr : &it->second;
  }
  /// Whether two plans are one (priced once).
  static bool samePlan(const PlanChoice& a, const PlanChoice& b) { return keyOf(a) == keyOf(b); }
  /// The step of `plan` on the graph `g` built, simulated and memory-planned,
  /// once per plan (one planner plans one model); its peakBytes are set.
  llvm::Expected<const PlanEvaluation*> evaluate(const Graph& g, const PlanChoice& plan) {
    return evaluate(g, plan, nullptr, true);
  }

  /// `plan` is to be evaluated (a report's row): priced, with its memory
  /// plan, in a thread a selection leaves free (PlannerOptions::threads),
  /// on a copy of the selection's graph, which must be the graph later
  /// evaluated; evaluate() takes it there. Its results and its log are the
  /// same as evaluate()'s.
  void priceSoon(const PlanChoice& plan) { soon_.push_back(plan); }

  /// The step of `plan` built on a copy of `g` (not memory-planned).
  llvm::Expected<std::unique_ptr<Graph>> buildStep(const Graph& g, const PlanChoice& plan);

  /// The step of `plan` simulated on `model` as the planner prices it (a
  /// plan that frees early on its scheduled IR where `model` has no measured
  /// profile): a report's other prices.
  llvm::Expected<SimResult> simulateOn(const Graph& g, const PlanChoice& plan,
                                       const CostModel& model);

private:
  friend class PlanSelector; ///< select()'s work (PlanSelector.h)
  /// Where a priced step was finished ahead (setFinish): its verifyGraph
  /// error or "", and what FinishStep gave.
  struct FinishedAhead {
    std::optional<std::string> verified;
    std::optional<MemoryPlanStats> finished;
  };
  /// A candidate priced: its evaluation, its built step (when asked for),
  /// what its build logged, and an error that is not the plan's (the
  /// simulator's, the memory plan's).
  struct Priced {
    PlanEvaluation ev;
    std::unique_ptr<Graph> step;
    std::string log, failure;
    /// Its step's Graph::foldedInto: record() gives the left-out devices
    /// their figures.
    std::map<int64_t, int64_t> foldedInto;
    FinishedAhead ahead;
  };
  /// Verifies and finishes a priced step ahead (setFinish); a step that
  /// FinishStep fails on is dropped (built again if kept).
  void finishAhead(Priced& priced, const PlanChoice& plan) const;
  /// Prices `plan` on a copy of `g`; touches nothing of the planner's.
  Priced price(const Graph& g, const PlanChoice& plan, bool keepStep, bool withMemory) const;
  /// Whether candidates are priced folded (PlannerOptions::foldReplicas, on
  /// a cost model that allows it).
  bool folds() const;
  /// Whether a candidate's step frees gathered params or reduce-scattered
  /// gradients early (zero2, fsdp: its own or the forced --shard).
  bool freesEarly(const PlanChoice& plan) const;
  /// Whether `plan` is priced on `model` on its scheduled IR. ZeRO-2's
  /// reduce-scattered gradients and FSDP's gathered params are freed early,
  /// and what reuses their bytes waits for their last reader on another
  /// stream (a prefetched gather for the previous layer's compute): such a
  /// plan is priced with its events. Not on a measured profile: the measured
  /// waits of a communication op's participants, which the simulator
  /// replays, already hold them (lenet --gpus 2 zero2 on the CPU: 6.44 ms
  /// without the events, 9.30 with them, 6.41 measured).
  bool pricesScheduled(const PlanChoice& plan, const CostModel& model) const;
  /// Takes a priced candidate into the evaluations (its log to stderr).
  llvm::Expected<const PlanEvaluation*> record(Priced& priced, std::unique_ptr<Graph>* step);
  llvm::Error select(const Graph& g, const std::string& strat);
  /// The public evaluate's work; when the plan is evaluated now and `step` is
  /// given, its built step (not memory-planned) is handed back there.
  /// Without `withMemory` a pipeline's memory is planned only where its fit
  /// needs it.
  llvm::Expected<const PlanEvaluation*> evaluate(const Graph& g, const PlanChoice& plan,
                                                 std::unique_ptr<Graph>* step, bool withMemory);
  std::vector<PlanChoice> pipelineCandidates(const Graph& g) const;
  /// A pipeline candidate's compact price (plan/PipelinePreview.h), where
  /// the planner prices compactly and the candidate's one-micro-batch piece
  /// builds; nullopt otherwise.
  std::optional<double> compactPrice(const Graph& g, const PlanChoice& plan) const;
  /// Whether a candidate may have a compact price: a plain pipeline
  /// (neither sharded nor recomputed) on a cost model that allows folding.
  bool compactAllowed(const PlanChoice& plan) const;
  /// Its compact price where one was computed.
  std::optional<double> knownCompactPrice(const PlanChoice& plan) const;
  /// compactPrice's work, uncached.
  std::optional<double> compactPriceOf(const Graph& g, const PlanChoice& plan) const;
  /// A compact price above this times the fastest that fits leaves a
  /// pipeline out: the compact prices of the zoo's pipelines at test and full
  /// size are within +-10% of their simulated steps (tools/bench/
  /// compact_accuracy.py).
  static constexpr double kCompactMargin = 1.25;
  /// Starts pricing the first plan of priceSoon's not priced yet, not in
  /// flight and not among the selection's `candidates`; false when none.
  bool priceSpare(const Graph& g, const std::vector<PlanChoice>& candidates);
  /// The spare plans being priced now.
  size_t spareInFlight() const;

  PlannerOptions options_;
  BuildStep build_;
  CostModel model_;
  DeviceSpec memory_;
  std::map<std::string, PlanSelection> selections_;
  std::map<std::string, PlanChoice> kept_;
  std::map<std::string, std::unique_ptr<Graph>> keptSteps_;
  FinishStep finish_;
  std::map<std::string, MemoryPlanStats> keptFinished_; ///< per strategy, see keptStepFinished
  using Key = std::tuple<std::string, int64_t, int64_t, bool, int64_t, std::string, int64_t>;
  static Key keyOf(const PlanChoice& p) {
    return {p.strategy,     p.stages, p.microbatches, p.recompute,
            p.recomputeTop, p.shard,  p.shardMinBytes};
  }
  /// The compact prices computed (from several threads), per plan.
  mutable std::mutex compactMutex_;
  mutable std::map<Key, std::optional<double>> compactPrices_;
  std::map<Key, PlanEvaluation> evaluations_;
  std::vector<PlanChoice> soon_;
  std::map<Key, std::future<Priced>> spare_; ///< last: waited for first
  /// Frees the steps the selection drops on a thread of its own: a large
  /// step's ops take milliseconds to free, which the selection's last
  /// candidates would otherwise wait for.
  class Freer {
  public:
    Freer();
    ~Freer(); ///< after what it was given is freed
    void free(std::unique_ptr<Graph> step);

  private:
    std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<std::unique_ptr<Graph>> steps_;
    bool stop_ = false;
    std::thread thread_;
  };
  std::unique_ptr<Freer> freer_ = std::make_unique<Freer>(); ///< last: frees before the rest
};

} // namespace lwcc
