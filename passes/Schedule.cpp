//===- Schedule.cpp - The order of micro-batches on each device -----------===//
#include "passes/Schedule.h"

#include "passes/Pass.h"
#include "passes/PassOptions.h"
#include "passes/TrainingSupport.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>

namespace lwcc {

namespace {

using Order = PipelineOrder;
using Task = PipelineTask;

const char* orderName(Order o) {
  return o == Order::GPipe ? "gpipe" : o == Order::ZeroBubbleH1 ? "zb-h1" : "1f1b";
}

class Scheduler {
public:
  Scheduler(Graph& g, Order order) : g_(g), order_(order) {}

  llvm::Error run() {
    for (auto& op : g_.ops()) {
      index_[op.get()] = ops_.size();
      ops_.push_back(op.get());
      if (op->annotations().microBatch)
        m_ = std::max(m_, *op->annotations().microBatch + 1);
    }
    if (m_ == 0)
      return llvm::Error::success(); // no micro-batches: the order stays
    findStages();
    findWeightGradients();
    gate();
    return order();
  }

private:
  /// Transfers between stages go on streams of their own.
  void findStages() {
    PipelineShape shape = pipelineShapeOf(g_);
    backward_ = shape.backward;
    feedsBackward_ = shape.feedsBackward;
    passedOn_ = shape.passedOn;
    stageOf_ = shape.stageOf;
    stages_ = shape.stages;
    if (stages_ == 1)
      return;
    int64_t reach = 1, used = 1; // the most stages a transfer crosses; the last stream in use
    for (size_t i = 0; i < ops_.size(); ++i) {
      Op& op = *ops_[i];
      used = std::max(used, op.annotations().stream.value_or(0));
      if (op.kind() != OpKind::DeviceCopy ||
          stageOf_[op.getInt("src")] == stageOf_[op.getInt("dst")])
        continue;
      transfer_.insert(&op);
      if (op.annotations().microBatch && (backward_[i] || feedsBackward_[i]))
        reach = std::max(reach, std::abs(stageOf_[op.getInt("src")] - stageOf_[op.getInt("dst")]));
    }
    const int64_t colors = reach + 1, first = std::max(kFirstTransferStream, used + 1);
    for (size_t i = 0; i < ops_.size(); ++i)
      if (transfer_.count(ops_[i]))
        ops_[i]->annotations().stream =
            transferStream(first, colors, stageOf_[ops_[i]->getInt("src")], backward_[i]);
  }

  /// The backward ops a gradient sent to the previous stage is computed
  /// from (input_: each backward task runs them first, so that the stage
  /// before gets its input early); zb-h1: the other backward ops of a
  /// micro-batch (weight gradients, and what only they read: weight_), on
  /// the first stage, which sends none, every backward op.
  void findWeightGradients() {
    weight_.assign(ops_.size(), false);
    input_.assign(ops_.size(), false);
    if (stages_ == 1)
      return;
    std::vector<bool>& input = input_;
    for (size_t i = ops_.size(); i-- > 0;) {
      const Op& op = *ops_[i];
      if (!backward_[i])
        continue;
      bool needed = transfer_.count(&op) > 0;
      for (unsigned r = 0; r < op.numResults() && !needed; ++r)
        for (const Use& u : op.result(r)->uses())
          needed = needed || (u.user && input[index_.at(u.user)]);
      input[i] = needed;
      weight_[i] =
          order_ == Order::ZeroBubbleH1 && !needed && op.annotations().microBatch.has_value();
    }
  }

