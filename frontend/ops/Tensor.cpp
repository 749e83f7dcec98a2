//===- Tensor.cpp - Shape and data movement ops ---------------------------===//
//
// Reshape, Flatten, Transpose, Concat, Slice, Split, Squeeze, Unsqueeze,
// Gather, GatherND, Shape, Constant, ConstantOfShape, Cast, CastLike, Range,
// SplitToSequence, SequenceAt, Expand, Pad, CumSum, Tile. Inputs that
// carry shapes or indices (Reshape's shape, Slice's starts, ...) must be
// known at compile time; Shape itself folds to a constant.
//
//===----------------------------------------------------------------------===//
#include "frontend/Frontend.h"
#include "frontend/ops/Common.h"
#include "onnx/onnx_pb.h"

#include <cmath>
#include <filesystem>
#include <numeric>

namespace lwcc {

namespace {

using llvm::Error;

/// The folder external tensor data must stay inside: the model's.
std::string modelDir(const ImportContext& ctx) {
  return std::filesystem::path(ctx.file()).parent_path().string();
}

Error importReshape(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"allowzero"}));
  LWCC_TRY(x, ctx.requiredInput(0, "data"));
  LWCC_TRY(spec, ctx.constInts(1, "shape"));
  LWCC_TRY(allowZero, ctx.attrInt("allowzero", 0));
  const Shape& in = x->type().shape;
  Shape out;
  int64_t inferred = -1, known = 1;
  for (size_t d = 0; d < spec.size(); ++d) {
    int64_t v = spec[d];
    if (v == 0 && !allowZero) {
      if (d >= in.size())
        return ctx.error(llvm::formatv("shape {0} copies dim {1}, which the input {2} lacks",
                                       shapeStr(spec), d, x->type().str())
                             .str());
      v = in[d];
    }
    if (v == -1) {
      if (inferred >= 0)
        return ctx.error("shape " + shapeStr(spec) + " has more than one -1");
      inferred = static_cast<int64_t>(d);
      out.push_back(1);
      continue;
    }
    if (v < -1)
      return ctx.error(llvm::formatv("shape {0} has the invalid dim {1}", shapeStr(spec), v).str());
    out.push_back(v);
    known *= v;
  }
  if (inferred >= 0) {
    int64_t total = x->type().numElements();
    if (known == 0 || total % known != 0)
      return ctx.error("cannot reshape " + x->type().str() + " to " + shapeStr(spec));
    out[inferred] = total / known;
  }
  LWCC_TRY(y, ctx.emit1(OpKind::Reshape, {x}, {attr("shape", out)}));
  ctx.setOutput(0, y);
  return Error::success();
}

Error importFlatten(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"axis"}));
  LWCC_TRY(x, ctx.requiredInput(0, "input"));
  LWCC_TRY(axis, ctx.attrInt("axis", 1));
  LWCC_TRY(a, normalizeAxis(ctx, axis, x->type().rank(), true));
  LWCC_TRY(y, ctx.emit1(OpKind::Flatten, {x}, {attr("axis", a)}));
  ctx.setOutput(0, y);
  return Error::success();
}

Error importTranspose(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"perm"}));
  LWCC_TRY(x, ctx.requiredInput(0, "data"));
  std::vector<int64_t> reversed(x->type().rank());
  std::iota(reversed.rbegin(), reversed.rend(), 0);
  LWCC_TRY(perm, ctx.attrInts("perm", reversed));
  for (int64_t p : perm)
    if (p < 0)
      return ctx.error("attribute 'perm' has the negative entry " + std::to_string(p));
  LWCC_TRY(y, ctx.emit1(OpKind::Transpose, {x}, {attr("perm", perm)}));
  ctx.setOutput(0, y);
  return Error::success();
}

