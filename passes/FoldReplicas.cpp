//===- FoldReplicas.cpp - Devices that run the same ops priced once -------===//
#include "passes/Pass.h"
#include "passes/PassOptions.h"

#include <algorithm>
#include <functional>
#include <map>
#include <string_view>
#include <unordered_map>

namespace lwcc {

namespace {

/// On a materialized step the planner only prices (not one it keeps):
/// devices whose ops are those of another device are left out, and that
/// device's ops stand for theirs (Graph::foldedInto). Data parallelism on N
/// devices becomes the loss's root and one other device; the plan's
/// simulated step and each device's memory stay what the whole step's are.
///  1. Each device's ops in program order. A device is another's copy when
///     the two sequences match op for op: a compute op of the same kind,
///     layer, stream, micro-batch and operand and result types (its time and
///     its buffers), and a communication op the very same op, the device
///     being its root in both or in neither; each operand from the same
///     place (the result of the same op of the sequence, a copy of the same
///     param, or the same value) and the same results outputs of the graph,
///     so that every value lives as long and backward is the same. The
///     first device of each kind stands for the others (device 0 always
///     stands for itself).
///  2. A left-out device's compute ops are erased; where a communication op
///     reads one of its values, it reads a constant of that type on that
///     device instead (which takes no time). Every communication op stays:
///     its participants' streams and links are busy as in the whole step,
///     and it starts once the last of them is ready, which for a copy is
///     when the device standing for it is. Autodiff then gives the
///     collective's results there a zero gradient, and grad-sync all-reduces
///     the gradients of every copy of a param (zeros on a left-out device).
/// Copies are exact under a cost model whose devices share nothing but the
/// communication ops' links: not with a measured profile, nor where the
/// devices of a node share its cores (the planner folds only then). Nothing
/// is folded where a left-out device's value is read by another device's
/// compute, is a graph output, or where no device is a copy; a step of
/// pipeline stages is not (a copy's transfers are ops of their own).
/// replicas=R: a pipeline's stages of R replicas each (stage s on devices
/// s*R .. s*R+R-1), device s*R standing for the stage's others without
/// the match of step 1 (their transfers to their own replicas of the next
/// stages are ops of their own, reading zeros once folded): not the whole
/// step's price, a piece of one the planner's compact price reads
/// (plan/PipelinePreview.h), whose collectives inside a stage (batch
/// norm's statistics, the gradients' all-reduce) still span its replicas.
class FoldReplicasPass : public Pass {
public:
  explicit FoldReplicasPass(int64_t replicas) : replicas_(replicas) {}
  std::string_view name() const override { return "fold-replicas"; }

  llvm::Error run(Graph& g, PassContext&) override {
    if (replicas_ > 1) {
      std::map<int64_t, int64_t> into;
      for (const auto& op : g.ops())
        if (!op->info().isCommunication())
          if (int64_t d = opDevice(*op); d % replicas_ != 0)
            into[d] = d - d % replicas_;
      return fold(g, std::move(into));
    }
    // Cheaply first: the communication ops each device takes part in and
    // how many compute ops it runs between them. A device can be a copy
    // only of one that matches it there (a pipeline's devices never do).
    std::map<int64_t, size_t> commHash;
    std::vector<int64_t> here;
    for (const auto& op : g.ops()) {
      if (!op->info().isCommunication()) {
        commHash[opDevice(*op)] += 1;
        continue;
      }
      participants(*op, here);
      for (int64_t d : here) {
        size_t& h = commHash[d];
        h = (h * 1000003) ^ (std::hash<const Op*>()(op.get()) + (isRoot(*op, d) ? 1 : 0));
      }
    }
    if (commHash.size() < 3)
      return llvm::Error::success();
    std::map<size_t, int64_t> sharing; // comm hash -> devices with it
    for (const auto& [d, h] : commHash)
      ++sharing[h];
    if (std::none_of(sharing.begin(), sharing.end(), [](const auto& s) { return s.second > 1; }))
      return llvm::Error::success();
    // Each device's ops (a communication op's operands and results there).
    std::map<int64_t, std::vector<Entry>> seq;
    std::map<int64_t, Entry> at;
    for (const auto& op : g.ops()) {
      if (!op->info().isCommunication()) {
        seq[opDevice(*op)].push_back({op.get(), {}, {}});
        continue;
      }
      at.clear();
      for (unsigned i = 0; i < op->numOperands(); ++i)
        at[operandDevice(*op, i)].operands.push_back(i);
      for (unsigned r = 0; r < op->numResults(); ++r)
        at[valueDevice(op->result(r)).value_or(0)].results.push_back(r);
      for (auto& [d, e] : at) {
        e.op = op.get();
        seq[d].push_back(std::move(e));
      }
    }

    std::map<int64_t, std::vector<int64_t>> tokens;
    Interner interner;
    for (size_t i = 0; i < g.outputs().size(); ++i)
      interner.outputs.emplace(g.outputs()[i], static_cast<int64_t>(i) + 1);
    std::vector<int64_t> reps;
    std::map<int64_t, int64_t> into;
    std::map<int64_t, size_t> hashes;
    for (const auto& [d, ops] : seq) {
      if (sharing[commHash[d]] < 2) {
        reps.push_back(d);
        continue;
      }
      std::vector<int64_t>& t = tokens[d] = tokensOf(ops, d, interner);
      size_t h = t.size();
      for (int64_t x : t)
        h = h * 1000003 ^ static_cast<size_t>(x);
      hashes[d] = h;
      auto rep = std::find_if(reps.begin(), reps.end(), [&, d = d](int64_t r) {
        return hashes.count(r) && hashes[r] == hashes[d] && tokens[r] == tokens[d];
      });
      if (rep == reps.end())
        reps.push_back(d);
      else
        into[d] = *rep;
    }
    return fold(g, std::move(into));
  }

private:
  int64_t replicas_;

