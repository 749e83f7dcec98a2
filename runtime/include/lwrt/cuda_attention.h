// lwrt/cuda_attention.h - the CUDA kernels of attention and attention_grad
// defines: attention, attentionGrad
//
// The functions of lwrt/cpu_attention.h with the same signatures: one
// device thread per query row (forward, dq) or key row (dk, dv) with the
// formulas of lwrt/attention_math.h, so the CUDA results equal the CPU
// kernels' and the interpreter's. The conventions of lwrt/cuda_tensor.h
// hold (device pointers, work enqueued on the context's stream, false with
// the context's error set for what the kernel does not take).
#pragma once

#include "lwrt/attention_math.h"
#include "lwrt/tensor.h"

namespace lwrt::cuda {

#include "lwrt/attention_decls.inc"

} // namespace lwrt::cuda
