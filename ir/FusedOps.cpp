//===- FusedOps.cpp - The fused op's body, shape rule and verifier --------===//
#include "ir/FusedOps.h"

#include "ir/RuleHelpers.h"
#include "ir/Verifier.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string_view>

namespace lwcc {

namespace {

llvm::Error bodyError(const llvm::Twine& what) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), "fused body: " + what);
}

/// A cursor over one statement's text.
struct Reader {
  llvm::StringRef s;
  void skip() { s = s.ltrim(); }
  bool eat(llvm::StringRef t) {
    skip();
    if (!s.startswith(t))
      return false;
    s = s.drop_front(t.size());
    return true;
  }
  llvm::StringRef word() {
    skip();
    size_t n = 0;
    while (n < s.size() &&
           (llvm::isAlnum(s[n]) || s[n] == '_' || s[n] == '.' || s[n] == '-' || s[n] == '+'))
      ++n;
    llvm::StringRef w = s.take_front(n);
    s = s.drop_front(n);
    return w;
  }
};

llvm::Expected<FusedStatement> parseStatement(llvm::StringRef text, int index,
                                              unsigned numOperands) {
  Reader r{text};
  auto where = [&](const llvm::Twine& what) {
    return bodyError("statement " + llvm::Twine(index) + " ('" + text.trim() + "'): " + what);
  };
  int named = -1;
  if (!r.eat("%t") || r.word().getAsInteger(10, named) || named != index || !r.eat("="))
    return where("must start with '%t" + llvm::Twine(index) + " ='");
  llvm::StringRef mnemonic = r.word();
  auto kind = lookupOpKind(std::string_view(mnemonic.data(), mnemonic.size()));
  if (!kind)
    return where("unknown op '" + mnemonic + "'");
  FusedStatement st{*kind, {}, DType::F32, {}};
  if (!r.eat("("))
    return where("expected '('");
  while (!r.eat(")")) {
    if (!st.args.empty() && !r.eat(","))
      return where("expected ',' or ')'");
    if (r.eat("%t")) {
      int k = -1;
      if (r.word().getAsInteger(10, k) || k < 0 || k >= index)
        return where("an operand must be the value of an earlier statement");
      st.args.push_back(k);
    } else if (r.eat("%")) {
      int k = -1;
      if (r.word().getAsInteger(10, k) || k < 0 || k >= static_cast<int>(numOperands))
        return where("no such operand of the fused op");
      st.args.push_back(-(k + 1));
    } else {
      return where("expected an operand (%N or %tK)");
    }
  }
  const OpInfo& info = opInfo(*kind);
  if (r.eat("{")) {
    while (!r.eat("}")) {
      if (!st.attrs.empty() && !r.eat(","))
        return where("expected ',' or '}'");
      llvm::StringRef name = r.word();
      const AttrSpec* spec = info.findAttr(std::string_view(name.data(), name.size()));
      if (!spec || !r.eat("="))
        return where("no attribute '" + name + "' of " + mnemonic);
      if (spec->kind == AttrKind::Ints) {
        if (!r.eat("["))
          return where("attribute '" + name + "' must be a list of integers");
        std::vector<int64_t> v;
        while (!r.eat("]")) {
          int64_t x = 0;
          if ((!v.empty() && !r.eat(",")) || r.word().getAsInteger(10, x))
            return where("attribute '" + name + "' must be a list of integers");
          v.push_back(x);
        }
        st.attrs.push_back({spec->name, Attribute(v)});
        continue;
      }
      llvm::StringRef value = r.word();
      if (spec->kind == AttrKind::Int) {
        int64_t v = 0;
        if (value.getAsInteger(10, v))
          return where("attribute '" + name + "' must be an integer");
        st.attrs.push_back({spec->name, Attribute(v)});
      } else if (spec->kind == AttrKind::Float) {
        double v = 0;
        if (value.getAsDouble(v))
          return where("attribute '" + name + "' must be a number");
        st.attrs.push_back({spec->name, Attribute(v)});
      } else {
        return where("attribute '" + name + "' cannot be written in a fused body");
      }
    }
  }
  if (!r.eat(":"))
    return where("expected ': dtype'");
  llvm::StringRef t = r.word();
  auto dtype = parseDType(std::string_view(t.data(), t.size()));
  if (!dtype)
    return where("unknown element type '" + t + "'");
  st.dtype = *dtype;
  if (!r.s.trim().empty())
    return where("unexpected '" + r.s.trim() + "'");
  return st;
}

} // namespace

