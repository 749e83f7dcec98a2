//===- RuntimeTensorKernelTest.cpp - lwrt/cpu_tensor.h vs the interpreter -===//
//
// The kernels that compute values (elementwise, reductions, cast, fill,
// dropout, the optimizer updates), each on seeded random cases against the
// reference interpreter (RuntimeTensorKernelCase.h). The data-movement
// kernels are in RuntimeShapeKernelTest.cpp.
//
//===----------------------------------------------------------------------===//
#include "RuntimeTensorKernelCase.h"
#include "lwrt/bf16.h"
#include "lwrt/dropout.h"
#include "lwrt/f16.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>

namespace lwcc::test {
namespace {

using namespace kcase;

//===--- Elementwise -------------------------------------------------------===//

TEST(RuntimeTensorKernelTest, UnaryFloat) {
  using D = KCase::Dist;
  struct U {
    OpKind kind;
    D dist;
    bool (*fn)(const lwrt::TensorView&, const lwrt::TensorView&);
  };
  const U unaries[] = {
      {OpKind::Relu, D::Normal, rt::relu},   {OpKind::Sigmoid, D::Normal, rt::sigmoid},
      {OpKind::Tanh, D::Normal, rt::tanh},   {OpKind::Erf, D::Normal, rt::erf},
      {OpKind::Exp, D::Normal, rt::exp},     {OpKind::Log, D::Positive, rt::log},
      {OpKind::Sqrt, D::Positive, rt::sqrt}, {OpKind::Reciprocal, D::AwayFromZero, rt::reciprocal}};
  forCases(kFloats, [&](KCase& c) {
    Shape s = c.randShape(0, 4);
    for (const U& u : unaries)
      c.check(c.op(u.kind, {c.input(s, u.dist)}),
              [&](const Op&, const Views& in, const Views& out) { return u.fn(in[0], out[0]); });
    c.check(c.op(OpKind::LeakyRelu, {c.input(s)}, {{"alpha", c.uniform(0.0, 0.5)}}),
            [](const Op& op, const Views& in, const Views& out) {
              return rt::leakyRelu(in[0], out[0], {op.getFloat("alpha")});
            });
    double lo = c.uniform(-1.0, 0.0), hi = c.uniform(0.0, 1.0);
    std::vector<NamedAttr> clipAttrs;
    if (c.coin())
      clipAttrs = {{"min", lo}, {"max", hi}};
    else
      clipAttrs = {{"max", hi}};
    c.check(c.op(OpKind::Clip, {c.input(s)}, clipAttrs),
            [](const Op& op, const Views& in, const Views& out) {
              return rt::clip(in[0], out[0], {op.getFloat("min"), op.getFloat("max")});
            });
  });
}

TEST(RuntimeTensorKernelTest, UnaryNumeric) {
  forCases(kNumeric, [](KCase& c) {
    Shape s = c.randShape(0, 4);
    c.check(c.op(OpKind::Neg, {c.input(s)}),
            [](const Op&, const Views& in, const Views& out) { return rt::neg(in[0], out[0]); });
    c.check(c.op(OpKind::Abs, {c.input(s)}),
            [](const Op&, const Views& in, const Views& out) { return rt::abs(in[0], out[0]); });
    c.check(c.op(OpKind::Sign, {c.input(s)}),
            [](const Op&, const Views& in, const Views& out) { return rt::sign(in[0], out[0]); });
  });
}

TEST(RuntimeTensorKernelTest, Binary) {
  using D = KCase::Dist;
  struct B {
    OpKind kind;
    bool (*fn)(const lwrt::TensorView&, const lwrt::TensorView&, const lwrt::TensorView&);
  };
  const B binaries[] = {{OpKind::Add, rt::add},
                        {OpKind::Sub, rt::sub},
                        {OpKind::Mul, rt::mul},
                        {OpKind::Div, rt::div},
                        {OpKind::Pow, rt::pow}};
  forCases(kNumeric, [&](KCase& c) {
    for (const B& b : binaries) {
      if (b.kind == OpKind::Pow && !isFloat(c.dtype()))
        continue;
      for (int rep = 0; rep < 2; ++rep) {
        auto [sa, sb] = broadcastPair(c);
        Value* x = c.input(sa, b.kind == OpKind::Pow ? D::Positive : D::Normal);
        Value* y = c.input(sb, b.kind == OpKind::Div ? D::AwayFromZero : D::Normal);
        c.check(c.op(b.kind, {x, y}), [&](const Op&, const Views& in, const Views& out) {
          return b.fn(in[0], in[1], out[0]);
        });
      }
    }
    if (!isFloat(c.dtype())) { // integer division by zero is refused
      Value* x = c.input(Shape{3});
      Value* z = c.inputOf(Tensor::fromInts({c.dtype(), {3}}, {1, 0, 2}));
      c.expectRefused(c.op(OpKind::Div, {x, z}), [](const Op&, const Views& in, const Views& out) {
        return rt::div(in[0], in[1], out[0]);
      });
    }
  });
}

TEST(RuntimeTensorKernelTest, Backward) {
  using D = KCase::Dist;
  forCases(kFloats, [](KCase& c) {
    Shape s = c.randShape(0, 4);
    c.check(c.op(OpKind::ReluGrad, {c.input(s), c.input(s)}),
            [](const Op&, const Views& in, const Views& out) {
              return rt::reluGrad(in[0], in[1], out[0]);
            });
    c.check(c.op(OpKind::LeakyReluGrad, {c.input(s), c.input(s)}, {{"alpha", c.uniform(0, 0.3)}}),
            [](const Op& op, const Views& in, const Views& out) {
              return rt::leakyReluGrad(in[0], in[1], out[0], {op.getFloat("alpha")});
            });
    c.check(c.op(OpKind::SigmoidGrad, {c.input(s, D::Unit), c.input(s)}),
            [](const Op&, const Views& in, const Views& out) {
              return rt::sigmoidGrad(in[0], in[1], out[0]);
            });
    c.check(c.op(OpKind::TanhGrad, {c.input(s, D::NearOne), c.input(s)}),
            [](const Op&, const Views& in, const Views& out) {
              return rt::tanhGrad(in[0], in[1], out[0]);
            });
    c.check(c.op(OpKind::ClipGrad, {c.input(s), c.input(s)},
                 {{"min", c.uniform(-1, 0)}, {"max", c.uniform(0, 1)}}),
            [](const Op& op, const Views& in, const Views& out) {
              return rt::clipGrad(in[0], in[1], out[0], {op.getFloat("min"), op.getFloat("max")});
            });
  });
}

//===--- Reductions --------------------------------------------------------===//

TEST(RuntimeTensorKernelTest, Reduce) {
  forCases(kNumeric, [](KCase& c) {
    for (OpKind kind : {OpKind::ReduceMean, OpKind::ReduceSum})
      for (int rep = 0; rep < 3; ++rep) {
        Shape s = c.randShape(0, 4);
        int64_t rank = static_cast<int64_t>(s.size());
        std::vector<NamedAttr> attrs{{"keepdims", static_cast<int64_t>(c.coin())}};
        if (rep > 0) {
          Ints axes;
          for (int64_t d = 0; d < rank; ++d)
            if (c.coin())
              axes.push_back(c.spellAxis(d, rank));
          std::shuffle(axes.begin(), axes.end(), std::mt19937_64(rep));
          attrs.push_back({"axes", axes});
        }
        c.check(c.op(kind, {c.input(s)}, attrs),
                [](const Op& op, const Views& in, const Views& out) {
                  rt::ReduceParams p{optInts(op, "axes"), op.getInt("keepdims")};
                  return op.kind() == OpKind::ReduceMean ? rt::reduceMean(in[0], out[0], p)
                                                         : rt::reduceSum(in[0], out[0], p);
                });
      }
  });
}

//===--- Conversion and values ---------------------------------------------===//

TEST(RuntimeTensorKernelTest, Cast) {
  forCases(kAll, [](KCase& c) {
    for (DType to : kAll) {
      Shape s = c.randShape(0, 3);
      Value* x = c.input(s);
      if (isFloat(c.dtype()) && c.coin()) { // scaled, with exact zeros and integers
        Tensor t = Tensor::fromFloats({c.dtype(), s}, {});
        for (int64_t k = 0; k < t.type.numElements(); ++k)
          t.f.push_back(c.randInt(0, 3) == 0 ? c.randInt(-2, 2) : c.uniform(-1e4, 1e4));
        if (c.dtype() == DType::F32)
          for (double& v : t.f)
            v = static_cast<float>(v);
        x = c.inputOf(std::move(t));
      }
      c.check(c.op(OpKind::Cast, {x}, {{"to", std::string(dtypeName(to))}}),
              [](const Op&, const Views& in, const Views& out) { return rt::cast(in[0], out[0]); });
    }
  });
}

TEST(RuntimeTensorKernelTest, Fill) {
  forCases(kAll, [](KCase& c) {
    Shape s = c.randShape(0, 3);
    int64_t n = TensorType(DType::F32, s).numElements();
    bool splat = c.coin();
    std::vector<NamedAttr> attrs;
    if (isFloat(c.dtype())) {
      std::vector<double> v(splat ? 1 : n);
      for (double& x : v)
        x = c.uniform(-2, 2);
      attrs.push_back({"value", v});
    } else {
      Ints v(splat ? 1 : n);
      for (int64_t& x : v)
        x = c.dtype() == DType::Bool ? c.randInt(0, 1) : c.randInt(-100, 100);
      attrs.push_back({"ivalue", v});
    }
    c.check(c.constant({c.dtype(), s}, attrs), [](const Op& op, const Views&, const Views& out) {
      rt::FillParams p;
      if (op.hasAttr("value"))
        p.value = op.getFloats("value");
      if (op.hasAttr("ivalue"))
        p.ivalue = op.getInts("ivalue");
      return rt::fill(out[0], p);
    });
  });
}

//===--- Randomness and optimizers -----------------------------------------===//

lwrt::DropoutMaskParams dropoutParams(const Op& op) {
  lwrt::DropoutMaskParams p{op.getFloat("ratio"), op.getInt("seed"), {}, {}};
  if (op.hasAttr("whole_shape")) {
    p.whole_shape = op.getInts("whole_shape");
    p.offsets = op.getInts("offsets");
  }
  return p;
}

TEST(RuntimeTensorKernelTest, DropoutMaskBitIdentical) {
  forCases(kFloats, [](KCase& c) {
    for (int rep = 0; rep < 3; ++rep) {
      DType st = c.coin() ? DType::I64 : DType::I32;
      Value* step = c.inputOf(Tensor::fromInts({st, {}}, {c.randInt(0, 100000)}));
      double ratio = rep == 0 ? 0.0 : c.uniform(0.05, 0.95);
      int64_t seed = c.randInt(-1000000, 1000000);
      c.check(
          c.op(OpKind::DropoutMask, {step},
               {{"ratio", ratio},
                {"seed", seed},
                {"shape", Ints(c.randShape(0, 3, 6))},
                {"dtype", std::string(dtypeName(c.dtype()))}}),
          [](const Op& op, const Views& in, const Views& out) {
            return rt::dropoutMask(in[0], out[0], dropoutParams(op));
          },
          /*exact=*/true);
    }
  });
}

TEST(RuntimeTensorKernelTest, SgdUpdate) {
  forCases(kFloats, [](KCase& c) {
    for (int nesterov = 0; nesterov < 2; ++nesterov) {
      Shape s = c.randShape(0, 3);
      Value* lr = c.input(TensorType(c.coin() ? DType::F32 : DType::F64, {}), KCase::Dist::Unit);
      c.check(c.op(OpKind::SgdUpdate, {c.input(s), c.input(s), c.input(s), lr},
                   {{"momentum", c.uniform(0, 0.99)},
                    {"weight_decay", c.uniform(0, 0.01)},
                    {"nesterov", nesterov}},
                   2),
              [](const Op& op, const Views& in, const Views& out) {
                return rt::sgdUpdate(
                    in[0], in[1], in[2], in[3], nullptr, out[0], out[1],
                    {op.getFloat("momentum"), op.getFloat("weight_decay"), op.getInt("nesterov")});
              });
    }
  });
}

TEST(RuntimeTensorKernelTest, AdamUpdate) {
  using D = KCase::Dist;
  forCases(kFloats, [](KCase& c) {
    for (int decoupled = 0; decoupled < 2; ++decoupled) {
      Shape s = c.randShape(0, 3);
      Value* lr = c.input(TensorType(c.coin() ? DType::F32 : DType::F64, {}), D::Unit);
      Value* step = c.inputOf(Tensor::fromInts({DType::I64, {}}, {c.randInt(0, 50)}));
      c.check(c.op(OpKind::AdamUpdate,
                   {c.input(s), c.input(s), c.input(s), c.input(s, D::Positive), lr, step},
                   {{"beta1", c.uniform(0.8, 0.95)},
                    {"beta2", c.uniform(0.9, 0.999)},
                    {"weight_decay", c.uniform(0, 0.1)},
                    {"decoupled", decoupled}},
                   3),
              [](const Op& op, const Views& in, const Views& out) {
                rt::AdamParams p{op.getFloat("beta1"), op.getFloat("beta2"), op.getFloat("epsilon"),
                                 op.getFloat("weight_decay"), op.getInt("decoupled")};
                return rt::adamUpdate(in[0], in[1], in[2], in[3], in[4], in[5], nullptr, out[0],
                                      out[1], out[2], p);
              });
    }
  });
}

TEST(RuntimeTensorKernelTest, LrSchedule) {
  const char* kinds[] = {"constant", "step", "cosine"};
  forCases(std::array<DType, 1>{DType::F32}, [&](KCase& c) {
    for (int k = 0; k < 3; ++k)
      for (int rep = 0; rep < 4; ++rep) {
        int64_t warmup = c.coin() ? 0 : c.randInt(1, 10), total = c.randInt(1, 100);
        Value* step = c.inputOf(
            Tensor::fromInts({c.coin() ? DType::I64 : DType::I32, {}}, {c.randInt(0, 120)}));
        c.check(c.op(OpKind::LrSchedule, {step},
                     {{"kind", kinds[k]},
                      {"base_lr", c.uniform(0.001, 0.5)},
                      {"warmup_steps", warmup},
                      {"total_steps", total},
                      {"step_size", c.randInt(1, 30)},
                      {"gamma", c.uniform(0.1, 0.9)},
                      {"min_lr", c.uniform(0, 0.001)}}),
                [](const Op& op, const Views& in, const Views& out) {
                  const std::string& kind = op.getString("kind");
                  rt::LrScheduleParams p{kind == "step"     ? rt::LrScheduleKind::Step
                                         : kind == "cosine" ? rt::LrScheduleKind::Cosine
                                                            : rt::LrScheduleKind::Constant,
                                         op.getFloat("base_lr"),
                                         op.getInt("warmup_steps"),
                                         op.getInt("total_steps"),
                                         op.getInt("step_size"),
                                         op.getFloat("gamma"),
                                         op.getFloat("min_lr")};
                  return rt::lrSchedule(in[0], out[0], p);
                });
      }
  });
}

/// n seeded normal float32 values at a time for the update tests (their
/// magnitudes where `positive`), and float32 views of them.
struct RandomVectors {
  std::mt19937 rng;
  std::normal_distribution<float> normal{0.0f, 1.0f};
  int64_t n;
  RandomVectors(unsigned seed, int64_t count) : rng(seed), n(count) {}
  std::vector<float> fresh(bool positive) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v)
      x = positive ? std::fabs(normal(rng)) : normal(rng);
    return v;
  }
  lwrt::TensorView view(std::vector<float>& v) const {
    return lwrt::TensorView{v.data(), lwrt::DType::F32, {n}};
  }
};

