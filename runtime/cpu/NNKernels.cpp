// NNKernels.cpp - convolution, matrix products and pooling of lwrt/cpu_nn.h
//
// Convolutions lower to im2col and one BLAS gemm per (image, group); the
// pooling kernels follow the reference interpreter's loops (ir/Kernels.h)
// so that ties, empty windows and divisors come out the same.
#include "Common.h"
#include "lwrt/cpu_nn.h"

#include <algorithm>
#include <cblas.h>
#include <initializer_list>
#include <limits>
#include <vector>

namespace lwrt::cpu {
namespace {

using detail::dispatch;
using detail::sameType;

bool isFloat(DType t) { return t == DType::F32 || t == DType::F64; }

/// Row-major C = alpha op(A) op(B) + beta C through cblas.
void blasGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
              int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(std::max<int64_t>(1, lda)), b,
              static_cast<int>(std::max<int64_t>(1, ldb)), beta, c,
              static_cast<int>(std::max<int64_t>(1, ldc)));
}
void blasGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
              int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(std::max<int64_t>(1, lda)), b,
              static_cast<int>(std::max<int64_t>(1, ldb)), beta, c,
              static_cast<int>(std::max<int64_t>(1, ldc)));
}

/// C = alpha op(A) op(B) + beta C, also for empty products (BLAS may not
/// touch C when k is 0).
template <typename T>
void matmulInto(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  blasGemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

//===--- Convolution ------------------------------------------------------===//

/// The geometry of one convolution, checked against the views.
struct ConvGeom {
  int64_t N, C, H, W, M, Cg, KH, KW, OH, OW, G, Mg;
  int64_t K() const { return Cg * KH * KW; } // rows of a column matrix
  int64_t P() const { return OH * OW; }      // its columns
};

bool convGeom(const std::vector<int64_t>& xs, const std::vector<int64_t>& ws,
              const std::vector<int64_t>& ys, const Conv2dParams& p, ConvGeom& g) {
  if (xs.size() != 4 || ws.size() != 4 || ys.size() != 4 || p.group < 1)
    return false;
  g = {xs[0], xs[1], xs[2], xs[3], ws[0], ws[1], ws[2], ws[3], ys[2], ys[3], p.group, 0};
  if (g.M % g.G != 0 || g.Cg * g.G != g.C || ys[0] != g.N || ys[1] != g.M)
    return false;
  for (int i = 0; i < 2; ++i) {
    int64_t in = xs[2 + i], k = ws[2 + i], s = p.strides[i], d = p.dilations[i];
    if (s < 1 || d < 1 || k < 1 || p.pads[i] < 0 || p.pads[i + 2] < 0)
      return false;
    int64_t room = in + p.pads[i] + p.pads[i + 2] - (d * (k - 1) + 1);
    if (room < 0 || ys[2 + i] != room / s + 1)
      return false;
  }
  g.Mg = g.M / g.G;
  return true;
}

/// col[K, P] of the group's channels of one image (x points at channel 0
/// of the group).
template <typename T> void im2col(const T* x, const ConvGeom& g, const Conv2dParams& p, T* col) {
  for (int64_t c = 0; c < g.Cg; ++c)
    for (int64_t i = 0; i < g.KH; ++i)
      for (int64_t j = 0; j < g.KW; ++j) {
        T* row = col + ((c * g.KH + i) * g.KW + j) * g.P();
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          int64_t ih = oh * p.strides[0] - p.pads[0] + i * p.dilations[0];
          T* out = row + oh * g.OW;
          if (ih < 0 || ih >= g.H) {
            std::fill(out, out + g.OW, T(0));
            continue;
          }
          const T* src = x + (c * g.H + ih) * g.W;
          for (int64_t ow = 0; ow < g.OW; ++ow) {
            int64_t iw = ow * p.strides[1] - p.pads[1] + j * p.dilations[1];
            out[ow] = iw >= 0 && iw < g.W ? src[iw] : T(0);
          }
        }
      }
}