llvm::Expected<std::vector<FusedStatement>> parseFusedBody(llvm::StringRef body,
                                                           unsigned numOperands) {
  llvm::SmallVector<llvm::StringRef, 8> parts;
  body.split(parts, ';');
  std::vector<FusedStatement> out;
  for (llvm::StringRef part : parts) {
    auto st = parseStatement(part, static_cast<int>(out.size()), numOperands);
    if (!st)
      return st.takeError();
    out.push_back(std::move(*st));
  }
  if (out.empty())
    return bodyError("no statements");
  return out;
}

std::string printFusedBody(const std::vector<FusedStatement>& statements) {
  std::string out;
  for (size_t k = 0; k < statements.size(); ++k) {
    const FusedStatement& st = statements[k];
    out += k ? "; %t" : "%t";
    out += std::to_string(k);
    out += " = ";
    out += opInfo(st.kind).mnemonic;
    out += "(";
    for (size_t a = 0; a < st.args.size(); ++a) {
      if (a)
        out += ", ";
      out += st.args[a] >= 0 ? "%t" : "%";
      out += std::to_string(st.args[a] >= 0 ? st.args[a] : -st.args[a] - 1);
    }
    out += ")";
    if (!st.attrs.empty()) {
      out += " {";
      for (size_t a = 0; a < st.attrs.size(); ++a) {
        out += a ? ", " : "";
        out += st.attrs[a].name;
        out += " = ";
        out += st.attrs[a].value.str();
      }
      out += "}";
    }
    out += " : ";
    out += dtypeName(st.dtype);
  }
  return out;
}

std::vector<NamedAttr> fusedAttrsOf(const Op& op) {
  std::vector<NamedAttr> out;
  for (const NamedAttr& a : op.attrs())
    if (a.value.kind() == AttrKind::Int || a.value.kind() == AttrKind::Float ||
        a.value.kind() == AttrKind::Ints)
      out.push_back(a);
  return out;
}

namespace {

const Attribute* findAttr(const FusedStatement& st, llvm::StringRef name) {
  for (const NamedAttr& a : st.attrs)
    if (a.name == name)
      return &a.value;
  return nullptr;
}

/// The dims of `space` that reduction `st` reduces (all where it has no
/// axes); nullopt where an axis is out of range.
std::optional<std::vector<bool>> dimsOf(const FusedStatement& st, const Shape& space) {
  const auto rank = static_cast<int64_t>(space.size());
  const Attribute* axes = findAttr(st, "axes");
  std::vector<bool> reduced(space.size(), axes == nullptr);
  if (axes)
    for (int64_t a : axes->getInts()) {
      if (a < -rank || a >= rank)
        return std::nullopt;
      reduced[static_cast<size_t>(a < 0 ? a + rank : a)] = true;
    }
  return reduced;
}

} // namespace

Shape statementShape(const FusedStatement& st, const Shape& space) {
  if (!isReduction(st))
    return space;
  auto dims = dimsOf(st, space);
  if (!dims)
    return space;
  const Attribute* keep = findAttr(st, "keepdims");
  const bool keepdims = !keep || keep->getInt() != 0;
  Shape out;
  for (size_t d = 0; d < space.size(); ++d)
    if (!(*dims)[d])
      out.push_back(space[d]);
    else if (keepdims)
      out.push_back(1);
  return out;
}

llvm::Expected<std::vector<bool>> reducedDims(const std::vector<FusedStatement>& statements,
                                              const Shape& space) {
  std::vector<bool> out;
  for (size_t k = 0; k < statements.size(); ++k) {
    const FusedStatement& st = statements[k];
    for (int a : st.args)
      if (a >= 0 && isReduction(statements[static_cast<size_t>(a)]))
        return bodyError("statement " + llvm::Twine(k) + " reads the reduction %t" +
                         llvm::Twine(a) + ": a reduction's value is only a result");
    if (!isReduction(st))
      continue;
    if (st.args.size() != 1)
      return bodyError("reduction " + llvm::Twine(k) + " must reduce one value");
    if (st.dtype != DType::F32 && st.dtype != DType::F64)
      return bodyError("reduction " + llvm::Twine(k) + " must be f32 or f64");
    auto dims = dimsOf(st, space);
    if (!dims)
      return bodyError("reduction " + llvm::Twine(k) + " has an axis out of range");
    if (!out.empty() && out != *dims)
      return bodyError("reduction " + llvm::Twine(k) +
                       " reduces other dims than the body's first reduction");
    out = *dims;
  }
  return out;
}

