// The CPU kernels' thread pool (cpu/Parallel.h, lwrt/cpu_threads.h): the
// loops cover their ranges once; the kernels that split work between
// threads without changing its arithmetic give the same bits on 1, 2 and 3
// threads; oneDNN's convolutions and the split matrix products give the
// same bits run to run with one thread count, and agree across counts.
// Tensors are large enough here for every kernel to split.
#include "cpu/Parallel.h"
#include "lwrt/cpu_nn.h"
#include "lwrt/cpu_tensor.h"
#include "lwrt/cpu_threads.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <gtest/gtest.h>
#include <random>
#include <vector>

namespace {

using lwrt::DType;
using lwrt::TensorView;
using Ints = std::vector<int64_t>;

/// A float tensor and its view.
struct Buf {
  std::vector<float> v;
  TensorView t;
  explicit Buf(Ints shape, uint64_t seed = 0) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    v.resize(static_cast<size_t>(n));
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.f, 1.f);
    if (seed)
      for (float& x : v)
        x = normal(rng);
    t = TensorView{v.data(), DType::F32, std::move(shape)};
  }
};

/// Restores the calling thread's team size after a test.
struct ThreadsGuard {
  int saved = lwrt::cpu::threads();
  ~ThreadsGuard() { lwrt::cpu::setThreads(saved); }
};

TEST(RuntimeThreads, ParallelForCoversEachIndexOnceInContiguousRanges) {
  ThreadsGuard guard;
  for (int threads : {1, 2, 3, 5}) {
    lwrt::cpu::setThreads(threads);
    EXPECT_EQ(lwrt::cpu::threads(), threads);
    for (int64_t n : {0, 1, 7, 100, 4099}) {
      for (int64_t grain : {1, 16, 1000}) {
        std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
        std::atomic<int> ranges{0};
        lwrt::cpu::detail::parallelFor(n, grain, [&](int64_t begin, int64_t end) {
          EXPECT_LT(begin, end);
          ++ranges;
          for (int64_t k = begin; k < end; ++k)
            ++seen[static_cast<size_t>(k)];
        });
        for (int64_t k = 0; k < n; ++k)
          ASSERT_EQ(seen[static_cast<size_t>(k)].load(), 1) << n << " " << grain << " " << k;
        EXPECT_LE(ranges.load(), std::max<int64_t>(1, std::min<int64_t>(threads, n)));
      }
    }
    // Fixed chunks whatever the team: chunk k is [16k, min(n, 16k + 16)).
    std::vector<int64_t> firsts(7, -1);
    lwrt::cpu::detail::parallelChunks(100, 16, [&](int64_t k, int64_t begin, int64_t end) {
      firsts[static_cast<size_t>(k)] = begin;
      EXPECT_EQ(end, std::min<int64_t>(100, begin + 16));
    });
    for (int64_t k = 0; k < 7; ++k)
      EXPECT_EQ(firsts[static_cast<size_t>(k)], 16 * k);
  }
}

/// Runs `kernel` (which fills its results from fresh inputs) on 1, 2 and 3
/// threads and returns each run's results.
std::vector<std::vector<float>> onThreads(const std::function<std::vector<float>()>& kernel) {
  ThreadsGuard guard;
  std::vector<std::vector<float>> out;
  for (int threads : {1, 2, 3}) {
    lwrt::cpu::setThreads(threads);
    out.push_back(kernel());
  }
  return out;
}

void expectSameBits(const std::vector<std::vector<float>>& runs, const char* what) {
  for (size_t k = 1; k < runs.size(); ++k)
    EXPECT_TRUE(runs[k] == runs[0]) << what << ": " << k + 1 << " threads differ from one";
}

double relDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 0, worst = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    scale = std::max(scale, std::fabs(double(a[k])));
    worst = std::max(worst, std::fabs(double(a[k]) - double(b[k])));
  }
  return worst / std::max(scale, 1e-30);
}

