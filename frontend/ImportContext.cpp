//===- ImportContext.cpp --------------------------------------------------===//
#include "frontend/ImportContext.h"

#include "frontend/Frontend.h"
#include "interp/Interpreter.h"
#include "onnx/onnx_pb.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>

namespace lwcc {

/// Results of up to this many elements fold when all operands are constant.
constexpr int64_t kMaxFoldElements = 1 << 16;

void ImportContext::setNode(const onnx::NodeProto* node) {
  node_ = node;
  Location loc;
  loc.name = node->name().empty() ? (node->output_size() ? node->output(0) : node->op_type())
                                  : node->name();
  builder_.setLoc(loc);
}

llvm::Error ImportContext::error(const std::string& message) const {
  const onnx::NodeProto& n = *node_;
  std::string domain = n.domain().empty() ? "ai.onnx" : n.domain();
  std::string name = n.name().empty() ? "<unnamed>" : n.name();
  return makeError(Location{file_, 0, 0, ""},
                   llvm::formatv("node '{0}' ({1}, domain {2}, opset {3}): {4}", name, n.op_type(),
                                 domain, opset_, message)
                       .str());
}

size_t ImportContext::numInputs() const { return node_->input_size(); }
size_t ImportContext::numOutputs() const { return node_->output_size(); }

Value* ImportContext::input(size_t i) const {
  if (i >= numInputs() || node_->input(i).empty())
    return nullptr;
  return lookup(node_->input(i));
}

llvm::Expected<Value*> ImportContext::requiredInput(size_t i, const char* what) const {
  if (Value* v = input(i))
    return v;
  return error(llvm::formatv("input #{0} ({1}) is required", i, what).str());
}

bool ImportContext::hasOutput(size_t i) const {
  return i < numOutputs() && !node_->output(i).empty();
}

bool ImportContext::outputUsed(size_t i) const {
  return hasOutput(i) && consumed_.count(node_->output(i)) != 0;
}

void ImportContext::setOutput(size_t i, Value* v) {
  if (!hasOutput(i))
    return;
  const std::string& name = node_->output(i);
  // The same value may serve several ONNX names (identity-like nodes): keep
  // the first name in the IR.
  if (v->name().empty() && v->kind() == ValueKind::Result)
    v->setName(name);
  bind(name, v);
}

const Tensor* ImportContext::constantValue(const Value* v) const {
  if (v->kind() == ValueKind::Param) {
    auto it = module_.weights.find(v->paramName());
    if (it != module_.weights.end())
      return &it->second;
    auto later = deferred_.find(v->paramName());
    if (later == deferred_.end())
      return nullptr;
    auto t = later->second();
    deferred_.erase(later);
    if (!t) { // checked when imported: a file that changed since
      llvm::consumeError(t.takeError());
      return nullptr;
    }
    return &module_.weights.emplace(v->paramName(), std::move(*t)).first->second;
  }
  Op* def = v->definingOp();
  if (!def || def->kind() != OpKind::Constant)
    return nullptr;
  auto it = constants_.find(v);
  if (it != constants_.end())
    return &it->second;
  auto vals = evaluateOp(*def, {}, Precision::F64);
  if (!vals) {
    llvm::consumeError(vals.takeError());
    return nullptr;
  }
  return &constants_.emplace(v, std::move((*vals)[0])).first->second;
}

llvm::Expected<std::vector<int64_t>> ImportContext::constInts(size_t i, const char* what) const {
  Value* v = input(i);
  if (!v)
    return error(llvm::formatv("input #{0} ({1}) is required", i, what).str());
  const Tensor* t = constantValue(v);
  if (!t)
    return error(llvm::formatv("input #{0} ({1}) must be known at compile time: lwcc needs "
                               "static shapes, and '{2}' is computed at run time",
                               i, what, node_->input(i))
                     .str());
  if (t->isFloatData())
    return error(
        llvm::formatv("input #{0} ({1}) must be an integer tensor, got {2}", i, what, t->type.str())
            .str());
  return t->i;
}

llvm::Expected<std::vector<double>> ImportContext::constFloats(size_t i, const char* what) const {
  Value* v = input(i);
  if (!v)
    return error(llvm::formatv("input #{0} ({1}) is required", i, what).str());
  const Tensor* t = constantValue(v);
  if (!t)
    return error(llvm::formatv("input #{0} ({1}) must be known at compile time, and '{2}' is "
                               "computed at run time",
                               i, what, node_->input(i))
                     .str());
  std::vector<double> out;
  for (int64_t k = 0; k < t->size(); ++k)
    out.push_back(t->get(k));
  return out;
}

const onnx::AttributeProto* ImportContext::attr(const std::string& name) const {
  for (const auto& a : node_->attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

namespace {
const char* attrTypeName(int t) {
  switch (t) {
  case onnx::AttributeProto::FLOAT:
    return "float";
  case onnx::AttributeProto::INT:
    return "int";
  case onnx::AttributeProto::STRING:
    return "string";
  case onnx::AttributeProto::TENSOR:
    return "tensor";
  case onnx::AttributeProto::GRAPH:
    return "graph";
  case onnx::AttributeProto::FLOATS:
    return "floats";
  case onnx::AttributeProto::INTS:
    return "ints";
  case onnx::AttributeProto::STRINGS:
    return "strings";
  default:
    return "other";
  }
}
/// The float attribute `f` as the decimal its writer meant: the shortest
/// one that rounds to `f` (0.001f is 0.001, not 0.0010000000474974513), so
/// that float64 runs compute with the exporter's epsilon and momentum, as
/// the framework it came from does. In float32 it is `f` again.
double attrValue(float f) {
  for (int digits = 1; digits <= 9; ++digits) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(f));
    double d = std::strtod(buf, nullptr);
    if (static_cast<float>(d) == f)
      return d;
  }
  return f; // NaN
}

std::vector<double> attrValues(const google::protobuf::RepeatedField<float>& fs) {
  std::vector<double> out;
  for (float f : fs)
    out.push_back(attrValue(f));
  return out;
}

} // namespace

double decimalOfFloat(float f) { return attrValue(f); }

#define ATTR_GETTER(RET, NAME, ENUM, EXTRACT)                                                      \
  llvm::Expected<RET> ImportContext::NAME(const std::string& name, std::optional<RET> dflt)        \
      const {                                                                                      \
    const onnx::AttributeProto* a = attr(name);                                                    \
    if (!a) {                                                                                      \
      if (dflt)                                                                                    \
        return *dflt;                                                                              \
      return error("attribute '" + name + "' is required");                                        \
    }                                                                                              \
    if (a->type() != onnx::AttributeProto::ENUM)                                                   \
      return error("attribute '" + name + "' must be " +                                           \
                   attrTypeName(onnx::AttributeProto::ENUM) + ", got " + attrTypeName(a->type())); \
    return EXTRACT;                                                                                \
  }

ATTR_GETTER(int64_t, attrInt, INT, a->i())
ATTR_GETTER(double, attrFloat, FLOAT, attrValue(a->f()))
ATTR_GETTER(std::string, attrString, STRING, a->s())
ATTR_GETTER(std::vector<int64_t>, attrInts, INTS,
            std::vector<int64_t>(a->ints().begin(), a->ints().end()))
ATTR_GETTER(std::vector<double>, attrFloats, FLOATS, attrValues(a->floats()))
#undef ATTR_GETTER

llvm::Error ImportContext::checkAttrs(std::initializer_list<const char*> known) const {
  for (const auto& a : node_->attribute())
    if (std::none_of(known.begin(), known.end(), [&](const char* k) { return a.name() == k; }))
      return error("attribute '" + a.name() + "' is not supported");
  return llvm::Error::success();
}

Value* ImportContext::constant(const Tensor& t) {
  Op* c = builder_.create(OpKind::Constant, {}, {t.type});
  if (t.isFloatData())
    c->setAttr("value", Attribute(t.f));
  else
    c->setAttr("ivalue", Attribute(t.i));
  constants_[c->result()] = t;
  return c->result();
}

Value* ImportContext::splat(const TensorType& t, double value) {
  Op* c = builder_.create(OpKind::Constant, {}, {t});
  if (isFloat(t.dtype))
    c->setAttr("value", Attribute(std::vector<double>{value}));
  else
    c->setAttr("ivalue", Attribute(std::vector<int64_t>{static_cast<int64_t>(value)}));
  return c->result();
}

Value* ImportContext::constantInts(const std::vector<int64_t>& values, DType dtype) {
  return constant(
      Tensor::fromInts(TensorType(dtype, {static_cast<int64_t>(values.size())}), values));
}

namespace {
/// The message of `e` without its location: error() names the node already.
std::string withoutLocation(llvm::Error e) {
  std::string message;
  llvm::handleAllErrors(
      std::move(e), [&](const LocatedError& le) { message = le.text(); },
      [&](const llvm::ErrorInfoBase& other) { message = other.message(); });
  return message;
}
} // namespace

llvm::Expected<std::vector<Value*>> ImportContext::emit(OpKind kind,
                                                        const std::vector<Value*>& operands,
                                                        std::vector<NamedAttr> attrs,
                                                        unsigned numResults) {
  auto op = builder_.createInferred(kind, operands, std::move(attrs), numResults);
  if (!op)
    return error(withoutLocation(op.takeError()));
  std::vector<Value*> results;
  for (unsigned k = 0; k < (*op)->numResults(); ++k)
    results.push_back((*op)->result(k));

  // Fold ops of constants (params are weights: they stay).
  std::vector<const Tensor*> values;
  for (Value* v : operands) {
    if (!v->definingOp() || v->definingOp()->kind() != OpKind::Constant)
      return results;
    values.push_back(constantValue(v));
  }
  if (operands.empty())
    return results;
  for (Value* r : results)
    if (r->type().numElements() > kMaxFoldElements)
      return results;
  auto folded = evaluateOp(**op, values, Precision::F64);
  if (!folded)
    return error(withoutLocation(folded.takeError()));
  module_.graph->eraseOp(*op);
  results.clear();
  for (Tensor& t : *folded)
    results.push_back(constant(t));
  return results;
}

llvm::Expected<Value*> ImportContext::emit1(OpKind kind, const std::vector<Value*>& operands,
                                            std::vector<NamedAttr> attrs) {
  auto r = emit(kind, operands, std::move(attrs), 1);
  if (!r)
    return r.takeError();
  return r->front();
}

namespace {
using Family = const std::vector<ImporterEntry>& (*)();
constexpr Family kFamilies[] = {&nnImporters,      &mathImporters,       &tensorImporters,
                                &reduceImporters,  &activationImporters, &resizeImporters,
                                &languageImporters};
} // namespace

ImportFn findImporter(const std::string& opType, int64_t opset) {
  static const std::map<std::string, std::vector<ImporterEntry>> table = [] {
    std::map<std::string, std::vector<ImporterEntry>> t;
    for (auto* family : kFamilies)
      for (const ImporterEntry& e : family())
        t[e.opType].push_back(e);
    for (auto& [name, entries] : t)
      std::sort(entries.begin(), entries.end(),
                [](const ImporterEntry& a, const ImporterEntry& b) { return a.since < b.since; });
    return t;
  }();
  auto it = table.find(opType);
  if (it == table.end())
    return nullptr;
  ImportFn fn = nullptr;
  for (const ImporterEntry& e : it->second)
    if (e.since <= opset)
      fn = e.fn;
  return fn;
}

std::vector<std::string> supportedOnnxOps() {
  std::vector<std::string> ops;
  for (auto* family : kFamilies)
    for (const ImporterEntry& e : family())
      if (std::find(ops.begin(), ops.end(), e.opType) == ops.end())
        ops.push_back(e.opType);
  std::sort(ops.begin(), ops.end());
  return ops;
}

} // namespace lwcc