/// The memory plan writes an update's new weight and state over the old
/// ones (MemoryPlan.h, kOverParam): the kernels must give the same bits
/// in place as into separate buffers.
TEST(RuntimeTensorKernelTest, UpdatesInPlaceEqualOutOfPlace) {
  RandomVectors r(4, 1000);
  const int64_t n = r.n;
  auto fresh = [&](bool positive = false) { return r.fresh(positive); };
  auto view = [&](std::vector<float>& v) { return r.view(v); };
  float lr = 0.05f;
  int64_t step = 6;
  lwrt::TensorView lrView{&lr, lwrt::DType::F32, {}}, stepView{&step, lwrt::DType::I64, {}};
  for (int nesterov = 0; nesterov < 2; ++nesterov) {
    std::vector<float> w = fresh(), g = fresh(), m = fresh();
    std::vector<float> wOut(n), mOut(n), wIn = w, mIn = m;
    lwrt::SgdParams p{0.9, 5e-4, nesterov};
    ASSERT_TRUE(
        rt::sgdUpdate(view(w), view(g), view(m), lrView, nullptr, view(wOut), view(mOut), p));
    ASSERT_TRUE(
        rt::sgdUpdate(view(wIn), view(g), view(mIn), lrView, nullptr, view(wIn), view(mIn), p));
    EXPECT_EQ(wIn, wOut);
    EXPECT_EQ(mIn, mOut);
  }
  for (int decoupled = 0; decoupled < 2; ++decoupled) {
    std::vector<float> w = fresh(), g = fresh(), m = fresh(), v = fresh(true);
    std::vector<float> wOut(n), mOut(n), vOut(n), wIn = w, mIn = m, vIn = v;
    lwrt::AdamParams p{0.9, 0.999, 1e-8, 0.01, decoupled};
    ASSERT_TRUE(rt::adamUpdate(view(w), view(g), view(m), view(v), lrView, stepView, nullptr,
                               view(wOut), view(mOut), view(vOut), p));
    ASSERT_TRUE(rt::adamUpdate(view(wIn), view(g), view(mIn), view(vIn), lrView, stepView, nullptr,
                               view(wIn), view(mIn), view(vIn), p));
    EXPECT_EQ(wIn, wOut);
    EXPECT_EQ(mIn, mOut);
    EXPECT_EQ(vIn, vOut);
  }
}

