// lwrt/kernel_checks.h - the host-side type dispatch and operand checks of the kernels
// defines: dispatchFloat, dispatchNumeric, dispatchValue, dispatchInt, dispatchBytes,
//          isFloat, isNumeric, isInt, is16, sameLayout, shapeString, describe,
//          rowMajorStrides, broadcastStrides, broadcastsTo, shapeProduct, normAxis,
//          broadcastShape, broadcastIndexOf, rowMajor, fillValue, ConvGeom, convGeom,
//          reducedDims, gatherNdDepth, padFillBits,
//          LayerRows, layerRows, attentionOperands, attentionGradOperands, updateGrad
//
// The CPU kernels (runtime/cpu) and the host side of the CUDA kernels
// (runtime/cuda) check their operands and pick the C++ element type the
// same way: one definition here, host code only (the device code sees the
// chosen types and the strides these compute).
#pragma once

#include "activation_math.h"
#include "attention_math.h"
#include "nn_params.h"
#include "optimizer_math.h"
#include "tensor.h"
#include "tensor_params.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

namespace lwrt {

/// Calls fn(T{}) with T the C++ type of float dtype `t` (F32, F64); false otherwise.
template <typename Fn> bool dispatchFloat(DType t, Fn fn) {
  switch (t) {
  case DType::F32:
    return fn(float{});
  case DType::F64:
    return fn(double{});
  default:
    return false;
  }
}

/// Calls fn(J{}) with J the type of an integer dtype (I64, I32); false otherwise.
template <typename Fn> bool dispatchInt(DType t, Fn fn) {
  if (t == DType::I64)
    return fn(int64_t{});
  if (t == DType::I32)
    return fn(int32_t{});
  return false;
}

/// dispatchFloat for F32 and F64, dispatchInt for I64 and I32.
template <typename Fn> bool dispatchNumeric(DType t, Fn fn) {
  if (t == DType::I64 || t == DType::I32)
    return dispatchInt(t, fn);
  return dispatchFloat(t, fn);
}

/// The same for F32, F64, I64, I32 and Bool (as uint8_t).
template <typename Fn> bool dispatchValue(DType t, Fn fn) {
  if (t == DType::Bool)
    return fn(uint8_t{});
  return dispatchNumeric(t, fn);
}

/// Calls fn(U{}) with U an unsigned integer of the element size of `t`
/// (for kernels that only move elements).
template <typename Fn> bool dispatchBytes(DType t, Fn fn) {
  switch (dtypeSize(t)) {
  case 1:
    return fn(uint8_t{});
  case 2:
    return fn(uint16_t{});
  case 4:
    return fn(uint32_t{});
  case 8:
    return fn(uint64_t{});
  default:
    return false;
  }
}

inline bool isFloat(DType t) { return t == DType::F32 || t == DType::F64; }
inline bool isInt(DType t) { return t == DType::I64 || t == DType::I32; }
inline bool isNumeric(DType t) { return isFloat(t) || isInt(t); }
/// bf16 and fp16: mixed precision's 16-bit floats.
inline bool is16(DType t) { return t == DType::BF16 || t == DType::F16; }

/// One element type and one shape.
inline bool sameLayout(const TensorView& a, const TensorView& b) {
  return a.dtype == b.dtype && a.shape == b.shape;
}

/// An optimizer update's gradient `g` beside its weight `w`: of w's type,
/// shape and layout, or (mixed precision) bf16 or fp16 of w's shape beside
/// a float32 row-major w. Sets `kind` to which.
inline bool updateGrad(const TensorView& w, const TensorView& g, GradKind& kind) {
  if (g.shape != w.shape || g.layout != w.layout)
    return false;
  if (g.dtype == w.dtype) {
    kind = GradKind::Same;
    return true;
  }
  if (w.dtype != DType::F32 || !is16(g.dtype) || w.layout != Layout::RowMajor)
    return false;
  kind = g.dtype == DType::BF16 ? GradKind::Bf16 : GradKind::F16;
  return true;
}

/// "[2,3]" for messages.
inline std::string shapeString(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t d = 0; d < s.size(); ++d) {
    if (d)
      out += ',';
    out += std::to_string(s[d]);
  }
  return out + "]";
}

