//===- Schedule.h - The pipeline shape of a micro-batched step --*- C++ -*-===//
//
// What the schedule pass (passes/Schedule.cpp) reads off a materialized,
// micro-batched training graph, for the plan report and the tests: its
// micro-batches, which ops are backward, and each device's pipeline stage.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <compare>
#include <cstdint>
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
  /// Per op of a micro-batch that no backward needs: whether another
  /// stage receives what it computes (batch norm's running statistics made
  /// where the layer runs, sent to the stage of their param; the transfer
  /// itself too). The schedule runs these ops in their micro-batch's
  /// forward, the others (the updates of the running statistics where
  /// their param is) in its backward.
  std::vector<bool> passedOn;
};

PipelineShape pipelineShapeOf(const Graph& g);

/// How a device orders its micro-batches' work (schedule=1f1b|gpipe|zb-h1).
enum class PipelineOrder { OneFOneB, GPipe, ZeroBubbleH1 };

/// A unit of a device's schedule: the forward (F) or the backward of one
/// micro-batch; under zb-h1 the backward is its input gradients (B, what
/// the previous stage waits for) and then its weight gradients (W).
struct PipelineTask {
  enum Kind : int8_t { F, B, W };
  int64_t mb = 0;
  Kind kind = F;
  bool backward() const { return kind != F; }
  friend bool operator==(const PipelineTask&, const PipelineTask&) = default;
  friend auto operator<=>(const PipelineTask&, const PipelineTask&) = default;
};

/// The tasks of a device at place `s` of the schedule's `stages`, in order:
/// GPipe runs every forward, then every backward; 1F1B runs S-s-1 forwards
/// (the warm-up), then a forward and a backward in turn, then the remaining
/// backwards; ZB-H1 runs 1F1B's forwards and input-gradient backwards and
/// puts off the weight gradients of up to s micro-batches, which fill the
/// time the stage would wait at the end (the activations it holds stay at
/// most S micro-batches', 1F1B's most).
std::vector<PipelineTask> pipelineTasks(int64_t s, int64_t stages, int64_t microbatches,
                                        PipelineOrder order);

/// The streams that carry a micro-batch's activations to later stages and
/// its gradients back: C (`colors`) of each, after the streams the step
/// already uses (stream 1 is grad-sync's, branch streams stream-assign's):
/// forward from `first`, backward from `first` + C. A transfer goes on the
/// one of its bank given by its sender's stage mod C, C one more than the
/// most stages a transfer crosses, so that on each device what it receives
/// in one direction (from at most C - 1 stages before it) and what it
/// passes on wait in different queues: a stage's receive never waits
/// behind a send that waits for a later task. With parity alone (C = 2), a
/// value that skips a stage (a branch of an Inception block cut between
/// stages s and s + 2) came in on the stream stage s + 2 sends on:
/// Inception-v3 in 16 stages of 16 micro-batches, predicted on
/// p100-cluster, took 103.5 ms a step for 85.9 ms with this alone.
constexpr int64_t kFirstTransferStream = 2;
int64_t transferStream(int64_t first, int64_t colors, int64_t senderStage, bool backward);

} // namespace lwcc
