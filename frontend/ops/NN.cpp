//===- NN.cpp - Convolution, pooling, normalization, dropout, softmax -----===//
#include "frontend/Frontend.h"
#include "frontend/ops/Common.h"
#include "onnx/onnx_pb.h"

namespace lwcc {

namespace {

/// A conv or pool window over two spatial dims. 1-D ops are lifted to 2-D
/// with a unit leading spatial dim.
struct Window {
  std::vector<int64_t> kernel, strides, pads, dilations;
  /// Whether auto_pad (SAME_* or VALID) chose the pads.
  bool autoPad = false;
};

llvm::Expected<Window> readWindow(ImportContext& ctx, const Shape& x, std::vector<int64_t> kernel,
                                  bool dilationsAllowed) {
  int64_t spatial = static_cast<int64_t>(x.size()) - 2;
  auto lengthError = [&](const char* name, size_t have, int64_t want) {
    return ctx.error(llvm::formatv("attribute '{0}' has {1} values, but the input {2} has {3} "
                                   "spatial dims (expected {4})",
                                   name, have, shapeStr(x), spatial, want)
                         .str());
  };
  std::vector<int64_t> ones(spatial, 1);
  LWCC_TRY(strides, ctx.attrInts("strides", ones));
  LWCC_TRY(dilations, ctx.attrInts("dilations", ones));
  if (static_cast<int64_t>(strides.size()) != spatial)
    return lengthError("strides", strides.size(), spatial);
  if (static_cast<int64_t>(dilations.size()) != spatial)
    return lengthError("dilations", dilations.size(), spatial);
  for (int64_t v : strides)
    if (v < 1)
      return ctx.error(llvm::formatv("strides must be >= 1, got {0}", v).str());
  for (int64_t v : dilations)
    if (v < 1)
      return ctx.error(llvm::formatv("dilations must be >= 1, got {0}", v).str());
  if (!dilationsAllowed && dilations != ones)
    return ctx.error("dilations other than 1 are not supported for this op");
  LWCC_TRY(autoPad, ctx.attrString("auto_pad", std::string("NOTSET")));
  std::vector<int64_t> pads(2 * spatial, 0);
  if (autoPad == "NOTSET") {
    LWCC_TRY(p, ctx.attrInts("pads", pads));
    if (static_cast<int64_t>(p.size()) != 2 * spatial)
      return lengthError("pads", p.size(), 2 * spatial);
    for (int64_t v : p)
      if (v < 0)
        return ctx.error(llvm::formatv("pads must be >= 0, got {0}", v).str());
    pads = p;
  } else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    for (int64_t d = 0; d < spatial; ++d) {
      int64_t in = x[2 + d], out = (in + strides[d] - 1) / strides[d];
      int64_t total =
          std::max<int64_t>(0, (out - 1) * strides[d] + (kernel[d] - 1) * dilations[d] + 1 - in);
      int64_t small = total / 2, large = total - small;
      pads[d] = autoPad == "SAME_UPPER" ? small : large;
      pads[d + spatial] = autoPad == "SAME_UPPER" ? large : small;
    }
  } else if (autoPad != "VALID") {
    return ctx.error("attribute 'auto_pad' has the unknown value '" + autoPad + "'");
  }
  bool autoPadded = autoPad != "NOTSET";
  if (spatial == 1)
    return Window{
        {1, kernel[0]}, {1, strides[0]}, {0, pads[0], 0, pads[1]}, {1, dilations[0]}, autoPadded};
  return Window{kernel, strides, pads, dilations, autoPadded};
}

/// Checks the input rank of a conv or pool (3 or 4), lifting 1-D to 2-D.
llvm::Expected<Value*> liftInput(ImportContext& ctx, Value* x, const char* what) {
  int64_t rank = x->type().rank();
  if (rank != 3 && rank != 4)
    return ctx.error(llvm::formatv("only 1-D and 2-D {0} are supported; the input {1} has rank {2}",
                                   what, x->type().str(), rank)
                         .str());
  if (rank == 4)
    return x;
  Shape s = x->type().shape;
  s.insert(s.begin() + 2, 1);
  return reshapeTo(ctx, x, s);
}

/// Undoes liftInput on a result.
llvm::Expected<Value*> lowerResult(ImportContext& ctx, Value* y, int64_t rank) {
  if (rank == 4)
    return y;
  Shape s = y->type().shape;
  s.erase(s.begin() + 2);
  return reshapeTo(ctx, y, s);
}

llvm::Error importConv(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}));
  LWCC_TRY(x, ctx.requiredInput(0, "X"));
  LWCC_TRY(w, ctx.requiredInput(1, "W"));
  Value* b = ctx.input(2);
  int64_t rank = x->type().rank();
  if (w->type().rank() != rank)
    return ctx.error(
        llvm::formatv("the weight {0} must have the input's rank {1}", w->type().str(), rank)
            .str());
  std::vector<int64_t> kernel(w->type().shape.begin() + 2, w->type().shape.end());
  LWCC_TRY(kshape, ctx.attrInts("kernel_shape", kernel));
  if (kshape != kernel)
    return ctx.error("attribute 'kernel_shape' " + shapeStr(kshape) +
                     " disagrees with the weight " + w->type().str());
  LWCC_TRY(group, ctx.attrInt("group", 1));
  LWCC_TRY(x4, liftInput(ctx, x, "convolutions"));
  LWCC_TRY(win, readWindow(ctx, x->type().shape, kernel, true));
  Value* w4 = w;
  if (rank == 3) {
    Shape ws = w->type().shape;
    ws.insert(ws.begin() + 2, 1);
    LWCC_TRY(r, reshapeTo(ctx, w, ws));
    w4 = r;
  }
  std::vector<Value*> operands{x4, w4};
  if (b)
    operands.push_back(b);
  LWCC_TRY(y, ctx.emit1(OpKind::Conv2d, operands,
                        {attr("strides", win.strides), attr("pads", win.pads),
                         attr("dilations", win.dilations), attr("group", group)}));
  LWCC_TRY(out, lowerResult(ctx, y, rank));
  ctx.setOutput(0, out);
  return llvm::Error::success();
}