/// "F32[2,3]" for messages.
inline std::string describe(const TensorView& t) {
  static const char* names[] = {"F32", "F64", "F16", "BF16", "I64", "I32", "Bool"};
  return std::string(names[static_cast<int>(t.dtype)]) + shapeString(t.shape);
}

/// Row-major strides of `s`.
inline std::vector<int64_t> rowMajorStrides(const std::vector<int64_t>& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;)
    st[d - 1] = st[d] * s[d];
  return st;
}

/// Strides of `s` seen from a broadcast result of rank `rank` (0 where broadcast).
inline std::vector<int64_t> broadcastStrides(const std::vector<int64_t>& s, size_t rank) {
  std::vector<int64_t> st(rank, 0);
  int64_t acc = 1;
  for (size_t d = s.size(); d-- > 0;) {
    st[rank - s.size() + d] = s[d] == 1 ? 0 : acc;
    acc *= s[d];
  }
  return st;
}

/// Whether a and b broadcast to exactly `out`.
inline bool broadcastsTo(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                         const std::vector<int64_t>& out) {
  size_t rank = std::max(a.size(), b.size());
  if (out.size() != rank)
    return false;
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return false;
    if (out[i] != (da == 1 ? db : da))
      return false;
  }
  return true;
}

/// The product of s[from, to).
inline int64_t shapeProduct(const std::vector<int64_t>& s, size_t from = 0, size_t to = SIZE_MAX) {
  // Over iterators: an index loop bounded by min(to, size) makes GCC 12 at
  // -O3 warn (-Waggressive-loop-optimizations) of an iteration past the
  // largest vector.
  size_t end = std::min(to, s.size());
  if (from >= end)
    return 1;
  return std::accumulate(s.begin() + static_cast<std::ptrdiff_t>(from),
                         s.begin() + static_cast<std::ptrdiff_t>(end), int64_t{1},
                         std::multiplies<int64_t>());
}

/// `axis` in [-rank, rank) made non-negative; false when out of range.
inline bool normAxis(int64_t& axis, int64_t rank) {
  if (axis < 0)
    axis += rank;
  return axis >= 0 && axis < rank;
}

/// The result shape of broadcasting a and b, or false.
inline bool broadcastShape(const TensorView& a, const TensorView& b, std::vector<int64_t>& out) {
  size_t r = std::max(a.shape.size(), b.shape.size());
  out.assign(r, 1);
  for (size_t d = 0; d < r; ++d) {
    int64_t da = d < r - a.shape.size() ? 1 : a.shape[d - (r - a.shape.size())];
    int64_t db = d < r - b.shape.size() ? 1 : b.shape[d - (r - b.shape.size())];
    if (da != db && da != 1 && db != 1)
      return false;
    out[d] = da == 1 ? db : da;
  }
  return true;
}

/// Every view is row-major.
inline bool rowMajor(std::initializer_list<const TensorView*> views) {
  for (const TensorView* v : views)
    if (v->layout != Layout::RowMajor)
      return false;
  return true;
}

/// The BroadcastIndex of `from` read by a result of `to`'s shape.
inline bool broadcastIndexOf(const TensorView& to, const TensorView& from, BroadcastIndex& out) {
  return makeBroadcastIndex(static_cast<int>(to.rank()), to.shape.data(),
                            static_cast<int>(from.rank()), from.shape.data(), out);
}

/// Element k of a fill's constant for element type T (Bool as 0 or 1).
template <typename T> T fillValue(const FillParams& p, int64_t k, DType t) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(p.value.size() == 1 ? p.value[0] : p.value[k]);
  } else {
    int64_t v = p.ivalue.size() == 1 ? p.ivalue[0] : p.ivalue[k];
    return t == DType::Bool ? static_cast<T>(v != 0) : static_cast<T>(v);
  }
}

