//===- PlaceEvents.cpp - The events that order a device's streams ---------===//
//
// Makes the scheduled IR: explicit `record` and `wait` ops wherever an op
// depends on an op of another stream of its device, and nowhere else;
// codegen emits exactly these. Steps:
//  1. Remove the record and wait ops already there (the pass starts over).
//  2. Walk the ops in graph order, each on its lanes (a stream of a device;
//     a communication op on its stream of every device it touches), with a
//     ByteTracker that knows which op wrote and read the bytes of each value.
//  3. An op depends, on each of its devices, on the op that wrote each value
//     it reads and, for every range of bytes it writes, on each op that wrote
//     or read what lived there before (memory the plan reuses, a param its
//     update overwrites). A dependence on another stream of the same device
//     that the order so far does not imply (stream order and the waits
//     placed before, transitively: a vector clock per lane) gets an event:
//     one `record` right after the op depended on (shared by every waiter),
//     and one `wait` before this op per other stream, on the latest op there
//     that it needs, the latest first (its wait may imply the others).
//     A communication op also depends, on each of its devices, on the
//     communication op before it there: a device runs its collectives
//     one at a time in graph order, the same order on every device (a GPU
//     need not run two NCCL kernels at once, and collectives of streams,
//     each with its communicator, that two devices start in different
//     orders would wait for each other: sync batch norm's on stream 0 and
//     the gradient buckets on stream 1, say).
//  4. Around the step, on each device with several streams: its first
//     stream records an event before anything else that the other streams
//     wait for first, and waits last for an event each other stream records
//     after its last op. A step's streams so start after the previous step
//     has ended on the device, which orders reuse across steps.
// Events never cross devices: communication ops order the devices.
//
//===----------------------------------------------------------------------===//
#include "passes/Pass.h"
#include "passes/StepOrder.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <map>
#include <set>

namespace lwcc {

namespace {

/// Positions on a lane: op k of the graph is at 4k+2, the waits before it
/// at 4k+1, a record after it at 4k+3; the step's start at 0.
int64_t opPos(size_t k) { return 4 * static_cast<int64_t>(k) + 2; }

class EventPlacer {
public:
  EventPlacer(Graph& g) : g_(g) {}

  llvm::Expected<int64_t> run() {
    std::vector<Op*> stale;
    for (auto& op : g_.ops())
      if (op->info().isEvent())
        stale.push_back(op.get());
    for (Op* op : stale)
      g_.eraseOp(op);
    StepLayout layout(g_);
    for (auto& op : g_.ops())
      ops_.push_back(op.get());
    // Each device's lanes, numbered from 0 in stream order.
    for (Op* op : ops_)
      for (const Lane& l : lanesOf(*op))
        laneIndex_[l.device].emplace(l.stream, 0);
    for (auto& [d, lanes] : laneIndex_) {
      int64_t i = 0;
      for (auto& [s, index] : lanes)
        index = i++;
      frontier_[d].assign(lanes.size(), Clock(lanes.size(), -1));
      main_[d] = lanes.begin()->first;
      // The step's start: the first stream records, the others wait.
      if (lanes.size() > 1) {
        int64_t start = nextEvent_++;
        atStart_.push_back({d, main_[d], start, true});
        for (auto& [s, index] : lanes) {
          frontier_[d][static_cast<size_t>(index)][0] = 0;
          if (s != main_[d])
            atStart_.push_back({d, s, start, false});
        }
      }
    }
    ByteTracker bytes;
    for (const auto& p : g_.params()) // written before the step
      if (auto b = layout.bytesOf(p.get()))
        bytes.write(p.get(), *b, -1);
    for (size_t k = 0; k < ops_.size(); ++k) {
      Op& op = *ops_[k];
      if (op.kind() == OpKind::Constant) { // written at start-up, before every step
        for (unsigned r = 0; r < op.numResults(); ++r)
          if (auto b = layout.bytesOf(op.result(r)))
            bytes.write(op.result(r), *b, -1);
        continue;
      }
      const std::vector<Lane> lanes = lanesOf(op);
      const std::vector<std::vector<Access>> accesses = layout.accessesOnLanes(op, lanes);
      for (size_t li = 0; li < lanes.size(); ++li) {
        const Lane& lane = lanes[li];
        const std::vector<Access>& acc = accesses[li];
        // What this op needs before it, on each lane of its device.
        std::map<int64_t, int> latest; // lane index -> node
        auto need = [&](int node) {
          if (node < 0)
            return;
          int64_t l = nodes_[static_cast<size_t>(node)].lane;
          auto [it, added] = latest.emplace(l, node);
          if (!added &&
              nodes_[static_cast<size_t>(node)].pos > nodes_[static_cast<size_t>(it->second)].pos)
            it->second = node;
        };
        const bool comm = op.info().isCommunication();
        if (comm)
          if (auto it = lastComm_.find(lane.device); it != lastComm_.end())
            need(it->second);
        for (const Access& a : acc) {
          if (!a.write) {
            const ByteTracker::Storage* s = bytes.find(a.value);
            if (!s)
              return op.emitError("place-events: reads %" + a.value->name() +
                                  ", whose bytes the memory plan gave to another value first");
            need(s->writer);
          } else if (!layout.aliases(op)) {
            for (const ByteTracker::Storage* s : bytes.overlapping(a.bytes)) {
              need(s->writer);
              for (int r : s->readers)
                need(r);
            }
          }
        }
        const int64_t self = laneIndex_[lane.device].at(lane.stream);
        Clock& front = frontier_[lane.device][static_cast<size_t>(self)];
        // The latest needed op first: a wait for it often implies the
        // others (transitively), which then need no wait of their own.
        std::vector<std::pair<int64_t, int>> needs(latest.begin(), latest.end());
        std::sort(needs.begin(), needs.end(), [&](const auto& a, const auto& b) {
          return nodes_[static_cast<size_t>(a.second)].pos >
                 nodes_[static_cast<size_t>(b.second)].pos;
        });
        for (const auto& [l, node] : needs) {
          const Node& n = nodes_[static_cast<size_t>(node)];
          if (l == self || front[static_cast<size_t>(l)] >= n.pos)
            continue; // the stream's order, or an earlier wait, implies it
          auto [rec, added] = recordAfter_.emplace(node, 0);
          if (added) {
            rec->second = nextEvent_++;
            Clock c = n.clock;
            c[static_cast<size_t>(l)] = n.pos + 1;
            recordClock_[rec->second] = c;
          }
          waitsBefore_[&op].push_back({lane.device, lane.stream, rec->second, false});
          const Clock& rc = recordClock_[rec->second];
          for (size_t i = 0; i < front.size(); ++i)
            front[i] = std::max(front[i], rc[i]);
        }
        Node node{&op, lane.device, self, opPos(k), front};
        node.clock[static_cast<size_t>(self)] = node.pos;
        front = node.clock;
        const int id = static_cast<int>(nodes_.size());
        nodes_.push_back(std::move(node));
        if (comm)
          lastComm_[lane.device] = id;
        for (const Access& a : acc)
          if (!a.write)
            bytes.read(a.value, id);
        for (const Access& a : acc)
          if (a.write) {
            if (layout.aliases(op))
              bytes.alias(a.value, op.operand(op.kind() == OpKind::Assign ? 1 : 0));
            else
              bytes.write(a.value, a.bytes, id);
          }
      }
    }
    materialize();
    return nextEvent_;
  }

private:
  using Clock = std::vector<int64_t>;
  struct Node {
    Op* op;
    int64_t device, lane, pos;
    Clock clock; ///< per lane of the device: the last position that happens before or is this
  };
  struct EventOp {
    int64_t device, stream, event;
    bool record;
  };

