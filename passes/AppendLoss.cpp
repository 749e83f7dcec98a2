//===- AppendLoss.cpp - Turn a model's output into a training loss --------===//
#include "passes/Pass.h"
#include "passes/PassOptions.h"
#include "passes/TrainingSupport.h"

#include <limits>
#include <optional>

namespace lwcc {

namespace {

/// Appends the loss (options: softmax-xent, the default, mse or none):
///  1. Take the graph's first output; further outputs are dropped.
///  2. softmax-xent: strip a trailing softmax or log_softmax over the last
///     axis, require logits [N, K] or [N, ..., K] (a language model's
///     [N, T, V]), add an i64 label input of their leading shape and
///     softmax_xent (mean over the labels; label_smoothing=E smooths the
///     target to (1-E)·onehot + E/K; ignore_index=I leaves out the labels
///     equal to I, and the mean is over the others; shift_labels=1 on
///     [N, T, ..., V] logits takes the logits at positions 0..T-2 against
///     the labels at 1..T-1: a causal LM's loss from labels equal to its
///     input ids, as Hugging Face computes it).
///     mse: add a target input of the output's type and mse_loss (mean).
///     none: the output must already be a float scalar.
///  3. The loss becomes the only output.
class AppendLossPass : public Pass {
public:
  AppendLossPass(std::string loss, double labelSmoothing, std::optional<int64_t> ignoreIndex,
                 bool shiftLabels)
      : loss_(std::move(loss)), labelSmoothing_(labelSmoothing), ignoreIndex_(ignoreIndex),
        shiftLabels_(shiftLabels) {}
  std::string_view name() const override { return "append-loss"; }

