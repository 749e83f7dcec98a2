//===- TensorReduceKernels.cu - Reductions, cast and fill on the GPU --------===//
//
// The CUDA kernels of lwrt/cuda_tensor.h that reduce, convert and fill:
// reduceSum and reduceMean, cast, fill. Each restates the CPU backend's
// formula (runtime/cpu/TensorKernels.cpp); the host-side checks are the
// CPU's (lwrt/kernel_checks.h), made before any launch.
//
//===----------------------------------------------------------------------===//
#include "cuda/TensorSupport.cuh"
#include "lwrt/cuda_tensor.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace lwrt::cuda {

namespace {

//===--- Reductions -------------------------------------------------------===//

// Each output element sums its inputs in a fixed order: one thread walks
// them in the CPU's order when there are few (the same sum, bit for bit);
// otherwise one block takes strided partial sums and adds them in a fixed
// tree. Few outputs of many inputs each (a convolution's bias gradient: 64
// channels of N*H*W = 387k values for AlexNet's conv1 at batch 128) would
// leave most of the GPU idle with a block per output, so their inputs are
// cut into consecutive chunks, a block per chunk writes its tree's sum into
// the workspace, and one thread per output adds the chunks' sums in order.
// Floats sum in double, integers in wrapping uint64; bf16 and fp16 values
// (a mixed-precision weight gradient summed over a batch) widen exactly,
// sum in double and round once, through float32, as the CPU backend and
// the interpreter round them.

/// A bf16 (B) or fp16 element, for the kernels' element type.
template <bool B> struct Half16 { uint16_t bits; };
template <typename T> struct IsHalf16 : std::false_type {};
template <bool B> struct IsHalf16<Half16<B>> : std::true_type {};

template <typename T>
using AccOf =
    std::conditional_t<std::is_floating_point_v<T> || IsHalf16<T>::value, double, uint64_t>;

template <typename T> __device__ AccOf<T> accOf(T v) { return static_cast<AccOf<T>>(v); }
template <bool B> __device__ double accOf(Half16<B> v) { return widen16(v.bits, B); }

template <typename T> __device__ T finishReduce(AccOf<T> acc, int64_t count, bool mean) {
  if constexpr (IsHalf16<T>::value) {
    const double r = mean ? acc / static_cast<double>(count) : acc;
    return T{narrow16(static_cast<float>(r), std::is_same_v<T, Half16<true>>)};
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(mean ? acc / static_cast<double>(count) : acc);
  } else {
    auto s = static_cast<int64_t>(acc);
    return static_cast<T>(mean ? s / count : s);
  }
}

template <typename T, typename I>
__global__ void reduceThreads(const T* x, T* y, I m, Walk<1> kept, Walk<1> red, I count,
                              bool mean) {
  for (I o = static_cast<I>(firstThread()); o < m; o += static_cast<I>(gridThreads())) {
    int64_t base[1];
    offsetsOf(kept, o, base);
    AccOf<T> acc = 0;
    for (I j = 0; j < count; ++j) {
      int64_t off[1];
      offsetsOf(red, j, off);
      acc += accOf(x[base[0] + off[0]]);
    }
    y[o] = finishReduce<T>(acc, static_cast<int64_t>(count), mean);
  }
}

/// Needs blockDim.x == kThreads (a power of two).
template <typename T, typename I>
__global__ void reduceBlocks(const T* x, T* y, I m, Walk<1> kept, Walk<1> red, I count, bool mean) {
  __shared__ AccOf<T> part[kThreads];
  for (I o = blockIdx.x; o < m; o += gridDim.x) {
    int64_t base[1];
    offsetsOf(kept, o, base);
    AccOf<T> acc = 0;
    for (I j = threadIdx.x; j < count; j += kThreads) {
      int64_t off[1];
      offsetsOf(red, j, off);
      acc += accOf(x[base[0] + off[0]]);
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned half = kThreads / 2; half > 0; half >>= 1) {
      if (threadIdx.x < half)
        part[threadIdx.x] += part[threadIdx.x + half];
      __syncthreads();
    }
    if (threadIdx.x == 0)
      y[o] = finishReduce<T>(part[0], static_cast<int64_t>(count), mean);
    __syncthreads(); // part is reused by the next output
  }
}

/// One block per chunk [s * chunk, (s + 1) * chunk) of output o's inputs
/// (blockIdx.x the chunk, blockIdx.y the output): its sum into
/// part[o * splits + s]. Needs blockDim.x == kThreads.
template <typename T, typename I>
__global__ void reduceChunks(const T* x, AccOf<T>* part, I m, Walk<1> kept, Walk<1> red, I count,
                             I chunk, unsigned splits) {
  __shared__ AccOf<T> sums[kThreads];
  for (I o = blockIdx.y; o < m; o += gridDim.y) {
    int64_t base[1];
    offsetsOf(kept, o, base);
    for (unsigned s = blockIdx.x; s < splits; s += gridDim.x) {
      const I begin = static_cast<I>(s) * chunk;
      const I end = count - begin < chunk ? count : begin + chunk;
      AccOf<T> acc = 0;
      for (I j = begin + threadIdx.x; j < end; j += kThreads) {
        int64_t off[1];
        offsetsOf(red, j, off);
        acc += accOf(x[base[0] + off[0]]);
      }
      sums[threadIdx.x] = acc;
      __syncthreads();
      for (unsigned half = kThreads / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half)
          sums[threadIdx.x] += sums[threadIdx.x + half];
        __syncthreads();
      }
      if (threadIdx.x == 0)
        part[static_cast<size_t>(o) * splits + s] = sums[0];
      __syncthreads(); // sums is reused by the next chunk
    }
  }
}

