// lwrt/shape_math.h - the shape arithmetic of the data-movement kernels
// defines: SliceDims, resolveSlices, sliceWalk, aroundAxis, gatherShape, AxisRows,
//          axisRows
//
// Where slice, concat, split and gather read and write, as the CPU kernels
// (runtime/cpu/TensorShapeKernels.cpp) and the host side of the CUDA
// kernels (runtime/cuda/TensorShapeKernels.cu) compute it, and the rows
// of the softmax kernels of both: one definition, host code only but for
// AxisRows::count.
#pragma once

#include "kernel_checks.h"
#include "shard_index.h"
#include "tensor_params.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace lwrt {

/// Where a slice reads its input: per axis, the first index, the step and
/// the count. A copy of lwcc's shape::resolveSlice and kernels::sliceMap
/// (the runtime cannot depend on the compiler): ONNX clamping of starts and
/// ends, negative ones counting from the end.
struct SliceDims {
  std::vector<int64_t> start, step, count;
};

inline bool resolveSlices(const std::vector<int64_t>& in, const SliceParams& p, SliceDims& out) {
  size_t rank = in.size(), n = p.starts.size();
  if (p.ends.size() != n || (p.axes && p.axes->size() != n) || (p.steps && p.steps->size() != n))
    return false;
  out.start.assign(rank, 0);
  out.step.assign(rank, 1);
  out.count = in;
  for (size_t k = 0; k < n; ++k) {
    int64_t axis = p.axes ? (*p.axes)[k] : static_cast<int64_t>(k);
    int64_t step = p.steps ? (*p.steps)[k] : 1;
    if (!normAxis(axis, static_cast<int64_t>(rank)) || step == 0)
      return false;
    int64_t dim = in[axis], start = p.starts[k], end = p.ends[k], count = 0;
    if (dim > 0) {
      if (start < 0)
        start += dim;
      if (end < 0)
        end += dim;
      // Counts as (distance - 1) / |step| + 1 in unsigned arithmetic, so that
      // huge steps cannot overflow.
      if (step > 0) {
        start = std::clamp<int64_t>(start, 0, dim);
        end = std::clamp<int64_t>(end, 0, dim);
        if (end > start)
          count = static_cast<int64_t>(
              static_cast<uint64_t>(end - start - 1) / static_cast<uint64_t>(step) + 1);
      } else {
        start = std::clamp<int64_t>(start, 0, dim - 1);
        end = std::clamp<int64_t>(end, -1, dim - 1);
        uint64_t magnitude = uint64_t{0} - static_cast<uint64_t>(step);
        if (start > end)
          count = static_cast<int64_t>(static_cast<uint64_t>(start - end - 1) / magnitude + 1);
      }
    } else {
      start = 0;
    }
    out.start[axis] = start;
    out.step[axis] = step;
    out.count[axis] = count;
  }
  return true;
}

/// The input strides and base offset of a slice of `in`.
inline void sliceWalk(const std::vector<int64_t>& in, const SliceDims& s, std::vector<int64_t>& st,
                      int64_t& base) {
  st = rowMajorStrides(in);
  base = 0;
  for (size_t d = 0; d < in.size(); ++d) {
    base += s.start[d] * st[d];
    st[d] *= s.step[d];
  }
}

/// Outer and inner extents around `axis` of `s`.
inline void aroundAxis(const std::vector<int64_t>& s, int64_t axis, int64_t& outer,
                       int64_t& inner) {
  outer = shapeProduct(s, 0, axis);
  inner = shapeProduct(s, axis + 1);
}

/// Whether a gather over `data` at `axis` with `indices` yields `out`.
inline bool gatherShape(const std::vector<int64_t>& data, const std::vector<int64_t>& indices,
                        int64_t axis, const std::vector<int64_t>& out) {
  std::vector<int64_t> want(data.begin(), data.begin() + axis);
  want.insert(want.end(), indices.begin(), indices.end());
  want.insert(want.end(), data.begin() + axis + 1, data.end());
  return want == out;
}

/// The rows along an axis: outer * inner rows of n elements, stride inner.
struct AxisRows {
  int64_t outer = 1, n = 0, inner = 1;
  LWRT_HOST_DEVICE int64_t count() const { return outer * inner; }
};

/// The rows of `shape` along `axis` (negative counts from the end); false
/// when the axis is out of range.
inline bool axisRows(const std::vector<int64_t>& shape, int64_t axis, AxisRows& r) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis >= rank)
    return false;
  r = AxisRows{};
  r.n = shape[axis];
  for (int64_t d = 0; d < axis; ++d)
    r.outer *= shape[d];
  for (int64_t d = axis + 1; d < rank; ++d)
    r.inner *= shape[d];
  return true;
}

} // namespace lwrt
