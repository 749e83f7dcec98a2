//===- Pass.h - The pass interface and pass manager ------------*- C++ -*-===//
//
// A pass transforms or checks one Graph and signals failure with an
// llvm::Error located at the op it concerns. Each pass lives in its own file
// under passes/, exposes only its create function (declared here), and is
// listed once in Passes.def. The passes that search a plan live above, in
// plan/ (PlanPasses.def); the registry of both and the pipelines are there
// too (plan/Pipelines.h).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

namespace llvm {
class raw_ostream;
}

namespace lwcc {

struct MemoryPlanStats;

struct PassContext {
  /// Receives warnings and notes; errors travel as llvm::Error.
  DiagHandler diag;
  /// When set, the memory-plan pass leaves its statistics here (lwcc
  /// reports them) instead of noting them.
  MemoryPlanStats* memoryPlanStats = nullptr;
  /// A context whose diagnostics are printed to `os`.
  static PassContext printingTo(llvm::raw_ostream& os);
  void warn(const Location& loc, const std::string& msg) const {
    if (diag)
      diag(Severity::Warning, loc, msg);
  }
};

class Pass {
public:
  virtual ~Pass() = default;
  /// The command-line name, as in Passes.def.
  virtual std::string_view name() const = 0;
  virtual llvm::Error run(Graph& g, PassContext& ctx) = 0;
};

// Pass factories, one per entry of Passes.def.
#define PASS(NAME, CREATE, DESC) std::unique_ptr<Pass> CREATE();
#define PASS_WITH_OPTIONS(NAME, CREATE, DESC)                                                      \
  llvm::Expected<std::unique_ptr<Pass>> CREATE(std::string_view options);
#include "passes/Passes.def"
#undef PASS

using PassPipeline = std::vector<std::unique_ptr<Pass>>;

struct PassRunOptions {
  bool verifyEach = false;
  /// When set, the IR is printed here after every pass.
  llvm::raw_ostream* printAfterAll = nullptr;
  /// When set, each pass's wall time and the op count after it are
  /// printed here (--pass-times), one line per pass.
  llvm::raw_ostream* timePasses = nullptr;
  /// When set, called after each pass that succeeded with its wall time.
  std::function<void(const Pass& pass, double seconds)> afterPass;
};

/// Runs the passes in order; stops at the first failure. With verifyEach, a
/// graph that fails verification after a pass is reported as that pass's
/// failure.
llvm::Error runPipeline(Graph& g, PassPipeline& pipeline, PassContext& ctx,
                        const PassRunOptions& opts = {});

struct Module;
/// The dce pass on the graph of a module just imported (the frontend keeps
/// what no output needs), and the initial values of the params it erased
/// dropped from the module.
llvm::Error eliminateDeadCode(Module& m);

} // namespace lwcc
