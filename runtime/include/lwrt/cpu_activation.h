// lwrt/cpu_activation.h - the CPU kernels of the activations, prelu and max/min
// defines: hardSwish, hardSigmoid, mish, softplus, softsign, elu, selu, celu, thresholdedRelu
//   (each with its ...Grad), prelu, preluGrad, maximum, minimum, maximumGrad, minimumGrad,
//   compare, where
//
// One function per IR op (ir/Ops.def), computing with the functions of
// lwrt/activation_math.h, which the reference interpreter and the CUDA
// kernels call too. The conventions of lwrt/cpu_tensor.h hold: true on
// success, false (nothing written) for element types or shapes the op does
// not take; result views preallocated; float math in double, rounded once.
#pragma once

#include "lwrt/activation_math.h"
#include "lwrt/tensor.h"

namespace lwrt::cpu {

using lwrt::ActivationParams;
using lwrt::CompareKind;
using lwrt::CompareParams;

/// x -> y and (x, dy) -> dx of each activation, F32 and F64, one shape.
#define LWRT_DECLARE_ACTIVATION(E, fn)                                                             \
  bool fn(const TensorView& x, const TensorView& y, const ActivationParams& p);                    \
  bool fn##Grad(const TensorView& x, const TensorView& dy, const TensorView& dx,                   \
                const ActivationParams& p);
LWRT_ACTIVATIONS(LWRT_DECLARE_ACTIVATION)
#undef LWRT_DECLARE_ACTIVATION

/// (x, slope) -> y: x > 0 ? x : slope x, the slope broadcast to x.
bool prelu(const TensorView& x, const TensorView& slope, const TensorView& y);
/// (x, slope, dy) -> (dx, dslope in x's shape).
bool preluGrad(const TensorView& x, const TensorView& slope, const TensorView& dy,
               const TensorView& dx, const TensorView& dslope);
/// Elementwise max and min with broadcasting: F32, F64, I64, I32.
bool maximum(const TensorView& a, const TensorView& b, const TensorView& y);
bool minimum(const TensorView& a, const TensorView& b, const TensorView& y);
/// (a, b, dy) -> (da, db) in dy's shape; ties split the gradient in halves.
bool maximumGrad(const TensorView& a, const TensorView& b, const TensorView& dy,
                 const TensorView& da, const TensorView& db);
bool minimumGrad(const TensorView& a, const TensorView& b, const TensorView& dy,
                 const TensorView& da, const TensorView& db);
/// (a, b) -> Bool y with broadcasting: F32, F64, I64, I32 (and Bool for equal).
bool compare(const TensorView& a, const TensorView& b, const TensorView& y, const CompareParams& p);
/// (condition Bool, x, y) -> out with broadcasting of all three: x and y of
/// one type (F32, F64, I64, I32, Bool).
bool where(const TensorView& condition, const TensorView& x, const TensorView& y,
           const TensorView& out);

} // namespace lwrt::cpu
