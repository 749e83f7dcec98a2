//===- AttentionOps.cpp - Reference kernels of attention ------------------===//
//
// attention and attention_grad, one row at a time with the formulas of
// lwrt/attention_math.h (the CPU and CUDA kernels call them too), on the
// interpreter's doubles.
//
//===----------------------------------------------------------------------===//
#include "interp/Eval.h"
#include "runtime/include/lwrt/attention_math.h"

#include <vector>

namespace lwcc {

using llvm::Error;

namespace {

lwrt::AttentionParams paramsOf(const Op& op) {
  return lwrt::AttentionParams{op.getFloat("scale"), op.getInt("causal")};
}

/// The row shape of the op's q, k, v (from operand `first` on) and mask
/// (operand `maskAt`, when present); the shape rule checked they fit.
lwrt::AttentionShape shapeOf(EvalCtx& c, unsigned first, unsigned maskAt) {
  const Shape &q = c.x(first).type.shape, &k = c.x(first + 1).type.shape,
              &v = c.x(first + 2).type.shape;
  const Shape* m = c.in.size() > maskAt ? &c.x(maskAt).type.shape : nullptr;
  lwrt::AttentionShape s;
  lwrt::makeAttentionShape(static_cast<int>(q.size()), q.data(), k.data(), v.data(),
                           m ? static_cast<int>(m->size()) : -1, m ? m->data() : nullptr, s);
  return s;
}

} // namespace

Error evalAttention(EvalCtx& c) {
  lwrt::AttentionShape s = shapeOf(c, 0, 3);
  lwrt::AttentionParams p = paramsOf(c.op);
  const double* mask = c.in.size() > 3 ? c.x(3).f.data() : nullptr;
  std::vector<double> acc(static_cast<size_t>(s.dv));
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t i = 0; i < s.tq; ++i)
      lwrt::attentionRow(s, p, c.x(0).f.data(), c.x(1).f.data(), c.x(2).f.data(), mask,
                         c.y(0).f.data(), c.y(1).f.data(), b, i, acc.data());
  return Error::success();
}

Error evalAttentionGrad(EvalCtx& c) {
  lwrt::AttentionShape s = shapeOf(c, 1, 6);
  lwrt::AttentionParams p = paramsOf(c.op);
  const double* mask = c.in.size() > 6 ? c.x(6).f.data() : nullptr;
  const double *dout = c.x(0).f.data(), *q = c.x(1).f.data(), *k = c.x(2).f.data(),
               *v = c.x(3).f.data(), *out = c.x(4).f.data(), *lse = c.x(5).f.data();
  std::vector<double> acc(static_cast<size_t>(s.d + s.dv));
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t i = 0; i < s.tq; ++i)
      lwrt::attentionGradQueryRow(s, p, dout, q, k, v, out, lse, mask, c.y(0).f.data(), b, i,
                                  acc.data());
    for (int64_t j = 0; j < s.tk; ++j)
      lwrt::attentionGradKeyRow(s, p, dout, q, k, v, out, lse, mask, c.y(1).f.data(),
                                c.y(2).f.data(), b, j, acc.data());
  }
  return Error::success();
}

} // namespace lwcc
