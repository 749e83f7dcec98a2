//===- TensorShapeKernels.cu - Data-movement kernels ----------------------===//
//
// The CUDA kernels of lwrt/cuda_tensor.h that move elements without
// computing on them: copy, transpose, concat, slice (and slice_grad), split,
// gather (and gather_grad), expand and pad. The host-side checks are those
// of runtime/cpu/TensorShapeKernels.cpp. Most kernels work on raw elements
// of 1, 2, 4 or 8 bytes, so every element type is served by one
// instantiation per size.
//
// transpose, slice and expand are one strided gather: thread k writes
// result element k from the input offset that a walk over the result's
// shape gives (dims merged where the strides allow, at most 8 remaining,
// passed by value). Copies, concat and split are cudaMemcpy(2D)Async calls,
// which stream capture records as graph nodes.
//
//===----------------------------------------------------------------------===//
#include "cuda/TensorSupport.cuh"
#include "lwrt/cuda_tensor.h"
#include "lwrt/kernel_checks.h"
#include "lwrt/shape_math.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace lwrt::cuda {

namespace {

/// The offset of element k of a walk over one operand.
template <typename I> __device__ int64_t offsetOf(const Walk<1>& w, I k) {
  int64_t off[1];
  offsetsOf(w, k, off);
  return off[0];
}

/// y[k] = x[base + offset(k)].
template <typename U, typename I>
__global__ void gatherWalkKernel(const U* x, U* y, I n, Walk<1> w, int64_t base) {
  for (I k = static_cast<I>(firstThread()); k < n; k += static_cast<I>(gridThreads()))
    y[k] = x[base + offsetOf(w, k)];
}

/// y[base + offset(k)] = x[k] (offsets distinct).
template <typename U, typename I>
__global__ void scatterWalkKernel(const U* x, U* y, I n, Walk<1> w, int64_t base) {
  for (I k = static_cast<I>(firstThread()); k < n; k += static_cast<I>(gridThreads()))
    y[base + offsetOf(w, k)] = x[k];
}

/// Walks `walked`'s shape (y for a gather, x for a scatter) with strides
/// `st` of the other view from `base`.
bool launchWalk(const char* op, const TensorView& x, const TensorView& y, const Dims& st,
                int64_t base, bool scatter) {
  const TensorView& walked = scatter ? x : y;
  int64_t n = walked.numel();
  if (n == 0)
    return true;
  Walk<1> w;
  if (!makeWalk<1>(walked.shape, {st}, w))
    return LWRT_REJECT(op, "walks more than 8 dims: " + describe(walked));
  return dispatchBytes(x.dtype, [&](auto tag) {
    using U = decltype(tag);
    cudaStream_t s = context().stream;
    const U* in = x.as<const U>();
    U* out = y.as<U>();
    if (n <= kSmallIndex) {
      auto k = static_cast<uint32_t>(n);
      if (scatter)
        scatterWalkKernel<<<blocksFor(n), kThreads, 0, s>>>(in, out, k, w, base);
      else
        gatherWalkKernel<<<blocksFor(n), kThreads, 0, s>>>(in, out, k, w, base);
    } else {
      auto k = static_cast<uint64_t>(n);
      if (scatter)
        scatterWalkKernel<<<blocksFor(n), kThreads, 0, s>>>(in, out, k, w, base);
      else
        gatherWalkKernel<<<blocksFor(n), kThreads, 0, s>>>(in, out, k, w, base);
    }
    LWRT_CUDA(cudaGetLastError());
    return true;
  });
}

//===--- Slices -----------------------------------------------------------===//

//===--- Gather -----------------------------------------------------------===//

/// Index j wrapped into [0, n), or -1 (with the error flag raised) when out
/// of range.
template <typename J> __device__ int64_t wrapIndex(const J* idx, int64_t j, int64_t n, int* flag) {
  auto v = static_cast<int64_t>(idx[j]);
  if (v < -n || v >= n) {
    raiseDeviceError(flag, kIndexOutOfRange);
    return -1;
  }
  return v < 0 ? v + n : v;
}

/// Checks every index when no gather kernel reads them (an empty result:
/// the CPU still rejects an index out of range).
template <typename J>
__global__ void checkIndicesKernel(const J* idx, int64_t count, int64_t n, int* flag) {
  for (int64_t j = firstThread(); j < count; j += gridThreads())
    wrapIndex(idx, j, n, flag);
}

bool checkIndices(const TensorView& indices, int64_t n) {
  int64_t count = indices.numel();
  if (count == 0)
    return true;
  return dispatchInt(indices.dtype, [&](auto jtag) {
    using J = decltype(jtag);
    checkIndicesKernel<<<blocksFor(count), kThreads, 0, context().stream>>>(
        indices.as<const J>(), count, n, context().errorFlag);
    LWRT_CUDA(cudaGetLastError());
    return true;
  });
}

/// y viewed as [outer, count, inner] from data viewed as [outer, n, inner].
template <typename U, typename J, typename I>
__global__ void gatherKernel(const U* data, const J* idx, U* y, I total, I count, I inner,
                             int64_t n, int* flag) {
  for (I k = static_cast<I>(firstThread()); k < total; k += static_cast<I>(gridThreads())) {
    I r = k / inner, e = k - r * inner;
    I o = r / count, j = r - o * count;
    int64_t v = wrapIndex(idx, static_cast<int64_t>(j), n, flag);
    y[k] = v < 0 ? U{0}
                 : data[(static_cast<int64_t>(o) * n + v) * static_cast<int64_t>(inner) +
                        static_cast<int64_t>(e)];
  }
}

/// dx viewed as [outer, n, inner] from dy viewed as [outer, count, inner]:
/// thread k owns dx element k and adds, in ascending j (the CPU's order, in
/// double), the dy elements whose index is its own; the indices pass
/// through shared memory a tile at a time. Work is numel(dx) * count.
/// Needs blockDim.x == kThreads; every thread of a block runs the same
/// number of iterations (the barriers).
template <typename T, typename J, typename I>
__global__ void gatherGradKernel(const J* idx, const T* dy, T* dx, I total, I count, I inner,
                                 int64_t n, int* flag) {
  __shared__ int64_t tile[kThreads];
  for (I first = static_cast<I>(blockIdx.x) * kThreads; first < total;
       first += static_cast<I>(gridDim.x) * kThreads) {
    I k = first + threadIdx.x;
    bool live = k < total;
    I r = live ? k / inner : 0, e = live ? k - r * inner : 0;
    I o = r / static_cast<I>(n), i = r - o * static_cast<I>(n);
    double acc = 0.0;
    for (I j0 = 0; j0 < count; j0 += kThreads) {
      I len = count - j0 < kThreads ? count - j0 : kThreads;
      __syncthreads(); // the previous tile is no longer read
      if (threadIdx.x < len)
        tile[threadIdx.x] = wrapIndex(idx, static_cast<int64_t>(j0 + threadIdx.x), n, flag);
      __syncthreads();
      if (live)
        for (I t = 0; t < len; ++t)
          if (tile[t] == static_cast<int64_t>(i))
            acc += static_cast<double>(dy[(static_cast<int64_t>(o) * count + j0 + t) * inner + e]);
    }
    if (live)
      dx[k] = static_cast<T>(acc);
  }
}

//===--- Pad --------------------------------------------------------------===//

struct PadWalk {
  int rank = 0;
  int64_t yshape[kMaxDims] = {};
  int64_t xshape[kMaxDims] = {};
  int64_t xstride[kMaxDims] = {};
  int64_t before[kMaxDims] = {};
};

template <typename U, typename I>
__global__ void padKernel(const U* x, U* y, I total, PadWalk w, PadMode mode, U fill) {
  for (I k = static_cast<I>(firstThread()); k < total; k += static_cast<I>(gridThreads())) {
    I rem = k;
    int64_t off = 0;
    bool outside = false;
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d) {
      if (d >= w.rank)
        continue;
      I size = static_cast<I>(w.yshape[d]);
      I q = rem / size;
      int64_t i = static_cast<int64_t>(rem - q * size) - w.before[d], n = w.xshape[d];
      rem = q;
      if (i < 0 || i >= n) {
        if (mode == PadMode::Constant)
          outside = true;
        else if (mode == PadMode::Edge)
          i = i < 0 ? 0 : n - 1;
        else // reflect, without repeating the edge (one reflection: pads < n)
          for (int t = 0; t < 4 && (i < 0 || i >= n); ++t)
            i = i < 0 ? -i : 2 * (n - 1) - i;
      }
      off += i * w.xstride[d];
    }
    y[k] = outside ? fill : x[off];
  }
}

