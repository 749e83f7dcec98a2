// lwrt/fused.h - what the kernels lwcc generates for fused regions call
// defines: LWRT_FUSED_ELEMENT, LWRT_FUSED_LOOP, fusedMul, fusedClip; cpu::fusedFor;
// cuda::fusedStream,
//          cuda::fusedBlocks, cuda::kFusedThreads, cuda::fusedLaunched, LWRT_FUSED_LAUNCH,
//          LWRT_FUSED_REDUCE_LAUNCH
//
// A trainer's fused ops (passes/Fuse.cpp) are kernels of its own source
// (codegen/FusedKernels.cpp): one element function, host and device, that a
// CPU trainer calls in a loop on its thread team and a CUDA trainer in a
// grid-stride kernel on the current context's stream.
#pragma once

#include "lwrt/activation_math.h"
#include "lwrt/bf16.h"
#include "lwrt/f16.h"
#include "lwrt/shard_index.h"

#include <cmath>
#include <cstdint>
#include <functional>

/// An element function: inlined into the host loop or the kernel.
#if defined(__CUDACC__)
#define LWRT_FUSED_ELEMENT static __host__ __device__ __forceinline__
#else
#define LWRT_FUSED_ELEMENT [[maybe_unused]] static inline __attribute__((always_inline))
#endif

/// A host loop over an element function: every call in it inlined, the
/// value helpers (lwrt/bf16.h, activation_math.h) included, though they
/// are built at the trainer's level and the loop at -O3.
#if defined(__GNUC__)
#define LWRT_FUSED_LOOP [[maybe_unused]] static __attribute__((flatten))
#else
#define LWRT_FUSED_LOOP [[maybe_unused]] static
#endif

namespace lwrt {

/// a * b rounded, never contracted with an add into an fma (the runtime's
/// unfused kernels round the product before the sum).
LWRT_HOST_DEVICE inline float fusedMul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
LWRT_HOST_DEVICE inline double fusedMul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

/// v clamped to [lo, hi] as the clip kernels clamp (a NaN stays NaN).
LWRT_HOST_DEVICE inline double fusedClip(double v, double lo, double hi) {
  v = v < lo ? lo : v;
  return hi < v ? hi : v;
}

} // namespace lwrt

namespace lwrt::cpu {

/// Calls body(first, last) for contiguous ranges covering [0, n) on the
/// calling thread's team (lwrt/cpu_threads.h), as the runtime's own
/// elementwise kernels split their work; true.
bool fusedFor(int64_t n, const std::function<void(int64_t, int64_t)>& body);

} // namespace lwrt::cpu

#if defined(__CUDACC__) || defined(LWCC_EMULATED_GPU)
#include <cuda_runtime.h>

namespace lwrt::cuda {

/// The calling thread's context's stream, where its runtime calls run.
cudaStream_t fusedStream();
/// Threads per block, and the blocks of a grid-stride loop over n items.
constexpr unsigned kFusedThreads = 256;
unsigned fusedBlocks(int64_t n);
/// Whether the last launch succeeded; if not, the context's error names
/// `kernel` and false is returned.
bool fusedLaunched(const char* kernel);

} // namespace lwrt::cuda

/// kernel<<<blocks for n items, kFusedThreads>>>(args...) on the context's
/// stream (on the emulated device, its launcher: the trainer's source is
/// compiled as host C++ there).
#if defined(LWCC_EMULATED_GPU)
#define LWRT_FUSED_LAUNCH(kernel, n, ...)                                                          \
  ::lwemu::launch(                                                                                 \
      #kernel, __FILE__, __LINE__, [=](auto... lwemu_a) { kernel(lwemu_a...); },                   \
      dim3(::lwrt::cuda::fusedBlocks(n)), dim3(::lwrt::cuda::kFusedThreads), 0,                    \
      ::lwrt::cuda::fusedStream())(__VA_ARGS__)
#else
#define LWRT_FUSED_LAUNCH(kernel, n, ...)                                                          \
  kernel<<<::lwrt::cuda::fusedBlocks(n), ::lwrt::cuda::kFusedThreads, 0,                           \
           ::lwrt::cuda::fusedStream()>>>(__VA_ARGS__)
#endif

/// kernel<<<blocks, kFusedThreads>>>(args...) on the context's stream: a
/// kernel with reductions, one block per sum (a fixed order of its adds).
#if defined(LWCC_EMULATED_GPU)
#define LWRT_FUSED_REDUCE_LAUNCH(kernel, blocks, ...)                                              \
  ::lwemu::launch(                                                                                 \
      #kernel, __FILE__, __LINE__, [=](auto... lwemu_a) { kernel(lwemu_a...); },                   \
      dim3(static_cast<unsigned>(blocks)), dim3(::lwrt::cuda::kFusedThreads), 0,                   \
      ::lwrt::cuda::fusedStream())(__VA_ARGS__)
#else
#define LWRT_FUSED_REDUCE_LAUNCH(kernel, blocks, ...)                                              \
  kernel<<<static_cast<unsigned>(blocks), ::lwrt::cuda::kFusedThreads, 0,                          \
           ::lwrt::cuda::fusedStream()>>>(__VA_ARGS__)
#endif
#endif
