//===- IR.cpp - Values, ops, graphs and the builder -----------------------===//
#include "ir/IR.h"

#include "ir/Verifier.h"

#include <algorithm>
#include <cassert>

namespace lwcc {

std::string_view roleName(InputRole r) { return r == InputRole::Label ? "label" : "data"; }

int64_t ParallelConfig::totalDegree() const {
  int64_t n = 1;
  for (const auto& [dim, degree] : degrees)
    n *= degree;
  return n;
}

//===----------------------------------------------------------------------===//
// Value
//===----------------------------------------------------------------------===//

static void removeUse(std::vector<Use>& uses, Use u) {
  auto it = std::find(uses.begin(), uses.end(), u);
  assert(it != uses.end() && "use list out of sync");
  uses.erase(it);
}

void Value::replaceAllUsesWith(Value* other) {
  if (other == this)
    return;
  std::vector<Use> uses = std::move(uses_);
  uses_.clear();
  for (const Use& u : uses) {
    if (u.user) {
      u.user->operands_[u.index] = other;
    } else {
      // A graph output: find the graph through the other value's owner.
      // Outputs are rewritten by the graph that holds this value.
      assert(owner_ && "graph output use without owning graph");
      owner_->outputs_[u.index] = other;
    }
    other->uses_.push_back(u);
  }
}

//===----------------------------------------------------------------------===//
// Op
//===----------------------------------------------------------------------===//

void Op::setOperand(unsigned i, Value* v) {
  removeUse(operands_[i]->uses_, Use{this, i});
  operands_[i] = v;
  v->uses_.push_back(Use{this, i});
}

void Op::addOperand(Value* v) {
  operands_.push_back(v);
  v->uses_.push_back(Use{this, numOperands() - 1});
}

void Op::dropOperands() {
  for (unsigned i = 0; i < operands_.size(); ++i)
    removeUse(operands_[i]->uses_, Use{this, i});
  operands_.clear();
}

bool Op::hasUsedResults() const {
  return std::any_of(results_.begin(), results_.end(),
                     [](const std::unique_ptr<Value>& r) { return r->hasUses(); });
}

const Attribute* Op::findAttr(std::string_view name) const {
  for (const NamedAttr& a : attrs_)
    if (a.name == name)
      return &a.value;
  return nullptr;
}

void Op::setAttr(std::string_view name, Attribute value) {
  for (NamedAttr& a : attrs_)
    if (a.name == name) {
      a.value = std::move(value);
      return;
    }
  attrs_.push_back(NamedAttr{std::string(name), std::move(value)});
}

void Op::removeAttr(std::string_view name) {
  std::erase_if(attrs_, [&](const NamedAttr& a) { return a.name == name; });
}

const Attribute& Op::attrOrDefault(std::string_view name, AttrKind kind) const {
  if (const Attribute* a = findAttr(name)) {
    assert(a->kind() == kind && "attribute of the wrong kind; verify first");
    return *a;
  }
  const AttrSpec* spec = info().findAttr(name);
  assert(spec && spec->kind == kind && "attribute not declared in Ops.def");
  assert(spec->presence == AttrSpec::Defaulted && "required attribute missing; verify first");
  (void)kind;
  return spec->defaultValue;
}

int64_t Op::getInt(std::string_view n) const { return attrOrDefault(n, AttrKind::Int).getInt(); }
double Op::getFloat(std::string_view n) const {
  return attrOrDefault(n, AttrKind::Float).getFloat();
}
const std::string& Op::getString(std::string_view n) const {
  return attrOrDefault(n, AttrKind::String).getString();
}
const std::vector<int64_t>& Op::getInts(std::string_view n) const {
  return attrOrDefault(n, AttrKind::Ints).getInts();
}
const std::vector<double>& Op::getFloats(std::string_view n) const {
  return attrOrDefault(n, AttrKind::Floats).getFloats();
}

std::string Op::describe() const {
  // Appended piece by piece: GCC 12 reports a false -Wrestrict inside
  // `"literal" + std::string` once inlined at -O2 and above.
  std::string s;
  std::string_view name = mnemonic();
  s.reserve(name.size() + loc_.name.size() + 8);
  s.append("'").append(name).append("' op");
  if (!loc_.name.empty())
    s.append(" \"").append(loc_.name).append("\"");
  return s;
}

llvm::Error Op::emitError(const std::string& message) const {
  return makeError(loc_, describe() + ": " + message);
}

//===----------------------------------------------------------------------===//
// Graph
//===----------------------------------------------------------------------===//

Graph::~Graph() {
  // Ops refer to each other's results; drop all uses before freeing.
  for (auto& op : ops_)
    op->operands_.clear();
}

Value* Graph::addInput(std::string name, TensorType type, InputRole role) {
  auto v = std::unique_ptr<Value>(new Value(ValueKind::Input, std::move(type)));
  v->name_ = std::move(name);
  v->role_ = role;
  v->owner_ = this;
  inputs_.push_back(std::move(v));
  return inputs_.back().get();
}

Value* Graph::addParam(std::string name, std::string initializer, TensorType type) {
  auto v = std::unique_ptr<Value>(new Value(ValueKind::Param, std::move(type)));
  v->name_ = std::move(name);
  v->paramName_ = std::move(initializer);
  v->owner_ = this;
  params_.push_back(std::move(v));
  return params_.back().get();
}

void Graph::eraseParam(Value* param) {
  assert(!param->hasUses() && "erasing a used param");
  std::erase_if(params_, [&](const std::unique_ptr<Value>& p) { return p.get() == param; });
}

void Graph::eraseUnusedParams() {
  std::erase_if(params_, [](const std::unique_ptr<Value>& p) { return !p->hasUses(); });
}

Op* Graph::createOp(OpKind kind, const std::vector<Value*>& operands,
                    const std::vector<TensorType>& resultTypes, Location loc, Op* before) {
  auto op = std::unique_ptr<Op>(new Op(kind, std::move(loc)));
  Op* raw = op.get();
  raw->parent_ = this;
  for (Value* v : operands)
    raw->addOperand(v);
  for (unsigned i = 0; i < resultTypes.size(); ++i) {
    auto r = std::unique_ptr<Value>(new Value(ValueKind::Result, resultTypes[i]));
    r->def_ = raw;
    r->resultIndex_ = i;
    r->owner_ = this;
    raw->results_.push_back(std::move(r));
  }
  auto pos = before ? before->self_ : ops_.end();
  raw->self_ = ops_.insert(pos, std::move(op));
  return raw;
}

void Graph::eraseOp(Op* op) {
  assert(op->parent_ == this && "op of another graph");
  assert(!op->hasUsedResults() && "erasing an op whose results are used");
  op->dropOperands();
  ops_.erase(op->self_);
}

void Graph::moveOp(Op* op, Op* before) {
  auto pos = before ? before->self_ : ops_.end();
  ops_.splice(pos, ops_, op->self_);
}

Op* Graph::nextOp(Op* op) const {
  auto it = std::next(op->self_);
  return it == ops_.end() ? nullptr : it->get();
}

void Graph::addOutput(Value* v, Value* gradOf) {
  outputs_.push_back(v);
  outputGradOf_.push_back(gradOf);
  v->uses_.push_back(Use{nullptr, static_cast<unsigned>(outputs_.size() - 1)});
}

void Graph::setOutput(unsigned i, Value* v) {
  removeUse(outputs_[i]->uses_, Use{nullptr, i});
  outputs_[i] = v;
  v->uses_.push_back(Use{nullptr, i});
}

void Graph::clearOutputs() {
  for (unsigned i = 0; i < outputs_.size(); ++i)
    removeUse(outputs_[i]->uses_, Use{nullptr, i});
  outputs_.clear();
  outputGradOf_.clear();
}

std::unique_ptr<Graph> Graph::clone() const {
  auto g = std::make_unique<Graph>(name_);
  std::unordered_map<const Value*, Value*> map;
  for (const auto& in : inputs_) {
    Value* v = g->addInput(in->name(), in->type(), in->role());
    v->setLoc(in->loc());
    map[in.get()] = v;
  }
  for (const auto& p : params_) {
    Value* v = g->addParam(p->name(), p->paramName(), p->type());
    v->setLoc(p->loc());
    v->setZeroInit(p->zeroInit());
    v->setFrozen(p->frozen());
    v->setDevice(p->device());
    v->setShard(p->shard());
    map[p.get()] = v;
  }
  Builder b(*g);
  for (const auto& op : ops_)
    b.clone(*op, map);
  for (size_t i = 0; i < outputs_.size(); ++i)
    g->addOutput(map.at(outputs_[i]), outputGradOf_[i] ? map.at(outputGradOf_[i]) : nullptr);
  g->foldedInto_ = foldedInto_;
  return g;
}

//===----------------------------------------------------------------------===//
// Builder
//===----------------------------------------------------------------------===//

Op* Builder::create(OpKind kind, const std::vector<Value*>& operands,
                    const std::vector<TensorType>& resultTypes, std::vector<NamedAttr> attrs) {
  Op* op = graph_.createOp(kind, operands, resultTypes, loc_, before_);
  for (NamedAttr& a : attrs)
    op->setAttr(a.name, std::move(a.value));
  if (device_ && !op->info().isCommunication())
    op->annotations().device = device_;
  if (microBatch_)
    op->annotations().microBatch = microBatch_;
  return op;
}

llvm::Expected<Op*> Builder::createInferred(OpKind kind, const std::vector<Value*>& operands,
                                            std::vector<NamedAttr> attrs, unsigned numResults) {
  std::vector<TensorType> placeholder(numResults);
  Op* op = create(kind, operands, placeholder, std::move(attrs));
  // A shape rule may only run on an op with the right arity and attributes.
  if (llvm::Error err = verifyOpStructure(*op)) {
    graph_.eraseOp(op);
    return err;
  }
  llvm::Expected<std::vector<TensorType>> types = op->info().shapeRule(*op);
  if (!types) {
    llvm::Error err = op->emitError(llvm::toString(types.takeError()));
    graph_.eraseOp(op);
    return err;
  }
  if (types->size() != numResults) {
    graph_.eraseOp(op);
    return makeError(loc_, "shape rule of '" + std::string(opInfo(kind).mnemonic) + "' gives " +
                               std::to_string(types->size()) + " results, expected " +
                               std::to_string(numResults));
  }
  for (unsigned i = 0; i < numResults; ++i)
    op->result(i)->setType((*types)[i]);
  return op;
}

Op* Builder::clone(const Op& op, std::unordered_map<const Value*, Value*>& map) {
  std::vector<Value*> operands;
  for (Value* v : op.operands()) {
    auto it = map.find(v);
    operands.push_back(it == map.end() ? v : it->second);
  }
  std::vector<TensorType> types;
  for (unsigned i = 0; i < op.numResults(); ++i)
    types.push_back(op.result(i)->type());
  Op* copy = graph_.createOp(op.kind(), operands, types, op.loc(), before_);
  for (const NamedAttr& a : op.attrs())
    copy->setAttr(a.name, a.value);
  copy->annotations() = op.annotations();
  for (unsigned i = 0; i < op.numResults(); ++i) {
    copy->result(i)->setName(op.result(i)->name());
    copy->result(i)->setLoc(op.result(i)->loc());
    map[op.result(i)] = copy->result(i);
  }
  return copy;
}

} // namespace lwcc

