//===- ActivationKernels.cpp - Activations, prelu and max/min on the CPU --===//
//
// The kernels of lwrt/cpu_activation.h: a loop over the elements calling
// the one definition of each op's math in lwrt/activation_math.h (the
// interpreter and the CUDA kernels call it too), in double, rounded once to
// the element type.
//
//===----------------------------------------------------------------------===//
#include "lwrt/cpu_activation.h"
#include "lwrt/kernel_checks.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace lwrt::cpu {

namespace {

template <typename M>
bool forward(const TensorView& x, const TensorView& y, const ActivationParams& p) {
  if (!sameLayout(x, y))
    return false;
  return dispatchFloat(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xs = x.as<const T>();
    T* ys = y.as<T>();
    for (int64_t k = 0, n = x.numel(); k < n; ++k)
      ys[k] = static_cast<T>(M::forward(static_cast<double>(xs[k]), p));
    return true;
  });
}

template <typename M>
bool backward(const TensorView& x, const TensorView& dy, const TensorView& dx,
              const ActivationParams& p) {
  if (!sameLayout(x, dy) || !sameLayout(x, dx))
    return false;
  return dispatchFloat(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *xs = x.as<const T>(), *ds = dy.as<const T>();
    T* out = dx.as<T>();
    for (int64_t k = 0, n = x.numel(); k < n; ++k)
      out[k] =
          static_cast<T>(M::backward(static_cast<double>(xs[k]), static_cast<double>(ds[k]), p));
    return true;
  });
}

bool extremum(const TensorView& a, const TensorView& b, const TensorView& y, bool isMin) {
  std::vector<int64_t> shape;
  BroadcastIndex ia, ib;
  if (a.dtype != b.dtype || a.dtype != y.dtype || !broadcastShape(a, b, shape) ||
      shape != y.shape || !broadcastIndexOf(y, a, ia) || !broadcastIndexOf(y, b, ib))
    return false;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T *as = a.as<const T>(), *bs = b.as<const T>();
    T* ys = y.as<T>();
    for (int64_t k = 0, n = y.numel(); k < n; ++k) {
      if constexpr (std::is_floating_point_v<T>)
        ys[k] = static_cast<T>(extremumValue(as[ia(k)], bs[ib(k)], isMin));
      else
        ys[k] = isMin ? std::min(as[ia(k)], bs[ib(k)]) : std::max(as[ia(k)], bs[ib(k)]);
    }
    return true;
  };
  switch (a.dtype) {
  case DType::I64:
    return run(int64_t{});
  case DType::I32:
    return run(int32_t{});
  default:
    return dispatchFloat(a.dtype, run);
  }
}

bool extremumGrad(const TensorView& a, const TensorView& b, const TensorView& dy,
                  const TensorView& da, const TensorView& db, bool isMin) {
  BroadcastIndex ia, ib;
  if (a.dtype != dy.dtype || b.dtype != dy.dtype || !sameLayout(dy, da) || !sameLayout(dy, db) ||
      !broadcastIndexOf(dy, a, ia) || !broadcastIndexOf(dy, b, ib))
    return false;
  return dispatchFloat(dy.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *as = a.as<const T>(), *bs = b.as<const T>(), *ds = dy.as<const T>();
    T *outA = da.as<T>(), *outB = db.as<T>();
    for (int64_t k = 0, n = dy.numel(); k < n; ++k) {
      double va = as[ia(k)], vb = bs[ib(k)], d = ds[k];
      outA[k] = static_cast<T>(d * extremumGradWeight(va, vb, isMin));
      outB[k] = static_cast<T>(d * extremumGradWeight(vb, va, isMin));
    }
    return true;
  });
}

} // namespace

#define LWRT_DEFINE_ACTIVATION(E, fn)                                                              \
  bool fn(const TensorView& x, const TensorView& y, const ActivationParams& p) {                   \
    return forward<E##Math>(x, y, p);                                                              \
  }                                                                                                \
  bool fn##Grad(const TensorView& x, const TensorView& dy, const TensorView& dx,                   \
                const ActivationParams& p) {                                                       \
    return backward<E##Math>(x, dy, dx, p);                                                        \
  }