/// The longest chain of copies an overlapping copy is split into.
constexpr int64_t kMaxMoveChunks = 64;

} // namespace

//===--- Copies -----------------------------------------------------------===//

bool copy(const TensorView& x, const TensorView& y) {
  if (x.dtype != y.dtype || x.numel() != y.numel())
    return LWRT_REJECT("copy", "cannot copy " + describe(x) + " to " + describe(y));
  int64_t bytes = x.bytes();
  if (x.data == y.data || bytes <= 0)
    return true;
  cudaStream_t s = context().stream;
  auto* dst = static_cast<char*>(y.data);
  const auto* src = static_cast<const char*>(x.data);
  auto gap = static_cast<int64_t>(dst > src ? dst - src : src - dst);
  if (gap >= bytes) {
    LWRT_CUDA(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, s));
    return true;
  }
  // Overlapping views (a memmove): copies of `gap` bytes, each reading its
  // source before a later one overwrites it.
  if ((bytes + gap - 1) / gap > kMaxMoveChunks)
    return LWRT_REJECT("copy", "the views overlap by all but " + std::to_string(gap) + " of " +
                                   std::to_string(bytes) + " bytes");
  int64_t chunks = (bytes + gap - 1) / gap;
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t off = dst < src ? c * gap : (chunks - 1 - c) * gap;
    auto len = static_cast<size_t>(std::min(gap, bytes - off));
    LWRT_CUDA(cudaMemcpyAsync(dst + off, src + off, len, cudaMemcpyDeviceToDevice, s));
  }
  return true;
}

