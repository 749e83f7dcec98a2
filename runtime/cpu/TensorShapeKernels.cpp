//===- TensorShapeKernels.cpp - Data-movement kernels ---------------------===//
//
// The CPU kernels of lwrt/cpu_tensor.h that move elements without computing
// on them: copy, transpose, concat, slice (and slice_grad), split, gather
// (and gather_grad), gather_nd (and gather_nd_grad), expand and pad. Most work on raw elements of
// 1, 2, 4 or 8 bytes, so every element type is served by one instantiation per size.
//
//===----------------------------------------------------------------------===//
#include "Common.h"
#include "Parallel.h"
#include "lwrt/cpu_tensor.h"
#include "lwrt/kernel_checks.h"
#include "lwrt/shape_math.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <type_traits>

namespace lwrt::cpu {

namespace {

using Dims = std::vector<int64_t>;
using detail::rowMajor;

/// Calls fn(k, offset) for every element k (row-major) of `shape`, with
/// offset = base + sum idx[d] * st[d] (strides may be 0 or negative).
template <typename Fn> void walk(const Dims& shape, const Dims& st, int64_t base, Fn fn) {
  int64_t n = shapeProduct(shape);
  if (n == 0)
    return;
  size_t r = shape.size();
  if (r == 0) {
    fn(int64_t{0}, base);
    return;
  }
  int64_t inner = shape[r - 1], ist = st[r - 1];
  Dims idx(r, 0);
  int64_t off = base;
  for (int64_t k = 0; k < n; k += inner) {
    for (int64_t e = 0; e < inner; ++e)
      fn(k + e, off + e * ist);
    for (size_t d = r - 1; d-- > 0;) {
      off += st[d];
      if (++idx[d] < shape[d])
        break;
      off -= st[d] * shape[d];
      idx[d] = 0;
    }
  }
}

/// y[k] = x[offset(k)] for the offsets walk() gives over y's shape.
bool gatherWalk(const TensorView& x, const TensorView& y, const Dims& st, int64_t base) {
  return dispatchBytes(x.dtype, [&](auto tag) {
    using U = decltype(tag);
    const U* xs = x.as<U>();
    U* ys = y.as<U>();
    walk(y.shape, st, base, [&](int64_t k, int64_t o) { ys[k] = xs[o]; });
    return true;
  });
}

/// The indices as int64, each in [0, n) after negative ones are wrapped;
/// false for another dtype or an index out of range.
bool readIndices(const TensorView& t, int64_t n, Dims& out) {
  out.resize(t.numel());
  for (size_t j = 0; j < out.size(); ++j) {
    if (t.dtype == DType::I64)
      out[j] = t.as<int64_t>()[j];
    else if (t.dtype == DType::I32)
      out[j] = t.as<int32_t>()[j];
    else
      return false;
    if (out[j] < -n || out[j] >= n)
      return false;
    if (out[j] < 0)
      out[j] += n;
  }
  return true;
}

/// Where gather_nd reads: per index tuple t, the first element of its slice
/// in data (`from[t]`), and the slice size `inner`. False when the shapes
/// do not fit (result shape `out`) or an index is out of range.
bool gatherNdPlan(const Dims& data, const TensorView& indices, int64_t b, const Dims& out,
                  Dims& from, int64_t& inner) {
  const Dims& is = indices.shape;
  int64_t k = gatherNdDepth(data, indices, b, out);
  if (k == 0)
    return false;
  inner = shapeProduct(data, static_cast<size_t>(b + k));
  int64_t block = shapeProduct(data, static_cast<size_t>(b));
  int64_t tuples = shapeProduct(is, 0, is.size() - 1),
          batches = shapeProduct(data, 0, static_cast<size_t>(b));
  int64_t perBatch = batches ? tuples / batches : 0;
  const int64_t* ix = indices.as<int64_t>();
  from.resize(static_cast<size_t>(tuples));
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t offset = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t n = data[b + j], v = ix[t * k + j];
      if (v < -n || v >= n)
        return false;
      offset = offset * n + (v < 0 ? v + n : v);
    }
    from[t] = (t / perBatch) * block + offset * inner;
  }
  return true;
}

