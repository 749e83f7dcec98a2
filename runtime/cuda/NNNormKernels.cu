// NNNormKernels.cu - normalization, softmax and loss kernels of lwrt/cuda_nn.h
//
// LRN, batch norm and softmax run on cuDNN where it covers the op
// (CudnnOps.cu; not with --kernels=own). Otherwise, and for the losses,
// this file's own kernels follow the formulas (and, where it matters, the
// summation order) of the CPU backend (cpu/NNNormKernels.cpp): sums over
// many elements are kept in double. Reductions are block reductions in a
// fixed order, never float atomics, so results are the same from run to
// run:
//  - batch_norm_train and batch_norm_grad: a block per slice of whole planes
//    of a channel (about 16K elements, the split fixed by the shape), the
//    slices' partial sums in the workspace, added in slice order by each
//    block of the next pass: three passes over x forward, two backward.
//  - softmax family along the last axis: one block per row; along another
//    axis: one thread per row (rows of stride `inner` are then coalesced).
//  - losses: per-row (softmax_xent) or per-block (mse_loss) partial sums in
//    the workspace, added up by a single block.
// LRN recomputes each channel window's sum of squares where it needs it
// (size is small), so it needs no scratch memory.
#include "cuda/Context.h"
#include "cuda/CudnnOps.h"
#include "cuda/KernelSupport.cuh"
#include "lwrt/cuda_nn.h"
#include "lwrt/loss_math.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>

namespace lwrt::cuda {
namespace {

bool isVector(const TensorView& v, int64_t n) { return v.shape == std::vector<int64_t>{n}; }
bool isScalar(const TensorView& v) { return v.rank() == 0; }

// Math in the element type, as the CPU's std:: overloads do.
__device__ __forceinline__ float mpow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double mpow(double a, double b) { return pow(a, b); }
__device__ __forceinline__ float msqrt(float v) { return sqrtf(v); }
__device__ __forceinline__ double msqrt(double v) { return sqrt(v); }

template <typename T> __device__ __forceinline__ T negInf() { return static_cast<T>(-INFINITY); }

/// The max of v over the block, comparing as the CPU's std::max (a value
/// that is not greater, NaN included, keeps the running max); `shared` as
/// for blockSum.
__device__ double blockMax(double v, double* shared) {
  unsigned t = threadIdx.x;
  shared[t] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s && shared[t] < shared[t + s])
      shared[t] = shared[t + s];
    __syncthreads();
  }
  double r = shared[0];
  __syncthreads();
  return r;
}

/// Threads for a block that reduces rows of n elements.
unsigned rowThreads(int64_t n) { return n >= 1024 ? kReduceThreads : n >= 128 ? 128 : 32; }
/// Blocks for `rows` block-per-row items (the kernels loop over the rest).
unsigned rowBlocks(int64_t rows) { return static_cast<unsigned>(std::min<int64_t>(rows, 1 << 20)); }

//===--- LRN --------------------------------------------------------------===//

struct LrnGeom {
  int64_t C, hw, lo, hi;
};

/// bias + alpha/size * the sum of squares over channel ch's window, at
/// position q of image n, summed as the CPU does.
template <typename T>
__device__ T lrnScale(const T* x, const LrnGeom& g, int64_t n, int64_t ch, int64_t q, T scale,
                      T bias) {
  T acc = T(0);
  int64_t j0 = max(int64_t(0), ch - g.lo), j1 = min(g.C - 1, ch + g.hi);
  for (int64_t j = j0; j <= j1; ++j) {
    T v = x[(n * g.C + j) * g.hw + q];
    acc += v * v;
  }
  return bias + scale * acc;
}

/// On a planeGrid(N * C, H * W): the plane's image and channel once per
/// block row, positions q within it.
template <typename T>
__global__ void lrnForward(const T* x, T* y, LrnGeom g, T scale, T bias, T beta, unsigned planes) {
  for (unsigned plane = blockIdx.y; plane < planes; plane += gridDim.y) {
    const int64_t n = plane / g.C, ch = plane % g.C;
    for (unsigned q = blockIdx.x * blockDim.x + threadIdx.x; q < g.hw;
         q += gridDim.x * blockDim.x) {
      const int64_t i = static_cast<int64_t>(plane) * g.hw + q;
      y[i] = x[i] / mpow(lrnScale(x, g, n, ch, q, scale, bias), beta);
    }
  }
}

/// dx_j = dy_j s_j^-beta - 2 alpha beta / size * x_j * sum over the channels
/// c whose window holds j of dy_c y_c / s_c (a planeGrid as lrnForward).
template <typename T>
__global__ void lrnBackward(const T* x, const T* y, const T* dy, T* dx, LrnGeom g, T scale, T bias,
                            T beta, T coef, unsigned planes) {
  for (unsigned plane = blockIdx.y; plane < planes; plane += gridDim.y) {
    const int64_t n = plane / g.C, j = plane % g.C;
    const int64_t c0 = max(int64_t(0), j - g.hi), c1 = min(g.C - 1, j + g.lo);
    for (unsigned q = blockIdx.x * blockDim.x + threadIdx.x; q < g.hw;
         q += gridDim.x * blockDim.x) {
      const int64_t i = static_cast<int64_t>(plane) * g.hw + q;
      T acc = T(0);
      for (int64_t ch = c0; ch <= c1; ++ch) {
        int64_t k = (n * g.C + ch) * g.hw + q;
        acc += dy[k] * y[k] / lrnScale(x, g, n, ch, q, scale, bias);
      }
      T s = lrnScale(x, g, n, j, q, scale, bias);
      dx[i] = dy[i] * mpow(s, -beta) - coef * x[i] * acc;
    }
  }
}

