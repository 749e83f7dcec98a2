// lwrt/bf16.h - bfloat16, one definition of its rounding
// defines: floatToBf16, bf16ToFloat, roundToBf16
//
// A bf16 is the upper 16 bits of a float32 (sign, the 8-bit exponent, 7
// bits of mantissa). float32 to bf16 rounds to nearest, ties to even (as
// PyTorch, oneDNN and CUDA's __float2bfloat16 do); a NaN stays a quiet NaN
// of its sign. The reference interpreter (interp/Interpreter.cpp) and the CPU
// kernels (runtime/cpu) round with these functions, so the two agree bit
// for bit on every rounding.
//
// Header-only and free of other lwrt headers except lwrt/shard_index.h (for
// LWRT_HOST_DEVICE).
#pragma once

#include "shard_index.h"

#include <stdint.h>
#include <string.h>

namespace lwrt {

LWRT_HOST_DEVICE inline uint16_t floatToBf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: keep the sign, set the quiet bit
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u); // to nearest, ties to the even upper half
  return static_cast<uint16_t>(u >> 16);
}

LWRT_HOST_DEVICE inline float bf16ToFloat(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/// `f` rounded to the nearest bf16, as a float32.
LWRT_HOST_DEVICE inline float roundToBf16(float f) { return bf16ToFloat(floatToBf16(f)); }

} // namespace lwrt