/// Concat and split move whole rows of `whole` (the concatenation) per
/// outer index: row-major parts, or nChw8c parts joined along the channels
/// with every part's channels a multiple of 8, whose rows are then the
/// same bytes (each image's part is a run of whole 8-channel blocks).
bool sameLayoutAlongChannels(const std::vector<TensorView>& parts, const TensorView& whole,
                             int64_t axis) {
  for (const TensorView& t : parts)
    if (t.layout != whole.layout)
      return false;
  if (whole.layout == Layout::RowMajor)
    return true;
  if (whole.layout != Layout::NChw8c || axis != 1 || whole.rank() != 4)
    return false;
  for (const TensorView& t : parts)
    if (t.rank() != 4 || t.shape[1] % 8 != 0)
      return false;
  return true;
}

} // namespace

bool copy(const TensorView& x, const TensorView& y) {
  // Another layout's bytes copy as they are, to a view of the same shape.
  if (x.dtype != y.dtype || x.numel() != y.numel() || x.layout != y.layout ||
      (x.layout != Layout::RowMajor && x.shape != y.shape))
    return false;
  const auto* from = static_cast<const char*>(x.data);
  auto* to = static_cast<char*>(y.data);
  const int64_t bytes = x.bytes();
  if (from == to || bytes <= 0)
    return true;
  if (from < to + bytes && to < from + bytes) { // overlapping: one memmove
    std::memmove(to, from, static_cast<size_t>(bytes));
    return true;
  }
  detail::parallelFor(bytes, int64_t{1} << 16, [&](int64_t first, int64_t last) {
    std::memcpy(to + first, from + first, static_cast<size_t>(last - first));
  });
  return true;
}

bool transpose(const TensorView& x, const TensorView& y, const TransposeParams& p) {
  if (!rowMajor({&x, &y}))
    return false;
  int64_t r = x.rank();
  if (x.dtype != y.dtype || y.rank() != r || static_cast<int64_t>(p.perm.size()) != r)
    return false;
  std::vector<bool> seen(r, false);
  Dims xst = rowMajorStrides(x.shape), st(r);
  for (int64_t d = 0; d < r; ++d) {
    int64_t q = p.perm[d];
    if (q < 0 || q >= r || seen[q] || y.shape[d] != x.shape[q])
      return false;
    seen[q] = true;
    st[d] = xst[q];
  }
  return gatherWalk(x, y, st, 0);
}

bool concat(const std::vector<TensorView>& xs, const TensorView& y, const ConcatParams& p) {
  int64_t axis = p.axis;
  if (xs.empty() || !normAxis(axis, y.rank()) || !sameLayoutAlongChannels(xs, y, axis))
    return false;
  int64_t total = 0;
  for (const TensorView& x : xs) {
    if (x.dtype != y.dtype || x.rank() != y.rank())
      return false;
    for (int64_t d = 0; d < y.rank(); ++d)
      if (d != axis && x.shape[d] != y.shape[d])
        return false;
    total += x.shape[axis];
  }
  if (total != y.shape[axis])
    return false;
  int64_t outer, inner, esize = dtypeSize(y.dtype);
  aroundAxis(y.shape, axis, outer, inner);
  const int64_t row = y.shape[axis] * inner * esize; // bytes of y per outer index
  detail::parallelFor(outer, std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, row)),
                      [&](int64_t first, int64_t last) {
                        for (int64_t o = first; o < last; ++o) {
                          auto* out = static_cast<char*>(y.data) + o * row;
                          for (const TensorView& x : xs) {
                            int64_t chunk = x.shape[axis] * inner * esize;
                            if (chunk > 0)
                              std::memcpy(out, static_cast<const char*>(x.data) + o * chunk,
                                          static_cast<size_t>(chunk));
                            out += chunk;
                          }
                        }
                      });
  return true;
}

bool split(const TensorView& x, const std::vector<TensorView>& ys, const SplitParams& p) {
  int64_t axis = p.axis;
  if (!normAxis(axis, x.rank()) || ys.size() != p.split.size() ||
      !sameLayoutAlongChannels(ys, x, axis))
    return false;
  int64_t total = 0;
  for (size_t i = 0; i < ys.size(); ++i) {
    Dims want = x.shape;
    want[axis] = p.split[i];
    if (ys[i].dtype != x.dtype || ys[i].shape != want || p.split[i] < 0)
      return false;
    total += p.split[i];
  }
  if (total != x.shape[axis])
    return false;
  int64_t outer, inner, esize = dtypeSize(x.dtype);
  aroundAxis(x.shape, axis, outer, inner);
  const int64_t row = x.shape[axis] * inner * esize; // bytes of x per outer index
  detail::parallelFor(outer, std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, row)),
                      [&](int64_t first, int64_t last) {
                        for (int64_t o = first; o < last; ++o) {
                          const auto* in = static_cast<const char*>(x.data) + o * row;
                          for (const TensorView& y : ys) {
                            int64_t chunk = y.shape[axis] * inner * esize;
                            if (chunk > 0)
                              std::memcpy(static_cast<char*>(y.data) + o * chunk, in,
                                          static_cast<size_t>(chunk));
                            in += chunk;
                          }
                        }
                      });
  return true;
}

