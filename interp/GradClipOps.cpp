//===- GradClipOps.cpp - Reference kernels of square_sum and clip_coef ----===//
//
// The arithmetic is lwrt/grad_clip_math.h's, which the CPU and CUDA kernels
// call too.
//
//===----------------------------------------------------------------------===//
#include "interp/Eval.h"
#include "runtime/include/lwrt/grad_clip_math.h"

namespace lwcc {

using llvm::Error;

Error evalSquareSum(EvalCtx& c) {
  double sum = 0;
  for (const Tensor* x : c.in)
    for (double v : x->f)
      sum += lwrt::squareTerm(v);
  c.y().f[0] = sum; // a float32 result is rounded once, after the kernel (as the runtime's)
  return Error::success();
}

Error evalClipCoef(EvalCtx& c) {
  const double maxNorm = c.op.getFloat("max_norm");
  if (c.x().type.dtype == DType::F32 && !c.float64) { // the runtime's float32 arithmetic
    auto r = lwrt::clipCoefficient(static_cast<float>(c.x().f[0]), maxNorm);
    c.y(0).f[0] = r.norm;
    c.y(1).f[0] = r.coef;
  } else {
    auto r = lwrt::clipCoefficient(c.x().f[0], maxNorm);
    c.y(0).f[0] = r.norm;
    c.y(1).f[0] = r.coef;
  }
  return Error::success();
}

} // namespace lwcc
