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

using lwrt::ResizeCoord;
using lwrt::ResizeMode;
using lwrt::ResizeNearest;
using lwrt::ResizeParams;

/// x -> y, y's shape the result's.
bool resize(const TensorView& x, const TensorView& y, const ResizeParams& p);
/// dy (y's shape) -> dx (x's shape).
bool resizeGrad(const TensorView& dy, const TensorView& dx, const ResizeParams& p);

} // namespace lwrt::cuda
