//===- Activation.cpp - Activations of the model collections, PRelu, Max/Min ===//
//
// HardSwish, HardSigmoid, Mish, Softplus, Softsign, Elu, Selu, Celu and
// ThresholdedRelu (each an IR op of its own), PRelu with a trainable slope,
// and Max, Min, the comparisons and the logical ops And, Or, Xor, Not
// (folded when every input is known at compile time, as the exporters'
// adaptive-pool windows and causal masks are).
//
//===----------------------------------------------------------------------===//
#include "frontend/ops/Common.h"
#include "onnx/onnx_pb.h"

#include <limits>

namespace lwcc {

namespace {

/// A float attribute of an activation with its ONNX default.
struct ActAttr {
  const char* name;
  double dflt;
  /// The exact value the exporters mean when they write its float32
  /// rounding (0 when none): PyTorch's constants are doubles.
  double exact = 0.0;
};

/// `v`, or `exact` when `v` is the float32 rounding of `exact`.
double exactIfRounded(double v, double exact) {
  if (exact != 0.0 && static_cast<float>(v) == static_cast<float>(exact))
    return exact;
  return v;
}

llvm::Error activation(ImportContext& ctx, OpKind kind, std::vector<ActAttr> attrs) {
  std::vector<const char*> known;
  for (const ActAttr& a : attrs)
    known.push_back(a.name);
  for (const auto& a : ctx.node().attribute())
    if (std::none_of(known.begin(), known.end(), [&](const char* k) { return a.name() == k; }))
      return ctx.error("attribute '" + a.name() + "' is not supported");
  LWCC_TRY(x, ctx.requiredInput(0, "X"));
  if (!isFloat(x->type().dtype))
    return ctx.error("input 'X' must have a float element type, got " + x->type().str());
  std::vector<NamedAttr> irAttrs;
  for (const ActAttr& a : attrs) {
    LWCC_TRY(v, ctx.attrFloat(a.name, a.dflt));
    irAttrs.push_back(attr(a.name, exactIfRounded(v, a.exact)));
  }
  LWCC_TRY(y, ctx.emit1(kind, {x}, std::move(irAttrs)));
  ctx.setOutput(0, y);
  return llvm::Error::success();
}

llvm::Error importHardSwish(ImportContext& ctx) { return activation(ctx, OpKind::HardSwish, {}); }
// PyTorch's Hardsigmoid is relu6(x + 3) / 6: the exporters write alpha as
// float32(1/6), which lwcc reads as 1/6 so that float64 runs are PyTorch's.
llvm::Error importHardSigmoid(ImportContext& ctx) {
  return activation(ctx, OpKind::HardSigmoid, {{"alpha", 0.2, 1.0 / 6.0}, {"beta", 0.5}});
}
llvm::Error importMish(ImportContext& ctx) { return activation(ctx, OpKind::Mish, {}); }
llvm::Error importSoftplus(ImportContext& ctx) { return activation(ctx, OpKind::Softplus, {}); }
llvm::Error importSoftsign(ImportContext& ctx) { return activation(ctx, OpKind::Softsign, {}); }
llvm::Error importElu(ImportContext& ctx) { return activation(ctx, OpKind::Elu, {{"alpha", 1.0}}); }
// ONNX's defaults are SELU's constants rounded to float32; lwcc reads
// them (written or not) as the exact constants PyTorch computes with.
llvm::Error importSelu(ImportContext& ctx) {
  constexpr double kAlpha = 1.6732632423543772848, kGamma = 1.0507009873554804934;
  return activation(ctx, OpKind::Selu, {{"alpha", kAlpha, kAlpha}, {"gamma", kGamma, kGamma}});
}
llvm::Error importCelu(ImportContext& ctx) {
  return activation(ctx, OpKind::Celu, {{"alpha", 1.0}});
}
llvm::Error importThresholdedRelu(ImportContext& ctx) {
  return activation(ctx, OpKind::ThresholdedRelu, {{"alpha", 1.0}});
}

/// PRelu(X, slope): the slope broadcasts to X (unidirectionally); an
/// initializer slope is a param that trains.
llvm::Error importPRelu(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({}));
  LWCC_TRY(x, ctx.requiredInput(0, "X"));
  LWCC_TRY(slope, ctx.requiredInput(1, "slope"));
  LWCC_TRY(y, ctx.emit1(OpKind::PRelu, {x, slope}));
  ctx.setOutput(0, y);
  return llvm::Error::success();
}

/// Max and Min of one or more inputs of one element type, as a chain of
/// binary ops (which folds when the inputs are known at compile time).
llvm::Error extremum(ImportContext& ctx, OpKind kind) {
  LWCC_CHECK(ctx.checkAttrs({}));
  if (ctx.numInputs() == 0)
    return ctx.error("needs at least one input");
  LWCC_TRY(acc, ctx.requiredInput(0, "data_0"));
  Value* y = acc;
  for (size_t k = 1; k < ctx.numInputs(); ++k) {
    LWCC_TRY(v, ctx.requiredInput(k, "data"));
    if (v->type().dtype != y->type().dtype)
      return ctx.error("inputs must share one element type, got " + y->type().str() + " and " +
                       v->type().str());
    LWCC_TRY(r, ctx.emit1(kind, {y, v}));
    y = r;
  }
  ctx.setOutput(0, y);
  return llvm::Error::success();
}
llvm::Error importMax(ImportContext& ctx) { return extremum(ctx, OpKind::Max); }
llvm::Error importMin(ImportContext& ctx) { return extremum(ctx, OpKind::Min); }

/// Greater, Less, ... and Equal: a bool result (folded when both inputs are
/// known at compile time, as the exporters' index arithmetic is).
llvm::Error comparison(ImportContext& ctx, const char* kind) {
  LWCC_CHECK(ctx.checkAttrs({}));
  LWCC_TRY(a, ctx.requiredInput(0, "A"));
  LWCC_TRY(b, ctx.requiredInput(1, "B"));
  if (a->type().dtype != b->type().dtype)
    return ctx.error("inputs must share one element type, got " + a->type().str() + " and " +
                     b->type().str());
  LWCC_TRY(y, ctx.emit1(OpKind::Compare, {a, b}, {attr("kind", std::string(kind))}));
  ctx.setOutput(0, y);
  return llvm::Error::success();
}
llvm::Error importGreater(ImportContext& ctx) { return comparison(ctx, "greater"); }
llvm::Error importGreaterOrEqual(ImportContext& ctx) { return comparison(ctx, "greater_or_equal"); }
llvm::Error importLess(ImportContext& ctx) { return comparison(ctx, "less"); }
llvm::Error importLessOrEqual(ImportContext& ctx) { return comparison(ctx, "less_or_equal"); }
llvm::Error importEqual(ImportContext& ctx) { return comparison(ctx, "equal"); }

/// And, Or and Xor of bool inputs (numpy broadcasting): compare's logical
/// kinds, folded when both inputs are known at compile time (the
/// exporters' attention masks), computed at run time otherwise.
llvm::Error logical(ImportContext& ctx, const char* kind) {
  LWCC_CHECK(ctx.checkAttrs({}));
  LWCC_TRY(a, ctx.requiredInput(0, "A"));
  LWCC_TRY(b, ctx.requiredInput(1, "B"));
  if (a->type().dtype != DType::Bool || b->type().dtype != DType::Bool)
    return ctx.error("inputs must be bool, got " + a->type().str() + " and " + b->type().str());
  LWCC_TRY(y, ctx.emit1(OpKind::Compare, {a, b}, {attr("kind", std::string(kind))}));
  ctx.setOutput(0, y);
  return llvm::Error::success();
}
llvm::Error importAnd(ImportContext& ctx) { return logical(ctx, "and"); }
llvm::Error importOr(ImportContext& ctx) { return logical(ctx, "or"); }
llvm::Error importXor(ImportContext& ctx) { return logical(ctx, "xor"); }

/// Not of a bool input: its xor with true (folded when the input is known
/// at compile time).
llvm::Error importNot(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({}));
  LWCC_TRY(x, ctx.requiredInput(0, "X"));
  if (x->type().dtype != DType::Bool)
    return ctx.error("input 'X' must be bool, got " + x->type().str());
  Value* yes = ctx.splat(TensorType(DType::Bool, {}), 1.0);
  LWCC_TRY(y, ctx.emit1(OpKind::Compare, {x, yes}, {attr("kind", std::string("xor"))}));
  ctx.setOutput(0, y);
  return llvm::Error::success();
}