LrnGeom lrnGeom(const TensorView& x, const LrnParams& p) {
  int64_t lo = (p.size - 1) / 2;
  return {x.shape[1], x.shape[2] * x.shape[3], lo, p.size - 1 - lo};
}

template <typename T> bool lrnImpl(const TensorView& xv, const TensorView& yv, const LrnParams& p) {
  if (xv.rank() != 4 || yv.shape != xv.shape || p.size < 1)
    return LWRT_REJECT("lrn: x must be NCHW, y of x's shape, and size at least 1");
  if (xv.numel() == 0)
    return true;
  if (CudnnRun r = cudnnLrn(xv, yv, p); r != CudnnRun::NotCovered)
    return r == CudnnRun::Ran;
  const int64_t planes = xv.shape[0] * xv.shape[1], hw = xv.shape[2] * xv.shape[3];
  if (!fitsInt({planes, hw}))
    return LWRT_REJECT("lrn: more than 2^31 planes or plane elements");
  T scale = static_cast<T>(p.alpha / static_cast<double>(p.size)), bias = static_cast<T>(p.bias);
  PlaneGrid pg = planeGrid(planes, hw);
  lrnForward<T><<<pg.grid, pg.block, 0, context().stream>>>(xv.as<T>(), yv.as<T>(), lrnGeom(xv, p),
                                                            scale, bias, static_cast<T>(p.beta),
                                                            static_cast<unsigned>(planes));
  LWRT_CUDA(cudaGetLastError());
  return true;
}

template <typename T>
bool lrnGradImpl(const TensorView& xv, const TensorView& yv, const TensorView& dyv,
                 const TensorView& dxv, const LrnParams& p) {
  if (xv.rank() != 4 || yv.shape != xv.shape || dyv.shape != xv.shape || dxv.shape != xv.shape ||
      p.size < 1)
    return LWRT_REJECT("lrn_grad: x must be NCHW, y, dy and dx of x's shape, size at least 1");
  if (xv.numel() == 0)
    return true;
  if (CudnnRun r = cudnnLrnGrad(xv, yv, dyv, dxv, p); r != CudnnRun::NotCovered)
    return r == CudnnRun::Ran;
  const int64_t planes = xv.shape[0] * xv.shape[1], hw = xv.shape[2] * xv.shape[3];
  if (!fitsInt({planes, hw}))
    return LWRT_REJECT("lrn_grad: more than 2^31 planes or plane elements");
  T scale = static_cast<T>(p.alpha / static_cast<double>(p.size)), bias = static_cast<T>(p.bias);
  T coef = static_cast<T>(2.0 * p.alpha * p.beta / static_cast<double>(p.size));
  PlaneGrid pg = planeGrid(planes, hw);
  lrnBackward<T><<<pg.grid, pg.block, 0, context().stream>>>(
      xv.as<T>(), yv.as<T>(), dyv.as<T>(), dxv.as<T>(), lrnGeom(xv, p), scale, bias,
      static_cast<T>(p.beta), coef, static_cast<unsigned>(planes));
  LWRT_CUDA(cudaGetLastError());
  return true;
}

//===--- Batch norm -------------------------------------------------------===//

/// Channel layout of an [N, C, ...] tensor: element k is in channel
/// (k / inner) % C; N * inner elements per channel.
struct Channels {
  int64_t N = 0, C = 0, inner = 0;
};
bool channels(const TensorView& x, Channels& L) {
  if (x.rank() < 2)
    return false;
  L.N = x.shape[0];
  L.C = x.shape[1];
  L.inner = 1;
  for (int64_t d = 2; d < x.rank(); ++d)
    L.inner *= x.shape[d];
  return true;
}

// The batch norm kernels take E, an Elem tag: x, y, dy and dx are
// StoreOf<E> (16 bits for bf16 and fp16, read as float32 and rounded once
// when written), scale, bias and the statistics ParamOf<E> (float32 then).

/// A stored element as a double, and a double rounded to E's value type
/// (float32 for the 16-bit types) and stored.
template <typename E> __device__ double loadD(StoreOf<E> v) {
  return static_cast<double>(Elem<E>::load(v));
}
template <typename E> __device__ StoreOf<E> storeD(double v) {
  return Elem<E>::store(static_cast<typename Elem<E>::Value>(v));
}

/// On a planeGrid(N * C, inner): the plane's channel once per block row.
template <typename E, typename P = ParamOf<E>>
__global__ void batchNormInference(const StoreOf<E>* x, const P* scale, const P* bias,
                                   const P* mean, const P* var, StoreOf<E>* y, unsigned C,
                                   unsigned inner, unsigned planes, P eps) {
  for (unsigned plane = blockIdx.y; plane < planes; plane += gridDim.y) {
    const unsigned ch = plane % C;
    const P a = scale[ch] / msqrt(var[ch] + eps), m = mean[ch], b = bias[ch];
    for (unsigned q = blockIdx.x * blockDim.x + threadIdx.x; q < inner;
         q += gridDim.x * blockDim.x) {
      const size_t i = static_cast<size_t>(plane) * inner + q;
      y[i] = Elem<E>::store(a * (static_cast<P>(Elem<E>::load(x[i])) - m) + b);
    }
  }
}

