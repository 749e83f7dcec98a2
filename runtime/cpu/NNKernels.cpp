// NNKernels.cpp - matrix products and pooling of lwrt/cpu_nn.h
//
// Matrix products run on OpenBLAS, split over the pool (cpu/Blas.h); the
// pooling kernels follow the reference interpreter's loops (interp/Eval.h)
// so that ties, empty windows and divisors come out the same, one (image,
// channel) plane per task. The convolutions are in ConvKernels.cpp.
#include "Bf16.h"
#include "Blas.h"
#include "Common.h"
#include "lwrt/cpu_nn.h"

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <vector>

namespace lwrt::cpu {
namespace {

using detail::blocked8;
using detail::dispatch;
using detail::matmulInto;
using detail::rowMajor;
using detail::sameType;

bool isFloat(DType t) { return t == DType::F32 || t == DType::F64; }

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

/// The taps of a max-pool window along one dim that land in the input:
/// taps [first, last) of the kernel, tap i at input index start + i * dil.
struct Taps {
  int64_t first, last, start;
};

/// The taps of each output index along one dim.
std::vector<Taps> tapsAlong(int64_t out, int64_t in, int64_t kernel, int64_t stride, int64_t pad,
                            int64_t dil) {
  std::vector<Taps> taps(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    int64_t start = o * stride - pad;
    int64_t first = start < 0 ? (-start + dil - 1) / dil : 0;
    int64_t last = start < in ? std::min(kernel, (in - start + dil - 1) / dil) : 0;
    taps[static_cast<size_t>(o)] = {first, std::max(first, last), start};
  }
  return taps;
}

/// A max pool's windows over one (image, channel) plane, visited as the
/// reference's forEachMaxPoolTap does: output by output, taps row-major.
struct MaxPoolPlanes {
  std::vector<Taps> rows, cols;
  int64_t W, OW, dh, dw;
  MaxPoolPlanes(const std::vector<int64_t>& xs, const std::vector<int64_t>& ys,
                const MaxPool2dParams& p)
      : rows(tapsAlong(ys[2], xs[2], p.kernel[0], p.strides[0], p.pads[0], p.dilations[0])),
        cols(tapsAlong(ys[3], xs[3], p.kernel[1], p.strides[1], p.pads[1], p.dilations[1])),
        W(xs[3]), OW(ys[3]), dh(p.dilations[0]), dw(p.dilations[1]) {}

  /// y[o] = the window's maximum (-inf for an empty window).
  template <typename T> void forward(const T* x, T* y) const {
    for (size_t oh = 0; oh < rows.size(); ++oh) {
      const Taps& r = rows[oh];
      for (size_t ow = 0; ow < cols.size(); ++ow) {
        const Taps& c = cols[ow];
        T m = -std::numeric_limits<T>::infinity();
        for (int64_t i = r.first; i < r.last; ++i) {
          const T* row = x + (r.start + i * dh) * W + c.start;
          for (int64_t j = c.first; j < c.last; ++j)
            m = m < row[j * dw] ? row[j * dw] : m;
        }
        y[static_cast<int64_t>(oh) * OW + static_cast<int64_t>(ow)] = m;
      }
    }
  }

  /// forward() over one 8-channel block of an nChw8c tensor: each tap is 8
  /// channels side by side, each channel's window as in forward().
  void forwardBlock(const float* x, float* y) const {
    for (size_t oh = 0; oh < rows.size(); ++oh) {
      const Taps& r = rows[oh];
      for (size_t ow = 0; ow < cols.size(); ++ow) {
        const Taps& c = cols[ow];
        float m[8];
        std::fill(m, m + 8, -std::numeric_limits<float>::infinity());
        for (int64_t i = r.first; i < r.last; ++i)
          for (int64_t j = c.first; j < c.last; ++j) {
            const float* v = x + ((r.start + i * dh) * W + c.start + j * dw) * 8;
            for (int l = 0; l < 8; ++l)
              m[l] = m[l] < v[l] ? v[l] : m[l];
          }
        std::copy(m, m + 8, y + (static_cast<int64_t>(oh) * OW + static_cast<int64_t>(ow)) * 8);
      }
    }
  }

