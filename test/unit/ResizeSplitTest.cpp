//===- ResizeSplitTest.cpp - resize split over samples, channels, h and w -===//
//
// A resize split along any dim reads the input its taps need (a halo where
// interpolation reaches beyond a device's share) and knows where its piece
// sits in the whole tensors. The materialized step (forward through the
// halos, backward through resize_grad's pieces and the halos' gradients)
// must compute what one device does: the same loss and the same gradient
// of every param.
//
//===----------------------------------------------------------------------===//
#include "SplitStepCase.h"

#include <gtest/gtest.h>

using namespace lwcc;
using namespace lwcc::test;

namespace {

// Resizes of each mode, each split along another dim over 2 or 3 devices:
// nearest 2x (PyTorch's) over h, bilinear half-pixel 5 -> 8 over w,
// bicubic align-corners over h, and nearest over channels and samples.
constexpr const char* kNet = R"(
graph @net(%x: f32[2,3,5,5] @data, %label: i64[2] @label) {
  %w1 = param "c1.weight" : f32[4,3,3,3]
  %fw = param "fc.weight" : f32[5,64]
  %c1 = conv2d(%x, %w1) {pads = [1, 1, 1, 1]} : f32[2,4,5,5] loc("c1")
  %u1 = resize(%c1) {sizes = [2, 4, 10, 10], scales = [1.0, 1.0, 2.0, 2.0], coordinate_transformation_mode = "asymmetric", nearest_mode = "floor"} : f32[2,4,10,10] @par(h = 3, devices = [0, 1, 2]) loc("up1")
  %u2 = resize(%c1) {sizes = [2, 4, 8, 8], scales = [1.0, 1.0, 1.6, 1.6], mode = "linear"} : f32[2,4,8,8] @par(w = 2, devices = [0, 1]) loc("up2")
  %u3 = resize(%u2) {sizes = [2, 4, 4, 4], scales = [1.0, 1.0, 0.5, 0.5], mode = "cubic", coordinate_transformation_mode = "align_corners"} : f32[2,4,4,4] @par(h = 2, devices = [1, 2]) loc("down")
  %u4 = resize(%u3) {sizes = [2, 4, 8, 8], scales = [1.0, 1.0, 2.0, 2.0]} : f32[2,4,8,8] @par(c = 2, devices = [0, 1]) loc("up4")
  %u5 = resize(%u1) {sizes = [2, 4, 8, 8], scales = [1.0, 1.0, 0.8, 0.8], mode = "linear", coordinate_transformation_mode = "pytorch_half_pixel"} : f32[2,4,8,8] @par(n = 2, devices = [0, 2]) loc("down2")
  %s = add(%u4, %u5) : f32[2,4,8,8] loc("sum")
  %p = avg_pool2d(%s) {kernel = [2, 2], strides = [2, 2]} : f32[2,4,4,4] loc("pool")
  %f = flatten(%p) : f32[2,64] loc("flatten")
  %logits = gemm(%f, %fw) {transB = 1} : f32[2,5] loc("fc")
  %loss = softmax_xent(%logits, %label) : f32[] loc("loss")
  return %loss
}
)";

TEST(ResizeSplit, SplitsAlongEveryDimComputeTheOneDeviceStep) {
  SplitStep step = buildSplitStep(kNet);
  ASSERT_TRUE(step.one && step.many);

  // The pieces know their place: the bilinear 5 -> 8 split over w reads
  // input columns [0, 3) and [2, 5) (a one-column halo each side).
  std::string printed = printGraph(*step.many);
  EXPECT_NE(printed.find("in_offsets = [0, 0, 0, 2]"), std::string::npos) << printed;
  EXPECT_NE(printed.find("out_offsets = [0, 0, 0, 4]"), std::string::npos) << printed;
  EXPECT_NE(printed.find("resize_grad"), std::string::npos) << printed;

  EXPECT_EQ(expectSameStep(step, 11, {4, 1}), 2u);
}

TEST(ResizeSplit, APieceWhoseTapsLeaveItsOperandIsRejected) {
  // Output rows [5, 10) of a 2x nearest upsample read input rows [2, 5):
  // an operand of rows [3, 5) misses row 2.
  auto g = parseOk(R"(
graph @g(%x: f32[1,1,2,5] @data) {
  %y = resize(%x) {sizes = [1, 1, 5, 10], scales = [1.0, 1.0, 2.0, 2.0], whole_in = [1, 1, 5, 5], in_offsets = [0, 0, 3, 0], whole_out = [1, 1, 10, 10], out_offsets = [0, 0, 5, 0]} : f32[1,1,5,10]
  return %y
}
)");
  ASSERT_TRUE(g);
  std::string err = errorText(verifyGraph(*g));
  EXPECT_NE(err.find("taps leave the operand"), std::string::npos) << err;
}

} // namespace
