// cpu/Common.h - helpers shared by the CPU kernel files (not installed)
// defines: dispatch, dispatchNumeric, sameType, floatViews, rowMajor, blocked8
#pragma once

#include "lwrt/kernel_checks.h"
#include "lwrt/tensor.h"

#include <cstdint>
#include <initializer_list>

namespace lwrt::cpu::detail {

/// Runs fn(T{}) for the float element type `t`; false for other types.
template <typename Fn> bool dispatch(DType t, Fn fn) { return dispatchFloat(t, fn); }

/// dispatch for F32 and F64, and fn(int64_t{}) or fn(int32_t{}) for I64 and I32.
using ::lwrt::dispatchNumeric;
using ::lwrt::rowMajor;

/// All views have element type `t` and hold data (or no elements).
inline bool sameType(DType t, std::initializer_list<const TensorView*> views) {
  for (const TensorView* v : views)
    if (v->dtype != t || (v->data == nullptr && v->numel() != 0))
      return false;
  return true;
}

/// Like sameType, for a float element type.
inline bool floatViews(DType t, std::initializer_list<const TensorView*> views) {
  return (t == DType::F32 || t == DType::F64) && sameType(t, views);
}

/// Every view is a float32 [N, C, H, W] in nChw8c (C a multiple of 8).
inline bool blocked8(std::initializer_list<const TensorView*> views) {
  for (const TensorView* v : views)
    if (v->layout != Layout::NChw8c || v->dtype != DType::F32 || v->rank() != 4 ||
        v->shape[1] % 8 != 0)
      return false;
  return true;
}

} // namespace lwrt::cpu::detail
