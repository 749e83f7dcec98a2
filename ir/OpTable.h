//===- OpTable.h - Static information about each op kind --------*- C++ -*-===//
#pragma once

#include "ir/Attribute.h"
#include "ir/Types.h"

#include "llvm/Support/Error.h"

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
Rule assign(const Op&);
Rule layerNormGrad(const Op&);
Rule gatherNdGrad(const Op&);

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
/// The shape of layer_norm's mean and inv_std_dev: x's with the dims from
/// `axis` on set to 1.
llvm::Expected<Shape> layerNormStatShape(const TensorType& x, int64_t axis);
/// The result shape of gather_nd (ONNX GatherND) for these operand shapes.
llvm::Expected<Shape> gatherNdShape(const Shape& data, const Shape& indices, int64_t batchDims);
} // namespace shape

namespace verify {
llvm::Error constant(const Op&);
} // namespace verify

} // namespace lwcc
