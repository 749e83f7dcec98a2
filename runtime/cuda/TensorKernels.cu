//===- TensorKernels.cu - Elementwise, reduction and update kernels -------===//
//
// The CUDA kernels of lwrt/cuda_tensor.h that compute values: unary and
// broadcasting binary ops, their backward ops, reductions, cast, fill, the
// dropout RNG and the optimizer updates. Data movement is in
// TensorShapeKernels.cu. Each kernel restates the CPU backend's formula
// (runtime/cpu/TensorKernels.cpp) in double and rounds once to the element
// type; the host-side checks are the CPU's, made before any launch.
//
// Elementwise kernels are grid-stride loops in which thread k reads its
// operands' element k before writing the result's element k, so a result
// may alias an operand of its shape. Broadcast operands are walked through
// per-operand strides over the result's shape, with dims merged where the
// strides allow (at most 8 remain) and passed by value.
//
//===----------------------------------------------------------------------===//
#include "cuda/Context.h"
#include "lwrt/activation_math.h"
#include "lwrt/bf16.h"
#include "lwrt/cuda_tensor.h"
#include "lwrt/dropout.h"
#include "lwrt/f16.h"
#include "lwrt/optimizer_math.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace lwrt::cuda {

namespace {

using Dims = std::vector<int64_t>;

/// Records "op: what" as the context's error and returns false.
#define LWRT_REJECT(op, what)                                                                      \
  ::lwrt::cuda::fail(__FILE__, __LINE__, std::string(op) + ": " + (what))

//===--- Dispatch and checks ----------------------------------------------===//

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

/// F32, F64, I64, I32 and Bool (as uint8_t).
template <typename Fn> bool dispatchValue(DType t, Fn fn) {
  if (t == DType::Bool)
    return fn(uint8_t{});
  return dispatchNumeric(t, fn);
}

bool isFloat(DType t) { return t == DType::F32 || t == DType::F64; }
bool isNumeric(DType t) { return isFloat(t) || t == DType::I64 || t == DType::I32; }
bool isInt(DType t) { return t == DType::I64 || t == DType::I32; }

bool sameLayout(const TensorView& a, const TensorView& b) {
  return a.dtype == b.dtype && a.shape == b.shape;
}

/// A float scalar operand (lr) and an integer scalar operand (step).
bool floatScalar(const TensorView& t) { return t.numel() == 1 && isFloat(t.dtype); }
bool intScalar(const TensorView& t) { return t.numel() == 1 && isInt(t.dtype); }

std::string shapeString(const Dims& s) {
  std::string out = "[";
  for (size_t d = 0; d < s.size(); ++d)
    out += (d ? "," : "") + std::to_string(s[d]);
  return out + "]";
}

/// "F32[2,3]" for messages.
std::string describe(const TensorView& t) {
  static const char* names[] = {"F32", "F64", "F16", "BF16", "I64", "I32", "Bool"};
  return std::string(names[static_cast<int>(t.dtype)]) + shapeString(t.shape);
}

//===--- Device helpers ---------------------------------------------------===//

/// Sets the context's error flag unless an earlier error is there.
__device__ void raiseDeviceError(int* flag, int code) {
  if (flag)
    atomicCAS(flag, 0, code);
}

template <typename T> __device__ T wrapAdd(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}
template <typename T> __device__ T wrapSub(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
}
template <typename T> __device__ T wrapMul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
}
template <typename T> __device__ T minOf() {
  if constexpr (sizeof(T) == 8)
    return static_cast<T>(INT64_MIN);
  else
    return static_cast<T>(INT32_MIN);
}

__device__ int64_t firstThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ int64_t gridThreads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

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

/// Row-major strides of `s`.
Dims stridesOf(const Dims& s) {
  Dims st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;)
    st[d - 1] = st[d] * s[d];
  return st;
}

/// Strides of `s` seen from a broadcast result of rank `rank` (0 where broadcast).
Dims broadcastStrides(const Dims& s, size_t rank) {
  Dims st(rank, 0);
  int64_t acc = 1;
  for (size_t d = s.size(); d-- > 0;) {
    st[rank - s.size() + d] = s[d] == 1 ? 0 : acc;
    acc *= s[d];
  }
  return st;
}

