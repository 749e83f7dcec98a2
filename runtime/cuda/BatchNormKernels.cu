// BatchNormKernels.cu - batch norm's kernels of lwrt/cuda_nn.h
//
// batch_norm and batch_norm_train run on cuDNN where it covers the op
// (CudnnOps.cu: float32 and float64, not with --kernels=own);
// batch_norm_grad always runs here (twice as fast as cuDNN's backward on an
// H200: docs/gpus.md). These kernels follow the CPU backend's formulas
// (cpu/NNNormKernels.cpp), their sums in double, in a fixed order, never
// float atomics, so results are the same from run to run:
//  - batch_norm (inference): one pass on a planeGrid;
//  - batch_norm_train and batch_norm_grad: a block per slice of whole planes
//    of a channel (about 16K elements, the split fixed by the shape), the
//    slices' partial sums in the workspace, added in slice order by each
//    block of the next pass: three passes over x forward, two backward.
// The Act forms (codegen's fusions, lwrt/cuda_nn.h) run here too, never on
// cuDNN: the forward applies a ReLU as it writes y, the backward reads its
// dy through the ReLU's gradient (relu_grad's formula, y > 0 ? dy : 0).
#include "cuda/Context.h"
#include "cuda/CudnnOps.h"
#include "cuda/KernelSupport.cuh"
#include "lwrt/cuda_nn.h"
#include "lwrt/norm_math.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <initializer_list>
#include <vector>