/// Adds col[K, P] back into the group's channels of one image.
template <typename T> void col2im(const T* col, const ConvGeom& g, const Conv2dParams& p, T* x) {
  for (int64_t c = 0; c < g.Cg; ++c)
    for (int64_t i = 0; i < g.KH; ++i)
      for (int64_t j = 0; j < g.KW; ++j) {
        const T* row = col + ((c * g.KH + i) * g.KW + j) * g.P();
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          int64_t ih = oh * p.strides[0] - p.pads[0] + i * p.dilations[0];
          if (ih < 0 || ih >= g.H)
            continue;
          T* dst = x + (c * g.H + ih) * g.W;
          for (int64_t ow = 0; ow < g.OW; ++ow) {
            int64_t iw = ow * p.strides[1] - p.pads[1] + j * p.dilations[1];
            if (iw >= 0 && iw < g.W)
              dst[iw] += row[oh * g.OW + ow];
          }
        }
      }
}

template <typename T>
bool conv2dImpl(const TensorView& xv, const TensorView& wv, const TensorView* bv,
                const TensorView& yv, const Conv2dParams& p) {
  ConvGeom g;
  if (!convGeom(xv.shape, wv.shape, yv.shape, p, g))
    return false;
  if (bv && (bv->dtype != xv.dtype || bv->shape != std::vector<int64_t>{g.M} ||
             (bv->data == nullptr && g.M != 0)))
    return false;
  const T *x = xv.as<T>(), *w = wv.as<T>();
  T* y = yv.as<T>();
  std::vector<T> col(static_cast<size_t>(g.K() * g.P()));
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t gi = 0; gi < g.G; ++gi) {
      im2col(x + (n * g.C + gi * g.Cg) * g.H * g.W, g, p, col.data());
      matmulInto<T>(false, false, g.Mg, g.P(), g.K(), T(1), w + gi * g.Mg * g.K(), g.K(),
                    col.data(), g.P(), T(0), y + (n * g.M + gi * g.Mg) * g.P(), g.P());
    }
  if (bv) {
    const T* b = bv->as<T>();
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t m = 0; m < g.M; ++m) {
        T* row = y + (n * g.M + m) * g.P();
        for (int64_t k = 0; k < g.P(); ++k)
          row[k] += b[m];
      }
  }
  return true;
}

template <typename T>
bool conv2dGradInputImpl(const TensorView& dyv, const TensorView& wv, const TensorView& dxv,
                         const Conv2dParams& p) {
  ConvGeom g;
  if (!convGeom(dxv.shape, wv.shape, dyv.shape, p, g))
    return false;
  const T *dy = dyv.as<T>(), *w = wv.as<T>();
  T* dx = dxv.as<T>();
  std::fill(dx, dx + dxv.numel(), T(0));
  std::vector<T> col(static_cast<size_t>(g.K() * g.P()));
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t gi = 0; gi < g.G; ++gi) {
      // col[K, P] = W_g^T [K, Mg] * dY_g [Mg, P]
      matmulInto<T>(true, false, g.K(), g.P(), g.Mg, T(1), w + gi * g.Mg * g.K(), g.K(),
                    dy + (n * g.M + gi * g.Mg) * g.P(), g.P(), T(0), col.data(), g.P());
      col2im(col.data(), g, p, dx + (n * g.C + gi * g.Cg) * g.H * g.W);
    }
  return true;
}

template <typename T>
bool conv2dGradFilterImpl(const TensorView& xv, const TensorView& dyv, const TensorView& dwv,
                          const Conv2dParams& p) {
  ConvGeom g;
  if (!convGeom(xv.shape, dwv.shape, dyv.shape, p, g))
    return false;
  const T *x = xv.as<T>(), *dy = dyv.as<T>();
  T* dw = dwv.as<T>();
  std::fill(dw, dw + dwv.numel(), T(0));
  std::vector<T> col(static_cast<size_t>(g.K() * g.P()));
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t gi = 0; gi < g.G; ++gi) {
      im2col(x + (n * g.C + gi * g.Cg) * g.H * g.W, g, p, col.data());
      // dW_g [Mg, K] += dY_g [Mg, P] * col^T [P, K]
      matmulInto<T>(false, true, g.Mg, g.K(), g.P(), T(1), dy + (n * g.M + gi * g.Mg) * g.P(),
                    g.P(), col.data(), g.P(), T(1), dw + gi * g.Mg * g.K(), g.K());
    }
  return true;
}