/// Mixed precision's update reads a float32 param's bf16 or fp16 gradient
/// itself (the fuse pass leaves the cast to float32 to it): each update,
/// alone and in a multi-tensor call that mixes gradient types, gives the
/// bits it gives on the gradient cast to float32 first. A 16-bit gradient
/// beside a float64 param is refused.
TEST(RuntimeTensorKernelTest, UpdatesRead16BitGradients) {
  RandomVectors r(11, 777);
  const int64_t n = r.n;
  auto fresh = [&](bool positive = false) { return r.fresh(positive); };
  auto view = [&](std::vector<float>& v) { return r.view(v); };
  float lr = 0.05f;
  int64_t step = 3;
  lwrt::TensorView lrView{&lr, lwrt::DType::F32, {}}, stepView{&step, lwrt::DType::I64, {}};
  for (lwrt::DType t : {lwrt::DType::BF16, lwrt::DType::F16}) {
    // The 16-bit gradient and its exact float32 widening.
    std::vector<float> g = fresh(), wide(n);
    std::vector<uint16_t> g16(n);
    for (int64_t k = 0; k < n; ++k) {
      g16[k] = t == lwrt::DType::BF16 ? lwrt::floatToBf16(g[k]) : lwrt::floatToF16(g[k]);
      wide[k] = t == lwrt::DType::BF16 ? lwrt::bf16ToFloat(g16[k]) : lwrt::f16ToFloat(g16[k]);
    }
    lwrt::TensorView narrow{g16.data(), t, {n}};
    {
      std::vector<float> w = fresh(), m = fresh(), w1(n), m1(n), w2(n), m2(n);
      lwrt::SgdParams p{0.9, 5e-4, 1};
      ASSERT_TRUE(rt::sgdUpdate(view(w), narrow, view(m), lrView, nullptr, view(w1), view(m1), p));
      ASSERT_TRUE(
          rt::sgdUpdate(view(w), view(wide), view(m), lrView, nullptr, view(w2), view(m2), p));
      EXPECT_EQ(w1, w2);
      EXPECT_EQ(m1, m2);
      // In one call beside a float32-gradient slot, as codegen groups them.
      std::vector<float> u = fresh(), um = fresh(), ug = fresh(), u1(n), um1(n), u2(n), um2(n);
      std::vector<float> w3(n), m3(n);
      ASSERT_TRUE(rt::sgdUpdateGroup({{view(w), narrow, view(m), view(w3), view(m3), p},
                                      {view(u), view(ug), view(um), view(u1), view(um1), p}},
                                     lrView));
      ASSERT_TRUE(
          rt::sgdUpdate(view(u), view(ug), view(um), lrView, nullptr, view(u2), view(um2), p));
      EXPECT_EQ(w3, w2);
      EXPECT_EQ(m3, m2);
      EXPECT_EQ(u1, u2);
      EXPECT_EQ(um1, um2);
    }
    {
      std::vector<float> w = fresh(), m = fresh(), v = fresh(true);
      std::vector<float> w1(n), m1(n), v1(n), w2(n), m2(n), v2(n), w3(n), m3(n), v3(n);
      lwrt::AdamParams p{0.9, 0.999, 1e-8, 0.01, 1};
      ASSERT_TRUE(rt::adamUpdate(view(w), narrow, view(m), view(v), lrView, stepView, nullptr,
                                 view(w1), view(m1), view(v1), p));
      ASSERT_TRUE(rt::adamUpdate(view(w), view(wide), view(m), view(v), lrView, stepView, nullptr,
                                 view(w2), view(m2), view(v2), p));
      ASSERT_TRUE(rt::adamUpdateGroup(
          {{view(w), narrow, view(m), view(v), view(w3), view(m3), view(v3), p}}, lrView,
          stepView));
      EXPECT_EQ(w1, w2);
      EXPECT_EQ(v1, v2);
      EXPECT_EQ(w3, w2);
      EXPECT_EQ(m3, m2);
    }
    // Beside float64 weights a 16-bit gradient is not an update's operand.
    std::vector<double> w64(n), m64(n);
    lwrt::TensorView w64v{w64.data(), lwrt::DType::F64, {n}},
        m64v{m64.data(), lwrt::DType::F64, {n}};
    EXPECT_FALSE(rt::sgdUpdate(w64v, narrow, m64v, lrView, nullptr, w64v, m64v, {0.9, 0.0, 0}));
  }
}

