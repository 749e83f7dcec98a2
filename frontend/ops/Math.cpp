//===- Math.cpp - Elementwise math, activations, Gemm and MatMul ----------===//
#include "frontend/ops/Common.h"
#include "onnx/onnx_pb.h"

#include <algorithm>
#include <cmath>
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
UNARY(Erf, Erf)
UNARY(Sin, Sin)
UNARY(Cos, Cos)
#undef UNARY

/// Gelu (opset 20), written with lwcc's elementwise ops:
/// "none": 0.5 x (1 + erf(x / sqrt(2)));
/// "tanh": 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
llvm::Error importGelu(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"approximate"}));
  LWCC_TRY(x, ctx.requiredInput(0, "X"));
  LWCC_TRY(approx, ctx.attrString("approximate", std::string("none")));
  if (approx != "none" && approx != "tanh")
    return ctx.error("attribute 'approximate' must be \"none\" or \"tanh\", got \"" + approx +
                     "\"");
  if (!isFloat(x->type().dtype))
    return ctx.error("input 'X' must have a float element type, got " + x->type().str());
  TensorType scalar(x->type().dtype, {});
  auto k = [&](double v) { return ctx.splat(scalar, v); };
  Value* inner = nullptr;
  if (approx == "none") {
    LWCC_TRY(scaled, ctx.emit1(OpKind::Mul, {x, k(0.70710678118654752440)}));
    LWCC_TRY(e, ctx.emit1(OpKind::Erf, {scaled}));
    inner = e;
  } else {
    LWCC_TRY(x2, ctx.emit1(OpKind::Mul, {x, x}));
    LWCC_TRY(x3, ctx.emit1(OpKind::Mul, {x2, x}));
    LWCC_TRY(c3, ctx.emit1(OpKind::Mul, {x3, k(0.044715)}));
    LWCC_TRY(sum, ctx.emit1(OpKind::Add, {x, c3}));
    LWCC_TRY(scaled, ctx.emit1(OpKind::Mul, {sum, k(0.79788456080286535588)}));
    LWCC_TRY(t, ctx.emit1(OpKind::Tanh, {scaled}));
    inner = t;
  }
  LWCC_TRY(one, ctx.emit1(OpKind::Add, {inner, k(1.0)}));
  LWCC_TRY(half, ctx.emit1(OpKind::Mul, {x, k(0.5)}));
  LWCC_TRY(y, ctx.emit1(OpKind::Mul, {half, one}));
  ctx.setOutput(0, y);
  return llvm::Error::success();
}

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

/// Mod (opsets 10, 13): integers with either sign rule, floats with
/// fmod = 1. Index arithmetic on shapes (shifted-window attention) folds at
/// import like any op of constants.
llvm::Error importMod(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"fmod"}));
  LWCC_TRY(a, ctx.requiredInput(0, "A"));
  LWCC_TRY(b, ctx.requiredInput(1, "B"));
  LWCC_TRY(fmod, ctx.attrInt("fmod", 0));
  LWCC_TRY(y, ctx.emit1(OpKind::Mod, {a, b}, {attr("fmod", fmod)}));
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

//===--- Index arithmetic, folded at import ------------------------------===//
//
// PyTorch's exporters compute the windows of adaptive pooling with Floor,
// Sign, Min, Max and comparisons of values that are known at compile time
// (shapes, Range). lwcc evaluates these ops at import; on a value computed
// at run time they are an error that names the input (Min and Max run at
// run time too, as do comparisons: ops/Activation.cpp, folded like any op of
// constants).

/// `t` broadcast (numpy rules) to `shape`, which must be its broadcast.
Tensor broadcastValue(const Tensor& t, const Shape& shape) {
  if (t.type.shape == shape)
    return t;
  Tensor out(TensorType(t.type.dtype, shape));
  size_t rank = shape.size(), lead = rank - t.type.shape.size();
  std::vector<int64_t> st(rank, 0);
  int64_t s = 1;
  for (size_t d = rank; d-- > lead;) {
    int64_t n = t.type.shape[d - lead];
    st[d] = n == 1 ? 0 : s;
    s *= n;
  }
  std::vector<int64_t> idx(rank, 0);
  for (int64_t k = 0; k < out.size(); ++k) {
    int64_t from = 0;
    for (size_t d = 0; d < rank; ++d)
      from += idx[d] * st[d];
    if (t.isFloatData())
      out.f[k] = t.f[from];
    else
      out.i[k] = t.i[from];
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < shape[d])
        break;
      idx[d] = 0;
    }
  }
  return out;
}

