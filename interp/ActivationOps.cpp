//===- ActivationOps.cpp - Reference kernels of ir/ActivationOps.cpp's ops -===//
//
// The activations of today's CNN model collections, prelu, max/min,
// comparisons and where, computed with lwrt/activation_math.h, the
// functions the CPU and CUDA kernels call too.
//
//===----------------------------------------------------------------------===//
#include "interp/Eval.h"
#include "runtime/include/lwrt/activation_math.h"

#include "llvm/Support/FormatVariadic.h"

#include <iterator>

namespace lwcc {

using llvm::Error;

namespace {

/// alpha, beta and gamma of an activation op, where it has them.
lwrt::ActivationParams activationParams(const Op& op) {
  lwrt::ActivationParams p;
  if (op.info().findAttr("alpha"))
    p.alpha = op.getFloat("alpha");
  if (op.info().findAttr("beta"))
    p.beta = op.getFloat("beta");
  if (op.info().findAttr("gamma"))
    p.gamma = op.getFloat("gamma");
  return p;
}

template <typename M> Error forwardOf(EvalCtx& c) {
  lwrt::ActivationParams p = activationParams(c.op);
  for (int64_t k = 0; k < c.y().size(); ++k)
    c.y().f[k] = M::forward(c.x().f[k], p);
  return Error::success();
}

template <typename M> Error backwardOf(EvalCtx& c) {
  lwrt::ActivationParams p = activationParams(c.op);
  for (int64_t k = 0; k < c.y().size(); ++k)
    c.y().f[k] = M::backward(c.x(0).f[k], c.x(1).f[k], p);
  return Error::success();
}

Error extremumOf(EvalCtx& c, bool isMin) {
  const Shape& out = c.y().type.shape;
  auto ia = kernels::broadcastIndex(out, c.x(0).type.shape),
       ib = kernels::broadcastIndex(out, c.x(1).type.shape);
  for (int64_t k = 0; k < c.y().size(); ++k) {
    if (c.y().isFloatData()) {
      double a = c.x(0).f[ia(k)], b = c.x(1).f[ib(k)];
      c.y().f[k] = lwrt::extremumValue(a, b, isMin);
    } else {
      int64_t a = c.x(0).i[ia(k)], b = c.x(1).i[ib(k)];
      c.y().i[k] = isMin ? std::min(a, b) : std::max(a, b);
    }
  }
  return Error::success();
}

Error extremumGradOf(EvalCtx& c, bool isMin) {
  const Shape& out = c.x(2).type.shape;
  auto ia = kernels::broadcastIndex(out, c.x(0).type.shape),
       ib = kernels::broadcastIndex(out, c.x(1).type.shape);
  for (int64_t k = 0; k < c.x(2).size(); ++k) {
    double a = c.x(0).f[ia(k)], b = c.x(1).f[ib(k)], dy = c.x(2).f[k];
    c.y(0).f[k] = dy * lwrt::extremumGradWeight(a, b, isMin);
    c.y(1).f[k] = dy * lwrt::extremumGradWeight(b, a, isMin);
  }
  return Error::success();
}

} // namespace

#define X(E, fn)                                                                                   \
  Error eval##E(EvalCtx& c) { return forwardOf<lwrt::E##Math>(c); }                                \
  Error eval##E##Grad(EvalCtx& c) { return backwardOf<lwrt::E##Math>(c); }
LWRT_ACTIVATIONS(X)
#undef X

Error evalPRelu(EvalCtx& c) {
  auto is = kernels::broadcastIndex(c.y().type.shape, c.x(1).type.shape);
  for (int64_t k = 0; k < c.y().size(); ++k)
    c.y().f[k] = lwrt::preluValue(c.x(0).f[k], c.x(1).f[is(k)]);
  return Error::success();
}

Error evalPReluGrad(EvalCtx& c) {
  auto is = kernels::broadcastIndex(c.x(0).type.shape, c.x(1).type.shape);
  for (int64_t k = 0; k < c.x(0).size(); ++k) {
    double x = c.x(0).f[k], dy = c.x(2).f[k];
    c.y(0).f[k] = lwrt::preluGradX(x, c.x(1).f[is(k)], dy);
    c.y(1).f[k] = lwrt::preluGradSlope(x, dy);
  }
  return Error::success();
}

Error evalCompare(EvalCtx& c) {
  const Shape& out = c.y().type.shape;
  auto ia = kernels::broadcastIndex(out, c.x(0).type.shape),
       ib = kernels::broadcastIndex(out, c.x(1).type.shape);
  lwrt::CompareKind kind = lwrt::CompareKind::Greater;
  for (size_t k = 0; k < std::size(lwrt::kCompareKindNames); ++k)
    if (c.op.getString("kind") == lwrt::kCompareKindNames[k])
      kind = static_cast<lwrt::CompareKind>(k);
  for (int64_t k = 0; k < c.y().size(); ++k)
    c.y().i[k] = c.x(0).isFloatData() ? lwrt::compareValue(c.x(0).f[ia(k)], c.x(1).f[ib(k)], kind)
                                      : lwrt::compareValue(c.x(0).i[ia(k)], c.x(1).i[ib(k)], kind);
  return Error::success();
}

Error evalWhere(EvalCtx& c) {
  const Shape& out = c.y().type.shape;
  auto ic = kernels::broadcastIndex(out, c.x(0).type.shape),
       ix = kernels::broadcastIndex(out, c.x(1).type.shape),
       iy = kernels::broadcastIndex(out, c.x(2).type.shape);
  for (int64_t k = 0; k < c.y().size(); ++k) {
    bool take = c.x(0).i[ic(k)] != 0;
    if (c.y().isFloatData())
      c.y().f[k] = take ? c.x(1).f[ix(k)] : c.x(2).f[iy(k)];
    else
      c.y().i[k] = take ? c.x(1).i[ix(k)] : c.x(2).i[iy(k)];
  }
  return Error::success();
}

Error evalMax(EvalCtx& c) { return extremumOf(c, false); }
Error evalMin(EvalCtx& c) { return extremumOf(c, true); }
Error evalMaxGrad(EvalCtx& c) { return extremumGradOf(c, false); }
Error evalMinGrad(EvalCtx& c) { return extremumGradOf(c, true); }

} // namespace lwcc
