// lwrt/cpu_attention.h - the CPU kernels of attention and attention_grad
// defines: attention, attentionGrad
//
// One function per IR op (ir/Ops.def), one query row (forward, dq) or key
// row (dk, dv) at a time with the formulas of lwrt/attention_math.h, which
// the reference interpreter and the CUDA kernels call too. The rows of the
// batch and heads run on the thread pool, each row's sums in one order:
// the same bits on any number of threads. The conventions of
// lwrt/cpu_tensor.h hold: true on success, false (nothing written) for
// element types or shapes the op does not take; result views preallocated.
#pragma once

#include "lwrt/attention_math.h"
#include "lwrt/tensor.h"

namespace lwrt::cpu {

#include "lwrt/attention_decls.inc"

} // namespace lwrt::cpu
