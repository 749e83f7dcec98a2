//===- PassRegistry.cpp - Every pass by name ------------------------------===//
//
// The registry of lwcc's passes: passes/Passes.def's and the searches of
// plan/PlanPasses.def, by the names lwcc-opt and the pipelines use.
//
//===----------------------------------------------------------------------===//
#include "plan/Pipelines.h"

#include <algorithm>

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
#undef PASS_WITH_OPTIONS
  };
  static const std::vector<PassInfo> all = [] {
    // The searches go where a compile runs them: after the training
    // semantics and autodiff's helpers, before the micro-batches.
    static const std::vector<PassInfo> searches = {
#define PASS_WITH_OPTIONS(NAME, CREATE, DESC) PassInfo{NAME, DESC, &CREATE, true},
#include "plan/PlanPasses.def"
#undef PASS_WITH_OPTIONS
    };
    std::vector<PassInfo> out(passes.begin(), passes.end());
    auto at = std::find_if(out.begin(), out.end(),
                           [](const PassInfo& p) { return p.name == "microbatch"; });
    out.insert(at, searches.begin(), searches.end());
    return out;
  }();
  return all;
}

const PassInfo* lookupPass(std::string_view name) {
  for (const PassInfo& p : allPasses())
    if (p.name == name)
      return &p;
  return nullptr;
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

} // namespace lwcc
