// lwrt/cpu_resize.h - the CPU kernels of resize and resize_grad
// defines: resize, resizeGrad (and, from lwrt/resize_math.h, ResizeParams and its enums)
//
// ONNX Resize and Upsample (ir/Ops.def's resize) and the adjoint, each
// element computed by lwrt/resize_math.h's resizeValue and resizeGradValue,
// which the reference interpreter and the CUDA kernels call too: the CPU
// and the interpreter agree bit for bit in double. F32 and F64, ranks 1 to
// 8; false (nothing written) when the shapes or the piece geometry of the
// params do not fit.
#pragma once

#include "lwrt/resize_math.h"
#include "lwrt/tensor.h"

namespace lwrt::cpu {

#include "lwrt/resize_decls.inc"

} // namespace lwrt::cpu