/// Whether a and b broadcast to exactly `out`.
bool broadcastsTo(const Dims& a, const Dims& b, const Dims& out) {
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

constexpr int64_t kSmallIndex = INT32_MAX;

//===--- Unary ------------------------------------------------------------===//

/// A bf16 (fp16 when !bf16) element as a float32 and back, with the
/// rounding of lwrt/bf16.h and lwrt/f16.h.
__device__ float widen16(uint16_t h, bool bf16) { return bf16 ? bf16ToFloat(h) : f16ToFloat(h); }
__device__ uint16_t narrow16(float v, bool bf16) { return bf16 ? floatToBf16(v) : floatToF16(v); }

bool is16(DType t) { return t == DType::BF16 || t == DType::F16; }

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
        if (u == minOf<T>())
          raiseDeviceError(flag, kIntegerDivision);
        return wrapSub(T{0}, u);
      }
      return static_cast<T>(u / v);
    }
  }
};
struct PowFn {
  template <typename T> __device__ T operator()(T u, T v) const {
    return static_cast<T>(::pow(static_cast<double>(u), static_cast<double>(v)));
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

//===--- Reductions -------------------------------------------------------===//

// Each output element sums its inputs in a fixed order: one thread walks
// them in the CPU's order when there are few (the same sum, bit for bit);
// otherwise one block takes strided partial sums and adds them in a fixed
// tree. Few outputs of many inputs each (a convolution's bias gradient: 64
// channels of N*H*W = 387k values for AlexNet's conv1 at batch 128) would
// leave most of the GPU idle with a block per output, so their inputs are
// cut into consecutive chunks, a block per chunk writes its tree's sum into
// the workspace, and one thread per output adds the chunks' sums in order.
// Floats sum in double, integers in wrapping uint64.

template <typename T>
using AccOf = std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>;

template <typename T> __device__ T finishReduce(AccOf<T> acc, int64_t count, bool mean) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(mean ? acc / static_cast<double>(count) : acc);
  } else {
    auto s = static_cast<int64_t>(acc);
    return static_cast<T>(mean ? s / count : s);
  }
}

template <typename T, typename I>
__global__ void reduceThreads(const T* x, T* y, I m, Walk<1> kept, Walk<1> red, I count,
                              bool mean) {
  for (I o = static_cast<I>(firstThread()); o < m; o += static_cast<I>(gridThreads())) {
    int64_t base[1];
    offsetsOf(kept, o, base);
    AccOf<T> acc = 0;
    for (I j = 0; j < count; ++j) {
      int64_t off[1];
      offsetsOf(red, j, off);
      acc += static_cast<AccOf<T>>(x[base[0] + off[0]]);
    }
    y[o] = finishReduce<T>(acc, static_cast<int64_t>(count), mean);
  }
}

/// Needs blockDim.x == kThreads (a power of two).
template <typename T, typename I>
__global__ void reduceBlocks(const T* x, T* y, I m, Walk<1> kept, Walk<1> red, I count, bool mean) {
  __shared__ AccOf<T> part[kThreads];
  for (I o = blockIdx.x; o < m; o += gridDim.x) {
    int64_t base[1];
    offsetsOf(kept, o, base);
    AccOf<T> acc = 0;
    for (I j = threadIdx.x; j < count; j += kThreads) {
      int64_t off[1];
      offsetsOf(red, j, off);
      acc += static_cast<AccOf<T>>(x[base[0] + off[0]]);
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned half = kThreads / 2; half > 0; half >>= 1) {
      if (threadIdx.x < half)
        part[threadIdx.x] += part[threadIdx.x + half];
      __syncthreads();
    }
    if (threadIdx.x == 0)
      y[o] = finishReduce<T>(part[0], static_cast<int64_t>(count), mean);
    __syncthreads(); // part is reused by the next output
  }
}

