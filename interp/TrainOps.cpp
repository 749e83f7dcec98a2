//===- TrainOps.cpp - Reference kernels of the training ops ---------------===//
//
// Losses, backward ops, the dropout RNG and optimizer updates, written as
// the textbook formulas; the optimizers' update of an element and the
// losses' row math are lwrt/optimizer_math.h's and lwrt/loss_math.h's,
// which the CPU and CUDA kernels call too. Their gradients are checked
// against finite differences of the forward kernels
// (test/unit/GradCheckTest.cpp).
//
//===----------------------------------------------------------------------===//
#include "interp/Eval.h"
#include "runtime/include/lwrt/activation_math.h"
#include "runtime/include/lwrt/dropout.h"
#include "runtime/include/lwrt/loss_math.h"
#include "runtime/include/lwrt/lr_schedule.h"
#include "runtime/include/lwrt/optimizer_math.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <limits>

namespace lwcc {

using llvm::Error;
using namespace kernels;

namespace {
Error ok() { return Error::success(); }

/// log(sum_j exp(z[r, j])) of row r of logits [N, K], computed stably.
double rowLogSumExp(const Tensor& logits, int64_t r) {
  int64_t k = logits.type.shape.back();
  return lwrt::rowLogSumExp(logits.f.data() + r * k, k);
}

/// Labels in [0, K) or equal to the op's ignore_index.
Error checkLabels(const EvalCtx& c) {
  int64_t k = c.x(0).type.shape.back(), ignore = c.op.getInt("ignore_index");
  for (int64_t l : c.x(1).i)
    if ((l < 0 || l >= k) && l != ignore)
      return c.op.emitError(llvm::formatv("label {0} is out of range [0, {1})", l, k).str());
  return ok();
}
} // namespace

Error evalSign(EvalCtx& c) {
  for (int64_t k = 0; k < c.y().size(); ++k) {
    double v = c.x().get(k);
    double s = v > 0 ? 1.0 : v < 0 ? -1.0 : 0.0;
    if (c.y().isFloatData())
      c.y().f[k] = s;
    else
      c.y().i[k] = static_cast<int64_t>(s);
  }
  return ok();
}

Error evalSoftmaxXent(EvalCtx& c) {
  // Per row: (1-E)·(lse - z[label]) + E·mean_j(lse - z[j]).
  if (Error e = checkLabels(c))
    return e;
  // Rows whose label is ignore_index count for nothing; the mean is over the others.
  const Tensor& z = c.x(0);
  int64_t k = z.type.shape.back(), n = c.x(1).size(), ignore = c.op.getInt("ignore_index");
  double smoothing = c.op.getFloat("label_smoothing");
  double total = 0;
  int64_t counted = 0;
  for (int64_t r = 0; r < n; ++r) {
    if (c.x(1).i[r] == ignore)
      continue;
    ++counted;
    double lse = rowLogSumExp(z, r), sum = 0;
    for (int64_t j = 0; j < k; ++j)
      sum += z.f[r * k + j];
    total += lwrt::xentRowLoss(lse, z.f[r * k + c.x(1).i[r]], sum, k, smoothing);
  }
  c.y().f[0] = total / static_cast<double>(counted);
  return ok();
}

Error evalSoftmaxXentGrad(EvalCtx& c) {
  // (softmax(z) - (1-E)·onehot(label) - E/K) * dloss / N
  if (Error e = checkLabels(c))
    return e;
  // ... over the rows not ignored (0 in the ignored rows).
  const Tensor& z = c.x(0);
  int64_t k = z.type.shape.back(), n = c.x(1).size(), ignore = c.op.getInt("ignore_index");
  int64_t counted = 0;
  for (int64_t r = 0; r < n; ++r)
    counted += c.x(1).i[r] != ignore;
  double smoothing = c.op.getFloat("label_smoothing");
  double scale = c.x(2).f[0] / static_cast<double>(counted);
  double uniform = smoothing / static_cast<double>(k);
  for (int64_t r = 0; r < n; ++r) {
    if (c.x(1).i[r] == ignore) {
      std::fill(c.y().f.begin() + r * k, c.y().f.begin() + (r + 1) * k, 0.0);
      continue;
    }
    double lse = rowLogSumExp(z, r);
    for (int64_t j = 0; j < k; ++j)
      c.y().f[r * k + j] =
          lwrt::xentGradValue(z.f[r * k + j], lse, j == c.x(1).i[r], smoothing, uniform, scale);
  }
  return ok();
}

Error evalMseLoss(EvalCtx& c) {
  double sum = 0;
  for (int64_t k = 0; k < c.x(0).size(); ++k)
    sum += lwrt::squaredDiff(c.x(0).f[k], c.x(1).f[k]);
  c.y().f[0] = sum / static_cast<double>(std::max<int64_t>(1, c.x(0).size()));
  return ok();
}

Error evalMseLossGrad(EvalCtx& c) {
  double scale = lwrt::mseGradScale(c.x(2).f[0], c.x(0).size());
  for (int64_t k = 0; k < c.y().size(); ++k)
    c.y().f[k] = (c.x(0).f[k] - c.x(1).f[k]) * scale;
  return ok();
}

Error evalConv2dGradInput(EvalCtx& c) {
  const Tensor &dy = c.x(0), &w = c.x(1);
  forEachConvTerm(c.op, c.y().type.shape, w.type.shape, dy.type.shape,
                  [&](int64_t xi, int64_t wi, int64_t yi) { c.y().f[xi] += dy.f[yi] * w.f[wi]; });
  return ok();
}

Error evalConv2dGradFilter(EvalCtx& c) {
  const Tensor &x = c.x(0), &dy = c.x(1);
  forEachConvTerm(c.op, x.type.shape, c.y().type.shape, dy.type.shape,
                  [&](int64_t xi, int64_t wi, int64_t yi) { c.y().f[wi] += x.f[xi] * dy.f[yi]; });
  return ok();
}

Error evalMaxPool2dGrad(EvalCtx& c) {
  // The gradient goes to the first maximum of each window, in the order the
  // forward kernel visits it.
  const Tensor &x = c.x(0), &dy = c.x(1);
  std::vector<int64_t> best(dy.size(), -1);
  forEachMaxPoolTap(c.op, x.type.shape, dy.type.shape, [&](int64_t xi, int64_t yi) {
    if (best[yi] < 0 || x.f[xi] > x.f[best[yi]])
      best[yi] = xi;
  });
  for (int64_t yi = 0; yi < dy.size(); ++yi)
    if (best[yi] >= 0)
      c.y().f[best[yi]] += dy.f[yi];
  return ok();
}

/// Each window's share of dy added to its taps: in double, or for 16-bit
/// gradients in float32 in the trainers' order (see evalAvgPool2d).
template <typename Acc> Error avgPool2dGradIn(EvalCtx& c) {
  const Tensor& dy = c.x(0);
  const Shape &xs = c.y().type.shape, &ys = dy.type.shape;
  std::vector<Acc> dx(c.y().f.size(), Acc(0));
  for (int64_t nc = 0; nc < ys[0] * ys[1]; ++nc)
    for (int64_t oh = 0; oh < ys[2]; ++oh)
      for (int64_t ow = 0; ow < ys[3]; ++ow) {
        AvgWindow win = avgPoolWindow(c.op, xs, oh, ow);
        if (win.count <= 0)
          continue;
        Acc g =
            static_cast<Acc>(dy.f[(nc * ys[2] + oh) * ys[3] + ow]) / static_cast<Acc>(win.count);
        for (int64_t ih = win.h0; ih < win.h1; ++ih)
          for (int64_t iw = win.w0; iw < win.w1; ++iw)
            dx[static_cast<size_t>((nc * xs[2] + ih) * xs[3] + iw)] += g;
      }
  for (size_t i = 0; i < dx.size(); ++i)
    c.y().f[i] = static_cast<double>(dx[i]);
  return ok();
}

Error evalAvgPool2dGrad(EvalCtx& c) {
  return is16BitFloat(c.y().type.dtype) ? avgPool2dGradIn<float>(c) : avgPool2dGradIn<double>(c);
}

Error evalLrnGrad(EvalCtx& c) {
  // y_c = x_c * s_c^-beta, s_c = bias + alpha/size * sum_{j in win(c)} x_j^2.
  // dx_j = dy_j s_j^-beta - 2 alpha beta / size * x_j * sum_{c: j in win(c)} dy_c y_c / s_c.
  const Tensor &x = c.x(0), &y = c.x(1), &dy = c.x(2);
  const Shape& xs = x.type.shape;
  int64_t size = c.op.getInt("size");
  double alpha = c.op.getFloat("alpha"), beta = c.op.getFloat("beta"), bias = c.op.getFloat("bias");
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo, C = xs[1], hw = xs[2] * xs[3];
  std::vector<double> s(x.size());
  for (int64_t n = 0; n < xs[0]; ++n)
    for (int64_t ch = 0; ch < C; ++ch)
      for (int64_t p = 0; p < hw; ++p) {
        double sq = 0;
        for (int64_t j = std::max<int64_t>(0, ch - lo); j <= std::min(C - 1, ch + hi); ++j) {
          double v = x.f[(n * C + j) * hw + p];
          sq += v * v;
        }
        s[(n * C + ch) * hw + p] = bias + alpha / size * sq;
      }
  for (int64_t n = 0; n < xs[0]; ++n)
    for (int64_t j = 0; j < C; ++j)
      for (int64_t p = 0; p < hw; ++p) {
        int64_t xi = (n * C + j) * hw + p;
        double acc = 0;
        // Channels ch whose window holds j: ch - lo <= j <= ch + hi.
        for (int64_t ch = std::max<int64_t>(0, j - hi); ch <= std::min(C - 1, j + lo); ++ch) {
          int64_t ci = (n * C + ch) * hw + p;
          acc += dy.f[ci] * y.f[ci] / s[ci];
        }
        c.y().f[xi] = dy.f[xi] * std::pow(s[xi], -beta) - 2.0 * alpha * beta / size * x.f[xi] * acc;
      }
  return ok();
}

Error evalReluGrad(EvalCtx& c) {
  for (int64_t k = 0; k < c.y().size(); ++k)
    c.y().f[k] = c.x(0).f[k] > 0 ? c.x(1).f[k] : 0.0;
  return ok();
}

Error evalLeakyReluGrad(EvalCtx& c) {
  double alpha = c.op.getFloat("alpha");
  for (int64_t k = 0; k < c.y().size(); ++k)
    c.y().f[k] = lwrt::leakyReluGradValue(c.x(0).f[k], c.x(1).f[k], alpha);
  return ok();
}

Error evalSigmoidGrad(EvalCtx& c) {
  for (int64_t k = 0; k < c.y().size(); ++k)
    c.y().f[k] = c.x(1).f[k] * c.x(0).f[k] * (1.0 - c.x(0).f[k]);
  return ok();
}

Error evalTanhGrad(EvalCtx& c) {
  for (int64_t k = 0; k < c.y().size(); ++k)
    c.y().f[k] = c.x(1).f[k] * (1.0 - c.x(0).f[k] * c.x(0).f[k]);
  return ok();
}

Error evalClipGrad(EvalCtx& c) {
  double lo = c.op.getFloat("min"), hi = c.op.getFloat("max");
  for (int64_t k = 0; k < c.y().size(); ++k)
    c.y().f[k] = lwrt::clipGradValue(c.x(0).f[k], c.x(1).f[k], lo, hi);
  return ok();
}

/// Calls fn(offsets of one softmax row) for every row along `axis`.
template <typename Fn> void forEachRow(const Shape& s, int64_t axis, Fn fn) {
  if (axis < 0)
    axis += static_cast<int64_t>(s.size());
  int64_t outer = 1, inner = 1, n = s[axis];
  for (int64_t d = 0; d < axis; ++d)
    outer *= s[d];
  for (size_t d = axis + 1; d < s.size(); ++d)
    inner *= s[d];
  std::vector<int64_t> at(n);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t e = 0; e < inner; ++e) {
      for (int64_t j = 0; j < n; ++j)
        at[j] = (o * n + j) * inner + e;
      fn(at);
    }
}

