//===- Common.h - Helpers shared by the op importers -----------*- C++ -*-===//
#pragma once

#include "frontend/ImportContext.h"

#include "llvm/Support/FormatVariadic.h"

namespace lwcc {

/// Returns early from an importer with the error of `expr`, or binds its value.
#define LWCC_TRY(var, expr)                                                                        \
  auto var##OrErr = (expr);                                                                        \
  if (!var##OrErr)                                                                                 \
    return var##OrErr.takeError();                                                                 \
  auto var = std::move(*var##OrErr)

#define LWCC_CHECK(expr)                                                                           \
  if (llvm::Error e = (expr))                                                                      \
  return e

inline NamedAttr attr(const char* name, Attribute v) { return NamedAttr{name, std::move(v)}; }

/// Reshape `v` to `shape` (no op when it already has it).
inline llvm::Expected<Value*> reshapeTo(ImportContext& ctx, Value* v, const Shape& shape) {
  if (v->type().shape == shape)
    return v;
  return ctx.emit1(OpKind::Reshape, {v}, {attr("shape", Attribute(shape))});
}

/// Normalizes `axis` for `rank` or fails naming the node.
inline llvm::Expected<int64_t> normalizeAxis(ImportContext& ctx, int64_t axis, int64_t rank,
                                             bool inclusive = false) {
  int64_t hi = inclusive ? rank : rank - 1;
  if (axis < -rank || axis > hi)
    return ctx.error(llvm::formatv("axis {0} is out of range for rank {1}", axis, rank).str());
  return axis < 0 ? axis + rank : axis;
}

} // namespace lwcc