/// One block per chunk [s * chunk, (s + 1) * chunk) of output o's inputs
/// (blockIdx.x the chunk, blockIdx.y the output): its sum into
/// part[o * splits + s]. Needs blockDim.x == kThreads.
template <typename T, typename I>
__global__ void reduceChunks(const T* x, AccOf<T>* part, I m, Walk<1> kept, Walk<1> red, I count,
                             I chunk, unsigned splits) {
  __shared__ AccOf<T> sums[kThreads];
  for (I o = blockIdx.y; o < m; o += gridDim.y) {
    int64_t base[1];
    offsetsOf(kept, o, base);
    for (unsigned s = blockIdx.x; s < splits; s += gridDim.x) {
      const I begin = static_cast<I>(s) * chunk;
      const I end = count - begin < chunk ? count : begin + chunk;
      AccOf<T> acc = 0;
      for (I j = begin + threadIdx.x; j < end; j += kThreads) {
        int64_t off[1];
        offsetsOf(red, j, off);
        acc += static_cast<AccOf<T>>(x[base[0] + off[0]]);
      }
      sums[threadIdx.x] = acc;
      __syncthreads();
      for (unsigned half = kThreads / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half)
          sums[threadIdx.x] += sums[threadIdx.x + half];
        __syncthreads();
      }
      if (threadIdx.x == 0)
        part[static_cast<size_t>(o) * splits + s] = sums[0];
      __syncthreads(); // sums is reused by the next chunk
    }
  }
}

/// y[o] = the chunks' sums of output o, added in chunk order.
template <typename T, typename I>
__global__ void reduceChunkSums(const AccOf<T>* part, T* y, I m, unsigned splits, I count,
                                bool mean) {
  for (I o = static_cast<I>(firstThread()); o < m; o += static_cast<I>(gridThreads())) {
    AccOf<T> acc = 0;
    for (unsigned s = 0; s < splits; ++s)
      acc += part[static_cast<size_t>(o) * splits + s];
    y[o] = finishReduce<T>(acc, static_cast<int64_t>(count), mean);
  }
}

/// Inputs per output up to which one thread sums them in the CPU's order.
constexpr int64_t kThreadReduce = 32;
/// Chunked reductions: the blocks to aim for (enough to fill the largest
/// GPUs several times), and the fewest inputs a chunk holds.
constexpr int64_t kReduceBlocksWanted = 1024;
constexpr int64_t kReduceChunkMin = 8192;

template <typename T, typename I>
bool launchReduce(const TensorView& x, const TensorView& y, int64_t m, const Walk<1>& kept,
                  const Walk<1>& red, int64_t count, bool mean) {
  cudaStream_t s = context().stream;
  if (count <= kThreadReduce) {
    reduceThreads<T, I><<<blocksFor(m), kThreads, 0, s>>>(
        x.as<const T>(), y.as<T>(), static_cast<I>(m), kept, red, static_cast<I>(count), mean);
  } else if (m < kReduceBlocksWanted / 2 && count >= 2 * kReduceChunkMin) {
    const int64_t wanted = std::min((kReduceBlocksWanted + m - 1) / m, count / kReduceChunkMin);
    const int64_t chunk = (count + wanted - 1) / wanted;
    const int64_t splits = (count + chunk - 1) / chunk;
    if (!ensureWorkspace(static_cast<size_t>(m * splits) * sizeof(AccOf<T>)))
      return false;
    auto* part = static_cast<AccOf<T>*>(context().workspace);
    reduceChunks<T, I>
        <<<dim3(static_cast<unsigned>(splits), static_cast<unsigned>(m)), kThreads, 0, s>>>(
            x.as<const T>(), part, static_cast<I>(m), kept, red, static_cast<I>(count),
            static_cast<I>(chunk), static_cast<unsigned>(splits));
    LWRT_CUDA(cudaGetLastError());
    reduceChunkSums<T, I><<<blocksFor(m), kThreads, 0, s>>>(part, y.as<T>(), static_cast<I>(m),
                                                            static_cast<unsigned>(splits),
                                                            static_cast<I>(count), mean);
  } else {
    reduceBlocks<T, I><<<static_cast<unsigned>(std::min<int64_t>(m, 65535 * 8)), kThreads, 0, s>>>(
        x.as<const T>(), y.as<T>(), static_cast<I>(m), kept, red, static_cast<I>(count), mean);
  }
  LWRT_CUDA(cudaGetLastError());
  return true;
}

