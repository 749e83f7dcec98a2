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
  // Only the names that start with `base` can collide: collect those alone
  // (a set of every name per call made multi-device graphs quadratic).
  std::set<std::string> taken;
  auto note = [&](const std::string& name) {
    if (name.compare(0, base.size(), base) == 0)
      taken.insert(name);
  };
  for (const auto& v : g.inputs())
    note(v->name());
  for (const auto& v : g.params())
    note(v->name());
  for (const auto& op : g.ops())
    for (unsigned i = 0; i < op->numResults(); ++i)
      note(op->result(i)->name());
  if (!taken.count(base))
    return base;
  for (int k = 1;; ++k)
    if (!taken.count(base + "." + std::to_string(k)))
      return base + "." + std::to_string(k);
}

UniqueNames::UniqueNames(const Graph& g) {
  taken_.reserve(2 * (g.inputs().size() + g.params().size() + g.numOps()));
  for (const auto& v : g.inputs())
    taken_.insert(v->name());
  for (const auto& v : g.params())
    taken_.insert(v->name());
  for (const auto& op : g.ops())
    for (unsigned i = 0; i < op->numResults(); ++i)
      taken_.insert(op->result(i)->name());
}

std::string UniqueNames::operator()(const std::string& base) {
  if (taken_.insert(base))
    return base;
  int& k = nextSuffix_.try_emplace(base, 1).first->second;
  for (;; ++k) {
    std::string name = base + "." + std::to_string(k);
    if (taken_.insert(name))
      return name;
  }
}

void appendAssign(Graph& g, Value* target, Value* value, const Location& loc) {
  Op* op = g.createOp(OpKind::Assign, {target, value}, {}, loc);
  if (target->device())
    op->annotations().device = target->device();
}

Value* getOrCreateStepParam(Graph& g, int64_t device, UniqueNames* names) {
  for (const auto& p : g.params())
    if (p->paramName() == kStepParam && p->device().value_or(0) == device)
      return p.get();
  const std::string base = device ? "step.d" + std::to_string(device) : "step";
  Value* p = g.addParam(names ? (*names)(base) : uniqueValueName(g, base), kStepParam,
                        TensorType(DType::I64, {}));
  p->setZeroInit(true);
  if (device)
    p->setDevice(device);
  return p;
}

bool globMatch(std::string_view pattern, std::string_view name) {
  // Iterative matching with one backtrack point: the last '*' seen.
  size_t p = 0, n = 0, star = std::string_view::npos, mark = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*')
    ++p;
  return p == pattern.size();
}

std::vector<std::string> splitPatterns(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(';', start);
    if (end == std::string::npos)
      end = text.size();
    if (end > start)
      out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool isGradientSeed(const Op& op) {
  return op.kind() == OpKind::Constant && op.loc().name == "loss.grad";
}

bool isRecomputed(const Op& op) {
  llvm::StringRef name = op.loc().name;
  return name == "recompute" || name.endswith(".recompute");
}

bool gathersParamShares(const Op& op) {
  if (op.kind() != OpKind::AllGather || op.numOperands() == 0)
    return false;
  for (const Value* v : op.operands())
    if (v->kind() != ValueKind::Param)
      return false;
  return true;
}

bool isRegather(const Op& op) {
  llvm::StringRef name = op.loc().name;
  return gathersParamShares(op) && (name == "regather" || name.endswith(".regather"));
}

} // namespace lwcc