namespace lwcc {

TensorType Value::wholeType() const {
  TensorType t = type_;
  for (const ShardDim& s : shard_)
    t.shape[s.dim] = s.whole;
  return t;
}

std::optional<int64_t> valueDevice(const Value* v) {
  switch (v->kind()) {
  case ValueKind::Input:
    return std::nullopt;
  case ValueKind::Param:
    return v->device().value_or(0);
  case ValueKind::Result: {
    const Op& op = *v->definingOp();
    if (op.info().isCommunication())
      return op.info().placement(op, true, v->resultIndex());
    return op.annotations().device.value_or(0);
  }
  }
  return std::nullopt;
}

int64_t operandDevice(const Op& op, unsigned i) {
  if (op.info().isCommunication())
    return op.info().placement(op, false, i);
  return op.annotations().device.value_or(0);
}

std::vector<std::vector<std::pair<int64_t, int64_t>>> inputRowsByDevice(const Graph& g,
                                                                        int64_t devices) {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> rows(
      static_cast<size_t>(devices), std::vector<std::pair<int64_t, int64_t>>(g.inputs().size()));
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const Value& in = *g.inputs()[i];
    if (in.type().rank() == 0)
      return {};
    const int64_t n = in.type().shape[0];
    for (const Use& u : in.uses()) {
      const int64_t d = u.user ? operandDevice(*u.user, u.index) : -1;
      if (d < 0 || d >= devices)
        return {};
      const Op& op = *u.user;
      int64_t begin = 0, end = n;
      if (op.kind() == OpKind::Slice && u.index == 0 && op.hasAttr("axes") &&
          op.getInts("axes") == std::vector<int64_t>{0} && op.getInts("starts").size() == 1 &&
          op.getInts("ends").size() == 1 &&
          (!op.hasAttr("steps") || op.getInts("steps") == std::vector<int64_t>{1}) &&
          op.getInts("starts")[0] >= 0 && op.getInts("ends")[0] > op.getInts("starts")[0]) {
        begin = std::min(op.getInts("starts")[0], n);
        end = std::min(op.getInts("ends")[0], n);
      }
      auto& r = rows[static_cast<size_t>(d)][i];
      r = r.first >= r.second ? std::make_pair(begin, end)
                              : std::make_pair(std::min(r.first, begin), std::max(r.second, end));
    }
  }
  return rows;
}