/// y[o] = the chunks' sums of output o, added in chunk order.
template <typename T, typename I>
__global__ void reduceChunkSums(const AccOf<T>* part, T* y, I m, unsigned splits, I count,
                                bool mean) {
  for (I o = static_cast<I>(firstThread()); o < m; o += static_cast<I>(gridThreads())) {
    AccOf<T> acc = 0;
    for (unsigned s = 0; s < splits; ++s)
      acc += part[static_cast<size_t>(o) * splits + s];
    y[o] = finishReduce<T>(acc, static_cast<int64_t>(count), mean);
  }
}

/// Inputs per output up to which one thread sums them in the CPU's order.
constexpr int64_t kThreadReduce = 32;
/// Chunked reductions: the blocks to aim for (enough to fill the largest
/// GPUs several times), and the fewest inputs a chunk holds.
constexpr int64_t kReduceBlocksWanted = 1024;
constexpr int64_t kReduceChunkMin = 8192;

template <typename T, typename I>
bool launchReduce(const TensorView& x, const TensorView& y, int64_t m, const Walk<1>& kept,
                  const Walk<1>& red, int64_t count, bool mean) {
  cudaStream_t s = context().stream;
  if (count <= kThreadReduce) {
    reduceThreads<T, I><<<blocksFor(m), kThreads, 0, s>>>(
        x.as<const T>(), y.as<T>(), static_cast<I>(m), kept, red, static_cast<I>(count), mean);
  } else if (m < kReduceBlocksWanted / 2 && count >= 2 * kReduceChunkMin) {
    const int64_t wanted = std::min((kReduceBlocksWanted + m - 1) / m, count / kReduceChunkMin);
    const int64_t chunk = (count + wanted - 1) / wanted;
    const int64_t splits = (count + chunk - 1) / chunk;
    if (!ensureWorkspace(static_cast<size_t>(m * splits) * sizeof(AccOf<T>)))
      return false;
    auto* part = static_cast<AccOf<T>*>(context().workspace);
    reduceChunks<T, I>
        <<<dim3(static_cast<unsigned>(splits), static_cast<unsigned>(m)), kThreads, 0, s>>>(
            x.as<const T>(), part, static_cast<I>(m), kept, red, static_cast<I>(count),
            static_cast<I>(chunk), static_cast<unsigned>(splits));
    LWRT_CUDA(cudaGetLastError());
    reduceChunkSums<T, I><<<blocksFor(m), kThreads, 0, s>>>(part, y.as<T>(), static_cast<I>(m),
                                                            static_cast<unsigned>(splits),
                                                            static_cast<I>(count), mean);
  } else {
    reduceBlocks<T, I><<<static_cast<unsigned>(std::min<int64_t>(m, 65535 * 8)), kThreads, 0, s>>>(
        x.as<const T>(), y.as<T>(), static_cast<I>(m), kept, red, static_cast<I>(count), mean);
  }
  LWRT_CUDA(cudaGetLastError());
  return true;
}