Error importConcat(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"axis"}));
  std::vector<Value*> operands;
  for (size_t k = 0; k < ctx.numInputs(); ++k) {
    LWCC_TRY(v, ctx.requiredInput(k, "inputs"));
    operands.push_back(v);
  }
  if (operands.empty())
    return ctx.error("Concat needs at least one input");
  LWCC_TRY(axis, ctx.attrInt("axis", ctx.opset() < 4 ? std::optional<int64_t>(1) : std::nullopt));
  LWCC_TRY(a, normalizeAxis(ctx, axis, operands[0]->type().rank()));
  LWCC_TRY(y, ctx.emit(OpKind::Concat, operands, {attr("axis", a)}));
  ctx.setOutput(0, y[0]);
  return Error::success();
}

Error importSlice(ImportContext& ctx) {
  LWCC_TRY(x, ctx.requiredInput(0, "data"));
  std::vector<int64_t> starts, ends, axes, steps;
  if (ctx.opset() < 10) {
    LWCC_CHECK(ctx.checkAttrs({"starts", "ends", "axes"}));
    LWCC_TRY(s, ctx.attrInts("starts", std::nullopt));
    LWCC_TRY(e, ctx.attrInts("ends", std::nullopt));
    starts = s;
    ends = e;
    if (ctx.hasAttr("axes")) {
      LWCC_TRY(a, ctx.attrInts("axes", std::nullopt));
      axes = a;
    }
  } else {
    LWCC_CHECK(ctx.checkAttrs({}));
    LWCC_TRY(s, ctx.constInts(1, "starts"));
    LWCC_TRY(e, ctx.constInts(2, "ends"));
    starts = s;
    ends = e;
    if (ctx.input(3)) {
      LWCC_TRY(a, ctx.constInts(3, "axes"));
      axes = a;
    }
    if (ctx.input(4)) {
      LWCC_TRY(st, ctx.constInts(4, "steps"));
      steps = st;
    }
  }
  if (axes.empty()) {
    axes.resize(starts.size());
    std::iota(axes.begin(), axes.end(), 0);
  }
  if (steps.empty())
    steps.assign(starts.size(), 1);
  for (int64_t& a : axes) {
    LWCC_TRY(n, normalizeAxis(ctx, a, x->type().rank()));
    a = n;
  }
  LWCC_TRY(y, ctx.emit1(OpKind::Slice, {x},
                        {attr("starts", starts), attr("ends", ends), attr("axes", axes),
                         attr("steps", steps)}));
  ctx.setOutput(0, y);
  return Error::success();
}

Error importSplit(ImportContext& ctx) {
  // 'split' moved to an input at 13; 'num_outputs' came at 18.
  LWCC_CHECK(ctx.opset() < 13   ? ctx.checkAttrs({"axis", "split"})
             : ctx.opset() < 18 ? ctx.checkAttrs({"axis"})
                                : ctx.checkAttrs({"axis", "num_outputs"}));
  LWCC_TRY(x, ctx.requiredInput(0, "input"));
  LWCC_TRY(axis, ctx.attrInt("axis", 0));
  LWCC_TRY(a, normalizeAxis(ctx, axis, x->type().rank()));
  int64_t dim = x->type().shape[a];
  int64_t n = static_cast<int64_t>(ctx.numOutputs());
  std::vector<int64_t> sizes;
  if (ctx.opset() < 13 && ctx.hasAttr("split")) {
    LWCC_TRY(s, ctx.attrInts("split", std::nullopt));
    sizes = s;
  } else if (ctx.opset() >= 13 && ctx.input(1)) {
    LWCC_TRY(s, ctx.constInts(1, "split"));
    sizes = s;
  } else {
    if (ctx.opset() >= 18) {
      LWCC_TRY(num, ctx.attrInt("num_outputs", std::nullopt));
      if (num != n)
        return ctx.error(
            llvm::formatv("num_outputs is {0}, but the node has {1} outputs", num, n).str());
    }
    // Equal parts; from opset 18 the last may be smaller.
    int64_t part = ctx.opset() >= 18 ? (dim + n - 1) / n : dim / n;
    if (ctx.opset() < 18 && dim % n != 0)
      return ctx.error(
          llvm::formatv("axis {0} of size {1} does not split into {2} equal parts", a, dim, n)
              .str());
    for (int64_t k = 0; k < n; ++k)
      sizes.push_back(std::max<int64_t>(0, std::min(part, dim - k * part)));
  }
  if (static_cast<int64_t>(sizes.size()) != n)
    return ctx.error(llvm::formatv("split has {0} sizes for {1} outputs", sizes.size(), n).str());
  LWCC_TRY(ys, ctx.emit(OpKind::Split, {x}, {attr("axis", a), attr("split", sizes)},
                        static_cast<unsigned>(n)));
  for (int64_t k = 0; k < n; ++k)
    ctx.setOutput(k, ys[k]);
  return Error::success();
}

