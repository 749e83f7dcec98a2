// The CPU backend's multi-device step (runtime/cpu/Comm.cpp): every
// communication op against a plain computation of what it must produce,
// events between the threads of two streams, misfit views, and a failing
// step function reported by name.
#include "lwrt/comm.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <gtest/gtest.h>
#include <numeric>
#include <thread>

using namespace lwrt;

namespace {

/// What every step function of a test runs (it tells devices and streams
/// apart by b.device and b.stream).
std::function<bool(const StepBuffers&, std::string*)> body;
bool runBody(const StepBuffers& b, std::string* failed) { return body(b, failed); }

/// N emulated devices with an arena each, a step function per (device,
/// stream), and the CPU group over them.
struct Devices {
  ModelInfo m;
  std::vector<std::unique_ptr<StepRunner>> runners;
  std::vector<std::vector<unsigned char>> arenas;
  std::unique_ptr<DeviceGroup> group;

  Devices(int n, int streams = 1, int ops = 4, int events = 2) {
    m.numDevices = n;
    m.streamsPerDevice = streams;
    m.numCommOps = ops;
    m.numEvents = events;
    for (int d = 0; d < n; ++d)
      for (int s = 0; s < streams; ++s)
        m.deviceSteps.push_back(
            {d, s, runBody, "step_d" + std::to_string(d) + "_s" + std::to_string(s)});
    std::vector<StepRunner*> raw;
    for (int d = 0; d < n; ++d) {
      runners.push_back(cpu::createRunner(RunnerOptions{}, nullptr));
      raw.push_back(runners.back().get());
      arenas.emplace_back(4096, 0);
    }
    std::string error;
    group = cpu::createGroup(m, raw, nullptr, &error);
    EXPECT_TRUE(group) << error;
  }
  bool step(std::string* error) {
    std::vector<StepBuffers> buffers;
    for (auto& a : arenas)
      buffers.push_back(StepBuffers{a.data(), nullptr, nullptr, nullptr});
    return group->runStep(buffers, error);
  }
  template <typename T> T* at(int device, int64_t byteOffset) {
    return reinterpret_cast<T*>(arenas[static_cast<size_t>(device)].data() + byteOffset);
  }
};

TensorView view(const StepBuffers& b, int64_t offset, DType t, std::vector<int64_t> shape) {
  return TensorView{b.arena + offset, t, std::move(shape)};
}

std::vector<int64_t> iota(int n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(RuntimeComm, AllReduceSumsABucketInDeviceOrderOverSeveralSteps) {
  Devices g(3);
  // A bucket of two: f32 [5] summed in place, f64 [2,3] into another buffer.
  body = [](const StepBuffers& b, std::string*) {
    return cpu::allReduce(b, 0, {2, 0, 1}, // the sum's order: devices 2, 0, 1
                          {view(b, 0, DType::F32, {5}), view(b, 64, DType::F64, {2, 3})},
                          {view(b, 0, DType::F32, {5}), view(b, 256, DType::F64, {2, 3})});
  };
  for (int step = 0; step < 4; ++step) {
    for (int d = 0; d < 3; ++d) {
      for (int i = 0; i < 5; ++i)
        g.at<float>(d, 0)[i] = 0.1f * static_cast<float>(step + 1) + 1e-3f * (d * 7 + i);
      for (int i = 0; i < 6; ++i)
        g.at<double>(d, 64)[i] = 1.0 / (3 + d + i + step);
    }
    float f32[5];
    double f64[6];
    for (int i = 0; i < 5; ++i)
      f32[i] = (g.at<float>(2, 0)[i] + g.at<float>(0, 0)[i]) + g.at<float>(1, 0)[i];
    for (int i = 0; i < 6; ++i)
      f64[i] = (g.at<double>(2, 64)[i] + g.at<double>(0, 64)[i]) + g.at<double>(1, 64)[i];
    std::string error;
    ASSERT_TRUE(g.step(&error)) << error;
    for (int d = 0; d < 3; ++d) {
      EXPECT_EQ(0, std::memcmp(g.at<float>(d, 0), f32, sizeof f32)) << "device " << d;
      EXPECT_EQ(0, std::memcmp(g.at<double>(d, 256), f64, sizeof f64)) << "device " << d;
    }
  }
}

TEST(RuntimeComm, AllGatherConcatenatesUnevenPiecesAlongAxisOne) {
  Devices g(3);
  const std::vector<int64_t> sizes = {1, 3, 2};
  body = [&](const StepBuffers& b, std::string*) {
    int64_t rows = sizes[static_cast<size_t>(b.device)];
    return cpu::allGather(b, 1, iota(3), 1, sizes, view(b, 0, DType::I32, {2, rows, 2}),
                          view(b, 512, DType::I32, {2, 6, 2}));
  };
  for (int d = 0; d < 3; ++d)
    for (int k = 0; k < 2 * sizes[static_cast<size_t>(d)] * 2; ++k)
      g.at<int32_t>(d, 0)[k] = 1000 * d + k;
  std::string error;
  ASSERT_TRUE(g.step(&error)) << error;
  // out[n][r][c]: row r of the concatenation, from the device holding it.
  for (int d = 0; d < 3; ++d)
    for (int n = 0; n < 2; ++n)
      for (int r = 0, owner = 0, first = 0; r < 6; ++r) {
        while (r >= first + sizes[static_cast<size_t>(owner)])
          first += static_cast<int>(sizes[static_cast<size_t>(owner++)]);
        int64_t rows = sizes[static_cast<size_t>(owner)];
        for (int c = 0; c < 2; ++c)
          EXPECT_EQ(g.at<int32_t>(d, 512)[(n * 6 + r) * 2 + c],
                    1000 * owner + (n * rows + (r - first)) * 2 + c)
              << d << " " << n << " " << r << " " << c;
      }
}

TEST(RuntimeComm, ReduceScatterGivesEachDeviceItsRowsOfTheSum) {
  for (int64_t axis : {0, 1}) {
    Devices g(2);
    const std::vector<int64_t> sizes = {3, 1};
    body = [&](const StepBuffers& b, std::string*) {
      std::vector<int64_t> whole = {4, 2};
      if (axis == 1)
        whole = {2, 4};
      std::vector<int64_t> piece = whole;
      piece[static_cast<size_t>(axis)] = sizes[static_cast<size_t>(b.device)];
      return cpu::reduceScatter(b, 0, {0, 1}, axis, sizes, view(b, 0, DType::F64, whole),
                                view(b, 256, DType::F64, piece));
    };
    for (int d = 0; d < 2; ++d)
      for (int k = 0; k < 8; ++k)
        g.at<double>(d, 0)[k] = 0.5 * k + 10.0 * d + 0.25;
    std::string error;
    ASSERT_TRUE(g.step(&error)) << error;
    // The sum as a [R, C] matrix, then each device's rows (axis 0) or columns.
    const int rows = axis == 0 ? 4 : 2, cols = axis == 0 ? 2 : 4;
    for (int d = 0; d < 2; ++d) {
      int64_t first = d == 0 ? 0 : sizes[0], n = sizes[static_cast<size_t>(d)];
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) {
          int64_t pr = axis == 0 ? r - first : r, pc = axis == 0 ? c : c - first;
          if (pr < 0 || pc < 0 || (axis == 0 ? pr >= n : pc >= n))
            continue;
          int64_t pieceCols = axis == 0 ? cols : n;
          double want = g.at<double>(0, 0)[r * cols + c] + g.at<double>(1, 0)[r * cols + c];
          EXPECT_EQ(g.at<double>(d, 256)[pr * pieceCols + pc], want)
              << "axis " << axis << " device " << d;
        }
    }
  }
}

TEST(RuntimeComm, BroadcastReduceToAndDeviceCopy) {
  Devices g(3);
  body = [](const StepBuffers& b, std::string*) {
    TensorView x = view(b, 0, DType::F32, {4}), y = view(b, 64, DType::F32, {4});
    TensorView h = view(b, 128, DType::F16, {3}), h2 = view(b, 192, DType::F16, {3});
    // broadcast from 0 (not among the receivers) to 1 and 2.
    bool ok =
        cpu::broadcast(b, 0, 0, {1, 2}, b.device == 0 ? &x : nullptr, b.device == 0 ? nullptr : &y);
    // reduce_to: the sum of 1 and 2's x on device 0.
    ok = ok &&
         cpu::reduceTo(b, 1, {1, 2}, 0, b.device == 0 ? nullptr : &x, b.device == 0 ? &y : nullptr);
    // device_copy of F16 bits from 2 to 1.
    if (b.device != 0)
      ok = ok &&
           cpu::deviceCopy(b, 2, 2, 1, b.device == 2 ? &h : nullptr, b.device == 1 ? &h2 : nullptr);
    return ok;
  };
  for (int d = 0; d < 3; ++d)
    for (int i = 0; i < 4; ++i)
      g.at<float>(d, 0)[i] = static_cast<float>(d * 10 + i) + 0.5f;
  for (int i = 0; i < 3; ++i)
    g.at<uint16_t>(2, 128)[i] = static_cast<uint16_t>(0x3c00 + i);
  std::string error;
  ASSERT_TRUE(g.step(&error)) << error;
  for (int d = 1; d < 3; ++d)
    EXPECT_EQ(0, std::memcmp(g.at<float>(d, 64), g.at<float>(0, 0), 16)) << d;
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(g.at<float>(0, 64)[i], g.at<float>(1, 0)[i] + g.at<float>(2, 0)[i]);
  EXPECT_EQ(0, std::memcmp(g.at<uint16_t>(1, 192), g.at<uint16_t>(2, 128), 6));
}

TEST(RuntimeComm, ShardAndUnshardUnevenSlices) {
  Devices g(3);
  const std::vector<int64_t> sizes = {2, 1, 3};
  body = [&](const StepBuffers& b, std::string*) {
    TensorView whole = view(b, 0, DType::I64, {2, 6});
    TensorView piece = view(b, 256, DType::I64, {2, sizes[static_cast<size_t>(b.device)]});
    TensorView back = view(b, 512, DType::I64, {2, 6});
    // shard from device 1 along axis 1, then unshard those pieces onto device 2.
    return cpu::shard(b, 0, 1, iota(3), 1, sizes, b.device == 1 ? &whole : nullptr, &piece) &&
           cpu::unshard(b, 1, iota(3), 2, 1, sizes, &piece, b.device == 2 ? &back : nullptr);
  };
  for (int k = 0; k < 12; ++k)
    g.at<int64_t>(1, 0)[k] = 100 + k;
  std::string error;
  ASSERT_TRUE(g.step(&error)) << error;
  for (int d = 0, first = 0; d < 3; first += static_cast<int>(sizes[static_cast<size_t>(d++)]))
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < sizes[static_cast<size_t>(d)]; ++c)
        EXPECT_EQ(g.at<int64_t>(d, 256)[r * sizes[static_cast<size_t>(d)] + c],
                  100 + r * 6 + first + c);
  EXPECT_EQ(0, std::memcmp(g.at<int64_t>(2, 512), g.at<int64_t>(1, 0), 96));
}

