//===- TrainShapeRules.cpp - Shape rules of the training ops --------------===//
//
// Losses, backward ops, randomness and optimizer updates (see the second
// half of Ops.def). Backward ops whose result shape cannot be derived from
// their operands carry it as an attribute (input_shape, filter_shape).
//
//===----------------------------------------------------------------------===//
#include "ir/IR.h"
#include "ir/RuleHelpers.h"

#include "llvm/Support/FormatVariadic.h"

namespace lwcc::shape {

namespace {

using rules::expectFloat;
using rules::fail;
using rules::ty;

llvm::Error expectSameType(const Op& op, unsigned i, unsigned j) {
  if (ty(op, i) != ty(op, j))
    return fail("operands #{0} and #{1} must have the same type, got {2} and {3}", i, j,
                ty(op, i).str(), ty(op, j).str());
  return llvm::Error::success();
}

/// An optimizer update's gradient (operand #1) beside its weight (operand
/// #0): the weight's type, or bf16 or fp16 of its shape beside a float32
/// weight (mixed precision's gradient, widened as the update reads it).
llvm::Error expectUpdateGrad(const Op& op) {
  const TensorType &w = ty(op, 0), &g = ty(op, 1);
  if (w == g || (w.dtype == DType::F32 && (g.dtype == DType::BF16 || g.dtype == DType::F16) &&
                 w.shape == g.shape))
    return llvm::Error::success();
  return fail("the gradient (operand #1) must have the weight's type, or be bf16 or fp16 of its "
              "shape beside a f32 weight; got {0} beside {1}",
              g.str(), w.str());
}

/// An update's optional operand #i, `finite`: a bool scalar.
llvm::Error expectFlag(const Op& op, unsigned i) {
  if (op.numOperands() > i && ty(op, i) != TensorType(DType::Bool, {}))
    return fail("operand #{0} (finite) must be a bool scalar, got {1}", i, ty(op, i).str());
  return llvm::Error::success();
}

llvm::Error expectScalar(const Op& op, unsigned i, bool isFloatScalar) {
  if (ty(op, i).rank() != 0 || isFloat(ty(op, i).dtype) != isFloatScalar)
    return fail("operand #{0} must be a{1} scalar, got {2}", i,
                isFloatScalar ? " float" : "n integer", ty(op, i).str());
  return llvm::Error::success();
}

#define TRY(expr)                                                                                  \
  if (llvm::Error e = (expr))                                                                      \
  return e

/// A shape attribute, checked for negative dims.
llvm::Expected<Shape> shapeAttr(const Op& op, const char* name) {
  const auto& s = op.getInts(name);
  for (int64_t d : s)
    if (d < 0)
      return fail("attribute '{0}' has a negative dim {1}", name, d);
  return Shape(s);
}

} // namespace

Rule softmaxXent(const Op& op) {
  TRY(expectFloat(op, 0));
  if (ty(op, 0).rank() < 2)
    return fail("logits must be [N, K] or [N, ..., K], got {0}", ty(op, 0).str());
  Shape leading(ty(op, 0).shape.begin(), ty(op, 0).shape.end() - 1);
  if (!isInteger(ty(op, 1).dtype) || ty(op, 1).shape != leading)
    return fail("labels must be integers of shape {0}, got {1}", shapeStr(leading),
                ty(op, 1).str());
  double e = op.getFloat("label_smoothing");
  if (!(e >= 0 && e <= 1))
    return fail("label_smoothing must be in [0, 1], got {0}", e);
  return std::vector<TensorType>{TensorType(ty(op, 0).dtype, {})};
}

Rule softmaxXentGrad(const Op& op) {
  auto loss = softmaxXent(op);
  if (!loss)
    return loss.takeError();
  TRY(expectScalar(op, 2, true));
  return std::vector<TensorType>{ty(op, 0)};
}

Rule mseLoss(const Op& op) {
  TRY(expectFloat(op, 0));
  TRY(expectSameType(op, 0, 1));
  return std::vector<TensorType>{TensorType(ty(op, 0).dtype, {})};
}

Rule mseLossGrad(const Op& op) {
  TRY(expectFloat(op, 0));
  TRY(expectSameType(op, 0, 1));
  TRY(expectScalar(op, 2, true));
  return std::vector<TensorType>{ty(op, 0)};
}

Rule conv2dGradInput(const Op& op) {
  // (dy, w) -> dx of shape input_shape; checked by running the forward rule.
  auto in = shapeAttr(op, "input_shape");
  if (!in)
    return in.takeError();
  if (in->size() != 4 || ty(op, 0).rank() != 4 || ty(op, 1).rank() != 4)
    return fail("expects 4-D dy, w and input_shape");
  const Shape& w = ty(op, 1).shape;
  const auto& st = op.getInts("strides");
  const auto& pd = op.getInts("pads");
  const auto& dl = op.getInts("dilations");
  if (st.size() != 2 || pd.size() != 4 || dl.size() != 2)
    return fail("strides, pads and dilations must have 2, 4 and 2 values");
  int64_t group = op.getInt("group");
  if (group < 1 || w[1] * group != (*in)[1] || w[0] % group != 0)
    return fail("filter {0} does not fit input {1} with group {2}", shapeStr(w), shapeStr(*in),
                group);
  Shape y = {(*in)[0], w[0], 0, 0};
  for (int i = 0; i < 2; ++i) {
    auto n = windowOutput((*in)[2 + i], w[2 + i], st[i], pd[i], pd[2 + i], dl[i], false);
    if (!n)
      return n.takeError();
    y[2 + i] = *n;
  }
  if (ty(op, 0).shape != y)
    return fail("dy {0} is not the output shape {1} of input {2}", ty(op, 0).str(), shapeStr(y),
                shapeStr(*in));
  return std::vector<TensorType>{TensorType(ty(op, 0).dtype, *in)};
}

Rule conv2dGradFilter(const Op& op) {
  // (x, dy) -> dw of shape filter_shape.
  auto w = shapeAttr(op, "filter_shape");
  if (!w)
    return w.takeError();
  if (w->size() != 4 || ty(op, 0).rank() != 4 || ty(op, 1).rank() != 4)
    return fail("expects 4-D x, dy and filter_shape");
  const Shape& x = ty(op, 0).shape;
  int64_t group = op.getInt("group");
  if (group < 1 || (*w)[1] * group != x[1] || (*w)[0] != ty(op, 1).shape[1] || (*w)[0] % group != 0)
    return fail("filter_shape {0} does not fit x {1}, dy {2} with group {3}", shapeStr(*w),
                shapeStr(x), ty(op, 1).str(), group);
  return std::vector<TensorType>{TensorType(ty(op, 0).dtype, *w)};
}

Rule poolGradFromInput(const Op& op) {
  // (x, dy) -> dx like x.
  TRY(expectFloat(op, 0));
  if (ty(op, 0).rank() != 4 || ty(op, 1).rank() != 4)
    return fail("expects 4-D x and dy");
  return std::vector<TensorType>{ty(op, 0)};
}

Rule poolGradFromShape(const Op& op) {
  // (dy) -> dx of shape input_shape.
  TRY(expectFloat(op, 0));
  auto in = shapeAttr(op, "input_shape");
  if (!in)
    return in.takeError();
  if (in->size() != 4 || ty(op, 0).rank() != 4)
    return fail("expects 4-D dy and input_shape");
  return std::vector<TensorType>{TensorType(ty(op, 0).dtype, *in)};
}

Rule elementwiseGrad(const Op& op) {
  // (x or y, dy) -> dx, all of one type.
  TRY(expectFloat(op, 0));
  TRY(expectSameType(op, 0, op.numOperands() - 1));
  return std::vector<TensorType>{ty(op, op.numOperands() - 1)};
}

Rule batchNormTrain(const Op& op) {
  // (x, scale, bias) -> (y, mean[C], var[C]).
  TRY(expectFloat(op, 0));
  if (ty(op, 0).rank() < 2)
    return fail("operand #0 must have rank >= 2 (N, C, ...), got {0}", ty(op, 0).str());
  // A bf16 or fp16 x: float32 scale, bias and statistics.
  TensorType c(channelDType(ty(op, 0).dtype), {ty(op, 0).shape[1]});
  for (unsigned i = 1; i < 3; ++i)
    if (ty(op, i) != c)
      return fail("operand #{0} must be {1}, got {2}", i, c.str(), ty(op, i).str());
  if (!(op.getFloat("epsilon") > 0))
    return fail("attribute 'epsilon' must be > 0");
  return std::vector<TensorType>{ty(op, 0), c, c};
}

Rule batchNormGrad(const Op& op) {
  // (x, scale, mean, var, dy) -> (dx, dscale, dbias).
  TRY(expectFloat(op, 0));
  if (ty(op, 0).rank() < 2)
    return fail("operand #0 must have rank >= 2 (N, C, ...), got {0}", ty(op, 0).str());
  TensorType c(channelDType(ty(op, 0).dtype), {ty(op, 0).shape[1]});
  for (unsigned i = 1; i < 4; ++i)
    if (ty(op, i) != c)
      return fail("operand #{0} must be {1}, got {2}", i, c.str(), ty(op, i).str());
  TRY(expectSameType(op, 0, 4));
  return std::vector<TensorType>{ty(op, 0), c, c};
}

Rule sliceGrad(const Op& op) {
  auto in = shapeAttr(op, "input_shape");
  if (!in)
    return in.takeError();
  // dy must have the shape the forward slice gives for input_shape.
  const auto& starts = op.getInts("starts");
  const auto& ends = op.getInts("ends");
  int64_t rank = static_cast<int64_t>(in->size());
  if (ends.size() != starts.size() || ty(op, 0).rank() != rank)
    return fail("dy {0} and input_shape {1} do not fit the slice", ty(op, 0).str(), shapeStr(*in));
  Shape out = *in;
  for (size_t k = 0; k < starts.size(); ++k) {
    int64_t axis = op.hasAttr("axes") ? op.getInts("axes")[k] : static_cast<int64_t>(k);
    int64_t step = op.hasAttr("steps") ? op.getInts("steps")[k] : 1;
    if (axis < 0)
      axis += rank;
    if (axis < 0 || axis >= rank || step == 0)
      return fail("slice axis {0} or step {1} is invalid for input_shape {2}", axis, step,
                  shapeStr(*in));
    out[axis] = resolveSlice((*in)[axis], starts[k], ends[k], step).count;
  }
  if (out != ty(op, 0).shape)
    return fail("dy {0} is not the slice's output shape {1}", ty(op, 0).str(), shapeStr(out));
  return std::vector<TensorType>{TensorType(ty(op, 0).dtype, *in)};
}

Rule gatherGrad(const Op& op) {
  // (indices, dy) -> d data of shape input_shape.
  if (!isInteger(ty(op, 0).dtype))
    return fail("indices must be integers, got {0}", ty(op, 0).str());
  TRY(expectFloat(op, 1));
  auto in = shapeAttr(op, "input_shape");
  if (!in)
    return in.takeError();
  int64_t rank = static_cast<int64_t>(in->size()), axis = op.getInt("axis");
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis >= rank)
    return fail("axis {0} is out of range for input_shape {1}", op.getInt("axis"), shapeStr(*in));
  Shape out(in->begin(), in->begin() + axis);
  out.insert(out.end(), ty(op, 0).shape.begin(), ty(op, 0).shape.end());
  out.insert(out.end(), in->begin() + axis + 1, in->end());
  if (out != ty(op, 1).shape)
    return fail("dy {0} is not the gather's output shape {1}", ty(op, 1).str(), shapeStr(out));
  return std::vector<TensorType>{TensorType(ty(op, 1).dtype, *in)};
}

