//===- FuseTest.cpp - Fused regions compute what their ops computed -------===//
//
// The fuse pass's standard test: each graph run through the reference
// interpreter before and after fusion, on the same random inputs, gives
// bit-identical outputs (float32 and bf16 rounding included, a region's
// ops rounded one by one); and a fused body that does not read is an
// error naming what is wrong.
#include "TestUtil.h"
#include "interp/Interpreter.h"
#include "ir/FusedOps.h"
#include "passes/Pass.h"

#include <random>

using namespace lwcc;
using namespace lwcc::test;

namespace {

std::vector<Tensor> randomInputs(const Graph& g, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-3.0, 3.0);
  std::vector<Tensor> out;
  for (const auto& in : g.inputs()) {
    Tensor t(in->type());
    for (double& v : t.f)
      v = u(rng);
    out.push_back(std::move(t));
  }
  return out;
}

/// Runs `g` before and after the fuse pass; returns the fused ops made.
int expectSameAfterFusion(std::string_view text) {
  auto g = parseOk(text);
  if (!g)
    return -1;
  const std::vector<Tensor> inputs = randomInputs(*g, 7);
  auto before = interpret(*g, inputs, {});
  EXPECT_TRUE(static_cast<bool>(before)) << (before ? "" : llvm::toString(before.takeError()));
  PassContext ctx;
  EXPECT_EQ(errorText(createFusePass()->run(*g, ctx)), "");
  EXPECT_EQ(errorText(verifyGraph(*g)), "");
  auto after = interpret(*g, inputs, {});
  EXPECT_TRUE(static_cast<bool>(after)) << (after ? "" : llvm::toString(after.takeError()));
  if (!before || !after)
    return -1;
  EXPECT_EQ(before->size(), after->size());
  for (size_t k = 0; k < before->size() && k < after->size(); ++k)
    EXPECT_EQ((*before)[k].f, (*after)[k].f) << "output " << k;
  int fused = 0;
  for (const auto& op : g->ops())
    fused += op->kind() == OpKind::Fused;
  return fused;
}

TEST(Fuse, Bf16BiasReluComputesTheSame) {
  EXPECT_EQ(expectSameAfterFusion(R"(
graph @g(%x: bf16[2,4,3,3] @data, %b: f32[1,4,1,1] @data) {
  %f = cast(%x) {to = "f32"} : f32[2,4,3,3]
  %a = add(%f, %b) : f32[2,4,3,3]
  %h = cast(%a) {to = "bf16"} : bf16[2,4,3,3]
  %r = relu(%h) : bf16[2,4,3,3]
  return %r
})"),
            1);
}

TEST(Fuse, BackwardChainsAndSeveralResultsComputeTheSame) {
  EXPECT_EQ(expectSameAfterFusion(R"(
graph @g(%y: f32[4,6] @data, %dy: f32[4,6] @data, %s: f32[6] @data) {
  %m = mul(%dy, %s) : f32[4,6]
  %g = relu_grad(%y, %m) : f32[4,6]
  %l = leaky_relu_grad(%y, %g) {alpha = 0.1} : f32[4,6]
  %c = clip_grad(%y, %l) {min = -1.0, max = 2.0} : f32[4,6]
  %d = div(%c, %s) : f32[4,6]
  %n = neg(%d) : f32[4,6]
  %e = sub(%n, %g) : f32[4,6]
  %k = clip(%e) {min = -0.5} : f32[4,6]
  %q = leaky_relu(%k) {alpha = 0.3} : f32[4,6]
  %h = cast(%q) {to = "f16"} : f16[4,6]
  return %h, %g
})"),
            1);
}

TEST(Fuse, ReductionsAndOtherShapesEndARegion) {
  // The sum joins the relu's region as a reduction result; the add after
  // it reads the sum, so it cannot join that region (nothing in a region
  // reads its reductions): it and the relu after it are a second region.
  EXPECT_EQ(expectSameAfterFusion(R"(
graph @g(%x: f32[3,5] @data, %w: f32[3,5] @data) {
  %a = mul(%x, %w) : f32[3,5]
  %r = relu(%a) : f32[3,5]
  %s = reduce_sum(%r) {axes = [1]} : f32[3,1]
  %b = add(%r, %s) : f32[3,5]
  %t = relu(%b) : f32[3,5]
  return %t
})"),
            2);
}

