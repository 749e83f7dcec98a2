// lwrt/norm_math.h - batch norm's formulas, one definition
// defines: bnFactor, bnInvStd, bnNormalized, bnInputGrad
//
// The CPU kernels (runtime/cpu/NNNormKernels.cpp) and the own CUDA kernels
// (runtime/cuda/BatchNormKernels.cu) compute batch norm's training forward
// and backward with these, in double: per channel the factor a = scale /
// sqrt(var + eps), then y = a (x - mean) + b; backward, with xhat = (x -
// mean) invstd, dbias = sum dy, dscale = invstd sum dy (x - mean) and m
// values per channel, dx = scale invstd / m (m dy - dbias - xhat dscale).
// How the sums are taken (their order) stays each backend's own.
//
// Header-only and free of other lwrt headers except lwrt/shard_index.h;
// under nvcc it compiles for the host and the device.
#pragma once

#include "shard_index.h"

#include <math.h>

namespace lwrt {

/// 1 / sqrt(var + eps).
LWRT_HOST_DEVICE inline double bnInvStd(double var, double eps) { return 1.0 / sqrt(var + eps); }

/// The factor of the normalized value: scale / sqrt(var + eps).
LWRT_HOST_DEVICE inline double bnFactor(double scale, double var, double eps) {
  return scale / sqrt(var + eps);
}

/// y = a (x - mean) + b.
LWRT_HOST_DEVICE inline double bnNormalized(double x, double mean, double a, double b) {
  return a * (x - mean) + b;
}

/// dx of one element: a = scale invstd / m, m the values per channel.
LWRT_HOST_DEVICE inline double bnInputGrad(double x, double dy, double mean, double invstd,
                                           double a, double m, double dbias, double dscale) {
  double xhat = (x - mean) * invstd;
  return a * (m * dy - dbias - xhat * dscale);
}

} // namespace lwrt
