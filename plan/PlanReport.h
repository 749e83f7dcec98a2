//===- PlanReport.h - lwcc --emit=plan's tables -----------------*- C++ -*-===//
#pragma once

#include "cost/CostModel.h"
#include "cost/Simulator.h"
#include "ir/IR.h"
#include "passes/MemoryPlan.h"
#include "plan/Planner.h"

#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace lwcc {

/// A device's kernel launches in one step, from the IR: library calls,
/// runtime and generated kernels and collectives, each counted once (views,
/// copies onto their operand's bytes, constants, events and updates written
/// in place over their params launch nothing), and the bytes their operands and results hold (what
/// they read and write at least; collectives' bytes are the links', not counted). A run of
/// optimizer updates with one lr, only in-place assigns between them on their device and stream,
/// counts one launch per 24 params, and so does a run of casts of float32 to one 16-bit type (the
/// CUDA runtime's multi-tensor launches; a CPU trainer makes one call a run). An activation a
/// library call takes as its epilogue (ir/FusedOps.h's epilogueOf) launches nothing of its own.
/// A trainer's --profile counts the same calls as it makes them.
struct KernelCount {
  int64_t kernels = 0, fused = 0, bytes = 0;
};
struct KernelCountOptions {
  bool fused = true; ///< multi-tensor calls, batch norms with their relus (all but --no-fuse)
  bool cuda = true;  ///< a CUDA trainer's launches, else a CPU trainer's calls
};
std::map<int64_t, KernelCount> kernelCounts(const Graph& g, KernelCountOptions o = {});
/// The memory plan as a table: one row per op result, then the arenas and
/// each device's kernel count (`counts`: the trainer's, kernelCounts).
void printPlan(const Graph& g, const MemoryPlanStats& stats, llvm::raw_ostream& os,
               KernelCountOptions counts = {});
/// The bytes a multi-device training step moves between devices.
int64_t stepCommBytes(const Graph& g);
/// What runs on each stream of each device (ops, their predicted time, the
/// layers of a branch stream) and the predicted step beside the same step
/// on one stream per device (communication keeping its streams). Prints
/// nothing when every compute op is on stream 0.
llvm::Error printStreamPlan(const Graph& g, const CostModel& model, llvm::raw_ostream& os);
/// What one strategy's step costs, predicted by the simulator.
struct StrategyPlan {
  std::string name;
  SimResult sim;
  std::map<int64_t, int64_t> peakBytes; ///< memory plan: arena per device
  /// The plan is the one `chosen`'s selection kept, whose step the caller
  /// takes and memory-plans: its peakBytes are left to the caller.
  bool chosenPlan = false;
  /// Why the strategy has no plan here (say, its micro-batches too small to
  /// split over its devices); empty when it has one.
  std::string error;
};

/// Each named strategy's plan for `g` (the planner's selection where it
/// selects one, else `fixedPlan`'s), priced by the planner's evaluation, which
/// each plan gets once however many strategies and selections ask for it. A
/// strategy whose step cannot be built gets its error instead of a plan; the
/// planner's own failure to select one for `chosen` is returned. With
/// `reprice` (a cost model other than the planner's: a profile of one plan
/// on several devices), each step is built again and simulated on it.
llvm::Expected<std::vector<StrategyPlan>>
planStrategies(Planner& planner, const Graph& g, const std::vector<std::string>& names,
               const std::string& chosen,
               const std::function<PlanChoice(const std::string&)>& fixedPlan,
               const CostModel* reprice = nullptr);

/// Simulates the training step `g` on `model` and writes the timeline to
/// `file` as Chrome trace-event JSON.
llvm::Error writeSimulatedTrace(const Graph& g, const CostModel& model, const std::string& file);

/// One row of the per-layer table (ops grouped by location name).
struct LayerPlan {
  std::string name, config = "-", devices = "-";
  int64_t ops = 0, commBytes = 0;
  double computeSeconds = 0; ///< summed over the layer's compute ops
};

/// The layers of a training step priced on `model`.
std::vector<LayerPlan> layerPlans(const Graph& g, const CostModel& model);

/// One device of a micro-batched step (a pipeline stage, or with one stage
/// a device running its micro-batches in turn), as the simulator sees it.
struct StagePlan {
  int64_t device = 0, stage = 0, ops = 0;
  std::string first, last; ///< the first and last layer (location) it runs
  double computeSeconds = 0;
  double bubble = 0;                   ///< the fraction of the step its compute is idle
  int64_t peakBytes = 0, bytesOut = 0; ///< arena; sent to other stages per step
};
struct PipelinePlan {
  int64_t stages = 1, microbatches = 0; ///< no micro-batches: 0
  std::string schedule;
  std::vector<StagePlan> devices;
};

/// The stages of the micro-batched step `g`, priced by its simulation `s`.
PipelinePlan pipelinePlan(const Graph& g, const StrategyPlan& s, const std::string& schedule);

/// Per layer: the parallel config, the devices, compute time and bytes
/// communicated per step; then the predicted step time, compute,
/// communication and peak memory per device of every strategy side by
/// side, `strategy` marked as chosen; for each strategy the planner
/// selected (`selections`: layerwise, pipeline), its candidates and the plan it
/// kept; for a micro-batched step, its stages, schedule and bubble.
void printParallelPlan(const Graph& g, const CostModel& model, const std::string& strategy,
                       int64_t gpus, const std::vector<StrategyPlan>& strategies,
                       const std::map<std::string, PlanSelection>& selections,
                       const std::string& schedule, llvm::raw_ostream& os);

/// --plan-json: {"chosen", "search_s", "device_spec", "strategies": {name: {"step_s",
/// "comm_bytes", "peak_bytes", "compute_s": [per device], "comm_s": [...]}},
/// "layers": [{"name", "config", "devices", "compute_s", "comm_bytes"}]}; with
/// `selection`, also "search_check": {"kept", "candidates": {name: step_s}}; for a
/// micro-batched chosen step, "pipeline": {"stages", "microbatches",
/// "schedule", "devices": [{"device", "stage", "ops", "first", "last",
/// "compute_s", "bubble", "peak_bytes", "bytes_out"}]}.
void writePlanJson(const std::string& chosen, double searchSeconds, const std::string& spec,
                   const std::vector<StrategyPlan>& strategies, const PlanSelection* selection,
                   const std::vector<LayerPlan>& layers, const PipelinePlan* pipeline,
                   const MemoryPlanStats* memory, const std::vector<std::string>& recomputed,
                   const struct ShardedParams& sharded, llvm::raw_ostream& os);
/// The layers (loc names) whose forward ops the step computes again for the
/// backward (--recompute), in graph order.
std::vector<std::string> recomputedLayers(const Graph& g);

/// The params (initializer names) a step shards over their replicas.
struct ShardedParams {
  /// Kept as shares of their rows, gathered where they are read (fsdp):
  /// params, gradients and optimizer state sharded.
  std::vector<std::string> params;
  /// Updated by shares of their rows (zero1, zero2): optimizer state sharded.
  std::vector<std::string> state;
};
/// What `g` (a training step with its optimizer) shards, in param order.
ShardedParams shardedParams(const Graph& g);

} // namespace lwcc
