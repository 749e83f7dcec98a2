// lwrt/cpu_encoding.h - the CPU kernels of cumsum, tile, mod, sin, cos and the norm reductions
// defines: cumSum, tile, mod, sin, cos, reduceL1, reduceL2, reduceSumSquare
//
// One function per IR op (ir/Ops.def), computing with the functions of
// lwrt/encoding_math.h, which the reference interpreter and the CUDA
// kernels call too. The conventions of lwrt/cpu_tensor.h hold: true on
// success, false (nothing written) for element types or shapes the op does
// not take; result views preallocated; float math in double, rounded once.
#pragma once

#include "lwrt/encoding_math.h"
#include "lwrt/tensor.h"
#include "lwrt/tensor_params.h"

namespace lwrt::cpu {

#include "lwrt/encoding_decls.inc"

} // namespace lwrt::cpu