  /// Which ops the schedule places: an op of a micro-batch runs in that
  /// micro-batch's forward or backward on each of its devices, unless it
  /// waits for a later task of its devices (a gradient summed over
  /// micro-batches, a value every micro-batch shares) or is a transfer
  /// between stages; those run as soon as what they read is there.
  void gate() {
    struct Deps {
      int64_t maxF = -1, maxB = -1;
    };
    std::vector<Deps> deps(ops_.size());
    task_.assign(ops_.size(), std::nullopt);
    for (size_t i = 0; i < ops_.size(); ++i) {
      const Op& op = *ops_[i];
      Deps d;
      for (Value* v : op.operands()) {
        const Op* p = v->definingOp();
        if (!p)
          continue;
        size_t j = index_.at(p);
        if (task_[j]) {
          (task_[j]->backward() ? d.maxB : d.maxF) =
              std::max(task_[j]->backward() ? d.maxB : d.maxF, task_[j]->mb);
        } else {
          d.maxF = std::max(d.maxF, deps[j].maxF);
          d.maxB = std::max(d.maxB, deps[j].maxB);
        }
      }
      deps[i] = d;
      auto mb = op.annotations().microBatch;
      if (!mb || op.kind() == OpKind::Constant || transfer_.count(&op))
        continue;
      // What no backward needs (batch norm's running statistics) runs in
      // its micro-batch's forward where it is computed to be sent to
      // another stage (in the backward, the stage of the param would wait
      // for the sender's backward of that micro-batch, which comes later
      // where the sender is the earlier stage), and in its backward where
      // it updates the param from what was received (in the forward, the
      // earlier stage would wait for the later one's forward).
      if (!feedsBackward_[i] && stages_ > 1 && !op.info().isCommunication()) {
        const bool forward = passedOn_[i] && d.maxB < 0 && d.maxF <= *mb;
        task_[i] = Task{*mb, forward ? Task::F : Task::B};
        continue;
      }
      bool ok = backward_[i] ? std::max(d.maxF, d.maxB) <= *mb : d.maxB < 0 && d.maxF <= *mb;
      if (ok)
        task_[i] = Task{*mb, !backward_[i] ? Task::F : weight_[i] ? Task::W : Task::B};
    }
  }

