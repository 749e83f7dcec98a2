//===- EncodingKernels.cpp - cumsum, tile, mod, sin, cos, norms on the CPU ===//
//
// The kernels of lwrt/cpu_encoding.h: loops over lines, elements or
// outputs calling the one definition of each op's math in
// lwrt/encoding_math.h (the interpreter and the CUDA kernels call it too),
// floats in double, rounded once to the element type. Each line of a
// cumsum and each output of a reduction is computed by one thread in a
// fixed order: the same bits on any number of threads.
//
//===----------------------------------------------------------------------===//
#include "Common.h"
#include "Parallel.h"
#include "lwrt/activation_math.h"
#include "lwrt/cpu_encoding.h"
#include "lwrt/kernel_checks.h"

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace lwrt::cpu {

namespace {

/// Elements (or lines, outputs) per task of the pool.
constexpr int64_t kGrain = 16384;

using detail::dispatchNumeric;

/// The accumulator of an element type: double for floats, int64 for integers.
template <typename T>
using AccOf = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

template <typename Fn> bool unary(const TensorView& x, const TensorView& y, Fn fn) {
  if (x.dtype != y.dtype || x.shape != y.shape || !rowMajor({&x, &y}))
    return false;
  return detail::dispatch(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xs = x.as<const T>();
    T* ys = y.as<T>();
    detail::parallelFor(x.numel(), kGrain, [&](int64_t first, int64_t last) {
      for (int64_t k = first; k < last; ++k)
        ys[k] = static_cast<T>(fn(static_cast<double>(xs[k])));
    });
    return true;
  });
}

bool norm(const TensorView& x, const TensorView& y, const ReduceParams& p, NormKind kind) {
  if (x.dtype != y.dtype || !rowMajor({&x, &y}))
    return false;
  NormWalk walk;
  std::vector<int64_t> want;
  if (!makeNormWalk(static_cast<int>(x.rank()), x.shape.data(), !p.axes,
                    p.axes ? *p.axes : std::vector<int64_t>{}, p.keepdims != 0, kind, walk, want) ||
      want != y.shape)
    return false;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* xs = x.as<const T>();
    T* ys = y.as<T>();
    int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(1, walk.count));
    detail::parallelFor(y.numel(), grain, [&](int64_t first, int64_t last) {
      for (int64_t o = first; o < last; ++o) {
        if constexpr (std::is_floating_point_v<T>)
          ys[o] = static_cast<T>(normFinish(walk.sum<double>(xs, o), kind));
        else
          ys[o] = static_cast<T>(walk.sum<int64_t>(xs, o));
      }
    });
    return true;
  };
  return kind == NormKind::L2 ? detail::dispatch(x.dtype, run) : dispatchNumeric(x.dtype, run);
}

} // namespace

bool cumSum(const TensorView& x, const TensorView& y, const CumSumParams& p) {
  CumSumLines lines;
  if (x.dtype != y.dtype || x.shape != y.shape || !rowMajor({&x, &y}) ||
      !makeCumSumLines(static_cast<int>(x.rank()), x.shape.data(), p, lines))
    return false;
  return dispatchNumeric(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xs = x.as<const T>();
    T* ys = y.as<T>();
    int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(1, lines.length));
    detail::parallelFor(lines.outer * lines.inner, grain, [&](int64_t first, int64_t last) {
      for (int64_t l = first; l < last; ++l)
        lines.scan<AccOf<T>>(xs, ys, l);
    });
    return true;
  });
}

bool tile(const TensorView& x, const TensorView& y, const TileParams& p) {
  TileIndex idx;
  if (x.dtype != y.dtype || x.rank() != y.rank() || !rowMajor({&x, &y}) ||
      !makeTileIndex(static_cast<int>(x.rank()), x.shape.data(), y.shape.data(), p.repeats, idx))
    return false;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* xs = x.as<const T>();
    T* ys = y.as<T>();
    detail::parallelFor(y.numel(), kGrain, [&](int64_t first, int64_t last) {
      for (int64_t k = first; k < last; ++k)
        ys[k] = xs[idx(k)];
    });
    return true;
  };
  if (x.dtype == DType::Bool)
    return run(uint8_t{});
  return dispatchNumeric(x.dtype, run);
}

bool mod(const TensorView& a, const TensorView& b, const TensorView& y, const ModParams& p) {
  std::vector<int64_t> shape;
  BroadcastIndex ia, ib;
  bool isFloat = a.dtype == DType::F32 || a.dtype == DType::F64;
  if (a.dtype != b.dtype || a.dtype != y.dtype || !broadcastShape(a, b, shape) ||
      shape != y.shape || !rowMajor({&a, &b, &y}) || (isFloat && p.fmod == 0) ||
      !makeBroadcastIndex(static_cast<int>(y.rank()), y.shape.data(), static_cast<int>(a.rank()),
                          a.shape.data(), ia) ||
      !makeBroadcastIndex(static_cast<int>(y.rank()), y.shape.data(), static_cast<int>(b.rank()),
                          b.shape.data(), ib))
    return false;
  return dispatchNumeric(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *as = a.as<const T>(), *bs = b.as<const T>();
    T* ys = y.as<T>();
    detail::parallelFor(y.numel(), kGrain, [&](int64_t first, int64_t last) {
      for (int64_t k = first; k < last; ++k)
        ys[k] = modValue<T>(as[ia(k)], bs[ib(k)], p.fmod != 0);
    });
    return true;
  });
}

bool sin(const TensorView& x, const TensorView& y) {
  return unary(x, y, [](double v) { return std::sin(v); });
}
bool cos(const TensorView& x, const TensorView& y) {
  return unary(x, y, [](double v) { return std::cos(v); });
}

bool reduceL1(const TensorView& x, const TensorView& y, const ReduceParams& p) {
  return norm(x, y, p, NormKind::L1);
}
bool reduceL2(const TensorView& x, const TensorView& y, const ReduceParams& p) {
  return norm(x, y, p, NormKind::L2);
}
bool reduceSumSquare(const TensorView& x, const TensorView& y, const ReduceParams& p) {
  return norm(x, y, p, NormKind::SumSquare);
}

} // namespace lwrt::cpu
