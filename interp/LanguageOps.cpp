//===- LanguageOps.cpp - Reference kernels of ir/LanguageOps.cpp's ops ----===//
//
// gather_elements, scatter_elements, nll_loss and its gradient, walking
// their elements with lwrt/language_math.h, as the CPU and CUDA kernels do.
// An index or a target out of range is an error naming the op.
//
//===----------------------------------------------------------------------===//
#include "interp/Eval.h"
#include "runtime/include/lwrt/language_math.h"

#include "llvm/Support/FormatVariadic.h"

#include <iterator>

namespace lwcc {

using llvm::Error;

namespace {

/// The lines of operand #1 (indices) into operand #0 (data) along the op's axis.
llvm::Expected<lwrt::ElementsLines> linesOf(EvalCtx& c) {
  const Shape &ds = c.x(0).type.shape, &is = c.x(1).type.shape;
  int64_t rank = static_cast<int64_t>(ds.size()), axis = c.op.getInt("axis");
  if (axis < 0)
    axis += rank;
  lwrt::ElementsLines w;
  if (is.size() != ds.size() ||
      !lwrt::makeElementsLines(static_cast<int>(rank), ds.data(), is.data(), axis, w))
    return c.op.emitError(
        llvm::formatv("indices {0} do not fit data {1}", c.x(1).type.str(), c.x(0).type.str())
            .str());
  return w;
}

Error indexError(EvalCtx& c, int64_t v, int64_t len) {
  return c.op.emitError(llvm::formatv("index {0} is out of range [-{1}, {1})", v, len).str());
}

lwrt::NllLossParams nllParams(const Op& op) {
  lwrt::NllLossParams p;
  for (size_t k = 0; k < std::size(lwrt::kNllReductionNames); ++k)
    if (op.getString("reduction") == lwrt::kNllReductionNames[k])
      p.reduction = static_cast<lwrt::NllReduction>(k);
  p.ignoreIndex = op.getInt("ignore_index");
  return p;
}

/// Every target a class or ignored.
Error checkTargets(EvalCtx& c, const lwrt::NllWalk& w, const Tensor& target) {
  for (int64_t t : target.i)
    if (!w.ignored(t) && !w.valid(t))
      return c.op.emitError(
          llvm::formatv("target {0} is out of range [0, {1})", t, w.classes).str());
  return Error::success();
}

/// The total weight of the targets (the divisor of a mean).
double totalWeight(const lwrt::NllWalk& w, const Tensor& target, const Tensor* weight) {
  double sum = 0;
  for (int64_t j = 0; j < w.targets; ++j)
    sum += w.weightOf(target.i[j], weight ? weight->f.data() : nullptr);
  return sum;
}

} // namespace

namespace {

/// fn(at, pos) for each element of the indices (operand #1): `at` its flat
/// offset there (and in updates), `pos` the flat offset of the data element
/// it names; an index out of range is an error.
template <typename Fn> Error forEachIndexed(EvalCtx& c, Fn fn) {
  auto w = linesOf(c);
  if (!w)
    return w.takeError();
  for (int64_t l = 0; l < w->lines; ++l) {
    int64_t idx, data;
    w->lineStart(l, idx, data);
    for (int64_t j = 0; j < w->perLine; ++j) {
      int64_t at = idx + j * w->idxStride[w->axis], v = c.x(1).i[at];
      int64_t pos = w->at(data, v);
      if (pos < 0)
        return indexError(c, v, w->axisLen);
      fn(at, pos);
    }
  }
  return Error::success();
}

} // namespace

Error evalGatherElements(EvalCtx& c) {
  return forEachIndexed(c, [&](int64_t at, int64_t from) {
    if (c.y().isFloatData())
      c.y().f[at] = c.x(0).f[from];
    else
      c.y().i[at] = c.x(0).i[from];
  });
}

Error evalScatterElements(EvalCtx& c) {
  bool add = c.op.getString("reduction") == "add";
  c.y() = c.x(0);
  return forEachIndexed(c, [&](int64_t at, int64_t to) {
    if (c.y().isFloatData())
      c.y().f[to] = add ? c.y().f[to] + c.x(2).f[at] : c.x(2).f[at];
    else
      c.y().i[to] = add ? c.y().i[to] + c.x(2).i[at] : c.x(2).i[at];
  });
}

Error evalNllLoss(EvalCtx& c) {
  const Tensor &in = c.x(0), &target = c.x(1);
  const Tensor* weight = c.in.size() > 2 ? &c.x(2) : nullptr;
  lwrt::NllLossParams p = nllParams(c.op);
  lwrt::NllWalk w =
      lwrt::makeNllWalk(static_cast<int>(in.type.rank()), in.type.shape.data(), p.ignoreIndex);
  if (Error e = checkTargets(c, w, target))
    return e;
  const double* wts = weight ? weight->f.data() : nullptr;
  double sum = 0;
  for (int64_t j = 0; j < w.targets; ++j) {
    double term = w.term(in.f.data(), j, target.i[j], wts);
    if (p.reduction == lwrt::NllReduction::None)
      c.y().f[j] = term;
    sum += term;
  }
  if (p.reduction == lwrt::NllReduction::Sum)
    c.y().f[0] = sum;
  else if (p.reduction == lwrt::NllReduction::Mean)
    c.y().f[0] = sum / totalWeight(w, target, weight);
  return Error::success();
}

Error evalNllLossGrad(EvalCtx& c) {
  const Tensor &dloss = c.x(0), &target = c.x(1);
  const Tensor* weight = c.in.size() > 2 ? &c.x(2) : nullptr;
  lwrt::NllLossParams p = nllParams(c.op);
  const Shape& input = c.y().type.shape;
  lwrt::NllWalk w = lwrt::makeNllWalk(static_cast<int>(input.size()), input.data(), p.ignoreIndex);
  if (Error e = checkTargets(c, w, target))
    return e;
  const double* wts = weight ? weight->f.data() : nullptr;
  double divisor = p.reduction == lwrt::NllReduction::Mean ? totalWeight(w, target, weight) : 1.0;
  std::fill(c.y().f.begin(), c.y().f.end(), 0.0);
  for (int64_t j = 0; j < w.targets; ++j) {
    int64_t t = target.i[j];
    if (w.ignored(t))
      continue;
    double d = p.reduction == lwrt::NllReduction::None ? dloss.f[j] : dloss.f[0] / divisor;
    c.y().f[w.inputAt(j, t)] = -w.weightOf(t, wts) * d;
  }
  return Error::success();
}

} // namespace lwcc
