// EmuNcclTest.cpp - the emulated NCCL (emu/Nccl.cpp) against a direct computation of each call
//
// Each collective lwcc calls over 2 and 4 emulated devices, driven from one
// host thread in a group and from one thread per device; sums in rank order
// rounded per addition; in-place forms; sends and receives in groups and on
// their own; each refusal once; and the runs NCCL would hang or corrupt on
// GPUs, stopped with a report (death tests, each in a fresh process): a
// count mismatch, a rank that never calls, and two communicators issued in
// opposite orders from two threads.
#include "Emu.h"
#include "EmuTestUtil.h"
#include "lwrt/bf16.h"
#include "lwrt/f16.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <functional>
#include <gtest/gtest.h>
#include <nccl.h>
#include <string>
#include <thread>
#include <vector>

namespace {

/// A communicator over devices 0..n-1 with a non-blocking stream on each.
struct Clique {
  int n;
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
  explicit Clique(int ranks) : n(ranks), comms(static_cast<size_t>(ranks)) {
    EXPECT_EQ(ncclCommInitAll(comms.data(), n, nullptr), ncclSuccess);
    for (int d = 0; d < n; ++d) {
      cudaSetDevice(d);
      cudaStream_t s;
      EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
      streams.push_back(s);
    }
    cudaSetDevice(0);
  }
  ~Clique() {
    sync();
    for (int d = 0; d < n; ++d) {
      EXPECT_EQ(ncclCommDestroy(comms[static_cast<size_t>(d)]), ncclSuccess);
      EXPECT_EQ(cudaStreamDestroy(streams[static_cast<size_t>(d)]), cudaSuccess);
    }
  }
  ncclComm_t comm(int d) const { return comms[static_cast<size_t>(d)]; }
  cudaStream_t stream(int d) const { return streams[static_cast<size_t>(d)]; }
  void sync() {
    for (cudaStream_t s : streams)
      EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  }
  /// Runs f(d) for every device: from this thread in one NCCL group, or from one thread each.
  void each(bool grouped, const std::function<void(int)>& f) {
    if (grouped) {
      EXPECT_EQ(ncclGroupStart(), ncclSuccess);
      for (int d = 0; d < n; ++d)
        f(d);
      EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
      return;
    }
    std::vector<std::thread> threads;
    for (int d = 0; d < n; ++d)
      threads.emplace_back([&f, d] {
        cudaSetDevice(d);
        f(d);
      });
    for (auto& t : threads)
      t.join();
  }
};

template <typename T> T* onDevice(int device, const std::vector<T>& h) {
  cudaSetDevice(device);
  return lwemu_test::toDevice(h);
}

template <typename T> std::vector<T> fromDevice(const T* p, size_t n) {
  return lwemu_test::toHost(p, n);
}

/// Rank r's input: distinct per rank and element, exact in float32.
std::vector<float> input(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(rank * 100 + static_cast<int>(i)) * 0.25f;
  return v;
}

/// Every collective over `ranks` devices, against a direct computation.
void collectives(int ranks, bool grouped) {
  Clique c(ranks);
  const size_t n = 6;
  const int root = ranks - 1;
  std::vector<float*> in, sum, gathered, scattered, bcast, reduced;
  for (int d = 0; d < ranks; ++d) {
    in.push_back(onDevice(d, input(d, n * static_cast<size_t>(ranks))));
    sum.push_back(onDevice(d, std::vector<float>(n, -1)));
    gathered.push_back(onDevice(d, std::vector<float>(n * static_cast<size_t>(ranks), -1)));
    scattered.push_back(onDevice(d, std::vector<float>(n, -1)));
    bcast.push_back(onDevice(d, std::vector<float>(n, -1)));
    reduced.push_back(onDevice(d, std::vector<float>(n, -1)));
  }
  c.each(grouped, [&](int d) {
    size_t r = static_cast<size_t>(d);
    EXPECT_EQ(ncclAllReduce(in[r], sum[r], n, ncclFloat32, ncclSum, c.comm(d), c.stream(d)),
              ncclSuccess);
    EXPECT_EQ(ncclAllGather(in[r], gathered[r], n, ncclFloat32, c.comm(d), c.stream(d)),
              ncclSuccess);
    EXPECT_EQ(
        ncclReduceScatter(in[r], scattered[r], n, ncclFloat32, ncclSum, c.comm(d), c.stream(d)),
        ncclSuccess);
    EXPECT_EQ(ncclBroadcast(in[r], bcast[r], n, ncclFloat32, 1, c.comm(d), c.stream(d)),
              ncclSuccess);
    EXPECT_EQ(ncclReduce(in[r], reduced[r], n, ncclFloat32, ncclSum, root, c.comm(d), c.stream(d)),
              ncclSuccess);
  });
  c.sync();
  for (int d = 0; d < ranks; ++d) {
    size_t r = static_cast<size_t>(d);
    auto s = fromDevice(sum[r], n), g = fromDevice(gathered[r], n * ranks),
         sc = fromDevice(scattered[r], n), b = fromDevice(bcast[r], n),
         rd = fromDevice(reduced[r], n);
    for (size_t i = 0; i < n; ++i) {
      float want = 0, wantScattered = 0;
      for (int q = 0; q < ranks; ++q) {
        want += input(q, n * ranks)[i];
        wantScattered += input(q, n * ranks)[r * n + i];
      }
      EXPECT_EQ(s[i], want) << "all-reduce, rank " << d;
      EXPECT_EQ(sc[i], wantScattered) << "reduce-scatter, rank " << d;
      EXPECT_EQ(b[i], input(1, n * ranks)[i]) << "broadcast, rank " << d;
      EXPECT_EQ(rd[i], d == root ? want : -1.0f) << "reduce, rank " << d;
      for (int q = 0; q < ranks; ++q)
        EXPECT_EQ(g[static_cast<size_t>(q) * n + i], input(q, n * ranks)[i])
            << "all-gather, rank " << d;
    }
  }
  for (auto* v : {&in, &sum, &gathered, &scattered, &bcast, &reduced})
    for (float* p : *v)
      cudaFree(p);
}

} // namespace

