// NNNormKernels.cpp - normalization, softmax and loss kernels of lwrt/cpu_nn.h
//
// Each follows the formula of its reference kernel (interp/Interpreter.cpp,
// interp/TrainOps.cpp); sums over many elements are kept in double.
#include "Bf16.h"
#include "Common.h"
#include "Parallel.h"
#include "lwrt/cpu_nn.h"
#include "lwrt/loss_math.h"
#include "lwrt/norm_math.h"
#include "lwrt/shape_math.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <vector>

namespace lwrt::cpu {
namespace {

using detail::blocked8;
using detail::dispatch;
using detail::floatViews;
using detail::rowMajor;

/// The views are all row-major, or all float32 nChw8c.
bool sameLayouts(std::initializer_list<const TensorView*> views) {
  return rowMajor(views) || blocked8(views);
}

/// Channel layout of an [N, C, ...] tensor: `count` elements per channel,
/// element q (of `inner`) of image n's channel c at base(n, c) + q * stride
/// (row-major: stride 1; nChw8c: the 8 channels of a block side by side).
struct Channels {
  int64_t N = 0, C = 0, inner = 0, count = 0, stride = 1;
  int64_t base(int64_t n, int64_t c) const {
    return stride == 1 ? (n * C + c) * inner : (n * C + c - c % 8) * inner + c % 8;
  }
};
bool channels(const TensorView& x, Channels& L) {
  if (x.rank() < 2)
    return false;
  L.N = x.shape[0];
  L.C = x.shape[1];
  L.inner = 1;
  for (int64_t d = 2; d < x.rank(); ++d)
    L.inner *= x.shape[d];
  L.count = L.N * L.inner;
  L.stride = x.layout == Layout::NChw8c ? 8 : 1;
  return true;
}

bool isVector(const TensorView& v, int64_t n) { return v.shape == std::vector<int64_t>{n}; }

//===--- LRN --------------------------------------------------------------===//

/// s^-beta, with the usual betas as square roots (much cheaper than pow).
template <typename T> T powMinus(T s, T beta) {
  if (beta == T(0.75)) {
    T r = std::sqrt(s);
    return T(1) / (r * std::sqrt(r));
  }
  if (beta == T(0.5))
    return T(1) / std::sqrt(s);
  if (beta == T(1))
    return T(1) / s;
  return std::pow(s, -beta);
}

/// The LRN window of one (image, channel) plane: channels [lo, hi].
struct LrnGeom {
  int64_t N, C, hw, below, above;
  int64_t first(int64_t ch) const { return std::max<int64_t>(0, ch - below); }
  int64_t last(int64_t ch) const { return std::min(C - 1, ch + above); }
};
LrnGeom lrnGeom(const TensorView& x, const LrnParams& p) {
  int64_t below = (p.size - 1) / 2;
  return {x.shape[0], x.shape[1], x.shape[2] * x.shape[3], below, p.size - 1 - below};
}

/// s = bias + alpha/size * sum of squares over the channel window, for the
/// plane (n, ch) of x, into out[hw].
template <typename T>
void lrnScalePlane(const T* x, const LrnGeom& g, const LrnParams& p, int64_t n, int64_t ch,
                   T* out) {
  T scale = static_cast<T>(p.alpha / static_cast<double>(p.size)), bias = static_cast<T>(p.bias);
  std::fill(out, out + g.hw, T(0));
  for (int64_t j = g.first(ch); j <= g.last(ch); ++j) {
    const T* in = x + (n * g.C + j) * g.hw;
    for (int64_t q = 0; q < g.hw; ++q)
      out[q] += in[q] * in[q];
  }
  for (int64_t q = 0; q < g.hw; ++q)
    out[q] = bias + scale * out[q];
}

/// Calls fn(n, ch) for every (image, channel) plane, spread over the pool.
template <typename Fn> void forEachLrnPlane(const LrnGeom& g, int64_t work, Fn fn) {
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, work));
  detail::parallelFor(g.N * g.C, grain, [&](int64_t first, int64_t last) {
    for (int64_t k = first; k < last; ++k)
      fn(k / g.C, k % g.C);
  });
}