Error evalSoftmaxGrad(EvalCtx& c) { // dx = y * (dy - sum(dy * y))
  const Tensor &y = c.x(0), &dy = c.x(1);
  forEachRow(y.type.shape, c.op.getInt("axis"), [&](const std::vector<int64_t>& at) {
    double dot = 0;
    for (int64_t i : at)
      dot += dy.f[i] * y.f[i];
    for (int64_t i : at)
      c.y().f[i] = y.f[i] * (dy.f[i] - dot);
  });
  return ok();
}

Error evalLogSoftmaxGrad(EvalCtx& c) { // dx = dy - exp(y) * sum(dy)
  const Tensor &y = c.x(0), &dy = c.x(1);
  forEachRow(y.type.shape, c.op.getInt("axis"), [&](const std::vector<int64_t>& at) {
    double sum = 0;
    for (int64_t i : at)
      sum += dy.f[i];
    for (int64_t i : at)
      c.y().f[i] = dy.f[i] - std::exp(y.f[i]) * sum;
  });
  return ok();
}

/// Channel of element k of an [N, C, ...] tensor, and elements per channel.
struct ChannelLayout {
  int64_t C, inner, count;
  explicit ChannelLayout(const Shape& s) {
    C = s[1];
    int64_t total = 1;
    for (int64_t d : s)
      total *= d;
    inner = C ? total / (s[0] * C) : 0;
    count = s[0] * inner;
  }
  int64_t channel(int64_t k) const { return (k / inner) % C; }
};

