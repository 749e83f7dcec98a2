// lwrt/shard_index.h - where an element of a shard sits in the whole tensor, one definition
// defines: kShardMaxRank, ShardIndex, makeShardIndex
//
// A multi-device step computes pieces of a tensor on each device: a piece
// is the box of the whole tensor that starts at `offsets` and has the
// piece's own shape. Kernels whose result depends on an element's place in
// the whole tensor (the dropout mask, keyed by the element's index there)
// map a piece's row-major index k to the whole tensor's with
// ShardIndex::global. The reference interpreter (interp/TrainOps.cpp) and
// the CPU and CUDA dropout kernels all call it, so the three cannot
// disagree. Header-only and free of other lwrt headers but host_device.h:
// lwcc's own libraries include it from the source tree, and under nvcc it
// compiles for the host and the device.
#pragma once

#include "host_device.h"

#include <stdint.h>

namespace lwrt {

/// The highest rank of a piece ShardIndex maps (the IR's tensors stay far below).
constexpr int kShardMaxRank = 8;

/// A piece of a whole tensor: its shape, the whole tensor's row-major
/// strides and where the piece starts in each dim. Plain data, so a CUDA
/// kernel takes it by value. rank 0 means the piece is the whole tensor.
struct ShardIndex {
  int32_t rank = 0;
  int64_t shape[kShardMaxRank] = {};
  int64_t wholeStride[kShardMaxRank] = {};
  int64_t offset[kShardMaxRank] = {};

  /// The whole tensor's row-major index of the piece's element k: k's
  /// multi-index in the piece's shape, moved by the offsets, flattened with
  /// the whole tensor's strides.
  LWRT_HOST_DEVICE int64_t global(int64_t k) const {
    if (rank == 0)
      return k;
    int64_t g = 0;
    for (int32_t d = rank - 1; d >= 0; --d) {
      int64_t i = k % shape[d];
      k /= shape[d];
      g += (i + offset[d]) * wholeStride[d];
    }
    return g;
  }
};

/// The ShardIndex of a piece of `rank` dims with `shape`, starting at
/// `offsets` in a whole tensor of `whole` (null whole or offsets: the piece
/// is the whole tensor). False when the piece does not fit in the whole
/// tensor or the rank is over kShardMaxRank.
inline bool makeShardIndex(int rank, const int64_t* shape, const int64_t* whole,
                           const int64_t* offsets, ShardIndex& out) {
  out = ShardIndex{};
  if (!whole || !offsets)
    return true;
  if (rank < 0 || rank > kShardMaxRank)
    return false;
  out.rank = rank;
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (shape[d] < 0 || offsets[d] < 0 || offsets[d] + shape[d] > whole[d])
      return false;
    out.shape[d] = shape[d];
    out.offset[d] = offsets[d];
    out.wholeStride[d] = stride;
    stride *= whole[d];
  }
  return true;
}

} // namespace lwrt
