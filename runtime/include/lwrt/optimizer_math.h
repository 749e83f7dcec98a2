// lwrt/optimizer_math.h - the optimizers' update of one element, one definition
// defines: SgdHyper, SgdElement, sgdElement, AdamHyper, AdamCorrection, adamCorrection,
//   AdamElement, adamElement, GradKind, gradElement
//
// The reference interpreter (interp/TrainOps.cpp) and the CPU and CUDA
// kernels of sgd_update and adam_update (runtime/cpu/TensorKernels.cpp,
// runtime/cuda/TensorKernels.cu) all update each element with the
// functions here, in double, so a CPU test checks the CUDA arithmetic too.
//
// `rate` is the step's learning rate (the lr operand) times the param's
// lr_scale (its parameter group's lr multiplier, 1 by default); the weight
// decay is the param's group_decay where the param has one (>= 0), the op's
// weight_decay otherwise. Each caller resolves both before calling.
//
// A mixed-precision step's update reads its gradient in bf16 or fp16 (the
// backward's type) beside float32 weights and state: gradElement widens
// each element exactly, as a cast to float32 before the update would.
//
// Header-only and free of other lwrt headers except lwrt/shard_index.h (for
// LWRT_HOST_DEVICE) and lwrt/bf16.h and lwrt/f16.h; under nvcc it compiles
// for the host and the device.
#pragma once

#include "bf16.h"
#include "f16.h"
#include "shard_index.h"

#include <math.h>

namespace lwrt {

/// sgd_update's attributes, the weight decay resolved.
struct SgdHyper {
  double momentum = 0.9;
  double weightDecay = 0.0;
  bool nesterov = false;
};

/// One element's new weight and momentum.
struct SgdElement {
  double w, m;
};

/// g' = g + wd w; m' = momentum m + g'; w' = w - rate (nesterov ? g' + momentum m' : m').
inline LWRT_HOST_DEVICE SgdElement sgdElement(double w, double g, double m, double rate,
                                              const SgdHyper& h) {
  double gk = g + h.weightDecay * w;
  double mk = h.momentum * m + gk;
  return {w - rate * (h.nesterov ? gk + h.momentum * mk : mk), mk};
}

/// adam_update's attributes, the weight decay resolved; decoupled is AdamW.
struct AdamHyper {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weightDecay = 0.0;
  bool decoupled = false;
};

/// The bias corrections 1 - beta1^t and 1 - beta2^t at t = step + 1 (the
/// step operand counts the steps taken before this one).
struct AdamCorrection {
  double c1, c2;
};
inline LWRT_HOST_DEVICE AdamCorrection adamCorrection(const AdamHyper& h, int64_t step) {
  double t = static_cast<double>(step + 1);
  return {1.0 - pow(h.beta1, t), 1.0 - pow(h.beta2, t)};
}

/// One element's new weight and first and second moments.
struct AdamElement {
  double w, m, v;
};

/// Adam (decay added to the gradient) or AdamW (decay applied to the weight
/// before the step): m' = b1 m + (1-b1) g; v' = b2 v + (1-b2) g^2;
/// w' = w - rate (m' / c1) / (sqrt(v' / c2) + eps).
inline LWRT_HOST_DEVICE AdamElement adamElement(double w, double g, double m, double v, double rate,
                                                const AdamHyper& h, AdamCorrection c) {
  if (h.decoupled)
    w *= 1.0 - rate * h.weightDecay;
  else
    g += h.weightDecay * w;
  double mk = h.beta1 * m + (1.0 - h.beta1) * g;
  double vk = h.beta2 * v + (1.0 - h.beta2) * g * g;
  return {w - rate * (mk / c.c1) / (sqrt(vk / c.c2) + h.epsilon), mk, vk};
}

/// The element type of an update's gradient: its weight's own, or bf16 or
/// fp16 beside float32 weights (sgd_update's and adam_update's rule).
enum class GradKind : uint8_t { Same, Bf16, F16 };

/// Element k of a gradient of kind `kind` beside weights of type T.
template <typename T>
inline LWRT_HOST_DEVICE double gradElement(const void* g, GradKind kind, int64_t k) {
  if (kind == GradKind::Bf16)
    return bf16ToFloat(static_cast<const uint16_t*>(g)[k]);
  if (kind == GradKind::F16)
    return f16ToFloat(static_cast<const uint16_t*>(g)[k]);
  return static_cast<const T*>(g)[k];
}

/// Element k of the gradient an update reads: gradElement, or where
/// `scale` (a scalar of type T: gradient clipping's factor) is given, the
/// product mul gives, rounded to T once.
template <typename T>
inline LWRT_HOST_DEVICE double scaledGradElement(const void* g, GradKind kind, int64_t k,
                                                 const T* scale) {
  const double e = gradElement<T>(g, kind, k);
  return scale ? static_cast<double>(static_cast<T>(e * static_cast<double>(*scale))) : e;
}

} // namespace lwrt
