//===- MixedPrecision.cpp - Convolutions and matrix products in 16 bits ---===//
//
// `mixed-precision=dtype=bf16` (or fp16) runs each float32 conv2d, gemm
// and matmul of the model in bf16 (fp16), the way PyTorch's autocast does
// for these ops; batch norm and its statistics, softmax, the loss, the
// params and their updates stay float32:
//
//   %x.bf16 = cast(%x) {to = bf16}        one cast per use (an activation
//   %w.bf16 = cast(%w) {to = bf16}        that stays float32 and feeds
//   %y.bf16 = conv2d(%x.bf16, %w.bf16)    several convolutions sums their
//   %y      = cast(%y.bf16) {to = f32}    gradients in float32)
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
// Activations between layers stay in 16 bits, as under autocast: the cast
// of a convolution's input moves up through relu, max_pool2d, flatten,
// reshape and concat, through a training batch norm (x and y in 16 bits;
// scale, bias and the statistics float32; computed in float32 from the
// widened x and rounded once), through an add of two values that are
// 16-bit already (two convolutions' results, a residual sum), through an
// average pool of a value that is 16-bit already (summed and divided in
// float32, rounded once: inception's pool branches) and through
// a dropout of a 16-bit value (train-mode's mul by a dropout_mask, the mask
// made in the 16-bit type; only where 1/(1-ratio) is exactly a 16-bit
// value, as for ratio 0.5), as long as every reader of the float32 value
// wants it in 16 bits (a cast, or another op that moves). The ops that move are chosen together, as
// the largest such set, so a residual chain (conv, batch norm, add, relu, the next block's add)
// turns 16-bit as a whole. A bias (a float32 param) is still added in float32, and the sum rounded
// once.
//
// Rounding commutes with relu, the max pool, flatten, reshape and concat
// (it is monotone, and they only select or move values), and a batch
// norm, an average pool or an add of widened 16-bit values rounds its
// float32 result once
// either way, so where those ops move the forward computes the same bits
// as with float32 activations; a residual add of a batch norm's result now
// adds the 16-bit rounded value (as autocast does). Gradients are 16-bit
// where the values are (a pool's overlapping windows and a fan-out's
// gradients summed in float32 and rounded once per op). `activations=f32`
// keeps every activation float32: each 16-bit result cast back at once.
//
//   %a      = add(%y, %bias)                 float32
//   %a.bf16 = cast(%a) {to = bf16}
//   %r      = relu(%a.bf16)        : bf16    was relu(%a), then a cast
//   %p      = max_pool2d(%r)       : bf16    before the next conv2d
//
// Run before autodiff and before any parallelization (each cast becomes an
// elementwise op like the others).
//
//===----------------------------------------------------------------------===//
#include "passes/Pass.h"
#include "passes/PassOptions.h"
#include "runtime/include/lwrt/bf16.h"
#include "runtime/include/lwrt/f16.h"

#include <functional>
#include <set>
#include <unordered_map>

namespace lwcc {

namespace {

class MixedPrecisionPass : public Pass {
public:
  MixedPrecisionPass(DType low, bool lowActivations) : low_(low), lowActivations_(lowActivations) {}
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
    if (lowActivations_)
      return hoistCasts(g);
    return llvm::Error::success();
  }

private:
  DType low_;
  bool lowActivations_;

  /// cast(v) {to = t}, made by `b`.
  static llvm::Expected<Value*> castTo(Builder& b, Value* v, DType t) {
    auto cast = b.createInferred(OpKind::Cast, {v}, {{"to", Attribute(std::string(dtypeName(t)))}});
    if (!cast)
      return cast.takeError();
    return (*cast)->result();
  }

  bool isCastTo(const Op* op, DType t) const {
    return op && op->kind() == OpKind::Cast && op->result()->type().dtype == t;
  }

  /// The 16-bit value `v` widens, when `v` is cast(w) {to = f32} of a
  /// value `w` of the low type; null otherwise.
  Value* widenedFrom(Value* v) const {
    Op* def = v->definingOp();
    if (isCastTo(def, DType::F32) && def->operand(0)->type().dtype == low_)
      return def->operand(0);
    return nullptr;
  }