  /// backward() over one 8-channel block of nChw8c tensors.
  void backwardBlock(const float* x, const float* dy, float* dx, int64_t xBlock) const {
    std::fill(dx, dx + xBlock, 0.f);
    for (size_t oh = 0; oh < rows.size(); ++oh) {
      const Taps& r = rows[oh];
      for (size_t ow = 0; ow < cols.size(); ++ow) {
        const Taps& c = cols[ow];
        if (r.first == r.last || c.first == c.last)
          continue;
        int64_t best[8];
        float top[8];
        const int64_t first = (r.start + r.first * dh) * W + c.start + c.first * dw;
        for (int l = 0; l < 8; ++l) {
          best[l] = first;
          top[l] = x[first * 8 + l];
        }
        for (int64_t i = r.first; i < r.last; ++i)
          for (int64_t j = c.first; j < c.last; ++j) {
            const int64_t at = (r.start + i * dh) * W + c.start + j * dw;
            for (int l = 0; l < 8; ++l)
              if (x[at * 8 + l] > top[l]) {
                top[l] = x[at * 8 + l];
                best[l] = at;
              }
          }
        const float* g = dy + (static_cast<int64_t>(oh) * OW + static_cast<int64_t>(ow)) * 8;
        for (int l = 0; l < 8; ++l)
          dx[best[l] * 8 + l] += g[l];
      }
    }
  }

  /// dx[first maximum of each window] += dy (dx zeroed first).
  template <typename T> void backward(const T* x, const T* dy, T* dx, int64_t xPlane) const {
    std::fill(dx, dx + xPlane, T(0));
    for (size_t oh = 0; oh < rows.size(); ++oh) {
      const Taps& r = rows[oh];
      for (size_t ow = 0; ow < cols.size(); ++ow) {
        const Taps& c = cols[ow];
        if (r.first == r.last || c.first == c.last)
          continue;
        int64_t best = (r.start + r.first * dh) * W + c.start + c.first * dw;
        T top = x[best];
        for (int64_t i = r.first; i < r.last; ++i) {
          const int64_t row = (r.start + i * dh) * W + c.start;
          for (int64_t j = c.first; j < c.last; ++j) {
            const T v = x[row + j * dw];
            if (v > top) {
              top = v;
              best = row + j * dw;
            }
          }
        }
        dx[best] += dy[static_cast<int64_t>(oh) * OW + static_cast<int64_t>(ow)];
      }
    }
  }
};

/// Calls fn(nc) for every (image, channel) plane of y, spread over the pool.
template <typename Fn> void forEachPlane(const std::vector<int64_t>& ys, int64_t work, Fn fn) {
  // Planes of little work go several to a thread (~16K taps each at least).
  const int64_t planes = ys[0] * ys[1];
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, work));
  detail::parallelFor(planes, grain, [&](int64_t first, int64_t last) {
    for (int64_t nc = first; nc < last; ++nc)
      fn(nc);
  });
}

template <typename T>
bool maxPool2dImpl(const TensorView& xv, const TensorView& yv, const MaxPool2dParams& p) {
  if (!poolShapes(xv, yv, p.kernel, p.strides, p.pads, p.dilations))
    return false;
  const std::vector<int64_t>&xs = xv.shape, &ys = yv.shape;
  const int64_t xPlane = xs[2] * xs[3], yPlane = ys[2] * ys[3];
  MaxPoolPlanes planes(xs, ys, p);
  forEachPlane(ys, yPlane * p.kernel[0] * p.kernel[1], [&](int64_t nc) {
    planes.forward(xv.as<T>() + nc * xPlane, yv.as<T>() + nc * yPlane);
  });
  return true;
}

