//===- Bf16Test.cpp - bf16 and fp16 rounding, casts, 16-bit convolutions --===//
//
// lwrt/bf16.h's rounding (to nearest, ties to even; overflow to infinity; a
// NaN stays NaN), the CPU cast kernel and the reference interpreter against
// it bit for bit, and the CPU kernels of the ops mixed precision runs in
// bf16 (conv2d, its two gradients, gemm) against the interpreter: the same
// bf16 result, or one bf16 step apart where float32 sums in another order
// land on the other side of a rounding boundary. lwrt/f16.h's rounding
// against exact arithmetic over every fp16 value and the boundaries between
// them, the cast kernel and the interpreter in fp16, and the all_finite
// kernel. Mixed precision's 16-bit activations leave the forward's values
// as they were, bit for bit.
//
//===----------------------------------------------------------------------===//
#include "lwrt/bf16.h"

#include "GradCheckCase.h"
#include "TestUtil.h"
#include "interp/Interpreter.h"
#include "lwrt/cpu_nn.h"
#include "lwrt/cpu_tensor.h"
#include "lwrt/f16.h"
#include "passes/Pass.h"

#include <cmath>
#include <cstring>
#include <gtest/gtest.h>
#include <limits>
#include <random>

namespace lwcc::test {
namespace {

namespace rt = lwrt::cpu;

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

TEST(Bf16Test, RoundsToNearestTiesToEven) {
  EXPECT_EQ(lwrt::floatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(lwrt::floatToBf16(floatOf(0x3F808000)), 0x3F80); // 1 + 2^-8: a tie, to even
  EXPECT_EQ(lwrt::floatToBf16(floatOf(0x3F818000)), 0x3F82); // a tie above an odd one: up
  EXPECT_EQ(lwrt::floatToBf16(floatOf(0x3F808001)), 0x3F81); // just above the tie
  EXPECT_EQ(lwrt::floatToBf16(floatOf(0x3F807FFF)), 0x3F80); // just below it
  EXPECT_EQ(lwrt::floatToBf16(-2.5f), 0xC020);
  EXPECT_EQ(lwrt::floatToBf16(-0.0f), 0x8000);
  EXPECT_EQ(lwrt::floatToBf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(lwrt::floatToBf16(std::numeric_limits<float>::max()), 0x7F80); // overflows
  EXPECT_EQ(lwrt::floatToBf16(std::numeric_limits<float>::denorm_min()), 0x0000);
  float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(lwrt::bf16ToFloat(lwrt::floatToBf16(nan))));
  EXPECT_TRUE(std::isnan(lwrt::bf16ToFloat(lwrt::floatToBf16(floatOf(0x7F800001))))); // signaling
  EXPECT_EQ(lwrt::bf16ToFloat(0x3F81), 1.0078125f);
  EXPECT_EQ(lwrt::roundToBf16(3.14159265f), 3.140625f);
}

/// Random floats over many magnitudes, and the special values.
std::vector<float> samples(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::max(),
                          floatOf(0x3F808000)};
  while (v.size() < n) {
    uint32_t u = static_cast<uint32_t>(rng());
    if ((u & 0x7F800000u) != 0x7F800000u) // no NaN or infinity at random
      v.push_back(floatOf(u));
  }
  return v;
}

/// The reference interpreter's cast of `x` to `to` (bf16 or f16).
std::vector<double> interpretedCast(const std::vector<float>& x, const char* to) {
  const int64_t n = static_cast<int64_t>(x.size());
  Graph g("cast");
  Builder b(g);
  Value* in = g.addInput("x", TensorType(DType::F32, {n}));
  auto op = b.createInferred(OpKind::Cast, {in}, {{"to", Attribute(std::string(to))}});
  EXPECT_TRUE(!!op) << llvm::toString(op.takeError());
  if (!op)
    return {};
  Tensor t(TensorType(DType::F32, {n}));
  for (int64_t k = 0; k < n; ++k)
    t.f[k] = x[k];
  auto want = evaluateOp(**op, {&t}, Precision::F32);
  EXPECT_TRUE(!!want) << llvm::toString(want.takeError());
  return want ? (*want)[0].f : std::vector<double>{};
}

TEST(Bf16Test, CastKernelAndInterpreterRoundAlike) {
  std::vector<float> x = samples(1, 4096);
  std::vector<uint16_t> h(x.size());
  std::vector<float> back(x.size());
  int64_t n = static_cast<int64_t>(x.size());
  lwrt::TensorView xv{x.data(), lwrt::DType::F32, {n}};
  lwrt::TensorView hv{h.data(), lwrt::DType::BF16, {n}};
  lwrt::TensorView bv{back.data(), lwrt::DType::F32, {n}};
  ASSERT_TRUE(rt::cast(xv, hv));
  ASSERT_TRUE(rt::cast(hv, bv));
  const std::vector<double> want = interpretedCast(x, "bf16");
  ASSERT_EQ(want.size(), x.size());
  for (int64_t k = 0; k < n; ++k) {
    ASSERT_EQ(h[k], lwrt::floatToBf16(x[k])) << "element " << k << ": " << x[k];
    ASSERT_EQ(bitsOf(back[k]), static_cast<uint32_t>(h[k]) << 16) << "element " << k;
    ASSERT_EQ(bitsOf(static_cast<float>(want[k])), bitsOf(back[k])) << "element " << k;
  }
}

/// bf16 values (random, rounded) in both forms: the runtime's bits and the
/// interpreter's doubles.
struct Bf16Data {
  std::vector<uint16_t> bits;
  Tensor tensor;
  lwrt::TensorView view;
  Bf16Data(const Shape& s, std::mt19937_64& rng) : tensor(TensorType(DType::BF16, s)) {
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    bits.resize(static_cast<size_t>(tensor.size()));
    for (size_t k = 0; k < bits.size(); ++k) {
      bits[k] = lwrt::floatToBf16(u(rng));
      tensor.f[k] = lwrt::bf16ToFloat(bits[k]);
    }
    view = lwrt::TensorView{bits.data(), lwrt::DType::BF16, s};
  }
};

/// The kernel's bf16 result against the interpreter's (float64 sums
/// rounded to float32, then to bf16): equal, or one bf16 step apart.
void expectClose(const std::vector<uint16_t>& got, const Tensor& want, const char* what) {
  int64_t apart = 0;
  for (size_t k = 0; k < got.size(); ++k) {
    uint16_t w = lwrt::floatToBf16(static_cast<float>(want.f[k]));
    int diff = std::abs(static_cast<int>(got[k]) - static_cast<int>(w));
    ASSERT_LE(diff, 1) << what << " element " << k << ": " << lwrt::bf16ToFloat(got[k]) << " vs "
                       << want.f[k];
    apart += diff;
  }
  EXPECT_LE(apart, static_cast<int64_t>(got.size()) / 20 + 1) << what;
}

TEST(Bf16Test, ConvolutionAndGemmKernelsMatchTheInterpreter) {
  std::mt19937_64 rng(7);
  Shape xs{2, 3, 7, 6}, ws{4, 3, 3, 3}, ys{2, 4, 5, 4};
  Bf16Data x(xs, rng), w(ws, rng), dy(ys, rng);
  Graph g("conv");
  Builder b(g);
  Value* xi = g.addInput("x", TensorType(DType::BF16, xs));
  Value* wi = g.addInput("w", TensorType(DType::BF16, ws));
  Value* dyi = g.addInput("dy", TensorType(DType::BF16, ys));
  std::vector<NamedAttr> conv = {{"strides", Attribute(std::vector<int64_t>{1, 1})},
                                 {"pads", Attribute(std::vector<int64_t>{0, 0, 0, 0})},
                                 {"dilations", Attribute(std::vector<int64_t>{1, 1})},
                                 {"group", Attribute(int64_t{1})}};
  auto fwd = b.createInferred(OpKind::Conv2d, {xi, wi}, conv);
  auto gi = conv, gf = conv;
  gi.push_back({"input_shape", Attribute(xs)});
  gf.push_back({"filter_shape", Attribute(ws)});
  auto gin = b.createInferred(OpKind::Conv2dGradInput, {dyi, wi}, gi);
  auto gfi = b.createInferred(OpKind::Conv2dGradFilter, {xi, dyi}, gf);
  ASSERT_TRUE(fwd && gin && gfi);
  ASSERT_EQ((*fwd)->result()->type().dtype, DType::BF16);
  lwrt::Conv2dParams p;
  std::vector<uint16_t> y(static_cast<size_t>(TensorType(DType::BF16, ys).numElements()));
  std::vector<uint16_t> dx(x.bits.size()), dw(w.bits.size());
  ASSERT_TRUE(rt::conv2d(x.view, w.view, nullptr, {y.data(), lwrt::DType::BF16, ys}, p));
  ASSERT_TRUE(rt::conv2dGradInput(dy.view, w.view, {dx.data(), lwrt::DType::BF16, xs}, p));
  ASSERT_TRUE(rt::conv2dGradFilter(x.view, dy.view, {dw.data(), lwrt::DType::BF16, ws}, p));
  auto wy = evaluateOp(**fwd, {&x.tensor, &w.tensor}, Precision::F32);
  auto wdx = evaluateOp(**gin, {&dy.tensor, &w.tensor}, Precision::F32);
  auto wdw = evaluateOp(**gfi, {&x.tensor, &dy.tensor}, Precision::F32);
  ASSERT_TRUE(wy && wdx && wdw);
  expectClose(y, (*wy)[0], "conv2d");
  expectClose(dx, (*wdx)[0], "conv2d_grad_input");
  expectClose(dw, (*wdw)[0], "conv2d_grad_filter");
  // A float32 view among bf16 ones is refused, not misread.
  std::vector<float> w32(w.bits.size());
  EXPECT_FALSE(rt::conv2d(x.view, {w32.data(), lwrt::DType::F32, ws}, nullptr,
                          {y.data(), lwrt::DType::BF16, ys}, p));

  // gemm with transB, as a linear layer's forward.
  Shape as{5, 9}, bs{6, 9};
  Bf16Data a(as, rng), bm(bs, rng);
  Value* ai = g.addInput("a", TensorType(DType::BF16, as));
  Value* bi = g.addInput("b", TensorType(DType::BF16, bs));
  auto gemm = b.createInferred(OpKind::Gemm, {ai, bi}, {{"transB", Attribute(int64_t{1})}});
  ASSERT_TRUE(!!gemm);
  std::vector<uint16_t> out(30);
  lwrt::GemmParams gp;
  gp.transB = 1;
  ASSERT_TRUE(rt::gemm(a.view, bm.view, nullptr, {out.data(), lwrt::DType::BF16, {5, 6}}, gp));
  auto wg = evaluateOp(**gemm, {&a.tensor, &bm.tensor}, Precision::F32);
  ASSERT_TRUE(!!wg);
  expectClose(out, (*wg)[0], "gemm");
}

TEST(F16Test, EveryHalfRoundTripsAndEveryMidpointTiesToEven) {
  // The fp16 values in order of magnitude: bits 0 .. 0x7bff (65504).
  for (uint32_t h = 0; h <= 0x7bffu; ++h) {
    const float f = lwrt::f16ToFloat(static_cast<uint16_t>(h));
    // Exact value from the encoding: subnormals m 2^-24, normals (1 + m/1024) 2^(e-15).
    const uint32_t e = h >> 10, m = h & 0x3ffu;
    const double want = e == 0 ? std::ldexp(static_cast<double>(m), -24)
                               : std::ldexp(1.0 + m / 1024.0, static_cast<int>(e) - 15);
    ASSERT_EQ(static_cast<double>(f), want) << "bits " << h;
    ASSERT_EQ(lwrt::floatToF16(f), h) << "bits " << h;
    ASSERT_EQ(lwrt::floatToF16(-f), h | 0x8000u) << "bits " << h;
    if (h == 0x7bffu)
      break;
    // The midpoint to the next value (exact in float32) goes to the even
    // one; a float32 step either side goes to the nearer.
    const float next = lwrt::f16ToFloat(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((static_cast<double>(f) + next) / 2);
    ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(f) + next) / 2);
    ASSERT_EQ(lwrt::floatToF16(mid), (h & 1u) ? h + 1 : h) << "midpoint above bits " << h;
    ASSERT_EQ(lwrt::floatToF16(std::nextafter(mid, 0.0f)), h) << "below the midpoint " << h;
    ASSERT_EQ(lwrt::floatToF16(std::nextafter(mid, 1e9f)), h + 1) << "above the midpoint " << h;
  }
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(lwrt::floatToF16(65519.996f), 0x7bff); // below the midpoint to 65536
  EXPECT_EQ(lwrt::floatToF16(65520.0f), 0x7c00);   // the midpoint: to even, infinity
  EXPECT_EQ(lwrt::floatToF16(1e10f), 0x7c00);
  EXPECT_EQ(lwrt::floatToF16(-inf), 0xfc00);
  EXPECT_EQ(lwrt::floatToF16(std::ldexp(1.0f, -25)), 0x0000); // half of 2^-24: to even, 0
  EXPECT_EQ(lwrt::floatToF16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(lwrt::floatToF16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(lwrt::floatToF16(-0.0f), 0x8000);
  EXPECT_EQ(lwrt::f16ToFloat(0x7c00), inf);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(lwrt::f16ToFloat(lwrt::floatToF16(nan))));
  EXPECT_TRUE(std::isnan(lwrt::f16ToFloat(lwrt::floatToF16(-nan))));
}

TEST(F16Test, CastKernelAndInterpreterRoundAlike) {
  std::vector<float> x = samples(2, 4096);
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> u(-70000.0f, 70000.0f);
  for (int k = 0; k < 1024; ++k) // fp16's own range, and past it
    x.push_back(u(rng) * (k % 2 ? 1.0f : std::ldexp(1.0f, -static_cast<int>(k % 40))));
  std::vector<uint16_t> h(x.size());
  std::vector<float> back(x.size());
  int64_t n = static_cast<int64_t>(x.size());
  ASSERT_TRUE(rt::cast({x.data(), lwrt::DType::F32, {n}}, {h.data(), lwrt::DType::F16, {n}}));
  ASSERT_TRUE(rt::cast({h.data(), lwrt::DType::F16, {n}}, {back.data(), lwrt::DType::F32, {n}}));
  const std::vector<double> want = interpretedCast(x, "f16");
  ASSERT_EQ(want.size(), x.size());
  for (int64_t k = 0; k < n; ++k) {
    ASSERT_EQ(h[k], lwrt::floatToF16(x[k])) << "element " << k << ": " << x[k];
    ASSERT_EQ(bitsOf(back[k]), bitsOf(lwrt::f16ToFloat(h[k]))) << "element " << k;
    ASSERT_EQ(bitsOf(static_cast<float>(want[k])), bitsOf(back[k])) << "element " << k;
  }
  // bf16 and fp16 do not convert into each other directly.
  std::vector<uint16_t> other(x.size());
  EXPECT_FALSE(rt::cast({h.data(), lwrt::DType::F16, {n}}, {other.data(), lwrt::DType::BF16, {n}}));
}

TEST(F16Test, AllFiniteSeesEveryOperand) {
  std::vector<float> a(100, 1.0f), c(7, -3.0f);
  std::vector<uint16_t> h(9, lwrt::floatToF16(2.0f));
  uint8_t flag = 7;
  auto run = [&] {
    std::vector<lwrt::TensorView> xs = {{a.data(), lwrt::DType::F32, {10, 10}},
                                        {h.data(), lwrt::DType::F16, {9}},
                                        {c.data(), lwrt::DType::F32, {7}}};
    EXPECT_TRUE(rt::allFinite(xs, {&flag, lwrt::DType::Bool, {}}, {}));
    return flag;
  };
  EXPECT_EQ(run(), 1);
  c[6] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(run(), 0);
  c[6] = 0;
  h[3] = 0x7c00; // fp16 infinity
  EXPECT_EQ(run(), 0);
  h[3] = 0;
  a[99] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(run(), 0);
  a[99] = std::numeric_limits<float>::max(); // large but finite
  EXPECT_EQ(run(), 1);
  // A non-bool result is refused.
  float wrong = 0;
  EXPECT_FALSE(
      rt::allFinite({{a.data(), lwrt::DType::F32, {100}}}, {&wrong, lwrt::DType::F32, {}}, {}));
}

} // namespace
} // namespace lwcc::test

