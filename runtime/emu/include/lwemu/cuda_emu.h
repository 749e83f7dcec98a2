// lwemu/cuda_emu.h - what a CUDA source needs to compile as host C++ for the emulated device
// defines: threadIdx, min, max, blockIdx, blockDim, gridDim, warpSize, __shared__, __syncthreads,
//          atomicCAS, atomicAdd, atomicExch, atomicMax, atomicMin, lwemu::launch,
//          LWCC_EMULATED_GPU
//
// Force-included (-include) before every CUDA source the emulated build
// compiles with the host compiler, after emu/rewrite_launches.py turned its
// kernel launches into lwemu::launch calls. The real CUDA headers declare
// the runtime's types and functions (the emulator defines the functions);
// this header adds what nvcc provides inside kernels:
// - the built-in indices as thread-local variables, which the emulator sets
//   for each GPU thread it runs (emu/Launch.cpp runs a block's threads as
//   fibers of one host thread, switching at __syncthreads);
// - __shared__ variables as static thread-locals: one per host thread, so
//   shared by the fibers of the block running there, and uninitialized as
//   far as the kernel may assume;
// - atomics as host atomics (several streams run at once on host threads).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cuda_runtime.h>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#define LWCC_EMULATED_GPU 1

#undef __shared__
#define __shared__ static thread_local

extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;
constexpr int warpSize = 32;

/// CUDA's min and max of two numbers (device code has them as functions for
/// every arithmetic type, mixed types taking the common one).
template <typename A, typename B>
inline std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>,
                        std::common_type_t<A, B>>
min(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(b) < static_cast<C>(a) ? static_cast<C>(b) : static_cast<C>(a);
}
template <typename A, typename B>
inline std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>,
                        std::common_type_t<A, B>>
max(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(a) < static_cast<C>(b) ? static_cast<C>(b) : static_cast<C>(a);
}

/// Waits until every thread of the block reached it (a fiber switch).
void __syncthreads();

template <typename T> inline T atomicCAS(T* p, T compare, T value) {
  static_assert(std::is_integral_v<T> && (sizeof(T) == 4 || sizeof(T) == 8),
                "atomicCAS takes 32- and 64-bit integers");
  __atomic_compare_exchange_n(p, &compare, value, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare; // the old value, whether or not it was replaced
}
template <typename T> inline T atomicExch(T* p, T value) {
  return __atomic_exchange_n(p, value, __ATOMIC_SEQ_CST);
}
template <typename T> inline T atomicAdd(T* p, T value) {
  if constexpr (std::is_integral_v<T>) {
    return __atomic_fetch_add(p, value, __ATOMIC_SEQ_CST);
  } else {
    T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (!__atomic_compare_exchange(p, &old, &(const T&)(old + value), false, __ATOMIC_SEQ_CST,
                                      __ATOMIC_SEQ_CST)) {
    }
    return old;
  }
}
template <typename T> inline T atomicMax(T* p, T value) {
  T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (old < value &&
         !__atomic_compare_exchange_n(p, &old, value, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}
template <typename T> inline T atomicMin(T* p, T value) {
  T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (value < old &&
         !__atomic_compare_exchange_n(p, &old, value, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}

namespace lwemu {

/// Where a kernel was launched, for reports.
struct LaunchSite {
  const char* kernel;
  const char* file;
  int line;
};

/// Checks a launch as the hardware does (block at most 1024 threads, x and
/// y at most 1024 and z 64, grid y and z at most 65535, dynamic shared
/// memory at most 48 KiB, a valid stream); on success enqueues `thread` to
/// run once per GPU thread of the grid on `stream`. Sets the calling host
/// thread's last error (cudaGetLastError) as a launch does.
void launchKernel(const LaunchSite& site, dim3 grid, dim3 block, size_t sharedBytes,
                  cudaStream_t stream, std::function<void()> thread);

/// A launch written by rewrite_launches.py: the configuration, then the
/// arguments (evaluated once and copied, as CUDA copies them).
template <typename Invoke> class Launcher {
public:
  Launcher(LaunchSite site, Invoke invoke, dim3 grid, dim3 block, size_t shared,
           cudaStream_t stream)
      : site_(site), invoke_(std::move(invoke)), grid_(grid), block_(block), shared_(shared),
        stream_(stream) {}

  template <typename... Args> void operator()(Args&&... args) {
    launchKernel(site_, grid_, block_, shared_, stream_,
                 [invoke = invoke_, params = std::make_tuple(std::decay_t<Args>(args)...)]() {
                   std::apply(invoke, params);
                 });
  }

private:
  LaunchSite site_;
  Invoke invoke_;
  dim3 grid_, block_;
  size_t shared_;
  cudaStream_t stream_;
};

template <typename Invoke>
Launcher<Invoke> launch(const char* kernel, const char* file, int line, Invoke invoke, dim3 grid,
                        dim3 block, size_t shared = 0, cudaStream_t stream = nullptr) {
  return Launcher<Invoke>(LaunchSite{kernel, file, line}, std::move(invoke), grid, block, shared,
                          stream);
}

} // namespace lwemu
