// The trainer's input pipeline (lwrt/feed.h): synthetic inputs drawn from
// (seed, index) alone, batches prepared ahead on threads whose contents do
// not depend on the thread count, the prefetch depth, timing or the step a
// run starts from; fill errors; the pool of repeated batches; and the one
// learning-rate formula every backend uses (lwrt/lr_schedule.h).
#include "lwrt/feed.h"
#include "lwrt/lr_schedule.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <gtest/gtest.h>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

using lwrt::DType;

/// A classifier's inputs: image f32 [4, 1, 5, 5] at 0, labels i64 [4] at 512.
lwrt::ModelInfo smallModel() {
  lwrt::ModelInfo m;
  m.name = "feed-test";
  m.classes = 3;
  m.inputs.push_back({"image", DType::F32, {4, 1, 5, 5}, false, 0});
  m.inputs.push_back({"label", DType::I64, {4}, true, 512});
  m.inputBytes = 1024;
  return m;
}

std::vector<unsigned char> synthetic(const lwrt::ModelInfo& m, uint64_t seed, uint64_t index) {
  std::vector<unsigned char> b(static_cast<size_t>(m.inputBytes), 0);
  lwrt::fillSyntheticInputs(m, b.data(), seed, index);
  return b;
}

std::unique_ptr<lwrt::StepRunner> cpuRunner() {
  std::string error;
  auto r = lwrt::cpu::createRunner(lwrt::RunnerOptions{}, &error);
  EXPECT_TRUE(r) << error;
  return r;
}

TEST(RuntimeFeed, SyntheticInputsAreSeededAndCounterBased) {
  lwrt::ModelInfo m = smallModel();
  EXPECT_EQ(synthetic(m, 7, 3), synthetic(m, 7, 3));
  EXPECT_NE(synthetic(m, 7, 3), synthetic(m, 7, 4));
  EXPECT_NE(synthetic(m, 7, 3), synthetic(m, 8, 3));
  // Labels in [0, classes), every class drawn over a few batches.
  std::set<int64_t> seen;
  for (uint64_t i = 0; i < 8; ++i) {
    auto b = synthetic(m, 1, i);
    for (int k = 0; k < 4; ++k) {
      int64_t l;
      std::memcpy(&l, b.data() + 512 + 8 * k, 8);
      ASSERT_GE(l, 0);
      ASSERT_LT(l, 3);
      seen.insert(l);
    }
  }
  EXPECT_EQ(seen.size(), 3u);
  // Roughly standard normal floats.
  lwrt::ModelInfo big;
  big.inputs.push_back({"x", DType::F32, {256, 1024}, false, 0});
  big.inputBytes = 256 * 1024 * 4;
  auto b = synthetic(big, 5, 0);
  const float* x = reinterpret_cast<const float*>(b.data());
  double sum = 0, sq = 0, n = 256 * 1024;
  for (int64_t k = 0; k < 256 * 1024; ++k) {
    ASSERT_TRUE(std::isfinite(x[k]));
    ASSERT_LT(std::fabs(x[k]), 3.5f);
    sum += x[k];
    sq += double(x[k]) * x[k];
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(sq / n - (sum / n) * (sum / n)), 1.0, 0.01);
}

/// Fills like the trainer's synthetic source, after a delay that varies
/// with the step, so that threads finish out of order.
lwrt::FillFn slowSynthetic(const lwrt::ModelInfo& m, std::atomic<int>* calls = nullptr) {
  return [&m, calls](int64_t step, unsigned char* dst, std::string*) {
    if (calls)
      ++*calls;
    std::this_thread::sleep_for(std::chrono::microseconds((step * 7919) % 5 * 300));
    lwrt::fillSyntheticInputs(m, dst, 11, static_cast<uint64_t>(step));
    return true;
  };
}

