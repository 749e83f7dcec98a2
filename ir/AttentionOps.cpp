//===- AttentionOps.cpp - attention and attention_grad --------------------===//
//
// Shape, gradient, parallel and cost rules of scaled dot-product attention
// as one op. The interpreter (interp/AttentionOps.cpp) and the kernels run
// the formulas of lwrt/attention_math.h.
//
//===----------------------------------------------------------------------===//
#include "ir/GradRules.h"
#include "ir/RuleHelpers.h"
#include "runtime/include/lwrt/attention_math.h"

namespace lwcc {

using llvm::Error;

namespace {

using namespace rules;

#define TRY(expr)                                                                                  \
  if (Error e = (expr))                                                                            \
  return e

/// The type of lse, the per-row log-sum-exp: float64 for float64 operands,
/// float32 otherwise (a bfloat16 softmax keeps its statistics in float32).
DType lseType(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

/// q, k, v (operands first..first+2) and the mask (operand `mask` when the
/// op has it): float of one type, shapes that fit (lwrt::makeAttentionShape).
Error checkOperands(const Op& op, unsigned first, unsigned mask) {
  const TensorType &q = ty(op, first), &k = ty(op, first + 1), &v = ty(op, first + 2);
  TRY(expectFloat(op, first));
  for (unsigned i = first + 1; i < first + 3; ++i)
    if (ty(op, i).dtype != q.dtype)
      return fail("operand #{0} must be {1} like q, got {2}", i, dtypeName(q.dtype),
                  ty(op, i).str());
  if (q.rank() < 2 || q.rank() > lwrt::kAttentionMaxLead + 2)
    return fail("q {0} must be [..., Tq, D] of rank 2 to {1}", q.str(),
                lwrt::kAttentionMaxLead + 2);
  if (k.rank() != q.rank() || v.rank() != q.rank())
    return fail("q {0}, k {1} and v {2} must have one rank", q.str(), k.str(), v.str());
  bool hasMask = op.numOperands() > mask;
  if (hasMask && ty(op, mask).dtype != q.dtype)
    return fail("the mask must be {0} like q, got {1}", dtypeName(q.dtype), ty(op, mask).str());
  lwrt::AttentionShape s;
  const Shape* m = hasMask ? &ty(op, mask).shape : nullptr;
  if (!lwrt::makeAttentionShape(static_cast<int>(q.rank()), q.shape.data(), k.shape.data(),
                                v.shape.data(), m ? static_cast<int>(m->size()) : -1,
                                m ? m->data() : nullptr, s))
    return fail("q {0}, k {1}, v {2}{3} do not fit [..., Tq, D], [..., Tk, D], [..., Tk, Dv]{4}",
                q.str(), k.str(), v.str(), hasMask ? ", mask " + ty(op, mask).str() : "",
                hasMask ? " and a mask broadcastable to [..., Tq, Tk]" : "");
  if (std::max(s.d, s.dv) > lwrt::kAttentionMaxWidth)
    return fail("head widths D = {0}, Dv = {1} exceed {2}", s.d, s.dv, lwrt::kAttentionMaxWidth);
  int64_t causal = op.getInt("causal");
  if (causal != 0 && causal != 1)
    return fail("attribute 'causal' must be 0 or 1, got {0}", causal);
  return ok();
}

/// [..., T, W] with the last two dims of `x` replaced.
Shape rowsOf(const Shape& x, int64_t rows, int64_t width) {
  Shape s(x.begin(), x.end() - 2);
  s.push_back(rows);
  if (width >= 0)
    s.push_back(width);
  return s;
}

} // namespace

//===--- Shape rules ------------------------------------------------------===//

namespace shape {

Rule attention(const Op& op) {
  TRY(checkOperands(op, 0, 3));
  const TensorType &q = ty(op, 0), &v = ty(op, 2);
  int64_t tq = q.shape[q.rank() - 2];
  return std::vector<TensorType>{TensorType(q.dtype, rowsOf(q.shape, tq, v.shape.back())),
                                 TensorType(lseType(q.dtype), rowsOf(q.shape, tq, -1))};
}

Rule attentionGrad(const Op& op) {
  TRY(checkOperands(op, 1, 6));
  const TensorType &q = ty(op, 1), &v = ty(op, 3);
  int64_t tq = q.shape[q.rank() - 2];
  TensorType out(q.dtype, rowsOf(q.shape, tq, v.shape.back()));
  TensorType lse(lseType(q.dtype), rowsOf(q.shape, tq, -1));
  if (ty(op, 0) != out)
    return fail("dout must be {0}, got {1}", out.str(), ty(op, 0).str());
  if (ty(op, 4) != out)
    return fail("out must be {0}, got {1}", out.str(), ty(op, 4).str());
  if (ty(op, 5) != lse)
    return fail("lse must be {0}, got {1}", lse.str(), ty(op, 5).str());
  return std::vector<TensorType>{q, ty(op, 2), v};
}

} // namespace shape

//===--- Gradient rules ---------------------------------------------------===//

namespace grad {

/// attention_grad gives dq, dk and dv from out's gradient, out and lse. The
/// mask takes no gradient (it is a constant or computed from the inputs in
/// the exports), and neither does lse, which only the backward reads.
Error attention(GradContext& c) {
  if (c.need(3))
    return c.op.emitError("the mask of attention takes no gradient: compute it from constants "
                          "and inputs, not from trained params");
  if (c.dy(1))
    return c.op.emitError("has no gradient rule for its lse result: the loss must depend on "
                          "its output only");
  if (!c.dy(0) || !(c.need(0) || c.need(1) || c.need(2)))
    return ok();
  std::vector<Value*> operands{c.dy(0), c.x(0), c.x(1), c.x(2), c.y(0), c.y(1)};
  if (c.op.numOperands() > 3)
    operands.push_back(c.x(3));
  auto grads = c.emitN(
      OpKind::AttentionGrad, operands,
      {{"scale", Attribute(c.op.getFloat("scale"))}, {"causal", Attribute(c.op.getInt("causal"))}},
      3);
  if (!grads)
    return grads.takeError();
  for (unsigned i = 0; i < 3; ++i)
    if (c.need(i))
      c.dxs[i] = (*grads)[i];
  return ok();
}

} // namespace grad

//===--- Parallel rules ---------------------------------------------------===//

namespace par {

/// Any leading (batch, heads) dim: each device attends its own rows; the
/// mask is split there too unless it is broadcast along the dim. Tq, Tk
/// and the head widths are not split (a row reads every key).
std::optional<SplitPlan> attention(const Op& op, int64_t dim) {
  bool forward = op.kind() == OpKind::Attention;
  unsigned first = forward ? 0 : 1, maskAt = forward ? 3 : 6;
  int64_t rank = ty(op, first).rank();
  if (dim < 0 || dim >= rank - 2)
    return std::nullopt;
  std::vector<int64_t> operands(op.numOperands(), dim);
  if (op.numOperands() > maskAt) {
    const Shape& m = ty(op, maskAt).shape;
    int64_t md = dim - (rank - static_cast<int64_t>(m.size()));
    operands[maskAt] = md < 0 || m[md] == 1 ? -1 : md;
  }
  std::vector<int64_t> results(op.numResults(), dim);
  return SplitPlan{std::move(operands), std::move(results), SplitPlan::Partial::None, {}};
}

} // namespace par

//===--- Cost rules -------------------------------------------------------===//

namespace cost {

/// Forward: the scores (2 Tq Tk D), their softmax (about 5 per score) and
/// the weighted sum of v (2 Tq Tk Dv) per batch entry. The gradient
/// recomputes the scores and forms dv, the scores' gradient, dq and dk:
/// 2 Tq Tk (3 D + 2 Dv) and the softmax's 5. A causal op computes about
/// half the scores.
double attention(const Op& op, const CostContext&) {
  bool forward = op.kind() == OpKind::Attention;
  const Shape &q = ty(op, forward ? 0 : 1).shape, &v = ty(op, forward ? 2 : 3).shape;
  double batch = 1;
  for (size_t a = 0; a + 2 < q.size(); ++a)
    batch *= static_cast<double>(q[a]);
  double tq = static_cast<double>(q[q.size() - 2]), d = static_cast<double>(q.back());
  double tk = static_cast<double>(v[v.size() - 2]), dv = static_cast<double>(v.back());
  double scores = batch * tq * tk * (op.getInt("causal") ? 0.5 : 1.0);
  if (forward)
    return scores * (2 * d + 2 * dv + 5);
  return scores * (6 * d + 4 * dv + 5);
}

} // namespace cost

} // namespace lwcc
