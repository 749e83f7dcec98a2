//===- EncodingKernels.cu - cumsum, tile, mod, sin, cos, norms on the GPU -===//
//
// The kernels of lwrt/cuda_encoding.h: grid-stride loops calling the one
// definition of each op's math in lwrt/encoding_math.h (the interpreter and
// the CPU kernels call it too), floats in double, rounded once to the
// element type. One thread scans a line of a cumsum or sums an output of a
// reduction, in the CPU's order: the same sum, bit for bit. The host-side
// checks are the CPU backend's (runtime/cpu/EncodingKernels.cpp).
//
//===----------------------------------------------------------------------===//
#include "cuda/KernelSupport.cuh"
#include "lwrt/activation_math.h"
#include "lwrt/cuda_encoding.h"
#include "lwrt/kernel_checks.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace lwrt::cuda {

namespace {

template <typename T>
using AccOf = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

/// Runs fn(T{}) for F32, F64 and, when `integers`, I64 and I32; false otherwise.
template <typename Fn> bool dispatch(DType t, bool integers, Fn fn) {
  switch (t) {
  case DType::F32:
    return fn(float{});
  case DType::F64:
    return fn(double{});
  case DType::I64:
    return integers && fn(int64_t{});
  case DType::I32:
    return integers && fn(int32_t{});
  default:
    return false;
  }
}
bool takes(DType t, bool integers) {
  return dispatch(t, integers, [](auto) { return true; });
}

std::string reason(const char* op, const char* what) { return std::string(op) + ": " + what; }

template <typename T>
__global__ void cumSumKernel(const T* x, T* y, int64_t lines, CumSumLines walk) {
  LWRT_GRID_STRIDE(l, lines) { walk.scan<AccOf<T>>(x, y, l); }
}

template <typename T> __global__ void tileKernel(const T* x, T* y, int64_t n, TileIndex idx) {
  LWRT_GRID_STRIDE(k, n) { y[k] = x[idx(k)]; }
}

template <typename T>
__global__ void modKernel(const T* a, const T* b, T* y, int64_t n, BroadcastIndex ia,
                          BroadcastIndex ib, bool cFmod) {
  LWRT_GRID_STRIDE(k, n) { y[k] = modValue<T>(a[ia(k)], b[ib(k)], cFmod); }
}

template <typename T> __global__ void sinKernel(const T* x, T* y, int64_t n) {
  LWRT_GRID_STRIDE(k, n) { y[k] = static_cast<T>(::sin(static_cast<double>(x[k]))); }
}

template <typename T> __global__ void cosKernel(const T* x, T* y, int64_t n) {
  LWRT_GRID_STRIDE(k, n) { y[k] = static_cast<T>(::cos(static_cast<double>(x[k]))); }
}

template <typename T> __global__ void normKernel(const T* x, T* y, int64_t m, NormWalk walk) {
  LWRT_GRID_STRIDE(o, m) {
    if constexpr (std::is_floating_point_v<T>)
      y[o] = static_cast<T>(normFinish(walk.sum<double>(x, o), walk.kind));
    else
      y[o] = static_cast<T>(walk.sum<int64_t>(x, o));
  }
}

template <bool IsSin> bool trig(const char* op, const TensorView& x, const TensorView& y) {
  if (x.dtype != y.dtype || x.shape != y.shape || !rowMajor({&x, &y}) || !takes(x.dtype, false))
    return LWRT_REJECT(reason(op, "takes x and y of one float type and shape"));
  int64_t n = x.numel();
  if (n == 0)
    return true;
  return dispatch(x.dtype, false, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (IsSin)
      LWRT_LAUNCH(sinKernel<T>, blocksFor(n), kThreads, x.as<const T>(), y.as<T>(), n);
    else
      LWRT_LAUNCH(cosKernel<T>, blocksFor(n), kThreads, x.as<const T>(), y.as<T>(), n);
    return true;
  });
}