template <typename T> bool lrnImpl(const TensorView& xv, const TensorView& yv, const LrnParams& p) {
  if (xv.rank() != 4 || yv.shape != xv.shape || p.size < 1)
    return false;
  LrnGeom g = lrnGeom(xv, p);
  const T* x = xv.as<T>();
  T* y = yv.as<T>();
  T beta = static_cast<T>(p.beta);
  forEachLrnPlane(g, g.hw * p.size, [&](int64_t n, int64_t ch) {
    std::vector<T> s(static_cast<size_t>(g.hw));
    lrnScalePlane(x, g, p, n, ch, s.data());
    int64_t base = (n * g.C + ch) * g.hw;
    for (int64_t q = 0; q < g.hw; ++q)
      y[base + q] = x[base + q] * powMinus(s[q], beta);
  });
  return true;
}

template <typename T>
bool lrnGradImpl(const TensorView& xv, const TensorView& yv, const TensorView& dyv,
                 const TensorView& dxv, const LrnParams& p) {
  if (xv.rank() != 4 || yv.shape != xv.shape || dyv.shape != xv.shape || dxv.shape != xv.shape ||
      p.size < 1)
    return false;
  // dx_j = dy_j s_j^-beta - 2 alpha beta / size * x_j * sum_{c: j in win(c)} dy_c y_c / s_c.
  LrnGeom g = lrnGeom(xv, p);
  const T *x = xv.as<T>(), *y = yv.as<T>(), *dy = dyv.as<T>();
  T* dx = dxv.as<T>();
  T beta = static_cast<T>(p.beta);
  T coef = static_cast<T>(2.0 * p.alpha * p.beta / static_cast<double>(p.size));
  // First every plane's s^-beta (kept in dx) and r = dy y / s, then the sums.
  std::vector<T> r(static_cast<size_t>(xv.numel()));
  forEachLrnPlane(g, g.hw * p.size, [&](int64_t n, int64_t ch) {
    int64_t base = (n * g.C + ch) * g.hw;
    T* s = dx + base;
    lrnScalePlane(x, g, p, n, ch, s);
    for (int64_t q = 0; q < g.hw; ++q) {
      r[base + q] = dy[base + q] * y[base + q] / s[q];
      s[q] = powMinus(s[q], beta);
    }
  });
  forEachLrnPlane(g, g.hw * p.size, [&](int64_t n, int64_t j) {
    std::vector<T> acc(static_cast<size_t>(g.hw), T(0));
    // Channels ch whose window holds j: ch - below <= j <= ch + above.
    for (int64_t ch = std::max<int64_t>(0, j - g.above); ch <= std::min(g.C - 1, j + g.below);
         ++ch) {
      const T* rc = r.data() + (n * g.C + ch) * g.hw;
      for (int64_t q = 0; q < g.hw; ++q)
        acc[q] += rc[q];
    }
    int64_t base = (n * g.C + j) * g.hw;
    for (int64_t q = 0; q < g.hw; ++q) {
      int64_t k = base + q;
      dx[k] = dy[k] * dx[k] - coef * x[k] * acc[q];
    }
  });
  return true;
}

//===--- Batch norm -------------------------------------------------------===//

/// Calls fn(ch) for every channel, spread over the pool.
template <typename Fn> void forEachChannel(const Channels& L, Fn fn) {
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, L.count));
  detail::parallelFor(L.C, grain, [&](int64_t first, int64_t last) {
    for (int64_t ch = first; ch < last; ++ch)
      fn(ch);
  });
}

/// Sum of f(row[q]) over a channel's rows, in double with four partial sums
/// (a fixed order: the same bits on any number of threads).
template <typename T, typename F>
double channelSum(const T* x, const Channels& L, int64_t ch, F f) {
  double total = 0;
  for (int64_t n = 0; n < L.N; ++n) {
    const T* row = x + L.base(n, ch);
    const int64_t s = L.stride;
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    int64_t q = 0;
    for (; q + 4 <= L.inner; q += 4) {
      a0 += f(row, q * s);
      a1 += f(row, (q + 1) * s);
      a2 += f(row, (q + 2) * s);
      a3 += f(row, (q + 3) * s);
    }
    for (; q < L.inner; ++q)
      a0 += f(row, q * s);
    total += (a0 + a1) + (a2 + a3);
  }
  return total;
}

