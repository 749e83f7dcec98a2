//===- TensorKernels.cpp - Elementwise kernels and their gradients ----------===//
//
// The CPU kernels of lwrt/cpu_tensor.h that compute elementwise values:
// unary and broadcasting binary ops and their backward ops. Reductions, cast
// and fill are in TensorReduceKernels.cpp, dropout and the optimizer updates
// in OptimizerKernels.cpp, data movement in TensorShapeKernels.cpp. Each
// kernel restates the reference interpreter's formula (interp/Interpreter.cpp,
// interp/TrainOps.cpp) in double and rounds once to the element type.
//
//===----------------------------------------------------------------------===//
#include "Bf16.h"
#include "Common.h"
#include "TensorSupport.h"
#include "lwrt/activation_math.h"
#include "lwrt/cpu_tensor.h"
#include "lwrt/kernel_checks.h"
#include "lwrt/typed_math.h"
#include "lwrt/value_math.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace lwrt::cpu {

using namespace detail;

namespace {

//===--- Unary ------------------------------------------------------------===//

template <typename F> bool unaryFloat(const TensorView& x, const TensorView& y, F f) {
  if (!sameView(x, y))
    return false;
  if (detail::Float32Views::narrow(x.dtype)) {
    // bf16 and fp16 (mixed precision's activations): f in double, rounded
    // to float32 and then to the type, as the interpreter rounds.
    detail::Float32Views w;
    return unaryFloat(w.in(x), w.out(y), f) && w.commit();
  }
  return dispatchFloat(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xs = x.as<T>();
    T* ys = y.as<T>();
    forEachElement(x.numel(),
                   [&](int64_t k) { ys[k] = static_cast<T>(f(static_cast<double>(xs[k]))); });
    return true;
  });
}

/// fd on floats (in double), fi on integers.
template <typename FD, typename FI>
bool unaryNumeric(const TensorView& x, const TensorView& y, FD fd, FI fi) {
  if (!sameView(x, y))
    return false;
  return dispatchNumeric(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xs = x.as<T>();
    T* ys = y.as<T>();
    forEachElement(x.numel(), [&](int64_t k) {
      if constexpr (std::is_floating_point_v<T>)
        ys[k] = static_cast<T>(fd(static_cast<double>(xs[k])));
      else
        ys[k] = fi(xs[k]);
    });
    return true;
  });
}

//===--- Binary with broadcasting -----------------------------------------===//
/// y[k] = f(a[ia(k)], b[ib(k)]) over y's shape, rows of the last dim at a time.
template <typename T, typename F>
void broadcastLoop(const TensorView& a, const TensorView& b, const TensorView& y, F f) {
  const T* as = a.as<T>();
  const T* bs = b.as<T>();
  T* ys = y.as<T>();
  int64_t n = y.numel();
  if (n == 0)
    return;
  size_t r = y.shape.size();
  if (a.shape == b.shape) {
    forEachElement(n, [&](int64_t k) { ys[k] = f(as[k], bs[k]); });
    return;
  }
  auto sa = broadcastStrides(a.shape, r), sb = broadcastStrides(b.shape, r);
  int64_t inner = y.shape[r - 1], ia = sa[r - 1], ib = sb[r - 1];
  // Rows of the last dim, a range of them per thread, each range walking
  // its operands' offsets from those of its first row.
  int64_t rows = n / inner;
  detail::parallelFor(rows, std::max<int64_t>(1, kGrain / inner), [&](int64_t first, int64_t last) {
    std::vector<int64_t> idx(r, 0);
    int64_t oa = 0, ob = 0;
    for (int64_t d = static_cast<int64_t>(r) - 2, rest = first; d >= 0; --d) {
      idx[d] = rest % y.shape[d];
      rest /= y.shape[d];
      oa += idx[d] * sa[d];
      ob += idx[d] * sb[d];
    }
    for (int64_t row = first; row < last; ++row) {
      T* out = ys + row * inner;
      for (int64_t e = 0; e < inner; ++e)
        out[e] = f(as[oa + e * ia], bs[ob + e * ib]);
      for (size_t d = r - 1; d-- > 0;) {
        oa += sa[d];
        ob += sb[d];
        if (++idx[d] < y.shape[d])
          break;
        oa -= sa[d] * y.shape[d];
        ob -= sb[d] * y.shape[d];
        idx[d] = 0;
      }
    }
  });
}

