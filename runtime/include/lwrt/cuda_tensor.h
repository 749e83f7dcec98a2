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
bool leakyRelu(const TensorView& x, const TensorView& y, const LeakyReluParams& p);
bool sigmoid(const TensorView& x, const TensorView& y);
bool tanh(const TensorView& x, const TensorView& y);
bool erf(const TensorView& x, const TensorView& y);
bool exp(const TensorView& x, const TensorView& y);
bool log(const TensorView& x, const TensorView& y);
bool sqrt(const TensorView& x, const TensorView& y);
bool reciprocal(const TensorView& x, const TensorView& y);
bool clip(const TensorView& x, const TensorView& y, const ClipParams& p);
/// Numeric: F32, F64, I64, I32.
bool neg(const TensorView& x, const TensorView& y);
bool abs(const TensorView& x, const TensorView& y);
bool sign(const TensorView& x, const TensorView& y);

//===--- Binary with numpy broadcasting (a, b -> y) ------------------------===//

bool add(const TensorView& a, const TensorView& b, const TensorView& y);
bool sub(const TensorView& a, const TensorView& b, const TensorView& y);
bool mul(const TensorView& a, const TensorView& b, const TensorView& y);
/// Integers truncate toward zero; a zero divisor (or INT_MIN / -1) sets the
/// device error flag.
bool div(const TensorView& a, const TensorView& b, const TensorView& y);
/// Float only.
bool pow(const TensorView& a, const TensorView& b, const TensorView& y);

//===--- Backward elementwise (float; all three views of one type) --------===//

bool reluGrad(const TensorView& y, const TensorView& dy, const TensorView& dx);
bool leakyReluGrad(const TensorView& x, const TensorView& dy, const TensorView& dx,
                   const LeakyReluParams& p);
bool sigmoidGrad(const TensorView& y, const TensorView& dy, const TensorView& dx);
bool tanhGrad(const TensorView& y, const TensorView& dy, const TensorView& dx);
bool clipGrad(const TensorView& x, const TensorView& dy, const TensorView& dx, const ClipParams& p);

//===--- Reductions (numeric; sums in double or int64, fixed order) -------===//

bool reduceMean(const TensorView& x, const TensorView& y, const ReduceParams& p);
bool reduceSum(const TensorView& x, const TensorView& y, const ReduceParams& p);

//===--- Data movement -----------------------------------------------------===//

/// A copy onto itself (x.data == y.data) does nothing.
bool copy(const TensorView& x, const TensorView& y);
bool transpose(const TensorView& x, const TensorView& y, const TransposeParams& p);
/// xs is a host list of views of device memory.
bool concat(const std::vector<TensorView>& xs, const TensorView& y, const ConcatParams& p);
bool slice(const TensorView& x, const TensorView& y, const SliceParams& p);
bool sliceGrad(const TensorView& dy, const TensorView& dx, const SliceParams& p);
/// ys is a host list of views of device memory.
bool split(const TensorView& x, const std::vector<TensorView>& ys, const SplitParams& p);
/// ONNX GatherND: (data, indices I64 [..., k]) -> the slices the index
/// tuples address after batchDims shared leading dims; negative indices
/// count from the end.
bool gatherNd(const TensorView& data, const TensorView& indices, const TensorView& y,
              const GatherNdParams& p);
/// (indices, dy) -> d data (shape: input_shape): dy added at the gathered
/// slices, summed in double. Float only.
bool gatherNdGrad(const TensorView& indices, const TensorView& dy, const TensorView& dx,
                  const GatherNdParams& p);
/// An index out of range sets the device error flag.
bool gather(const TensorView& data, const TensorView& indices, const TensorView& y,
            const GatherParams& p);
bool gatherGrad(const TensorView& indices, const TensorView& dy, const TensorView& dx,
                const GatherParams& p);
bool expand(const TensorView& x, const TensorView& y);
bool pad(const TensorView& x, const TensorView& y, const PadParams& p);

//===--- Conversion and values ---------------------------------------------===//

bool cast(const TensorView& x, const TensorView& y);
/// The constant's values travel in the launches' parameters (no host
/// memory is read when a captured graph replays).
bool fill(const TensorView& y, const FillParams& p);

//===--- Randomness and optimizers -----------------------------------------===//

/// The step is read on the device.
bool dropoutMask(const TensorView& step, const TensorView& mask, const DropoutMaskParams& p);
/// lr is read on the device. Outputs may be their inputs (w' = w, m' = m, v' = v).
bool sgdUpdate(const TensorView& w, const TensorView& g, const TensorView& m, const TensorView& lr,
               const TensorView& wOut, const TensorView& mOut, const SgdParams& p);
/// lr and step are read on the device.
bool adamUpdate(const TensorView& w, const TensorView& g, const TensorView& m, const TensorView& v,
                const TensorView& lr, const TensorView& step, const TensorView& wOut,
                const TensorView& mOut, const TensorView& vOut, const AdamParams& p);
/// The step is read and lr written on the device.
bool lrSchedule(const TensorView& step, const TensorView& lr, const LrScheduleParams& p);
/// (xs: float tensors) -> y (Bool scalar): 1 when every element of every x
/// is finite, else 0 (dynamic loss scaling's overflow test).
bool allFinite(const std::vector<TensorView>& xs, const TensorView& y, const AllFiniteParams& p);

//===--- The step's schedule: streams and events ---------------------------===//

/// Work launched after this goes to stream `stream` (0: the main stream, on
/// which a step starts and ends).
bool setStream(int64_t stream);
/// Event `event` completes when the work launched so far on the current
/// stream has run.
bool recordEvent(int64_t event);
/// Work launched later on the current stream waits for the latest record of
/// `event`.
bool waitEvent(int64_t event);

} // namespace lwrt::cuda