llvm::Error importPool(ImportContext& ctx, bool isMax) {
  if (isMax) {
    LWCC_CHECK(ctx.checkAttrs({"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads",
                               "storage_order", "strides"}));
  } else {
    LWCC_CHECK(ctx.checkAttrs({"auto_pad", "ceil_mode", "count_include_pad", "dilations",
                               "kernel_shape", "pads", "strides"}));
  }
  if (ctx.outputUsed(1))
    return ctx.error("the Indices output of MaxPool is not supported");
  LWCC_TRY(x, ctx.requiredInput(0, "X"));
  int64_t rank = x->type().rank();
  LWCC_TRY(kernel, ctx.attrInts("kernel_shape", std::nullopt));
  if (static_cast<int64_t>(kernel.size()) != rank - 2)
    return ctx.error(llvm::formatv("attribute 'kernel_shape' has {0} values, but the input {1} "
                                   "has {2} spatial dims",
                                   kernel.size(), x->type().str(), rank - 2)
                         .str());
  LWCC_TRY(x4, liftInput(ctx, x, "pools"));
  LWCC_TRY(win, readWindow(ctx, x->type().shape, kernel, isMax));
  LWCC_TRY(ceilMode, ctx.attrInt("ceil_mode", 0));
  // Under auto_pad the output size is fixed (ONNX: ceil(in / stride) for SAME_*,
  // ceil((in - span + 1) / stride) for VALID) and ceil_mode changes nothing:
  // the pads chosen above give exactly that size when rounding down.
  int64_t ceil = win.autoPad ? 0 : ceilMode;
  std::vector<NamedAttr> attrs = {attr("kernel", win.kernel), attr("strides", win.strides),
                                  attr("pads", win.pads)};
  if (isMax) {
    attrs.push_back(attr("dilations", win.dilations));
  } else {
    LWCC_TRY(cip, ctx.attrInt("count_include_pad", 0));
    attrs.push_back(attr("count_include_pad", cip));
  }
  attrs.push_back(attr("ceil_mode", ceil));
  LWCC_TRY(y, ctx.emit1(isMax ? OpKind::MaxPool2d : OpKind::AvgPool2d, {x4}, attrs));
  LWCC_TRY(out, lowerResult(ctx, y, rank));
  ctx.setOutput(0, out);
  return llvm::Error::success();
}

llvm::Error importMaxPool(ImportContext& ctx) { return importPool(ctx, true); }
llvm::Error importAveragePool(ImportContext& ctx) { return importPool(ctx, false); }

