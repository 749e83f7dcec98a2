//===- GradCheckTest.cpp - Gradient rules against finite differences ------===//
//
// Every op with a gradient rule is differentiated by the autodiff pass over
// several random configurations and checked element by element against
// central finite differences in float64 (GradCheckCase.h). This file holds
// convolution, pooling, activations, normalization and losses, and the
// behaviour of autodiff itself; GradCheckTensorTest.cpp holds arithmetic,
// reductions, linear algebra and shape ops; GradCheckCommTest.cpp the
// communication ops.
//
//===----------------------------------------------------------------------===//
#include "GradCheckCase.h"
#include "interp/Interpreter.h"

#include <cmath>
#include <set>

using namespace lwcc;
using namespace lwcc::test;
using Dist = GradCase::Dist;

namespace {

//===----------------------------------------------------------------------===//
// Coverage
//===----------------------------------------------------------------------===//

TEST(GradCheck, EveryOpWithAGradientRuleIsChecked) {
  // The ops the tests of this file, GradCheckTensorTest.cpp,
  // GradCheckZooTest.cpp, GradCheckEncodingTest.cpp,
  // GradCheckLanguageTest.cpp and GradCheckAttentionTest.cpp check. A new
  // gradient rule needs a test there and an entry here.
  // clang-format off
  const std::set<std::string_view> checked = {
      "conv2d", "max_pool2d", "avg_pool2d", "global_avg_pool", "lrn",
      "relu", "leaky_relu", "sigmoid", "tanh", "exp", "log", "sqrt", "reciprocal", "neg", "abs",
      "clip", "add", "sub", "mul", "div", "pow", "reduce_mean", "reduce_sum", "gemm", "matmul",
      "reshape", "flatten", "transpose", "concat", "slice", "split", "gather", "expand", "pad",
      "cast", "softmax", "log_softmax", "batch_norm_train", "dropout", "identity",
      "softmax_xent", "mse_loss", "layer_norm", "erf", "gather_nd",
      // The model-collection ops (GradCheckZooTest.cpp).
      "hard_swish", "hard_sigmoid", "mish", "softplus", "softsign", "elu", "selu", "celu",
      "thresholded_relu", "prelu", "max", "min", "where", "resize", "batch_norm",
      // Position encodings and norms (GradCheckEncodingTest.cpp).
      "cumsum", "tile", "mod", "sin", "cos", "reduce_l1", "reduce_l2", "reduce_sum_square",
      // Language models (GradCheckLanguageTest.cpp).
      "gather_elements", "scatter_elements", "nll_loss",
      // Attention (GradCheckAttentionTest.cpp).
      "attention",
      // Communication (GradCheckCommTest.cpp).
      "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce_to", "device_copy",
      "shard", "unshard"};
  // clang-format on
  std::set<std::string_view> withRule;
  for (const OpInfo& info : allOps())
    if (info.gradRule)
      withRule.insert(info.mnemonic);
  EXPECT_EQ(withRule, checked);
}

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

TEST(GradCheck, Conv2d) {
  forSeeds(6, [](GradCase& c, int seed) {
    int64_t group = seed == 1 ? 1 : c.randInt(1, 3);
    int64_t cg = c.randInt(1, 2), mg = c.randInt(1, 2), n = c.randInt(1, 2);
    Ints k = {c.randInt(1, 3), c.randInt(1, 3)};
    Ints strides = {c.randInt(1, 3), c.randInt(1, 3)};
    Ints dil = {c.randInt(1, 2), c.randInt(1, 2)};
    Ints pads = {c.randInt(0, 2), c.randInt(0, 2), c.randInt(0, 2), c.randInt(0, 2)};
    Shape xs = {n, group * cg, dil[0] * (k[0] - 1) + 1 + c.randInt(0, 3),
                dil[1] * (k[1] - 1) + 1 + c.randInt(0, 3)};
    Shape ws = {group * mg, cg, k[0], k[1]};
    bool bias = seed % 2 == 0;
    c.noteShape("x", xs).noteShape("w", ws).noteInts("strides", strides).noteInts("pads", pads);
    c.noteInts("dilations", dil).note("group ").note(group).note(bias ? " bias" : "");
    std::vector<Value*> operands = {c.param(xs), c.param(ws)};
    if (bias)
      operands.push_back(c.param({group * mg}));
    std::vector<NamedAttr> attrs;
    if (seed != 1) // seed 1: the defaults
      attrs = {{"strides", strides}, {"pads", pads}, {"dilations", dil}, {"group", group}};
    c.test(OpKind::Conv2d, operands, attrs);
  });
}

/// Pads of a pool window: each below the kernel, so no window is all padding.
Ints poolPads(GradCase& c, const Ints& k) {
  return {c.randInt(0, k[0] - 1), c.randInt(0, k[1] - 1), c.randInt(0, k[0] - 1),
          c.randInt(0, k[1] - 1)};
}

TEST(GradCheck, MaxPool2d) {
  forSeeds(6, [](GradCase& c, int seed) {
    Ints k = {c.randInt(1, 3), c.randInt(2, 3)};
    Ints strides = {c.randInt(1, 3), c.randInt(1, 2)};
    Ints dil = {c.randInt(1, 2), seed <= 2 ? 1 : 2};
    Ints pads = poolPads(c, k);
    int64_t ceil = seed % 2;
    Shape xs = {c.randInt(1, 2), c.randInt(1, 3), dil[0] * (k[0] - 1) + 1 + c.randInt(0, 4),
                dil[1] * (k[1] - 1) + 1 + c.randInt(0, 4)};
    c.noteShape("x", xs).noteInts("kernel", k).noteInts("strides", strides);
    c.noteInts("pads", pads).noteInts("dilations", dil).note("ceil_mode ").note(ceil);
    // Distinct values: no ties, and finite differences do not move the max.
    c.test(OpKind::MaxPool2d, {c.param(xs, Dist::Distinct)},
           {{"kernel", k},
            {"strides", strides},
            {"pads", pads},
            {"dilations", dil},
            {"ceil_mode", ceil}});
  });
}

TEST(GradCheck, AvgPool2d) {
  forSeeds(8, [](GradCase& c, int seed) {
    Ints k = {c.randInt(1, 3), c.randInt(2, 3)};
    Ints strides = {c.randInt(1, 3), c.randInt(1, 2)};
    Ints pads = poolPads(c, k);
    int64_t ceil = seed % 2, includePad = (seed / 2) % 2;
    Shape xs = {c.randInt(1, 2), c.randInt(1, 3), k[0] + c.randInt(0, 4), k[1] + c.randInt(0, 4)};
    c.noteShape("x", xs).noteInts("kernel", k).noteInts("strides", strides).noteInts("pads", pads);
    c.note("ceil_mode ").note(ceil).note(" count_include_pad ").note(includePad);
    c.test(OpKind::AvgPool2d, {c.param(xs)},
           {{"kernel", k},
            {"strides", strides},
            {"pads", pads},
            {"ceil_mode", ceil},
            {"count_include_pad", includePad}});
  });
}

TEST(GradCheck, GlobalAvgPool) {
  forSeeds(4, [](GradCase& c, int) {
    Shape xs = c.randShape(3, 5, 3);
    c.noteShape("x", xs);
    c.test(OpKind::GlobalAvgPool, {c.param(xs)});
  });
}

TEST(GradCheck, Lrn) {
  forSeeds(5, [](GradCase& c, int seed) {
    Shape xs = {c.randInt(1, 2), c.randInt(1, 6), c.randInt(1, 3), c.randInt(1, 3)};
    int64_t size = c.randInt(1, 5);
    std::vector<NamedAttr> attrs = {{"size", size}};
    if (seed != 1) { // seed 1: the default alpha, beta and bias
      double alpha = c.uniform(0.1, 1.0), beta = c.uniform(0.4, 1.2), bias = c.uniform(1.0, 2.0);
      attrs.push_back({"alpha", alpha});
      attrs.push_back({"beta", beta});
      attrs.push_back({"bias", bias});
      c.note("alpha ").note(alpha).note(" beta ").note(beta).note(" bias ").note(bias).note(" ");
    }
    c.noteShape("x", xs).note("size ").note(size);
    c.test(OpKind::Lrn, {c.param(xs)}, attrs);
  });
}

//===----------------------------------------------------------------------===//
// Activations and elementwise math
//===----------------------------------------------------------------------===//

/// Checks op(x) over random shapes of rank 0 to 4.
void checkUnary(OpKind kind, Dist dist, std::vector<NamedAttr> attrs = {}) {
  forSeeds(3, [&](GradCase& c, int) {
    Shape xs = c.randShape(0, 4);
    c.noteShape("x", xs);
    c.test(kind, {c.param(xs, dist)}, attrs);
  });
}

TEST(GradCheck, Relu) { checkUnary(OpKind::Relu, Dist::AwayFromZero); }
TEST(GradCheck, LeakyRelu) {
  checkUnary(OpKind::LeakyRelu, Dist::AwayFromZero);
  checkUnary(OpKind::LeakyRelu, Dist::AwayFromZero, {{"alpha", 0.3}});
}
TEST(GradCheck, Sigmoid) { checkUnary(OpKind::Sigmoid, Dist::Normal); }
TEST(GradCheck, Tanh) { checkUnary(OpKind::Tanh, Dist::Normal); }
TEST(GradCheck, Exp) { checkUnary(OpKind::Exp, Dist::Normal); }
TEST(GradCheck, Log) { checkUnary(OpKind::Log, Dist::Positive); }
TEST(GradCheck, Sqrt) { checkUnary(OpKind::Sqrt, Dist::Positive); }
TEST(GradCheck, Reciprocal) { checkUnary(OpKind::Reciprocal, Dist::Positive); }
TEST(GradCheck, Neg) { checkUnary(OpKind::Neg, Dist::Normal); }
TEST(GradCheck, Abs) { checkUnary(OpKind::Abs, Dist::AwayFromZero); }
TEST(GradCheck, Identity) { checkUnary(OpKind::Identity, Dist::Normal); }
TEST(GradCheck, Dropout) {
  // Outside training, dropout passes its input through (train-mode rewrites it).
  checkUnary(OpKind::Dropout, Dist::Normal);
  checkUnary(OpKind::Dropout, Dist::Normal, {{"ratio", 0.3}});
}

TEST(GradCheck, Clip) {
  forSeeds(5, [](GradCase& c, int seed) {
    double lo = c.uniform(-1.0, -0.1), hi = c.uniform(0.1, 1.0);
    // Seed 2 clips from below only, seed 3 from above only.
    std::vector<NamedAttr> attrs;
    if (seed != 3)
      attrs.push_back({"min", lo});
    if (seed != 2)
      attrs.push_back({"max", hi});
    Shape xs = c.randShape(1, 3);
    std::vector<double> v(TensorType(DType::F64, xs).numElements());
    for (double& x : v) {
      do { // inside, below and above the range, away from the bounds
        x = c.uniform(-1.5, 1.5);
      } while (std::fabs(x - lo) < 0.05 || std::fabs(x - hi) < 0.05);
    }
    c.noteShape("x", xs).note("min ").note(lo).note(" max ").note(hi);
    c.test(OpKind::Clip, {c.paramOf(xs, v)}, attrs);
  });
}

//===----------------------------------------------------------------------===//
// Softmax, normalization, losses
//===----------------------------------------------------------------------===//

void checkSoftmax(OpKind kind) {
  forSeeds(5, [&](GradCase& c, int seed) {
    Shape xs = c.randShape(1, 4);
    int64_t rank = static_cast<int64_t>(xs.size());
    std::vector<NamedAttr> attrs;
    if (seed != 1) { // seed 1: the default last axis
      int64_t axis = c.spellAxis(c.randInt(0, rank - 1), rank);
      attrs.push_back({"axis", axis});
      c.note("axis ").note(axis).note(" ");
    }
    c.noteShape("x", xs);
    c.test(kind, {c.param(xs)}, attrs);
  });
}

TEST(GradCheck, Softmax) { checkSoftmax(OpKind::Softmax); }
TEST(GradCheck, LogSoftmax) { checkSoftmax(OpKind::LogSoftmax); }

TEST(GradCheck, BatchNormTrain) {
  forSeeds(6, [](GradCase& c, int seed) {
    Shape xs = {c.randInt(2, 3), c.randInt(1, 3)};
    for (int64_t d = c.randInt(0, 2); d > 0; --d)
      xs.push_back(c.randInt(1, 3));
    double eps = c.uniform(1e-5, 0.1);
    Shape cs = {xs[1]};
    c.noteShape("x", xs).note("epsilon ").note(eps);
    auto r = c.emitN(OpKind::BatchNormTrain, {c.param(xs), c.param(cs), c.param(cs)},
                     {{"epsilon", eps}}, 3);
    c.result(r[0]);
    // The batch statistics are differentiable results too: odd seeds use them.
    if (seed % 2) {
      c.note(" with mean and var");
      c.result(r[1]);
      c.result(r[2]);
    }
  });
}

TEST(GradCheck, SoftmaxXent) {
  forSeeds(5, [](GradCase& c, int) {
    int64_t n = c.randInt(1, 4), k = c.randInt(2, 5);
    Ints labels(n);
    for (int64_t& l : labels)
      l = c.randInt(0, k - 1);
    c.noteShape("logits", {n, k}).noteInts("labels", labels);
    c.test(OpKind::SoftmaxXent, {c.param({n, k}), c.intConstant({n}, labels)});
  });
}

TEST(GradCheck, MseLoss) {
  forSeeds(5, [](GradCase& c, int) {
    Shape s = c.randShape(0, 3);
    c.noteShape("pred and target", s);
    c.test(OpKind::MseLoss, {c.param(s), c.param(s)});
  });
}

//===----------------------------------------------------------------------===//
// Autodiff behaviour
//===----------------------------------------------------------------------===//

TEST(Autodiff, OpWithoutGradientRuleIsAnErrorNamingIt) {
  // sign (which abs's rule uses, never differentiated itself) has no
  // gradient rule.
  auto g = parseOk(R"(graph @g(%x: f64[2,3] @data) {
  %s = param "s" : f64[3]
  %t = sign(%s) : f64[3] loc("sign1")
  %y = mul(%x, %t) : f64[2,3] loc("mul")
  %l = reduce_sum(%y) {keepdims = 0} : f64[]
  return %l
}
)",
                   "sign.lwir");
  ASSERT_TRUE(g);
  ErrorParts e = inspect(runPassesOn(*g, {"autodiff"}));
  ASSERT_TRUE(e.located) << e.full;
  EXPECT_EQ(e.full, "sign.lwir:3:3: 'sign' op \"sign1\": has no gradient rule, but the loss "
                    "depends on it through a trainable param");

  // Pad has a rule for constant padding only.
  for (const char* mode : {"reflect", "edge"}) {
    auto p = parseOk(std::string(R"(graph @g() {
  %w = param "w" : f64[2,3]
  %y = pad(%w) {pads = [0, 1, 0, 1], mode = ")") +
                         mode + R"("} : f64[2,5]
  %l = reduce_sum(%y) {keepdims = 0} : f64[]
  return %l
}
)",
                     "pad.lwir");
    ASSERT_TRUE(p);
    ErrorParts pe = inspect(runPassesOn(*p, {"autodiff"}));
    EXPECT_EQ(pe.full, std::string("pad.lwir:3:3: 'pad' op: has no gradient rule for mode \"") +
                           mode + "\"");
  }
  auto crop = parseOk(R"(graph @g() {
  %w = param "w" : f64[2,3]
  %y = pad(%w) {pads = [0, -1, 0, 1]} : f64[2,3]
  %l = reduce_sum(%y) {keepdims = 0} : f64[]
  return %l
}
)",
                      "crop.lwir");
  ASSERT_TRUE(crop);
  EXPECT_EQ(inspect(runPassesOn(*crop, {"autodiff"})).full,
            "crop.lwir:3:3: 'pad' op: has no gradient rule for negative (cropping) pads");
}

