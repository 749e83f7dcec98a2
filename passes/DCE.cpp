//===- DCE.cpp - Dead-code elimination ------------------------------------===//
#include "ir/Module.h"
#include "passes/Pass.h"

namespace lwcc {

namespace {

/// Removes dead ops and params:
///  1. Walk the ops from last to first; erase each op none of whose results
///     has a use (graph outputs count as uses). Walking backwards frees a
///     whole dead chain in one sweep, since erasing an op drops the uses of
///     its operands before their definitions are visited.
///  2. Erase params that nothing uses. Inputs stay: they are the graph's
///     interface with the data loader.
/// Ops without results (assign) exist for their effect and always stay;
/// every other op is free of side effects.
class DCEPass : public Pass {
public:
  std::string_view name() const override { return "dce"; }
  llvm::Error run(Graph& g, PassContext&) override {
    std::vector<Op*> order;
    for (auto& op : g.ops())
      order.push_back(op.get());
    for (auto it = order.rbegin(); it != order.rend(); ++it)
      if ((*it)->numResults() > 0 && !(*it)->hasUsedResults())
        g.eraseOp(*it);
    g.eraseUnusedParams();
    return llvm::Error::success();
  }
};

} // namespace

std::unique_ptr<Pass> createDCEPass() { return std::make_unique<DCEPass>(); }

llvm::Error eliminateDeadCode(Module& m) {
  PassContext ctx;
  if (llvm::Error e = createDCEPass()->run(*m.graph, ctx))
    return e;
  for (auto it = m.weights.begin(); it != m.weights.end();) {
    bool used = false;
    for (const auto& p : m.graph->params())
      used |= p->paramName() == it->first;
    it = used ? std::next(it) : m.weights.erase(it);
  }
  return llvm::Error::success();
}

} // namespace lwcc
