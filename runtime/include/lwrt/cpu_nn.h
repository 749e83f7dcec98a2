// lwrt/cpu_nn.h - the CPU backend's neural-network kernels
// defines: conv2d, conv2dAct, conv2dGradInput, conv2dGradFilter, gemm, matmul, maxPool2d,
// maxPool2dGrad,
//   avgPool2d, avgPool2dGrad, globalAvgPool, lrn, lrnGrad, batchNorm, batchNormAct,
//   batchNormTrain, batchNormTrainAct, batchNormGrad, layerNorm, layerNormGrad, softmax,
//   logSoftmax, softmaxGrad, logSoftmaxGrad, softmaxXent, softmaxXentGrad, mseLoss, mseLossGrad
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

// The parameter structs live in lwrt/nn_params.h (namespace lwrt, shared with
// the other backends); these make the lwrt::cpu:: spellings work too.
using lwrt::AvgPool2dParams;
using lwrt::BatchNormParams;
using lwrt::BatchNormTrainParams;
using lwrt::Conv2dParams;
using lwrt::GemmParams;
using lwrt::LayerNormParams;
using lwrt::LrnParams;
using lwrt::MaxPool2dParams;
using lwrt::SoftmaxParams;
using lwrt::XentParams;

//===--- Convolution ------------------------------------------------------===//

/// y[N,M,OH,OW] = conv(x[N,C,H,W], w[M,C/group,KH,KW]) (+ bias[M]); bias
/// may be null.
bool conv2d(const TensorView& x, const TensorView& w, const TensorView* bias, const TensorView& y,
            const Conv2dParams& p);
/// act(conv2d(x, w, bias)) (see Activation, lwrt/cpu_tensor.h).
bool conv2dAct(const TensorView& x, const TensorView& w, const TensorView* bias,
               const TensorView& y, const Conv2dParams& p, const Activation& act);
/// dx (shape: input_shape) from dy and w.
bool conv2dGradInput(const TensorView& dy, const TensorView& w, const TensorView& dx,
                     const Conv2dParams& p);
/// dw (shape: filter_shape) from x and dy.
bool conv2dGradFilter(const TensorView& x, const TensorView& dy, const TensorView& dw,
                      const Conv2dParams& p);

//===--- Linear algebra ---------------------------------------------------===//

/// y[M,N] = alpha * op(a) * op(b) + beta * c, c (null: none) broadcast to
/// [M,N] from rank 0, 1 or 2.
bool gemm(const TensorView& a, const TensorView& b, const TensorView* c, const TensorView& y,
          const GemmParams& p);
/// numpy matmul: 1-D operands are promoted (and the added dim dropped), the
/// batch dims broadcast.
bool matmul(const TensorView& a, const TensorView& b, const TensorView& y);

//===--- Pooling ----------------------------------------------------------===//

/// Windows with no input element give -inf.
bool maxPool2d(const TensorView& x, const TensorView& y, const MaxPool2dParams& p);
/// (x, dy) -> dx: each dy goes to the first maximum of its window, taps in
/// row-major order.
bool maxPool2dGrad(const TensorView& x, const TensorView& dy, const TensorView& dx,
                   const MaxPool2dParams& p);
/// The window is clipped to the padded input (the end pads), then to the
/// input; the divisor is the first area with count_include_pad, the second
/// without. A window with no element gives 0.
bool avgPool2d(const TensorView& x, const TensorView& y, const AvgPool2dParams& p);
bool avgPool2dGrad(const TensorView& dy, const TensorView& dx, const AvgPool2dParams& p);
/// x[N,C,...] -> y[N,C,1,...].
bool globalAvgPool(const TensorView& x, const TensorView& y);

//===--- Normalization ----------------------------------------------------===//

/// Cross-channel LRN of x[N,C,H,W]: the window holds (size-1)/2 channels
/// below and size-1-(size-1)/2 above.
bool lrn(const TensorView& x, const TensorView& y, const LrnParams& p);
/// (x, y, dy) -> dx.
bool lrnGrad(const TensorView& x, const TensorView& y, const TensorView& dy, const TensorView& dx,
             const LrnParams& p);
