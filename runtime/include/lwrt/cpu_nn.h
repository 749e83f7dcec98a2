// lwrt/cpu_nn.h - the CPU backend's neural-network kernels
// defines: conv2d, conv2dAct, conv2dGradInput, conv2dGradFilter, gemm, matmul, maxPool2d,
// maxPool2dGrad,
//   avgPool2d, avgPool2dGrad, globalAvgPool, lrn, lrnGrad, batchNorm, batchNormAct,
//   batchNormTrain, batchNormTrainAct, batchNormGrad, batchNormGradAct, layerNorm, layerNormGrad,
//   softmax, logSoftmax, softmaxGrad, logSoftmaxGrad, softmaxXent, softmaxXentGrad, mseLoss,
//   mseLossGrad
//
// One function per IR op (ir/Ops.def), computing what the reference
// interpreter computes (interp/Interpreter.cpp, interp/TrainOps.cpp). Operands
// and results are TensorViews in the IR's operand and result order; the
// parameter structs (lwrt/nn_params.h) mirror the op's attributes, with the
// IR's defaults.
// Attributes that only restate a result's shape (input_shape of
// conv2d_grad_input and avg_pool2d_grad, filter_shape of conv2d_grad_filter)
// are not repeated: the result view's shape is that attribute.
//
// Conventions:
//  - Every kernel returns true on success and false, writing nothing, when
//    it cannot run: an element type other than F32 or F64, operands of mixed
//    float types, shapes that do not fit together or do not match the
//    result views, or a label out of range (softmax_xent*).
//  - Result views are preallocated by the caller and fully overwritten.
//  - Float math is done in the tensors' element type (sums of many terms,
//    the statistics of batch_norm_train and the losses, in double). Float32
//    convolutions run on oneDNN, matrix products on OpenBLAS (cblas_sgemm /
//    cblas_dgemm), both on the calling thread's pool (lwrt/cpu_threads.h).
//  - Kernels may run concurrently on different threads. Each thread keeps
//    the oneDNN primitives it made (one per shape) for its later calls.
#pragma once

#include "lwrt/cpu_tensor.h"
#include "lwrt/nn_params.h"
#include "lwrt/tensor.h"

#include <cstdint>

namespace lwrt::cpu {

#include "lwrt/nn_decls.inc"

/// act(batchNorm(...)).
bool batchNormAct(const TensorView& x, const TensorView& scale, const TensorView& bias,
                  const TensorView& mean, const TensorView& var, const TensorView& y,
                  const BatchNormParams& p, const Activation& act);
/// The same with y = act(batch norm of x).
bool batchNormTrainAct(const TensorView& x, const TensorView& scale, const TensorView& bias,
                       const TensorView& y, const TensorView& mean, const TensorView& var,
                       const BatchNormTrainParams& p, const Activation& act);
/// batchNormGrad where the batch norm's result went through `act` (Relu
/// only), whose output is y: dy is the gradient of y, and the batch norm's
/// own gradient is reluGrad(y, dy) (dy where y > 0, else 0), computed as
/// it is read. dx may be the bytes of y or of dy (element by element).
bool batchNormGradAct(const TensorView& x, const TensorView& scale, const TensorView& mean,
                      const TensorView& var, const TensorView& y, const TensorView& dy,
                      const TensorView& dx, const TensorView& dscale, const TensorView& dbias,
                      const BatchNormTrainParams& p, const Activation& act);

} // namespace lwrt::cpu
