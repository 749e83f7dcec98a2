//===- Planner.h - Which plan lwcc builds for a strategy --------*- C++ -*-===//
//
// The planner selects the plan of a training step for a strategy:
//  1. its candidates: for layerwise, the search's plan beside data, owt and
//     model parallelism (configs inside the search's space); for both
//     layerwise and pipeline, pipeline plans of S stages for each S > 1
//     dividing the devices (only the stages given), of S, 2S and 4S
//     micro-batches (only the micro-batches given);
//  2. each candidate's step built, simulated and memory-planned; one the
//     batch or the memory does not allow is left out;
//  3. the fastest that fits the devices' memory kept (a tie keeps the
//     search's plan). When none fits, each pipeline tries 8S, 16S, ...
//     micro-batches (fewer activations in flight) until one does; when still
//     none fits, the first candidate is kept and the compile reports the
//     memory it needs.
// The search minimises an additive cost (each op's compute, its operands'
// re-layouts, its params' gradient all-reduce), which cannot see the
// bucketed all-reduce overlapping backward that the simulator (and the
// trainer) has, nor pipelines: hence the simulated selection.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"
#include "passes/Pipelines.h"
#include "plan/CostModel.h"
#include "plan/DeviceSpec.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lwcc {

/// The planner's selection for one strategy: the candidates with their
/// simulated steps, and the one kept.
struct PlanSelection {
  std::vector<std::pair<std::string, double>> candidates; ///< plan name -> step seconds
  std::string kept;
  double searchSeconds = 0; ///< the first candidate's strategy pass (the search)
};

struct PlannerOptions {
  int64_t devices = 1;
  int64_t stages = 0;                  ///< pipeline stages; 0: every S > 1 dividing devices
  std::optional<int64_t> microbatches; ///< micro-batches when given
  bool selectLayerwise = true;         ///< layerwise's plan is selected, not the search's alone
  bool verbose = false;                ///< each candidate and the kept plan on stderr
};

class Planner {
public:
  /// Builds a plan's training step on a graph in place; returns the seconds
  /// its strategy pass took.
  using BuildStep = std::function<llvm::Expected<double>(Graph& g, const PlanChoice& plan)>;

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
  const std::map<std::string, PlanSelection>& selections() const { return selections_; }
  /// The kept candidate's training step, built whole while selecting (once;
  /// null after).
  std::unique_ptr<Graph> takeKeptStep(const std::string& strat);

private:
  llvm::Error select(const Graph& g, const std::string& strat);
  std::vector<PlanChoice> pipelineCandidates(const Graph& g) const;

  PlannerOptions options_;
  BuildStep build_;
  CostModel model_;
  DeviceSpec memory_;
  std::map<std::string, PlanSelection> selections_;
  std::map<std::string, PlanChoice> kept_;
  std::map<std::string, std::unique_ptr<Graph>> keptSteps_;
};

} // namespace lwcc