bool reduce(const char* op, const TensorView& x, const TensorView& y, const ReduceParams& p,
            bool mean) {
  int64_t rank = x.rank();
  std::vector<bool> reduced(rank, !p.axes);
  if (p.axes)
    for (int64_t a : *p.axes) {
      int64_t d = a < 0 ? a + rank : a;
      if (d < 0 || d >= rank || reduced[d])
        return LWRT_REJECT(op, "axis " + std::to_string(a) + " is out of range or repeated for " +
                                   describe(x));
      reduced[d] = true;
    }
  Dims want, keptShape, keptStride, redShape, redStride, xst = stridesOf(x.shape);
  for (int64_t d = 0; d < rank; ++d) {
    if (!reduced[d]) {
      want.push_back(x.shape[d]);
      keptShape.push_back(x.shape[d]);
      keptStride.push_back(xst[d]);
    } else {
      if (p.keepdims)
        want.push_back(1);
      redShape.push_back(x.shape[d]);
      redStride.push_back(xst[d]);
    }
  }
  if (x.dtype != y.dtype || y.shape != want || !isNumeric(x.dtype))
    return LWRT_REJECT(op, "cannot reduce " + describe(x) + " to " + describe(y));
  int64_t m = y.numel(), count = 1;
  for (int64_t d : redShape)
    count *= d;
  if (mean && isInt(x.dtype) && count == 0 && m > 0)
    return LWRT_REJECT(op, "an integer mean over no elements");
  if (m == 0)
    return true;
  Walk<1> kept, red;
  if (!makeWalk<1>(keptShape, {keptStride}, kept) || !makeWalk<1>(redShape, {redStride}, red))
    return LWRT_REJECT(op, "reduces a tensor of more than 8 dims: " + describe(x));
  bool small = std::max(m, count) <= kSmallIndex;
  return dispatchNumeric(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    return small ? launchReduce<T, uint32_t>(x, y, m, kept, red, count, mean)
                 : launchReduce<T, uint64_t>(x, y, m, kept, red, count, mean);
  });
}

//===--- Cast and fill ----------------------------------------------------===//

/// v as the integer the reference keeps: floats truncated toward zero,
/// NaN to 0, saturated at the int64 range.
template <typename From> __device__ int64_t toInt(From v) {
  if constexpr (std::is_floating_point_v<From>) {
    double t = ::trunc(static_cast<double>(v));
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

template <typename From, typename To>
__global__ void castKernel(const From* x, To* y, int64_t n, bool toBool) {
  for (int64_t k = firstThread(); k < n; k += gridThreads()) {
    From v = x[k];
    if (toBool)
      y[k] = static_cast<To>(v != From{0} ? 1 : 0);
    else if constexpr (std::is_floating_point_v<To>)
      y[k] = static_cast<To>(
          static_cast<std::conditional_t<std::is_floating_point_v<From>, From, double>>(v));
    else
      y[k] = static_cast<To>(toInt(v)); // int32 wraps
  }
}

/// float32 to bf16 or fp16 and back, element by element, with the rounding
/// the CPU backend and the interpreter use (lwrt/bf16.h, lwrt/f16.h).
__global__ void narrowKernel(const float* x, uint16_t* y, int64_t n, bool bf16) {
  for (int64_t k = firstThread(); k < n; k += gridThreads())
    y[k] = bf16 ? floatToBf16(x[k]) : floatToF16(x[k]);
}
__global__ void widenKernel(const uint16_t* x, float* y, int64_t n, bool bf16) {
  for (int64_t k = firstThread(); k < n; k += gridThreads())
    y[k] = bf16 ? bf16ToFloat(x[k]) : f16ToFloat(x[k]);
}

template <typename T> T fillValue(const FillParams& p, int64_t k, DType t) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(p.value.size() == 1 ? p.value[0] : p.value[k]);
  } else {
    int64_t v = p.ivalue.size() == 1 ? p.ivalue[0] : p.ivalue[k];
    return t == DType::Bool ? static_cast<T>(v != 0) : static_cast<T>(v);
  }
}

