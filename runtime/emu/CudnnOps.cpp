// emu/CudnnOps.cpp - the emulated cuDNN's pooling, LRN, batch norm and softmax
//
// Each call validates its descriptors as cuDNN documents, checks its device
// operands and enqueues the computation on the handle's stream. Data of
// 16 bits computes in float32 and is rounded once at the store; double in
// double. The formulas are cuDNN's:
//   - pooling: outputs 1 + (in + 2 * pad - window) / stride per spatial
//     dimension; max ignores the padding (PROPAGATE_NAN: a NaN in the window
//     is the maximum); average divides by the whole window
//     (COUNT_INCLUDE_PADDING) or by the elements inside the input
//     (COUNT_EXCLUDE_PADDING). The max backward routes each window's
//     gradient to one maximum; cuDNN documents no rule for ties, and the
//     emulator routes a tie to the LAST maximum in window order (row-major):
//     a trainer that relies on the first maximum (as PyTorch's CPU kernels
//     take it) finds out here. CUDNN_POOLING_MAX's backward adds the
//     gradients that reach one element in an order that changes from run to
//     run (atomics on a GPU; cuDNN lists it as non-deterministic),
//     CUDNN_POOLING_MAX_DETERMINISTIC in window order;
//   - LRN across channels: y = x / (k + alpha / n * sum of x^2 over the
//     window)^beta, the window [c - (n - 1) / 2, c + n - 1 - (n - 1) / 2];
//   - batch norm: normalized by the batch mean and the biased variance;
//     the running mean and variance become new * factor + old * (1 -
//     factor) with the unbiased variance (the old value read even when
//     factor is 1, so a NaN there stays); saved mean and 1 / sqrt(var +
//     eps); its backward with or without the saved statistics;
//   - softmax over C (MODE_CHANNEL) or C, H, W (MODE_INSTANCE): FAST
//     without subtracting the maximum, ACCURATE with, LOG as log-softmax.
#include "CudnnInternal.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

