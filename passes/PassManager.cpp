//===- PassManager.cpp - Registry and pipeline runner ---------------------===//
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "passes/Pass.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>

namespace lwcc {

namespace {
/// Adapts an option-less factory to the registry's signature.
template <std::unique_ptr<Pass> (*Create)()>
llvm::Expected<std::unique_ptr<Pass>> withoutOptions(std::string_view options) {
  if (!options.empty()) {
    auto pass = Create();
    return makeError("pass '" + std::string(pass->name()) + "' takes no options (got '" +
                     std::string(options) + "')");
  }
  return Create();
}
} // namespace

const std::vector<PassInfo>& allPasses() {
  static const std::vector<PassInfo> passes = {
#define PASS(NAME, CREATE, DESC) PassInfo{NAME, DESC, &withoutOptions<&CREATE>, false},
#define PASS_WITH_OPTIONS(NAME, CREATE, DESC) PassInfo{NAME, DESC, &CREATE, true},
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

PassContext PassContext::printingTo(llvm::raw_ostream& os) {
  PassContext ctx;
  ctx.diag = [&os](Severity sev, const Location& loc, const std::string& msg) {
    printDiagnostic(os, sev, loc, msg);
  };
  return ctx;
}

llvm::Expected<PassPipeline> buildPipeline(const std::vector<std::string>& passNames) {
  PassPipeline pipeline;
  for (const std::string& entry : passNames) {
    size_t eq = entry.find('=');
    std::string name = entry.substr(0, eq);
    std::string options = eq == std::string::npos ? "" : entry.substr(eq + 1);
    const PassInfo* info = lookupPass(name);
    if (!info)
      return makeError("unknown pass '" + name + "'");
    auto pass = info->create(options);
    if (!pass)
      return pass.takeError();
    pipeline.push_back(std::move(*pass));
  }
  return pipeline;
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