llvm::Error importGlobalAveragePool(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({}));
  LWCC_TRY(x, ctx.requiredInput(0, "X"));
  LWCC_TRY(y, ctx.emit1(OpKind::GlobalAvgPool, {x}));
  ctx.setOutput(0, y);
  return llvm::Error::success();
}

llvm::Error importLRN(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"alpha", "beta", "bias", "size"}));
  LWCC_TRY(x, ctx.requiredInput(0, "X"));
  LWCC_TRY(size, ctx.attrInt("size", std::nullopt));
  LWCC_TRY(alpha, ctx.attrFloat("alpha", 1e-4));
  LWCC_TRY(beta, ctx.attrFloat("beta", 0.75));
  LWCC_TRY(bias, ctx.attrFloat("bias", 1.0));
  // ONNX stores these as float32: keep the float32 values exactly.
  LWCC_TRY(y, ctx.emit1(OpKind::Lrn, {x},
                        {attr("size", size), attr("alpha", alpha), attr("beta", beta),
                         attr("bias", bias)}));
  ctx.setOutput(0, y);
  return llvm::Error::success();
}

/// BatchNormalization with training_mode=1 normalizes with the batch's own
/// statistics. The TorchScript exporter writes it for F.batch_norm with
/// training=True and no running statistics (weight standardization in
/// normalizer-free networks), with computed input_mean and input_var that
/// only its unused running-statistics outputs would read: lwcc imports it
/// as batch_norm_train, which computes the same in inference and training.
/// A batch norm layer exported in training mode (its running statistics
/// initializers, which the step would have to update) is refused.
llvm::Error importStatelessBatchNorm(ImportContext& ctx) {
  for (size_t o = 1; o < ctx.numOutputs(); ++o)
    if (ctx.outputUsed(o))
      return ctx.error("training_mode=1 with its running-statistics outputs read is not "
                       "supported");
  for (size_t k : {3, 4})
    if (Value* v = ctx.input(k); v && v->kind() == ValueKind::Param)
      return ctx.error("training_mode=1 on running statistics held in initializers is not "
                       "supported: export the model in eval mode (lwcc builds the training form "
                       "itself, --emit=train-ir)");
  static const char* names[] = {"X", "scale", "B"};
  std::vector<Value*> operands;
  for (size_t k = 0; k < 3; ++k) {
    LWCC_TRY(v, ctx.requiredInput(k, names[k]));
    operands.push_back(v);
  }
  LWCC_TRY(eps, ctx.attrFloat("epsilon", 1e-5));
  LWCC_TRY(ys, ctx.emit(OpKind::BatchNormTrain, operands, {attr("epsilon", eps)}, 3));
  ctx.setOutput(0, ys[0]);
  return llvm::Error::success();
}

llvm::Error importBatchNormalization(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"epsilon", "momentum", "spatial", "training_mode", "is_test"}));
  LWCC_TRY(spatial, ctx.attrInt("spatial", 1));
  if (spatial != 1)
    return ctx.error("spatial=0 (per-activation statistics) is not supported");
  LWCC_TRY(training, ctx.attrInt("training_mode", 0));
  if (training != 0)
    return importStatelessBatchNorm(ctx);
  for (size_t o = 1; o < ctx.numOutputs(); ++o)
    if (ctx.hasOutput(o))
      return ctx.error("the running statistics outputs are not supported (inference form only)");
  std::vector<Value*> operands;
  static const char* names[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (size_t k = 0; k < 5; ++k) {
    LWCC_TRY(v, ctx.requiredInput(k, names[k]));
    operands.push_back(v);
  }
  LWCC_TRY(eps, ctx.attrFloat("epsilon", 1e-5));
  LWCC_TRY(momentum, ctx.attrFloat("momentum", 0.9));
  LWCC_TRY(y, ctx.emit1(OpKind::BatchNorm, operands,
                        {attr("epsilon", eps), attr("momentum", momentum)}));
  ctx.setOutput(0, y);
  return llvm::Error::success();
}

