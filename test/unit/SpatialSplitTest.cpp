//===- SpatialSplitTest.cpp - Convolution and pooling split over h and w --===//
//
// A sliding-window op split along height or width reads a halo of input
// rows beyond its share and pads only at the input's true borders. The
// materialized step (forward through the halos, backward through their
// slices, copies and concatenations) must compute what one device does:
// the same loss and the same gradient of every param.
//
//===----------------------------------------------------------------------===//
#include "SplitStepCase.h"

#include <gtest/gtest.h>

using namespace lwcc;
using namespace lwcc::test;

namespace {

// Two convolutions (stride 1 and 2, padded) and a max pool, split over
// height then width on 2 or 3 devices, then a fully connected layer.
constexpr const char* kNet = R"(
graph @net(%x: f32[2,2,11,10] @data, %label: i64[2] @label) {
  %w1 = param "c1.weight" : f32[3,2,3,3]
  %b1 = param "c1.bias" : f32[3]
  %w2 = param "c2.weight" : f32[4,3,3,3]
  %fw = param "fc.weight" : f32[5,60]
  %c1 = conv2d(%x, %w1, %b1) {pads = [1, 1, 1, 1]} : f32[2,3,11,10] @par(h = 2, devices = [0, 1]) loc("c1")
  %r1 = relu(%c1) : f32[2,3,11,10] @par(h = 2, devices = [0, 1]) loc("r1")
  %c2 = conv2d(%r1, %w2) {strides = [2, 2], pads = [1, 0, 1, 0]} : f32[2,4,6,4] @par(h = 3, devices = [0, 1, 2]) loc("c2")
  %p = max_pool2d(%c2) {kernel = [2, 2], strides = [2, 1], pads = [0, 0, 0, 1]} : f32[2,4,3,4] @par(w = 2, devices = [1, 2]) loc("pool")
  %f = flatten(%p) : f32[2,48] loc("flatten")
  %logits = gemm(%f, %fw) {transB = 1} : f32[2,5] loc("fc")
  %loss = softmax_xent(%logits, %label) : f32[] loc("loss")
  return %loss
}
)";

TEST(SpatialSplit, HeightAndWidthSplitsComputeTheOneDeviceStep) {
  std::string text = kNet;
  // The fully connected layer reads 4*3*4 = 48 features.
  text.replace(text.find("f32[5,60]"), 9, "f32[5,48]");
  SplitStep step = buildSplitStep(text);
  ASSERT_TRUE(step.one && step.many);

  // Halos: the stride-1 convolution's shards read one row beyond their
  // share on each inner side; only the outer sides are padded.
  std::string printed = printGraph(*step.many);
  EXPECT_NE(printed.find("device_copy"), std::string::npos) << printed;
  EXPECT_NE(printed.find("pads = [0, 1, 1, 1]"), std::string::npos) << printed;
  EXPECT_NE(printed.find("pads = [1, 1, 0, 1]"), std::string::npos) << printed;

  EXPECT_GE(expectSameStep(step, 7, {3, 1}), 4u);
}

TEST(SpatialSplit, PoolInCeilModeIsNotSplitOverHeight) {
  auto g = parseOk(R"(
graph @g(%x: f32[1,1,5,5] @data) {
  %p = max_pool2d(%x) {kernel = [2, 2], strides = [2, 2], ceil_mode = 1} : f32[1,1,3,3] @par(h = 2, devices = [0, 1])
  return %p
}
)");
  ASSERT_TRUE(g);
  auto pipeline = buildPipeline(std::vector<std::string>{"materialize"});
  ASSERT_TRUE(bool(pipeline));
  PassContext ctx;
  std::string err = errorText(runPipeline(*g, *pipeline, ctx));
  EXPECT_NE(err.find("cannot be split along dim 2"), std::string::npos) << err;
}

} // namespace
