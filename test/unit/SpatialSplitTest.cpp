//===- SpatialSplitTest.cpp - Convolution and pooling split over h and w --===//
//
// A sliding-window op split along height or width reads a halo of input
// rows beyond its share and pads only at the input's true borders. The
// materialized step (forward through the halos, backward through their
// slices, copies and concatenations) must compute what one device does:
// the same loss and the same gradient of every param.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"
#include "interp/Interpreter.h"
#include "passes/Pass.h"

#include <cmath>
#include <gtest/gtest.h>
#include <map>
#include <random>

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

Tensor randomTensor(const TensorType& t, std::mt19937& rng) {
  Tensor x(t);
  std::uniform_real_distribution<double> u(-1, 1);
  for (double& v : x.f)
    v = u(rng);
  return x;
}

TEST(SpatialSplit, HeightAndWidthSplitsComputeTheOneDeviceStep) {
  std::string text = kNet;
  // The fully connected layer reads 4*3*4 = 48 features.
  text.replace(text.find("f32[5,60]"), 9, "f32[5,48]");
  auto one = parseOk(text);
  auto many = parseOk(text);
  ASSERT_TRUE(one && many);
  auto run = [](Graph& g, std::vector<std::string> names) {
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
  };
  ASSERT_TRUE(run(*one, {"autodiff", "verify"}));
  ASSERT_TRUE(run(*many, {"materialize", "autodiff", "grad-sync", "verify"}));

  // Halos: the stride-1 convolution's shards read one row beyond their
  // share on each inner side; only the outer sides are padded.
  std::string printed = printGraph(*many);
  EXPECT_NE(printed.find("device_copy"), std::string::npos) << printed;
  EXPECT_NE(printed.find("pads = [0, 1, 1, 1]"), std::string::npos) << printed;
  EXPECT_NE(printed.find("pads = [1, 1, 0, 1]"), std::string::npos) << printed;

  std::mt19937 rng(7);
  WeightMap weights;
  for (const auto& p : one->params())
    weights[p->paramName()] = randomTensor(p->type(), rng);
  std::vector<Tensor> inputs = {randomTensor(one->inputs()[0]->type(), rng),
                                Tensor(one->inputs()[1]->type())};
  inputs[1].i = {3, 1};
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
    ASSERT_TRUE(p->shard().empty()) << p->name(); // every param whole here
    const Tensor& want = *expected.at(p->paramName());
    const Tensor& got = (*b)[o];
    ASSERT_EQ(want.f.size(), got.f.size()) << p->name();
    for (size_t k = 0; k < want.f.size(); ++k)
      ASSERT_NEAR(want.f[k], got.f[k], 1e-10) << p->name() << "[" << k << "]";
    ++compared;
  }
  EXPECT_GE(compared, 4u);
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
