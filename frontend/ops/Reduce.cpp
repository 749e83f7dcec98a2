//===- Reduce.cpp - ReduceMean, ReduceSum and the norm reductions ---------===//
#include "frontend/ops/Common.h"

namespace lwcc {

namespace {

/// Axes are an attribute until `inputSince`, then an optional input; an
/// absent or empty list reduces everything unless noop_with_empty_axes.
llvm::Error importReduce(ImportContext& ctx, OpKind kind, int64_t inputSince) {
  // 'axes' is an attribute before `inputSince`, an input from then on.
  LWCC_CHECK(ctx.opset() < inputSince ? ctx.checkAttrs({"axes", "keepdims"})
                                      : ctx.checkAttrs({"keepdims", "noop_with_empty_axes"}));
  LWCC_TRY(x, ctx.requiredInput(0, "data"));
  LWCC_TRY(keep, ctx.attrInt("keepdims", 1));
  LWCC_TRY(noop, ctx.attrInt("noop_with_empty_axes", 0));
  std::vector<int64_t> axes;
  if (ctx.opset() < inputSince) {
    LWCC_TRY(a, ctx.attrInts("axes", std::vector<int64_t>{}));
    axes = a;
  } else if (ctx.input(1)) {
    LWCC_TRY(a, ctx.constInts(1, "axes"));
    axes = a;
  }
  if (axes.empty() && noop) {
    ctx.setOutput(0, x);
    return llvm::Error::success();
  }
  std::vector<NamedAttr> attrs{attr("keepdims", keep)};
  if (!axes.empty()) {
    for (int64_t& a : axes) {
      LWCC_TRY(n, normalizeAxis(ctx, a, x->type().rank()));
      a = n;
    }
    attrs.push_back(attr("axes", axes));
  }
  LWCC_TRY(y, ctx.emit1(kind, {x}, attrs));
  ctx.setOutput(0, y);
  return llvm::Error::success();
}

llvm::Error importReduceMean(ImportContext& ctx) {
  return importReduce(ctx, OpKind::ReduceMean, 18);
}
llvm::Error importReduceSum(ImportContext& ctx) { return importReduce(ctx, OpKind::ReduceSum, 13); }
llvm::Error importReduceL1(ImportContext& ctx) { return importReduce(ctx, OpKind::ReduceL1, 18); }
llvm::Error importReduceL2(ImportContext& ctx) { return importReduce(ctx, OpKind::ReduceL2, 18); }
llvm::Error importReduceSumSquare(ImportContext& ctx) {
  return importReduce(ctx, OpKind::ReduceSumSquare, 18);
}

} // namespace

const std::vector<ImporterEntry>& reduceImporters() {
  static const std::vector<ImporterEntry> entries = {
      {"ReduceMean", 1, importReduceMean},
      {"ReduceSum", 1, importReduceSum},
      {"ReduceL1", 1, importReduceL1},
      {"ReduceL2", 1, importReduceL2},
      {"ReduceSumSquare", 1, importReduceSumSquare},
  };
  return entries;
}

} // namespace lwcc
