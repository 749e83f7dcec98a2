//===- PipelinePreviewTest.cpp - A pipeline priced from one micro-batch ---===//
#include "plan/PipelinePreview.h"

#include <gtest/gtest.h>

namespace lwcc::test {
namespace {

/// Links of 1e9 bytes/s and no latency, inside a node and between nodes.
CostModel links(int64_t devicesPerNode) {
  DeviceSpec s;
  s.name = "test";
  s.intraBandwidth = s.interBandwidth = 1e9;
  s.devicesPerNode = devicesPerNode;
  return CostModel(s);
}

/// Two stages: forward 1 s each, backward 2 s (stage 1's gradient for stage
/// 0 ready 1 s into it), activations and gradients that take no time.
PipelinePiece twoStages() {
  PipelinePiece p;
  p.stages = 2;
  p.order = {0, 1};
  p.orderStages = 2;
  p.forward = {1, 1};
  p.backward = {2, 2};
  p.inputBackward = {0, 1};
  p.update = {0, 0};
  p.accumulate = {0, 0};
  // Each leaves as its value is made: the forward's at its end, the
  // gradient 1 s into stage 1's backward.
  p.transfers = {{.from = 0, .to = 1, .bytes = 0, .offset = 1, .backward = false},
                 {.from = 1, .to = 0, .bytes = 0, .offset = 1, .backward = true}};
  p.gradientBytes = {{}, {}};
  return p;
}

TEST(PipelinePreviewTest, OneFOneBReplaysTheTasksInOrder) {
  // 1F1B, 4 micro-batches. Stage 0: F0 0-1, F1 1-2, B0 3-5 (stage 1's B0
  // 2-4 sends at 3), F2 5-6, B1 6-8, F3 8-9, B2 9-11, B3 12-14 (stage 1's
  // B3 11-13 sends at 12).
  PipelinePreviewOptions o;
  o.microbatches = 4;
  EXPECT_DOUBLE_EQ(previewPipeline(twoStages(), links(8), o), 14.0);
  // The update after the last backward; a micro-batch's gradients added
  // to the sum in each backward after the first: stage 0's B1 6-8.1 delays
  // F3 (8.1-9.1) and B2 (9.1-11.2), but B3 still waits for stage 1's
  // gradient at 12: 12-14.1, then its update.
  PipelinePiece p = twoStages();
  p.update = {0.5, 0.25};
  p.accumulate = {0.1, 0};
  EXPECT_NEAR(previewPipeline(p, links(8), o), 14.1 + 0.5, 1e-12);
}

TEST(PipelinePreviewTest, GPipeRunsEveryForwardFirst) {
  // Stage 1: F0..F3 1-5, B0 5-7 .. B3 11-13; stage 0: B0 6-8 .. B3 12-14.
  PipelinePreviewOptions o;
  o.microbatches = 4;
  o.gpipe = true;
  EXPECT_DOUBLE_EQ(previewPipeline(twoStages(), links(8), o), 14.0);
  // One micro-batch: F 0-1, 1-2, stage 1's B 2-4 (sends at 3), stage 0's
  // B 3-5.
  o.microbatches = 1;
  EXPECT_DOUBLE_EQ(previewPipeline(twoStages(), links(8), o), 5.0);
}

TEST(PipelinePreviewTest, ReplicasShareTheirNodesNetworkPort) {
  // Two replicas of two stages, one micro-batch, stage s on devices 2s and
  // 2s+1: with two devices a node, both replicas' transfers cross nodes
  // through one port each way. A transfer of 5e8 bytes takes 0.5 s: replica
  // 0's 1-1.5, replica 1's 1.5-2; stage 1's F and B 1.5-4.5 and 2-5 send
  // their gradients at 3.5 and 4, back 3.5-4 and 4-4.5 (node 1's port);
  // stage 0's backwards 4-6 and 4.5-6.5.
  PipelinePiece p = twoStages();
  p.transfers = {{.from = 0, .to = 1, .bytes = 500000000, .offset = 1, .backward = false},
                 {.from = 1, .to = 0, .bytes = 500000000, .offset = 1, .backward = true}};
  PipelinePreviewOptions o;
  o.replicas = 2;
  EXPECT_DOUBLE_EQ(previewPipeline(p, links(2), o), 6.5);
  // On one node each pair of devices has its own ports: both replicas as
  // replica 0 above.
  EXPECT_DOUBLE_EQ(previewPipeline(p, links(4), o), 6.0);
}

TEST(PipelinePreviewTest, ReplicasAllReduceEachStagesGradientsInBuckets) {
  // Stage 0's 1e9 bytes of gradients over its two replicas: 2 (p-1)/p *
  // 1e9 / 1e9 = 1 s after its last backward (14 s), in two buckets of
  // 0.5 s with 6e8-byte buckets; then its update.
  PipelinePiece p = twoStages();
  p.gradientBytes = {{500000000, 500000000}, {}};
  p.update = {0.25, 0};
  PipelinePreviewOptions o;
  o.microbatches = 4;
  o.replicas = 2;
  o.bucketBytes = 600000000;
  EXPECT_DOUBLE_EQ(previewPipeline(p, links(8), o), 14.0 + 1.0 + 0.25);
  // Stage 1's: it ends at 13, its all-reduce 13-14 beside stage 0's last
  // backward.
  p.gradientBytes = {{}, {1000000000}};
  EXPECT_DOUBLE_EQ(previewPipeline(p, links(8), o), 14.25);
}

TEST(PipelinePreviewTest, TransfersLeaveWhenTheirValueIsMade) {
  // One micro-batch; stage 0's activations made 0.5 s into its forward:
  // stage 1's F 0.5-1.5, B 1.5-3.5 (sends at 2.5), stage 0's B 2.5-4.5.
  PipelinePiece p = twoStages();
  p.transfers[0].offset = 0.5;
  PipelinePreviewOptions o;
  o.microbatches = 1;
  EXPECT_DOUBLE_EQ(previewPipeline(p, links(8), o), 4.5);
}

TEST(PipelinePreviewTest, RunningStatisticsHoldOnlyTheReceiversBackward) {
  // Stage 0's running statistics (2e9 bytes: 2 s), sent at the end of its
  // forward after the activations (0 s), arrive at 3: stage 1's F 1-2
  // does not wait for them, its B does (3-5, sends at 4); stage 0's B 4-6.
  PipelinePiece p = twoStages();
  p.transfers.push_back(
      {.from = 0, .to = 1, .bytes = 2000000000, .offset = 1, .backward = false, .state = true});
  PipelinePreviewOptions o;
  o.microbatches = 1;
  EXPECT_DOUBLE_EQ(previewPipeline(p, links(8), o), 6.0);
  // Counted as activations, stage 1's forward would wait for them too: its
  // F 3-4, B 4-6, stage 0's B 5-7.
  p.transfers.back().state = false;
  EXPECT_DOUBLE_EQ(previewPipeline(p, links(8), o), 7.0);
}

} // namespace
} // namespace lwcc::test
