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

// The parameter structs live in lwrt/tensor_params.h (namespace lwrt, shared
// with the other backends); these make the lwrt::cpu:: spellings work too.
using lwrt::Activation;
using lwrt::AdamParams;
using lwrt::AllFiniteParams;
using lwrt::ClipParams;
using lwrt::ConcatParams;
using lwrt::DropoutMaskParams;
using lwrt::FillParams;
using lwrt::GatherNdParams;
using lwrt::GatherParams;
using lwrt::LeakyReluParams;
using lwrt::LrScheduleKind;
using lwrt::LrScheduleParams;
using lwrt::PadMode;
using lwrt::PadParams;
using lwrt::ReduceParams;
using lwrt::SgdParams;
using lwrt::SliceParams;
using lwrt::SplitParams;
using lwrt::TransposeParams;

//===--- Unary (x -> y, same type and shape) -------------------------------===//

bool relu(const TensorView& x, const TensorView& y);
/// x >= 0 ? x : alpha x.
bool leakyRelu(const TensorView& x, const TensorView& y, const LeakyReluParams& p);
bool sigmoid(const TensorView& x, const TensorView& y);
bool tanh(const TensorView& x, const TensorView& y);
bool erf(const TensorView& x, const TensorView& y);
bool exp(const TensorView& x, const TensorView& y);
bool log(const TensorView& x, const TensorView& y);
bool sqrt(const TensorView& x, const TensorView& y);
bool reciprocal(const TensorView& x, const TensorView& y);
/// min(max(x, min), max).
bool clip(const TensorView& x, const TensorView& y, const ClipParams& p);
/// Numeric: F32, F64, I64, I32.
bool neg(const TensorView& x, const TensorView& y);
bool abs(const TensorView& x, const TensorView& y);
bool sign(const TensorView& x, const TensorView& y);

//===--- Binary with numpy broadcasting (a, b -> y) ------------------------===//

bool add(const TensorView& a, const TensorView& b, const TensorView& y);
/// act(a + b), float only (see Activation).
bool addAct(const TensorView& a, const TensorView& b, const TensorView& y, const Activation& act);
bool sub(const TensorView& a, const TensorView& b, const TensorView& y);
bool mul(const TensorView& a, const TensorView& b, const TensorView& y);
/// Integers truncate toward zero; a zero divisor (or INT_MIN / -1) fails.
bool div(const TensorView& a, const TensorView& b, const TensorView& y);
/// Float only.
bool pow(const TensorView& a, const TensorView& b, const TensorView& y);

//===--- Backward elementwise (float; all three views of one type) --------===//

/// (y, dy) -> dx = y > 0 ? dy : 0.
bool reluGrad(const TensorView& y, const TensorView& dy, const TensorView& dx);
/// (x, dy) -> dx = x > 0 ? dy : alpha dy (PyTorch's rule at 0).
bool leakyReluGrad(const TensorView& x, const TensorView& dy, const TensorView& dx,
                   const LeakyReluParams& p);
/// (y, dy) -> dx = dy y (1 - y).
bool sigmoidGrad(const TensorView& y, const TensorView& dy, const TensorView& dx);
/// (y, dy) -> dx = dy (1 - y^2).
bool tanhGrad(const TensorView& y, const TensorView& dy, const TensorView& dx);
/// (x, dy) -> dx = min < x < max ? dy : 0 (nothing at a bound, as PyTorch).
bool clipGrad(const TensorView& x, const TensorView& dy, const TensorView& dx, const ClipParams& p);

//===--- Reductions (numeric; sums in double or int64) ---------------------===//

/// Integer means truncate toward zero.
bool reduceMean(const TensorView& x, const TensorView& y, const ReduceParams& p);
bool reduceSum(const TensorView& x, const TensorView& y, const ReduceParams& p);

//===--- Data movement -----------------------------------------------------===//

