//===- EncodingOps.cpp - cumsum, tile, mod, sin, cos, norm reductions -----===//
//
// Shape rules, gradient rules, parallel rules and cost rule of the ops that
// exported transformers build position encodings and normalized projections
// with; the interpreter runs them in interp/EncodingOps.cpp.
//
//===----------------------------------------------------------------------===//
#include "ir/GradRules.h"
#include "ir/RuleHelpers.h"
#include "runtime/include/lwrt/activation_math.h"
#include "runtime/include/lwrt/encoding_math.h"

#include "llvm/Support/FormatVariadic.h"

#include <cmath>

namespace lwcc {

using llvm::Error;

namespace {

using namespace rules;

#define TRY(expr)                                                                                  \
  if (Error e = (expr))                                                                            \
  return e

Error expectNumeric(const Op& op, unsigned i) {
  if (ty(op, i).dtype == DType::Bool)
    return fail("operand #{0} must be numeric, got {1}", i, ty(op, i).str());
  return ok();
}

Error expectRankAtMost(const Op& op, unsigned i) {
  if (ty(op, i).rank() > lwrt::kShardMaxRank)
    return fail("operand #{0} has rank {1}; at most {2} is supported", i, ty(op, i).rank(),
                lwrt::kShardMaxRank);
  return ok();
}

Error expectFlag(const Op& op, const char* name) {
  int64_t v = op.getInt(name);
  if (v != 0 && v != 1)
    return fail("attribute '{0}' must be 0 or 1, got {1}", name, v);
  return ok();
}

/// The axis of a cumsum in [0, rank), or an error.
llvm::Expected<int64_t> cumSumAxis(const Op& op) {
  int64_t rank = ty(op, 0).rank(), a = op.getInt("axis");
  if (a < -rank || a >= rank)
    return fail("axis {0} is out of range for rank {1}", a, rank);
  return a < 0 ? a + rank : a;
}

/// Which dims of operand #0 a reduction reduces (shape::reduce checked them).
std::vector<bool> reducedDims(const Op& op) {
  int64_t rank = ty(op, 0).rank();
  std::vector<bool> reduced(rank, !op.hasAttr("axes"));
  if (op.hasAttr("axes"))
    for (int64_t a : op.getInts("axes"))
      reduced[a < 0 ? a + rank : a] = true;
  return reduced;
}

} // namespace

//===--- Shape rules ------------------------------------------------------===//

namespace shape {

Rule cumSum(const Op& op) {
  TRY(expectNumeric(op, 0));
  TRY(expectFlag(op, "exclusive"));
  TRY(expectFlag(op, "reverse"));
  auto axis = cumSumAxis(op);
  if (!axis)
    return axis.takeError();
  return std::vector<TensorType>{ty(op, 0)};
}

Rule tile(const Op& op) {
  TRY(expectRankAtMost(op, 0));
  const TensorType& x = ty(op, 0);
  const auto& repeats = op.getInts("repeats");
  if (static_cast<int64_t>(repeats.size()) != x.rank())
    return fail("'repeats' has {0} values; the operand {1} has rank {2}", repeats.size(), x.str(),
                x.rank());
  Shape out;
  for (size_t d = 0; d < repeats.size(); ++d) {
    if (repeats[d] < 0)
      return fail("repeats must be non-negative, got {0}", repeats[d]);
    out.push_back(x.shape[d] * repeats[d]);
  }
  return std::vector<TensorType>{TensorType(x.dtype, out)};
}

Rule mod(const Op& op) {
  TRY(expectNumeric(op, 0));
  TRY(expectFlag(op, "fmod"));
  if (isFloat(ty(op, 0).dtype) && op.getInt("fmod") == 0)
    return fail("a mod of floats needs fmod = 1 (ONNX takes the dividend's sign for floats), "
                "got {0}",
                ty(op, 0).str());
  TRY(expectRankAtMost(op, 0));
  TRY(expectRankAtMost(op, 1));
  return broadcastBinary(op);
}

Rule floatReduce(const Op& op) {
  if (!isFloat(ty(op, 0).dtype))
    return fail("operand #0 must have a float element type, got {0}", ty(op, 0).str());
  return normReduce(op);
}

Rule normReduce(const Op& op) {
  TRY(expectRankAtMost(op, 0));
  return reduce(op);
}

} // namespace shape

//===--- Gradient rules ---------------------------------------------------===//

namespace grad {

namespace {

/// `v`, of a reduction's result shape, reshaped to keep the reduced dims as
/// 1 and expanded to the operand's shape.
llvm::Expected<Value*> spreadOverReduced(GradContext& c, Value* v) {
  const TensorType& x = c.x(0)->type();
  std::vector<bool> reduced = reducedDims(c.op);
  Shape kept;
  for (int64_t d = 0; d < x.rank(); ++d)
    kept.push_back(reduced[d] ? 1 : x.shape[d]);
  if (v->type().shape != kept) {
    auto r = c.emit(OpKind::Reshape, {v}, {{"shape", Attribute(kept)}});
    if (!r)
      return r.takeError();
    v = *r;
  }
  if (kept == x.shape)
    return v;
  return c.emit(OpKind::Expand, {v}, {{"shape", Attribute(x.shape)}});
}

} // namespace

/// The adjoint of a running sum is the running sum from the other end:
/// dx[i] = sum of dy[j] over the j whose sum includes x[i].
Error cumSum(GradContext& c) {
  if (!c.need(0))
    return ok();
  TRY_V(dx, c.emit(OpKind::CumSum, {c.dy()},
                   {{"axis", c.op.getInt("axis")},
                    {"exclusive", c.op.getInt("exclusive")},
                    {"reverse", 1 - c.op.getInt("reverse")}}));
  c.dxs[0] = dx;
  return ok();
}

/// Each element of x appears once in every tile: dy is viewed as
/// [r0, d0, r1, d1, ...] (repeated dims only; runs of unrepeated dims
/// merged) and summed over the repeat dims.
Error tile(GradContext& c) {
  if (!c.need(0))
    return ok();
  const Shape& xs = c.x(0)->type().shape;
  const auto& repeats = c.op.getInts("repeats");
  Shape view;
  std::vector<int64_t> axes;
  bool lastKept = false;
  for (size_t d = 0; d < xs.size(); ++d) {
    if (repeats[d] != 1) {
      axes.push_back(static_cast<int64_t>(view.size()));
      view.push_back(repeats[d]);
      view.push_back(xs[d]);
    } else if (lastKept) {
      view.back() *= xs[d];
    } else {
      view.push_back(xs[d]);
    }
    lastKept = true;
  }
  Value* dy = c.dy();
  if (!axes.empty()) {
    TRY_V(r, c.emit(OpKind::Reshape, {dy}, {{"shape", Attribute(view)}}));
    TRY_V(s, c.emit(OpKind::ReduceSum, {r}, {{"axes", Attribute(axes)}, {"keepdims", 0}}));
    dy = s;
  }
  if (dy->type().shape != xs) {
    TRY_V(r, c.emit(OpKind::Reshape, {dy}, {{"shape", Attribute(xs)}}));
    dy = r;
  }
  c.dxs[0] = dy;
  return ok();
}

/// fmod(a, b) = a - trunc(a / b) b: d/da = 1, d/db = -trunc(a / b), which
/// is (fmod(a, b) - a) / b. Integers have no gradient.
Error mod(GradContext& c) {
  if (!isFloat(c.y()->type().dtype))
    return makeError("a mod of integers has no gradient");
  if (c.need(0)) {
    TRY_V(da, c.sumToShape(c.dy(), c.x(0)->type().shape));
    c.dxs[0] = da;
  }
  if (c.need(1)) {
    TRY_V(diff, c.emit(OpKind::Sub, {c.y(), c.x(0)}));
    TRY_V(q, c.emit(OpKind::Div, {diff, c.x(1)}));
    TRY_V(p, c.emit(OpKind::Mul, {c.dy(), q}));
    TRY_V(db, c.sumToShape(p, c.x(1)->type().shape));
    c.dxs[1] = db;
  }
  return ok();
}

Error sin(GradContext& c) {
  if (!c.need(0))
    return ok();
  TRY_V(cs, c.emit(OpKind::Cos, {c.x(0)}));
  TRY_V(dx, c.emit(OpKind::Mul, {c.dy(), cs}));
  c.dxs[0] = dx;
  return ok();
}

Error cos(GradContext& c) {
  if (!c.need(0))
    return ok();
  TRY_V(sn, c.emit(OpKind::Sin, {c.x(0)}));
  TRY_V(ng, c.emit(OpKind::Neg, {sn}));
  TRY_V(dx, c.emit(OpKind::Mul, {c.dy(), ng}));
  c.dxs[0] = dx;
  return ok();
}

/// d|x| = sign(x) (0 at 0, as PyTorch's norm with p = 1).
Error reduceL1(GradContext& c) {
  if (!c.need(0))
    return ok();
  TRY_V(dy, spreadOverReduced(c, c.dy()));
  TRY_V(s, c.emit(OpKind::Sign, {c.x(0)}));
  TRY_V(dx, c.emit(OpKind::Mul, {dy, s}));
  c.dxs[0] = dx;
  return ok();
}

/// d sqrt(sum x^2) = x / norm; 0 where the norm is 0 (as PyTorch's norm).
Error reduceL2(GradContext& c) {
  if (!c.need(0))
    return ok();
  DType t = c.y()->type().dtype;
  Value* zero = c.scalar(0.0, t);
  TRY_V(q, c.emit(OpKind::Div, {c.dy(), c.y()}));
  TRY_V(isZero, c.emit(OpKind::Compare, {c.y(), zero}, {{"kind", Attribute("equal")}}));
  TRY_V(safe, c.emit(OpKind::Where, {isZero, zero, q}));
  TRY_V(spread, spreadOverReduced(c, safe));
  TRY_V(dx, c.emit(OpKind::Mul, {spread, c.x(0)}));
  c.dxs[0] = dx;
  return ok();
}

Error reduceSumSquare(GradContext& c) {
  if (!c.need(0))
    return ok();
  TRY_V(dy, spreadOverReduced(c, c.dy()));
  TRY_V(twice, c.emit(OpKind::Mul, {c.x(0), c.scalar(2.0, c.y()->type().dtype)}));
  TRY_V(dx, c.emit(OpKind::Mul, {dy, twice}));
  c.dxs[0] = dx;
  return ok();
}

} // namespace grad

//===--- Parallel rules ---------------------------------------------------===//

namespace par {

/// Any dim but the summed axis.
std::optional<SplitPlan> cumSum(const Op& op, int64_t dim) {
  auto axis = cumSumAxis(op);
  if (!axis) {
    llvm::consumeError(axis.takeError());
    return std::nullopt;
  }
  if (dim < 0 || dim >= ty(op, 0).rank() || dim == *axis)
    return std::nullopt;
  return SplitPlan{{dim}, {dim}, SplitPlan::Partial::None, {}};
}

/// The dims the tile does not repeat (a shard of the result reads the same
/// shard of the operand).
std::optional<SplitPlan> tile(const Op& op, int64_t dim) {
  const auto& repeats = op.getInts("repeats");
  if (dim < 0 || dim >= static_cast<int64_t>(repeats.size()) || repeats[dim] != 1)
    return std::nullopt;
  return SplitPlan{{dim}, {dim}, SplitPlan::Partial::None, {}};
}

/// The kept dims only: square roots of partial sums do not add up.
std::optional<SplitPlan> reduceL2(const Op& op, int64_t dim) {
  if (dim < 0 || dim >= ty(op, 0).rank() || reducedDims(op)[dim])
    return std::nullopt;
  return reduce(op, dim);
}

} // namespace par

namespace cost {

/// A term and an add per operand element.
double normReduce(const Op& op, const CostContext&) {
  return 2.0 * static_cast<double>(op.operand(0)->type().numElements());
}

} // namespace cost

} // namespace lwcc
