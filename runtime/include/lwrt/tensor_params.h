// lwrt/tensor_params.h - the parameter structs of the tensor and training-update kernels
// defines: LeakyReluParams, ClipParams, ReduceParams, TransposeParams, ConcatParams, SliceParams,
//   SplitParams, GatherParams, PadMode, PadParams, FillParams, DropoutMaskParams, SgdParams,
//   dropoutPiece, AdamParams, Activation (and, from lwrt/lr_schedule.h, LrScheduleKind,
//   LrScheduleParams)
//
// Shared by every backend (lwrt/cpu_tensor.h, lwrt/cuda_tensor.h), so that a
// generated trainer spells its parameters the same way whichever backend it
// is compiled against. The fields mirror the IR op's attributes (ir/Ops.def),
// with the IR's defaults.
#pragma once

#include "lwrt/lr_schedule.h"
#include "lwrt/shard_index.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

namespace lwrt {

/// A relu or clip that a kernel applies to what it writes: codegen fuses a
/// relu or clip that is the only use of a convolution's, batch norm's or
/// add's result into it (CPU: conv2dAct, batchNormAct, batchNormTrainAct,
/// addAct; CUDA: conv2dAct, relu only), which then writes the activation's
/// result view.
struct Activation {
  enum Kind : uint8_t { None, Relu, Clip };
  Kind kind = None;
  double min = 0, max = 0; ///< Clip's bounds
  /// v through the activation, as the relu and clip kernels compute it.
  template <typename T> T apply(T v) const {
    if (kind == Relu)
      return v > T(0) ? v : T(0);
    if (kind == Clip) {
      double d = static_cast<double>(v);
      d = d < min ? min : d;
      return static_cast<T>(max < d ? max : d);
    }
    return v;
  }
};

struct LeakyReluParams {
  double alpha = 0.01;
};

/// clip and clip_grad.
struct ClipParams {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
};

/// reduce_mean and reduce_sum: without axes every axis is reduced; axes may
/// be negative. keepdims only shapes the result view.
struct ReduceParams {
  std::optional<std::vector<int64_t>> axes;
  int64_t keepdims = 1;
};

struct TransposeParams {
  std::vector<int64_t> perm;
};

/// allFinite (no settings; a params struct like every operand-list kernel's).
struct AllFiniteParams {};

/// concat. A negative axis counts from the end (also for split and gather).
struct ConcatParams {
  int64_t axis = 0;
};

/// slice and slice_grad, with ONNX clamping of starts and ends; axes
/// default to 0, 1, ... and steps to 1.
struct SliceParams {
  std::vector<int64_t> starts;
  std::vector<int64_t> ends;
  std::optional<std::vector<int64_t>> axes;
  std::optional<std::vector<int64_t>> steps;
};

struct SplitParams {
  int64_t axis = 0;
  std::vector<int64_t> split;
};

/// gather and gather_grad.
struct GatherParams {
  int64_t axis = 0;
};

/// gather_nd and gather_nd_grad: leading dims shared by data and indices.
struct GatherNdParams {
  int64_t batchDims = 0;
};

enum class PadMode : uint8_t { Constant, Reflect, Edge };

/// pads: [begin of each axis..., end of each axis...]; negative pads crop.
struct PadParams {
  std::vector<int64_t> pads;
  PadMode mode = PadMode::Constant;
  double value = 0.0;
};

/// The constant op's value: `value` for float results, `ivalue` for
/// integer and bool ones; one element is splatted.
struct FillParams {
  std::vector<double> value;
  std::vector<int64_t> ivalue;
};

/// A mask that is a piece of a larger one (a shard on one of several
/// devices) gives the whole mask's shape and its own offsets in it; its
/// elements are keyed by their index in the whole mask (lwrt/dropout.h).
/// Both empty: the mask is whole.
struct DropoutMaskParams {
  double ratio = 0.5;
  int64_t seed = 0;
  std::vector<int64_t> whole_shape;
  std::vector<int64_t> offsets;
};

/// The ShardIndex of a dropout mask of `shape` under `p` (both backends
/// check a mask's params with it before computing anything): false when
/// only one of whole_shape and offsets is given, their ranks differ from
/// the mask's, or the piece does not fit in the whole mask.
inline bool dropoutPiece(const std::vector<int64_t>& shape, const DropoutMaskParams& p,
                         ShardIndex& piece) {
  if (p.whole_shape.empty() && p.offsets.empty())
    return makeShardIndex(0, nullptr, nullptr, nullptr, piece);
  if (p.whole_shape.size() != shape.size() || p.offsets.size() != shape.size())
    return false;
  return makeShardIndex(static_cast<int>(shape.size()), shape.data(), p.whole_shape.data(),
                        p.offsets.data(), piece);
}

/// sgd_update. A parameter group's step takes lr * lr_scale. grad_scale,
/// when set, points to a scalar of the weight's type where the update runs
/// (gradient clipping's factor, ir/FusedOps.h's gradScaleOf): the update
/// reads each gradient element as mul would give it, T(g * scale).
struct SgdParams {
  double momentum = 0.9;
  double weight_decay = 5e-4;
  int64_t nesterov = 0;
  double lr_scale = 1.0;
  const void* grad_scale = nullptr;
};

struct AdamParams {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0.0;
  int64_t decoupled = 0;
  double lr_scale = 1.0;
  const void* grad_scale = nullptr;
};

} // namespace lwrt
