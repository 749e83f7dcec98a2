// lwrt/lr_schedule.h - the learning-rate schedule, one formula for every backend
// defines: LrScheduleKind, LrScheduleParams, scheduledLr
//
// The reference interpreter (interp/TrainOps.cpp), the CPU and CUDA kernels
// of lr_schedule and the trainer's log all call scheduledLr, so the rate a
// step trains with is computed by one piece of code. Header-only and free of
// other lwrt headers but host_device.h: lwcc's own libraries include it from
// the source tree, and under nvcc it compiles for the host and the device.
#pragma once

#include "host_device.h"

#include <math.h>
#include <stdint.h>

namespace lwrt {

enum class LrScheduleKind : uint8_t { Constant, Step, Cosine };

/// The lr_schedule op's attributes (ir/Ops.def), with the IR's defaults.
struct LrScheduleParams {
  LrScheduleKind kind = LrScheduleKind::Constant;
  double base_lr = 0.01;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;
  int64_t step_size = 0;
  double gamma = 0.1;
  double min_lr = 0.0;
};

/// The learning rate of the step that follows `step` completed steps:
///  1. warm-up: base_lr * (step + 1) / warmup_steps while step < warmup_steps;
///  2. then, with t = step - warmup_steps:
///     constant: base_lr;
///     step:     base_lr * gamma^(t / step_size) (integer division; a
///               step_size below 1 is treated as constant);
///     cosine:   min_lr + (base_lr - min_lr) * (1 + cos(pi * min(1, t / span))) / 2
///               with span = max(1, total_steps - warmup_steps).
LWRT_HOST_DEVICE inline double scheduledLr(const LrScheduleParams& p, int64_t step) {
  if (step < p.warmup_steps)
    return p.base_lr * static_cast<double>(step + 1) / static_cast<double>(p.warmup_steps);
  int64_t t = step - p.warmup_steps;
  if (p.kind == LrScheduleKind::Step && p.step_size > 0)
    return p.base_lr * pow(p.gamma, static_cast<double>(t / p.step_size));
  if (p.kind == LrScheduleKind::Cosine) {
    int64_t steps = p.total_steps - p.warmup_steps;
    double span = static_cast<double>(steps < 1 ? 1 : steps);
    double q = static_cast<double>(t) / span;
    double frac = q < 1.0 ? q : 1.0;
    const double pi = 3.14159265358979323846;
    return p.min_lr + (p.base_lr - p.min_lr) * 0.5 * (1.0 + cos(pi * frac));
  }
  return p.base_lr;
}

} // namespace lwrt