  /// For a dropout (train-mode's mul by a dropout_mask), the mask's operand
  /// index; -1 otherwise, and where the mask's nonzero value 1/(1-ratio)
  /// is not exactly a value of the low type (then the product stays
  /// float32: a rounded mask would change it).
  int maskOperand(const Op* op) const {
    if (op->kind() != OpKind::Mul)
      return -1;
    for (unsigned i = 0; i < 2; ++i) {
      const Op* def = op->operand(i)->definingOp();
      if (!def || def->kind() != OpKind::DropoutMask || def->result()->type().dtype != DType::F32 ||
          op->operand(1 - i)->type() != op->result()->type())
        continue;
      const float scale = static_cast<float>(1.0 / (1.0 - def->getFloat("ratio")));
      const float low = low_ == DType::BF16 ? lwrt::roundToBf16(scale) : lwrt::roundToF16(scale);
      return low == scale ? static_cast<int>(i) : -1;
    }
    return -1;
  }

  /// Whether `op`'s float32 activation may be kept in the low type.
  bool activationOp(const Op* op) const {
    switch (op->kind()) {
    case OpKind::Relu:
    case OpKind::MaxPool2d:
    case OpKind::AvgPool2d:
    case OpKind::Flatten:
    case OpKind::Reshape:
    case OpKind::Concat:
    case OpKind::Add:
    case OpKind::BatchNormTrain:
      return true;
    case OpKind::Mul:
      return maskOperand(op) >= 0;
    default:
      return false;
    }
  }

  /// Whether operand `i` of `op` becomes low: not a batch norm's scale and
  /// bias (float32), not a dropout's mask (made anew in the low type).
  bool lowOperand(const Op* op, unsigned i) const {
    if (isNormalization(op))
      return i == 0;
    if (op->kind() == OpKind::Mul)
      return static_cast<int>(i) != maskOperand(op);
    return true;
  }

  /// The ops whose low operands must be low already (rounding them first
  /// would change the result): adds, average pooling, batch norms,
  /// dropouts.
  static bool readsLowOnly(const Op* op) {
    return op->kind() == OpKind::Add || op->kind() == OpKind::Mul ||
           op->kind() == OpKind::AvgPool2d || isNormalization(op);
  }

  /// The largest set of activation ops that can all run in the low type at
  /// once: an op stays in the set while every use of its result is a cast
  /// to the low type or an op of the set, and its result is not returned;
  /// an add (a batch norm's x, a dropout's input) only reads values that
  /// are low already (widened low values, or results of the set; a reshape
  /// or flatten only of such a value, not of a float32 param such as a
  /// bias), so no float32 param or statistic is rounded to be added.
  std::vector<Op*> lowActivationOps(const Graph& g) const {
    std::set<const Op*> set;
    for (const auto& op : g.ops())
      if (activationOp(op.get()) && op->numResults() > 0 &&
          op->result(0)->type().dtype == DType::F32 && op->result(0)->hasUses() &&
          !isGraphOutput(g, op->result(0))) {
        bool f32 = true;
        for (unsigned i = 0; i < op->numOperands(); ++i)
          f32 &= op->operand(i)->type().dtype == DType::F32;
        if (f32)
          set.insert(op.get());
      }
    auto inSet = [&](const Value* v) {
      const Op* def = v->definingOp();
      return def && set.count(def) && v == def->result(0);
    };
    std::function<bool(Value*)> lowAlready = [&](Value* v) {
      if (widenedFrom(v))
        return true;
      if (!inSet(v))
        return false;
      const Op* def = v->definingOp();
      if (def->kind() == OpKind::Reshape || def->kind() == OpKind::Flatten)
        return lowAlready(def->operand(0));
      return true;
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (const auto& op : g.ops()) {
        if (!set.count(op.get()))
          continue;
        bool keep = true;
        if (readsLowOnly(op.get()))
          for (unsigned i = 0; i < op->numOperands(); ++i)
            keep &= !lowOperand(op.get(), i) || lowAlready(op->operand(i));
        for (const Use& u : op->result(0)->uses())
          keep &= isCastTo(u.user, low_) || (set.count(u.user) && lowOperand(u.user, u.index));
        if (!keep) {
          set.erase(op.get());
          changed = true;
        }
      }
    }
    std::vector<Op*> ordered;
    for (const auto& op : g.ops())
      if (set.count(op.get()))
        ordered.push_back(op.get());
    return ordered;
  }

