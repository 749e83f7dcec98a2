//===- Math.cpp - Elementwise math, activations, Gemm and MatMul ----------===//
#include "frontend/ops/Common.h"

#include <limits>

namespace lwcc {

namespace {

llvm::Error unary(ImportContext& ctx, OpKind kind) {
  LWCC_CHECK(ctx.checkAttrs({}));
  LWCC_TRY(x, ctx.requiredInput(0, "X"));
  LWCC_TRY(y, ctx.emit1(kind, {x}));
  ctx.setOutput(0, y);
  return llvm::Error::success();
}

#define UNARY(NAME, KIND)                                                                          \
  llvm::Error import##NAME(ImportContext& ctx) { return unary(ctx, OpKind::KIND); }
UNARY(Relu, Relu)
UNARY(Sigmoid, Sigmoid)
UNARY(Tanh, Tanh)
UNARY(Exp, Exp)
UNARY(Log, Log)
UNARY(Sqrt, Sqrt)
UNARY(Reciprocal, Reciprocal)
UNARY(Neg, Neg)
UNARY(Abs, Abs)
#undef UNARY

llvm::Error importIdentity(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({}));
  LWCC_TRY(x, ctx.requiredInput(0, "input"));
  // No op: the output is the input (canonicalize would drop it anyway).
  ctx.setOutput(0, x);
  return llvm::Error::success();
}

llvm::Error importLeakyRelu(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"alpha"}));
  LWCC_TRY(x, ctx.requiredInput(0, "X"));
  LWCC_TRY(alpha, ctx.attrFloat("alpha", 0.01));
  LWCC_TRY(y, ctx.emit1(OpKind::LeakyRelu, {x}, {attr("alpha", alpha)}));
  ctx.setOutput(0, y);
  return llvm::Error::success();
}

llvm::Error importClip(ImportContext& ctx) {
  LWCC_TRY(x, ctx.requiredInput(0, "input"));
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  if (ctx.opset() < 11) {
    LWCC_CHECK(ctx.checkAttrs({"min", "max"}));
    LWCC_TRY(a, ctx.attrFloat("min", lo));
    LWCC_TRY(b, ctx.attrFloat("max", hi));
    lo = a;
    hi = b;
  } else {
    LWCC_CHECK(ctx.checkAttrs({}));
    for (size_t k : {1, 2}) {
      if (!ctx.input(k))
        continue;
      LWCC_TRY(v, ctx.constFloats(k, k == 1 ? "min" : "max"));
      if (v.size() != 1)
        return ctx.error(k == 1 ? "input 'min' must be a scalar" : "input 'max' must be a scalar");
      (k == 1 ? lo : hi) = v[0];
    }
  }
  if (!isFloat(x->type().dtype))
    return ctx.error("Clip of " + x->type().str() + " is not supported (float inputs only)");
  if (lo > hi) {
    // ONNX: when min > max every element becomes max.
    lo = hi;
  }
  LWCC_TRY(y, ctx.emit1(OpKind::Clip, {x}, {attr("min", lo), attr("max", hi)}));
  ctx.setOutput(0, y);
  return llvm::Error::success();
}

llvm::Error binary(ImportContext& ctx, OpKind kind) {
  LWCC_CHECK(ctx.checkAttrs({}));
  LWCC_TRY(a, ctx.requiredInput(0, "A"));
  LWCC_TRY(b, ctx.requiredInput(1, "B"));
  LWCC_TRY(y, ctx.emit1(kind, {a, b}));
  ctx.setOutput(0, y);
  return llvm::Error::success();
}

#define BINARY(NAME, KIND)                                                                         \
  llvm::Error import##NAME(ImportContext& ctx) { return binary(ctx, OpKind::KIND); }
BINARY(Add, Add)
BINARY(Sub, Sub)
BINARY(Mul, Mul)
BINARY(Div, Div)
BINARY(MatMul, MatMul)
#undef BINARY

llvm::Error importPow(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({}));
  LWCC_TRY(a, ctx.requiredInput(0, "X"));
  LWCC_TRY(b, ctx.requiredInput(1, "Y"));
  // The exponent may have another element type than the base.
  if (b->type().dtype != a->type().dtype) {
    LWCC_TRY(cast,
             ctx.emit1(OpKind::Cast, {b}, {attr("to", std::string(dtypeName(a->type().dtype)))}));
    b = cast;
  }
  LWCC_TRY(y, ctx.emit1(OpKind::Pow, {a, b}));
  ctx.setOutput(0, y);
  return llvm::Error::success();
}

llvm::Error importGemm(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"alpha", "beta", "transA", "transB", "broadcast"}));
  LWCC_TRY(a, ctx.requiredInput(0, "A"));
  LWCC_TRY(b, ctx.requiredInput(1, "B"));
  Value* c = ctx.input(2);
  if (!c && ctx.opset() < 11)
    return ctx.error("input #2 (C) is required before opset 11");
  LWCC_TRY(alpha, ctx.attrFloat("alpha", 1.0));
  LWCC_TRY(beta, ctx.attrFloat("beta", 1.0));
  LWCC_TRY(ta, ctx.attrInt("transA", 0));
  LWCC_TRY(tb, ctx.attrInt("transB", 0));
  std::vector<Value*> operands{a, b};
  if (c)
    operands.push_back(c);
  LWCC_TRY(y, ctx.emit1(OpKind::Gemm, operands,
                        {attr("transA", ta), attr("transB", tb), attr("alpha", alpha),
                         attr("beta", beta)}));
  ctx.setOutput(0, y);
  return llvm::Error::success();
}

} // namespace

const std::vector<ImporterEntry>& mathImporters() {
  static const std::vector<ImporterEntry> entries = {
      {"Relu", 1, importRelu},       {"LeakyRelu", 1, importLeakyRelu},
      {"Sigmoid", 1, importSigmoid}, {"Tanh", 1, importTanh},
      {"Exp", 1, importExp},         {"Log", 1, importLog},
      {"Sqrt", 1, importSqrt},       {"Reciprocal", 1, importReciprocal},
      {"Neg", 1, importNeg},         {"Abs", 1, importAbs},
      {"Clip", 1, importClip},       {"Identity", 1, importIdentity},
      {"Add", 7, importAdd},         {"Sub", 7, importSub},
      {"Mul", 7, importMul},         {"Div", 7, importDiv},
      {"Pow", 7, importPow},         {"Gemm", 7, importGemm},
      {"MatMul", 1, importMatMul},
  };
  return entries;
}

} // namespace lwcc
