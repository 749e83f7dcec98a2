//===- MicroBatcher.cpp - The walk over a step cut into pieces ------------===//
//
// Which ops of the step run per piece of the batch and how (MicroBatcher.h);
// the copies themselves are made in MicroBatchCopies.cpp.
//
//===----------------------------------------------------------------------===//
#include "passes/MicroBatcher.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

namespace lwcc {

llvm::Expected<std::vector<Op*>> MicroBatcher::splittable() {
  if (llvm::Error e = findBatch())
    return e;
  findChainedParams();
  std::vector<Op*> out;
  for (auto& op : g_.ops()) {
    if (op->kind() == OpKind::Constant || op->kind() == OpKind::Assign)
      continue;
    bool batched = false, readsChained = false;
    for (Value* v : op->operands()) {
      batched |= distOf(v).kind == Dist::Batched;
      readsChained |= chained_.count(v) > 0;
    }
    if (!batched)
      continue;
    auto [plan, dim] = choosePlan(*op);
    if (!plan)
      continue;
    bool rows = plan->partial == SplitPlan::Partial::None;
    for (unsigned r = 0; r < op->numResults(); ++r) {
      rows &= plan->resultDims[r] >= 0;
      if (plan->resultDims[r] >= 0)
        dist_[op->result(r)] = Dist{Dist::Batched, plan->resultDims[r], {}};
    }
    if (rows && !readsChained)
      out.push_back(op.get());
  }
  return out;
}

llvm::Error MicroBatcher::run() {
  if (llvm::Error e = findBatch())
    return e;
  for (int64_t i = 0, off = 0; i < m_; ++i) {
    int64_t size = n_ / m_ + (i < n_ % m_ ? 1 : 0);
    offsets_.push_back(off);
    sizes_.push_back(size);
    off += size;
  }
  findChainedParams();
  std::vector<Op*> original;
  for (auto& op : g_.ops())
    original.push_back(op.get());
  std::vector<Op*> assigns;
  for (Op* op : original) {
    if (op->kind() == OpKind::Constant)
      continue;
    if (op->kind() == OpKind::Assign) {
      assigns.push_back(op);
      continue;
    }
    if (llvm::Error e = visit(*op))
      return e;
  }
  for (Op* a : assigns)
    if (llvm::Error e = chain(*a))
      return e;
  b_.setInsertionPointToEnd();
  b_.setMicroBatch(std::nullopt);
  for (unsigned i = 0; i < g_.outputs().size(); ++i) {
    Value* v = g_.outputs()[i];
    auto it = dist_.find(v);
    if (it == dist_.end() || it->second.kind == Dist::Shared || it->second.pieces.empty())
      continue;
    if (it->second.kind == Dist::PerMb)
      return makeError(v->loc(), "microbatch: output '%" + v->name() +
                                     "' is a value of each micro-batch, not of the step");
    auto whole = gather(v, it->second, nullptr);
    if (!whole)
      return whole.takeError();
    g_.setOutput(i, *whole);
  }
  for (auto it = replaced_.rbegin(); it != replaced_.rend(); ++it) {
    for (unsigned r = 0; r < (*it)->numResults(); ++r)
      if ((*it)->result(r)->hasUses())
        return (*it)->emitError("microbatch: a result is still read after the op was split");
    (*it)->dropOperands();
    g_.eraseOp(*it);
  }
  for (auto& [v, name] : renamed_)
    if (!name.empty())
      v->setName(name);
  return sortTopologically(g_);
}

llvm::Error MicroBatcher::findBatch() {
  // The batch is the smallest dim 0 of the inputs; every input's dim 0 is
  // a whole number of entries per sample (T for the [B * T] labels of a
  // [B * T, V] logits export beside [B, T] tokens).
  for (const auto& in : g_.inputs())
    if (in->type().rank() > 0 && (n_ == 0 || in->type().shape[0] < n_))
      n_ = in->type().shape[0];
  for (const auto& in : g_.inputs()) {
    if (in->type().rank() == 0)
      continue;
    const int64_t n = in->type().shape[0];
    if (n_ == 0 || n % n_ != 0)
      return makeError(in->loc(),
                       llvm::formatv("microbatch: input '%{0}' has {1} rows, another input {2}: "
                                     "the inputs must share the batch dim (or hold a whole "
                                     "number of rows per sample)",
                                     in->name(), n, n_)
                           .str());
    Dist d;
    d.kind = Dist::Batched;
    d.dim = 0;
    dist_[in.get()] = d;
  }
  if (n_ == 0)
    return makeError("microbatch: graph @" + g_.name() + " has no input with a batch dim");
  if (m_ > n_)
    return makeError(llvm::formatv("microbatch: {0} micro-batches of a batch of {1}: at most "
                                   "one micro-batch per sample",
                                   m_, n_)
                         .str());
  return llvm::Error::success();
}

void MicroBatcher::findChainedParams() {
  std::unordered_set<const Value*> fromBatch;
  for (const auto& [v, d] : dist_)
    fromBatch.insert(v);
  for (const auto& op : g_.ops()) {
    bool any = false;
    for (Value* v : op->operands())
      any |= fromBatch.count(v) > 0;
    if (!any)
      continue;
    if (op->kind() == OpKind::Assign)
      chained_.insert(op->operand(0));
    for (unsigned r = 0; r < op->numResults(); ++r)
      fromBatch.insert(op->result(r));
  }
}

const MicroBatcher::Dist& MicroBatcher::distOf(const Value* v) {
  static const Dist shared;
  auto it = dist_.find(v);
  return it == dist_.end() ? shared : it->second;
}

llvm::Error MicroBatcher::visit(Op& op) {
  if (only_ && !only_->count(&op))
    return whole(op);
  bool batched = false, perMb = false, readsChained = false;
  for (Value* v : op.operands()) {
    const Dist& d = distOf(v);
    batched |= d.kind == Dist::Batched;
    perMb |= d.kind == Dist::PerMb;
    readsChained |= chained_.count(v) > 0;
  }
  if (!batched && !perMb && !readsChained)
    return llvm::Error::success(); // computed once, for every micro-batch
  if (!batched)
    return replicate(op, std::nullopt, -1);
  if (auto [plan, dim] = choosePlan(op); plan)
    return replicate(op, plan, dim);
  if (perMb)
    return op.emitError("microbatch: the op cannot run on micro-batches and reads values of "
                        "each micro-batch");
  return wholeBatch(op);
}

llvm::Error MicroBatcher::whole(Op& op) {
  bool batched = false;
  for (Value* v : op.operands())
    batched |= distOf(v).kind == Dist::Batched;
  if (!batched)
    return llvm::Error::success();
  auto [plan, dim] = choosePlan(op);
  if (llvm::Error e = wholeBatch(op))
    return e;
  for (unsigned r = 0; plan && r < op.numResults(); ++r)
    if (plan->resultDims[r] >= 0)
      dist_[op.result(r)] = Dist{Dist::Batched, plan->resultDims[r], {}};
  return llvm::Error::success();
}

std::pair<std::optional<SplitPlan>, int64_t> MicroBatcher::choosePlan(const Op& op) {
  if (!op.info().parallel)
    return {std::nullopt, -1};
  const Value* sv = parSplitValue(op);
  std::vector<int64_t> dims;
  if (op.info().parOnOperand) {
    const Dist& d = distOf(op.operand(0));
    if (d.kind == Dist::Batched)
      dims.push_back(d.dim);
  } else {
    for (int64_t d = 0; d < sv->type().rank(); ++d)
      dims.push_back(d);
  }
  for (int64_t d : dims) {
    if (sv->type().shape[d] % n_ != 0)
      continue;
    auto plan = op.info().parallel(op, d);
    if (!plan)
      continue;
    // Each split operand and result holds whole samples along its dim, in
    // the split value's proportion (a window maps one's rows to the
    // other's: a reshape merging or splitting rows).
    const int64_t unit = unitOf(sv, d);
    auto same = [&](const Value* v, int64_t dim, bool operand0) {
      if (v->type().shape[static_cast<size_t>(dim)] % n_ != 0)
        return false;
      const int64_t u = unitOf(v, dim);
      if (operand0 && plan->window && v != sv)
        return plan->window(0, unit) == std::make_pair(int64_t{0}, u);
      return v == sv || u == unit;
    };
    bool fits = true;
    for (unsigned j = 0; j < op.numOperands() && fits; ++j) {
      const Dist& dj = distOf(op.operand(j));
      int64_t want = plan->operandDims[j];
      if (dj.kind == Dist::Batched)
        fits = want == dj.dim && same(op.operand(j), want, j == 0);
      else if (dj.kind == Dist::PerMb)
        fits = want < 0;
      else if (want >= 0)
        fits = same(op.operand(j), want, j == 0);
    }
    for (unsigned r = 0; r < op.numResults() && fits; ++r)
      if (plan->resultDims[r] >= 0)
        fits = same(op.result(r), plan->resultDims[r], false);
    if (fits)
      return {std::move(plan), d};
  }
  return {std::nullopt, -1};
}

llvm::Expected<std::optional<ParallelConfig>> MicroBatcher::configFor(const Op& op, int64_t dim,
                                                                      int64_t mb) {
  std::optional<ParallelConfig> par = op.annotations().par;
  if (!par || dim < 0)
    return par;
  int64_t rank = parSplitValue(op)->type().rank();
  for (const auto& [name, degree] : par->degrees) {
    if (degree < 2 || parDimIndex(name, rank) != dim)
      continue;
    int64_t size = sizes_[mb] * unitOf(parSplitValue(op), dim);
    if (par->sizes.empty()) {
      if (degree > size)
        return op.emitError(llvm::formatv("microbatch: micro-batch {0} has {1} samples, too "
                                          "few to split over the {2} devices of the op's "
                                          "config; use fewer micro-batches",
                                          mb, size, degree)
                                .str());
      continue;
    }
    // Largest remainders: each device's share of the micro-batch.
    std::vector<int64_t> scaled(par->sizes.size());
    std::vector<std::pair<double, size_t>> rest;
    int64_t given = 0;
    for (size_t i = 0; i < scaled.size(); ++i) {
      double exact =
          static_cast<double>(par->sizes[i]) * static_cast<double>(size) / static_cast<double>(n_);
      scaled[i] = static_cast<int64_t>(exact);
      given += scaled[i];
      rest.push_back({exact - static_cast<double>(scaled[i]), i});
    }
    std::stable_sort(rest.begin(), rest.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    for (size_t k = 0; given < size; ++k, ++given)
      ++scaled[rest[k % rest.size()].second];
    // Every device keeps a piece: the largest pieces give up a sample.
    for (int64_t& s : scaled)
      if (s < 1) {
        auto largest = std::max_element(scaled.begin(), scaled.end());
        if (*largest > 1) {
          --*largest;
          s = 1;
        }
      }
    for (int64_t s : scaled)
      if (s < 1)
        return op.emitError(llvm::formatv("microbatch: micro-batch {0} has {1} samples, too "
                                          "few for the op's {2} pieces; use fewer "
                                          "micro-batches",
                                          mb, size, scaled.size())
                                .str());
    par->sizes = std::move(scaled);
  }
  return par;
}

llvm::Error MicroBatcher::wholeBatch(Op& op) {
  b_.setLoc(op.loc());
  for (unsigned j = 0; j < op.numOperands(); ++j) {
    const Dist& d = distOf(op.operand(j));
    if (d.kind != Dist::Batched || d.pieces.empty()) // an input is whole already
      continue;
    auto key = op.operand(j);
    auto it = gathered_.find(key);
    if (it == gathered_.end()) {
      auto w = gather(op.operand(j), d, &op);
      if (!w)
        return w.takeError();
      it = gathered_.emplace(key, *w).first;
    }
    op.setOperand(j, it->second);
  }
  return llvm::Error::success();
}

llvm::Error MicroBatcher::chain(Op& assign) {
  Value* p = assign.operand(0);
  const Dist& d = distOf(assign.operand(1));
  if (d.kind == Dist::Shared)
    return llvm::Error::success();
  if (d.kind == Dist::Batched)
    return assign.emitError("microbatch: a param is assigned a value of the batch's rows");
  // Micro-batch mb > 0's copies read the value micro-batch mb - 1 left.
  const std::vector<Use> uses = p->uses();
  for (const Use& u : uses)
    if (auto it = u.user ? copyMb_.find(u.user) : copyMb_.end();
        it != copyMb_.end() && it->second > 0)
      u.user->setOperand(u.index, d.pieces[it->second - 1]);
  assign.setOperand(1, d.pieces.back());
  return llvm::Error::success();
}

llvm::Error MicroBatcher::sortTopologically(Graph& g) {
  std::vector<Op*> ops;
  std::unordered_map<const Op*, size_t> index;
  for (auto& op : g.ops()) {
    index[op.get()] = ops.size();
    ops.push_back(op.get());
  }
  std::vector<int> waiting(ops.size(), 0);
  std::vector<std::vector<size_t>> users(ops.size());
  for (size_t i = 0; i < ops.size(); ++i)
    for (Value* v : ops[i]->operands())
      if (const Op* d = v->definingOp()) {
        ++waiting[i];
        users[index.at(d)].push_back(i);
      }
  std::set<size_t> ready;
  for (size_t i = 0; i < ops.size(); ++i)
    if (!waiting[i])
      ready.insert(i);
  std::vector<Op*> order;
  while (!ready.empty()) {
    size_t i = *ready.begin();
    ready.erase(ready.begin());
    order.push_back(ops[i]);
    for (size_t u : users[i])
      if (--waiting[u] == 0)
        ready.insert(u);
  }
  if (order.size() != ops.size())
    return makeError("microbatch: the ops of graph @" + g.name() + " form a cycle");
  for (Op* op : order)
    g.moveOp(op, nullptr);
  return llvm::Error::success();
}

} // namespace lwcc
