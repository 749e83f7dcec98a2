//===- PassManager.cpp - The pipeline runner -----------------------------===//
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "passes/Pass.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>

namespace lwcc {

PassContext PassContext::printingTo(llvm::raw_ostream& os) {
  PassContext ctx;
  ctx.diag = [&os](Severity sev, const Location& loc, const std::string& msg) {
    printDiagnostic(os, sev, loc, msg);
  };
  return ctx;
}

llvm::Error runPipeline(Graph& g, PassPipeline& pipeline, PassContext& ctx,
                        const PassRunOptions& opts) {
  for (auto& pass : pipeline) {
    auto start = std::chrono::steady_clock::now();
    if (llvm::Error e = pass->run(g, ctx))
      return e;
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (opts.timePasses)
      *opts.timePasses << llvm::formatv("pass-times: {0,-16} {1,10:f3} s  {2,8} ops after\n",
                                        pass->name(), seconds, g.ops().size());
    if (opts.afterPass)
      opts.afterPass(*pass, seconds);
    if (opts.verifyEach)
      if (llvm::Error e = verifyGraph(g))
        return llvm::joinErrors(
            makeError("the graph does not verify after pass '" + std::string(pass->name()) + "'"),
            std::move(e));
    if (opts.printAfterAll) {
      *opts.printAfterAll << "// ----- IR after " << pass->name() << " ----- //\n";
      printGraph(g, *opts.printAfterAll);
    }
  }
  return llvm::Error::success();
}

} // namespace lwcc
