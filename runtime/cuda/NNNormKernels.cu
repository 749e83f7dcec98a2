// NNNormKernels.cu - LRN, softmax and loss kernels of lwrt/cuda_nn.h (batch
// norm's are BatchNormKernels.cu's)
//
// LRN and softmax run on cuDNN where it covers the op (CudnnOps.cu; not
// with --kernels=own). Otherwise, and for the losses,
// this file's own kernels follow the formulas (and, where it matters, the
// summation order) of the CPU backend (cpu/NNNormKernels.cpp): sums over
// many elements are kept in double. Reductions are block reductions in a
// fixed order, never float atomics, so results are the same from run to
// run:
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
#include "lwrt/shape_math.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>

namespace lwrt::cuda {
namespace {

bool isScalar(const TensorView& v) { return v.rank() == 0; }

// Math in the element type, as the CPU's std:: overloads do.
__device__ __forceinline__ float mpow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double mpow(double a, double b) { return pow(a, b); }

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

//===--- Softmax ----------------------------------------------------------===//

/// Rows along `axis` (lwrt/shape_math.h).
using Rows = AxisRows;

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
  if (!axisRows(xv.shape, p.axis, R) || yv.shape != xv.shape)
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
  if (!axisRows(yv.shape, p.axis, R) || dyv.shape != yv.shape || dxv.shape != yv.shape)
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
/// Logits [..., K] and labels of their leading shape.
bool labelsFit(const TensorView& logits, const TensorView& labels) {
  return logits.rank() >= 2 &&
         labels.shape == std::vector<int64_t>(logits.shape.begin(), logits.shape.end() - 1) &&
         (labels.dtype == DType::I64 || labels.dtype == DType::I32) &&
         (labels.data != nullptr || labels.numel() == 0);
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
__global__ void xentRows(const T* z, const void* labels, bool i64, double* rowLoss,
                         double* rowCounted, int64_t rows, int64_t k, double e, int64_t ignore,
                         int* flag) {
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
      rowCounted[r] = label == ignore ? 0.0 : 1.0;
      if (label == ignore) {
        rowLoss[r] = 0.0;
      } else if (label < 0 || label >= k) {
        raiseError(flag, kLabelOutOfRange);
        rowLoss[r] = NAN;
      } else {
        rowLoss[r] = xentRowLoss(lse, static_cast<double>(z[r * k + label]), sum, k, e);
      }
    }
  }
}

/// One block: *counted = the rows whose label is not `ignore`.
__global__ void countLabels(const void* labels, bool i64, int64_t rows, int64_t ignore,
                            double* counted) {
  __shared__ double shared[kReduceThreads];
  double sum = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    sum += labelAt(labels, i64, r) == ignore ? 0.0 : 1.0;
  sum = blockSum(sum, shared);
  if (threadIdx.x == 0)
    *counted = sum;
}

/// One block per row: dz = (softmax(z) - (1-e)·onehot(label) - e/k) * dloss /
/// counted rows, 0 in a row whose label is `ignore`; a row with a label out
/// of range is NaN (and raises the error flag).
template <typename T>
__global__ void xentGradRows(const T* z, const void* labels, bool i64, const T* dloss, T* dz,
                             int64_t rows, int64_t k, double e, int64_t ignore,
                             const double* counted, int* flag) {
  __shared__ double shared[kReduceThreads];
  double scale = static_cast<double>(*dloss) / *counted;
  double uniform = e / static_cast<double>(k);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t label = labelAt(labels, i64, r);
    if (label == ignore) {
      for (int64_t j = threadIdx.x; j < k; j += blockDim.x)
        dz[r * k + j] = static_cast<T>(0);
      continue;
    }
    double lse = blockLogSumExp(z + r * k, k, shared);
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

/// One block: *out = sum(parts) / sum(counted), the mean over the counted rows.
template <typename T>
__global__ void meanOverCounted(const double* parts, const double* counted, int64_t count, T* out) {
  __shared__ double shared[kReduceThreads];
  double sum = 0, n = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    sum += parts[i];
    n += counted[i];
  }
  sum = blockSum(sum, shared);
  n = blockSum(n, shared);
  if (threadIdx.x == 0)
    *out = static_cast<T>(sum / n);
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
    return LWRT_REJECT("softmax_xent: logits must be [..., K], labels I64 or I32 of the logits' "
                       "leading shape, the loss a scalar");
  int64_t n = lv.numel(), k = zv.shape.back();
  if (!ensureWorkspace(2 * static_cast<size_t>(n) * sizeof(double)))
    return false;
  double* rowLoss = static_cast<double*>(context().workspace);
  double* rowCounted = rowLoss + n;
  if (n > 0)
    LWRT_LAUNCH(xentRows<T>, rowBlocks(n), rowThreads(k), zv.as<T>(), lv.data,
                lv.dtype == DType::I64, rowLoss, rowCounted, n, k, p.labelSmoothing, p.ignoreIndex,
                context().errorFlag);
  // No row counted gives 0 / 0 = NaN, as the CPU's mean over no row.
  LWRT_LAUNCH(meanOverCounted<T>, 1, kReduceThreads, rowLoss, rowCounted, n, loss.as<T>());
  return true;
}

template <typename T>
bool softmaxXentGradImpl(const TensorView& zv, const TensorView& lv, const TensorView& dlv,
                         const TensorView& dzv, const XentParams& p) {
  if (!labelsFit(zv, lv) || !isScalar(dlv) || dzv.shape != zv.shape)
    return LWRT_REJECT("softmax_xent_grad: logits must be [..., K], labels I64 or I32 of the "
                       "logits' leading shape, dloss a scalar, dlogits of the logits' shape");
  int64_t n = lv.numel(), k = zv.shape.back();
  if (n == 0)
    return true;
  if (!ensureWorkspace(sizeof(double)))
    return false;
  double* counted = static_cast<double*>(context().workspace);
  bool i64 = lv.dtype == DType::I64;
  LWRT_LAUNCH(countLabels, 1, kReduceThreads, lv.data, i64, n, p.ignoreIndex, counted);
  LWRT_LAUNCH(xentGradRows<T>, rowBlocks(n), rowThreads(k), zv.as<T>(), lv.data, i64, dlv.as<T>(),
              dzv.as<T>(), n, k, p.labelSmoothing, p.ignoreIndex, counted, context().errorFlag);
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