TEST(RuntimeThreads, OwnKernelsGiveTheSameBitsOnAnyThreadCount) {
  using namespace lwrt::cpu;
  const Ints act{4, 24, 20, 20}; // 38400 elements: above every kernel's grain
  expectSameBits(onThreads([&] {
                   Buf x(act, 1), y(act);
                   EXPECT_TRUE(relu(x.t, y.t));
                   return y.v;
                 }),
                 "relu");
  expectSameBits(onThreads([&] {
                   Buf a(act, 2), b({24, 1, 1}, 3), y(act);
                   EXPECT_TRUE(add(a.t, b.t, y.t));
                   return y.v;
                 }),
                 "add, broadcast");
  expectSameBits(onThreads([&] {
                   Buf x(act, 4), y({24});
                   EXPECT_TRUE(reduceSum(x.t, y.t, ReduceParams{Ints{0, 2, 3}, 0}));
                   return y.v;
                 }),
                 "reduce_sum over n, h, w");
  expectSameBits(onThreads([&] {
                   Buf x(act, 5), y({4, 24, 10, 10}), dy({4, 24, 10, 10}, 6), dx(act);
                   MaxPool2dParams p{{3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 0};
                   EXPECT_TRUE(maxPool2d(x.t, y.t, p));
                   EXPECT_TRUE(maxPool2dGrad(x.t, dy.t, dx.t, p));
                   y.v.insert(y.v.end(), dx.v.begin(), dx.v.end());
                   return y.v;
                 }),
                 "max_pool2d and its gradient");
  expectSameBits(onThreads([&] {
                   Buf x(act, 7), y(act), dy(act, 8), dx(act);
                   LrnParams p{5, 1e-4, 0.75, 2.0};
                   EXPECT_TRUE(lrn(x.t, y.t, p));
                   EXPECT_TRUE(lrnGrad(x.t, y.t, dy.t, dx.t, p));
                   y.v.insert(y.v.end(), dx.v.begin(), dx.v.end());
                   return y.v;
                 }),
                 "lrn and its gradient");
  expectSameBits(onThreads([&] {
                   Buf x(act, 9), s({24}, 10), b({24}, 11), y(act), m({24}), v({24});
                   Buf dy(act, 12), dx(act), ds({24}), db({24});
                   EXPECT_TRUE(batchNormTrain(x.t, s.t, b.t, y.t, m.t, v.t, {}));
                   EXPECT_TRUE(batchNormGrad(x.t, s.t, m.t, v.t, dy.t, dx.t, ds.t, db.t, {}));
                   for (const Buf* r : {&dx, &ds, &db, &m, &v})
                     y.v.insert(y.v.end(), r->v.begin(), r->v.end());
                   return y.v;
                 }),
                 "batch_norm_train and its gradient");
  expectSameBits(onThreads([&] {
                   Buf x({400, 100}, 13), y({400, 100});
                   EXPECT_TRUE(softmax(x.t, y.t, {}));
                   return y.v;
                 }),
                 "softmax");
  expectSameBits(onThreads([&] {
                   Buf w(act, 14), g(act, 15), m(act, 16), wo(act), mo(act);
                   float rate = 0.01f;
                   TensorView lr{&rate, DType::F32, {}};
                   EXPECT_TRUE(sgdUpdate(w.t, g.t, m.t, lr, nullptr, wo.t, mo.t, {0.9, 5e-4, 0}));
                   wo.v.insert(wo.v.end(), mo.v.begin(), mo.v.end());
                   return wo.v;
                 }),
                 "sgd_update");
  expectSameBits(onThreads([&] {
                   Buf a({4, 24, 20, 20}, 17), b({4, 8, 20, 20}, 18), y({4, 32, 20, 20});
                   EXPECT_TRUE(concat({a.t, b.t}, y.t, ConcatParams{1}));
                   return y.v;
                 }),
                 "concat");
}

TEST(RuntimeThreads, LibraryKernelsRepeatTheirBitsAndAgreeAcrossThreadCounts) {
  using namespace lwrt::cpu;
  Conv2dParams p{{1, 1}, {1, 1, 1, 1}, {1, 1}, 1};
  auto conv = [&] {
    Buf x({8, 16, 12, 12}, 21), w({32, 16, 3, 3}, 22), b({32}, 23), y({8, 32, 12, 12});
    Buf dy({8, 32, 12, 12}, 24), dx({8, 16, 12, 12}), dw({32, 16, 3, 3});
    EXPECT_TRUE(conv2dAct(x.t, w.t, &b.t, y.t, p, Activation{Activation::Relu}));
    EXPECT_TRUE(conv2dGradInput(dy.t, w.t, dx.t, p));
    EXPECT_TRUE(conv2dGradFilter(x.t, dy.t, dw.t, p));
    for (const Buf* r : {&dx, &dw})
      y.v.insert(y.v.end(), r->v.begin(), r->v.end());
    return y.v;
  };
  auto gemmRun = [&] {
    Buf a({64, 300}, 25), b({200, 300}, 26), c({200}, 27), y({64, 200});
    EXPECT_TRUE(gemm(a.t, b.t, &c.t, y.t, GemmParams{0, 1, 1.0, 1.0}));
    return y.v;
  };
  for (const auto& kernel : {std::function<std::vector<float>()>(conv), {gemmRun}}) {
    auto first = onThreads(kernel), second = onThreads(kernel);
    for (size_t k = 0; k < first.size(); ++k) {
      EXPECT_TRUE(first[k] == second[k]) << k + 1 << " threads: two runs differ";
      EXPECT_LT(relDiff(first[0], first[k]), 1e-5) << k + 1 << " threads against one";
    }
  }
}

} // namespace