PackedInputs packInputRows(const Graph& g, int64_t devices, int64_t alignment) {
  PackedInputs packed;
  const auto rows = inputRowsByDevice(g, devices);
  for (const auto& spans : rows) {
    int64_t at = 0;
    std::vector<HeldRows>& held = packed.rows.emplace_back();
    for (size_t i = 0; i < spans.size(); ++i) {
      const auto [begin, end] = spans[i];
      held.push_back({begin, end, begin < end ? at : -1});
      if (begin < end) {
        const TensorType& t = g.inputs()[i]->type();
        at += t.sizeInBytes() / t.shape[0] * (end - begin);
        at = (at + alignment - 1) / alignment * alignment;
      }
    }
    packed.bytes.push_back(at);
  }
  return packed;
}

int64_t opDevice(const Op& op) {
  if (op.info().isCommunication())
    return op.numResults() ? op.info().placement(op, true, 0) : 0;
  return op.annotations().device.value_or(0);
}

std::set<int64_t> devicesOf(const Op& op) {
  if (!op.info().isCommunication())
    return {opDevice(op)};
  std::set<int64_t> devices;
  for (unsigned i = 0; i < op.numOperands(); ++i)
    devices.insert(operandDevice(op, i));
  for (unsigned r = 0; r < op.numResults(); ++r)
    devices.insert(valueDevice(op.result(r)).value_or(0));
  return devices;
}

bool isMultiDevice(const Graph& g) {
  for (const auto& p : g.params())
    if (p->device().value_or(0) != 0)
      return true;
  for (const auto& op : g.ops())
    if (op->info().isCommunication() || op->annotations().device.value_or(0) != 0)
      return true;
  return false;
}

} // namespace lwcc
