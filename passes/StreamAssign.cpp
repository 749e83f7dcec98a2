//===- StreamAssign.cpp - The streams of each device's step ---------------===//
//
// Decides which stream of its device each op runs on; the place-events pass
// then orders the streams with record and wait ops wherever an op depends on
// another stream's, through a value or through planned bytes that are
// reused, and the schedule verifier proves the result.
//
// streams=2 and more: weight gradients and updates on stream 1. It gets
//  - the optimizer: lr_schedule, sgd_update, adam_update and the assigns;
//  - the ops whose results are all used only by those or as graph outputs
//    other than #0 (the loss stays on 0): each param's final gradient
//    computation (conv2d_grad_filter, the gemm of a weight gradient, the
//    bias reductions), which nothing on the data-gradient chain waits for.
//  The rule does not propagate further up: a data gradient that only weight
//  gradients use (the first layer's) could go too, but then, transitively,
//  would the whole chain above it.
//
// streams=3 and more: independent branches on streams of their own (the
// branches of an inception block, a residual block's shortcut, and their
// gradients in the backward pass). As Nimble does, the rest of each device's
// ops are covered by chains, paths of the dependence graph; here each chain
// follows, from its last op, the reader with the most work after it (the
// critical path), so that the first chain of a device (the trunk, kept on
// stream 0) is its longest; an op no chain continues starts a new one. Each
// other chain is a branch that may run beside the ops it does not depend
// on. Branches go round-robin on streams-2 branch streams, numbered after
// every stream already in use (grad-sync's all-reduces on 1, a pipeline's
// transfers on 2..5).
//
// policy=sim (the default) keeps a branch on its stream only where the
// simulator predicts a shorter step with it there than without (greedily,
// in graph order, on the cost model of spec/profile): a branch of kernels
// that each fill the device gains nothing, since the simulator lets a
// device's streams share it by the kernels' parallel work (CostModel::fill),
// and an event costs a wake-up (the spec's, or the one the profile
// measured); a gain of less than one wake-up is not taken. policy=all
// moves every branch with compute-bound work (to measure, and to test the
// events).
//
// Streams chosen earlier (grad-sync's all-reduces, a pipeline's transfers)
// stay. Options: streams=N (1..8; 1 puts everything on stream 0, which
// prints as no annotation), policy=sim|all, spec, devices_per_node,
// profile, tf32, report=1 (a note of what moved and the predicted steps).
//
//===----------------------------------------------------------------------===//
#include "cost/Simulator.h"
#include "passes/Pass.h"
#include "passes/PassOptions.h"

#include "llvm/Support/FormatVariadic.h"

#include <map>
#include <set>

namespace lwcc {

namespace {

constexpr int64_t kMaxStreams = 8;

struct StreamAssignOptions {
  int64_t streams = 2;
  bool simPolicy = true;
  bool report = false;
};

/// A path of the dependence graph on one device.
struct Chain {
  int64_t device = 0;
  std::vector<Op*> ops;
  double seconds = 0; ///< the cost model's time of its ops
  bool heavy = false; ///< holds a compute-bound op
};

class StreamAssignPass : public Pass {
public:
  StreamAssignPass(StreamAssignOptions o, CostModel cm) : o_(o), cm_(std::move(cm)) {}
  std::string_view name() const override { return "stream-assign"; }

