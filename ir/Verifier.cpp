//===- Verifier.cpp -------------------------------------------------------===//
#include "ir/Verifier.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <unordered_set>

namespace lwcc {

namespace {

std::string arityText(int lo, int hi) {
  if (hi < 0)
    return "at least " + std::to_string(lo);
  if (lo == hi)
    return std::to_string(lo);
  return std::to_string(lo) + " to " + std::to_string(hi);
}

/// `sizes` of @par: one piece per device of the one split dim, each > 0,
/// summing to the dim (on a shard, @par describes the whole op: no sum).
llvm::Error verifyPieceSizes(const Op& op, const ParallelConfig& par, int64_t rank) {
  std::optional<int64_t> dim;
  std::string dimName;
  for (const auto& [name, degree] : par.degrees)
    if (degree > 1) {
      if (dim)
        return op.emitError("@par sizes need exactly one split dim, got '" + dimName + "' and '" +
                            name + "'");
      dim = parDimIndex(name, rank);
      dimName = name;
    }
  if (!dim)
    return op.emitError("@par sizes need a split dim (a degree > 1)");
  int64_t degree = par.totalDegree();
  if (static_cast<int64_t>(par.sizes.size()) != degree)
    return op.emitError(llvm::formatv("@par has {0} sizes for a degree of {1} along '{2}'",
                                      par.sizes.size(), degree, dimName));
  int64_t sum = 0;
  for (int64_t s : par.sizes) {
    if (s < 1)
      return op.emitError(llvm::formatv("@par sizes must be >= 1, got {0}", s));
    sum += s;
  }
  const Value* split = parSplitValue(op);
  if (!op.annotations().device && sum != split->type().shape[*dim])
    return op.emitError(llvm::formatv("@par sizes sum to {0}, but '{1}' has size {2}", sum, dimName,
                                      split->type().shape[*dim]));
  return llvm::Error::success();
}

llvm::Error verifyAnnotations(const Op& op) {
  const Annotations& a = op.annotations();
  if (a.par) {
    if (op.numResults() == 0)
      return op.emitError("@par on an op without results");
    // Ops that reduce their operand away (losses) split the operand's dims.
    int64_t rank = op.info().parOnOperand && op.numOperands() ? op.operand(0)->type().rank()
                                                              : op.result(0)->type().rank();
    std::set<int64_t> dims;
    for (const auto& [name, degree] : a.par->degrees) {
      auto d = parDimIndex(name, rank);
      if (!d) {
        std::string named = rank == 4 ? "n, c, h, w or " : rank == 2 ? "n, c or " : "";
        std::string hint = rank == 0   ? "it has no dims"
                           : rank == 1 ? "use d0"
                                       : "use " + named + "d0..d" + std::to_string(rank - 1);
        return op.emitError(llvm::formatv(
            "@par names dim '{0}', which a rank-{1} result does not have ({2})", name, rank, hint));
      }
      if (!dims.insert(*d).second)
        return op.emitError("@par splits dim '" + name + "' twice");
      if (degree < 1)
        return op.emitError(
            llvm::formatv("@par degree of '{0}' must be >= 1, got {1}", name, degree));
      const Value* split = parSplitValue(op);
      // On a shard (an op with @dev), @par describes the whole op it is part of.
      if (!a.device && degree > split->type().shape[*d])
        return op.emitError(llvm::formatv("@par degree {0} of '{1}' exceeds its size {2}", degree,
                                          name, split->type().shape[*d]));
    }
    if (!a.par->devices.empty()) {
      // A total degree of 1 with several devices: each computes the whole op.
      if (static_cast<int64_t>(a.par->devices.size()) != a.par->totalDegree() &&
          a.par->totalDegree() != 1)
        return op.emitError(llvm::formatv("@par has {0} devices for a total degree of {1}",
                                          a.par->devices.size(), a.par->totalDegree()));
      std::set<int64_t> unique(a.par->devices.begin(), a.par->devices.end());
      if (unique.size() != a.par->devices.size())
        return op.emitError("@par lists a device twice");
      if (*unique.begin() < 0)
        return op.emitError("@par device ids must be >= 0");
    }
    if (!a.par->sizes.empty())
      if (llvm::Error e = verifyPieceSizes(op, *a.par, rank))
        return e;
  }
  if (a.device && *a.device < 0)
    return op.emitError(llvm::formatv("@dev must be >= 0, got {0}", *a.device));
  if (a.stream) {
    if (*a.stream < 0)
      return op.emitError(llvm::formatv("@stream must be >= 0, got {0}", *a.stream));
    // A communication op runs on that stream of each of its devices.
    if (!a.device && !op.info().isCommunication())
      return op.emitError("@stream needs @dev: a stream belongs to a device");
  }
  if (a.device && a.par && !a.par->devices.empty()) {
    const auto& devs = a.par->devices;
    if (std::find(devs.begin(), devs.end(), *a.device) == devs.end())
      return op.emitError(llvm::formatv("@dev({0}) is not among the @par devices", *a.device));
  }
  if (a.microBatch && *a.microBatch < 0)
    return op.emitError(llvm::formatv("@mb must be >= 0, got {0}", *a.microBatch));
  if (a.bufferOffsets) {
    if (a.bufferOffsets->size() != op.numResults())
      return op.emitError(llvm::formatv("@buf has {0} offsets for {1} results",
                                        a.bufferOffsets->size(), op.numResults()));
    // -1: the result is written over the param it updates (memory-plan).
    for (int64_t off : *a.bufferOffsets)
      if (off < -1)
        return op.emitError(llvm::formatv("@buf offsets must be >= 0, got {0}", off));
  }
  return llvm::Error::success();
}

} // namespace

llvm::Error verifyOpStructure(const Op& op) {
  const OpInfo& info = op.info();
  int n = static_cast<int>(op.numOperands());
  if (n < info.minOperands || (info.maxOperands >= 0 && n > info.maxOperands))
    return op.emitError(llvm::formatv("expects {0} operands, got {1}",
                                      arityText(info.minOperands, info.maxOperands), n));
  int r = static_cast<int>(op.numResults());
  if (info.numResults >= 0 ? r != info.numResults : r < 1)
    return op.emitError(llvm::formatv(
        "expects {0} results, got {1}",
        info.numResults >= 0 ? std::to_string(info.numResults) : std::string("at least 1"), r));
  std::set<std::string> seen;
  for (const NamedAttr& a : op.attrs()) {
    const AttrSpec* spec = info.findAttr(a.name);
    if (!spec) {
      std::string known;
      for (const AttrSpec& s : info.attrs)
        known += (known.empty() ? "" : ", ") + std::string(s.name);
      return op.emitError("has no attribute '" + a.name + "'" +
                          (known.empty() ? " (it takes none)" : " (it takes: " + known + ")"));
    }
    if (!seen.insert(a.name).second)
      return op.emitError("attribute '" + a.name + "' is given twice");
    if (a.value.kind() != spec->kind)
      return op.emitError(llvm::formatv("attribute '{0}' must be {1}, got {2} {3}", a.name,
                                        attrKindName(spec->kind), attrKindName(a.value.kind()),
                                        a.value.str()));
  }
  for (const AttrSpec& spec : info.attrs)
    if (spec.presence == AttrSpec::Required && !op.hasAttr(spec.name))
      return op.emitError(std::string("requires attribute '") + spec.name + "'");
  return llvm::Error::success();
}

llvm::Error verifyOp(const Op& op) {
  if (llvm::Error e = verifyOpStructure(op))
    return e;
  const OpInfo& info = op.info();
  if (info.verifyHook)
    if (llvm::Error e = info.verifyHook(op))
      return op.emitError(llvm::toString(std::move(e)));
  llvm::Expected<std::vector<TensorType>> types = info.shapeRule(op);
  if (!types)
    return op.emitError(llvm::toString(types.takeError()));
  for (unsigned i = 0; i < op.numResults(); ++i) {
    const TensorType& declared = op.result(i)->type();
    if (declared != (*types)[i])
      return op.emitError(llvm::formatv("result #{0} has type {1}, but its operands give {2}", i,
                                        declared.str(), (*types)[i].str()));
  }
  return verifyAnnotations(op);
}

llvm::Error verifyGraph(const Graph& g) {
  std::unordered_set<const Value*> defined;
  std::set<std::string> names;
  for (const auto& in : g.inputs()) {
    defined.insert(in.get());
    if (!in->name().empty() && !names.insert(in->name()).second)
      return makeError(in->loc(), "input name '%" + in->name() + "' is used twice");
    if (in->role() == InputRole::Label && in->type().dtype == DType::Bool)
      return makeError(in->loc(), "label input '%" + in->name() +
                                      "' must hold class indices (integers) or targets "
                                      "(floats), got " +
                                      in->type().str());
  }
  // Several params may hold one initializer: replicas on distinct devices
  // and shards of it, all of one whole type.
  std::map<std::string, std::vector<const Value*>> initializers;
  for (const auto& p : g.params()) {
    defined.insert(p.get());
    if (!p->name().empty() && !names.insert(p->name()).second)
      return makeError(p->loc(), "value name '%" + p->name() + "' is defined twice");
    if (p->paramName().empty())
      return makeError(p->loc(), "param '%" + p->name() + "' has no initializer name");
    if (p->device() && *p->device() < 0)
      return makeError(
          p->loc(),
          llvm::formatv("param '%{0}': @dev must be >= 0, got {1}", p->name(), *p->device()).str());
    for (const ShardDim& sd : p->shard())
      if (sd.dim < 0 || sd.dim >= p->type().rank() || sd.offset < 0 ||
          sd.offset + p->type().shape[sd.dim] > sd.whole)
        return makeError(p->loc(),
                         "param '%" + p->name() + "': its shard does not fit " + p->type().str());
    auto& same = initializers[p->paramName()];
    for (const Value* q : same) {
      if (q->wholeType() != p->wholeType() || q->zeroInit() != p->zeroInit())
        return makeError(p->loc(), "initializer \"" + p->paramName() +
                                       "\" is bound to params of different types");
      if (q->device().value_or(0) == p->device().value_or(0) && q->shard() == p->shard() &&
          q->type() == p->type())
        return makeError(p->loc(),
                         "initializer \"" + p->paramName() + "\" is bound to two params" +
                             (p->device() ? " on device " + std::to_string(*p->device()) : ""));
    }
    same.push_back(p.get());
  }
  const std::unordered_set<const Value*> params = [&] {
    std::unordered_set<const Value*> out;
    for (const auto& p : g.params())
      out.insert(p.get());
    return out;
  }();
  // An assign writes its param in place: nothing may read the param later.
  std::unordered_set<const Value*> assigned;
  for (const auto& op : g.ops()) {
    for (unsigned i = 0; i < op->numOperands(); ++i) {
      const Value* v = op->operand(i);
      if (!defined.count(v)) {
        std::string what = v->name().empty() ? "a value" : "'%" + v->name() + "'";
        return op->emitError(llvm::formatv("operand #{0} uses {1} before its definition", i, what));
      }
      // An assign's target is written, not read: a second assign is
      // reported as such below.
      bool target = op->kind() == OpKind::Assign && i == 0;
      if (assigned.count(v) && !target)
        return op->emitError("reads param '%" + v->name() + "' after the assign that updates it");
    }
    if (op->kind() == OpKind::Assign && op->numOperands() > 0 &&
        !assigned.insert(op->operand(0)).second)
      return op->emitError("param '%" + op->operand(0)->name() + "' is assigned twice");
    if (llvm::Error e = verifyOp(*op))
      return e;
    // Values are read where they live; communication ops move them.
    for (unsigned i = 0; i < op->numOperands(); ++i) {
      const Value* v = op->operand(i);
      std::optional<int64_t> at = valueDevice(v);
      if (at && *at != operandDevice(*op, i)) {
        std::string what = v->name().empty() ? "a value" : "'%" + v->name() + "'";
        return op->emitError(llvm::formatv("reads operand #{0} ({1}) on device {2}, but it lives "
                                           "on device {3}: move it with a communication op",
                                           i, what, operandDevice(*op, i), *at));
      }
    }
    for (unsigned i = 0; i < op->numResults(); ++i) {
      const Value* r = op->result(i);
      defined.insert(r);
      if (!r->name().empty() && !names.insert(r->name()).second)
        return op->emitError("value name '%" + r->name() + "' is defined twice");
    }
  }
  for (unsigned i = 0; i < g.outputs().size(); ++i) {
    if (!defined.count(g.outputs()[i]))
      return makeError(
          llvm::formatv("graph @{0}: output #{1} is not defined in the graph", g.name(), i).str());
    if (const Value* p = g.outputGradOf(i)) {
      if (!params.count(p))
        return makeError(llvm::formatv("graph @{0}: output #{1} is the @grad of a value that is "
                                       "not a param of the graph",
                                       g.name(), i)
                             .str());
      // Under ZeRO-1 a copy's gradient is its device's share of the rows
      // of the summed gradient: a reduce_scatter's result.
      const Op* def = g.outputs()[i]->definingOp();
      bool share =
          def && def->kind() == OpKind::ReduceScatter && def->operand(0)->type() == p->type();
      // Under mixed precision the fuse pass leaves a float32 param's bf16
      // or fp16 gradient to its update (passes/Fuse.cpp's foldGradCasts).
      const TensorType& t = g.outputs()[i]->type();
      bool narrow = p->type().dtype == DType::F32 &&
                    (t.dtype == DType::BF16 || t.dtype == DType::F16) && t.shape == p->type().shape;
      if (p->type() != t && !share && !narrow)
        return makeError(g.outputs()[i]->loc(),
                         llvm::formatv("output #{0} is @grad(%{1}) but has type {2}, not {3}", i,
                                       p->name(), g.outputs()[i]->type().str(), p->type().str())
                             .str());
    }
  }
  return llvm::Error::success();
}

} // namespace lwcc