/// fd on floats (in double), fi on integers (null: floats only). bf16 and
/// fp16 operands through float32 (a micro-batched step sums their partial
/// weight gradients), the result rounded once.
template <typename FD, typename FI>
bool binary(const TensorView& a, const TensorView& b, const TensorView& y, FD fd, FI fi) {
  if (detail::Float32Views::any({&a, &b, &y})) {
    detail::Float32Views f;
    return a.dtype == b.dtype && a.dtype == y.dtype && binary(f.in(a), f.in(b), f.out(y), fd, fi) &&
           f.commit();
  }
  if (a.dtype != b.dtype || a.dtype != y.dtype || !broadcastsTo(a.shape, b.shape, y.shape))
    return false;
  // Other layouts elementwise only: no broadcasting.
  if (a.layout != y.layout || b.layout != y.layout ||
      (y.layout != Layout::RowMajor && (a.shape != y.shape || b.shape != y.shape)))
    return false;
  return dispatchNumeric(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      broadcastLoop<T>(a, b, y, [&](T u, T v) {
        return static_cast<T>(fd(static_cast<double>(u), static_cast<double>(v)));
      });
      return true;
    } else if constexpr (std::is_same_v<FI, std::nullptr_t>) {
      return false;
    } else {
      broadcastLoop<T>(a, b, y, fi);
      return true;
    }
  });
}

//===--- Backward elementwise ---------------------------------------------===//

/// dx[k] = f(u[k], dy[k]) in double; all three views of one float type and shape.
template <typename F>
bool backward(const TensorView& u, const TensorView& dy, const TensorView& dx, F f) {
  if (!sameView(u, dy) || !sameView(u, dx))
    return false;
  if (detail::Float32Views::narrow(u.dtype)) {
    detail::Float32Views w;
    return backward(w.in(u), w.in(dy), w.out(dx), f) && w.commit();
  }
  return dispatchFloat(u.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* us = u.as<T>();
    const T* ds = dy.as<T>();
    T* xs = dx.as<T>();
    forEachElement(u.numel(), [&](int64_t k) {
      xs[k] = static_cast<T>(f(static_cast<double>(us[k]), static_cast<double>(ds[k])));
    });
    return true;
  });
}

} // namespace

//===--- Unary ------------------------------------------------------------===//

bool relu(const TensorView& x, const TensorView& y) {
  if (x.dtype == DType::F32 && sameView(x, y)) { // the same values, vectorized
    const float* xs = x.as<float>();
    float* ys = y.as<float>();
    detail::parallelFor(x.numel(), kGrain, [&](int64_t first, int64_t last) {
      for (int64_t k = first; k < last; ++k)
        ys[k] = xs[k] > 0.f ? xs[k] : 0.f;
    });
    return true;
  }
  return unaryFloat(x, y, [](double v) { return v > 0 ? v : 0.0; });
}
bool leakyRelu(const TensorView& x, const TensorView& y, const LeakyReluParams& p) {
  return unaryFloat(x, y, [&](double v) { return v >= 0 ? v : p.alpha * v; });
}
bool sigmoid(const TensorView& x, const TensorView& y) {
  return unaryFloat(x, y, [](double v) { return 1.0 / (1.0 + std::exp(-v)); });
}
bool tanh(const TensorView& x, const TensorView& y) {
  return unaryFloat(x, y, [](double v) { return std::tanh(v); });
}
bool erf(const TensorView& x, const TensorView& y) {
  return unaryFloat(x, y, [](double v) { return std::erf(v); });
}
bool exp(const TensorView& x, const TensorView& y) {
  return unaryFloat(x, y, [](double v) { return std::exp(v); });
}
bool log(const TensorView& x, const TensorView& y) {
  return unaryFloat(x, y, [](double v) { return std::log(v); });
}
bool sqrt(const TensorView& x, const TensorView& y) {
  return unaryFloat(x, y, [](double v) { return std::sqrt(v); });
}
bool reciprocal(const TensorView& x, const TensorView& y) {
  return unaryFloat(x, y, [](double v) { return 1.0 / v; });
}
bool clip(const TensorView& x, const TensorView& y, const ClipParams& p) {
  if (x.dtype == DType::F32 && sameView(x, y)) {
    const Activation act{Activation::Clip, p.min, p.max};
    const float* xs = x.as<float>();
    float* ys = y.as<float>();
    forEachElement(x.numel(), [&](int64_t k) { ys[k] = act.apply(xs[k]); });
    return true;
  }
  return unaryFloat(x, y, [&](double v) { return std::min(std::max(v, p.min), p.max); });
}
bool neg(const TensorView& x, const TensorView& y) {
  return unaryNumeric(
      x, y, [](double v) { return -v; }, [](auto v) { return wrapSub(decltype(v){0}, v); });
}
bool abs(const TensorView& x, const TensorView& y) {
  return unaryNumeric(
      x, y, [](double v) { return std::fabs(v); },
      [](auto v) { return v < 0 ? wrapSub(decltype(v){0}, v) : v; });
}
bool sign(const TensorView& x, const TensorView& y) {
  return unaryNumeric(
      x, y, [](double v) { return v > 0   ? 1.0
                                  : v < 0 ? -1.0
                                          : 0.0; },
      [](auto v) {
        return static_cast<decltype(v)>(v > 0 ? 1 : v < 0 ? -1 : 0);
      });
}

//===--- Binary -----------------------------------------------------------===//

