//===- VerifySchedule.cpp - Prove that the events order every access ------===//
//
// Checks a scheduled step (streams, record and wait ops, communication ops,
// the memory plan) for races, as a trainer runs it: every stream of every
// device in its own order, synchronized by nothing but the step's events and
// its communication ops. Steps:
//  1. Nodes: every op of two consecutive steps on each of its lanes (a
//     stream of a device; a communication op on each device it touches).
//     Edges: a lane runs its nodes in graph order, the second step's after
//     the first's; a wait runs after its step's record of the event; a
//     communication op's part on a device that receives runs after what the
//     devices that send ran before it (a collective: every part after every
//     participant's earlier work, joined in one node on no lane, its hub:
//     senders + receivers edges, not senders x receivers).
//  2. A topological order of the nodes (a cycle is a deadlock: an error) and
//     vector clocks, which give happens-before exactly. A node's clock is
//     kept only where no predecessor's clock is already its own: a node
//     whose only predecessor is the node before it on its lane (most of a
//     step's) has that node's clock with its own lane's entry moved on, and
//     a collective's receiving part has its hub's (its earlier work is in
//     the hub). Each node points at the node whose clock row it shares, so
//     the rows are about one per collective, wait and lane start, not one
//     per node: a model-parallel step of full-size Inception-v3 on 256
//     devices has millions of nodes on 512 lanes.
//  3. A sweep over both steps' ops in graph order (ByteTracker) checks, on
//     each device, that the op that wrote a value happens before each op that
//     reads it, and that every op that wrote or read bytes happens before
//     the op that writes them next (memory the plan reuses, a param its
//     update overwrites, the next step's writes).
// An event recorded twice in a step, or waited for and never recorded, is an
// error too. Errors name both ops, their streams and the missing order.
//
//===----------------------------------------------------------------------===//
#include "passes/Pass.h"
#include "passes/StepOrder.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>

namespace lwcc {

namespace {

class ScheduleVerifier {
public:
  explicit ScheduleVerifier(const Graph& g) : g_(g), layout_(g) {}

  llvm::Error run() {
    for (const auto& op : g_.ops())
      ops_.push_back(op.get());
    for (const Op* op : ops_)
      for (const Lane& l : lanesOf(*op))
        lanes_.emplace(l, 0);
    int index = 0;
    for (auto& [l, i] : lanes_)
      i = index++;
    if (llvm::Error e = buildNodes())
      return e;
    if (llvm::Error e = order())
      return e;
    return sweep();
  }

private:
  struct Node {
    const Op* op = nullptr;
    Lane lane;
    /// lane_index -1: a collective's hub, on no lane (see buildNodes).
    int step = 0, lane_index = 0, pos = 0; ///< pos: its index on the lane
    int lanePrev = -1;                     ///< the node before it on its lane
    std::vector<int> preds;
  };

  /// The node of op `k` of step `step` on lane `l` (the op's nodes are
  /// consecutive, one per lane).
  int nodeOf(int step, size_t k, const Lane& l) const {
    int id = first_[static_cast<size_t>(step)][k];
    while (nodes_[static_cast<size_t>(id)].lane != l)
      ++id;
    return id;
  }