template <typename T>
bool maxPool2dGradImpl(const TensorView& xv, const TensorView& dyv, const TensorView& dxv,
                       const MaxPool2dParams& p) {
  if (!poolShapes(xv, dyv, p.kernel, p.strides, p.pads, p.dilations) || dxv.shape != xv.shape)
    return false;
  const std::vector<int64_t>&xs = xv.shape, &ys = dyv.shape;
  const int64_t xPlane = xs[2] * xs[3], yPlane = ys[2] * ys[3];
  MaxPoolPlanes planes(xs, ys, p);
  forEachPlane(ys, yPlane * p.kernel[0] * p.kernel[1], [&](int64_t nc) {
    planes.backward(xv.as<T>() + nc * xPlane, dyv.as<T>() + nc * yPlane, dxv.as<T>() + nc * xPlane,
                    xPlane);
  });
  return true;
}

/// The nChw8c forms: one 8-channel block (N * C/8 of them) per task.
bool maxPool2dBlocked(const TensorView& xv, const TensorView& yv, const MaxPool2dParams& p) {
  if (!poolShapes(xv, yv, p.kernel, p.strides, p.pads, p.dilations))
    return false;
  const std::vector<int64_t>&xs = xv.shape, &ys = yv.shape;
  const int64_t xBlock = xs[2] * xs[3] * 8, yBlock = ys[2] * ys[3] * 8;
  MaxPoolPlanes planes(xs, ys, p);
  std::vector<int64_t> blocks = {ys[0], ys[1] / 8};
  forEachPlane(blocks, yBlock * p.kernel[0] * p.kernel[1], [&](int64_t nb) {
    planes.forwardBlock(xv.as<float>() + nb * xBlock, yv.as<float>() + nb * yBlock);
  });
  return true;
}

bool maxPool2dGradBlocked(const TensorView& xv, const TensorView& dyv, const TensorView& dxv,
                          const MaxPool2dParams& p) {
  if (!poolShapes(xv, dyv, p.kernel, p.strides, p.pads, p.dilations) || dxv.shape != xv.shape)
    return false;
  const std::vector<int64_t>&xs = xv.shape, &ys = dyv.shape;
  const int64_t xBlock = xs[2] * xs[3] * 8, yBlock = ys[2] * ys[3] * 8;
  MaxPoolPlanes planes(xs, ys, p);
  std::vector<int64_t> blocks = {ys[0], ys[1] / 8};
  forEachPlane(blocks, yBlock * p.kernel[0] * p.kernel[1], [&](int64_t nb) {
    planes.backwardBlock(xv.as<float>() + nb * xBlock, dyv.as<float>() + nb * yBlock,
                         dxv.as<float>() + nb * xBlock, xBlock);
  });
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
  const int64_t xPlane = xs[2] * xs[3], yPlane = ys[2] * ys[3];
  forEachPlane(ys, yPlane * p.kernel[0] * p.kernel[1], [&](int64_t nc) {
    const T* x = xv.as<T>() + nc * xPlane;
    T* y = yv.as<T>() + nc * yPlane;
    for (int64_t oh = 0; oh < ys[2]; ++oh)
      for (int64_t ow = 0; ow < ys[3]; ++ow) {
        AvgWindow win = avgWindow(p, xs, oh, ow);
        T sum = 0;
        for (int64_t ih = win.h0; ih < win.h1; ++ih)
          for (int64_t iw = win.w0; iw < win.w1; ++iw)
            sum += x[ih * xs[3] + iw];
        y[oh * ys[3] + ow] = win.count > 0 ? sum / static_cast<T>(win.count) : T(0);
      }
  });
  return true;
}