Error evalBatchNormTrain(EvalCtx& c) {
  const Tensor &x = c.x(0), &scale = c.x(1), &bias = c.x(2);
  ChannelLayout L(x.type.shape);
  double eps = c.op.getFloat("epsilon");
  std::vector<double> mean(L.C, 0.0), var(L.C, 0.0);
  for (int64_t k = 0; k < x.size(); ++k)
    mean[L.channel(k)] += x.f[k];
  for (double& m : mean)
    m /= static_cast<double>(L.count);
  for (int64_t k = 0; k < x.size(); ++k) {
    double d = x.f[k] - mean[L.channel(k)];
    var[L.channel(k)] += d * d;
  }
  for (double& v : var)
    v /= static_cast<double>(L.count);
  for (int64_t k = 0; k < x.size(); ++k) {
    int64_t ch = L.channel(k);
    c.y(0).f[k] = scale.f[ch] * (x.f[k] - mean[ch]) / std::sqrt(var[ch] + eps) + bias.f[ch];
  }
  c.y(1).f = mean;
  c.y(2).f = var;
  return ok();
}

Error evalBatchNormGrad(EvalCtx& c) {
  // xhat = (x - mean) * invstd; dbias = sum dy; dscale = sum dy * xhat;
  // dx = scale * invstd / m * (m dy - dbias - xhat dscale).
  const Tensor &x = c.x(0), &scale = c.x(1), &mean = c.x(2), &var = c.x(3), &dy = c.x(4);
  ChannelLayout L(x.type.shape);
  double eps = c.op.getFloat("epsilon");
  std::vector<double> invstd(L.C), dscale(L.C, 0.0), dbias(L.C, 0.0);
  for (int64_t ch = 0; ch < L.C; ++ch)
    invstd[ch] = 1.0 / std::sqrt(var.f[ch] + eps);
  for (int64_t k = 0; k < x.size(); ++k) {
    int64_t ch = L.channel(k);
    dbias[ch] += dy.f[k];
    dscale[ch] += dy.f[k] * (x.f[k] - mean.f[ch]) * invstd[ch];
  }
  double m = static_cast<double>(L.count);
  for (int64_t k = 0; k < x.size(); ++k) {
    int64_t ch = L.channel(k);
    double xhat = (x.f[k] - mean.f[ch]) * invstd[ch];
    c.y(0).f[k] = scale.f[ch] * invstd[ch] / m * (m * dy.f[k] - dbias[ch] - xhat * dscale[ch]);
  }
  c.y(1).f = dscale;
  c.y(2).f = dbias;
  return ok();
}

