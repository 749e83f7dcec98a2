//===- ResizePlan.h - The taps of a resize op -------------------*- C++ -*-===//
#pragma once

#include "ir/IR.h"
#include "runtime/include/lwrt/resize_math.h"

namespace lwcc {

/// The plan (lwrt/resize_math.h) of a resize or resize_grad op from `in` to
/// `out`, read from its attributes, or an error.
llvm::Expected<lwrt::ResizePlan> resizePlan(const Op& op, const Shape& in, const Shape& out);

} // namespace lwcc