template <typename T>
bool batchNormImpl(const TensorView& xv, const TensorView& sv, const TensorView& bv,
                   const TensorView& mv, const TensorView& vv, const TensorView& yv,
                   const BatchNormParams& p, const Activation& act) {
  Channels L;
  if (!channels(xv, L) || yv.shape != xv.shape)
    return false;
  for (const TensorView* v : {&sv, &bv, &mv, &vv})
    if (!isVector(*v, L.C))
      return false;
  const T *x = xv.as<T>(), *scale = sv.as<T>(), *bias = bv.as<T>(), *mean = mv.as<T>(),
          *var = vv.as<T>();
  T* y = yv.as<T>();
  forEachChannel(L, [&](int64_t ch) {
    T a = scale[ch] / std::sqrt(var[ch] + static_cast<T>(p.epsilon));
    for (int64_t n = 0; n < L.N; ++n) {
      const int64_t base = L.base(n, ch);
      for (int64_t q = 0, e = base; q < L.inner; ++q, e += L.stride)
        y[e] = act.apply(a * (x[e] - mean[ch]) + bias[ch]);
    }
  });
  return true;
}

template <typename T>
bool batchNormTrainImpl(const TensorView& xv, const TensorView& sv, const TensorView& bv,
                        const TensorView& yv, const TensorView& mv, const TensorView& vv,
                        const BatchNormTrainParams& p, const Activation& act) {
  Channels L;
  if (!channels(xv, L) || yv.shape != xv.shape)
    return false;
  for (const TensorView* v : {&sv, &bv, &mv, &vv})
    if (!isVector(*v, L.C))
      return false;
  const T *x = xv.as<T>(), *scale = sv.as<T>(), *bias = bv.as<T>();
  T *y = yv.as<T>(), *meanOut = mv.as<T>(), *varOut = vv.as<T>();
  double count = static_cast<double>(L.count);
  forEachChannel(L, [&](int64_t ch) {
    double mean = channelSum(x, L, ch, [](const T* r, int64_t q) { return double(r[q]); }) / count;
    double var = channelSum(x, L, ch,
                            [mean](const T* r, int64_t q) {
                              double d = r[q] - mean;
                              return d * d;
                            }) /
                 count;
    double a = bnFactor(scale[ch], var, p.epsilon);
    for (int64_t n = 0; n < L.N; ++n) {
      const int64_t base = L.base(n, ch);
      for (int64_t q = 0, e = base; q < L.inner; ++q, e += L.stride)
        y[e] = act.apply(static_cast<T>(bnNormalized(x[e], mean, a, bias[ch])));
    }
    meanOut[ch] = static_cast<T>(mean);
    varOut[ch] = static_cast<T>(var);
  });
  return true;
}

template <typename T>
bool batchNormGradImpl(const TensorView& xv, const TensorView& sv, const TensorView& mv,
                       const TensorView& vv, const TensorView& dyv, const TensorView& dxv,
                       const TensorView& dsv, const TensorView& dbv, const BatchNormTrainParams& p,
                       const TensorView* reluOut) {
  // xhat = (x - mean) invstd; dbias = sum dy; dscale = sum dy xhat;
  // dx = scale invstd / m (m dy - dbias - xhat dscale). With reluOut, dy is
  // the gradient of the relu after the batch norm, read as relu_grad's
  // result: dy where reluOut > 0, else 0.
  Channels L;
  if (!channels(xv, L) || dyv.shape != xv.shape || dxv.shape != xv.shape ||
      (reluOut && reluOut->shape != xv.shape))
    return false;
  for (const TensorView* v : {&sv, &mv, &vv, &dsv, &dbv})
    if (!isVector(*v, L.C))
      return false;
  const T *x = xv.as<T>(), *scale = sv.as<T>(), *meanIn = mv.as<T>(), *varIn = vv.as<T>(),
          *dy = dyv.as<T>();
  T *dx = dxv.as<T>(), *dscaleOut = dsv.as<T>(), *dbiasOut = dbv.as<T>();
  const T* y = reluOut ? reluOut->as<T>() : nullptr;
  const auto grad = [&](int64_t e) { return y && !(y[e] > T(0)) ? T(0) : dy[e]; };
  double m = static_cast<double>(L.count);
  forEachChannel(L, [&](int64_t ch) {
    double mean = meanIn[ch], invstd = bnInvStd(varIn[ch], p.epsilon);
    double dbias = 0, dxm = 0; // sum dy, sum dy (x - mean)
    for (int64_t n = 0; n < L.N; ++n) {
      const int64_t base = L.base(n, ch);
      for (int64_t q = 0, e = base; q < L.inner; ++q, e += L.stride) {
        const T g = grad(e);
        dbias += g;
        dxm += g * (x[e] - mean);
      }
    }
    double dscale = dxm * invstd;
    double a = scale[ch] * invstd / m;
    for (int64_t n = 0; n < L.N; ++n) {
      const int64_t base = L.base(n, ch);
      for (int64_t q = 0, e = base; q < L.inner; ++q, e += L.stride)
        dx[e] = static_cast<T>(bnInputGrad(x[e], grad(e), mean, invstd, a, m, dbias, dscale));
    }
    dscaleOut[ch] = static_cast<T>(dscale);
    dbiasOut[ch] = static_cast<T>(dbias);
  });
  return true;
}

