// lwrt/cuda_resize.h - the CUDA kernels of resize and resize_grad
// defines: resize, resizeGrad (and, from lwrt/resize_math.h, ResizeParams and its enums)
//
// The functions of lwrt/cpu_resize.h with the same signatures: one thread
// per result element (per dx element for the gradient, which gathers
// without atomics), computing with lwrt/resize_math.h as the CPU does; the
// conventions of lwrt/cuda_tensor.h hold.
#pragma once

#include "lwrt/resize_math.h"
#include "lwrt/tensor.h"

namespace lwrt::cuda {

#include "lwrt/resize_decls.inc"

} // namespace lwrt::cuda
