// The CPU kernels that take oneDNN's nChw8c (lwrt::Layout::NChw8c) give, on
// blocked views, what they give on row-major ones: the same bits for lwcc's
// own kernels (each channel summed in the same order), the same values to
// rounding for the convolutions; and the kernels that do not take it refuse
// it.
#include "lwrt/cpu_nn.h"
#include "lwrt/cpu_tensor.h"

#include <cmath>
#include <gtest/gtest.h>
#include <random>
#include <vector>

namespace {

using lwrt::DType;
using lwrt::Layout;
using lwrt::TensorView;
using Ints = std::vector<int64_t>;

/// A float tensor in both layouts.
struct Pair {
  Ints shape;
  std::vector<float> plain, blocked;
  Pair(Ints s, uint64_t seed) : shape(std::move(s)) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    plain.resize(static_cast<size_t>(n));
    blocked.resize(static_cast<size_t>(n));
    if (seed) {
      std::mt19937_64 rng(seed);
      std::normal_distribution<float> normal(0.f, 1.f);
      for (float& v : plain)
        v = normal(rng);
      block();
    }
  }
  /// Offset of (n, c, q) in nChw8c.
  int64_t at(int64_t n, int64_t c, int64_t q) const {
    return (n * shape[1] + c - c % 8) * shape[2] * shape[3] + q * 8 + c % 8;
  }
  void block() { move(true); }
  void unblock() { move(false); }
  void move(bool toBlocked) {
    const int64_t hw = shape[2] * shape[3];
    for (int64_t n = 0; n < shape[0]; ++n)
      for (int64_t c = 0; c < shape[1]; ++c)
        for (int64_t q = 0; q < hw; ++q) {
          float& p = plain[static_cast<size_t>((n * shape[1] + c) * hw + q)];
          float& b = blocked[static_cast<size_t>(at(n, c, q))];
          (toBlocked ? b : p) = toBlocked ? p : b;
        }
  }
  TensorView rowMajor() { return TensorView{plain.data(), DType::F32, shape}; }
  TensorView nchw8c() { return TensorView{blocked.data(), DType::F32, shape, Layout::NChw8c}; }
  /// The blocked values, row-major.
  std::vector<float> blockedAsPlain() {
    std::vector<float> saved = plain;
    unblock();
    std::swap(saved, plain);
    return saved;
  }
};

/// A row-major float vector (scale, bias, statistics).
struct Vec {
  std::vector<float> v;
  explicit Vec(int64_t n, uint64_t seed = 0) : v(static_cast<size_t>(n), 0.f) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(0.5f, 1.5f);
    if (seed)
      for (float& x : v)
        x = u(rng);
  }
  TensorView view() { return TensorView{v.data(), DType::F32, {static_cast<int64_t>(v.size())}}; }
};

const Ints kAct{3, 16, 7, 9};

