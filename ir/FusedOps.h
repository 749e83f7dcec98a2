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
// A reduction statement sums the value of an earlier statement (or an
// operand of the region's shape) over some dims of the iteration space, as
// reduce_sum does:
//
//   %t0 = relu_grad(%0, %1) : f32; %t1 = reduce_sum(%t0) {axes = [0, 2, 3], keepdims = 0} : f32
//
// Its value has the reduced shape; it is read by no later statement (it is
// a result), every reduction of a body reduces the same dims, and its type
// is f32 or f64. The region still iterates over `shape`: its elementwise
// results are written element by element, each reduction result once per
// element of the reduced shape.
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
#include <set>
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
  std::vector<NamedAttr> attrs; ///< the op's attributes given (numbers, int lists; no cast `to`)
};

/// Whether `st` is a reduction statement (reduce_sum).
inline bool isReduction(const FusedStatement& st) { return st.kind == OpKind::ReduceSum; }
/// The shape of statement `st`'s value in the iteration space `space`.
Shape statementShape(const FusedStatement& st, const Shape& space);
/// The dims of `space` (by index) that the reductions of `statements`
/// reduce; empty where there are none. An error where two reductions
/// reduce different dims, or a reduction is read by a statement.
llvm::Expected<std::vector<bool>> reducedDims(const std::vector<FusedStatement>& statements,
                                              const Shape& space);

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

/// The multi-tensor calls codegen writes for runs of ops (sgdUpdateGroup,
/// adamUpdateGroup, castGroup): whether `op` may be in one (an optimizer
/// update, or a cast of float32 to bf16 or fp16), and whether `next` joins
/// the call of `first` (one kind; one lr, step, finite flag and element type, each
/// update's gradient of that type or, beside float32, bf16 or fp16; casts
/// to one type). --emit=plan's kernel counts read the same rule.
bool inMultiTensorCall(const Op& op);
bool sameMultiTensorCall(const Op& first, const Op& next);
/// The activation a library call takes as its epilogue, so that codegen
/// writes the two as one runtime call: the relu (or, on the CPU, clip)
/// that alone reads the first result of a float32 or float64 conv2d (on
/// the CPU also add), or of a batch_norm or batch_norm_train (on CUDA of
/// bf16 or fp16, which lwcc's own kernels run; on the CPU of any float
/// type), its result apart from the bytes of the call's operands (where
/// the graph is memory-planned: the call writes it while it reads them) or,
/// but for a convolution, exactly on one; null where there is none. `cuda`: cuDNN's fused plans and the
/// batch norm kernels, a relu only. `fuse` false (--no-fuse): only the
/// float32 and float64 pairs.
/// Codegen (PhaseWriter::planFusions) also needs the two in one function
/// with nothing between them touching the activation's bytes, and on CUDA
/// the relu run in place; --emit=plan's kernel counts read the same rule.
const Op* epilogueOf(const Op& producer, bool cuda, bool fuse = true);
/// On CUDA the epilogue of a bf16 or fp16 batch norm may also be a fused
/// region `add(%0, %1); relu` of the batch norm's result and another value
/// of its type and shape (a residual block's end): the other value (the
/// residual the batch norm's kernels add before the relu), or null where
/// `fused` is no such region of `v`.
const Value* epilogueResidual(const Op& fused, const Value* v);
/// The relu_grad whose result only `consumer`, a batch_norm_grad, reads
/// (as its dy), so that codegen writes the two as one runtime call
/// (batchNormGradAct: the batch norm's backward reads the relu's output
/// and the relu's dy, and masks dy as it reads it): the backward of batch
/// norm's apply fused with the activation's gradient. On one device and
/// stream, all of one float type, and (where the graph is memory-planned)
/// no result of the batch norm's backward on the bytes of relu_grad's
/// operands except dx exactly on one of them; null where there is none.
/// Codegen and --emit=plan's counts also need relu_grad written right
/// before its batch_norm_grad, in one function.
const Op* gradPrologueOf(const Op& consumer);
/// Gradient clipping's product that an optimizer update takes in: the mul
/// of a float32 or float64 gradient by a scalar of its type whose result
/// only `update` (sgd_update, adam_update) reads, as its gradient, so that
/// codegen passes the scalar in the update's parameters
/// (SgdParams::grad_scale: the update reads T(g * scale), mul's product)
/// and writes no mul. The gradient is a graph output (its value holds the
/// whole step), the mul and the update on one device and stream. Null
/// where there is none; --emit=plan's count reads the same rule.
const Op* gradScaleOf(const Op& update);
/// The views (reshape, flatten, ...: ops whose kernel is a copy) of a
/// param that codegen makes views of the param's own bytes, so that no copy
/// runs (a bias reshaped for its broadcast): in a step of one device and
/// one stream (no events), a view whose every reader comes before the first
/// op that writes the param (its update written over it, its assign), and
/// that is no graph output. --emit=plan's count reads the same rule.
std::set<const Op*> paramViews(const Graph& g);
/// Tensors per launch of such a call in the CUDA runtime (its chunks travel
/// in the launch's parameters: runtime/cuda's kPiecesPerLaunch).
constexpr int64_t kMultiTensorPerLaunch = 24;

} // namespace lwcc