template <typename T>
bool avgPool2dGradImpl(const TensorView& dyv, const TensorView& dxv, const AvgPool2dParams& p) {
  if (!poolShapes(dxv, dyv, p.kernel, p.strides, p.pads, nullptr))
    return false;
  const std::vector<int64_t>&xs = dxv.shape, &ys = dyv.shape;
  const int64_t xPlane = xs[2] * xs[3], yPlane = ys[2] * ys[3];
  forEachPlane(ys, yPlane * p.kernel[0] * p.kernel[1], [&](int64_t nc) {
    const T* dy = dyv.as<T>() + nc * yPlane;
    T* dx = dxv.as<T>() + nc * xPlane;
    std::fill(dx, dx + xPlane, T(0));
    for (int64_t oh = 0; oh < ys[2]; ++oh)
      for (int64_t ow = 0; ow < ys[3]; ++ow) {
        AvgWindow win = avgWindow(p, xs, oh, ow);
        if (win.count <= 0)
          continue;
        T g = dy[oh * ys[3] + ow] / static_cast<T>(win.count);
        for (int64_t ih = win.h0; ih < win.h1; ++ih)
          for (int64_t iw = win.w0; iw < win.w1; ++iw)
            dx[ih * xs[3] + iw] += g;
      }
  });
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
  detail::parallelFor(nc, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, spatial)),
                      [&](int64_t first, int64_t last) {
                        for (int64_t k = first; k < last; ++k) {
                          double sum = 0;
                          for (int64_t s = 0; s < spatial; ++s)
                            sum += x[k * spatial + s];
                          y[k] = static_cast<T>(sum / static_cast<double>(spatial));
                        }
                      });
  return true;
}

/// globalAvgPool of an nChw8c x (y [N, C, 1, 1]): each channel's sum in the
/// row-major kernel's order.
bool globalAvgPoolBlocked(const TensorView& xv, const TensorView& yv) {
  const std::vector<int64_t>& xs = xv.shape;
  if (yv.shape != std::vector<int64_t>{xs[0], xs[1], 1, 1})
    return false;
  const int64_t blocks = xs[0] * xs[1] / 8, spatial = xs[2] * xs[3];
  const float* x = xv.as<float>();
  float* y = yv.as<float>();
  detail::parallelFor(blocks, std::max<int64_t>(1, 2048 / std::max<int64_t>(1, spatial)),
                      [&](int64_t first, int64_t last) {
                        for (int64_t nb = first; nb < last; ++nb) {
                          double sum[8] = {};
                          for (int64_t s = 0; s < spatial; ++s)
                            for (int l = 0; l < 8; ++l)
                              sum[l] += x[(nb * spatial + s) * 8 + l];
                          for (int l = 0; l < 8; ++l)
                            y[nb * 8 + l] =
                                static_cast<float>(sum[l] / static_cast<double>(spatial));
                        }
                      });
  return true;
}

} // namespace

//===--- Entry points -----------------------------------------------------===//

bool gemm(const TensorView& a, const TensorView& b, const TensorView* c, const TensorView& y,
          const GemmParams& p) {
  if (detail::Float32Views::any({&a, &b, c, &y})) {
    detail::Float32Views f;
    return sameType(a.dtype, {&a, &b, &y}) && (!c || c->dtype == a.dtype) &&
           gemm(f.in(a), f.in(b), c ? &f.in(*c) : nullptr, f.out(y), p) && f.commit();
  }
  if (!isFloat(a.dtype) || !sameType(a.dtype, {&a, &b, &y}) || (c && !sameType(a.dtype, {c})) ||
      !rowMajor({&a, &b, &y}) || (c && !rowMajor({c})))
    return false;
  return dispatch(a.dtype, [&](auto t) { return gemmImpl<decltype(t)>(a, b, c, y, p); });
}

bool matmul(const TensorView& a, const TensorView& b, const TensorView& y) {
  if (detail::Float32Views::any({&a, &b, &y})) {
    detail::Float32Views f;
    return sameType(a.dtype, {&a, &b, &y}) && matmul(f.in(a), f.in(b), f.out(y)) && f.commit();
  }
  if (!isFloat(a.dtype) || !sameType(a.dtype, {&a, &b, &y}) || !rowMajor({&a, &b, &y}))
    return false;
  return dispatch(a.dtype, [&](auto t) { return matmulImpl<decltype(t)>(a, b, y); });
}