/// IsNaN: compare's equal of x with itself, negated (xor with true): a NaN is
/// the only value unequal to itself. The dynamo exporter's attention writes
/// Where(IsNaN(softmax), 0, softmax), zeroing the rows a mask left empty.
llvm::Error importIsNaN(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({}));
  LWCC_TRY(x, ctx.requiredInput(0, "X"));
  if (!isFloat(x->type().dtype))
    return ctx.error("input 'X' must be a float tensor, got " + x->type().str());
  LWCC_TRY(same, ctx.emit1(OpKind::Compare, {x, x}, {attr("kind", std::string("equal"))}));
  Value* yes = ctx.splat(TensorType(DType::Bool, {}), 1.0);
  LWCC_TRY(y, ctx.emit1(OpKind::Compare, {same, yes}, {attr("kind", std::string("xor"))}));
  ctx.setOutput(0, y);
  return llvm::Error::success();
}

/// IsInf: x equal to +inf (detect_positive, default 1) or to -inf
/// (detect_negative, default 1).
llvm::Error importIsInf(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"detect_negative", "detect_positive"}));
  LWCC_TRY(x, ctx.requiredInput(0, "X"));
  if (!isFloat(x->type().dtype))
    return ctx.error("input 'X' must be a float tensor, got " + x->type().str());
  LWCC_TRY(negative, ctx.attrInt("detect_negative", 1));
  LWCC_TRY(positive, ctx.attrInt("detect_positive", 1));
  const TensorType scalar(x->type().dtype, {});
  const double inf = std::numeric_limits<double>::infinity();
  Value* y = nullptr;
  for (auto [detect, value] : {std::pair{positive, inf}, {negative, -inf}}) {
    if (!detect)
      continue;
    LWCC_TRY(is, ctx.emit1(OpKind::Compare, {x, ctx.splat(scalar, value)},
                           {attr("kind", std::string("equal"))}));
    if (y) {
      LWCC_TRY(either, ctx.emit1(OpKind::Compare, {y, is}, {attr("kind", std::string("or"))}));
      y = either;
    } else {
      y = is;
    }
  }
  if (!y) { // neither: false everywhere, as x's shape
    LWCC_TRY(no, ctx.emit1(OpKind::Compare, {x, x}, {attr("kind", std::string("less"))}));
    y = no;
  }
  ctx.setOutput(0, y);
  return llvm::Error::success();
}

} // namespace

const std::vector<ImporterEntry>& activationImporters() {
  static const std::vector<ImporterEntry> entries = {
      {"HardSwish", 14, importHardSwish},
      {"HardSigmoid", 6, importHardSigmoid},
      {"Mish", 18, importMish},
      {"Softplus", 1, importSoftplus},
      {"Softsign", 1, importSoftsign},
      {"Elu", 6, importElu},
      {"Selu", 6, importSelu},
      {"Celu", 12, importCelu},
      {"ThresholdedRelu", 10, importThresholdedRelu},
      {"PRelu", 7, importPRelu},
      {"Max", 8, importMax},
      {"Min", 8, importMin},
      {"Greater", 9, importGreater},
      {"GreaterOrEqual", 12, importGreaterOrEqual},
      {"Less", 9, importLess},
      {"LessOrEqual", 12, importLessOrEqual},
      {"Equal", 11, importEqual},
      {"And", 7, importAnd},
      {"Or", 7, importOr},
      {"Xor", 7, importXor},
      {"Not", 1, importNot},
      {"IsNaN", 9, importIsNaN},
      {"IsInf", 10, importIsInf},
  };
  return entries;
}

} // namespace lwcc