  llvm::Error order() {
    const size_t n = ops_.size();
    // Each op's devices, once: the loop below asks for them at every step.
    std::vector<std::vector<int64_t>> devices(n);
    for (size_t i = 0; i < n; ++i) {
      if (!ops_[i]->info().isCommunication()) {
        devices[i] = {opDevice(*ops_[i])};
        continue;
      }
      std::set<int64_t> d = devicesOf(*ops_[i]);
      devices[i].assign(d.begin(), d.end());
    }
    // What each op waits for: the ops whose results it reads, and for an
    // assign every other reader of its param (it overwrites the param).
    std::vector<int64_t> waiting(n, 0);
    std::vector<std::vector<size_t>> after(n);
    auto edge = [&](size_t from, size_t to) {
      after[from].push_back(to);
      ++waiting[to];
    };
    for (size_t i = 0; i < n; ++i) {
      for (Value* v : ops_[i]->operands())
        if (const Op* p = v->definingOp())
          edge(index_.at(p), i);
      if (ops_[i]->kind() == OpKind::Assign)
        for (const Use& u : ops_[i]->operand(0)->uses())
          if (u.user && u.user != ops_[i])
            edge(index_.at(u.user), i);
    }
    // Each device's tasks and the gated ops each still holds, by the
    // device's index among the devices (in order) and the task's code.
    std::vector<int64_t> ids;
    for (const auto& [d, s] : stageOf_)
      ids.push_back(d);
    for (const auto& d : devices)
      ids.insert(ids.end(), d.begin(), d.end());
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    auto dev = [&](int64_t d) {
      return static_cast<size_t>(std::lower_bound(ids.begin(), ids.end(), d) - ids.begin());
    };
    for (auto& d : devices)
      for (int64_t& e : d)
        e = static_cast<int64_t>(dev(e)); // from here on: indices
    const size_t tasks = 3 * static_cast<size_t>(m_);
    auto code = [&](size_t d, const Task& t) {
      return d * tasks + 3 * static_cast<size_t>(t.mb) + static_cast<size_t>(t.kind);
    };
    std::vector<std::vector<Task>> seq(ids.size());
    std::vector<size_t> pos(ids.size(), 0);
    std::vector<int64_t> left(ids.size() * tasks, 0);
    for (const auto& [d, s] : stageOf_)
      seq[dev(d)] = pipelineTasks(s, stages_, m_, order_);
    // In a backward task (with stages), what no gradient sent to the stage
    // before needs (weight gradients, their sums over micro-batches, batch
    // norm's running statistics: `late`) waits until the ops that gradient
    // is computed from (`leftInput`) have gone on each of its devices. This
    // order is each device's at run time: a late op listed first, because
    // the input gradient was not yet there when the list reached the task,
    // would hold the device before it (Inception-v3 at test size in 4
    // stages of 8 micro-batches on h100: 165 ops of running statistics
    // ahead of each backward's input gradient, a step of 29.1 ms for 15.9).
    std::vector<int64_t> leftInput(ids.size() * tasks, 0);
    auto late = [&](size_t i) {
      return stages_ > 1 && task_[i] && task_[i]->kind == Task::B && !input_[i];
    };
    for (size_t i = 0; i < n; ++i)
      if (task_[i])
        for (int64_t d : devices[i]) {
          ++left[code(d, *task_[i])];
          if (task_[i]->kind == Task::B && input_[i])
            ++leftInput[code(d, *task_[i])];
        }
    auto at = [&](size_t d, const Task& t) {
      return pos[d] < seq[d].size() && seq[d][pos[d]] == t;
    };
    // The ops no task holds go as soon as they are ready where they are
    // communication, feed a communication op (a gradient summed over
    // micro-batches for its all-reduce) or read a task's value (a sum that
    // frees a micro-batch's gradient); the others (the updates, and what
    // follows them) once no op of a task is due, not between a task's ops:
    // an update made ready by a backward's weight gradient would hold the
    // device's queue before the rest of that backward, whose input
    // gradient the stage before waits for (Inception-v3 in 16 stages of 16
    // micro-batches on p100-cluster: each stage's last backward behind its
    // updates, 2 ms a stage).
    std::vector<bool> goesFirst(n, false);
    for (size_t i = 0; i < n; ++i) {
      const Op& op = *ops_[i];
      bool first = op.info().isCommunication();
      for (Value* v : op.operands())
        if (const Op* p = v->definingOp())
          first = first || task_[index_.at(p)].has_value();
      for (unsigned r = 0; r < op.numResults() && !first; ++r)
        for (const Use& u : op.result(r)->uses())
          first = first || (u.user && u.user->info().isCommunication());
      goesFirst[i] = first;
    }
    std::set<size_t> freeReady, freeFirst;
    // The ready ops of each task, under each of their devices, and those of
    // them whose devices are all at their task (`due`: an op stays due until
    // it goes, as a device leaves a task only once its ops there have gone).
    std::vector<std::set<size_t>> gatedReady(ids.size() * tasks);
    std::set<size_t> due;
    // The late ops of a backward task (above) once due go after the due
    // ops of every task.
    std::set<size_t> dueLate;
    auto dueSet = [&](size_t i) -> std::set<size_t>& { return late(i) ? dueLate : due; };
    auto allAt = [&](size_t i) {
      return std::all_of(devices[i].begin(), devices[i].end(), [&](int64_t e) {
        const size_t d = static_cast<size_t>(e);
        return at(d, *task_[i]) && (!late(i) || leftInput[code(d, *task_[i])] == 0);
      });
    };
    auto advance = [&](size_t d) {
      const size_t was = pos[d];
      while (pos[d] < seq[d].size() && left[code(d, seq[d][pos[d]])] == 0)
        ++pos[d];
      if (pos[d] != was && pos[d] < seq[d].size())
        for (size_t i : gatedReady[code(d, seq[d][pos[d]])])
          if (allAt(i))
            dueSet(i).insert(i);
    };
    for (size_t d = 0; d < ids.size(); ++d)
      advance(d);
    auto makeReady = [&](size_t i) {
      if (!task_[i]) {
        (goesFirst[i] ? freeFirst : freeReady).insert(i);
        return;
      }
      for (int64_t d : devices[i])
        gatedReady[code(static_cast<size_t>(d), *task_[i])].insert(i);
      if (allAt(i))
        dueSet(i).insert(i);
    };
    for (size_t i = 0; i < n; ++i)
      if (!waiting[i])
        makeReady(i);
    std::vector<Op*> out;
    std::vector<bool> done(n, false);
    while (out.size() < n) {
      // An op no task holds goes as soon as it is ready (a transfer as soon
      // as its value is computed, not behind later micro-batches' work);
      // else the earliest (in the old order) op whose devices are all in
      // its task.
      size_t best = n;
      if (!freeFirst.empty())
        best = *freeFirst.begin();
      else if (!due.empty())
        best = *due.begin();
      else if (!dueLate.empty())
        best = *dueLate.begin();
      else if (!freeReady.empty())
        best = *freeReady.begin();
      if (best == n)
        return ops_[std::find(done.begin(), done.end(), false) - done.begin()]->emitError(
            llvm::formatv("schedule: the {0} schedule of {1} micro-batches on {2} "
                          "stages cannot order this op (its devices wait for each "
                          "other)",
                          orderName(order_), m_, stages_)
                .str());
      if (task_[best]) {
        dueSet(best).erase(best);
        for (int64_t d : devices[best]) {
          const size_t c = code(d, *task_[best]);
          gatedReady[c].erase(best);
          --left[c];
          if (task_[best]->kind == Task::B && input_[best] && --leftInput[c] == 0)
            for (size_t i : gatedReady[c])
              if (late(i) && allAt(i))
                dueLate.insert(i);
          advance(d);
        }
      } else {
        freeFirst.erase(best);
        freeReady.erase(best);
      }
      out.push_back(ops_[best]);
      done[best] = true;
      for (size_t u : after[best])
        if (--waiting[u] == 0)
          makeReady(u);
    }
    for (Op* op : out)
      g_.moveOp(op, nullptr);
    return llvm::Error::success();
  }

