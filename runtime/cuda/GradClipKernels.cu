//===- GradClipKernels.cu - square_sum and clip_coef on the GPU -----------===//
//
// The kernels of lwrt/cuda_grad_clip.h. Each operand's sum of squares is one
// block's: every thread sums a strided part in double, the block adds the
// threads' sums in a fixed tree (blockSum), and the block adds the result to
// the scalar, operand after operand on the stream: the same bits in every
// run. The terms and the clipping factor are lwrt/grad_clip_math.h's, as
// on the CPU and in the interpreter. One block per operand reads a
// gradient at a fraction of the GPU's bandwidth; the gradients of a model
// are read once per step.
//
//===----------------------------------------------------------------------===//
#include "cuda/KernelSupport.cuh"
#include "lwrt/cuda_grad_clip.h"

#include <cstdint>
#include <string>

namespace lwrt::cuda {

namespace {

constexpr int kSumThreads = 1024;

/// y += the sum of x's squares (one block).
template <typename T> __global__ void addSquareSumKernel(const T* x, int64_t n, T* y) {
  __shared__ double shared[kSumThreads];
  double sum = 0;
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x)
    sum += squareTerm(x[k]);
  sum = blockSum(sum, shared);
  if (threadIdx.x == 0)
    *y = static_cast<T>(static_cast<double>(*y) + sum);
}

template <typename T> __global__ void clipCoefKernel(const T* s, T* norm, T* coef, double maxNorm) {
  ClipResult<T> r = clipCoefficient(*s, maxNorm);
  *norm = r.norm;
  *coef = r.coef;
}

bool isScalar(const TensorView& v, DType t) { return v.dtype == t && v.numel() == 1 && v.data; }

} // namespace

bool squareSum(const std::vector<TensorView>& xs, const TensorView& y, const SquareSumParams&) {
  if ((y.dtype != DType::F32 && y.dtype != DType::F64) || !isScalar(y, y.dtype))
    return LWRT_REJECT("squareSum: writes an F32 or F64 scalar");
  for (const TensorView& x : xs)
    if (x.dtype != y.dtype || x.layout != Layout::RowMajor || (x.numel() > 0 && !x.data))
      return LWRT_REJECT("squareSum: takes row-major operands of its result's type");
  LWRT_CUDA(cudaMemsetAsync(y.data, 0, static_cast<size_t>(y.bytes()), context().stream));
  for (const TensorView& x : xs) {
    const int64_t n = x.numel();
    if (n == 0)
      continue;
    if (y.dtype == DType::F32)
      LWRT_LAUNCH(addSquareSumKernel<float>, 1, kSumThreads, x.as<const float>(), n, y.as<float>());
    else
      LWRT_LAUNCH(addSquareSumKernel<double>, 1, kSumThreads, x.as<const double>(), n,
                  y.as<double>());
  }
  return true;
}

bool clipCoef(const TensorView& s, const TensorView& norm, const TensorView& coef,
              const ClipCoefParams& p) {
  if ((s.dtype != DType::F32 && s.dtype != DType::F64) || !isScalar(s, s.dtype) ||
      !isScalar(norm, s.dtype) || !isScalar(coef, s.dtype))
    return LWRT_REJECT("clipCoef: takes and writes F32 or F64 scalars of one type");
  if (s.dtype == DType::F32)
    LWRT_LAUNCH(clipCoefKernel<float>, 1, 1, s.as<const float>(), norm.as<float>(),
                coef.as<float>(), p.max_norm);
  else
    LWRT_LAUNCH(clipCoefKernel<double>, 1, 1, s.as<const double>(), norm.as<double>(),
                coef.as<double>(), p.max_norm);
  return true;
}

} // namespace lwrt::cuda