bool transpose(const TensorView& x, const TensorView& y, const TransposeParams& p) {
  int64_t r = x.rank();
  bool ok = x.dtype == y.dtype && y.rank() == r && static_cast<int64_t>(p.perm.size()) == r;
  std::vector<bool> seen(ok ? r : 0, false);
  Dims xst = rowMajorStrides(x.shape), st(ok ? r : 0);
  for (int64_t d = 0; ok && d < r; ++d) {
    int64_t q = p.perm[d];
    if (q < 0 || q >= r || seen[q] || y.shape[d] != x.shape[q]) {
      ok = false;
      break;
    }
    seen[q] = true;
    st[d] = xst[q];
  }
  if (!ok)
    return LWRT_REJECT("transpose", "cannot permute " + describe(x) + " to " + describe(y) +
                                        " by " + shapeString(p.perm));
  return launchWalk("transpose", x, y, st, 0, false);
}

bool concat(const std::vector<TensorView>& xs, const TensorView& y, const ConcatParams& p) {
  int64_t axis = p.axis;
  bool ok = !xs.empty() && normAxis(axis, y.rank());
  int64_t total = 0;
  for (size_t i = 0; ok && i < xs.size(); ++i) {
    const TensorView& x = xs[i];
    ok = x.dtype == y.dtype && x.rank() == y.rank();
    for (int64_t d = 0; ok && d < y.rank(); ++d)
      ok = d == axis || x.shape[d] == y.shape[d];
    if (ok)
      total += x.shape[axis];
  }
  if (!ok || total != y.shape[axis])
    return LWRT_REJECT("concat", std::to_string(xs.size()) + " inputs do not concatenate to " +
                                     describe(y) + " on axis " + std::to_string(p.axis));
  int64_t outer, inner, esize = dtypeSize(y.dtype);
  aroundAxis(y.shape, axis, outer, inner);
  if (outer == 0)
    return true;
  auto pitch = static_cast<size_t>(y.shape[axis] * inner * esize);
  auto* out = static_cast<char*>(y.data);
  for (const TensorView& x : xs) {
    int64_t chunk = x.shape[axis] * inner * esize;
    if (chunk > 0)
      LWRT_CUDA(cudaMemcpy2DAsync(out, pitch, x.data, static_cast<size_t>(chunk),
                                  static_cast<size_t>(chunk), static_cast<size_t>(outer),
                                  cudaMemcpyDeviceToDevice, context().stream));
    out += chunk;
  }
  return true;
}

