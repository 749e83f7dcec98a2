//===- Freeze.cpp - Frozen params for fine-tuning -------------------------===//
#include "passes/Pass.h"
#include "passes/PassOptions.h"
#include "passes/TrainingSupport.h"

#include <set>

namespace lwcc {

namespace {

/// Marks params frozen (options: params=GLOB;GLOB..., bn=0|1):
///  1. The candidates are the params training would update: float, not
///     zero-initialized state, not a batch norm's running statistics.
///  2. A candidate whose initializer name matches a pattern (`*` any run of
///     characters, `?` one) is frozen: autodiff gives it no gradient, so it
///     gets no all-reduce, no optimizer state and no update. A pattern that
///     matches no candidate is an error naming it.
///  3. bn=1: a batch norm whose scale and bias are both frozen gets its
///     running mean and variance frozen too; train-mode then keeps it in its
///     inference form (the running statistics used, not updated), as
///     PyTorch's module.eval() on a frozen batch norm does.
class FreezePass : public Pass {
public:
  FreezePass(std::vector<std::string> patterns, bool bn)
      : patterns_(std::move(patterns)), bn_(bn) {}
  std::string_view name() const override { return "freeze"; }

  llvm::Error run(Graph& g, PassContext&) override {
    std::set<const Value*> statistics;
    for (const auto& op : g.ops())
      if (op->kind() == OpKind::BatchNorm)
        for (unsigned i : {3u, 4u})
          if (op->operand(i)->kind() == ValueKind::Param)
            statistics.insert(op->operand(i));
    std::vector<bool> used(patterns_.size(), false);
    for (const auto& p : g.params()) {
      if (!isFloat(p->type().dtype) || p->zeroInit() || statistics.count(p.get()))
        continue;
      for (size_t i = 0; i < patterns_.size(); ++i)
        if (globMatch(patterns_[i], p->paramName())) {
          p->setFrozen(true);
          used[i] = true;
        }
    }
    for (size_t i = 0; i < patterns_.size(); ++i)
      if (!used[i])
        return makeError("freeze: the pattern '" + patterns_[i] +
                         "' matches no trainable parameter of graph @" + g.name());
    if (bn_)
      for (const auto& op : g.ops()) {
        if (op->kind() != OpKind::BatchNorm || !op->operand(1)->frozen() ||
            !op->operand(2)->frozen())
          continue;
        for (unsigned i : {3u, 4u})
          if (op->operand(i)->kind() == ValueKind::Param)
            op->operand(i)->setFrozen(true);
      }
    return llvm::Error::success();
  }

private:
  std::vector<std::string> patterns_;
  bool bn_;
};

} // namespace

llvm::Expected<std::unique_ptr<Pass>> createFreezePass(std::string_view options) {
  auto opts = PassOptions::parse("freeze", options, "params", {"params", "bn"});
  if (!opts)
    return opts.takeError();
  std::vector<std::string> patterns = splitPatterns(opts->getString("params", ""));
  auto bn = opts->getFlag("bn", false);
  if (!bn)
    return bn.takeError();
  if (patterns.empty())
    return makeError("freeze: needs params=PATTERN[;PATTERN...]");
  return std::make_unique<FreezePass>(std::move(patterns), *bn);
}

} // namespace lwcc
