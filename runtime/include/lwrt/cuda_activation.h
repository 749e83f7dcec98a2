// lwrt/cuda_activation.h - the CUDA kernels of the activations, prelu and max/min
// defines: hardSwish, hardSigmoid, mish, softplus, softsign, elu, selu, celu, thresholdedRelu
//   (each with its ...Grad), prelu, preluGrad, maximum, minimum, maximumGrad, minimumGrad,
//   compare, where
//
// The functions of lwrt/cpu_activation.h with the same signatures, computing
// with the same functions of lwrt/activation_math.h on the device; the
// conventions of lwrt/cuda_tensor.h hold (device pointers, work enqueued on
// the context's stream, false with the context's error set for what the
// kernel does not take, shapes of rank at most 8).
#pragma once

#include "lwrt/activation_math.h"
#include "lwrt/tensor.h"

namespace lwrt::cuda {

#include "lwrt/activation_decls.inc"

} // namespace lwrt::cuda
