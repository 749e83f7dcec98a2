//===- MicroBatchCopies.cpp - An op's copies, one per piece of the batch --===//
//
// The per-piece copies of an op (MicroBatcher.h) and the values they read
// and give: pieces of shared values, the sums of partial results, the batch
// gathered back.
//
//===----------------------------------------------------------------------===//
#include "passes/MicroBatcher.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

namespace lwcc {

llvm::Error MicroBatcher::replicate(Op& op, const std::optional<SplitPlan>& plan, int64_t dim) {
  b_.setInsertionPointBefore(&op);
  b_.setLoc(op.loc());
  std::vector<std::vector<Value*>> results(op.numResults());
  std::vector<Value*> labels; // each copy's labels (a loss over the labels that count)
  for (int64_t mb = 0; mb < made_; ++mb) {
    b_.setMicroBatch(mb);
    b_.setDevice(std::nullopt);
    auto par = configFor(op, dim, mb);
    if (!par)
      return par.takeError();
    std::vector<Value*> ins;
    for (unsigned j = 0; j < op.numOperands(); ++j) {
      Value* v = op.operand(j);
      const Dist& d = distOf(v);
      int64_t want = plan ? plan->operandDims[j] : -1;
      if (d.kind == Dist::Batched && d.pieces.empty()) {
        // An input: the micro-batch's rows, sliced where the copy runs.
        auto piece = sharedPiece(v, d.dim, mb, *par);
        if (!piece)
          return piece.takeError();
        ins.push_back(*piece);
      } else if (d.kind != Dist::Shared) {
        ins.push_back(d.pieces[static_cast<size_t>(mb)]);
      } else if (want >= 0) {
        auto piece = sharedPiece(v, want, mb, *par);
        if (!piece)
          return piece.takeError();
        ins.push_back(*piece);
      } else {
        ins.push_back(v);
      }
    }
    if (llvm::Error e = unbiasFactor(op, ins, mb))
      return e;
    std::vector<TensorType> types;
    for (unsigned r = 0; r < op.numResults(); ++r) {
      TensorType t = op.result(r)->type();
      if (plan && plan->resultDims[r] >= 0)
        t.shape[plan->resultDims[r]] = sizes_[mb] * unitOf(op.result(r), plan->resultDims[r]);
      types.push_back(t);
    }
    if (plan && plan->partial == SplitPlan::Partial::LabelMean)
      labels.push_back(ins[1]);
    Op* copy = b_.create(op.kind(), ins, types, op.attrs());
    copy->annotations() = op.annotations();
    copy->annotations().par = *par;
    copy->annotations().microBatch = mb;
    if (plan && op.info().localize)
      op.info().localize(*copy, op, dim, offsets_[mb] * unitOf(parSplitValue(op), dim));
    auto inferred = op.info().shapeRule(*copy);
    if (!inferred)
      return op.emitError("microbatch: a micro-batch's copy is invalid: " +
                          llvm::toString(inferred.takeError()));
    if (*inferred != types)
      return op.emitError("microbatch: the copy of micro-batch " + std::to_string(mb) +
                          " does not have the shape of its rows");
    for (unsigned r = 0; r < op.numResults(); ++r) {
      copy->result(r)->setName(
          names_(op.result(r)->name().empty()
                     ? suffix_ + std::to_string(mb)
                     : op.result(r)->name() + "." + suffix_ + std::to_string(mb)));
      results[r].push_back(copy->result(r));
    }
    copyMb_[copy] = mb;
  }
  b_.setMicroBatch(std::nullopt);
  for (unsigned r = 0; r < op.numResults(); ++r) {
    Dist d;
    d.pieces = results[r];
    if (plan && plan->resultDims[r] >= 0) {
      d.kind = Dist::Batched;
      d.dim = plan->resultDims[r];
    } else if (plan && plan->partial != SplitPlan::Partial::None) {
      auto sum = combine(op, results[r], plan->partial == SplitPlan::Partial::Mean, labels);
      if (!sum)
        return sum.takeError();
      op.result(r)->replaceAllUsesWith(*sum);
      renamed_.emplace_back(*sum, op.result(r)->name()); // once the op is gone
      continue;
    } else {
      d.kind = Dist::PerMb;
    }
    dist_[op.result(r)] = std::move(d);
    if (op.kind() == OpKind::BatchNormTrain && r == 2)
      bnVar_[op.result(r)] = &op;
  }
  replaced_.push_back(&op);
  return llvm::Error::success();
}

llvm::Error MicroBatcher::unbiasFactor(const Op& op, std::vector<Value*>& ins, int64_t mb) {
  if (op.kind() != OpKind::Mul)
    return llvm::Error::success();
  for (unsigned j = 0; j < 2; ++j) {
    auto bn = bnVar_.find(op.operand(j));
    const Op* c = op.operand(1 - j)->definingOp();
    if (bn == bnVar_.end() || !c || c->kind() != OpKind::Constant || !c->hasAttr("value") ||
        c->getFloats("value").size() != 1 || c->result()->type().rank() != 0)
      continue;
    const TensorType& xt = bn->second->operand(0)->type();
    int64_t perChannel = xt.numElements() / xt.shape[1];
    double n = static_cast<double>(perChannel);
    if (c->getFloats("value")[0] != n / (n - 1))
      continue;
    int64_t own = perChannel / n_ * sizes_[mb];
    if (own < 2)
      return bn->second->emitError(llvm::formatv(
          "microbatch: micro-batch {0} gives batch norm {1} value per channel, too few for the "
          "unbiased variance of its running update; use fewer micro-batches, or "
          "--bn-running-var=biased",
          mb, own));
    double m = static_cast<double>(own);
    Op* k = b_.create(OpKind::Constant, {}, {c->result()->type()},
                      {{"value", Attribute(std::vector<double>{m / (m - 1)})}});
    ins[1 - j] = k->result();
  }
  return llvm::Error::success();
}

llvm::Expected<Value*> MicroBatcher::sharedPiece(Value* v, int64_t dim, int64_t mb,
                                                 const std::optional<ParallelConfig>& readerPar) {
  auto key = std::make_tuple(v, dim, mb);
  if (auto it = pieces_.find(key); it != pieces_.end())
    return it->second;
  Op* def = v->definingOp();
  Value* piece = nullptr;
  b_.setMicroBatch(mb);
  if (def && def->numResults() == 1 && def->info().localize && def->info().parallel &&
      !def->info().parOnOperand && def->kind() != OpKind::Constant) {
    auto plan = def->info().parallel(*def, dim);
    bool local = plan.has_value();
    for (unsigned j = 0; plan && j < def->numOperands(); ++j)
      local &= plan->operandDims[j] < 0;
    if (local) {
      auto par = configFor(*def, dim, mb);
      if (!par)
        return par.takeError();
      TensorType t = v->type();
      t.shape[dim] = sizes_[mb] * unitOf(v, dim);
      Op* copy = b_.create(def->kind(), def->operands(), {t}, def->attrs());
      copy->annotations() = def->annotations();
      copy->annotations().par = *par;
      copy->annotations().microBatch = mb;
      def->info().localize(*copy, *def, dim, offsets_[mb] * unitOf(v, dim));
      piece = copy->result();
      piece->setName(
          names_(v->name().empty() ? suffix_ : v->name() + "." + suffix_ + std::to_string(mb)));
    }
  }
  if (!piece) {
    const int64_t u = unitOf(v, dim);
    auto s = b_.createInferred(
        OpKind::Slice, {v},
        {{"starts", Attribute(std::vector<int64_t>{offsets_[mb] * u})},
         {"ends", Attribute(std::vector<int64_t>{(offsets_[mb] + sizes_[mb]) * u})},
         {"axes", Attribute(std::vector<int64_t>{dim})}});
    if (!s)
      return s.takeError();
    // Sliced where its reader runs: each of its devices cuts the rows.
    if (readerPar) {
      ParallelConfig whole;
      whole.devices = readerPar->devices;
      for (int64_t d = 0; whole.devices.empty() && d < readerPar->totalDegree(); ++d)
        whole.devices.push_back(d);
      (*s)->annotations().par = whole;
    }
    piece = (*s)->result();
    piece->setName(
        names_(v->name().empty() ? suffix_ : v->name() + "." + suffix_ + std::to_string(mb)));
  }
  b_.setMicroBatch(std::nullopt);
  pieces_[key] = piece;
  return piece;
}

llvm::Expected<Value*> MicroBatcher::countKept(Value* labels, int64_t ignore, DType dtype,
                                               const std::optional<ParallelConfig>& at) {
  Op* skip = b_.create(OpKind::Constant, {}, {TensorType(labels->type().dtype, {})},
                       {{"ivalue", Attribute(std::vector<int64_t>{ignore})}});
  auto scalar = [&](double v) {
    return b_
        .create(OpKind::Constant, {}, {TensorType(dtype, {})},
                {{"value", Attribute(std::vector<double>{v})}})
        ->result();
  };
  auto eq = b_.createInferred(OpKind::Compare, {labels, skip->result()},
                              {{"kind", Attribute(std::string("equal"))}});
  if (!eq)
    return eq.takeError();
  auto kept = b_.createInferred(OpKind::Where, {(*eq)->result(), scalar(0), scalar(1)});
  if (!kept)
    return kept.takeError();
  auto count = b_.createInferred(OpKind::ReduceSum, {(*kept)->result()},
                                 {{"keepdims", Attribute(int64_t{0})}});
  if (!count)
    return count.takeError();
  for (Op* o : {*eq, *kept, *count})
    o->annotations().par = at;
  return (*count)->result();
}

llvm::Expected<Value*> MicroBatcher::combine(const Op& op, const std::vector<Value*>& parts,
                                             bool mean, const std::vector<Value*>& labels) {
  std::optional<ParallelConfig> at;
  if (op.annotations().par) {
    ParallelConfig one;
    const auto& devs = op.annotations().par->devices;
    one.devices = {devs.empty() ? 0 : devs[0]};
    at = one;
  }
  auto made = [&](llvm::Expected<Op*> o) -> llvm::Expected<Value*> {
    if (!o)
      return o.takeError();
    (*o)->annotations().par = at;
    return (*o)->result();
  };
  // A loss over the labels that count: each micro-batch's mean weighed by
  // its count of them over the batch's (as materialize weighs devices).
  std::vector<Value*> counts;
  Value* total = nullptr;
  const DType dt = parts.empty() ? DType::F32 : parts[0]->type().dtype;
  for (Value* l : labels) {
    auto c = countKept(l, op.getInt("ignore_index"), dt, at);
    if (!c)
      return c.takeError();
    counts.push_back(*c);
    if (total) {
      auto s = made(b_.createInferred(OpKind::Add, {total, *c}));
      if (!s)
        return s.takeError();
      total = *s;
    } else {
      total = *c;
    }
  }
  Value* acc = nullptr;
  for (int64_t mb = 0; mb < made_; ++mb) {
    Value* y = parts[static_cast<size_t>(mb)];
    if (!counts.empty()) {
      Value* c = counts[static_cast<size_t>(mb)];
      Value* zero = b_.create(OpKind::Constant, {}, {TensorType(dt, {})},
                              {{"value", Attribute(std::vector<double>{0.0})}})
                        ->result();
      auto any = made(b_.createInferred(OpKind::Compare, {c, zero},
                                        {{"kind", Attribute(std::string("greater"))}}));
      if (!any)
        return any.takeError();
      auto kept = made(b_.createInferred(OpKind::Where, {*any, y, zero}));
      if (!kept)
        return kept.takeError();
      auto share = made(b_.createInferred(OpKind::Div, {c, total}));
      if (!share)
        return share.takeError();
      auto w = made(b_.createInferred(OpKind::Mul, {*kept, *share}));
      if (!w)
        return w.takeError();
      y = *w;
    } else if (mean) {
      Op* share =
          b_.create(OpKind::Constant, {}, {TensorType(y->type().dtype, {})},
                    {{"value", Attribute(std::vector<double>{static_cast<double>(sizes_[mb]) /
                                                             static_cast<double>(n_)})}});
      auto w = made(b_.createInferred(OpKind::Mul, {y, share->result()}));
      if (!w)
        return w.takeError();
      y = *w;
    }
    if (acc) {
      auto s = made(b_.createInferred(OpKind::Add, {acc, y}));
      if (!s)
        return s.takeError();
      acc = *s;
    } else {
      acc = y;
    }
  }
  return acc;
}

llvm::Expected<Value*> MicroBatcher::gather(Value* v, const Dist& d, Op* before) {
  if (made_ < m_)
    return makeError(llvm::formatv("microbatch: first={0} of {1} micro-batches: {2} is needed "
                                   "whole, from every micro-batch's rows",
                                   made_, m_, v->name().empty() ? "a value" : v->name())
                         .str());
  if (before)
    b_.setInsertionPointBefore(before);
  b_.setMicroBatch(std::nullopt);
  auto c = b_.createInferred(OpKind::Concat, d.pieces, {{"axis", Attribute(d.dim)}});
  if (!c)
    return c.takeError();
  (*c)->result()->setName(names_(v->name().empty() ? "batch" : v->name() + ".batch"));
  return (*c)->result();
}

} // namespace lwcc
