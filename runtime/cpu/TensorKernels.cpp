//===- TensorKernels.cpp - Elementwise, reduction and update kernels ------===//
//
// The CPU kernels of lwrt/cpu_tensor.h that compute values: unary and
// broadcasting binary ops, their backward ops, reductions, cast, fill, the
// dropout RNG and the optimizer updates. Data movement is in
// TensorShapeKernels.cpp. Each kernel restates the reference interpreter's
// formula (interp/Interpreter.cpp, interp/TrainOps.cpp) in double and rounds
// once to the element type.
//
//===----------------------------------------------------------------------===//
#include "Bf16.h"
#include "Common.h"
#include "Parallel.h"
#include "lwrt/activation_math.h"
#include "lwrt/bf16.h"
#include "lwrt/cpu_tensor.h"
#include "lwrt/dropout.h"
#include "lwrt/f16.h"
#include "lwrt/optimizer_math.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
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

using detail::dispatchNumeric;

/// The same for F32, F64, I64, I32 and Bool (as uint8_t).
template <typename Fn> bool dispatchValue(DType t, Fn fn) {
  if (t == DType::Bool)
    return fn(uint8_t{});
  return dispatchNumeric(t, fn);
}

/// Elements per thread at least, for the elementwise loops: below this a
/// loop costs less than waking a thread.
constexpr int64_t kGrain = 16384;

/// Calls fn(k) for k in [0, n), spread over the pool.
template <typename Fn> void forEachElement(int64_t n, Fn fn) {
  detail::parallelFor(n, kGrain, [&](int64_t first, int64_t last) {
    for (int64_t k = first; k < last; ++k)
      fn(k);
  });
}

/// Same element type, shape and layout: elementwise over such views is the
/// same loop in any layout (the CPU backend keeps some activations in
/// nChw8c, lwrt/tensor.h).
bool sameLayout(const TensorView& a, const TensorView& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.layout == b.layout;
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
  if (!sameLayout(x, y))
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
  if (!sameLayout(u, dy) || !sameLayout(u, dx))
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

//===--- Reductions -------------------------------------------------------===//

bool reduceBlocked(const TensorView& x, const TensorView& y, const ReduceParams& p, bool mean);

bool reduce(const TensorView& x, const TensorView& y, const ReduceParams& p, bool mean) {
  if (y.layout != Layout::RowMajor)
    return false;
  if (x.layout != Layout::RowMajor)
    return reduceBlocked(x, y, p, mean);
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
  // Each output sums its inputs in row-major order (float runs of contiguous
  // inputs in four interleaved partial sums), the outputs spread over the
  // pool: kept dims outside, reduced dims inside, with the input strides of
  // each.
  std::vector<int64_t> stride(rank, 1), keptDims, keptStrides, redDims, redStrides;
  for (int64_t d = rank - 1; d > 0; --d)
    stride[d - 1] = stride[d] * x.shape[d];
  for (int64_t d = 0; d < rank; ++d) {
    (reduced[d] ? redDims : keptDims).push_back(x.shape[d]);
    (reduced[d] ? redStrides : keptStrides).push_back(stride[d]);
  }
  int64_t n = x.numel(), m = y.numel();
  int64_t count = n / std::max<int64_t>(1, m);
  // Reduced dims that are contiguous and innermost fold into one run.
  int64_t run = 1;
  while (!redDims.empty() && redStrides.back() == run) {
    run *= redDims.back();
    redDims.pop_back();
    redStrides.pop_back();
  }
  int64_t outer = 1;
  for (int64_t d : redDims)
    outer *= d;
  return dispatchNumeric(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>;
    if (!std::is_floating_point_v<T> && mean && count == 0 && m > 0)
      return false;
    const T* xs = x.as<T>();
    T* ys = y.as<T>();
    int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(1, count));
    detail::parallelFor(m, grain, [&](int64_t first, int64_t last) {
      for (int64_t k = first; k < last; ++k) {
        int64_t base = 0;
        for (int64_t d = static_cast<int64_t>(keptDims.size()) - 1, rest = k; d >= 0; --d) {
          base += rest % keptDims[d] * keptStrides[d];
          rest /= keptDims[d];
        }
        Acc acc{0};
        for (int64_t o = 0; o < outer; ++o) {
          int64_t at = base;
          for (int64_t d = static_cast<int64_t>(redDims.size()) - 1, rest = o; d >= 0; --d) {
            at += rest % redDims[d] * redStrides[d];
            rest /= redDims[d];
          }
          if constexpr (std::is_floating_point_v<T>) {
            // Four partial sums along a contiguous run (a fixed order: the
            // same bits on any number of threads).
            Acc a0{0}, a1{0}, a2{0}, a3{0};
            int64_t e = 0;
            for (; e + 4 <= run; e += 4) {
              a0 += static_cast<Acc>(xs[at + e]);
              a1 += static_cast<Acc>(xs[at + e + 1]);
              a2 += static_cast<Acc>(xs[at + e + 2]);
              a3 += static_cast<Acc>(xs[at + e + 3]);
            }
            for (; e < run; ++e)
              a0 += static_cast<Acc>(xs[at + e]);
            acc += (a0 + a1) + (a2 + a3);
          } else {
            for (int64_t e = 0; e < run; ++e)
              acc += static_cast<Acc>(xs[at + e]);
          }
        }
        if constexpr (std::is_floating_point_v<T>)
          ys[k] = static_cast<T>(mean ? acc / static_cast<double>(count) : acc);
        else {
          auto s = static_cast<int64_t>(acc);
          ys[k] = static_cast<T>(mean ? s / count : s);
        }
      }
    });
    return true;
  });
}

