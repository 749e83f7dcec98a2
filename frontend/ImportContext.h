//===- ImportContext.h - What an op importer sees --------------*- C++ -*-===//
//
// Op importers are plain functions grouped by family under frontend/ops/,
// each family's table keyed by (op_type, opset) (declared below). Each reads its
// node's inputs and attributes through the context, emits IR ops, and binds
// the node's outputs. Ops whose operands are all constants fold at once, so
// shape subgraphs (Shape -> Gather -> Concat -> Reshape) become constants.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"
#include "ir/Module.h"

#include <functional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace onnx {
class NodeProto;
class AttributeProto;
} // namespace onnx

namespace lwcc {

class ImportContext {
public:
  ImportContext(Module& module, std::string file, int64_t opset)
      : module_(module), builder_(*module.graph), file_(std::move(file)), opset_(opset) {}

  /// The default-domain opset of the model.
  int64_t opset() const { return opset_; }
  Module& module() { return module_; }
  Builder& builder() { return builder_; }
  const std::string& file() const { return file_; }

  /// Binds an ONNX tensor name to a value.
  void bind(const std::string& name, Value* v) { values_[name] = v; }
  Value* lookup(const std::string& name) const {
    auto it = values_.find(name);
    return it == values_.end() ? nullptr : it->second;
  }
  /// Binds an ONNX sequence name to its tensors: lwcc has no sequence values,
  /// so a sequence of compile-time length is a list of values at import.
  void bindSequence(const std::string& name, std::vector<Value*> values) {
    sequences_[name] = std::move(values);
  }
  const std::vector<Value*>* lookupSequence(const std::string& name) const {
    auto it = sequences_.find(name);
    return it == sequences_.end() ? nullptr : &it->second;
  }

  //===--- While importing one node -------------------------------------===//

  void setNode(const onnx::NodeProto* node);
  const onnx::NodeProto& node() const { return *node_; }
  /// An error naming the file and the node.
  llvm::Error error(const std::string& message) const;

  size_t numInputs() const;
  /// Input `i`, or null when it is absent or given as "".
  Value* input(size_t i) const;
  /// Input `i`, or an error naming `what` when it is absent.
  llvm::Expected<Value*> requiredInput(size_t i, const char* what) const;
  size_t numOutputs() const;
  /// Whether output `i` exists and has a name.
  bool hasOutput(size_t i) const;
  /// Whether output `i` exists and something reads it.
  bool outputUsed(size_t i) const;
  /// The tensor names that some node or the graph output reads.
  void setConsumed(std::set<std::string> names) { consumed_ = std::move(names); }
  /// Binds output `i` of the node to `v` and names `v` after it.
  void setOutput(size_t i, Value* v);

  /// Input `i` as compile-time values: a constant, or a param whose
  /// initializer is known. Errors say that lwcc needs it constant.
  llvm::Expected<std::vector<int64_t>> constInts(size_t i, const char* what) const;
  llvm::Expected<std::vector<double>> constFloats(size_t i, const char* what) const;
  /// Compile-time value of `v`, if it has one.
  const Tensor* constantValue(const Value* v) const;
  /// Param `name`'s initializer values, read by `read` only where an
  /// importer asks for them (constantValue); then kept in the module's
  /// weights. ImportOptions::weights off.
  void deferValues(const std::string& name, std::function<llvm::Expected<Tensor>()> read) {
    deferred_[name] = std::move(read);
  }

  const onnx::AttributeProto* attr(const std::string& name) const;
  bool hasAttr(const std::string& name) const { return attr(name) != nullptr; }
  llvm::Expected<int64_t> attrInt(const std::string& name, std::optional<int64_t> dflt) const;
  llvm::Expected<double> attrFloat(const std::string& name, std::optional<double> dflt) const;
  llvm::Expected<std::string> attrString(const std::string& name,
                                         std::optional<std::string> dflt) const;
  llvm::Expected<std::vector<int64_t>> attrInts(const std::string& name,
                                                std::optional<std::vector<int64_t>> dflt) const;
  llvm::Expected<std::vector<double>> attrFloats(const std::string& name,
                                                 std::optional<std::vector<double>> dflt) const;
  /// Rejects attributes the importer does not read (so that none is dropped
  /// silently); `known` lists the ones it does.
  llvm::Error checkAttrs(std::initializer_list<const char*> known) const;

  /// Creates an op with inferred result types at the node's location; when
  /// every operand is a constant and the result is small, folds it into
  /// constant ops. Shape-rule failures become errors naming the node.
  llvm::Expected<std::vector<Value*>> emit(OpKind kind, const std::vector<Value*>& operands,
                                           std::vector<NamedAttr> attrs = {},
                                           unsigned numResults = 1);
  llvm::Expected<Value*> emit1(OpKind kind, const std::vector<Value*>& operands,
                               std::vector<NamedAttr> attrs = {});
  /// A constant op holding `t`.
  Value* constant(const Tensor& t);
  Value* constantInts(const std::vector<int64_t>& values, DType dtype = DType::I64);
  /// A constant of type `t` with every element `value`, stored as one value.
  Value* splat(const TensorType& t, double value);

private:
  Module& module_;
  Builder builder_;
  std::string file_;
  int64_t opset_;
  const onnx::NodeProto* node_ = nullptr;
  std::unordered_map<std::string, Value*> values_;
  std::unordered_map<std::string, std::vector<Value*>> sequences_;
  std::set<std::string> consumed_;
  /// Values of constant ops, computed once.
  mutable std::unordered_map<const Value*, Tensor> constants_;
  mutable std::unordered_map<std::string, std::function<llvm::Expected<Tensor>()>> deferred_;
};

/// The importer of one ONNX op type, valid from opset `since` until the
/// next entry for the same type.
using ImportFn = llvm::Error (*)(ImportContext&);
struct ImporterEntry {
  const char* opType;
  int since;
  ImportFn fn;
};

// Families, each in frontend/ops/<Family>.cpp.
const std::vector<ImporterEntry>& nnImporters();
const std::vector<ImporterEntry>& mathImporters();
const std::vector<ImporterEntry>& tensorImporters();
const std::vector<ImporterEntry>& reduceImporters();
const std::vector<ImporterEntry>& activationImporters();
const std::vector<ImporterEntry>& resizeImporters();
const std::vector<ImporterEntry>& languageImporters();

/// A float32 value as the decimal its writer meant (0.1f as 0.1), as
/// attrFloat reads float attributes.
double decimalOfFloat(float f);

/// The importer of `opType` at `opset`, or null.
ImportFn findImporter(const std::string& opType, int64_t opset);

} // namespace lwcc