template <typename T> __global__ void splatKernel(T* y, int64_t n, T v) {
  for (int64_t k = firstThread(); k < n; k += gridThreads())
    y[k] = v;
}

/// Up to 3 KiB of a constant's values, carried in a launch's parameters.
template <typename T> struct FillChunk {
  static constexpr int64_t kCount = 3072 / static_cast<int64_t>(sizeof(T));
  T v[kCount];
};

template <typename T> __global__ void chunkKernel(T* y, int64_t n, FillChunk<T> c) {
  for (int64_t k = firstThread(); k < n; k += gridThreads())
    y[k] = c.v[k];
}

//===--- Optimizers -------------------------------------------------------===//

template <typename S, typename T>
__global__ void dropoutKernel(const S* step, T* mask, int64_t n, int64_t seed, double ratio,
                              ShardIndex piece) {
  auto s = static_cast<int64_t>(*step);
  for (int64_t k = firstThread(); k < n; k += gridThreads())
    mask[k] = static_cast<T>(dropoutMaskValue(seed, s, ratio, piece, k));
}

/// A 16-bit mask (mixed precision's dropout): each value rounded to float32
/// and then to the type, as the CPU backend rounds it.
template <typename S>
__global__ void dropout16Kernel(const S* step, uint16_t* mask, int64_t n, int64_t seed,
                                double ratio, ShardIndex piece, bool bf16) {
  auto s = static_cast<int64_t>(*step);
  for (int64_t k = firstThread(); k < n; k += gridThreads())
    mask[k] = narrow16(static_cast<float>(dropoutMaskValue(seed, s, ratio, piece, k)), bf16);
}

template <typename T, typename L>
__global__ void sgdKernel(const T* w, const T* g, const T* m, const L* lr, T* wOut, T* mOut,
                          int64_t n, double lrScale, SgdHyper h) {
  double rate = static_cast<double>(*lr) * lrScale;
  for (int64_t k = firstThread(); k < n; k += gridThreads()) {
    SgdElement e = sgdElement(w[k], g[k], m[k], rate, h);
    mOut[k] = static_cast<T>(e.m);
    wOut[k] = static_cast<T>(e.w);
  }
}

template <typename T, typename L, typename S>
__global__ void adamKernel(const T* w, const T* g, const T* m, const T* v, const L* lr,
                           const S* step, T* wOut, T* mOut, T* vOut, int64_t n, double lrScale,
                           AdamHyper h) {
  // Bias corrections at t = step + 1, once per block.
  __shared__ AdamCorrection corr;
  if (threadIdx.x == 0)
    corr = adamCorrection(h, static_cast<int64_t>(*step));
  __syncthreads();
  double rate = static_cast<double>(*lr) * lrScale;
  for (int64_t k = firstThread(); k < n; k += gridThreads()) {
    AdamElement e = adamElement(w[k], g[k], m[k], v[k], rate, h, corr);
    mOut[k] = static_cast<T>(e.m);
    vOut[k] = static_cast<T>(e.v);
    wOut[k] = static_cast<T>(e.w);
  }
}

template <typename S, typename T>
__global__ void lrScheduleKernel(const S* step, T* lr, LrScheduleParams p) {
  *lr = static_cast<T>(scheduledLr(p, static_cast<int64_t>(*step)));
}

/// Calls fn(S{}) with S the type of an integer scalar operand.
template <typename Fn> bool dispatchInt(DType t, Fn fn) {
  if (t == DType::I64)
    return fn(int64_t{});
  if (t == DType::I32)
    return fn(int32_t{});
  return false;
}

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

//===--- Reductions -------------------------------------------------------===//

bool reduceMean(const TensorView& x, const TensorView& y, const ReduceParams& p) {
  return reduce("reduceMean", x, y, p, true);
}
bool reduceSum(const TensorView& x, const TensorView& y, const ReduceParams& p) {
  return reduce("reduceSum", x, y, p, false);
}

//===--- Conversion and values --------------------------------------------===//