/// fp16's loss scaling skips a step whose gradients overflowed: an update
/// given a `finite` flag of 0 leaves its weight and state as they were
/// (into other buffers, or in place), and with 1 it is the plain update.
TEST(RuntimeTensorKernelTest, UpdatesSkipWhereNotFinite) {
  RandomVectors r(5, 300);
  const int64_t n = r.n;
  auto fresh = [&](bool positive = false) { return r.fresh(positive); };
  auto view = [&](std::vector<float>& v) { return r.view(v); };
  float lr = 0.05f;
  int64_t step = 2;
  uint8_t down = 0, up = 1;
  lwrt::TensorView lrView{&lr, lwrt::DType::F32, {}}, stepView{&step, lwrt::DType::I64, {}};
  lwrt::TensorView no{&down, lwrt::DType::Bool, {}}, yes{&up, lwrt::DType::Bool, {}};
  const lwrt::SgdParams sp{0.9, 5e-4, 0};
  const lwrt::AdamParams ap{0.9, 0.999, 1e-8, 0.01, 1};
  std::vector<float> w = fresh(), g = fresh(), m = fresh(), v = fresh(true);
  std::vector<float> w1(n), m1(n), v1(n), w2(n), m2(n), v2(n);
  ASSERT_TRUE(rt::sgdUpdate(view(w), view(g), view(m), lrView, &no, view(w1), view(m1), sp));
  EXPECT_EQ(w1, w);
  EXPECT_EQ(m1, m);
  ASSERT_TRUE(rt::sgdUpdate(view(w), view(g), view(m), lrView, &yes, view(w1), view(m1), sp));
  ASSERT_TRUE(rt::sgdUpdate(view(w), view(g), view(m), lrView, nullptr, view(w2), view(m2), sp));
  EXPECT_EQ(w1, w2);
  EXPECT_EQ(m1, m2);
  EXPECT_NE(w1, w);
  ASSERT_TRUE(rt::adamUpdate(view(w), view(g), view(m), view(v), lrView, stepView, &no, view(w1),
                             view(m1), view(v1), ap));
  EXPECT_EQ(w1, w);
  EXPECT_EQ(m1, m);
  EXPECT_EQ(v1, v);
  // In place, in one multi-tensor call: nothing moves.
  std::vector<float> wIn = w, mIn = m, vIn = v;
  ASSERT_TRUE(
      rt::sgdUpdateGroup({{view(wIn), view(g), view(mIn), view(wIn), view(mIn), sp}}, lrView, &no));
  ASSERT_TRUE(rt::adamUpdateGroup(
      {{view(wIn), view(g), view(mIn), view(vIn), view(wIn), view(mIn), view(vIn), ap}}, lrView,
      stepView, &no));
  EXPECT_EQ(wIn, w);
  EXPECT_EQ(mIn, m);
  EXPECT_EQ(vIn, v);
  // The flag is a bool scalar.
  EXPECT_FALSE(rt::sgdUpdate(view(w), view(g), view(m), lrView, &lrView, view(w1), view(m1), sp));
}

