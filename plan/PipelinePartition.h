//===- PipelinePartition.h - Stages of a pipeline by PipeDream's DP -*- C++ -*-===//
//
// --strategy=pipeline: partitionPipeline cuts a training graph (before micro-batching and
// materialize) into `stages` stages of consecutive ops and gives each op
// its stage's config (@par). Steps:
//  1. The units are the ops in graph order (a topological order) but
//     constants and assigns. Per unit, from the cost model: forward and
//     backward time of one micro-batch (backward as the layer-wise
//     search estimates it), the bytes of its results, the trained params
//     it reads; per cut, the bytes of the values that cross it.
//  2. PipeDream's dynamic program: best[s][j] = min over i of
//     max(best[s-1][i-1], T(s, i..j)), T the stage's compute per
//     micro-batch (a replica's share) or the transfers at its two cuts
//     (activations and their gradients) when those take longer; a stage
//     must fit its device's memory: 4x its params (weights, gradients,
//     optimizer state) and the activations of the micro-batches it holds
//     at once (1f1b: S-s, zb-h1: at most S, gpipe: all M).
//  3. With gpus = S * r devices, stage s runs on devices s*r .. s*r+r-1: r
//     replicas splitting the samples (data parallelism inside the stage),
//     each op following the split of its operands or whole on each.
// PipelineOptions: gpus, stages, microbatches, gpipe (the activations a
// stage holds at once), report (a note per stage and the estimated bubble).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "cost/CostModel.h"

#include "llvm/Support/Error.h"

namespace lwcc {

struct PipelineOptions {
  int64_t gpus = 1, stages = 1, microbatches = 1;
  bool gpipe = false;
  /// zb-h1: a stage holds the activations of up to S micro-batches (its
  /// 1f1b ones and the inputs of the weight gradients it puts off).
  bool zeroBubble = false;
  bool report = false;
};

/// Gives each op of `g` (not yet parallelized) its stage's @par, or fails
/// when no cut fits; with o.report, a note per stage on `diag`.
llvm::Error partitionPipeline(Graph& g, const CostModel& cm, const PipelineOptions& o,
                              const DiagHandler& diag);

} // namespace lwcc