bool cast(const TensorView& x, const TensorView& y) {
  auto castable = [](DType t) {
    return isNumeric(t) || t == DType::Bool || t == DType::BF16 || t == DType::F16;
  };
  bool types = castable(x.dtype) && castable(y.dtype);
  if (x.shape != y.shape || !types)
    return LWRT_REJECT("cast", "cannot cast " + describe(x) + " to " + describe(y));
  int64_t n = x.numel();
  const bool bf16 = x.dtype == DType::BF16 || y.dtype == DType::BF16;
  if (bf16 || x.dtype == DType::F16 || y.dtype == DType::F16) {
    // bf16 or fp16 to and from float32, and either to itself: they meet no
    // other type in a step (as on the CPU).
    const DType low = bf16 ? DType::BF16 : DType::F16;
    if (n == 0)
      return true;
    cudaStream_t s = context().stream;
    if (x.dtype == DType::F32 && y.dtype == low)
      narrowKernel<<<blocksFor(n), kThreads, 0, s>>>(x.as<const float>(),
                                                     static_cast<uint16_t*>(y.data), n, bf16);
    else if (x.dtype == low && y.dtype == DType::F32)
      widenKernel<<<blocksFor(n), kThreads, 0, s>>>(static_cast<const uint16_t*>(x.data),
                                                    y.as<float>(), n, bf16);
    else if (x.dtype == low && y.dtype == low) {
      // In place (the planner may give y x's bytes) there is nothing to copy:
      // a copy onto itself is undefined for cudaMemcpyAsync.
      if (x.data != y.data)
        LWRT_CUDA(cudaMemcpyAsync(y.data, x.data, static_cast<size_t>(x.bytes()),
                                  cudaMemcpyDeviceToDevice, s));
    } else
      return LWRT_REJECT("cast", "casts bf16 and fp16 to and from F32 only, not " + describe(x) +
                                     " to " + describe(y));
    LWRT_CUDA(cudaGetLastError());
    return true;
  }
  if (n == 0)
    return true;
  bool toBool = y.dtype == DType::Bool;
  return dispatchValue(x.dtype, [&](auto from) {
    using From = decltype(from);
    return dispatchValue(y.dtype, [&](auto to) {
      using To = decltype(to);
      castKernel<<<blocksFor(n), kThreads, 0, context().stream>>>(x.as<const From>(), y.as<To>(), n,
                                                                  toBool);
      LWRT_CUDA(cudaGetLastError());
      return true;
    });
  });
}

/// y[k] = value(k) for k < n: one splat launch when `have` is 1, else the
/// values in chunks carried by the launches' parameters.
template <typename T, typename Value> bool fillWith(T* y, int64_t n, size_t have, Value value) {
  cudaStream_t s = context().stream;
  if (have == 1) {
    splatKernel<<<blocksFor(n), kThreads, 0, s>>>(y, n, value(0));
    LWRT_CUDA(cudaGetLastError());
    return true;
  }
  for (int64_t start = 0; start < n; start += FillChunk<T>::kCount) {
    FillChunk<T> c{};
    int64_t count = std::min(FillChunk<T>::kCount, n - start);
    for (int64_t k = 0; k < count; ++k)
      c.v[k] = value(start + k);
    chunkKernel<<<blocksFor(count), kThreads, 0, s>>>(y + start, count, c);
    LWRT_CUDA(cudaGetLastError());
  }
  return true;
}