  void materialize() {
    Location loc;
    auto create = [&](const EventOp& e, const Location& at, Op* before) {
      Op* op = g_.createOp(e.record ? OpKind::Record : OpKind::Wait, {}, {}, at, before);
      op->setAttr("event", Attribute(e.event));
      op->annotations().device = e.device;
      op->annotations().stream = e.stream;
    };
    // The start: before the first op that is not a constant (constants are
    // start-up work, listed anywhere).
    Op* first = nullptr;
    for (Op* op : ops_)
      if (op->kind() != OpKind::Constant) {
        first = op;
        break;
      }
    loc.name = "step start";
    for (const EventOp& e : atStart_)
      create(e, loc, first);
    for (Op* op : ops_)
      if (auto it = waitsBefore_.find(op); it != waitsBefore_.end())
        for (const EventOp& e : it->second)
          create(e, op->loc(), op);
    for (const auto& [node, event] : recordAfter_) {
      const Node& n = nodes_[static_cast<size_t>(node)];
      int64_t stream = 0;
      for (const auto& [s, index] : laneIndex_.at(n.device))
        if (index == n.lane)
          stream = s;
      create({n.device, stream, event, true}, n.op->loc(), g_.nextOp(n.op));
    }
    // The end: each other stream records, the first stream waits.
    loc.name = "step end";
    for (const auto& [d, lanes] : laneIndex_) {
      if (lanes.size() < 2)
        continue;
      std::vector<int64_t> ends;
      for (const auto& [s, index] : lanes)
        if (s != main_.at(d)) {
          ends.push_back(nextEvent_);
          create({d, s, nextEvent_++, true}, loc, nullptr);
        }
      for (int64_t e : ends)
        create({d, main_.at(d), e, false}, loc, nullptr);
    }
  }

  Graph& g_;
  std::vector<Op*> ops_;
  std::map<int64_t, std::map<int64_t, int64_t>> laneIndex_; ///< device -> stream -> lane
  std::map<int64_t, int> lastComm_;                ///< device -> its latest communication op's node
  std::map<int64_t, std::vector<Clock>> frontier_; ///< device -> per lane
  std::map<int64_t, int64_t> main_;                ///< device -> its first stream
  std::vector<Node> nodes_;
  std::map<int, int64_t> recordAfter_; ///< node -> the event recorded after it
  std::map<int64_t, Clock> recordClock_;
  std::map<Op*, std::vector<EventOp>> waitsBefore_;
  std::vector<EventOp> atStart_;
  int64_t nextEvent_ = 0;
};

class PlaceEventsPass : public Pass {
public:
  std::string_view name() const override { return "place-events"; }
  llvm::Error run(Graph& g, PassContext&) override {
    auto n = placeEvents(g);
    return n ? llvm::Error::success() : n.takeError();
  }
};

} // namespace

llvm::Expected<int64_t> placeEvents(Graph& g) { return EventPlacer(g).run(); }

std::unique_ptr<Pass> createPlaceEventsPass() { return std::make_unique<PlaceEventsPass>(); }

} // namespace lwcc
