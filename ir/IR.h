//===- IR.h - Values, ops and graphs ---------------------------*- C++ -*-===//
//
// A Graph holds inputs (role data or label), params (named initializers),
// ops in topological order, and outputs. Each op owns its result Values;
// the graph owns its inputs and params. Values keep use lists so that
// replaceAllUsesWith and dead-code checks are cheap.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Attribute.h"
#include "ir/Diagnostics.h"
#include "ir/OpTable.h"
#include "ir/Types.h"

#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace lwcc {

class Graph;
class Op;

enum class ValueKind : uint8_t { Input, Param, Result };
enum class InputRole : uint8_t { Data, Label };
std::string_view roleName(InputRole r);

/// One use of a value: operand `index` of `user`, or graph output `index`
/// when `user` is null.
struct Use {
  Op* user;
  unsigned index;
  friend bool operator==(const Use&, const Use&) = default;
};

/// One split dim of a shard param: printed `dim: offset of whole`.
struct ShardDim {
  int64_t dim, offset, whole;
  friend bool operator==(const ShardDim&, const ShardDim&) = default;
};

class Value {
public:
  ValueKind kind() const { return kind_; }
  const TensorType& type() const { return type_; }
  void setType(TensorType t) { type_ = std::move(t); }

  /// The name printed after '%'. May be empty: the printer numbers it.
  const std::string& name() const { return name_; }
  void setName(std::string n) { name_ = std::move(n); }

  /// For results: the op that defines this value and which result it is.
  Op* definingOp() const { return def_; }
  unsigned resultIndex() const { return resultIndex_; }
  /// For params: the initializer name; for inputs: the role.
  const std::string& paramName() const { return paramName_; }
  void setParamName(std::string n) { paramName_ = std::move(n); }
  InputRole role() const { return role_; }
  void setRole(InputRole r) { role_ = r; }
  /// For params: starts as zeros instead of an initializer's values
  /// (optimizer state, counters).
  bool zeroInit() const { return zeroInit_; }
  void setZeroInit(bool z) { zeroInit_ = z; }
  /// For params: kept as initialized (fine-tuning's frozen weights): no
  /// gradient, no optimizer state, no update. Printed `frozen`.
  bool frozen() const { return frozen_; }
  void setFrozen(bool f) { frozen_ = f; }
  /// For params: the device that holds it (device 0 when unset), printed
  /// @dev(N) after the type.
  std::optional<int64_t> device() const { return device_; }
  void setDevice(std::optional<int64_t> d) { device_ = d; }
  /// For params that are a shard of their initializer: per split dim, in
  /// dim order, where the shard starts and the whole tensor's size there;
  /// the shard's extent is its type's. Empty: the whole tensor.
  const std::vector<ShardDim>& shard() const { return shard_; }
  void setShard(std::vector<ShardDim> s) { shard_ = std::move(s); }
  /// The whole tensor's type, for a shard param; the value's type otherwise.
  TensorType wholeType() const;

  const Location& loc() const { return loc_; }
  void setLoc(Location l) { loc_ = std::move(l); }

  const std::vector<Use>& uses() const { return uses_; }
  bool hasUses() const { return !uses_.empty(); }
  /// Rewrites every use (op operands and graph outputs) to `other`.
  void replaceAllUsesWith(Value* other);

private:
  friend class Op;
  friend class Graph;
  Value(ValueKind k, TensorType t) : kind_(k), type_(std::move(t)) {}

  ValueKind kind_;
  TensorType type_;
  std::string name_;
  Graph* owner_ = nullptr; ///< The graph whose outputs may list this value.
  Op* def_ = nullptr;
  unsigned resultIndex_ = 0;
  std::string paramName_;
  InputRole role_ = InputRole::Data;
  bool zeroInit_ = false;
  bool frozen_ = false;
  std::optional<int64_t> device_;
  std::vector<ShardDim> shard_;
  Location loc_;
  std::vector<Use> uses_;
};

/// A degree per parallelizable output dim (n, c, h, w, or d0, d1, ... for
/// ops without named dims) and the devices the op runs on.
struct ParallelConfig {
  std::vector<std::pair<std::string, int64_t>> degrees;
  std::vector<int64_t> devices;
  /// The entries of the split dim each device gets, in device-list order
  /// (one split dim only). Empty: as even as possible, the first devices
  /// taking one more.
  std::vector<int64_t> sizes;
  int64_t totalDegree() const;
  friend bool operator==(const ParallelConfig&, const ParallelConfig&) = default;
};

class Op;
/// The value whose dims an op's @par names: operand #0 for ops whose
/// parallel rule is on the operand (parOnOperand), else result #0.
const Value* parSplitValue(const Op& op);
/// @par's name of `dim` of a value of `rank`: n, c, h, w for rank 4, n, c
/// for rank 2, d0, d1, ... otherwise.
std::string parDimName(int64_t dim, int64_t rank);
/// The dim that `name` denotes for a value of `rank` (n, c, h, w; n, c;
/// d<k> for any rank), or nullopt.
std::optional<int64_t> parDimIndex(const std::string& name, int64_t rank);