//===--- Softmax ----------------------------------------------------------===//

/// Rows along `axis` (lwrt/shape_math.h).
using Rows = AxisRows;

/// Calls fn(outer, inner) for every row, spread over the pool.
template <typename Fn> void forEachRow(const Rows& r, Fn fn) {
  int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, r.n));
  detail::parallelFor(r.outer * r.inner, grain, [&](int64_t first, int64_t last) {
    for (int64_t k = first; k < last; ++k)
      fn(k / r.inner, k % r.inner);
  });
}

template <typename T>
bool softmaxImpl(const TensorView& xv, const TensorView& yv, const SoftmaxParams& p, bool log) {
  Rows r;
  if (!axisRows(xv.shape, p.axis, r) || yv.shape != xv.shape)
    return false;
  const T* x = xv.as<T>();
  T* y = yv.as<T>();
  forEachRow(r, [&](int64_t o, int64_t e) {
    int64_t base = o * r.n * r.inner + e;
    softmaxRow(x + base, y + base, r.n, r.inner, log);
  });
  return true;
}

template <typename T>
bool softmaxGradImpl(const TensorView& yv, const TensorView& dyv, const TensorView& dxv,
                     const SoftmaxParams& p, bool log) {
  Rows r;
  if (!axisRows(yv.shape, p.axis, r) || dyv.shape != yv.shape || dxv.shape != yv.shape)
    return false;
  const T *y = yv.as<T>(), *dy = dyv.as<T>();
  T* dx = dxv.as<T>();
  forEachRow(r, [&](int64_t o, int64_t e) {
    int64_t base = o * r.n * r.inner + e;
    softmaxGradRow(y + base, dy + base, dx + base, r.n, r.inner, log);
  });
  return true;
}

//===--- Losses -----------------------------------------------------------===//

/// The labels of softmax_xent as int64, or false when they do not fit
/// logits [..., K] (labels of the leading shape) or are out of range and
/// not `ignore`.
bool readLabels(const TensorView& logits, const TensorView& labels, int64_t ignore,
                std::vector<int64_t>& out) {
  if (logits.rank() < 2 ||
      labels.shape != std::vector<int64_t>(logits.shape.begin(), logits.shape.end() - 1) ||
      (labels.data == nullptr && labels.numel() != 0))
    return false;
  int64_t n = labels.numel(), k = logits.shape.back();
  out.resize(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    if (labels.dtype == DType::I64)
      out[r] = labels.as<int64_t>()[r];
    else if (labels.dtype == DType::I32)
      out[r] = labels.as<int32_t>()[r];
    else
      return false;
    if ((out[r] < 0 || out[r] >= k) && out[r] != ignore)
      return false;
  }
  return true;
}

bool isScalar(const TensorView& v) { return v.rank() == 0; }

