//===- FusedOps.h - The body of a fused region ------------------*- C++ -*-===//
//
// A `fused` op (Ops.def) computes several elementwise ops of the IR in one
// kernel. Its `body` attribute lists them, one statement each, separated by
// "; ":
//
//   %t0 = cast(%0) : f32; %t1 = add(%t0, %1) : f32; %t2 = relu(%t1) : f32
//
// %N is the fused op's operand N, %tK the value of statement K; a statement
// may carry its op's numeric attributes ({alpha = 0.1}); a cast's `to` is
// its type. Every statement's value has the fused op's `shape` (the
// iteration space); operands broadcast to it by numpy's rules. Result i is
// the value of statement results[i].
//
// The body is read here into statements (for codegen's kernels and the
// cost rule) or into a graph of ordinary ops (for the verifier and the
// interpreter, which so compute a region exactly as its ops unfused).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include "llvm/Support/Error.h"

#include <memory>
#include <string>
#include <vector>

namespace lwcc {

/// One statement of a fused body.
struct FusedStatement {
  OpKind kind;
  /// Its operands: >= 0 the value of that statement, < 0 the fused op's
  /// operand -(a + 1).
  std::vector<int> args;
  DType dtype;
  std::vector<NamedAttr> attrs; ///< the op's attributes given (numbers; no cast `to`)
};

/// The statements of `body`, whose region has `numOperands` operands; an
/// error names what cannot be read.
llvm::Expected<std::vector<FusedStatement>> parseFusedBody(llvm::StringRef body,
                                                           unsigned numOperands);
/// The text of `statements` (parseFusedBody reads it back).
std::string printFusedBody(const std::vector<FusedStatement>& statements);

/// The body of `fused` as a graph of ordinary ops: its inputs typed as the
/// fused op's operands, its outputs the fused op's results, in order.
llvm::Expected<std::unique_ptr<Graph>> fusedBodyGraph(const Op& fused);

/// The text of one statement's op `kind` (an op of `fused` outside a fused
/// region): its attributes as a body writes them (numbers only).
std::vector<NamedAttr> fusedAttrsOf(const Op& op);

} // namespace lwcc
