//===- OpTable.h - Static information about each op kind --------*- C++ -*-===//
#pragma once

#include "ir/Attribute.h"
#include "ir/Types.h"

#include "llvm/Support/Error.h"

#include <functional>
#include <optional>
#include <string_view>
#include <vector>

namespace lwcc {

class Op;

enum class OpKind : uint16_t {
#define OP(E, ...) E,
#include "ir/Ops.def"
#undef OP
};

struct AttrSpec {
  const char* name;
  AttrKind kind;
  /// Required attributes have no default; optional ones without a default
  /// (OPT_*) may be absent and the shape rule decides what absence means.
  enum Presence { Defaulted, Required, Optional } presence;
  Attribute defaultValue;
};

/// Computes the result types of an op from its operand types and attributes.
/// Errors carry a message without location; the verifier adds the op's.
using ShapeRule = llvm::Expected<std::vector<TensorType>> (*)(const Op&);
/// Checks what a shape rule cannot express. Same error convention.
using VerifyHook = llvm::Error (*)(const Op&);

/// Slots that the training-graph and cost-model passes fill in.
struct GradContext;
struct CostContext;
using GradRule = llvm::Error (*)(GradContext&);
using CostRule = double (*)(const Op&, const CostContext&);
/// For communication ops: the device of operand `index` (or of result
/// `index` when `result`), read from the op's attributes.
using PlacementRule = int64_t (*)(const Op&, bool result, unsigned index);

/// How an op computes a shard of its results on each device from shards of
/// its operands, when its result #0 is split along `dim`.
struct SplitPlan {
  /// Per operand: the dim split the same way (same sizes), or -1 when each
  /// device needs the whole operand.
  std::vector<int64_t> operandDims;
  /// Per result: the dim split the same way, or -1 for a whole result (on
  /// every device, or a partial sum when `partial` says so).
  std::vector<int64_t> resultDims;
  /// Whole results that each device holds only a part of: summed across
  /// devices (Sum), or a mean over the device's shard that the devices'
  /// shares of the split dim weigh (Mean), or a loss's mean over the labels
  /// that count (an ignore index): each shard weighed by its count of them,
  /// which only the labels tell (LabelMean; passes/Materialize.cpp counts
  /// them on each device and all-reduces the counts).
  enum class Partial { None, Sum, Mean, LabelMean } partial = Partial::None;
  /// Sliding-window ops split along height or width (convolution, pooling):
  /// the entries [first, last) of operand #0 along the split dim that the
  /// result's entries [begin, end) read, the halo included. Unset: the
  /// same entries as the result.
  std::function<std::pair<int64_t, int64_t>(int64_t begin, int64_t end)> window;
  /// Each device's share of the split dim is a multiple of this many
  /// entries: the rows of a reshape that merges each operand row into
  /// `granule` of its own ([B, T, D] to [B * T, D]) split along whole rows
  /// of the operand. A split into k shares needs size / granule >= k
  /// (splitUnits).
  int64_t granule = 1;
};
/// Into how many shares `plan` may split a dim of `size` entries.
inline int64_t splitUnits(const SplitPlan& plan, int64_t size) { return size / plan.granule; }
/// The plan for splitting result #0 along `dim`, or nullopt when the op
/// cannot compute shards that way.
using ParallelRule = std::optional<SplitPlan> (*)(const Op&, int64_t dim);
/// Adjusts the attributes of `local`, a shard of `global` whose result #0
/// starts at `offset` along the split `dim` (ops whose attributes hold
/// shapes or global positions).
using LocalizeHook = void (*)(Op& local, const Op& global, int64_t dim, int64_t offset);

/// The lwcc runtime function that computes an op in a trainer (the CPU and
/// CUDA backends share its name and signature: lwrt/cpu_*.h, lwrt/cuda_*.h,
/// lwrt/comm.h) and how codegen lays out its arguments.
struct KernelSpec {
  enum Args : uint8_t {
    Plain,        ///< operands, then results, then the op's parameter struct
    OptionalLast, ///< like Plain; the last operand is a pointer (null when absent)
    OperandList,  ///< a list of the operands, the result (concat)
    ResultList,   ///< the operand, a list of the results (split)
    Fill,         ///< the result, filled once at start-up (constant)
    Assign,       ///< a copy of operand #1 over the state of operand #0
    Comm,         ///< one device's part of a communication op
    Event,        ///< the op's event number (record, wait)
    Generated     ///< a kernel codegen writes into the trainer (fused): operands, then results
  };
  const char* fn = nullptr;
  Args args = Plain;
};

/// What an op is to the fusion pass (passes/Fuse.cpp), after TVM's FuseOps
/// patterns: its rule fuses chains of Elementwise and Broadcast ops over
/// one iteration space into one generated kernel; OutElementwise ops take
/// an activation after them as a library epilogue (codegen); Reduction and
/// Opaque ops end a region.
enum class FusionKind : uint8_t {
  Opaque,         ///< a kernel of its own
  Elementwise,    ///< each result element from the same element of each operand
  Broadcast,      ///< elementwise after numpy broadcasting of its operands
  Reduction,      ///< sums elements along axes
  OutElementwise, ///< a library call whose result an elementwise epilogue may follow
};

struct OpInfo {
  OpKind kind;
  std::string_view mnemonic;
  int minOperands;
  int maxOperands; ///< -1: any number >= minOperands
  int numResults;  ///< -1: variadic (at least one)
  std::vector<AttrSpec> attrs;
  ShapeRule shapeRule;
  VerifyHook verifyHook;
  GradRule gradRule = nullptr;
  CostRule costRule = nullptr;
  /// Set for communication ops only (Ops.def's COMM_OP rows).
  PlacementRule placement = nullptr;
  /// Named traits from ir/OpTraits.def.
  /// The runtime call of the op in a trainer (codegen); every op has one.
  KernelSpec kernel = {};
  ParallelRule parallel = nullptr;
  LocalizeHook localize = nullptr;
  FusionKind fusion = FusionKind::Opaque;
  /// @par and the parallel rule name dims of operand #0, which the op
  /// reduces away (losses, reductions to a scalar).
  bool parOnOperand = false;
  /// Result #0 is a view of operand #0: the same bytes, nothing moves.
  bool view = false;
  /// Per result: the operand its kernel may write it over element by
  /// element (each element read before it is written), kAnyOperand for any
  /// operand of the result's type, or none (-1 / absent).
  std::vector<int> writesOver = {};
  static constexpr int kAnyOperand = -2;
  /// Whether result `r` may be written over operand `i`.
  bool mayWriteOver(unsigned r, unsigned i) const {
    return r < writesOver.size() &&
           (writesOver[r] == kAnyOperand || writesOver[r] == static_cast<int>(i));
  }