bool slice(const TensorView& x, const TensorView& y, const SliceParams& p) {
  if (!rowMajor({&x, &y}))
    return false;
  SliceDims s;
  if (x.dtype != y.dtype || !resolveSlices(x.shape, p, s) || s.count != y.shape)
    return false;
  Dims st;
  int64_t base;
  sliceWalk(x.shape, s, st, base);
  return gatherWalk(x, y, st, base);
}

bool sliceGrad(const TensorView& dy, const TensorView& dx, const SliceParams& p) {
  if (!rowMajor({&dy, &dx}))
    return false;
  SliceDims s;
  if (dy.dtype != dx.dtype || !resolveSlices(dx.shape, p, s) || s.count != dy.shape)
    return false;
  Dims st;
  int64_t base;
  sliceWalk(dx.shape, s, st, base);
  if (dx.dtype != DType::F32 && dx.dtype != DType::F64 && dx.dtype != DType::BF16 &&
      dx.dtype != DType::F16)
    return false;
  // Zeros (all bits clear in every float type) and copies: by the bytes.
  return dispatchBytes(dx.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* in = dy.as<T>();
    T* out = dx.as<T>();
    std::fill(out, out + dx.numel(), T{0});
    // A slice reads each input element at most once: no sums.
    walk(dy.shape, st, base, [&](int64_t k, int64_t o) { out[o] = in[k]; });
    return true;
  });
}

bool gather(const TensorView& data, const TensorView& indices, const TensorView& y,
            const GatherParams& p) {
  if (!rowMajor({&data, &indices, &y}))
    return false;
  int64_t axis = p.axis;
  if (data.dtype != y.dtype || !normAxis(axis, data.rank()) ||
      !gatherShape(data.shape, indices.shape, axis, y.shape))
    return false;
  Dims ix;
  int64_t n = data.shape[axis];
  if (!readIndices(indices, n, ix))
    return false;
  int64_t outer, inner, esize = dtypeSize(data.dtype);
  aroundAxis(data.shape, axis, outer, inner);
  int64_t row = inner * esize;
  if (row == 0)
    return true;
  const auto* in = static_cast<const char*>(data.data);
  auto* out = static_cast<char*>(y.data);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j : ix) {
      std::memcpy(out, in + (o * n + j) * row, static_cast<size_t>(row));
      out += row;
    }
  return true;
}

bool gatherGrad(const TensorView& indices, const TensorView& dy, const TensorView& dx,
                const GatherParams& p) {
  if (!rowMajor({&indices, &dy, &dx}))
    return false;
  int64_t axis = p.axis;
  if (dy.dtype != dx.dtype || !normAxis(axis, dx.rank()) ||
      !gatherShape(dx.shape, indices.shape, axis, dy.shape))
    return false;
  Dims ix;
  int64_t n = dx.shape[axis];
  if (!readIndices(indices, n, ix))
    return false;
  int64_t outer, inner;
  aroundAxis(dx.shape, axis, outer, inner);
  return dispatchFloat(dx.dtype, [&](auto tag) {
    using T = decltype(tag);
    // Repeated indices sum in double, rounded once, as the reference does.
    std::vector<double> acc(dx.numel(), 0.0);
    const T* in = dy.as<T>();
    int64_t k = 0;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j : ix)
        for (int64_t e = 0; e < inner; ++e, ++k)
          acc[(o * n + j) * inner + e] += static_cast<double>(in[k]);
    T* out = dx.as<T>();
    for (size_t i = 0; i < acc.size(); ++i)
      out[i] = static_cast<T>(acc[i]);
    return true;
  });
}

bool gatherNd(const TensorView& data, const TensorView& indices, const TensorView& y,
              const GatherNdParams& p) {
  if (!rowMajor({&data, &indices, &y}))
    return false;
  Dims from;
  int64_t inner = 0;
  if (data.dtype != y.dtype ||
      !gatherNdPlan(data.shape, indices, p.batchDims, y.shape, from, inner))
    return false;
  int64_t row = inner * dtypeSize(data.dtype);
  if (row == 0)
    return true;
  const auto* in = static_cast<const char*>(data.data);
  auto* out = static_cast<char*>(y.data);
  for (size_t t = 0; t < from.size(); ++t)
    std::memcpy(out + static_cast<int64_t>(t) * row, in + from[t] * dtypeSize(data.dtype),
                static_cast<size_t>(row));
  return true;
}

