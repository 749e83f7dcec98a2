//===- PlanReport.h - lwcc --emit=plan's tables -----------------*- C++ -*-===//
#pragma once

#include "ir/IR.h"
#include "passes/MemoryPlan.h"

#include "llvm/Support/raw_ostream.h"

#include <map>
#include <string>

namespace lwcc {

/// The memory plan as a table: one row per op result, then the arenas.
void printPlan(const Graph& g, const MemoryPlanStats& stats, llvm::raw_ostream& os);
/// The bytes a multi-device training step moves between devices.
int64_t stepCommBytes(const Graph& g);
/// Per layer (ops grouped by location): the parallel config, the devices,
/// and the bytes communicated per step; then every strategy's total
/// (`strategies`: name -> bytes per step), `strategy` marked as chosen.
void printParallelPlan(const Graph& g, const std::string& strategy, int64_t gpus,
                       const std::map<std::string, int64_t>& strategies, llvm::raw_ostream& os);

} // namespace lwcc