TEST(Autodiff, OpWithoutGradientRuleOffTheGradientPathIsFine) {
  // The batch_norm sees no param: nothing needs its gradient.
  auto g = parseOk(R"(graph @g(%x: f64[2,3] @data) {
  %w = param "w" : f64[2,3]
  %c = constant() {value = [0.5]} : f64[3]
  %y = batch_norm(%x, %c, %c, %c, %c) : f64[2,3]
  %p = mul(%y, %w) : f64[2,3]
  %l = reduce_sum(%p) {keepdims = 0} : f64[]
  return %l
}
)");
  ASSERT_TRUE(g);
  ASSERT_EQ(errorText(runPassesOn(*g, {"autodiff"})), "");
  ASSERT_EQ(g->outputs().size(), 2u);
  EXPECT_EQ(g->outputGradOf(1), g->param(0));
}

TEST(Autodiff, LossMustBeAFloatScalar) {
  auto g = parseOk(R"(graph @g() {
  %w = param "w" : f64[2]
  %y = relu(%w) : f64[2]
  return %y
}
)");
  ASSERT_TRUE(g);
  EXPECT_EQ(errorText(runPassesOn(*g, {"autodiff"})),
            "autodiff: graph @g must return a float scalar loss as output #0 (run append-loss "
            "first)");
}