namespace {

// Each fused kernel against the kernel then the relu or clip kernel.
TEST(RuntimeThreads, FusedActivationsEqualTheKernelThenTheActivation) {
  using namespace lwrt::cpu;
  const Activation relu6{Activation::Clip, 0.0, 6.0}, reluAct{Activation::Relu};
  for (const Activation& act : {reluAct, relu6}) {
    auto activate = [&](const Buf& in, Buf& out) {
      if (act.kind == Activation::Relu)
        return relu(in.t, out.t);
      return clip(in.t, out.t, ClipParams{act.min, act.max});
    };
    Buf x({4, 16, 10, 10}, 31), w({24, 16, 3, 3}, 32), b({24}, 33);
    for (float& v : x.v)
      v *= 4; // values beyond the clip's 6 too
    Buf y({4, 24, 8, 8}), r({4, 24, 8, 8}), fused({4, 24, 8, 8});
    Conv2dParams p{{1, 1}, {0, 0, 0, 0}, {1, 1}, 1};
    ASSERT_TRUE(conv2d(x.t, w.t, &b.t, y.t, p));
    ASSERT_TRUE(activate(y, r));
    ASSERT_TRUE(conv2dAct(x.t, w.t, &b.t, fused.t, p, act));
    EXPECT_LT(relDiff(r.v, fused.v), 1e-6);
    EXPECT_TRUE(std::all_of(fused.v.begin(), fused.v.end(), [&](float v) {
      return v >= 0 && (act.kind == Activation::Relu || v <= 6);
    }));

    Buf s({16}, 34), c({16}, 35), m({16}), v({16}), m2({16}), v2({16});
    Buf bn({4, 16, 10, 10}), bnAct({4, 16, 10, 10}), bnFused({4, 16, 10, 10});
    ASSERT_TRUE(batchNormTrain(x.t, s.t, c.t, bn.t, m.t, v.t, {}));
    ASSERT_TRUE(activate(bn, bnAct));
    ASSERT_TRUE(batchNormTrainAct(x.t, s.t, c.t, bnFused.t, m2.t, v2.t, {}, act));
    EXPECT_TRUE(bnAct.v == bnFused.v);
    EXPECT_TRUE(m.v == m2.v && v.v == v2.v);
    ASSERT_TRUE(batchNorm(x.t, s.t, c.t, m.t, v.t, bn.t, {}));
    ASSERT_TRUE(activate(bn, bnAct));
    ASSERT_TRUE(batchNormAct(x.t, s.t, c.t, m.t, v.t, bnFused.t, {}, act));
    EXPECT_TRUE(bnAct.v == bnFused.v);

    Buf sum(x.t.shape), sumAct(x.t.shape), sumFused(x.t.shape);
    ASSERT_TRUE(add(x.t, bn.t, sum.t));
    ASSERT_TRUE(activate(sum, sumAct));
    ASSERT_TRUE(addAct(x.t, bn.t, sumFused.t, act));
    EXPECT_TRUE(sumAct.v == sumFused.v);
  }
}

} // namespace

namespace {

// A backward-weights on 2x2 maps (ResNet's last stage at 64 px), which
// oneDNN has no direct kernel for: one batched product over the images,
// against the float64 kernel (im2col per image).
TEST(RuntimeThreads, GradFilterOnTinyMapsMatchesFloat64) {
  using namespace lwrt::cpu;
  Conv2dParams p{{1, 1}, {1, 1, 1, 1}, {1, 1}, 1};
  Buf x({6, 64, 2, 2}, 41), dy({6, 48, 2, 2}, 42), dw({48, 64, 3, 3});
  ASSERT_TRUE(conv2dGradFilter(x.t, dy.t, dw.t, p));
  std::vector<double> xd(x.v.begin(), x.v.end()), dyd(dy.v.begin(), dy.v.end());
  std::vector<double> dwd(dw.v.size());
  TensorView xt{xd.data(), DType::F64, {6, 64, 2, 2}}, dyt{dyd.data(), DType::F64, {6, 48, 2, 2}};
  TensorView dwt{dwd.data(), DType::F64, {48, 64, 3, 3}};
  ASSERT_TRUE(conv2dGradFilter(xt, dyt, dwt, p));
  std::vector<float> want(dwd.begin(), dwd.end());
  EXPECT_LT(relDiff(want, dw.v), 1e-5);
}

} // namespace
