// EmuRuntimeTest.cu - the emulated device's CUDA runtime and kernel launches against what CUDA
// specifies
//
// Written as CUDA C++ and built like the runtime's sources for the emulated
// device (emu/rewrite_launches.py, then the host compiler).
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <gtest/gtest.h>
#include <thread>
#include <vector>

namespace {

__global__ void writeIndices(int* out, int nx, int ny) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  int z = blockIdx.z;
  if (x < nx && y < ny)
    out[(z * ny + y) * nx + x] = x + 1000 * y + 1000000 * z;
}

__global__ void blockSums(const float* x, float* out, int n) {
  __shared__ float s[256];
  float v = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    v += x[i];
  s[threadIdx.x] = v;
  __syncthreads();
  for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k)
      s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    out[blockIdx.x] = s[0];
}

__global__ void fill(float* x, int n, float v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] = v;
}

__global__ void addOne(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] += 1;
}

/// Spins until *flag is set (by another stream's kernel or the host).
__global__ void spinUntil(const int* flag) {
  while (!__atomic_load_n(flag, __ATOMIC_ACQUIRE))
    std::this_thread::yield();
}

__global__ void setFlag(int* flag) { __atomic_store_n(flag, 1, __ATOMIC_RELEASE); }

__global__ void divergentBarrier(float* x) {
  if (threadIdx.x > 0)
    __syncthreads();
  x[threadIdx.x] = 1;
}

template <typename T> T* deviceAlloc(size_t n) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
  return static_cast<T*>(p);
}

cudaStream_t nonBlocking() {
  cudaStream_t s;
  EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  return s;
}

} // namespace

TEST(EmuRuntime, DeviceSaysItIsEmulated) {
  int n = 0;
  ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  EXPECT_GE(n, 4);
  cudaDeviceProp p;
  ASSERT_EQ(cudaGetDeviceProperties(&p, 0), cudaSuccess);
  EXPECT_NE(std::string(p.name).find("emulated GPU"), std::string::npos);
  EXPECT_EQ(p.major, 9);
  EXPECT_EQ(p.maxThreadsPerBlock, 1024);
  EXPECT_EQ(cudaSetDevice(n), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess); // reading it clears it
}

TEST(EmuRuntime, CopiesAndGridIndices) {
  const int nx = 37, ny = 5, nz = 3;
  int* d = deviceAlloc<int>(nx * ny * nz);
  cudaStream_t s = nonBlocking();
  writeIndices<<<dim3(2, 2, nz), dim3(32, 4), 0, s>>>(d, nx, ny);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<int> h(nx * ny * nz, -1);
  ASSERT_EQ(cudaMemcpyAsync(h.data(), d, h.size() * sizeof(int), cudaMemcpyDeviceToHost, s),
            cudaSuccess);
  // A copy to pageable memory returns once it is done.
  for (int z = 0; z < nz; ++z)
    for (int y = 0; y < ny; ++y)
      for (int x = 0; x < nx; ++x)
        ASSERT_EQ(h[(z * ny + y) * nx + x], x + 1000 * y + 1000000 * z);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
}

