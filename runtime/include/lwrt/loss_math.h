// lwrt/loss_math.h - softmax, log-softmax and the losses per row, one definition
// defines: softmaxSumTerm, softmaxValue, softmaxRow, softmaxGradTerm, softmaxGradValue,
//   softmaxGradRow, rowLogSumExp, xentRowLoss, xentGradValue, squaredDiff, mseGradScale
//
// The CPU kernels (runtime/cpu/NNNormKernels.cpp) compute a row with the row
// functions here; the CUDA kernels (runtime/cuda/NNNormKernels.cu) call the
// same row functions where one thread owns a row, and the element functions
// where a block shares one (their row sums then go through the block's
// fixed-order tree instead of the row's order). The reference interpreter
// (interp/TrainOps.cpp) computes the losses with them too; its softmax, all
// in double and dividing by the sum, stays its own.
//
// Steps in the element type T (float or double) stay in T, as the CPU
// kernels have always computed them; the row sums are in double.
//
// Header-only and free of other lwrt headers except lwrt/shard_index.h and
// lwrt/typed_math.h; under nvcc it compiles for the host and the device.
#pragma once

#include "shard_index.h"
#include "typed_math.h"

#include <math.h>

namespace lwrt {

//===--- Softmax and log-softmax ------------------------------------------===//

/// The term of x in a softmax row's sum of exp(x - max), in T.
template <typename T> LWRT_HOST_DEVICE double softmaxSumTerm(T x, T mx) {
  return static_cast<double>(expOf(static_cast<T>(x - mx)));
}

/// softmax (exp(x - max) / sum) or log-softmax (x - max - log(sum)) of x,
/// with lse = log(sum) and inv = 1 / sum rounded to T.
template <typename T> LWRT_HOST_DEVICE T softmaxValue(T x, T mx, T lse, T inv, bool logOut) {
  T z = x - mx;
  return logOut ? static_cast<T>(z - lse) : static_cast<T>(expOf(z) * inv);
}

/// Softmax (or log-softmax) of the row x[0], x[stride], ... of n elements
/// into y at the same places: the max, the sum in order, then each value.
template <typename T>
LWRT_HOST_DEVICE void softmaxRow(const T* x, T* y, int64_t n, int64_t stride, bool logOut) {
  T mx = static_cast<T>(-INFINITY);
  for (int64_t j = 0; j < n; ++j)
    if (mx < x[j * stride]) // a NaN keeps the running max, as std::max
      mx = x[j * stride];
  double sum = 0;
  for (int64_t j = 0; j < n; ++j)
    sum += softmaxSumTerm(x[j * stride], mx);
  T lse = static_cast<T>(log(sum)), inv = static_cast<T>(1.0 / sum);
  for (int64_t j = 0; j < n; ++j)
    y[j * stride] = softmaxValue(x[j * stride], mx, lse, inv, logOut);
}

/// The term of a softmax gradient's row sum: dy for log-softmax, dy * y
/// rounded to T for softmax.
template <typename T> LWRT_HOST_DEVICE double softmaxGradTerm(T y, T dy, bool logIn) {
  return logIn ? static_cast<double>(dy) : static_cast<double>(static_cast<T>(dy * y));
}

/// dx from y, dy and the row's sum a (rounded to T): dy - exp(y) a for
/// log-softmax, y (dy - a) for softmax.
template <typename T> LWRT_HOST_DEVICE T softmaxGradValue(T y, T dy, T a, bool logIn) {
  return logIn ? static_cast<T>(dy - expOf(y) * a) : static_cast<T>(y * (dy - a));
}

/// The gradient of softmaxRow's row (y its result), the sum in order.
template <typename T>
LWRT_HOST_DEVICE void softmaxGradRow(const T* y, const T* dy, T* dx, int64_t n, int64_t stride,
                                     bool logIn) {
  double acc = 0;
  for (int64_t j = 0; j < n; ++j)
    acc += softmaxGradTerm(y[j * stride], dy[j * stride], logIn);
  T a = static_cast<T>(acc);
  for (int64_t j = 0; j < n; ++j)
    dx[j * stride] = softmaxGradValue(y[j * stride], dy[j * stride], a, logIn);
}

//===--- Softmax cross-entropy --------------------------------------------===//

/// log(sum_j exp(z[j])) of a row of k logits, in double, the sum in order.
template <typename T> LWRT_HOST_DEVICE double rowLogSumExp(const T* z, int64_t k) {
  double mx = -INFINITY;
  for (int64_t j = 0; j < k; ++j)
    if (mx < static_cast<double>(z[j]))
      mx = static_cast<double>(z[j]);
  double sum = 0;
  for (int64_t j = 0; j < k; ++j)
    sum += exp(static_cast<double>(z[j]) - mx);
  return mx + log(sum);
}

/// A row's loss with label smoothing e over k classes, from its
/// log-sum-exp, its label's logit and the sum of its logits:
/// (1-e)·(lse - z[label]) + e·mean_j(lse - z[j]).
inline LWRT_HOST_DEVICE double xentRowLoss(double lse, double zLabel, double zSum, int64_t k,
                                           double e) {
  return lse - (1 - e) * zLabel - e * zSum / static_cast<double>(k);
}

/// One logit's gradient: (softmax(z) - (1-e)·onehot(label) - e/k) * scale,
/// with uniform = e / k and scale = dloss / rows.
inline LWRT_HOST_DEVICE double xentGradValue(double z, double lse, bool isLabel, double e,
                                             double uniform, double scale) {
  return (exp(z - lse) - (isLabel ? 1.0 - e : 0.0) - uniform) * scale;
}

//===--- Mean squared error -----------------------------------------------===//

/// One element's term of mse_loss's sum, in double.
template <typename T> LWRT_HOST_DEVICE double squaredDiff(T pred, T target) {
  double d = static_cast<double>(pred) - static_cast<double>(target);
  return d * d;
}

/// mse_loss_grad's factor 2 dloss / n (n at least 1), rounded to T; each
/// element's gradient is (pred - target) times it, in T.
template <typename T> LWRT_HOST_DEVICE T mseGradScale(T dloss, int64_t n) {
  return static_cast<T>(2.0 * static_cast<double>(dloss) /
                        static_cast<double>(n > 1 ? n : int64_t(1)));
}

} // namespace lwrt