/// SplitToSequence with a compile-time split (the dynamo exporter's
/// torch.split and chunk): a split whose parts form the sequence.
Error importSplitToSequence(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"axis", "keepdims"}));
  LWCC_TRY(x, ctx.requiredInput(0, "input"));
  LWCC_TRY(axis, ctx.attrInt("axis", 0));
  LWCC_TRY(keepdims, ctx.attrInt("keepdims", 1));
  LWCC_TRY(a, normalizeAxis(ctx, axis, x->type().rank()));
  int64_t dim = x->type().shape[a];
  std::vector<int64_t> sizes;
  if (ctx.input(1)) {
    LWCC_TRY(s, ctx.constInts(1, "split"));
    if (ctx.input(1)->type().rank() == 0) {
      // One length: parts of it, the last one shorter.
      if (s[0] < 1)
        return ctx.error(llvm::formatv("split length must be >= 1, got {0}", s[0]).str());
      for (int64_t off = 0; off < dim; off += s[0])
        sizes.push_back(std::min(s[0], dim - off));
    } else {
      sizes = s;
    }
  } else {
    // No split: parts of length 1, squeezed unless keepdims.
    sizes.assign(dim, 1);
  }
  int64_t total = 0;
  for (int64_t v : sizes)
    total += v < 0 ? dim + 1 : v; // a negative length can never add up
  if (total != dim || sizes.empty())
    return ctx.error(
        llvm::formatv("split lengths add up to {0}, but axis {1} has {2}", total, a, dim).str());
  std::vector<Value*> parts;
  if (sizes.size() == 1) {
    parts.push_back(x);
  } else {
    LWCC_TRY(ys, ctx.emit(OpKind::Split, {x}, {attr("axis", a), attr("split", sizes)},
                          static_cast<unsigned>(sizes.size())));
    parts = ys;
  }
  if (!ctx.input(1) && keepdims == 0)
    for (Value*& v : parts) {
      Shape squeezed = v->type().shape;
      squeezed.erase(squeezed.begin() + a);
      LWCC_TRY(r, ctx.emit1(OpKind::Reshape, {v}, {attr("shape", squeezed)}));
      v = r;
    }
  ctx.bindSequence(ctx.node().output(0), std::move(parts));
  return Error::success();
}

/// SequenceAt with a compile-time position: that tensor of the sequence.
Error importSequenceAt(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({}));
  const std::vector<Value*>* seq =
      ctx.numInputs() > 0 ? ctx.lookupSequence(ctx.node().input(0)) : nullptr;
  if (!seq)
    return ctx.error("input #0 is not a sequence lwcc knows at compile time (only "
                     "SplitToSequence's are)");
  LWCC_TRY(pos, ctx.constInts(1, "position"));
  int64_t n = static_cast<int64_t>(seq->size());
  int64_t k = pos.empty() ? 0 : pos[0];
  if (pos.size() != 1 || k < -n || k >= n)
    return ctx.error(llvm::formatv("position {0} is outside the sequence of {1}", k, n).str());
  ctx.setOutput(0, (*seq)[k < 0 ? k + n : k]);
  return Error::success();
}

/// Axes of Squeeze/Unsqueeze: an attribute before opset 13, an input after.
llvm::Expected<std::optional<std::vector<int64_t>>> readAxes(ImportContext& ctx) {
  if (ctx.opset() < 13) {
    if (!ctx.hasAttr("axes"))
      return std::optional<std::vector<int64_t>>();
    LWCC_TRY(a, ctx.attrInts("axes", std::nullopt));
    return std::optional<std::vector<int64_t>>(a);
  }
  if (!ctx.input(1))
    return std::optional<std::vector<int64_t>>();
  LWCC_TRY(a, ctx.constInts(1, "axes"));
  return std::optional<std::vector<int64_t>>(a);
}

