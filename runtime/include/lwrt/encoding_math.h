// lwrt/encoding_math.h - the math of cumsum, tile, mod, sin, cos and the norm reductions
// defines: CumSumParams, TileParams, ModParams, NormKind, modValue, normTerm, normFinish,
//   NormWalk, makeNormWalk, CumSumLines, makeCumSumLines, TileIndex, makeTileIndex
//
// The ops that exported transformers build position encodings and
// normalized projections with. The reference interpreter
// (interp/EncodingOps.cpp) and the CPU and CUDA kernels
// (runtime/cpu/EncodingKernels.cpp, runtime/cuda/EncodingKernels.cu) compute
// each element with the functions here, in double for floats (int64 for
// integers), and walk the elements in the same order, so the three give
// the same bits and a CPU test checks the CUDA arithmetic too.
//
// Header-only and free of other lwrt headers except lwrt/shard_index.h (for
// LWRT_HOST_DEVICE and kShardMaxRank); under nvcc it compiles for the host
// and the device.
#pragma once

#include "shard_index.h"

#include <math.h>
#include <stdint.h>
#include <type_traits>
#include <vector>

namespace lwrt {

/// cumsum (ONNX CumSum): the sum along `axis` (negative counts from the
/// end) of the elements up to each one (before it when exclusive), from the
/// end of the axis when reverse.
struct CumSumParams {
  int64_t axis = 0;
  int64_t exclusive = 0;
  int64_t reverse = 0;
};

/// tile (ONNX Tile): the operand repeated repeats[d] times along dim d.
struct TileParams {
  std::vector<int64_t> repeats;
};

/// mod (ONNX Mod): fmod = 0 takes the divisor's sign (Python's %, integers
/// only in ONNX), fmod = 1 the dividend's (C's fmod).
struct ModParams {
  int64_t fmod = 0;
};

/// a mod b. Integers: 0 where b is 0 (numpy's result, without its warning)
/// or -1 (which cannot overflow then).
template <typename T> LWRT_HOST_DEVICE T modValue(T a, T b, bool cFmod) {
  if constexpr (std::is_floating_point_v<T>) {
    double r = ::fmod(static_cast<double>(a), static_cast<double>(b));
    if (!cFmod && r != 0 && ((r < 0) != (b < 0)))
      r += static_cast<double>(b);
    return static_cast<T>(r);
  } else {
    if (b == 0 || b == static_cast<T>(-1))
      return 0;
    T r = static_cast<T>(a % b);
    if (!cFmod && r != 0 && ((r < 0) != (b < 0)))
      r = static_cast<T>(r + b);
    return r;
  }
}

/// The norm reductions: reduce_l1 sums |x|, reduce_sum_square x^2, and
/// reduce_l2 is the square root of reduce_sum_square.
enum class NormKind : int32_t { L1, L2, SumSquare };

/// What one element adds to the sum.
template <typename A> LWRT_HOST_DEVICE A normTerm(A v, NormKind k) {
  return k == NormKind::L1 ? (v < 0 ? -v : v) : v * v;
}
/// The result from the sum of the terms (floats).
inline LWRT_HOST_DEVICE double normFinish(double sum, NormKind k) {
  return k == NormKind::L2 ? ::sqrt(sum) : sum;
}

/// A norm reduction's walk: output o sums the `count` elements of x that
/// reduce into it, in row-major order of the reduced dims (dims of size 1
/// dropped). Plain data: a CUDA kernel takes it by value.
struct NormWalk {
  int32_t keptRank = 0, redRank = 0;
  int64_t keptShape[kShardMaxRank] = {}, keptStride[kShardMaxRank] = {};
  int64_t redShape[kShardMaxRank] = {}, redStride[kShardMaxRank] = {};
  int64_t count = 1;
  NormKind kind = NormKind::L1;
  /// The sum of the terms of output o, in A (double for floats, int64 for
  /// integers).
  template <typename A, typename T> LWRT_HOST_DEVICE A sum(const T* x, int64_t o) const {
    int64_t base = 0;
    for (int d = keptRank - 1; d >= 0; --d) {
      base += o % keptShape[d] * keptStride[d];
      o /= keptShape[d];
    }
    A acc = 0;
    for (int64_t j = 0; j < count; ++j) {
      int64_t at = base;
      int64_t r = j;
      for (int d = redRank - 1; d >= 0; --d) {
        at += r % redShape[d] * redStride[d];
        r /= redShape[d];
      }
      acc += normTerm(static_cast<A>(x[at]), kind);
    }
    return acc;
  }
};

/// The walk of a norm reduction of `shape` (rank `rank`) over `axes` (all
/// dims when `all`), or false for a bad or repeated axis or a rank above
/// kShardMaxRank. `outShape` receives the result shape for `keepdims`.
inline bool makeNormWalk(int rank, const int64_t* shape, bool all, const std::vector<int64_t>& axes,
                         bool keepdims, NormKind kind, NormWalk& w,
                         std::vector<int64_t>& outShape) {
  if (rank < 0 || rank > kShardMaxRank)
    return false;
  bool reduced[kShardMaxRank] = {};
  for (int d = 0; d < rank; ++d)
    reduced[d] = all;
  if (!all)
    for (int64_t a : axes) {
      int64_t d = a < 0 ? a + rank : a;
      if (d < 0 || d >= rank || reduced[d])
        return false;
      reduced[d] = true;
    }
  w = NormWalk{};
  w.kind = kind;
  outShape.clear();
  int64_t stride = 1, strides[kShardMaxRank] = {};
  for (int d = rank - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= shape[d];
  }
  for (int d = 0; d < rank; ++d) {
    if (!reduced[d]) {
      outShape.push_back(shape[d]);
      w.keptShape[w.keptRank] = shape[d];
      w.keptStride[w.keptRank++] = strides[d];
      continue;
    }
    if (keepdims)
      outShape.push_back(1);
    w.count *= shape[d];
    if (shape[d] != 1) {
      w.redShape[w.redRank] = shape[d];
      w.redStride[w.redRank++] = strides[d];
    }
  }
  return true;
}

/// A cumsum's operand as lines along its axis: `outer` x `inner` lines of
/// `length` elements, element j of line (o, i) at (o * length + j) * inner + i.
struct CumSumLines {
  int64_t outer = 1, length = 1, inner = 1;
  bool exclusive = false, reverse = false;
  /// Element j of line `line` (line = o * inner + i), in the order the sum
  /// walks: from the end of the axis when reverse.
  LWRT_HOST_DEVICE int64_t at(int64_t line, int64_t j) const {
    int64_t o = line / inner, i = line % inner;
    int64_t along = reverse ? length - 1 - j : j;
    return (o * length + along) * inner + i;
  }
  /// Computes line `line` of y from x: a running sum in A (double for floats).
  template <typename A, typename T>
  LWRT_HOST_DEVICE void scan(const T* x, T* y, int64_t line) const {
    A acc = 0;
    for (int64_t j = 0; j < length; ++j) {
      int64_t k = at(line, j);
      A v = static_cast<A>(x[k]);
      if (exclusive) {
        y[k] = static_cast<T>(acc);
        acc += v;
      } else {
        acc += v;
        y[k] = static_cast<T>(acc);
      }
    }
  }
};

/// The lines of a cumsum over `shape` (rank `rank`); false when the axis is
/// out of range.
inline bool makeCumSumLines(int rank, const int64_t* shape, const CumSumParams& p,
                            CumSumLines& out) {
  int64_t axis = p.axis < 0 ? p.axis + rank : p.axis;
  if (axis < 0 || axis >= rank)
    return false;
  out = CumSumLines{};
  for (int d = 0; d < rank; ++d) {
    if (d < axis)
      out.outer *= shape[d];
    else if (d > axis)
      out.inner *= shape[d];
  }
  out.length = shape[axis];
  out.exclusive = p.exclusive != 0;
  out.reverse = p.reverse != 0;
  return true;
}

/// Where element k (row-major) of a tile's result reads its operand. Plain
/// data: a CUDA kernel takes it by value.
struct TileIndex {
  int32_t rank = 0;
  int64_t out[kShardMaxRank] = {}; ///< the result's shape
  int64_t in[kShardMaxRank] = {};  ///< the operand's shape
  LWRT_HOST_DEVICE int64_t operator()(int64_t k) const {
    int64_t at = 0, stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      at += (k % out[d]) % in[d] * stride;
      k /= out[d];
      stride *= in[d];
    }
    return at;
  }
};

/// The TileIndex of an operand of shape `in` tiled by `repeats` into `out`;
/// false when the shapes do not match or the rank is above kShardMaxRank.
inline bool makeTileIndex(int rank, const int64_t* in, const int64_t* out,
                          const std::vector<int64_t>& repeats, TileIndex& idx) {
  if (rank < 0 || rank > kShardMaxRank || static_cast<int>(repeats.size()) != rank)
    return false;
  idx = TileIndex{};
  idx.rank = rank;
  for (int d = 0; d < rank; ++d) {
    if (repeats[d] < 0 || in[d] * repeats[d] != out[d] || (out[d] > 0 && in[d] == 0))
      return false;
    idx.in[d] = in[d];
    idx.out[d] = out[d];
  }
  return true;
}

} // namespace lwrt
