// lwrt/cuda_encoding.h - the CUDA kernels of cumsum, tile, mod, sin, cos and the norm reductions
// defines: cumSum, tile, mod, sin, cos, reduceL1, reduceL2, reduceSumSquare
//
// The functions of lwrt/cpu_encoding.h with the same signatures, computing
// with the same functions of lwrt/encoding_math.h on the device; the
// conventions of lwrt/cuda_tensor.h hold (device pointers, work enqueued on
// the context's stream, false with the context's error set for what the
// kernel does not take, shapes of rank at most 8).
#pragma once

#include "lwrt/encoding_math.h"
#include "lwrt/tensor.h"
#include "lwrt/tensor_params.h"

namespace lwrt::cuda {

#include "lwrt/encoding_decls.inc"

} // namespace lwrt::cuda