Error importSqueeze(ImportContext& ctx) {
  LWCC_CHECK(ctx.opset() < 13 ? ctx.checkAttrs({"axes"}) : ctx.checkAttrs({}));
  LWCC_TRY(x, ctx.requiredInput(0, "data"));
  LWCC_TRY(axes, readAxes(ctx));
  const Shape& in = x->type().shape;
  std::vector<bool> drop(in.size(), false);
  if (axes) {
    for (int64_t a : *axes) {
      LWCC_TRY(n, normalizeAxis(ctx, a, x->type().rank()));
      if (in[n] != 1)
        return ctx.error(
            llvm::formatv("cannot squeeze axis {0} of {1}: its size is not 1", n, x->type().str())
                .str());
      drop[n] = true;
    }
  } else {
    for (size_t d = 0; d < in.size(); ++d)
      drop[d] = in[d] == 1;
  }
  Shape out;
  for (size_t d = 0; d < in.size(); ++d)
    if (!drop[d])
      out.push_back(in[d]);
  LWCC_TRY(y, reshapeTo(ctx, x, out));
  ctx.setOutput(0, y);
  return Error::success();
}

Error importUnsqueeze(ImportContext& ctx) {
  LWCC_CHECK(ctx.opset() < 13 ? ctx.checkAttrs({"axes"}) : ctx.checkAttrs({}));
  LWCC_TRY(x, ctx.requiredInput(0, "data"));
  LWCC_TRY(axes, readAxes(ctx));
  if (!axes)
    return ctx.error("axes are required");
  int64_t rank = x->type().rank() + static_cast<int64_t>(axes->size());
  std::vector<bool> inserted(rank, false);
  for (int64_t a : *axes) {
    LWCC_TRY(n, normalizeAxis(ctx, a, rank));
    if (inserted[n])
      return ctx.error(llvm::formatv("axis {0} is given twice", n).str());
    inserted[n] = true;
  }
  Shape out;
  size_t k = 0;
  for (int64_t d = 0; d < rank; ++d)
    out.push_back(inserted[d] ? 1 : x->type().shape[k++]);
  LWCC_TRY(y, reshapeTo(ctx, x, out));
  ctx.setOutput(0, y);
  return Error::success();
}

Error importGather(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"axis"}));
  LWCC_TRY(x, ctx.requiredInput(0, "data"));
  LWCC_TRY(idx, ctx.requiredInput(1, "indices"));
  LWCC_TRY(axis, ctx.attrInt("axis", 0));
  LWCC_TRY(a, normalizeAxis(ctx, axis, x->type().rank()));
  LWCC_TRY(y, ctx.emit1(OpKind::Gather, {x, idx}, {attr("axis", a)}));
  ctx.setOutput(0, y);
  return Error::success();
}

Error importShape(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"start", "end"}));
  LWCC_TRY(x, ctx.requiredInput(0, "data"));
  int64_t rank = x->type().rank();
  LWCC_TRY(start, ctx.attrInt("start", 0));
  LWCC_TRY(end, ctx.attrInt("end", rank));
  auto clampAxis = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  start = clampAxis(start);
  end = clampAxis(end);
  const Shape& s = x->type().shape;
  std::vector<int64_t> dims(s.begin() + start, s.begin() + std::max(start, end));
  ctx.setOutput(0, ctx.constantInts(dims));
  return Error::success();
}

