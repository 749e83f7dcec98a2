//===- ShapeRules.cpp - Result types of every op --------------------------===//
//
// One function per shape rule named in Ops.def. Each checks the operand
// types and attribute values it depends on, and returns the result types.
// Messages name what is wrong; the verifier prefixes the op and location.
//
//===----------------------------------------------------------------------===//
#include "ir/IR.h"
#include "ir/RuleHelpers.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace lwcc::shape {

namespace {

using rules::expectFloat;
using rules::fail;
using rules::ty;

llvm::Error expectRank(const Op& op, unsigned i, int64_t rank) {
  if (ty(op, i).rank() != rank)
    return fail("operand #{0} must have rank {1}, got {2}", i, rank, ty(op, i).str());
  return llvm::Error::success();
}

llvm::Error expectSameDType(const Op& op, unsigned i, unsigned j) {
  if (ty(op, i).dtype != ty(op, j).dtype)
    return fail("operands #{0} and #{1} must have the same element type, got {2} and {3}", i, j,
                ty(op, i).str(), ty(op, j).str());
  return llvm::Error::success();
}

llvm::Error expectLength(std::string_view attr, const std::vector<int64_t>& v, size_t n) {
  if (v.size() != n)
    return fail("attribute '{0}' must have {1} values, got {2}", attr, n, v.size());
  return llvm::Error::success();
}

llvm::Error expectAllAtLeast(std::string_view attr, const std::vector<int64_t>& v, int64_t lo) {
  for (int64_t x : v)
    if (x < lo)
      return fail("attribute '{0}' values must be >= {1}, got {2}", attr, lo, x);
  return llvm::Error::success();
}

/// A result shape built from attribute values must keep its element count
/// (and every partial product) as far from overflow as the parser keeps
/// declared types: at most 2^48, not counting zero dims.
llvm::Error expectSizeable(std::string_view attr, const Shape& s) {
  constexpr int64_t kMaxElements = int64_t{1} << 48;
  int64_t n = 1;
  for (int64_t d : s) {
    if (d == 0)
      continue;
    if (n > kMaxElements / d)
      return fail("attribute '{0}' gives the shape {1}, which has too many elements", attr,
                  shapeStr(s));
    n *= d;
  }
  return llvm::Error::success();
}

/// Normalizes an axis in [-rank, rank) (or [-rank, rank] when `inclusive`).
llvm::Expected<int64_t> normAxis(int64_t axis, int64_t rank, bool inclusive = false) {
  int64_t hi = inclusive ? rank : rank - 1;
  if (axis < -rank || axis > hi)
    return fail("axis {0} is out of range for rank {1}", axis, rank);
  return axis < 0 ? axis + rank : axis;
}

#define TRY(expr)                                                                                  \
  if (llvm::Error e = (expr))                                                                      \
  return e

/// Common checks and output size of conv and pool windows.
Rule window(const Op& op, const std::vector<int64_t>& kernel, const std::vector<int64_t>& dil,
            int64_t outChannels, bool ceilMode) {
  const auto& strides = op.getInts("strides");
  const auto& pads = op.getInts("pads");
  TRY(expectLength("strides", strides, 2));
  TRY(expectLength("pads", pads, 4));
  TRY(expectAllAtLeast("strides", strides, 1));
  TRY(expectAllAtLeast("pads", pads, 0));
  const Shape& x = ty(op, 0).shape;
  Shape out = {x[0], outChannels, 0, 0};
  for (int i = 0; i < 2; ++i) {
    auto n = windowOutput(x[2 + i], kernel[i], strides[i], pads[i], pads[i + 2], dil[i], ceilMode);
    if (!n)
      return n.takeError();
    out[2 + i] = *n;
  }
  return std::vector<TensorType>{TensorType(ty(op, 0).dtype, out)};
}

} // namespace

