//===- TensorKernels.cpp - Elementwise, reduction and update kernels ------===//
//
// The CPU kernels of lwrt/cpu_tensor.h that compute values: unary and
// broadcasting binary ops, their backward ops, reductions, cast, fill, the
// dropout RNG and the optimizer updates. Data movement is in
// TensorShapeKernels.cpp. Each kernel restates the reference interpreter's
// formula (ir/Interpreter.cpp, ir/TrainKernels.cpp) in double and rounds
// once to the element type.
//
//===----------------------------------------------------------------------===//
#include "lwrt/activation_math.h"
#include "lwrt/cpu_tensor.h"
#include "lwrt/dropout.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace lwrt::cpu {

namespace {

//===--- Dispatch and checks ----------------------------------------------===//

/// Calls fn(T{}) with T the C++ type of float dtype `t`; false otherwise.
template <typename Fn> bool dispatchFloat(DType t, Fn fn) {
  switch (t) {
  case DType::F32:
    return fn(float{});
  case DType::F64:
    return fn(double{});
  default:
    return false;
  }
}

/// The same for F32, F64, I64 and I32.
template <typename Fn> bool dispatchNumeric(DType t, Fn fn) {
  switch (t) {
  case DType::I64:
    return fn(int64_t{});
  case DType::I32:
    return fn(int32_t{});
  default:
    return dispatchFloat(t, fn);
  }
}

/// The same for F32, F64, I64, I32 and Bool (as uint8_t).
template <typename Fn> bool dispatchValue(DType t, Fn fn) {
  if (t == DType::Bool)
    return fn(uint8_t{});
  return dispatchNumeric(t, fn);
}

bool sameLayout(const TensorView& a, const TensorView& b) {
  return a.dtype == b.dtype && a.shape == b.shape;
}

/// Wrapping integer arithmetic (signed overflow is undefined in C++).
template <typename T> T wrapAdd(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}
template <typename T> T wrapSub(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
}
template <typename T> T wrapMul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
}

/// A float scalar operand (lr) of either float type.
bool floatScalar(const TensorView& t, double& out) {
  if (t.numel() != 1)
    return false;
  if (t.dtype == DType::F32)
    out = *t.as<float>();
  else if (t.dtype == DType::F64)
    out = *t.as<double>();
  else
    return false;
  return true;
}

/// An integer scalar operand (step) of either integer type.
bool intScalar(const TensorView& t, int64_t& out) {
  if (t.numel() != 1)
    return false;
  if (t.dtype == DType::I64)
    out = *t.as<int64_t>();
  else if (t.dtype == DType::I32)
    out = *t.as<int32_t>();
  else
    return false;
  return true;
}

//===--- Unary ------------------------------------------------------------===//

template <typename F> bool unaryFloat(const TensorView& x, const TensorView& y, F f) {
  if (!sameLayout(x, y))
    return false;
  return dispatchFloat(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xs = x.as<T>();
    T* ys = y.as<T>();
    for (int64_t k = 0, n = x.numel(); k < n; ++k)
      ys[k] = static_cast<T>(f(static_cast<double>(xs[k])));
    return true;
  });
}

/// fd on floats (in double), fi on integers.
template <typename FD, typename FI>
bool unaryNumeric(const TensorView& x, const TensorView& y, FD fd, FI fi) {
  if (!sameLayout(x, y))
    return false;
  return dispatchNumeric(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xs = x.as<T>();
    T* ys = y.as<T>();
    for (int64_t k = 0, n = x.numel(); k < n; ++k) {
      if constexpr (std::is_floating_point_v<T>)
        ys[k] = static_cast<T>(fd(static_cast<double>(xs[k])));
      else
        ys[k] = fi(xs[k]);
    }
    return true;
  });
}

//===--- Binary with broadcasting -----------------------------------------===//