TEST(EmuNccl, ErrorStringsAndUniqueIds) {
  EXPECT_STREQ(ncclGetErrorString(ncclSuccess), "no error");
  EXPECT_NE(std::string(ncclGetErrorString(ncclInvalidUsage)).find("invalid usage"),
            std::string::npos);
  ncclUniqueId a, b;
  ASSERT_EQ(ncclGetUniqueId(&a), ncclSuccess);
  ASSERT_EQ(ncclGetUniqueId(&b), ncclSuccess);
  EXPECT_NE(std::memcmp(&a, &b, sizeof a), 0);
}

TEST(EmuNccl, CommunicatorsFromInitAllAndInitRank) {
  { Clique four(4); }
  // One thread per rank: each ncclCommInitRank blocks until both joined.
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comms[2] = {nullptr, nullptr};
  ncclResult_t results[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      cudaSetDevice(3 - r); // rank 0 on device 3, rank 1 on device 2
      results[r] = ncclCommInitRank(&comms[r], 2, id, r);
    });
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(results[0], ncclSuccess);
  EXPECT_EQ(results[1], ncclSuccess);
  // The communicator works: a rank's buffers live on its device.
  float* x0 = onDevice(3, std::vector<float>{1, 2});
  float* x1 = onDevice(2, std::vector<float>{10, 20});
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(x0, x0, 2, ncclFloat32, ncclSum, comms[0], nullptr), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(x1, x1, 2, ncclFloat32, ncclSum, comms[1], nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  cudaSetDevice(3);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaSetDevice(2);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(fromDevice(x0, 2), (std::vector<float>{11, 22}));
  EXPECT_EQ(fromDevice(x1, 2), (std::vector<float>{11, 22}));
  cudaFree(x0);
  cudaFree(x1);
  for (ncclComm_t c : comms)
    EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
  // In a group from one thread: the ranks join at ncclGroupEnd.
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) {
    cudaSetDevice(r);
    EXPECT_EQ(ncclCommInitRank(&comms[r], 2, id, r), ncclSuccess);
  }
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
  for (ncclComm_t c : comms)
    EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
  cudaSetDevice(0);
}