llvm::Expected<int64_t> windowOutput(int64_t in, int64_t kernel, int64_t stride, int64_t padBegin,
                                     int64_t padEnd, int64_t dilation, bool ceilMode) {
  int64_t span = dilation * (kernel - 1) + 1;
  int64_t room = in + padBegin + padEnd - span;
  if (room < 0)
    return fail("window of extent {0} does not fit input of size {1} with pads {2},{3}", span, in,
                padBegin, padEnd);
  if (!ceilMode)
    return room / stride + 1;
  int64_t n = (room + stride - 1) / stride + 1;
  // The last window must start inside the input or its leading pad.
  if ((n - 1) * stride >= in + padBegin)
    --n;
  return n;
}

SliceDim resolveSlice(int64_t dim, int64_t start, int64_t end, int64_t step) {
  // An empty axis selects nothing (and [0, dim - 1] below would be empty).
  if (dim == 0)
    return {0, step, 0};
  if (start < 0)
    start += dim;
  if (end < 0)
    end += dim;
  // Counts are computed as (distance - 1) / |step| + 1 in unsigned
  // arithmetic so that huge steps (up to INT64_MIN) cannot overflow.
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    int64_t count =
        end > start ? static_cast<int64_t>(static_cast<uint64_t>(end - start - 1) / step + 1) : 0;
    return {start, step, count};
  }
  start = std::clamp<int64_t>(start, 0, dim - 1);
  end = std::clamp<int64_t>(end, -1, dim - 1);
  uint64_t magnitude = uint64_t{0} - static_cast<uint64_t>(step);
  int64_t count = start > end
                      ? static_cast<int64_t>(static_cast<uint64_t>(start - end - 1) / magnitude + 1)
                      : 0;
  return {start, step, count};
}