bool split(const TensorView& x, const std::vector<TensorView>& ys, const SplitParams& p) {
  int64_t axis = p.axis;
  bool ok = normAxis(axis, x.rank()) && ys.size() == p.split.size();
  int64_t total = 0;
  for (size_t i = 0; ok && i < ys.size(); ++i) {
    Dims want = x.shape;
    want[axis] = p.split[i];
    ok = ys[i].dtype == x.dtype && ys[i].shape == want && p.split[i] >= 0;
    total += p.split[i];
  }
  if (!ok || total != x.shape[axis])
    return LWRT_REJECT("split", "cannot split " + describe(x) + " into " + shapeString(p.split) +
                                    " on axis " + std::to_string(p.axis));
  int64_t outer, inner, esize = dtypeSize(x.dtype);
  aroundAxis(x.shape, axis, outer, inner);
  if (outer == 0)
    return true;
  auto pitch = static_cast<size_t>(x.shape[axis] * inner * esize);
  const auto* in = static_cast<const char*>(x.data);
  for (const TensorView& y : ys) {
    int64_t chunk = y.shape[axis] * inner * esize;
    if (chunk > 0)
      LWRT_CUDA(cudaMemcpy2DAsync(y.data, static_cast<size_t>(chunk), in, pitch,
                                  static_cast<size_t>(chunk), static_cast<size_t>(outer),
                                  cudaMemcpyDeviceToDevice, context().stream));
    in += chunk;
  }
  return true;
}

//===--- Slices -----------------------------------------------------------===//

bool slice(const TensorView& x, const TensorView& y, const SliceParams& p) {
  SliceDims s;
  if (x.dtype != y.dtype || !resolveSlices(x.shape, p, s) || s.count != y.shape)
    return LWRT_REJECT("slice", "the slice of " + describe(x) + " is not " + describe(y));
  Dims st;
  int64_t base;
  sliceWalk(x.shape, s, st, base);
  return launchWalk("slice", x, y, st, base, false);
}

bool sliceGrad(const TensorView& dy, const TensorView& dx, const SliceParams& p) {
  SliceDims s;
  if (dy.dtype != dx.dtype || !resolveSlices(dx.shape, p, s) || s.count != dy.shape ||
      !(isFloat(dx.dtype) || dx.dtype == DType::BF16 || dx.dtype == DType::F16))
    return LWRT_REJECT("sliceGrad",
                       "the float slice of " + describe(dx) + " is not " + describe(dy));
  Dims st;
  int64_t base;
  sliceWalk(dx.shape, s, st, base);
  // Zeros, then dy scattered: a slice reads each input element at most once.
  if (dx.bytes() > 0)
    LWRT_CUDA(cudaMemsetAsync(dx.data, 0, static_cast<size_t>(dx.bytes()), context().stream));
  return launchWalk("sliceGrad", dy, dx, st, base, true);
}

//===--- Gather -----------------------------------------------------------===//

bool gather(const TensorView& data, const TensorView& indices, const TensorView& y,
            const GatherParams& p) {
  int64_t axis = p.axis;
  if (data.dtype != y.dtype || !normAxis(axis, data.rank()) ||
      !gatherShape(data.shape, indices.shape, axis, y.shape) ||
      (indices.numel() > 0 && !isInt(indices.dtype)))
    return LWRT_REJECT("gather", "cannot gather " + describe(y) + " from " + describe(data) +
                                     " at " + describe(indices) + " on axis " +
                                     std::to_string(p.axis));
  int64_t total = y.numel(), count = indices.numel(), n = data.shape[axis], outer, inner;
  aroundAxis(data.shape, axis, outer, inner);
  if (total == 0)
    return checkIndices(indices, n);
  int* flag = context().errorFlag;
  return dispatchInt(indices.dtype, [&](auto jtag) {
    using J = decltype(jtag);
    return dispatchBytes(data.dtype, [&](auto tag) {
      using U = decltype(tag);
      cudaStream_t s = context().stream;
      const U* in = data.as<const U>();
      const J* ix = indices.as<const J>();
      if (total <= kSmallIndex)
        gatherKernel<<<blocksFor(total), kThreads, 0, s>>>(
            in, ix, y.as<U>(), static_cast<uint32_t>(total), static_cast<uint32_t>(count),
            static_cast<uint32_t>(inner), n, flag);
      else
        gatherKernel<<<blocksFor(total), kThreads, 0, s>>>(
            in, ix, y.as<U>(), static_cast<uint64_t>(total), static_cast<uint64_t>(count),
            static_cast<uint64_t>(inner), n, flag);
      LWRT_CUDA(cudaGetLastError());
      return true;
    });
  });
}