TEST(RuntimeFeed, PrefetchIsDeterministicAcrossThreadsAndDepth) {
  lwrt::ModelInfo m = smallModel();
  auto runner = cpuRunner();
  ASSERT_TRUE(runner);
  struct Config {
    int threads, depth;
    int64_t first;
  };
  for (Config c : {Config{1, 2, 0}, Config{3, 2, 0}, Config{4, 6, 0}, Config{2, 3, 17}}) {
    std::string error;
    lwrt::FeedOptions o;
    o.threads = c.threads;
    o.depth = c.depth;
    auto feed =
        lwrt::createPrefetchFeed(*runner, m.inputBytes, slowSynthetic(m), c.first, 40, o, &error);
    ASSERT_TRUE(feed) << error;
    for (int64_t s = c.first; s < 40; ++s) {
      const unsigned char* b = feed->acquire(s, &error);
      ASSERT_TRUE(b) << error;
      ASSERT_EQ(std::memcmp(b, synthetic(m, 11, static_cast<uint64_t>(s)).data(),
                            static_cast<size_t>(m.inputBytes)),
                0)
          << "step " << s << " with " << c.threads << " threads, depth " << c.depth;
      feed->release(s);
    }
    EXPECT_FALSE(feed->acquire(40, &error));
    EXPECT_NE(error.find("past the steps"), std::string::npos) << error;
  }
}