llvm::Expected<Shape> broadcast(const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return fail("shapes {0} and {1} do not broadcast", shapeStr(a), shapeStr(b));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Rule conv2d(const Op& op) {
  TRY(expectFloat(op, 0));
  TRY(expectRank(op, 0, 4));
  TRY(expectRank(op, 1, 4));
  TRY(expectSameDType(op, 0, 1));
  const Shape& x = ty(op, 0).shape;
  const Shape& w = ty(op, 1).shape;
  int64_t group = op.getInt("group");
  if (group < 1)
    return fail("attribute 'group' must be >= 1, got {0}", group);
  if (x[1] % group != 0 || w[0] % group != 0)
    return fail("input channels {0} and output channels {1} must be divisible by group {2}", x[1],
                w[0], group);
  if (w[1] * group != x[1])
    return fail("filter {0} expects {1} input channels, input {2} has {3}", shapeStr(w),
                w[1] * group, shapeStr(x), x[1]);
  if (op.numOperands() == 3) {
    TRY(expectSameDType(op, 0, 2));
    if (ty(op, 2).shape != Shape{w[0]})
      return fail("bias must have shape [{0}], got {1}", w[0], ty(op, 2).str());
  }
  const auto& dil = op.getInts("dilations");
  TRY(expectLength("dilations", dil, 2));
  TRY(expectAllAtLeast("dilations", dil, 1));
  TRY(expectAllAtLeast("kernel", {w[2], w[3]}, 1));
  return window(op, {w[2], w[3]}, dil, w[0], false);
}

Rule maxPool2d(const Op& op) {
  TRY(expectFloat(op, 0));
  TRY(expectRank(op, 0, 4));
  const auto& k = op.getInts("kernel");
  const auto& dil = op.getInts("dilations");
  TRY(expectLength("kernel", k, 2));
  TRY(expectAllAtLeast("kernel", k, 1));
  TRY(expectLength("dilations", dil, 2));
  TRY(expectAllAtLeast("dilations", dil, 1));
  return window(op, k, dil, ty(op, 0).shape[1], op.getInt("ceil_mode") != 0);
}

Rule avgPool2d(const Op& op) {
  TRY(expectFloat(op, 0));
  TRY(expectRank(op, 0, 4));
  const auto& k = op.getInts("kernel");
  TRY(expectLength("kernel", k, 2));
  TRY(expectAllAtLeast("kernel", k, 1));
  return window(op, k, {1, 1}, ty(op, 0).shape[1], op.getInt("ceil_mode") != 0);
}

Rule globalAvgPool(const Op& op) {
  TRY(expectFloat(op, 0));
  if (ty(op, 0).rank() < 3)
    return fail("operand #0 must have rank >= 3 (N, C, spatial...), got {0}", ty(op, 0).str());
  Shape out = ty(op, 0).shape;
  std::fill(out.begin() + 2, out.end(), 1);
  return std::vector<TensorType>{TensorType(ty(op, 0).dtype, out)};
}

Rule lrn(const Op& op) {
  TRY(expectFloat(op, 0));
  TRY(expectRank(op, 0, 4));
  if (op.getInt("size") < 1)
    return fail("attribute 'size' must be >= 1, got {0}", op.getInt("size"));
  return std::vector<TensorType>{ty(op, 0)};
}

Rule floatUnary(const Op& op) {
  TRY(expectFloat(op, 0));
  return std::vector<TensorType>{ty(op, 0)};
}

Rule numericUnary(const Op& op) {
  if (ty(op, 0).dtype == DType::Bool)
    return fail("operand #0 must be numeric, got {0}", ty(op, 0).str());
  return std::vector<TensorType>{ty(op, 0)};
}

Rule floatBroadcastBinary(const Op& op) {
  TRY(expectFloat(op, 0));
  return broadcastBinary(op);
}

Rule reduce(const Op& op) {
  if (ty(op, 0).dtype == DType::Bool)
    return fail("operand #0 must be numeric, got {0}", ty(op, 0).str());
  int64_t rank = ty(op, 0).rank();
  std::vector<bool> reduced(rank, !op.hasAttr("axes"));
  if (op.hasAttr("axes"))
    for (int64_t a : op.getInts("axes")) {
      auto axis = normAxis(a, rank);
      if (!axis)
        return axis.takeError();
      if (reduced[*axis])
        return fail("axis {0} is reduced twice", *axis);
      reduced[*axis] = true;
    }
  int64_t keep = op.getInt("keepdims");
  if (keep != 0 && keep != 1)
    return fail("attribute 'keepdims' must be 0 or 1, got {0}", keep);
  Shape out;
  for (int64_t d = 0; d < rank; ++d)
    if (!reduced[d])
      out.push_back(ty(op, 0).shape[d]);
    else if (keep)
      out.push_back(1);
  return std::vector<TensorType>{TensorType(ty(op, 0).dtype, out)};
}

Rule gather(const Op& op) {
  if (!isInteger(ty(op, 1).dtype))
    return fail("indices must have an integer element type, got {0}", ty(op, 1).str());
  auto axis = normAxis(op.getInt("axis"), ty(op, 0).rank());
  if (!axis)
    return axis.takeError();
  const Shape& d = ty(op, 0).shape;
  Shape out(d.begin(), d.begin() + *axis);
  out.insert(out.end(), ty(op, 1).shape.begin(), ty(op, 1).shape.end());
  out.insert(out.end(), d.begin() + *axis + 1, d.end());
  return std::vector<TensorType>{TensorType(ty(op, 0).dtype, out)};
}

Rule expand(const Op& op) {
  const auto& shape = op.getInts("shape");
  TRY(expectAllAtLeast("shape", shape, 0));
  auto s = broadcast(ty(op, 0).shape, shape);
  if (!s)
    return s.takeError();
  TRY(expectSizeable("shape", *s));
  return std::vector<TensorType>{TensorType(ty(op, 0).dtype, *s)};
}

Rule pad(const Op& op) {
  const auto& pads = op.getInts("pads");
  int64_t rank = ty(op, 0).rank();
  TRY(expectLength("pads", pads, 2 * rank));
  const std::string& mode = op.getString("mode");
  if (mode != "constant" && mode != "reflect" && mode != "edge")
    return fail("attribute 'mode' must be \"constant\", \"reflect\" or \"edge\", got \"{0}\"",
                mode);
  Shape out = ty(op, 0).shape;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t in = out[d];
    out[d] += pads[d] + pads[d + rank];
    if (out[d] < 0)
      return fail("pads {0} leave axis {1} with a negative size", shapeStr(pads), d);
    if (mode == "reflect" && (pads[d] >= in || pads[d + rank] >= in) &&
        (pads[d] > 0 || pads[d + rank] > 0))
      return fail("reflect pads of axis {0} must be smaller than its size {1}", d, in);
    if (mode == "edge" && in == 0 && out[d] > 0)
      return fail("edge padding of the empty axis {0}", d);
  }
  return std::vector<TensorType>{TensorType(ty(op, 0).dtype, out)};
}

