//===- MicroBatch.cpp - The step as M micro-batches -----------------------===//
#include "passes/BatchSplit.h"
#include "passes/Pass.h"
#include "passes/PassOptions.h"
#include "passes/TrainingSupport.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace lwcc {

namespace {

/// How a value of the step is held once the batch is cut into micro-batches.
///   Shared:  one value for every micro-batch (params, what only they feed).
///   Batched: M pieces, piece m the rows of micro-batch m along `dim`.
///   PerMb:   M values, one per micro-batch, not pieces of a whole (a batch
///            norm's statistics of its micro-batch, what they feed).
struct Dist {
  enum Kind { Shared, Batched, PerMb } kind = Shared;
  int64_t dim = -1;
  std::vector<Value*> pieces;
};

class MicroBatcher {
public:
  /// `only` (fragments): only these ops run per piece of the batch, each
  /// other op once on the whole batch; `suffix` names the pieces' values
  /// (x.mb0, x.fr0).
  MicroBatcher(Graph& g, int64_t m, const std::set<const Op*>* only = nullptr,
               std::string suffix = "mb")
      : g_(g), b_(g), names_(g), m_(m), only_(only), suffix_(std::move(suffix)) {}

  /// The ops that could run on pieces of the batch as fragments: each reads
  /// rows of the batch and its rule splits it along them into results that
  /// all hold the pieces' rows (not a batch norm's statistics, a loss or a
  /// mean over samples), reading no param chained through the batch. The
  /// graph is unchanged.
  llvm::Expected<std::vector<Op*>> splittable() {
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

  llvm::Error run() {
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

private:
  /// The batch: dim 0 of the data and label inputs, which must agree.
  llvm::Error findBatch() {
    for (const auto& in : g_.inputs()) {
      if (in->type().rank() == 0)
        continue;
      int64_t n = in->type().shape[0];
      if (n_ == 0)
        n_ = n;
      else if (n != n_)
        return makeError(in->loc(),
                         llvm::formatv("microbatch: input '%{0}' has {1} rows, another input {2}: "
                                       "the inputs must share the batch dim",
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

  /// Params that an assign updates from a value computed from the batch
  /// (batch norm's running statistics): each micro-batch updates them in
  /// turn, so ops reading them run per micro-batch.
  void findChainedParams() {
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

  const Dist& distOf(const Value* v) {
    static const Dist shared;
    auto it = dist_.find(v);
    return it == dist_.end() ? shared : it->second;
  }

  llvm::Error visit(Op& op) {
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

  /// Fragments: an op not cut runs once on the whole batch (the pieces it
  /// reads concatenated), and its results that hold the batch's rows (as
  /// its rule splits it) are sliced where a fragment reads them.
  llvm::Error whole(Op& op) {
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

  /// A split of the op along the sample dims of its batched operands, or
  /// nullopt: the dim of the op's rule and the plan.
  std::pair<std::optional<SplitPlan>, int64_t> choosePlan(const Op& op) {
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
      if (sv->type().shape[d] != n_)
        continue;
      auto plan = op.info().parallel(op, d);
      if (!plan)
        continue;
      bool fits = true;
      for (unsigned j = 0; j < op.numOperands() && fits; ++j) {
        const Dist& dj = distOf(op.operand(j));
        int64_t want = plan->operandDims[j];
        if (dj.kind == Dist::Batched)
          fits = want == dj.dim;
        else if (dj.kind == Dist::PerMb)
          fits = want < 0;
        else if (want >= 0)
          fits = op.operand(j)->type().shape[want] == n_;
      }
      for (unsigned r = 0; r < op.numResults() && fits; ++r)
        if (plan->resultDims[r] >= 0)
          fits = op.result(r)->type().shape[plan->resultDims[r]] == n_;
      if (fits)
        return {std::move(plan), d};
    }
    return {std::nullopt, -1};
  }

  /// The op's config for micro-batch `mb`, whose split dim `dim` (of the
  /// value @par names) holds sizes_[mb] entries: explicit sizes along it
  /// are scaled to the micro-batch.
  llvm::Expected<std::optional<ParallelConfig>> configFor(const Op& op, int64_t dim, int64_t mb) {
    std::optional<ParallelConfig> par = op.annotations().par;
    if (!par || dim < 0)
      return par;
    int64_t rank = parSplitValue(op)->type().rank();
    for (const auto& [name, degree] : par->degrees) {
      if (degree < 2 || parDimIndex(name, rank) != dim)
        continue;
      int64_t size = sizes_[mb];
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
        double exact = static_cast<double>(par->sizes[i]) * static_cast<double>(size) /
                       static_cast<double>(n_);
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

  /// M copies of `op`, copy m on micro-batch m: split by `plan` along `dim`
  /// (batched operands by their piece, shared ones sliced where the plan
  /// splits them), or without a plan each copy on the whole operands.
  llvm::Error replicate(Op& op, const std::optional<SplitPlan>& plan, int64_t dim) {
    b_.setInsertionPointBefore(&op);
    b_.setLoc(op.loc());
    std::vector<std::vector<Value*>> results(op.numResults());
    for (int64_t mb = 0; mb < m_; ++mb) {
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
          t.shape[plan->resultDims[r]] = sizes_[mb];
        types.push_back(t);
      }
      Op* copy = b_.create(op.kind(), ins, types, op.attrs());
      copy->annotations() = op.annotations();
      copy->annotations().par = *par;
      copy->annotations().microBatch = mb;
      if (plan && op.info().localize)
        op.info().localize(*copy, op, dim, offsets_[mb]);
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
      copies_[&op].push_back(copy);
    }
    b_.setMicroBatch(std::nullopt);
    for (unsigned r = 0; r < op.numResults(); ++r) {
      Dist d;
      d.pieces = results[r];
      if (plan && plan->resultDims[r] >= 0) {
        d.kind = Dist::Batched;
        d.dim = plan->resultDims[r];
      } else if (plan && plan->partial != SplitPlan::Partial::None) {
        auto sum = combine(op, results[r], plan->partial == SplitPlan::Partial::Mean);
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

  /// The unbiased variance of a batch norm's running update (train-mode's
  /// multiply of the batch variance by n/(n-1), n the values per channel
  /// of the batch) takes each micro-batch's own n.
  llvm::Error unbiasFactor(const Op& op, std::vector<Value*>& ins, int64_t mb) {
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

  /// The piece of shared value `v` (or of an input) that micro-batch `mb`
  /// reads along `dim` (of size n_): the op that makes `v` computing just
  /// that piece when it can (a dropout mask keyed by the whole mask's
  /// element indices), else a slice of `v`.
  llvm::Expected<Value*> sharedPiece(Value* v, int64_t dim, int64_t mb,
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
        t.shape[dim] = sizes_[mb];
        Op* copy = b_.create(def->kind(), def->operands(), {t}, def->attrs());
        copy->annotations() = def->annotations();
        copy->annotations().par = *par;
        copy->annotations().microBatch = mb;
        def->info().localize(*copy, *def, dim, offsets_[mb]);
        piece = copy->result();
        piece->setName(
            names_(v->name().empty() ? suffix_ : v->name() + "." + suffix_ + std::to_string(mb)));
      }
    }
    if (!piece) {
      auto s =
          b_.createInferred(OpKind::Slice, {v},
                            {{"starts", Attribute(std::vector<int64_t>{offsets_[mb]})},
                             {"ends", Attribute(std::vector<int64_t>{offsets_[mb] + sizes_[mb]})},
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

  /// The step's value from the micro-batches' partial results: their sum,
  /// or for means each weighed by its micro-batch's share of the batch. On
  /// the first device of the op's config.
  llvm::Expected<Value*> combine(const Op& op, const std::vector<Value*>& parts, bool mean) {
    std::optional<ParallelConfig> at;
    if (op.annotations().par) {
      ParallelConfig one;
      const auto& devs = op.annotations().par->devices;
      one.devices = {devs.empty() ? 0 : devs[0]};
      at = one;
    }
    Value* acc = nullptr;
    for (int64_t mb = 0; mb < m_; ++mb) {
      Value* y = parts[static_cast<size_t>(mb)];
      if (mean) {
        Op* share =
            b_.create(OpKind::Constant, {}, {TensorType(y->type().dtype, {})},
                      {{"value", Attribute(std::vector<double>{static_cast<double>(sizes_[mb]) /
                                                               static_cast<double>(n_)})}});
        auto w = b_.createInferred(OpKind::Mul, {y, share->result()});
        if (!w)
          return w.takeError();
        (*w)->annotations().par = at;
        y = (*w)->result();
      }
      if (acc) {
        auto s = b_.createInferred(OpKind::Add, {acc, y});
        if (!s)
          return s.takeError();
        (*s)->annotations().par = at;
        acc = (*s)->result();
      } else {
        acc = y;
      }
    }
    return acc;
  }

  /// The whole batch of a batched value, its pieces concatenated, before
  /// `before` (null: at the insertion point).
  llvm::Expected<Value*> gather(Value* v, const Dist& d, Op* before) {
    if (before)
      b_.setInsertionPointBefore(before);
    b_.setMicroBatch(std::nullopt);
    auto c = b_.createInferred(OpKind::Concat, d.pieces, {{"axis", Attribute(d.dim)}});
    if (!c)
      return c.takeError();
    (*c)->result()->setName(names_(v->name().empty() ? "batch" : v->name() + ".batch"));
    return (*c)->result();
  }

  /// An op that cannot run on micro-batches runs once, on the whole batch.
  llvm::Error wholeBatch(Op& op) {
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

  /// assign(p, x) with x computed per micro-batch: micro-batch m's ops
  /// read p as micro-batch m-1 left it, and p takes the last one's value.
  llvm::Error chain(Op& assign) {
    Value* p = assign.operand(0);
    const Dist& d = distOf(assign.operand(1));
    if (d.kind == Dist::Shared)
      return llvm::Error::success();
    if (d.kind == Dist::Batched)
      return assign.emitError("microbatch: a param is assigned a value of the batch's rows");
    for (const auto& [orig, copies] : copies_)
      for (size_t mb = 1; mb < copies.size(); ++mb)
        for (unsigned j = 0; j < copies[mb]->numOperands(); ++j)
          if (copies[mb]->operand(j) == p)
            copies[mb]->setOperand(j, d.pieces[mb - 1]);
    assign.setOperand(1, d.pieces.back());
    return llvm::Error::success();
  }

  /// Reorders the ops so that each comes after the ops whose results it
  /// reads (the chained updates read later copies), keeping the order
  /// where it can.
  static llvm::Error sortTopologically(Graph& g) {
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

  Graph& g_;
  Builder b_;
  UniqueNames names_;
  int64_t m_, n_ = 0;
  const std::set<const Op*>* only_;
  std::string suffix_;
  std::vector<int64_t> offsets_, sizes_;
  std::unordered_map<const Value*, Dist> dist_;
  std::unordered_set<const Value*> chained_;
  std::map<std::tuple<const Value*, int64_t, int64_t>, Value*> pieces_;
  std::unordered_map<const Value*, Value*> gathered_;
  std::map<const Op*, std::vector<Op*>> copies_;
  std::unordered_map<const Value*, const Op*> bnVar_;
  std::vector<Op*> replaced_;
  std::vector<std::pair<Value*, std::string>> renamed_;
};

/// Cuts the step's batch into M micro-batches (m=M): each op that reads
/// the batch runs once per micro-batch on its rows, and the step sums what
/// the micro-batches give (gradient accumulation once autodiff has run):
///  1. The batch is dim 0 of the inputs; micro-batch i holds N/M rows, the
///     first N%M micro-batches one more.
///  2. In order, an op reading the batch runs M times (@mb(i)), split along
///     its samples as its parallel rule says (as data parallelism splits
///     it): a shared operand the rule splits is sliced (a dropout mask is
///     drawn for the micro-batch's rows of the whole mask, so masks keep
///     each sample's global index); results split the same way hold the
///     micro-batch's rows; partial results (the loss, means over samples)
///     are summed, means weighed by each micro-batch's share of the batch;
///     other results (a batch norm's statistics) are the micro-batch's own.
///     An op reading the batch that no rule splits runs once on the
///     concatenated rows.
///  3. A param an assign updates from the batch (running statistics) is
///     updated by each micro-batch in turn: micro-batch i reads what i-1
///     computed and the assign takes the last; the unbiased variance's
///     n/(n-1) becomes each micro-batch's own.
///  4. Ops that read no batch run once; the ops are reordered to keep
///     definitions before uses. Copies keep their op's config (@par),
///     explicit piece sizes scaled to the micro-batch.
/// m=1 changes nothing.
class MicroBatchPass : public Pass {
public:
  explicit MicroBatchPass(int64_t m) : m_(m) {}
  std::string_view name() const override { return "microbatch"; }

  llvm::Error run(Graph& g, PassContext&) override {
    if (m_ == 1)
      return llvm::Error::success();
    if (llvm::Error e = requireNotDifferentiated(g, "microbatch"))
      return e;
    for (const auto& op : g.ops()) {
      if (op->annotations().microBatch)
        return op->emitError("microbatch: the graph has micro-batches already");
      if (op->annotations().device || op->info().isCommunication())
        return op->emitError("microbatch: the graph is materialized already (microbatch runs "
                             "before materialize)");
    }
    return MicroBatcher(g, m_).run();
  }

private:
  int64_t m_;
};

} // namespace

llvm::Error splitBatch(Graph& g, int64_t pieces, const std::set<const Op*>* only,
                       const std::string& suffix) {
  return MicroBatcher(g, pieces, only, suffix).run();
}

llvm::Expected<std::vector<Op*>> batchSplittableOps(Graph& g) {
  return MicroBatcher(g, 1).splittable();
}

/// An error unless `g` is not differentiated yet (`pass` runs before
/// autodiff).
llvm::Error requireNotDifferentiated(const Graph& g, const std::string& pass) {
  for (size_t i = 0; i < g.outputs().size(); ++i)
    if (g.outputGradOf(i))
      return makeError(pass + ": graph @" + g.name() + " is differentiated already (" + pass +
                       " runs before autodiff)");
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<Pass>> createMicroBatchPass(std::string_view options) {
  auto opts = PassOptions::parse("microbatch", options, "m", {"m"});
  if (!opts)
    return opts.takeError();
  auto m = opts->getInt("m", 1);
  if (!m)
    return m.takeError();
  if (*m < 1 || *m > 4096)
    return makeError("microbatch: m must be in 1..4096, got " + std::to_string(*m));
  return std::make_unique<MicroBatchPass>(*m);
}

} // namespace lwcc