/// A float32 nChw8c [N, C, H, W] summed over n, h and w into [C] (a conv's
/// bias gradient), each channel in the row-major kernel's order.
bool reduceBlocked(const TensorView& x, const TensorView& y, const ReduceParams& p, bool mean) {
  if (x.layout != Layout::NChw8c || x.dtype != DType::F32 || y.dtype != DType::F32 ||
      x.rank() != 4 || x.shape[1] % 8 != 0 || p.keepdims || !p.axes ||
      *p.axes != std::vector<int64_t>{0, 2, 3} || y.shape != std::vector<int64_t>{x.shape[1]})
    return false;
  const int64_t N = x.shape[0], blocks = x.shape[1] / 8, run = x.shape[2] * x.shape[3];
  const float* xs = x.as<float>();
  float* ys = y.as<float>();
  detail::parallelFor(blocks, 1, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      double acc[8] = {};
      for (int64_t n = 0; n < N; ++n) {
        const float* in = xs + (n * blocks + b) * run * 8;
        double a[4][8] = {};
        int64_t e = 0;
        for (; e + 4 <= run; e += 4)
          for (int k = 0; k < 4; ++k)
            for (int l = 0; l < 8; ++l)
              a[k][l] += in[(e + k) * 8 + l];
        for (; e < run; ++e)
          for (int l = 0; l < 8; ++l)
            a[0][l] += in[e * 8 + l];
        for (int l = 0; l < 8; ++l)
          acc[l] += (a[0][l] + a[1][l]) + (a[2][l] + a[3][l]);
      }
      for (int l = 0; l < 8; ++l)
        ys[b * 8 + l] = static_cast<float>(mean ? acc[l] / static_cast<double>(N * run) : acc[l]);
    }
  });
  return true;
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
  if (x.dtype == DType::F32 && sameLayout(x, y)) { // the same values, vectorized
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
  if (x.dtype == DType::F32 && sameLayout(x, y)) {
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
  if (a.dtype == DType::F32 && sameLayout(a, b) && sameLayout(a, y)) {
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
      a, b, y, [](double u, double v) { return std::pow(u, v); }, nullptr);
}

//===--- Backward elementwise ---------------------------------------------===//

bool reluGrad(const TensorView& y, const TensorView& dy, const TensorView& dx) {
  if (y.dtype == DType::F32 && sameLayout(y, dy) && sameLayout(y, dx)) {
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
  if (x.dtype == DType::F32 && sameLayout(x, dy) && sameLayout(x, dx)) {
    const float *xs = x.as<float>(), *ds = dy.as<float>();
    float* out = dx.as<float>();
    forEachElement(x.numel(), [&](int64_t k) {
      out[k] = static_cast<float>(clipGradValue(xs[k], ds[k], p.min, p.max));
    });
    return true;
  }
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
  if (x.shape != y.shape || x.layout != y.layout)
    return false;
  const bool bf16 = x.dtype == DType::BF16 || y.dtype == DType::BF16;
  if (bf16 || x.dtype == DType::F16 || y.dtype == DType::F16) {
    // bf16 or fp16 to and from float32 (rounded to nearest even,
    // lwrt/bf16.h and lwrt/f16.h), and either to itself; they meet no
    // other type in a step.
    if (x.data == nullptr || y.data == nullptr || x.layout != Layout::RowMajor)
      return x.numel() == 0 && y.numel() == 0;
    const DType low = bf16 ? DType::BF16 : DType::F16;
    if (x.dtype == DType::F32 && y.dtype == low) {
      const float* xs = x.as<float>();
      auto* ys = static_cast<uint16_t*>(y.data);
      if (bf16)
        forEachElement(x.numel(), [&](int64_t k) { ys[k] = floatToBf16(xs[k]); });
      else
        forEachElement(x.numel(), [&](int64_t k) { ys[k] = floatToF16(xs[k]); });
      return true;
    }
    if (x.dtype == low && y.dtype == DType::F32) {
      const auto* xs = static_cast<const uint16_t*>(x.data);
      float* ys = y.as<float>();
      if (bf16)
        forEachElement(x.numel(), [&](int64_t k) { ys[k] = bf16ToFloat(xs[k]); });
      else
        forEachElement(x.numel(), [&](int64_t k) { ys[k] = f16ToFloat(xs[k]); });
      return true;
    }
    if (x.dtype == low && y.dtype == low) {
      std::memmove(y.data, x.data, static_cast<size_t>(x.bytes()));
      return true;
    }
    return false;
  }
  return dispatchValue(x.dtype, [&](auto from) {
    using From = decltype(from);
    return dispatchValue(y.dtype, [&](auto to) {
      using To = decltype(to);
      const From* xs = x.as<From>();
      To* ys = y.as<To>();
      forEachElement(x.numel(), [&](int64_t k) { ys[k] = convert<To>(xs[k], y.dtype); });
      return true;
    });
  });
}

bool fill(const TensorView& y, const FillParams& p) {
  int64_t n = y.numel();
  if (detail::Float32Views::any({&y})) { // float32 values, each rounded to the type
    detail::Float32Views f;
    return fill(f.out(y), p) && f.commit();
  }
  return dispatchValue(y.dtype, [&](auto tag) {
    using T = decltype(tag);
    size_t have = std::is_floating_point_v<T> ? p.value.size() : p.ivalue.size();
    if (have != 1 && static_cast<int64_t>(have) != n)
      return false;
    T* ys = y.as<T>();
    forEachElement(n, [&](int64_t k) { ys[k] = fillValue<T>(p, k, y.dtype); });
    return true;
  });
}

//===--- Randomness -------------------------------------------------------===//

bool dropoutMask(const TensorView& step, const TensorView& mask, const DropoutMaskParams& p) {
  int64_t s = 0;
  ShardIndex piece;
  if (!intScalar(step, s) || !(p.ratio >= 0 && p.ratio < 1) ||
      !dropoutPiece(mask.shape, p, piece) || mask.layout != Layout::RowMajor)
    return false;
  if (detail::Float32Views::narrow(mask.dtype)) { // mixed precision's dropout
    detail::Float32Views w;
    return dropoutMask(step, w.out(mask), p) && w.commit();
  }
  return dispatchFloat(mask.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* ms = mask.as<T>();
    forEachElement(mask.numel(), [&](int64_t k) {
      ms[k] = static_cast<T>(dropoutMaskValue(p.seed, s, p.ratio, piece, k));
    });
    return true;
  });
}

//===--- Optimizers -------------------------------------------------------===//

bool sgdUpdate(const TensorView& w, const TensorView& g, const TensorView& m, const TensorView& lr,
               const TensorView& wOut, const TensorView& mOut, const SgdParams& p) {
  double rate = 0;
  if (!floatScalar(lr, rate))
    return false;
  rate *= p.lr_scale;
  for (const TensorView* t : {&g, &m, &wOut, &mOut})
    if (!sameLayout(w, *t))
      return false;
  SgdHyper h{p.momentum, p.weight_decay, p.nesterov != 0};
  return dispatchFloat(w.dtype, [&](auto tag) {
    using T = decltype(tag);
    forEachElement(w.numel(), [&](int64_t k) {
      SgdElement e = sgdElement(w.as<T>()[k], g.as<T>()[k], m.as<T>()[k], rate, h);
      mOut.as<T>()[k] = static_cast<T>(e.m);
      wOut.as<T>()[k] = static_cast<T>(e.w);
    });
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
  rate *= p.lr_scale;
  for (const TensorView* t : {&g, &m, &v, &wOut, &mOut, &vOut})
    if (!sameLayout(w, *t))
      return false;
  AdamHyper h{p.beta1, p.beta2, p.epsilon, p.weight_decay, p.decoupled != 0};
  AdamCorrection corr = adamCorrection(h, s);
  return dispatchFloat(w.dtype, [&](auto tag) {
    using T = decltype(tag);
    forEachElement(w.numel(), [&](int64_t k) {
      AdamElement e =
          adamElement(w.as<T>()[k], g.as<T>()[k], m.as<T>()[k], v.as<T>()[k], rate, h, corr);
      mOut.as<T>()[k] = static_cast<T>(e.m);
      vOut.as<T>()[k] = static_cast<T>(e.v);
      wOut.as<T>()[k] = static_cast<T>(e.w);
    });
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

bool allFinite(const std::vector<TensorView>& xs, const TensorView& y, const AllFiniteParams&) {
  if (y.dtype != DType::Bool || y.numel() != 1 || !y.data)
    return false;
  bool finite = true;
  for (const TensorView& x : xs) {
    const int64_t n = x.numel();
    if (n > 0 && !x.data)
      return false;
    if (x.dtype == DType::F32) {
      const float* v = x.as<float>();
      for (int64_t k = 0; k < n && finite; ++k)
        finite = isFiniteFloat(v[k]);
    } else if (x.dtype == DType::F64) {
      const double* v = x.as<double>();
      for (int64_t k = 0; k < n && finite; ++k)
        finite = std::isfinite(v[k]);
    } else if (x.dtype == DType::F16 || x.dtype == DType::BF16) {
      // Infinite or NaN: the exponent bits all ones.
      const uint16_t mask = x.dtype == DType::F16 ? 0x7c00u : 0x7f80u;
      const auto* v = static_cast<const uint16_t*>(x.data);
      for (int64_t k = 0; k < n && finite; ++k)
        finite = (v[k] & mask) != mask;
    } else {
      return false;
    }
  }
  *static_cast<uint8_t*>(y.data) = finite ? 1 : 0;
  return true;
}

} // namespace lwrt::cpu