/// A 2-D convolution's sizes: x [N, C, H, W], w [M, Cg, KH, KW] in G
/// groups of Mg filters, y [N, M, OH, OW].
struct ConvGeom {
  int64_t N, C, H, W, M, Cg, KH, KW, OH, OW, G, Mg;
  int64_t K() const { return Cg * KH * KW; } // rows of a column matrix
  int64_t P() const { return OH * OW; }      // its columns
};

/// Fills `g` from the shapes of x, w and y; false when they or the
/// attributes do not fit together.
inline bool convGeom(const std::vector<int64_t>& xs, const std::vector<int64_t>& ws,
                     const std::vector<int64_t>& ys, const Conv2dParams& p, ConvGeom& g) {
  if (xs.size() != 4 || ws.size() != 4 || ys.size() != 4 || p.group < 1)
    return false;
  g = {xs[0], xs[1], xs[2], xs[3], ws[0], ws[1], ws[2], ws[3], ys[2], ys[3], p.group, 0};
  if (g.M % g.G != 0 || g.Cg * g.G != g.C || ys[0] != g.N || ys[1] != g.M)
    return false;
  for (int i = 0; i < 2; ++i) {
    int64_t in = xs[2 + i], k = ws[2 + i], s = p.strides[i], d = p.dilations[i];
    if (s < 1 || d < 1 || k < 1 || p.pads[i] < 0 || p.pads[i + 2] < 0)
      return false;
    int64_t room = in + p.pads[i] + p.pads[i + 2] - (d * (k - 1) + 1);
    if (room < 0 || ys[2 + i] != room / s + 1)
      return false;
  }
  g.Mg = g.M / g.G;
  return true;
}

/// Which of x's `rank` dims a reduce with `p` takes away (p.axes, negative
/// ones counted from the end; every dim without axes) in `reduced`, and the
/// shape of its result in `want`; false when an axis is out of range or
/// repeated.
inline bool reducedDims(const std::vector<int64_t>& x, const ReduceParams& p,
                        std::vector<bool>& reduced, std::vector<int64_t>& want) {
  int64_t rank = static_cast<int64_t>(x.size());
  reduced.assign(x.size(), !p.axes);
  if (p.axes)
    for (int64_t d : *p.axes) {
      if (!normAxis(d, rank) || reduced[d])
        return false;
      reduced[d] = true;
    }
  want.clear();
  for (int64_t d = 0; d < rank; ++d)
    if (!reduced[d])
      want.push_back(x[d]);
    else if (p.keepdims)
      want.push_back(1);
  return true;
}

/// gather_nd's index depth k (the last dim of `indices`) when reading
/// `data` with `indices` over `b` batch dims gives a result of shape
/// `out`; 0 when the shapes or the index type do not fit.
inline int64_t gatherNdDepth(const std::vector<int64_t>& data, const TensorView& indices, int64_t b,
                             const std::vector<int64_t>& out) {
  const std::vector<int64_t>& is = indices.shape;
  int64_t r = static_cast<int64_t>(data.size()), q = static_cast<int64_t>(is.size());
  if (indices.dtype != DType::I64 || q < 1 || b < 0 || b >= std::min(r, q))
    return 0;
  int64_t k = is.back();
  if (k < 1 || b + k > r)
    return 0;
  for (int64_t d = 0; d < b; ++d)
    if (data[d] != is[d])
      return 0;
  std::vector<int64_t> want(is.begin(), is.end() - 1);
  want.insert(want.end(), data.begin() + b + k, data.end());
  return want == out ? k : 0;
}

/// Pad's constant `v` as the bits of an element of `t`, U being the
/// unsigned-width type dispatchBytes chose for it (zero for 16-bit types).
template <typename U> U padFillBits(DType t, double v) {
  U fill{};
  auto put = [&](auto value) {
    static_assert(sizeof(value) == sizeof(U));
    std::memcpy(&fill, &value, sizeof(U));
  };
  if constexpr (sizeof(U) == 8) {
    if (t == DType::F64)
      put(v);
    else
      put(static_cast<int64_t>(v));
  } else if constexpr (sizeof(U) == 4) {
    if (t == DType::F32)
      put(static_cast<float>(v));
    else
      put(static_cast<int32_t>(static_cast<int64_t>(v)));
  } else if constexpr (sizeof(U) == 1) {
    put(static_cast<uint8_t>(static_cast<int64_t>(v) != 0));
  }
  return fill;
}