Error evalSliceGrad(EvalCtx& c) {
  const Shape& xs = c.y().type.shape;
  SliceMap map = sliceMap(c.op, xs);
  auto st = stridesOf(xs);
  forEachIndex(c.x().type.shape, [&](const std::vector<int64_t>& idx, int64_t k) {
    int64_t o = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      o += (map.start[d] + idx[d] * map.step[d]) * st[d];
    c.y().f[o] += c.x().f[k];
  });
  return ok();
}

Error evalGatherGrad(EvalCtx& c) {
  const Shape& ds = c.y().type.shape;
  int64_t axis = c.op.getInt("axis");
  if (axis < 0)
    axis += static_cast<int64_t>(ds.size());
  int64_t outer = 1, inner = 1, n = ds[axis], q = c.x(0).size();
  for (int64_t d = 0; d < axis; ++d)
    outer *= ds[d];
  for (size_t d = axis + 1; d < ds.size(); ++d)
    inner *= ds[d];
  int64_t k = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < q; ++j) {
      int64_t ix = c.x(0).i[j];
      if (ix < -n || ix >= n)
        return c.op.emitError(
            llvm::formatv("index {0} is out of range for axis {1} of size {2}", ix, axis, n));
      if (ix < 0)
        ix += n;
      for (int64_t e = 0; e < inner; ++e, ++k)
        c.y().f[(o * n + ix) * inner + e] += c.x(1).f[k];
    }
  return ok();
}

