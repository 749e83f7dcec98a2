//===- TrainMode.cpp - The training form of dropout and batch norm --------===//
#include "passes/Pass.h"
#include "passes/PassOptions.h"
#include "passes/TrainingSupport.h"

namespace lwcc {

namespace {

/// Rewrites the ops whose training semantics differ from inference:
///  1. dropout(x) -> mul(x, dropout_mask(step)): the mask comes from a
///     counter-based RNG keyed by (seed, step, element), so forward and
///     backward use the same mask and a resumed run draws the same masks.
///     Each dropout gets its own seed (base seed + its index).
///  2. batch_norm(x, scale, bias, mean, var) -> batch_norm_train(x, scale,
///     bias) using the batch statistics; the running statistics (params)
///     are updated by assign ops at the end of the step: running =
///     running * momentum + batch * (1 - momentum), as ONNX defines it. The
///     batch variance is the unbiased one, times n/(n-1) for n values per
///     channel (a multiply by that constant of its own, which the
///     micro-batch pass finds), as PyTorch updates it (bn_running_var=unbiased, the
///     default), or the population variance batch norm normalizes with, as
///     ONNX's reference does (bn_running_var=biased). A batch norm whose
///     mean and variance are computed in the graph, not params, has no
///     running statistics, or whose running statistics are frozen (the
///     freeze pass's bn=1), stays as it is.
class TrainModePass : public Pass {
public:
  explicit TrainModePass(bool unbiasedVar) : unbiasedVar_(unbiasedVar) {}
  std::string_view name() const override { return "train-mode"; }

  llvm::Error run(Graph& g, PassContext&) override {
    std::vector<Op*> work;
    for (auto& op : g.ops())
      if (op->kind() == OpKind::Dropout || op->kind() == OpKind::BatchNorm)
        work.push_back(op.get());
    int64_t dropoutIndex = 0;
    for (Op* op : work) {
      Builder b(g);
      b.setInsertionPointBefore(op);
      b.setLoc(op->loc());
      if (op->kind() == OpKind::Dropout) {
        if (llvm::Error e = rewriteDropout(g, b, op, dropoutIndex++))
          return e;
      } else if (llvm::Error e = rewriteBatchNorm(g, b, op, unbiasedVar_)) {
        return e;
      }
    }
    return llvm::Error::success();
  }

private:
  bool unbiasedVar_;

  static llvm::Error rewriteDropout(Graph& g, Builder& b, Op* op, int64_t index) {
    Value* x = op->operand(0);
    double ratio = op->getFloat("ratio");
    Value* replacement = x;
    if (ratio > 0) {
      Value* step = getOrCreateStepParam(g);
      auto mask = b.createInferred(OpKind::DropoutMask, {step},
                                   {{"ratio", Attribute(ratio)},
                                    {"seed", Attribute(index)},
                                    {"shape", Attribute(x->type().shape)},
                                    {"dtype", Attribute(std::string(dtypeName(x->type().dtype)))}});
      if (!mask)
        return mask.takeError();
      auto mul = b.createInferred(OpKind::Mul, {x, (*mask)->result()});
      if (!mul)
        return mul.takeError();
      replacement = (*mul)->result();
    }
    std::string name = op->result()->name();
    op->result()->replaceAllUsesWith(replacement);
    g.eraseOp(op);
    if (replacement != x)
      replacement->setName(name);
    return llvm::Error::success();
  }

  static llvm::Error rewriteBatchNorm(Graph& g, Builder& b, Op* op, bool unbiasedVar) {
    Value* runMean = op->operand(3);
    Value* runVar = op->operand(4);
    // Statistics the graph computes from its data (F.batch_norm without
    // running statistics): nothing to update; the op stays as it is,
    // differentiable. Constant statistics are refused below, as params'.
    auto computed = [](Value* v) {
      return v->kind() != ValueKind::Param && v->definingOp() &&
             v->definingOp()->kind() != OpKind::Constant;
    };
    if (computed(runMean) && computed(runVar))
      return llvm::Error::success();
    // Frozen running statistics (freeze's bn=1): the batch norm stays in
    // its inference form, normalizing by them.
    if (runMean->frozen() && runVar->frozen())
      return llvm::Error::success();
    if (runMean->kind() != ValueKind::Param || runVar->kind() != ValueKind::Param)
      return op->emitError("the running mean and variance must be params to be updated in "
                           "training");
    // Values per channel: every element of x but the channel dim's.
    const TensorType& xt = op->operand(0)->type();
    int64_t perChannel = xt.rank() >= 2 && xt.shape[1] > 0 ? xt.numElements() / xt.shape[1] : 0;
    double varScale = 1.0;
    if (unbiasedVar) {
      if (perChannel < 2)
        return op->emitError(
            "batch norm in training sees " + std::to_string(perChannel) +
            " value per channel, too few for the unbiased variance of its running update (as "
            "in PyTorch, which refuses it); use a larger batch, or --bn-running-var=biased");
      varScale = static_cast<double>(perChannel) / static_cast<double>(perChannel - 1);
    }
    auto bn =
        b.createInferred(OpKind::BatchNormTrain, {op->operand(0), op->operand(1), op->operand(2)},
                         {{"epsilon", Attribute(op->getFloat("epsilon"))}}, 3);
    if (!bn)
      return bn.takeError();
    double m = op->getFloat("momentum");
    DType t = runMean->type().dtype;
    auto scalar = [&](double v) {
      Op* c = b.create(OpKind::Constant, {}, {TensorType(t, {})});
      c->setAttr("value", Attribute(std::vector<double>{v}));
      return c->result();
    };
    Value* keep = scalar(m);
    Value* take = scalar(1.0 - m);
    for (unsigned k = 0; k < 2; ++k) {
      Value* running = k == 0 ? runMean : runVar;
      auto old = b.createInferred(OpKind::Mul, {running, keep});
      if (!old)
        return old.takeError();
      Value* stat = (*bn)->result(1 + k);
      if (k == 1 && varScale != 1.0) {
        // The unbiased variance, a multiply of its own: the micro-batch
        // pass gives each micro-batch its own n/(n-1).
        auto unbiased = b.createInferred(OpKind::Mul, {stat, scalar(varScale)});
        if (!unbiased)
          return unbiased.takeError();
        stat = (*unbiased)->result();
      }
      auto fresh = b.createInferred(OpKind::Mul, {stat, take});
      if (!fresh)
        return fresh.takeError();
      auto sum = b.createInferred(OpKind::Add, {(*old)->result(), (*fresh)->result()});
      if (!sum)
        return sum.takeError();
      appendAssign(g, running, (*sum)->result(), op->loc());
    }
    std::string name = op->result()->name();
    op->result()->replaceAllUsesWith((*bn)->result(0));
    g.eraseOp(op);
    (*bn)->result(0)->setName(name);
    return llvm::Error::success();
  }
};

} // namespace

llvm::Expected<std::unique_ptr<Pass>> createTrainModePass(std::string_view options) {
  auto opts = PassOptions::parse("train-mode", options, "bn_running_var", {"bn_running_var"});
  if (!opts)
    return opts.takeError();
  auto var = opts->getChoice("bn_running_var", "unbiased", {"unbiased", "biased"});
  if (!var)
    return var.takeError();
  return std::make_unique<TrainModePass>(*var == "unbiased");
}

} // namespace lwcc