  llvm::Error run(Graph& g, PassContext& ctx) override {
    if (o_.streams < 2) {
      for (auto& op : g.ops())
        op->annotations().stream.reset();
      return llvm::Error::success();
    }
    std::vector<Op*> order;
    for (auto& op : g.ops())
      order.push_back(op.get());
    weightGradients(order);
    if (o_.streams < 3)
      return llvm::Error::success();
    return branches(g, order, ctx);
  }

private:
  /// Weight gradients and updates on stream 1.
  void weightGradients(const std::vector<Op*>& order) {
    std::set<const Op*> side;
    for (Op* op : order)
      if (op->kind() == OpKind::LrSchedule || op->kind() == OpKind::SgdUpdate ||
          op->kind() == OpKind::AdamUpdate || op->kind() == OpKind::Assign)
        side.insert(op);
    const std::set<const Op*> optimizer = side;
    for (Op* op : order) {
      // Communication ops keep the streams their passes chose (grad-sync's
      // all-reduces, a pipeline's transfers) and are placed by their
      // attributes, not by @dev.
      if (side.count(op) || op->numResults() == 0 || op->info().isCommunication())
        continue;
      bool onlySide = true;
      for (unsigned r = 0; r < op->numResults() && onlySide; ++r) {
        if (!op->result(r)->hasUses())
          onlySide = false;
        for (const Use& u : op->result(r)->uses())
          if (u.user ? !optimizer.count(u.user) : u.index == 0) // output #0: the loss
            onlySide = false;
      }
      if (onlySide)
        side.insert(op);
    }
    for (Op* op : order) { // a stream belongs to a device: the one there is
      if (!side.count(op) || op->annotations().stream.value_or(0) != 0)
        continue; // already on a stream of its own
      op->annotations().device = op->annotations().device.value_or(0);
      op->annotations().stream = 1;
    }
  }

  static bool onStreamZero(const Op& op) {
    return op.annotations().stream.value_or(0) == 0 && !op.info().isCommunication() &&
           !op.info().isEvent() && op.kind() != OpKind::Constant && op.numResults() > 0;
  }

  /// Independent chains on branch streams.
  llvm::Error branches(Graph& g, const std::vector<Op*>& order, PassContext& ctx) {
    int64_t used = 1;
    for (Op* op : order)
      used = std::max(used, op->annotations().stream.value_or(0));
    const int64_t base = used + 1, count = o_.streams - 2;
    std::map<const Op*, size_t> positions;
    for (Op* op : order)
      positions.emplace(op, positions.size());
    auto position = [&](const Op* op) { return positions.at(op); };

    // The chain cover, along the longest paths: each op's heir is the op
    // reading it (on its device, not yet on a stream of its own) with the
    // most work from there to the end of the step, ties to the first in
    // graph order; an op continues the chain of the first operand whose
    // heir it is, else starts one. The trunk so follows the critical path,
    // and a batch norm's running statistics or a shortcut branch off it.
    std::map<const Op*, double> down; // the op's time and its heaviest path on
    std::map<const Op*, const Op*> heir;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      Op* op = *it;
      if (!onStreamZero(*op))
        continue;
      int64_t dev = op->annotations().device.value_or(0);
      double most = 0;
      const Op* best = nullptr;
      for (unsigned r = 0; r < op->numResults(); ++r)
        for (const Use& u : op->result(r)->uses()) {
          auto d = u.user ? down.find(u.user) : down.end();
          if (d == down.end() || u.user->annotations().device.value_or(0) != dev)
            continue;
          if (d->second > most ||
              (d->second == most && best && position(u.user) < position(best)) || !best) {
            most = d->second;
            best = u.user;
          }
        }
      down[op] = cm_.opSeconds(*op) + most;
      if (best)
        heir[op] = best;
    }
    std::vector<Chain> chains;
    std::map<const Op*, size_t> chainOf;
    for (Op* op : order) {
      if (!onStreamZero(*op))
        continue;
      int64_t dev = op->annotations().device.value_or(0);
      std::optional<size_t> joined;
      for (Value* v : op->operands()) {
        const Op* def = v->definingOp();
        auto it = def ? chainOf.find(def) : chainOf.end();
        auto h = def ? heir.find(def) : heir.end();
        if (it != chainOf.end() && h != heir.end() && h->second == op &&
            chains[it->second].ops.back() == def) {
          joined = it->second;
          break;
        }
      }
      if (!joined) {
        joined = chains.size();
        chains.push_back({dev, {}, 0});
      }
      chains[*joined].ops.push_back(op);
      chains[*joined].seconds += cm_.opSeconds(*op);
      double written = 0;
      for (unsigned r = 0; r < op->numResults(); ++r)
        written += static_cast<double>(op->result(r)->type().numElements());
      chains[*joined].heavy |= cm_.flops(*op) > 4 * written;
      chainOf[op] = *joined;
    }