namespace lwemu::dnn {
namespace {

/// The element offset of (n, c, h, w) in `t`.
int64_t at(const cudnnTensorStruct& t, int64_t n, int64_t c, int64_t h, int64_t w) {
  return n * t.strides[0] + c * t.strides[1] + h * t.strides[2] + w * t.strides[3];
}

size_t bytesOf(const cudnnTensorStruct& t) {
  return static_cast<size_t>(extentElems(t)) * dataSize(t.type);
}

bool sameDims(const cudnnTensorStruct& a, const cudnnTensorStruct& b) {
  return std::equal(a.dims, a.dims + 4, b.dims) && a.type == b.type;
}

/// A tensor argument: null is BAD_PARAM, a dead one fatal, an unset one BAD_PARAM.
bool usable(const cudnnTensorStruct* t, const char* call, const char* what) {
  checkLive(t, Kind::Tensor, call, what);
  return t && t->set;
}

bool allSet(std::initializer_list<const void*> ptrs) {
  return std::all_of(ptrs.begin(), ptrs.end(), [](const void* p) { return p != nullptr; });
}

/// Sums v in blocks of 256 (a block's partial sums, then those in turn), as
/// a GPU's two-level reduction.
template <typename A> A blockedSum(const std::vector<A>& v) {
  A total = 0;
  for (size_t start = 0; start < v.size(); start += 256) {
    A partial = 0;
    for (size_t i = start; i < std::min(v.size(), start + 256); ++i)
      partial += v[i];
    total += partial;
  }
  return total;
}

//===--- Pooling ----------------------------------------------------------===//

/// The in-bounds elements of window (p, q), row-major: calls f(h, w).
template <typename F>
void window(const cudnnPoolingStruct& pd, const cudnnTensorStruct& x, int p, int q, F&& f) {
  for (int i = 0; i < pd.winH; ++i) {
    const int h = p * pd.strideH - pd.padH + i;
    if (h < 0 || h >= x.dims[2])
      continue;
    for (int j = 0; j < pd.winW; ++j) {
      const int w = q * pd.strideW - pd.padW + j;
      if (w >= 0 && w < x.dims[3])
        f(h, w);
    }
  }
}

bool isMax(cudnnPoolingMode_t m) {
  return m == CUDNN_POOLING_MAX || m == CUDNN_POOLING_MAX_DETERMINISTIC;
}

/// The divisor of an average window with `inside` elements in the input.
int divisor(const cudnnPoolingStruct& pd, int inside) {
  return pd.mode == CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING ? pd.winH * pd.winW : inside;
}

template <typename E>
void poolForward(cudnnPoolingStruct pd, cudnnTensorStruct xd, cudnnTensorStruct yd, const void* x,
                 void* y, Scale sc) {
  using A = typename E::Acc;
  const bool propagate = pd.nan == CUDNN_PROPAGATE_NAN;
  for (int n = 0; n < yd.dims[0]; ++n)
    for (int c = 0; c < yd.dims[1]; ++c)
      for (int p = 0; p < yd.dims[2]; ++p)
        for (int q = 0; q < yd.dims[3]; ++q) {
          A res = 0;
          if (isMax(pd.mode)) {
            A best = -std::numeric_limits<A>::infinity();
            window(pd, xd, p, q, [&](int h, int w) {
              A v = E::load(x, at(xd, n, c, h, w));
              if (std::isnan(best))
                return;
              if ((propagate && std::isnan(v)) || v > best)
                best = v;
            });
            res = best;
          } else {
            A sum = 0;
            int inside = 0;
            window(pd, xd, p, q, [&](int h, int w) {
              sum += E::load(x, at(xd, n, c, h, w));
              ++inside;
            });
            res = inside ? sum / static_cast<A>(divisor(pd, inside)) : A(0);
          }
          blend<E>(y, at(yd, n, c, p, q), res, sc);
        }
}

template <typename E>
void poolBackward(cudnnPoolingStruct pd, cudnnTensorStruct dyd, cudnnTensorStruct xd,
                  cudnnTensorStruct dxd, const void* dy, const void* x, void* dx, Scale sc,
                  uint64_t seed) {
  using A = typename E::Acc;
  const int C = xd.dims[1], H = xd.dims[2], W = xd.dims[3];
  auto flat = [&](int n, int c, int h, int w) { return ((int64_t{n} * C + c) * H + h) * W + w; };
  std::vector<A> acc(static_cast<size_t>(int64_t{xd.dims[0]} * C * H * W), A(0));
  std::vector<std::pair<int64_t, A>> routed; // CUDNN_POOLING_MAX: (element, gradient)
  const bool propagate = pd.nan == CUDNN_PROPAGATE_NAN;
  for (int n = 0; n < dyd.dims[0]; ++n)
    for (int c = 0; c < C; ++c)
      for (int p = 0; p < dyd.dims[2]; ++p)
        for (int q = 0; q < dyd.dims[3]; ++q) {
          const A g = E::load(dy, at(dyd, n, c, p, q));
          if (isMax(pd.mode)) {
            // The LAST maximum in window order takes a tie (see the top).
            A best = -std::numeric_limits<A>::infinity();
            int64_t arg = -1;
            bool nan = false;
            window(pd, xd, p, q, [&](int h, int w) {
              A v = E::load(x, at(xd, n, c, h, w));
              if (propagate && std::isnan(v)) {
                nan = true;
                arg = flat(n, c, h, w);
              } else if (!nan && !std::isnan(v) && (v >= best || arg < 0)) {
                best = v;
                arg = flat(n, c, h, w);
              }
            });
            if (arg < 0)
              continue;
            if (pd.mode == CUDNN_POOLING_MAX)
              routed.push_back({arg, g});
            else
              acc[static_cast<size_t>(arg)] += g;
          } else {
            int inside = 0;
            window(pd, xd, p, q, [&](int, int) { ++inside; });
            if (inside == 0)
              continue;
            const A share = g / static_cast<A>(divisor(pd, inside));
            window(pd, xd, p, q,
                   [&](int h, int w) { acc[static_cast<size_t>(flat(n, c, h, w))] += share; });
          }
        }
  // CUDNN_POOLING_MAX: the gradients that reach one element, in a new order each run.
  std::stable_sort(routed.begin(), routed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  uint64_t state = seed;
  for (size_t start = 0; start < routed.size();) {
    size_t end = start;
    while (end < routed.size() && routed[end].first == routed[start].first)
      ++end;
    for (size_t i = end - start; i > 1; --i) {
      state = mix(state);
      std::swap(routed[start + i - 1], routed[start + state % i]);
    }
    for (size_t i = start; i < end; ++i)
      acc[static_cast<size_t>(routed[i].first)] += routed[i].second;
    start = end;
  }
  for (int n = 0; n < xd.dims[0]; ++n)
    for (int c = 0; c < C; ++c)
      for (int h = 0; h < H; ++h)
        for (int w = 0; w < W; ++w)
          blend<E>(dx, at(dxd, n, c, h, w), acc[static_cast<size_t>(flat(n, c, h, w))], sc);
}

/// The pooled size of x under pd equals y's (n, c, h, w).
bool pooledDims(const cudnnPoolingStruct& pd, const cudnnTensorStruct& x,
                const cudnnTensorStruct& y) {
  const int roomH = x.dims[2] + 2 * pd.padH - pd.winH, roomW = x.dims[3] + 2 * pd.padW - pd.winW;
  return roomH >= 0 && roomW >= 0 && y.dims[0] == x.dims[0] && y.dims[1] == x.dims[1] &&
         y.dims[2] == 1 + roomH / pd.strideH && y.dims[3] == 1 + roomW / pd.strideW;
}

//===--- LRN --------------------------------------------------------------===//

/// s[c] = k + alpha / n * (sum of x^2 over c's window) at (n, h, w).
template <typename E>
void lrnScales(const cudnnLRNStruct& d, const cudnnTensorStruct& xd, const void* x, int n, int h,
               int w, std::vector<typename E::Acc>& s) {
  using A = typename E::Acc;
  const int C = xd.dims[1], behind = static_cast<int>((d.n - 1) / 2);
  const int ahead = static_cast<int>(d.n) - 1 - behind;
  const A scale = static_cast<A>(d.alpha / d.n);
  s.assign(static_cast<size_t>(C), A(0));
  for (int c = 0; c < C; ++c) {
    A sum = 0;
    for (int j = std::max(0, c - behind); j <= std::min(C - 1, c + ahead); ++j) {
      A v = E::load(x, at(xd, n, j, h, w));
      sum += v * v;
    }
    s[static_cast<size_t>(c)] = static_cast<A>(d.k) + scale * sum;
  }
}

template <typename E>
void lrnForward(cudnnLRNStruct d, cudnnTensorStruct xd, cudnnTensorStruct yd, const void* x,
                void* y, Scale sc) {
  using A = typename E::Acc;
  std::vector<A> s;
  for (int n = 0; n < xd.dims[0]; ++n)
    for (int h = 0; h < xd.dims[2]; ++h)
      for (int w = 0; w < xd.dims[3]; ++w) {
        lrnScales<E>(d, xd, x, n, h, w, s);
        for (int c = 0; c < xd.dims[1]; ++c)
          blend<E>(y, at(yd, n, c, h, w),
                   E::load(x, at(xd, n, c, h, w)) *
                       std::pow(s[static_cast<size_t>(c)], static_cast<A>(-d.beta)),
                   sc);
      }
}

/// dx[j] = dy[j] s[j]^-beta - 2 alpha beta / n x[j] sum over the i whose
/// window holds j of dy[i] y[i] / s[i].
template <typename E>
void lrnBackward(cudnnLRNStruct d, cudnnTensorStruct yd, cudnnTensorStruct dyd,
                 cudnnTensorStruct xd, cudnnTensorStruct dxd, const void* y, const void* dy,
                 const void* x, void* dx, Scale sc) {
  using A = typename E::Acc;
  const int C = xd.dims[1], behind = static_cast<int>((d.n - 1) / 2);
  const int ahead = static_cast<int>(d.n) - 1 - behind;
  const A coef = static_cast<A>(2.0 * d.alpha * d.beta / d.n);
  std::vector<A> s, t(static_cast<size_t>(C));
  for (int n = 0; n < xd.dims[0]; ++n)
    for (int h = 0; h < xd.dims[2]; ++h)
      for (int w = 0; w < xd.dims[3]; ++w) {
        lrnScales<E>(d, xd, x, n, h, w, s);
        for (int c = 0; c < C; ++c)
          t[static_cast<size_t>(c)] = E::load(dy, at(dyd, n, c, h, w)) *
                                      E::load(y, at(yd, n, c, h, w)) / s[static_cast<size_t>(c)];
        for (int j = 0; j < C; ++j) {
          A sum = 0;
          for (int i = std::max(0, j - ahead); i <= std::min(C - 1, j + behind); ++i)
            sum += t[static_cast<size_t>(i)];
          const A g = E::load(dy, at(dyd, n, j, h, w)) *
                          std::pow(s[static_cast<size_t>(j)], static_cast<A>(-d.beta)) -
                      coef * E::load(x, at(xd, n, j, h, w)) * sum;
          blend<E>(dx, at(dxd, n, j, h, w), g, sc);
        }
      }
}

//===--- Batch norm -------------------------------------------------------===//

/// Which elements a statistic covers: a channel's (n, h, w) in spatial
/// mode, an activation's n in per-activation mode.
struct BnLayout {
  bool spatial;
  int N, C, H, W;
  int64_t features() const { return spatial ? C : int64_t{C} * H * W; }
  int64_t count() const { return spatial ? int64_t{N} * H * W : N; }
  /// The offset in t of element j of feature f.
  int64_t off(const cudnnTensorStruct& t, int64_t f, int64_t j) const {
    if (spatial)
      return at(t, j / (int64_t{H} * W), f, j / W % H, j % W);
    return at(t, j, f / (int64_t{H} * W), f / W % H, f % W);
  }
  /// The offset of feature f in the [1, C, 1, 1] or [1, C, H, W] statistics.
  int64_t statOff(const cudnnTensorStruct& t, int64_t f) const {
    return spatial ? at(t, 0, f, 0, 0) : at(t, 0, f / (int64_t{H} * W), f / W % H, f % W);
  }
};

/// Validates the statistics descriptor against x: [1, C, 1, 1] or [1, C, H,
/// W], float (double for double data).
bool bnStatsFit(const cudnnTensorStruct& x, const cudnnTensorStruct& bn, bool spatial) {
  cudnnDataType_t want = x.type == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  return bn.type == want && bn.dims[0] == 1 && bn.dims[1] == x.dims[1] &&
         bn.dims[2] == (spatial ? 1 : x.dims[2]) && bn.dims[3] == (spatial ? 1 : x.dims[3]);
}

bool bnModeOk(cudnnBatchNormMode_t m) {
  return m == CUDNN_BATCHNORM_PER_ACTIVATION || m == CUDNN_BATCHNORM_SPATIAL ||
         m == CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
}

BnLayout bnLayout(const cudnnTensorStruct& x, cudnnBatchNormMode_t m) {
  return {m != CUDNN_BATCHNORM_PER_ACTIVATION, x.dims[0], x.dims[1], x.dims[2], x.dims[3]};
}

/// The mean and the sum of squared deviations of feature f.
template <typename E>
void moments(const BnLayout& L, const cudnnTensorStruct& xd, const void* x, int64_t f,
             std::vector<typename E::Acc>& v, typename E::Acc& mean, typename E::Acc& sq) {
  using A = typename E::Acc;
  const int64_t m = L.count();
  v.resize(static_cast<size_t>(m));
  for (int64_t j = 0; j < m; ++j)
    v[static_cast<size_t>(j)] = E::load(x, L.off(xd, f, j));
  mean = blockedSum(v) / static_cast<A>(m);
  for (A& e : v)
    e = (e - mean) * (e - mean);
  sq = blockedSum(v);
}

/// Statistics are float or double (P), data any of the four types (E).
template <typename E, typename P>
void bnTrain(BnLayout L, cudnnTensorStruct xd, cudnnTensorStruct yd, cudnnTensorStruct bd,
             const void* x, void* y, const void* scale, const void* bias, double factor,
             void* runMean, void* runVar, double eps, void* saveMean, void* saveInv, Scale sc) {
  using A = typename E::Acc;
  std::vector<A> v;
  const int64_t m = L.count();
  for (int64_t f = 0; f < L.features(); ++f) {
    A mean, sq;
    moments<E>(L, xd, x, f, v, mean, sq);
    const int64_t s = L.statOff(bd, f);
    const A inv = A(1) / std::sqrt(sq / static_cast<A>(m) + static_cast<A>(eps));
    const A gamma = static_cast<A>(P::load(scale, s)), beta = static_cast<A>(P::load(bias, s));
    for (int64_t j = 0; j < m; ++j)
      blend<E>(y, L.off(yd, f, j), gamma * (E::load(x, L.off(xd, f, j)) - mean) * inv + beta, sc);
    if (runMean) {
      const A a = static_cast<A>(factor), keep = static_cast<A>(1.0 - factor);
      P::store(runMean, s, mean * a + static_cast<A>(P::load(runMean, s)) * keep);
      P::store(runVar, s,
               sq / static_cast<A>(m - 1) * a + static_cast<A>(P::load(runVar, s)) * keep);
    }
    if (saveMean) {
      P::store(saveMean, s, mean);
      P::store(saveInv, s, inv);
    }
  }
}

template <typename E, typename P>
void bnInfer(BnLayout L, cudnnTensorStruct xd, cudnnTensorStruct yd, cudnnTensorStruct bd,
             const void* x, void* y, const void* scale, const void* bias, const void* mean,
             const void* var, double eps, Scale sc) {
  using A = typename E::Acc;
  for (int64_t f = 0; f < L.features(); ++f) {
    const int64_t s = L.statOff(bd, f);
    const A mu = static_cast<A>(P::load(mean, s));
    const A inv = A(1) / std::sqrt(static_cast<A>(P::load(var, s)) + static_cast<A>(eps));
    const A gamma = static_cast<A>(P::load(scale, s)), beta = static_cast<A>(P::load(bias, s));
    for (int64_t j = 0; j < L.count(); ++j)
      blend<E>(y, L.off(yd, f, j), gamma * (E::load(x, L.off(xd, f, j)) - mu) * inv + beta, sc);
  }
}

template <typename E, typename P>
void bnBackward(BnLayout L, cudnnTensorStruct xd, cudnnTensorStruct dyd, cudnnTensorStruct dxd,
                cudnnTensorStruct bd, const void* x, const void* dy, void* dx, const void* scale,
                void* dScale, void* dBias, double eps, const void* savedMean, const void* savedInv,
                Scale data, Scale param) {
  using A = typename E::Acc;
  const int64_t m = L.count();
  std::vector<A> v, g(static_cast<size_t>(m)), gx(static_cast<size_t>(m));
  for (int64_t f = 0; f < L.features(); ++f) {
    const int64_t s = L.statOff(bd, f);
    A mean, inv;
    if (savedMean) {
      mean = static_cast<A>(P::load(savedMean, s));
      inv = static_cast<A>(P::load(savedInv, s));
    } else {
      A sq;
      moments<E>(L, xd, x, f, v, mean, sq);
      inv = A(1) / std::sqrt(sq / static_cast<A>(m) + static_cast<A>(eps));
    }
    for (int64_t j = 0; j < m; ++j) {
      const A d = E::load(dy, L.off(dyd, f, j));
      g[static_cast<size_t>(j)] = d;
      gx[static_cast<size_t>(j)] = d * (E::load(x, L.off(xd, f, j)) - mean) * inv;
    }
    const A sumG = blockedSum(g), sumGx = blockedSum(gx);
    const A gamma = static_cast<A>(P::load(scale, s));
    for (int64_t j = 0; j < m; ++j) {
      const A xhat = (E::load(x, L.off(xd, f, j)) - mean) * inv;
      const A r =
          gamma * inv *
          (g[static_cast<size_t>(j)] - sumG / static_cast<A>(m) - xhat * sumGx / static_cast<A>(m));
      blend<E>(dx, L.off(dxd, f, j), r, data);
    }
    blend<P>(dScale, s, static_cast<typename P::Acc>(sumGx), param);
    blend<P>(dBias, s, static_cast<typename P::Acc>(sumG), param);
  }
}

/// Calls f(E{}, P{}) for data type t: P is double for double data, else float.
template <typename Fn> void withBnTypes(cudnnDataType_t t, Fn&& f) {
  withType(t, [&](auto e) {
    if constexpr (std::is_same_v<decltype(e), F64>)
      f(e, F64{});
    else
      f(e, F32{});
  });
}

//===--- Softmax ----------------------------------------------------------===//

/// The softmax groups of t: per n (INSTANCE, over c, h, w) or per (n, h, w)
/// (CHANNEL, over c). Element i of group gi is at off(gi, i).
struct SoftmaxLayout {
  bool instance;
  int N, C, H, W;
  int64_t groups() const { return instance ? N : int64_t{N} * H * W; }
  int64_t length() const { return instance ? int64_t{C} * H * W : C; }
  int64_t off(const cudnnTensorStruct& t, int64_t gi, int64_t i) const {
    const int64_t HW = int64_t{H} * W;
    if (instance)
      return at(t, gi, i / HW, i / W % H, i % W);
    return at(t, gi / HW, i, gi / W % H, gi % W);
  }
};

template <typename E>
void softmaxForward(SoftmaxLayout L, cudnnSoftmaxAlgorithm_t algo, cudnnTensorStruct xd,
                    cudnnTensorStruct yd, const void* x, void* y, Scale sc) {
  using A = typename E::Acc;
  std::vector<A> v(static_cast<size_t>(L.length()));
  for (int64_t gi = 0; gi < L.groups(); ++gi) {
    A top = algo == CUDNN_SOFTMAX_FAST ? A(0) : -std::numeric_limits<A>::infinity();
    for (int64_t i = 0; i < L.length(); ++i) {
      v[static_cast<size_t>(i)] = E::load(x, L.off(xd, gi, i));
      if (algo != CUDNN_SOFTMAX_FAST)
        top = std::max(top, v[static_cast<size_t>(i)]);
    }
    A sum = 0;
    for (A e : v)
      sum += std::exp(e - top);
    for (int64_t i = 0; i < L.length(); ++i) {
      const A e = v[static_cast<size_t>(i)] - top;
      blend<E>(y, L.off(yd, gi, i),
               algo == CUDNN_SOFTMAX_LOG ? e - std::log(sum) : std::exp(e) / sum, sc);
    }
  }
}

template <typename E>
void softmaxBackward(SoftmaxLayout L, cudnnSoftmaxAlgorithm_t algo, cudnnTensorStruct yd,
                     cudnnTensorStruct dyd, cudnnTensorStruct dxd, const void* y, const void* dy,
                     void* dx, Scale sc) {
  using A = typename E::Acc;
  for (int64_t gi = 0; gi < L.groups(); ++gi) {
    A dot = 0; // sum of dy * y (sum of dy for LOG)
    for (int64_t i = 0; i < L.length(); ++i) {
      const A d = E::load(dy, L.off(dyd, gi, i));
      dot += algo == CUDNN_SOFTMAX_LOG ? d : d * E::load(y, L.off(yd, gi, i));
    }
    for (int64_t i = 0; i < L.length(); ++i) {
      const A yi = E::load(y, L.off(yd, gi, i)), d = E::load(dy, L.off(dyd, gi, i));
      blend<E>(dx, L.off(dxd, gi, i),
               algo == CUDNN_SOFTMAX_LOG ? d - std::exp(yi) * dot : yi * (d - dot), sc);
    }
  }
}

bool softmaxArgsOk(cudnnSoftmaxAlgorithm_t algo, cudnnSoftmaxMode_t mode) {
  return (algo == CUDNN_SOFTMAX_FAST || algo == CUDNN_SOFTMAX_ACCURATE ||
          algo == CUDNN_SOFTMAX_LOG) &&
         (mode == CUDNN_SOFTMAX_MODE_INSTANCE || mode == CUDNN_SOFTMAX_MODE_CHANNEL);
}

} // namespace
} // namespace lwemu::dnn

using namespace lwemu::dnn;

extern "C" {

cudnnStatus_t cudnnPoolingForward(cudnnHandle_t handle, const cudnnPoolingDescriptor_t poolingDesc,
                                  const void* alpha, const cudnnTensorDescriptor_t xDesc,
                                  const void* x, const void* beta,
                                  const cudnnTensorDescriptor_t yDesc, void* y) {
  const char* call = "cudnnPoolingForward";
  if (!allSet({handle, poolingDesc, alpha, beta, xDesc, x, yDesc, y}))
    return CUDNN_STATUS_BAD_PARAM;
  checkLive(handle, Kind::Handle, call, "handle");
  checkLive(poolingDesc, Kind::Pooling, call, "poolingDesc");
  if (!usable(xDesc, call, "xDesc") || !usable(yDesc, call, "yDesc") || !poolingDesc->set)
    return CUDNN_STATUS_BAD_PARAM;
  const cudnnPoolingStruct pd = *poolingDesc;
  const cudnnTensorStruct xd = *xDesc, yd = *yDesc;
  if (xd.type != yd.type || !pooledDims(pd, xd, yd))
    return CUDNN_STATUS_BAD_PARAM;
  if (xd.strides[3] != 1 || yd.strides[3] != 1)
    return CUDNN_STATUS_NOT_SUPPORTED;
  operand(x, bytesOf(xd), call, "x");
  operand(y, bytesOf(yd), call, "y");
  const Scale sc = readScale(alpha, beta, xd.type);
  return submit(handle, call, [=] {
    withType(xd.type, [&](auto e) { poolForward<decltype(e)>(pd, xd, yd, x, y, sc); });
  });
}

cudnnStatus_t cudnnPoolingBackward(cudnnHandle_t handle, const cudnnPoolingDescriptor_t poolingDesc,
                                   const void* alpha, const cudnnTensorDescriptor_t yDesc,
                                   const void* y, const cudnnTensorDescriptor_t dyDesc,
                                   const void* dy, const cudnnTensorDescriptor_t xDesc,
                                   const void* x, const void* beta,
                                   const cudnnTensorDescriptor_t dxDesc, void* dx) {
  const char* call = "cudnnPoolingBackward";
  if (!allSet({handle, poolingDesc, alpha, beta, yDesc, y, dyDesc, dy, xDesc, x, dxDesc, dx}))
    return CUDNN_STATUS_BAD_PARAM;
  checkLive(handle, Kind::Handle, call, "handle");
  checkLive(poolingDesc, Kind::Pooling, call, "poolingDesc");
  if (!usable(yDesc, call, "yDesc") || !usable(dyDesc, call, "dyDesc") ||
      !usable(xDesc, call, "xDesc") || !usable(dxDesc, call, "dxDesc") || !poolingDesc->set)
    return CUDNN_STATUS_BAD_PARAM;
  const cudnnPoolingStruct pd = *poolingDesc;
  const cudnnTensorStruct yd = *yDesc, dyd = *dyDesc, xd = *xDesc, dxd = *dxDesc;
  // cuDNN: y and dy, and x and dx, have the same dims and strides; one data type.
  auto same = [](const cudnnTensorStruct& a, const cudnnTensorStruct& b) {
    return sameDims(a, b) && std::equal(a.strides, a.strides + 4, b.strides);
  };
  if (!same(yd, dyd) || !same(xd, dxd) || xd.type != yd.type || !pooledDims(pd, xd, yd))
    return CUDNN_STATUS_BAD_PARAM;
  if (xd.strides[3] != 1 || yd.strides[3] != 1)
    return CUDNN_STATUS_NOT_SUPPORTED;
  operand(y, bytesOf(yd), call, "y");
  operand(dy, bytesOf(dyd), call, "dy");
  operand(x, bytesOf(xd), call, "x");
  operand(dx, bytesOf(dxd), call, "dx");
  const Scale sc = readScale(alpha, beta, xd.type);
  return submit(handle, call, [=] {
    withType(xd.type, [&](auto e) {
      poolBackward<decltype(e)>(pd, dyd, xd, dxd, dy, x, dx, sc, runSeed());
    });
  });
}

cudnnStatus_t cudnnLRNCrossChannelForward(cudnnHandle_t handle, cudnnLRNDescriptor_t normDesc,
                                          cudnnLRNMode_t lrnMode, const void* alpha,
                                          const cudnnTensorDescriptor_t xDesc, const void* x,
                                          const void* beta, const cudnnTensorDescriptor_t yDesc,
                                          void* y) {
  const char* call = "cudnnLRNCrossChannelForward";
  if (!allSet({handle, normDesc, alpha, beta, xDesc, x, yDesc, y}) ||
      lrnMode != CUDNN_LRN_CROSS_CHANNEL_DIM1)
    return CUDNN_STATUS_BAD_PARAM;
  checkLive(handle, Kind::Handle, call, "handle");
  checkLive(normDesc, Kind::Lrn, call, "normDesc");
  if (!usable(xDesc, call, "xDesc") || !usable(yDesc, call, "yDesc") || !sameDims(*xDesc, *yDesc))
    return CUDNN_STATUS_BAD_PARAM;
  const cudnnLRNStruct d = *normDesc;
  const cudnnTensorStruct xd = *xDesc, yd = *yDesc;
  operand(x, bytesOf(xd), call, "x");
  operand(y, bytesOf(yd), call, "y");
  const Scale sc = readScale(alpha, beta, xd.type);
  return submit(handle, call, [=] {
    withType(xd.type, [&](auto e) { lrnForward<decltype(e)>(d, xd, yd, x, y, sc); });
  });
}

cudnnStatus_t cudnnLRNCrossChannelBackward(cudnnHandle_t handle, cudnnLRNDescriptor_t normDesc,
                                           cudnnLRNMode_t lrnMode, const void* alpha,
                                           const cudnnTensorDescriptor_t yDesc, const void* y,
                                           const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                           const cudnnTensorDescriptor_t xDesc, const void* x,
                                           const void* beta, const cudnnTensorDescriptor_t dxDesc,
                                           void* dx) {
  const char* call = "cudnnLRNCrossChannelBackward";
  if (!allSet({handle, normDesc, alpha, beta, yDesc, y, dyDesc, dy, xDesc, x, dxDesc, dx}) ||
      lrnMode != CUDNN_LRN_CROSS_CHANNEL_DIM1)
    return CUDNN_STATUS_BAD_PARAM;
  checkLive(handle, Kind::Handle, call, "handle");
  checkLive(normDesc, Kind::Lrn, call, "normDesc");
  if (!usable(yDesc, call, "yDesc") || !usable(dyDesc, call, "dyDesc") ||
      !usable(xDesc, call, "xDesc") || !usable(dxDesc, call, "dxDesc") ||
      !sameDims(*xDesc, *yDesc) || !sameDims(*xDesc, *dyDesc) || !sameDims(*xDesc, *dxDesc))
    return CUDNN_STATUS_BAD_PARAM;
  const cudnnLRNStruct d = *normDesc;
  const cudnnTensorStruct yd = *yDesc, dyd = *dyDesc, xd = *xDesc, dxd = *dxDesc;
  operand(y, bytesOf(yd), call, "y");
  operand(dy, bytesOf(dyd), call, "dy");
  operand(x, bytesOf(xd), call, "x");
  operand(dx, bytesOf(dxd), call, "dx");
  const Scale sc = readScale(alpha, beta, xd.type);
  return submit(handle, call, [=] {
    withType(xd.type,
             [&](auto e) { lrnBackward<decltype(e)>(d, yd, dyd, xd, dxd, y, dy, x, dx, sc); });
  });
}

cudnnStatus_t cudnnBatchNormalizationForwardTraining(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void* alpha, const void* beta,
    const cudnnTensorDescriptor_t xDesc, const void* x, const cudnnTensorDescriptor_t yDesc,
    void* y, const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void* bnScale,
    const void* bnBias, double exponentialAverageFactor, void* resultRunningMean,
    void* resultRunningVariance, double epsilon, void* resultSaveMean,
    void* resultSaveInvVariance) {
  const char* call = "cudnnBatchNormalizationForwardTraining";
  if (!allSet({handle, alpha, beta, xDesc, x, yDesc, y, bnScaleBiasMeanVarDesc, bnScale, bnBias}) ||
      !bnModeOk(mode) || !(epsilon >= CUDNN_BN_MIN_EPSILON) ||
      (resultRunningMean == nullptr) != (resultRunningVariance == nullptr) ||
      (resultSaveMean == nullptr) != (resultSaveInvVariance == nullptr))
    return CUDNN_STATUS_BAD_PARAM;
  checkLive(handle, Kind::Handle, call, "handle");
  if (!usable(xDesc, call, "xDesc") || !usable(yDesc, call, "yDesc") ||
      !usable(bnScaleBiasMeanVarDesc, call, "bnScaleBiasMeanVarDesc") || !sameDims(*xDesc, *yDesc))
    return CUDNN_STATUS_BAD_PARAM;
  const cudnnTensorStruct xd = *xDesc, yd = *yDesc, bd = *bnScaleBiasMeanVarDesc;
  const BnLayout L = bnLayout(xd, mode);
  if (!bnStatsFit(xd, bd, L.spatial))
    return CUDNN_STATUS_BAD_PARAM;
  operand(x, bytesOf(xd), call, "x");
  operand(y, bytesOf(yd), call, "y");
  const size_t sb = bytesOf(bd);
  operand(bnScale, sb, call, "bnScale");
  operand(bnBias, sb, call, "bnBias");
  if (resultRunningMean) {
    operand(resultRunningMean, sb, call, "resultRunningMean");
    operand(resultRunningVariance, sb, call, "resultRunningVariance");
  }
  if (resultSaveMean) {
    operand(resultSaveMean, sb, call, "resultSaveMean");
    operand(resultSaveInvVariance, sb, call, "resultSaveInvVariance");
  }
  const Scale sc = readScale(alpha, beta, xd.type);
  const double factor = exponentialAverageFactor;
  return submit(handle, call, [=] {
    withBnTypes(xd.type, [&](auto e, auto p) {
      bnTrain<decltype(e), decltype(p)>(L, xd, yd, bd, x, y, bnScale, bnBias, factor,
                                        resultRunningMean, resultRunningVariance, epsilon,
                                        resultSaveMean, resultSaveInvVariance, sc);
    });
  });
}

cudnnStatus_t cudnnBatchNormalizationForwardInference(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void* alpha, const void* beta,
    const cudnnTensorDescriptor_t xDesc, const void* x, const cudnnTensorDescriptor_t yDesc,
    void* y, const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void* bnScale,
    const void* bnBias, const void* estimatedMean, const void* estimatedVariance, double epsilon) {
  const char* call = "cudnnBatchNormalizationForwardInference";
  if (!allSet({handle, alpha, beta, xDesc, x, yDesc, y, bnScaleBiasMeanVarDesc, bnScale, bnBias,
               estimatedMean, estimatedVariance}) ||
      !bnModeOk(mode) || !(epsilon >= CUDNN_BN_MIN_EPSILON))
    return CUDNN_STATUS_BAD_PARAM;
  checkLive(handle, Kind::Handle, call, "handle");
  if (!usable(xDesc, call, "xDesc") || !usable(yDesc, call, "yDesc") ||
      !usable(bnScaleBiasMeanVarDesc, call, "bnScaleBiasMeanVarDesc") || !sameDims(*xDesc, *yDesc))
    return CUDNN_STATUS_BAD_PARAM;
  const cudnnTensorStruct xd = *xDesc, yd = *yDesc, bd = *bnScaleBiasMeanVarDesc;
  const BnLayout L = bnLayout(xd, mode);
  if (!bnStatsFit(xd, bd, L.spatial))
    return CUDNN_STATUS_BAD_PARAM;
  operand(x, bytesOf(xd), call, "x");
  operand(y, bytesOf(yd), call, "y");
  const size_t sb = bytesOf(bd);
  operand(bnScale, sb, call, "bnScale");
  operand(bnBias, sb, call, "bnBias");
  operand(estimatedMean, sb, call, "estimatedMean");
  operand(estimatedVariance, sb, call, "estimatedVariance");
  const Scale sc = readScale(alpha, beta, xd.type);
  return submit(handle, call, [=] {
    withBnTypes(xd.type, [&](auto e, auto p) {
      bnInfer<decltype(e), decltype(p)>(L, xd, yd, bd, x, y, bnScale, bnBias, estimatedMean,
                                        estimatedVariance, epsilon, sc);
    });
  });
}

cudnnStatus_t cudnnBatchNormalizationBackward(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void* alphaDataDiff,
    const void* betaDataDiff, const void* alphaParamDiff, const void* betaParamDiff,
    const cudnnTensorDescriptor_t xDesc, const void* x, const cudnnTensorDescriptor_t dyDesc,
    const void* dy, const cudnnTensorDescriptor_t dxDesc, void* dx,
    const cudnnTensorDescriptor_t dBnScaleBiasDesc, const void* bnScale, void* dBnScaleResult,
    void* dBnBiasResult, double epsilon, const void* savedMean, const void* savedInvVariance) {
  const char* call = "cudnnBatchNormalizationBackward";
  if (!allSet({handle, alphaDataDiff, betaDataDiff, alphaParamDiff, betaParamDiff, xDesc, x, dyDesc,
               dy, dxDesc, dx, dBnScaleBiasDesc, bnScale, dBnScaleResult, dBnBiasResult}) ||
      !bnModeOk(mode) || !(epsilon >= CUDNN_BN_MIN_EPSILON) ||
      (savedMean == nullptr) != (savedInvVariance == nullptr))
    return CUDNN_STATUS_BAD_PARAM;
  checkLive(handle, Kind::Handle, call, "handle");
  if (!usable(xDesc, call, "xDesc") || !usable(dyDesc, call, "dyDesc") ||
      !usable(dxDesc, call, "dxDesc") || !usable(dBnScaleBiasDesc, call, "dBnScaleBiasDesc") ||
      !sameDims(*xDesc, *dyDesc) || !sameDims(*xDesc, *dxDesc))
    return CUDNN_STATUS_BAD_PARAM;
  const cudnnTensorStruct xd = *xDesc, dyd = *dyDesc, dxd = *dxDesc, bd = *dBnScaleBiasDesc;
  const BnLayout L = bnLayout(xd, mode);
  if (!bnStatsFit(xd, bd, L.spatial))
    return CUDNN_STATUS_BAD_PARAM;
  operand(x, bytesOf(xd), call, "x");
  operand(dy, bytesOf(dyd), call, "dy");
  operand(dx, bytesOf(dxd), call, "dx");
  const size_t sb = bytesOf(bd);
  operand(bnScale, sb, call, "bnScale");
  operand(dBnScaleResult, sb, call, "dBnScaleResult");
  operand(dBnBiasResult, sb, call, "dBnBiasResult");
  if (savedMean) {
    operand(savedMean, sb, call, "savedMean");
    operand(savedInvVariance, sb, call, "savedInvVariance");
  }
  const Scale data = readScale(alphaDataDiff, betaDataDiff, xd.type);
  const Scale param = readScale(alphaParamDiff, betaParamDiff, xd.type);
  return submit(handle, call, [=] {
    withBnTypes(xd.type, [&](auto e, auto p) {
      bnBackward<decltype(e), decltype(p)>(L, xd, dyd, dxd, bd, x, dy, dx, bnScale, dBnScaleResult,
                                           dBnBiasResult, epsilon, savedMean, savedInvVariance,
                                           data, param);
    });
  });
}

cudnnStatus_t cudnnSoftmaxForward(cudnnHandle_t handle, cudnnSoftmaxAlgorithm_t algo,
                                  cudnnSoftmaxMode_t mode, const void* alpha,
                                  const cudnnTensorDescriptor_t xDesc, const void* x,
                                  const void* beta, const cudnnTensorDescriptor_t yDesc, void* y) {
  const char* call = "cudnnSoftmaxForward";
  if (!allSet({handle, alpha, beta, xDesc, x, yDesc, y}) || !softmaxArgsOk(algo, mode))
    return CUDNN_STATUS_BAD_PARAM;
  checkLive(handle, Kind::Handle, call, "handle");
  if (!usable(xDesc, call, "xDesc") || !usable(yDesc, call, "yDesc") || !sameDims(*xDesc, *yDesc))
    return CUDNN_STATUS_BAD_PARAM;
  const cudnnTensorStruct xd = *xDesc, yd = *yDesc;
  const SoftmaxLayout L{mode == CUDNN_SOFTMAX_MODE_INSTANCE, xd.dims[0], xd.dims[1], xd.dims[2],
                        xd.dims[3]};
  operand(x, bytesOf(xd), call, "x");
  operand(y, bytesOf(yd), call, "y");
  const Scale sc = readScale(alpha, beta, xd.type);
  return submit(handle, call, [=] {
    withType(xd.type, [&](auto e) { softmaxForward<decltype(e)>(L, algo, xd, yd, x, y, sc); });
  });
}

cudnnStatus_t cudnnSoftmaxBackward(cudnnHandle_t handle, cudnnSoftmaxAlgorithm_t algo,
                                   cudnnSoftmaxMode_t mode, const void* alpha,
                                   const cudnnTensorDescriptor_t yDesc, const void* y,
                                   const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                   const void* beta, const cudnnTensorDescriptor_t dxDesc,
                                   void* dx) {
  const char* call = "cudnnSoftmaxBackward";
  if (!allSet({handle, alpha, beta, yDesc, y, dyDesc, dy, dxDesc, dx}) ||
      !softmaxArgsOk(algo, mode))
    return CUDNN_STATUS_BAD_PARAM;
  checkLive(handle, Kind::Handle, call, "handle");
  if (!usable(yDesc, call, "yDesc") || !usable(dyDesc, call, "dyDesc") ||
      !usable(dxDesc, call, "dxDesc") || !sameDims(*yDesc, *dyDesc) || !sameDims(*yDesc, *dxDesc))
    return CUDNN_STATUS_BAD_PARAM;
  const cudnnTensorStruct yd = *yDesc, dyd = *dyDesc, dxd = *dxDesc;
  const SoftmaxLayout L{mode == CUDNN_SOFTMAX_MODE_INSTANCE, yd.dims[0], yd.dims[1], yd.dims[2],
                        yd.dims[3]};
  operand(y, bytesOf(yd), call, "y");
  operand(dy, bytesOf(dyd), call, "dy");
  operand(dx, bytesOf(dxd), call, "dx");
  const Scale sc = readScale(alpha, beta, yd.type);
  return submit(handle, call, [=] {
    withType(yd.type,
             [&](auto e) { softmaxBackward<decltype(e)>(L, algo, yd, dyd, dxd, y, dy, dx, sc); });
  });
}

} // extern "C"
