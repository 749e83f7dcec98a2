//===- Interpreter.h - The reference interpreter ---------------*- C++ -*-===//
//
// Executes a graph on the CPU with plain loops. It is the oracle of every
// semantic test, not a fast path: each kernel reads as the ONNX definition
// of its op. Float math is done in double; in F32 mode each float result is
// rounded to float, as an f32 device would store it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"
#include "ir/Tensor.h"

#include <vector>

namespace lwcc {

enum class Precision { F32, F64 };

/// Runs `g` on `inputs` (one per graph input, in order) with param values
/// from `weights`; returns the graph outputs in order.
llvm::Expected<std::vector<Tensor>> interpret(const Graph& g, const std::vector<Tensor>& inputs,
                                              const WeightMap& weights,
                                              Precision precision = Precision::F32);

/// Runs one step of a training graph: params come from `state` (zero-
/// initialized state params may be missing), and the assign ops' new values
/// are written back to `state` after the step.
llvm::Expected<std::vector<Tensor>> runStep(const Graph& g, const std::vector<Tensor>& inputs,
                                            WeightMap& state, Precision precision = Precision::F32);

/// Evaluates one op on the given operand values (used for constant folding).
llvm::Expected<std::vector<Tensor>> evaluateOp(const Op& op,
                                               const std::vector<const Tensor*>& operands,
                                               Precision precision = Precision::F64);

} // namespace lwcc