template <typename T>
bool softmaxXentImpl(const TensorView& zv, const TensorView& lv, const TensorView& loss,
                     const XentParams& p) {
  std::vector<int64_t> labels;
  if (!readLabels(zv, lv, p.ignoreIndex, labels) || !isScalar(loss))
    return false;
  int64_t n = lv.numel(), k = zv.shape.back(), counted = 0;
  const T* z = zv.as<T>();
  double e = p.labelSmoothing;
  double total = 0;
  for (int64_t r = 0; r < n; ++r) {
    if (labels[r] == p.ignoreIndex)
      continue;
    ++counted;
    // (1-E)·(lse - z[label]) + E·mean_j(lse - z[j])
    double sum = 0;
    if (e != 0)
      for (int64_t j = 0; j < k; ++j)
        sum += z[r * k + j];
    total += xentRowLoss(rowLogSumExp(z + r * k, k), z[r * k + labels[r]], sum, k, e);
  }
  *loss.as<T>() = static_cast<T>(total / static_cast<double>(counted));
  return true;
}

template <typename T>
bool softmaxXentGradImpl(const TensorView& zv, const TensorView& lv, const TensorView& dlv,
                         const TensorView& dzv, const XentParams& p) {
  std::vector<int64_t> labels;
  if (!readLabels(zv, lv, p.ignoreIndex, labels) || !isScalar(dlv) || dzv.shape != zv.shape)
    return false;
  int64_t n = lv.numel(), k = zv.shape.back(), counted = 0;
  for (int64_t l : labels)
    counted += l != p.ignoreIndex;
  const T* z = zv.as<T>();
  T* dz = dzv.as<T>();
  double e = p.labelSmoothing, uniform = e / static_cast<double>(k);
  double scale = static_cast<double>(*dlv.as<T>()) / static_cast<double>(counted);
  for (int64_t r = 0; r < n; ++r) {
    if (labels[r] == p.ignoreIndex) {
      std::fill(dz + r * k, dz + (r + 1) * k, static_cast<T>(0));
      continue;
    }
    double lse = rowLogSumExp(z + r * k, k);
    for (int64_t j = 0; j < k; ++j)
      dz[r * k + j] =
          static_cast<T>(xentGradValue(z[r * k + j], lse, j == labels[r], e, uniform, scale));
  }
  return true;
}

template <typename T>
bool mseLossImpl(const TensorView& pv, const TensorView& tv, const TensorView& loss) {
  if (tv.shape != pv.shape || !isScalar(loss))
    return false;
  const T *pred = pv.as<T>(), *target = tv.as<T>();
  double sum = 0;
  for (int64_t k = 0; k < pv.numel(); ++k)
    sum += squaredDiff(pred[k], target[k]);
  *loss.as<T>() = static_cast<T>(sum / static_cast<double>(std::max<int64_t>(1, pv.numel())));
  return true;
}

template <typename T>
bool mseLossGradImpl(const TensorView& pv, const TensorView& tv, const TensorView& dlv,
                     const TensorView& dpv) {
  if (tv.shape != pv.shape || !isScalar(dlv) || dpv.shape != pv.shape)
    return false;
  const T *pred = pv.as<T>(), *target = tv.as<T>();
  T* dp = dpv.as<T>();
  T scale = mseGradScale(*dlv.as<T>(), pv.numel());
  for (int64_t k = 0; k < pv.numel(); ++k)
    dp[k] = (pred[k] - target[k]) * scale;
  return true;
}

} // namespace

//===--- Entry points -----------------------------------------------------===//

#define LWRT_DISPATCH(dtype, call)                                                                 \
  dispatch(dtype, [&](auto tag) {                                                                  \
    using T = decltype(tag);                                                                       \
    return call;                                                                                   \
  })

bool lrn(const TensorView& x, const TensorView& y, const LrnParams& p) {
  return floatViews(x.dtype, {&x, &y}) && rowMajor({&x, &y}) &&
         LWRT_DISPATCH(x.dtype, lrnImpl<T>(x, y, p));
}

bool lrnGrad(const TensorView& x, const TensorView& y, const TensorView& dy, const TensorView& dx,
             const LrnParams& p) {
  return floatViews(x.dtype, {&x, &y, &dy, &dx}) && rowMajor({&x, &y, &dy, &dx}) &&
         LWRT_DISPATCH(x.dtype, lrnGradImpl<T>(x, y, dy, dx, p));
}

