//===- ShapeInfer.cpp - Recompute result types ----------------------------===//
#include "ir/Verifier.h"
#include "passes/Pass.h"

namespace lwcc {

namespace {

/// Recomputes every result type from the op table's shape rules:
///  1. Walk the ops in order, so that each op sees its operands' new types.
///  2. Check the op's structure (arity, attributes); run its shape rule.
///  3. Where an inferred type differs from the declared one, replace it and
///     report the change as a warning at the op.
/// A shape rule that fails (operands that no longer fit) is an error.
class ShapeInferPass : public Pass {
public:
  std::string_view name() const override { return "shape-infer"; }
  llvm::Error run(Graph& g, PassContext& ctx) override {
    for (auto& opPtr : g.ops()) {
      Op& op = *opPtr;
      if (llvm::Error e = verifyOpStructure(op))
        return e;
      auto types = op.info().shapeRule(op);
      if (!types)
        return op.emitError(llvm::toString(types.takeError()));
      for (unsigned i = 0; i < op.numResults(); ++i) {
        const TensorType& inferred = (*types)[i];
        if (op.result(i)->type() == inferred)
          continue;
        ctx.warn(op.loc(), op.describe() + ": result #" + std::to_string(i) + " type " +
                               op.result(i)->type().str() + " changed to " + inferred.str());
        op.result(i)->setType(inferred);
      }
    }
    return llvm::Error::success();
  }
};

} // namespace

std::unique_ptr<Pass> createShapeInferPass() { return std::make_unique<ShapeInferPass>(); }

} // namespace lwcc
