//===- Params.h - What a training step does with its params -----*- C++ -*-===//
//
// Queries the training passes, the memory plan and the simulator share.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <unordered_map>
#include <vector>

namespace lwcc {

/// The params training updates by their gradient: float params that no
/// assign writes (those are running statistics or optimizer state), that
/// are not zero-initialized state and not frozen, in param order.
std::vector<Value*> trainableParams(const Graph& g);

/// The param that result `r` of `op` may be written straight over, or null:
/// the result's only use is the assign of a param of its type that `op`
/// may overwrite element by element (the op table's writesOver trait: an
/// optimizer update's new weight or state, step + 1; or an all_gather of
/// the param's updated shares under ZeRO-1), and no later op reads
/// the param nor assigns it otherwise. The memory plan then gives the
/// result no buffer of its own (passes/MemoryPlan.h) and the assign copies
/// nothing. `position` maps each op of the graph to its index in graph
/// order.
const Value* paramWrittenOver(const Op& op, unsigned r,
                              const std::unordered_map<const Op*, size_t>& position);

} // namespace lwcc
