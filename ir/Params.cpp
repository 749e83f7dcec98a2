//===- Params.cpp - What a training step does with its params -------------===//
#include "ir/Params.h"

#include <unordered_set>

namespace lwcc {

std::vector<Value*> trainableParams(const Graph& g) {
  std::unordered_set<const Value*> assigned;
  for (const auto& op : g.ops())
    if (op->kind() == OpKind::Assign)
      assigned.insert(op->operand(0));
  std::vector<Value*> out;
  for (const auto& p : g.params())
    if (isFloat(p->type().dtype) && !p->zeroInit() && !p->frozen() && !assigned.count(p.get()))
      out.push_back(p.get());
  return out;
}

const Value* paramWrittenOver(const Op& op, unsigned r,
                              const std::unordered_map<const Op*, size_t>& position) {
  const Value* v = op.result(r);
  if (v->uses().size() != 1)
    return nullptr;
  const Use& use = v->uses().front();
  if (!use.user || use.user->kind() != OpKind::Assign || use.index != 1)
    return nullptr;
  const Value* p = use.user->operand(0);
  if (p->kind() != ValueKind::Param || p->type() != v->type())
    return nullptr;
  bool operand = false;
  for (unsigned i = 0; i < op.numOperands(); ++i)
    operand |= op.operand(i) == p && op.info().mayWriteOver(r, i);
  // ZeRO-1's all_gather of a param's updated shares reads no copy of the
  // param: it may fill the copy on the result's device.
  operand |= op.kind() == OpKind::AllGather && p->device() == valueDevice(v);
  if (!operand)
    return nullptr;
  // Nothing reads the param after `op` but its assign (which then copies
  // nothing), and nothing else assigns it.
  auto at = position.find(&op);
  if (at == position.end())
    return nullptr;
  for (const Use& u : p->uses()) {
    if (!u.user)
      return nullptr; // a graph output: read after the step
    if (u.user == use.user)
      continue;
    auto it = position.find(u.user);
    if (it == position.end() || it->second > at->second ||
        (u.user->kind() == OpKind::Assign && u.index == 0))
      return nullptr;
  }
  return p;
}

} // namespace lwcc