TEST(EmuNccl, RefusesDuplicateDevices) {
  ncclComm_t comms[2] = {nullptr, nullptr};
  const int same[] = {1, 1};
  EXPECT_EQ(ncclCommInitAll(comms, 2, same), ncclInvalidUsage);
  // Two ranks of one id on one device: both refused once both joined.
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  cudaSetDevice(1);
  EXPECT_EQ(ncclCommInitRank(&comms[0], 2, id, 0), ncclSuccess);
  EXPECT_EQ(ncclCommInitRank(&comms[1], 2, id, 1), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  for (ncclComm_t c : comms)
    EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
  EXPECT_EQ(ncclCommInitRank(&comms[0], 2, id, 2), ncclInvalidArgument);
  cudaSetDevice(0);
}

TEST(EmuNccl, CollectivesOverTwoDevicesFromOneThreadInAGroup) { collectives(2, true); }
TEST(EmuNccl, CollectivesOverFourDevicesFromOneThreadInAGroup) { collectives(4, true); }
TEST(EmuNccl, CollectivesOverTwoDevicesFromOneThreadEach) { collectives(2, false); }
TEST(EmuNccl, CollectivesOverFourDevicesFromOneThreadEach) { collectives(4, false); }

TEST(EmuNccl, SumsInRankOrderRoundedToTheType) {
  Clique c(4);
  // bf16: ((1 + 2^-8) + 2^-8) + 0, each sum rounded to bf16 (ties to even):
  // 1 + 2^-8 is a tie and stays 1, twice. Summed in float32 and rounded
  // once, it would be 1 + 2^-7.
  const float in[] = {1, 1.0f / 256, 1.0f / 256, 0};
  const float inF16[] = {1, 1.0f / 2048, 1.0f / 2048, 0};
  std::vector<uint16_t*> b16, f16;
  std::vector<double*> f64;
  std::vector<int32_t*> i32;
  for (int d = 0; d < 4; ++d) {
    b16.push_back(onDevice(d, std::vector<uint16_t>{lwrt::floatToBf16(in[d])}));
    // fp16 (10 mantissa bits): 1 + 2^-11 is a tie: stays 1, twice.
    f16.push_back(onDevice(d, std::vector<uint16_t>{lwrt::floatToF16(inF16[d])}));
    f64.push_back(onDevice(d, std::vector<double>{d == 0 ? 1.0 : 0x1p-53}));
    i32.push_back(onDevice(d, std::vector<int32_t>{d == 0 ? INT32_MAX : 1}));
  }
  c.each(true, [&](int d) {
    size_t r = static_cast<size_t>(d);
    ncclComm_t k = c.comm(d);
    cudaStream_t s = c.stream(d);
    EXPECT_EQ(ncclAllReduce(b16[r], b16[r], 1, ncclBfloat16, ncclSum, k, s), ncclSuccess);
    EXPECT_EQ(ncclAllReduce(f16[r], f16[r], 1, ncclFloat16, ncclSum, k, s), ncclSuccess);
    EXPECT_EQ(ncclAllReduce(f64[r], f64[r], 1, ncclFloat64, ncclSum, k, s), ncclSuccess);
    EXPECT_EQ(ncclAllReduce(i32[r], i32[r], 1, ncclInt32, ncclSum, k, s), ncclSuccess);
  });
  c.sync();
  for (size_t r = 0; r < 4; ++r) {
    EXPECT_EQ(lwrt::bf16ToFloat(fromDevice(b16[r], 1)[0]), 1.0f);
    EXPECT_EQ(lwrt::f16ToFloat(fromDevice(f16[r], 1)[0]), 1.0f);
    EXPECT_EQ(fromDevice(f64[r], 1)[0], 1.0);           // 1 + 2^-53 is a tie, three times
    EXPECT_EQ(fromDevice(i32[r], 1)[0], INT32_MIN + 2); // wraps, as the GPU's add
    for (void* p : {(void*)b16[r], (void*)f16[r], (void*)f64[r], (void*)i32[r]})
      cudaFree(p);
  }
}

TEST(EmuNccl, InPlaceForms) {
  const int n = 2;
  Clique c(n);
  const size_t count = 3;
  std::vector<float*> reduce, gather, scatter, bcast;
  for (int d = 0; d < n; ++d) {
    reduce.push_back(onDevice(d, input(d, count)));
    // All-gather in place: rank d's piece already at offset d.
    std::vector<float> g(count * n, -1);
    std::memcpy(&g[static_cast<size_t>(d) * count], input(d, count).data(), count * sizeof(float));
    gather.push_back(onDevice(d, g));
    scatter.push_back(onDevice(d, input(d, count * n)));
    bcast.push_back(onDevice(d, d == 0 ? input(0, count) : std::vector<float>(count, -1)));
  }
  c.each(true, [&](int d) {
    size_t r = static_cast<size_t>(d);
    EXPECT_EQ(
        ncclAllReduce(reduce[r], reduce[r], count, ncclFloat32, ncclSum, c.comm(d), c.stream(d)),
        ncclSuccess);
    EXPECT_EQ(
        ncclAllGather(gather[r] + r * count, gather[r], count, ncclFloat32, c.comm(d), c.stream(d)),
        ncclSuccess);
    EXPECT_EQ(ncclReduceScatter(scatter[r], scatter[r] + r * count, count, ncclFloat32, ncclSum,
                                c.comm(d), c.stream(d)),
              ncclSuccess);
    EXPECT_EQ(ncclBroadcast(bcast[r], bcast[r], count, ncclFloat32, 0, c.comm(d), c.stream(d)),
              ncclSuccess);
  });
  c.sync();
  for (int d = 0; d < n; ++d) {
    size_t r = static_cast<size_t>(d);
    auto red = fromDevice(reduce[r], count), g = fromDevice(gather[r], count * n),
         sc = fromDevice(scatter[r], count * n), b = fromDevice(bcast[r], count);
    for (size_t i = 0; i < count; ++i) {
      EXPECT_EQ(red[i], input(0, count)[i] + input(1, count)[i]);
      EXPECT_EQ(g[i], input(0, count)[i]);
      EXPECT_EQ(g[count + i], input(1, count)[i]);
      EXPECT_EQ(sc[r * count + i],
                input(0, count * n)[r * count + i] + input(1, count * n)[r * count + i]);
      EXPECT_EQ(b[i], input(0, count)[i]);
    }
    for (auto* v : {&reduce, &gather, &scatter, &bcast})
      cudaFree((*v)[r]);
  }
}

TEST(EmuNccl, SendsAndReceivesInGroupsAndAlone) {
  const int n = 4;
  Clique c(n);
  std::vector<uint8_t*> out, in;
  for (int d = 0; d < n; ++d) {
    out.push_back(onDevice(d, std::vector<uint8_t>(8, static_cast<uint8_t>(d + 1))));
    in.push_back(onDevice(d, std::vector<uint8_t>(8, 0)));
  }
  auto ring = [&](int d) { // each rank sends to the next and receives from the previous
    size_t r = static_cast<size_t>(d);
    EXPECT_EQ(ncclRecv(in[r], 8, ncclUint8, (d + n - 1) % n, c.comm(d), c.stream(d)), ncclSuccess);
    EXPECT_EQ(ncclSend(out[r], 8, ncclUint8, (d + 1) % n, c.comm(d), c.stream(d)), ncclSuccess);
  };
  auto check = [&] {
    c.sync();
    for (int d = 0; d < n; ++d)
      EXPECT_EQ(fromDevice(in[static_cast<size_t>(d)], 8),
                std::vector<uint8_t>(8, static_cast<uint8_t>((d + n - 1) % n + 1)));
  };
  c.each(true, ring); // every rank from one thread, in one group
  check();
  c.each(false, [&](int d) { // one thread per rank, each rank's pair in a group of its own
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    ring(d);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  });
  check();
  // A send and its receive alone, from two threads: device 2 to device 0.
  std::vector<uint8_t> zero(8, 0);
  cudaMemcpy(in[0], zero.data(), 8, cudaMemcpyHostToDevice);
  std::thread sender([&] {
    cudaSetDevice(2);
    EXPECT_EQ(ncclSend(out[2], 8, ncclUint8, 0, c.comm(2), c.stream(2)), ncclSuccess);
  });
  EXPECT_EQ(ncclRecv(in[0], 8, ncclUint8, 2, c.comm(0), c.stream(0)), ncclSuccess);
  sender.join();
  c.sync();
  EXPECT_EQ(fromDevice(in[0], 8), std::vector<uint8_t>(8, 3));
  for (int d = 0; d < n; ++d) {
    cudaFree(out[static_cast<size_t>(d)]);
    cudaFree(in[static_cast<size_t>(d)]);
  }
}

TEST(EmuNccl, RefusesBadCallsAtTheCall) {
  Clique c(2);
  float* x = onDevice(0, std::vector<float>(4, 1));
  cudaSetDevice(0);
  EXPECT_EQ(ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, nullptr, c.stream(0)),
            ncclInvalidArgument);
  EXPECT_EQ(ncclBroadcast(x, x, 4, ncclFloat32, 2, c.comm(0), c.stream(0)), ncclInvalidArgument);
  EXPECT_EQ(ncclSend(x, 4, ncclFloat32, -1, c.comm(0), c.stream(0)), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(x, x, 4, static_cast<ncclDataType_t>(ncclNumTypes), ncclSum, c.comm(0),
                          c.stream(0)),
            ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(x, x, 4, ncclFloat32, static_cast<ncclRedOp_t>(ncclNumOps), c.comm(0),
                          c.stream(0)),
            ncclInvalidArgument);
  // Rank 0 is on device 0; device 1's stream is not its.
  EXPECT_EQ(ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, c.comm(0), c.stream(1)), ncclInvalidUsage);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage); // no group open
  // A refused call fails its group at ncclGroupEnd, and nothing of the group runs.
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, c.comm(0), c.stream(0)), ncclSuccess);
  EXPECT_EQ(ncclBroadcast(x, x, 4, ncclFloat32, 5, c.comm(0), c.stream(0)), ncclInvalidArgument);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
  c.sync();
  EXPECT_EQ(fromDevice(x, 4), std::vector<float>(4, 1));
  cudaFree(x);
}

