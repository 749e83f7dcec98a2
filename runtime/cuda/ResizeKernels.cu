//===- ResizeKernels.cu - resize and resize_grad on the GPU ---------------===//
//
// The kernels of lwrt/cuda_resize.h: grid-stride loops over the result
// elements (the dx elements for the gradient, each gathering its dy
// elements in ascending order: no atomics, the same bits every run and the
// CPU's) calling lwrt/resize_math.h, in double, rounded once to the element
// type. The plan is checked on the host, as the CPU backend checks it.
//
//===----------------------------------------------------------------------===//
#include "cuda/KernelSupport.cuh"
#include "lwrt/cuda_resize.h"
#include "lwrt/kernel_checks.h"

#include <cstdint>
#include <string>

namespace lwrt::cuda {

namespace {

__device__ int64_t firstThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ int64_t gridThreads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

template <typename T> __global__ void resizeKernel(const T* x, T* y, int64_t n, ResizePlan p) {
  for (int64_t k = firstThread(); k < n; k += gridThreads())
    y[k] = static_cast<T>(resizeValue(p, x, k));
}

template <typename T>
__global__ void resizeGradKernel(const T* dy, T* dx, int64_t n, ResizePlan p) {
  for (int64_t k = firstThread(); k < n; k += gridThreads())
    dx[k] = static_cast<T>(resizeGradValue(p, dy, k));
}

} // namespace

bool resize(const TensorView& x, const TensorView& y, const ResizeParams& p) {
  ResizePlan plan;
  if (x.dtype != y.dtype || !makeResizePlan(x.shape, y.shape, p, plan) ||
      !dispatchFloat(x.dtype, [](auto) { return true; }))
    return LWRT_REJECT("resize: takes float x and y of one type whose shapes fit the params");
  int64_t n = y.numel();
  if (n == 0)
    return true;
  return dispatchFloat(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    LWRT_LAUNCH(resizeKernel<T>, blocksFor(n), kThreads, x.as<const T>(), y.as<T>(), n, plan);
    return true;
  });
}

bool resizeGrad(const TensorView& dy, const TensorView& dx, const ResizeParams& p) {
  ResizePlan plan;
  if (dy.dtype != dx.dtype || !makeResizePlan(dx.shape, dy.shape, p, plan) ||
      !dispatchFloat(dy.dtype, [](auto) { return true; }))
    return LWRT_REJECT("resizeGrad: takes float dy and dx of one type whose shapes fit the params");
  int64_t n = dx.numel();
  if (n == 0)
    return true;
  return dispatchFloat(dy.dtype, [&](auto tag) {
    using T = decltype(tag);
    LWRT_LAUNCH(resizeGradKernel<T>, blocksFor(n), kThreads, dy.as<const T>(), dx.as<T>(), n, plan);
    return true;
  });
}

} // namespace lwrt::cuda