/// The compile-time values of inputs [0, n) (all inputs when n is 0),
/// broadcast to one shape.
llvm::Expected<std::vector<Tensor>> foldOperands(ImportContext& ctx, size_t n = 0) {
  if (n == 0)
    n = ctx.numInputs();
  std::vector<const Tensor*> values;
  Shape shape;
  for (size_t k = 0; k < n; ++k) {
    LWCC_TRY(v, ctx.requiredInput(k, "input"));
    const Tensor* t = ctx.constantValue(v);
    if (!t)
      return ctx.error("input '" + ctx.node().input(static_cast<int>(k)) +
                       "' is computed at run time: lwcc supports " + ctx.node().op_type() +
                       " only on values known at compile time (it folds it at import)");
    auto s = shape::broadcast(shape, t->type.shape);
    if (!s)
      return ctx.error(llvm::toString(s.takeError()));
    shape = *s;
    values.push_back(t);
  }
  constexpr int64_t kMaxFolded = int64_t{1} << 20;
  if (TensorType(DType::F32, shape).numElements() > kMaxFolded)
    return ctx.error("the result " + shapeStr(shape) + " is too large to fold");
  std::vector<Tensor> out;
  for (const Tensor* t : values)
    out.push_back(broadcastValue(*t, shape));
  return out;
}

/// Folds an elementwise op of one input: fn(value) -> value, same type.
llvm::Error foldUnary(ImportContext& ctx, double (*fn)(double), bool floatOnly) {
  LWCC_CHECK(ctx.checkAttrs({}));
  LWCC_TRY(vals, foldOperands(ctx, 1));
  Tensor& t = vals[0];
  if (floatOnly && !t.isFloatData())
    return ctx.error("input 'X' must have a float element type, got " + t.type.str());
  for (int64_t k = 0; k < t.size(); ++k) {
    if (t.isFloatData())
      t.f[k] = fn(t.f[k]);
    else
      t.i[k] = static_cast<int64_t>(fn(static_cast<double>(t.i[k])));
  }
  ctx.setOutput(0, ctx.constant(t));
  return llvm::Error::success();
}

double floorOf(double v) { return std::floor(v); }
double ceilOf(double v) { return std::ceil(v); }
double signOf(double v) { return v > 0 ? 1.0 : v < 0 ? -1.0 : 0.0; }
llvm::Error importFloor(ImportContext& ctx) { return foldUnary(ctx, floorOf, true); }
llvm::Error importCeil(ImportContext& ctx) { return foldUnary(ctx, ceilOf, true); }
llvm::Error importSign(ImportContext& ctx) { return foldUnary(ctx, signOf, false); }