namespace {
/// Rows of a layer_norm: x viewed as [rows, n], n the normalized size.
struct LayerRows {
  int64_t rows = 1, n = 1;
  LayerRows(const Shape& s, int64_t axis) {
    for (size_t d = 0; d < s.size(); ++d)
      (static_cast<int64_t>(d) < axis ? rows : n) *= s[d];
  }
};

} // namespace

Error evalLayerNorm(EvalCtx& c) {
  // Per row: mean, population variance, inv_std_dev = 1 / sqrt(var + eps);
  // y = (x - mean) * inv_std_dev * scale + bias.
  const Tensor &x = c.x(0), &scale = c.x(1), &bias = c.x(2);
  LayerRows L(x.type.shape, c.op.getInt("axis"));
  double eps = c.op.getFloat("epsilon");
  for (int64_t r = 0; r < L.rows; ++r) {
    const double* xr = x.f.data() + r * L.n;
    double mean = 0, var = 0;
    for (int64_t j = 0; j < L.n; ++j)
      mean += xr[j];
    mean /= static_cast<double>(L.n);
    for (int64_t j = 0; j < L.n; ++j)
      var += (xr[j] - mean) * (xr[j] - mean);
    var /= static_cast<double>(L.n);
    double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t j = 0; j < L.n; ++j)
      c.y(0).f[r * L.n + j] = (xr[j] - mean) * inv * scale.f[j] + bias.f[j];
    c.y(1).f[r] = mean;
    c.y(2).f[r] = inv;
  }
  return ok();
}

Error evalLayerNormGrad(EvalCtx& c) {
  // Per row, with xhat = (x - mean) inv and g = dy scale:
  // dx = inv (g - mean(g) - xhat mean(g xhat)); over rows:
  // dscale = sum dy xhat, dbias = sum dy.
  const Tensor &x = c.x(0), &scale = c.x(1), &mean = c.x(2), &inv = c.x(3), &dy = c.x(4);
  LayerRows L(x.type.shape, c.op.getInt("axis"));
  std::vector<double>&dscale = c.y(1).f, &dbias = c.y(2).f;
  double n = static_cast<double>(L.n);
  for (int64_t r = 0; r < L.rows; ++r) {
    double mg = 0, mgx = 0;
    for (int64_t j = 0; j < L.n; ++j) {
      int64_t k = r * L.n + j;
      double xhat = (x.f[k] - mean.f[r]) * inv.f[r], g = dy.f[k] * scale.f[j];
      mg += g;
      mgx += g * xhat;
      dscale[j] += dy.f[k] * xhat;
      dbias[j] += dy.f[k];
    }
    mg /= n;
    mgx /= n;
    for (int64_t j = 0; j < L.n; ++j) {
      int64_t k = r * L.n + j;
      double xhat = (x.f[k] - mean.f[r]) * inv.f[r], g = dy.f[k] * scale.f[j];
      c.y(0).f[k] = inv.f[r] * (g - mg - xhat * mgx);
    }
  }
  return ok();
}