/// LayerNormalization (opset 17): normalizes over the dims from `axis` on.
/// Scale and B broadcast to the normalized shape (an expand where they are
/// smaller); an absent B is zero. The Mean and InvStdDev outputs are
/// lwcc's statistics results, in x's element type.
llvm::Error importLayerNormalization(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"axis", "epsilon", "stash_type"}));
  LWCC_TRY(x, ctx.requiredInput(0, "X"));
  LWCC_TRY(scale, ctx.requiredInput(1, "Scale"));
  const TensorType& xt = x->type();
  if (!isFloat(xt.dtype))
    return ctx.error("input 'X' must have a float element type, got " + xt.str());
  if (xt.rank() < 1)
    return ctx.error("input 'X' must have rank >= 1, got " + xt.str());
  LWCC_TRY(axis, ctx.attrInt("axis", -1));
  LWCC_TRY(a, normalizeAxis(ctx, axis, xt.rank()));
  LWCC_TRY(eps, ctx.attrFloat("epsilon", 1e-5));
  LWCC_TRY(stash, ctx.attrInt("stash_type", 1));
  std::optional<DType> stashType = dtypeFromOnnx(static_cast<int>(stash));
  if (!stashType || !isFloat(*stashType))
    return ctx.error(llvm::formatv("attribute 'stash_type' {0} is not a float type", stash).str());
  // Y does not depend on the stash type beyond rounding (lwcc keeps the
  // statistics in double); Mean and InvStdDev would have its element type.
  for (size_t o = 1; o < 3; ++o)
    if (ctx.outputUsed(o) && *stashType != xt.dtype)
      return ctx.error(llvm::formatv("output '{0}' ({1}) in stash_type {2} differs from the "
                                     "element type of X ({3}); lwcc gives it only in X's type",
                                     ctx.node().output(o), o == 1 ? "Mean" : "InvStdDev",
                                     std::string(dtypeName(*stashType)),
                                     std::string(dtypeName(xt.dtype)))
                           .str());
  TensorType normalized(xt.dtype, Shape(xt.shape.begin() + a, xt.shape.end()));
  auto fit = [&](Value* v, const char* what) -> llvm::Expected<Value*> {
    if (v->type() == normalized)
      return v;
    auto b = shape::broadcast(v->type().shape, normalized.shape);
    bool fits = b && *b == normalized.shape;
    if (!b)
      llvm::consumeError(b.takeError());
    if (v->type().dtype != xt.dtype || !fits)
      return ctx.error(std::string("input '") + what + "' " + v->type().str() +
                       " does not broadcast to the normalized shape " + normalized.str());
    return ctx.emit1(OpKind::Expand, {v}, {attr("shape", normalized.shape)});
  };
  LWCC_TRY(s, fit(scale, "Scale"));
  Value* b = nullptr;
  if (Value* given = ctx.input(2)) {
    LWCC_TRY(fb, fit(given, "B"));
    b = fb;
  } else {
    b = ctx.splat(normalized, 0.0);
  }
  LWCC_TRY(ys, ctx.emit(OpKind::LayerNorm, {x, s, b}, {attr("axis", a), attr("epsilon", eps)}, 3));
  for (size_t o = 0; o < 3; ++o)
    ctx.setOutput(o, ys[o]);
  return llvm::Error::success();
}

/// InstanceNormalization: each (sample, channel) normalized over its
/// spatial dims, then scaled and shifted per channel. lwcc writes it as
/// layer_norm from dim 2 on (unit scale, zero bias) and a per-channel Mul
/// and Add; the exporters write nn.GroupNorm as it, over [N, groups, -1].
llvm::Error importInstanceNormalization(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"epsilon"}));
  LWCC_TRY(x, ctx.requiredInput(0, "input"));
  LWCC_TRY(scale, ctx.requiredInput(1, "scale"));
  LWCC_TRY(bias, ctx.requiredInput(2, "B"));
  const TensorType& xt = x->type();
  if (!isFloat(xt.dtype) || xt.rank() < 3)
    return ctx.error("input 'input' must be a float tensor of rank >= 3 (N, C, D1, ...), got " +
                     xt.str());
  int64_t c = xt.shape[1];
  for (Value* v : {scale, bias})
    if (v->type() != TensorType(xt.dtype, {c}))
      return ctx.error("inputs 'scale' and 'B' must be " + TensorType(xt.dtype, {c}).str() +
                       ", got " + v->type().str());
  LWCC_TRY(eps, ctx.attrFloat("epsilon", 1e-5));
  TensorType inner(xt.dtype, Shape(xt.shape.begin() + 2, xt.shape.end()));
  LWCC_TRY(ys, ctx.emit(OpKind::LayerNorm, {x, ctx.splat(inner, 1.0), ctx.splat(inner, 0.0)},
                        {attr("axis", int64_t{2}), attr("epsilon", eps)}, 3));
  Shape perChannel(static_cast<size_t>(xt.rank() - 1), 1);
  perChannel[0] = c;
  LWCC_TRY(s, reshapeTo(ctx, scale, perChannel));
  LWCC_TRY(b, reshapeTo(ctx, bias, perChannel));
  LWCC_TRY(scaled, ctx.emit1(OpKind::Mul, {ys[0], s}));
  LWCC_TRY(y, ctx.emit1(OpKind::Add, {scaled, b}));
  ctx.setOutput(0, y);
  return llvm::Error::success();
}