TEST(RuntimeComm, AnEventOrdersAWriteOnOneStreamBeforeAReadOnAnother) {
  Devices g(2, 2);
  // Stream 0 writes late, then records; stream 1 waits, then copies what it
  // reads: it must see this step's values, never the last step's.
  body = [](const StepBuffers& b, std::string*) {
    float* x = reinterpret_cast<float*>(b.arena);
    if (b.stream == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (int i = 0; i < 8; ++i)
        x[i] += 1.0f;
      return cpu::recordEvent(b, b.device);
    }
    if (!cpu::waitEvent(b, b.device))
      return false;
    for (int i = 0; i < 8; ++i)
      x[16 + i] = x[i];
    return true;
  };
  for (int step = 1; step <= 3; ++step) {
    std::string error;
    ASSERT_TRUE(g.step(&error)) << error;
    for (int d = 0; d < 2; ++d)
      for (int i = 0; i < 8; ++i)
        EXPECT_EQ(g.at<float>(d, 64)[i], static_cast<float>(step)) << "step " << step;
  }
}

TEST(RuntimeComm, MisfitViewsFailForEveryDeviceAndWriteNothing) {
  struct Case {
    const char* what;
    std::function<bool(const StepBuffers&)> call;
  };
  std::vector<Case> cases = {
      {"shapes differ between devices",
       [](const StepBuffers& b) {
         return cpu::allReduce(b, 0, {0, 1}, {view(b, 0, DType::F32, {4 + b.device})},
                               {view(b, 64, DType::F32, {4 + b.device})});
       }},
      {"an integer sum",
       [](const StepBuffers& b) {
         return cpu::allReduce(b, 0, {0, 1}, {view(b, 0, DType::I32, {4})},
                               {view(b, 64, DType::I32, {4})});
       }},
      {"sizes that do not add up to the whole",
       [](const StepBuffers& b) {
         return cpu::allGather(b, 0, {0, 1}, 0, {2, 1}, view(b, 0, DType::F32, {2}),
                               view(b, 64, DType::F32, {4}));
       }},
      {"an axis past the rank",
       [](const StepBuffers& b) {
         return cpu::reduceScatter(b, 0, {0, 1}, 2, {2, 2}, view(b, 0, DType::F32, {4, 1}),
                                   view(b, 64, DType::F32, {2, 1}));
       }},
      {"a copy between types",
       [](const StepBuffers& b) {
         TensorView in = view(b, 0, DType::F32, {4}), out = view(b, 64, DType::I32, {4});
         return cpu::deviceCopy(b, 0, 0, 1, b.device == 0 ? &in : nullptr,
                                b.device == 1 ? &out : nullptr);
       }},
      {"the receiver's view missing",
       [](const StepBuffers& b) {
         TensorView in = view(b, 0, DType::F32, {4});
         return cpu::broadcast(b, 0, 0, {1}, b.device == 0 ? &in : nullptr, nullptr);
       }},
  };
  for (const Case& c : cases) {
    Devices g(2);
    std::vector<int> failed(2, 0);
    body = [&](const StepBuffers& b, std::string* why) {
      if (c.call(b))
        return true;
      failed[static_cast<size_t>(b.device)] = 1;
      *why = "op 0 failed";
      return false;
    };
    for (int d = 0; d < 2; ++d)
      std::memset(g.at<unsigned char>(d, 64), 0x7f, 64);
    std::string error;
    EXPECT_FALSE(g.step(&error)) << c.what;
    EXPECT_NE(error.find("op 0 failed"), std::string::npos) << c.what << ": " << error;
    EXPECT_EQ(failed, (std::vector<int>{1, 1})) << c.what;
    for (int d = 0; d < 2; ++d)
      for (int k = 0; k < 64; ++k)
        ASSERT_EQ(g.at<unsigned char>(d, 64)[k], 0x7f) << c.what << ": written on " << d;
  }
}