bool fill(const TensorView& y, const FillParams& p) {
  int64_t n = y.numel();
  if (y.dtype == DType::BF16 || y.dtype == DType::F16) {
    // Each value rounded to float32 and then to the type, as on the CPU.
    const bool bf16 = y.dtype == DType::BF16;
    if (p.value.size() != 1 && static_cast<int64_t>(p.value.size()) != n)
      return LWRT_REJECT("fill", std::to_string(p.value.size()) + " values for " + describe(y));
    if (n == 0)
      return true;
    return fillWith(static_cast<uint16_t*>(y.data), n, p.value.size(), [&](int64_t k) {
      const float v = static_cast<float>(p.value.size() == 1 ? p.value[0] : p.value[k]);
      return bf16 ? floatToBf16(v) : floatToF16(v);
    });
  }
  if (!isNumeric(y.dtype) && y.dtype != DType::Bool)
    return LWRT_REJECT("fill", "cannot fill " + describe(y));
  return dispatchValue(y.dtype, [&](auto tag) {
    using T = decltype(tag);
    size_t have = std::is_floating_point_v<T> ? p.value.size() : p.ivalue.size();
    if (have != 1 && static_cast<int64_t>(have) != n)
      return LWRT_REJECT("fill", std::to_string(have) + " values for " + describe(y));
    if (n == 0)
      return true;
    return fillWith(y.as<T>(), n, have, [&](int64_t k) { return fillValue<T>(p, k, y.dtype); });
  });
}

//===--- Randomness -------------------------------------------------------===//

bool dropoutMask(const TensorView& step, const TensorView& mask, const DropoutMaskParams& p) {
  ShardIndex piece;
  if (!intScalar(step) || !(p.ratio >= 0 && p.ratio < 1) ||
      !(isFloat(mask.dtype) || is16(mask.dtype)) || !dropoutPiece(mask.shape, p, piece))
    return LWRT_REJECT("dropoutMask", "takes an integer step scalar, a ratio in [0, 1), a float "
                                      "mask and a piece inside the whole mask, not " +
                                          describe(step) + ", " + std::to_string(p.ratio) +
                                          " and " + describe(mask));
  int64_t n = mask.numel();
  if (n == 0)
    return true;
  return dispatchInt(step.dtype, [&](auto stag) {
    using S = decltype(stag);
    if (is16(mask.dtype)) {
      dropout16Kernel<<<blocksFor(n), kThreads, 0, context().stream>>>(
          step.as<const S>(), static_cast<uint16_t*>(mask.data), n, p.seed, p.ratio, piece,
          mask.dtype == DType::BF16);
      LWRT_CUDA(cudaGetLastError());
      return true;
    }
    return dispatchFloat(mask.dtype, [&](auto tag) {
      using T = decltype(tag);
      dropoutKernel<<<blocksFor(n), kThreads, 0, context().stream>>>(
          step.as<const S>(), mask.as<T>(), n, p.seed, p.ratio, piece);
      LWRT_CUDA(cudaGetLastError());
      return true;
    });
  });
}

//===--- Optimizers -------------------------------------------------------===//

bool sgdUpdate(const TensorView& w, const TensorView& g, const TensorView& m, const TensorView& lr,
               const TensorView& wOut, const TensorView& mOut, const SgdParams& p) {
  bool ok = floatScalar(lr) && isFloat(w.dtype);
  for (const TensorView* t : {&g, &m, &wOut, &mOut})
    ok = ok && sameLayout(w, *t);
  if (!ok)
    return LWRT_REJECT("sgdUpdate", "takes w, g, m, w', m' of one float type and shape and a "
                                    "float lr scalar; w is " +
                                        describe(w) + ", lr " + describe(lr));
  int64_t n = w.numel();
  if (n == 0)
    return true;
  return dispatchFloat(lr.dtype, [&](auto ltag) {
    using L = decltype(ltag);
    return dispatchFloat(w.dtype, [&](auto tag) {
      using T = decltype(tag);
      sgdKernel<<<blocksFor(n), kThreads, 0, context().stream>>>(
          w.as<const T>(), g.as<const T>(), m.as<const T>(), lr.as<const L>(), wOut.as<T>(),
          mOut.as<T>(), n, p.lr_scale, SgdHyper{p.momentum, p.weight_decay, p.nesterov != 0});
      LWRT_CUDA(cudaGetLastError());
      return true;
    });
  });
}

