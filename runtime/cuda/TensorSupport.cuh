// cuda/TensorSupport.cuh - what the CUDA tensor kernel files share (not installed)
// defines: LWRT_REJECT(op, what), Dims, floatScalar, intScalar, raiseDeviceError, firstThread,
//          gridThreads, kPiecesPerLaunch, pieceOf, kMaxDims, Walk, makeWalk, offsetsOf,
//          kSmallIndex, widen16, narrow16
//
// The device helpers and strided walks of TensorKernels.cu,
// TensorReduceKernels.cu and OptimizerKernels.cu; their host-side checks
// and type dispatch are lwrt/kernel_checks.h's, shared with the CPU kernels.
#pragma once

#include "cuda/Context.h"
#include "lwrt/bf16.h"
#include "lwrt/f16.h"
#include "lwrt/kernel_checks.h"
#include "lwrt/value_math.h"

#include <array>
#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

/// Records "op: what" as the context's error and returns false.
#define LWRT_REJECT(op, what)                                                                      \
  ::lwrt::cuda::fail(__FILE__, __LINE__, std::string(op) + ": " + (what))

namespace lwrt::cuda {

using Dims = std::vector<int64_t>;

/// A float scalar operand (lr) and an integer scalar operand (step).
inline bool floatScalar(const TensorView& t) { return t.numel() == 1 && isFloat(t.dtype); }
inline bool intScalar(const TensorView& t) { return t.numel() == 1 && isInt(t.dtype); }

//===--- Device helpers ---------------------------------------------------===//

/// Sets the context's error flag unless an earlier error is there.
inline __device__ void raiseDeviceError(int* flag, int code) {
  if (flag)
    atomicCAS(flag, 0, code);
}

inline __device__ int64_t firstThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
inline __device__ int64_t gridThreads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

/// Tensors per launch of a multi-tensor call (sgdUpdateGroup,
/// adamUpdateGroup, castGroup): its chunk travels in the launch's
/// parameters, under 4 KiB (--emit=plan counts launches with the same
/// number, ir/FusedOps.h).
constexpr int kPiecesPerLaunch = 24;

/// The piece of a multi-tensor launch (piece p: elements [start[p], start[p + 1])
/// of the launch's range) that holds element i, searched from piece p on: a
/// grid-stride loop's i only grows.
inline __device__ int pieceOf(const int64_t* start, int p, int64_t i) {
  while (i >= start[p + 1])
    ++p;
  return p;
}

//===--- Strided walks ----------------------------------------------------===//

constexpr int kMaxDims = 8;

/// A row-major walk over `shape` that reads N operands through their own
/// strides (0 where broadcast). Passed to kernels by value.
template <int N> struct Walk {
  int rank = 0;
  int64_t shape[kMaxDims] = {};
  int64_t stride[N][kMaxDims] = {};
};

/// The walk of `shape` with per-operand strides `st`: dims of size 1 are
/// dropped and neighbours merged where every operand's strides allow.
/// False when more than kMaxDims dims remain.
template <int N> bool makeWalk(const Dims& shape, const std::array<Dims, N>& st, Walk<N>& w) {
  std::vector<int64_t> sizes;
  std::vector<std::array<int64_t, N>> strides;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1)
      continue;
    std::array<int64_t, N> s;
    bool merge = !sizes.empty();
    for (int i = 0; i < N; ++i) {
      s[i] = st[i][d];
      merge = merge && strides.back()[i] == shape[d] * s[i];
    }
    if (merge) {
      sizes.back() *= shape[d];
      strides.back() = s;
    } else {
      sizes.push_back(shape[d]);
      strides.push_back(s);
    }
  }
  if (sizes.size() > static_cast<size_t>(kMaxDims))
    return false;
  w = Walk<N>{};
  w.rank = static_cast<int>(sizes.size());
  for (int d = 0; d < w.rank; ++d) {
    w.shape[d] = sizes[d];
    for (int i = 0; i < N; ++i)
      w.stride[i][d] = strides[d][i];
  }
  return true;
}

/// The operand offsets of element k of a walk; I is the index type (32-bit
/// when the walk is small enough, for cheaper divisions).
template <int N, typename I> __device__ void offsetsOf(const Walk<N>& w, I k, int64_t (&off)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    off[i] = 0;
#pragma unroll
  for (int d = kMaxDims - 1; d >= 0; --d) {
    if (d >= w.rank)
      continue;
    I n = static_cast<I>(w.shape[d]);
    I q = k / n;
    auto idx = static_cast<int64_t>(k - q * n);
    k = q;
#pragma unroll
    for (int i = 0; i < N; ++i)
      off[i] += idx * w.stride[i][d];
  }
}

constexpr int64_t kSmallIndex = INT32_MAX;

/// A bf16 (fp16 when !bf16) element as a float32 and back, with the
/// rounding of lwrt/bf16.h and lwrt/f16.h.
inline __device__ float widen16(uint16_t h, bool bf16) {
  return bf16 ? bf16ToFloat(h) : f16ToFloat(h);
}
inline __device__ uint16_t narrow16(float v, bool bf16) {
  return bf16 ? floatToBf16(v) : floatToF16(v);
}

} // namespace lwrt::cuda
