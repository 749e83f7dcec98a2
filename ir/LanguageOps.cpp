//===- LanguageOps.cpp - gather_elements, scatter_elements, nll_loss ------===//
//
// Shape rules, gradient rules, parallel rules and cost rules of the ops of
// exported language models; the interpreter runs them in
// interp/LanguageOps.cpp with the index math of lwrt/language_math.h.
//
//===----------------------------------------------------------------------===//
#include "ir/GradRules.h"
#include "ir/RuleHelpers.h"
#include "runtime/include/lwrt/language_math.h"

#include "llvm/Support/FormatVariadic.h"

#include <iterator>

namespace lwcc {

using llvm::Error;

namespace {

using namespace rules;

#define TRY(expr)                                                                                  \
  if (Error e = (expr))                                                                            \
  return e

/// The axis of a gather_elements or scatter_elements in [0, rank), or an error.
llvm::Expected<int64_t> elementsAxis(const Op& op) {
  int64_t rank = ty(op, 0).rank(), a = op.getInt("axis");
  if (a < -rank || a >= rank)
    return fail("axis {0} is out of range for rank {1}", a, rank);
  return a < 0 ? a + rank : a;
}

/// data (operand 0) and indices (operand 1) of a gather_elements or
/// scatter_elements: one rank of at least 1 and at most kShardMaxRank,
/// integer indices no larger than data off the axis.
Error checkElements(const Op& op) {
  const TensorType &data = ty(op, 0), &idx = ty(op, 1);
  if (data.rank() < 1 || data.rank() > lwrt::kShardMaxRank)
    return fail("data {0} must have a rank from 1 to {1}", data.str(), lwrt::kShardMaxRank);
  if (!isInteger(idx.dtype))
    return fail("indices must be integers, got {0}", idx.str());
  if (idx.rank() != data.rank())
    return fail("indices {0} must have the rank of data {1}", idx.str(), data.str());
  auto axis = elementsAxis(op);
  if (!axis)
    return axis.takeError();
  for (int64_t d = 0; d < data.rank(); ++d)
    if (d != *axis && idx.shape[d] > data.shape[d])
      return fail("indices {0} are larger than data {1} in dim {2}", idx.str(), data.str(), d);
  return ok();
}

/// The reduction of an nll_loss, or an error naming the choices.
llvm::Expected<lwrt::NllReduction> nllReduction(const Op& op) {
  const std::string& r = op.getString("reduction");
  for (size_t k = 0; k < std::size(lwrt::kNllReductionNames); ++k)
    if (r == lwrt::kNllReductionNames[k])
      return static_cast<lwrt::NllReduction>(k);
  return fail("unknown reduction '{0}' (none, sum, mean)", r);
}

/// The target shape of an nll_loss input shape [N, C, d...]: [N, d...].
Shape targetShapeOf(const Shape& input) {
  Shape t{input[0]};
  t.insert(t.end(), input.begin() + 2, input.end());
  return t;
}

/// target (operand `t`) and the optional weight (operand `w`) of an
/// nll_loss or its gradient, for an input of `input` shape and `dtype`.
Error checkNllOperands(const Op& op, const Shape& input, DType dtype, unsigned t, unsigned w) {
  if (input.size() < 2)
    return fail("input must be [N, C, d...], got rank {0}", input.size());
  if (!isInteger(ty(op, t).dtype) || ty(op, t).shape != targetShapeOf(input))
    return fail("target must be integers of shape {0}, got {1}", shapeStr(targetShapeOf(input)),
                ty(op, t).str());
  if (op.numOperands() > w && (ty(op, w).dtype != dtype || ty(op, w).shape != Shape{input[1]}))
    return fail("weight must be {0}, got {1}", TensorType(dtype, {input[1]}).str(),
                ty(op, w).str());
  return ok();
}

} // namespace

//===--- Shape rules ------------------------------------------------------===//

namespace shape {

Rule gatherElements(const Op& op) {
  TRY(checkElements(op));
  return std::vector<TensorType>{TensorType(ty(op, 0).dtype, ty(op, 1).shape)};
}

Rule scatterElements(const Op& op) {
  TRY(checkElements(op));
  const std::string& r = op.getString("reduction");
  if (r != "none" && r != "add")
    return fail("reduction '{0}' is not supported (none, add)", r);
  if (ty(op, 2).dtype != ty(op, 0).dtype || ty(op, 2).shape != ty(op, 1).shape)
    return fail("updates must be {0}, got {1}", TensorType(ty(op, 0).dtype, ty(op, 1).shape).str(),
                ty(op, 2).str());
  if (r == "add" && ty(op, 0).dtype == DType::Bool)
    return fail("reduction 'add' of bool data is not defined");
  return std::vector<TensorType>{ty(op, 0)};
}

Rule nllLoss(const Op& op) {
  TRY(expectFloat(op, 0));
  const TensorType& in = ty(op, 0);
  TRY(checkNllOperands(op, in.shape, in.dtype, 1, 2));
  auto red = nllReduction(op);
  if (!red)
    return red.takeError();
  if (*red == lwrt::NllReduction::None)
    return std::vector<TensorType>{TensorType(in.dtype, targetShapeOf(in.shape))};
  return std::vector<TensorType>{TensorType(in.dtype, {})};
}

Rule nllLossGrad(const Op& op) {
  TRY(expectFloat(op, 0));
  const auto& in = op.getInts("input_shape");
  for (int64_t d : in)
    if (d < 0)
      return fail("attribute 'input_shape' has a negative dim {0}", d);
  Shape input(in);
  DType dtype = ty(op, 0).dtype;
  TRY(checkNllOperands(op, input, dtype, 1, 2));
  auto red = nllReduction(op);
  if (!red)
    return red.takeError();
  Shape dloss = *red == lwrt::NllReduction::None ? targetShapeOf(input) : Shape{};
  if (ty(op, 0).shape != dloss)
    return fail("dloss must be {0}, got {1}", TensorType(dtype, dloss).str(), ty(op, 0).str());
  return std::vector<TensorType>{TensorType(dtype, input)};
}

} // namespace shape

//===--- Gradient rules ---------------------------------------------------===//

namespace grad {

namespace {

/// Zeros of `dtype` and `shape` (a scalar expanded).
llvm::Expected<Value*> zerosOf(GradContext& c, DType dtype, const Shape& shape) {
  return c.emit(OpKind::Expand, {c.scalar(0.0, dtype)}, {{"shape", Attribute(shape)}});
}

} // namespace

/// d data = zeros with dy added where the gather read (a scatter-add).
Error gatherElements(GradContext& c) {
  if (!c.need(0))
    return ok();
  const TensorType& data = c.x(0)->type();
  TRY_V(zeros, zerosOf(c, data.dtype, data.shape));
  TRY_V(dx, c.emit(OpKind::ScatterElements, {zeros, c.x(1), c.dy()},
                   {{"axis", Attribute(c.op.getInt("axis"))}, {"reduction", Attribute("add")}}));
  c.dxs[0] = dx;
  return ok();
}

/// d data = dy with the written positions zeroed (reduction none) or dy
/// (add); d updates = dy gathered where the updates went.
Error scatterElements(GradContext& c) {
  int64_t axis = c.op.getInt("axis");
  bool add = c.op.getString("reduction") == "add";
  if (c.need(0)) {
    if (add) {
      c.dxs[0] = c.dy();
    } else {
      const TensorType& upd = c.x(2)->type();
      TRY_V(zeros, zerosOf(c, upd.dtype, upd.shape));
      TRY_V(dx, c.emit(OpKind::ScatterElements, {c.dy(), c.x(1), zeros},
                       {{"axis", Attribute(axis)}, {"reduction", Attribute("none")}}));
      c.dxs[0] = dx;
    }
  }
  if (c.need(2)) {
    TRY_V(du, c.emit(OpKind::GatherElements, {c.dy(), c.x(1)}, {{"axis", Attribute(axis)}}));
    c.dxs[2] = du;
  }
  return ok();
}

/// d input = -weight[t] (dloss, or dloss / the total weight for a mean) at
/// each target's class, 0 elsewhere. The class weights take no gradient.
Error nllLoss(GradContext& c) {
  if (c.need(2))
    return makeError("the class weights of nll_loss take no gradient (give them as a constant)");
  if (!c.need(0))
    return ok();
  std::vector<Value*> operands{c.dy(), c.x(1)};
  if (c.op.numOperands() > 2)
    operands.push_back(c.x(2));
  TRY_V(dx, c.emit(OpKind::NllLossGrad, operands,
                   {{"reduction", Attribute(c.op.getString("reduction"))},
                    {"ignore_index", Attribute(c.op.getInt("ignore_index"))},
                    {"input_shape", Attribute(c.x(0)->type().shape)}}));
  c.dxs[0] = dx;
  return ok();
}

} // namespace grad

//===--- Parallel rules ---------------------------------------------------===//

namespace par {

/// Any dim but the axis where data (and the scatter's result) and indices
/// agree: a shard of indices reads and writes the same shard of data.
std::optional<SplitPlan> gatherElements(const Op& op, int64_t dim) {
  auto axis = elementsAxis(op);
  if (!axis) {
    llvm::consumeError(axis.takeError());
    return std::nullopt;
  }
  if (dim < 0 || dim >= ty(op, 0).rank() || dim == *axis ||
      ty(op, 0).shape[dim] != ty(op, 1).shape[dim])
    return std::nullopt;
  return SplitPlan{
      std::vector<int64_t>(op.numOperands(), dim), {dim}, SplitPlan::Partial::None, {}};
}

/// By sample, with the class weights whole: per target (reduction none),
/// partial sums (sum), or partial means (mean, without class weights). The
/// gradient of a mean stays whole (materialize splits the forward, and
/// autodiff differentiates its pieces).
std::optional<SplitPlan> nllLoss(const Op& op, int64_t dim) {
  if (dim != 0)
    return std::nullopt;
  const std::string& r = op.getString("reduction");
  bool forward = op.kind() == OpKind::NllLoss;
  std::vector<int64_t> operands{0, 0};
  if (op.numOperands() > 2)
    operands.push_back(-1);
  if (r == "none")
    return SplitPlan{operands, {0}, SplitPlan::Partial::None, {}};
  // The mean over the targets: by share of the samples, or of the targets
  // that count where some are ignored (passes/Materialize.cpp counts them);
  // with class weights the whole batch's weight total is not split here.
  if (r == "mean" && forward && op.numOperands() == 2)
    return SplitPlan{operands,
                     {-1},
                     op.hasAttr("ignore_index") ? SplitPlan::Partial::LabelMean
                                                : SplitPlan::Partial::Mean,
                     {}};
  if (r != "sum")
    return std::nullopt;
  if (forward)
    return SplitPlan{operands, {-1}, SplitPlan::Partial::Sum, {}};
  operands[0] = -1; // the scalar dloss on every device
  return SplitPlan{operands, {0}, SplitPlan::Partial::None, {}};
}

} // namespace par

//===--- Cost rules -------------------------------------------------------===//

namespace cost {

/// A copy of data, then one read and write per update.
double scatterElements(const Op& op, const CostContext&) {
  return static_cast<double>(op.operand(2)->type().numElements());
}

/// Two per target (a product and a sum); the gradient also writes every
/// input element.
double nllLoss(const Op& op, const CostContext&) {
  double targets = static_cast<double>(op.operand(1)->type().numElements());
  if (op.kind() == OpKind::NllLossGrad)
    return targets + static_cast<double>(op.result()->type().numElements());
  return 2.0 * targets;
}

} // namespace cost

} // namespace lwcc
