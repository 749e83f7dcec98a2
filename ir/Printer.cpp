//===- Printer.cpp --------------------------------------------------------===//
//
// The text form, one statement per line:
//
//   graph @name(%x: f32[8,3,32,32] @data, %y: i64[8] @label) {
//     %w = param "conv.weight" : f32[16,3,3,3]
//     %c = conv2d(%x, %w) {pads = [1, 1, 1, 1]} : f32[8,16,32,32] @dev(0) loc("conv")
//     %a, %b = split(%c) {axis = 1, split = [8, 8]} : f32[8,8,32,32], f32[8,8,32,32]
//     %m = param "opt.m.conv.weight" zeros : f32[16,3,3,3]
//     %f = param "fc.weight" shard(0: 512 of 1024) : f32[512,4096] @dev(1)
//     assign(%m, %a2)
//     return %loss, %dw @grad(%w)
//   }
//
//===----------------------------------------------------------------------===//
#include "ir/Printer.h"

#include "ir/Parser.h"

#include "llvm/Support/raw_ostream.h"

#include <map>
#include <set>
#include <unordered_map>

namespace lwcc {

namespace {

class Namer {
public:
  explicit Namer(const Graph& g) {
    auto reserve = [&](const Value* v) {
      if (!v->name().empty())
        taken_.insert(v->name());
    };
    for (const auto& v : g.inputs())
      reserve(v.get());
    for (const auto& v : g.params())
      reserve(v.get());
    for (const auto& op : g.ops())
      for (unsigned i = 0; i < op->numResults(); ++i)
        reserve(op->result(i));
  }

  /// The name after '%', quoted when it is not a bare name.
  const std::string& name(const Value* v) {
    auto it = names_.find(v);
    if (it != names_.end())
      return it->second;
    std::string n = v->name();
    if (n.empty() || used_.count(n)) {
      do
        n = std::to_string(next_++);
      while (taken_.count(n) || used_.count(n));
    }
    used_.insert(n);
    return names_.emplace(v, isBareName(n) ? n : quoteString(n)).first->second;
  }

private:
  std::set<std::string> taken_, used_;
  std::unordered_map<const Value*, std::string> names_;
  unsigned next_ = 0;
};

} // namespace

std::string annotationsStr(const Annotations& a) {
  std::string s;
  auto ints = [](const std::vector<int64_t>& v) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i)
      out += (i ? ", " : "") + std::to_string(v[i]);
    return out;
  };
  if (a.par) {
    std::string inner;
    for (const auto& [dim, degree] : a.par->degrees)
      inner += (inner.empty() ? "" : ", ") + dim + " = " + std::to_string(degree);
    if (!a.par->devices.empty())
      inner +=
          (inner.empty() ? "" : ", ") + std::string("devices = [") + ints(a.par->devices) + "]";
    if (!a.par->sizes.empty())
      inner += (inner.empty() ? "" : ", ") + std::string("sizes = [") + ints(a.par->sizes) + "]";
    s += " @par(" + inner + ")";
  }
  if (a.device)
    s += " @dev(" + std::to_string(*a.device) + ")";
  if (a.stream)
    s += " @stream(" + std::to_string(*a.stream) + ")";
  if (a.microBatch)
    s += " @mb(" + std::to_string(*a.microBatch) + ")";
  if (a.bufferOffsets)
    s += " @buf(" + ints(*a.bufferOffsets) + ")";
  return s.empty() ? s : s.substr(1);
}

void printGraph(const Graph& g, llvm::raw_ostream& os) {
  Namer namer(g);
  // A folded step (fold-replicas) is one the planner only prices: said,
  // since the text cannot carry which devices' ops are left out.
  if (!g.foldedInto().empty()) {
    std::map<int64_t, std::vector<int64_t>> by;
    for (auto [left, rep] : g.foldedInto())
      by[rep].push_back(left);
    os << "// fold-replicas: a step only priced, not a trainer's: the ops of";
    for (auto it = by.begin(); it != by.end(); ++it) {
      os << (it == by.begin() ? "" : ";") << " device " << it->first << " stand for devices";
      for (size_t k = 0; k < it->second.size(); ++k)
        os << (k ? ", " : " ") << it->second[k];
    }
    os << "\n";
  }
  os << "graph @" << (isBareName(g.name()) ? g.name() : quoteString(g.name())) << "(";
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const Value* in = g.inputs()[i].get();
    os << (i ? ", " : "") << "%" << namer.name(in) << ": " << in->type().str() << " @"
       << roleName(in->role());
  }
  os << ") {\n";
  for (const auto& p : g.params()) {
    os << "  %" << namer.name(p.get()) << " = param " << quoteString(p->paramName())
       << (p->zeroInit() ? " zeros" : "") << (p->frozen() ? " frozen" : "");
    if (!p->shard().empty()) {
      os << " shard(";
      for (size_t i = 0; i < p->shard().size(); ++i)
        os << (i ? ", " : "") << p->shard()[i].dim << ": " << p->shard()[i].offset << " of "
           << p->shard()[i].whole;
      os << ")";
    }
    os << " : " << p->type().str();
    if (p->device())
      os << " @dev(" << *p->device() << ")";
    os << "\n";
  }
  for (const auto& opPtr : g.ops()) {
    const Op& op = *opPtr;
    os << "  ";
    for (unsigned i = 0; i < op.numResults(); ++i)
      os << (i ? ", " : "") << "%" << namer.name(op.result(i));
    os << (op.numResults() ? " = " : "") << op.mnemonic() << "(";
    for (unsigned i = 0; i < op.numOperands(); ++i)
      os << (i ? ", " : "") << "%" << namer.name(op.operand(i));
    os << ")";
    // Attributes in table order, then any the table does not know (an
    // invalid op, printed so that the verifier's complaint can be seen).
    std::vector<const NamedAttr*> ordered;
    for (const AttrSpec& spec : op.info().attrs)
      for (const NamedAttr& a : op.attrs())
        if (a.name == spec.name)
          ordered.push_back(&a);
    for (const NamedAttr& a : op.attrs())
      if (!op.info().findAttr(a.name))
        ordered.push_back(&a);
    if (!ordered.empty()) {
      os << " {";
      for (size_t i = 0; i < ordered.size(); ++i)
        os << (i ? ", " : "") << ordered[i]->name << " = " << ordered[i]->value.str();
      os << "}";
    }
    // An op without results (assign) has no type list.
    for (unsigned i = 0; i < op.numResults(); ++i)
      os << (i ? ", " : " : ") << op.result(i)->type().str();
    std::string ann = annotationsStr(op.annotations());
    if (!ann.empty())
      os << " " << ann;
    if (!op.loc().name.empty())
      os << " loc(" << quoteString(op.loc().name) << ")";
    os << "\n";
  }
  os << "  return";
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    os << (i ? ", " : " ") << "%" << namer.name(g.outputs()[i]);
    if (const Value* p = g.outputGradOf(i))
      os << " @grad(%" << namer.name(p) << ")";
  }
  os << "\n}\n";
}

std::string printGraph(const Graph& g) {
  std::string s;
  llvm::raw_string_ostream os(s);
  printGraph(g, os);
  return os.str();
}

} // namespace lwcc
