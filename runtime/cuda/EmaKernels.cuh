// cuda/EmaKernels.cuh - the weights' moving average on the GPU (not installed)
// defines: emaLerp
#pragma once

#include "lwrt/tensor.h"

#include <cstdint>

namespace lwrt::cuda {

/// ema[i] += weight * (value[i] - ema[i]) for `count` elements of `type`
/// (F32 or F64), on the current context's stream: the trainer's --ema update
/// of one range of a device's state. False with the context's error set.
bool emaLerp(void* ema, const void* value, int64_t count, DType type, double weight);

} // namespace lwrt::cuda