Rule dropoutMask(const Op& op) {
  // (step) -> mask of 0 and 1/(1-ratio).
  TRY(expectScalar(op, 0, false));
  double r = op.getFloat("ratio");
  if (!(r >= 0 && r < 1))
    return fail("attribute 'ratio' must be in [0, 1), got {0}", r);
  auto shape = shapeAttr(op, "shape");
  if (!shape)
    return shape.takeError();
  if (op.hasAttr("whole_shape") != op.hasAttr("offsets"))
    return fail("attributes 'whole_shape' and 'offsets' go together");
  if (op.hasAttr("whole_shape")) {
    const auto &whole = op.getInts("whole_shape"), &off = op.getInts("offsets");
    if (whole.size() != shape->size() || off.size() != shape->size())
      return fail("'whole_shape' and 'offsets' need {0} values each", shape->size());
    for (size_t d = 0; d < whole.size(); ++d)
      if (off[d] < 0 || off[d] + (*shape)[d] > whole[d])
        return fail("the shard at offset {0} of dim {1} does not fit the whole size {2}", off[d], d,
                    whole[d]);
  }
  std::optional<DType> dt = parseDType(op.getString("dtype"));
  if (!dt || !isFloat(*dt))
    return fail("attribute 'dtype' must name a float type, got \"{0}\"", op.getString("dtype"));
  return std::vector<TensorType>{TensorType(*dt, *shape)};
}