bool reduce(const char* op, const TensorView& x, const TensorView& y, const ReduceParams& p,
            bool mean) {
  int64_t rank = x.rank();
  std::vector<bool> reduced;
  Dims want, keptShape, keptStride, redShape, redStride, xst = rowMajorStrides(x.shape);
  if (!reducedDims(x.shape, p, reduced, want))
    return LWRT_REJECT(op, "an axis is out of range or repeated for " + describe(x));
  for (int64_t d = 0; d < rank; ++d) {
    (reduced[d] ? redShape : keptShape).push_back(x.shape[d]);
    (reduced[d] ? redStride : keptStride).push_back(xst[d]);
  }
  if (x.dtype != y.dtype || y.shape != want || !(isNumeric(x.dtype) || is16(x.dtype)))
    return LWRT_REJECT(op, "cannot reduce " + describe(x) + " to " + describe(y));
  int64_t m = y.numel(), count = 1;
  for (int64_t d : redShape)
    count *= d;
  if (mean && isInt(x.dtype) && count == 0 && m > 0)
    return LWRT_REJECT(op, "an integer mean over no elements");
  if (m == 0)
    return true;
  Walk<1> kept, red;
  if (!makeWalk<1>(keptShape, {keptStride}, kept) || !makeWalk<1>(redShape, {redStride}, red))
    return LWRT_REJECT(op, "reduces a tensor of more than 8 dims: " + describe(x));
  bool small = std::max(m, count) <= kSmallIndex;
  if (is16(x.dtype)) {
    auto launch16 = [&](auto tag) {
      using T = decltype(tag);
      return small ? launchReduce<T, uint32_t>(x, y, m, kept, red, count, mean)
                   : launchReduce<T, uint64_t>(x, y, m, kept, red, count, mean);
    };
    return x.dtype == DType::BF16 ? launch16(Half16<true>{}) : launch16(Half16<false>{});
  }
  return dispatchNumeric(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    return small ? launchReduce<T, uint32_t>(x, y, m, kept, red, count, mean)
                 : launchReduce<T, uint64_t>(x, y, m, kept, red, count, mean);
  });
}

//===--- Cast and fill ----------------------------------------------------===//

template <typename From, typename To>
__global__ void castKernel(const From* x, To* y, int64_t n, bool toBool) {
  for (int64_t k = firstThread(); k < n; k += gridThreads())
    y[k] = castValue<To>(x[k], toBool);
}

/// float32 to bf16 or fp16 and back, element by element, with the rounding
/// the CPU backend and the interpreter use (lwrt/bf16.h, lwrt/f16.h).
__global__ void narrowKernel(const float* x, uint16_t* y, int64_t n, bool bf16) {
  for (int64_t k = firstThread(); k < n; k += gridThreads())
    y[k] = bf16 ? floatToBf16(x[k]) : floatToF16(x[k]);
}
/// The pairs of one launch of castGroup: the elements of pair p are
/// [start[p], start[p + 1]) of the launch's range.
struct CastChunk {
  int count = 0;
  int64_t start[kPiecesPerLaunch + 1] = {};
  const float* x[kPiecesPerLaunch];
  uint16_t* y[kPiecesPerLaunch];
};
__global__ void narrowGroupKernel(CastChunk c, bool bf16) {
  int p = 0;
  for (int64_t i = firstThread(); i < c.start[c.count]; i += gridThreads()) {
    p = pieceOf(c.start, p, i);
    const int64_t k = i - c.start[p];
    c.y[p][k] = bf16 ? floatToBf16(c.x[p][k]) : floatToF16(c.x[p][k]);
  }
}
__global__ void widenKernel(const uint16_t* x, float* y, int64_t n, bool bf16) {
  for (int64_t k = firstThread(); k < n; k += gridThreads())
    y[k] = bf16 ? bf16ToFloat(x[k]) : f16ToFloat(x[k]);
}