/// Threads of the per-channel kernels (a power of two).
constexpr int kChannelThreads = 512;
/// About this many elements of a channel per block.
constexpr int64_t kSliceElements = 16384;

/// A channel's N planes of `inner` elements in slices of `perSlice` whole
/// planes, one block each: blockIdx.x the channel, blockIdx.y the slice (at
/// most 65535). The split depends on the shape only, so the sums are the
/// same in every run.
struct ChannelSlices {
  int64_t perSlice = 1;
  unsigned count = 1;
};
ChannelSlices channelSlices(const Channels& L) {
  ChannelSlices s;
  s.perSlice = L.inner > 0 ? std::max<int64_t>(1, kSliceElements / L.inner) : L.N;
  s.perSlice = std::max<int64_t>({s.perSlice, (L.N + 65534) / 65535, 1});
  s.count = static_cast<unsigned>(std::max<int64_t>(1, (L.N + s.perSlice - 1) / s.perSlice));
  return s;
}

/// Calls fn(e) for every element e of this block's slice of its channel,
/// spread over the block's threads: along the planes when they are long,
/// else over the flat (n, position) index.
template <typename Fn> __device__ void forEachInSlice(const Channels& L, int64_t perSlice, Fn fn) {
  const int64_t ch = blockIdx.x, n0 = static_cast<int64_t>(blockIdx.y) * perSlice,
                n1 = min(L.N, n0 + perSlice);
  if (L.inner >= static_cast<int64_t>(blockDim.x)) {
    for (int64_t n = n0; n < n1; ++n) {
      int64_t base = (n * L.C + ch) * L.inner;
      for (int64_t q = threadIdx.x; q < L.inner; q += blockDim.x)
        fn(base + q);
    }
  } else if (n1 > n0) {
    int64_t count = (n1 - n0) * L.inner;
    for (int64_t k = threadIdx.x; k < count; k += blockDim.x)
      fn(((n0 + k / L.inner) * L.C + ch) * L.inner + k % L.inner);
  }
}

/// The sum of this channel's slice partials (`parts` holds `slices` per
/// channel), added in slice order.
__device__ double channelTotal(const double* parts, unsigned slices) {
  double t = 0;
  for (unsigned k = 0; k < slices; ++k)
    t += parts[static_cast<int64_t>(blockIdx.x) * slices + k];
  return t;
}

/// Batch norm's training forward in three passes over x, each a block per
/// slice of a channel (ChannelSlices), its sums in double: the slices' sums,
/// then (the mean from them) their squared deviations, then (the population
/// variance from those) y; slice 0 writes the channel's mean and variance.
template <typename E>
__global__ void bnSliceSums(const StoreOf<E>* x, double* sums, Channels L, int64_t perSlice) {
  __shared__ double shared[kChannelThreads];
  double sum = 0;
  forEachInSlice(L, perSlice, [&](int64_t e) { sum += loadD<E>(x[e]); });
  sum = blockSum(sum, shared);
  if (threadIdx.x == 0)
    sums[static_cast<int64_t>(blockIdx.x) * gridDim.y + blockIdx.y] = sum;
}

template <typename E>
__global__ void bnSliceSquares(const StoreOf<E>* x, const double* sums, double* squares, Channels L,
                               int64_t perSlice) {
  __shared__ double shared[kChannelThreads];
  const double mean = channelTotal(sums, gridDim.y) / static_cast<double>(L.N * L.inner);
  double sq = 0;
  forEachInSlice(L, perSlice, [&](int64_t e) {
    double d = loadD<E>(x[e]) - mean;
    sq += d * d;
  });
  sq = blockSum(sq, shared);
  if (threadIdx.x == 0)
    squares[static_cast<int64_t>(blockIdx.x) * gridDim.y + blockIdx.y] = sq;
}

template <typename E, typename P = ParamOf<E>>
__global__ void bnSliceNormalize(const StoreOf<E>* x, const P* scale, const P* bias, StoreOf<E>* y,
                                 P* meanOut, P* varOut, const double* sums, const double* squares,
                                 Channels L, int64_t perSlice, double eps) {
  const int64_t ch = blockIdx.x;
  const double count = static_cast<double>(L.N * L.inner);
  const double mean = channelTotal(sums, gridDim.y) / count,
               var = channelTotal(squares, gridDim.y) / count;
  const double a = static_cast<double>(scale[ch]) / sqrt(var + eps),
               b = static_cast<double>(bias[ch]);
  forEachInSlice(L, perSlice,
                 [&](int64_t e) { y[e] = storeD<E>(a * (loadD<E>(x[e]) - mean) + b); });
  if (blockIdx.y == 0 && threadIdx.x == 0) {
    meanOut[ch] = static_cast<P>(mean);
    varOut[ch] = static_cast<P>(var);
  }
}

