// lwrt/f16.h - IEEE half precision (fp16), one definition of its rounding
// defines: floatToF16, f16ToFloat, roundToF16, isFiniteFloat
//
// An fp16 has a sign, a 5-bit exponent (bias 15) and 10 bits of mantissa:
// normal values from 2^-14 to 65504, subnormals down to 2^-24. float32 to
// fp16 rounds to nearest, ties to even, through the subnormals; a value of
// 65520 or more in magnitude becomes infinity (it rounds past 65504), as
// CUDA's __float2half_rn and PyTorch do; a NaN stays a quiet NaN of its
// sign. The reference interpreter (interp/Interpreter.cpp) and the CPU kernels
// (runtime/cpu) round with these functions, so the two agree bit for bit.
//
// Header-only and free of other lwrt headers except lwrt/shard_index.h (for
// LWRT_HOST_DEVICE).
#pragma once

#include "shard_index.h"

#include <stdint.h>
#include <string.h>

namespace lwrt {

LWRT_HOST_DEVICE inline uint16_t floatToF16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) // NaN: keep the sign, quiet
    return static_cast<uint16_t>(sign | 0x7e00u);
  if (a >= 0x477ff000u) // 65520 and above (infinity too) round to infinity
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (a >= 0x38800000u) {                 // normal: 2^-14 and above
    uint32_t h = (a - 0x38000000u) >> 13; // exponent rebiased from 127 to 15
    const uint32_t rest = a & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
      ++h; // a carry into the exponent is still the right value
    return static_cast<uint16_t>(sign | h);
  }
  if (a < 0x33000000u) // below half of 2^-24: zero
    return static_cast<uint16_t>(sign);
  // Subnormal: the value in units of 2^-24, rounded to nearest even.
  const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - e; // 14..24
  uint32_t h = m >> shift;
  const uint32_t rest = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
  if (rest > halfway || (rest == halfway && (h & 1u)))
    ++h;
  return static_cast<uint16_t>(sign | h);
}

LWRT_HOST_DEVICE inline float f16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t u;
  if (e == 0x1fu) {
    u = sign | 0x7f800000u | (m << 13);
  } else if (e == 0) {
    const float f = static_cast<float>(m) * 5.9604644775390625e-8f; // m * 2^-24, exact
    return sign ? -f : f;
  } else {
    u = sign | ((e + 112u) << 23) | (m << 13);
  }
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/// `f` rounded to the nearest fp16, as a float32.
LWRT_HOST_DEVICE inline float roundToF16(float f) { return f16ToFloat(floatToF16(f)); }

/// Whether `f` is neither infinite nor NaN, by its bits (true under any
/// floating-point compiler flags).
LWRT_HOST_DEVICE inline bool isFiniteFloat(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (u & 0x7f800000u) != 0x7f800000u;
}

} // namespace lwrt
