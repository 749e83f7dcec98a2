//===- Interpreter.cpp - Reference kernels for every op -------------------===//
//
// One eval function per op of Ops.def, found through a table generated from
// it, so an op without a kernel does not compile. Kernels follow the ONNX
// definitions literally; they favour clarity over speed.
//
//===----------------------------------------------------------------------===//
#include "interp/Interpreter.h"

#include "interp/Eval.h"
#include "ir/Verifier.h"
#include "runtime/include/lwrt/bf16.h"
#include "runtime/include/lwrt/f16.h"
#include "runtime/include/lwrt/typed_math.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <unordered_map>

namespace lwcc {

Tensor::Tensor(TensorType t) : type(std::move(t)) {
  if (isFloat(type.dtype))
    f.assign(type.numElements(), 0.0);
  else
    i.assign(type.numElements(), 0);
}

Tensor Tensor::fromFloats(TensorType t, std::vector<double> values) {
  Tensor r;
  r.type = std::move(t);
  r.f = std::move(values);
  return r;
}

Tensor Tensor::fromInts(TensorType t, std::vector<int64_t> values) {
  Tensor r;
  r.type = std::move(t);
  r.i = std::move(values);
  return r;
}

namespace {

using EvalFn = llvm::Error (*)(EvalCtx&);
using llvm::Error;

Error ok() { return Error::success(); }

//===--- Index helpers ----------------------------------------------------===//

std::vector<int64_t> stridesOf(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;)
    st[d - 1] = st[d] * s[d];
  return st;
}

/// Strides of `s` seen from a broadcast result of rank `rank` (0 where broadcast).
std::vector<int64_t> broadcastStrides(const Shape& s, size_t rank) {
  std::vector<int64_t> st(rank, 0);
  int64_t acc = 1;
  for (size_t d = s.size(); d-- > 0;) {
    st[rank - s.size() + d] = s[d] == 1 ? 0 : acc;
    acc *= s[d];
  }
  return st;
}

/// Calls fn(index, flat) for every index of `shape` in row-major order.
void forEachIndex(const Shape& shape,
                  const std::function<void(const std::vector<int64_t>&, int64_t)>& fn) {
  int64_t n = TensorType(DType::F32, shape).numElements();
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t flat = 0; flat < n; ++flat) {
    fn(idx, flat);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d])
        break;
      idx[d] = 0;
    }
  }
}

/// dst[k] = src[map(k)] for every element of dst, or `fill` where map gives -1.
void copyMapped(const Tensor& src, Tensor& dst,
                const std::function<int64_t(const std::vector<int64_t>&)>& map, double fill = 0.0) {
  forEachIndex(dst.type.shape, [&](const std::vector<int64_t>& idx, int64_t k) {
    int64_t s = map(idx);
    if (dst.isFloatData())
      dst.f[k] = s < 0 ? fill : src.f[s];
    else
      dst.i[k] = s < 0 ? static_cast<int64_t>(fill) : src.i[s];
  });
}

//===--- Elementwise ------------------------------------------------------===//

Error unaryFloat(EvalCtx& c, double (*fn)(double, const Op&)) {
  for (int64_t k = 0; k < c.y().size(); ++k)
    c.y().f[k] = fn(c.x().f[k], c.op);
  return ok();
}

Error binary(EvalCtx& c, double (*ffn)(double, double), int64_t (*ifn)(int64_t, int64_t)) {
  const Shape& out = c.y().type.shape;
  auto sa = broadcastStrides(c.x(0).type.shape, out.size());
  auto sb = broadcastStrides(c.x(1).type.shape, out.size());
  Error err = ok();
  forEachIndex(out, [&](const std::vector<int64_t>& idx, int64_t k) {
    int64_t ia = 0, ib = 0;
    for (size_t d = 0; d < idx.size(); ++d) {
      ia += idx[d] * sa[d];
      ib += idx[d] * sb[d];
    }
    if (c.y().isFloatData())
      c.y().f[k] = ffn(c.x(0).f[ia], c.x(1).f[ib]);
    else
      c.y().i[k] = ifn(c.x(0).i[ia], c.x(1).i[ib]);
  });
  return err;
}

