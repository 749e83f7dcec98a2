//===- GradRules.cpp - The gradient rule of every differentiable op -------===//
//
// Rules emit backward ops of their own (conv2d_grad_input, relu_grad, ...)
// where a kernel is worth having, and compose forward ops elsewhere
// (broadcast reductions, gemm/matmul transposes, reshapes).
//
//===----------------------------------------------------------------------===//
#include "ir/GradRules.h"

#include "ir/RuleHelpers.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <numeric>

namespace lwcc {

llvm::Expected<std::vector<Value*>> GradContext::emitN(OpKind kind,
                                                       const std::vector<Value*>& operands,
                                                       std::vector<NamedAttr> attrs,
                                                       unsigned numResults) {
  auto created = builder.createInferred(kind, operands, std::move(attrs), numResults);
  if (!created)
    return op.emitError("gradient rule failed: " + llvm::toString(created.takeError()));
  std::vector<Value*> out;
  for (unsigned i = 0; i < numResults; ++i)
    out.push_back((*created)->result(i));
  return out;
}

llvm::Expected<Value*> GradContext::emit(OpKind kind, const std::vector<Value*>& operands,
                                         std::vector<NamedAttr> attrs) {
  auto r = emitN(kind, operands, std::move(attrs), 1);
  if (!r)
    return r.takeError();
  return r->front();
}

Value* GradContext::scalar(double value, DType dtype) {
  Op* c = builder.create(OpKind::Constant, {}, {TensorType(dtype, {})});
  if (isFloat(dtype))
    c->setAttr("value", Attribute(std::vector<double>{value}));
  else
    c->setAttr("ivalue", Attribute(std::vector<int64_t>{static_cast<int64_t>(value)}));
  return c->result();
}

llvm::Expected<Value*> GradContext::sumToShape(Value* v, const Shape& shape) {
  const Shape& from = v->type().shape;
  if (from == shape)
    return v;
  size_t lead = from.size() - shape.size();
  std::vector<int64_t> axes;
  for (size_t d = 0; d < from.size(); ++d)
    if (d < lead || (shape[d - lead] == 1 && from[d] != 1))
      axes.push_back(static_cast<int64_t>(d));
  Value* r = v;
  if (!axes.empty()) {
    TRY_V(s, emit(OpKind::ReduceSum, {v}, {{"axes", Attribute(axes)}, {"keepdims", 1}}));
    r = s;
  }
  if (r->type().shape == shape)
    return r;
  return emit(OpKind::Reshape, {r}, {{"shape", Attribute(shape)}});
}

namespace grad {

namespace {

using llvm::Error;
using rules::ok;

NamedAttr copyAttr(const Op& op, const char* name) {
  const Attribute* a = op.findAttr(name);
  if (a)
    return {name, *a};
  return {name, op.info().findAttr(name)->defaultValue};
}

std::vector<NamedAttr> copyAttrs(const Op& op, std::initializer_list<const char*> names) {
  std::vector<NamedAttr> out;
  for (const char* n : names)
    out.push_back(copyAttr(op, n));
  return out;
}

/// dx = KIND(first, dy) for the activation-style backward ops.
Error unaryGrad(GradContext& c, OpKind kind, Value* first, std::vector<NamedAttr> attrs = {}) {
  if (!c.need(0))
    return ok();
  TRY_V(dx, c.emit(kind, {first, c.dy()}, std::move(attrs)));
  c.dxs[0] = dx;
  return ok();
}

} // namespace

Error conv2d(GradContext& c) {
  const Op& op = c.op;
  auto attrs = copyAttrs(op, {"strides", "pads", "dilations", "group"});
  if (c.need(0)) {
    auto a = attrs;
    a.push_back({"input_shape", Attribute(c.x(0)->type().shape)});
    TRY_V(dx, c.emit(OpKind::Conv2dGradInput, {c.dy(), c.x(1)}, a));
    c.dxs[0] = dx;
  }
  if (c.need(1)) {
    auto a = attrs;
    a.push_back({"filter_shape", Attribute(c.x(1)->type().shape)});
    TRY_V(dw, c.emit(OpKind::Conv2dGradFilter, {c.x(0), c.dy()}, a));
    c.dxs[1] = dw;
  }
  if (c.need(2)) {
    TRY_V(db, c.emit(OpKind::ReduceSum, {c.dy()},
                     {{"axes", Attribute(std::vector<int64_t>{0, 2, 3})}, {"keepdims", 0}}));
    c.dxs[2] = db;
  }
  return ok();
}

Error maxPool2d(GradContext& c) {
  return unaryGrad(c, OpKind::MaxPool2dGrad, c.x(0),
                   copyAttrs(c.op, {"kernel", "strides", "pads", "dilations", "ceil_mode"}));
}

Error avgPool2d(GradContext& c) {
  if (!c.need(0))
    return ok();
  auto attrs = copyAttrs(c.op, {"kernel", "strides", "pads", "ceil_mode", "count_include_pad"});
  attrs.push_back({"input_shape", Attribute(c.x(0)->type().shape)});
  TRY_V(dx, c.emit(OpKind::AvgPool2dGrad, {c.dy()}, attrs));
  c.dxs[0] = dx;
  return ok();
}

Error globalAvgPool(GradContext& c) {
  if (!c.need(0))
    return ok();
  const TensorType& t = c.x(0)->type();
  double inv = 1.0 / static_cast<double>(t.numElements() / (t.shape[0] * t.shape[1]));
  TRY_V(e, c.emit(OpKind::Expand, {c.dy()}, {{"shape", Attribute(t.shape)}}));
  TRY_V(dx, c.emit(OpKind::Mul, {e, c.scalar(inv, t.dtype)}));
  c.dxs[0] = dx;
  return ok();
}

Error lrn(GradContext& c) {
  if (!c.need(0))
    return ok();
  TRY_V(dx, c.emit(OpKind::LrnGrad, {c.x(0), c.y(), c.dy()},
                   copyAttrs(c.op, {"size", "alpha", "beta", "bias"})));
  c.dxs[0] = dx;
  return ok();
}

Error relu(GradContext& c) { return unaryGrad(c, OpKind::ReluGrad, c.y()); }
Error leakyRelu(GradContext& c) {
  return unaryGrad(c, OpKind::LeakyReluGrad, c.x(0), copyAttrs(c.op, {"alpha"}));
}
Error sigmoid(GradContext& c) { return unaryGrad(c, OpKind::SigmoidGrad, c.y()); }
Error tanh(GradContext& c) { return unaryGrad(c, OpKind::TanhGrad, c.y()); }
Error clip(GradContext& c) {
  return unaryGrad(c, OpKind::ClipGrad, c.x(0), copyAttrs(c.op, {"min", "max"}));
}
Error softmax(GradContext& c) {
  return unaryGrad(c, OpKind::SoftmaxGrad, c.y(), copyAttrs(c.op, {"axis"}));
}
Error logSoftmax(GradContext& c) {
  return unaryGrad(c, OpKind::LogSoftmaxGrad, c.y(), copyAttrs(c.op, {"axis"}));
}

Error exp(GradContext& c) { // dy * y
  if (!c.need(0))
    return ok();
  TRY_V(dx, c.emit(OpKind::Mul, {c.dy(), c.y()}));
  c.dxs[0] = dx;
  return ok();
}

Error log(GradContext& c) { // dy / x
  if (!c.need(0))
    return ok();
  TRY_V(dx, c.emit(OpKind::Div, {c.dy(), c.x(0)}));
  c.dxs[0] = dx;
  return ok();
}

Error sqrt(GradContext& c) { // dy / (2 y)
  if (!c.need(0))
    return ok();
  TRY_V(twoY, c.emit(OpKind::Mul, {c.y(), c.scalar(2.0, c.y()->type().dtype)}));
  TRY_V(dx, c.emit(OpKind::Div, {c.dy(), twoY}));
  c.dxs[0] = dx;
  return ok();
}

Error reciprocal(GradContext& c) { // -dy * y^2
  if (!c.need(0))
    return ok();
  TRY_V(y2, c.emit(OpKind::Mul, {c.y(), c.y()}));
  TRY_V(t, c.emit(OpKind::Mul, {c.dy(), y2}));
  TRY_V(dx, c.emit(OpKind::Neg, {t}));
  c.dxs[0] = dx;
  return ok();
}

Error neg(GradContext& c) {
  if (!c.need(0))
    return ok();
  TRY_V(dx, c.emit(OpKind::Neg, {c.dy()}));
  c.dxs[0] = dx;
  return ok();
}

Error abs(GradContext& c) { // dy * sign(x)
  if (!c.need(0))
    return ok();
  TRY_V(s, c.emit(OpKind::Sign, {c.x(0)}));
  TRY_V(dx, c.emit(OpKind::Mul, {c.dy(), s}));
  c.dxs[0] = dx;
  return ok();
}

Error add(GradContext& c) {
  for (unsigned i = 0; i < 2; ++i)
    if (c.need(i)) {
      TRY_V(d, c.sumToShape(c.dy(), c.x(i)->type().shape));
      c.dxs[i] = d;
    }
  return ok();
}

Error sub(GradContext& c) {
  if (c.need(0)) {
    TRY_V(d, c.sumToShape(c.dy(), c.x(0)->type().shape));
    c.dxs[0] = d;
  }
  if (c.need(1)) {
    TRY_V(n, c.emit(OpKind::Neg, {c.dy()}));
    TRY_V(d, c.sumToShape(n, c.x(1)->type().shape));
    c.dxs[1] = d;
  }
  return ok();
}

Error mul(GradContext& c) {
  for (unsigned i = 0; i < 2; ++i)
    if (c.need(i)) {
      TRY_V(p, c.emit(OpKind::Mul, {c.dy(), c.x(1 - i)}));
      TRY_V(d, c.sumToShape(p, c.x(i)->type().shape));
      c.dxs[i] = d;
    }
  return ok();
}

Error div(GradContext& c) { // d/da = dy / b; d/db = -dy * y / b
  if (c.need(0)) {
    TRY_V(q, c.emit(OpKind::Div, {c.dy(), c.x(1)}));
    TRY_V(d, c.sumToShape(q, c.x(0)->type().shape));
    c.dxs[0] = d;
  }
  if (c.need(1)) {
    TRY_V(p, c.emit(OpKind::Mul, {c.dy(), c.y()}));
    TRY_V(q, c.emit(OpKind::Div, {p, c.x(1)}));
    TRY_V(n, c.emit(OpKind::Neg, {q}));
    TRY_V(d, c.sumToShape(n, c.x(1)->type().shape));
    c.dxs[1] = d;
  }
  return ok();
}

Error pow(GradContext& c) { // d/da = dy * b * a^(b-1); d/db = dy * y * log(a)
  DType t = c.y()->type().dtype;
  if (c.need(0)) {
    TRY_V(bm1, c.emit(OpKind::Sub, {c.x(1), c.scalar(1.0, t)}));
    TRY_V(p, c.emit(OpKind::Pow, {c.x(0), bm1}));
    TRY_V(q, c.emit(OpKind::Mul, {p, c.x(1)}));
    TRY_V(r, c.emit(OpKind::Mul, {c.dy(), q}));
    TRY_V(d, c.sumToShape(r, c.x(0)->type().shape));
    c.dxs[0] = d;
  }
  if (c.need(1)) {
    TRY_V(l, c.emit(OpKind::Log, {c.x(0)}));
    TRY_V(p, c.emit(OpKind::Mul, {c.y(), l}));
    TRY_V(r, c.emit(OpKind::Mul, {c.dy(), p}));
    TRY_V(d, c.sumToShape(r, c.x(1)->type().shape));
    c.dxs[1] = d;
  }
  return ok();
}

/// Spreads dy of a reduction back over the reduced dims, times `scale`.
Error reduceGrad(GradContext& c, bool mean) {
  if (!c.need(0))
    return ok();
  const TensorType& x = c.x(0)->type();
  int64_t rank = x.rank();
  std::vector<bool> reduced(rank, !c.op.hasAttr("axes"));
  if (c.op.hasAttr("axes"))
    for (int64_t a : c.op.getInts("axes"))
      reduced[a < 0 ? a + rank : a] = true;
  Shape kept;
  int64_t count = 1;
  for (int64_t d = 0; d < rank; ++d) {
    kept.push_back(reduced[d] ? 1 : x.shape[d]);
    if (reduced[d])
      count *= x.shape[d];
  }
  Value* dy = c.dy();
  if (dy->type().shape != kept) {
    TRY_V(r, c.emit(OpKind::Reshape, {dy}, {{"shape", Attribute(kept)}}));
    dy = r;
  }
  TRY_V(e, c.emit(OpKind::Expand, {dy}, {{"shape", Attribute(x.shape)}}));
  Value* dx = e;
  if (mean) {
    TRY_V(m, c.emit(OpKind::Mul, {e, c.scalar(1.0 / static_cast<double>(count), x.dtype)}));
    dx = m;
  }
  c.dxs[0] = dx;
  return ok();
}

Error reduceMean(GradContext& c) { return reduceGrad(c, true); }
Error reduceSum(GradContext& c) { return reduceGrad(c, false); }

Error gemm(GradContext& c) {
  // Y = alpha * op(A) op(B) + beta * C, op(M) = M or its transpose.
  const Op& op = c.op;
  int64_t ta = op.getInt("transA"), tb = op.getInt("transB");
  NamedAttr alpha = copyAttr(op, "alpha");
  auto gemmOf = [&](Value* a, Value* b, int64_t tA, int64_t tB) {
    return c.emit(OpKind::Gemm, {a, b}, {{"transA", tA}, {"transB", tB}, alpha});
  };
  if (c.need(0)) {
    // d op(A) = alpha dY op(B)^T; dA is its transpose when transA.
    TRY_V(d, ta ? gemmOf(c.x(1), c.dy(), tb, 1) : gemmOf(c.dy(), c.x(1), 0, 1 - tb));
    c.dxs[0] = d;
  }
  if (c.need(1)) {
    // d op(B) = alpha op(A)^T dY; dB is its transpose when transB.
    TRY_V(d, tb ? gemmOf(c.dy(), c.x(0), 1, ta) : gemmOf(c.x(0), c.dy(), 1 - ta, 0));
    c.dxs[1] = d;
  }
  if (c.need(2)) {
    Value* g = c.dy();
    double beta = op.getFloat("beta");
    if (beta != 1.0) {
      TRY_V(s, c.emit(OpKind::Mul, {g, c.scalar(beta, g->type().dtype)}));
      g = s;
    }
    TRY_V(d, c.sumToShape(g, c.x(2)->type().shape));
    c.dxs[2] = d;
  }
  return ok();
}

Error matmul(GradContext& c) {
  // Promote 1-D operands as numpy does, then dA = dY B^T, dB = A^T dY with
  // broadcast batch dims summed away.
  Value* a = c.x(0);
  Value* b = c.x(1);
  Value* dy = c.dy();
  const Shape &as = a->type().shape, &bs = b->type().shape;
  Shape ap = as, bp = bs, yp = dy->type().shape;
  if (as.size() == 1) {
    ap.insert(ap.begin(), 1);
    yp.insert(yp.end() - (bs.size() == 1 ? 0 : 1), 1);
  }
  if (bs.size() == 1) {
    bp.push_back(1);
    yp.push_back(1);
  }
  auto reshape = [&](Value* v, const Shape& s) -> llvm::Expected<Value*> {
    if (v->type().shape == s)
      return v;
    return c.emit(OpKind::Reshape, {v}, {{"shape", Attribute(s)}});
  };
  auto swapLast = [&](Value* v) {
    std::vector<int64_t> perm(v->type().rank());
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
    return c.emit(OpKind::Transpose, {v}, {{"perm", Attribute(perm)}});
  };
  TRY_V(a2, reshape(a, ap));
  TRY_V(b2, reshape(b, bp));
  TRY_V(dy2, reshape(dy, yp));
  if (c.need(0)) {
    TRY_V(bt, swapLast(b2));
    TRY_V(p, c.emit(OpKind::MatMul, {dy2, bt}));
    TRY_V(s, c.sumToShape(p, ap));
    TRY_V(d, reshape(s, as));
    c.dxs[0] = d;
  }
  if (c.need(1)) {
    TRY_V(at, swapLast(a2));
    TRY_V(p, c.emit(OpKind::MatMul, {at, dy2}));
    TRY_V(s, c.sumToShape(p, bp));
    TRY_V(d, reshape(s, bs));
    c.dxs[1] = d;
  }
  return ok();
}

Error reshape(GradContext& c) { // also flatten
  if (!c.need(0))
    return ok();
  TRY_V(dx, c.emit(OpKind::Reshape, {c.dy()}, {{"shape", Attribute(c.x(0)->type().shape)}}));
  c.dxs[0] = dx;
  return ok();
}

Error identity(GradContext& c) { // also inference-form dropout
  if (c.need(0))
    c.dxs[0] = c.dy();
  return ok();
}

Error transpose(GradContext& c) {
  if (!c.need(0))
    return ok();
  const auto& perm = c.op.getInts("perm");
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inv[perm[i]] = static_cast<int64_t>(i);
  TRY_V(dx, c.emit(OpKind::Transpose, {c.dy()}, {{"perm", Attribute(inv)}}));
  c.dxs[0] = dx;
  return ok();
}

Error concat(GradContext& c) {
  int64_t rank = c.y()->type().rank();
  int64_t axis = c.op.getInt("axis");
  if (axis < 0)
    axis += rank;
  int64_t offset = 0;
  for (unsigned i = 0; i < c.op.numOperands(); ++i) {
    int64_t size = c.x(i)->type().shape[axis];
    if (c.need(i)) {
      TRY_V(d, c.emit(OpKind::Slice, {c.dy()},
                      {{"starts", Attribute(std::vector<int64_t>{offset})},
                       {"ends", Attribute(std::vector<int64_t>{offset + size})},
                       {"axes", Attribute(std::vector<int64_t>{axis})}}));
      c.dxs[i] = d;
    }
    offset += size;
  }
  return ok();
}

Error split(GradContext& c) {
  if (!c.need(0))
    return ok();
  std::vector<Value*> parts;
  for (unsigned i = 0; i < c.op.numResults(); ++i) {
    if (c.dy(i)) {
      parts.push_back(c.dy(i));
      continue;
    }
    Op* zero = c.builder.create(OpKind::Constant, {}, {c.y(i)->type()});
    zero->setAttr("value", Attribute(std::vector<double>{0.0}));
    parts.push_back(zero->result());
  }
  TRY_V(dx, c.emit(OpKind::Concat, parts, {copyAttr(c.op, "axis")}));
  c.dxs[0] = dx;
  return ok();
}

Error slice(GradContext& c) {
  if (!c.need(0))
    return ok();
  std::vector<NamedAttr> attrs = copyAttrs(c.op, {"starts", "ends"});
  for (const char* opt : {"axes", "steps"})
    if (const Attribute* a = c.op.findAttr(opt))
      attrs.push_back({opt, *a});
  attrs.push_back({"input_shape", Attribute(c.x(0)->type().shape)});
  TRY_V(dx, c.emit(OpKind::SliceGrad, {c.dy()}, attrs));
  c.dxs[0] = dx;
  return ok();
}

Error gather(GradContext& c) {
  if (!c.need(0))
    return ok();
  TRY_V(dx, c.emit(OpKind::GatherGrad, {c.x(1), c.dy()},
                   {copyAttr(c.op, "axis"), {"input_shape", Attribute(c.x(0)->type().shape)}}));
  c.dxs[0] = dx;
  return ok();
}

Error expand(GradContext& c) {
  if (!c.need(0))
    return ok();
  TRY_V(dx, c.sumToShape(c.dy(), c.x(0)->type().shape));
  c.dxs[0] = dx;
  return ok();
}

Error pad(GradContext& c) {
  if (!c.need(0))
    return ok();
  if (c.op.getString("mode") != "constant")
    return c.op.emitError("has no gradient rule for mode \"" + c.op.getString("mode") + "\"");
  const auto& pads = c.op.getInts("pads");
  const Shape& in = c.x(0)->type().shape;
  std::vector<int64_t> starts, ends;
  for (size_t d = 0; d < in.size(); ++d) {
    if (pads[d] < 0 || pads[d + in.size()] < 0)
      return c.op.emitError("has no gradient rule for negative (cropping) pads");
    starts.push_back(pads[d]);
    ends.push_back(pads[d] + in[d]);
  }
  TRY_V(dx, c.emit(OpKind::Slice, {c.dy()},
                   {{"starts", Attribute(starts)}, {"ends", Attribute(ends)}}));
  c.dxs[0] = dx;
  return ok();
}

Error cast(GradContext& c) {
  if (!c.need(0))
    return ok();
  DType from = c.x(0)->type().dtype;
  if (!isFloat(from) || !isFloat(c.y()->type().dtype))
    return ok(); // no gradient through integer casts
  TRY_V(dx, c.emit(OpKind::Cast, {c.dy()}, {{"to", std::string(dtypeName(from))}}));
  c.dxs[0] = dx;
  return ok();
}

Error batchNormTrain(GradContext& c) {
  // y: batch_norm_grad gives dx, dscale and dbias. The batch statistics
  // (mean = sum(x) / m and population var = sum((x - mean)^2) / m per
  // channel) usually feed only the running averages, which the loss does
  // not see; where the loss does see them, they add
  // dx += dmean / m + (x - mean) * dvar * 2 / m.
  Value* dx = nullptr;
  if (c.dy(0) && (c.need(0) || c.need(1) || c.need(2))) {
    auto grads = c.emitN(OpKind::BatchNormGrad, {c.x(0), c.x(1), c.y(1), c.y(2), c.dy(0)},
                         {copyAttr(c.op, "epsilon")}, 3);
    if (!grads)
      return grads.takeError();
    dx = (*grads)[0];
    for (unsigned i = 1; i < 3; ++i)
      if (c.need(i))
        c.dxs[i] = (*grads)[i];
  }
  if (c.need(0) && (c.dy(1) || c.dy(2))) {
    const TensorType& x = c.x(0)->type();
    if (x.dtype != c.y(1)->type().dtype)
      return c.op.emitError("the loss reads the batch statistics of a batch norm of " +
                            std::string(dtypeName(x.dtype)) +
                            " activations: their gradient is only made in one type (keep this "
                            "batch norm's input float32)");
    Shape perChannel(x.shape.size(), 1); // [1, C, 1, ...]: broadcasts over x
    perChannel[1] = x.shape[1];
    double m = static_cast<double>(x.numElements() / std::max<int64_t>(1, x.shape[1]));
    auto term = [&](Value* stat, double factor) -> llvm::Expected<Value*> {
      TRY_V(r, c.emit(OpKind::Reshape, {stat}, {{"shape", Attribute(perChannel)}}));
      return c.emit(OpKind::Mul, {r, c.scalar(factor / m, x.dtype)});
    };
    // Without y's gradient (a synchronized batch norm reads only the
    // statistics: passes/Materialize.cpp) the mean's term is added to the
    // variance's by broadcast, with no x-sized copy of it.
    Value* dmean = nullptr;
    if (c.dy(1)) {
      TRY_V(d, term(c.dy(1), 1.0));
      dmean = d;
      if (dx || !c.dy(2)) {
        TRY_V(sum, dx ? c.emit(OpKind::Add, {dx, dmean})
                      : c.emit(OpKind::Expand, {dmean}, {{"shape", Attribute(x.shape)}}));
        dx = sum;
        dmean = nullptr;
      }
    }
    if (c.dy(2)) {
      TRY_V(dvar, term(c.dy(2), 2.0));
      TRY_V(mean, c.emit(OpKind::Reshape, {c.y(1)}, {{"shape", Attribute(perChannel)}}));
      TRY_V(centered, c.emit(OpKind::Sub, {c.x(0), mean}));
      TRY_V(p, c.emit(OpKind::Mul, {centered, dvar}));
      if (dx || dmean) {
        TRY_V(sum, dx ? c.emit(OpKind::Add, {dx, p}) : c.emit(OpKind::Add, {p, dmean}));
        p = sum;
      }
      dx = p;
    }
  }
  if (c.need(0))
    c.dxs[0] = dx;
  return ok();
}

Error softmaxXent(GradContext& c) {
  if (!c.need(0))
    return ok();
  std::vector<NamedAttr> attrs;
  if (c.op.hasAttr("label_smoothing"))
    attrs.push_back({"label_smoothing", Attribute(c.op.getFloat("label_smoothing"))});
  if (c.op.hasAttr("ignore_index"))
    attrs.push_back({"ignore_index", Attribute(c.op.getInt("ignore_index"))});
  TRY_V(dx, c.emit(OpKind::SoftmaxXentGrad, {c.x(0), c.x(1), c.dy()}, std::move(attrs)));
  c.dxs[0] = dx;
  return ok();
}

Error mseLoss(GradContext& c) {
  for (unsigned i = 0; i < 2; ++i)
    if (c.need(i)) {
      TRY_V(d, c.emit(OpKind::MseLossGrad, {c.x(i), c.x(1 - i), c.dy()}));
      c.dxs[i] = d;
    }
  return ok();
}

Error layerNorm(GradContext& c) {
  // layer_norm_grad gives dx, dscale and dbias from y's gradient. The
  // statistics (mean, inv_std_dev) are outputs for inspection; a loss that
  // depends on them is not differentiated.
  if (c.dy(1) || c.dy(2))
    return c.op.emitError("has no gradient rule for its mean and inv_std_dev results: the loss "
                          "must depend on y only");
  if (!c.dy(0) || !(c.need(0) || c.need(1) || c.need(2)))
    return ok();
  auto grads = c.emitN(OpKind::LayerNormGrad, {c.x(0), c.x(1), c.y(1), c.y(2), c.dy(0)},
                       {copyAttr(c.op, "axis"), copyAttr(c.op, "epsilon")}, 3);
  if (!grads)
    return grads.takeError();
  for (unsigned i = 0; i < 3; ++i)
    if (c.need(i))
      c.dxs[i] = (*grads)[i];
  return ok();
}

Error erf(GradContext& c) {
  // d erf(x) / dx = 2 / sqrt(pi) * exp(-x^2).
  if (!c.need(0))
    return ok();
  DType t = c.x(0)->type().dtype;
  TRY_V(sq, c.emit(OpKind::Mul, {c.x(0), c.x(0)}));
  TRY_V(neg, c.emit(OpKind::Neg, {sq}));
  TRY_V(e, c.emit(OpKind::Exp, {neg}));
  TRY_V(slope, c.emit(OpKind::Mul, {e, c.scalar(1.1283791670955126, t)}));
  TRY_V(dx, c.emit(OpKind::Mul, {c.dy(), slope}));
  c.dxs[0] = dx;
  return ok();
}

Error gatherNd(GradContext& c) {
  if (!c.need(0))
    return ok();
  TRY_V(dx,
        c.emit(OpKind::GatherNdGrad, {c.x(1), c.dy()},
               {copyAttr(c.op, "batch_dims"), {"input_shape", Attribute(c.x(0)->type().shape)}}));
  c.dxs[0] = dx;
  return ok();
}

} // namespace grad

} // namespace lwcc
