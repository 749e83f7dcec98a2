//===- Verify.cpp - The verifier as a pass --------------------------------===//
#include "ir/Verifier.h"
#include "passes/Pass.h"

namespace lwcc {

namespace {
class VerifyPass : public Pass {
public:
  std::string_view name() const override { return "verify"; }
  llvm::Error run(Graph& g, PassContext&) override { return verifyGraph(g); }
};
} // namespace

std::unique_ptr<Pass> createVerifyPass() { return std::make_unique<VerifyPass>(); }

} // namespace lwcc