template <typename T> __global__ void splatKernel(T* y, int64_t n, T v) {
  for (int64_t k = firstThread(); k < n; k += gridThreads())
    y[k] = v;
}

/// Up to 3 KiB of a constant's values, carried in a launch's parameters.
template <typename T> struct FillChunk {
  static constexpr int64_t kCount = 3072 / static_cast<int64_t>(sizeof(T));
  T v[kCount];
};

template <typename T> __global__ void chunkKernel(T* y, int64_t n, FillChunk<T> c) {
  for (int64_t k = firstThread(); k < n; k += gridThreads())
    y[k] = c.v[k];
}

} // namespace

//===--- Reductions -------------------------------------------------------===//

bool reduceMean(const TensorView& x, const TensorView& y, const ReduceParams& p) {
  return reduce("reduceMean", x, y, p, true);
}
bool reduceSum(const TensorView& x, const TensorView& y, const ReduceParams& p) {
  return reduce("reduceSum", x, y, p, false);
}

//===--- Conversion and values --------------------------------------------===//

bool castGroup(const std::vector<CastPair>& pairs) {
  if (pairs.empty())
    return true;
  const DType low = pairs[0].y.dtype;
  for (const CastPair& c : pairs)
    if ((low != DType::BF16 && low != DType::F16) || c.x.dtype != DType::F32 || c.y.dtype != low ||
        c.x.shape != c.y.shape)
      return LWRT_REJECT("castGroup", "casts float32 tensors to bf16, or to fp16, of their "
                                      "shapes only, not " +
                                          describe(c.x) + " to " + describe(c.y));
  for (size_t first = 0; first < pairs.size(); first += kPiecesPerLaunch) {
    CastChunk c;
    for (size_t k = first; k < pairs.size() && c.count < kPiecesPerLaunch; ++k, ++c.count) {
      c.x[c.count] = pairs[k].x.as<const float>();
      c.y[c.count] = static_cast<uint16_t*>(pairs[k].y.data);
      c.start[c.count + 1] = c.start[c.count] + pairs[k].x.numel();
    }
    if (c.start[c.count] == 0)
      continue;
    narrowGroupKernel<<<blocksFor(c.start[c.count]), kThreads, 0, context().stream>>>(
        c, low == DType::BF16);
    LWRT_CUDA(cudaGetLastError());
  }
  return true;
}