Error evalRelu(EvalCtx& c) {
  return unaryFloat(c, [](double v, const Op&) { return v > 0 ? v : 0.0; });
}
Error evalLeakyRelu(EvalCtx& c) {
  return unaryFloat(c,
                    [](double v, const Op& op) { return v >= 0 ? v : op.getFloat("alpha") * v; });
}
Error evalSigmoid(EvalCtx& c) {
  return unaryFloat(c, [](double v, const Op&) { return 1.0 / (1.0 + std::exp(-v)); });
}
Error evalTanh(EvalCtx& c) {
  return unaryFloat(c, [](double v, const Op&) { return std::tanh(v); });
}
Error evalExp(EvalCtx& c) {
  return unaryFloat(c, [](double v, const Op&) { return std::exp(v); });
}
Error evalLog(EvalCtx& c) {
  return unaryFloat(c, [](double v, const Op&) { return std::log(v); });
}
Error evalSqrt(EvalCtx& c) {
  return unaryFloat(c, [](double v, const Op&) { return std::sqrt(v); });
}
Error evalErf(EvalCtx& c) {
  return unaryFloat(c, [](double v, const Op&) { return std::erf(v); });
}
Error evalReciprocal(EvalCtx& c) {
  return unaryFloat(c, [](double v, const Op&) { return 1.0 / v; });
}
Error evalClip(EvalCtx& c) {
  return unaryFloat(c, [](double v, const Op& op) {
    return std::min(std::max(v, op.getFloat("min")), op.getFloat("max"));
  });
}
Error evalNeg(EvalCtx& c) {
  if (!c.y().isFloatData()) {
    for (int64_t k = 0; k < c.y().size(); ++k)
      c.y().i[k] = -c.x().i[k];
    return ok();
  }
  return unaryFloat(c, [](double v, const Op&) { return -v; });
}
Error evalAbs(EvalCtx& c) {
  if (!c.y().isFloatData()) {
    for (int64_t k = 0; k < c.y().size(); ++k)
      c.y().i[k] = std::abs(c.x().i[k]);
    return ok();
  }
  return unaryFloat(c, [](double v, const Op&) { return std::fabs(v); });
}

Error evalAdd(EvalCtx& c) {
  return binary(
      c, [](double a, double b) { return a + b; }, [](int64_t a, int64_t b) { return a + b; });
}
Error evalSub(EvalCtx& c) {
  return binary(
      c, [](double a, double b) { return a - b; }, [](int64_t a, int64_t b) { return a - b; });
}
Error evalMul(EvalCtx& c) {
  return binary(
      c, [](double a, double b) { return a * b; }, [](int64_t a, int64_t b) { return a * b; });
}
Error evalDiv(EvalCtx& c) {
  if (!c.y().isFloatData())
    for (int64_t v : c.x(1).i)
      if (v == 0)
        return c.op.emitError("integer division by zero");
  // Integer division truncates toward zero, as C++ and the ONNX backends do.
  return binary(
      c, [](double a, double b) { return a / b; }, [](int64_t a, int64_t b) { return a / b; });
}
Error evalPow(EvalCtx& c) {
  return binary(
      c, [](double a, double b) { return lwrt::powValue(a, b); }, nullptr);
}

//===--- Convolution and pooling ------------------------------------------===//

Error evalConv2d(EvalCtx& c) {
  const Tensor &x = c.x(0), &w = c.x(1);
  Tensor& y = c.y();
  kernels::forEachConvTerm(
      c.op, x.type.shape, w.type.shape, y.type.shape,
      [&](int64_t xi, int64_t wi, int64_t yi) { y.f[yi] += x.f[xi] * w.f[wi]; });
  if (c.in.size() > 2) {
    const Shape& ys = y.type.shape;
    int64_t hw = ys[2] * ys[3];
    for (int64_t k = 0; k < y.size(); ++k)
      y.f[k] += c.x(2).f[(k / hw) % ys[1]];
  }
  return ok();
}

