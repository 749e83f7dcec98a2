//===- TrainingSupport.cpp ------------------------------------------------===//
#include "passes/TrainingSupport.h"

#include <set>

namespace lwcc {

Value* findParam(const Graph& g, const std::string& initializer) {
  for (const auto& p : g.params())
    if (p->paramName() == initializer)
      return p.get();
  return nullptr;
}

Value* getOrCreateStepParam(Graph& g) {
  if (Value* p = findParam(g, kStepParam))
    return p;
  Value* p = g.addParam(uniqueValueName(g, "step"), kStepParam, TensorType(DType::I64, {}));
  p->setZeroInit(true);
  return p;
}

std::string uniqueValueName(const Graph& g, const std::string& base) {
  std::set<std::string> taken;
  for (const auto& v : g.inputs())
    taken.insert(v->name());
  for (const auto& v : g.params())
    taken.insert(v->name());
  for (const auto& op : g.ops())
    for (unsigned i = 0; i < op->numResults(); ++i)
      taken.insert(op->result(i)->name());
  if (!taken.count(base))
    return base;
  for (int k = 1;; ++k)
    if (!taken.count(base + "." + std::to_string(k)))
      return base + "." + std::to_string(k);
}

void appendAssign(Graph& g, Value* target, Value* value, const Location& loc) {
  Op* op = g.createOp(OpKind::Assign, {target, value}, {}, loc);
  if (target->device())
    op->annotations().device = target->device();
}

Value* getOrCreateStepParam(Graph& g, int64_t device) {
  for (const auto& p : g.params())
    if (p->paramName() == kStepParam && p->device().value_or(0) == device)
      return p.get();
  Value* p = g.addParam(uniqueValueName(g, device ? "step.d" + std::to_string(device) : "step"),
                        kStepParam, TensorType(DType::I64, {}));
  p->setZeroInit(true);
  if (device)
    p->setDevice(device);
  return p;
}

} // namespace lwcc
