//===- TrainerParts.cpp - What a trainer is built from beside its step ----===//
#include "tools/lwcc/TrainerParts.h"

#include "frontend/ExportTemplate.h"
#include "ir/Parser.h"
#include "ir/Verifier.h"
#include "passes/MemoryPlan.h"
#include "passes/StepOrder.h"
#include "plan/Pipelines.h"
#include "tools/lwcc/Options.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <set>

namespace lwcc {

using namespace flags;

int loadStepIr(Module& m) {
  llvm::SourceMgr sm;
  auto buffer = llvm::MemoryBuffer::getFile(stepIr);
  if (!buffer) {
    llvm::errs() << stepIr << ": error: cannot read: " << buffer.getError().message() << "\n";
    return 1;
  }
  // What `lwcc-opt --fold-replicas` printed left devices' ops out.
  if (llvm::StringRef text = (*buffer)->getBuffer();
      text.startswith("// fold-replicas:") ||
      text.find("\n// fold-replicas:") != llvm::StringRef::npos) {
    llvm::errs() << stepIr
                 << ": error: a folded step (fold-replicas) is one the planner only prices: some "
                    "devices' ops are left out of it, so it builds no trainer\n";
    return 1;
  }
  unsigned id = sm.AddNewSourceBuffer(std::move(*buffer), llvm::SMLoc());
  auto g = parseGraph(sm, id);
  if (!g) {
    printErrors(llvm::errs(), g.takeError(), &sm);
    return 1;
  }
  llvm::Error e = verifyGraph(**g);
  for (const auto& op : (*g)->ops()) {
    if (e)
      break;
    if (op->numResults() && !op->annotations().bufferOffsets)
      e = op->emitError("--step-ir: the op has no place in the memory plan (@buf): give the "
                        "scheduled IR that lwcc --emit=scheduled-ir prints");
  }
  for (const auto& p : (*g)->params()) {
    if (e)
      break;
    if (!p->zeroInit() && !m.weights.count(p->paramName()))
      e = makeError(p->loc(), "--step-ir: param '%" + p->name() + "' starts from initializer '" +
                                  p->paramName() + "', which " + modelFile.getValue() +
                                  " does not have");
  }
  if (!e && !noVerifySchedule)
    e = verifySchedule(**g);
  if (e) {
    printErrors(llvm::errs(), std::move(e), &sm);
    return 1;
  }
  m.graph = std::move(*g);
  return 0;
}

llvm::Expected<std::unique_ptr<Graph>> evalGraph(const Graph& imported) {
  std::unique_ptr<Graph> g = imported.clone();
  auto pipeline = buildPipeline(evaluationPipeline(mixedPrecision));
  if (!pipeline)
    return pipeline.takeError();
  MemoryPlanStats stats;
  PassContext ctx;
  ctx.diag = [](Severity sev, const Location& loc, const std::string& msg) {
    if (sev == Severity::Error)
      printDiagnostic(llvm::errs(), sev, loc, msg);
  };
  ctx.memoryPlanStats = &stats;
  if (llvm::Error e = runPipeline(*g, *pipeline, ctx))
    return e;
  return g;
}

void addExportTemplate(const Graph& train, CodegenOptions& o) {
  // The trainer's params are the logical ones: one per initializer name
  // (replicas and shards on several devices are one), whole.
  std::vector<ExportParamSpec> specs;
  std::vector<uint32_t> index;
  std::set<std::string> seen;
  uint32_t logical = 0;
  for (const auto& pp : train.params()) {
    const Value* p = pp.get();
    if (!seen.insert(p->paramName()).second)
      continue;
    uint32_t k = logical++;
    if (p->zeroInit())
      continue;
    specs.push_back({p->paramName(), p->type().dtype, p->wholeType().numElements()});
    index.push_back(k);
  }
  auto t = buildExportTemplate(modelFile, specs, tiedMode());
  if (!t) {
    std::string why = llvm::toString(t.takeError());
    llvm::errs() << "lwcc: warning: the trainer cannot --export: " << why << "\n";
    return;
  }
  o.exportTemplate = std::move(t->bytes);
  for (const ExportCut& c : t->cuts)
    o.exportCuts.push_back({c.offset, index[c.param], c.bytes});
}

} // namespace lwcc
