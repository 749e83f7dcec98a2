//===- TrainingSupport.h - Shared pieces of the training passes -*- C++ -*-===//
#pragma once

#include "ir/IR.h"

#include <string>

namespace lwcc {

/// Initializer name of the step counter: an i64 scalar param, zero at the
/// start, that the optimizer increments after each step.
inline constexpr const char* kStepParam = "train.step";

/// The step counter param, created (zero-initialized) when missing.
Value* getOrCreateStepParam(Graph& g);
/// The copy of the step counter on `device` (each device that needs the
/// step holds one), created when missing.
Value* getOrCreateStepParam(Graph& g, int64_t device);
/// The param bound to `initializer`, or null.
Value* findParam(const Graph& g, const std::string& initializer);
/// A value name no other value of `g` has, starting from `base`.
std::string uniqueValueName(const Graph& g, const std::string& base);
/// Appends assign(target, value) at the end of the graph, on the target's
/// device.
void appendAssign(Graph& g, Value* target, Value* value, const Location& loc);

} // namespace lwcc