Error evalMaxPool2d(EvalCtx& c) {
  Tensor& y = c.y();
  std::fill(y.f.begin(), y.f.end(), -std::numeric_limits<double>::infinity());
  kernels::forEachMaxPoolTap(c.op, c.x().type.shape, y.type.shape, [&](int64_t xi, int64_t yi) {
    y.f[yi] = std::max(y.f[yi], c.x().f[xi]);
  });
  return ok();
}

/// A window's mean: in double, or for a 16-bit result (mixed precision's
/// 16-bit activations) in float32 in the trainers' order, so that the one
/// rounding to 16 bits lands where theirs does.
template <typename Acc> Error avgPool2dIn(EvalCtx& c) {
  const Tensor& x = c.x();
  Tensor& y = c.y();
  const Shape &xs = x.type.shape, &ys = y.type.shape;
  for (int64_t nc = 0; nc < ys[0] * ys[1]; ++nc)
    for (int64_t oh = 0; oh < ys[2]; ++oh)
      for (int64_t ow = 0; ow < ys[3]; ++ow) {
        kernels::AvgWindow win = kernels::avgPoolWindow(c.op, xs, oh, ow);
        Acc sum = 0;
        for (int64_t ih = win.h0; ih < win.h1; ++ih)
          for (int64_t iw = win.w0; iw < win.w1; ++iw)
            sum += static_cast<Acc>(x.f[(nc * xs[2] + ih) * xs[3] + iw]);
        y.f[(nc * ys[2] + oh) * ys[3] + ow] =
            win.count > 0 ? static_cast<double>(sum / static_cast<Acc>(win.count)) : 0.0;
      }
  return ok();
}

Error evalAvgPool2d(EvalCtx& c) {
  return is16BitFloat(c.y().type.dtype) ? avgPool2dIn<float>(c) : avgPool2dIn<double>(c);
}

Error evalGlobalAvgPool(EvalCtx& c) {
  const Shape& xs = c.x().type.shape;
  int64_t spatial = c.x().size() / (xs[0] * xs[1]);
  for (int64_t nc = 0; nc < xs[0] * xs[1]; ++nc) {
    double sum = 0;
    for (int64_t s = 0; s < spatial; ++s)
      sum += c.x().f[nc * spatial + s];
    c.y().f[nc] = sum / spatial;
  }
  return ok();
}

Error evalLrn(EvalCtx& c) {
  const Shape& xs = c.x().type.shape;
  int64_t size = c.op.getInt("size");
  double alpha = c.op.getFloat("alpha"), beta = c.op.getFloat("beta"), bias = c.op.getFloat("bias");
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo; // channels below and above
  int64_t hw = xs[2] * xs[3];
  for (int64_t n = 0; n < xs[0]; ++n)
    for (int64_t ch = 0; ch < xs[1]; ++ch)
      for (int64_t s = 0; s < hw; ++s) {
        double sq = 0;
        for (int64_t j = std::max<int64_t>(0, ch - lo); j <= std::min(xs[1] - 1, ch + hi); ++j) {
          double v = c.x().f[(n * xs[1] + j) * hw + s];
          sq += v * v;
        }
        int64_t k = (n * xs[1] + ch) * hw + s;
        c.y().f[k] = c.x().f[k] / std::pow(bias + alpha / size * sq, beta);
      }
  return ok();
}

//===--- Linear algebra ---------------------------------------------------===//

