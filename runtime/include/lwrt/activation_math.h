// lwrt/activation_math.h - the math of the activations, prelu, max/min, compare, one definition
// defines: ActivationParams, LWRT_ACTIVATIONS, HardSwishMath, HardSigmoidMath, MishMath,
//   SoftplusMath, SoftsignMath, EluMath, SeluMath, CeluMath, ThresholdedReluMath,
//   leakyReluGradValue, clipGradValue, preluValue, preluGradX, preluGradSlope,
//   extremumValue, extremumGradWeight, CompareKind, kCompareKindNames, CompareParams,
//   compareValue, BroadcastIndex, makeBroadcastIndex
//
// The reference interpreter (interp/ActivationOps.cpp) and the CPU and CUDA
// kernels (runtime/cpu/ActivationKernels.cpp, runtime/cuda/ActivationKernels.cu)
// all compute these ops with the functions here, in double, so the three
// cannot disagree and a CPU test checks the CUDA arithmetic too.
//
// At a kink each backward function gives what PyTorch's backward computes
// there (checked with PyTorch 2.15 in float64): leaky_relu and prelu pass
// the negative slope at 0 (x > 0 takes the identity); clip passes nothing at
// either bound (hardtanh, relu6 and clamp with scalar bounds all do so);
// hard_swish passes 0 at x = -3 and the identity at x = 3; hard_sigmoid
// passes nothing at either end of its ramp; elu and selu take their negative
// branch at 0 (alpha, gamma * alpha), celu gives 1 there; thresholded_relu
// passes nothing at its threshold; max and min split the gradient in halves
// between equal operands, as torch.maximum and torch.minimum do.
//
// Header-only and free of other lwrt headers except lwrt/shard_index.h (for
// LWRT_HOST_DEVICE); under nvcc it compiles for the host and the device.
#pragma once

#include "shard_index.h"

#include <math.h>