/// Where(condition, X, Y) with a condition known at compile time (the
/// exporters' masks): X * c + Y * (1 - c) with c the condition as 0/1 of
/// X's type, which selects exactly for finite values; a term whose value
/// is known to be all zeros (masked_fill with 0) is left out. Where of
/// compile-time values folds. A condition computed at run time (the dynamo
/// exporter's Softplus threshold) selects with lwcc's where op.
llvm::Error importWhere(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({}));
  LWCC_TRY(cond, ctx.requiredInput(0, "condition"));
  LWCC_TRY(x, ctx.requiredInput(1, "X"));
  LWCC_TRY(y, ctx.requiredInput(2, "Y"));
  if (cond->type().dtype != DType::Bool)
    return ctx.error("input 'condition' must be bool, got " + cond->type().str());
  if (x->type().dtype != y->type().dtype)
    return ctx.error("inputs 'X' and 'Y' must share one element type, got " + x->type().str() +
                     " and " + y->type().str());
  const Tensor* c = ctx.constantValue(cond);
  if (!c) {
    LWCC_TRY(w, ctx.emit1(OpKind::Where, {cond, x, y}));
    ctx.setOutput(0, w);
    return llvm::Error::success();
  }
  Shape shape = cond->type().shape;
  for (Value* v : {x, y}) {
    auto s = shape::broadcast(shape, v->type().shape);
    if (!s)
      return ctx.error(llvm::toString(s.takeError()));
    shape = *s;
  }
  const Tensor *xv = ctx.constantValue(x), *yv = ctx.constantValue(y);
  if (xv && yv && !isFloat(x->type().dtype)) { // integer selects fold exactly
    LWCC_TRY(vals, foldOperands(ctx, 3));
    Tensor out = vals[1];
    for (int64_t k = 0; k < out.size(); ++k)
      if (!vals[0].i[k])
        out.i[k] = vals[2].i[k];
    ctx.setOutput(0, ctx.constant(out));
    return llvm::Error::success();
  }
  auto notFinite = [](const Tensor* t) {
    return t && std::any_of(t->f.begin(), t->f.end(), [](double v) { return !std::isfinite(v); });
  };
  if (!isFloat(x->type().dtype) || notFinite(xv) || notFinite(yv)) {
    LWCC_TRY(w, ctx.emit1(OpKind::Where, {cond, x, y}));
    ctx.setOutput(0, w);
    return llvm::Error::success();
  }
  auto allZero = [](const Tensor* t) {
    return t && std::all_of(t->f.begin(), t->f.end(), [](double v) { return v == 0.0; });
  };
  TensorType maskType(x->type().dtype, cond->type().shape);
  std::vector<double> keep(c->i.begin(), c->i.end()), drop;
  for (double v : keep)
    drop.push_back(1.0 - v);
  Value* sum = nullptr;
  auto addTerm = [&](Value* v, std::vector<double> mask) -> llvm::Error {
    LWCC_TRY(term, ctx.emit1(OpKind::Mul, {v, ctx.constant(Tensor::fromFloats(maskType, mask))}));
    if (!sum) {
      sum = term;
      return llvm::Error::success();
    }
    LWCC_TRY(s, ctx.emit1(OpKind::Add, {sum, term}));
    sum = s;
    return llvm::Error::success();
  };
  if (!allZero(xv))
    LWCC_CHECK(addTerm(x, keep));
  if (!allZero(yv))
    LWCC_CHECK(addTerm(y, drop));
  if (!sum) {
    ctx.setOutput(0, ctx.splat(TensorType(x->type().dtype, shape), 0.0));
    return llvm::Error::success();
  }
  if (sum->type().shape != shape) {
    LWCC_TRY(e, ctx.emit1(OpKind::Expand, {sum}, {attr("shape", shape)}));
    sum = e;
  }
  ctx.setOutput(0, sum);
  return llvm::Error::success();
}

} // namespace

const std::vector<ImporterEntry>& mathImporters() {
  // One importer a line.
  // clang-format off
  static const std::vector<ImporterEntry> entries = {
      {"Relu", 1, importRelu},
      {"LeakyRelu", 1, importLeakyRelu},
      {"Sigmoid", 1, importSigmoid},
      {"Tanh", 1, importTanh},
      {"Exp", 1, importExp},
      {"Log", 1, importLog},
      {"Sqrt", 1, importSqrt},
      {"Reciprocal", 1, importReciprocal},
      {"Neg", 1, importNeg},
      {"Abs", 1, importAbs},
      {"Clip", 1, importClip},
      {"Identity", 1, importIdentity},
      {"Add", 7, importAdd},
      {"Sub", 7, importSub},
      {"Mul", 7, importMul},
      {"Div", 7, importDiv},
      {"Pow", 7, importPow},
      {"Gemm", 7, importGemm},
      {"MatMul", 1, importMatMul},
      {"Erf", 9, importErf},
      {"Gelu", 20, importGelu},
      {"Floor", 6, importFloor},
      {"Ceil", 6, importCeil},
      {"Sign", 9, importSign},
      {"Where", 9, importWhere},
      {"Sin", 7, importSin},
      {"Cos", 7, importCos},
      {"Mod", 10, importMod},
  };
  // clang-format on
  return entries;
}

} // namespace lwcc
