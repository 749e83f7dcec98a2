//===- EncodingOps.cpp - Reference kernels of ir/EncodingOps.cpp's ops ----===//
//
// cumsum, tile, mod, sin, cos and the norm reductions, each element
// computed with the functions of lwrt/encoding_math.h, which the CPU and
// CUDA kernels call too.
//
//===----------------------------------------------------------------------===//
#include "interp/Eval.h"
#include "runtime/include/lwrt/activation_math.h"
#include "runtime/include/lwrt/encoding_math.h"

#include "llvm/Support/FormatVariadic.h"

#include <cmath>

namespace lwcc {

using llvm::Error;

namespace {

lwrt::NormKind normKindOf(OpKind k) {
  return k == OpKind::ReduceL1   ? lwrt::NormKind::L1
         : k == OpKind::ReduceL2 ? lwrt::NormKind::L2
                                 : lwrt::NormKind::SumSquare;
}

Error normOf(EvalCtx& c) {
  const Shape& xs = c.x().type.shape;
  lwrt::NormWalk walk;
  std::vector<int64_t> out;
  bool all = !c.op.hasAttr("axes");
  if (!lwrt::makeNormWalk(static_cast<int>(xs.size()), xs.data(), all,
                          all ? std::vector<int64_t>{} : c.op.getInts("axes"),
                          c.op.getInt("keepdims") != 0, normKindOf(c.op.kind()), walk, out))
    return makeError(llvm::formatv("cannot reduce {0}", c.x().type.str()).str());
  for (int64_t o = 0; o < c.y().size(); ++o) {
    if (c.y().isFloatData())
      c.y().f[o] = lwrt::normFinish(walk.sum<double>(c.x().f.data(), o), walk.kind);
    else
      c.y().i[o] = walk.sum<int64_t>(c.x().i.data(), o);
  }
  return Error::success();
}

} // namespace

Error evalCumSum(EvalCtx& c) {
  const Shape& xs = c.x().type.shape;
  lwrt::CumSumParams p{c.op.getInt("axis"), c.op.getInt("exclusive"), c.op.getInt("reverse")};
  lwrt::CumSumLines lines;
  if (!lwrt::makeCumSumLines(static_cast<int>(xs.size()), xs.data(), p, lines))
    return makeError(
        llvm::formatv("axis {0} is out of range for {1}", p.axis, c.x().type.str()).str());
  for (int64_t l = 0; l < lines.outer * lines.inner; ++l) {
    if (c.x().isFloatData())
      lines.scan<double>(c.x().f.data(), c.y().f.data(), l);
    else
      lines.scan<int64_t>(c.x().i.data(), c.y().i.data(), l);
  }
  return Error::success();
}

Error evalTile(EvalCtx& c) {
  const Shape &xs = c.x().type.shape, &ys = c.y().type.shape;
  lwrt::TileIndex idx;
  if (!lwrt::makeTileIndex(static_cast<int>(xs.size()), xs.data(), ys.data(),
                           c.op.getInts("repeats"), idx))
    return makeError(
        llvm::formatv("cannot tile {0} to {1}", c.x().type.str(), c.y().type.str()).str());
  for (int64_t k = 0; k < c.y().size(); ++k) {
    if (c.y().isFloatData())
      c.y().f[k] = c.x().f[idx(k)];
    else
      c.y().i[k] = c.x().i[idx(k)];
  }
  return Error::success();
}

Error evalMod(EvalCtx& c) {
  const Shape& out = c.y().type.shape;
  auto ia = kernels::broadcastIndex(out, c.x(0).type.shape),
       ib = kernels::broadcastIndex(out, c.x(1).type.shape);
  bool cFmod = c.op.getInt("fmod") != 0;
  for (int64_t k = 0; k < c.y().size(); ++k) {
    if (c.y().isFloatData())
      c.y().f[k] = lwrt::modValue(c.x(0).f[ia(k)], c.x(1).f[ib(k)], cFmod);
    else
      c.y().i[k] = lwrt::modValue(c.x(0).i[ia(k)], c.x(1).i[ib(k)], cFmod);
  }
  return Error::success();
}

Error evalSin(EvalCtx& c) {
  for (int64_t k = 0; k < c.y().size(); ++k)
    c.y().f[k] = std::sin(c.x().f[k]);
  return Error::success();
}

Error evalCos(EvalCtx& c) {
  for (int64_t k = 0; k < c.y().size(); ++k)
    c.y().f[k] = std::cos(c.x().f[k]);
  return Error::success();
}

Error evalReduceL1(EvalCtx& c) { return normOf(c); }
Error evalReduceL2(EvalCtx& c) { return normOf(c); }
Error evalReduceSumSquare(EvalCtx& c) { return normOf(c); }

} // namespace lwcc