/// Strides of `s` seen from a broadcast result of rank `rank` (0 where broadcast).
std::vector<int64_t> broadcastStrides(const std::vector<int64_t>& s, size_t rank) {
  std::vector<int64_t> st(rank, 0);
  int64_t acc = 1;
  for (size_t d = s.size(); d-- > 0;) {
    st[rank - s.size() + d] = s[d] == 1 ? 0 : acc;
    acc *= s[d];
  }
  return st;
}

/// Whether a and b broadcast to exactly `out`.
bool broadcastsTo(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                  const std::vector<int64_t>& out) {
  size_t rank = std::max(a.size(), b.size());
  if (out.size() != rank)
    return false;
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return false;
    if (out[i] != (da == 1 ? db : da))
      return false;
  }
  return true;
}

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
    for (int64_t k = 0; k < n; ++k)
      ys[k] = f(as[k], bs[k]);
    return;
  }
  auto sa = broadcastStrides(a.shape, r), sb = broadcastStrides(b.shape, r);
  int64_t inner = y.shape[r - 1], ia = sa[r - 1], ib = sb[r - 1];
  std::vector<int64_t> idx(r, 0);
  int64_t oa = 0, ob = 0;
  for (int64_t k = 0; k < n; k += inner) {
    for (int64_t e = 0; e < inner; ++e)
      ys[k + e] = f(as[oa + e * ia], bs[ob + e * ib]);
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
}

/// fd on floats (in double), fi on integers (null: floats only).
template <typename FD, typename FI>
bool binary(const TensorView& a, const TensorView& b, const TensorView& y, FD fd, FI fi) {
  if (a.dtype != b.dtype || a.dtype != y.dtype || !broadcastsTo(a.shape, b.shape, y.shape))
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
  if (!sameLayout(u, dy) || !sameLayout(u, dx))
    return false;
  return dispatchFloat(u.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* us = u.as<T>();
    const T* ds = dy.as<T>();
    T* xs = dx.as<T>();
    for (int64_t k = 0, n = u.numel(); k < n; ++k)
      xs[k] = static_cast<T>(f(static_cast<double>(us[k]), static_cast<double>(ds[k])));
    return true;
  });
}

//===--- Reductions -------------------------------------------------------===//

bool reduce(const TensorView& x, const TensorView& y, const ReduceParams& p, bool mean) {
  int64_t rank = x.rank();
  std::vector<bool> reduced(rank, !p.axes);
  if (p.axes)
    for (int64_t a : *p.axes) {
      int64_t d = a < 0 ? a + rank : a;
      if (d < 0 || d >= rank || reduced[d])
        return false;
      reduced[d] = true;
    }
  std::vector<int64_t> want;
  for (int64_t d = 0; d < rank; ++d)
    if (!reduced[d])
      want.push_back(x.shape[d]);
    else if (p.keepdims)
      want.push_back(1);
  if (x.dtype != y.dtype || y.shape != want)
    return false;
  // Output stride of each input dim (0 where reduced).
  std::vector<int64_t> ost(rank, 0);
  for (int64_t d = rank, acc = 1; d-- > 0;)
    if (!reduced[d]) {
      ost[d] = acc;
      acc *= x.shape[d];
    }
  int64_t n = x.numel(), m = y.numel();
  int64_t count = n / std::max<int64_t>(1, m);
  return dispatchNumeric(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>;
    if (!std::is_floating_point_v<T> && mean && count == 0 && m > 0)
      return false;
    std::vector<Acc> acc(m, Acc{0});
    const T* xs = x.as<T>();
    std::vector<int64_t> idx(rank, 0);
    int64_t o = 0;
    for (int64_t k = 0; k < n; ++k) {
      acc[o] += static_cast<Acc>(xs[k]);
      for (int64_t d = rank; d-- > 0;) {
        o += ost[d];
        if (++idx[d] < x.shape[d])
          break;
        o -= ost[d] * x.shape[d];
        idx[d] = 0;
      }
    }
    T* ys = y.as<T>();
    for (int64_t k = 0; k < m; ++k) {
      if constexpr (std::is_floating_point_v<T>)
        ys[k] = static_cast<T>(mean ? acc[k] / static_cast<double>(count) : acc[k]);
      else {
        auto s = static_cast<int64_t>(acc[k]);
        ys[k] = static_cast<T>(mean ? s / count : s);
      }
    }
    return true;
  });
}