/// What later passes record on an op. Unset fields print nothing.
struct Annotations {
  std::optional<ParallelConfig> par;
  std::optional<int64_t> device;
  std::optional<int64_t> stream;
  std::optional<int64_t> microBatch;
  /// Arena offset of each result, in result order.
  std::optional<std::vector<int64_t>> bufferOffsets;
  bool empty() const { return !par && !device && !stream && !microBatch && !bufferOffsets; }
  friend bool operator==(const Annotations&, const Annotations&) = default;
};

class Op {
public:
  OpKind kind() const { return kind_; }
  const OpInfo& info() const { return *info_; }
  std::string_view mnemonic() const { return info().mnemonic; }
  Graph* parent() const { return parent_; }

  unsigned numOperands() const { return static_cast<unsigned>(operands_.size()); }
  Value* operand(unsigned i) const { return operands_[i]; }
  const std::vector<Value*>& operands() const { return operands_; }
  void setOperand(unsigned i, Value* v);
  void addOperand(Value* v);

  unsigned numResults() const { return static_cast<unsigned>(results_.size()); }
  Value* result(unsigned i = 0) const { return results_[i].get(); }
  bool hasUsedResults() const;

  /// Attributes as stored (only those set explicitly), in insertion order.
  const std::vector<NamedAttr>& attrs() const { return attrs_; }
  const Attribute* findAttr(std::string_view name) const;
  bool hasAttr(std::string_view name) const { return findAttr(name) != nullptr; }
  void setAttr(std::string_view name, Attribute value);
  void removeAttr(std::string_view name);
  /// The stored value, or the table default. The attribute must be declared
  /// in the op table with that kind, and present if it has no default.
  int64_t getInt(std::string_view name) const;
  double getFloat(std::string_view name) const;
  const std::string& getString(std::string_view name) const;
  const std::vector<int64_t>& getInts(std::string_view name) const;
  const std::vector<double>& getFloats(std::string_view name) const;

  const Location& loc() const { return loc_; }
  void setLoc(Location l) { loc_ = std::move(l); }
  Annotations& annotations() { return ann_; }
  const Annotations& annotations() const { return ann_; }

  /// "'conv2d' op" or "'conv2d' op \"conv1\"" for messages.
  std::string describe() const;
  /// An error at this op's location whose message starts with describe().
  llvm::Error emitError(const std::string& message) const;

  /// Drops all operand uses; the op must be erased from its graph next.
  void dropOperands();

private:
  friend class Graph;
  friend class Value;
  Op(OpKind k, Location loc) : kind_(k), info_(&opInfo(k)), loc_(std::move(loc)) {}
  const Attribute& attrOrDefault(std::string_view name, AttrKind kind) const;

  OpKind kind_;
  const OpInfo* info_; ///< opInfo(kind_), asked for by every pass of every op
  Graph* parent_ = nullptr;
  std::vector<Value*> operands_;
  std::vector<std::unique_ptr<Value>> results_;
  std::vector<NamedAttr> attrs_;
  Location loc_;
  Annotations ann_;
  std::list<std::unique_ptr<Op>>::iterator self_;
};

using OpList = std::list<std::unique_ptr<Op>>;

class Graph {
public:
  explicit Graph(std::string name = "main") : name_(std::move(name)) {}
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  const std::string& name() const { return name_; }
  void setName(std::string n) { name_ = std::move(n); }

  Value* addInput(std::string name, TensorType type, InputRole role = InputRole::Data);
  Value* addParam(std::string name, std::string initializer, TensorType type);
  const std::vector<std::unique_ptr<Value>>& inputs() const { return inputs_; }
  const std::vector<std::unique_ptr<Value>>& params() const { return params_; }
  Value* input(unsigned i) const { return inputs_[i].get(); }
  Value* param(unsigned i) const { return params_[i].get(); }
  /// Removes an unused param.
  void eraseParam(Value* param);
  /// Removes every param that nothing uses (in one sweep).
  void eraseUnusedParams();

  OpList& ops() { return ops_; }
  const OpList& ops() const { return ops_; }
  size_t numOps() const { return ops_.size(); }

  /// Creates an op before `before` (end of the graph when null) with results
  /// of the given types. Attributes and annotations are set afterwards.
  Op* createOp(OpKind kind, const std::vector<Value*>& operands,
               const std::vector<TensorType>& resultTypes, Location loc = {}, Op* before = nullptr);
  /// Erases an op whose results have no uses.
  void eraseOp(Op* op);
  /// Moves `op` to just before `before` (the end when null).
  void moveOp(Op* op, Op* before);
  Op* nextOp(Op* op) const;

  const std::vector<Value*>& outputs() const { return outputs_; }
  /// Adds an output; `gradOf` marks it as the gradient of that param.
  void addOutput(Value* v, Value* gradOf = nullptr);
  /// The param whose gradient output `i` is (printed @grad(%p)), or null.
  Value* outputGradOf(size_t i) const { return outputGradOf_[i]; }
  void setOutput(unsigned i, Value* v);
  void clearOutputs();

