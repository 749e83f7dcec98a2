//===- ResizeKernels.cpp - resize and resize_grad on the CPU --------------===//
//
// The kernels of lwrt/cpu_resize.h: a loop over the result elements (the
// dx elements for the gradient) calling lwrt/resize_math.h, in double,
// rounded once to the element type.
//
//===----------------------------------------------------------------------===//
#include "lwrt/cpu_resize.h"
#include "lwrt/kernel_checks.h"

namespace lwrt::cpu {

bool resize(const TensorView& x, const TensorView& y, const ResizeParams& p) {
  ResizePlan plan;
  if (x.dtype != y.dtype || !makeResizePlan(x.shape, y.shape, p, plan))
    return false;
  return dispatchFloat(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xs = x.as<const T>();
    T* ys = y.as<T>();
    for (int64_t k = 0, n = y.numel(); k < n; ++k)
      ys[k] = static_cast<T>(resizeValue(plan, xs, k));
    return true;
  });
}

bool resizeGrad(const TensorView& dy, const TensorView& dx, const ResizeParams& p) {
  ResizePlan plan;
  if (dy.dtype != dx.dtype || !makeResizePlan(dx.shape, dy.shape, p, plan))
    return false;
  return dispatchFloat(dy.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* ds = dy.as<const T>();
    T* out = dx.as<T>();
    for (int64_t k = 0, n = dx.numel(); k < n; ++k)
      out[k] = static_cast<T>(resizeGradValue(plan, ds, k));
    return true;
  });
}

} // namespace lwrt::cpu
