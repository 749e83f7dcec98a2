//===- CommOps.cpp - Reference kernels of the communication ops -----------===//
//
// The interpreter holds every device's values in one map, so a collective is
// plain arithmetic over its operands. Sums run over devices in the order of
// `devices`, the same on every device: all replicas get identical bits.
//
//===----------------------------------------------------------------------===//
#include "interp/Eval.h"

namespace lwcc {

namespace kernels {

void copyRows(const Tensor& src, int64_t srcRow, Tensor& dst, int64_t dstRow, int64_t axis,
              int64_t rows) {
  const Shape &ss = src.type.shape, &ds = dst.type.shape;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= ss[d];
  for (size_t d = axis + 1; d < ss.size(); ++d)
    inner *= ss[d];
  bool isF = src.isFloatData();
  for (int64_t o = 0; o < outer; ++o) {
    int64_t from = (o * ss[axis] + srcRow) * inner, to = (o * ds[axis] + dstRow) * inner;
    for (int64_t k = 0; k < rows * inner; ++k) {
      if (isF)
        dst.f[to + k] = src.f[from + k];
      else
        dst.i[to + k] = src.i[from + k];
    }
  }
}

namespace {

/// Calls fn(local flat index, whole flat index) for each element of shard `p`.
template <typename Fn> void forEachShardElement(const Value& p, const Shape& whole, Fn fn) {
  std::vector<int64_t> offset(whole.size(), 0);
  for (const ShardDim& sd : p.shard())
    offset[sd.dim] = sd.offset;
  std::vector<int64_t> strides = stridesOf(whole);
  forEachIndex(p.type().shape, [&](const std::vector<int64_t>& idx, int64_t k) {
    int64_t w = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      w += (idx[d] + offset[d]) * strides[d];
    fn(k, w);
  });
}

} // namespace

llvm::Expected<Tensor> readShard(const Value& p, const Tensor& whole) {
  const Shape& ws = whole.type.shape;
  if (whole.type != p.wholeType())
    return makeError(p.loc(), "param '%" + p.name() + "', a shard " + p.type().str() +
                                  ", does not fit its initializer \"" + p.paramName() + "\" " +
                                  whole.type.str());
  Tensor piece(p.type());
  forEachShardElement(p, ws, [&](int64_t k, int64_t w) {
    if (piece.isFloatData())
      piece.f[k] = whole.f[w];
    else
      piece.i[k] = whole.i[w];
  });
  return piece;
}

void writeShard(const Value& p, const Tensor& piece, Tensor& whole) {
  forEachShardElement(p, whole.type.shape, [&](int64_t k, int64_t w) {
    if (piece.isFloatData())
      whole.f[w] = piece.f[k];
    else
      whole.i[w] = piece.i[k];
  });
}

} // namespace kernels

namespace {

Tensor sumOf(const EvalCtx& c, unsigned first, unsigned count) {
  Tensor sum = c.x(first);
  for (unsigned j = 1; j < count; ++j)
    for (size_t k = 0; k < sum.f.size(); ++k)
      sum.f[k] += c.x(first + j).f[k];
  return sum;
}

/// Concatenates every operand along `axis` into `out`.
void concatInto(const EvalCtx& c, Tensor& out, int64_t axis) {
  int64_t row = 0;
  for (unsigned j = 0; j < c.in.size(); ++j) {
    kernels::copyRows(c.x(j), 0, out, row, axis, c.x(j).type.shape[axis]);
    row += c.x(j).type.shape[axis];
  }
}

/// Result i: rows sizes[0] + ... + sizes[i-1] onwards of `whole`.
void scatterFrom(EvalCtx& c, const Tensor& whole, int64_t axis) {
  int64_t row = 0;
  for (unsigned i = 0; i < c.out.size(); ++i) {
    int64_t rows = c.y(i).type.shape[axis];
    kernels::copyRows(whole, row, c.y(i), 0, axis, rows);
    row += rows;
  }
}

} // namespace

llvm::Error evalAllReduce(EvalCtx& c) {
  unsigned p = static_cast<unsigned>(c.op.getInts("devices").size());
  for (unsigned t = 0; t < c.in.size() / p; ++t) {
    Tensor sum = sumOf(c, t * p, p);
    for (unsigned i = 0; i < p; ++i)
      c.y(t * p + i).f = sum.f;
  }
  return llvm::Error::success();
}

llvm::Error evalAllGather(EvalCtx& c) {
  int64_t axis = c.op.getInt("axis");
  concatInto(c, c.y(0), axis);
  for (unsigned i = 1; i < c.out.size(); ++i) {
    c.y(i).f = c.y(0).f;
    c.y(i).i = c.y(0).i;
  }
  return llvm::Error::success();
}

llvm::Error evalReduceScatter(EvalCtx& c) {
  scatterFrom(c, sumOf(c, 0, static_cast<unsigned>(c.in.size())), c.op.getInt("axis"));
  return llvm::Error::success();
}

llvm::Error evalBroadcast(EvalCtx& c) {
  for (Tensor& y : c.out)
    y = c.x();
  return llvm::Error::success();
}

llvm::Error evalReduceTo(EvalCtx& c) {
  c.y() = sumOf(c, 0, static_cast<unsigned>(c.in.size()));
  return llvm::Error::success();
}

llvm::Error evalDeviceCopy(EvalCtx& c) {
  c.y() = c.x();
  return llvm::Error::success();
}

llvm::Error evalShard(EvalCtx& c) {
  scatterFrom(c, c.x(), c.op.getInt("axis"));
  return llvm::Error::success();
}

llvm::Error evalUnshard(EvalCtx& c) {
  concatInto(c, c.y(), c.op.getInt("axis"));
  return llvm::Error::success();
}

} // namespace lwcc
