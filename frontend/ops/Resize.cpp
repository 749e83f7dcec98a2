//===- Resize.cpp - Resize (opsets 10-19) and Upsample (opsets 7-9) -------===//
//
// Both become lwcc's resize op with static output sizes: the scales or
// sizes must be known at compile time (constants, or shape arithmetic
// folded at import). The coordinate scale of each dim is the given scale,
// or out/in where sizes were given (ONNX's rule; PyTorch's interpolate
// computes the same coordinates). Upsample, and Resize before opset 11,
// take onnxruntime's reading: asymmetric coordinates, nearest rounding
// down when upsampling and up when downsampling.
//
//===----------------------------------------------------------------------===//
#include "frontend/ops/Common.h"
#include "onnx/onnx_pb.h"

#include <cmath>

namespace lwcc {

namespace {

/// The compile-time float values of input `i`, float32 ones read as the
/// decimal the exporter wrote (a scale of 1.6f is 1.6, PyTorch's).
llvm::Expected<std::vector<double>> scaleValues(ImportContext& ctx, size_t i, const char* what) {
  LWCC_TRY(v, ctx.constFloats(i, what));
  if (ctx.input(i)->type().dtype == DType::F32)
    for (double& s : v)
      s = decimalOfFloat(static_cast<float>(s));
  return v;
}

struct ResizeSpec {
  std::string mode = "nearest", coord = "half_pixel", nearest = "round_prefer_floor";
  double cubicA = -0.75;
  int64_t excludeOutside = 0;
  /// Per dim of X: the coordinate scale and the output size.
  std::vector<double> scales;
  Shape sizes;
};

llvm::Error emitResize(ImportContext& ctx, Value* x, const ResizeSpec& s) {
  if (s.mode != "nearest" && s.mode != "linear" && s.mode != "cubic")
    return ctx.error("attribute 'mode' must be nearest, linear or cubic, got '" + s.mode + "'");
  if (!isFloat(x->type().dtype))
    return ctx.error("input 'X' must have a float element type, got " + x->type().str());
  bool identity = true;
  for (size_t d = 0; d < s.sizes.size(); ++d)
    identity &= s.scales[d] == 1.0 && s.sizes[d] == x->type().shape[d];
  if (identity) { // every coordinate mode maps an unscaled dim onto itself
    ctx.setOutput(0, x);
    return llvm::Error::success();
  }
  // The attributes that differ from the IR's defaults (ONNX's).
  std::vector<NamedAttr> attrs = {attr("sizes", Attribute(s.sizes)),
                                  attr("scales", Attribute(s.scales))};
  if (s.mode != "nearest")
    attrs.push_back(attr("mode", s.mode));
  if (s.coord != "half_pixel")
    attrs.push_back(attr("coordinate_transformation_mode", s.coord));
  if (s.nearest != "round_prefer_floor" && s.mode == "nearest")
    attrs.push_back(attr("nearest_mode", s.nearest));
  if (s.cubicA != -0.75 && s.mode == "cubic")
    attrs.push_back(attr("cubic_coeff_a", s.cubicA));
  if (s.excludeOutside != 0 && s.mode == "cubic")
    attrs.push_back(attr("exclude_outside", s.excludeOutside));
  LWCC_TRY(y, ctx.emit1(OpKind::Resize, {x}, std::move(attrs)));
  ctx.setOutput(0, y);
  return llvm::Error::success();
}

/// Output sizes floor(in * scale), the ONNX rule for scales.
llvm::Error sizesFromScales(ImportContext& ctx, const Shape& in, ResizeSpec& s) {
  s.sizes.clear();
  for (size_t d = 0; d < in.size(); ++d) {
    if (!(s.scales[d] > 0))
      return ctx.error(llvm::formatv("scales must be positive, got {0}", s.scales[d]).str());
    auto n = static_cast<int64_t>(std::floor(static_cast<double>(in[d]) * s.scales[d]));
    if (n < 1)
      return ctx.error(
          llvm::formatv("scale {0} makes dim {1} of {2} empty", s.scales[d], d, shapeStr(in))
              .str());
    s.sizes.push_back(n);
  }
  return llvm::Error::success();
}

/// Upsample-7 (scales attribute) and -9 (scales input); Resize-10.
llvm::Error importLegacy(ImportContext& ctx, bool scalesAttr) {
  LWCC_CHECK(ctx.checkAttrs(scalesAttr ? std::initializer_list<const char*>{"mode", "scales"}
                                       : std::initializer_list<const char*>{"mode"}));
  LWCC_TRY(x, ctx.requiredInput(0, "X"));
  ResizeSpec s;
  LWCC_TRY(mode, ctx.attrString("mode", std::string("nearest")));
  s.mode = mode == "bilinear" ? "linear" : mode;
  if (s.mode == "cubic")
    return ctx.error("mode 'cubic' is not defined before Resize-11");
  s.coord = "asymmetric";
  s.nearest = "simple";
  if (scalesAttr) {
    LWCC_TRY(v, ctx.attrFloats("scales", std::nullopt));
    s.scales = v;
  } else {
    LWCC_TRY(v, scaleValues(ctx, 1, "scales"));
    s.scales = v;
  }
  const Shape& in = x->type().shape;
  if (s.scales.size() != in.size())
    return ctx.error(llvm::formatv("'scales' has {0} values for the input {1} of rank {2}",
                                   s.scales.size(), x->type().str(), in.size())
                         .str());
  LWCC_CHECK(sizesFromScales(ctx, in, s));
  return emitResize(ctx, x, s);
}

llvm::Error importUpsample7(ImportContext& ctx) { return importLegacy(ctx, true); }
llvm::Error importUpsample9(ImportContext& ctx) { return importLegacy(ctx, false); }
llvm::Error importResize10(ImportContext& ctx) { return importLegacy(ctx, false); }

/// Resize-11 to -19.
llvm::Error importResize(ImportContext& ctx) {
  LWCC_CHECK(ctx.checkAttrs({"antialias", "axes", "coordinate_transformation_mode", "cubic_coeff_a",
                             "exclude_outside", "extrapolation_value", "keep_aspect_ratio_policy",
                             "mode", "nearest_mode"}));
  LWCC_TRY(x, ctx.requiredInput(0, "X"));
  const Shape& in = x->type().shape;
  int64_t rank = static_cast<int64_t>(in.size());
  ResizeSpec s;
  LWCC_TRY(mode, ctx.attrString("mode", std::string("nearest")));
  LWCC_TRY(coord, ctx.attrString("coordinate_transformation_mode", std::string("half_pixel")));
  LWCC_TRY(nearest, ctx.attrString("nearest_mode", std::string("round_prefer_floor")));
  LWCC_TRY(cubicA, ctx.attrFloat("cubic_coeff_a", -0.75));
  LWCC_TRY(exclude, ctx.attrInt("exclude_outside", 0));
  LWCC_TRY(antialias, ctx.attrInt("antialias", 0));
  LWCC_TRY(policy, ctx.attrString("keep_aspect_ratio_policy", std::string("stretch")));
  s.mode = mode;
  s.coord = coord;
  s.nearest = nearest;
  s.cubicA = cubicA;
  s.excludeOutside = exclude;
  if (coord == "tf_crop_and_resize")
    return ctx.error("coordinate_transformation_mode 'tf_crop_and_resize' is not supported");
  if (antialias != 0)
    return ctx.error("antialias=1 is not supported");
  if (policy != "stretch")
    return ctx.error("keep_aspect_ratio_policy '" + policy + "' is not supported (stretch only)");
  // The dims resized: every dim, or `axes` (opset 18).
  std::vector<int64_t> axes;
  LWCC_TRY(given, ctx.attrInts("axes", std::vector<int64_t>{}));
  if (given.empty())
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  for (int64_t a : given) {
    LWCC_TRY(n, normalizeAxis(ctx, a, rank));
    axes.push_back(n);
  }
  s.scales.assign(rank, 1.0);
  s.sizes = in;
  Value* scalesIn = ctx.input(2);
  Value* sizesIn = ctx.numInputs() > 3 ? ctx.input(3) : nullptr;
  // An empty tensor stands for an absent input (opsets 11 and 12).
  auto isEmpty = [&](Value* v) { return v && v->type().numElements() == 0; };
  if (isEmpty(scalesIn))
    scalesIn = nullptr;
  if (isEmpty(sizesIn))
    sizesIn = nullptr;
  if ((scalesIn != nullptr) == (sizesIn != nullptr))
    return ctx.error("exactly one of the inputs 'scales' and 'sizes' must be given");
  if (scalesIn) {
    LWCC_TRY(v, scaleValues(ctx, 2, "scales"));
    if (v.size() != axes.size())
      return ctx.error(
          llvm::formatv("'scales' has {0} values for {1} resized dims", v.size(), axes.size())
              .str());
    for (size_t k = 0; k < axes.size(); ++k)
      s.scales[axes[k]] = v[k];
    LWCC_CHECK(sizesFromScales(ctx, in, s));
  } else {
    LWCC_TRY(v, ctx.constInts(3, "sizes"));
    if (v.size() != axes.size())
      return ctx.error(
          llvm::formatv("'sizes' has {0} values for {1} resized dims", v.size(), axes.size())
              .str());
    for (size_t k = 0; k < axes.size(); ++k) {
      if (v[k] < 1)
        return ctx.error(llvm::formatv("sizes must be positive, got {0}", v[k]).str());
      s.sizes[axes[k]] = v[k];
      s.scales[axes[k]] = static_cast<double>(v[k]) / static_cast<double>(in[axes[k]]);
    }
  }
  return emitResize(ctx, x, s);
}

} // namespace

const std::vector<ImporterEntry>& resizeImporters() {
  static const std::vector<ImporterEntry> entries = {
      {"Upsample", 7, importUpsample7},
      {"Upsample", 9, importUpsample9},
      {"Resize", 10, importResize10},
      {"Resize", 11, importResize},
  };
  return entries;
}

} // namespace lwcc