bool adamUpdate(const TensorView& w, const TensorView& g, const TensorView& m, const TensorView& v,
                const TensorView& lr, const TensorView& step, const TensorView& wOut,
                const TensorView& mOut, const TensorView& vOut, const AdamParams& p) {
  bool ok = floatScalar(lr) && intScalar(step) && isFloat(w.dtype);
  for (const TensorView* t : {&g, &m, &v, &wOut, &mOut, &vOut})
    ok = ok && sameLayout(w, *t);
  if (!ok)
    return LWRT_REJECT("adamUpdate", "takes w, g, m, v, w', m', v' of one float type and shape, a "
                                     "float lr scalar and an integer step scalar; w is " +
                                         describe(w) + ", lr " + describe(lr) + ", step " +
                                         describe(step));
  int64_t n = w.numel();
  if (n == 0)
    return true;
  return dispatchInt(step.dtype, [&](auto stag) {
    using S = decltype(stag);
    return dispatchFloat(lr.dtype, [&](auto ltag) {
      using L = decltype(ltag);
      return dispatchFloat(w.dtype, [&](auto tag) {
        using T = decltype(tag);
        adamKernel<<<blocksFor(n), kThreads, 0, context().stream>>>(
            w.as<const T>(), g.as<const T>(), m.as<const T>(), v.as<const T>(), lr.as<const L>(),
            step.as<const S>(), wOut.as<T>(), mOut.as<T>(), vOut.as<T>(), n, p.lr_scale,
            AdamHyper{p.beta1, p.beta2, p.epsilon, p.weight_decay, p.decoupled != 0});
        LWRT_CUDA(cudaGetLastError());
        return true;
      });
    });
  });
}

bool lrSchedule(const TensorView& step, const TensorView& lr, const LrScheduleParams& p) {
  if (!intScalar(step) || lr.numel() != 1 || !isFloat(lr.dtype))
    return LWRT_REJECT("lrSchedule", "takes an integer step scalar and a float lr scalar, not " +
                                         describe(step) + " and " + describe(lr));
  if (p.kind == LrScheduleKind::Step && p.step_size < 1)
    return LWRT_REJECT("lrSchedule", "step_size " + std::to_string(p.step_size) + " < 1");
  return dispatchInt(step.dtype, [&](auto stag) {
    using S = decltype(stag);
    return dispatchFloat(lr.dtype, [&](auto tag) {
      using T = decltype(tag);
      lrScheduleKernel<<<1, 1, 0, context().stream>>>(step.as<const S>(), lr.as<T>(), p);
      LWRT_CUDA(cudaGetLastError());
      return true;
    });
  });
}

/// Clears *finite where an element of x is infinite or NaN: its exponent
/// bits (`mask`, in units of `U`, the type's width) all ones.
template <typename U>
__global__ void nonFiniteKernel(const U* x, int64_t n, U mask, uint8_t* finite) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if ((x[k] & mask) == mask)
      *finite = 0; // every writer stores the same byte
}

bool allFinite(const std::vector<TensorView>& xs, const TensorView& y, const AllFiniteParams&) {
  if (y.dtype != DType::Bool || y.numel() != 1)
    return LWRT_REJECT("allFinite", "writes a bool scalar, not " + describe(y));
  cudaStream_t s = context().stream;
  LWRT_CUDA(cudaMemsetAsync(y.data, 1, 1, s));
  auto* finite = static_cast<uint8_t*>(y.data);
  for (const TensorView& x : xs) {
    const int64_t n = x.numel();
    if (n == 0)
      continue;
    switch (x.dtype) {
    case DType::F32:
      nonFiniteKernel<<<blocksFor(n), kThreads, 0, s>>>(x.as<const uint32_t>(), n,
                                                        uint32_t{0x7f800000u}, finite);
      break;
    case DType::F64:
      nonFiniteKernel<<<blocksFor(n), kThreads, 0, s>>>(x.as<const uint64_t>(), n,
                                                        uint64_t{0x7ff0000000000000ull}, finite);
      break;
    case DType::F16:
    case DType::BF16:
      nonFiniteKernel<<<blocksFor(n), kThreads, 0, s>>>(
          static_cast<const uint16_t*>(x.data), n,
          static_cast<uint16_t>(x.dtype == DType::F16 ? 0x7c00u : 0x7f80u), finite);
      break;
    default:
      return LWRT_REJECT("allFinite", "takes float tensors, not " + describe(x));
    }
    LWRT_CUDA(cudaGetLastError());
  }
  return true;
}

} // namespace lwrt::cuda