  llvm::Error buildNodes() {
    std::map<Lane, int> last; // per lane, its last node so far
    for (int step = 0; step < 2; ++step) {
      first_[static_cast<size_t>(step)].assign(ops_.size(), -1);
      std::map<int64_t, std::vector<const Op*>> records; // event -> its records this step
      std::vector<std::pair<int, const Op*>> waits;
      for (size_t k = 0; k < ops_.size(); ++k) {
        const Op& op = *ops_[k];
        std::vector<Lane> lanes = lanesOf(op);
        std::map<int64_t, int> partOn; // device -> node of this op there
        for (const Lane& l : lanes) {
          Node n;
          n.op = &op;
          n.lane = l;
          n.step = step;
          n.lane_index = lanes_.at(l);
          n.pos = laneLength_[l]++;
          if (auto it = last.find(l); it != last.end()) {
            n.preds.push_back(it->second);
            n.lanePrev = it->second;
          }
          int id = static_cast<int>(nodes_.size());
          nodes_.push_back(std::move(n));
          if (first_[static_cast<size_t>(step)][k] < 0)
            first_[static_cast<size_t>(step)][k] = id;
          partOn[l.device] = id;
          last[l] = id;
        }
        if (op.kind() == OpKind::Record)
          records[op.getInt("event")].push_back(&op);
        if (op.kind() == OpKind::Wait)
          waits.push_back({partOn.begin()->second, &op});
        if (op.info().isCommunication() && partOn.size() > 1) {
          // A device that receives goes on after the devices that send have
          // run what came before the op on their streams.
          std::set<int64_t> senders, receivers;
          for (unsigned i = 0; i < op.numOperands(); ++i)
            senders.insert(operandDevice(op, i));
          for (unsigned r = 0; r < op.numResults(); ++r)
            receivers.insert(valueDevice(op.result(r)).value_or(0));
          // Several senders and receivers (a collective): through one node
          // off every lane that joins the senders' earlier work, not an
          // edge per pair (a split op's all-gather over 256 devices would
          // take 65,280 per step).
          if (senders.size() > 1 && receivers.size() > 1) {
            Node hub;
            hub.op = &op;
            hub.step = step;
            hub.lane_index = -1;
            for (int64_t sd : senders)
              if (const Node& from = nodes_[static_cast<size_t>(partOn.at(sd))];
                  !from.preds.empty())
                hub.preds.push_back(from.preds.front());
            if (hub.preds.empty())
              continue; // no sender did anything before it
            const int id = static_cast<int>(nodes_.size());
            nodes_.push_back(std::move(hub));
            for (int64_t t : receivers)
              nodes_[static_cast<size_t>(partOn.at(t))].preds.push_back(id);
            continue;
          }
          for (int64_t t : receivers)
            for (int64_t sd : senders) {
              const Node& from = nodes_[static_cast<size_t>(partOn.at(sd))];
              if (sd != t && !from.preds.empty())
                nodes_[static_cast<size_t>(partOn.at(t))].preds.push_back(from.preds.front());
            }
        }
      }
      for (const auto& [node, op] : waits) {
        auto it = records.find(op->getInt("event"));
        if (it == records.end())
          return op->emitError(llvm::formatv("verify-schedule: waits for event {0}, which no "
                                             "record of the step reaches: the stream would "
                                             "wait forever",
                                             op->getInt("event"))
                                   .str());
        if (it->second.size() > 1)
          return it->second[1]->emitError(
              llvm::formatv("verify-schedule: event {0} is recorded twice in a step",
                            op->getInt("event"))
                  .str());
        size_t k = std::find(ops_.begin(), ops_.end(), it->second[0]) - ops_.begin();
        nodes_[static_cast<size_t>(node)].preds.push_back(
            nodeOf(step, k, lanesOf(*it->second[0]).front()));
      }
    }
    return llvm::Error::success();
  }