  Graph& g_;
  Order order_;
  std::vector<Op*> ops_;
  std::unordered_map<const Op*, size_t> index_;
  int64_t m_ = 0, stages_ = 1;
  std::vector<bool> backward_, feedsBackward_, passedOn_;
  std::vector<bool> weight_; ///< zb-h1: a weight gradient's backward op
  std::vector<bool> input_;  ///< an input gradient's backward op
  std::map<int64_t, int64_t> stageOf_;
  std::set<const Op*> transfer_;
  std::vector<std::optional<Task>> task_;
};

/// Orders the ops of a micro-batched training graph (after autodiff, grad-
/// sync and the optimizer) so that each device runs its micro-batches'
/// forwards and backwards as the schedule says (schedule=gpipe|1f1b):
///  1. An op is backward when it is computed from the loss gradient's seed.
///  2. A device's stage is its depth in the graph of a micro-batch's
///     forward transfers (device_copy) between devices that the backward
///     depends on (not those of batch norm's running statistics, made where
///     the layer runs and kept where their param is); with several stages, the
///     transfers between them go on streams of their own on both devices
///     (C for activations forward, C for their gradients back, picked by
///     the sender's stage mod C, C one more than the most stages a value
///     crosses: kFirstTransferStream), beside the compute, so that a stage
///     never waits for its neighbour's compute to pass a value on, nor a
///     receive for a send or for another stage's receive.
///  3. Each device of stage s (of S) runs the tasks gpipe: F0..F(M-1),
///     B0..B(M-1); 1f1b: S-s-1 forwards, then a forward and a backward in
///     turn, then the remaining backwards (PipeDream's 1F1B: a stage holds
///     the activations of at most S-s micro-batches); zb-h1 (the zero-
///     bubble pipelines' H1 schedule): each backward split into B, the ops
///     a gradient sent to the previous stage is computed from, and W, the
///     rest (weight gradients); 1f1b's order of F and B, each W as late as
///     holding at most s put-off W's allows, the last s at the end, where
///     1f1b's stage s would wait (a bubble of about a third of 1f1b's).
///  4. An op of micro-batch m (@mb) runs in its task on each of its
///     devices; ops of no micro-batch (shared values, gradients summed over
///     micro-batches, all-reduces, updates), an op that reads what a later
///     task computes, and transfers between stages go as soon as what they
///     read is there, but for those that neither communicate, nor feed a
///     communication op, nor read a task's value (the updates): they go
///     once no task's op is due. What no backward op needs (running
///     statistics sent back to the stage of their param) runs in its
///     micro-batch's backward. In a backward (with stages), the ops a
///     gradient sent to the previous stage is computed from go first. An
///     assign goes after every other reader of its param.
///  5. The ops are listed in the order a list scheduler gives: each time, a
///     ready op that no task holds and goes at once (4), else the earliest
///     op (in the old order) that is ready and whose devices are all in its
///     task (a backward's input-gradient ops before its others), else a
///     ready update. One graph order
///     serves every device, so communication ops meet in the same order
///     everywhere.
/// A graph without micro-batches keeps its order.
class SchedulePass : public Pass {
public:
  explicit SchedulePass(Order order) : order_(order) {}
  std::string_view name() const override { return "schedule"; }