  /// Rebuilds the ops of lowActivationOps() on low operands, in graph
  /// order: an operand made low by the set or a widened low value is used
  /// as it is, anything else gets a cast; the casts to the low type of
  /// their results are replaced by the new results.
  llvm::Error hoistCasts(Graph& g) {
    std::vector<Op*> ops = lowActivationOps(g);
    std::unordered_map<const Value*, Value*> lowOf;
    std::vector<Op*> casts;
    for (Op* op : ops) {
      Builder b(g);
      b.setInsertionPointBefore(op);
      b.setLoc(op->loc());
      std::vector<Value*> operands;
      for (unsigned i = 0; i < op->numOperands(); ++i) {
        Value* v = op->operand(i);
        if (static_cast<int>(i) == maskOperand(op)) {
          // The same mask (seed, step, piece) in the low type.
          const Op* mask = v->definingOp();
          std::vector<NamedAttr> attrs = mask->attrs();
          for (NamedAttr& a : attrs)
            if (a.name == "dtype")
              a.value = Attribute(std::string(dtypeName(low_)));
          auto lowMask =
              b.createInferred(OpKind::DropoutMask, {mask->operand(0)}, std::move(attrs));
          if (!lowMask)
            return lowMask.takeError();
          operands.push_back((*lowMask)->result());
        } else if (!lowOperand(op, i)) {
          operands.push_back(v);
        } else if (auto it = lowOf.find(v); it != lowOf.end()) {
          operands.push_back(it->second);
        } else if (Value* w = widenedFrom(v)) {
          operands.push_back(w);
        } else {
          auto cast = castTo(b, v, low_);
          if (!cast)
            return cast.takeError();
          operands.push_back(*cast);
        }
      }
      auto low = b.createInferred(op->kind(), operands, op->attrs(), op->numResults());
      if (!low)
        return low.takeError();
      lowOf[op->result(0)] = (*low)->result(0);
      for (const Use& u : op->result(0)->uses())
        if (isCastTo(u.user, low_))
          casts.push_back(u.user);
    }
    for (Op* cast : casts) {
      cast->result()->replaceAllUsesWith(lowOf.at(cast->operand(0)));
      g.eraseOp(cast);
    }
    // The old ops, last first (each one's users in the set are gone by
    // then); a batch norm's statistics move to the new op.
    for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
      Op* op = *it;
      Op* fresh = lowOf.at(op->result(0))->definingOp();
      std::vector<std::string> names;
      for (unsigned r = 0; r < op->numResults(); ++r) {
        names.push_back(op->result(r)->name());
        if (r > 0)
          op->result(r)->replaceAllUsesWith(fresh->result(r));
      }
      g.eraseOp(op);
      for (unsigned r = 0; r < names.size(); ++r)
        fresh->result(r)->setName(names[r]);
    }
    // The widening casts and float32 dropout masks no op reads any more.
    std::vector<Op*> dead;
    for (auto& op : g.ops())
      if ((isCastTo(op.get(), DType::F32) || op->kind() == OpKind::DropoutMask) &&
          !op->result()->hasUses() && !isGraphOutput(g, op->result()))
        dead.push_back(op.get());
    for (Op* op : dead)
      g.eraseOp(op);
    return llvm::Error::success();
  }

  static bool isNormalization(const Op* op) { return op->kind() == OpKind::BatchNormTrain; }

  static bool isGraphOutput(const Graph& g, const Value* v) {
    for (const Value* out : g.outputs())
      if (out == v)
        return true;
    return false;
  }

  llvm::Error rewrite(Graph& g, Op* op) {
    Builder b(g);
    b.setInsertionPointBefore(op);
    b.setLoc(op->loc());
    std::vector<Value*> operands;
    for (unsigned i = 0; i < 2; ++i) {
      auto cast = castTo(b, op->operand(i), low_);
      if (!cast)
        return cast.takeError();
      operands.push_back(*cast);
    }
    auto lowOp = b.createInferred(op->kind(), operands, op->attrs());
    if (!lowOp)
      return lowOp.takeError();
    auto back = castTo(b, (*lowOp)->result(), DType::F32);
    if (!back)
      return back.takeError();
    Value* y = *back;
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
  auto opts = PassOptions::parse("mixed-precision", options, "dtype", {"dtype", "activations"});
  if (!opts)
    return opts.takeError();
  auto dtype = opts->getChoice("dtype", "bf16", {"bf16", "fp16"});
  if (!dtype)
    return dtype.takeError();
  auto activations =
      opts->getChoice("activations", "low", {"low", "f32"}, "low: 16 bits between layers, or f32");
  if (!activations)
    return activations.takeError();
  return std::make_unique<MixedPrecisionPass>(*dtype == "bf16" ? DType::BF16 : DType::F16,
                                              *activations == "low");
}

} // namespace lwcc