  /// Kahn's algorithm, then the vector clocks in that order.
  llvm::Error order() {
    const size_t n = nodes_.size();
    std::vector<int> indegree(n, 0);
    std::vector<std::vector<int>> succ(n);
    for (size_t i = 0; i < n; ++i)
      for (int p : nodes_[i].preds) {
        succ[static_cast<size_t>(p)].push_back(static_cast<int>(i));
        ++indegree[i];
      }
    std::deque<int> ready;
    for (size_t i = 0; i < n; ++i)
      if (!indegree[i])
        ready.push_back(static_cast<int>(i));
    const size_t lanes = lanes_.size();
    governor_.assign(n, -1);
    row_.assign(n, -1);
    size_t done = 0;
    while (!ready.empty()) {
      int i = ready.front();
      ready.pop_front();
      ++done;
      const Node& node = nodes_[static_cast<size_t>(i)];
      const bool join =
          !node.preds.empty() && (node.preds.size() > 1 || node.preds[0] != node.lanePrev);
      if (!join) { // the clock of the node before it on its lane, its own entry moved on
        governor_[static_cast<size_t>(i)] =
            node.lanePrev < 0 ? -1 : governor_[static_cast<size_t>(node.lanePrev)];
      } else {
        // A join whose clock is a pred's: one whose clock lies in a row
        // (its own, or its lane's last join's where it is on this lane)
        // after which every other pred happens (a collective's receiving
        // part after its hub, which joined its earlier work already).
        int cover = -2;
        for (int p : node.preds) {
          const size_t pi = static_cast<size_t>(p);
          if (governor_[pi] != p && nodes_[pi].lane_index != node.lane_index)
            continue;
          if (std::all_of(node.preds.begin(), node.preds.end(),
                          [&](int q) { return q == p || before(q, p); })) {
            cover = governor_[pi];
            break;
          }
        }
        if (cover != -2) {
          governor_[static_cast<size_t>(i)] = cover;
        } else {
          std::vector<int> c(lanes, -1);
          for (int p : node.preds) {
            const Node& pn = nodes_[static_cast<size_t>(p)];
            if (int g = governor_[static_cast<size_t>(p)]; g >= 0) {
              const std::vector<int>& pc =
                  clock_[static_cast<size_t>(row_[static_cast<size_t>(g)])];
              for (size_t l = 0; l < lanes; ++l)
                c[l] = std::max(c[l], pc[l]);
            }
            if (pn.lane_index >= 0)
              c[static_cast<size_t>(pn.lane_index)] =
                  std::max(c[static_cast<size_t>(pn.lane_index)], pn.pos);
          }
          if (node.lane_index >= 0) // not a collective's hub
            c[static_cast<size_t>(node.lane_index)] = node.pos;
          governor_[static_cast<size_t>(i)] = i;
          row_[static_cast<size_t>(i)] = static_cast<int>(clock_.size());
          clock_.push_back(std::move(c));
        }
      }
      for (int s : succ[static_cast<size_t>(i)])
        if (--indegree[static_cast<size_t>(s)] == 0)
          ready.push_back(s);
    }
    if (done == n)
      return llvm::Error::success();
    for (size_t i = 0; i < n; ++i)
      if (indegree[i] > 0 && nodes_[i].op->kind() == OpKind::Wait)
        return nodes_[i].op->emitError(
            "verify-schedule: the step deadlocks: this wait is part of a cycle of streams "
            "waiting for each other");
    return makeError("verify-schedule: the step deadlocks: its streams wait for each other in "
                     "a cycle (through communication ops)");
  }

  static std::string nameOf(const Value* v) {
    if (!v->name().empty())
      return "%" + v->name();
    if (const Op* def = v->definingOp())
      return "result #" + std::to_string(v->resultIndex()) + " of " + def->describe();
    return "an unnamed value";
  }

  bool before(int a, int b) const {
    if (a < 0)
      return true; // written before the step
    const Node& x = nodes_[static_cast<size_t>(a)];
    const Node& y = nodes_[static_cast<size_t>(b)];
    if (x.lane_index < 0) // a hub: not asked (order() takes a no as "not known")
      return false;
    if (x.lane_index == y.lane_index)
      return x.pos <= y.pos;
    const int g = governor_[static_cast<size_t>(b)];
    return g >= 0 && clock_[static_cast<size_t>(row_[static_cast<size_t>(g)])]
                           [static_cast<size_t>(x.lane_index)] >= x.pos;
  }

  /// `node`'s op and lane, as seen from an op of step `from`.
  std::string what(int node, int from) const {
    const Node& n = nodes_[static_cast<size_t>(node)];
    return describeOn(*n.op, n.lane) + (n.step < from ? " in the previous step" : "");
  }

  /// "nothing orders stream 2 after it: ..." for a missing order of
  /// `later` after `earlier`.
  std::string missing(int earlier, int later) const {
    const Node& a = nodes_[static_cast<size_t>(earlier)];
    const Node& b = nodes_[static_cast<size_t>(later)];
    if (a.lane.device != b.lane.device)
      return "no communication op orders device " + std::to_string(b.lane.device) + " after it";
    return llvm::formatv("nothing orders stream {0} after it: no wait there for an event "
                         "recorded on stream {1} at or after it",
                         b.lane.stream, a.lane.stream)
        .str();
  }