TEST(Autodiff, GradientsOfAValueWithSeveralUsesAreSummed) {
  // y = x * x + x: dy/dx = 2x + 1, from three uses of x.
  GradCase c(7);
  Value* x = c.param({2, 3});
  Value* xx = c.emit(OpKind::Mul, {x, x});
  Value* y = c.emit(OpKind::Add, {xx, x});
  Value* s = c.emit(OpKind::ReduceSum, {y}, {{"keepdims", 0}});
  Graph& g = c.graph();
  g.addOutput(s);
  ASSERT_EQ(errorText(runPassesOn(g, {"autodiff"})), "");
  ASSERT_EQ(errorText(verifyGraph(g)), "");
  ASSERT_EQ(g.outputs().size(), 2u);
  // The three contributions meet in two adds.
  int adds = 0;
  for (const auto& op : g.ops())
    adds += op->kind() == OpKind::Add;
  EXPECT_EQ(adds, 1 + 2);
  auto out = interpret(g, {}, c.weights(), Precision::F64);
  ASSERT_TRUE(!!out) << llvm::toString(out.takeError());
  const Tensor& xv = c.weights().at("p0");
  for (int64_t k = 0; k < xv.size(); ++k)
    EXPECT_DOUBLE_EQ((*out)[1].f[k], 2 * xv.f[k] + 1) << k;

  // The same through broadcasting and a second op: z = sum(x * b) + sum(x), x[3], b[2,3].
  forSeeds(3, [](GradCase& d, int) {
    Value* v = d.param({3});
    Value* b = d.param({2, 3});
    d.result(d.emit(OpKind::Mul, {v, b}));
    d.result(d.emit(OpKind::Exp, {v}));
    d.result(v);
  });
}

