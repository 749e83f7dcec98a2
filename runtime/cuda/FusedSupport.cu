//===- FusedSupport.cu - What generated fused kernels call on CUDA --------===//
#include "cuda/Context.h"
#include "lwrt/fused.h"

#include <string>

namespace lwrt::cuda {

cudaStream_t fusedStream() { return context().stream; }

unsigned fusedBlocks(int64_t n) { return blocksFor(n); }

bool fusedLaunched(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    return fail(__FILE__, __LINE__,
                std::string("launch of ") + kernel + ": " + cudaGetErrorString(status));
  return true;
}

} // namespace lwrt::cuda