  llvm::Error run(Graph& g, PassContext& ctx) override {
    if (g.outputs().empty())
      return makeError("append-loss: graph @" + g.name() + " has no output");
    // A label input the model declares (and does not use) is taken as is.
    Value* declared = nullptr;
    for (const auto& in : g.inputs())
      if (in->role() == InputRole::Label) {
        if (declared || in->hasUses())
          return makeError(in->loc(), "append-loss: graph @" + g.name() +
                                          " already uses its label input '%" + in->name() + "'");
        declared = in.get();
      }
    auto labelInput = [&](const std::string& base, const TensorType& t) -> llvm::Expected<Value*> {
      if (!declared)
        return g.addInput(uniqueValueName(g, base), t, InputRole::Label);
      if (declared->type() != t)
        return makeError(declared->loc(), "append-loss: the label input '%" + declared->name() +
                                              "' is " + declared->type().str() + ", but " + loss_ +
                                              " needs " + t.str());
      return declared;
    };
    Value* out = g.outputs()[0];
    if (g.outputs().size() > 1)
      ctx.warn(out->loc(), "append-loss: graph @" + g.name() + " has " +
                               std::to_string(g.outputs().size()) +
                               " outputs; the loss is taken on the first");
    Builder b(g);
    Location loc;
    loc.name = "loss";
    b.setLoc(loc);
    Value* loss = nullptr;
    if (loss_ == "softmax-xent") {
      Value* logits = out;
      if (Op* def = out->definingOp();
          def && (def->kind() == OpKind::Softmax || def->kind() == OpKind::LogSoftmax)) {
        int64_t axis = def->getInt("axis"), rank = out->type().rank();
        if (axis == -1 || axis == rank - 1)
          logits = def->operand(0);
      }
      const TensorType& t = logits->type();
      if (t.rank() < 2 || !isFloat(t.dtype))
        return makeError(out->loc(), "append-loss: softmax-xent needs float logits [N, K] or "
                                     "[N, ..., K], but the output is " +
                                         t.str() + " (use the mse or none loss)");
      Shape leading(t.shape.begin(), t.shape.end() - 1);
      auto label = labelInput("label", TensorType(DType::I64, leading));
      if (!label)
        return label.takeError();
      Value* target = *label;
      if (shiftLabels_) {
        if (t.rank() < 3 || t.shape[1] < 2)
          return makeError(out->loc(), "append-loss: shift_labels needs logits [N, T, ..., V] "
                                       "with T >= 2, but the output is " +
                                           t.str());
        const int64_t steps = t.shape[1];
        auto cut = [&](Value* v, int64_t from, int64_t to) -> llvm::Expected<Value*> {
          auto op = b.createInferred(OpKind::Slice, {v},
                                     {{"starts", Attribute(std::vector<int64_t>{from})},
                                      {"ends", Attribute(std::vector<int64_t>{to})},
                                      {"axes", Attribute(std::vector<int64_t>{1})}});
          if (!op)
            return op.takeError();
          return (*op)->result();
        };
        auto before = cut(logits, 0, steps - 1);
        if (!before)
          return before.takeError();
        auto after = cut(target, 1, steps);
        if (!after)
          return after.takeError();
        logits = *before;
        target = *after;
      }
      std::vector<NamedAttr> attrs;
      if (labelSmoothing_ != 0)
        attrs.push_back({"label_smoothing", Attribute(labelSmoothing_)});
      if (ignoreIndex_)
        attrs.push_back({"ignore_index", Attribute(*ignoreIndex_)});
      auto op = b.createInferred(OpKind::SoftmaxXent, {logits, target}, std::move(attrs));
      if (!op)
        return op.takeError();
      loss = (*op)->result();
    } else if (loss_ == "mse") {
      if (!isFloat(out->type().dtype))
        return makeError(out->loc(),
                         "append-loss: mse needs a float output, got " + out->type().str());
      auto target = labelInput("target", out->type());
      if (!target)
        return target.takeError();
      auto op = b.createInferred(OpKind::MseLoss, {out, *target});
      if (!op)
        return op.takeError();
      loss = (*op)->result();
    } else {
      if (declared)
        return makeError(declared->loc(), "append-loss: the none loss takes no label input");
      if (out->type().rank() != 0 || !isFloat(out->type().dtype))
        return makeError(out->loc(),
                         "append-loss: the none loss needs a float scalar output, got " +
                             out->type().str());
      loss = out;
    }
    loss->setName(uniqueValueName(g, "loss"));
    g.clearOutputs();
    g.addOutput(loss);
    return llvm::Error::success();
  }

private:
  std::string loss_;
  double labelSmoothing_;
  std::optional<int64_t> ignoreIndex_;
  bool shiftLabels_;
};

} // namespace

llvm::Expected<std::unique_ptr<Pass>> createAppendLossPass(std::string_view options) {
  auto opts = PassOptions::parse("append-loss", options, "loss",
                                 {"loss", "label_smoothing", "ignore_index", "shift_labels"});
  if (!opts)
    return opts.takeError();
  auto loss = opts->getChoice("loss", "softmax-xent", {"softmax-xent", "mse", "none"});
  if (!loss)
    return loss.takeError();
  auto smoothing = opts->getFloat("label_smoothing", 0.0);
  if (!smoothing)
    return smoothing.takeError();
  if (!(*smoothing >= 0 && *smoothing <= 1))
    return makeError("append-loss: label_smoothing must be in [0, 1]");
  if (*smoothing != 0 && *loss != "softmax-xent")
    return makeError("append-loss: label_smoothing applies to the softmax-xent loss only");
  constexpr int64_t kNone = std::numeric_limits<int64_t>::min();
  auto ignore = opts->getInt("ignore_index", kNone);
  if (!ignore)
    return ignore.takeError();
  if (*ignore != kNone && *loss != "softmax-xent")
    return makeError("append-loss: ignore_index applies to the softmax-xent loss only");
  std::optional<int64_t> ignoreIndex;
  if (*ignore != kNone)
    ignoreIndex = *ignore;
  auto shift = opts->getFlag("shift_labels", false);
  if (!shift)
    return shift.takeError();
  if (*shift && *loss != "softmax-xent")
    return makeError("append-loss: shift_labels applies to the softmax-xent loss only");
  return std::make_unique<AppendLossPass>(*loss, *smoothing, ignoreIndex, *shift);
}

} // namespace lwcc