//===--- Linear algebra ---------------------------------------------------===//

template <typename T>
bool gemmImpl(const TensorView& av, const TensorView& bv, const TensorView* cv,
              const TensorView& yv, const GemmParams& p) {
  if (av.rank() != 2 || bv.rank() != 2 || yv.rank() != 2 || (p.transA != 0 && p.transA != 1) ||
      (p.transB != 0 && p.transB != 1))
    return false;
  bool ta = p.transA != 0, tb = p.transB != 0;
  int64_t M = ta ? av.shape[1] : av.shape[0], K = ta ? av.shape[0] : av.shape[1];
  int64_t Kb = tb ? bv.shape[1] : bv.shape[0], N = tb ? bv.shape[0] : bv.shape[1];
  if (K != Kb || yv.shape[0] != M || yv.shape[1] != N)
    return false;
  T* y = yv.as<T>();
  T beta = T(0);
  if (cv) {
    // Strides of c seen from [M, N]; 0 where broadcast.
    if (cv->rank() > 2)
      return false;
    int64_t cs[2] = {0, 0}, acc = 1;
    for (int64_t d = cv->rank(); d-- > 0;) {
      int64_t dim = cv->shape[d], out = yv.shape[2 - cv->rank() + d];
      if (dim != 1 && dim != out)
        return false;
      cs[2 - cv->rank() + d] = dim == 1 ? 0 : acc;
      acc *= dim;
    }
    const T* c = cv->as<T>();
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n)
        y[m * N + n] = c[m * cs[0] + n * cs[1]];
    beta = static_cast<T>(p.beta);
  }
  matmulInto<T>(ta, tb, M, N, K, static_cast<T>(p.alpha), av.as<T>(), av.shape[1], bv.as<T>(),
                bv.shape[1], beta, y, N);
  return true;
}

template <typename T>
bool matmulImpl(const TensorView& av, const TensorView& bv, const TensorView& yv) {
  std::vector<int64_t> as = av.shape, bs = bv.shape;
  if (as.empty() || bs.empty())
    return false;
  bool vecA = as.size() == 1, vecB = bs.size() == 1;
  if (vecA)
    as.insert(as.begin(), 1);
  if (vecB)
    bs.push_back(1);
  int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  if (bs[bs.size() - 2] != K)
    return false;
  // Broadcast batch dims, and each operand's batch strides (0 where broadcast).
  size_t ra = as.size() - 2, rb = bs.size() - 2, rank = std::max(ra, rb);
  std::vector<int64_t> batch(rank), sa(rank, 0), sb(rank, 0);
  int64_t acca = 1, accb = 1;
  for (size_t i = rank; i-- > 0;) {
    int64_t da = i < rank - ra ? 1 : as[i - (rank - ra)];
    int64_t db = i < rank - rb ? 1 : bs[i - (rank - rb)];
    if (da != db && da != 1 && db != 1)
      return false;
    batch[i] = da == 1 ? db : da;
    sa[i] = da == 1 ? 0 : acca;
    sb[i] = db == 1 ? 0 : accb;
    acca *= da;
    accb *= db;
  }
  std::vector<int64_t> want = batch;
  if (!vecA)
    want.push_back(M);
  if (!vecB)
    want.push_back(N);
  if (yv.shape != want)
    return false;
  int64_t nb = 1;
  for (int64_t d : batch)
    nb *= d;
  const T *a = av.as<T>(), *b = bv.as<T>();
  T* y = yv.as<T>();
  std::vector<int64_t> idx(rank, 0);
  for (int64_t bi = 0; bi < nb; ++bi) {
    int64_t oa = 0, ob = 0;
    for (size_t d = 0; d < rank; ++d) {
      oa += idx[d] * sa[d];
      ob += idx[d] * sb[d];
    }
    matmulInto<T>(false, false, M, N, K, T(1), a + oa * M * K, K, b + ob * K * N, N, T(0),
                  y + bi * M * N, N);
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < batch[d])
        break;
      idx[d] = 0;
    }
  }
  return true;
}

