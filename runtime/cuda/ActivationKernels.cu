//===- ActivationKernels.cu - Activations, prelu and max/min on the GPU ---===//
//
// The kernels of lwrt/cuda_activation.h: grid-stride loops calling the one
// definition of each op's math in lwrt/activation_math.h (the interpreter
// and the CPU kernels call it too), in double, rounded once to the element
// type. Thread k reads element k of its operands before writing element k
// of its results, so a result may alias an operand of its shape. The
// host-side checks are the CPU backend's (runtime/cpu/ActivationKernels.cpp).
//
//===----------------------------------------------------------------------===//
#include "cuda/KernelSupport.cuh"
#include "lwrt/cuda_activation.h"
#include "lwrt/kernel_checks.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace lwrt::cuda {

namespace {

__device__ int64_t firstThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ int64_t gridThreads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

std::string reason(const char* op, const char* what) { return std::string(op) + ": " + what; }

template <typename M, typename T>
__global__ void forwardKernel(const T* x, T* y, int64_t n, ActivationParams p) {
  for (int64_t k = firstThread(); k < n; k += gridThreads())
    y[k] = static_cast<T>(M::forward(static_cast<double>(x[k]), p));
}

template <typename M, typename T>
__global__ void backwardKernel(const T* x, const T* dy, T* dx, int64_t n, ActivationParams p) {
  for (int64_t k = firstThread(); k < n; k += gridThreads())
    dx[k] = static_cast<T>(M::backward(static_cast<double>(x[k]), static_cast<double>(dy[k]), p));
}

template <typename M>
bool forward(const char* op, const TensorView& x, const TensorView& y, const ActivationParams& p) {
  if (!sameLayout(x, y) || !dispatchFloat(x.dtype, [](auto) { return true; }))
    return LWRT_REJECT(reason(op, "takes x and y of one float type and shape"));
  int64_t n = x.numel();
  if (n == 0)
    return true;
  return dispatchFloat(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    auto kernel = forwardKernel<M, T>;
    LWRT_LAUNCH(kernel, blocksFor(n), kThreads, x.as<const T>(), y.as<T>(), n, p);
    return true;
  });
}

template <typename M>
bool backward(const char* op, const TensorView& x, const TensorView& dy, const TensorView& dx,
              const ActivationParams& p) {
  if (!sameLayout(x, dy) || !sameLayout(x, dx) ||
      !dispatchFloat(x.dtype, [](auto) { return true; }))
    return LWRT_REJECT(reason(op, "takes x, dy and dx of one float type and shape"));
  int64_t n = x.numel();
  if (n == 0)
    return true;
  return dispatchFloat(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    auto kernel = backwardKernel<M, T>;
    LWRT_LAUNCH(kernel, blocksFor(n), kThreads, x.as<const T>(), dy.as<const T>(), dx.as<T>(), n,
                p);
    return true;
  });
}

template <typename T>
__global__ void preluKernel(const T* x, const T* slope, T* y, int64_t n, BroadcastIndex is) {
  for (int64_t k = firstThread(); k < n; k += gridThreads())
    y[k] = static_cast<T>(preluValue(x[k], slope[is(k)]));
}

template <typename T>
__global__ void preluGradKernel(const T* x, const T* slope, const T* dy, T* dx, T* dslope,
                                int64_t n, BroadcastIndex is) {
  for (int64_t k = firstThread(); k < n; k += gridThreads()) {
    double v = x[k], d = dy[k];
    double s = slope[is(k)];
    dx[k] = static_cast<T>(preluGradX(v, s, d));
    dslope[k] = static_cast<T>(preluGradSlope(v, d));
  }
}

template <typename T>
__global__ void extremumKernel(const T* a, const T* b, T* y, int64_t n, BroadcastIndex ia,
                               BroadcastIndex ib, bool isMin) {
  for (int64_t k = firstThread(); k < n; k += gridThreads()) {
    T va = a[ia(k)], vb = b[ib(k)];
    if constexpr (std::is_floating_point_v<T>)
      y[k] = static_cast<T>(extremumValue(va, vb, isMin));
    else
      y[k] = isMin ? (va < vb ? va : vb) : (va > vb ? va : vb);
  }
}