namespace {

/// act(a + b): float32 operands of one shape directly (a float sum rounds
/// as the double one does), the rest through binary().
bool addThen(const TensorView& a, const TensorView& b, const TensorView& y, const Activation& act) {
  if (a.dtype == DType::F32 && sameView(a, b) && sameView(a, y)) {
    const float *as = a.as<float>(), *bs = b.as<float>();
    float* ys = y.as<float>();
    detail::parallelFor(a.numel(), kGrain, [&](int64_t first, int64_t last) {
      for (int64_t k = first; k < last; ++k) {
        ys[k] = act.apply(as[k] + bs[k]);
      }
    });
    return true;
  }
  if (!binary(
          a, b, y, [](double u, double v) { return u + v; },
          [](auto u, auto v) { return wrapAdd(u, v); }))
    return false;
  if (act.kind == Activation::None)
    return true;
  return dispatchFloat(y.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* ys = y.as<T>();
    forEachElement(y.numel(), [&](int64_t k) { ys[k] = act.apply(ys[k]); });
    return true;
  });
}

} // namespace

bool add(const TensorView& a, const TensorView& b, const TensorView& y) {
  return addThen(a, b, y, {});
}

bool addAct(const TensorView& a, const TensorView& b, const TensorView& y, const Activation& act) {
  return (a.dtype == DType::F32 || a.dtype == DType::F64) && addThen(a, b, y, act);
}

bool sub(const TensorView& a, const TensorView& b, const TensorView& y) {
  return binary(
      a, b, y, [](double u, double v) { return u - v; },
      [](auto u, auto v) { return wrapSub(u, v); });
}
bool mul(const TensorView& a, const TensorView& b, const TensorView& y) {
  return binary(
      a, b, y, [](double u, double v) { return u * v; },
      [](auto u, auto v) { return wrapMul(u, v); });
}

bool div(const TensorView& a, const TensorView& b, const TensorView& y) {
  // Integer operands: no zero divisor, and no INT_MIN / -1 (which traps).
  bool divisorsOk = dispatchValue(b.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, uint8_t>) {
      if (a.dtype != b.dtype)
        return false;
      bool minusOne = false, minimum = false;
      for (int64_t k = 0, n = b.numel(); k < n; ++k) {
        if (b.as<T>()[k] == 0)
          return false;
        minusOne |= b.as<T>()[k] == -1;
      }
      for (int64_t k = 0, n = a.numel(); k < n && minusOne; ++k)
        minimum |= a.as<T>()[k] == std::numeric_limits<T>::min();
      return !(minusOne && minimum);
    }
    return true;
  });
  if (!divisorsOk)
    return false;
  // Integer division truncates toward zero, as C++ does.
  return binary(
      a, b, y, [](double u, double v) { return u / v; },
      [](auto u, auto v) { return static_cast<decltype(u)>(u / v); });
}

bool pow(const TensorView& a, const TensorView& b, const TensorView& y) {
  return binary(
      a, b, y, [](double u, double v) { return powValue(u, v); }, nullptr);
}

//===--- Backward elementwise ---------------------------------------------===//

bool reluGrad(const TensorView& y, const TensorView& dy, const TensorView& dx) {
  if (y.dtype == DType::F32 && sameView(y, dy) && sameView(y, dx)) {
    const float *ys = y.as<float>(), *ds = dy.as<float>();
    float* xs = dx.as<float>();
    detail::parallelFor(y.numel(), kGrain, [&](int64_t first, int64_t last) {
      for (int64_t k = first; k < last; ++k)
        xs[k] = ys[k] > 0.f ? ds[k] : 0.f;
    });
    return true;
  }
  return backward(y, dy, dx, [](double u, double d) { return u > 0 ? d : 0.0; });
}
bool leakyReluGrad(const TensorView& x, const TensorView& dy, const TensorView& dx,
                   const LeakyReluParams& p) {
  return backward(x, dy, dx, [&](double u, double d) { return leakyReluGradValue(u, d, p.alpha); });
}
bool sigmoidGrad(const TensorView& y, const TensorView& dy, const TensorView& dx) {
  return backward(y, dy, dx, [](double u, double d) { return d * u * (1.0 - u); });
}
bool tanhGrad(const TensorView& y, const TensorView& dy, const TensorView& dx) {
  return backward(y, dy, dx, [](double u, double d) { return d * (1.0 - u * u); });
}
bool clipGrad(const TensorView& x, const TensorView& dy, const TensorView& dx,
              const ClipParams& p) {
  if (x.dtype == DType::F32 && sameView(x, dy) && sameView(x, dx)) {
    const float *xs = x.as<float>(), *ds = dy.as<float>();
    float* out = dx.as<float>();
    forEachElement(x.numel(), [&](int64_t k) {
      out[k] = static_cast<float>(clipGradValue(xs[k], ds[k], p.min, p.max));
    });
    return true;
  }
  return backward(x, dy, dx, [&](double u, double d) { return clipGradValue(u, d, p.min, p.max); });
}

} // namespace lwrt::cpu