/// Batch norm's backward in two passes, a block per slice of a channel:
/// the slices' sums of dy and of dy xhat (xhat = (x - mean) invstd), then
/// dbias = sum dy, dscale = sum dy xhat and dx = scale invstd / m (m dy -
/// dbias - xhat dscale); slice 0 writes dscale and dbias.
template <typename E, typename P = ParamOf<E>>
__global__ void bnGradSliceSums(const StoreOf<E>* x, const P* meanIn, const P* varIn,
                                const StoreOf<E>* dy, double* dySums, double* dyXhatSums,
                                Channels L, int64_t perSlice, double eps) {
  __shared__ double shared[kChannelThreads];
  const int64_t ch = blockIdx.x;
  const double mean = static_cast<double>(meanIn[ch]);
  const double invstd = 1.0 / sqrt(static_cast<double>(varIn[ch]) + eps);
  double db = 0, ds = 0;
  forEachInSlice(L, perSlice, [&](int64_t e) {
    double g = loadD<E>(dy[e]);
    db += g;
    ds += g * (loadD<E>(x[e]) - mean) * invstd;
  });
  db = blockSum(db, shared);
  ds = blockSum(ds, shared);
  if (threadIdx.x == 0) {
    dySums[ch * gridDim.y + blockIdx.y] = db;
    dyXhatSums[ch * gridDim.y + blockIdx.y] = ds;
  }
}

template <typename E, typename P = ParamOf<E>>
__global__ void bnGradSliceInput(const StoreOf<E>* x, const P* scale, const P* meanIn,
                                 const P* varIn, const StoreOf<E>* dy, StoreOf<E>* dx, P* dscaleOut,
                                 P* dbiasOut, const double* dySums, const double* dyXhatSums,
                                 Channels L, int64_t perSlice, double eps) {
  const int64_t ch = blockIdx.x;
  const double mean = static_cast<double>(meanIn[ch]);
  const double invstd = 1.0 / sqrt(static_cast<double>(varIn[ch]) + eps);
  const double dbias = channelTotal(dySums, gridDim.y),
               dscale = channelTotal(dyXhatSums, gridDim.y);
  const double m = static_cast<double>(L.N * L.inner),
               a = static_cast<double>(scale[ch]) * invstd / m;
  forEachInSlice(L, perSlice, [&](int64_t e) {
    double xhat = (loadD<E>(x[e]) - mean) * invstd;
    dx[e] = storeD<E>(a * (m * loadD<E>(dy[e]) - dbias - xhat * dscale));
  });
  if (blockIdx.y == 0 && threadIdx.x == 0) {
    dscaleOut[ch] = static_cast<P>(dscale);
    dbiasOut[ch] = static_cast<P>(dbias);
  }
}

template <typename T>
bool batchNormImpl(const TensorView& xv, const TensorView& sv, const TensorView& bv,
                   const TensorView& mv, const TensorView& vv, const TensorView& yv,
                   const BatchNormParams& p) {
  Channels L;
  bool ok = channels(xv, L) && yv.shape == xv.shape;
  for (const TensorView* v : {&sv, &bv, &mv, &vv})
    ok = ok && isVector(*v, L.C);
  if (!ok)
    return LWRT_REJECT("batch_norm: x must be [N, C, ...], y of x's shape, the others [C]");
  if (xv.numel() == 0)
    return true;
  if constexpr (std::is_floating_point_v<T>)
    if (CudnnRun r = cudnnBatchNorm(xv, sv, bv, mv, vv, yv, p.epsilon); r != CudnnRun::NotCovered)
      return r == CudnnRun::Ran;
  using P = ParamOf<T>;
  const int64_t planes = L.N * L.C;
  if (!fitsInt({planes, L.inner}))
    return LWRT_REJECT("batch_norm: more than 2^31 planes or plane elements");
  PlaneGrid pg = planeGrid(planes, L.inner);
  batchNormInference<T><<<pg.grid, pg.block, 0, context().stream>>>(
      xv.as<StoreOf<T>>(), sv.as<P>(), bv.as<P>(), mv.as<P>(), vv.as<P>(), yv.as<StoreOf<T>>(),
      static_cast<unsigned>(L.C), static_cast<unsigned>(L.inner), static_cast<unsigned>(planes),
      static_cast<P>(p.epsilon));
  LWRT_CUDA(cudaGetLastError());
  return true;
}

template <typename T>
bool batchNormTrainImpl(const TensorView& xv, const TensorView& sv, const TensorView& bv,
                        const TensorView& yv, const TensorView& mv, const TensorView& vv,
                        const BatchNormTrainParams& p) {
  Channels L;
  bool ok = channels(xv, L) && yv.shape == xv.shape;
  for (const TensorView* v : {&sv, &bv, &mv, &vv})
    ok = ok && isVector(*v, L.C);
  if (!ok)
    return LWRT_REJECT("batch_norm_train: x must be [N, C, ...], y of x's shape, the others [C]");
  if (L.C == 0)
    return true;
  if constexpr (std::is_floating_point_v<T>)
    if (xv.numel() > 0) {
      CudnnRun r = cudnnBatchNormTrain(xv, sv, bv, yv, mv, vv, p.epsilon);
      if (r != CudnnRun::NotCovered)
        return r == CudnnRun::Ran;
    }
  if (L.C > INT_MAX)
    return LWRT_REJECT("batch_norm_train: more than 2^31 channels");
  using P = ParamOf<T>;
  const ChannelSlices sl = channelSlices(L);
  const size_t parts = static_cast<size_t>(L.C) * sl.count;
  if (!ensureWorkspace(2 * parts * sizeof(double)))
    return false;
  double* sums = static_cast<double*>(context().workspace);
  double* squares = sums + parts;
  const dim3 grid(static_cast<unsigned>(L.C), sl.count);
  const StoreOf<T>* x = xv.as<StoreOf<T>>();
  LWRT_LAUNCH(bnSliceSums<T>, grid, kChannelThreads, x, sums, L, sl.perSlice);
  LWRT_LAUNCH(bnSliceSquares<T>, grid, kChannelThreads, x, static_cast<const double*>(sums),
              squares, L, sl.perSlice);
  LWRT_LAUNCH(bnSliceNormalize<T>, grid, kChannelThreads, x, sv.as<P>(), bv.as<P>(),
              yv.as<StoreOf<T>>(), mv.as<P>(), vv.as<P>(), static_cast<const double*>(sums),
              static_cast<const double*>(squares), L, sl.perSlice, p.epsilon);
  return true;
}