llvm::Error importDropout(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"ratio", "seed", "is_test"}));
  LWCC_TRY(x, ctx.requiredInput(0, "data"));
  double ratio = 0.5;
  if (ctx.opset() < 12) {
    LWCC_TRY(r, ctx.attrFloat("ratio", 0.5));
    ratio = r;
  } else {
    if (ctx.input(1)) {
      LWCC_TRY(r, ctx.constFloats(1, "ratio"));
      if (r.size() != 1)
        return ctx.error("input 'ratio' must be a scalar");
      ratio = r[0];
    }
    if (ctx.input(2)) {
      LWCC_TRY(mode, ctx.constFloats(2, "training_mode"));
      if (mode.size() == 1 && mode[0] != 0 && ratio != 0)
        return ctx.error("training_mode=true is not supported at import: lwcc builds the "
                         "training form itself (--emit=train-ir)");
    }
  }
  LWCC_TRY(y, ctx.emit1(OpKind::Dropout, {x}, {attr("ratio", ratio)}));
  ctx.setOutput(0, y);
  if (ctx.hasOutput(1)) {
    // Inference keeps every element. The mask is bool from Dropout-10 on,
    // and of the input's element type before.
    const TensorType& t = x->type();
    ctx.setOutput(1, ctx.splat(ctx.opset() >= 10 ? TensorType(DType::Bool, t.shape) : t, 1.0));
  }
  return llvm::Error::success();
}

llvm::Error importSoftmaxLike(ImportContext& ctx, OpKind kind) {
  LWCC_CHECK(ctx.checkAttrs({"axis"}));
  LWCC_TRY(x, ctx.requiredInput(0, "input"));
  int64_t rank = x->type().rank();
  if (ctx.opset() >= 13) {
    LWCC_TRY(axis, ctx.attrInt("axis", -1));
    LWCC_TRY(a, normalizeAxis(ctx, axis, rank));
    LWCC_TRY(y, ctx.emit1(kind, {x}, {attr("axis", a)}));
    ctx.setOutput(0, y);
    return llvm::Error::success();
  }
  // Before opset 13 the input is coerced to 2-D at 'axis' and normalized
  // over everything after it.
  LWCC_TRY(axis, ctx.attrInt("axis", 1));
  LWCC_TRY(a, normalizeAxis(ctx, axis, rank));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d)
    (d < a ? outer : inner) *= x->type().shape[d];
  LWCC_TRY(flat, reshapeTo(ctx, x, {outer, inner}));
  LWCC_TRY(y, ctx.emit1(kind, {flat}, {attr("axis", int64_t{1})}));
  LWCC_TRY(out, reshapeTo(ctx, y, x->type().shape));
  ctx.setOutput(0, out);
  return llvm::Error::success();
}

llvm::Error importSoftmax(ImportContext& ctx) { return importSoftmaxLike(ctx, OpKind::Softmax); }
llvm::Error importLogSoftmax(ImportContext& ctx) {
  return importSoftmaxLike(ctx, OpKind::LogSoftmax);
}

} // namespace

const std::vector<ImporterEntry>& nnImporters() {
  static const std::vector<ImporterEntry> entries = {
      {"Conv", 1, importConv},
      {"MaxPool", 1, importMaxPool},
      {"AveragePool", 1, importAveragePool},
      {"GlobalAveragePool", 1, importGlobalAveragePool},
      {"LRN", 1, importLRN},
      {"BatchNormalization", 1, importBatchNormalization},
      {"Dropout", 1, importDropout},
      {"LayerNormalization", 17, importLayerNormalization},
      {"InstanceNormalization", 6, importInstanceNormalization},
      {"Softmax", 1, importSoftmax},
      {"LogSoftmax", 1, importLogSoftmax},
  };
  return entries;
}

} // namespace lwcc
