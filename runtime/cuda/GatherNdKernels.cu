//===- GatherNdKernels.cu - gather_nd and gather_nd_grad ------------------===//
//
// The CUDA kernels of lwrt/cuda_tensor.h for ONNX GatherND, with the
// host-side checks of runtime/cpu/TensorShapeKernels.cpp. The data is seen
// as [batches, cells, inner]: an index tuple of the last dim of indices
// addresses one cell (a slice of `inner` elements) of its batch.
//  - gather_nd: thread k writes result element k from its tuple's cell.
//  - gather_nd_grad: thread k owns dx element k and adds, in ascending
//    tuple order (the CPU's, in double), the dy elements of the tuples that
//    address its cell; the tuples' cells pass through shared memory a tile
//    at a time. No atomics: the result is the same from run to run. Work
//    is numel(dx) * tuples, as gather_grad's (the exporters' adaptive-pool
//    indices have a few hundred tuples).
// An index out of range sets the device error flag (kIndexOutOfRange).
//
//===----------------------------------------------------------------------===//
#include "cuda/Context.h"
#include "lwrt/cuda_tensor.h"
#include "lwrt/kernel_checks.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace lwrt::cuda {

namespace {

using Dims = std::vector<int64_t>;

#define LWRT_REJECT(op, what)                                                                      \
  ::lwrt::cuda::fail(__FILE__, __LINE__, std::string(op) + ": " + (what))

/// Index dims a tuple may address (the rank of data after the batch dims).
constexpr int kMaxIndexDims = 8;

/// What the kernels need of the shapes.
struct NdGeom {
  int k = 0;                   ///< entries per tuple
  int64_t dims[kMaxIndexDims]; ///< sizes of the addressed dims
  int64_t tuples = 0, perBatch = 1, cells = 1, inner = 1;
};

/// The geometry of a gather_nd from `data` with `indices` to `out`; false
/// when the shapes do not fit.
bool ndGeom(const Dims& data, const TensorView& indices, int64_t b, const Dims& out, NdGeom& g) {
  const Dims& is = indices.shape;
  int64_t k = gatherNdDepth(data, indices, b, out);
  if (k == 0 || k > kMaxIndexDims)
    return false;
  g.k = static_cast<int>(k);
  for (int64_t j = 0; j < k; ++j)
    g.dims[j] = data[b + j];
  g.tuples = shapeProduct(is, 0, is.size() - 1);
  int64_t batches = shapeProduct(data, 0, static_cast<size_t>(b));
  g.perBatch = batches ? g.tuples / batches : 1;
  g.cells = shapeProduct(data, static_cast<size_t>(b), static_cast<size_t>(b + k));
  g.inner = shapeProduct(data, static_cast<size_t>(b + k), data.size());
  return true;
}

__device__ void raiseIndexError(int* flag) {
  if (flag)
    atomicCAS(flag, 0, static_cast<int>(kIndexOutOfRange));
}

/// The cell (within its batch) that tuple t addresses, or -1 (flag set)
/// when an entry is out of range.
__device__ int64_t tupleCell(const int64_t* idx, const NdGeom& g, int64_t t, int* flag) {
  int64_t cell = 0;
  for (int j = 0; j < g.k; ++j) {
    int64_t n = g.dims[j], v = idx[t * g.k + j];
    if (v < -n || v >= n) {
      raiseIndexError(flag);
      return -1;
    }
    cell = cell * n + (v < 0 ? v + n : v);
  }
  return cell;
}

template <typename U>
__global__ void gatherNdKernel(const U* data, const int64_t* idx, U* y, NdGeom g, int64_t total,
                               int* flag) {
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t t = k / g.inner, e = k - t * g.inner;
    int64_t cell = tupleCell(idx, g, t, flag);
    int64_t batch = t / g.perBatch;
    y[k] = cell < 0 ? U{0} : data[((batch * g.cells) + cell) * g.inner + e];
  }
}

