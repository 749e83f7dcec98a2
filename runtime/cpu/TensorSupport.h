// cpu/TensorSupport.h - what the CPU tensor kernel files share (not installed)
// defines: kGrain, forEachElement, forEachPieceRange, sameView, floatScalar, intScalar
//
// The loops and operand checks of TensorKernels.cpp, TensorReduceKernels.cpp
// and OptimizerKernels.cpp; their type dispatch and the checks they share
// with the CUDA kernels are lwrt/kernel_checks.h's.
#pragma once

#include "Parallel.h"
#include "lwrt/tensor.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace lwrt::cpu::detail {

/// Elements per thread at least, for the elementwise loops: below this a
/// loop costs less than waking a thread.
constexpr int64_t kGrain = 16384;

/// Calls fn(k) for k in [0, n), spread over the pool.
template <typename Fn> void forEachElement(int64_t n, Fn fn) {
  detail::parallelFor(n, kGrain, [&](int64_t first, int64_t last) {
    for (int64_t k = first; k < last; ++k)
      fn(k);
  });
}

/// fn(p, first, end) for the elements [first, end) of piece p of a
/// multi-tensor call (piece p holds elements[p]), the pieces' elements
/// taken as one range and spread over the pool: one pass over them all,
/// not one per piece.
template <typename Fn> void forEachPieceRange(const std::vector<int64_t>& elements, Fn fn) {
  std::vector<int64_t> start(elements.size() + 1, 0);
  for (size_t p = 0; p < elements.size(); ++p)
    start[p + 1] = start[p] + elements[p];
  detail::parallelFor(start.back(), kGrain, [&](int64_t first, int64_t last) {
    size_t p = static_cast<size_t>(std::upper_bound(start.begin(), start.end(), first) -
                                   start.begin() - 1);
    for (; p < elements.size() && start[p] < last; ++p)
      fn(p, std::max(first, start[p]) - start[p], std::min(last, start[p + 1]) - start[p]);
  });
}

/// Same element type, shape and layout: elementwise over such views is the
/// same loop in any layout (the CPU backend keeps some activations in
/// nChw8c, lwrt/tensor.h).
inline bool sameView(const TensorView& a, const TensorView& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.layout == b.layout;
}

/// A float scalar operand (lr) of either float type.
inline bool floatScalar(const TensorView& t, double& out) {
  if (t.numel() != 1)
    return false;
  if (t.dtype == DType::F32)
    out = *t.as<float>();
  else if (t.dtype == DType::F64)
    out = *t.as<double>();
  else
    return false;
  return true;
}

/// An integer scalar operand (step) of either integer type.
inline bool intScalar(const TensorView& t, int64_t& out) {
  if (t.numel() != 1)
    return false;
  if (t.dtype == DType::I64)
    out = *t.as<int64_t>();
  else if (t.dtype == DType::I32)
    out = *t.as<int32_t>();
  else
    return false;
  return true;
}

} // namespace lwrt::cpu::detail
