// lwrt/cpu_activation.h - the CPU kernels of the activations, prelu and max/min
// defines: hardSwish, hardSigmoid, mish, softplus, softsign, elu, selu, celu, thresholdedRelu
//   (each with its ...Grad), prelu, preluGrad, maximum, minimum, maximumGrad, minimumGrad,
//   compare, where
//
// One function per IR op (ir/Ops.def), computing with the functions of
// lwrt/activation_math.h, which the reference interpreter and the CUDA
// kernels call too. The conventions of lwrt/cpu_tensor.h hold: true on
// success, false (nothing written) for element types or shapes the op does
// not take; result views preallocated; float math in double, rounded once.
#pragma once

#include "lwrt/activation_math.h"
#include "lwrt/tensor.h"

namespace lwrt::cpu {

#include "lwrt/activation_decls.inc"

} // namespace lwrt::cpu
