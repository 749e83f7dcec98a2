// lwrt/cuda_grad_clip.h - the CUDA kernels of gradient clipping by the global L2 norm
// defines: squareSum, clipCoef
//
// The functions of lwrt/cpu_grad_clip.h with the same signatures, computing
// with the same functions of lwrt/grad_clip_math.h on the device; the
// conventions of lwrt/cuda_tensor.h hold (device pointers, work enqueued on
// the context's stream, false with the context's error set for what the
// kernel does not take). The sum of squares runs in a fixed order: the same
// bits in every run (not the CPU's order, so not its bits).
#pragma once

#include "lwrt/grad_clip_math.h"
#include "lwrt/tensor.h"

#include <vector>

namespace lwrt::cuda {

#include "lwrt/grad_clip_decls.inc"

} // namespace lwrt::cuda