TEST(RuntimeComm, AFailingFunctionIsReportedByNameAndFreesTheOthers) {
  Devices g(3, 2, 4, 3);
  bool failing = true;
  body = [&](const StepBuffers& b, std::string* why) {
    if (failing && b.device == 1 && b.stream == 0) {
      *why = "gemm fc1: bad shapes";
      return false;
    }
    // Stream 1 waits for an event that stream 0 records after an all-reduce
    // the failing function never reaches: nobody may hang.
    if (b.stream == 1)
      return cpu::waitEvent(b, b.device);
    bool ok =
        cpu::allReduce(b, 0, iota(3), {view(b, 0, DType::F32, {2})}, {view(b, 0, DType::F32, {2})});
    return ok && cpu::recordEvent(b, b.device);
  };
  std::string error;
  EXPECT_FALSE(g.step(&error));
  EXPECT_EQ(error, "step_d1_s0: gemm fc1: bad shapes");
  // The next step runs normally.
  failing = false;
  g.at<float>(0, 0)[0] = 1;
  g.at<float>(1, 0)[0] = 2;
  g.at<float>(2, 0)[0] = 4;
  EXPECT_TRUE(g.step(&error)) << error;
  for (int d = 0; d < 3; ++d)
    EXPECT_EQ(g.at<float>(d, 0)[0], 7.0f);
}