TEST(RuntimeFeed, PrefetchRunsAheadByItsDepth) {
  lwrt::ModelInfo m = smallModel();
  auto runner = cpuRunner();
  ASSERT_TRUE(runner);
  std::atomic<int> calls{0};
  lwrt::FeedOptions o;
  o.threads = 2;
  o.depth = 4;
  std::string error;
  auto feed =
      lwrt::createPrefetchFeed(*runner, m.inputBytes, slowSynthetic(m, &calls), 0, 100, o, &error);
  ASSERT_TRUE(feed) << error;
  ASSERT_TRUE(feed->acquire(0, &error)) << error;
  // Steps 0..3 fill the four buffers before anything is released ...
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (calls < 4 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(calls, 4);
  // ... and releasing step 0 lets step 4 into its buffer.
  feed->release(0);
  ASSERT_TRUE(feed->acquire(1, &error)) << error;
  while (calls < 5 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(calls, 5);
}

TEST(RuntimeFeed, PrefetchReportsFillErrors) {
  lwrt::ModelInfo m = smallModel();
  auto runner = cpuRunner();
  ASSERT_TRUE(runner);
  std::string error;
  auto feed = lwrt::createPrefetchFeed(
      *runner, m.inputBytes,
      [](int64_t step, unsigned char*, std::string* e) {
        if (step != 3)
          return true;
        *e = "batch 3 is unreadable";
        return false;
      },
      0, 10, lwrt::FeedOptions{}, &error);
  ASSERT_TRUE(feed) << error;
  for (int64_t s = 0; s < 3; ++s) {
    ASSERT_TRUE(feed->acquire(s, &error)) << error;
    feed->release(s);
  }
  EXPECT_FALSE(feed->acquire(3, &error));
  EXPECT_EQ(error, "batch 3 is unreadable");
}

TEST(RuntimeFeed, PoolRepeatsItsBatches) {
  lwrt::ModelInfo m = smallModel();
  auto runner = cpuRunner();
  ASSERT_TRUE(runner);
  std::atomic<int> calls{0};
  lwrt::FeedOptions o;
  o.threads = 3;
  std::string error;
  auto pool = lwrt::createPoolFeed(*runner, m.inputBytes, slowSynthetic(m, &calls), 3, o, &error);
  ASSERT_TRUE(pool) << error;
  EXPECT_EQ(calls, 3); // filled once, up front
  for (int64_t s = 0; s < 10; ++s) {
    const unsigned char* b = pool->acquire(s, &error);
    ASSERT_TRUE(b);
    EXPECT_EQ(std::memcmp(b, synthetic(m, 11, static_cast<uint64_t>(s % 3)).data(),
                          static_cast<size_t>(m.inputBytes)),
              0)
        << s;
    pool->release(s);
  }
  EXPECT_EQ(calls, 3);
  auto failing = lwrt::createPoolFeed(
      *runner, m.inputBytes,
      [](int64_t, unsigned char*, std::string* e) {
        *e = "no data";
        return false;
      },
      2, o, &error);
  EXPECT_FALSE(failing);
  EXPECT_EQ(error, "no data");
}

TEST(RuntimeFeed, ImageLayoutAndStoreBatch) {
  lwrt::ModelInfo m = smallModel();
  std::string why;
  auto l = lwrt::imageLayout(m, why);
  ASSERT_TRUE(l) << why;
  EXPECT_EQ(l->shape, (std::vector<int64_t>{4, 1, 5, 5}));
  std::vector<float> images(100);
  for (int k = 0; k < 100; ++k)
    images[k] = 0.5f * static_cast<float>(k);
  std::vector<int64_t> labels{2, 0, 1, 2};
  std::vector<unsigned char> inputs(1024);
  lwrt::storeBatch(*l, images.data(), labels.data(), inputs.data());
  EXPECT_EQ(std::memcmp(inputs.data(), images.data(), 400), 0);
  EXPECT_EQ(std::memcmp(inputs.data() + 512, labels.data(), 32), 0);
  m.classes = 0;
  EXPECT_FALSE(lwrt::imageLayout(m, why));
  EXPECT_NE(why.find("classification"), std::string::npos) << why;
}

// --- the learning-rate schedule -------------------------------------------------

TEST(RuntimeLrSchedule, OneFormulaForEveryKind) {
  using lwrt::LrScheduleKind;
  lwrt::LrScheduleParams p;
  p.base_lr = 0.1;
  EXPECT_DOUBLE_EQ(lwrt::scheduledLr(p, 0), 0.1);
  EXPECT_DOUBLE_EQ(lwrt::scheduledLr(p, 1000), 0.1);
  // Linear warm-up over 4 steps, then the schedule counts from its end.
  p.warmup_steps = 4;
  EXPECT_DOUBLE_EQ(lwrt::scheduledLr(p, 0), 0.025);
  EXPECT_DOUBLE_EQ(lwrt::scheduledLr(p, 3), 0.1);
  p.kind = LrScheduleKind::Step;
  p.step_size = 10;
  p.gamma = 0.5;
  EXPECT_DOUBLE_EQ(lwrt::scheduledLr(p, 4), 0.1);
  EXPECT_DOUBLE_EQ(lwrt::scheduledLr(p, 13), 0.1);
  EXPECT_DOUBLE_EQ(lwrt::scheduledLr(p, 14), 0.05);
  EXPECT_DOUBLE_EQ(lwrt::scheduledLr(p, 34), 0.0125);
  p.step_size = 0; // no step size: constant
  EXPECT_DOUBLE_EQ(lwrt::scheduledLr(p, 34), 0.1);
  p.kind = LrScheduleKind::Cosine;
  p.total_steps = 104;
  p.min_lr = 0.02;
  EXPECT_DOUBLE_EQ(lwrt::scheduledLr(p, 4), 0.1);
  EXPECT_NEAR(lwrt::scheduledLr(p, 54), 0.06, 1e-12); // halfway
  EXPECT_NEAR(lwrt::scheduledLr(p, 29), 0.02 + 0.08 * (1 + std::cos(M_PI / 4)) / 2, 1e-12);
  EXPECT_DOUBLE_EQ(lwrt::scheduledLr(p, 104), 0.02);
  EXPECT_DOUBLE_EQ(lwrt::scheduledLr(p, 500), 0.02); // stays at the floor
  p.total_steps = 2;                                 // shorter than the warm-up: a span of one step
  EXPECT_DOUBLE_EQ(lwrt::scheduledLr(p, 5), 0.02);
}

} // namespace
