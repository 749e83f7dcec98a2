// lwrt/cuda_language.h - the CUDA kernels of gather_elements, scatter_elements and nll_loss
// defines: gatherElements, scatterElements, nllLoss, nllLossGrad
//
// The functions of lwrt/cpu_language.h with the same signatures, walking
// the elements with the same structs of lwrt/language_math.h on the device;
// the conventions of lwrt/cuda_tensor.h hold (device pointers, work enqueued
// on the context's stream, false with the context's error set for what the
// kernel does not take; an index or target out of range sets the device
// error flag).
#pragma once

#include "lwrt/language_math.h"
#include "lwrt/tensor.h"

namespace lwrt::cuda {

#include "lwrt/language_decls.inc"

} // namespace lwrt::cuda
