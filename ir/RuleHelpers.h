//===- RuleHelpers.h - What the op rule files share -------------*- C++ -*-===//
//
// Internal to ir/: the helpers that the files of shape, gradient, parallel
// and cost rules (ShapeRules.cpp, TrainShapeRules.cpp, GradRules.cpp,
// CommOps.cpp and the op family files) write their checks with.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include "llvm/Support/FormatVariadic.h"

#include <utility>

namespace lwcc::rules {

/// llvm::Error::success(), short for the many checks that pass.
inline llvm::Error ok() { return llvm::Error::success(); }

/// An error whose message is llvm::formatv(fmt, args...).
template <typename... Args> llvm::Error fail(const char* fmt, Args&&... args) {
  return makeError(llvm::formatv(fmt, std::forward<Args>(args)...).str());
}

/// The type of operand `i` of `op`.
inline const TensorType& ty(const Op& op, unsigned i) { return op.operand(i)->type(); }

/// An error unless operand `i` of `op` has a float element type.
inline llvm::Error expectFloat(const Op& op, unsigned i) {
  if (!isFloat(ty(op, i).dtype))
    return fail("operand #{0} must have a float element type, got {1}", i, ty(op, i).str());
  return ok();
}

} // namespace lwcc::rules

/// In a rule returning llvm::Error: `Value* var` from the llvm::Expected
/// `expr` (a GradContext emit), or the enclosing function returns its error.
#define TRY_V(var, expr)                                                                           \
  auto var##OrErr = (expr);                                                                        \
  if (!var##OrErr)                                                                                 \
    return var##OrErr.takeError();                                                                 \
  Value* var = *var##OrErr