/// (x[N,C,...], scale, bias, mean, var [C]) -> y.
bool batchNorm(const TensorView& x, const TensorView& scale, const TensorView& bias,
               const TensorView& mean, const TensorView& var, const TensorView& y,
               const BatchNormParams& p);
/// act(batchNorm(...)).
bool batchNormAct(const TensorView& x, const TensorView& scale, const TensorView& bias,
                  const TensorView& mean, const TensorView& var, const TensorView& y,
                  const BatchNormParams& p, const Activation& act);
/// (x, scale, bias) -> (y, batch mean, batch population variance).
bool batchNormTrain(const TensorView& x, const TensorView& scale, const TensorView& bias,
                    const TensorView& y, const TensorView& mean, const TensorView& var,
                    const BatchNormTrainParams& p);
/// The same with y = act(batch norm of x).
bool batchNormTrainAct(const TensorView& x, const TensorView& scale, const TensorView& bias,
                       const TensorView& y, const TensorView& mean, const TensorView& var,
                       const BatchNormTrainParams& p, const Activation& act);
/// (x, scale, mean, var, dy) -> (dx, dscale, dbias).
bool batchNormGrad(const TensorView& x, const TensorView& scale, const TensorView& mean,
                   const TensorView& var, const TensorView& dy, const TensorView& dx,
                   const TensorView& dscale, const TensorView& dbias,
                   const BatchNormTrainParams& p);
/// (x, scale, bias) -> (y, mean, invStdDev) over the dims from p.axis on:
/// scale and bias of the normalized shape x.shape[axis:], the statistics of
/// x's shape with those dims set to 1 (kept in double while computed).
bool layerNorm(const TensorView& x, const TensorView& scale, const TensorView& bias,
               const TensorView& y, const TensorView& mean, const TensorView& invStdDev,
               const LayerNormParams& p);
/// (x, scale, mean, invStdDev, dy) -> (dx, dscale, dbias).
bool layerNormGrad(const TensorView& x, const TensorView& scale, const TensorView& mean,
                   const TensorView& invStdDev, const TensorView& dy, const TensorView& dx,
                   const TensorView& dscale, const TensorView& dbias, const LayerNormParams& p);

//===--- Softmax and losses -----------------------------------------------===//

bool softmax(const TensorView& x, const TensorView& y, const SoftmaxParams& p);
bool logSoftmax(const TensorView& x, const TensorView& y, const SoftmaxParams& p);
/// (y, dy) -> dx = y * (dy - sum(dy * y)).
bool softmaxGrad(const TensorView& y, const TensorView& dy, const TensorView& dx,
                 const SoftmaxParams& p);
/// (y, dy) -> dx = dy - exp(y) * sum(dy).
bool logSoftmaxGrad(const TensorView& y, const TensorView& dy, const TensorView& dx,
                    const SoftmaxParams& p);
/// (logits[N,K], labels I64 or I32 [N]) -> scalar mean cross-entropy
/// against (1 - E)·onehot(label) + E/K, E = p.labelSmoothing.
bool softmaxXent(const TensorView& logits, const TensorView& labels, const TensorView& loss,
                 const XentParams& p);
/// (logits, labels, dloss scalar) -> dlogits = (softmax - (1 - E)·onehot - E/K)
/// * dloss / N.
bool softmaxXentGrad(const TensorView& logits, const TensorView& labels, const TensorView& dloss,
                     const TensorView& dlogits, const XentParams& p);
/// (pred, target) -> scalar mean of squared differences (sum / max(1, n)).
bool mseLoss(const TensorView& pred, const TensorView& target, const TensorView& loss);
/// (pred, target, dloss scalar) -> dpred = 2 (pred - target) dloss / max(1, n).
bool mseLossGrad(const TensorView& pred, const TensorView& target, const TensorView& dloss,
                 const TensorView& dpred);

} // namespace lwrt::cpu