/// reshape, flatten, identity and inference dropout: same type and element count.
bool copy(const TensorView& x, const TensorView& y);
/// y[i] = x[i permuted]: y.shape[d] = x.shape[perm[d]].
bool transpose(const TensorView& x, const TensorView& y, const TransposeParams& p);
bool concat(const std::vector<TensorView>& xs, const TensorView& y, const ConcatParams& p);
bool slice(const TensorView& x, const TensorView& y, const SliceParams& p);
/// (dy) -> dx (shape: input_shape): dy scattered into zeros. Float only.
bool sliceGrad(const TensorView& dy, const TensorView& dx, const SliceParams& p);
/// One result per split size, in order.
bool split(const TensorView& x, const std::vector<TensorView>& ys, const SplitParams& p);
/// (data, indices I64 or I32) -> y; indices may be negative (from the end).
bool gather(const TensorView& data, const TensorView& indices, const TensorView& y,
            const GatherParams& p);
/// (indices, dy) -> d data (shape: input_shape): dy added at the gathered
/// positions, summed in double. Float only.
bool gatherGrad(const TensorView& indices, const TensorView& dy, const TensorView& dx,
                const GatherParams& p);
/// ONNX GatherND: (data, indices I64 [..., k]) -> the slices the index
/// tuples address after batchDims shared leading dims; negative indices
/// count from the end.
bool gatherNd(const TensorView& data, const TensorView& indices, const TensorView& y,
              const GatherNdParams& p);
/// (indices, dy) -> d data (shape: input_shape): dy added at the gathered
/// slices, summed in double. Float only.
bool gatherNdGrad(const TensorView& indices, const TensorView& dy, const TensorView& dx,
                  const GatherNdParams& p);
/// Numpy broadcasting of x to y's shape.
bool expand(const TensorView& x, const TensorView& y);
/// Reflect pads mirror without repeating the edge; edge pads repeat it.
bool pad(const TensorView& x, const TensorView& y, const PadParams& p);

//===--- Conversion and values ---------------------------------------------===//

/// Between F32, F64, I64, I32 and Bool: float to integer truncates, to bool
/// tests != 0, integers wrap to I32.
bool cast(const TensorView& x, const TensorView& y);
/// Fills y with the constant's value(s).
bool fill(const TensorView& y, const FillParams& p);

//===--- Randomness and optimizers -----------------------------------------===//

/// (step: I64 or I32 scalar) -> mask (F32 or F64) of 0 and 1/(1-ratio):
/// element k is kept when dropoutUniform(seed, step, K) >= ratio, K its
/// index in the whole mask (lwrt/dropout.h; p.whole_shape, p.offsets).
bool dropoutMask(const TensorView& step, const TensorView& mask, const DropoutMaskParams& p);
/// (w, g, m, lr scalar) -> (w', m'): g' = g + wd w; m' = momentum m + g';
/// w' = w - lr (nesterov ? g' + momentum m' : m'). w' may be w and m' may
/// be m (the memory plan writes updates in place); likewise for Adam below.
bool sgdUpdate(const TensorView& w, const TensorView& g, const TensorView& m, const TensorView& lr,
               const TensorView& wOut, const TensorView& mOut, const SgdParams& p);
/// (w, g, m, v, lr scalar, step int scalar) -> (w', m', v'): Adam with bias
/// correction at t = step + 1; AdamW (w *= 1 - lr wd) when decoupled.
bool adamUpdate(const TensorView& w, const TensorView& g, const TensorView& m, const TensorView& v,
                const TensorView& lr, const TensorView& step, const TensorView& wOut,
                const TensorView& mOut, const TensorView& vOut, const AdamParams& p);
/// (step: int scalar) -> lr (F32 or F64 scalar).
bool lrSchedule(const TensorView& step, const TensorView& lr, const LrScheduleParams& p);
/// (xs: float tensors) -> y (Bool scalar): 1 when every element of every x
/// is finite, else 0 (dynamic loss scaling's overflow test).
bool allFinite(const std::vector<TensorView>& xs, const TensorView& y, const AllFiniteParams& p);

//===--- The step's schedule: streams and events ---------------------------===//

/// The CPU runs a step on one thread in program order, which honours
/// every schedule: these only check their arguments.
/// Work launched after this goes to stream `stream` (0: the main stream, on
/// which a step starts and ends).
bool setStream(int64_t stream);
/// Event `event` completes when the work launched so far on the current
/// stream has run.
bool recordEvent(int64_t event);
/// Work launched later on the current stream waits for the latest record of
/// `event`.
bool waitEvent(int64_t event);

} // namespace lwrt::cpu