TEST(Autodiff, NoGradientThroughIntegersOrForParamsOffTheLoss) {
  auto g = parseOk(R"(graph @g() {
  %x = param "x" : f64[4]
  %z = param "z" : f64[4]
  %u = param "u" : f64[4]
  %unused = param "unused" : f64[4]
  %n = param "n" : i64[4]
  %state = param "opt.state" zeros : f64[4]
  %w = constant() {value = [0.5, -1.0, 2.0, 0.25]} : f64[4]
  %xi = cast(%x) {to = "i64"} : i64[4]
  %xf = cast(%xi) {to = "f64"} : f64[4]
  %zi = cast(%z) {to = "i32"} : i32[4]
  %zn = add(%zi, %zi) : i32[4]
  %nz = cast(%zn) {to = "i64"} : i64[4]
  %nn = mul(%nz, %n) : i64[4]
  %zf = cast(%nn) {to = "f64"} : f64[4]
  %xw = mul(%x, %w) : f64[4]
  %a = add(%xw, %xf) : f64[4]
  %b = add(%a, %zf) : f64[4]
  %c = add(%b, %state) : f64[4]
  %l = reduce_sum(%c) {keepdims = 0} : f64[]
  %other = tanh(%u) : f64[4]
  return %l, %other
}
)");
  ASSERT_TRUE(g);
  size_t before = g->numOps();
  std::vector<std::string> warnings;
  ASSERT_EQ(errorText(runPassesOn(*g, {"autodiff"}, &warnings)), "");
  ASSERT_EQ(errorText(verifyGraph(*g)), "");
  EXPECT_TRUE(warnings.empty());
  // Only x gets a gradient: z reaches the loss through integers only, u only
  // an output that is not the loss, the i64 param and the state are not
  // trainable, and `unused` is unused.
  ASSERT_EQ(g->outputs().size(), 3u);
  EXPECT_EQ(g->outputGradOf(0), nullptr);
  EXPECT_EQ(g->outputGradOf(1), nullptr);
  EXPECT_EQ(g->outputGradOf(2), g->param(0));
  EXPECT_EQ(g->outputs()[2]->name(), "x.grad");
  // No backward op for the integer path: no cast, nothing on i32 or i64.
  std::vector<Op*> ops = opList(*g);
  for (size_t i = before; i < ops.size(); ++i) {
    EXPECT_NE(ops[i]->kind(), OpKind::Cast) << ops[i]->describe();
    for (unsigned r = 0; r < ops[i]->numResults(); ++r)
      EXPECT_TRUE(isFloat(ops[i]->result(r)->type().dtype)) << ops[i]->describe();
  }
  // dl/dx = w: the truncating casts contribute nothing.
  WeightMap weights;
  weights["x"] = Tensor::fromFloats(TensorType(DType::F64, {4}), {0.3, -1.6, 2.2, 0.7});
  for (const char* p : {"z", "u", "unused"})
    weights[p] = Tensor::fromFloats(TensorType(DType::F64, {4}), {1.5, 2.5, -0.5, 0.1});
  weights["n"] = Tensor::fromInts(TensorType(DType::I64, {4}), {1, 2, 3, 4});
  auto out = interpret(*g, {}, weights, Precision::F64);
  ASSERT_TRUE(!!out) << llvm::toString(out.takeError());
  EXPECT_EQ((*out)[2].f, (std::vector<double>{0.5, -1.0, 2.0, 0.25}));
}