Error evalGemm(EvalCtx& c) {
  const Tensor &a = c.x(0), &b = c.x(1);
  bool ta = c.op.getInt("transA"), tb = c.op.getInt("transB");
  double alpha = c.op.getFloat("alpha"), beta = c.op.getFloat("beta");
  int64_t M = c.y().type.shape[0], N = c.y().type.shape[1];
  int64_t K = ta ? a.type.shape[0] : a.type.shape[1];
  int64_t lda = a.type.shape[1], ldb = b.type.shape[1];
  std::vector<int64_t> cs;
  if (c.in.size() > 2)
    cs = broadcastStrides(c.x(2).type.shape, 2);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double sum = 0;
      for (int64_t k = 0; k < K; ++k)
        sum += a.f[ta ? k * lda + m : m * lda + k] * b.f[tb ? n * ldb + k : k * ldb + n];
      double v = alpha * sum;
      if (c.in.size() > 2)
        v += beta * c.x(2).f[m * cs[0] + n * cs[1]];
      c.y().f[m * N + n] = v;
    }
  return ok();
}

Error evalMatMul(EvalCtx& c) {
  Shape as = c.x(0).type.shape, bs = c.x(1).type.shape;
  if (as.size() == 1)
    as.insert(as.begin(), 1);
  if (bs.size() == 1)
    bs.push_back(1);
  int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  Shape batch = *shape::broadcast(Shape(as.begin(), as.end() - 2), Shape(bs.begin(), bs.end() - 2));
  auto sa = broadcastStrides(Shape(as.begin(), as.end() - 2), batch.size());
  auto sb = broadcastStrides(Shape(bs.begin(), bs.end() - 2), batch.size());
  bool isF = c.y().isFloatData();
  forEachIndex(batch, [&](const std::vector<int64_t>& idx, int64_t bi) {
    int64_t oa = 0, ob = 0;
    for (size_t d = 0; d < idx.size(); ++d) {
      oa += idx[d] * sa[d];
      ob += idx[d] * sb[d];
    }
    oa *= M * K;
    ob *= K * N;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double sum = 0;
        int64_t isum = 0;
        for (int64_t k = 0; k < K; ++k) {
          if (isF)
            sum += c.x(0).f[oa + m * K + k] * c.x(1).f[ob + k * N + n];
          else
            isum += c.x(0).i[oa + m * K + k] * c.x(1).i[ob + k * N + n];
        }
        int64_t o = (bi * M + m) * N + n;
        if (isF)
          c.y().f[o] = sum;
        else
          c.y().i[o] = isum;
      }
  });
  return ok();
}

//===--- Shape manipulation -----------------------------------------------===//

Error evalCopy(EvalCtx& c) {
  c.y().f = c.x().f;
  c.y().i = c.x().i;
  return ok();
}
Error evalReshape(EvalCtx& c) { return evalCopy(c); }
Error evalFlatten(EvalCtx& c) { return evalCopy(c); }
Error evalIdentity(EvalCtx& c) { return evalCopy(c); }
// Inference semantics: dropout passes its input through.
Error evalDropout(EvalCtx& c) { return evalCopy(c); }

Error evalTranspose(EvalCtx& c) {
  const auto& perm = c.op.getInts("perm");
  auto st = stridesOf(c.x().type.shape);
  copyMapped(c.x(), c.y(), [&](const std::vector<int64_t>& idx) {
    int64_t s = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      s += idx[d] * st[perm[d]];
    return s;
  });
  return ok();
}

Error evalConcat(EvalCtx& c) {
  const Shape& ys = c.y().type.shape;
  int64_t axis = c.op.getInt("axis");
  if (axis < 0)
    axis += static_cast<int64_t>(ys.size());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= ys[d];
  for (size_t d = axis + 1; d < ys.size(); ++d)
    inner *= ys[d];
  int64_t k = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (const Tensor* t : c.in) {
      int64_t chunk = t->type.shape[axis] * inner;
      for (int64_t e = 0; e < chunk; ++e, ++k) {
        if (c.y().isFloatData())
          c.y().f[k] = t->f[o * chunk + e];
        else
          c.y().i[k] = t->i[o * chunk + e];
      }
    }
  return ok();
}

