//===- LanguageKernels.cu - gather/scatter elements, nll_loss on the GPU --===//
//
// The kernels of lwrt/cuda_language.h, walking the elements with the
// structs of lwrt/language_math.h, as the interpreter and the CPU kernels
// do; the host-side checks are the CPU backend's.
//  - gather_elements and scatter_elements: one thread per line of indices
//    along the axis, each line reading or writing one line of data in the
//    CPU's order (no atomics: duplicate indices end as on the CPU).
//  - nll_loss: one block; each thread sums every blockDim.x-th target in
//    order, in double, and a fixed tree adds the threads' sums
//    (deterministic; within rounding of the CPU's sum in order); its
//    gradient: one thread per target after one block has summed the
//    weights of a mean the same way.
// An index or target out of range sets the device error flag
// (kIndexOutOfRange, kLabelOutOfRange).
//
//===----------------------------------------------------------------------===//
#include "cuda/KernelSupport.cuh"
#include "lwrt/cuda_language.h"
#include "lwrt/kernel_checks.h"

#include <cstdint>
#include <string>
#include <vector>

namespace lwrt::cuda {

namespace {

__device__ __forceinline__ void raiseFlag(int* flag, int code) {
  if (flag)
    atomicCAS(flag, 0, code);
}

template <typename J, typename U>
__global__ void gatherElementsKernel(const U* data, const J* idx, U* y, ElementsLines w,
                                     int* flag) {
  LWRT_GRID_STRIDE(l, w.lines) {
    int64_t i0, d0;
    w.lineStart(l, i0, d0);
    for (int64_t j = 0; j < w.perLine; ++j) {
      int64_t at = i0 + j * w.idxStride[w.axis];
      int64_t from = w.at(d0, static_cast<int64_t>(idx[at]));
      if (from < 0) {
        raiseFlag(flag, kIndexOutOfRange);
        y[at] = U{};
      } else {
        y[at] = data[from];
      }
    }
  }
}

/// y (a copy of data) with the updates written, or added when Add.
template <bool Add, typename J, typename U>
__global__ void scatterElementsKernel(const J* idx, const U* updates, U* y, ElementsLines w,
                                      int* flag) {
  LWRT_GRID_STRIDE(l, w.lines) {
    int64_t i0, d0;
    w.lineStart(l, i0, d0);
    for (int64_t j = 0; j < w.perLine; ++j) {
      int64_t at = i0 + j * w.idxStride[w.axis];
      int64_t to = w.at(d0, static_cast<int64_t>(idx[at]));
      if (to < 0) {
        raiseFlag(flag, kIndexOutOfRange);
        continue;
      }
      if constexpr (Add)
        y[to] = y[to] + updates[at];
      else
        y[to] = updates[at];
    }
  }
}

template <typename J> __device__ bool targetOk(const NllWalk& w, J t) {
  return w.ignored(static_cast<int64_t>(t)) || w.valid(static_cast<int64_t>(t));
}

/// The loss of targets j = threadIdx.x, threadIdx.x + blockDim.x, ... (one
/// block): per target for reduction none, else their sum, or their sum over
/// the total weight for a mean. Each thread sums its targets in order, in
/// double, and blockSum adds the threads' sums in a fixed tree: the same
/// result on every run. A target out of range anywhere makes the loss NaN.
template <typename J, typename T>
__global__ void nllLossKernel(const T* x, const J* t, const T* weight, T* loss, NllWalk w,
                              NllReduction r, int* flag) {
  __shared__ double shared[kReduceThreads];
  __shared__ int bad;
  if (threadIdx.x == 0)
    bad = 0;
  __syncthreads();
  double sum = 0, total = 0;
  for (int64_t j = threadIdx.x; j < w.targets; j += blockDim.x) {
    int64_t c = static_cast<int64_t>(t[j]);
    if (!targetOk(w, t[j])) {
      atomicExch(&bad, 1);
      continue;
    }
    double term = w.term(x, j, c, weight);
    if (r == NllReduction::None)
      loss[j] = static_cast<T>(term);
    sum += term;
    if (r == NllReduction::Mean)
      total += w.weightOf(c, weight);
  }
  __syncthreads();
  if (bad) {
    if (threadIdx.x == 0) {
      raiseFlag(flag, kLabelOutOfRange);
      *loss = static_cast<T>(NAN);
    }
    return;
  }
  if (r == NllReduction::None)
    return;
  sum = blockSum(sum, shared);
  if (r == NllReduction::Mean)
    total = blockSum(total, shared);
  if (threadIdx.x == 0)
    *loss = static_cast<T>(r == NllReduction::Mean ? sum / total : sum);
}

/// One block: *divisor = the total weight of the targets (mean), else 1,
/// summed as nllLossKernel sums it.
template <typename J, typename T>
__global__ void nllDivisorKernel(const J* t, const T* weight, NllWalk w, bool mean,
                                 double* divisor) {
  __shared__ double shared[kReduceThreads];
  double total = 0;
  for (int64_t j = threadIdx.x; mean && j < w.targets; j += blockDim.x)
    total += w.weightOf(static_cast<int64_t>(t[j]), weight);
  total = blockSum(total, shared);
  if (threadIdx.x == 0)
    *divisor = mean ? total : 1.0;
}

/// One thread per target: its class's element of dinput (zeroed before).
template <typename J, typename T>
__global__ void nllLossGradKernel(const T* dloss, const J* t, const T* weight, T* dx, NllWalk w,
                                  bool none, const double* divisor, int* flag) {
  LWRT_GRID_STRIDE(j, w.targets) {
    int64_t c = static_cast<int64_t>(t[j]);
    if (!targetOk(w, t[j])) {
      raiseFlag(flag, kLabelOutOfRange);
      continue;
    }
    if (w.ignored(c))
      continue;
    double d = none ? static_cast<double>(dloss[j]) : static_cast<double>(*dloss) / *divisor;
    dx[w.inputAt(j, c)] = static_cast<T>(-w.weightOf(c, weight) * d);
  }
}

/// The lines of `indices` into `data` along `axis`; false when they do not fit.
bool elementsOf(const TensorView& data, const TensorView& indices, int64_t axis, ElementsLines& w) {
  return indices.rank() == data.rank() && rowMajor({&data, &indices}) &&
         (indices.dtype == DType::I64 || indices.dtype == DType::I32) &&
         makeElementsLines(static_cast<int>(data.rank()), data.shape.data(), indices.shape.data(),
                           axis, w);
}

/// The walk of an nll_loss with input `shape`; false when target or weight
/// do not fit.
bool nllOf(const std::vector<int64_t>& shape, DType dtype, const TensorView& target,
           const TensorView* weight, int64_t ignore, NllWalk& w) {
  if (shape.size() < 2 || (target.dtype != DType::I64 && target.dtype != DType::I32))
    return false;
  std::vector<int64_t> ts{shape[0]};
  ts.insert(ts.end(), shape.begin() + 2, shape.end());
  if (target.shape != ts ||
      (weight && (weight->dtype != dtype || weight->shape != std::vector<int64_t>{shape[1]})))
    return false;
  w = makeNllWalk(static_cast<int>(shape.size()), shape.data(), ignore);
  return true;
}

} // namespace

bool gatherElements(const TensorView& data, const TensorView& indices, const TensorView& y,
                    const GatherElementsParams& p) {
  ElementsLines w;
  if (y.dtype != data.dtype || y.shape != indices.shape || !rowMajor({&y}) ||
      !elementsOf(data, indices, p.axis, w))
    return LWRT_REJECT("gatherElements: takes data, I64 or I32 indices of its rank no larger "
                       "off the axis, and y of data's type and indices' shape");
  if (w.lines == 0)
    return true;
  int* flag = context().errorFlag;
  return dispatchInt(indices.dtype, [&](auto itag) {
    using J = decltype(itag);
    return dispatchBytes(data.dtype, [&](auto tag) {
      using U = decltype(tag);
      gatherElementsKernel<J, U><<<blocksFor(w.lines), kThreads, 0, context().stream>>>(
          data.as<const U>(), indices.as<const J>(), y.as<U>(), w, flag);
      LWRT_CUDA(cudaGetLastError());
      return true;
    });
  });
}

bool scatterElements(const TensorView& data, const TensorView& indices, const TensorView& updates,
                     const TensorView& y, const ScatterElementsParams& p) {
  ElementsLines w;
  bool types = p.add ? dispatchNumeric(data.dtype, [](auto) { return true; })
                     : dispatchBytes(data.dtype, [](auto) { return true; });
  if (y.dtype != data.dtype || y.shape != data.shape || updates.dtype != data.dtype ||
      updates.shape != indices.shape || !rowMajor({&y, &updates}) || !types ||
      !elementsOf(data, indices, p.axis, w))
    return LWRT_REJECT("scatterElements: takes data, I64 or I32 indices of its rank no larger "
                       "off the axis, updates of data's type and indices' shape (numbers to "
                       "add), and y of data's type and shape");
  if (y.data != data.data && data.numel() > 0)
    LWRT_CUDA(cudaMemcpyAsync(y.data, data.data, static_cast<size_t>(data.bytes()),
                              cudaMemcpyDeviceToDevice, context().stream));
  if (w.lines == 0)
    return true;
  int* flag = context().errorFlag;
  return dispatchInt(indices.dtype, [&](auto itag) {
    using J = decltype(itag);
    if (p.add)
      return dispatchNumeric(data.dtype, [&](auto tag) {
        using T = decltype(tag);
        scatterElementsKernel<true, J, T><<<blocksFor(w.lines), kThreads, 0, context().stream>>>(
            indices.as<const J>(), updates.as<const T>(), y.as<T>(), w, flag);
        LWRT_CUDA(cudaGetLastError());
        return true;
      });
    return dispatchBytes(data.dtype, [&](auto tag) {
      using U = decltype(tag);
      scatterElementsKernel<false, J, U><<<blocksFor(w.lines), kThreads, 0, context().stream>>>(
          indices.as<const J>(), updates.as<const U>(), y.as<U>(), w, flag);
      LWRT_CUDA(cudaGetLastError());
      return true;
    });
  });
}

bool nllLoss(const TensorView& input, const TensorView& target, const TensorView* weight,
             const TensorView& loss, const NllLossParams& p) {
  NllWalk w;
  bool none = p.reduction == NllReduction::None;
  if (loss.dtype != input.dtype || !isFloatType(input.dtype) || !rowMajor({&input, &loss}) ||
      !nllOf(input.shape, input.dtype, target, weight, p.ignoreIndex, w) ||
      (none ? loss.shape != target.shape : loss.rank() != 0))
    return LWRT_REJECT("nllLoss: takes input [N, C, d...] F32 or F64, target I64 or I32 "
                       "[N, d...], an optional weight [C], and the loss of the reduction's shape");
  int* flag = context().errorFlag;
  return dispatchInt(target.dtype, [&](auto itag) {
    using J = decltype(itag);
    return dispatchFloat(input.dtype, [&](auto tag) {
      using T = decltype(tag);
      nllLossKernel<J, T><<<1, kReduceThreads, 0, context().stream>>>(
          input.as<const T>(), target.as<const J>(), weight ? weight->as<const T>() : nullptr,
          loss.as<T>(), w, p.reduction, flag);
      LWRT_CUDA(cudaGetLastError());
      return true;
    });
  });
}

bool nllLossGrad(const TensorView& dloss, const TensorView& target, const TensorView* weight,
                 const TensorView& dinput, const NllLossParams& p) {
  NllWalk w;
  bool none = p.reduction == NllReduction::None;
  if (dloss.dtype != dinput.dtype || !isFloatType(dinput.dtype) || !rowMajor({&dloss, &dinput}) ||
      !nllOf(dinput.shape, dinput.dtype, target, weight, p.ignoreIndex, w) ||
      (none ? dloss.shape != target.shape : dloss.rank() != 0))
    return LWRT_REJECT("nllLossGrad: takes dloss of the reduction's shape, target I64 or I32 "
                       "[N, d...], an optional weight [C], and dinput [N, C, d...] F32 or F64");
  if (dinput.numel() == 0)
    return true;
  LWRT_CUDA(cudaMemsetAsync(dinput.data, 0, static_cast<size_t>(dinput.bytes()), context().stream));
  if (w.targets == 0)
    return true;
  if (!ensureWorkspace(sizeof(double)))
    return false;
  double* divisor = static_cast<double*>(context().workspace);
  int* flag = context().errorFlag;
  return dispatchInt(target.dtype, [&](auto itag) {
    using J = decltype(itag);
    return dispatchFloat(dinput.dtype, [&](auto tag) {
      using T = decltype(tag);
      const T* wts = weight ? weight->as<const T>() : nullptr;
      nllDivisorKernel<J, T><<<1, kReduceThreads, 0, context().stream>>>(
          target.as<const J>(), wts, w, p.reduction == NllReduction::Mean, divisor);
      LWRT_CUDA(cudaGetLastError());
      nllLossGradKernel<J, T><<<blocksFor(w.targets), kThreads, 0, context().stream>>>(
          dloss.as<const T>(), target.as<const J>(), wts, dinput.as<T>(), w, none, divisor, flag);
      LWRT_CUDA(cudaGetLastError());
      return true;
    });
  });
}

} // namespace lwrt::cuda