Error importConstant(ImportContext& ctx) {
  const auto& n = ctx.node();
  if (n.attribute_size() != 1)
    return ctx.error("Constant must have exactly one value attribute");
  const onnx::AttributeProto& a = n.attribute(0);
  Tensor t;
  if (a.name() == "value") {
    LWCC_TRY(v, tensorFromProto(a.t(), modelDir(ctx), "attribute 'value'"));
    t = std::move(v);
  } else if (a.name() == "value_float") {
    t = Tensor::fromFloats(TensorType(DType::F32, {}), {a.f()});
  } else if (a.name() == "value_floats") {
    t = Tensor::fromFloats(TensorType(DType::F32, {a.floats_size()}),
                           std::vector<double>(a.floats().begin(), a.floats().end()));
  } else if (a.name() == "value_int") {
    t = Tensor::fromInts(TensorType(DType::I64, {}), {a.i()});
  } else if (a.name() == "value_ints") {
    t = Tensor::fromInts(TensorType(DType::I64, {a.ints_size()}),
                         std::vector<int64_t>(a.ints().begin(), a.ints().end()));
  } else {
    return ctx.error("Constant attribute '" + a.name() + "' is not supported");
  }
  // Large float constants are weights in all but name: keep them as params.
  if (t.isFloatData() && t.size() > 4096) {
    std::string name = ctx.node().output(0);
    Value* p = ctx.module().graph->addParam(name, name, t.type);
    ctx.module().weights.emplace(name, std::move(t));
    ctx.bind(name, p);
    return Error::success();
  }
  ctx.setOutput(0, ctx.constant(t));
  return Error::success();
}

Error importConstantOfShape(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"value"}));
  LWCC_TRY(shape, ctx.constInts(0, "input"));
  // Bound the element count before multiplying, so it cannot wrap.
  constexpr int64_t kMaxFold = int64_t{1} << 24;
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return ctx.error("shape " + shapeStr(shape) + " has a negative dim");
    if (d != 0 && count > kMaxFold / d)
      return ctx.error("ConstantOfShape of shape " + shapeStr(shape) + " is too large to fold");
    count *= d;
  }
  Tensor fill = Tensor::fromFloats(TensorType(DType::F32, {1}), {0.0});
  if (const onnx::AttributeProto* a = ctx.attr("value")) {
    LWCC_TRY(v, tensorFromProto(a->t(), modelDir(ctx), "attribute 'value'"));
    if (v.size() != 1)
      return ctx.error("attribute 'value' must hold one element");
    fill = std::move(v);
  }
  TensorType type(fill.type.dtype, shape);
  Tensor t(type);
  if (t.isFloatData())
    std::fill(t.f.begin(), t.f.end(), fill.f[0]);
  else
    std::fill(t.i.begin(), t.i.end(), fill.i[0]);
  ctx.setOutput(0, ctx.constant(t));
  return Error::success();
}

/// Casts input 0 to `dt` (no op when it has that type already).
Error castTo(ImportContext& ctx, Value* x, DType dt) {
  if (dt == x->type().dtype) {
    ctx.setOutput(0, x);
    return Error::success();
  }
  LWCC_TRY(y, ctx.emit1(OpKind::Cast, {x}, {attr("to", std::string(dtypeName(dt)))}));
  ctx.setOutput(0, y);
  return Error::success();
}

Error importCast(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"to", "saturate", "round_mode"}));
  LWCC_TRY(x, ctx.requiredInput(0, "input"));
  LWCC_TRY(to, ctx.attrInt("to", std::nullopt));
  std::optional<DType> dt = dtypeFromOnnx(static_cast<int>(to));
  if (!dt)
    return ctx.error(llvm::formatv("casting to element type {0} is not supported", to).str());
  return castTo(ctx, x, *dt);
}

/// CastLike (opset 15): a cast to the element type of the second input,
/// which the IR knows statically; only its type is read.
Error importCastLike(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"saturate", "round_mode"}));
  LWCC_TRY(x, ctx.requiredInput(0, "input"));
  LWCC_TRY(like, ctx.requiredInput(1, "target_type"));
  return castTo(ctx, x, like->type().dtype);
}