bool batchNorm(const TensorView& x, const TensorView& scale, const TensorView& bias,
               const TensorView& mean, const TensorView& var, const TensorView& y,
               const BatchNormParams& p) {
  if (detail::Float32Views::narrow(x.dtype)) { // mixed precision: float32 parameters
    detail::Float32Views f;
    return y.dtype == x.dtype && batchNorm(f.in(x), scale, bias, mean, var, f.out(y), p) &&
           f.commit();
  }
  return floatViews(x.dtype, {&x, &scale, &bias, &mean, &var, &y}) &&
         rowMajor({&scale, &bias, &mean, &var}) && sameLayouts({&x, &y}) &&
         LWRT_DISPATCH(x.dtype, batchNormImpl<T>(x, scale, bias, mean, var, y, p, {}));
}

bool batchNormAct(const TensorView& x, const TensorView& scale, const TensorView& bias,
                  const TensorView& mean, const TensorView& var, const TensorView& y,
                  const BatchNormParams& p, const Activation& act) {
  if (detail::Float32Views::narrow(x.dtype)) {
    detail::Float32Views f;
    return y.dtype == x.dtype && batchNormAct(f.in(x), scale, bias, mean, var, f.out(y), p, act) &&
           f.commit();
  }
  return floatViews(x.dtype, {&x, &scale, &bias, &mean, &var, &y}) &&
         rowMajor({&scale, &bias, &mean, &var}) && sameLayouts({&x, &y}) &&
         LWRT_DISPATCH(x.dtype, batchNormImpl<T>(x, scale, bias, mean, var, y, p, act));
}

bool batchNormTrain(const TensorView& x, const TensorView& scale, const TensorView& bias,
                    const TensorView& y, const TensorView& mean, const TensorView& var,
                    const BatchNormTrainParams& p) {
  if (detail::Float32Views::narrow(x.dtype)) {
    detail::Float32Views f;
    return y.dtype == x.dtype && batchNormTrain(f.in(x), scale, bias, f.out(y), mean, var, p) &&
           f.commit();
  }
  return floatViews(x.dtype, {&x, &scale, &bias, &y, &mean, &var}) &&
         rowMajor({&scale, &bias, &mean, &var}) && sameLayouts({&x, &y}) &&
         LWRT_DISPATCH(x.dtype, batchNormTrainImpl<T>(x, scale, bias, y, mean, var, p, {}));
}

bool batchNormTrainAct(const TensorView& x, const TensorView& scale, const TensorView& bias,
                       const TensorView& y, const TensorView& mean, const TensorView& var,
                       const BatchNormTrainParams& p, const Activation& act) {
  if (detail::Float32Views::narrow(x.dtype)) {
    detail::Float32Views f;
    return y.dtype == x.dtype &&
           batchNormTrainAct(f.in(x), scale, bias, f.out(y), mean, var, p, act) && f.commit();
  }
  return floatViews(x.dtype, {&x, &scale, &bias, &y, &mean, &var}) &&
         rowMajor({&scale, &bias, &mean, &var}) && sameLayouts({&x, &y}) &&
         LWRT_DISPATCH(x.dtype, batchNormTrainImpl<T>(x, scale, bias, y, mean, var, p, act));
}

bool batchNormGrad(const TensorView& x, const TensorView& scale, const TensorView& mean,
                   const TensorView& var, const TensorView& dy, const TensorView& dx,
                   const TensorView& dscale, const TensorView& dbias,
                   const BatchNormTrainParams& p) {
  if (detail::Float32Views::narrow(x.dtype)) {
    detail::Float32Views f;
    return dy.dtype == x.dtype && dx.dtype == x.dtype &&
           batchNormGrad(f.in(x), scale, mean, var, f.in(dy), f.out(dx), dscale, dbias, p) &&
           f.commit();
  }
  return floatViews(x.dtype, {&x, &scale, &mean, &var, &dy, &dx, &dscale, &dbias}) &&
         rowMajor({&scale, &mean, &var, &dscale, &dbias}) && sameLayouts({&x, &dy, &dx}) &&
         LWRT_DISPATCH(
             x.dtype, batchNormGradImpl<T>(x, scale, mean, var, dy, dx, dscale, dbias, p, nullptr));
}