Error evalSlice(EvalCtx& c) {
  const Shape& xs = c.x().type.shape;
  kernels::SliceMap map = kernels::sliceMap(c.op, xs);
  auto st = stridesOf(xs);
  copyMapped(c.x(), c.y(), [&](const std::vector<int64_t>& idx) {
    int64_t s = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      s += (map.start[d] + idx[d] * map.step[d]) * st[d];
    return s;
  });
  return ok();
}

Error evalSplit(EvalCtx& c) {
  int64_t axis = c.op.getInt("axis");
  if (axis < 0)
    axis += c.x().type.rank();
  auto st = stridesOf(c.x().type.shape);
  int64_t offset = 0;
  for (Tensor& y : c.out) {
    copyMapped(c.x(), y, [&](const std::vector<int64_t>& idx) {
      int64_t s = 0;
      for (size_t d = 0; d < idx.size(); ++d)
        s += (idx[d] + (static_cast<int64_t>(d) == axis ? offset : 0)) * st[d];
      return s;
    });
    offset += y.type.shape[axis];
  }
  return ok();
}

Error evalGather(EvalCtx& c) {
  const Shape& ds = c.x(0).type.shape;
  int64_t axis = c.op.getInt("axis");
  if (axis < 0)
    axis += static_cast<int64_t>(ds.size());
  int64_t outer = 1, inner = 1, n = ds[axis], q = c.x(1).size();
  for (int64_t d = 0; d < axis; ++d)
    outer *= ds[d];
  for (size_t d = axis + 1; d < ds.size(); ++d)
    inner *= ds[d];
  for (int64_t j = 0; j < q; ++j) {
    int64_t ix = c.x(1).i[j];
    if (ix < -n || ix >= n)
      return c.op.emitError(
          llvm::formatv("index {0} is out of range for axis {1} of size {2}", ix, axis, n));
  }
  int64_t k = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < q; ++j) {
      int64_t ix = c.x(1).i[j];
      if (ix < 0)
        ix += n;
      for (int64_t e = 0; e < inner; ++e, ++k) {
        int64_t s = (o * n + ix) * inner + e;
        if (c.y().isFloatData())
          c.y().f[k] = c.x(0).f[s];
        else
          c.y().i[k] = c.x(0).i[s];
      }
    }
  return ok();
}

Error evalExpand(EvalCtx& c) {
  auto st = broadcastStrides(c.x().type.shape, c.y().type.rank());
  copyMapped(c.x(), c.y(), [&](const std::vector<int64_t>& idx) {
    int64_t s = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      s += idx[d] * st[d];
    return s;
  });
  return ok();
}

Error evalPad(EvalCtx& c) {
  const Shape& xs = c.x().type.shape;
  int64_t rank = static_cast<int64_t>(xs.size());
  const auto& pads = c.op.getInts("pads");
  const std::string& mode = c.op.getString("mode");
  auto st = stridesOf(xs);
  copyMapped(
      c.x(), c.y(),
      [&](const std::vector<int64_t>& idx) -> int64_t {
        int64_t s = 0;
        for (int64_t d = 0; d < rank; ++d) {
          int64_t i = idx[d] - pads[d], n = xs[d];
          if (i < 0 || i >= n) {
            if (mode == "constant")
              return -1;
            if (mode == "edge")
              i = std::clamp<int64_t>(i, 0, n - 1);
            else // reflect, without repeating the edge
              while (i < 0 || i >= n)
                i = i < 0 ? -i : 2 * (n - 1) - i;
          }
          s += i * st[d];
        }
        return s;
      },
      c.op.getFloat("value"));
  return ok();
}

