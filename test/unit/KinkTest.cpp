//===- KinkTest.cpp - Gradients at exactly the kink, as PyTorch's ---------===//
//
// Where an activation or pooling op is not differentiable, a framework
// picks a gradient; a network that puts values exactly there (a batch norm
// initialized to zero before a LeakyReLU, ReLU6 saturating at 0, tied
// maxima) trains like PyTorch only with PyTorch's pick. Each case computes
// the gradient of sum(op(x)) at points on the kink with autodiff and the
// reference interpreter in float64, and with the CPU backend's backward
// kernel, and compares both with what PyTorch 2.15's backward computes in
// float64 there (tools/torch_check/kinks.py prints those values). The CUDA
// kernels compute with the same functions (lwrt/activation_math.h; max
// pooling's first maximum of a window) but need a GPU to run.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"
#include "interp/Interpreter.h"
#include "lwrt/cpu_activation.h"
#include "lwrt/cpu_nn.h"
#include "lwrt/cpu_tensor.h"
#include "plan/Pipelines.h"

#include <functional>
#include <gtest/gtest.h>

namespace lwcc::test {
namespace {

namespace rt = lwrt::cpu;
using Values = std::vector<double>;
using Ints = std::vector<int64_t>;

/// An operand of the op: a float64 tensor; the first one is differentiated.
struct Arg {
  Shape shape;
  Values values;
};

/// d sum(op(args...)) / d args[which] by autodiff and the interpreter (f64).
Values interpreterGrad(OpKind kind, const std::vector<Arg>& args, std::vector<NamedAttr> attrs = {},
                       size_t which = 0) {
  Graph g("kink");
  Builder b(g);
  WeightMap w;
  std::vector<Value*> operands;
  for (size_t k = 0; k < args.size(); ++k) {
    std::string name = "p";
    name += std::to_string(k);
    TensorType t(DType::F64, args[k].shape);
    operands.push_back(g.addParam(name, name, t));
    w[name] = Tensor::fromFloats(t, args[k].values);
  }
  auto op = b.createInferred(kind, operands, std::move(attrs));
  EXPECT_TRUE(!!op) << (op ? "" : llvm::toString(op.takeError()));
  if (!op)
    return {};
  auto sum = b.createInferred(OpKind::ReduceSum, {(*op)->result()}, {{"keepdims", int64_t{0}}});
  EXPECT_TRUE(!!sum);
  g.addOutput((*sum)->result());
  auto pipeline = buildPipeline(std::vector<std::string>{"autodiff"});
  EXPECT_TRUE(!!pipeline);
  PassContext ctx;
  EXPECT_EQ(errorText(runPipeline(g, *pipeline, ctx)), "");
  auto out = interpret(g, {}, w, Precision::F64);
  EXPECT_TRUE(!!out) << (out ? "" : llvm::toString(out.takeError()));
  if (!out)
    return {};
  // Outputs: the loss, then the gradient of each param in order.
  return (*out)[1 + which].f;
}

lwrt::TensorView view(Values& v, const Shape& s) {
  return lwrt::TensorView{v.data(), lwrt::DType::F64, s};
}

/// The CPU backward kernel of a unary op: dx for dy = 1 at the points.
Values
cpuGrad(const Values& x,
        const std::function<bool(lwrt::TensorView, lwrt::TensorView, lwrt::TensorView)>& fn) {
  Shape s{static_cast<int64_t>(x.size())};
  Values xs = x, dy(x.size(), 1.0), dx(x.size(), -7.0);
  EXPECT_TRUE(fn(view(xs, s), view(dy, s), view(dx, s)));
  return dx;
}

void expectValues(const Values& got, const Values& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < want.size(); ++k)
    EXPECT_NEAR(got[k], want[k], 1e-12) << what << " element " << k;
}

/// Checks a unary activation at the points: interpreter and CPU kernel.
void checkUnary(
    OpKind kind, std::vector<NamedAttr> attrs, const Values& x, const Values& want,
    const std::function<bool(lwrt::TensorView, lwrt::TensorView, lwrt::TensorView)>& k) {
  Shape s{static_cast<int64_t>(x.size())};
  expectValues(interpreterGrad(kind, {{s, x}}, attrs), want, "interpreter");
  expectValues(cpuGrad(x, k), want, "CPU kernel");
}

TEST(Kink, Relu) {
  // y = 0 at x = 0: relu_grad reads y > 0.
  Values x = {0.0, 1.0, -1.0};
  expectValues(interpreterGrad(OpKind::Relu, {{{3}, x}}), {0, 1, 0}, "interpreter");
  Values y = {0.0, 1.0, 0.0};
  expectValues(cpuGrad(y, [](auto a, auto b, auto c) { return rt::reluGrad(a, b, c); }), {0, 1, 0},
               "CPU kernel");
}

TEST(Kink, LeakyReluPassesItsSlopeAtZero) {
  checkUnary(OpKind::LeakyRelu, {{"alpha", 0.1}}, {0.0, 2.0, -2.0}, {0.1, 1.0, 0.1},
             [](auto a, auto b, auto c) { return rt::leakyReluGrad(a, b, c, {0.1}); });
}

TEST(Kink, ClipPassesNothingAtItsBounds) {
  // nn.ReLU6 (hardtanh) and torch.clamp with scalar bounds agree.
  checkUnary(OpKind::Clip, {{"min", 0.0}, {"max", 6.0}}, {0.0, 6.0, 3.0, -1.0, 7.0},
             {0, 0, 1, 0, 0}, [](auto a, auto b, auto c) {
               return rt::clipGrad(a, b, c, {0.0, 6.0});
             });
  checkUnary(OpKind::Clip, {{"max", 6.0}}, {6.0, 5.0, -1e30}, {0, 1, 1},
             [](auto a, auto b, auto c) {
               return rt::clipGrad(a, b, c, {-std::numeric_limits<double>::infinity(), 6.0});
             });
}

TEST(Kink, HardSwish) {
  checkUnary(OpKind::HardSwish, {}, {-3.0, 3.0, 0.0, -4.0, 4.0}, {0.0, 1.0, 0.5, 0.0, 1.0},
             [](auto a, auto b, auto c) { return rt::hardSwishGrad(a, b, c, {}); });
}

TEST(Kink, HardSigmoidPassesNothingAtTheEndsOfItsRamp) {
  // Inside the ramp PyTorch's float64 backward multiplies by float32(1/6)
  // (0.1666666716...), a rounding of its own; lwcc by alpha, 1/6 here.
  checkUnary(OpKind::HardSigmoid, {{"alpha", 1.0 / 6.0}, {"beta", 0.5}}, {-3.0, 3.0, 0.0},
             {0.0, 0.0, 1.0 / 6.0}, [](auto a, auto b, auto c) {
               return rt::hardSigmoidGrad(a, b, c, {1.0 / 6.0, 0.5});
             });
}

TEST(Kink, Abs) {
  // abs's gradient is dy * sign(x): sign(0) = 0.
  expectValues(interpreterGrad(OpKind::Abs, {{{3}, {0.0, 2.0, -2.0}}}), {0, 1, -1}, "interpreter");
  Values x = {0.0, 2.0, -2.0}, s(3, 9.0);
  ASSERT_TRUE(rt::sign(view(x, {3}), view(s, {3})));
  expectValues(s, {0, 1, -1}, "CPU sign kernel");
}

TEST(Kink, MaxAndMinSplitTiesInHalves) {
  for (OpKind kind : {OpKind::Max, OpKind::Min}) {
    std::vector<Arg> args = {{{3}, {0.0, 1.0, -1.0}}, {{3}, {0.0, 0.0, 0.0}}};
    bool isMax = kind == OpKind::Max;
    Values wantA = {0.5, isMax ? 1.0 : 0.0, isMax ? 0.0 : 1.0};
    Values wantB = {0.5, isMax ? 0.0 : 1.0, isMax ? 1.0 : 0.0};
    expectValues(interpreterGrad(kind, args, {}, 0), wantA, "interpreter, a");
    expectValues(interpreterGrad(kind, args, {}, 1), wantB, "interpreter, b");
    Values a = args[0].values, b = args[1].values, dy(3, 1.0), da(3), db(3);
    auto fn = isMax ? rt::maximumGrad : rt::minimumGrad;
    ASSERT_TRUE(fn(view(a, {3}), view(b, {3}), view(dy, {3}), view(da, {3}), view(db, {3})));
    expectValues(da, wantA, "CPU kernel, a");
    expectValues(db, wantB, "CPU kernel, b");
  }
}

TEST(Kink, MaxPoolGivesATieToItsFirstMaximum) {
  // PyTorch: the first maximum of each window in row-major order; padding
  // never wins.
  struct C {
    Shape x;
    Ints kernel, strides, pads;
    Values xv, want;
  };
  const C cases[] = {
      {{1, 1, 2, 2}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1, 1, 1}, {1, 0, 0, 0}},
      {{1, 1, 3, 3}, {3, 3}, {1, 1}, {1, 1, 1, 1}, Values(9, 1.0), {4, 2, 0, 2, 1, 0, 0, 0, 0}},
      {{1, 1, 3, 3}, {2, 2}, {2, 2}, {1, 1, 1, 1}, Values(9, -1.0), {1, 1, 0, 1, 1, 0, 0, 0, 0}},
  };
  for (const C& c : cases) {
    std::vector<NamedAttr> attrs = {{"kernel", c.kernel}, {"strides", c.strides}, {"pads", c.pads}};
    expectValues(interpreterGrad(OpKind::MaxPool2d, {{c.x, c.xv}}, attrs), c.want, "interpreter");
    lwrt::MaxPool2dParams p;
    for (int k = 0; k < 2; ++k) {
      p.kernel[k] = c.kernel[k];
      p.strides[k] = c.strides[k];
    }
    for (int k = 0; k < 4; ++k)
      p.pads[k] = c.pads[k];
    int64_t oh = (c.x[2] + c.pads[0] + c.pads[2] - c.kernel[0]) / c.strides[0] + 1;
    int64_t ow = (c.x[3] + c.pads[1] + c.pads[3] - c.kernel[1]) / c.strides[1] + 1;
    Shape ys = {1, 1, oh, ow};
    Values x = c.xv, dy(static_cast<size_t>(oh * ow), 1.0), dx(c.xv.size(), -7.0);
    ASSERT_TRUE(rt::maxPool2dGrad(view(x, c.x), view(dy, ys), view(dx, c.x), p));
    expectValues(dx, c.want, "CPU kernel");
  }
}