template <typename T>
bool batchNormGradImpl(const TensorView& xv, const TensorView& sv, const TensorView& mv,
                       const TensorView& vv, const TensorView& dyv, const TensorView& dxv,
                       const TensorView& dsv, const TensorView& dbv,
                       const BatchNormTrainParams& p) {
  Channels L;
  bool ok = channels(xv, L) && dyv.shape == xv.shape && dxv.shape == xv.shape;
  for (const TensorView* v : {&sv, &mv, &vv, &dsv, &dbv})
    ok = ok && isVector(*v, L.C);
  if (!ok)
    return LWRT_REJECT(
        "batch_norm_grad: x must be [N, C, ...], dy and dx of x's shape, the others [C]");
  if (L.C == 0)
    return true;
  if constexpr (std::is_floating_point_v<T>)
    if (xv.numel() > 0) {
      CudnnRun r = cudnnBatchNormGrad(xv, sv, mv, vv, dyv, dxv, dsv, dbv, p.epsilon);
      if (r != CudnnRun::NotCovered)
        return r == CudnnRun::Ran;
    }
  if (L.C > INT_MAX)
    return LWRT_REJECT("batch_norm_grad: more than 2^31 channels");
  using P = ParamOf<T>;
  const ChannelSlices sl = channelSlices(L);
  const size_t parts = static_cast<size_t>(L.C) * sl.count;
  if (!ensureWorkspace(2 * parts * sizeof(double)))
    return false;
  double* dySums = static_cast<double*>(context().workspace);
  double* dyXhatSums = dySums + parts;
  const dim3 grid(static_cast<unsigned>(L.C), sl.count);
  LWRT_LAUNCH(bnGradSliceSums<T>, grid, kChannelThreads, xv.as<StoreOf<T>>(), mv.as<P>(),
              vv.as<P>(), dyv.as<StoreOf<T>>(), dySums, dyXhatSums, L, sl.perSlice, p.epsilon);
  LWRT_LAUNCH(bnGradSliceInput<T>, grid, kChannelThreads, xv.as<StoreOf<T>>(), sv.as<P>(),
              mv.as<P>(), vv.as<P>(), dyv.as<StoreOf<T>>(), dxv.as<StoreOf<T>>(), dsv.as<P>(),
              dbv.as<P>(), static_cast<const double*>(dySums),
              static_cast<const double*>(dyXhatSums), L, sl.perSlice, p.epsilon);
  return true;
}

//===--- Softmax ----------------------------------------------------------===//

/// Rows along `axis`: outer * inner rows of n elements, stride inner.
struct Rows {
  int64_t outer = 1, n = 0, inner = 1;
  __host__ __device__ int64_t count() const { return outer * inner; }
};
bool rowsOf(const TensorView& x, int64_t axis, Rows& r) {
  if (axis < 0)
    axis += x.rank();
  if (axis < 0 || axis >= x.rank())
    return false;
  r.n = x.shape[axis];
  for (int64_t d = 0; d < axis; ++d)
    r.outer *= x.shape[d];
  for (int64_t d = axis + 1; d < x.rank(); ++d)
    r.inner *= x.shape[d];
  return true;
}

/// Softmax (or log-softmax) of contiguous rows of n, one block per row.
template <typename T>
__global__ void softmaxRows(const T* x, T* y, int64_t rows, int64_t n, bool logOut) {
  __shared__ double shared[kReduceThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    T mx = negInf<T>();
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      if (mx < xr[j])
        mx = xr[j];
    mx = static_cast<T>(blockMax(static_cast<double>(mx), shared));
    double sum = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      sum += softmaxSumTerm(xr[j], mx);
    sum = blockSum(sum, shared);
    T lse = static_cast<T>(log(sum)), inv = static_cast<T>(1.0 / sum);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      yr[j] = softmaxValue(xr[j], mx, lse, inv, logOut);
  }
}

/// Softmax (or log-softmax) of rows of stride inner, one thread per row, in
/// the CPU's order.
template <typename T> __global__ void softmaxStrided(const T* x, T* y, Rows R, bool logOut) {
  LWRT_GRID_STRIDE(r, R.count()) {
    int64_t base = (r / R.inner) * R.n * R.inner + r % R.inner;
    softmaxRow(x + base, y + base, R.n, R.inner, logOut);
  }
}