TEST(Autodiff, WarnsWhenTheLossSeesNoTrainableParam) {
  auto g = parseOk(R"(graph @g(%x: f64[4] @data) {
  %z = param "z" : f64[4]
  %zi = cast(%z) {to = "i64"} : i64[4]
  %zf = cast(%zi) {to = "f64"} : f64[4]
  %a = add(%x, %zf) : f64[4]
  %l = reduce_sum(%a) {keepdims = 0} : f64[]
  return %l
}
)");
  ASSERT_TRUE(g);
  std::vector<std::string> warnings;
  ASSERT_EQ(errorText(runPassesOn(*g, {"autodiff"}, &warnings)), "");
  EXPECT_EQ(g->outputs().size(), 1u);
  EXPECT_EQ(warnings, (std::vector<std::string>{
                          "autodiff: the loss of graph @g depends on no trainable param; no "
                          "gradients were produced"}));
}

TEST(GradCheck, TheCheckerCatchesAWrongGradient) {
  // d/dx sum(x * x) is 2x; @grad claims x.
  auto g = parseOk(R"(graph @g() {
  %x = param "x" : f64[3]
  %y = mul(%x, %x) : f64[3]
  %l = reduce_sum(%y) {keepdims = 0} : f64[]
  %bad = identity(%x) : f64[3]
  return %l, %bad @grad(%x)
}
)");
  ASSERT_TRUE(g);
  WeightMap w;
  w["x"] = Tensor::fromFloats(TensorType(DType::F64, {3}), {0.5, -1.0, 2.0});
  GradCheckOptions opts;
  opts.samplesPerParam = 3;
  auto checks = checkGradients(*g, {}, w, opts);
  ASSERT_TRUE(!!checks) << llvm::toString(checks.takeError());
  ASSERT_EQ(checks->size(), 1u);
  EXPECT_EQ((*checks)[0].checked, 3);
  EXPECT_NEAR((*checks)[0].worstRelError, 0.5, 1e-6);
}

