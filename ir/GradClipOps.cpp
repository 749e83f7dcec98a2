//===- GradClipOps.cpp - square_sum and clip_coef -------------------------===//
//
// Shape rules of the ops that clip gradients by their global L2 norm
// (passes/ClipGradNorm.cpp builds them); the interpreter runs them in
// interp/GradClipOps.cpp.
//
//===----------------------------------------------------------------------===//
#include "ir/IR.h"

#include "llvm/Support/FormatVariadic.h"

namespace lwcc {

using llvm::Error;

namespace {

template <typename... Args> Error fail(const char* fmt, Args&&... args) {
  return makeError(llvm::formatv(fmt, std::forward<Args>(args)...).str());
}

bool isF32OrF64(DType t) { return t == DType::F32 || t == DType::F64; }

} // namespace

namespace shape {

Rule squareSum(const Op& op) {
  const DType t = op.operand(0)->type().dtype;
  for (unsigned i = 0; i < op.numOperands(); ++i)
    if (op.operand(i)->type().dtype != t || !isF32OrF64(t))
      return fail("operand #{0} must be f32 or f64, the type of every operand, got {1}", i,
                  op.operand(i)->type().str());
  return std::vector<TensorType>{TensorType(t, {})};
}

Rule clipCoef(const Op& op) {
  const TensorType& s = op.operand(0)->type();
  if (s.rank() != 0 || !isF32OrF64(s.dtype))
    return fail("operand #0 must be an f32 or f64 scalar (a sum of squares), got {0}", s.str());
  if (!(op.getFloat("max_norm") > 0))
    return fail("attribute 'max_norm' must be > 0, got {0}", op.getFloat("max_norm"));
  return std::vector<TensorType>{TensorType(s.dtype, {}), TensorType(s.dtype, {})};
}

} // namespace shape

} // namespace lwcc
