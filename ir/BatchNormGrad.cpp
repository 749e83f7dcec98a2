//===- BatchNormGrad.cpp - The gradient of batch norm's inference form ----===//
//
// batch_norm(x, scale, bias, mean, var) normalizes with the mean and
// variance it is given. The training step keeps that form where no running
// statistics are updated: a batch norm whose mean and variance are values
// the graph computes (the dynamo exporter's F.batch_norm without running
// statistics: the batch's moments written as ReduceMean) rather than params.
// Its gradient then reaches x, scale and bias, and the mean and variance,
// through which it flows on to what computed them:
//   inv = 1 / sqrt(var + eps), per channel c (dim 1), sums over the others:
//   dx = dy * scale * inv        dscale = sum(dy * (x - mean)) * inv
//   dbias = sum(dy)              dmean = -sum(dy) * scale * inv
//   dvar = -1/2 sum(dy * (x - mean)) * scale * inv^3
//
//===----------------------------------------------------------------------===//
#include "ir/GradRules.h"
#include "ir/RuleHelpers.h"

namespace lwcc::grad {

llvm::Error batchNorm(GradContext& c) {
  bool any = false;
  for (unsigned i = 0; i < 5; ++i)
    any |= c.need(i);
  if (!any)
    return llvm::Error::success();
  const TensorType& xt = c.x(0)->type();
  // A 16-bit x (mixed precision) has float32 parameters and statistics:
  // x and dy are widened, everything computed in float32, and dx rounded
  // to x's type once.
  const DType t = c.x(1)->type().dtype;
  Value* x = c.x(0);
  Value* dy = c.dy();
  if (xt.dtype != t) {
    const std::vector<NamedAttr> wide{{"to", Attribute(std::string(dtypeName(t)))}};
    TRY_V(wx, c.emit(OpKind::Cast, {x}, wide));
    TRY_V(wdy, c.emit(OpKind::Cast, {dy}, wide));
    x = wx;
    dy = wdy;
  }
  int64_t rank = xt.rank();
  Shape perChannel(rank, 1);
  perChannel[1] = xt.shape[1];
  std::vector<int64_t> others;
  for (int64_t d = 0; d < rank; ++d)
    if (d != 1)
      others.push_back(d);
  auto spread = [&](Value* v) { // [C] -> [1, C, 1, ...]
    return c.emit(OpKind::Reshape, {v}, {{"shape", Attribute(perChannel)}});
  };
  auto sumOthers = [&](Value* v) {
    return c.emit(OpKind::ReduceSum, {v}, {{"axes", Attribute(others)}, {"keepdims", 0}});
  };
  TRY_V(varEps, c.emit(OpKind::Add, {c.x(4), c.scalar(c.op.getFloat("epsilon"), t)}));
  TRY_V(root, c.emit(OpKind::Sqrt, {varEps}));
  TRY_V(inv, c.emit(OpKind::Reciprocal, {root}));
  TRY_V(gain, c.emit(OpKind::Mul, {c.x(1), inv})); // scale * inv
  if (c.need(0)) {
    TRY_V(g, spread(gain));
    TRY_V(dx, c.emit(OpKind::Mul, {dy, g}));
    c.dxs[0] = dx;
    if (xt.dtype != t) {
      TRY_V(narrow,
            c.emit(OpKind::Cast, {dx}, {{"to", Attribute(std::string(dtypeName(xt.dtype)))}}));
      c.dxs[0] = narrow;
    }
  }
  if (c.need(1) || c.need(4)) {
    TRY_V(m, spread(c.x(3)));
    TRY_V(centered, c.emit(OpKind::Sub, {x, m}));
    TRY_V(prod, c.emit(OpKind::Mul, {dy, centered}));
    TRY_V(s, sumOthers(prod));
    if (c.need(1)) {
      TRY_V(dscale, c.emit(OpKind::Mul, {s, inv}));
      c.dxs[1] = dscale;
    }
    if (c.need(4)) {
      TRY_V(inv2, c.emit(OpKind::Mul, {inv, inv}));
      TRY_V(inv3, c.emit(OpKind::Mul, {inv2, gain}));
      TRY_V(half, c.emit(OpKind::Mul, {inv3, c.scalar(-0.5, t)}));
      TRY_V(dvar, c.emit(OpKind::Mul, {s, half}));
      c.dxs[4] = dvar;
    }
  }
  if (c.need(2) || c.need(3)) {
    TRY_V(sdy, sumOthers(dy));
    if (c.need(2))
      c.dxs[2] = sdy;
    if (c.need(3)) {
      TRY_V(p, c.emit(OpKind::Mul, {sdy, gain}));
      TRY_V(dmean, c.emit(OpKind::Neg, {p}));
      c.dxs[3] = dmean;
    }
  }
  return llvm::Error::success();
}

} // namespace lwcc::grad
