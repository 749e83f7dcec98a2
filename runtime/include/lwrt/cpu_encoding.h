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

using lwrt::CumSumParams;
using lwrt::ModParams;
using lwrt::ReduceParams;
using lwrt::TileParams;

/// x -> y of x's type and shape: F32, F64, I64, I32.
bool cumSum(const TensorView& x, const TensorView& y, const CumSumParams& p);
/// x -> y, x repeated along each dim: F32, F64, I64, I32, Bool.
bool tile(const TensorView& x, const TensorView& y, const TileParams& p);
/// (a, b) -> y with broadcasting: F32 and F64 with fmod = 1, I64 and I32.
bool mod(const TensorView& a, const TensorView& b, const TensorView& y, const ModParams& p);
/// x -> y, F32 and F64, one shape.
bool sin(const TensorView& x, const TensorView& y);
bool cos(const TensorView& x, const TensorView& y);
/// Reductions with reduceSum's axes and keepdims: F32, F64 (and I64, I32
/// but for reduceL2).
bool reduceL1(const TensorView& x, const TensorView& y, const ReduceParams& p);
bool reduceL2(const TensorView& x, const TensorView& y, const ReduceParams& p);
bool reduceSumSquare(const TensorView& x, const TensorView& y, const ReduceParams& p);

} // namespace lwrt::cpu