// --- What would hang or corrupt GPUs: reported, each in a fresh process ----

namespace {

void hangAfterOneSecond() { setenv("LWEMU_HANG_SECONDS", "1", 1); }

/// The two ranks' all-reduces differ in count.
void countMismatch() {
  Clique c(2);
  float* x0 = onDevice(0, std::vector<float>(8, 1));
  float* x1 = onDevice(1, std::vector<float>(8, 1));
  ncclGroupStart();
  ncclAllReduce(x0, x0, 4, ncclFloat32, ncclSum, c.comm(0), c.stream(0));
  ncclAllReduce(x1, x1, 8, ncclFloat32, ncclSum, c.comm(1), c.stream(1));
  ncclGroupEnd();
  c.sync();
}

/// A send and its receive differ in count.
void sendReceiveMismatch() {
  Clique c(2);
  uint8_t* x0 = onDevice(0, std::vector<uint8_t>(8, 1));
  uint8_t* x1 = onDevice(1, std::vector<uint8_t>(8, 1));
  ncclGroupStart();
  ncclSend(x0, 8, ncclUint8, 1, c.comm(0), c.stream(0));
  ncclRecv(x1, 6, ncclUint8, 0, c.comm(1), c.stream(1));
  ncclGroupEnd();
  c.sync();
}

/// Rank 1 never calls its all-reduce.
void rankNeverCalls() {
  hangAfterOneSecond();
  Clique c(2);
  float* x0 = onDevice(0, std::vector<float>(4, 1));
  ncclAllReduce(x0, x0, 4, ncclFloat32, ncclSum, c.comm(0), c.stream(0));
  std::this_thread::sleep_for(std::chrono::seconds(20));
}

/// Rank 1 of a unique id never joins.
void rankNeverJoins() {
  hangAfterOneSecond();
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  ncclComm_t comm;
  ncclCommInitRank(&comm, 2, id, 0);
}

/// Communicators A (#1) and B (#2) over devices 0 and 1, each with a stream
/// of its own per device; thread 0 issues A then B on device 0, thread 1 B
/// then A on device 1, each its second call once its first waits in its
/// rendezvous (as the streams' report shows). Device 0's NCCL slot is then
/// A's, device 1's B's: each waits for the other's.
void oppositeOrders() {
  hangAfterOneSecond();
  Clique a(2), b(2);
  std::vector<std::thread> threads;
  for (int d = 0; d < 2; ++d)
    threads.emplace_back([&, d] {
      float* x = onDevice(d, std::vector<float>(4, 1));
      Clique& first = d == 0 ? a : b;
      Clique& second = d == 0 ? b : a;
      ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, first.comm(d), first.stream(d));
      std::string waiting = "#0 of communicator #" + std::to_string(d + 1) + ", rank " +
                            std::to_string(d) + " (device " + std::to_string(d) +
                            "): waits for the other ranks";
      while (lwemu::describeStreams().find(waiting) == std::string::npos)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, second.comm(d), second.stream(d));
    });
  for (auto& t : threads)
    t.join();
  std::this_thread::sleep_for(std::chrono::seconds(20));
}

} // namespace