// relu then a 2x2 stride-1 max pool on a param with exact kinks: relu
// inputs at 0 that are a window's maximum, and tied maxima. Finite
// differences there average two slopes and agree with no gradient rule.
constexpr const char* kKinkedGraph = R"(graph @g() {
  %x = param "x" : f64[1,1,4,4]
  %r = relu(%x) : f64[1,1,4,4]
  %p = max_pool2d(%r) {kernel = [2, 2], strides = [1, 1]} : f64[1,1,3,3]
  %c = constant() {value = [0.7, -1.3, 0.4, 1.1, -0.6, 0.9, -0.8, 0.5, 1.7]} : f64[1,1,3,3]
  %m = mul(%p, %c) : f64[1,1,3,3]
  %l = reduce_sum(%m) {keepdims = 0} : f64[]
  return %l
}
)";

WeightMap kinkedWeights() {
  WeightMap w;
  // Rows: a tie of 0.5 and 0.5; a 0 that is its windows' maximum; another
  // tie across rows (0.8); negative values whose windows' max is a relu 0.
  w["x"] = Tensor::fromFloats(TensorType(DType::F64, {1, 1, 4, 4}), {0.5, 0.5, -0.3, 0.0,  //
                                                                     0.2, 0.1, -0.2, -0.4, //
                                                                     0.8, -0.5, -0.7, 0.3, //
                                                                     0.8, -0.9, -0.1, -0.6});
  return w;
}

