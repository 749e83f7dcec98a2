//===- PassManager.cpp - Registry and pipeline runner ---------------------===//
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "llvm/Support/raw_ostream.h"
#include "passes/Pass.h"

namespace lwcc {

const std::vector<PassInfo>& allPasses() {
  static const std::vector<PassInfo> passes = {
#define PASS(NAME, CREATE, DESC) PassInfo{NAME, DESC, &CREATE},
#include "passes/Passes.def"
#undef PASS
  };
  return passes;
}

const PassInfo* lookupPass(std::string_view name) {
  for (const PassInfo& p : allPasses())
    if (p.name == name)
      return &p;
  return nullptr;
}

llvm::Expected<PassPipeline> buildPipeline(const std::vector<std::string>& passNames) {
  PassPipeline pipeline;
  for (const std::string& name : passNames) {
    const PassInfo* info = lookupPass(name);
    if (!info)
      return makeError("unknown pass '" + name + "'");
    pipeline.push_back(info->create());
  }
  return pipeline;
}

llvm::Error runPipeline(Graph& g, PassPipeline& pipeline, PassContext& ctx,
                        const PassRunOptions& opts) {
  for (auto& pass : pipeline) {
    if (llvm::Error e = pass->run(g, ctx))
      return e;
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
