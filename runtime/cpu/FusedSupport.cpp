//===- FusedSupport.cpp - What generated fused kernels call on the CPU ----===//
#include "cpu/Parallel.h"
#include "cpu/TensorSupport.h"
#include "lwrt/fused.h"

namespace lwrt::cpu {

bool fusedFor(int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  detail::parallelFor(n, detail::kGrain, [&](int64_t first, int64_t last) { body(first, last); });
  return true;
}

} // namespace lwrt::cpu