/// Range (opset 11): folded to a constant; start, limit and delta must be
/// known at compile time (PyTorch's exporters compute them from shapes).
Error importRange(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({}));
  static const char* names[] = {"start", "limit", "delta"};
  DType dt = DType::I64;
  for (size_t k = 0; k < 3; ++k) {
    LWCC_TRY(v, ctx.requiredInput(k, names[k]));
    if (v->type().numElements() != 1 || v->type().rank() > 1)
      return ctx.error(std::string("input '") + names[k] + "' must be a scalar, got " +
                       v->type().str());
    if (k == 0)
      dt = v->type().dtype;
    else if (v->type().dtype != dt)
      return ctx.error(std::string("input '") + names[k] + "' " + v->type().str() +
                       " differs in element type from 'start' " + ctx.input(0)->type().str());
  }
  constexpr int64_t kMaxRange = int64_t{1} << 24;
  Tensor t;
  if (isFloat(dt)) {
    std::vector<double> v[3];
    for (size_t k = 0; k < 3; ++k) {
      LWCC_TRY(c, ctx.constFloats(k, names[k]));
      v[k] = c;
    }
    double start = v[0][0], limit = v[1][0], delta = v[2][0];
    if (delta == 0 || !std::isfinite(start) || !std::isfinite(limit) || !std::isfinite(delta))
      return ctx.error("Range needs finite start, limit and delta, and a delta other than 0");
    double n = std::max(std::ceil((limit - start) / delta), 0.0);
    if (n > static_cast<double>(kMaxRange))
      return ctx.error(llvm::formatv("Range of {0} elements is too large to fold", n).str());
    std::vector<double> out(static_cast<size_t>(n));
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = start + static_cast<double>(i) * delta;
    TensorType type(dt, {static_cast<int64_t>(out.size())});
    t = Tensor::fromFloats(type, std::move(out));
  } else {
    std::vector<int64_t> v[3];
    for (size_t k = 0; k < 3; ++k) {
      LWCC_TRY(c, ctx.constInts(k, names[k]));
      v[k] = c;
    }
    int64_t start = v[0][0], limit = v[1][0], delta = v[2][0];
    if (delta == 0)
      return ctx.error("Range needs a delta other than 0");
    // ceil((limit - start) / delta) without overflow for sane ranges.
    long double span = static_cast<long double>(limit) - static_cast<long double>(start);
    long double n = std::max<long double>(std::ceil(span / static_cast<long double>(delta)), 0);
    if (n > static_cast<long double>(kMaxRange))
      return ctx.error("Range of " + std::to_string(static_cast<double>(n)) +
                       " elements is too large to fold");
    std::vector<int64_t> out(static_cast<size_t>(n));
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = start + static_cast<int64_t>(i) * delta;
    TensorType type(dt, {static_cast<int64_t>(out.size())});
    t = Tensor::fromInts(type, std::move(out));
  }
  ctx.setOutput(0, ctx.constant(t));
  return Error::success();
}

/// GatherND (opsets 11, 12, 13): batch_dims came at 12.
Error importGatherND(ImportContext& ctx) {
  LWCC_CHECK(ctx.opset() < 12 ? ctx.checkAttrs({}) : ctx.checkAttrs({"batch_dims"}));
  LWCC_TRY(x, ctx.requiredInput(0, "data"));
  LWCC_TRY(idx, ctx.requiredInput(1, "indices"));
  LWCC_TRY(b, ctx.attrInt("batch_dims", 0));
  LWCC_TRY(y, ctx.emit1(OpKind::GatherNd, {x, idx}, {attr("batch_dims", b)}));
  ctx.setOutput(0, y);
  return Error::success();
}

Error importExpand(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({}));
  LWCC_TRY(x, ctx.requiredInput(0, "input"));
  LWCC_TRY(shape, ctx.constInts(1, "shape"));
  LWCC_TRY(y, ctx.emit1(OpKind::Expand, {x}, {attr("shape", shape)}));
  ctx.setOutput(0, y);
  return Error::success();
}

