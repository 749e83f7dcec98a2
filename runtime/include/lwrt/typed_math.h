// lwrt/typed_math.h - exp, pow and sqrt in the precision of their operand
// defines: expOf, powOf, sqrtOf
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
inline LWRT_HOST_DEVICE double sqrtOf(double v) { return sqrt(v); }

} // namespace lwrt
