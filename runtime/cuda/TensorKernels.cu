//===- TensorKernels.cu - Elementwise kernels and their gradients -----------===//
//
// The CUDA kernels of lwrt/cuda_tensor.h that compute elementwise values:
// unary and broadcasting binary ops and their backward ops. Reductions, cast
// and fill are in TensorReduceKernels.cu, dropout and the optimizer updates
// in OptimizerKernels.cu, data movement in TensorShapeKernels.cu. Each kernel
// restates the CPU backend's formula (runtime/cpu/TensorKernels.cpp) in
// double and rounds once to the element type; the host-side checks are the
// CPU's (lwrt/kernel_checks.h), made before any launch.
//
// Elementwise kernels are grid-stride loops in which thread k reads its
// operands' element k before writing the result's element k, so a result
// may alias an operand of its shape. Broadcast operands are walked through
// per-operand strides over the result's shape, with dims merged where the
// strides allow (at most 8 remain) and passed by value.
//
//===----------------------------------------------------------------------===//
#include "cuda/TensorSupport.cuh"
#include "lwrt/activation_math.h"
#include "lwrt/cuda_tensor.h"
#include "lwrt/typed_math.h"

#include <cstdint>
#include <string>
#include <type_traits>

namespace lwrt::cuda {

namespace {

//===--- Unary ------------------------------------------------------------===//

/// A float op on bf16 or fp16 elements as the CPU backend computes it:
/// widened to float32, f in double, rounded to float32 and then to the type.
template <typename F>
__global__ void map16Kernel(const uint16_t* x, uint16_t* y, int64_t n, bool bf16, F f) {
  for (int64_t k = firstThread(); k < n; k += gridThreads())
    y[k] = narrow16(static_cast<float>(f(static_cast<double>(widen16(x[k], bf16)))), bf16);
}

template <typename T, typename F> __global__ void mapKernel(const T* x, T* y, int64_t n, F f) {
  for (int64_t k = firstThread(); k < n; k += gridThreads())
    y[k] = f(x[k]);
}

template <typename T, typename F> bool launchMap(const TensorView& x, const TensorView& y, F f) {
  int64_t n = x.numel();
  if (n == 0)
    return true;
  mapKernel<<<blocksFor(n), kThreads, 0, context().stream>>>(x.as<const T>(), y.as<T>(), n, f);
  LWRT_CUDA(cudaGetLastError());
  return true;
}

/// A float function of one double, rounded once to the element type.
template <typename F> struct InDouble {
  F f;
  template <typename T> __device__ T operator()(T v) const {
    return static_cast<T>(f(static_cast<double>(v)));
  }
};

template <typename F>
bool unaryFloat(const char* op, const TensorView& x, const TensorView& y, F f) {
  if (!sameLayout(x, y) || !(isFloat(x.dtype) || is16(x.dtype)))
    return LWRT_REJECT(op, "takes x and y of one float type and shape, not " + describe(x) +
                               " and " + describe(y));
  if (is16(x.dtype)) { // mixed precision's activations
    int64_t n = x.numel();
    if (n == 0)
      return true;
    map16Kernel<<<blocksFor(n), kThreads, 0, context().stream>>>(
        static_cast<const uint16_t*>(x.data), static_cast<uint16_t*>(y.data), n,
        x.dtype == DType::BF16, f);
    LWRT_CUDA(cudaGetLastError());
    return true;
  }
  return dispatchFloat(x.dtype,
                       [&](auto tag) { return launchMap<decltype(tag)>(x, y, InDouble<F>{f}); });
}

/// F computes floats in double and integers with wrapping.
template <typename F>
bool unaryNumeric(const char* op, const TensorView& x, const TensorView& y, F f) {
  if (!sameLayout(x, y) || !isNumeric(x.dtype))
    return LWRT_REJECT(op, "takes x and y of one numeric type and shape, not " + describe(x) +
                               " and " + describe(y));
  return dispatchNumeric(x.dtype, [&](auto tag) { return launchMap<decltype(tag)>(x, y, f); });
}

struct ReluFn {
  __device__ double operator()(double v) const { return v > 0 ? v : 0.0; }
};
struct LeakyReluFn {
  double alpha;
  __device__ double operator()(double v) const { return v >= 0 ? v : alpha * v; }
};
struct SigmoidFn {
  __device__ double operator()(double v) const { return 1.0 / (1.0 + ::exp(-v)); }
};
struct TanhFn {
  __device__ double operator()(double v) const { return ::tanh(v); }
};
struct ErfFn {
  __device__ double operator()(double v) const { return ::erf(v); }
};
struct ExpFn {
  __device__ double operator()(double v) const { return ::exp(v); }
};
struct LogFn {
  __device__ double operator()(double v) const { return ::log(v); }
};
struct SqrtFn {
  __device__ double operator()(double v) const { return ::sqrt(v); }
};
struct ReciprocalFn {
  __device__ double operator()(double v) const { return 1.0 / v; }
};
/// std::min(std::max(v, lo), hi), NaN passing through as there.
struct ClipFn {
  double lo, hi;
  __device__ double operator()(double v) const {
    double t = v < lo ? lo : v;
    return hi < t ? hi : t;
  }
};
struct NegFn {
  template <typename T> __device__ T operator()(T v) const {
    if constexpr (std::is_floating_point_v<T>)
      return static_cast<T>(-static_cast<double>(v));
    else
      return wrapSub(T{0}, v);
  }
};
struct AbsFn {
  template <typename T> __device__ T operator()(T v) const {
    if constexpr (std::is_floating_point_v<T>)
      return static_cast<T>(::fabs(static_cast<double>(v)));
    else
      return v < 0 ? wrapSub(T{0}, v) : v;
  }
};
struct SignFn {
  template <typename T> __device__ T operator()(T v) const {
    if constexpr (std::is_floating_point_v<T>) {
      double d = v;
      return static_cast<T>(d > 0 ? 1.0 : d < 0 ? -1.0 : 0.0);
    } else {
      return static_cast<T>(v > 0 ? 1 : v < 0 ? -1 : 0);
    }
  }
};

//===--- Binary with broadcasting -----------------------------------------===//

template <typename T, typename F>
__global__ void zipKernel(const T* a, const T* b, T* y, int64_t n, F f) {
  for (int64_t k = firstThread(); k < n; k += gridThreads())
    y[k] = f(a[k], b[k]);
}

template <typename T, typename I, typename F>
__global__ void broadcastKernel(const T* a, const T* b, T* y, I n, Walk<2> w, F f) {
  for (I k = static_cast<I>(firstThread()); k < n; k += static_cast<I>(gridThreads())) {
    int64_t off[2];
    offsetsOf(w, k, off);
    y[k] = f(a[off[0]], b[off[1]]);
  }
}

struct AddFn {
  template <typename T> __device__ T operator()(T u, T v) const {
    if constexpr (std::is_floating_point_v<T>)
      return static_cast<T>(static_cast<double>(u) + static_cast<double>(v));
    else
      return wrapAdd(u, v);
  }
};
struct SubFn {
  template <typename T> __device__ T operator()(T u, T v) const {
    if constexpr (std::is_floating_point_v<T>)
      return static_cast<T>(static_cast<double>(u) - static_cast<double>(v));
    else
      return wrapSub(u, v);
  }
};
struct MulFn {
  template <typename T> __device__ T operator()(T u, T v) const {
    if constexpr (std::is_floating_point_v<T>)
      return static_cast<T>(static_cast<double>(u) * static_cast<double>(v));
    else
      return wrapMul(u, v);
  }
};
/// Integer division truncates toward zero; a zero divisor or INT_MIN / -1
/// (which the CPU rejects) raises kIntegerDivision.
struct DivFn {
  int* flag;
  template <typename T> __device__ T operator()(T u, T v) const {
    if constexpr (std::is_floating_point_v<T>) {
      return static_cast<T>(static_cast<double>(u) / static_cast<double>(v));
    } else {
      if (v == 0) {
        raiseDeviceError(flag, kIntegerDivision);
        return T{0};
      }
      if (v == T{-1}) {
        if (u == minInt<T>())
          raiseDeviceError(flag, kIntegerDivision);
        return wrapSub(T{0}, u);
      }
      return static_cast<T>(u / v);
    }
  }
};
struct PowFn {
  template <typename T> __device__ T operator()(T u, T v) const {
    return static_cast<T>(powValue(static_cast<double>(u), static_cast<double>(v)));
  }
};

/// A binary op on bf16 or fp16 operands as the CPU backend computes it:
/// both widened to float32, f in double, the result rounded to float32 and
/// then to the type. `w` walks broadcast operands (null: same shapes).
template <typename F>
__global__ void binary16Kernel(const uint16_t* a, const uint16_t* b, uint16_t* y, int64_t n,
                               Walk<2> w, bool walk, bool bf16, F f) {
  for (int64_t k = firstThread(); k < n; k += gridThreads()) {
    int64_t off[2] = {k, k};
    if (walk)
      offsetsOf(w, k, off);
    const double u = widen16(a[off[0]], bf16), v = widen16(b[off[1]], bf16);
    y[k] = narrow16(static_cast<float>(f(u, v)), bf16);
  }
}

/// Ints: whether the op also takes I64 and I32. Every op also takes bf16
/// and fp16 (a micro-batched step sums 16-bit partial gradients).
template <bool Ints, typename F>
bool binary(const char* op, const TensorView& a, const TensorView& b, const TensorView& y, F f) {
  const bool low = a.dtype == DType::BF16 || a.dtype == DType::F16;
  if (a.dtype != b.dtype || a.dtype != y.dtype || !broadcastsTo(a.shape, b.shape, y.shape) ||
      !(low || (Ints ? isNumeric(a.dtype) : isFloat(a.dtype))))
    return LWRT_REJECT(op, std::string("takes operands of one ") + (Ints ? "numeric" : "float") +
                               " type broadcasting to the result, not " + describe(a) + ", " +
                               describe(b) + " -> " + describe(y));
  int64_t n = y.numel();
  if (n == 0)
    return true;
  if (low) {
    Walk<2> w{};
    const bool walk = a.shape != b.shape;
    size_t r = y.shape.size();
    if (walk &&
        !makeWalk<2>(y.shape, {broadcastStrides(a.shape, r), broadcastStrides(b.shape, r)}, w))
      return LWRT_REJECT(op, "broadcasts over more than 8 dims: " + describe(y));
    binary16Kernel<<<blocksFor(n), kThreads, 0, context().stream>>>(
        static_cast<const uint16_t*>(a.data), static_cast<const uint16_t*>(b.data),
        static_cast<uint16_t*>(y.data), n, w, walk, a.dtype == DType::BF16, f);
    LWRT_CUDA(cudaGetLastError());
    return true;
  }
  auto run = [&](auto tag) {
    using T = decltype(tag);
    cudaStream_t s = context().stream;
    if (a.shape == b.shape) {
      zipKernel<<<blocksFor(n), kThreads, 0, s>>>(a.as<const T>(), b.as<const T>(), y.as<T>(), n,
                                                  f);
    } else {
      size_t r = y.shape.size();
      Walk<2> w;
      if (!makeWalk<2>(y.shape, {broadcastStrides(a.shape, r), broadcastStrides(b.shape, r)}, w))
        return LWRT_REJECT(op, "broadcasts over more than 8 dims: " + describe(y));
      if (n <= kSmallIndex)
        broadcastKernel<<<blocksFor(n), kThreads, 0, s>>>(
            a.as<const T>(), b.as<const T>(), y.as<T>(), static_cast<uint32_t>(n), w, f);
      else
        broadcastKernel<<<blocksFor(n), kThreads, 0, s>>>(
            a.as<const T>(), b.as<const T>(), y.as<T>(), static_cast<uint64_t>(n), w, f);
    }
    LWRT_CUDA(cudaGetLastError());
    return true;
  };
  if constexpr (Ints)
    return dispatchNumeric(a.dtype, run);
  else
    return dispatchFloat(a.dtype, run);
}

//===--- Backward elementwise ---------------------------------------------===//

template <typename T, typename F>
__global__ void backwardKernel(const T* u, const T* d, T* x, int64_t n, F f) {
  for (int64_t k = firstThread(); k < n; k += gridThreads())
    x[k] = static_cast<T>(f(static_cast<double>(u[k]), static_cast<double>(d[k])));
}

template <typename F>
__global__ void backward16Kernel(const uint16_t* u, const uint16_t* d, uint16_t* x, int64_t n,
                                 bool bf16, F f) {
  for (int64_t k = firstThread(); k < n; k += gridThreads())
    x[k] = narrow16(static_cast<float>(f(static_cast<double>(widen16(u[k], bf16)),
                                         static_cast<double>(widen16(d[k], bf16)))),
                    bf16);
}

/// dx[k] = f(u[k], dy[k]) in double; all three views of one float type and
/// shape (bf16 and fp16 widened, the result rounded to float32, then to the type).
template <typename F>
bool backward(const char* op, const TensorView& u, const TensorView& dy, const TensorView& dx,
              F f) {
  if (!sameLayout(u, dy) || !sameLayout(u, dx) || !(isFloat(u.dtype) || is16(u.dtype)))
    return LWRT_REJECT(op, "takes three views of one float type and shape, not " + describe(u) +
                               ", " + describe(dy) + " -> " + describe(dx));
  int64_t n = u.numel();
  if (n == 0)
    return true;
  if (is16(u.dtype)) {
    backward16Kernel<<<blocksFor(n), kThreads, 0, context().stream>>>(
        static_cast<const uint16_t*>(u.data), static_cast<const uint16_t*>(dy.data),
        static_cast<uint16_t*>(dx.data), n, u.dtype == DType::BF16, f);
    LWRT_CUDA(cudaGetLastError());
    return true;
  }
  return dispatchFloat(u.dtype, [&](auto tag) {
    using T = decltype(tag);
    backwardKernel<<<blocksFor(n), kThreads, 0, context().stream>>>(
        u.as<const T>(), dy.as<const T>(), dx.as<T>(), n, f);
    LWRT_CUDA(cudaGetLastError());
    return true;
  });
}

struct ReluGradFn {
  __device__ double operator()(double u, double d) const { return u > 0 ? d : 0.0; }
};
struct LeakyReluGradFn {
  double alpha;
  __device__ double operator()(double u, double d) const { return leakyReluGradValue(u, d, alpha); }
};
struct SigmoidGradFn {
  __device__ double operator()(double u, double d) const { return d * u * (1.0 - u); }
};
struct TanhGradFn {
  __device__ double operator()(double u, double d) const { return d * (1.0 - u * u); }
};
struct ClipGradFn {
  double lo, hi;
  __device__ double operator()(double u, double d) const { return clipGradValue(u, d, lo, hi); }
};

} // namespace

//===--- Unary ------------------------------------------------------------===//

bool relu(const TensorView& x, const TensorView& y) { return unaryFloat("relu", x, y, ReluFn{}); }
bool leakyRelu(const TensorView& x, const TensorView& y, const LeakyReluParams& p) {
  return unaryFloat("leakyRelu", x, y, LeakyReluFn{p.alpha});
}
bool sigmoid(const TensorView& x, const TensorView& y) {
  return unaryFloat("sigmoid", x, y, SigmoidFn{});
}
bool tanh(const TensorView& x, const TensorView& y) { return unaryFloat("tanh", x, y, TanhFn{}); }
bool erf(const TensorView& x, const TensorView& y) { return unaryFloat("erf", x, y, ErfFn{}); }
bool exp(const TensorView& x, const TensorView& y) { return unaryFloat("exp", x, y, ExpFn{}); }
bool log(const TensorView& x, const TensorView& y) { return unaryFloat("log", x, y, LogFn{}); }
bool sqrt(const TensorView& x, const TensorView& y) { return unaryFloat("sqrt", x, y, SqrtFn{}); }
bool reciprocal(const TensorView& x, const TensorView& y) {
  return unaryFloat("reciprocal", x, y, ReciprocalFn{});
}
bool clip(const TensorView& x, const TensorView& y, const ClipParams& p) {
  return unaryFloat("clip", x, y, ClipFn{p.min, p.max});
}
bool neg(const TensorView& x, const TensorView& y) { return unaryNumeric("neg", x, y, NegFn{}); }
bool abs(const TensorView& x, const TensorView& y) { return unaryNumeric("abs", x, y, AbsFn{}); }
bool sign(const TensorView& x, const TensorView& y) { return unaryNumeric("sign", x, y, SignFn{}); }

//===--- Binary -----------------------------------------------------------===//

bool add(const TensorView& a, const TensorView& b, const TensorView& y) {
  return binary<true>("add", a, b, y, AddFn{});
}
bool sub(const TensorView& a, const TensorView& b, const TensorView& y) {
  return binary<true>("sub", a, b, y, SubFn{});
}
bool mul(const TensorView& a, const TensorView& b, const TensorView& y) {
  return binary<true>("mul", a, b, y, MulFn{});
}
bool div(const TensorView& a, const TensorView& b, const TensorView& y) {
  return binary<true>("div", a, b, y, DivFn{context().errorFlag});
}
bool pow(const TensorView& a, const TensorView& b, const TensorView& y) {
  return binary<false>("pow", a, b, y, PowFn{});
}

//===--- Backward elementwise ---------------------------------------------===//

bool reluGrad(const TensorView& y, const TensorView& dy, const TensorView& dx) {
  return backward("reluGrad", y, dy, dx, ReluGradFn{});
}
bool leakyReluGrad(const TensorView& x, const TensorView& dy, const TensorView& dx,
                   const LeakyReluParams& p) {
  return backward("leakyReluGrad", x, dy, dx, LeakyReluGradFn{p.alpha});
}
bool sigmoidGrad(const TensorView& y, const TensorView& dy, const TensorView& dx) {
  return backward("sigmoidGrad", y, dy, dx, SigmoidGradFn{});
}
bool tanhGrad(const TensorView& y, const TensorView& dy, const TensorView& dx) {
  return backward("tanhGrad", y, dy, dx, TanhGradFn{});
}
bool clipGrad(const TensorView& x, const TensorView& dy, const TensorView& dx,
              const ClipParams& p) {
  return backward("clipGrad", x, dy, dx, ClipGradFn{p.min, p.max});
}

} // namespace lwrt::cuda