/// A bf16 or fp16 reduce_sum (a mixed-precision weight gradient summed
/// over the batch): each output the double sum of the widened inputs,
/// rounded through float32 to the type once, as the interpreter rounds it.
TEST(RuntimeTensorKernelTest, ReduceSum16Bit) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t rows = 37, cols = 5;
  for (lwrt::DType t : {lwrt::DType::BF16, lwrt::DType::F16}) {
    const bool bf16 = t == lwrt::DType::BF16;
    std::vector<uint16_t> x(rows * cols), y(cols, 0xffff);
    for (uint16_t& e : x)
      e = bf16 ? lwrt::floatToBf16(normal(rng)) : lwrt::floatToF16(normal(rng));
    lwrt::ReduceParams p;
    p.axes = std::vector<int64_t>{0};
    p.keepdims = 0;
    ASSERT_TRUE(rt::reduceSum(lwrt::TensorView{x.data(), t, {rows, cols}},
                              lwrt::TensorView{y.data(), t, {cols}}, p));
    for (int64_t c = 0; c < cols; ++c) {
      double sum = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const uint16_t e = x[static_cast<size_t>(r * cols + c)];
        sum += bf16 ? lwrt::bf16ToFloat(e) : lwrt::f16ToFloat(e);
      }
      const float f = static_cast<float>(sum);
      EXPECT_EQ(y[static_cast<size_t>(c)], bf16 ? lwrt::floatToBf16(f) : lwrt::floatToF16(f));
    }
  }
}

