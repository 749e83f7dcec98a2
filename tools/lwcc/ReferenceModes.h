//===- ReferenceModes.h - lwcc's runs on the reference interpreter -*- C++ -*-===//
//
// The driver's modes that run a model or its training step on the reference
// interpreter instead of building a trainer: --run-reference,
// --train-reference, --check-gradients, --check-memory-plan. Each returns
// lwcc's exit status (0, 1 for a failed run or check, 2 for bad usage).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Module.h"

#include <functional>

namespace lwcc {

/// Replaces the module's graph by its training step (`withOptimizer` false:
/// gradients as outputs, nothing updated).
using BuildTrainingStep = std::function<llvm::Error(Module& m, bool withOptimizer)>;

int runReferenceMode(const Module& m);
int trainReferenceMode(Module& m, const BuildTrainingStep& buildTrainingGraph);
int checkGradientsMode(Module& m, const BuildTrainingStep& buildTrainingGraph);
int checkMemoryPlanMode(Module& m, const BuildTrainingStep& buildTrainingGraph);

} // namespace lwcc