//===--- Pooling ----------------------------------------------------------===//

/// Checks x and y as NCHW with the same N and C, and the window attributes.
bool poolShapes(const TensorView& x, const TensorView& y, const int64_t* kernel,
                const int64_t* strides, const int64_t* pads, const int64_t* dil) {
  if (x.rank() != 4 || y.rank() != 4 || x.shape[0] != y.shape[0] || x.shape[1] != y.shape[1])
    return false;
  for (int i = 0; i < 2; ++i)
    if (kernel[i] < 1 || strides[i] < 1 || (dil && dil[i] < 1) || pads[i] < 0 || pads[i + 2] < 0)
      return false;
  return true;
}

/// Calls fn(xi, yi) for every tap of every max-pool window, as the
/// reference's forEachMaxPoolTap does.
template <typename Fn>
void forEachMaxPoolTap(const std::vector<int64_t>& xs, const std::vector<int64_t>& ys,
                       const MaxPool2dParams& p, Fn fn) {
  for (int64_t nc = 0; nc < ys[0] * ys[1]; ++nc)
    for (int64_t oh = 0; oh < ys[2]; ++oh)
      for (int64_t ow = 0; ow < ys[3]; ++ow) {
        int64_t yi = (nc * ys[2] + oh) * ys[3] + ow;
        for (int64_t i = 0; i < p.kernel[0]; ++i) {
          int64_t ih = oh * p.strides[0] - p.pads[0] + i * p.dilations[0];
          if (ih < 0 || ih >= xs[2])
            continue;
          for (int64_t j = 0; j < p.kernel[1]; ++j) {
            int64_t iw = ow * p.strides[1] - p.pads[1] + j * p.dilations[1];
            if (iw >= 0 && iw < xs[3])
              fn((nc * xs[2] + ih) * xs[3] + iw, yi);
          }
        }
      }
}

template <typename T>
bool maxPool2dImpl(const TensorView& xv, const TensorView& yv, const MaxPool2dParams& p) {
  if (!poolShapes(xv, yv, p.kernel, p.strides, p.pads, p.dilations))
    return false;
  const T* x = xv.as<T>();
  T* y = yv.as<T>();
  std::fill(y, y + yv.numel(), -std::numeric_limits<T>::infinity());
  forEachMaxPoolTap(xv.shape, yv.shape, p,
                    [&](int64_t xi, int64_t yi) { y[yi] = std::max(y[yi], x[xi]); });
  return true;
}

template <typename T>
bool maxPool2dGradImpl(const TensorView& xv, const TensorView& dyv, const TensorView& dxv,
                       const MaxPool2dParams& p) {
  if (!poolShapes(xv, dyv, p.kernel, p.strides, p.pads, p.dilations) || dxv.shape != xv.shape)
    return false;
  const T *x = xv.as<T>(), *dy = dyv.as<T>();
  T* dx = dxv.as<T>();
  std::vector<int64_t> best(static_cast<size_t>(dyv.numel()), -1);
  forEachMaxPoolTap(xv.shape, dyv.shape, p, [&](int64_t xi, int64_t yi) {
    if (best[yi] < 0 || x[xi] > x[best[yi]])
      best[yi] = xi;
  });
  std::fill(dx, dx + dxv.numel(), T(0));
  for (int64_t yi = 0; yi < dyv.numel(); ++yi)
    if (best[yi] >= 0)
      dx[best[yi]] += dy[yi];
  return true;
}