//===--- Cast -------------------------------------------------------------===//

/// x as the integer the reference keeps: floats truncated toward zero.
template <typename From> int64_t toInt(From v) {
  if constexpr (std::is_floating_point_v<From>) {
    double t = std::trunc(static_cast<double>(v));
    if (!(t == t))
      return 0;
    if (t <= -9223372036854775808.0)
      return INT64_MIN;
    if (t >= 9223372036854775808.0)
      return INT64_MAX;
    return static_cast<int64_t>(t);
  } else {
    return static_cast<int64_t>(v);
  }
}

template <typename To, typename From> To convert(From v, DType to) {
  if (to == DType::Bool)
    return static_cast<To>(v != From{0} ? 1 : 0);
  if constexpr (std::is_floating_point_v<To>) {
    if constexpr (std::is_floating_point_v<From>)
      return static_cast<To>(v);
    else // through double, as the reference
      return static_cast<To>(static_cast<double>(v));
  } else {
    return static_cast<To>(toInt(v)); // int32 wraps
  }
}

/// Element k of the constant's value for element type T.
template <typename T> T fillValue(const FillParams& p, int64_t k, DType t) {
  if constexpr (std::is_floating_point_v<T>)
    return static_cast<T>(p.value.size() == 1 ? p.value[0] : p.value[k]);
  else {
    int64_t v = p.ivalue.size() == 1 ? p.ivalue[0] : p.ivalue[k];
    return t == DType::Bool ? static_cast<T>(v != 0) : static_cast<T>(v);
  }
}

} // namespace

//===--- Unary ------------------------------------------------------------===//

bool relu(const TensorView& x, const TensorView& y) {
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

bool add(const TensorView& a, const TensorView& b, const TensorView& y) {
  return binary(
      a, b, y, [](double u, double v) { return u + v; },
      [](auto u, auto v) { return wrapAdd(u, v); });
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
      a, b, y, [](double u, double v) { return std::pow(u, v); }, nullptr);
}

//===--- Backward elementwise ---------------------------------------------===//

bool reluGrad(const TensorView& y, const TensorView& dy, const TensorView& dx) {
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
  return backward(x, dy, dx, [&](double u, double d) { return clipGradValue(u, d, p.min, p.max); });
}

//===--- Reductions -------------------------------------------------------===//

bool reduceMean(const TensorView& x, const TensorView& y, const ReduceParams& p) {
  return reduce(x, y, p, true);
}
bool reduceSum(const TensorView& x, const TensorView& y, const ReduceParams& p) {
  return reduce(x, y, p, false);
}

//===--- Conversion and values --------------------------------------------===//

bool cast(const TensorView& x, const TensorView& y) {
  if (x.shape != y.shape)
    return false;
  return dispatchValue(x.dtype, [&](auto from) {
    using From = decltype(from);
    return dispatchValue(y.dtype, [&](auto to) {
      using To = decltype(to);
      const From* xs = x.as<From>();
      To* ys = y.as<To>();
      for (int64_t k = 0, n = x.numel(); k < n; ++k)
        ys[k] = convert<To>(xs[k], y.dtype);
      return true;
    });
  });
}

bool fill(const TensorView& y, const FillParams& p) {
  int64_t n = y.numel();
  return dispatchValue(y.dtype, [&](auto tag) {
    using T = decltype(tag);
    size_t have = std::is_floating_point_v<T> ? p.value.size() : p.ivalue.size();
    if (have != 1 && static_cast<int64_t>(have) != n)
      return false;
    T* ys = y.as<T>();
    for (int64_t k = 0; k < n; ++k)
      ys[k] = fillValue<T>(p, k, y.dtype);
    return true;
  });
}

