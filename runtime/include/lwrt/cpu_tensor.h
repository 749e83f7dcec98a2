// lwrt/cpu_tensor.h - the CPU backend's elementwise, shape, reduction and training-update kernels
// defines: relu, leakyRelu, sigmoid, tanh, erf, exp, log, sqrt, reciprocal, clip, neg, abs, sign,
// add, addAct, Activation,
//   sub, mul, div, pow, reluGrad, leakyReluGrad, sigmoidGrad, tanhGrad, clipGrad, reduceMean,
//   reduceSum, copy, transpose, concat, slice, sliceGrad, split, gather, gatherGrad, gatherNd,
//   gatherNdGrad, expand, pad,
//   cast, fill, dropoutMask, sgdUpdate, adamUpdate, lrSchedule, allFinite
//
// One function per IR op (ir/Ops.def), computing what the reference
// interpreter computes (interp/Interpreter.cpp, interp/TrainOps.cpp). Operands
// and results are TensorViews in the IR's operand and result order; the
// parameter structs (lwrt/tensor_params.h) mirror the op's attributes, with
// the IR's defaults.
// Attributes that only restate a result's shape (reshape's shape, expand's
// shape, input_shape of slice_grad and gather_grad, dropout_mask's shape and
// dtype, cast's to) are not repeated: the result view carries them.
//
// Conventions (those of lwrt/cpu_nn.h):
//  - Every kernel returns true on success and false, writing nothing, when
//    it cannot run: an element type the op does not take, operands of mixed
//    types, shapes that do not fit together or do not match the result
//    views, an integer division by zero, a gather index out of range.
//  - Result views are preallocated by the caller and fully overwritten.
//    Elementwise kernels (unary, binary, backward, updates) may write in
//    place over an operand of the result's shape.
//  - Float kernels take F32 and F64; the ops the IR allows on integers
//    (add, sub, mul, div, neg, abs, sign, reductions, cast) also take I64 and
//    I32, and data movement (copy, transpose, concat, slice, split, gather,
//    expand, pad) takes every element type of one, two, four or eight bytes.
//    Bool tensors hold one byte, 0 or 1.
//  - Float math is done in double and rounded once to the element type, as
//    the reference does, so tanh_grad's 1 - y*y and the optimizer updates
//    lose nothing to f32 cancellation. Integer division truncates toward
//    zero; integer add, sub, mul and neg wrap.
//  - Kernels keep no state and may run concurrently on different threads.
#pragma once

#include "lwrt/tensor.h"
#include "lwrt/tensor_params.h"

#include <cstdint>
#include <vector>

namespace lwrt::cpu {

#include "lwrt/tensor_decls.inc"

/// act(a + b), float only (see Activation).
bool addAct(const TensorView& a, const TensorView& b, const TensorView& y, const Activation& act);

// setStream, recordEvent and waitEvent: the CPU runs a step on one thread in
// program order, which honours every schedule; they only check their arguments.

} // namespace lwrt::cpu