Rule cast(const Op& op) {
  std::optional<DType> to = parseDType(op.getString("to"));
  if (!to)
    return fail("attribute 'to' must name an element type (f32, f64, f16, bf16, i64, i32, bool), "
                "got \"{0}\"",
                op.getString("to"));
  return std::vector<TensorType>{TensorType(*to, ty(op, 0).shape)};
}

Rule clip(const Op& op) {
  TRY(expectFloat(op, 0));
  if (op.getFloat("min") > op.getFloat("max"))
    return fail("attribute 'min' ({0}) is greater than 'max' ({1})",
                formatFloat(op.getFloat("min")), formatFloat(op.getFloat("max")));
  return std::vector<TensorType>{ty(op, 0)};
}

Rule broadcastBinary(const Op& op) {
  TRY(expectSameDType(op, 0, 1));
  if (ty(op, 0).dtype == DType::Bool)
    return fail("arithmetic on bool operands is not defined");
  auto s = broadcast(ty(op, 0).shape, ty(op, 1).shape);
  if (!s)
    return s.takeError();
  return std::vector<TensorType>{TensorType(ty(op, 0).dtype, *s)};
}

Rule gemm(const Op& op) {
  TRY(expectFloat(op, 0));
  TRY(expectRank(op, 0, 2));
  TRY(expectRank(op, 1, 2));
  TRY(expectSameDType(op, 0, 1));
  for (const char* flag : {"transA", "transB"})
    if (op.getInt(flag) != 0 && op.getInt(flag) != 1)
      return fail("attribute '{0}' must be 0 or 1, got {1}", flag, op.getInt(flag));
  const Shape& a = ty(op, 0).shape;
  const Shape& b = ty(op, 1).shape;
  int64_t m = op.getInt("transA") ? a[1] : a[0];
  int64_t ka = op.getInt("transA") ? a[0] : a[1];
  int64_t kb = op.getInt("transB") ? b[1] : b[0];
  int64_t n = op.getInt("transB") ? b[0] : b[1];
  if (ka != kb)
    return fail("inner dimensions differ: A {0} (transA={1}) and B {2} (transB={3})", shapeStr(a),
                op.getInt("transA"), shapeStr(b), op.getInt("transB"));
  if (op.numOperands() == 3) {
    TRY(expectSameDType(op, 0, 2));
    auto s = broadcast(ty(op, 2).shape, {m, n});
    if (!s || *s != Shape{m, n}) {
      if (!s)
        llvm::consumeError(s.takeError());
      return fail("C {0} does not broadcast to the result [{1},{2}]", ty(op, 2).str(), m, n);
    }
  }
  return std::vector<TensorType>{TensorType(ty(op, 0).dtype, {m, n})};
}