TEST(EmuRuntime, SharedMemoryAndBarriers) {
  const int n = 100003;
  std::vector<float> h(n);
  for (int i = 0; i < n; ++i)
    h[i] = static_cast<float>(i % 7);
  float* x = deviceAlloc<float>(n);
  float* out = deviceAlloc<float>(8);
  ASSERT_EQ(cudaMemcpy(x, h.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  blockSums<<<8, 256>>>(x, out, n);
  float r[8];
  ASSERT_EQ(cudaMemcpy(r, out, sizeof r, cudaMemcpyDeviceToHost), cudaSuccess);
  double total = 0, want = 0;
  for (float v : r)
    total += v;
  for (float v : h)
    want += v;
  EXPECT_EQ(total, want);
  cudaFree(x);
  cudaFree(out);
}

TEST(EmuRuntime, LaunchLimitsAsTheHardware) {
  float* x = deviceAlloc<float>(4);
  fill<<<1, 1025>>>(x, 4, 1.f);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  fill<<<dim3(1, 65536), 32>>>(x, 4, 1.f);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  fill<<<1, dim3(1, 1, 65)>>>(x, 4, 1.f);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  fill<<<1, 32, 49 * 1024>>>(x, 4, 1.f);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  fill<<<0, 32>>>(x, 4, 1.f);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  fill<<<1, 1024>>>(x, 4, 1.f);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(x);
}

TEST(EmuRuntime, StreamsRunConcurrently) {
  // A kernel on stream a waits for a flag that a kernel queued later on
  // stream b sets: only streams that really run at once finish this.
  int* flag = deviceAlloc<int>(1);
  ASSERT_EQ(cudaMemset(flag, 0, sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaStream_t a = nonBlocking(), b = nonBlocking();
  spinUntil<<<1, 1, 0, a>>>(flag);
  setFlag<<<1, 1, 0, b>>>(flag);
  EXPECT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
  cudaFree(flag);
}

TEST(EmuRuntime, WaitTakesTheMostRecentRecordAtTheCall) {
  int* gate1 = deviceAlloc<int>(1);
  int* gate2 = deviceAlloc<int>(1);
  float* x = deviceAlloc<float>(1);
  cudaMemset(gate1, 0, sizeof(int));
  cudaMemset(gate2, 0, sizeof(int));
  cudaDeviceSynchronize();
  cudaStream_t s1 = nonBlocking(), s2 = nonBlocking();
  cudaEvent_t e;
  ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
  spinUntil<<<1, 1, 0, s1>>>(gate1);
  ASSERT_EQ(cudaEventRecord(e, s1), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(s2, e, 0), cudaSuccess); // waits for the record above
  fill<<<1, 1, 0, s2>>>(x, 1, 3.f);
  spinUntil<<<1, 1, 0, s1>>>(gate2);
  ASSERT_EQ(cudaEventRecord(e, s1), cudaSuccess); // a later record: s2 does not wait for it
  EXPECT_EQ(cudaStreamQuery(s2), cudaErrorNotReady);
  int one = 1;
  // The legacy stream does not wait for non-blocking streams.
  ASSERT_EQ(cudaMemcpy(gate1, &one, sizeof one, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s2), cudaSuccess);
  float h = 0;
  cudaMemcpy(&h, x, sizeof h, cudaMemcpyDeviceToHost);
  EXPECT_EQ(h, 3.f);
  EXPECT_EQ(cudaEventQuery(e), cudaErrorNotReady);
  ASSERT_EQ(cudaMemcpy(gate2, &one, sizeof one, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaEventSynchronize(e), cudaSuccess);
  cudaEventDestroy(e);
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
  cudaFree(gate1);
  cudaFree(gate2);
  cudaFree(x);
}

TEST(EmuRuntime, GraphCaptureForkJoinAndReplay) {
  const int n = 1000;
  float *x = deviceAlloc<float>(n), *y = deviceAlloc<float>(n);
  cudaStream_t s = nonBlocking(), side = nonBlocking();
  cudaEvent_t fork, join;
  cudaEventCreateWithFlags(&fork, cudaEventDisableTiming);
  cudaEventCreateWithFlags(&join, cudaEventDisableTiming);
  fill<<<4, 256, 0, s>>>(x, n, 0.f);
  fill<<<4, 256, 0, s>>>(y, n, 10.f);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  addOne<<<4, 256, 0, s>>>(x, n);
  ASSERT_EQ(cudaEventRecord(fork, s), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(side, fork, 0), cudaSuccess); // side joins the capture
  addOne<<<4, 256, 0, side>>>(y, n);
  ASSERT_EQ(cudaEventRecord(join, side), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(s, join, 0), cudaSuccess);
  std::vector<float> h(n, -1);
  cudaGraph_t g;
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  // Nothing ran during the capture.
  ASSERT_EQ(cudaMemcpy(h.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(h[0], 0.f);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaMemcpy(h.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost);
  EXPECT_EQ(h[n - 1], 3.f);
  cudaMemcpy(h.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost);
  EXPECT_EQ(h[0], 13.f);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  cudaStreamDestroy(side);
  cudaFree(x);
  cudaFree(y);
}

TEST(EmuRuntime, CaptureRefusesWhatCudaRefuses) {
  cudaStream_t s = nonBlocking(), side = nonBlocking();
  float* x = deviceAlloc<float>(16);
  // Allocating and synchronizing while capturing in thread-local mode.
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 64), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  cudaGraph_t g = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(g, nullptr);
  // A forked stream not joined back.
  cudaEvent_t fork;
  cudaEventCreateWithFlags(&fork, cudaEventDisableTiming);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  fill<<<1, 16, 0, s>>>(x, 16, 1.f);
  cudaEventRecord(fork, s);
  cudaStreamWaitEvent(side, fork, 0);
  fill<<<1, 16, 0, side>>>(x, 16, 2.f);
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureUnjoined);
  // The legacy stream cannot be captured.
  EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal),
            cudaErrorStreamCaptureUnsupported);
  cudaGetLastError();
  cudaEventDestroy(fork);
  cudaStreamDestroy(s);
  cudaStreamDestroy(side);
  cudaFree(x);
}

TEST(EmuRuntime, DevicesAndTheirStreams) {
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  cudaStream_t s1 = nonBlocking();
  float* x1 = deviceAlloc<float>(8);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaEvent_t e0;
  cudaEventCreate(&e0);
  // An event records on a stream of its own device; a kernel launches on
  // a stream of the current device.
  EXPECT_EQ(cudaEventRecord(e0, s1), cudaErrorInvalidResourceHandle);
  fill<<<1, 8, 0, s1>>>(x1, 8, 1.f);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  float* x0 = deviceAlloc<float>(8);
  cudaStream_t s0 = nonBlocking();
  fill<<<1, 8, 0, s0>>>(x0, 8, 5.f);
  EXPECT_EQ(cudaMemcpyPeerAsync(x1, 1, x0, 0, 8 * sizeof(float), s0), cudaSuccess);
  EXPECT_EQ(cudaMemcpyPeerAsync(x1, 0, x0, 0, 8 * sizeof(float), s0), cudaErrorInvalidValue);
  cudaGetLastError();
  cudaStreamSynchronize(s0);
  float h[8];
  cudaMemcpy(h, x1, sizeof h, cudaMemcpyDeviceToHost);
  EXPECT_EQ(h[7], 5.f);
  int can = 0;
  EXPECT_EQ(cudaDeviceCanAccessPeer(&can, 0, 1), cudaSuccess);
  EXPECT_EQ(can, 1);
  cudaEventDestroy(e0);
  cudaStreamDestroy(s0);
  cudaStreamDestroy(s1);
  cudaFree(x0);
  cudaFree(x1);
}

TEST(EmuRuntime, CopiesCheckTheirPointers) {
  float* x = deviceAlloc<float>(4);
  std::vector<float> h(8);
  // Past the allocation, or the wrong direction: invalid, nothing copied.
  EXPECT_EQ(cudaMemcpy(x, h.data(), 8 * sizeof(float), cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(h.data(), x, 4 * sizeof(float), cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(h.data()), cudaErrorInvalidValue);
  cudaGetLastError();
  // Freed memory reads as NaN, as garbage would.
  fill<<<1, 4>>>(x, 4, 2.f);
  float* y = deviceAlloc<float>(4);
  cudaFree(x);
  EXPECT_EQ(cudaMemcpy(h.data(), y, 4 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(std::isnan(h[0])); // fresh device memory is not zeros either
  cudaFree(y);
}

// The emulator's streams are threads: a death test re-runs the binary
// ("threadsafe") instead of forking a process without them.
TEST(EmuRuntimeDeath, DivergentBarrierStopsTheRun) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        float* x = deviceAlloc<float>(32);
        divergentBarrier<<<1, 32>>>(x);
        cudaDeviceSynchronize();
      },
      "divergent __syncthreads in kernel divergentBarrier");
}

TEST(EmuRuntimeDeath, OverlappingCopyStopsTheRun) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        float* x = deviceAlloc<float>(32);
        cudaMemcpyAsync(x + 1, x, 16 * sizeof(float), cudaMemcpyDeviceToDevice, nullptr);
      },
      "cudaMemcpyAsync: the source and destination overlap");
}