bool norm(const char* op, const TensorView& x, const TensorView& y, const ReduceParams& p,
          NormKind kind) {
  NormWalk walk;
  std::vector<int64_t> want;
  bool integers = kind != NormKind::L2;
  if (x.dtype != y.dtype || !rowMajor({&x, &y}) || !takes(x.dtype, integers) ||
      !makeNormWalk(static_cast<int>(x.rank()), x.shape.data(), !p.axes,
                    p.axes ? *p.axes : std::vector<int64_t>{}, p.keepdims != 0, kind, walk, want) ||
      want != y.shape)
    return LWRT_REJECT(reason(op, "takes x and y of one type whose shapes the axes and keepdims "
                                  "relate, of rank at most 8"));
  int64_t m = y.numel();
  if (m == 0)
    return true;
  return dispatch(x.dtype, integers, [&](auto tag) {
    using T = decltype(tag);
    LWRT_LAUNCH(normKernel<T>, blocksFor(m), kThreads, x.as<const T>(), y.as<T>(), m, walk);
    return true;
  });
}

} // namespace

bool cumSum(const TensorView& x, const TensorView& y, const CumSumParams& p) {
  CumSumLines lines;
  if (x.dtype != y.dtype || x.shape != y.shape || !rowMajor({&x, &y}) || !takes(x.dtype, true) ||
      !makeCumSumLines(static_cast<int>(x.rank()), x.shape.data(), p, lines))
    return LWRT_REJECT(
        reason("cumSum", "takes x and y of one numeric type and shape and an axis of x"));
  int64_t count = lines.outer * lines.inner;
  if (count == 0 || lines.length == 0)
    return true;
  return dispatch(x.dtype, true, [&](auto tag) {
    using T = decltype(tag);
    LWRT_LAUNCH(cumSumKernel<T>, blocksFor(count), kThreads, x.as<const T>(), y.as<T>(), count,
                lines);
    return true;
  });
}

bool tile(const TensorView& x, const TensorView& y, const TileParams& p) {
  TileIndex idx;
  if (x.dtype != y.dtype || x.rank() != y.rank() || !rowMajor({&x, &y}) ||
      !(takes(x.dtype, true) || x.dtype == DType::Bool) ||
      !makeTileIndex(static_cast<int>(x.rank()), x.shape.data(), y.shape.data(), p.repeats, idx))
    return LWRT_REJECT(reason("tile", "takes x and y of one type, y x's shape times the repeats, "
                                      "of rank at most 8"));
  int64_t n = y.numel();
  if (n == 0)
    return true;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    LWRT_LAUNCH(tileKernel<T>, blocksFor(n), kThreads, x.as<const T>(), y.as<T>(), n, idx);
    return true;
  };
  if (x.dtype == DType::Bool)
    return run(uint8_t{});
  return dispatch(x.dtype, true, run);
}

bool mod(const TensorView& a, const TensorView& b, const TensorView& y, const ModParams& p) {
  std::vector<int64_t> shape;
  BroadcastIndex ia, ib;
  bool fits = a.dtype == b.dtype && a.dtype == y.dtype && takes(a.dtype, true) &&
              !(isFloatType(a.dtype) && p.fmod == 0) && broadcastShape(a, b, shape) &&
              shape == y.shape && rowMajor({&a, &b, &y}) &&
              makeBroadcastIndex(static_cast<int>(y.rank()), y.shape.data(),
                                 static_cast<int>(a.rank()), a.shape.data(), ia) &&
              makeBroadcastIndex(static_cast<int>(y.rank()), y.shape.data(),
                                 static_cast<int>(b.rank()), b.shape.data(), ib);
  if (!fits)
    return LWRT_REJECT(reason("mod", "takes a and b of one type that broadcast to y (floats with "
                                     "fmod = 1)"));
  int64_t n = y.numel();
  if (n == 0)
    return true;
  return dispatch(a.dtype, true, [&](auto tag) {
    using T = decltype(tag);
    LWRT_LAUNCH(modKernel<T>, blocksFor(n), kThreads, a.as<const T>(), b.as<const T>(), y.as<T>(),
                n, ia, ib, p.fmod != 0);
    return true;
  });
}

bool sin(const TensorView& x, const TensorView& y) { return trig<true>("sin", x, y); }
bool cos(const TensorView& x, const TensorView& y) { return trig<false>("cos", x, y); }

bool reduceL1(const TensorView& x, const TensorView& y, const ReduceParams& p) {
  return norm("reduceL1", x, y, p, NormKind::L1);
}
bool reduceL2(const TensorView& x, const TensorView& y, const ReduceParams& p) {
  return norm("reduceL2", x, y, p, NormKind::L2);
}
bool reduceSumSquare(const TensorView& x, const TensorView& y, const ReduceParams& p) {
  return norm("reduceSumSquare", x, y, p, NormKind::SumSquare);
}

} // namespace lwrt::cuda