/// The reference's avgPoolWindow: input rows [h0, h1), columns [w0, w1),
/// and the divisor.
struct AvgWindow {
  int64_t h0, h1, w0, w1, count;
};
AvgWindow avgWindow(const AvgPool2dParams& p, const std::vector<int64_t>& xs, int64_t oh,
                    int64_t ow) {
  AvgWindow w;
  w.h0 = oh * p.strides[0] - p.pads[0];
  w.w0 = ow * p.strides[1] - p.pads[1];
  w.h1 = std::min(w.h0 + p.kernel[0], xs[2] + p.pads[2]);
  w.w1 = std::min(w.w0 + p.kernel[1], xs[3] + p.pads[3]);
  int64_t padded = (w.h1 - w.h0) * (w.w1 - w.w0);
  w.h0 = std::max<int64_t>(w.h0, 0);
  w.w0 = std::max<int64_t>(w.w0, 0);
  w.h1 = std::min(w.h1, xs[2]);
  w.w1 = std::min(w.w1, xs[3]);
  w.count = p.count_include_pad ? padded : (w.h1 - w.h0) * (w.w1 - w.w0);
  return w;
}

template <typename T>
bool avgPool2dImpl(const TensorView& xv, const TensorView& yv, const AvgPool2dParams& p) {
  if (!poolShapes(xv, yv, p.kernel, p.strides, p.pads, nullptr))
    return false;
  const std::vector<int64_t>&xs = xv.shape, &ys = yv.shape;
  const T* x = xv.as<T>();
  T* y = yv.as<T>();
  for (int64_t nc = 0; nc < ys[0] * ys[1]; ++nc)
    for (int64_t oh = 0; oh < ys[2]; ++oh)
      for (int64_t ow = 0; ow < ys[3]; ++ow) {
        AvgWindow win = avgWindow(p, xs, oh, ow);
        T sum = 0;
        for (int64_t ih = win.h0; ih < win.h1; ++ih)
          for (int64_t iw = win.w0; iw < win.w1; ++iw)
            sum += x[(nc * xs[2] + ih) * xs[3] + iw];
        y[(nc * ys[2] + oh) * ys[3] + ow] = win.count > 0 ? sum / static_cast<T>(win.count) : T(0);
      }
  return true;
}

template <typename T>
bool avgPool2dGradImpl(const TensorView& dyv, const TensorView& dxv, const AvgPool2dParams& p) {
  if (!poolShapes(dxv, dyv, p.kernel, p.strides, p.pads, nullptr))
    return false;
  const std::vector<int64_t>&xs = dxv.shape, &ys = dyv.shape;
  const T* dy = dyv.as<T>();
  T* dx = dxv.as<T>();
  std::fill(dx, dx + dxv.numel(), T(0));
  for (int64_t nc = 0; nc < ys[0] * ys[1]; ++nc)
    for (int64_t oh = 0; oh < ys[2]; ++oh)
      for (int64_t ow = 0; ow < ys[3]; ++ow) {
        AvgWindow win = avgWindow(p, xs, oh, ow);
        if (win.count <= 0)
          continue;
        T g = dy[(nc * ys[2] + oh) * ys[3] + ow] / static_cast<T>(win.count);
        for (int64_t ih = win.h0; ih < win.h1; ++ih)
          for (int64_t iw = win.w0; iw < win.w1; ++iw)
            dx[(nc * xs[2] + ih) * xs[3] + iw] += g;
      }
  return true;
}

template <typename T> bool globalAvgPoolImpl(const TensorView& xv, const TensorView& yv) {
  if (xv.rank() < 3 || yv.rank() != xv.rank() || yv.shape[0] != xv.shape[0] ||
      yv.shape[1] != xv.shape[1])
    return false;
  for (int64_t d = 2; d < yv.rank(); ++d)
    if (yv.shape[d] != 1)
      return false;
  int64_t nc = xv.shape[0] * xv.shape[1], spatial = 1;
  for (int64_t d = 2; d < xv.rank(); ++d)
    spatial *= xv.shape[d];
  const T* x = xv.as<T>();
  T* y = yv.as<T>();
  for (int64_t k = 0; k < nc; ++k) {
    double sum = 0;
    for (int64_t s = 0; s < spatial; ++s)
      sum += x[k * spatial + s];
    y[k] = static_cast<T>(sum / static_cast<double>(spatial));
  }
  return true;
}

} // namespace