bool cast(const TensorView& x, const TensorView& y) {
  auto castable = [](DType t) {
    return isNumeric(t) || t == DType::Bool || t == DType::BF16 || t == DType::F16;
  };
  bool types = castable(x.dtype) && castable(y.dtype);
  if (x.shape != y.shape || !types)
    return LWRT_REJECT("cast", "cannot cast " + describe(x) + " to " + describe(y));
  int64_t n = x.numel();
  const bool bf16 = x.dtype == DType::BF16 || y.dtype == DType::BF16;
  if (bf16 || x.dtype == DType::F16 || y.dtype == DType::F16) {
    // bf16 or fp16 to and from float32, and either to itself: they meet no
    // other type in a step (as on the CPU).
    const DType low = bf16 ? DType::BF16 : DType::F16;
    if (n == 0)
      return true;
    cudaStream_t s = context().stream;
    if (x.dtype == DType::F32 && y.dtype == low)
      narrowKernel<<<blocksFor(n), kThreads, 0, s>>>(x.as<const float>(),
                                                     static_cast<uint16_t*>(y.data), n, bf16);
    else if (x.dtype == low && y.dtype == DType::F32)
      widenKernel<<<blocksFor(n), kThreads, 0, s>>>(static_cast<const uint16_t*>(x.data),
                                                    y.as<float>(), n, bf16);
    else if (x.dtype == low && y.dtype == low) {
      // In place (the planner may give y x's bytes) there is nothing to copy:
      // a copy onto itself is undefined for cudaMemcpyAsync.
      if (x.data != y.data)
        LWRT_CUDA(cudaMemcpyAsync(y.data, x.data, static_cast<size_t>(x.bytes()),
                                  cudaMemcpyDeviceToDevice, s));
    } else
      return LWRT_REJECT("cast", "casts bf16 and fp16 to and from F32 only, not " + describe(x) +
                                     " to " + describe(y));
    LWRT_CUDA(cudaGetLastError());
    return true;
  }
  if (n == 0)
    return true;
  bool toBool = y.dtype == DType::Bool;
  return dispatchValue(x.dtype, [&](auto from) {
    using From = decltype(from);
    return dispatchValue(y.dtype, [&](auto to) {
      using To = decltype(to);
      castKernel<<<blocksFor(n), kThreads, 0, context().stream>>>(x.as<const From>(), y.as<To>(), n,
                                                                  toBool);
      LWRT_CUDA(cudaGetLastError());
      return true;
    });
  });
}

/// y[k] = value(k) for k < n: one splat launch when `have` is 1, else the
/// values in chunks carried by the launches' parameters.
template <typename T, typename Value> bool fillWith(T* y, int64_t n, size_t have, Value value) {
  cudaStream_t s = context().stream;
  if (have == 1) {
    splatKernel<<<blocksFor(n), kThreads, 0, s>>>(y, n, value(0));
    LWRT_CUDA(cudaGetLastError());
    return true;
  }
  for (int64_t start = 0; start < n; start += FillChunk<T>::kCount) {
    FillChunk<T> c{};
    int64_t count = std::min(FillChunk<T>::kCount, n - start);
    for (int64_t k = 0; k < count; ++k)
      c.v[k] = value(start + k);
    chunkKernel<<<blocksFor(count), kThreads, 0, s>>>(y + start, count, c);
    LWRT_CUDA(cudaGetLastError());
  }
  return true;
}

bool fill(const TensorView& y, const FillParams& p) {
  int64_t n = y.numel();
  if (y.dtype == DType::BF16 || y.dtype == DType::F16) {
    // Each value rounded to float32 and then to the type, as on the CPU.
    const bool bf16 = y.dtype == DType::BF16;
    if (p.value.size() != 1 && static_cast<int64_t>(p.value.size()) != n)
      return LWRT_REJECT("fill", std::to_string(p.value.size()) + " values for " + describe(y));
    if (n == 0)
      return true;
    return fillWith(static_cast<uint16_t*>(y.data), n, p.value.size(), [&](int64_t k) {
      const float v = static_cast<float>(p.value.size() == 1 ? p.value[0] : p.value[k]);
      return bf16 ? floatToBf16(v) : floatToF16(v);
    });
  }
  if (!isNumeric(y.dtype) && y.dtype != DType::Bool)
    return LWRT_REJECT("fill", "cannot fill " + describe(y));
  return dispatchValue(y.dtype, [&](auto tag) {
    using T = decltype(tag);
    size_t have = std::is_floating_point_v<T> ? p.value.size() : p.ivalue.size();
    if (have != 1 && static_cast<int64_t>(have) != n)
      return LWRT_REJECT("fill", std::to_string(have) + " values for " + describe(y));
    if (n == 0)
      return true;
    return fillWith(y.as<T>(), n, have, [&](int64_t k) { return fillValue<T>(p, k, y.dtype); });
  });
}

} // namespace lwrt::cuda