TEST(Fuse, SumsInARegionComputeTheSame) {
  // A bias gradient (relu_grad, the cast to f32, its sum over the batch and
  // pixels, the cast back), a second sum of the same dims keeping them, and
  // a sum of an input beside its cast: two fused ops, the same values.
  EXPECT_EQ(expectSameAfterFusion(R"(
graph @g(%x: bf16[2,4,3,3] @data, %dy: bf16[2,4,3,3] @data, %z: f32[5,3] @data) {
  %r = relu_grad(%x, %dy) : bf16[2,4,3,3]
  %f = cast(%r) {to = "f32"} : f32[2,4,3,3]
  %db = reduce_sum(%f) {axes = [0, 2, 3], keepdims = 0} : f32[4]
  %k = reduce_sum(%f) {axes = [0, -1, 2], keepdims = 1} : f32[1,4,1,1]
  %dx = cast(%f) {to = "bf16"} : bf16[2,4,3,3]
  %zs = reduce_sum(%z) {axes = [0], keepdims = 0} : f32[3]
  %zc = cast(%z) {to = "bf16"} : bf16[5,3]
  return %db, %k, %dx, %zs, %zc
})"),
            2);
}

TEST(Fuse, BodiesThatDoNotReadAreErrors) {
  auto check = [](const std::string& body, const std::string& phrase) {
    auto g = parseOk(R"(graph @g(%x: f32[4] @data) {
  %y = relu(%x) : f32[4]
  return %y
})");
    Op* relu = g->ops().front().get();
    Builder b(*g);
    b.setInsertionPointBefore(relu);
    Op* f = b.create(
        OpKind::Fused, {g->input(0)}, {f32({4})},
        {{"body", body}, {"results", std::vector<int64_t>{0}}, {"shape", std::vector<int64_t>{4}}});
    std::string text = errorText(verifyGraph(*g));
    EXPECT_NE(text.find(phrase), std::string::npos) << body << ": " << text;
    (void)f;
  };
  check("%t0 = relux(%0) : f32", "unknown op 'relux'");
  check("%t0 = relu(%1) : f32", "no such operand");
  check("%t0 = relu(%t0) : f32", "an earlier statement");
  check("%t1 = relu(%0) : f32", "must start with '%t0 ='");
  check("%t0 = relu(%0) : q8", "unknown element type");
  check("%t0 = relu(%0) {alpha = 1.0} : f32", "no attribute 'alpha'");
  check("%t0 = relu(%0) : f64", "computes f32[4], not the f64");
  check("%t0 = leaky_relu(%0) {alpha = x} : f32", "must be a number");
  check("%t0 = reduce_sum(%0) {axes = 0} : f32", "must be a list of integers");
  check("%t0 = reduce_sum(%0) {axes = [0, x]} : f32", "must be a list of integers");
  check("%t0 = reduce_sum(%0) {axes = [3], keepdims = 1} : f32", "axis out of range");
  check("%t0 = relu(%0) : f32; %t1 = reduce_sum(%t0) {axes = [0]} : f32; "
        "%t2 = add(%t0, %t1) : f32",
        "reads the reduction %t1");
  check("%t0 = reduce_sum(%0) {axes = [0]} : i64", "must be f32 or f64");
}

TEST(Fuse, BodyPrintsAndReadsBack) {
  const std::string body =
      "%t0 = add(%0, %1) : f32; %t1 = clip(%t0) {min = -inf, max = 6.0} : f32; "
      "%t2 = cast(%t1) : bf16";
  auto statements = parseFusedBody(body, 2);
  ASSERT_TRUE(static_cast<bool>(statements));
  EXPECT_EQ(printFusedBody(*statements), body);
  ASSERT_EQ(statements->size(), 3u);
  EXPECT_EQ((*statements)[1].args, std::vector<int>{0});
  EXPECT_EQ((*statements)[0].args, (std::vector<int>{-1, -2}));
  EXPECT_EQ((*statements)[2].dtype, DType::BF16);
  // A reduction statement: its axes as a list.
  const std::string sum =
      "%t0 = relu(%0) : f32; %t1 = reduce_sum(%t0) {axes = [0, 2], keepdims = 0} : f32";
  auto sums = parseFusedBody(sum, 1);
  ASSERT_TRUE(static_cast<bool>(sums));
  EXPECT_EQ(printFusedBody(*sums), sum);
  EXPECT_TRUE(isReduction((*sums)[1]));
  EXPECT_EQ(statementShape((*sums)[1], {2, 3, 4}), (Shape{3}));
}

} // namespace