  bool isCommunication() const { return placement != nullptr; }
  /// record and wait: the schedule's events, no computation.
  bool isEvent() const { return kind == OpKind::Record || kind == OpKind::Wait; }

  const AttrSpec* findAttr(std::string_view name) const;
};

const OpInfo& opInfo(OpKind kind);
std::optional<OpKind> lookupOpKind(std::string_view mnemonic);
/// Every op in table order.
const std::vector<OpInfo>& allOps();

namespace shape {
using Rule = llvm::Expected<std::vector<TensorType>>;
Rule conv2d(const Op&);
Rule maxPool2d(const Op&);
Rule avgPool2d(const Op&);
Rule globalAvgPool(const Op&);
Rule lrn(const Op&);
Rule floatUnary(const Op&);
Rule numericUnary(const Op&);
Rule floatBroadcastBinary(const Op&);
Rule reduce(const Op&);
Rule gather(const Op&);
Rule expand(const Op&);
Rule pad(const Op&);
Rule cast(const Op&);
/// fused: the types of its results' statements over `shape` (ir/FusedOps.cpp).
Rule fused(const Op&);
Rule clip(const Op&);
Rule broadcastBinary(const Op&);
Rule gemm(const Op&);
Rule matmul(const Op&);
Rule reshape(const Op&);
Rule flatten(const Op&);
Rule transpose(const Op&);
Rule concat(const Op&);
Rule slice(const Op&);
Rule split(const Op&);
Rule softmax(const Op&);
Rule batchNorm(const Op&);
Rule dropout(const Op&);
Rule sameAsOperand(const Op&);
Rule constant(const Op&);
Rule layerNorm(const Op&);
Rule gatherNd(const Op&);
// Training ops (TrainShapeRules.cpp).
Rule softmaxXent(const Op&);
Rule softmaxXentGrad(const Op&);
Rule mseLoss(const Op&);
Rule mseLossGrad(const Op&);
Rule conv2dGradInput(const Op&);
Rule conv2dGradFilter(const Op&);
Rule poolGradFromInput(const Op&);
Rule poolGradFromShape(const Op&);
Rule elementwiseGrad(const Op&);
Rule batchNormTrain(const Op&);
Rule batchNormGrad(const Op&);
Rule sliceGrad(const Op&);
Rule gatherGrad(const Op&);
Rule dropoutMask(const Op&);
Rule sgdUpdate(const Op&);
Rule adamUpdate(const Op&);
Rule lrSchedule(const Op&);
Rule allFinite(const Op&);
// Gradient clipping (GradClipOps.cpp).
Rule squareSum(const Op&);
Rule clipCoef(const Op&);
Rule assign(const Op&);
/// Ops kept for their effect on the schedule (record, wait).
Rule noResults(const Op&);
Rule layerNormGrad(const Op&);
Rule gatherNdGrad(const Op&);
// Activations, prelu and max/min of today's model collections (ActivationOps.cpp).
Rule prelu(const Op&);
Rule preluGrad(const Op&);
Rule extremumGrad(const Op&);
Rule compare(const Op&);
Rule where(const Op&);
// Resize (ResizeOps.cpp).
Rule resize(const Op&);
Rule resizeGrad(const Op&);
// Position encodings and norms (EncodingOps.cpp).
Rule cumSum(const Op&);
Rule tile(const Op&);
Rule mod(const Op&);
/// reduce's rule for operands of rank at most kShardMaxRank; floatReduce
/// also wants a float operand.
Rule normReduce(const Op&);
Rule floatReduce(const Op&);
// Communication ops (CommOps.cpp).
Rule allReduce(const Op&);
Rule allGather(const Op&);
Rule reduceScatter(const Op&);
Rule broadcastTo(const Op&);
Rule reduceTo(const Op&);
Rule shard(const Op&);
Rule unshard(const Op&);

/// numpy broadcasting of two shapes.
llvm::Expected<Shape> broadcast(const Shape& a, const Shape& b);
/// Output length of one spatial dim of a window op (conv or pool).
llvm::Expected<int64_t> windowOutput(int64_t in, int64_t kernel, int64_t stride, int64_t padBegin,
                                     int64_t padEnd, int64_t dilation, bool ceilMode);
/// Resolved (start, step, count) of one sliced dim, with ONNX's clamping.
struct SliceDim {
  int64_t start, step, count;
};
SliceDim resolveSlice(int64_t dim, int64_t start, int64_t end, int64_t step);
/// The types layer_norm over x's dims from `axis` on uses: its mean's and
/// inv_std_dev's (x's with those dims set to 1) and the normalized part's
/// (scale, bias: those dims alone).
struct LayerNormTypes {
  TensorType stat, normalized;
};
llvm::Expected<LayerNormTypes> layerNormTypes(const TensorType& x, int64_t axis);
/// The result shape of gather_nd (ONNX GatherND) for these operand shapes.
llvm::Expected<Shape> gatherNdShape(const Shape& data, const Shape& indices, int64_t batchDims);
// Language models (LanguageOps.cpp).
Rule gatherElements(const Op&);
Rule scatterElements(const Op&);
Rule nllLoss(const Op&);
Rule nllLossGrad(const Op&);
// Attention (AttentionOps.cpp).
Rule attention(const Op&);
Rule attentionGrad(const Op&);
} // namespace shape

namespace verify {
llvm::Error constant(const Op&);
/// fused: its body reads, and each statement computes its declared type.
llvm::Error fused(const Op&);
llvm::Error comm(const Op&);
/// record and wait: a non-negative event number.
llvm::Error event(const Op&);
} // namespace verify

namespace place {
int64_t perDevice(const Op&, bool result, unsigned index);
int64_t fromSrc(const Op&, bool result, unsigned index);
int64_t toDst(const Op&, bool result, unsigned index);
int64_t copy(const Op&, bool result, unsigned index);
} // namespace place

namespace par {
std::optional<SplitPlan> elementwise(const Op&, int64_t dim);
std::optional<SplitPlan> conv2d(const Op&, int64_t dim);
std::optional<SplitPlan> pool(const Op&, int64_t dim);
std::optional<SplitPlan> sampleOnly(const Op&, int64_t dim);
std::optional<SplitPlan> gemm(const Op&, int64_t dim);
std::optional<SplitPlan> reshapeLeading(const Op&, int64_t dim);
std::optional<SplitPlan> concat(const Op&, int64_t dim);
std::optional<SplitPlan> softmax(const Op&, int64_t dim);
std::optional<SplitPlan> batchNormTrain(const Op&, int64_t dim);
std::optional<SplitPlan> loss(const Op&, int64_t dim);
std::optional<SplitPlan> reduce(const Op&, int64_t dim);
std::optional<SplitPlan> dropoutMask(const Op&, int64_t dim);
void localizeShape(Op& local, const Op& global, int64_t dim, int64_t offset);
/// Convolution and pooling split along height or width: pads only at the
/// input's borders; a depthwise convolution split along its channels: a
/// group per channel of the shard.
void localizeWindow(Op& local, const Op& global, int64_t dim, int64_t offset);
void localizeDropoutMask(Op& local, const Op& global, int64_t dim, int64_t offset);
/// Resize along any dim: each device reads the input its taps need (ResizeOps.cpp).
std::optional<SplitPlan> resize(const Op&, int64_t dim);
void localizeResize(Op& local, const Op& global, int64_t dim, int64_t offset);
/// Position encodings and norms (EncodingOps.cpp).
std::optional<SplitPlan> cumSum(const Op&, int64_t dim);
std::optional<SplitPlan> tile(const Op&, int64_t dim);
std::optional<SplitPlan> reduceL2(const Op&, int64_t dim);
/// Language models (LanguageOps.cpp): gather_elements and scatter_elements
/// on a dim other than the axis where data, indices (and updates) agree;
/// nll_loss and its gradient by sample with reduction none.
std::optional<SplitPlan> gatherElements(const Op&, int64_t dim);
std::optional<SplitPlan> nllLoss(const Op&, int64_t dim);
/// The layout ops and norms of transformers (ParallelRules.cpp): transpose
/// (the operand's permuted dim), gather (an embedding lookup: the indices'
/// dims split, the table whole; the table's other dims split, the indices
/// whole), slice and pad (a dim they leave whole), split (a dim other than
/// its axis), layer_norm (a dim before the normalized ones).
std::optional<SplitPlan> transpose(const Op&, int64_t dim);
std::optional<SplitPlan> gather(const Op&, int64_t dim);
std::optional<SplitPlan> slice(const Op&, int64_t dim);
std::optional<SplitPlan> pad(const Op&, int64_t dim);
std::optional<SplitPlan> split(const Op&, int64_t dim);
std::optional<SplitPlan> layerNorm(const Op&, int64_t dim);
/// attention and its gradient along a leading (batch, heads) dim (AttentionOps.cpp).
std::optional<SplitPlan> attention(const Op&, int64_t dim);
} // namespace par

/// Cost rules (ir/CostRules.cpp): FLOPs of one run of the op.
namespace cost {
double conv2d(const Op&, const CostContext&);
double conv2dGradInput(const Op&, const CostContext&);
double conv2dGradFilter(const Op&, const CostContext&);
double gemm(const Op&, const CostContext&);
double pool(const Op&, const CostContext&);
double poolGrad(const Op&, const CostContext&);
double globalAvgPool(const Op&, const CostContext&);
double lrn(const Op&, const CostContext&);
double batchNorm(const Op&, const CostContext&);
double softmax(const Op&, const CostContext&);
double sgdUpdate(const Op&, const CostContext&);
double adamUpdate(const Op&, const CostContext&);
double reduce(const Op&, const CostContext&);
double operandElements(const Op&, const CostContext&);
double none(const Op&, const CostContext&);
double resize(const Op&, const CostContext&);
double normReduce(const Op&, const CostContext&);
/// Language models (LanguageOps.cpp): a scatter's copy of data and its
/// updates; a loss per target (and per input element for the gradient).
double scatterElements(const Op&, const CostContext&);
double nllLoss(const Op&, const CostContext&);
/// attention: its two (forward) or five (gradient) products of Tq x Tk x D
/// and the softmax per score (AttentionOps.cpp).
double attention(const Op&, const CostContext&);
/// fused: each statement's elements.
double fused(const Op&, const CostContext&);
} // namespace cost

} // namespace lwcc
