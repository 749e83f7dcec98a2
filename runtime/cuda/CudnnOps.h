// cuda/CudnnOps.h - LRN, batch norm and softmax on cuDNN (not installed)
// defines: CudnnRun, cudnnLrn, cudnnLrnGrad, cudnnBatchNorm, cudnnBatchNormTrain,
//          cudnnSoftmax, cudnnSoftmaxGrad
//
// The legacy cuDNN calls for the ops of NNNormKernels.cu and BatchNormKernels.cu,
// tried first by their entry points (after their shape checks): each says whether it ran,
// or whether cuDNN does not cover the op as asked (the caller then runs its
// own kernel), or failed (the context's error set). Not covered:
// --kernels=own (Context::cudnnOps off), sizes over cuDNN's 2^31 elements,
// LRN windows cuDNN refuses (size over 16, bias under 1e-5, beta under
// 0.01), batch norm with one value per channel (no unbiased variance to
// take the statistics from), and nothing else.
#pragma once

#include "lwrt/nn_params.h"
#include "lwrt/tensor.h"

namespace lwrt::cuda {

enum class CudnnRun { Ran, NotCovered, Failed };

CudnnRun cudnnLrn(const TensorView& x, const TensorView& y, const LrnParams& p);
CudnnRun cudnnLrnGrad(const TensorView& x, const TensorView& y, const TensorView& dy,
                      const TensorView& dx, const LrnParams& p);

/// Inference: y = scale (x - mean) / sqrt(var + eps) + bias.
CudnnRun cudnnBatchNorm(const TensorView& x, const TensorView& scale, const TensorView& bias,
                        const TensorView& mean, const TensorView& var, const TensorView& y,
                        double eps);
/// Training: y and the batch mean and population variance.
CudnnRun cudnnBatchNormTrain(const TensorView& x, const TensorView& scale, const TensorView& bias,
                             const TensorView& y, const TensorView& mean, const TensorView& var,
                             double eps);

/// Softmax (log-softmax when `log`) of rows of n elements, stride `inner`,
/// `outer` * `inner` of them.
CudnnRun cudnnSoftmax(const TensorView& x, const TensorView& y, int64_t outer, int64_t n,
                      int64_t inner, bool log);
CudnnRun cudnnSoftmaxGrad(const TensorView& y, const TensorView& dy, const TensorView& dx,
                          int64_t outer, int64_t n, int64_t inner, bool log);

} // namespace lwrt::cuda
