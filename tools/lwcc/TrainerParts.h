//===- TrainerParts.h - What a trainer is built from beside its step -*- C++ -*-===//
#pragma once

#include "codegen/Codegen.h"
#include "ir/Module.h"

#include <memory>

namespace lwcc {

/// --step-ir: the scheduled step read back in place of `m`'s, checked as
/// lwcc checks its own (a valid graph, every result placed in the memory
/// plan, every param's initial value known, the schedule proven). Errors
/// are printed with the file's line:col; returns 0 or 1.
int loadStepIr(Module& m);
/// The inference graph of the imported model, planned: the trainer's
/// evaluation pass.
llvm::Expected<std::unique_ptr<Graph>> evalGraph(const Graph& imported);
/// The export template: the trained initializers of the training step cut
/// out of the input model. Failing leaves the trainer without --export (a
/// warning says why) rather than failing the build.
void addExportTemplate(const Graph& train, CodegenOptions& o);

} // namespace lwcc