namespace lwrt {

/// The attributes of the unary activations (ir/Ops.def; unused fields keep
/// their defaults): hard_sigmoid's alpha and beta, elu's, celu's and
/// thresholded_relu's alpha, selu's alpha and gamma.
struct ActivationParams {
  double alpha = 0.0;
  double beta = 0.0;
  double gamma = 0.0;
};

/// Every unary activation of this header: X(IR op enum, runtime function name).
#define LWRT_ACTIVATIONS(X)                                                                        \
  X(HardSwish, hardSwish)                                                                          \
  X(HardSigmoid, hardSigmoid)                                                                      \
  X(Mish, mish)                                                                                    \
  X(Softplus, softplus)                                                                            \
  X(Softsign, softsign)                                                                            \
  X(Elu, elu)                                                                                      \
  X(Selu, selu)                                                                                    \
  X(Celu, celu)                                                                                    \
  X(ThresholdedRelu, thresholdedRelu)

/// x * relu6(x + 3) / 6, as PyTorch's hardswish (ONNX HardSwish).
struct HardSwishMath {
  static LWRT_HOST_DEVICE double forward(double x, const ActivationParams&) {
    return x * fmin(fmax(x + 3.0, 0.0), 6.0) / 6.0;
  }
  static LWRT_HOST_DEVICE double backward(double x, double dy, const ActivationParams&) {
    if (x <= -3.0)
      return 0.0;
    return x < 3.0 ? dy * (x / 3.0 + 0.5) : dy;
  }
};

/// max(0, min(1, alpha x + beta)); the slope passes strictly inside the ramp.
struct HardSigmoidMath {
  static LWRT_HOST_DEVICE double forward(double x, const ActivationParams& p) {
    return fmin(fmax(p.alpha * x + p.beta, 0.0), 1.0);
  }
  static LWRT_HOST_DEVICE double backward(double x, double dy, const ActivationParams& p) {
    double v = p.alpha * x + p.beta;
    return v > 0.0 && v < 1.0 ? dy * p.alpha : 0.0;
  }
};

/// log(1 + exp(x)), without overflow for large x.
inline LWRT_HOST_DEVICE double softplusValue(double x) {
  return fmax(x, 0.0) + log1p(exp(-fabs(x)));
}
inline LWRT_HOST_DEVICE double sigmoidValue(double x) {
  return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
}

struct SoftplusMath {
  static LWRT_HOST_DEVICE double forward(double x, const ActivationParams&) {
    return softplusValue(x);
  }
  static LWRT_HOST_DEVICE double backward(double x, double dy, const ActivationParams&) {
    return dy * sigmoidValue(x);
  }
};

/// x tanh(softplus(x)).
struct MishMath {
  static LWRT_HOST_DEVICE double forward(double x, const ActivationParams&) {
    return x * tanh(softplusValue(x));
  }
  static LWRT_HOST_DEVICE double backward(double x, double dy, const ActivationParams&) {
    double t = tanh(softplusValue(x));
    return dy * (t + x * sigmoidValue(x) * (1.0 - t * t));
  }
};

/// x / (1 + |x|).
struct SoftsignMath {
  static LWRT_HOST_DEVICE double forward(double x, const ActivationParams&) {
    return x / (1.0 + fabs(x));
  }
  static LWRT_HOST_DEVICE double backward(double x, double dy, const ActivationParams&) {
    double d = 1.0 + fabs(x);
    return dy / (d * d);
  }
};

/// x > 0 ? x : alpha (exp(x) - 1).
struct EluMath {
  static LWRT_HOST_DEVICE double forward(double x, const ActivationParams& p) {
    return x > 0 ? x : p.alpha * expm1(x);
  }
  static LWRT_HOST_DEVICE double backward(double x, double dy, const ActivationParams& p) {
    return x > 0 ? dy : dy * p.alpha * exp(x);
  }
};

/// gamma (x > 0 ? x : alpha (exp(x) - 1)).
struct SeluMath {
  static LWRT_HOST_DEVICE double forward(double x, const ActivationParams& p) {
    return p.gamma * (x > 0 ? x : p.alpha * expm1(x));
  }
  static LWRT_HOST_DEVICE double backward(double x, double dy, const ActivationParams& p) {
    return x > 0 ? dy * p.gamma : dy * p.gamma * p.alpha * exp(x);
  }
};

/// max(0, x) + min(0, alpha (exp(x / alpha) - 1)).
struct CeluMath {
  static LWRT_HOST_DEVICE double forward(double x, const ActivationParams& p) {
    return x > 0 ? x : p.alpha * expm1(x / p.alpha);
  }
  static LWRT_HOST_DEVICE double backward(double x, double dy, const ActivationParams& p) {
    return x > 0 ? dy : dy * exp(x / p.alpha);
  }
};

/// x > alpha ? x : 0.
struct ThresholdedReluMath {
  static LWRT_HOST_DEVICE double forward(double x, const ActivationParams& p) {
    return x > p.alpha ? x : 0.0;
  }
  static LWRT_HOST_DEVICE double backward(double x, double dy, const ActivationParams& p) {
    return x > p.alpha ? dy : 0.0;
  }
};

/// leaky_relu_grad: the identity where x > 0, alpha elsewhere (0 included).
inline LWRT_HOST_DEVICE double leakyReluGradValue(double x, double dy, double alpha) {
  return x > 0 ? dy : alpha * dy;
}

/// clip_grad: passes strictly between the bounds.
inline LWRT_HOST_DEVICE double clipGradValue(double x, double dy, double lo, double hi) {
  return x > lo && x < hi ? dy : 0.0;
}

/// prelu: x > 0 ? x : slope x; its gradients by x and by the slope.
inline LWRT_HOST_DEVICE double preluValue(double x, double slope) { return x > 0 ? x : slope * x; }
inline LWRT_HOST_DEVICE double preluGradX(double x, double slope, double dy) {
  return x > 0 ? dy : slope * dy;
}
inline LWRT_HOST_DEVICE double preluGradSlope(double x, double dy) { return x > 0 ? 0.0 : x * dy; }

/// max(a, b) (min when isMin); NaN wins, as numpy's and PyTorch's do.
inline LWRT_HOST_DEVICE double extremumValue(double a, double b, bool isMin) {
  return (isMin ? a < b : a > b) || a != a ? a : b;
}

/// The share of max(a, b)'s gradient that goes to `a` (min's when isMin):
/// all of it where a wins, none where it loses, half at a tie.
inline LWRT_HOST_DEVICE double extremumGradWeight(double a, double b, bool isMin) {
  if (a == b)
    return 0.5;
  return (isMin ? a < b : a > b) ? 1.0 : 0.0;
}

/// compare's kinds, and their names in the IR (ONNX's op names, snake case):
/// the comparisons, then the logical ops of bool operands (And, Or, Xor).
enum class CompareKind : int32_t {
  Greater,
  GreaterOrEqual,
  Less,
  LessOrEqual,
  Equal,
  And,
  Or,
  Xor
};
inline constexpr const char* kCompareKindNames[] = {
    "greater", "greater_or_equal", "less", "less_or_equal", "equal", "and", "or", "xor"};
struct CompareParams {
  CompareKind kind = CompareKind::Greater;
};

/// Whether compare of `kind` takes operands of bool (true: equal and the
/// logical kinds) and of other types (false: the comparisons).
inline LWRT_HOST_DEVICE bool compareTakes(CompareKind k, bool isBool) {
  bool logical = k == CompareKind::And || k == CompareKind::Or || k == CompareKind::Xor;
  return isBool ? logical || k == CompareKind::Equal : !logical;
}

template <typename T> LWRT_HOST_DEVICE bool compareValue(T a, T b, CompareKind k) {
  switch (k) {
  case CompareKind::Greater:
    return a > b;
  case CompareKind::GreaterOrEqual:
    return a >= b;
  case CompareKind::Less:
    return a < b;
  case CompareKind::LessOrEqual:
    return a <= b;
  case CompareKind::Equal:
    return a == b;
  case CompareKind::And:
    return a && b;
  case CompareKind::Or:
    return a || b;
  case CompareKind::Xor:
    return (a != 0) != (b != 0);
  }
  return false;
}

/// Where element k (row-major) of a result reads an operand that numpy
/// broadcasting stretches to the result's shape. Plain data: a CUDA kernel
/// takes it by value.
struct BroadcastIndex {
  int32_t rank = 0;
  int64_t shape[kShardMaxRank] = {};  ///< the result's shape
  int64_t stride[kShardMaxRank] = {}; ///< the operand's strides, 0 where broadcast
  LWRT_HOST_DEVICE int64_t operator()(int64_t k) const {
    int64_t at = 0;
    for (int d = rank - 1; d >= 0; --d) {
      at += (k % shape[d]) * stride[d];
      k /= shape[d];
    }
    return at;
  }
};

/// The BroadcastIndex of an operand of shape `from` (rank `fromRank`) read
/// by a result of shape `to`; false when `from` does not broadcast to `to`
/// or the rank is above kShardMaxRank.
inline bool makeBroadcastIndex(int rank, const int64_t* to, int fromRank, const int64_t* from,
                               BroadcastIndex& out) {
  if (rank > kShardMaxRank || fromRank > rank || rank < 0 || fromRank < 0)
    return false;
  out = BroadcastIndex{};
  out.rank = rank;
  int64_t acc = 1;
  for (int d = rank - 1; d >= 0; --d) {
    out.shape[d] = to[d];
    int fd = d - (rank - fromRank);
    if (fd < 0)
      continue;
    if (from[fd] != to[d] && from[fd] != 1)
      return false;
    out.stride[d] = from[fd] == 1 ? 0 : acc;
    acc *= from[fd];
  }
  return true;
}

} // namespace lwrt
