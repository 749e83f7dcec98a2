// lwrt/dropout.h - the dropout mask's random numbers, one definition for every backend
// defines: dropoutUniform, dropoutMaskValue (and, from lwrt/shard_index.h, ShardIndex)
//
// The reference interpreter (interp/TrainOps.cpp) and the CPU and CUDA
// dropout_mask kernels all call these, so a mask is the same bits whichever
// computes it. An element is keyed by its index in the whole mask
// (ShardIndex::global), so that the pieces of a mask split over devices are
// the whole mask's elements at their places. Header-only and free of other
// lwrt headers except lwrt/shard_index.h; under nvcc it compiles for the
// host and the device.
#pragma once

#include "shard_index.h"

namespace lwrt {

/// Element k of the counter-based dropout RNG for (seed, step): uniform in
/// [0, 1), from splitmix64 over a key mixing the three; 53 random bits.
inline LWRT_HOST_DEVICE double dropoutUniform(int64_t seed, int64_t step, int64_t k) {
  uint64_t z = static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ull +
               static_cast<uint64_t>(step) * 0xD1B54A32D192ED03ull + static_cast<uint64_t>(k);
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

/// Element k of a piece of the mask: 1/(1-ratio) where the whole mask's
/// element keeps its value (uniform >= ratio), else 0.
inline LWRT_HOST_DEVICE double dropoutMaskValue(int64_t seed, int64_t step, double ratio,
                                                const ShardIndex& piece, int64_t k) {
  return dropoutUniform(seed, step, piece.global(k)) >= ratio ? 1.0 / (1.0 - ratio) : 0.0;
}

} // namespace lwrt
