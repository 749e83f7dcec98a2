// lwrt/cpu_language.h - the CPU kernels of gather_elements, scatter_elements and nll_loss
// defines: gatherElements, scatterElements, nllLoss, nllLossGrad
//
// One function per IR op (ir/Ops.def), walking the elements with the
// structs of lwrt/language_math.h, which the reference interpreter and the
// CUDA kernels use too. The conventions of lwrt/cpu_tensor.h hold: true on
// success, false (nothing written) for element types or shapes the op does
// not take, or indices and targets out of range; result views
// preallocated; sums in double, rounded once.
#pragma once

#include "lwrt/language_math.h"
#include "lwrt/tensor.h"

namespace lwrt::cpu {

#include "lwrt/language_decls.inc"

} // namespace lwrt::cpu