template <typename T>
__global__ void extremumGradKernel(const T* a, const T* b, const T* dy, T* da, T* db, int64_t n,
                                   BroadcastIndex ia, BroadcastIndex ib, bool isMin) {
  for (int64_t k = firstThread(); k < n; k += gridThreads()) {
    double va = a[ia(k)], vb = b[ib(k)], d = dy[k];
    da[k] = static_cast<T>(d * extremumGradWeight(va, vb, isMin));
    db[k] = static_cast<T>(d * extremumGradWeight(vb, va, isMin));
  }
}

bool extremum(const char* op, const TensorView& a, const TensorView& b, const TensorView& y,
              bool isMin) {
  std::vector<int64_t> shape;
  BroadcastIndex ia, ib;
  if (a.dtype != b.dtype || a.dtype != y.dtype || !broadcastShape(a, b, shape) ||
      shape != y.shape || !broadcastIndexOf(y, a, ia) || !broadcastIndexOf(y, b, ib))
    return LWRT_REJECT(reason(op, "takes a and b of one type that broadcast to y"));
  int64_t n = y.numel();
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if (n > 0)
      LWRT_LAUNCH(extremumKernel<T>, blocksFor(n), kThreads, a.as<const T>(), b.as<const T>(),
                  y.as<T>(), n, ia, ib, isMin);
    return true;
  };
  switch (a.dtype) {
  case DType::I64:
    return run(int64_t{});
  case DType::I32:
    return run(int32_t{});
  case DType::F32:
  case DType::F64:
    return dispatchFloat(a.dtype, run);
  default:
    return LWRT_REJECT(reason(op, "takes F32, F64, I64 or I32"));
  }
}

bool extremumGrad(const char* op, const TensorView& a, const TensorView& b, const TensorView& dy,
                  const TensorView& da, const TensorView& db, bool isMin) {
  BroadcastIndex ia, ib;
  if (a.dtype != dy.dtype || b.dtype != dy.dtype || !sameLayout(dy, da) || !sameLayout(dy, db) ||
      !broadcastIndexOf(dy, a, ia) || !broadcastIndexOf(dy, b, ib) ||
      !dispatchFloat(dy.dtype, [](auto) { return true; }))
    return LWRT_REJECT(
        reason(op, "takes a and b that broadcast to dy, da and db of one float type"));
  int64_t n = dy.numel();
  if (n == 0)
    return true;
  return dispatchFloat(dy.dtype, [&](auto tag) {
    using T = decltype(tag);
    LWRT_LAUNCH(extremumGradKernel<T>, blocksFor(n), kThreads, a.as<const T>(), b.as<const T>(),
                dy.as<const T>(), da.as<T>(), db.as<T>(), n, ia, ib, isMin);
    return true;
  });
}

template <typename T>
__global__ void compareKernel(const T* a, const T* b, uint8_t* y, int64_t n, BroadcastIndex ia,
                              BroadcastIndex ib, CompareKind kind) {
  for (int64_t k = firstThread(); k < n; k += gridThreads())
    y[k] = compareValue(a[ia(k)], b[ib(k)], kind) ? 1 : 0;
}

template <typename T>
__global__ void whereKernel(const uint8_t* c, const T* x, const T* y, T* out, int64_t n,
                            BroadcastIndex ic, BroadcastIndex ix, BroadcastIndex iy) {
  for (int64_t k = firstThread(); k < n; k += gridThreads())
    out[k] = c[ic(k)] ? x[ix(k)] : y[iy(k)];
}

} // namespace

#define LWRT_DEFINE_ACTIVATION(E, fn)                                                              \
  bool fn(const TensorView& x, const TensorView& y, const ActivationParams& p) {                   \
    return forward<E##Math>(#fn, x, y, p);                                                         \
  }                                                                                                \
  bool fn##Grad(const TensorView& x, const TensorView& dy, const TensorView& dx,                   \
                const ActivationParams& p) {                                                       \
    return backward<E##Math>(#fn "Grad", x, dy, dx, p);                                            \
  }
LWRT_ACTIVATIONS(LWRT_DEFINE_ACTIVATION)
#undef LWRT_DEFINE_ACTIVATION