TEST(EmuNccl, CountMismatchIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(countMismatch(), "NCCL mismatch: communicator #1's collective #0 differs.*"
                                "rank 0 \\(device 0\\) issued ncclAllReduce\\(count 4, float32, "
                                "sum\\).*rank 1 \\(device 1\\) issued ncclAllReduce\\(count 8");
}

TEST(EmuNccl, SendReceiveMismatchIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(sendReceiveMismatch(),
               "NCCL mismatch: on communicator #1, send #0 from rank 0 to rank 1 differs.*"
               "issued ncclSend\\(count 8, uint8, to rank 1\\).*"
               "issued ncclRecv\\(count 6, uint8, from rank 0\\)");
}

TEST(EmuNccl, RankThatNeverCallsIsAHang) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(rankNeverCalls(),
               "NCCL hang: no NCCL operation made progress for 1 s.*"
               "rank 0 \\(device 0\\):\n *waits in its collective #0, ncclAllReduce\\(count 4.*"
               "rank 1 \\(device 1\\):\n *has not started its collective #0: never called");
}

TEST(EmuNccl, RankThatNeverJoinsIsAHang) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(rankNeverJoins(), "NCCL hang.*ncclCommInitRank #1 \\(2 ranks\\) waits for rank 1, "
                                 "which never called it \\(joined: rank 0 \\(device 0\\)\\)");
}

TEST(EmuNccl, TwoCommunicatorsInOppositeOrdersHang) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(oppositeOrders(),
               "NCCL hang.*ncclAllReduce\\(count 4, float32, sum\\) of communicator #1's rank 1 "
               "waits for device 1's NCCL slot, held by ncclAllReduce\\(count 4, float32, "
               "sum\\) of communicator #2's rank 1.*At most one NCCL operation runs on a device");
}
