// lwrt/cpu_grad_clip.h - the CPU kernels of gradient clipping by the global L2 norm
// defines: squareSum, clipCoef
//
// One function per IR op (ir/Ops.def), computing with the functions of
// lwrt/grad_clip_math.h, which the reference interpreter and the CUDA
// kernels call too. The conventions of lwrt/cpu_tensor.h hold: true on
// success, false (nothing written) for element types or shapes the op does
// not take; result views preallocated.
#pragma once

#include "lwrt/grad_clip_math.h"
#include "lwrt/tensor.h"

#include <vector>

namespace lwrt::cpu {

#include "lwrt/grad_clip_decls.inc"

} // namespace lwrt::cpu