TEST(RuntimeLayout, OwnKernelsGiveTheSameBitsInNChw8c) {
  using namespace lwrt::cpu;
  {
    Pair x(kAct, 1), y(kAct, 0);
    ASSERT_TRUE(relu(x.rowMajor(), y.rowMajor()));
    ASSERT_TRUE(relu(x.nchw8c(), y.nchw8c()));
    EXPECT_TRUE(y.blockedAsPlain() == y.plain) << "relu";
  }
  {
    Pair a(kAct, 2), b(kAct, 3), y(kAct, 0);
    ASSERT_TRUE(addAct(a.rowMajor(), b.rowMajor(), y.rowMajor(), Activation{Activation::Relu}));
    ASSERT_TRUE(addAct(a.nchw8c(), b.nchw8c(), y.nchw8c(), Activation{Activation::Relu}));
    EXPECT_TRUE(y.blockedAsPlain() == y.plain) << "addAct";
  }
  {
    Pair x(kAct, 4), y({3, 16, 4, 5}, 0), dy({3, 16, 4, 5}, 5), dx(kAct, 0);
    MaxPool2dParams p{{3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 0};
    ASSERT_TRUE(maxPool2d(x.rowMajor(), y.rowMajor(), p));
    ASSERT_TRUE(maxPool2d(x.nchw8c(), y.nchw8c(), p));
    EXPECT_TRUE(y.blockedAsPlain() == y.plain) << "max_pool2d";
    ASSERT_TRUE(maxPool2dGrad(x.rowMajor(), dy.rowMajor(), dx.rowMajor(), p));
    ASSERT_TRUE(maxPool2dGrad(x.nchw8c(), dy.nchw8c(), dx.nchw8c(), p));
    EXPECT_TRUE(dx.blockedAsPlain() == dx.plain) << "max_pool2d_grad";
  }
  {
    Pair x(kAct, 6), y(kAct, 0), dy(kAct, 7), dx(kAct, 0);
    Vec s(16, 8), b(16, 9), m(16), v(16), m2(16), v2(16), ds(16), db(16), ds2(16), db2(16);
    ASSERT_TRUE(batchNormTrainAct(x.rowMajor(), s.view(), b.view(), y.rowMajor(), m.view(),
                                  v.view(), {}, Activation{Activation::Clip, 0.0, 1.0}));
    ASSERT_TRUE(batchNormTrainAct(x.nchw8c(), s.view(), b.view(), y.nchw8c(), m2.view(), v2.view(),
                                  {}, Activation{Activation::Clip, 0.0, 1.0}));
    EXPECT_TRUE(y.blockedAsPlain() == y.plain) << "batch_norm_train";
    EXPECT_TRUE(m.v == m2.v && v.v == v2.v) << "batch_norm_train statistics";
    ASSERT_TRUE(batchNormGrad(x.rowMajor(), s.view(), m.view(), v.view(), dy.rowMajor(),
                              dx.rowMajor(), ds.view(), db.view(), {}));
    ASSERT_TRUE(batchNormGrad(x.nchw8c(), s.view(), m.view(), v.view(), dy.nchw8c(), dx.nchw8c(),
                              ds2.view(), db2.view(), {}));
    EXPECT_TRUE(dx.blockedAsPlain() == dx.plain) << "batch_norm_grad";
    EXPECT_TRUE(ds.v == ds2.v && db.v == db2.v) << "batch_norm_grad scale and bias";
    ASSERT_TRUE(batchNorm(x.rowMajor(), s.view(), b.view(), m.view(), v.view(), y.rowMajor(), {}));
    ASSERT_TRUE(batchNorm(x.nchw8c(), s.view(), b.view(), m.view(), v.view(), y.nchw8c(), {}));
    EXPECT_TRUE(y.blockedAsPlain() == y.plain) << "batch_norm";
  }
  {
    Pair x(kAct, 10);
    Vec a(16), b(16), g1(3 * 16), g2(3 * 16);
    ReduceParams axes{Ints{0, 2, 3}, 0};
    ASSERT_TRUE(reduceSum(x.rowMajor(), a.view(), axes));
    ASSERT_TRUE(reduceSum(x.nchw8c(), b.view(), axes));
    EXPECT_TRUE(a.v == b.v) << "reduce_sum over n, h, w";
    TensorView p1{g1.v.data(), DType::F32, {3, 16, 1, 1}},
        p2{g2.v.data(), DType::F32, {3, 16, 1, 1}};
    ASSERT_TRUE(globalAvgPool(x.rowMajor(), p1));
    ASSERT_TRUE(globalAvgPool(x.nchw8c(), p2));
    EXPECT_TRUE(g1.v == g2.v) << "global_avg_pool";
  }
  {
    Pair a({3, 8, 7, 9}, 11), b(kAct, 12), y({3, 24, 7, 9}, 0);
    ASSERT_TRUE(concat({a.rowMajor(), b.rowMajor()}, y.rowMajor(), ConcatParams{1}));
    ASSERT_TRUE(concat({a.nchw8c(), b.nchw8c()}, y.nchw8c(), ConcatParams{1}));
    EXPECT_TRUE(y.blockedAsPlain() == y.plain) << "concat along the channels";
  }
}

TEST(RuntimeLayout, ConvolutionsTakeNChw8cActivations) {
  using namespace lwrt::cpu;
  Pair x(kAct, 21), y({3, 24, 7, 9}, 0), dy({3, 24, 7, 9}, 22), dx(kAct, 0);
  Vec w(24 * 16 * 3 * 3, 23), dw1(24 * 16 * 9), dw2(24 * 16 * 9);
  TensorView wv{w.v.data(), DType::F32, {24, 16, 3, 3}};
  Conv2dParams p{{1, 1}, {1, 1, 1, 1}, {1, 1}, 1};
  auto close = [](const std::vector<float>& a, const std::vector<float>& b) {
    double scale = 0, worst = 0;
    for (size_t k = 0; k < a.size(); ++k) {
      scale = std::max(scale, std::fabs(double(a[k])));
      worst = std::max(worst, std::fabs(double(a[k]) - double(b[k])));
    }
    return worst <= 1e-6 * scale;
  };
  ASSERT_TRUE(conv2d(x.rowMajor(), wv, nullptr, y.rowMajor(), p));
  ASSERT_TRUE(conv2d(x.nchw8c(), wv, nullptr, y.nchw8c(), p));
  EXPECT_TRUE(close(y.plain, y.blockedAsPlain())) << "conv2d";
  ASSERT_TRUE(conv2dGradInput(dy.rowMajor(), wv, dx.rowMajor(), p));
  ASSERT_TRUE(conv2dGradInput(dy.nchw8c(), wv, dx.nchw8c(), p));
  EXPECT_TRUE(close(dx.plain, dx.blockedAsPlain())) << "conv2d_grad_input";
  TensorView d1{dw1.v.data(), DType::F32, {24, 16, 3, 3}},
      d2{dw2.v.data(), DType::F32, {24, 16, 3, 3}};
  ASSERT_TRUE(conv2dGradFilter(x.rowMajor(), dy.rowMajor(), d1, p));
  ASSERT_TRUE(conv2dGradFilter(x.nchw8c(), dy.nchw8c(), d2, p));
  EXPECT_TRUE(close(dw1.v, dw2.v)) << "conv2d_grad_filter";
  // Mixed: a row-major input, a blocked output.
  Pair y2({3, 24, 7, 9}, 0);
  ASSERT_TRUE(conv2d(x.rowMajor(), wv, nullptr, y2.nchw8c(), p));
  EXPECT_TRUE(close(y.plain, y2.blockedAsPlain())) << "conv2d, row-major in, blocked out";
}

TEST(RuntimeLayout, KernelsWithoutNChw8cRefuseIt) {
  using namespace lwrt::cpu;
  Pair x(kAct, 31), y(kAct, 0), b({1, 16, 1, 1}, 32);
  EXPECT_FALSE(softmax(x.nchw8c(), y.nchw8c(), {}));
  EXPECT_FALSE(lrn(x.nchw8c(), y.nchw8c(), {}));
  EXPECT_FALSE(add(x.nchw8c(), b.rowMajor(), y.nchw8c())) << "a broadcast";
  EXPECT_FALSE(relu(x.nchw8c(), y.rowMajor())) << "two layouts";
  EXPECT_FALSE(avgPool2d(x.nchw8c(), y.nchw8c(), {}));
  Vec flat(3 * 16 * 7 * 9);
  TensorView f{flat.v.data(), DType::F32, {3, 16 * 7 * 9}};
  EXPECT_FALSE(copy(x.nchw8c(), f)) << "a reshape of blocked bytes";
}

} // namespace