/// CumSum (opsets 11, 14): the axis is a constant scalar input.
Error importCumSum(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"exclusive", "reverse"}));
  LWCC_TRY(x, ctx.requiredInput(0, "x"));
  LWCC_TRY(axes, ctx.constInts(1, "axis"));
  if (axes.size() != 1)
    return ctx.error("input #1 (axis) must hold one value, got " + std::to_string(axes.size()));
  LWCC_TRY(axis, normalizeAxis(ctx, axes[0], x->type().rank()));
  LWCC_TRY(exclusive, ctx.attrInt("exclusive", 0));
  LWCC_TRY(reverse, ctx.attrInt("reverse", 0));
  LWCC_TRY(y,
           ctx.emit1(OpKind::CumSum, {x},
                     {attr("axis", axis), attr("exclusive", exclusive), attr("reverse", reverse)}));
  ctx.setOutput(0, y);
  return Error::success();
}

/// Tile (opsets 6, 13): the repeats are a constant input.
Error importTile(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({}));
  LWCC_TRY(x, ctx.requiredInput(0, "input"));
  LWCC_TRY(repeats, ctx.constInts(1, "repeats"));
  LWCC_TRY(y, ctx.emit1(OpKind::Tile, {x}, {attr("repeats", repeats)}));
  ctx.setOutput(0, y);
  return Error::success();
}

Error importPad(ImportContext& ctx) {
  LWCC_TRY(x, ctx.requiredInput(0, "data"));
  int64_t rank = x->type().rank();
  std::vector<int64_t> pads;
  double value = 0;
  LWCC_TRY(mode, ctx.attrString("mode", std::string("constant")));
  if (ctx.opset() < 11) {
    LWCC_CHECK(ctx.checkAttrs({"mode", "pads", "value"}));
    LWCC_TRY(p, ctx.attrInts("pads", std::nullopt));
    LWCC_TRY(v, ctx.attrFloat("value", 0.0));
    pads = p;
    value = v;
  } else {
    LWCC_CHECK(ctx.checkAttrs({"mode"}));
    LWCC_TRY(p, ctx.constInts(1, "pads"));
    pads = p;
    if (ctx.input(2)) {
      LWCC_TRY(v, ctx.constFloats(2, "constant_value"));
      if (v.size() > 1)
        return ctx.error("input 'constant_value' must be a scalar");
      if (!v.empty())
        value = v[0];
    }
    if (ctx.input(3)) { // opset 18: pads apply to these axes only
      LWCC_TRY(axes, ctx.constInts(3, "axes"));
      if (pads.size() != 2 * axes.size())
        return ctx.error("pads must have two values per axis");
      std::vector<int64_t> full(2 * rank, 0);
      for (size_t k = 0; k < axes.size(); ++k) {
        LWCC_TRY(a, normalizeAxis(ctx, axes[k], rank));
        full[a] = pads[k];
        full[a + rank] = pads[k + axes.size()];
      }
      pads = full;
    }
  }
  if (mode == "wrap")
    return ctx.error("mode 'wrap' is not supported");
  LWCC_TRY(y, ctx.emit1(OpKind::Pad, {x},
                        {attr("pads", pads), attr("mode", mode), attr("value", value)}));
  ctx.setOutput(0, y);
  return Error::success();
}

} // namespace

const std::vector<ImporterEntry>& tensorImporters() {
  static const std::vector<ImporterEntry> entries = {
      {"Reshape", 5, importReshape},
      {"Flatten", 1, importFlatten},
      {"Transpose", 1, importTranspose},
      {"Concat", 1, importConcat},
      {"Slice", 1, importSlice},
      {"Split", 1, importSplit},
      {"Squeeze", 1, importSqueeze},
      {"Unsqueeze", 1, importUnsqueeze},
      {"Gather", 1, importGather},
      {"Shape", 1, importShape},
      {"Constant", 1, importConstant},
      {"ConstantOfShape", 9, importConstantOfShape},
      {"Cast", 6, importCast},
      {"CastLike", 15, importCastLike},
      {"Range", 11, importRange},
      {"GatherND", 11, importGatherND},
      {"SplitToSequence", 11, importSplitToSequence},
      {"SequenceAt", 11, importSequenceAt},
      {"Expand", 8, importExpand},
      {"Pad", 2, importPad},
      {"CumSum", 11, importCumSum},
      {"Tile", 6, importTile},
  };
  return entries;
}

} // namespace lwcc
