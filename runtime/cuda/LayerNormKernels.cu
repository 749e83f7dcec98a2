//===- LayerNormKernels.cu - layer_norm and layer_norm_grad ---------------===//
//
// The CUDA kernels of lwrt/cuda_nn.h for layer normalization, following
// the formulas of the CPU backend (cpu/LayerNormKernels.cpp): x is seen as
// [rows, n], n the size of the normalized dims, and sums are kept in
// double. Reductions are block reductions in a fixed order, never float
// atomics, so results are the same from run to run:
//  - layer_norm and the dx part of layer_norm_grad: one block per row.
//  - dscale and dbias: one block per normalized position, over the rows.
//
//===----------------------------------------------------------------------===//
#include "cuda/Context.h"
#include "cuda/KernelSupport.cuh"
#include "lwrt/cuda_nn.h"
#include "lwrt/kernel_checks.h"

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <string>
#include <vector>

namespace lwrt::cuda {

namespace {

/// Threads for a block that reduces n elements.
unsigned reduceThreads(int64_t n) { return n >= 1024 ? kReduceThreads : n >= 128 ? 128 : 32; }
/// Blocks for `items` block-per-item work (the kernels loop over the rest).
unsigned itemBlocks(int64_t items) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(items, 1 << 20)));
}

/// x as [rows, n] (lwrt/kernel_checks.h).
using Rows = LayerRows;

/// All views share a float element type (the first's) and hold data.
bool floatViews(std::initializer_list<const TensorView*> views) {
  DType t = (*views.begin())->dtype;
  if (t != DType::F32 && t != DType::F64)
    return false;
  for (const TensorView* v : views)
    if (v->dtype != t || (v->data == nullptr && v->numel() != 0))
      return false;
  return true;
}

template <typename T>
__global__ void layerNormRow(const T* x, const T* scale, const T* bias, T* y, T* meanOut, T* invOut,
                             Rows L, double eps) {
  __shared__ double shared[kReduceThreads];
  double n = static_cast<double>(L.n);
  for (int64_t r = blockIdx.x; r < L.rows; r += gridDim.x) {
    const T* xr = x + r * L.n;
    double s = 0;
    for (int64_t j = threadIdx.x; j < L.n; j += blockDim.x)
      s += static_cast<double>(xr[j]);
    double mean = blockSum(s, shared) / n;
    double sq = 0;
    for (int64_t j = threadIdx.x; j < L.n; j += blockDim.x) {
      double d = static_cast<double>(xr[j]) - mean;
      sq += d * d;
    }
    double inv = 1.0 / sqrt(blockSum(sq, shared) / n + eps);
    for (int64_t j = threadIdx.x; j < L.n; j += blockDim.x)
      y[r * L.n + j] =
          static_cast<T>((static_cast<double>(xr[j]) - mean) * inv * static_cast<double>(scale[j]) +
                         static_cast<double>(bias[j]));
    if (threadIdx.x == 0) {
      meanOut[r] = static_cast<T>(mean);
      invOut[r] = static_cast<T>(inv);
    }
  }
}

/// dx = inv (g - mean(g) - xhat mean(g xhat)), g = dy scale, per row.
template <typename T>
__global__ void layerNormGradRow(const T* x, const T* scale, const T* meanIn, const T* invIn,
                                 const T* dy, T* dx, Rows L) {
  __shared__ double shared[kReduceThreads];
  double n = static_cast<double>(L.n);
  for (int64_t r = blockIdx.x; r < L.rows; r += gridDim.x) {
    double mean = static_cast<double>(meanIn[r]), inv = static_cast<double>(invIn[r]);
    double sg = 0, sgx = 0;
    for (int64_t j = threadIdx.x; j < L.n; j += blockDim.x) {
      int64_t k = r * L.n + j;
      double g = static_cast<double>(dy[k]) * static_cast<double>(scale[j]);
      sg += g;
      sgx += g * (static_cast<double>(x[k]) - mean) * inv;
    }
    double mg = blockSum(sg, shared) / n, mgx = blockSum(sgx, shared) / n;
    for (int64_t j = threadIdx.x; j < L.n; j += blockDim.x) {
      int64_t k = r * L.n + j;
      double xhat = (static_cast<double>(x[k]) - mean) * inv;
      double g = static_cast<double>(dy[k]) * static_cast<double>(scale[j]);
      dx[k] = static_cast<T>(inv * (g - mg - xhat * mgx));
    }
  }
}