    std::optional<double> before;
    if (o_.simPolicy || o_.report) {
      auto sim = simulate(g, simCosts(cm_));
      if (!sim)
        return sim.takeError();
      before = sim->stepSeconds;
    }
    double best = before.value_or(0);
    std::set<int64_t> trunkSeen;
    std::map<int64_t, int64_t> next; // per device: the next branch stream, round-robin
    int64_t moved = 0, branchCount = 0, movedOps = 0;
    for (Chain& c : chains) {
      if (trunkSeen.insert(c.device).second)
        continue; // the device's first chain: the trunk, on stream 0
      // Views only: nothing to run. With policy=all, only chains with
      // compute-bound work (an op of more than a few FLOPs per element it
      // writes: convolutions, matrix products, pooling and their
      // gradients), not a batch norm's running statistics.
      if (!(c.seconds > 0) || (!o_.simPolicy && !c.heavy))
        continue;
      ++branchCount;
      const int64_t stream = base + next[c.device] % count;
      std::vector<std::optional<int64_t>> devices; // as they were, to undo the move
      for (Op* op : c.ops) {
        devices.push_back(op->annotations().device);
        op->annotations().device = c.device; // a stream belongs to a device
        op->annotations().stream = stream;
      }
      if (o_.simPolicy) {
        auto sim = simulate(g, simCosts(cm_));
        if (!sim)
          return sim.takeError();
        // A gain must exceed one wake-up: the events a branch adds block
        // their streams at times a replay of mean op times places only
        // roughly (0 on GPUs, whose streams wait in hardware).
        if (!(sim->stepSeconds < best * (1 - 1e-9) - cm_.wakeSeconds())) {
          for (size_t k = 0; k < c.ops.size(); ++k) { // no gain: back on stream 0
            c.ops[k]->annotations().device = devices[k];
            c.ops[k]->annotations().stream.reset();
          }
          continue;
        }
        best = sim->stepSeconds;
      }
      ++next[c.device];
      ++moved;
      movedOps += static_cast<int64_t>(c.ops.size());
    }
    if (o_.report && ctx.diag) {
      auto sim = simulate(g, simCosts(cm_));
      if (!sim)
        return sim.takeError();
      ctx.diag(Severity::Note, Location{},
               llvm::formatv("stream-assign: {0} of {1} branches ({2} ops) on streams {3}..{4}; "
                             "predicted step on {5}: {6:f3} ms, {7:f3} ms without them",
                             moved, branchCount, movedOps, base, base + count - 1, cm_.spec().name,
                             sim->stepSeconds * 1e3, *before * 1e3)
                   .str());
    }
    return llvm::Error::success();
  }

  StreamAssignOptions o_;
  CostModel cm_;
};

} // namespace

llvm::Expected<std::unique_ptr<Pass>> createStreamAssignPass(std::string_view options) {
  auto parsed = PassOptions::parse("stream-assign", options, "streams",
                                   {"streams", "policy", "spec", "devices_per_node",
                                    "devices_per_gpu", "profile", "tf32", "report"});
  if (!parsed)
    return parsed.takeError();
  StreamAssignOptions o;
  auto streams = parsed->getIntIn("streams", 2, 1, kMaxStreams);
  if (!streams)
    return streams.takeError();
  o.streams = *streams;
  auto policy = parsed->getChoice("policy", "sim", {"sim", "all"});
  if (!policy)
    return policy.takeError();
  o.simPolicy = *policy == "sim";
  auto report = parsed->getFlag("report", false);
  if (!report)
    return report.takeError();
  o.report = *report;
  auto cm = costModelFromOptions(*parsed);
  if (!cm)
    return cm.takeError();
  return std::make_unique<StreamAssignPass>(o, std::move(*cm));
}

} // namespace lwcc