bool prelu(const TensorView& x, const TensorView& slope, const TensorView& y) {
  BroadcastIndex is;
  if (!sameLayout(x, y) || slope.dtype != x.dtype || !broadcastIndexOf(x, slope, is) ||
      !dispatchFloat(x.dtype, [](auto) { return true; }))
    return LWRT_REJECT(
        "prelu: takes a float x and y of one shape and a slope that broadcasts to x");
  int64_t n = x.numel();
  if (n == 0)
    return true;
  return dispatchFloat(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    LWRT_LAUNCH(preluKernel<T>, blocksFor(n), kThreads, x.as<const T>(), slope.as<const T>(),
                y.as<T>(), n, is);
    return true;
  });
}

bool preluGrad(const TensorView& x, const TensorView& slope, const TensorView& dy,
               const TensorView& dx, const TensorView& dslope) {
  BroadcastIndex is;
  if (!sameLayout(x, dy) || !sameLayout(x, dx) || !sameLayout(x, dslope) ||
      slope.dtype != x.dtype || !broadcastIndexOf(x, slope, is) ||
      !dispatchFloat(x.dtype, [](auto) { return true; }))
    return LWRT_REJECT("preluGrad: takes x, dy, dx and dslope of one float type and shape and a "
                       "slope that broadcasts to x");
  int64_t n = x.numel();
  if (n == 0)
    return true;
  return dispatchFloat(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    LWRT_LAUNCH(preluGradKernel<T>, blocksFor(n), kThreads, x.as<const T>(), slope.as<const T>(),
                dy.as<const T>(), dx.as<T>(), dslope.as<T>(), n, is);
    return true;
  });
}

bool compare(const TensorView& a, const TensorView& b, const TensorView& y,
             const CompareParams& p) {
  std::vector<int64_t> shape;
  BroadcastIndex ia, ib;
  if (a.dtype != b.dtype || y.dtype != DType::Bool || !broadcastShape(a, b, shape) ||
      shape != y.shape || !broadcastIndexOf(y, a, ia) || !broadcastIndexOf(y, b, ib) ||
      !compareTakes(p.kind, a.dtype == DType::Bool) ||
      !dispatchValue(a.dtype, [](auto) { return true; }))
    return LWRT_REJECT("compare: takes a and b of one type that broadcast to a bool y (bool for "
                       "equal, and, or, xor only)");
  int64_t n = y.numel();
  if (n == 0)
    return true;
  return dispatchValue(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    LWRT_LAUNCH(compareKernel<T>, blocksFor(n), kThreads, a.as<const T>(), b.as<const T>(),
                y.as<uint8_t>(), n, ia, ib, p.kind);
    return true;
  });
}

bool where(const TensorView& condition, const TensorView& x, const TensorView& y,
           const TensorView& out) {
  std::vector<int64_t> xy, shape;
  BroadcastIndex ic, ix, iy;
  bool fits = condition.dtype == DType::Bool && x.dtype == y.dtype && out.dtype == x.dtype &&
              broadcastShape(x, y, xy) &&
              broadcastShape(condition, TensorView{nullptr, x.dtype, xy}, shape) &&
              shape == out.shape && broadcastIndexOf(out, condition, ic) &&
              broadcastIndexOf(out, x, ix) && broadcastIndexOf(out, y, iy) &&
              dispatchValue(x.dtype, [](auto) { return true; });
  if (!fits)
    return LWRT_REJECT("where: takes a bool condition and x and y of one type that broadcast to "
                       "the result");
  int64_t n = out.numel();
  if (n == 0)
    return true;
  return dispatchValue(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    LWRT_LAUNCH(whereKernel<T>, blocksFor(n), kThreads, condition.as<const uint8_t>(),
                x.as<const T>(), y.as<const T>(), out.as<T>(), n, ic, ix, iy);
    return true;
  });
}

bool maximum(const TensorView& a, const TensorView& b, const TensorView& y) {
  return extremum("maximum", a, b, y, false);
}
bool minimum(const TensorView& a, const TensorView& b, const TensorView& y) {
  return extremum("minimum", a, b, y, true);
}
bool maximumGrad(const TensorView& a, const TensorView& b, const TensorView& dy,
                 const TensorView& da, const TensorView& db) {
  return extremumGrad("maximumGrad", a, b, dy, da, db, false);
}
bool minimumGrad(const TensorView& a, const TensorView& b, const TensorView& dy,
                 const TensorView& da, const TensorView& db) {
  return extremumGrad("minimumGrad", a, b, dy, da, db, true);
}

} // namespace lwrt::cuda
