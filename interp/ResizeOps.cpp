//===- ResizeOps.cpp - Reference kernels of resize and resize_grad --------===//
//
// The forward value and the adjoint of lwrt/resize_math.h, which the CPU
// and CUDA kernels call too, on the taps of ir/ResizePlan.h.
//
//===----------------------------------------------------------------------===//
#include "interp/Eval.h"
#include "ir/ResizePlan.h"

namespace lwcc {

using llvm::Error;

Error evalResize(EvalCtx& c) {
  auto plan = resizePlan(c.op, c.x().type.shape, c.y().type.shape);
  if (!plan)
    return c.op.emitError(llvm::toString(plan.takeError()));
  for (int64_t k = 0; k < c.y().size(); ++k)
    c.y().f[k] = lwrt::resizeValue(*plan, c.x().f.data(), k);
  return Error::success();
}

Error evalResizeGrad(EvalCtx& c) {
  auto plan = resizePlan(c.op, c.y().type.shape, c.x().type.shape);
  if (!plan)
    return c.op.emitError(llvm::toString(plan.takeError()));
  for (int64_t k = 0; k < c.y().size(); ++k)
    c.y().f[k] = lwrt::resizeGradValue(*plan, c.x().f.data(), k);
  return Error::success();
}

} // namespace lwcc