Error evalCast(EvalCtx& c) {
  const Tensor& x = c.x();
  Tensor& y = c.y();
  DType to = y.type.dtype;
  for (int64_t k = 0; k < y.size(); ++k) {
    double v = x.get(k);
    if (y.isFloatData())
      y.f[k] = x.isFloatData() ? v : static_cast<double>(x.i[k]);
    else if (to == DType::Bool)
      y.i[k] = x.isFloatData() ? (v != 0.0) : (x.i[k] != 0);
    else if (x.isFloatData())
      y.i[k] = static_cast<int64_t>(std::trunc(v));
    else
      y.i[k] = to == DType::I32 ? static_cast<int32_t>(x.i[k]) : x.i[k];
  }
  return ok();
}

//===--- Reductions and normalization -------------------------------------===//

Error reduce(EvalCtx& c, bool mean) {
  const Shape& xs = c.x().type.shape;
  int64_t rank = static_cast<int64_t>(xs.size());
  std::vector<bool> reduced(rank, !c.op.hasAttr("axes"));
  if (c.op.hasAttr("axes"))
    for (int64_t a : c.op.getInts("axes"))
      reduced[a < 0 ? a + rank : a] = true;
  // Output index of each input element: drop (or zero) the reduced dims.
  Shape kept;
  for (int64_t d = 0; d < rank; ++d)
    kept.push_back(reduced[d] ? 1 : xs[d]);
  auto st = stridesOf(kept);
  int64_t count = c.x().size() / std::max<int64_t>(1, c.y().size());
  std::vector<double> acc(c.y().size(), 0.0);
  std::vector<int64_t> iacc(c.y().size(), 0);
  forEachIndex(xs, [&](const std::vector<int64_t>& idx, int64_t k) {
    int64_t o = 0;
    for (int64_t d = 0; d < rank; ++d)
      o += reduced[d] ? 0 : idx[d] * st[d];
    if (c.x().isFloatData())
      acc[o] += c.x().f[k];
    else
      iacc[o] += c.x().i[k];
  });
  for (int64_t o = 0; o < c.y().size(); ++o) {
    if (c.y().isFloatData())
      c.y().f[o] = mean ? acc[o] / count : acc[o];
    else
      c.y().i[o] = mean ? iacc[o] / count : iacc[o];
  }
  return ok();
}
Error evalReduceMean(EvalCtx& c) { return reduce(c, true); }
Error evalReduceSum(EvalCtx& c) { return reduce(c, false); }

Error softmax(EvalCtx& c, bool log) {
  const Shape& xs = c.x().type.shape;
  int64_t axis = c.op.getInt("axis");
  if (axis < 0)
    axis += static_cast<int64_t>(xs.size());
  int64_t outer = 1, inner = 1, n = xs[axis];
  for (int64_t d = 0; d < axis; ++d)
    outer *= xs[d];
  for (size_t d = axis + 1; d < xs.size(); ++d)
    inner *= xs[d];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t e = 0; e < inner; ++e) {
      auto at = [&](int64_t j) { return (o * n + j) * inner + e; };
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < n; ++j)
        mx = std::max(mx, c.x().f[at(j)]);
      double sum = 0;
      for (int64_t j = 0; j < n; ++j)
        sum += std::exp(c.x().f[at(j)] - mx);
      for (int64_t j = 0; j < n; ++j) {
        double z = c.x().f[at(j)] - mx;
        c.y().f[at(j)] = log ? z - std::log(sum) : std::exp(z) / sum;
      }
    }
  return ok();
}
Error evalSoftmax(EvalCtx& c) { return softmax(c, false); }
Error evalLogSoftmax(EvalCtx& c) { return softmax(c, true); }

Error evalBatchNorm(EvalCtx& c) {
  // Inference form: normalize with the running statistics.
  const Shape& xs = c.x().type.shape;
  int64_t C = xs[1], inner = c.x().size() / (xs[0] * C);
  double eps = c.op.getFloat("epsilon");
  for (int64_t k = 0; k < c.x().size(); ++k) {
    int64_t ch = (k / inner) % C;
    c.y().f[k] =
        c.x(1).f[ch] * (c.x().f[k] - c.x(3).f[ch]) / std::sqrt(c.x(4).f[ch] + eps) + c.x(2).f[ch];
  }
  return ok();
}

