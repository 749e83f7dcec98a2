// lwrt/typed_math.h - exp, pow and sqrt in the precision of their operand
// defines: expOf, powOf, sqrtOf, powValue
//
// The shared bodies of lwrt/*_math.h compute some steps in the element type
// (float or double) as the CPU kernels always have: expOf(float) is expf,
// expOf(double) exp, on the host (glibc's, as std::exp) and on the device
// (CUDA's). Header-only and free of other lwrt headers except
// lwrt/shard_index.h (for LWRT_HOST_DEVICE).
#pragma once

#include "shard_index.h"

#include <math.h>

namespace lwrt {

inline LWRT_HOST_DEVICE float expOf(float v) { return expf(v); }
inline LWRT_HOST_DEVICE double expOf(double v) { return exp(v); }
inline LWRT_HOST_DEVICE float powOf(float a, float b) { return powf(a, b); }
inline LWRT_HOST_DEVICE double powOf(double a, double b) { return pow(a, b); }
inline LWRT_HOST_DEVICE float sqrtOf(float v) { return sqrtf(v); }
/// The pow op's value (CPU and CUDA kernels, the interpreter), in double: a
/// square or a cube as products (u * u is exact and u * u * u rounds once,
/// where pow rounds its correct result once too, so the same value, at a
/// fraction of pow's cost: GPT-2's tanh GELU cubes every activation),
/// any other exponent pow.
inline LWRT_HOST_DEVICE double powValue(double u, double v) {
  return v == 2.0 ? u * u : v == 3.0 ? u * u * u : pow(u, v);
}
inline LWRT_HOST_DEVICE double sqrtOf(double v) { return sqrt(v); }

} // namespace lwrt
