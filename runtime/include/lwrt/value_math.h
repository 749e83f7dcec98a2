// lwrt/value_math.h - integer wrapping and element conversion, on the host and the device
// defines: wrapAdd, wrapSub, wrapMul, minInt, toInt, castValue
//
// The arithmetic the CPU kernels (runtime/cpu/TensorKernels.cpp) and the
// CUDA kernels (runtime/cuda/TensorKernels.cu, TensorReduceKernels.cu)
// share for integer elements and for cast: one definition, LWRT_HOST_DEVICE.
// Header-only and free of other lwrt headers except lwrt/shard_index.h
// (for LWRT_HOST_DEVICE).
#pragma once

#include "shard_index.h"

#include <math.h>
#include <stdint.h>
#include <type_traits>

namespace lwrt {

/// Wrapping integer arithmetic (signed overflow is undefined in C++).
template <typename T> LWRT_HOST_DEVICE T wrapAdd(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}
template <typename T> LWRT_HOST_DEVICE T wrapSub(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
}
template <typename T> LWRT_HOST_DEVICE T wrapMul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
}

/// The smallest value of the signed integer type T (int32_t or int64_t).
template <typename T> LWRT_HOST_DEVICE T minInt() {
  if constexpr (sizeof(T) == 8)
    return static_cast<T>(INT64_MIN);
  else
    return static_cast<T>(INT32_MIN);
}

/// v as the integer the reference keeps: floats truncated toward zero,
/// NaN to 0, saturated at the int64 range.
template <typename From> LWRT_HOST_DEVICE int64_t toInt(From v) {
  if constexpr (std::is_floating_point_v<From>) {
    double t = trunc(static_cast<double>(v));
    if (!(t == t))
      return 0;
    if (t <= -9223372036854775808.0)
      return INT64_MIN;
    if (t >= 9223372036854775808.0)
      return INT64_MAX;
    return static_cast<int64_t>(t);
  } else {
    return static_cast<int64_t>(v);
  }
}

/// Element v of a cast to To: 0 or 1 when `toBool`; a float through double
/// when it comes from an integer (as the reference); an integer through
/// toInt (int32 wraps).
template <typename To, typename From> LWRT_HOST_DEVICE To castValue(From v, bool toBool) {
  if (toBool)
    return static_cast<To>(v != From{0} ? 1 : 0);
  if constexpr (std::is_floating_point_v<To>)
    return static_cast<To>(
        static_cast<std::conditional_t<std::is_floating_point_v<From>, From, double>>(v));
  else
    return static_cast<To>(toInt(v));
}

} // namespace lwrt
