//===- GradRules.h - What a gradient rule sees ------------------*- C++ -*-===//
//
// Each op's gradient rule (the grad column of Ops.def) receives the forward
// op, the gradient of each of its results (null where none flows), and a
// builder placed in the backward part of the graph. It sets the gradient of
// each operand that needs one; autodiff sums gradients of values with
// several uses.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <vector>

namespace lwcc {

struct GradContext {
  Builder& builder;
  const Op& op;
  /// dL/d(result i), or null when no gradient reaches that result.
  std::vector<Value*> dys;
  /// Whether operand i needs a gradient.
  std::vector<bool> needs;
  /// dL/d(operand i), set by the rule for each needed operand.
  std::vector<Value*> dxs;

  Value* x(unsigned i) const { return op.operand(i); }
  Value* y(unsigned i = 0) const { return op.result(i); }
  Value* dy(unsigned i = 0) const { return dys[i]; }
  bool need(unsigned i) const { return i < needs.size() && needs[i]; }

  /// Emits an op with inferred types at the builder's position. A failure
  /// is an internal error of the rule, reported at the forward op.
  llvm::Expected<Value*> emit(OpKind kind, const std::vector<Value*>& operands,
                              std::vector<NamedAttr> attrs = {});
  llvm::Expected<std::vector<Value*>> emitN(OpKind kind, const std::vector<Value*>& operands,
                                            std::vector<NamedAttr> attrs, unsigned numResults);
  /// A scalar constant of `v`'s element type.
  Value* scalar(double value, DType dtype);
  /// Sums `v` over the dims that numpy broadcasting added or stretched to
  /// reach its shape from `shape`, and reshapes it to `shape`.
  llvm::Expected<Value*> sumToShape(Value* v, const Shape& shape);
};

namespace grad {
#define LWCC_GRAD_RULES(X)                                                                         \
  X(conv2d)                                                                                        \
  X(maxPool2d)                                                                                     \
  X(avgPool2d)                                                                                     \
  X(globalAvgPool)                                                                                 \
  X(lrn) X(relu) X(leakyRelu) X(sigmoid) X(tanh) X(exp) X(log) X(sqrt) X(reciprocal) X(neg) X(abs) \
      X(clip) X(add) X(sub) X(mul) X(div) X(pow) X(reduceMean) X(reduceSum) X(gemm) X(matmul)      \
          X(reshape) X(transpose) X(concat) X(slice) X(split) X(gather) X(expand) X(pad) X(cast)   \
              X(softmax) X(logSoftmax) X(batchNormTrain) X(identity) X(softmaxXent) X(mseLoss)     \
                  X(layerNorm) X(erf) X(gatherNd) X(allReduce) X(allGather) X(reduceScatter)       \
                      X(broadcastTo) X(reduceTo) X(deviceCopy) X(shard) X(unshard)
#define X(name) llvm::Error name(GradContext&);
LWCC_GRAD_RULES(X)
#undef X
// The model-collection ops: unary activations (one rule for all), prelu, max and
// min (ActivationOps.cpp), resize (ResizeOps.cpp), batch norm's inference
// form (BatchNormGrad.cpp).
llvm::Error activation(GradContext&);
llvm::Error prelu(GradContext&);
llvm::Error extremum(GradContext&);
llvm::Error where(GradContext&);
llvm::Error resize(GradContext&);
llvm::Error batchNorm(GradContext&);
// Position encodings and norms (EncodingOps.cpp).
llvm::Error cumSum(GradContext&);
llvm::Error tile(GradContext&);
llvm::Error mod(GradContext&);
llvm::Error sin(GradContext&);
llvm::Error cos(GradContext&);
llvm::Error reduceL1(GradContext&);
llvm::Error reduceL2(GradContext&);
llvm::Error reduceSumSquare(GradContext&);
// Language models (LanguageOps.cpp).
llvm::Error gatherElements(GradContext&);
llvm::Error scatterElements(GradContext&);
llvm::Error nllLoss(GradContext&);
// Attention (AttentionOps.cpp).
llvm::Error attention(GradContext&);
} // namespace grad

} // namespace lwcc