LWRT_ACTIVATIONS(LWRT_DEFINE_ACTIVATION)
#undef LWRT_DEFINE_ACTIVATION

bool prelu(const TensorView& x, const TensorView& slope, const TensorView& y) {
  BroadcastIndex is;
  if (!sameLayout(x, y) || slope.dtype != x.dtype || !broadcastIndexOf(x, slope, is))
    return false;
  return dispatchFloat(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *xs = x.as<const T>(), *ss = slope.as<const T>();
    T* ys = y.as<T>();
    for (int64_t k = 0, n = x.numel(); k < n; ++k)
      ys[k] = static_cast<T>(preluValue(xs[k], ss[is(k)]));
    return true;
  });
}

bool preluGrad(const TensorView& x, const TensorView& slope, const TensorView& dy,
               const TensorView& dx, const TensorView& dslope) {
  BroadcastIndex is;
  if (!sameLayout(x, dy) || !sameLayout(x, dx) || !sameLayout(x, dslope) ||
      slope.dtype != x.dtype || !broadcastIndexOf(x, slope, is))
    return false;
  return dispatchFloat(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *xs = x.as<const T>(), *ss = slope.as<const T>(), *ds = dy.as<const T>();
    T *outX = dx.as<T>(), *outS = dslope.as<T>();
    for (int64_t k = 0, n = x.numel(); k < n; ++k) {
      double v = xs[k], d = ds[k];
      outX[k] = static_cast<T>(preluGradX(v, ss[is(k)], d));
      outS[k] = static_cast<T>(preluGradSlope(v, d));
    }
    return true;
  });
}

bool compare(const TensorView& a, const TensorView& b, const TensorView& y,
             const CompareParams& p) {
  std::vector<int64_t> shape;
  BroadcastIndex ia, ib;
  if (a.dtype != b.dtype || y.dtype != DType::Bool || !broadcastShape(a, b, shape) ||
      shape != y.shape || !broadcastIndexOf(y, a, ia) || !broadcastIndexOf(y, b, ib) ||
      !compareTakes(p.kind, a.dtype == DType::Bool))
    return false;
  return dispatchValue(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *as = a.as<const T>(), *bs = b.as<const T>();
    uint8_t* ys = y.as<uint8_t>();
    for (int64_t k = 0, n = y.numel(); k < n; ++k)
      ys[k] = compareValue(as[ia(k)], bs[ib(k)], p.kind) ? 1 : 0;
    return true;
  });
}

bool where(const TensorView& condition, const TensorView& x, const TensorView& y,
           const TensorView& out) {
  std::vector<int64_t> xy, shape;
  BroadcastIndex ic, ix, iy;
  if (condition.dtype != DType::Bool || x.dtype != y.dtype || out.dtype != x.dtype ||
      !broadcastShape(x, y, xy))
    return false;
  if (!broadcastShape(condition, TensorView{nullptr, x.dtype, xy}, shape) || shape != out.shape ||
      !broadcastIndexOf(out, condition, ic) || !broadcastIndexOf(out, x, ix) ||
      !broadcastIndexOf(out, y, iy))
    return false;
  return dispatchValue(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const uint8_t* cs = condition.as<const uint8_t>();
    const T *xs = x.as<const T>(), *ys = y.as<const T>();
    T* os = out.as<T>();
    for (int64_t k = 0, n = out.numel(); k < n; ++k)
      os[k] = cs[ic(k)] ? xs[ix(k)] : ys[iy(k)];
    return true;
  });
}

bool maximum(const TensorView& a, const TensorView& b, const TensorView& y) {
  return extremum(a, b, y, false);
}
bool minimum(const TensorView& a, const TensorView& b, const TensorView& y) {
  return extremum(a, b, y, true);
}
bool maximumGrad(const TensorView& a, const TensorView& b, const TensorView& dy,
                 const TensorView& da, const TensorView& db) {
  return extremumGrad(a, b, dy, da, db, false);
}
bool minimumGrad(const TensorView& a, const TensorView& b, const TensorView& dy,
                 const TensorView& da, const TensorView& db) {
  return extremumGrad(a, b, dy, da, db, true);
}

} // namespace lwrt::cpu