bool gatherGrad(const TensorView& indices, const TensorView& dy, const TensorView& dx,
                const GatherParams& p) {
  int64_t axis = p.axis;
  if (dy.dtype != dx.dtype || !normAxis(axis, dx.rank()) ||
      !gatherShape(dx.shape, indices.shape, axis, dy.shape) ||
      (indices.numel() > 0 && !isInt(indices.dtype)) || !isFloat(dx.dtype))
    return LWRT_REJECT("gatherGrad", "cannot scatter " + describe(dy) + " into " + describe(dx) +
                                         " at " + describe(indices) + " on axis " +
                                         std::to_string(p.axis));
  int64_t total = dx.numel(), count = indices.numel(), n = dx.shape[axis], outer, inner;
  aroundAxis(dx.shape, axis, outer, inner);
  if (total == 0)
    return checkIndices(indices, n);
  if (count == 0) { // no indices (of any type): zeros
    LWRT_CUDA(cudaMemsetAsync(dx.data, 0, static_cast<size_t>(dx.bytes()), context().stream));
    return true;
  }
  int* flag = context().errorFlag;
  bool small = std::max(total, dy.numel()) <= kSmallIndex;
  return dispatchInt(indices.dtype, [&](auto jtag) {
    using J = decltype(jtag);
    return dispatchFloat(dx.dtype, [&](auto tag) {
      using T = decltype(tag);
      cudaStream_t s = context().stream;
      const J* ix = indices.as<const J>();
      if (small)
        gatherGradKernel<<<blocksFor(total), kThreads, 0, s>>>(
            ix, dy.as<const T>(), dx.as<T>(), static_cast<uint32_t>(total),
            static_cast<uint32_t>(count), static_cast<uint32_t>(inner), n, flag);
      else
        gatherGradKernel<<<blocksFor(total), kThreads, 0, s>>>(
            ix, dy.as<const T>(), dx.as<T>(), static_cast<uint64_t>(total),
            static_cast<uint64_t>(count), static_cast<uint64_t>(inner), n, flag);
      LWRT_CUDA(cudaGetLastError());
      return true;
    });
  });
}

//===--- Expand and pad ---------------------------------------------------===//

bool expand(const TensorView& x, const TensorView& y) {
  size_t r = y.shape.size(), xr = x.shape.size();
  bool ok = x.dtype == y.dtype && xr <= r;
  Dims st(r, 0);
  int64_t acc = 1;
  for (size_t d = xr; ok && d-- > 0;) {
    int64_t xd = x.shape[d], yd = y.shape[r - xr + d];
    ok = xd == 1 || xd == yd;
    st[r - xr + d] = xd == 1 ? 0 : acc;
    acc *= xd;
  }
  if (!ok)
    return LWRT_REJECT("expand", "cannot broadcast " + describe(x) + " to " + describe(y));
  return launchWalk("expand", x, y, st, 0, false);
}

bool pad(const TensorView& x, const TensorView& y, const PadParams& p) {
  int64_t r = x.rank();
  bool ok = x.dtype == y.dtype && y.rank() == r && static_cast<int64_t>(p.pads.size()) == 2 * r &&
            x.dtype != DType::F16 && x.dtype != DType::BF16;
  for (int64_t d = 0; ok && d < r; ++d) {
    int64_t n = x.shape[d], before = p.pads[d], after = p.pads[d + r];
    ok =
        y.shape[d] == n + before + after &&
        !(p.mode == PadMode::Reflect && (before > 0 || after > 0) && (before >= n || after >= n)) &&
        !(p.mode == PadMode::Edge && n == 0 && y.shape[d] > 0);
  }
  if (!ok)
    return LWRT_REJECT("pad", "cannot pad " + describe(x) + " to " + describe(y) + " by " +
                                  shapeString(p.pads));
  if (r > kMaxDims)
    return LWRT_REJECT("pad", "pads more than 8 dims: " + describe(x));
  int64_t total = y.numel();
  if (total == 0)
    return true;
  PadWalk w;
  w.rank = static_cast<int>(r);
  Dims xst = rowMajorStrides(x.shape);
  for (int64_t d = 0; d < r; ++d) {
    w.yshape[d] = y.shape[d];
    w.xshape[d] = x.shape[d];
    w.xstride[d] = xst[d];
    w.before[d] = p.pads[d];
  }
  return dispatchBytes(x.dtype, [&](auto tag) {
    using U = decltype(tag);
    const U fill = padFillBits<U>(x.dtype, p.value);
    cudaStream_t s = context().stream;
    if (total <= kSmallIndex)
      padKernel<<<blocksFor(total), kThreads, 0, s>>>(
          x.as<const U>(), y.as<U>(), static_cast<uint32_t>(total), w, p.mode, fill);
    else
      padKernel<<<blocksFor(total), kThreads, 0, s>>>(
          x.as<const U>(), y.as<U>(), static_cast<uint64_t>(total), w, p.mode, fill);
    LWRT_CUDA(cudaGetLastError());
    return true;
  });
}

} // namespace lwrt::cuda
