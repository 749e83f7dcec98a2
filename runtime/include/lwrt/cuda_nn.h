// lwrt/cuda_nn.h - the CUDA backend's neural-network kernels
// defines: conv2d, conv2dAct, conv2dGradInput, conv2dGradFilter, gemm, matmul, maxPool2d,
//   maxPool2dGrad, avgPool2d, avgPool2dGrad, globalAvgPool, lrn, lrnGrad, batchNorm,
//   batchNormTrain, batchNormGrad, layerNorm, layerNormGrad, softmax, logSoftmax, softmaxGrad,
//   logSoftmaxGrad, softmaxXent, softmaxXentGrad, mseLoss, mseLossGrad
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

// The shared parameter structs, under lwrt::cuda:: too.
using lwrt::Activation;
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
/// y = act(conv(x, w) (+ bias)): a convolution and the ReLU that writes
/// over its result, which nothing else reads (codegen fuses the two for
/// CUDA trainers); one cuDNN plan when an engine takes the fused graph.
/// `act` is Relu or None (conv2d); a Clip is refused: cuDNN's plans here
/// apply no clip, so codegen leaves it unfused on CUDA.
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
/// (x, scale, bias) -> (y, batch mean, batch population variance).
bool batchNormTrain(const TensorView& x, const TensorView& scale, const TensorView& bias,
                    const TensorView& y, const TensorView& mean, const TensorView& var,
                    const BatchNormTrainParams& p);
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
/// against (1 - E)·onehot(label) + E/K, E = p.labelSmoothing. The
/// scalars here and below (loss, dloss) are device memory too.
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

} // namespace lwrt::cuda
