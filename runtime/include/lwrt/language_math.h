// lwrt/language_math.h - the index math of gather_elements, scatter_elements and nll_loss
// defines: kNoIgnoreIndex, GatherElementsParams, ScatterElementsParams, NllReduction,
//   NllLossParams, ElementsLines, makeElementsLines, NllWalk, makeNllWalk
//
// The ops of exported language models. The reference interpreter
// (interp/LanguageOps.cpp) and the CPU and CUDA kernels
// (runtime/cpu/LanguageKernels.cpp, runtime/cuda/LanguageKernels.cu) walk
// the elements with the structs here in the same order, sums in double, so
// the three give the same bits and a CPU test checks the CUDA arithmetic
// too.
//
// Header-only and free of other lwrt headers except lwrt/shard_index.h (for
// LWRT_HOST_DEVICE and kShardMaxRank); under nvcc it compiles for the host
// and the device.
#pragma once

#include "shard_index.h"

#include <stdint.h>

namespace lwrt {

/// The ignore_index of softmax_xent and nll_loss when none is set: no
/// label can equal it (labels are class numbers, and ONNX's ignore_index
/// an int64 attribute that the exporters set to -100).
constexpr int64_t kNoIgnoreIndex = INT64_MIN;

/// gather_elements (ONNX GatherElements) along `axis` (non-negative).
struct GatherElementsParams {
  int64_t axis = 0;
};

/// scatter_elements (ONNX ScatterElements) along `axis` (non-negative):
/// updates written over data (add = 0) or added to it (add = 1).
struct ScatterElementsParams {
  int64_t axis = 0;
  int64_t add = 0;
};

/// nll_loss's reduction, in the order of kNllReductionNames.
enum class NllReduction : int32_t { None, Sum, Mean };
inline constexpr const char* kNllReductionNames[] = {"none", "sum", "mean"};

/// nll_loss and nll_loss_grad.
struct NllLossParams {
  NllReduction reduction = NllReduction::Mean;
  int64_t ignoreIndex = kNoIgnoreIndex;
};

/// The lines of indices along the axis of a gather_elements or
/// scatter_elements: indices (and updates, and the result of a gather) have
/// `idxShape`, data has the strides `dataStride`; line l holds the elements
/// whose coordinates off the axis are l's, and those coordinates address
/// data's line too (indices are no larger than data off the axis). A line
/// reads or writes one line of data only, so lines run in parallel and each
/// in its own order. Plain data: a CUDA kernel takes it by value.
struct ElementsLines {
  int32_t rank = 0, axis = 0;
  int64_t idxShape[kShardMaxRank] = {};
  int64_t idxStride[kShardMaxRank] = {}, dataStride[kShardMaxRank] = {};
  /// The length of data's axis (indices count from its end when negative).
  int64_t axisLen = 1;
  /// Lines, and elements per line.
  int64_t lines = 0, perLine = 0;

  /// The offsets of line l's first element in indices and in data.
  LWRT_HOST_DEVICE void lineStart(int64_t l, int64_t& idx, int64_t& data) const {
    idx = 0;
    data = 0;
    for (int32_t d = rank - 1; d >= 0; --d) {
      if (d == axis)
        continue;
      int64_t i = l % idxShape[d];
      l /= idxShape[d];
      idx += i * idxStride[d];
      data += i * dataStride[d];
    }
  }
  /// The data offset of index value v from the line's data start, or -1
  /// when v is outside [-axisLen, axisLen).
  LWRT_HOST_DEVICE int64_t at(int64_t dataStart, int64_t v) const {
    if (v < -axisLen || v >= axisLen)
      return -1;
    if (v < 0)
      v += axisLen;
    return dataStart + v * dataStride[axis];
  }
};

/// The lines of `idxShape` along `axis` into data of `dataShape` (both of
/// rank `rank`), or false for a rank above kShardMaxRank, a bad axis, or
/// indices larger than data off the axis.
inline bool makeElementsLines(int rank, const int64_t* dataShape, const int64_t* idxShape,
                              int64_t axis, ElementsLines& w) {
  if (rank < 1 || rank > kShardMaxRank || axis < 0 || axis >= rank)
    return false;
  w = ElementsLines{};
  w.rank = rank;
  w.axis = static_cast<int32_t>(axis);
  w.axisLen = dataShape[axis];
  int64_t is = 1, ds = 1, total = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (d != axis && idxShape[d] > dataShape[d])
      return false;
    w.idxShape[d] = idxShape[d];
    w.idxStride[d] = is;
    w.dataStride[d] = ds;
    is *= idxShape[d];
    ds *= dataShape[d];
    total *= idxShape[d];
  }
  w.perLine = idxShape[axis];
  w.lines = w.perLine == 0 ? 0 : total / w.perLine;
  return true;
}

/// nll_loss over input [N, C, d...] and target [N, d...]: target element j
/// (row-major) is sample j / inner at spatial position j % inner, and
/// picks input element ((j / inner) C + class) inner + j % inner.
struct NllWalk {
  int64_t targets = 0, classes = 0, inner = 1;
  int64_t ignoreIndex = kNoIgnoreIndex;

  /// The input offset target j picks for class t.
  LWRT_HOST_DEVICE int64_t inputAt(int64_t j, int64_t t) const {
    return ((j / inner) * classes + t) * inner + j % inner;
  }
  /// Whether class t is ignored, or a valid class (else the target is bad).
  LWRT_HOST_DEVICE bool ignored(int64_t t) const { return t == ignoreIndex; }
  LWRT_HOST_DEVICE bool valid(int64_t t) const { return t >= 0 && t < classes; }
  /// The weight of target class t: 0 when ignored, weight[t] (1 without weights).
  template <typename T> LWRT_HOST_DEVICE double weightOf(int64_t t, const T* weight) const {
    if (ignored(t))
      return 0.0;
    return weight ? static_cast<double>(weight[t]) : 1.0;
  }
  /// The loss of target j of class t: -weight input[...], 0 when ignored.
  template <typename T>
  LWRT_HOST_DEVICE double term(const T* input, int64_t j, int64_t t, const T* weight) const {
    if (ignored(t))
      return 0.0;
    return -weightOf(t, weight) * static_cast<double>(input[inputAt(j, t)]);
  }
};

/// The walk of an nll_loss with input of `rank` >= 2 dims `inputShape`.
inline NllWalk makeNllWalk(int rank, const int64_t* inputShape, int64_t ignoreIndex) {
  NllWalk w;
  w.classes = inputShape[1];
  w.ignoreIndex = ignoreIndex;
  w.targets = inputShape[0];
  for (int d = 2; d < rank; ++d) {
    w.inner *= inputShape[d];
    w.targets *= inputShape[d];
  }
  return w;
}

} // namespace lwrt
