// lwrt/nn_params.h - the parameter structs of the neural-network kernels
// defines: Conv2dParams, MaxPool2dParams, AvgPool2dParams, LrnParams, GemmParams, SoftmaxParams,
//   XentParams, BatchNormParams, BatchNormTrainParams
//
// Shared by every backend (lwrt/cpu_nn.h, lwrt/cuda_nn.h), so that a
// generated trainer spells its parameters the same way whichever backend it
// is compiled against. The fields mirror the IR op's attributes (ir/Ops.def),
// with the IR's defaults.
#pragma once

#include "language_math.h"

#include <cstdint>

namespace lwrt {

/// conv2d, conv2d_grad_input and conv2d_grad_filter. Pads: [top, left,
/// bottom, right].
struct Conv2dParams {
  int64_t strides[2] = {1, 1};
  int64_t pads[4] = {0, 0, 0, 0};
  int64_t dilations[2] = {1, 1};
  int64_t group = 1;
};

/// max_pool2d and max_pool2d_grad. ceil_mode only shapes the output, which
/// the caller's views already reflect; it is kept for fidelity.
struct MaxPool2dParams {
  int64_t kernel[2] = {1, 1};
  int64_t strides[2] = {1, 1};
  int64_t pads[4] = {0, 0, 0, 0};
  int64_t dilations[2] = {1, 1};
  int64_t ceil_mode = 0;
};

/// avg_pool2d and avg_pool2d_grad.
struct AvgPool2dParams {
  int64_t kernel[2] = {1, 1};
  int64_t strides[2] = {1, 1};
  int64_t pads[4] = {0, 0, 0, 0};
  int64_t ceil_mode = 0;
  int64_t count_include_pad = 0;
};

/// lrn and lrn_grad.
struct LrnParams {
  int64_t size = 1;
  double alpha = 1e-4;
  double beta = 0.75;
  double bias = 1.0;
};

struct GemmParams {
  int64_t transA = 0;
  int64_t transB = 0;
  double alpha = 1.0;
  double beta = 1.0;
};

/// softmax, log_softmax, softmax_grad and log_softmax_grad. A negative
/// axis counts from the end.
struct SoftmaxParams {
  int64_t axis = -1;
};

/// softmax_xent and softmax_xent_grad: the target distribution is
/// (1 - labelSmoothing)·onehot(label) + labelSmoothing / K; rows whose label
/// is ignoreIndex count for nothing (the mean is over the others).
struct XentParams {
  double labelSmoothing = 0;
  int64_t ignoreIndex = kNoIgnoreIndex;
};

/// batch_norm (inference). momentum does not affect inference.
struct BatchNormParams {
  double epsilon = 1e-5;
  double momentum = 0.9;
};

/// batch_norm_train and batch_norm_grad.
struct BatchNormTrainParams {
  double epsilon = 1e-5;
};

/// layer_norm and layer_norm_grad: normalized over the dims from axis on.
struct LayerNormParams {
  int64_t axis = 0;
  double epsilon = 1e-5;
};

} // namespace lwrt
