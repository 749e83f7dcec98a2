//===- MixedPrecision.cpp - Convolutions and matrix products in 16 bits ---===//
//
// `mixed-precision=dtype=bf16` (or fp16) runs each float32 conv2d, gemm
// and matmul of the model in bf16 (fp16), the way PyTorch's autocast does
// for these ops, and leaves everything else in float32 (batch norm and its
// statistics, softmax, the loss, the params and their updates):
//
//   %x.bf16 = cast(%x) {to = bf16}        one cast per use: an activation
//   %w.bf16 = cast(%w) {to = bf16}        that feeds several convolutions
//   %y.bf16 = conv2d(%x.bf16, %w.bf16)    gets float32 gradients from each,
//   %y      = cast(%y.bf16) {to = f32}    summed in float32
//   %y.bias = add(%y, reshape(%b))        a bias in float32, after the cast
//
// A bf16 op's kernels read bf16 operands, accumulate in float32 and round
// their result to bf16 once, so the values a bf16 trainer computes are
// those of float32 arithmetic on bf16-rounded inputs. Autodiff then
// differentiates the casts: the gradient of each bf16 op's result reaches
// it as bf16 (conv2d_grad_input, conv2d_grad_filter and the transposed
// gemms run in bf16 too) and each param's gradient is cast back to float32
// before the update touches the float32 master weights.
//
// fp16's range ends at 65504: its gradients need a loss scale
// (passes/LossScale.cpp), which lwcc adds after the optimizer.
//
// Run before autodiff and before any parallelization (each cast becomes an
// elementwise op like the others).
//
//===----------------------------------------------------------------------===//
#include "passes/Pass.h"
#include "passes/PassOptions.h"

namespace lwcc {

namespace {

class MixedPrecisionPass : public Pass {
public:
  explicit MixedPrecisionPass(DType low) : low_(low) {}
  std::string_view name() const override { return "mixed-precision"; }

  llvm::Error run(Graph& g, PassContext&) override {
    std::vector<Op*> work;
    for (auto& op : g.ops())
      if ((op->kind() == OpKind::Conv2d || op->kind() == OpKind::Gemm ||
           op->kind() == OpKind::MatMul) &&
          op->result()->type().dtype == DType::F32)
        work.push_back(op.get());
    for (Op* op : work)
      if (llvm::Error e = rewrite(g, op))
        return e;
    return llvm::Error::success();
  }

private:
  DType low_;

  llvm::Error rewrite(Graph& g, Op* op) {
    Builder b(g);
    b.setInsertionPointBefore(op);
    b.setLoc(op->loc());
    const std::string low(dtypeName(low_));
    std::vector<Value*> operands;
    for (unsigned i = 0; i < 2; ++i) {
      auto cast = b.createInferred(OpKind::Cast, {op->operand(i)}, {{"to", Attribute(low)}});
      if (!cast)
        return cast.takeError();
      operands.push_back((*cast)->result());
    }
    auto lowOp = b.createInferred(op->kind(), operands, op->attrs());
    if (!lowOp)
      return lowOp.takeError();
    auto back = b.createInferred(OpKind::Cast, {(*lowOp)->result()},
                                 {{"to", Attribute(std::string("f32"))}});
    if (!back)
      return back.takeError();
    Value* y = (*back)->result();
    if (op->numOperands() == 3) {
      // The bias in float32: conv2d's [C] over [N, C, H, W], gemm's beta * C
      // broadcast over [M, N].
      Value* bias = op->operand(2);
      if (op->kind() == OpKind::Conv2d) {
        auto shaped = b.createInferred(
            OpKind::Reshape, {bias},
            {{"shape", Attribute(std::vector<int64_t>{1, bias->type().shape[0], 1, 1})}});
        if (!shaped)
          return shaped.takeError();
        bias = (*shaped)->result();
      } else if (double beta = op->getFloat("beta"); beta != 1.0) {
        Op* c = b.create(OpKind::Constant, {}, {TensorType(DType::F32, {})});
        c->setAttr("value", Attribute(std::vector<double>{beta}));
        auto scaled = b.createInferred(OpKind::Mul, {bias, c->result()});
        if (!scaled)
          return scaled.takeError();
        bias = (*scaled)->result();
      }
      auto sum = b.createInferred(OpKind::Add, {y, bias});
      if (!sum)
        return sum.takeError();
      if ((*sum)->result()->type() != op->result()->type())
        return op->emitError("mixed-precision: the bias does not broadcast to the result");
      y = (*sum)->result();
    }
    std::string name = op->result()->name();
    op->result()->replaceAllUsesWith(y);
    g.eraseOp(op);
    y->setName(name);
    return llvm::Error::success();
  }
};

} // namespace

llvm::Expected<std::unique_ptr<Pass>> createMixedPrecisionPass(std::string_view options) {
  auto opts = PassOptions::parse("mixed-precision", options, "dtype", {"dtype"});
  if (!opts)
    return opts.takeError();
  std::string dtype = opts->getString("dtype", "bf16");
  if (dtype != "bf16" && dtype != "fp16")
    return makeError("mixed-precision: unknown dtype '" + dtype + "' (expected bf16 or fp16)");
  return std::make_unique<MixedPrecisionPass>(dtype == "bf16" ? DType::BF16 : DType::F16);
}

} // namespace lwcc