namespace lwcc::test {
namespace {

/// A block with each op the 16-bit activations move through (relu, max
/// pool, concat, a residual add of two convolutions, a training batch
/// norm, flatten, a dropout of ratio 0.5) and the ones they stop at (bias
/// adds, a float32 reader, a dropout whose 1/(1-ratio) bf16 cannot hold,
/// the output).
constexpr const char* kActivationBlock = R"(
graph @g(%x: f32[2,3,8,8] @data) {
  %w1 = param "w1" : f32[4,3,3,3]
  %b1 = param "b1" : f32[4]
  %w2 = param "w2" : f32[4,3,3,3]
  %w3 = param "w3" : f32[8,8,3,3]
  %w4 = param "w4" : f32[8,8,3,3]
  %w5 = param "w5" : f32[8,8,3,3]
  %w6 = param "w6" : f32[8,8,3,3]
  %g = param "g" : f32[8]
  %bb = param "bb" : f32[8]
  %m = param "m" : f32[8]
  %v = param "v" : f32[8]
  %fc = param "fc" : f32[5,32]
  %fc2 = param "fc2" : f32[5,5]
  %c1 = conv2d(%x, %w1, %b1) {strides = [1, 1], pads = [1, 1, 1, 1], dilations = [1, 1], group = 1} : f32[2,4,8,8]
  %r1 = relu(%c1) : f32[2,4,8,8]
  %c2 = conv2d(%x, %w2) {strides = [1, 1], pads = [1, 1, 1, 1], dilations = [1, 1], group = 1} : f32[2,4,8,8]
  %r2 = relu(%c2) : f32[2,4,8,8]
  %mean = reduce_mean(%r2) {keepdims = 0} : f32[]
  %cat = concat(%r1, %r2) {axis = 1} : f32[2,8,8,8]
  %pool = max_pool2d(%cat) {kernel = [3, 3], strides = [2, 2], pads = [1, 1, 1, 1], dilations = [1, 1], ceil_mode = 0} : f32[2,8,4,4]
  %p = conv2d(%pool, %w3) {strides = [1, 1], pads = [1, 1, 1, 1], dilations = [1, 1], group = 1} : f32[2,8,4,4]
  %q = conv2d(%pool, %w4) {strides = [1, 1], pads = [1, 1, 1, 1], dilations = [1, 1], group = 1} : f32[2,8,4,4]
  %pa = avg_pool2d(%p) {kernel = [3, 3], strides = [1, 1], pads = [1, 1, 1, 1], ceil_mode = 0, count_include_pad = 0} : f32[2,8,4,4]
  %pc = conv2d(%pa, %w6) {strides = [1, 1], pads = [1, 1, 1, 1], dilations = [1, 1], group = 1} : f32[2,8,4,4]
  %sum = add(%pc, %q) : f32[2,8,4,4]
  %s = relu(%sum) : f32[2,8,4,4]
  %u = conv2d(%s, %w5) {strides = [1, 1], pads = [1, 1, 1, 1], dilations = [1, 1], group = 1} : f32[2,8,4,4]
  %bn = batch_norm(%u, %g, %bb, %m, %v) {epsilon = 1.0e-05, momentum = 0.9} : f32[2,8,4,4]
  %t = relu(%bn) : f32[2,8,4,4]
  %tp = max_pool2d(%t) {kernel = [2, 2], strides = [2, 2], pads = [0, 0, 0, 0], dilations = [1, 1], ceil_mode = 0} : f32[2,8,2,2]
  %flat = flatten(%tp) {axis = 1} : f32[2,32]
  %drop = dropout(%flat) {ratio = 0.5} : f32[2,32]
  %y = gemm(%drop, %fc) {transA = 0, transB = 1} : f32[2,5]
  %odd = dropout(%y) {ratio = 0.1} : f32[2,5]
  %z = gemm(%odd, %fc2) {transA = 0, transB = 1} : f32[2,5]
  return %z, %mean
}
)";

TEST(Bf16Test, SixteenBitActivationsKeepTheForwardBits) {
  for (const char* dtype : {"bf16", "fp16"}) {
    SCOPED_TRACE(dtype);
    auto low = parseOk(kActivationBlock), wide = parseOk(kActivationBlock);
    ASSERT_TRUE(low && wide);
    // Training batch norm (train-mode), as lwcc runs it.
    const std::string mp = std::string("mixed-precision=dtype=") + dtype;
    ASSERT_EQ(errorText(runPassesOn(*low, {"train-mode", mp})), "");
    ASSERT_EQ(errorText(runPassesOn(*wide, {"train-mode", mp + ",activations=f32"})), "");
    // The activations between the layers are 16-bit in one and float32 in
    // the other.
    auto count16 = [](const Graph& g, OpKind kind) {
      int n = 0;
      for (const auto& op : g.ops())
        n += op->kind() == kind && op->result()->type().dtype != DType::F32;
      return n;
    };
    // r1, s and t (not r2: reduce_mean reads it in float32, so the concat
    // casts it), the concat, both max pools, the average pool of a
    // convolution's result, the residual add (not the bias add), the batch
    // norm, the flatten.
    EXPECT_EQ(count16(*low, OpKind::Relu), 3) << printGraph(*low);
    EXPECT_EQ(count16(*low, OpKind::Concat), 1);
    EXPECT_EQ(count16(*low, OpKind::MaxPool2d), 2);
    EXPECT_EQ(count16(*low, OpKind::AvgPool2d), 1);
    EXPECT_EQ(count16(*low, OpKind::Add), 1);
    EXPECT_EQ(count16(*low, OpKind::Flatten), 1);
    EXPECT_EQ(count16(*low, OpKind::BatchNormTrain), 1);
    EXPECT_EQ(count16(*low, OpKind::Mul), 1); // the dropout of ratio 0.5, not 0.1's
    EXPECT_EQ(count16(*low, OpKind::DropoutMask), 1);
    EXPECT_EQ(count16(*wide, OpKind::Relu) + count16(*wide, OpKind::Concat) +
                  count16(*wide, OpKind::MaxPool2d) + count16(*wide, OpKind::AvgPool2d) +
                  count16(*wide, OpKind::Add) + count16(*wide, OpKind::BatchNormTrain) +
                  count16(*wide, OpKind::Mul),
              0);
    std::mt19937_64 rng(11);
    std::normal_distribution<double> normal(0.0, 1.0);
    auto random = [&](const TensorType& t) {
      std::vector<double> v(static_cast<size_t>(t.numElements()));
      for (double& e : v)
        e = normal(rng);
      return Tensor::fromFloats(t, std::move(v));
    };
    WeightMap weights;
    for (const auto& prm : low->params()) {
      if (!isFloat(prm->type().dtype))
        continue; // the step counter: zeros
      Tensor t = random(prm->type());
      if (prm->name() == "v")
        for (double& e : t.f)
          e = std::fabs(e) + 0.5; // a variance
      weights[prm->paramName()] = t;
    }
    std::vector<Tensor> inputs{random(low->input(0)->type())};
    WeightMap stateA = weights, stateB = weights;
    auto a = runStep(*low, inputs, stateA), b = runStep(*wide, inputs, stateB);
    ASSERT_TRUE(a && b) << (a ? "" : llvm::toString(a.takeError()));
    // The running statistics too.
    for (const char* stat : {"m", "v"})
      for (size_t e = 0; e < stateA.at(stat).f.size(); ++e)
        ASSERT_EQ(stateA.at(stat).f[e], stateB.at(stat).f[e]) << stat << " element " << e;
    ASSERT_EQ(a->size(), 2u);
    // Rounding commutes with what moved (and a sum of two 16-bit values
    // rounds alike either way): every bit of both outputs agrees.
    for (size_t k = 0; k < a->size(); ++k) {
      ASSERT_EQ((*a)[k].type, (*b)[k].type);
      for (size_t e = 0; e < (*a)[k].f.size(); ++e)
        ASSERT_EQ((*a)[k].f[e], (*b)[k].f[e]) << "output " << k << " element " << e;
    }
  }
}

} // namespace
} // namespace lwcc::test