Rule matmul(const Op& op) {
  TRY(expectSameDType(op, 0, 1));
  if (ty(op, 0).dtype == DType::Bool)
    return fail("matmul of bool operands is not defined");
  Shape a = ty(op, 0).shape, b = ty(op, 1).shape;
  if (a.empty() || b.empty())
    return fail("operands must have rank >= 1, got {0} and {1}", ty(op, 0).str(), ty(op, 1).str());
  bool vecA = a.size() == 1, vecB = b.size() == 1;
  if (vecA)
    a.insert(a.begin(), 1);
  if (vecB)
    b.push_back(1);
  if (a.back() != b[b.size() - 2])
    return fail("inner dimensions differ: {0} and {1}", ty(op, 0).str(), ty(op, 1).str());
  auto batch = broadcast(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  if (!batch)
    return batch.takeError();
  Shape out = *batch;
  if (!vecA)
    out.push_back(a[a.size() - 2]);
  if (!vecB)
    out.push_back(b.back());
  return std::vector<TensorType>{TensorType(ty(op, 0).dtype, out)};
}

Rule reshape(const Op& op) {
  const auto& shape = op.getInts("shape");
  TRY(expectAllAtLeast("shape", shape, 0));
  TRY(expectSizeable("shape", shape));
  TensorType out(ty(op, 0).dtype, shape);
  if (out.numElements() != ty(op, 0).numElements())
    return fail("cannot reshape {0} ({1} elements) to {2} ({3} elements)", ty(op, 0).str(),
                ty(op, 0).numElements(), shapeStr(shape), out.numElements());
  return std::vector<TensorType>{out};
}

Rule flatten(const Op& op) {
  const Shape& x = ty(op, 0).shape;
  auto axis = normAxis(op.getInt("axis"), ty(op, 0).rank(), /*inclusive=*/true);
  if (!axis)
    return axis.takeError();
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < ty(op, 0).rank(); ++i)
    (i < *axis ? outer : inner) *= x[i];
  return std::vector<TensorType>{TensorType(ty(op, 0).dtype, {outer, inner})};
}

Rule transpose(const Op& op) {
  const auto& perm = op.getInts("perm");
  int64_t rank = ty(op, 0).rank();
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(rank);
  std::iota(iota.begin(), iota.end(), 0);
  if (sorted != iota)
    return fail("attribute 'perm' must be a permutation of 0..{0}", rank - 1);
  Shape out;
  for (int64_t p : perm)
    out.push_back(ty(op, 0).shape[p]);
  return std::vector<TensorType>{TensorType(ty(op, 0).dtype, out)};
}

Rule concat(const Op& op) {
  int64_t rank = ty(op, 0).rank();
  auto axis = normAxis(op.getInt("axis"), rank);
  if (!axis)
    return axis.takeError();
  Shape out = ty(op, 0).shape;
  for (unsigned i = 1; i < op.numOperands(); ++i) {
    TRY(expectSameDType(op, 0, i));
    const Shape& s = ty(op, i).shape;
    bool ok = static_cast<int64_t>(s.size()) == rank;
    for (int64_t d = 0; ok && d < rank; ++d)
      ok = d == *axis || s[d] == out[d];
    if (!ok)
      return fail("operand #{0} {1} does not match operand #0 {2} outside axis {3}", i,
                  ty(op, i).str(), ty(op, 0).str(), *axis);
    out[*axis] += s[*axis];
  }
  return std::vector<TensorType>{TensorType(ty(op, 0).dtype, out)};
}

Rule slice(const Op& op) {
  const auto& starts = op.getInts("starts");
  const auto& ends = op.getInts("ends");
  int64_t rank = ty(op, 0).rank();
  TRY(expectLength("ends", ends, starts.size()));
  std::vector<int64_t> axes(starts.size()), steps(starts.size(), 1);
  std::iota(axes.begin(), axes.end(), 0);
  if (op.hasAttr("axes"))
    axes = op.getInts("axes");
  if (op.hasAttr("steps"))
    steps = op.getInts("steps");
  TRY(expectLength("axes", axes, starts.size()));
  TRY(expectLength("steps", steps, starts.size()));
  Shape out = ty(op, 0).shape;
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < starts.size(); ++i) {
    auto axis = normAxis(axes[i], rank);
    if (!axis)
      return axis.takeError();
    if (seen[*axis])
      return fail("axis {0} is sliced twice", *axis);
    seen[*axis] = true;
    if (steps[i] == 0)
      return fail("attribute 'steps' must not contain 0");
    out[*axis] = resolveSlice(out[*axis], starts[i], ends[i], steps[i]).count;
  }
  return std::vector<TensorType>{TensorType(ty(op, 0).dtype, out)};
}

