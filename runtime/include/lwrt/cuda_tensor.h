// lwrt/cuda_tensor.h - the CUDA backend's elementwise, shape, reduction and training-update kernels
// defines: relu, leakyRelu, sigmoid, tanh, erf, exp, log, sqrt, reciprocal, clip, neg, abs, sign,
// add,
//   sub, mul, div, pow, reluGrad, leakyReluGrad, sigmoidGrad, tanhGrad, clipGrad, reduceMean,
//   reduceSum, copy, transpose, concat, slice, sliceGrad, split, gather, gatherGrad, gatherNd,
//   gatherNdGrad, expand, pad,
//   cast, fill, dropoutMask, sgdUpdate, adamUpdate, lrSchedule, allFinite
//
// The functions of lwrt/cpu_tensor.h with the same signatures and the same
// semantics, so that a generated trainer compiles against either backend by
// switching `using namespace lwrt::cpu` to `using namespace lwrt::cuda`.
// Read lwrt/cpu_tensor.h for what each op computes; the differences are:
//  - Views hold DEVICE pointers (also the scalar operands: lr, step).
//  - Work is enqueued asynchronously on the context's stream
//    (runtime/cuda/Context.h); nothing synchronizes or allocates, so every
//    kernel may run inside CUDA-graph capture.
//  - false means an element type or shape the kernel does not take (the
//    same host-side checks as the CPU backend, made before anything is
//    launched) or a failed launch; the message is in the context's error.
//  - Checks that need the data happen on the device and set the context's
//    error flag instead: a gather index out of range, an integer division by
//    zero or INT_MIN / -1. The results of such a step are unspecified.
//  - Kernels whose shapes do not collapse to at most 8 dimensions fail.
//  - concat's and split's lists are host lists of views of device memory;
//    fill's values travel in the launches' parameters (no host memory is
//    read when a captured graph replays); a copy onto itself does nothing.
//  - Float math is done in double and rounded once to the element type, as
//    on the CPU; device libm results (exp, tanh, pow, cos...) may differ
//    from the host's in the last bit of a double. Reductions are
//    deterministic run to run; dropout masks are bit-identical to the CPU's.
#pragma once

#include "lwrt/tensor.h"
#include "lwrt/tensor_params.h"

#include <cstdint>
#include <vector>

namespace lwrt::cuda {

#include "lwrt/tensor_decls.inc"

} // namespace lwrt::cuda