TEST(Kink, ExponentialLinearUnitsTakeTheirNegativeBranchAtZero) {
  checkUnary(OpKind::Elu, {{"alpha", 0.5}}, {0.0}, {0.5},
             [](auto a, auto b, auto c) { return rt::eluGrad(a, b, c, {0.5}); });
  constexpr double kAlpha = 1.6732632423543772848, kGamma = 1.0507009873554804934;
  checkUnary(OpKind::Selu, {}, {0.0}, {1.7580993408473766}, [&](auto a, auto b, auto c) {
    return rt::seluGrad(a, b, c, {kAlpha, 0.0, kGamma});
  });
  checkUnary(OpKind::Celu, {{"alpha", 0.5}}, {0.0}, {1.0},
             [](auto a, auto b, auto c) { return rt::celuGrad(a, b, c, {0.5}); });
}

TEST(Kink, ThresholdedReluPassesNothingAtItsThreshold) {
  checkUnary(OpKind::ThresholdedRelu, {{"alpha", 1.0}}, {1.0, 1.5, 0.5}, {0.0, 1.0, 0.0},
             [](auto a, auto b, auto c) { return rt::thresholdedReluGrad(a, b, c, {1.0}); });
}

TEST(Kink, PReluPassesItsSlopeAtZero) {
  std::vector<Arg> args = {{{2}, {0.0, -1.0}}, {{1}, {0.25}}};
  expectValues(interpreterGrad(OpKind::PRelu, args, {}, 0), {0.25, 0.25}, "interpreter, x");
  expectValues(interpreterGrad(OpKind::PRelu, args, {}, 1), {-1.0}, "interpreter, slope");
  Values x = args[0].values, s = args[1].values, dy(2, 1.0), dx(2), ds(2);
  ASSERT_TRUE(
      rt::preluGrad(view(x, {2}), view(s, {1}), view(dy, {2}), view(dx, {2}), view(ds, {2})));
  expectValues(dx, {0.25, 0.25}, "CPU kernel, x");
  expectValues(ds, {0.0, -1.0}, "CPU kernel, slope (before the sum)");
}

TEST(Kink, SmoothActivationsAtZero) {
  // No kink; PyTorch's values as a check of the formulas.
  checkUnary(OpKind::Softplus, {}, {0.0}, {0.5},
             [](auto a, auto b, auto c) { return rt::softplusGrad(a, b, c, {}); });
  checkUnary(OpKind::Mish, {}, {0.0}, {0.6},
             [](auto a, auto b, auto c) { return rt::mishGrad(a, b, c, {}); });
  checkUnary(OpKind::Softsign, {}, {0.0}, {1.0},
             [](auto a, auto b, auto c) { return rt::softsignGrad(a, b, c, {}); });
}

} // namespace
} // namespace lwcc::test