/// dscale[j] = sum over rows of dy xhat, dbias[j] = sum of dy: one block
/// per position j.
template <typename T>
__global__ void layerNormGradParams(const T* x, const T* meanIn, const T* invIn, const T* dy,
                                    T* dscale, T* dbias, Rows L) {
  __shared__ double shared[kReduceThreads];
  for (int64_t j = blockIdx.x; j < L.n; j += gridDim.x) {
    double ds = 0, db = 0;
    for (int64_t r = threadIdx.x; r < L.rows; r += blockDim.x) {
      int64_t k = r * L.n + j;
      double d = static_cast<double>(dy[k]);
      db += d;
      ds += d * (static_cast<double>(x[k]) - static_cast<double>(meanIn[r])) *
            static_cast<double>(invIn[r]);
    }
    double sds = blockSum(ds, shared), sdb = blockSum(db, shared);
    if (threadIdx.x == 0) {
      dscale[j] = static_cast<T>(sds);
      dbias[j] = static_cast<T>(sdb);
    }
  }
}

template <typename T>
bool layerNormImpl(const TensorView& xv, const TensorView& sv, const TensorView& bv,
                   const TensorView& yv, const TensorView& mv, const TensorView& iv,
                   const LayerNormParams& p) {
  Rows L;
  if (!layerRows(xv, p.axis, {&yv}, {&sv, &bv}, {&mv, &iv}, L))
    return LWRT_REJECT("layer_norm: y must have x's shape, scale and bias x.shape[axis:], mean "
                       "and inv_std_dev x's shape with the normalized dims 1");
  if (L.rows == 0 || L.n == 0)
    return true;
  LWRT_LAUNCH(layerNormRow<T>, itemBlocks(L.rows), reduceThreads(L.n), xv.as<T>(), sv.as<T>(),
              bv.as<T>(), yv.as<T>(), mv.as<T>(), iv.as<T>(), L, p.epsilon);
  return true;
}

template <typename T>
bool layerNormGradImpl(const TensorView& xv, const TensorView& sv, const TensorView& mv,
                       const TensorView& iv, const TensorView& dyv, const TensorView& dxv,
                       const TensorView& dsv, const TensorView& dbv, const LayerNormParams& p) {
  Rows L;
  if (!layerRows(xv, p.axis, {&dyv, &dxv}, {&sv, &dsv, &dbv}, {&mv, &iv}, L))
    return LWRT_REJECT("layer_norm_grad: dy and dx must have x's shape, scale, dscale and dbias "
                       "x.shape[axis:], mean and inv_std_dev x's shape with the normalized dims 1");
  if (L.n == 0)
    return true;
  if (L.rows > 0)
    LWRT_LAUNCH(layerNormGradRow<T>, itemBlocks(L.rows), reduceThreads(L.n), xv.as<T>(), sv.as<T>(),
                mv.as<T>(), iv.as<T>(), dyv.as<T>(), dxv.as<T>(), L);
  LWRT_LAUNCH(layerNormGradParams<T>, itemBlocks(L.n), reduceThreads(L.rows), xv.as<T>(),
              mv.as<T>(), iv.as<T>(), dyv.as<T>(), dsv.as<T>(), dbv.as<T>(), L);
  return true;
}

} // namespace

bool layerNorm(const TensorView& x, const TensorView& scale, const TensorView& bias,
               const TensorView& y, const TensorView& mean, const TensorView& invStdDev,
               const LayerNormParams& p) {
  if (!floatViews({&x, &scale, &bias, &y, &mean, &invStdDev}))
    return LWRT_REJECT("layer_norm: operands must be F32 or F64, all of one type, with data");
  if (x.dtype == DType::F32)
    return layerNormImpl<float>(x, scale, bias, y, mean, invStdDev, p);
  return layerNormImpl<double>(x, scale, bias, y, mean, invStdDev, p);
}

bool layerNormGrad(const TensorView& x, const TensorView& scale, const TensorView& mean,
                   const TensorView& invStdDev, const TensorView& dy, const TensorView& dx,
                   const TensorView& dscale, const TensorView& dbias, const LayerNormParams& p) {
  if (!floatViews({&x, &scale, &mean, &invStdDev, &dy, &dx, &dscale, &dbias}))
    return LWRT_REJECT("layer_norm_grad: operands must be F32 or F64, all of one type, with data");
  if (x.dtype == DType::F32)
    return layerNormGradImpl<float>(x, scale, mean, invStdDev, dy, dx, dscale, dbias, p);
  return layerNormGradImpl<double>(x, scale, mean, invStdDev, dy, dx, dscale, dbias, p);
}

} // namespace lwrt::cuda