namespace {
/// Calls fn(slice index in the result, first element of the slice in the
/// data) for every slice a gather_nd over `data` with these indices takes;
/// `inner` is the slice size. An index out of range is an error.
Error forEachGatherNdSlice(const Op& op, const Shape& data, const Tensor& indices,
                           const std::function<void(int64_t, int64_t)>& fn, int64_t& inner) {
  int64_t b = op.getInt("batch_dims"), k = indices.type.shape.back();
  int64_t batches = 1, perBatch = 1, block = 1;
  inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(data.size()); ++d) {
    if (d < b)
      batches *= data[d];
    else
      block *= data[d];
    if (d >= b + k)
      inner *= data[d];
  }
  int64_t tuples = k ? indices.size() / k : 0;
  perBatch = batches ? tuples / batches : 0;
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t offset = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t n = data[b + j], ix = indices.i[t * k + j];
      if (ix < -n || ix >= n)
        return op.emitError(
            llvm::formatv("index {0} is out of range for dim {1} of size {2}", ix, b + j, n));
      offset = offset * n + (ix < 0 ? ix + n : ix);
    }
    fn(t, (t / perBatch) * block + offset * inner);
  }
  return ok();
}

} // namespace

Error evalGatherNd(EvalCtx& c) {
  int64_t inner = 1;
  return forEachGatherNdSlice(
      c.op, c.x(0).type.shape, c.x(1),
      [&](int64_t t, int64_t from) {
        for (int64_t e = 0; e < inner; ++e) {
          if (c.y().isFloatData())
            c.y().f[t * inner + e] = c.x(0).f[from + e];
          else
            c.y().i[t * inner + e] = c.x(0).i[from + e];
        }
      },
      inner);
}

Error evalGatherNdGrad(EvalCtx& c) {
  int64_t inner = 1;
  return forEachGatherNdSlice(
      c.op, c.y().type.shape, c.x(0),
      [&](int64_t t, int64_t to) {
        for (int64_t e = 0; e < inner; ++e)
          c.y().f[to + e] += c.x(1).f[t * inner + e];
      },
      inner);
}

namespace kernels {
double dropoutUniform(int64_t seed, int64_t step, int64_t k) {
  return lwrt::dropoutUniform(seed, step, k);
}
} // namespace kernels

Error evalDropoutMask(EvalCtx& c) {
  double ratio = c.op.getFloat("ratio");
  int64_t seed = c.op.getInt("seed"), step = c.x().i[0];
  const Shape& shape = c.y().type.shape;
  lwrt::ShardIndex piece;
  bool fits = c.op.hasAttr("whole_shape")
                  ? lwrt::makeShardIndex(static_cast<int>(shape.size()), shape.data(),
                                         c.op.getInts("whole_shape").data(),
                                         c.op.getInts("offsets").data(), piece)
                  : lwrt::makeShardIndex(0, nullptr, nullptr, nullptr, piece);
  if (!fits)
    return c.op.emitError("the mask does not fit in its 'whole_shape' at its 'offsets'");
  for (int64_t k = 0; k < c.y().size(); ++k)
    c.y().f[k] = lwrt::dropoutMaskValue(seed, step, ratio, piece, k);
  return ok();
}

namespace {
/// The weight decay of an optimizer update: its param's group_decay where it
/// has one (>= 0), the op's weight_decay otherwise.
double resolvedDecay(const Op& op) {
  return op.getFloat("group_decay") >= 0 ? op.getFloat("group_decay") : op.getFloat("weight_decay");
}
} // namespace

namespace {
/// An update's optional `finite` operand (#i) is down: its results are its
/// weight and state unchanged (operands `kept`, in result order).
bool skipped(EvalCtx& c, unsigned i, std::initializer_list<unsigned> kept) {
  if (c.op.numOperands() <= i || c.x(i).i[0] != 0)
    return false;
  unsigned r = 0;
  for (unsigned k : kept)
    c.y(r++) = c.x(k);
  return true;
}
} // namespace

