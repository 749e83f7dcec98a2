// lwrt/grad_clip_math.h - the math of gradient clipping by the global L2 norm
// defines: SquareSumParams, ClipCoefParams, kClipNormEpsilon, squareTerm, ClipResult,
//   clipCoefficient
//
// torch.nn.utils.clip_grad_norm_(params, max_norm): total = the L2 norm of
// every gradient element of every param; each gradient is multiplied by
// min(max_norm / (total + 1e-6), 1). lwcc computes it as square_sum ops (a
// device's sum of squares, in double) and one clip_coef op per device that
// turns the sum over every device into the norm and the factor. The
// reference interpreter (interp/GradClipOps.cpp) and the CPU and CUDA kernels
// (runtime/cpu/GradClipKernels.cpp, runtime/cuda/GradClipKernels.cu) call
// the functions here.
//
// Header-only and free of other lwrt headers except lwrt/shard_index.h (for
// LWRT_HOST_DEVICE); under nvcc it compiles for the host and the device.
#pragma once

#include "shard_index.h"

#include <math.h>

namespace lwrt {

/// square_sum (no settings; a params struct like every operand-list kernel's).
struct SquareSumParams {};

/// clip_coef: the largest norm the gradients keep (> 0).
struct ClipCoefParams {
  double max_norm = 1.0;
};

/// PyTorch's guard against a zero norm in max_norm / (norm + eps).
constexpr double kClipNormEpsilon = 1e-6;

/// One element's term of the sum of squares, in double.
template <typename T> LWRT_HOST_DEVICE double squareTerm(T x) {
  const double d = static_cast<double>(x);
  return d * d;
}

template <typename T> struct ClipResult {
  T norm; ///< sqrt(sum of squares)
  T coef; ///< the factor every gradient is multiplied by
};

/// The norm and the factor from the sum of squares over every device, in
/// the gradients' type T (float32 as PyTorch computes them, or double):
/// coef = min(max_norm / (norm + 1e-6), 1). A non-finite norm gives a
/// non-finite factor (PyTorch's default, error_if_nonfinite=False, scales
/// by it too).
template <typename T> LWRT_HOST_DEVICE ClipResult<T> clipCoefficient(T sumSquares, double maxNorm) {
  ClipResult<T> r;
  r.norm = static_cast<T>(sqrt(static_cast<double>(sumSquares)));
  const T coef = static_cast<T>(maxNorm) / (r.norm + static_cast<T>(kClipNormEpsilon));
  r.coef = coef > static_cast<T>(1) ? static_cast<T>(1) : coef; // NaN stays NaN
  return r;
}

} // namespace lwrt