  /// Leaves out the devices of `into` (step 2), where their values are
  /// read only by their own ops and by communication ops.
  static llvm::Error fold(Graph& g, std::map<int64_t, int64_t> into) {
    if (into.empty())
      return llvm::Error::success();
    // A left-out device's values are read only by its own ops and by
    // communication ops, and none is an output.
    auto leftOut = [&](const Op& op) {
      return !op.info().isCommunication() && into.count(opDevice(op));
    };
    for (const Value* v : g.outputs())
      if (const Op* def = v->definingOp(); def && leftOut(*def))
        return llvm::Error::success();
    std::vector<Op*> erased; // taken before the constants, on the same devices
    for (auto& op : g.ops()) {
      if (!leftOut(*op))
        continue;
      for (unsigned r = 0; r < op->numResults(); ++r)
        for (const Use& u : op->result(r)->uses())
          if (!u.user->info().isCommunication() && !leftOut(*u.user))
            return llvm::Error::success();
      erased.push_back(op.get());
    }
    Builder b(g);
    for (auto& op : g.ops()) {
      if (!op->info().isCommunication())
        continue;
      for (unsigned i = 0; i < op->numOperands(); ++i) {
        Value* v = op->operand(i);
        const Op* def = v->definingOp();
        if (!def || !leftOut(*def))
          continue;
        b.setInsertionPointBefore(op.get());
        b.setLoc(op->loc());
        b.setDevice(operandDevice(*op, i));
        b.setMicroBatch(op->annotations().microBatch);
        Op* zero = b.create(OpKind::Constant, {}, {v->type()},
                            {{"value", Attribute(std::vector<double>{0.0})}});
        op->setOperand(i, zero->result());
      }
    }
    for (auto it = erased.rbegin(); it != erased.rend(); ++it) {
      if ((*it)->hasUsedResults())
        return (*it)->emitError("fold-replicas: a left-out device's value is still read");
      g.eraseOp(*it);
    }
    g.setFoldedInto(std::move(into));
    return llvm::Error::success();
  }

  /// An op of a device: a communication op with the operands and results
  /// on that device.
  struct Entry {
    const Op* op;
    std::vector<unsigned> operands, results;
  };