Error evalConstant(EvalCtx& c) {
  Tensor& y = c.y();
  if (y.isFloatData()) {
    const auto& v = c.op.getFloats("value");
    for (int64_t k = 0; k < y.size(); ++k)
      y.f[k] = v.size() == 1 ? v[0] : v[k];
  } else {
    const auto& v = c.op.getInts("ivalue");
    for (int64_t k = 0; k < y.size(); ++k)
      y.i[k] = v.size() == 1 ? v[0] : v[k];
  }
  return ok();
}

constexpr EvalFn kEval[] = {
#define OP(E, ...) &eval##E,
#include "ir/Ops.def"
#undef OP
};

/// Rounds float results to what an f32 (or narrower) tensor holds: a bf16
/// or fp16 result is rounded to float32 first, then to its type, as the CPU
/// kernels do (they compute in float32 and round their result once).
void roundResults(std::vector<Tensor>& out, Precision p) {
  if (p != Precision::F32)
    return;
  for (Tensor& t : out)
    if (t.type.dtype == DType::F32)
      for (double& v : t.f)
        v = static_cast<double>(static_cast<float>(v));
    else if (t.type.dtype == DType::BF16)
      for (double& v : t.f)
        v = static_cast<double>(lwrt::roundToBf16(static_cast<float>(v)));
    else if (t.type.dtype == DType::F16)
      for (double& v : t.f)
        v = static_cast<double>(lwrt::roundToF16(static_cast<float>(v)));
}

} // namespace

namespace {

llvm::Expected<std::vector<Tensor>> evaluate(const Op& op,
                                             const std::vector<const Tensor*>& operands,
                                             Precision precision, WeightMap* updates,
                                             const WeightMap* weights) {
  EvalCtx c{op, operands, {}, updates, weights, precision == Precision::F64};
  for (unsigned k = 0; k < op.numResults(); ++k)
    c.out.emplace_back(op.result(k)->type());
  if (Error e = kEval[static_cast<size_t>(op.kind())](c))
    return e;
  roundResults(c.out, precision);
  return std::move(c.out);
}

/// Runs `g`; assign ops record new param values in `updates` when given.
llvm::Expected<std::vector<Tensor>> execute(const Graph& g, const std::vector<Tensor>& inputs,
                                            const WeightMap& weights, Precision precision,
                                            WeightMap* updates) {
  if (Error e = verifyGraph(g))
    return e;
  if (inputs.size() != g.inputs().size())
    return makeError(llvm::formatv("graph @{0} takes {1} inputs, got {2}", g.name(),
                                   g.inputs().size(), inputs.size())
                         .str());
  std::unordered_map<const Value*, Tensor> values;
  auto bind = [&](const Value* v, const Tensor& t, const std::string& what) -> Error {
    if (t.type != v->type())
      return makeError(v->loc(), what + " has type " + v->type().str() + ", but its value is " +
                                     t.type.str());
    size_t want = t.type.numElements();
    if ((t.isFloatData() ? t.f.size() : t.i.size()) != want)
      return makeError(v->loc(), what + ": value holds the wrong number of elements");
    std::vector<Tensor> one{t};
    roundResults(one, precision);
    values[v] = std::move(one[0]);
    return ok();
  };
  for (size_t k = 0; k < inputs.size(); ++k)
    if (Error e = bind(g.input(k), inputs[k], "input '%" + g.input(k)->name() + "'"))
      return e;
  for (const auto& p : g.params()) {
    auto it = weights.find(p->paramName());
    if (it == weights.end()) {
      if (!p->zeroInit())
        return makeError(p->loc(), "no value for param '%" + p->name() + "' (initializer \"" +
                                       p->paramName() + "\")");
      values[p.get()] = Tensor(p->type());
      continue;
    }
    if (!p->shard().empty()) {
      auto piece = kernels::readShard(*p, it->second);
      if (!piece)
        return piece.takeError();
      values[p.get()] = std::move(*piece);
      continue;
    }
    if (Error e = bind(p.get(), it->second, "param '%" + p->name() + "'"))
      return e;
  }
  for (const auto& op : g.ops()) {
    std::vector<const Tensor*> operands;
    for (Value* v : op->operands())
      operands.push_back(&values.at(v));
    auto results = evaluate(*op, operands, precision, updates, &weights);
    if (!results)
      return results.takeError();
    for (unsigned k = 0; k < op->numResults(); ++k)
      values[op->result(k)] = std::move((*results)[k]);
  }
  std::vector<Tensor> outputs;
  for (const Value* v : g.outputs())
    outputs.push_back(values.at(v));
  return outputs;
}

} // namespace