Rule split(const Op& op) {
  auto axis = normAxis(op.getInt("axis"), ty(op, 0).rank());
  if (!axis)
    return axis.takeError();
  const auto& sizes = op.getInts("split");
  TRY(expectAllAtLeast("split", sizes, 0));
  if (sizes.size() != op.numResults())
    return fail("attribute 'split' has {0} sizes for {1} results", sizes.size(), op.numResults());
  int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  if (total != ty(op, 0).shape[*axis])
    return fail("split sizes add up to {0}, but axis {1} of {2} has {3}", total, *axis,
                ty(op, 0).str(), ty(op, 0).shape[*axis]);
  std::vector<TensorType> out;
  for (int64_t s : sizes) {
    TensorType t = ty(op, 0);
    t.shape[*axis] = s;
    out.push_back(t);
  }
  return out;
}

Rule softmax(const Op& op) {
  TRY(expectFloat(op, 0));
  auto axis = normAxis(op.getInt("axis"), ty(op, 0).rank());
  if (!axis)
    return axis.takeError();
  return std::vector<TensorType>{ty(op, 0)};
}

Rule batchNorm(const Op& op) {
  TRY(expectFloat(op, 0));
  if (ty(op, 0).rank() < 2)
    return fail("operand #0 must have rank >= 2 (N, C, ...), got {0}", ty(op, 0).str());
  int64_t c = ty(op, 0).shape[1];
  static const char* names[] = {"", "scale", "bias", "mean", "var"};
  // A bf16 or fp16 x (mixed precision's activations) is normalized with
  // float32 parameters and statistics.
  const DType per = channelDType(ty(op, 0).dtype);
  for (unsigned i = 1; i < 5; ++i) {
    if (ty(op, i).dtype != per)
      return fail("{0} (operand #{1}) must be {2} for x {3}, got {4}", names[i], i, dtypeName(per),
                  ty(op, 0).str(), ty(op, i).str());
    if (ty(op, i).shape != Shape{c})
      return fail("{0} (operand #{1}) must have shape [{2}], got {3}", names[i], i, c,
                  ty(op, i).str());
  }
  if (!(op.getFloat("epsilon") > 0))
    return fail("attribute 'epsilon' must be > 0, got {0}", formatFloat(op.getFloat("epsilon")));
  double m = op.getFloat("momentum");
  if (!(m >= 0 && m <= 1))
    return fail("attribute 'momentum' must be in [0, 1], got {0}", formatFloat(m));
  return std::vector<TensorType>{ty(op, 0)};
}

Rule dropout(const Op& op) {
  TRY(expectFloat(op, 0));
  double r = op.getFloat("ratio");
  if (!(r >= 0 && r < 1))
    return fail("attribute 'ratio' must be in [0, 1), got {0}", formatFloat(r));
  return std::vector<TensorType>{ty(op, 0)};
}

Rule sameAsOperand(const Op& op) { return std::vector<TensorType>{ty(op, 0)}; }

llvm::Expected<LayerNormTypes> layerNormTypes(const TensorType& x, int64_t axis) {
  if (!isFloat(x.dtype))
    return fail("x must have a float element type, got {0}", x.str());
  if (axis < 0 || axis >= x.rank())
    return fail("attribute 'axis' must be in [0, {0}) for x {1}, got {2}", x.rank(), x.str(), axis);
  Shape stat(x.shape.begin(), x.shape.begin() + axis);
  stat.resize(x.shape.size(), 1);
  return LayerNormTypes{TensorType(x.dtype, stat),
                        TensorType(x.dtype, Shape(x.shape.begin() + axis, x.shape.end()))};
}