TEST(RuntimeComm, ADeadlockedStepIsStoppedWithWhoWaitsForWhat) {
  ::setenv("LWRT_DEADLOCK_SECONDS", "1", 1);
  Devices g(2, 2);
  ::unsetenv("LWRT_DEADLOCK_SECONDS");
  bool mismatched = true;
  body = [&](const StepBuffers& b, std::string* why) {
    if (b.stream == 1) // waits for an event recorded after the op
      return cpu::waitEvent(b, b.device);
    // Device 1 calls the op by the wrong number: nobody ever completes.
    int op = mismatched && b.device == 1 ? 1 : 0;
    bool ok =
        cpu::allReduce(b, op, {0, 1}, {view(b, 0, DType::F32, {2})}, {view(b, 0, DType::F32, {2})});
    if (!ok)
      *why = "all_reduce " + std::to_string(op);
    return ok && cpu::recordEvent(b, b.device);
  };
  std::string error;
  EXPECT_FALSE(g.step(&error));
  EXPECT_NE(error.find("deadlocked"), std::string::npos) << error;
  for (const char* who : {"step_d0_s0 in communication op 0", "step_d1_s0 in communication op 1",
                          "step_d0_s1 for event 0", "step_d1_s1 for event 1"})
    EXPECT_NE(error.find(who), std::string::npos) << who << " in: " << error;
  mismatched = false;
  EXPECT_TRUE(g.step(&error)) << error;
}

TEST(RuntimeComm, CreateGroupRejectsAModelItCannotRun) {
  ModelInfo m;
  m.numDevices = 2;
  m.deviceSteps.push_back({0, 1, runBody, "step_d0_s1"}); // one stream only
  auto r0 = cpu::createRunner(RunnerOptions{}, nullptr), r1 = cpu::createRunner({}, nullptr);
  std::string error;
  EXPECT_FALSE(cpu::createGroup(m, {r0.get(), r1.get()}, nullptr, &error));
  EXPECT_NE(error.find("step_d0_s1"), std::string::npos) << error;
  m.deviceSteps[0].stream = 0;
  EXPECT_FALSE(cpu::createGroup(m, {r0.get()}, nullptr, &error));
  EXPECT_NE(error.find("runners"), std::string::npos) << error;
  EXPECT_TRUE(cpu::createGroup(m, {r0.get(), r1.get()}, nullptr, &error)) << error;
}

} // namespace