bool gatherNdGrad(const TensorView& indices, const TensorView& dy, const TensorView& dx,
                  const GatherNdParams& p) {
  if (!rowMajor({&indices, &dy, &dx}))
    return false;
  Dims from;
  int64_t inner = 0;
  if (dy.dtype != dx.dtype || !gatherNdPlan(dx.shape, indices, p.batchDims, dy.shape, from, inner))
    return false;
  return dispatchFloat(dx.dtype, [&](auto tag) {
    using T = decltype(tag);
    // Slices taken twice sum in double, rounded once, as the reference does.
    std::vector<double> acc(static_cast<size_t>(dx.numel()), 0.0);
    const T* in = dy.as<T>();
    for (size_t t = 0; t < from.size(); ++t)
      for (int64_t e = 0; e < inner; ++e)
        acc[from[t] + e] += static_cast<double>(in[static_cast<int64_t>(t) * inner + e]);
    T* out = dx.as<T>();
    for (size_t i = 0; i < acc.size(); ++i)
      out[i] = static_cast<T>(acc[i]);
    return true;
  });
}

bool expand(const TensorView& x, const TensorView& y) {
  if (!rowMajor({&x, &y}))
    return false;
  size_t r = y.shape.size(), xr = x.shape.size();
  if (x.dtype != y.dtype || xr > r)
    return false;
  Dims st(r, 0);
  int64_t acc = 1;
  for (size_t d = xr; d-- > 0;) {
    int64_t xd = x.shape[d], yd = y.shape[r - xr + d];
    if (xd != 1 && xd != yd)
      return false;
    st[r - xr + d] = xd == 1 ? 0 : acc;
    acc *= xd;
  }
  return gatherWalk(x, y, st, 0);
}

bool pad(const TensorView& x, const TensorView& y, const PadParams& p) {
  if (!rowMajor({&x, &y}))
    return false;
  int64_t r = x.rank();
  if (x.dtype != y.dtype || y.rank() != r || static_cast<int64_t>(p.pads.size()) != 2 * r)
    return false;
  // Per axis, the input index each output index reads (-1: the constant).
  std::vector<Dims> src(r);
  for (int64_t d = 0; d < r; ++d) {
    int64_t n = x.shape[d], before = p.pads[d], after = p.pads[d + r];
    if (y.shape[d] != n + before + after)
      return false;
    if (p.mode == PadMode::Reflect && (before > 0 || after > 0) && (before >= n || after >= n))
      return false;
    if (p.mode == PadMode::Edge && n == 0 && y.shape[d] > 0)
      return false;
    src[d].resize(y.shape[d]);
    for (int64_t o = 0; o < y.shape[d]; ++o) {
      int64_t i = o - before;
      if (i < 0 || i >= n) {
        if (p.mode == PadMode::Constant)
          i = -1;
        else if (p.mode == PadMode::Edge)
          i = std::clamp<int64_t>(i, 0, n - 1);
        else // reflect, without repeating the edge
          while (i < 0 || i >= n)
            i = i < 0 ? -i : 2 * (n - 1) - i;
      }
      src[d][o] = i;
    }
  }
  if (x.dtype == DType::F16 || x.dtype == DType::BF16)
    return false;
  return dispatchBytes(x.dtype, [&](auto tag) {
    using U = decltype(tag);
    const U fill = padFillBits<U>(x.dtype, p.value);
    const U* xs = x.as<U>();
    U* ys = y.as<U>();
    int64_t n = y.numel();
    if (n == 0)
      return true;
    if (r == 0) {
      ys[0] = xs[0];
      return true;
    }
    Dims xst = rowMajorStrides(x.shape), idx(r, 0);
    int64_t inner = y.shape[r - 1];
    const Dims& last = src[r - 1];
    for (int64_t k = 0; k < n; k += inner) {
      int64_t base = 0;
      bool outside = false;
      for (int64_t d = 0; d + 1 < r; ++d) {
        int64_t i = src[d][idx[d]];
        outside |= i < 0;
        base += i * xst[d];
      }
      for (int64_t e = 0; e < inner; ++e)
        ys[k + e] = outside || last[e] < 0 ? fill : xs[base + last[e]];
      for (int64_t d = r - 1; d-- > 0;) {
        if (++idx[d] < y.shape[d])
          break;
        idx[d] = 0;
      }
    }
    return true;
  });
}

} // namespace lwrt::cpu