Rule layerNorm(const Op& op) {
  // (x, scale, bias) -> (y, mean, inv_std_dev).
  auto t = layerNormTypes(ty(op, 0), op.getInt("axis"));
  if (!t)
    return t.takeError();
  static const char* names[] = {"", "scale", "bias"};
  for (unsigned i = 1; i < 3; ++i)
    if (ty(op, i) != t->normalized)
      return fail("{0} (operand #{1}) must be {2}, the normalized part of x, got {3}", names[i], i,
                  t->normalized.str(), ty(op, i).str());
  if (!(op.getFloat("epsilon") > 0))
    return fail("attribute 'epsilon' must be > 0, got {0}", formatFloat(op.getFloat("epsilon")));
  return std::vector<TensorType>{ty(op, 0), t->stat, t->stat};
}

llvm::Expected<Shape> gatherNdShape(const Shape& data, const Shape& indices, int64_t batchDims) {
  int64_t r = static_cast<int64_t>(data.size()), q = static_cast<int64_t>(indices.size());
  if (q < 1)
    return fail("indices must have rank >= 1");
  if (batchDims < 0 || batchDims >= std::min(r, q))
    return fail("batch_dims {0} must be in [0, min(rank of data {1}, rank of indices {2}))",
                batchDims, r, q);
  for (int64_t d = 0; d < batchDims; ++d)
    if (data[d] != indices[d])
      return fail("batch dim {0} differs: data has {1}, indices {2}", d, data[d], indices[d]);
  int64_t k = indices.back();
  if (k < 1 || batchDims + k > r)
    return fail("indices address {0} dims, but data {1} has {2} after the {3} batch dims", k,
                shapeStr(data), r - batchDims, batchDims);
  Shape out(indices.begin(), indices.end() - 1);
  out.insert(out.end(), data.begin() + batchDims + k, data.end());
  return out;
}

Rule gatherNd(const Op& op) {
  if (ty(op, 1).dtype != DType::I64)
    return fail("indices must be i64, got {0}", ty(op, 1).str());
  auto out = gatherNdShape(ty(op, 0).shape, ty(op, 1).shape, op.getInt("batch_dims"));
  if (!out)
    return out.takeError();
  return std::vector<TensorType>{TensorType(ty(op, 0).dtype, *out)};
}

Rule constant(const Op& op) {
  // A constant's type is what it declares; verify::constant checks the values.
  return std::vector<TensorType>{op.result(0)->type()};
}

} // namespace lwcc::shape

namespace lwcc::verify {

llvm::Error constant(const Op& op) {
  const TensorType& t = op.result(0)->type();
  bool wantFloat = isFloat(t.dtype);
  const char* want = wantFloat ? "value" : "ivalue";
  const char* other = wantFloat ? "ivalue" : "value";
  if (op.hasAttr(other))
    return makeError(std::string("a constant of type ") + t.str() + " takes '" + want + "', not '" +
                     other + "'");
  if (!op.hasAttr(want))
    return makeError(std::string("requires attribute '") + want + "'");
  size_t n = wantFloat ? op.getFloats("value").size() : op.getInts("ivalue").size();
  if (n != 1 && static_cast<int64_t>(n) != t.numElements())
    return makeError(
        llvm::formatv("has {0} values for {1} elements (give 1 to splat)", n, t.numElements())
            .str());
  if (t.dtype == DType::Bool)
    for (int64_t v : op.getInts("ivalue"))
      if (v != 0 && v != 1)
        return makeError("a bool constant holds only 0 and 1");
  return llvm::Error::success();
}

llvm::Error event(const Op& op) {
  if (op.getInt("event") < 0)
    return makeError(llvm::formatv("event must be >= 0, got {0}", op.getInt("event")).str());
  return llvm::Error::success();
}

} // namespace lwcc::verify
