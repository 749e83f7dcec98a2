//===- Schedule.h - The pipeline shape of a micro-batched step --*- C++ -*-===//
//
// What the schedule pass (passes/Schedule.cpp) reads off a materialized,
// micro-batched training graph, for the plan report and the tests: its
// micro-batches, which ops are backward, and each device's pipeline stage.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <map>
#include <vector>

namespace lwcc {

struct PipelineShape {
  int64_t microbatches = 0; ///< 1 + the largest @mb (0: no micro-batches)
  int64_t stages = 1;
  /// Per device: its stage, the depth of the device in the graph of a
  /// micro-batch's forward transfers (device_copy) between devices that
  /// its backward depends on (feedsBackward; every
  /// device in stage 0 when there are none, when they form a cycle, or when
  /// a micro-batch's other communication spans devices of several stages).
  std::map<int64_t, int64_t> stageOf;
  /// Per op, in graph order: whether it is computed from the loss
  /// gradient's seed (the constant autodiff places at "loss.grad").
  std::vector<bool> backward;
  /// Per op: whether it is backward or a backward op reads what it
  /// computes (not so: what only updates state, as batch norm's running
  /// statistics, or is only a step's output, as the loss).
  std::vector<bool> feedsBackward;
};

PipelineShape pipelineShapeOf(const Graph& g);

} // namespace lwcc
