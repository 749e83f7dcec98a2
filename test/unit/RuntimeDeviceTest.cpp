// The CPU backend's streams and events: ordering within a stream,
// concurrency between streams, and event semantics across them.
#include "lwrt/device.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <gtest/gtest.h>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;

/// Spins until `flag` is set or a second passes; false on time-out.
bool waitUntil(const std::atomic<bool>& flag) {
  auto deadline = std::chrono::steady_clock::now() + 1s;
  while (!flag.load()) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(RuntimeCpu, StreamRunsWorkInLaunchOrder) {
  auto backend = lwrt::createCpuBackend(1);
  auto stream = backend->device(0).createStream();
  std::vector<int> seen;
  for (int i = 0; i < 1000; ++i)
    stream->launch([&seen, i] { seen.push_back(i); });
  EXPECT_EQ(stream->synchronize(), "");
  ASSERT_EQ(seen.size(), 1000u);
  for (int i = 0; i < 1000; ++i)
    EXPECT_EQ(seen[i], i);
}

TEST(RuntimeCpu, StreamsRunConcurrently) {
  // Each stream's task waits for the other's to start: serial execution
  // would time out instead of passing.
  auto backend = lwrt::createCpuBackend(1);
  auto a = backend->device(0).createStream();
  auto b = backend->device(0).createStream();
  std::atomic<bool> aStarted{false}, bStarted{false}, aSawB{false}, bSawA{false};
  a->launch([&] {
    aStarted = true;
    aSawB = waitUntil(bStarted);
  });
  b->launch([&] {
    bStarted = true;
    bSawA = waitUntil(aStarted);
  });
  a->synchronize();
  b->synchronize();
  EXPECT_TRUE(aSawB);
  EXPECT_TRUE(bSawA);
}

TEST(RuntimeCpu, WaitOrdersWorkAfterTheRecordedPoint) {
  auto backend = lwrt::createCpuBackend(2);
  auto producer = backend->device(0).createStream();
  auto consumer = backend->device(1).createStream();
  auto ready = backend->device(0).createEvent();
  for (int round = 0; round < 50; ++round) {
    int value = 0, seen = -1;
    producer->launch([&] {
      std::this_thread::sleep_for(200us);
      value = round + 1;
    });
    producer->record(*ready);
    consumer->wait(*ready);
    consumer->launch([&] { seen = value; });
    consumer->synchronize();
    producer->synchronize();
    EXPECT_EQ(seen, round + 1) << "round " << round;
  }
}

TEST(RuntimeCpu, WaitTargetsTheLatestRecordBeforeIt) {
  auto backend = lwrt::createCpuBackend(1);
  auto& dev = backend->device(0);
  auto s1 = dev.createStream();
  auto s2 = dev.createStream();
  auto event = dev.createEvent();
  std::atomic<bool> release{false};
  std::atomic<int> stage{0};
  s1->record(*event); // completes at once
  s1->launch([&] {
    waitUntil(release);
    stage = 1;
  });
  s1->record(*event); // completes after the blocked task
  s2->wait(*event);
  int seenStage = -1;
  s2->launch([&] { seenStage = stage.load(); });
  std::this_thread::sleep_for(5ms);
  release = true;
  s2->synchronize();
  s1->synchronize();
  EXPECT_EQ(seenStage, 1);
}

TEST(RuntimeCpu, WaitOnAnEventNeverRecordedWaitsForNothing) {
  auto backend = lwrt::createCpuBackend(1);
  auto stream = backend->device(0).createStream();
  auto event = backend->device(0).createEvent();
  bool ran = false;
  stream->wait(*event);
  stream->launch([&] { ran = true; });
  EXPECT_EQ(stream->synchronize(), "");
  EXPECT_TRUE(ran);
}

TEST(RuntimeCpu, SynchronizeReportsTheFirstFailure) {
  auto backend = lwrt::createCpuBackend(1);
  auto stream = backend->device(0).createStream();
  bool after = false;
  stream->launch([] { throw std::runtime_error("kernel failed"); });
  stream->launch([] { throw std::runtime_error("second failure"); });
  stream->launch([&] { after = true; });
  EXPECT_EQ(stream->synchronize(), "kernel failed");
  EXPECT_TRUE(after);
  EXPECT_EQ(stream->synchronize(), "");
}

TEST(RuntimeCpu, MemoryIsAlignedAndCopiesAreOrdered) {
  auto backend = lwrt::createCpuBackend(1);
  auto& dev = backend->device(0);
  auto stream = dev.createStream();
  void* arena = dev.allocate(1000);
  ASSERT_NE(arena, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(arena) % 256, 0u);
  std::vector<float> in(250), out(250, 0.0f);
  for (int i = 0; i < 250; ++i)
    in[i] = static_cast<float>(i) * 0.5f;
  dev.copyFromHost(arena, in.data(), 1000, *stream);
  stream->launch([arena] { static_cast<float*>(arena)[3] = -1.0f; });
  dev.copyToHost(out.data(), arena, 1000, *stream);
  EXPECT_EQ(stream->synchronize(), "");
  EXPECT_EQ(out[2], 1.0f);
  EXPECT_EQ(out[3], -1.0f);
  EXPECT_EQ(out[249], 124.5f);
  dev.release(arena);
  EXPECT_EQ(dev.allocate(-1), nullptr);
}

TEST(RuntimeCpu, BackendHasTheDevicesAskedFor) {
  auto backend = lwrt::createCpuBackend(4);
  EXPECT_EQ(backend->name(), "cpu");
  ASSERT_EQ(backend->numDevices(), 4);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(backend->device(i).index(), i);
  EXPECT_THROW(lwrt::createCpuBackend(0), std::invalid_argument);
}

TEST(RuntimeCpu, AllReduceSumsAcrossDevicesInStreamOrder) {
  constexpr int kDevices = 3;
  auto backend = lwrt::createCpuBackend(kDevices);
  std::vector<std::unique_ptr<lwrt::Stream>> streams;
  std::vector<std::vector<float>> data(kDevices, std::vector<float>(100));
  lwrt::CollectiveBuffers c;
  for (int d = 0; d < kDevices; ++d) {
    streams.push_back(backend->device(d).createStream());
    c.streams.push_back(streams.back().get());
    c.buffers.push_back({data[d].data(), lwrt::DType::F32, {10, 10}});
  }
  for (int round = 0; round < 20; ++round) {
    // Each device writes its part on its own stream, then joins the reduction;
    // a later write on the stream must see the reduced values.
    std::vector<float> seen(kDevices, 0.0f);
    for (int d = 0; d < kDevices; ++d)
      streams[d]->launch([&, d, round] {
        for (int i = 0; i < 100; ++i)
          data[d][i] = static_cast<float>((d + 1) * i + round);
      });
    ASSERT_TRUE(backend->allReduceSum(c));
    for (int d = 0; d < kDevices; ++d)
      streams[d]->launch([&, d] { seen[d] = data[d][7]; });
    for (auto& s : streams)
      EXPECT_EQ(s->synchronize(), "");
    for (int d = 0; d < kDevices; ++d) {
      EXPECT_EQ(seen[d], static_cast<float>(6 * 7 + 3 * round));
      EXPECT_EQ(data[d][99], static_cast<float>(6 * 99 + 3 * round));
    }
  }
}

TEST(RuntimeCpu, BroadcastCopiesTheRootAndRejectsMismatches) {
  auto backend = lwrt::createCpuBackend(2);
  auto s0 = backend->device(0).createStream();
  auto s1 = backend->device(1).createStream();
  std::vector<double> a = {1, 2, 3}, b = {0, 0, 0};
  lwrt::CollectiveBuffers c;
  c.streams = {s0.get(), s1.get()};
  c.buffers = {{a.data(), lwrt::DType::F64, {3}}, {b.data(), lwrt::DType::F64, {3}}};
  ASSERT_TRUE(backend->broadcast(c, 0));
  EXPECT_EQ(s0->synchronize(), "");
  EXPECT_EQ(s1->synchronize(), "");
  EXPECT_EQ(b, a);
  EXPECT_FALSE(backend->broadcast(c, 2));
  lwrt::CollectiveBuffers bad = c;
  bad.buffers[1].shape = {4};
  EXPECT_FALSE(backend->allReduceSum(bad));
  bad = c;
  bad.streams.pop_back();
  EXPECT_FALSE(backend->allReduceSum(bad));
  std::vector<int64_t> ints(3);
  bad = c;
  bad.buffers = {{ints.data(), lwrt::DType::I64, {3}}, {ints.data(), lwrt::DType::I64, {3}}};
  EXPECT_FALSE(backend->allReduceSum(bad));
}

} // namespace