namespace {
/// The bytes of the arena `v` lies on: [offset, offset + size), or none
/// where it is not planned in the arena (a param, an input).
std::optional<std::pair<int64_t, int64_t>> arenaBytes(const Value* v) {
  const Op* def = v->definingOp();
  if (!def || !def->annotations().bufferOffsets)
    return std::nullopt;
  const int64_t off = (*def->annotations().bufferOffsets)[v->resultIndex()];
  if (off < 0)
    return std::nullopt;
  return std::make_pair(off, off + v->type().sizeInBytes());
}
/// Whether a fused call that writes `out` while it reads `in` would read
/// bytes it already wrote: the two overlap in the arena, unless `exact`
/// allows them the very same bytes (read and written element by element).
bool clashes(const Value* out, const Value* in, bool exact) {
  const auto o = arenaBytes(out), i = arenaBytes(in);
  return o && i && o->first < i->second && i->first < o->second && !(exact && *o == *i);
}
/// Whether the result of `act` (written by the fused call) lies apart
/// from the bytes of `producer`'s operands (read by it), where the graph is
/// memory-planned, or (an add, a batch norm) exactly on one of them.
bool apartFromOperands(const Op& act, const Op& producer) {
  for (const Value* v : producer.operands())
    if (clashes(act.result(0), v, producer.kind() != OpKind::Conv2d))
      return false;
  return true;
}
} // namespace

const Op* epilogueOf(const Op& producer, bool cuda, bool fuse) {
  const OpKind kind = producer.kind();
  const bool batchNorm = kind == OpKind::BatchNormTrain || kind == OpKind::BatchNorm;
  if (kind != OpKind::Conv2d && !batchNorm && (cuda || kind != OpKind::Add))
    return nullptr;
  const Value* v = producer.result(0);
  const DType t = v->type().dtype;
  const bool wide = t == DType::F32 || t == DType::F64,
             narrow = fuse && (t == DType::BF16 || t == DType::F16);
  // cuDNN runs a float convolution's fused plan and a float batch norm;
  // lwcc's own kernels a 16-bit batch norm, which apply the ReLU as they
  // write. The CPU's kernels take any float batch norm.
  const bool takes = batchNorm ? (cuda ? narrow : wide || narrow) : wide;
  if (!takes || v->uses().size() != 1)
    return nullptr;
  const Op* act = v->uses().front().user;
  // On CUDA a 16-bit batch norm's residual add and relu (a fused region
  // of the two, a residual block's end) join its kernels too.
  if (act && batchNorm && cuda && act->kind() == OpKind::Fused)
    return epilogueResidual(*act, v) && apartFromOperands(*act, producer) ? act : nullptr;
  if (!act || (act->kind() != OpKind::Relu && (cuda || act->kind() != OpKind::Clip)))
    return nullptr;
  return apartFromOperands(*act, producer) ? act : nullptr;
}

const Value* epilogueResidual(const Op& fused, const Value* v) {
  if (fused.kind() != OpKind::Fused || fused.numOperands() != 2 || fused.numResults() != 1 ||
      fused.getInts("results") != std::vector<int64_t>{1})
    return nullptr;
  const Value* other = fused.operand(0) == v ? fused.operand(1) : fused.operand(0);
  if (other == v || (fused.operand(0) != v && fused.operand(1) != v) ||
      other->type() != v->type() || fused.result()->type() != v->type() ||
      fused.getInts("shape") != v->type().shape)
    return nullptr;
  auto body = parseFusedBody(fused.getString("body"), 2);
  if (!body) {
    llvm::consumeError(body.takeError());
    return nullptr;
  }
  const auto& st = *body;
  const bool ok = st.size() == 2 && st[0].kind == OpKind::Add && st[0].args.size() == 2 &&
                  st[0].args[0] < 0 && st[0].args[1] < 0 && st[0].args[0] != st[0].args[1] &&
                  st[0].dtype == v->type().dtype && st[1].kind == OpKind::Relu &&
                  st[1].args == std::vector<int>{0} && st[1].dtype == v->type().dtype;
  return ok ? other : nullptr;
}