llvm::Expected<std::vector<Tensor>>
evaluateOp(const Op& op, const std::vector<const Tensor*>& operands, Precision precision) {
  return evaluate(op, operands, precision, nullptr, nullptr);
}

llvm::Expected<std::vector<Tensor>> interpret(const Graph& g, const std::vector<Tensor>& inputs,
                                              const WeightMap& weights, Precision precision) {
  return execute(g, inputs, weights, precision, nullptr);
}

llvm::Expected<std::vector<Tensor>> runStep(const Graph& g, const std::vector<Tensor>& inputs,
                                            WeightMap& state, Precision precision) {
  WeightMap updates;
  auto outputs = execute(g, inputs, state, precision, &updates);
  if (!outputs)
    return outputs.takeError();
  for (auto& [name, value] : updates)
    state[name] = std::move(value);
  return outputs;
}

} // namespace lwcc

namespace lwcc::kernels {

SliceMap sliceMap(const Op& op, const Shape& in) {
  int64_t rank = static_cast<int64_t>(in.size());
  SliceMap map{std::vector<int64_t>(rank, 0), std::vector<int64_t>(rank, 1)};
  const auto& starts = op.getInts("starts");
  const auto& ends = op.getInts("ends");
  for (size_t k = 0; k < starts.size(); ++k) {
    int64_t axis = op.hasAttr("axes") ? op.getInts("axes")[k] : static_cast<int64_t>(k);
    if (axis < 0)
      axis += rank;
    int64_t step = op.hasAttr("steps") ? op.getInts("steps")[k] : 1;
    shape::SliceDim sd = shape::resolveSlice(in[axis], starts[k], ends[k], step);
    map.start[axis] = sd.start;
    map.step[axis] = sd.step;
  }
  return map;
}

AvgWindow avgPoolWindow(const Op& op, const Shape& xs, int64_t oh, int64_t ow) {
  const auto& k = op.getInts("kernel");
  const auto& st = op.getInts("strides");
  const auto& pd = op.getInts("pads");
  // The window, clipped to the padded input; then to the input itself.
  AvgWindow w;
  w.h0 = oh * st[0] - pd[0];
  w.w0 = ow * st[1] - pd[1];
  w.h1 = std::min(w.h0 + k[0], xs[2] + pd[2]);
  w.w1 = std::min(w.w0 + k[1], xs[3] + pd[3]);
  int64_t padded = (w.h1 - w.h0) * (w.w1 - w.w0);
  w.h0 = std::max<int64_t>(w.h0, 0);
  w.w0 = std::max<int64_t>(w.w0, 0);
  w.h1 = std::min(w.h1, xs[2]);
  w.w1 = std::min(w.w1, xs[3]);
  w.count = op.getInt("count_include_pad") ? padded : (w.h1 - w.h0) * (w.w1 - w.w0);
  return w;
}

// The index helpers above, for the kernels in other files.
std::vector<int64_t> stridesOf(const Shape& s) { return lwcc::stridesOf(s); }
void forEachIndex(const Shape& shape,
                  const std::function<void(const std::vector<int64_t>&, int64_t)>& fn) {
  lwcc::forEachIndex(shape, fn);
}
} // namespace lwcc::kernels