Rule sgdUpdate(const Op& op) {
  // (w, g, m, lr[, finite]) -> (w', m').
  TRY(expectFloat(op, 0));
  TRY(expectUpdateGrad(op));
  TRY(expectSameType(op, 0, 2));
  TRY(expectScalar(op, 3, true));
  TRY(expectFlag(op, 4));
  return std::vector<TensorType>{ty(op, 0), ty(op, 0)};
}

Rule adamUpdate(const Op& op) {
  // (w, g, m, v, lr, step) -> (w', m', v').
  TRY(expectFloat(op, 0));
  TRY(expectUpdateGrad(op));
  for (unsigned i = 2; i < 4; ++i)
    TRY(expectSameType(op, 0, i));
  TRY(expectScalar(op, 4, true));
  TRY(expectScalar(op, 5, false));
  TRY(expectFlag(op, 6));
  return std::vector<TensorType>{ty(op, 0), ty(op, 0), ty(op, 0)};
}

Rule lrSchedule(const Op& op) {
  TRY(expectScalar(op, 0, false));
  const std::string& kind = op.getString("kind");
  if (kind != "constant" && kind != "step" && kind != "cosine")
    return fail("attribute 'kind' must be \"constant\", \"step\" or \"cosine\", got \"{0}\"", kind);
  if (op.getInt("warmup_steps") < 0)
    return fail("attribute 'warmup_steps' must be >= 0");
  if (kind == "step" && op.getInt("step_size") < 1)
    return fail("a step schedule needs 'step_size' >= 1");
  if (kind == "cosine" && op.getInt("total_steps") < 1)
    return fail("a cosine schedule needs 'total_steps' >= 1");
  return std::vector<TensorType>{TensorType(DType::F32, {})};
}