  llvm::Error sweep() {
    ByteTracker bytes;
    for (const auto& p : g_.params())
      if (auto b = layout_.bytesOf(p.get()))
        bytes.write(p.get(), *b, -1);
    std::map<const Value*, int> overwrittenBy;
    for (int step = 0; step < 2; ++step)
      for (size_t k = 0; k < ops_.size(); ++k) {
        const Op& op = *ops_[k];
        if (op.kind() == OpKind::Constant) {
          if (step == 0)
            for (unsigned r = 0; r < op.numResults(); ++r)
              if (auto b = layout_.bytesOf(op.result(r)))
                bytes.write(op.result(r), *b, -1);
          continue;
        }
        const std::vector<Lane> lanes = lanesOf(op);
        const std::vector<std::vector<Access>> accesses = layout_.accessesOnLanes(op, lanes);
        for (size_t li = 0; li < lanes.size(); ++li) {
          const Lane& lane = lanes[li];
          const int node = nodeOf(step, k, lane);
          const std::vector<Access>& acc = accesses[li];
          for (const Access& a : acc) {
            if (a.write)
              continue;
            const ByteTracker::Storage* s = bytes.find(a.value);
            if (!s) {
              auto w = overwrittenBy.find(a.value);
              return op.emitError("verify-schedule: reads " + nameOf(a.value) + " on " +
                                  lane.str() + ", whose bytes " +
                                  (w == overwrittenBy.end()
                                       ? std::string("hold nothing")
                                       : what(w->second, step) + " wrote first") +
                                  " (the memory plan reuses them too early)");
            }
            if (!before(s->writer, node))
              return op.emitError(llvm::formatv("verify-schedule: reads {0} on {1}, which {2} "
                                                "writes, but {3}",
                                                nameOf(a.value), lane.str(), what(s->writer, step),
                                                missing(s->writer, node))
                                      .str());
          }
          for (const Access& a : acc) {
            if (!a.write || layout_.aliases(op))
              continue;
            for (const ByteTracker::Storage* s : bytes.overlapping(a.bytes)) {
              std::vector<int> accessors = s->readers;
              accessors.push_back(s->writer);
              for (int x : accessors) {
                if (x == node || before(x, node))
                  continue;
                const bool read = x != s->writer;
                return op.emitError(
                    llvm::formatv("verify-schedule: writes {0} on {1} over the bytes "
                                  "of {2}, which {3} {4}, but {5}",
                                  nameOf(a.value), lane.str(), nameOf(s->values.front()),
                                  what(x, step), read ? "reads" : "writes", missing(x, node))
                        .str());
              }
            }
          }
          for (const Access& a : acc)
            if (!a.write)
              bytes.read(a.value, node);
          for (const Access& a : acc) {
            if (!a.write)
              continue;
            if (layout_.aliases(op)) {
              bytes.alias(a.value, op.operand(op.kind() == OpKind::Assign ? 1 : 0));
              continue;
            }
            for (const ByteTracker::Storage* s : bytes.overlapping(a.bytes))
              for (const Value* v : s->values)
                if (bytes.find(v) == s) // still lives there
                  overwrittenBy[v] = node;
            bytes.write(a.value, a.bytes, node);
          }
        }
      }
    return llvm::Error::success();
  }

  const Graph& g_;
  StepLayout layout_;
  std::vector<const Op*> ops_;
  std::map<Lane, int> lanes_;
  std::map<Lane, int> laneLength_;
  std::vector<Node> nodes_;
  std::vector<int> first_[2]; ///< per step, per op: its first node
  /// Per join (see the top), per lane: the last position that happens
  /// before it; per node, the last join at or before it on its lane (-1:
  /// none, nothing on another lane happens before it), and per join its
  /// row of clock_.
  std::vector<std::vector<int>> clock_;
  std::vector<int> governor_, row_;
};

class VerifySchedulePass : public Pass {
public:
  std::string_view name() const override { return "verify-schedule"; }
  llvm::Error run(Graph& g, PassContext&) override { return verifySchedule(g); }
};

} // namespace

llvm::Error verifySchedule(const Graph& g) { return ScheduleVerifier(g).run(); }

std::unique_ptr<Pass> createVerifySchedulePass() { return std::make_unique<VerifySchedulePass>(); }

} // namespace lwcc