template <typename T>
__global__ void softmaxGradRows(const T* y, const T* dy, T* dx, int64_t rows, int64_t n,
                                bool logIn) {
  __shared__ double shared[kReduceThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t base = r * n;
    double acc = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      acc += softmaxGradTerm(y[base + j], dy[base + j], logIn);
    T a = static_cast<T>(blockSum(acc, shared));
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      dx[base + j] = softmaxGradValue(y[base + j], dy[base + j], a, logIn);
  }
}

template <typename T>
__global__ void softmaxGradStrided(const T* y, const T* dy, T* dx, Rows R, bool logIn) {
  LWRT_GRID_STRIDE(r, R.count()) {
    int64_t base = (r / R.inner) * R.n * R.inner + r % R.inner;
    softmaxGradRow(y + base, dy + base, dx + base, R.n, R.inner, logIn);
  }
}

template <typename T>
bool softmaxImpl(const TensorView& xv, const TensorView& yv, const SoftmaxParams& p, bool log) {
  Rows R;
  if (!rowsOf(xv, p.axis, R) || yv.shape != xv.shape)
    return LWRT_REJECT(log ? "log_softmax: bad axis, or y not of x's shape"
                           : "softmax: bad axis, or y not of x's shape");
  if (xv.numel() == 0)
    return true;
  if (CudnnRun r = cudnnSoftmax(xv, yv, R.outer, R.n, R.inner, log); r != CudnnRun::NotCovered)
    return r == CudnnRun::Ran;
  if (R.inner == 1)
    LWRT_LAUNCH(softmaxRows<T>, rowBlocks(R.outer), rowThreads(R.n), xv.as<T>(), yv.as<T>(),
                R.outer, R.n, log);
  else
    LWRT_LAUNCH(softmaxStrided<T>, blocksFor(R.count()), kThreads, xv.as<T>(), yv.as<T>(), R, log);
  return true;
}

template <typename T>
bool softmaxGradImpl(const TensorView& yv, const TensorView& dyv, const TensorView& dxv,
                     const SoftmaxParams& p, bool log) {
  Rows R;
  if (!rowsOf(yv, p.axis, R) || dyv.shape != yv.shape || dxv.shape != yv.shape)
    return LWRT_REJECT(log ? "log_softmax_grad: bad axis, or dy, dx not of y's shape"
                           : "softmax_grad: bad axis, or dy, dx not of y's shape");
  if (yv.numel() == 0)
    return true;
  if (CudnnRun r = cudnnSoftmaxGrad(yv, dyv, dxv, R.outer, R.n, R.inner, log);
      r != CudnnRun::NotCovered)
    return r == CudnnRun::Ran;
  if (R.inner == 1)
    LWRT_LAUNCH(softmaxGradRows<T>, rowBlocks(R.outer), rowThreads(R.n), yv.as<T>(), dyv.as<T>(),
                dxv.as<T>(), R.outer, R.n, log);
  else
    LWRT_LAUNCH(softmaxGradStrided<T>, blocksFor(R.count()), kThreads, yv.as<T>(), dyv.as<T>(),
                dxv.as<T>(), R, log);
  return true;
}

//===--- Losses -----------------------------------------------------------===//

/// Checks the labels of softmax_xent against logits [N, K].
bool labelsFit(const TensorView& logits, const TensorView& labels) {
  return logits.rank() == 2 && labels.shape == std::vector<int64_t>{logits.shape[0]} &&
         (labels.dtype == DType::I64 || labels.dtype == DType::I32) &&
         (labels.data != nullptr || logits.shape[0] == 0);
}

__device__ __forceinline__ int64_t labelAt(const void* labels, bool i64, int64_t r) {
  return i64 ? static_cast<const int64_t*>(labels)[r]
             : static_cast<int64_t>(static_cast<const int32_t*>(labels)[r]);
}

/// Marks a data error for the runner (the first one stays).
__device__ __forceinline__ void raiseError(int* flag, int code) { atomicCAS(flag, 0, code); }

/// log(sum_j exp(z[j])) of a row of k logits, in double, reduced over the block.
template <typename T> __device__ double blockLogSumExp(const T* z, int64_t k, double* shared) {
  double mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < k; j += blockDim.x) {
    double v = static_cast<double>(z[j]);
    if (mx < v)
      mx = v;
  }
  mx = blockMax(mx, shared);
  double sum = 0;
  for (int64_t j = threadIdx.x; j < k; j += blockDim.x)
    sum += exp(static_cast<double>(z[j]) - mx);
  return mx + log(blockSum(sum, shared));
}

/// One block per row: rowLoss[r] = lse(z_r) - (1-e)·z_r[label] - e·mean_j z_r[j],
/// NaN (and the error flag) for a label out of range.
template <typename T>
__global__ void xentRows(const T* z, const void* labels, bool i64, double* rowLoss, int64_t rows,
                         int64_t k, double e, int* flag) {
  __shared__ double shared[kReduceThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    double lse = blockLogSumExp(z + r * k, k, shared);
    double sum = 0;
    if (e != 0) { // e is the same in every thread: the whole block reduces
      for (int64_t j = threadIdx.x; j < k; j += blockDim.x)
        sum += static_cast<double>(z[r * k + j]);
      sum = blockSum(sum, shared);
    }
    if (threadIdx.x == 0) {
      int64_t label = labelAt(labels, i64, r);
      if (label < 0 || label >= k) {
        raiseError(flag, kLabelOutOfRange);
        rowLoss[r] = NAN;
      } else {
        rowLoss[r] = xentRowLoss(lse, static_cast<double>(z[r * k + label]), sum, k, e);
      }
    }
  }
}