namespace lwrt::cuda {
namespace {

bool isVector(const TensorView& v, int64_t n) { return v.shape == std::vector<int64_t>{n}; }

__device__ __forceinline__ float msqrt(float v) { return sqrtf(v); }
__device__ __forceinline__ double msqrt(double v) { return sqrt(v); }

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

/// y's element from the batch norm's value v: v rounded to E as batch norm
/// stores it; with a residual, plus the residual's element in E's value
/// type, rounded to E once (as the add of a fused region rounds it); with
/// relu, through the ReLU.
template <typename E, typename T>
__device__ StoreOf<E> bnOut(T v, const StoreOf<E>* res, int64_t e, bool relu) {
  using V = typename Elem<E>::Value;
  StoreOf<E> y = Elem<E>::store(static_cast<V>(v));
  if (res)
    y = Elem<E>::store(Elem<E>::load(y) + Elem<E>::load(res[e]));
  return relu && !(Elem<E>::load(y) > V(0)) ? Elem<E>::store(V(0)) : y;
}

/// On a planeGrid(N * C, inner): the plane's channel once per block row.
template <typename E, typename P = ParamOf<E>>
__global__ void batchNormInference(const StoreOf<E>* x, const P* scale, const P* bias,
                                   const P* mean, const P* var, StoreOf<E>* y, unsigned C,
                                   unsigned inner, unsigned planes, P eps, bool relu,
                                   const StoreOf<E>* res) {
  for (unsigned plane = blockIdx.y; plane < planes; plane += gridDim.y) {
    const unsigned ch = plane % C;
    const P a = scale[ch] / msqrt(var[ch] + eps), m = mean[ch], b = bias[ch];
    for (unsigned q = blockIdx.x * blockDim.x + threadIdx.x; q < inner;
         q += gridDim.x * blockDim.x) {
      const size_t i = static_cast<size_t>(plane) * inner + q;
      y[i] = bnOut<E>(a * (static_cast<P>(Elem<E>::load(x[i])) - m) + b, res,
                      static_cast<int64_t>(i), relu);
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

/// This block's place among the slice partials: `gridDim.y` slices per
/// channel, channel blockIdx.x, slice blockIdx.y.
__device__ int64_t slicePart() { return static_cast<int64_t>(blockIdx.x) * gridDim.y + blockIdx.y; }

/// The sum of this channel's slice partials (`parts` holds `slices` per
/// channel), added in slice order.
__device__ double channelTotal(const double* parts, unsigned slices) {
  double t = 0;
  for (unsigned k = 0; k < slices; ++k)
    t += parts[static_cast<int64_t>(blockIdx.x) * slices + k];
  return t;
}

/// A launch over the slices of L (grid: channels x slices) and two arrays
/// of partial sums, one per slice of each channel, in the workspace.
struct SliceLaunch {
  ChannelSlices slices;
  dim3 grid;
  double* first = nullptr;
  double* second = nullptr;
};
/// False with the context's error when the workspace cannot hold them.
bool sliceLaunch(const Channels& L, SliceLaunch& out) {
  out.slices = channelSlices(L);
  out.grid = dim3(static_cast<unsigned>(L.C), out.slices.count);
  const size_t parts = static_cast<size_t>(L.C) * out.slices.count;
  if (!ensureWorkspace(2 * parts * sizeof(double)))
    return false;
  out.first = static_cast<double*>(context().workspace);
  out.second = out.first + parts;
  return true;
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
    sums[slicePart()] = sum;
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
    squares[slicePart()] = sq;
}

template <typename E, typename P = ParamOf<E>>
__global__ void bnSliceNormalize(const StoreOf<E>* x, const P* scale, const P* bias, StoreOf<E>* y,
                                 P* meanOut, P* varOut, const double* sums, const double* squares,
                                 Channels L, int64_t perSlice, double eps, bool relu,
                                 const StoreOf<E>* res) {
  const int64_t ch = blockIdx.x;
  const double count = static_cast<double>(L.N * L.inner);
  const double mean = channelTotal(sums, gridDim.y) / count,
               var = channelTotal(squares, gridDim.y) / count;
  const double a = bnFactor(scale[ch], var, eps), b = bias[ch];
  forEachInSlice(L, perSlice, [&](int64_t e) {
    y[e] = bnOut<E>(bnNormalized(loadD<E>(x[e]), mean, a, b), res, e, relu);
  });
  if (blockIdx.y == 0 && threadIdx.x == 0) {
    meanOut[ch] = static_cast<P>(mean);
    varOut[ch] = static_cast<P>(var);
  }
}

/// Batch norm's backward in two passes, a block per slice of a channel:
/// the slices' sums of dy and of dy (x - mean), then (lwrt/norm_math.h)
/// dbias = sum dy, dscale = invstd sum dy (x - mean) and dx; slice 0
/// writes dscale and dbias. With `act` (the output of a ReLU after the
/// batch norm), dy is that ReLU's gradient and is read through relu_grad.
template <typename E>
__device__ double gradAt(const StoreOf<E>* dy, const StoreOf<E>* act, int64_t e) {
  return act && !(loadD<E>(act[e]) > 0) ? 0.0 : loadD<E>(dy[e]);
}

template <typename E, typename P = ParamOf<E>>
__global__ void bnGradSliceSums(const StoreOf<E>* x, const P* meanIn, const StoreOf<E>* dy,
                                const StoreOf<E>* act, double* dySums, double* dyDevSums,
                                Channels L, int64_t perSlice) {
  __shared__ double shared[kChannelThreads];
  const int64_t ch = blockIdx.x;
  const double mean = static_cast<double>(meanIn[ch]);
  double db = 0, dd = 0;
  forEachInSlice(L, perSlice, [&](int64_t e) {
    double g = gradAt<E>(dy, act, e);
    db += g;
    dd += g * (loadD<E>(x[e]) - mean);
  });
  db = blockSum(db, shared);
  dd = blockSum(dd, shared);
  if (threadIdx.x == 0) {
    dySums[slicePart()] = db;
    dyDevSums[slicePart()] = dd;
  }
}

template <typename E, typename P = ParamOf<E>>
__global__ void bnGradSliceInput(const StoreOf<E>* x, const P* scale, const P* meanIn,
                                 const P* varIn, const StoreOf<E>* dy, const StoreOf<E>* act,
                                 StoreOf<E>* dx, P* dscaleOut, P* dbiasOut, const double* dySums,
                                 const double* dyDevSums, Channels L, int64_t perSlice,
                                 double eps) {
  const int64_t ch = blockIdx.x;
  const double mean = static_cast<double>(meanIn[ch]), invstd = bnInvStd(varIn[ch], eps);
  const double dbias = channelTotal(dySums, gridDim.y),
               dscale = channelTotal(dyDevSums, gridDim.y) * invstd;
  const double m = static_cast<double>(L.N * L.inner),
               a = static_cast<double>(scale[ch]) * invstd / m;
  forEachInSlice(L, perSlice, [&](int64_t e) {
    dx[e] = storeD<E>(
        bnInputGrad(loadD<E>(x[e]), gradAt<E>(dy, act, e), mean, invstd, a, m, dbias, dscale));
  });
  if (blockIdx.y == 0 && threadIdx.x == 0) {
    dscaleOut[ch] = static_cast<P>(dscale);
    dbiasOut[ch] = static_cast<P>(dbias);
  }
}

template <typename T>
bool batchNormImpl(const TensorView& xv, const TensorView& sv, const TensorView& bv,
                   const TensorView& mv, const TensorView& vv, const TensorView& yv,
                   const BatchNormParams& p, bool relu, const TensorView* res) {
  Channels L;
  bool ok = channels(xv, L) && yv.shape == xv.shape;
  for (const TensorView* v : {&sv, &bv, &mv, &vv})
    ok = ok && isVector(*v, L.C);
  if (!ok)
    return LWRT_REJECT("batch_norm: x must be [N, C, ...], y of x's shape, the others [C]");
  if (xv.numel() == 0)
    return true;
  if constexpr (std::is_floating_point_v<T>)
    if (!relu)
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
      static_cast<P>(p.epsilon), relu, res ? res->as<StoreOf<T>>() : nullptr);
  LWRT_CUDA(cudaGetLastError());
  return true;
}

template <typename T>
bool batchNormTrainImpl(const TensorView& xv, const TensorView& sv, const TensorView& bv,
                        const TensorView& yv, const TensorView& mv, const TensorView& vv,
                        const BatchNormTrainParams& p, bool relu, const TensorView* res) {
  Channels L;
  bool ok = channels(xv, L) && yv.shape == xv.shape;
  for (const TensorView* v : {&sv, &bv, &mv, &vv})
    ok = ok && isVector(*v, L.C);
  if (!ok)
    return LWRT_REJECT("batch_norm_train: x must be [N, C, ...], y of x's shape, the others [C]");
  if (L.C == 0)
    return true;
  if constexpr (std::is_floating_point_v<T>)
    if (xv.numel() > 0 && !relu) {
      CudnnRun r = cudnnBatchNormTrain(xv, sv, bv, yv, mv, vv, p.epsilon);
      if (r != CudnnRun::NotCovered)
        return r == CudnnRun::Ran;
    }
  if (L.C > INT_MAX)
    return LWRT_REJECT("batch_norm_train: more than 2^31 channels");
  using P = ParamOf<T>;
  SliceLaunch s; // partials: the slices' sums, then their squared deviations
  if (!sliceLaunch(L, s))
    return false;
  const StoreOf<T>* x = xv.as<StoreOf<T>>();
  const int64_t per = s.slices.perSlice;
  LWRT_LAUNCH(bnSliceSums<T>, s.grid, kChannelThreads, x, s.first, L, per);
  LWRT_LAUNCH(bnSliceSquares<T>, s.grid, kChannelThreads, x, static_cast<const double*>(s.first),
              s.second, L, per);
  LWRT_LAUNCH(bnSliceNormalize<T>, s.grid, kChannelThreads, x, sv.as<P>(), bv.as<P>(),
              yv.as<StoreOf<T>>(), mv.as<P>(), vv.as<P>(), static_cast<const double*>(s.first),
              static_cast<const double*>(s.second), L, per, p.epsilon, relu,
              res ? res->as<StoreOf<T>>() : nullptr);
  return true;
}

template <typename T>
bool batchNormGradImpl(const TensorView& xv, const TensorView& sv, const TensorView& mv,
                       const TensorView& vv, const TensorView& dyv, const TensorView& dxv,
                       const TensorView& dsv, const TensorView& dbv, const BatchNormTrainParams& p,
                       const TensorView* act) {
  Channels L;
  bool ok = channels(xv, L) && dyv.shape == xv.shape && dxv.shape == xv.shape &&
            (!act || act->shape == xv.shape);
  for (const TensorView* v : {&sv, &mv, &vv, &dsv, &dbv})
    ok = ok && isVector(*v, L.C);
  if (!ok)
    return LWRT_REJECT(
        "batch_norm_grad: x must be [N, C, ...], dy, dx (and the ReLU's y) of x's shape, the "
        "others [C]");
  if (L.C == 0)
    return true;
  if (L.C > INT_MAX)
    return LWRT_REJECT("batch_norm_grad: more than 2^31 channels");
  using P = ParamOf<T>;
  SliceLaunch s; // partials: the slices' sums of dy, then of dy (x - mean)
  if (!sliceLaunch(L, s))
    return false;
  const int64_t per = s.slices.perSlice;
  const StoreOf<T>* y = act ? act->as<StoreOf<T>>() : nullptr;
  LWRT_LAUNCH(bnGradSliceSums<T>, s.grid, kChannelThreads, xv.as<StoreOf<T>>(), mv.as<P>(),
              dyv.as<StoreOf<T>>(), y, s.first, s.second, L, per);
  LWRT_LAUNCH(bnGradSliceInput<T>, s.grid, kChannelThreads, xv.as<StoreOf<T>>(), sv.as<P>(),
              mv.as<P>(), vv.as<P>(), dyv.as<StoreOf<T>>(), y, dxv.as<StoreOf<T>>(), dsv.as<P>(),
              dbv.as<P>(), static_cast<const double*>(s.first),
              static_cast<const double*>(s.second), L, per, p.epsilon);
  return true;
}

/// A residual (the fused add's other operand) has x's shape and type.
bool residualFits(const char* op, const TensorView& x, const TensorView* residual) {
  return !residual || (residual->shape == x.shape && residual->dtype == x.dtype) ||
         LWRT_REJECT(std::string(op) + ": the residual must have x's shape and type");
}

/// Only a ReLU fuses here (codegen's CUDA fusions, ir/FusedOps.h).
bool reluOnly(const char* op, const Activation& act) {
  return act.kind == Activation::Relu ||
         LWRT_REJECT(std::string(op) + ": the CUDA kernels fuse a ReLU only");
}

} // namespace

bool batchNorm(const TensorView& x, const TensorView& scale, const TensorView& bias,
               const TensorView& mean, const TensorView& var, const TensorView& y,
               const BatchNormParams& p) {
  return activationOp("batch_norm", {&x, &y}, {&scale, &bias, &mean, &var}, [&](auto t) {
    return batchNormImpl<decltype(t)>(x, scale, bias, mean, var, y, p, false, nullptr);
  });
}

bool batchNormAct(const TensorView& x, const TensorView& scale, const TensorView& bias,
                  const TensorView& mean, const TensorView& var, const TensorView& y,
                  const BatchNormParams& p, const Activation& act, const TensorView* residual) {
  return reluOnly("batch_norm", act) && residualFits("batch_norm", x, residual) &&
         activationOp("batch_norm", {&x, &y}, {&scale, &bias, &mean, &var}, [&](auto t) {
           return batchNormImpl<decltype(t)>(x, scale, bias, mean, var, y, p, true, residual);
         });
}

bool batchNormTrain(const TensorView& x, const TensorView& scale, const TensorView& bias,
                    const TensorView& y, const TensorView& mean, const TensorView& var,
                    const BatchNormTrainParams& p) {
  return activationOp("batch_norm_train", {&x, &y}, {&scale, &bias, &mean, &var}, [&](auto t) {
    return batchNormTrainImpl<decltype(t)>(x, scale, bias, y, mean, var, p, false, nullptr);
  });
}

bool batchNormTrainAct(const TensorView& x, const TensorView& scale, const TensorView& bias,
                       const TensorView& y, const TensorView& mean, const TensorView& var,
                       const BatchNormTrainParams& p, const Activation& act,
                       const TensorView* residual) {
  return reluOnly("batch_norm_train", act) && residualFits("batch_norm_train", x, residual) &&
         activationOp("batch_norm_train", {&x, &y}, {&scale, &bias, &mean, &var}, [&](auto t) {
           return batchNormTrainImpl<decltype(t)>(x, scale, bias, y, mean, var, p, true, residual);
         });
}

bool batchNormGrad(const TensorView& x, const TensorView& scale, const TensorView& mean,
                   const TensorView& var, const TensorView& dy, const TensorView& dx,
                   const TensorView& dscale, const TensorView& dbias,
                   const BatchNormTrainParams& p) {
  return activationOp("batch_norm_grad", {&x, &dy, &dx}, {&scale, &mean, &var, &dscale, &dbias},
                      [&](auto t) {
                        return batchNormGradImpl<decltype(t)>(x, scale, mean, var, dy, dx, dscale,
                                                              dbias, p, nullptr);
                      });
}

bool batchNormGradAct(const TensorView& x, const TensorView& scale, const TensorView& mean,
                      const TensorView& var, const TensorView& y, const TensorView& dy,
                      const TensorView& dx, const TensorView& dscale, const TensorView& dbias,
                      const BatchNormTrainParams& p, const Activation& act) {
  return reluOnly("batch_norm_grad", act) &&
         activationOp("batch_norm_grad", {&x, &y, &dy, &dx}, {&scale, &mean, &var, &dscale, &dbias},
                      [&](auto t) {
                        return batchNormGradImpl<decltype(t)>(x, scale, mean, var, dy, dx, dscale,
                                                              dbias, p, &y);
                      });
}

} // namespace lwrt::cuda
