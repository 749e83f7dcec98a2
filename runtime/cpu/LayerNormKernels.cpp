// LayerNormKernels.cpp - layer_norm and layer_norm_grad of lwrt/cpu_nn.h
//
// The formulas of the reference kernels (interp/TrainOps.cpp): x is viewed
// as [rows, n] with n the size of the normalized dims; each row's mean,
// variance and the per-row sums of the gradient are kept in double.
#include "Common.h"
#include "lwrt/cpu_nn.h"

#include <cmath>
#include <initializer_list>
#include <vector>

namespace lwrt::cpu {
namespace {

using detail::dispatch;
using detail::floatViews;

/// x as [rows, n] (lwrt/kernel_checks.h).
using Rows = LayerRows;

template <typename T>
bool layerNormImpl(const TensorView& xv, const TensorView& sv, const TensorView& bv,
                   const TensorView& yv, const TensorView& mv, const TensorView& iv,
                   const LayerNormParams& p) {
  Rows L;
  if (!layerRows(xv, p.axis, {&yv}, {&sv, &bv}, {&mv, &iv}, L))
    return false;
  const T *x = xv.as<T>(), *scale = sv.as<T>(), *bias = bv.as<T>();
  T *y = yv.as<T>(), *mean = mv.as<T>(), *inv = iv.as<T>();
  double n = static_cast<double>(L.n);
  for (int64_t r = 0; r < L.rows; ++r) {
    const T* xr = x + r * L.n;
    double m = 0, var = 0;
    for (int64_t j = 0; j < L.n; ++j)
      m += static_cast<double>(xr[j]);
    m /= n;
    for (int64_t j = 0; j < L.n; ++j) {
      double d = static_cast<double>(xr[j]) - m;
      var += d * d;
    }
    double is = 1.0 / std::sqrt(var / n + p.epsilon);
    for (int64_t j = 0; j < L.n; ++j)
      y[r * L.n + j] =
          static_cast<T>((static_cast<double>(xr[j]) - m) * is * static_cast<double>(scale[j]) +
                         static_cast<double>(bias[j]));
    mean[r] = static_cast<T>(m);
    inv[r] = static_cast<T>(is);
  }
  return true;
}

template <typename T>
bool layerNormGradImpl(const TensorView& xv, const TensorView& sv, const TensorView& mv,
                       const TensorView& iv, const TensorView& dyv, const TensorView& dxv,
                       const TensorView& dsv, const TensorView& dbv, const LayerNormParams& p) {
  Rows L;
  if (!layerRows(xv, p.axis, {&dyv, &dxv}, {&sv, &dsv, &dbv}, {&mv, &iv}, L))
    return false;
  const T *x = xv.as<T>(), *scale = sv.as<T>(), *mean = mv.as<T>(), *inv = iv.as<T>();
  const T* dy = dyv.as<T>();
  T* dx = dxv.as<T>();
  std::vector<double> dscale(static_cast<size_t>(L.n), 0.0), dbias(static_cast<size_t>(L.n), 0.0);
  double n = static_cast<double>(L.n);
  for (int64_t r = 0; r < L.rows; ++r) {
    double m = static_cast<double>(mean[r]), is = static_cast<double>(inv[r]);
    double mg = 0, mgx = 0;
    for (int64_t j = 0; j < L.n; ++j) {
      int64_t k = r * L.n + j;
      double xhat = (static_cast<double>(x[k]) - m) * is, d = static_cast<double>(dy[k]);
      double g = d * static_cast<double>(scale[j]);
      mg += g;
      mgx += g * xhat;
      dscale[j] += d * xhat;
      dbias[j] += d;
    }
    mg /= n;
    mgx /= n;
    for (int64_t j = 0; j < L.n; ++j) {
      int64_t k = r * L.n + j;
      double xhat = (static_cast<double>(x[k]) - m) * is;
      double g = static_cast<double>(dy[k]) * static_cast<double>(scale[j]);
      dx[k] = static_cast<T>(is * (g - mg - xhat * mgx));
    }
  }
  T *ds = dsv.as<T>(), *db = dbv.as<T>();
  for (int64_t j = 0; j < L.n; ++j) {
    ds[j] = static_cast<T>(dscale[j]);
    db[j] = static_cast<T>(dbias[j]);
  }
  return true;
}

} // namespace

bool layerNorm(const TensorView& x, const TensorView& scale, const TensorView& bias,
               const TensorView& y, const TensorView& mean, const TensorView& invStdDev,
               const LayerNormParams& p) {
  return floatViews(x.dtype, {&x, &scale, &bias, &y, &mean, &invStdDev}) &&
         dispatch(x.dtype, [&](auto t) {
           return layerNormImpl<decltype(t)>(x, scale, bias, y, mean, invStdDev, p);
         });
}

bool layerNormGrad(const TensorView& x, const TensorView& scale, const TensorView& mean,
                   const TensorView& invStdDev, const TensorView& dy, const TensorView& dx,
                   const TensorView& dscale, const TensorView& dbias, const LayerNormParams& p) {
  return floatViews(x.dtype, {&x, &scale, &mean, &invStdDev, &dy, &dx, &dscale, &dbias}) &&
         dispatch(x.dtype, [&](auto t) {
           return layerNormGradImpl<decltype(t)>(x, scale, mean, invStdDev, dy, dx, dscale, dbias,
                                                 p);
         });
}

} // namespace lwrt::cpu