Rule allFinite(const Op& op) {
  for (unsigned i = 0; i < op.numOperands(); ++i)
    if (!isFloat(op.operand(i)->type().dtype))
      return fail("operand #{0} must be a float tensor", i);
  return std::vector<TensorType>{TensorType(DType::Bool, {})};
}

Rule assign(const Op& op) {
  if (op.operand(0)->kind() != ValueKind::Param)
    return fail("the target (operand #0) must be a param");
  TRY(expectSameType(op, 0, 1));
  return std::vector<TensorType>{};
}

Rule noResults(const Op&) { return std::vector<TensorType>{}; }

Rule layerNormGrad(const Op& op) {
  // (x, scale, mean, inv_std_dev, dy) -> (dx, dscale, dbias).
  auto t = layerNormTypes(ty(op, 0), op.getInt("axis"));
  if (!t)
    return t.takeError();
  if (ty(op, 1) != t->normalized)
    return fail("scale (operand #1) must be {0}, got {1}", t->normalized.str(), ty(op, 1).str());
  for (unsigned i = 2; i < 4; ++i)
    if (ty(op, i) != t->stat)
      return fail("operand #{0} must be {1}, got {2}", i, t->stat.str(), ty(op, i).str());
  TRY(expectSameType(op, 0, 4));
  return std::vector<TensorType>{ty(op, 0), t->normalized, t->normalized};
}

Rule gatherNdGrad(const Op& op) {
  // (indices, dy) -> d data of shape input_shape.
  if (ty(op, 0).dtype != DType::I64)
    return fail("indices must be i64, got {0}", ty(op, 0).str());
  TRY(expectFloat(op, 1));
  auto in = shapeAttr(op, "input_shape");
  if (!in)
    return in.takeError();
  auto out = gatherNdShape(*in, ty(op, 0).shape, op.getInt("batch_dims"));
  if (!out)
    return out.takeError();
  if (*out != ty(op, 1).shape)
    return fail("dy {0} is not the gather_nd's output shape {1}", ty(op, 1).str(), shapeStr(*out));
  return std::vector<TensorType>{TensorType(ty(op, 1).dtype, *in)};
}

} // namespace lwcc::shape