/// A mask split along n, c, h or w (rank 4), evenly and unevenly, and a
/// piece of a piece (two split dims): every piece, drawn by the parallel
/// rule's localize hook, the interpreter and the CPU kernel, holds the
/// whole mask's elements at its place.
TEST(RuntimeTensorKernelTest, DropoutMaskPiecesAreTheWholeMask) {
  const Ints whole = {5, 6, 7, 4};
  const double ratio = 0.4;
  const int64_t seed = 91, step = 17;
  Graph g;
  Builder b(g);
  Value* stepValue = g.addInput("step", TensorType(DType::I64, {}));
  auto mask = b.createInferred(
      OpKind::DropoutMask, {stepValue},
      {{"ratio", ratio}, {"seed", seed}, {"shape", whole}, {"dtype", std::string("f32")}});
  ASSERT_TRUE(!!mask) << llvm::toString(mask.takeError());
  Tensor stepTensor = Tensor::fromInts({DType::I64, {}}, {step});
  auto wholeMask = evaluateOp(**mask, {&stepTensor}, Precision::F64);
  ASSERT_TRUE(!!wholeMask) << llvm::toString(wholeMask.takeError());
  std::vector<int64_t> strides = kernels::stridesOf(whole);
  int64_t dropped = 0;
  for (int64_t k = 0; k < (*wholeMask)[0].size(); ++k)
    dropped += (*wholeMask)[0].f[k] == 0.0;
  ASSERT_GT(dropped, 0);
  ASSERT_LT(dropped, (*wholeMask)[0].size());

  // The piece of `global` along `dim` from `offset`, `size` long.
  auto pieceOf = [&](const Op& global, int64_t dim, int64_t offset, int64_t size) {
    Ints shape = global.result()->type().shape;
    shape[dim] = size;
    Op* local =
        b.create(OpKind::DropoutMask, {stepValue}, {TensorType(DType::F32, shape)}, global.attrs());
    global.info().localize(*local, global, dim, offset);
    return local;
  };
  // Checks a piece's mask, from the interpreter and the CPU kernel, against
  // the whole mask at its offsets.
  auto checkPiece = [&](const Op& piece, const std::string& what) {
    SCOPED_TRACE(what);
    const Ints& off = piece.getInts("offsets");
    EXPECT_EQ(piece.getInts("whole_shape"), whole);
    auto ref = evaluateOp(piece, {&stepTensor}, Precision::F64);
    ASSERT_TRUE(!!ref) << llvm::toString(ref.takeError());
    const Ints& shape = piece.result()->type().shape;
    std::vector<float> got(static_cast<size_t>((*ref)[0].size()));
    lwrt::TensorView out{got.data(), lwrt::DType::F32, shape};
    lwrt::TensorView stepView{&stepTensor.i[0], lwrt::DType::I64, {}};
    ASSERT_TRUE(rt::dropoutMask(stepView, out, dropoutParams(piece)));
    kernels::forEachIndex(shape, [&](const std::vector<int64_t>& idx, int64_t k) {
      int64_t w = 0;
      for (size_t d = 0; d < idx.size(); ++d)
        w += (idx[d] + off[d]) * strides[d];
      ASSERT_EQ((*ref)[0].f[k], (*wholeMask)[0].f[w]) << "interpreter, element " << k;
      ASSERT_EQ(got[k], static_cast<float>((*wholeMask)[0].f[w])) << "kernel, element " << k;
    });
  };
  for (int64_t dim = 0; dim < 4; ++dim) {
    // Even (2 pieces where the dim is even, else 1 + the rest) and uneven
    // pieces: sizes that cover the dim.
    std::vector<Ints> splits = {{whole[dim] / 2, whole[dim] - whole[dim] / 2},
                                {1, whole[dim] - 3, 2}};
    if (whole[dim] % 2 == 0)
      splits.push_back({whole[dim] / 2, whole[dim] / 2});
    for (const Ints& sizes : splits) {
      int64_t offset = 0;
      for (int64_t size : sizes) {
        Op* piece = pieceOf(**mask, dim, offset, size);
        checkPiece(*piece, "dim " + std::to_string(dim) + " piece at " + std::to_string(offset) +
                               " of " + std::to_string(size));
        // A piece of the piece, along the next dim: offsets in two dims.
        int64_t next = (dim + 1) % 4;
        Op* inner = pieceOf(*piece, next, 1, whole[next] - 2);
        checkPiece(*inner, "and along dim " + std::to_string(next) + " from 1");
        offset += size;
      }
    }
  }
  // A piece that does not fit in the whole mask is refused by both.
  Op* bad = pieceOf(**mask, 2, 5, 3);
  EXPECT_FALSE(!!evaluateOp(*bad, {&stepTensor}, Precision::F64));
  std::vector<float> out(5 * 6 * 3 * 4);
  lwrt::TensorView outView{out.data(), lwrt::DType::F32, {5, 6, 3, 4}};
  lwrt::TensorView stepView{&stepTensor.i[0], lwrt::DType::I64, {}};
  EXPECT_FALSE(rt::dropoutMask(stepView, outView, dropoutParams(*bad)));
}

