//===- Autodiff.cpp - Reverse-mode differentiation ------------------------===//
#include "ir/GradRules.h"
#include "passes/Pass.h"
#include "passes/TrainingSupport.h"

#include <map>
#include <unordered_map>
#include <unordered_set>

namespace lwcc {

namespace {

/// Appends the backward pass of the loss (output #0):
///  1. Trainable params are the float params that no assign updates (those
///     are running statistics or optimizer state) and that are neither zero-
///     initialized state nor frozen.
///  2. Forward: a value depends on a trainable param if an operand does.
///     Backward from the loss: a value reaches the loss if some use does.
///     A value needs a gradient when both hold.
///  3. Seed dL/dL = 1, then visit the forward ops last to first. For an op
///     with a gradient on some result and an operand that needs one, call
///     the op table's gradient rule; an op without a rule is an error that
///     names it. Gradients of values with several uses are summed.
///  4. Each trainable param that received a gradient becomes an output
///     marked @grad(param), after the loss, in param order.
class AutodiffPass : public Pass {
public:
  std::string_view name() const override { return "autodiff"; }

  llvm::Error run(Graph& g, PassContext& ctx) override {
    if (g.outputs().empty() || g.outputs()[0]->type().rank() != 0 ||
        !isFloat(g.outputs()[0]->type().dtype))
      return makeError("autodiff: graph @" + g.name() +
                       " must return a float scalar loss as output #0 (run append-loss first)");
    for (size_t i = 1; i < g.outputs().size(); ++i)
      if (g.outputGradOf(i))
        return makeError("autodiff: graph @" + g.name() + " is already differentiated");
    Value* loss = g.outputs()[0];

    std::vector<Value*> trainable = trainableParams(g);
    std::unordered_set<const Value*> depends(trainable.begin(), trainable.end());
    std::vector<Op*> forward;
    for (auto& op : g.ops()) {
      forward.push_back(op.get());
      if (op->kind() == OpKind::Assign)
        continue;
      for (Value* v : op->operands())
        if (depends.count(v)) {
          for (unsigned i = 0; i < op->numResults(); ++i)
            if (isFloat(op->result(i)->type().dtype))
              depends.insert(op->result(i));
          break;
        }
    }
    std::unordered_set<const Value*> reaches{loss};
    for (auto it = forward.rbegin(); it != forward.rend(); ++it) {
      Op* op = *it;
      bool any = false;
      for (unsigned i = 0; i < op->numResults(); ++i)
        any |= reaches.count(op->result(i)) > 0;
      if (any)
        for (Value* v : op->operands())
          reaches.insert(v);
    }
    auto needsGrad = [&](const Value* v) { return depends.count(v) && reaches.count(v); };

    Builder b(g);
    Location seedLoc;
    seedLoc.name = "loss.grad";
    b.setLoc(seedLoc);
    // Backward ops run where their forward op ran; the seed where the loss is.
    auto placeAt = [&](const Value* v) {
      std::optional<int64_t> d = valueDevice(v);
      b.setDevice(d && *d != 0 ? d : std::nullopt);
    };
    // A value's gradient from several readers is their sum: the readers of
    // one micro-batch (or of none) summed as they are met (the reverse of
    // the forward), the micro-batches' sums then first to last, once the
    // value's gradient is read (the backward of its op, or a param's
    // output). Summed as met, micro-batch M-1's gradient would come first
    // and every other micro-batch's addition would wait for M-1's
    // backward, the last of a 1F1B stage's tasks: each micro-batch's weight
    // gradients stayed live until then, and the additions held the stage's
    // last backward.
    struct Part {
      Value* grad;
      Location loc;
    };
    // value -> micro-batch (-1: none) -> its readers' sum so far
    std::unordered_map<const Value*, std::map<int64_t, Part>> parts;
    auto addGrad = [&](const Value* v, Value* dx, const Op& reader) -> llvm::Error {
      const int64_t mb = reader.annotations().microBatch.value_or(-1);
      auto [it, added] = parts[v].try_emplace(mb, Part{dx, reader.loc()});
      if (added)
        return llvm::Error::success();
      placeAt(dx);
      auto sum = b.createInferred(OpKind::Add, {it->second.grad, dx});
      if (!sum)
        return reader.emitError("cannot sum gradients: " + llvm::toString(sum.takeError()));
      it->second.grad = (*sum)->result();
      return llvm::Error::success();
    };
    auto gradOf = [&](const Value* v) -> llvm::Expected<Value*> {
      auto pit = parts.find(v);
      if (pit == parts.end())
        return nullptr;
      std::map<int64_t, Part>& byMb = pit->second;
      Value* sum = byMb.begin()->second.grad;
      const Location loc = b.loc();
      const auto mb = b.microBatch();
      const auto device = b.device();
      for (auto it = std::next(byMb.begin()); it != byMb.end(); ++it) {
        b.setLoc(it->second.loc);
        b.setMicroBatch(it->first);
        placeAt(it->second.grad);
        auto add = b.createInferred(OpKind::Add, {sum, it->second.grad});
        if (!add)
          return add.takeError();
        sum = (*add)->result();
      }
      byMb.clear();
      byMb.emplace(-1, Part{sum, {}});
      b.setLoc(loc);
      b.setMicroBatch(mb);
      b.setDevice(device);
      return sum;
    };
    {
      placeAt(loss);
      Op* one = b.create(OpKind::Constant, {}, {loss->type()});
      one->setAttr("value", Attribute(std::vector<double>{1.0}));
      parts[loss].emplace(-1, Part{one->result(), seedLoc});
    }
    for (auto it = forward.rbegin(); it != forward.rend(); ++it) {
      Op* op = *it;
      GradContext c{b, *op, {}, {}, {}};
      bool haveDy = false, wantDx = false;
      for (unsigned i = 0; i < op->numResults(); ++i) {
        auto dy = gradOf(op->result(i));
        if (!dy)
          return op->emitError("cannot sum gradients: " + llvm::toString(dy.takeError()));
        c.dys.push_back(*dy);
        haveDy |= *dy != nullptr;
      }
      for (Value* v : op->operands()) {
        c.needs.push_back(needsGrad(v));
        wantDx |= c.needs.back();
      }
      if (!haveDy || !wantDx)
        continue;
      GradRule rule = op->info().gradRule;
      if (!rule)
        return op->emitError("has no gradient rule, but the loss depends on it through a "
                             "trainable param");
      c.dxs.assign(op->numOperands(), nullptr);
      b.setLoc(op->loc());
      b.setDevice(op->annotations().device);
      // Backward ops belong to their forward op's micro-batch (as do the
      // sums of its operands' gradients made here: the schedule pass frees
      // a sum that waits for later micro-batches).
      b.setMicroBatch(op->annotations().microBatch);
      if (llvm::Error e = rule(c))
        return e;
      for (unsigned i = 0; i < op->numOperands(); ++i) {
        if (!c.needs[i] || !c.dxs[i])
          continue;
        if (llvm::Error e = addGrad(op->operand(i), c.dxs[i], *op))
          return e;
      }
    }
    size_t produced = 0;
    b.setMicroBatch(std::nullopt);
    UniqueNames names(g);
    for (Value* p : trainable) {
      auto total = gradOf(p);
      if (!total)
        return total.takeError();
      if (!*total)
        continue;
      Value* gv = *total;
      if (gv->kind() != ValueKind::Result || gv->definingOp()->kind() == OpKind::Constant ||
          !gv->name().empty() || gv == loss) {
        // Give each gradient output a value of its own.
        placeAt(p);
        auto copy = b.createInferred(OpKind::Identity, {gv});
        if (!copy)
          return copy.takeError();
        gv = (*copy)->result();
      }
      gv->setName(names(p->name() + ".grad"));
      g.addOutput(gv, p);
      ++produced;
    }
    if (produced == 0)
      ctx.warn({}, "autodiff: the loss of graph @" + g.name() +
                       " depends on no trainable param; no gradients were produced");
    return llvm::Error::success();
  }
};

} // namespace

std::unique_ptr<Pass> createAutodiffPass() { return std::make_unique<AutodiffPass>(); }

} // namespace lwcc