/// One block per row: dz = (softmax(z) - (1-e)·onehot(label) - e/k) * dloss /
/// rows; a row with a label out of range is NaN (and raises the error flag).
template <typename T>
__global__ void xentGradRows(const T* z, const void* labels, bool i64, const T* dloss, T* dz,
                             int64_t rows, int64_t k, double e, int* flag) {
  __shared__ double shared[kReduceThreads];
  double scale = static_cast<double>(*dloss) / static_cast<double>(rows);
  double uniform = e / static_cast<double>(k);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    double lse = blockLogSumExp(z + r * k, k, shared);
    int64_t label = labelAt(labels, i64, r);
    bool bad = label < 0 || label >= k;
    if (bad && threadIdx.x == 0)
      raiseError(flag, kLabelOutOfRange);
    for (int64_t j = threadIdx.x; j < k; j += blockDim.x) {
      double g =
          xentGradValue(static_cast<double>(z[r * k + j]), lse, j == label, e, uniform, scale);
      dz[r * k + j] = bad ? static_cast<T>(NAN) : static_cast<T>(g);
    }
  }
}

/// Blocks of the first stage of mse_loss (fixed, so the sum's order is too).
constexpr int kPartialBlocks = 256;

/// parts[b] = block b's share of sum (pred - target)^2, in double.
template <typename T>
__global__ void squaredDiffPartials(const T* pred, const T* target, double* parts, int64_t n) {
  __shared__ double shared[kReduceThreads];
  double sum = 0;
  LWRT_GRID_STRIDE(i, n) { sum += squaredDiff(pred[i], target[i]); }
  sum = blockSum(sum, shared);
  if (threadIdx.x == 0)
    parts[blockIdx.x] = sum;
}

/// One block: *out = sum(parts) / divisor.
template <typename T>
__global__ void sumParts(const double* parts, int64_t count, double divisor, T* out) {
  __shared__ double shared[kReduceThreads];
  double sum = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x)
    sum += parts[i];
  sum = blockSum(sum, shared);
  if (threadIdx.x == 0)
    *out = static_cast<T>(sum / divisor);
}

template <typename T>
__global__ void mseGrad(const T* pred, const T* target, const T* dloss, T* dp, int64_t n) {
  T scale = mseGradScale(*dloss, n);
  LWRT_GRID_STRIDE(i, n) { dp[i] = (pred[i] - target[i]) * scale; }
}

template <typename T>
bool softmaxXentImpl(const TensorView& zv, const TensorView& lv, const TensorView& loss,
                     const XentParams& p) {
  if (!labelsFit(zv, lv) || !isScalar(loss))
    return LWRT_REJECT("softmax_xent: logits must be [N, K], labels I64 or I32 [N], the loss a "
                       "scalar");
  int64_t n = zv.shape[0], k = zv.shape[1];
  if (!ensureWorkspace(static_cast<size_t>(n) * sizeof(double)))
    return false;
  double* rowLoss = static_cast<double*>(context().workspace);
  if (n > 0)
    LWRT_LAUNCH(xentRows<T>, rowBlocks(n), rowThreads(k), zv.as<T>(), lv.data,
                lv.dtype == DType::I64, rowLoss, n, k, p.labelSmoothing, context().errorFlag);
  // n == 0 gives 0 / 0 = NaN, as the CPU's mean over no row.
  LWRT_LAUNCH(sumParts<T>, 1, kReduceThreads, rowLoss, n, static_cast<double>(n), loss.as<T>());
  return true;
}

template <typename T>
bool softmaxXentGradImpl(const TensorView& zv, const TensorView& lv, const TensorView& dlv,
                         const TensorView& dzv, const XentParams& p) {
  if (!labelsFit(zv, lv) || !isScalar(dlv) || dzv.shape != zv.shape)
    return LWRT_REJECT("softmax_xent_grad: logits must be [N, K], labels I64 or I32 [N], dloss a "
                       "scalar, dlogits of the logits' shape");
  int64_t n = zv.shape[0], k = zv.shape[1];
  if (n == 0)
    return true;
  LWRT_LAUNCH(xentGradRows<T>, rowBlocks(n), rowThreads(k), zv.as<T>(), lv.data,
              lv.dtype == DType::I64, dlv.as<T>(), dzv.as<T>(), n, k, p.labelSmoothing,
              context().errorFlag);
  return true;
}

template <typename T>
bool mseLossImpl(const TensorView& pv, const TensorView& tv, const TensorView& loss) {
  if (tv.shape != pv.shape || !isScalar(loss))
    return LWRT_REJECT("mse_loss: target must have pred's shape and the loss be a scalar");
  int64_t n = pv.numel();
  if (!ensureWorkspace(kPartialBlocks * sizeof(double)))
    return false;
  double* parts = static_cast<double*>(context().workspace);
  LWRT_LAUNCH(squaredDiffPartials<T>, kPartialBlocks, kReduceThreads, pv.as<T>(), tv.as<T>(), parts,
              n);
  LWRT_LAUNCH(sumParts<T>, 1, kReduceThreads, parts, int64_t(kPartialBlocks),
              static_cast<double>(std::max<int64_t>(1, n)), loss.as<T>());
  return true;
}