std::set<const Op*> paramViews(const Graph& g) {
  std::set<const Op*> out;
  if (isMultiDevice(g))
    return out;
  for (const auto& op : g.ops())
    if (op->info().isEvent() || op->annotations().stream.value_or(0) != 0)
      return out;
  std::map<const Op*, size_t> at;
  std::map<const Value*, size_t> firstWrite; // param -> the first op writing its bytes
  for (const auto& op : g.ops()) {
    const size_t k = at.size();
    at[op.get()] = k;
    if (op->kind() != OpKind::Assign)
      continue;
    const Value* p = op->operand(0);
    size_t w = k;
    // An update written over its param (@buf -1) writes it where it runs.
    const Value* v = op->operand(1);
    if (const Op* def = v->definingOp();
        def && def->annotations().bufferOffsets &&
        (*def->annotations().bufferOffsets)[v->resultIndex()] == -1)
      w = std::min(w, at.at(def));
    auto [it, fresh] = firstWrite.emplace(p, w);
    if (!fresh)
      it->second = std::min(it->second, w);
  }
  std::set<const Value*> outputs(g.outputs().begin(), g.outputs().end());
  for (const auto& op : g.ops()) {
    if (!op->info().kernel.fn || std::string_view(op->info().kernel.fn) != "copy" ||
        op->numOperands() != 1 || op->numResults() != 1)
      continue;
    const Value* p = op->operand(0);
    if (p->kind() != ValueKind::Param || outputs.count(op->result()) ||
        p->type().sizeInBytes() != op->result()->type().sizeInBytes())
      continue;
    auto w = firstWrite.find(p);
    bool before = true;
    for (const Use& u : op->result()->uses())
      before &= u.user && (w == firstWrite.end() || at.at(u.user) < w->second);
    if (before)
      out.insert(op.get());
  }
  return out;
}

const Op* gradPrologueOf(const Op& consumer) {
  if (consumer.kind() != OpKind::BatchNormGrad)
    return nullptr;
  const Value* dy = consumer.operand(4);
  const Op* rg = dy->definingOp();
  if (!rg || rg->kind() != OpKind::ReluGrad || dy->uses().size() != 1 ||
      rg->annotations().device != consumer.annotations().device ||
      rg->annotations().stream != consumer.annotations().stream)
    return nullptr;
  const auto& x = consumer.operand(0)->type();
  for (const Value* v : rg->operands())
    if (v->type() != x)
      return nullptr;
  // The pair reads relu_grad's operands while it writes its results: each
  // result lies apart from them, or (dx) exactly on one of them (read and
  // written element by element).
  for (unsigned r = 0; r < consumer.numResults(); ++r)
    for (const Value* v : rg->operands())
      if (clashes(consumer.result(r), v, r == 0))
        return nullptr;
  return rg;
}

const Op* gradScaleOf(const Op& update) {
  if (update.kind() != OpKind::SgdUpdate && update.kind() != OpKind::AdamUpdate)
    return nullptr;
  const Value* g = update.operand(1);
  const Op* mul = g->definingOp();
  if (!mul || mul->kind() != OpKind::Mul || g->uses().size() != 1)
    return nullptr;
  const Value *x = mul->operand(0), *s = mul->operand(1);
  const DType t = x->type().dtype;
  const auto& uses = x->uses();
  if ((t != DType::F32 && t != DType::F64) || s->type() != TensorType(t, {}) ||
      x->type() != g->type() || update.operand(0)->type().dtype != t ||
      std::none_of(uses.begin(), uses.end(), [](const Use& u) { return !u.user; }) ||
      opDevice(*mul) != opDevice(update) ||
      mul->annotations().stream != update.annotations().stream)
    return nullptr;
  return mul;
}

bool inMultiTensorCall(const Op& op) {
  if (op.kind() == OpKind::SgdUpdate || op.kind() == OpKind::AdamUpdate)
    return true;
  const DType to = op.kind() == OpKind::Cast ? op.result()->type().dtype : DType::F32;
  return (to == DType::BF16 || to == DType::F16) && op.operand(0)->type().dtype == DType::F32;
}