  /// A deep copy: same names, attributes, annotations and locations.
  std::unique_ptr<Graph> clone() const;

  /// A step the planner only prices may stand for devices it left out
  /// (passes/FoldReplicas.cpp): each such device, mapped to the device whose
  /// ops stand for its own. Empty for a whole step.
  const std::map<int64_t, int64_t>& foldedInto() const { return foldedInto_; }
  void setFoldedInto(std::map<int64_t, int64_t> into) { foldedInto_ = std::move(into); }

private:
  friend class Value;
  std::string name_;
  std::vector<std::unique_ptr<Value>> inputs_;
  std::vector<std::unique_ptr<Value>> params_;
  OpList ops_;
  std::vector<Value*> outputs_;
  std::vector<Value*> outputGradOf_;
  std::map<int64_t, int64_t> foldedInto_;
};

/// Creates ops at an insertion point. Results of create() have the given
/// types; createInferred() computes them with the op's shape rule.
class Builder {
public:
  explicit Builder(Graph& g) : graph_(g) {}

  Graph& graph() const { return graph_; }
  void setInsertionPointToEnd() { before_ = nullptr; }
  void setInsertionPointBefore(Op* op) { before_ = op; }
  void setInsertionPointAfter(Op* op) { before_ = graph_.nextOp(op); }
  void setLoc(Location loc) { loc_ = std::move(loc); }
  const Location& loc() const { return loc_; }
  /// The device (@dev) of the ops created from now on; communication ops,
  /// which their attributes place, never get one.
  void setDevice(std::optional<int64_t> device) { device_ = device; }
  std::optional<int64_t> device() const { return device_; }
  /// The micro-batch (@mb) of the ops created from now on, communication
  /// ops included.
  void setMicroBatch(std::optional<int64_t> mb) { microBatch_ = mb; }
  std::optional<int64_t> microBatch() const { return microBatch_; }

  Op* create(OpKind kind, const std::vector<Value*>& operands,
             const std::vector<TensorType>& resultTypes, std::vector<NamedAttr> attrs = {});
  /// Infers result types; an op whose shape rule fails is not created.
  /// `numResults` is needed only for ops with variadic results.
  llvm::Expected<Op*> createInferred(OpKind kind, const std::vector<Value*>& operands,
                                     std::vector<NamedAttr> attrs = {}, unsigned numResults = 1);
  /// Copies `op` with operands looked up in `map` (unmapped operands stay),
  /// and maps the old results to the new ones.
  Op* clone(const Op& op, std::unordered_map<const Value*, Value*>& map);

private:
  Graph& graph_;
  Op* before_ = nullptr;
  Location loc_;
  std::optional<int64_t> device_;
  std::optional<int64_t> microBatch_;
};

/// Where values live. A graph input is host data that every device may
/// read (the trainer gives each device the rows it reads); a param lives on
/// its @dev; a result on its op's @dev, or where a communication op's
/// placement puts it. Unplaced params and ops are on device 0.
std::optional<int64_t> valueDevice(const Value* v);
/// The device on which `op` reads operand `i`.
int64_t operandDevice(const Op& op, unsigned i);
/// Per device, per input of `g` (in order): the rows [begin, end) of dim
/// 0 the device reads (the span of its dim-0 slices of the input, every
/// row for any other read; {0, 0} when it reads none). Empty when an input
/// has no dim 0 or a reader is not placed on one of the `devices`.
std::vector<std::vector<std::pair<int64_t, int64_t>>> inputRowsByDevice(const Graph& g,
                                                                        int64_t devices);
/// The rows [begin, end) of dim 0 of an input that a device holds, at
/// `offset` of its input buffer (-1: it holds none).
struct HeldRows {
  int64_t begin = 0, end = 0, offset = -1;
};
/// Per device, the rows of each input it reads (inputRowsByDevice) packed
/// in input order, each at an `alignment`-aligned offset, and the bytes of
/// them all (a CUDA trainer's input buffer of the device). Empty when
/// inputRowsByDevice is.
struct PackedInputs {
  std::vector<std::vector<HeldRows>> rows; ///< per device, per input
  std::vector<int64_t> bytes;              ///< per device
};
PackedInputs packInputRows(const Graph& g, int64_t devices, int64_t alignment);
/// The device of `op` itself (@dev, or 0); for communication ops, the device
/// of result #0.
int64_t opDevice(const Op& op);
/// The devices `op` runs on: its @dev, or for a communication op every
/// device its operands and results live on (its placement rule).
std::set<int64_t> devicesOf(const Op& op);
/// Whether any param or op of `g` is placed on a device other than 0, or
/// communicates.
bool isMultiDevice(const Graph& g);
/// Bytes that a communication op moves between devices in one run, with
/// ring algorithms for the collectives (all_reduce: 2(p-1)/p of each
/// device's tensor sent by each device); 0 for other ops.
int64_t commBytes(const Op& op);

} // namespace lwcc