template <typename T>
bool mseLossGradImpl(const TensorView& pv, const TensorView& tv, const TensorView& dlv,
                     const TensorView& dpv) {
  if (tv.shape != pv.shape || !isScalar(dlv) || dpv.shape != pv.shape)
    return LWRT_REJECT("mse_loss_grad: target and dpred must have pred's shape, dloss be a scalar");
  int64_t n = pv.numel();
  if (n == 0)
    return true;
  LWRT_LAUNCH(mseGrad<T>, blocksFor(n), kThreads, pv.as<T>(), tv.as<T>(), dlv.as<T>(), dpv.as<T>(),
              n);
  return true;
}

} // namespace

//===--- Entry points -----------------------------------------------------===//

bool lrn(const TensorView& x, const TensorView& y, const LrnParams& p) {
  return floatOp("lrn", {&x, &y}, [&](auto t) { return lrnImpl<decltype(t)>(x, y, p); });
}

bool lrnGrad(const TensorView& x, const TensorView& y, const TensorView& dy, const TensorView& dx,
             const LrnParams& p) {
  return floatOp("lrn_grad", {&x, &y, &dy, &dx},
                 [&](auto t) { return lrnGradImpl<decltype(t)>(x, y, dy, dx, p); });
}

bool batchNorm(const TensorView& x, const TensorView& scale, const TensorView& bias,
               const TensorView& mean, const TensorView& var, const TensorView& y,
               const BatchNormParams& p) {
  return activationOp("batch_norm", {&x, &y}, {&scale, &bias, &mean, &var}, [&](auto t) {
    return batchNormImpl<decltype(t)>(x, scale, bias, mean, var, y, p);
  });
}

bool batchNormTrain(const TensorView& x, const TensorView& scale, const TensorView& bias,
                    const TensorView& y, const TensorView& mean, const TensorView& var,
                    const BatchNormTrainParams& p) {
  return activationOp("batch_norm_train", {&x, &y}, {&scale, &bias, &mean, &var}, [&](auto t) {
    return batchNormTrainImpl<decltype(t)>(x, scale, bias, y, mean, var, p);
  });
}

bool batchNormGrad(const TensorView& x, const TensorView& scale, const TensorView& mean,
                   const TensorView& var, const TensorView& dy, const TensorView& dx,
                   const TensorView& dscale, const TensorView& dbias,
                   const BatchNormTrainParams& p) {
  return activationOp(
      "batch_norm_grad", {&x, &dy, &dx}, {&scale, &mean, &var, &dscale, &dbias}, [&](auto t) {
        return batchNormGradImpl<decltype(t)>(x, scale, mean, var, dy, dx, dscale, dbias, p);
      });
}

bool softmax(const TensorView& x, const TensorView& y, const SoftmaxParams& p) {
  return floatOp("softmax", {&x, &y},
                 [&](auto t) { return softmaxImpl<decltype(t)>(x, y, p, false); });
}

bool logSoftmax(const TensorView& x, const TensorView& y, const SoftmaxParams& p) {
  return floatOp("log_softmax", {&x, &y},
                 [&](auto t) { return softmaxImpl<decltype(t)>(x, y, p, true); });
}

bool softmaxGrad(const TensorView& y, const TensorView& dy, const TensorView& dx,
                 const SoftmaxParams& p) {
  return floatOp("softmax_grad", {&y, &dy, &dx},
                 [&](auto t) { return softmaxGradImpl<decltype(t)>(y, dy, dx, p, false); });
}

bool logSoftmaxGrad(const TensorView& y, const TensorView& dy, const TensorView& dx,
                    const SoftmaxParams& p) {
  return floatOp("log_softmax_grad", {&y, &dy, &dx},
                 [&](auto t) { return softmaxGradImpl<decltype(t)>(y, dy, dx, p, true); });
}

bool softmaxXent(const TensorView& logits, const TensorView& labels, const TensorView& loss,
                 const XentParams& p) {
  return floatOp("softmax_xent", {&logits, &loss},
                 [&](auto t) { return softmaxXentImpl<decltype(t)>(logits, labels, loss, p); });
}

bool softmaxXentGrad(const TensorView& logits, const TensorView& labels, const TensorView& dloss,
                     const TensorView& dlogits, const XentParams& p) {
  return floatOp("softmax_xent_grad", {&logits, &dloss, &dlogits}, [&](auto t) {
    return softmaxXentGradImpl<decltype(t)>(logits, labels, dloss, dlogits, p);
  });
}

bool mseLoss(const TensorView& pred, const TensorView& target, const TensorView& loss) {
  return floatOp("mse_loss", {&pred, &target, &loss},
                 [&](auto t) { return mseLossImpl<decltype(t)>(pred, target, loss); });
}

bool mseLossGrad(const TensorView& pred, const TensorView& target, const TensorView& dloss,
                 const TensorView& dpred) {
  return floatOp("mse_loss_grad", {&pred, &target, &dloss, &dpred},
                 [&](auto t) { return mseLossGradImpl<decltype(t)>(pred, target, dloss, dpred); });
}

} // namespace lwrt::cuda