// The RNG is one definition (lwrt/dropout.h) for the interpreter and both
// backends; its values are fixed, as checkpoints resume the masks' stream.
TEST(RuntimeTensorKernelTest, DropoutUniformIsFixed) {
  EXPECT_EQ(lwrt::dropoutUniform(7, 3, 0), 0x1.29921ca472d0bp-1);
  EXPECT_EQ(lwrt::dropoutUniform(7, 3, 1), 0x1.bd24ae025c182p-1);
  EXPECT_EQ(lwrt::dropoutUniform(7, 3, 12345), 0x1.cd450ce6f7dccp-2);
  for (int64_t k = 0; k < 1000; k += 7)
    EXPECT_EQ(kernels::dropoutUniform(-3 + k, k * 13, k), lwrt::dropoutUniform(-3 + k, k * 13, k));
}

/// An update that takes in gradient clipping's product (SgdParams and
/// AdamParams grad_scale: codegen folds mul(grad, clip_coef) into it) gives
/// the bits of the mul and the plain update, one by one and grouped.
TEST(RuntimeTensorKernelTest, UpdatesTakeTheClippingFactor) {
  RandomVectors r(7, 333);
  const int64_t n = r.n;
  auto view = [&](std::vector<float>& v) { return r.view(v); };
  float lr = 0.05f, factor = 0.4137f;
  int64_t step = 2;
  lwrt::TensorView lrView{&lr, lwrt::DType::F32, {}}, stepView{&step, lwrt::DType::I64, {}},
      factorView{&factor, lwrt::DType::F32, {}};
  std::vector<float> w = r.fresh(false), g = r.fresh(false), m = r.fresh(false), v = r.fresh(true),
                     clipped(n);
  ASSERT_TRUE(rt::mul(view(g), factorView, view(clipped)));
  {
    std::vector<float> w1(n), m1(n), w2(n), m2(n), w3(n), m3(n);
    lwrt::SgdParams plain{0.9, 5e-4, 0}, scaled = plain;
    scaled.grad_scale = &factor;
    ASSERT_TRUE(
        rt::sgdUpdate(view(w), view(clipped), view(m), lrView, nullptr, view(w1), view(m1), plain));
    ASSERT_TRUE(
        rt::sgdUpdate(view(w), view(g), view(m), lrView, nullptr, view(w2), view(m2), scaled));
    ASSERT_TRUE(
        rt::sgdUpdateGroup({{view(w), view(g), view(m), view(w3), view(m3), scaled}}, lrView));
    EXPECT_EQ(w1, w2);
    EXPECT_EQ(m1, m2);
    EXPECT_EQ(w1, w3);
    EXPECT_EQ(m1, m3);
  }
  {
    std::vector<float> w1(n), m1(n), v1(n), w2(n), m2(n), v2(n), w3(n), m3(n), v3(n);
    lwrt::AdamParams plain{0.9, 0.999, 1e-8, 0.01, 1}, scaled = plain;
    scaled.grad_scale = &factor;
    ASSERT_TRUE(rt::adamUpdate(view(w), view(clipped), view(m), view(v), lrView, stepView, nullptr,
                               view(w1), view(m1), view(v1), plain));
    ASSERT_TRUE(rt::adamUpdate(view(w), view(g), view(m), view(v), lrView, stepView, nullptr,
                               view(w2), view(m2), view(v2), scaled));
    ASSERT_TRUE(rt::adamUpdateGroup(
        {{view(w), view(g), view(m), view(v), view(w3), view(m3), view(v3), scaled}}, lrView,
        stepView));
    EXPECT_EQ(w1, w2);
    EXPECT_EQ(v1, v2);
    EXPECT_EQ(w1, w3);
    EXPECT_EQ(m1, m3);
    EXPECT_EQ(v1, v3);
  }
  EXPECT_NE(clipped, g); // the factor changes the gradient: the test sees it
}

} // namespace
} // namespace lwcc::test
