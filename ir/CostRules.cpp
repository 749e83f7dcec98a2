//===- CostRules.cpp - FLOPs of one run of an op --------------------------===//
//
// The cost rules of ir/OpTraits.def (`cost`). A rule returns the FLOPs of
// one run of the op on the shapes it has, counting a multiply-add as two.
// Ops without a rule count one FLOP per result element (CostModel::flops),
// which is right for unary and binary elementwise ops; their time is then
// bound by the bytes they move, not by the FLOPs.
//
//===----------------------------------------------------------------------===//
#include "ir/IR.h"

namespace lwcc::cost {

namespace {

double numel(const Value* v) { return static_cast<double>(v->type().numElements()); }

/// Product of the window (kernel) dims.
double window(const Op& op) {
  double k = 1;
  for (int64_t d : op.getInts("kernel"))
    k *= static_cast<double>(d);
  return k;
}

} // namespace

/// conv2d (x [N,C,H,W], w [K,C/g,R,S], b?) -> y [N,K,P,Q]: each output
/// element is a dot product of length C/g*R*S, plus its bias.
double conv2d(const Op& op, const CostContext&) {
  const Shape& w = op.operand(1)->type().shape;
  double dot = static_cast<double>(w[1] * w[2] * w[3]);
  return numel(op.result()) * (2 * dot + (op.numOperands() > 2 ? 1 : 0));
}

/// conv2d_grad_input (dy [N,K,P,Q], w) -> dx: the transposed convolution,
/// as many multiply-adds as the forward one.
double conv2dGradInput(const Op& op, const CostContext&) {
  const Shape& w = op.operand(1)->type().shape;
  return 2 * numel(op.operand(0)) * static_cast<double>(w[1] * w[2] * w[3]);
}

/// conv2d_grad_filter (x, dy) -> dw [K,C/g,R,S]: each dw element sums
/// N*P*Q products.
double conv2dGradFilter(const Op& op, const CostContext&) {
  const Shape& dy = op.operand(1)->type().shape;
  return 2 * numel(op.result()) * static_cast<double>(dy[0] * dy[2] * dy[3]);
}

/// gemm (A, B, C?) -> Y [M,N] and matmul: 2*M*N*K, plus the bias add.
double gemm(const Op& op, const CostContext&) {
  const Shape& a = op.operand(0)->type().shape;
  bool ta = op.kind() == OpKind::Gemm && op.getInt("transA");
  int64_t k = a.empty() ? 1 : ta && a.size() >= 2 ? a[a.size() - 2] : a.back();
  return numel(op.result()) * (2 * static_cast<double>(k) + (op.numOperands() > 2 ? 1 : 0));
}

/// Pools: one comparison or add per window element of each output.
double pool(const Op& op, const CostContext&) { return numel(op.result()) * window(op); }

/// Pool gradients: one per window element of each output gradient.
double poolGrad(const Op& op, const CostContext&) {
  const Value* dy = op.kind() == OpKind::MaxPool2dGrad ? op.operand(1) : op.operand(0);
  return numel(dy) * window(op);
}

/// global_avg_pool: one add per input element.
double globalAvgPool(const Op& op, const CostContext&) { return numel(op.operand(0)); }

/// lrn and its gradient: a window of `size` channels per element, a power.
double lrn(const Op& op, const CostContext&) {
  return numel(op.result()) * (2 * static_cast<double>(op.getInt("size")) + 4);
}

/// Normalizations: statistics, then scale and shift (about 8 per element
/// forward, 12 backward).
double batchNorm(const Op& op, const CostContext&) {
  bool grad = op.kind() == OpKind::BatchNormGrad || op.kind() == OpKind::LayerNormGrad;
  return numel(op.operand(0)) * (grad ? 12 : 8);
}

/// Softmax-like ops: max, exp, sum, divide (and a log for the losses).
double softmax(const Op& op, const CostContext&) { return numel(op.operand(0)) * 5; }

/// Optimizer updates: about 5 (SGD with momentum and decay) or 12 (Adam)
/// FLOPs per weight.
double sgdUpdate(const Op& op, const CostContext&) { return numel(op.operand(0)) * 5; }
double adamUpdate(const Op& op, const CostContext&) { return numel(op.operand(0)) * 12; }

/// Reductions: one add per input element.
double reduce(const Op& op, const CostContext&) { return numel(op.operand(0)); }

/// A test of every operand element (all_finite).
double operandElements(const Op& op, const CostContext&) {
  double n = 0;
  for (const Value* v : op.operands())
    n += numel(v);
  return n;
}

/// Views and data movement: no arithmetic.
double none(const Op&, const CostContext&) { return 0; }

} // namespace lwcc::cost
