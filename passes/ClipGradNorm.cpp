//===- ClipGradNorm.cpp - Gradients clipped by their global L2 norm -------===//
#include "passes/Pass.h"
#include "passes/PassOptions.h"
#include "passes/TrainingSupport.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

namespace lwcc {

namespace {

constexpr const char* kNormParam = "grad_norm";

/// `clip-grad-norm=max_norm=X` (after the optimizer, and after grad-sync on
/// several devices) makes the update read the gradients
/// torch.nn.utils.clip_grad_norm_(params, X) leaves:
///  1. The gradients are those the update ops (sgd_update, adam_update)
///     read: every trained param's, summed over its replicas already.
///  2. Each piece of a param counts once. A piece is a param's initializer
///     and its shard offsets: copies of a whole param on several devices
///     (replicas, whose gradients an all_reduce has summed, so they hold
///     the same values) belong to the lowest of those devices; shards of a
///     param on different devices are different pieces, each its device's.
///  3. Each device that updates params sums the squares of its pieces'
///     gradients (square_sum; 0 when it owns none). On several devices an
///     all_reduce adds the sums, so every device holds the sum over the
///     whole model, as one device would.
///  4. clip_coef turns it into the norm and the factor min(X / (norm +
///     1e-6), 1) on each device; every update reads its gradient times the
///     factor. All of it sits before the first update op.
///  5. The norm goes to a float scalar param `grad_norm` on each of these
///     devices (zero-initialized, assigned at the end of the step), which
///     the trainer logs.
class ClipGradNormPass : public Pass {
public:
  explicit ClipGradNormPass(double maxNorm) : maxNorm_(maxNorm) {}
  std::string_view name() const override { return "clip-grad-norm"; }

