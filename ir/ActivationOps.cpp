//===- ActivationOps.cpp - Activations, prelu, max/min, compare, where ----===//
//
// Shape rules and gradient rules of the activations of today's CNN model
// collections (hard_swish, hard_sigmoid, mish, softplus, softsign, elu,
// selu, celu, thresholded_relu), prelu with a trainable slope, max/min,
// comparisons and where of run-time values (the dynamo exporter writes
// Softplus's threshold with them). The interpreter runs them in
// interp/ActivationOps.cpp.
//
//===----------------------------------------------------------------------===//
#include "ir/GradRules.h"
#include "ir/RuleHelpers.h"
#include "runtime/include/lwrt/activation_math.h"

#include "llvm/Support/FormatVariadic.h"

namespace lwcc {

using llvm::Error;

namespace {

using rules::fail;
using rules::ok;
using rules::ty;

/// Whether `from` broadcasts to exactly `to` (numpy rules, `to` unchanged).
bool broadcastsTo(const Shape& from, const Shape& to) {
  if (from.size() > to.size())
    return false;
  for (size_t d = 0; d < from.size(); ++d) {
    int64_t f = from[from.size() - 1 - d], t = to[to.size() - 1 - d];
    if (f != t && f != 1)
      return false;
  }
  return true;
}

Error expectRankAtMost(const Op& op, unsigned i) {
  if (ty(op, i).rank() > lwrt::kShardMaxRank)
    return fail("operand #{0} has rank {1}; at most {2} is supported", i, ty(op, i).rank(),
                lwrt::kShardMaxRank);
  return ok();
}

#define TRY(expr)                                                                                  \
  if (Error e = (expr))                                                                            \
  return e

} // namespace

//===--- Shape rules ------------------------------------------------------===//

namespace shape {

Rule prelu(const Op& op) {
  if (!isFloat(ty(op, 0).dtype) || ty(op, 1).dtype != ty(op, 0).dtype)
    return fail("operands must share one float element type, got {0} and {1}", ty(op, 0).str(),
                ty(op, 1).str());
  TRY(expectRankAtMost(op, 0));
  if (!broadcastsTo(ty(op, 1).shape, ty(op, 0).shape))
    return fail("the slope {0} does not broadcast to x {1}", ty(op, 1).str(), ty(op, 0).str());
  return std::vector<TensorType>{ty(op, 0)};
}

Rule preluGrad(const Op& op) {
  auto y = prelu(op);
  if (!y)
    return y.takeError();
  if (ty(op, 2) != ty(op, 0))
    return fail("dy {0} must have x's type {1}", ty(op, 2).str(), ty(op, 0).str());
  return std::vector<TensorType>{ty(op, 0), ty(op, 0)};
}

Rule extremumGrad(const Op& op) {
  const TensorType& dy = ty(op, 2);
  if (!isFloat(dy.dtype))
    return fail("dy must have a float element type, got {0}", dy.str());
  TRY(expectRankAtMost(op, 2));
  for (unsigned i : {0u, 1u})
    if (ty(op, i).dtype != dy.dtype || !broadcastsTo(ty(op, i).shape, dy.shape))
      return fail("operand #{0} {1} does not broadcast to dy {2}", i, ty(op, i).str(), dy.str());
  return std::vector<TensorType>{dy, dy};
}

Rule compare(const Op& op) {
  if (ty(op, 0).dtype != ty(op, 1).dtype)
    return fail("operands must share one element type, got {0} and {1}", ty(op, 0).str(),
                ty(op, 1).str());
  bool known = false;
  for (const char* k : lwrt::kCompareKindNames)
    known |= op.getString("kind") == k;
  if (!known)
    return fail("unknown kind '{0}' (greater, greater_or_equal, less, less_or_equal, equal, and, "
                "or, xor)",
                op.getString("kind"));
  bool logical = op.getString("kind") == "and" || op.getString("kind") == "or" ||
                 op.getString("kind") == "xor";
  if (ty(op, 0).dtype == DType::Bool && !logical && op.getString("kind") != "equal")
    return fail("bool operands are only compared for equality");
  if (logical && ty(op, 0).dtype != DType::Bool)
    return fail("'{0}' takes bool operands, got {1}", op.getString("kind"), ty(op, 0).str());
  auto s = broadcast(ty(op, 0).shape, ty(op, 1).shape);
  if (!s)
    return s.takeError();
  if (s->size() > static_cast<size_t>(lwrt::kShardMaxRank))
    return fail("rank {0} is above {1}", s->size(), lwrt::kShardMaxRank);
  return std::vector<TensorType>{TensorType(DType::Bool, *s)};
}

Rule where(const Op& op) {
  if (ty(op, 0).dtype != DType::Bool)
    return fail("the condition must be bool, got {0}", ty(op, 0).str());
  if (ty(op, 1).dtype != ty(op, 2).dtype)
    return fail("x and y must share one element type, got {0} and {1}", ty(op, 1).str(),
                ty(op, 2).str());
  auto s = broadcast(ty(op, 0).shape, ty(op, 1).shape);
  if (!s)
    return s.takeError();
  auto t = broadcast(*s, ty(op, 2).shape);
  if (!t)
    return t.takeError();
  if (t->size() > static_cast<size_t>(lwrt::kShardMaxRank))
    return fail("rank {0} is above {1}", t->size(), lwrt::kShardMaxRank);
  return std::vector<TensorType>{TensorType(ty(op, 1).dtype, *t)};
}

} // namespace shape

//===--- Gradient rules ---------------------------------------------------===//

namespace grad {

namespace {

/// The backward op of each unary activation.
OpKind gradKindOf(OpKind k) {
  switch (k) {
#define X(E, fn)                                                                                   \
  case OpKind::E:                                                                                  \
    return OpKind::E##Grad;
    LWRT_ACTIVATIONS(X)
#undef X
  default:
    return k;
  }
}

} // namespace

Error activation(GradContext& c) {
  if (!c.need(0))
    return ok();
  // The backward op takes the forward op's attributes, defaults spelled out.
  std::vector<NamedAttr> attrs;
  for (const AttrSpec& a : c.op.info().attrs) {
    const Attribute* v = c.op.findAttr(a.name);
    attrs.push_back({a.name, v ? *v : a.defaultValue});
  }
  auto dx = c.emit(gradKindOf(c.op.kind()), {c.x(0), c.dy()}, std::move(attrs));
  if (!dx)
    return dx.takeError();
  c.dxs[0] = *dx;
  return ok();
}

Error prelu(GradContext& c) {
  if (!c.need(0) && !c.need(1))
    return ok();
  auto r = c.emitN(OpKind::PReluGrad, {c.x(0), c.x(1), c.dy()}, {}, 2);
  if (!r)
    return r.takeError();
  if (c.need(0))
    c.dxs[0] = (*r)[0];
  if (c.need(1)) {
    auto ds = c.sumToShape((*r)[1], c.x(1)->type().shape);
    if (!ds)
      return ds.takeError();
    c.dxs[1] = *ds;
  }
  return ok();
}

Error extremum(GradContext& c) {
  if (!c.need(0) && !c.need(1))
    return ok();
  OpKind k = c.op.kind() == OpKind::Max ? OpKind::MaxGrad : OpKind::MinGrad;
  auto r = c.emitN(k, {c.x(0), c.x(1), c.dy()}, {}, 2);
  if (!r)
    return r.takeError();
  for (unsigned i = 0; i < 2; ++i)
    if (c.need(i)) {
      auto d = c.sumToShape((*r)[i], c.x(i)->type().shape);
      if (!d)
        return d.takeError();
      c.dxs[i] = *d;
    }
  return ok();
}

/// dx = where(c, dy, 0), dy_y = where(c, 0, dy), each summed to its operand's
/// shape; the condition has no gradient.
Error where(GradContext& c) {
  for (unsigned i : {1u, 2u}) {
    if (!c.need(i))
      continue;
    Value* zero = c.scalar(0.0, c.dy()->type().dtype);
    auto picked = c.emit(OpKind::Where, {c.x(0), i == 1 ? c.dy() : zero, i == 1 ? zero : c.dy()});
    if (!picked)
      return picked.takeError();
    auto d = c.sumToShape(*picked, c.x(i)->type().shape);
    if (!d)
      return d.takeError();
    c.dxs[i] = *d;
  }
  return ok();
}

} // namespace grad

} // namespace lwcc