  llvm::Error run(Graph& g, PassContext&) override { return Scheduler(g, order_).run(); }

private:
  Order order_;
};

} // namespace

std::vector<PipelineTask> pipelineTasks(int64_t s, int64_t stages, int64_t microbatches,
                                        PipelineOrder order) {
  using Task = PipelineTask;
  const int64_t m = microbatches;
  std::vector<Task> seq;
  if (order == PipelineOrder::GPipe) {
    for (int64_t k = 0; k < m; ++k)
      seq.push_back({k, Task::F});
    for (int64_t k = 0; k < m; ++k)
      seq.push_back({k, Task::B});
    return seq;
  }
  const bool zb = order == PipelineOrder::ZeroBubbleH1;
  int64_t warm = std::min(stages - s - 1, m), f = 0, b = 0, w = 0;
  auto backward = [&] {
    seq.push_back({b++, Task::B});
    for (; zb && b - w > s; ++w)
      seq.push_back({w, Task::W});
  };
  for (; f < warm; ++f)
    seq.push_back({f, Task::F});
  for (; f < m; ++f) {
    seq.push_back({f, Task::F});
    backward();
  }
  while (b < m)
    backward();
  for (; zb && w < m; ++w)
    seq.push_back({w, Task::W});
  return seq;
}

int64_t transferStream(int64_t first, int64_t colors, int64_t senderStage, bool backward) {
  return first + (backward ? colors : 0) + senderStage % colors;
}

PipelineShape pipelineShapeOf(const Graph& g) {
  PipelineShape shape;
  std::unordered_map<const Op*, size_t> index;
  std::set<int64_t> devices;
  std::map<int64_t, std::set<int64_t>> from; // device -> devices it receives from
  std::vector<const Op*> ops;
  for (const auto& opPtr : g.ops()) {
    const Op& op = *opPtr;
    size_t i = shape.backward.size();
    index[&op] = i;
    ops.push_back(&op);
    if (op.annotations().microBatch)
      shape.microbatches = std::max(shape.microbatches, *op.annotations().microBatch + 1);
    // Forward ops computed again for the backward (recompute) run in it.
    bool b = isGradientSeed(op) || isRecomputed(op);
    for (Value* v : op.operands())
      if (const Op* d = v->definingOp())
        b = b || shape.backward[index.at(d)];
    shape.backward.push_back(b);
    if (op.info().isCommunication()) // a set for each op is most of the walk
      for (int64_t d : devicesOf(op))
        devices.insert(d);
    else
      devices.insert(opDevice(op));
  }
  // The forward transfers a micro-batch's backward depends on: a stage
  // passes activations on. A transfer whose value only updates state (batch
  // norm's running statistics, computed where the layer runs, kept where
  // their param is) goes as soon as it is there and makes no stage.
  std::vector<bool>& feedsBackward = shape.feedsBackward;
  feedsBackward.assign(ops.size(), false);
  for (size_t i = ops.size(); i-- > 0;) {
    const Op& op = *ops[i];
    bool feeds = shape.backward[i];
    for (unsigned r = 0; r < op.numResults() && !feeds; ++r)
      for (const Use& u : op.result(r)->uses())
        feeds = feeds || (u.user && feedsBackward[index.at(u.user)]);
    feedsBackward[i] = feeds;
    if (op.kind() == OpKind::DeviceCopy && !shape.backward[i] && feeds &&
        op.annotations().microBatch && op.getInt("src") != op.getInt("dst"))
      from[op.getInt("dst")].insert(op.getInt("src"));
  }
  // Longest path from a device without senders; a cycle: one stage.
  std::map<int64_t, int64_t> depth;
  bool cyclic = false;
  std::function<int64_t(int64_t, size_t)> depthOf = [&](int64_t d, size_t guard) -> int64_t {
    if (auto it = depth.find(d); it != depth.end())
      return it->second;
    if (guard > devices.size()) {
      cyclic = true;
      return 0;
    }
    int64_t k = 0;
    for (int64_t s : from[d])
      k = std::max(k, depthOf(s, guard + 1) + 1);
    return depth[d] = k;
  };
  for (int64_t d : devices)
    depthOf(d, 0);
  // A device left out of a priced step (fold-replicas), which receives
  // nothing, is where the device standing for it is: the collectives of a
  // stage's replicas (batch norm's statistics) span one stage.
  for (const auto& [left, standing] : g.foldedInto())
    if (devices.count(left))
      depth[left] = depthOf(standing, 0);
  // A micro-batch's collective over devices of several stages would need
  // them in one task at once, which stages running their own order cannot
  // promise: such a plan (a partition that is no pipeline) runs as one stage.
  for (const auto& op : g.ops()) {
    if (!op->info().isCommunication() || op->kind() == OpKind::DeviceCopy ||
        !op->annotations().microBatch || cyclic)
      continue;
    std::set<int64_t> stagesOf;
    for (int64_t d : devicesOf(*op))
      stagesOf.insert(depth[d]);
    cyclic = stagesOf.size() > 1;
  }
  for (int64_t d : devices) {
    shape.stageOf[d] = cyclic ? 0 : depth[d];
    shape.stages = std::max(shape.stages, shape.stageOf[d] + 1);
  }
  shape.passedOn.assign(ops.size(), false);
  for (size_t i = ops.size(); shape.stages > 1 && i-- > 0;) {
    const Op& op = *ops[i];
    if (feedsBackward[i] || !op.annotations().microBatch)
      continue;
    bool on = op.kind() == OpKind::DeviceCopy &&
              shape.stageOf[op.getInt("src")] != shape.stageOf[op.getInt("dst")];
    for (unsigned r = 0; r < op.numResults() && !on; ++r)
      for (const Use& u : op.result(r)->uses())
        on = on || (u.user && shape.passedOn[index.at(u.user)]);
    shape.passedOn[i] = on;
  }
  return shape;
}

llvm::Expected<std::unique_ptr<Pass>> createSchedulePass(std::string_view options) {
  auto opts = PassOptions::parse("schedule", options, "schedule", {"schedule"});
  if (!opts)
    return opts.takeError();
  auto kind = opts->getChoice("schedule", "1f1b", {"1f1b", "gpipe", "zb-h1"});
  if (!kind)
    return kind.takeError();
  for (Order o : {Order::OneFOneB, Order::GPipe, Order::ZeroBubbleH1})
    if (*kind == orderName(o))
      return std::make_unique<SchedulePass>(o);
  return makeError("schedule: no order named '" + *kind + "'");
}

} // namespace lwcc