std::unique_ptr<Graph> kinkedGraphWithGradients() {
  auto g = parseOk(kKinkedGraph);
  if (!g)
    return nullptr;
  if (llvm::Error e = runPassesOn(*g, {"autodiff"})) {
    ADD_FAILURE() << llvm::toString(std::move(e));
    return nullptr;
  }
  return g;
}

TEST(GradCheck, KinksOfReluAndMaxPoolAreReportedNotFailed) {
  auto g = kinkedGraphWithGradients();
  ASSERT_TRUE(g);
  GradCheckOptions opts;
  opts.samplesPerParam = 16;
  for (uint64_t seed : {1, 2, 3, 4, 5}) {
    opts.seed = seed;
    auto checks = checkGradients(*g, {}, kinkedWeights(), opts);
    ASSERT_TRUE(!!checks) << llvm::toString(checks.takeError());
    ASSERT_EQ(checks->size(), 1u);
    const ParamGradCheck& c = (*checks)[0];
    EXPECT_EQ(c.checked, 16);
    // The two ties and the relu 0 (the negative elements in all-negative
    // windows sit where relu is flat: no kink).
    EXPECT_GE(c.kinks, 3) << "seed " << seed;
    EXPECT_EQ(c.unresolved, 0) << "seed " << seed;
    EXPECT_LE(c.worstRelError, opts.tolerance)
        << "seed " << seed << ": element " << c.worstIndex << " analytic " << c.analytic
        << " numeric " << c.numeric;
  }
}

TEST(GradCheck, AWrongReluRuleFailsAmongKinks) {
  // relu's gradient replaced by "pass dy through": wrong wherever x < 0.
  auto g = kinkedGraphWithGradients();
  ASSERT_TRUE(g);
  Op* reluGrad = nullptr;
  for (auto& op : g->ops())
    if (op->kind() == OpKind::ReluGrad)
      reluGrad = op.get();
  ASSERT_TRUE(reluGrad);
  reluGrad->result()->replaceAllUsesWith(reluGrad->operand(1));
  GradCheckOptions opts;
  opts.samplesPerParam = 16;
  auto checks = checkGradients(*g, {}, kinkedWeights(), opts);
  ASSERT_TRUE(!!checks) << llvm::toString(checks.takeError());
  ASSERT_EQ(checks->size(), 1u);
  const ParamGradCheck& c = (*checks)[0];
  EXPECT_GT(c.worstRelError, 0.5);
  EXPECT_FALSE(c.worstRedrawn) << "a smooth point disagrees: no re-draw needed";
  // The element at (1, 0) = 0.2 is no window's max after a tie-free look:
  // the worst is a negative element the wrong rule routes a gradient to.
  EXPECT_LT(kinkedWeights()["x"].f[static_cast<size_t>(c.worstIndex)], 0.0);
}

TEST(GradCheck, AGradientOffByAPermilleFailsAtKinksToo) {
  // Every element of the gradient scaled by 1.001: the kinked elements are
  // compared at re-drawn points, where the error shows as well.
  auto g = kinkedGraphWithGradients();
  ASSERT_TRUE(g);
  Value* grad = g->outputs()[1];
  Builder b(*g);
  b.setInsertionPointToEnd();
  Op* scale = b.create(OpKind::Constant, {}, {TensorType(DType::F64, {})},
                       {{"value", Attribute(std::vector<double>{1.001})}});
  Op* scaled = b.create(OpKind::Mul, {grad, scale->result()}, {grad->type()});
  g->setOutput(1, scaled->result());
  ASSERT_EQ(errorText(verifyGraph(*g)), "");
  GradCheckOptions opts;
  opts.samplesPerParam = 16;
  auto checks = checkGradients(*g, {}, kinkedWeights(), opts);
  ASSERT_TRUE(!!checks) << llvm::toString(checks.takeError());
  ASSERT_EQ(checks->size(), 1u);
  const ParamGradCheck& c = (*checks)[0];
  EXPECT_GT(c.kinks, 0);
  EXPECT_NEAR(c.worstRelError, 1e-3, 2e-4);
}

} // namespace