bool maxPool2d(const TensorView& x, const TensorView& y, const MaxPool2dParams& p) {
  if (detail::Float32Views::any({&x, &y})) {
    // Mixed precision's 16-bit activations: the maximum of widened values
    // is one of them, so the result rounds back exactly.
    detail::Float32Views f;
    return sameType(x.dtype, {&x, &y}) && maxPool2d(f.in(x), f.out(y), p) && f.commit();
  }
  if (!isFloat(x.dtype) || !sameType(x.dtype, {&x, &y}))
    return false;
  if (blocked8({&x, &y}))
    return maxPool2dBlocked(x, y, p);
  if (!rowMajor({&x, &y}))
    return false;
  return dispatch(x.dtype, [&](auto t) { return maxPool2dImpl<decltype(t)>(x, y, p); });
}

bool maxPool2dGrad(const TensorView& x, const TensorView& dy, const TensorView& dx,
                   const MaxPool2dParams& p) {
  if (detail::Float32Views::any({&x, &dy, &dx})) {
    // A tap in several windows sums their gradients in float32; rounded
    // once to the type.
    detail::Float32Views f;
    return sameType(x.dtype, {&x, &dy, &dx}) && maxPool2dGrad(f.in(x), f.in(dy), f.out(dx), p) &&
           f.commit();
  }
  if (!isFloat(x.dtype) || !sameType(x.dtype, {&x, &dy, &dx}))
    return false;
  if (blocked8({&x, &dy, &dx}))
    return maxPool2dGradBlocked(x, dy, dx, p);
  if (!rowMajor({&x, &dy, &dx}))
    return false;
  return dispatch(x.dtype, [&](auto t) { return maxPool2dGradImpl<decltype(t)>(x, dy, dx, p); });
}

bool avgPool2d(const TensorView& x, const TensorView& y, const AvgPool2dParams& p) {
  if (detail::Float32Views::any({&x, &y})) {
    // Mixed precision's 16-bit activations: summed and divided in float32,
    // rounded once.
    detail::Float32Views f;
    return sameType(x.dtype, {&x, &y}) && avgPool2d(f.in(x), f.out(y), p) && f.commit();
  }
  if (!isFloat(x.dtype) || !sameType(x.dtype, {&x, &y}) || !rowMajor({&x, &y}))
    return false;
  return dispatch(x.dtype, [&](auto t) { return avgPool2dImpl<decltype(t)>(x, y, p); });
}

bool avgPool2dGrad(const TensorView& dy, const TensorView& dx, const AvgPool2dParams& p) {
  if (detail::Float32Views::any({&dy, &dx})) {
    // A tap in several windows sums their shares in float32; rounded once.
    detail::Float32Views f;
    return sameType(dy.dtype, {&dy, &dx}) && avgPool2dGrad(f.in(dy), f.out(dx), p) && f.commit();
  }
  if (!isFloat(dy.dtype) || !sameType(dy.dtype, {&dy, &dx}) || !rowMajor({&dy, &dx}))
    return false;
  return dispatch(dy.dtype, [&](auto t) { return avgPool2dGradImpl<decltype(t)>(dy, dx, p); });
}

bool globalAvgPool(const TensorView& x, const TensorView& y) {
  if (!isFloat(x.dtype) || !sameType(x.dtype, {&x, &y}) || !rowMajor({&y}))
    return false;
  if (blocked8({&x}))
    return globalAvgPoolBlocked(x, y);
  if (!rowMajor({&x}))
    return false;
  return dispatch(x.dtype, [&](auto t) { return globalAvgPoolImpl<decltype(t)>(x, y); });
}

} // namespace lwrt::cpu