  /// Ids for what two devices' ops must share: names, types, values.
  struct Interner {
    struct TypeHash {
      size_t operator()(const TensorType& t) const {
        size_t h = static_cast<size_t>(t.dtype);
        for (int64_t s : t.shape)
          h = h * 31 + static_cast<size_t>(s);
        return h;
      }
    };
    std::unordered_map<std::string_view, int64_t> names; // views of the ops' own strings
    std::unordered_map<TensorType, int64_t, TypeHash> types;
    std::unordered_map<const void*, int64_t> pointers;
    std::unordered_map<const Value*, int64_t> outputs; ///< the graph's, numbered from 1
    int64_t name(std::string_view s) {
      return names.emplace(s, static_cast<int64_t>(names.size())).first->second;
    }
    int64_t type(const TensorType& t) {
      if (auto it = types.find(t); it != types.end())
        return it->second;
      return types.emplace(t, static_cast<int64_t>(types.size())).first->second;
    }
    int64_t pointer(const void* p) {
      return pointers.emplace(p, static_cast<int64_t>(pointers.size())).first->second;
    }
    int64_t output(const Value* v) const {
      auto it = outputs.find(v);
      return it == outputs.end() ? 0 : it->second;
    }
  };

  /// The devices communication op `op` reads or writes on, in order, once each.
  static void participants(const Op& op, std::vector<int64_t>& out) {
    out.clear();
    for (unsigned i = 0; i < op.numOperands(); ++i)
      out.push_back(operandDevice(op, i));
    for (unsigned r = 0; r < op.numResults(); ++r)
      out.push_back(valueDevice(op.result(r)).value_or(0));
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  }

  /// Whether device `d` is the root of communication op `op`.
  static bool isRoot(const Op& op, int64_t d) {
    for (const char* key : {"src", "dst"})
      if (op.info().findAttr(key) && op.getInt(key) == d)
        return true;
    return false;
  }

  /// Device `d`'s ops as numbers that two devices share exactly when their
  /// ops are copies: each compute op's kind, layer, stream, micro-batch and
  /// types; each communication op itself and whether `d` is its root; and
  /// where each operand comes from (a result of the device's own k-th op, a
  /// param's initializer, or the very same value) and which results are
  /// outputs of the graph, which fixes every value's lifetime (and what
  /// autodiff differentiates).
  static std::vector<int64_t> tokensOf(const std::vector<Entry>& ops, int64_t d, Interner& in) {
    std::vector<int64_t> t;
    std::unordered_map<const Value*, int64_t> local; // the device's values, numbered in order
    // Whether each local value's type is in the tokens already (a compute
    // op's result: then its uses need not say it again).
    std::vector<bool> typed;
    auto operand = [&](const Value* v) {
      if (auto it = local.find(v); it != local.end()) {
        t.push_back(1);
        t.push_back(it->second);
        if (typed[static_cast<size_t>(it->second)])
          return;
      } else if (v->kind() == ValueKind::Param) {
        t.push_back(2);
        t.push_back(in.name(v->paramName()));
      } else {
        t.push_back(3);
        t.push_back(in.pointer(v));
      }
      t.push_back(in.type(v->type()));
    };
    for (const Entry& e : ops) {
      const Op& op = *e.op;
      if (op.info().isCommunication()) {
        t.push_back(-1 - in.pointer(&op));
        t.push_back(isRoot(op, d) ? 1 : 0);
        for (unsigned i : e.operands)
          operand(op.operand(i));
        t.push_back(static_cast<int64_t>(e.results.size()));
        for (unsigned r : e.results) {
          local.emplace(op.result(r), static_cast<int64_t>(local.size()));
          typed.push_back(false);
          t.push_back(in.output(op.result(r)));
        }
        continue;
      }
      const Annotations& a = op.annotations();
      t.push_back(static_cast<int64_t>(op.kind()));
      t.push_back(in.name(op.loc().name));
      t.push_back(a.stream.value_or(0));
      t.push_back(a.microBatch.value_or(-1));
      t.push_back(op.numOperands());
      for (const Value* v : op.operands())
        operand(v);
      t.push_back(op.numResults());
      for (unsigned r = 0; r < op.numResults(); ++r) {
        t.push_back(in.type(op.result(r)->type()));
        t.push_back(in.output(op.result(r)));
        local.emplace(op.result(r), static_cast<int64_t>(local.size()));
        typed.push_back(true);
      }
    }
    return t;
  }
};

} // namespace

llvm::Expected<std::unique_ptr<Pass>> createFoldReplicasPass(std::string_view options) {
  auto opts = PassOptions::parse("fold-replicas", options, "replicas", {"replicas"});
  if (!opts)
    return opts.takeError();
  auto replicas = opts->getIntIn("replicas", 0, 0, 1 << 20);
  if (!replicas)
    return replicas.takeError();
  return std::make_unique<FoldReplicasPass>(*replicas);
}

} // namespace lwcc
