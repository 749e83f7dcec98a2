//===- ResizeOps.cpp - resize and resize_grad -----------------------------===//
//
// Shape rules, gradient rule, parallel rule and cost rule of resize (ONNX
// Resize and Upsample); the interpreter runs it in interp/ResizeOps.cpp. The
// taps, the forward value and the adjoint are those of lwrt/resize_math.h,
// which the CPU and CUDA kernels call too.
//
//===----------------------------------------------------------------------===//
#include "ir/GradRules.h"
#include "ir/ResizePlan.h"
#include "runtime/include/lwrt/resize_math.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <iterator>
#include <type_traits>

namespace lwcc {

using llvm::Error;

namespace {

template <typename... Args> Error fail(const char* fmt, Args&&... args) {
  return makeError(llvm::formatv(fmt, std::forward<Args>(args)...).str());
}

/// The piece attributes of a resize, in the order of ResizeParams.
constexpr const char* kPieceAttrs[] = {"whole_in", "in_offsets", "whole_out", "out_offsets"};

/// The runtime's parameters of a resize or resize_grad op, or an error
/// naming an unknown mode.
llvm::Expected<lwrt::ResizeParams> paramsOf(const Op& op) {
  lwrt::ResizeParams p;
  p.scales = op.getFloats("scales");
  // The enumerator whose name (lwrt/resize_math.h) is attribute `name`'s value.
  auto pick = [&](const char* name, const auto& names, auto& out) -> Error {
    const std::string& v = op.getString(name);
    for (size_t k = 0; k < std::size(names); ++k)
      if (v == names[k]) {
        out = static_cast<std::remove_reference_t<decltype(out)>>(k);
        return Error::success();
      }
    std::string known;
    for (const char* n : names)
      known += std::string(known.empty() ? "" : ", ") + n;
    return fail("unknown {0} '{1}' ({2})", name, v, known);
  };
  if (Error e = pick("mode", lwrt::kResizeModeNames, p.mode))
    return e;
  if (Error e = pick("coordinate_transformation_mode", lwrt::kResizeCoordNames, p.coord))
    return e;
  if (Error e = pick("nearest_mode", lwrt::kResizeNearestNames, p.nearest))
    return e;
  p.cubicCoeffA = op.getFloat("cubic_coeff_a");
  p.excludeOutside = op.getInt("exclude_outside");
  std::vector<int64_t>* piece[] = {&p.wholeIn, &p.inOffsets, &p.wholeOut, &p.outOffsets};
  int present = 0;
  for (int k = 0; k < 4; ++k)
    if (op.hasAttr(kPieceAttrs[k])) {
      *piece[k] = op.getInts(kPieceAttrs[k]);
      ++present;
    }
  if (present != 0 && present != 4)
    return fail("whole_in, in_offsets, whole_out and out_offsets go together");
  return p;
}

/// The input entries [first, last) along `dim` (whole tensors) that result
/// entries [begin, end) read.
std::pair<int64_t, int64_t> tapWindow(const lwrt::ResizePlan& plan, int64_t dim, int64_t begin,
                                      int64_t end) {
  int64_t first = plan.wholeIn[dim], last = 0;
  for (int64_t o = begin; o < end; ++o) {
    lwrt::ResizeTaps taps = lwrt::resizeTaps(plan, static_cast<int>(dim), o);
    for (int32_t j = 0; j < taps.count; ++j) {
      first = std::min(first, taps.index[j]);
      last = std::max(last, taps.index[j] + 1);
    }
  }
  return {first, std::max(first, last)};
}

} // namespace

llvm::Expected<lwrt::ResizePlan> resizePlan(const Op& op, const Shape& in, const Shape& out) {
  auto p = paramsOf(op);
  if (!p)
    return p.takeError();
  if (in.empty() || in.size() > static_cast<size_t>(lwrt::kShardMaxRank))
    return fail("resize takes ranks 1 to {0}, got {1}", lwrt::kShardMaxRank, in.size());
  if (p->scales.size() != in.size() || out.size() != in.size())
    return fail("'scales' ({0} values) and 'sizes' ({1}) must have the input's rank {2}",
                p->scales.size(), out.size(), in.size());
  for (double s : p->scales)
    if (!(s > 0))
      return fail("scales must be positive, got {0}", s);
  for (int64_t d : out)
    if (d < 1)
      return fail("sizes must be positive, got {0}", d);
  lwrt::ResizePlan plan;
  if (!lwrt::makeResizePlan(in, out, *p, plan))
    return fail("the piece of the resize does not fit: its taps leave the operand {0} (whole_in, "
                "in_offsets, whole_out and out_offsets must give each a rank-{1} place)",
                shapeStr(in), in.size());
  return plan;
}

namespace shape {

Rule resize(const Op& op) {
  const TensorType& x = op.operand(0)->type();
  if (!isFloat(x.dtype))
    return fail("operand #0 must have a float element type, got {0}", x.str());
  Shape out(op.getInts("sizes"));
  auto plan = resizePlan(op, x.shape, out);
  if (!plan)
    return plan.takeError();
  return std::vector<TensorType>{TensorType(x.dtype, out)};
}

Rule resizeGrad(const Op& op) {
  const TensorType& dy = op.operand(0)->type();
  if (!isFloat(dy.dtype))
    return fail("operand #0 must have a float element type, got {0}", dy.str());
  Shape in(op.getInts("input_shape")), out(op.getInts("sizes"));
  if (dy.shape != out)
    return fail("dy {0} must have the resize's result shape {1}", dy.str(), shapeStr(out));
  auto plan = resizePlan(op, in, out);
  if (!plan)
    return plan.takeError();
  return std::vector<TensorType>{TensorType(dy.dtype, in)};
}

} // namespace shape

namespace grad {

Error resize(GradContext& c) {
  if (!c.need(0))
    return Error::success();
  std::vector<NamedAttr> attrs;
  for (const NamedAttr& a : c.op.attrs())
    attrs.push_back(a);
  attrs.push_back({"input_shape", Attribute(c.x(0)->type().shape)});
  auto dx = c.emit(OpKind::ResizeGrad, {c.dy()}, std::move(attrs));
  if (!dx)
    return dx.takeError();
  c.dxs[0] = *dx;
  return Error::success();
}

} // namespace grad

namespace par {

std::optional<SplitPlan> resize(const Op& op, int64_t dim) {
  const Shape& in = op.operand(0)->type().shape;
  const Shape& out = op.result()->type().shape;
  if (dim < 0 || dim >= static_cast<int64_t>(out.size()) || out[dim] < 2)
    return std::nullopt;
  auto plan = resizePlan(op, in, out);
  if (!plan) {
    llvm::consumeError(plan.takeError());
    return std::nullopt;
  }
  SplitPlan p{{dim}, {dim}, SplitPlan::Partial::None, {}};
  // Each device reads the input entries its result entries' taps read (a
  // halo where interpolation reaches beyond its share), in the operand's
  // own indices.
  lwrt::ResizePlan rp = *plan;
  p.window = [rp, dim](int64_t begin, int64_t end) {
    auto [first, last] = tapWindow(rp, dim, begin + rp.outOffset[dim], end + rp.outOffset[dim]);
    return std::make_pair(first - rp.inOffset[dim], last - rp.inOffset[dim]);
  };
  return p;
}

void localizeResize(Op& local, const Op& global, int64_t dim, int64_t offset) {
  const Shape& in = global.operand(0)->type().shape;
  const Shape& out = global.result()->type().shape;
  auto plan = resizePlan(global, in, out);
  if (!plan) { // the parallel rule accepted the op, so its plan exists
    llvm::consumeError(plan.takeError());
    return;
  }
  size_t r = in.size();
  std::vector<int64_t> wholeIn(plan->wholeIn, plan->wholeIn + r);
  std::vector<int64_t> inOffsets(plan->inOffset, plan->inOffset + r);
  std::vector<int64_t> wholeOut(plan->wholeOut, plan->wholeOut + r);
  std::vector<int64_t> outOffsets(plan->outOffset, plan->outOffset + r);
  int64_t size = local.result()->type().shape[static_cast<size_t>(dim)];
  int64_t begin = outOffsets[dim] + offset;
  auto window = tapWindow(*plan, dim, begin, begin + size);
  inOffsets[dim] = window.first;
  outOffsets[dim] = begin;
  local.setAttr("whole_in", Attribute(wholeIn));
  local.setAttr("in_offsets", Attribute(inOffsets));
  local.setAttr("whole_out", Attribute(wholeOut));
  local.setAttr("out_offsets", Attribute(outOffsets));
  local.setAttr("sizes", Attribute(std::vector<int64_t>(local.result()->type().shape)));
}

} // namespace par

namespace cost {

/// Each result element (each dx element for resize_grad, which visits as
/// many) sums a product of taps per combination: 1 for nearest, 2 per
/// resized dim for linear and 4 for cubic.
double resize(const Op& op, const CostContext&) {
  const Shape& out = op.getInts("sizes");
  const auto& scales = op.getFloats("scales");
  const std::string& mode = op.getString("mode");
  double taps = 1;
  for (size_t d = 0; d < out.size() && d < scales.size(); ++d)
    if (scales[d] != 1.0)
      taps *= mode == "nearest" ? 1 : mode == "linear" ? 2 : 4;
  double n = 1;
  for (int64_t v : out)
    n *= static_cast<double>(v);
  return n * taps * 2;
}

} // namespace cost

} // namespace lwcc
