// cuda/KernelSupport.cuh - what the CUDA kernel files share (not installed)
// defines: LWRT_REJECT, LWRT_LAUNCH, kReduceThreads, blockSum
#pragma once

#include "cuda/Context.h"

/// Records why a kernel does not take its operands and returns false.
#define LWRT_REJECT(what) ::lwrt::cuda::fail(__FILE__, __LINE__, what)

/// Launches kernel<<<grid, block>>> on the context's stream and checks the launch.
#define LWRT_LAUNCH(kernel, grid, block, ...)                                                      \
  do {                                                                                             \
    kernel<<<(grid), (block), 0, ::lwrt::cuda::context().stream>>>(__VA_ARGS__);                   \
    LWRT_CUDA(cudaGetLastError());                                                                 \
  } while (0)

namespace lwrt::cuda {

/// Threads of the reduction kernels (a power of two, at most this many).
constexpr int kReduceThreads = 256;

/// The sum of v over the block, in a fixed order (a tree over blockDim.x,
/// a power of two); `shared` holds blockDim.x doubles.
inline __device__ double blockSum(double v, double* shared) {
  unsigned t = threadIdx.x;
  shared[t] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s)
      shared[t] += shared[t + s];
    __syncthreads();
  }
  double r = shared[0];
  __syncthreads();
  return r;
}

} // namespace lwrt::cuda