bool sameMultiTensorCall(const Op& first, const Op& next) {
  if (!inMultiTensorCall(first) || !inMultiTensorCall(next) || first.kind() != next.kind())
    return false;
  if (first.kind() == OpKind::Cast)
    return first.result()->type().dtype == next.result()->type().dtype;
  const unsigned lr = first.kind() == OpKind::SgdUpdate ? 3 : 4, flag = lr == 3 ? 4 : 6;
  const auto flagOf = [&](const Op& u) {
    return u.numOperands() > flag ? u.operand(flag) : nullptr;
  };
  return first.operand(lr) == next.operand(lr) && flagOf(first) == flagOf(next) &&
         (first.kind() != OpKind::AdamUpdate || first.operand(5) == next.operand(5)) &&
         first.operand(0)->type().dtype == next.operand(0)->type().dtype;
}

llvm::Expected<std::unique_ptr<Graph>> fusedBodyGraph(const Op& fused) {
  auto statements = parseFusedBody(fused.getString("body"), fused.numOperands());
  if (!statements)
    return statements.takeError();
  auto g = std::make_unique<Graph>("fused");
  std::vector<Value*> operands, values;
  for (unsigned i = 0; i < fused.numOperands(); ++i)
    operands.push_back(g->addInput("in" + std::to_string(i), fused.operand(i)->type()));
  Builder b(*g);
  const Shape& shape = fused.getInts("shape");
  if (auto dims = reducedDims(*statements, shape); !dims)
    return dims.takeError();
  for (size_t k = 0; k < statements->size(); ++k) {
    const FusedStatement& st = (*statements)[k];
    std::vector<Value*> args;
    for (int a : st.args)
      args.push_back(a >= 0 ? values[static_cast<size_t>(a)]
                            : operands[static_cast<size_t>(-a - 1)]);
    std::vector<NamedAttr> attrs = st.attrs;
    if (st.kind == OpKind::Cast)
      attrs.push_back({"to", std::string(dtypeName(st.dtype))});
    auto op = b.createInferred(st.kind, args, attrs);
    if (!op)
      return bodyError("statement " + llvm::Twine(k) + ": " + llvm::toString(op.takeError()));
    const TensorType& t = (*op)->result()->type();
    if (t.dtype != st.dtype || t.shape != statementShape(st, shape))
      return bodyError(llvm::formatv("statement {0} computes {1}, not the {2} it declares over "
                                     "the region's shape",
                                     k, t.str(), dtypeName(st.dtype))
                           .str());
    values.push_back((*op)->result());
  }
  for (int64_t r : fused.getInts("results"))
    g->addOutput(values[static_cast<size_t>(r)]);
  return g;
}

namespace shape {

Rule fused(const Op& op) {
  auto statements = parseFusedBody(op.getString("body"), op.numOperands());
  if (!statements)
    return statements.takeError();
  const Shape& s = op.getInts("shape");
  std::vector<TensorType> out;
  for (int64_t r : op.getInts("results")) {
    if (r < 0 || r >= static_cast<int64_t>(statements->size()))
      return rules::fail("result statement {0} is not in the body", r);
    const FusedStatement& st = (*statements)[static_cast<size_t>(r)];
    out.push_back(TensorType{st.dtype, statementShape(st, s)});
  }
  if (out.empty())
    return rules::fail("a fused op needs at least one result");
  return out;
}

} // namespace shape

namespace cost {

double fused(const Op& op, const CostContext&) {
  // One statement per ';'-separated part (the verifier read them): counted,
  // not parsed, for the simulator prices every op of every candidate step.
  // Each is one flop per element of the iteration space (a reduction one
  // add per element it reads), whatever shape its results have.
  const std::string& body = op.getString("body");
  const auto statements = 1 + std::count(body.begin(), body.end(), ';');
  double elements = 1;
  for (int64_t d : op.getInts("shape"))
    elements *= static_cast<double>(d);
  return static_cast<double>(statements) * elements;
}

} // namespace cost

namespace verify {

llvm::Error fused(const Op& op) {
  auto g = fusedBodyGraph(op);
  if (!g)
    return g.takeError();
  return llvm::Error::success();
}

} // namespace verify

} // namespace lwcc
