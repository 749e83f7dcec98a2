//===- Codegen.h - Trainer sources from a planned training step -*- C++ -*-===//
//
// Turns a training graph whose memory is planned (every op result has @buf)
// into the sources of a trainer for the CPU runtime: trainer.cc (one runtime
// call per op, shapes in comments, planned offsets as named constants) and
// weights.bin (the initial params and state, in the order and at the
// offsets trainer.cc expects).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Module.h"

#include <string>

namespace lwcc {

struct GeneratedTrainer {
  std::string source;  ///< trainer.cc
  std::string weights; ///< weights.bin: the state blob's initial bytes
};

/// `m.graph` must be a planned training graph: output #0 the loss, @buf on
/// every op with results, no device other than 0.
llvm::Expected<GeneratedTrainer> generateCpuTrainer(const Module& m, const std::string& modelName);

} // namespace lwcc
