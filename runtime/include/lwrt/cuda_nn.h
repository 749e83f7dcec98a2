// lwrt/cuda_nn.h - the CUDA backend's neural-network kernels
// defines: conv2d, conv2dAct, conv2dGradInput, conv2dGradFilter, gemm, matmul, maxPool2d,
//   maxPool2dGrad, avgPool2d, avgPool2dGrad, globalAvgPool, lrn, lrnGrad, batchNorm,
//   batchNormAct, batchNormTrain, batchNormTrainAct, batchNormGrad, batchNormGradAct, layerNorm,
//   layerNormGrad, softmax, logSoftmax, softmaxGrad, logSoftmaxGrad, softmaxXent, softmaxXentGrad,
//   mseLoss, mseLossGrad
//
// The functions of lwrt/cpu_nn.h with the same signatures and semantics, so
// that a generated trainer compiles against either backend by switching
// `using namespace lwrt::cpu` to `using namespace lwrt::cuda`. The
// parameter structs are the shared ones of lwrt/nn_params.h.
//
// Conventions:
//  - Views hold DEVICE pointers (memory of the CUDA context's device).
//  - Work is enqueued asynchronously on the CUDA context's stream; a kernel
//    returns before its results exist and never synchronizes (except the
//    first call of a convolution configuration, which searches cuDNN's
//    algorithms). Results are read after the stream is synchronized.
//  - Every kernel returns true when its work was enqueued and false when it
//    cannot run, the reason then being the context's error
//    (cuda/Context.h): an element type other than F32 or F64, operands of
//    mixed float types, shapes that do not fit together or do not match
//    the result views (all found before anything is enqueued), or a failed
//    CUDA / cuDNN / cuBLAS call.
//  - A label out of range (softmax_xent*) is found on the device: the
//    context's error flag is set to kLabelOutOfRange and the loss (the
//    gradient's row) is written as NaN.
//  - Convolutions go to cuDNN (TF32 tensor cores for F32 unless --no-tf32)
//    and matrix products to cuBLAS (TF32 only with --tf32); pooling, LRN,
//    batch norm and softmax to cuDNN where it covers the op (unless
//    --kernels=own); everything else is this library's own kernels. Results
//    are run-to-run reproducible: reductions use fixed orders (no float
//    atomics), cuDNN engines and algorithms are deterministic ones, and
//    max pooling's backward is CUDNN_POOLING_MAX_DETERMINISTIC.
//  - The first call of each convolution configuration (and of a kernel that
//    needs scratch memory) sizes the context's workspace; a later call while
//    the step is captured into a CUDA graph uses that and never allocates.
//  - Kernels share the context's state: call them from one thread.
//
// This header includes no CUDA header: plain host code includes it.
#pragma once

#include "lwrt/nn_params.h"
#include "lwrt/tensor.h"
#include "lwrt/tensor_params.h"

#include <cstdint>

namespace lwrt::cuda {

#include "lwrt/nn_decls.inc"

/// act(batchNorm(...)) and act(batchNormTrain(...)), act a Relu (another
/// activation is refused): this library's kernels apply it as they write
/// y, on every float type (cuDNN is not called). With a residual (x's
/// shape and type): act(batch norm + residual), the batch norm's value
/// rounded to x's type first and the sum rounded once, as a separate add
/// would round them (a residual block's end).
bool batchNormAct(const TensorView& x, const TensorView& scale, const TensorView& bias,
                  const TensorView& mean, const TensorView& var, const TensorView& y,
                  const BatchNormParams& p, const Activation& act,
                  const TensorView* residual = nullptr);
bool batchNormTrainAct(const TensorView& x, const TensorView& scale, const TensorView& bias,
                       const TensorView& y, const TensorView& mean, const TensorView& var,
                       const BatchNormTrainParams& p, const Activation& act,
                       const TensorView* residual = nullptr);
/// batchNormGrad where the batch norm's result went through `act` (a Relu)
/// whose output is y: dy is the gradient of y, read through reluGrad(y, dy)
/// as the kernels load it. dx may be the bytes of y or of dy.
bool batchNormGradAct(const TensorView& x, const TensorView& scale, const TensorView& mean,
                      const TensorView& var, const TensorView& y, const TensorView& dy,
                      const TensorView& dx, const TensorView& dscale, const TensorView& dbias,
                      const BatchNormTrainParams& p, const Activation& act);

} // namespace lwrt::cuda