Error evalSgdUpdate(EvalCtx& c) {
  // lwrt::sgdElement, the CPU's and CUDA's update of each element.
  if (skipped(c, 4, {0, 2}))
    return ok();
  const Tensor &w = c.x(0), &g = c.x(1), &m = c.x(2);
  double lr = c.x(3).f[0] * c.op.getFloat("lr_scale");
  lwrt::SgdHyper h{c.op.getFloat("momentum"), resolvedDecay(c.op), c.op.getInt("nesterov") != 0};
  for (int64_t k = 0; k < w.size(); ++k) {
    lwrt::SgdElement e = lwrt::sgdElement(w.f[k], g.f[k], m.f[k], lr, h);
    c.y(1).f[k] = e.m;
    c.y(0).f[k] = e.w;
  }
  return ok();
}

Error evalAdamUpdate(EvalCtx& c) {
  // lwrt::adamElement, the CPU's and CUDA's update of each element.
  if (skipped(c, 6, {0, 2, 3}))
    return ok();
  const Tensor &w = c.x(0), &g = c.x(1), &m = c.x(2), &v = c.x(3);
  double lr = c.x(4).f[0] * c.op.getFloat("lr_scale");
  lwrt::AdamHyper h{c.op.getFloat("beta1"), c.op.getFloat("beta2"), c.op.getFloat("epsilon"),
                    resolvedDecay(c.op), c.op.getInt("decoupled") != 0};
  lwrt::AdamCorrection corr = lwrt::adamCorrection(h, c.x(5).i[0]);
  for (int64_t k = 0; k < w.size(); ++k) {
    lwrt::AdamElement e = lwrt::adamElement(w.f[k], g.f[k], m.f[k], v.f[k], lr, h, corr);
    c.y(1).f[k] = e.m;
    c.y(2).f[k] = e.v;
    c.y(0).f[k] = e.w;
  }
  return ok();
}

Error evalAllFinite(EvalCtx& c) {
  bool finite = true;
  for (const Tensor* x : c.in)
    for (double v : x->f)
      finite = finite && std::isfinite(v);
  c.y().i[0] = finite ? 1 : 0;
  return ok();
}

Error evalLrSchedule(EvalCtx& c) {
  const std::string& kind = c.op.getString("kind");
  lwrt::LrScheduleParams p;
  p.kind = kind == "step"     ? lwrt::LrScheduleKind::Step
           : kind == "cosine" ? lwrt::LrScheduleKind::Cosine
                              : lwrt::LrScheduleKind::Constant;
  p.base_lr = c.op.getFloat("base_lr");
  p.warmup_steps = c.op.getInt("warmup_steps");
  p.total_steps = c.op.getInt("total_steps");
  p.step_size = c.op.getInt("step_size");
  p.gamma = c.op.getFloat("gamma");
  p.min_lr = c.op.getFloat("min_lr");
  c.y().f[0] = lwrt::scheduledLr(p, c.x().i[0]);
  return ok();
}

Error evalAssign(EvalCtx& c) {
  if (!c.updates)
    return ok();
  const Value& p = *c.op.operand(0);
  auto it = c.updates->find(p.paramName());
  if (!p.shard().empty()) {
    // A shard writes its part of the whole tensor: the new one when another
    // shard wrote first, else the value the step started from.
    if (it == c.updates->end()) {
      const WeightMap::const_iterator old =
          c.weights ? c.weights->find(p.paramName()) : WeightMap::const_iterator();
      Tensor start = c.weights && old != c.weights->end() ? old->second : Tensor(p.wholeType());
      it = c.updates->emplace(p.paramName(), std::move(start)).first;
    }
    kernels::writeShard(p, c.x(1), it->second);
    return ok();
  }
  // Replicas of a param on several devices must stay equal.
  if (it != c.updates->end() && (it->second.f != c.x(1).f || it->second.i != c.x(1).i))
    return c.op.emitError("replicas of param \"" + p.paramName() + "\" diverged");
  (*c.updates)[p.paramName()] = c.x(1);
  return ok();
}

// The schedule's events order streams; the interpreter runs one op at a
// time in graph order, which every schedule allows.
Error evalRecord(EvalCtx&) { return ok(); }
Error evalWait(EvalCtx&) { return ok(); }

} // namespace lwcc