  llvm::Error run(Graph& g, PassContext&) override {
    std::vector<Op*> updates;
    for (const auto& op : g.ops()) {
      if (op->kind() == OpKind::ClipCoef)
        return op->emitError("clip-grad-norm: graph @" + g.name() + " is clipped already");
      if (op->kind() == OpKind::SgdUpdate || op->kind() == OpKind::AdamUpdate)
        updates.push_back(op.get());
    }
    if (updates.empty())
      return makeError("clip-grad-norm: graph @" + g.name() +
                       " has no update ops (run the optimizer first)");

    // The owner of each piece: the lowest device that updates it.
    auto deviceOf = [](const Op* up) {
      return up->annotations().device.value_or(up->operand(0)->device().value_or(0));
    };
    auto pieceOf = [](const Value* p) {
      std::ostringstream key;
      key << p->paramName();
      for (const ShardDim& s : p->shard())
        key << ';' << s.dim << ':' << s.offset << ':' << s.whole;
      return key.str();
    };
    std::map<std::string, std::vector<const Op*>> pieces;
    for (const Op* up : updates)
      pieces[pieceOf(up->operand(0))].push_back(up);
    const DType dtype = updates.front()->operand(1)->type().dtype;
    std::map<int64_t, std::vector<Value*>> owned; // device -> gradients it counts
    for (const Op* up : updates) {
      const Value* grad = up->operand(1);
      if (grad->type().dtype != dtype || (dtype != DType::F32 && dtype != DType::F64))
        return up->emitError("clip-grad-norm: the gradients are not all f32 or all f64");
      const auto& copies = pieces.at(pieceOf(up->operand(0)));
      const int64_t d = deviceOf(up);
      int64_t owner = d;
      for (const Op* other : copies)
        owner = std::min(owner, deviceOf(other));
      if (copies.size() > 1 && up->operand(0)->shard().empty() &&
          (!grad->definingOp() || grad->definingOp()->kind() != OpKind::AllReduce))
        return up->emitError("clip-grad-norm: the gradient of replicated param '%" +
                             up->operand(0)->name() +
                             "' is not summed across its replicas (run grad-sync first)");
      owned[d]; // every updating device takes part
      if (owner == d)
        owned[d].push_back(up->operand(1));
    }

    Builder b(g);
    Location loc;
    loc.name = "clip-grad-norm";
    b.setLoc(loc);
    b.setInsertionPointBefore(updates.front());
    UniqueNames names(g);
    auto setDevice = [&](int64_t d) { b.setDevice(d ? std::optional<int64_t>(d) : std::nullopt); };
    auto suffix = [](int64_t d) { return d ? ".d" + std::to_string(d) : std::string(); };

    std::vector<Value*> partials;
    std::vector<int64_t> ids;
    for (const auto& [d, grads] : owned) {
      setDevice(d);
      Value* partial = nullptr;
      if (grads.empty()) {
        Op* c = b.create(OpKind::Constant, {}, {TensorType(dtype, {})});
        c->setAttr("value", Attribute(std::vector<double>{0.0}));
        partial = c->result();
      } else {
        auto sum = b.createInferred(OpKind::SquareSum, grads);
        if (!sum)
          return sum.takeError();
        partial = (*sum)->result();
      }
      partial->setName(names("grad_square_sum" + suffix(d)));
      partials.push_back(partial);
      ids.push_back(d);
    }
    std::vector<Value*> totals = partials;
    if (ids.size() > 1) {
      b.setDevice(std::nullopt);
      auto sums = b.createInferred(OpKind::AllReduce, partials, {{"devices", Attribute(ids)}},
                                   static_cast<unsigned>(partials.size()));
      if (!sums)
        return sums.takeError();
      for (size_t i = 0; i < ids.size(); ++i) {
        totals[i] = (*sums)->result(static_cast<unsigned>(i));
        totals[i]->setName(names("grad_square_sum.total" + suffix(ids[i])));
      }
    }
    std::map<int64_t, Value*> coefs, norms;
    for (size_t i = 0; i < ids.size(); ++i) {
      const int64_t d = ids[i];
      setDevice(d);
      auto clip =
          b.createInferred(OpKind::ClipCoef, {totals[i]}, {{"max_norm", Attribute(maxNorm_)}}, 2);
      if (!clip)
        return clip.takeError();
      norms[d] = (*clip)->result(0);
      norms[d]->setName(names("grad_norm.value" + suffix(d)));
      coefs[d] = (*clip)->result(1);
      coefs[d]->setName(names("clip_coef" + suffix(d)));
    }
    for (Op* up : updates) {
      const int64_t d = deviceOf(up);
      setDevice(d);
      b.setLoc(up->loc());
      Value* grad = up->operand(1);
      auto clipped = b.createInferred(OpKind::Mul, {grad, coefs.at(d)});
      if (!clipped)
        return clipped.takeError();
      (*clipped)->result()->setName(names(grad->name().empty() ? "" : grad->name() + ".clipped"));
      up->setOperand(1, (*clipped)->result());
    }
    for (const auto& [d, norm] : norms) {
      Value* p = g.addParam(names(kNormParam + suffix(d)), kNormParam, TensorType(dtype, {}));
      p->setZeroInit(true);
      if (d)
        p->setDevice(d);
      appendAssign(g, p, norm, loc);
    }
    return llvm::Error::success();
  }

private:
  double maxNorm_;
};

} // namespace

llvm::Expected<std::unique_ptr<Pass>> createClipGradNormPass(std::string_view options) {
  auto opts = PassOptions::parse("clip-grad-norm", options, "max_norm", {"max_norm"});
  if (!opts)
    return opts.takeError();
  auto maxNorm = opts->getFloat("max_norm", 0.0);
  if (!maxNorm)
    return maxNorm.takeError();
  if (!(*maxNorm > 0) || !std::isfinite(*maxNorm))
    return makeError("clip-grad-norm: max_norm must be a finite number > 0");
  return std::make_unique<ClipGradNormPass>(*maxNorm);
}

} // namespace lwcc