//===--- Entry points -----------------------------------------------------===//

bool conv2d(const TensorView& x, const TensorView& w, const TensorView* bias, const TensorView& y,
            const Conv2dParams& p) {
  if (!isFloat(x.dtype) || !sameType(x.dtype, {&x, &w, &y}))
    return false;
  return dispatch(x.dtype, [&](auto t) { return conv2dImpl<decltype(t)>(x, w, bias, y, p); });
}

bool conv2dGradInput(const TensorView& dy, const TensorView& w, const TensorView& dx,
                     const Conv2dParams& p) {
  if (!isFloat(dy.dtype) || !sameType(dy.dtype, {&dy, &w, &dx}))
    return false;
  return dispatch(dy.dtype, [&](auto t) { return conv2dGradInputImpl<decltype(t)>(dy, w, dx, p); });
}

bool conv2dGradFilter(const TensorView& x, const TensorView& dy, const TensorView& dw,
                      const Conv2dParams& p) {
  if (!isFloat(x.dtype) || !sameType(x.dtype, {&x, &dy, &dw}))
    return false;
  return dispatch(x.dtype, [&](auto t) { return conv2dGradFilterImpl<decltype(t)>(x, dy, dw, p); });
}

bool gemm(const TensorView& a, const TensorView& b, const TensorView* c, const TensorView& y,
          const GemmParams& p) {
  if (!isFloat(a.dtype) || !sameType(a.dtype, {&a, &b, &y}) || (c && !sameType(a.dtype, {c})))
    return false;
  return dispatch(a.dtype, [&](auto t) { return gemmImpl<decltype(t)>(a, b, c, y, p); });
}

bool matmul(const TensorView& a, const TensorView& b, const TensorView& y) {
  if (!isFloat(a.dtype) || !sameType(a.dtype, {&a, &b, &y}))
    return false;
  return dispatch(a.dtype, [&](auto t) { return matmulImpl<decltype(t)>(a, b, y); });
}

bool maxPool2d(const TensorView& x, const TensorView& y, const MaxPool2dParams& p) {
  if (!isFloat(x.dtype) || !sameType(x.dtype, {&x, &y}))
    return false;
  return dispatch(x.dtype, [&](auto t) { return maxPool2dImpl<decltype(t)>(x, y, p); });
}

bool maxPool2dGrad(const TensorView& x, const TensorView& dy, const TensorView& dx,
                   const MaxPool2dParams& p) {
  if (!isFloat(x.dtype) || !sameType(x.dtype, {&x, &dy, &dx}))
    return false;
  return dispatch(x.dtype, [&](auto t) { return maxPool2dGradImpl<decltype(t)>(x, dy, dx, p); });
}

bool avgPool2d(const TensorView& x, const TensorView& y, const AvgPool2dParams& p) {
  if (!isFloat(x.dtype) || !sameType(x.dtype, {&x, &y}))
    return false;
  return dispatch(x.dtype, [&](auto t) { return avgPool2dImpl<decltype(t)>(x, y, p); });
}

bool avgPool2dGrad(const TensorView& dy, const TensorView& dx, const AvgPool2dParams& p) {
  if (!isFloat(dy.dtype) || !sameType(dy.dtype, {&dy, &dx}))
    return false;
  return dispatch(dy.dtype, [&](auto t) { return avgPool2dGradImpl<decltype(t)>(dy, dx, p); });
}

bool globalAvgPool(const TensorView& x, const TensorView& y) {
  if (!isFloat(x.dtype) || !sameType(x.dtype, {&x, &y}))
    return false;
  return dispatch(x.dtype, [&](auto t) { return globalAvgPoolImpl<decltype(t)>(x, y); });
}

} // namespace lwrt::cpu