//===--- Randomness -------------------------------------------------------===//

bool dropoutMask(const TensorView& step, const TensorView& mask, const DropoutMaskParams& p) {
  int64_t s = 0;
  ShardIndex piece;
  if (!intScalar(step, s) || !(p.ratio >= 0 && p.ratio < 1) || !dropoutPiece(mask.shape, p, piece))
    return false;
  return dispatchFloat(mask.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* ms = mask.as<T>();
    for (int64_t k = 0, n = mask.numel(); k < n; ++k)
      ms[k] = static_cast<T>(dropoutMaskValue(p.seed, s, p.ratio, piece, k));
    return true;
  });
}

//===--- Optimizers -------------------------------------------------------===//

bool sgdUpdate(const TensorView& w, const TensorView& g, const TensorView& m, const TensorView& lr,
               const TensorView& wOut, const TensorView& mOut, const SgdParams& p) {
  double rate = 0;
  if (!floatScalar(lr, rate))
    return false;
  for (const TensorView* t : {&g, &m, &wOut, &mOut})
    if (!sameLayout(w, *t))
      return false;
  return dispatchFloat(w.dtype, [&](auto tag) {
    using T = decltype(tag);
    bool nesterov = p.nesterov != 0;
    for (int64_t k = 0, n = w.numel(); k < n; ++k) {
      double wk = w.as<T>()[k];
      double gk = g.as<T>()[k] + p.weight_decay * wk;
      double mk = p.momentum * m.as<T>()[k] + gk;
      mOut.as<T>()[k] = static_cast<T>(mk);
      wOut.as<T>()[k] = static_cast<T>(wk - rate * (nesterov ? gk + p.momentum * mk : mk));
    }
    return true;
  });
}

bool adamUpdate(const TensorView& w, const TensorView& g, const TensorView& m, const TensorView& v,
                const TensorView& lr, const TensorView& step, const TensorView& wOut,
                const TensorView& mOut, const TensorView& vOut, const AdamParams& p) {
  double rate = 0;
  int64_t s = 0;
  if (!floatScalar(lr, rate) || !intScalar(step, s))
    return false;
  for (const TensorView* t : {&g, &m, &v, &wOut, &mOut, &vOut})
    if (!sameLayout(w, *t))
      return false;
  double t = static_cast<double>(s + 1);
  double b1 = p.beta1, b2 = p.beta2;
  double c1 = 1.0 - std::pow(b1, t), c2 = 1.0 - std::pow(b2, t);
  bool decoupled = p.decoupled != 0;
  return dispatchFloat(w.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t k = 0, n = w.numel(); k < n; ++k) {
      double wk = w.as<T>()[k], gk = g.as<T>()[k];
      if (decoupled)
        wk *= 1.0 - rate * p.weight_decay;
      else
        gk += p.weight_decay * wk;
      double mk = b1 * m.as<T>()[k] + (1.0 - b1) * gk;
      double vk = b2 * v.as<T>()[k] + (1.0 - b2) * gk * gk;
      mOut.as<T>()[k] = static_cast<T>(mk);
      vOut.as<T>()[k] = static_cast<T>(vk);
      wOut.as<T>()[k] = static_cast<T>(wk - rate * (mk / c1) / (std::sqrt(vk / c2) + p.epsilon));
    }
    return true;
  });
}

bool lrSchedule(const TensorView& step, const TensorView& lr, const LrScheduleParams& p) {
  int64_t s = 0;
  if (!intScalar(step, s) || lr.numel() != 1)
    return false;
  if (p.kind == LrScheduleKind::Step && p.step_size < 1)
    return false;
  double rate = scheduledLr(p, s);
  return dispatchFloat(lr.dtype, [&](auto tag) {
    using T = decltype(tag);
    *lr.as<T>() = static_cast<T>(rate);
    return true;
  });
}

} // namespace lwrt::cpu
