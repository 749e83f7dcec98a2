//===- Language.cpp - GatherElements, ScatterElements and the losses ------===//
//
// The ops that exported language models write beyond the CNN zoo's:
// GatherElements and ScatterElements (each an IR op), and the losses
// NegativeLogLikelihoodLoss (nll_loss) and SoftmaxCrossEntropyLoss
// (log_softmax over the class axis 1, then nll_loss), which a graph computes
// as its own loss (`lwcc --loss=none`). Class weights must be known at
// compile time: they are constants, not trained.
//
//===----------------------------------------------------------------------===//
#include "frontend/ops/Common.h"
#include "onnx/onnx_pb.h"

#include <limits>

namespace lwcc {

namespace {

using llvm::Error;

Error importGatherElements(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"axis"}));
  LWCC_TRY(data, ctx.requiredInput(0, "data"));
  LWCC_TRY(idx, ctx.requiredInput(1, "indices"));
  LWCC_TRY(axis, ctx.attrInt("axis", 0));
  LWCC_TRY(y, ctx.emit1(OpKind::GatherElements, {data, idx}, {attr("axis", axis)}));
  ctx.setOutput(0, y);
  return Error::success();
}

/// ScatterElements (opsets 11, 13, 16, 18): reduction none or add.
Error importScatterElements(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"axis", "reduction"}));
  LWCC_TRY(data, ctx.requiredInput(0, "data"));
  LWCC_TRY(idx, ctx.requiredInput(1, "indices"));
  LWCC_TRY(updates, ctx.requiredInput(2, "updates"));
  LWCC_TRY(axis, ctx.attrInt("axis", 0));
  LWCC_TRY(reduction, ctx.attrString("reduction", std::string("none")));
  if (reduction != "none" && reduction != "add")
    return ctx.error("reduction '" + reduction + "' is not supported (none, add)");
  LWCC_TRY(y, ctx.emit1(OpKind::ScatterElements, {data, idx, updates},
                        {attr("axis", axis), attr("reduction", reduction)}));
  ctx.setOutput(0, y);
  return Error::success();
}

/// The nll_loss attributes of a loss node: reduction (mean, sum, none) and
/// ignore_index when the node sets it.
llvm::Expected<std::vector<NamedAttr>> lossAttrs(ImportContext& ctx) {
  LWCC_TRY(reduction, ctx.attrString("reduction", std::string("mean")));
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    return ctx.error("reduction '" + reduction + "' is not supported (mean, sum, none)");
  std::vector<NamedAttr> attrs{attr("reduction", reduction)};
  if (ctx.hasAttr("ignore_index")) {
    LWCC_TRY(ignore, ctx.attrInt("ignore_index", std::nullopt));
    if (ignore == std::numeric_limits<int64_t>::min())
      return ctx.error("ignore_index " + std::to_string(ignore) + " is not supported");
    attrs.push_back(attr("ignore_index", ignore));
  }
  return attrs;
}

/// The nll_loss operands: input, target of integers, and the optional
/// class weights (input #2) as a constant.
llvm::Expected<std::vector<Value*>> lossOperands(ImportContext& ctx, Value* input,
                                                 const char* targetName) {
  LWCC_TRY(target, ctx.requiredInput(1, targetName));
  if (!isInteger(target->type().dtype))
    return ctx.error(std::string("input '") + targetName + "' must be integers, got " +
                     target->type().str());
  if (input->type().rank() < 2)
    return ctx.error("input must be [N, C] or [N, C, d1, ...], got " + input->type().str());
  std::vector<Value*> operands{input, target};
  if (Value* w = ctx.input(2)) {
    const Tensor* wv = ctx.constantValue(w);
    if (!wv)
      return ctx.error("the class weights must be known at compile time (an initializer or a "
                       "constant)");
    operands.push_back(ctx.constant(*wv));
  }
  return operands;
}

/// NegativeLogLikelihoodLoss (opsets 12, 13, 22): input [N, C, d...] of
/// log-probabilities, target [N, d...].
Error importNegativeLogLikelihoodLoss(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"reduction", "ignore_index"}));
  LWCC_TRY(input, ctx.requiredInput(0, "input"));
  if (!isFloat(input->type().dtype))
    return ctx.error("input 'input' must have a float element type, got " + input->type().str());
  LWCC_TRY(operands, lossOperands(ctx, input, "target"));
  LWCC_TRY(attrs, lossAttrs(ctx));
  LWCC_TRY(loss, ctx.emit1(OpKind::NllLoss, operands, std::move(attrs)));
  ctx.setOutput(0, loss);
  return Error::success();
}

/// SoftmaxCrossEntropyLoss (opsets 12, 13): log_softmax of the scores over
/// axis 1 (output #1, log_prob, when read), then nll_loss.
Error importSoftmaxCrossEntropyLoss(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"reduction", "ignore_index"}));
  LWCC_TRY(scores, ctx.requiredInput(0, "scores"));
  if (!isFloat(scores->type().dtype))
    return ctx.error("input 'scores' must have a float element type, got " + scores->type().str());
  if (scores->type().rank() < 2)
    return ctx.error("input 'scores' must be [N, C] or [N, C, d1, ...], got " +
                     scores->type().str());
  LWCC_TRY(logp, ctx.emit1(OpKind::LogSoftmax, {scores}, {attr("axis", int64_t{1})}));
  LWCC_TRY(operands, lossOperands(ctx, logp, "labels"));
  LWCC_TRY(attrs, lossAttrs(ctx));
  LWCC_TRY(loss, ctx.emit1(OpKind::NllLoss, operands, std::move(attrs)));
  ctx.setOutput(0, loss);
  if (ctx.hasOutput(1))
    ctx.setOutput(1, logp);
  return Error::success();
}

} // namespace

const std::vector<ImporterEntry>& languageImporters() {
  static const std::vector<ImporterEntry> entries = {
      {"GatherElements", 11, importGatherElements},
      {"ScatterElements", 11, importScatterElements},
      {"NegativeLogLikelihoodLoss", 12, importNegativeLogLikelihoodLoss},
      {"SoftmaxCrossEntropyLoss", 12, importSoftmaxCrossEntropyLoss},
  };
  return entries;
}

} // namespace lwcc