/// Layer norm's x as [rows, n]: the dims before the axis, and the ones
/// normalized.
struct LayerRows {
  int64_t rows = 1, n = 1;
};

/// x's LayerRows along `axis`; false unless the views have their shapes:
/// `same` x's, `params` x.shape[axis:], `stats` x's with the normalized dims
/// set to 1.
inline bool layerRows(const TensorView& x, int64_t axis,
                      std::initializer_list<const TensorView*> same,
                      std::initializer_list<const TensorView*> params,
                      std::initializer_list<const TensorView*> stats, LayerRows& L) {
  if (axis < 0 || axis >= x.rank())
    return false;
  std::vector<int64_t> normalized(x.shape.begin() + axis, x.shape.end());
  std::vector<int64_t> stat(x.shape.begin(), x.shape.begin() + axis);
  stat.resize(x.shape.size(), 1);
  for (const TensorView* v : same)
    if (v->shape != x.shape)
      return false;
  for (const TensorView* v : params)
    if (v->shape != normalized)
      return false;
  for (const TensorView* v : stats)
    if (v->shape != stat)
      return false;
  L.rows = 1;
  L.n = 1;
  for (int64_t d = 0; d < x.rank(); ++d)
    (d < axis ? L.rows : L.n) *= x.shape[d];
  return true;
}

/// attention's operands (lwrt/attention_math.h): q [..., Tq, D], k
/// [..., Tk, D], v [..., Tk, Dv] and a mask broadcastable to [..., Tq, Tk],
/// row-major floats of one type, out [..., Tq, Dv] and lse [..., Tq] of that
/// type; their row shape in `s`, or false. Each backend bounds the head
/// widths its kernels take.
inline bool attentionOperands(const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView* mask, const TensorView& out, const TensorView& lse,
                              AttentionShape& s) {
  if (!isFloat(q.dtype) || k.dtype != q.dtype || v.dtype != q.dtype ||
      (mask && mask->dtype != q.dtype) || !rowMajor({&q, &k, &v}) || (mask && !rowMajor({mask})) ||
      q.rank() != k.rank() || q.rank() != v.rank() || q.rank() < 1)
    return false;
  if (!makeAttentionShape(static_cast<int>(q.rank()), q.shape.data(), k.shape.data(),
                          v.shape.data(), mask ? static_cast<int>(mask->rank()) : -1,
                          mask ? mask->shape.data() : nullptr, s))
    return false;
  auto is = [&](const TensorView& t, const std::vector<int64_t>& shape) {
    return t.dtype == q.dtype && t.shape == shape && rowMajor({&t});
  };
  std::vector<int64_t> rows(q.shape.begin(), q.shape.end() - 1); // lse's: q's without D
  std::vector<int64_t> values = q.shape;                         // out's: q's with Dv
  values.back() = s.dv;
  return is(out, values) && is(lse, rows);
}

/// attentionGrad's operands: attention's, dout like out, and dq, dk, dv like
/// q, k, v.
inline bool attentionGradOperands(const TensorView& dout, const TensorView& q, const TensorView& k,
                                  const TensorView& v, const TensorView& out, const TensorView& lse,
                                  const TensorView* mask, const TensorView& dq,
                                  const TensorView& dk, const TensorView& dv, AttentionShape& s) {
  auto like = [](const TensorView& t, const TensorView& of) {
    return t.dtype == of.dtype && t.shape == of.shape && rowMajor({&t});
  };
  return attentionOperands(q, k, v, mask, out, lse, s) && like(dout, out) && like(dq, q) &&
         like(dk, k) && like(dv, v);
}

} // namespace lwrt