/// Needs blockDim.x == kThreads; every thread of a block runs the same
/// number of iterations (the barriers).
template <typename T>
__global__ void gatherNdGradKernel(const int64_t* idx, const T* dy, T* dx, NdGeom g, int64_t total,
                                   int* flag) {
  __shared__ int64_t tile[kThreads];
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads; first < total;
       first += static_cast<int64_t>(gridDim.x) * kThreads) {
    int64_t k = first + threadIdx.x;
    bool live = k < total;
    int64_t r = live ? k / g.inner : 0, e = live ? k - r * g.inner : 0;
    int64_t batch = r / g.cells, cell = r - batch * g.cells;
    // The tuples of this thread's batch; a block may span batches, so the
    // tiles walk all tuples and each thread keeps those of its batch.
    double acc = 0.0;
    for (int64_t t0 = 0; t0 < g.tuples; t0 += kThreads) {
      int64_t len = g.tuples - t0 < kThreads ? g.tuples - t0 : kThreads;
      __syncthreads(); // the previous tile is no longer read
      if (threadIdx.x < len)
        tile[threadIdx.x] = tupleCell(idx, g, t0 + threadIdx.x, flag);
      __syncthreads();
      if (live)
        for (int64_t j = 0; j < len; ++j) {
          int64_t t = t0 + j;
          if (t / g.perBatch == batch && tile[j] == cell)
            acc += static_cast<double>(dy[t * g.inner + e]);
        }
    }
    if (live)
      dx[k] = static_cast<T>(acc);
  }
}

} // namespace

bool gatherNd(const TensorView& data, const TensorView& indices, const TensorView& y,
              const GatherNdParams& p) {
  NdGeom g;
  if (data.dtype != y.dtype || !ndGeom(data.shape, indices, p.batchDims, y.shape, g))
    return LWRT_REJECT("gatherNd", "cannot gather " + shapeString(y.shape) + " from " +
                                       shapeString(data.shape) + " at I64 indices " +
                                       shapeString(indices.shape) + " with batch_dims " +
                                       std::to_string(p.batchDims));
  int64_t total = y.numel();
  if (total == 0)
    return true;
  cudaStream_t s = context().stream;
  int* flag = context().errorFlag;
  const auto* ix = indices.as<const int64_t>();
  switch (dtypeSize(data.dtype)) {
  case 1:
    gatherNdKernel<<<blocksFor(total), kThreads, 0, s>>>(data.as<const uint8_t>(), ix,
                                                         y.as<uint8_t>(), g, total, flag);
    break;
  case 2:
    gatherNdKernel<<<blocksFor(total), kThreads, 0, s>>>(data.as<const uint16_t>(), ix,
                                                         y.as<uint16_t>(), g, total, flag);
    break;
  case 4:
    gatherNdKernel<<<blocksFor(total), kThreads, 0, s>>>(data.as<const uint32_t>(), ix,
                                                         y.as<uint32_t>(), g, total, flag);
    break;
  default:
    gatherNdKernel<<<blocksFor(total), kThreads, 0, s>>>(data.as<const uint64_t>(), ix,
                                                         y.as<uint64_t>(), g, total, flag);
    break;
  }
  LWRT_CUDA(cudaGetLastError());
  return true;
}

bool gatherNdGrad(const TensorView& indices, const TensorView& dy, const TensorView& dx,
                  const GatherNdParams& p) {
  NdGeom g;
  bool isFloat = dx.dtype == DType::F32 || dx.dtype == DType::F64;
  if (dy.dtype != dx.dtype || !isFloat || !ndGeom(dx.shape, indices, p.batchDims, dy.shape, g))
    return LWRT_REJECT("gatherNdGrad", "cannot scatter " + shapeString(dy.shape) + " into " +
                                           shapeString(dx.shape) + " at I64 indices " +
                                           shapeString(indices.shape) + " with batch_dims " +
                                           std::to_string(p.batchDims));
  int64_t total = dx.numel();
  if (total == 0)
    return true;
  cudaStream_t s = context().stream;
  int* flag = context().errorFlag;
  const auto* ix = indices.as<const int64_t>();
  if (dx.dtype == DType::F32)
    gatherNdGradKernel<<<blocksFor(total), kThreads, 0, s>>>(ix, dy.as<const float>(),
                                                             dx.as<float>(), g, total, flag);
  else
    gatherNdGradKernel<<<blocksFor(total), kThreads, 0, s>>>(ix, dy.as<const double>(),
                                                             dx.as<double>(), g, total, flag);
  LWRT_CUDA(cudaGetLastError());
  return true;
}

} // namespace lwrt::cuda
