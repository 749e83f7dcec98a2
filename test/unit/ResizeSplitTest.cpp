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
#include "TestUtil.h"
#include "interp/Interpreter.h"
#include "passes/Pass.h"

#include <gtest/gtest.h>
#include <map>
#include <random>

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

Tensor randomTensor(const TensorType& t, std::mt19937& rng) {
  Tensor x(t);
  std::uniform_real_distribution<double> u(-1, 1);
  for (double& v : x.f)
    v = u(rng);
  return x;
}

bool run(Graph& g, std::vector<std::string> names) {
  auto pipeline = buildPipeline(names);
  EXPECT_TRUE(bool(pipeline));
  if (!pipeline) {
    llvm::consumeError(pipeline.takeError());
    return false;
  }
  PassContext ctx;
  if (llvm::Error e = runPipeline(g, *pipeline, ctx)) {
    ADD_FAILURE() << llvm::toString(std::move(e));
    return false;
  }
  return true;
}

TEST(ResizeSplit, SplitsAlongEveryDimComputeTheOneDeviceStep) {
  auto one = parseOk(kNet);
  auto many = parseOk(kNet);
  ASSERT_TRUE(one && many);
  ASSERT_TRUE(run(*one, {"autodiff", "verify"}));
  ASSERT_TRUE(run(*many, {"materialize", "autodiff", "grad-sync", "verify"}));

  // The pieces know their place: the bilinear 5 -> 8 split over w reads
  // input columns [0, 3) and [2, 5) (a one-column halo each side).
  std::string printed = printGraph(*many);
  EXPECT_NE(printed.find("in_offsets = [0, 0, 0, 2]"), std::string::npos) << printed;
  EXPECT_NE(printed.find("out_offsets = [0, 0, 0, 4]"), std::string::npos) << printed;
  EXPECT_NE(printed.find("resize_grad"), std::string::npos) << printed;

  std::mt19937 rng(11);
  WeightMap weights;
  for (const auto& p : one->params())
    weights[p->paramName()] = randomTensor(p->type(), rng);
  std::vector<Tensor> inputs = {randomTensor(one->inputs()[0]->type(), rng),
                                Tensor(one->inputs()[1]->type())};
  inputs[1].i = {4, 1};
  auto a = interpret(*one, inputs, weights, Precision::F64);
  auto b = interpret(*many, inputs, weights, Precision::F64);
  ASSERT_TRUE(bool(a)) << llvm::toString(a.takeError());
  ASSERT_TRUE(bool(b)) << llvm::toString(b.takeError());
  EXPECT_NEAR((*a)[0].f[0], (*b)[0].f[0], 1e-12);
  std::map<std::string, const Tensor*> expected;
  for (size_t o = 1; o < one->outputs().size(); ++o)
    expected[one->outputGradOf(o)->paramName()] = &(*a)[o];
  size_t compared = 0;
  for (size_t o = 1; o < many->outputs().size(); ++o) {
    const Value* p = many->outputGradOf(o);
    const Tensor& want = *expected.at(p->paramName());
    const Tensor& got = (*b)[o];
    ASSERT_EQ(want.f.size(), got.f.size()) << p->name();
    for (size_t k = 0; k < want.f.size(); ++k)
      ASSERT_NEAR(want.f[k], got.f[k], 1e-10) << p->name() << "[" << k << "]";
    ++compared;
  }
  EXPECT_EQ(compared, 2u);
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