bool batchNormGradAct(const TensorView& x, const TensorView& scale, const TensorView& mean,
                      const TensorView& var, const TensorView& y, const TensorView& dy,
                      const TensorView& dx, const TensorView& dscale, const TensorView& dbias,
                      const BatchNormTrainParams& p, const Activation& act) {
  if (act.kind != Activation::Relu)
    return false;
  if (detail::Float32Views::narrow(x.dtype)) {
    detail::Float32Views f;
    return y.dtype == x.dtype && dy.dtype == x.dtype && dx.dtype == x.dtype &&
           batchNormGradAct(f.in(x), scale, mean, var, f.in(y), f.in(dy), f.out(dx), dscale, dbias,
                            p, act) &&
           f.commit();
  }
  return floatViews(x.dtype, {&x, &scale, &mean, &var, &y, &dy, &dx, &dscale, &dbias}) &&
         rowMajor({&scale, &mean, &var, &dscale, &dbias}) && sameLayouts({&x, &y, &dy, &dx}) &&
         LWRT_DISPATCH(x.dtype,
                       batchNormGradImpl<T>(x, scale, mean, var, dy, dx, dscale, dbias, p, &y));
}

bool softmax(const TensorView& x, const TensorView& y, const SoftmaxParams& p) {
  return floatViews(x.dtype, {&x, &y}) && rowMajor({&x, &y}) &&
         LWRT_DISPATCH(x.dtype, softmaxImpl<T>(x, y, p, false));
}

bool logSoftmax(const TensorView& x, const TensorView& y, const SoftmaxParams& p) {
  return floatViews(x.dtype, {&x, &y}) && rowMajor({&x, &y}) &&
         LWRT_DISPATCH(x.dtype, softmaxImpl<T>(x, y, p, true));
}

bool softmaxGrad(const TensorView& y, const TensorView& dy, const TensorView& dx,
                 const SoftmaxParams& p) {
  return floatViews(y.dtype, {&y, &dy, &dx}) && rowMajor({&y, &dy, &dx}) &&
         LWRT_DISPATCH(y.dtype, softmaxGradImpl<T>(y, dy, dx, p, false));
}

bool logSoftmaxGrad(const TensorView& y, const TensorView& dy, const TensorView& dx,
                    const SoftmaxParams& p) {
  return floatViews(y.dtype, {&y, &dy, &dx}) && rowMajor({&y, &dy, &dx}) &&
         LWRT_DISPATCH(y.dtype, softmaxGradImpl<T>(y, dy, dx, p, true));
}

bool softmaxXent(const TensorView& logits, const TensorView& labels, const TensorView& loss,
                 const XentParams& p) {
  return floatViews(logits.dtype, {&logits, &loss}) && rowMajor({&logits, &labels}) &&
         LWRT_DISPATCH(logits.dtype, softmaxXentImpl<T>(logits, labels, loss, p));
}

bool softmaxXentGrad(const TensorView& logits, const TensorView& labels, const TensorView& dloss,
                     const TensorView& dlogits, const XentParams& p) {
  return floatViews(logits.dtype, {&logits, &dloss, &dlogits}) &&
         rowMajor({&logits, &labels, &dlogits}) &&
         LWRT_DISPATCH(logits.dtype, softmaxXentGradImpl<T>(logits, labels, dloss, dlogits, p));
}

bool mseLoss(const TensorView& pred, const TensorView& target, const TensorView& loss) {
  return floatViews(pred.dtype, {&pred, &target, &loss}) && rowMajor({&pred, &target}) &&
         LWRT_DISPATCH(pred.dtype, mseLossImpl<T>(pred, target, loss));
}

bool mseLossGrad(const TensorView& pred, const TensorView& target, const TensorView& dloss,
                 const TensorView& dpred) {
  return floatViews(pred.dtype, {&pred, &target, &dloss, &dpred}) &&
         rowMajor({&pred, &target, &dpred}) &&
         LWRT_DISPATCH(pred.dtype, mseLossGradImpl<T>(pred, target, dloss, dpred));
}

#undef LWRT_DISPATCH

} // namespace lwrt::cpu
