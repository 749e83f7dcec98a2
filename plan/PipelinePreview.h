//===- PipelinePreview.h - A pipeline's step priced from one micro-batch -*- C++ -*-===//
//
// The planner's compact price of a pipeline candidate (S stages of R
// replicas, M micro-batches): instead of the whole step (S*R devices' copies
// of M micro-batches' ops, 30,000 to 400,000 ops for Inception-v3 on 16
// devices), the piece of it one replica runs for one micro-batch
// (PlanChoice::oneMicrobatch: the same cut, stage s on device s, a micro-
// batch of the replicas' share), from which:
//  1. each stage's forward and backward per micro-batch (its ops' times on
//     the cost model, as the simulator takes them, and the collectives over
//     its replicas on its compute stream: batch norm's statistics, the
//     loss summed and its gradient sent back), the part of the
//     backward the gradient sent to the stage before needs (the schedule
//     runs it first), the update after the last backward, and the sum of a
//     micro-batch's weight gradients into the step's (a micro-batch after
//     the first);
//  2. the transfers between stages of a micro-batch (bytes, which stages,
//     forward or back), and the trained params' gradient bytes per stage.
// previewPipeline then replays the schedule's order of tasks (1f1b: S-s-1
// forwards, then one forward and one backward in turn; gpipe: every
// forward, then every backward) on the S*R devices as a small event
// simulation with the simulator's resources: each device's compute
// stream, the transfer streams of passes/Schedule.cpp (C banks each way),
// each device's send and receive port, each node's network port per
// direction (shared by the replicas' transfers that cross nodes), then
// each stage's gradient all-reduce over its replicas (grad-sync's buckets
// on stream 1, their links) and its update. A copy between two stages the
// schedule puts at the same place in its order (batch norm's running
// statistics sent where the layer keeps them: the schedule gives it no
// stream of its own) holds both compute streams once both stages' backward
// of its micro-batch is done.
// What it leaves out (the price is no bound either way; on the zoo it is
// mostly below the whole step's, and far below for deep pipelines): an op
// of a task that could start before its task's other inputs arrive, where
// in a task a running statistics' copy falls, the loss summed over
// replicas, and a bucket's all-reduce starting before the stage's last
// backward ends.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "cost/CostModel.h"
#include "ir/IR.h"

#include <optional>
#include <vector>

namespace lwcc {

/// What one replica's one micro-batch of a pipeline costs, per stage.
struct PipelinePiece {
  int64_t stages = 0;
  /// Per stage: its place in the schedule's order (passes/Schedule.h: its
  /// depth in the graph of the forward transfers backward depends on, which
  /// is the stage but where a stage receives no activations), and the
  /// schedule's count of them.
  std::vector<int64_t> order;
  int64_t orderStages = 0;
  /// Per stage: seconds of a micro-batch's forward, its backward, the part
  /// of the backward that gradients sent back are computed from (run
  /// first), the update, and a micro-batch's gradients added to the sum.
  std::vector<double> forward, backward, inputBackward, update, accumulate;
  /// The transfers of one micro-batch between stages.
  struct Transfer {
    int64_t from = 0, to = 0, bytes = 0;
    /// Seconds into the sender's task (its forward, or its backward's
    /// input-gradient part) at which the value is there: the ops before it.
    double offset = 0;
    bool backward = false;
    /// What no backward needs (batch norm's running statistics, made in the
    /// forward where the layer runs, sent to the stage of their param):
    /// the receiver's backward of the micro-batch waits for it.
    bool state = false;
    /// Between stages of the same place in the order (running statistics
    /// again): the schedule gives it no stream of its own, so it takes both
    /// devices' compute streams.
    bool computeStreams = false;
  };
  std::vector<Transfer> transfers;
  /// Per stage: its trained params' gradient bytes, last used first (the
  /// order their gradients are made, as grad-sync buckets them).
  std::vector<std::vector<int64_t>> gradientBytes;
};

/// Reads the piece off the step built with PlanChoice::oneMicrobatch (stage
/// s on devices s*replicas.., the first standing for the others); nullopt
/// where it is not one (no stages found).
std::optional<PipelinePiece> readPipelinePiece(const Graph& piece, const CostModel& model,
                                               int64_t replicas);

struct PipelinePreviewOptions {
  int64_t replicas = 1, microbatches = 1;
  bool gpipe = false;      ///< else 1f1b
  int64_t bucketBytes = 0; ///< grad-sync's buckets (0: one per stage)
};

/// The predicted step of the pipeline (stage s replica r on device s*R+r)
/// on `model`: the event simulation above.
double previewPipeline(const PipelinePiece& piece, const CostModel& model,
                       const PipelinePreviewOptions& o);

} // namespace lwcc
