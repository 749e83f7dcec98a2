//===- Simulator.cpp - Replays a scheduled training step on a cost model --===//
#include "cost/Simulator.h"

#include "ir/Params.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>

namespace lwcc {

namespace {

/// A shared resource: one stream of a device, or one port of a link.
struct Resource {
  enum Kind : int { Stream, SendPort, RecvPort, NodeSend, NodeRecv } kind;
  int64_t id, sub = 0; ///< device or node; sub: the stream
  bool operator<(const Resource& o) const {
    return std::tie(kind, id, sub) < std::tie(o.kind, o.id, o.sub);
  }
  bool operator==(const Resource& o) const {
    return std::tie(kind, id, sub) == std::tie(o.kind, o.id, o.sub);
  }
};

struct ResourceHash {
  size_t operator()(const Resource& r) const {
    return std::hash<int64_t>()((r.id * 64 + r.sub) * 8 + static_cast<int64_t>(r.kind));
  }
};

/// How much of a device its running kernels occupy over time: a step
/// function, the level from each key until the next.
class Occupancy {
public:
  /// The earliest start >= `t` at which `fill` more fits for `d` seconds.
  double earliest(double t, double d, double fill) const {
    for (;;) {
      auto it = levels_.upper_bound(t);
      if (it != levels_.begin())
        --it;
      bool fits = true;
      for (; it != levels_.end() && it->first < t + d; ++it)
        if (it->second + fill > 1 + 1e-9) {
          auto next = std::next(it);
          if (next == levels_.end())
            return t; // unreachable: the level after the last key is 0
          t = std::max(t, next->first);
          fits = false;
          break;
        }
      if (fits)
        return t;
    }
  }
  void add(double start, double end, double fill) {
    if (!(end > start))
      return;
    split(start);
    split(end);
    for (auto it = levels_.find(start); it != levels_.end() && it->first < end; ++it)
      it->second += fill;
  }

private:
  void split(double t) {
    auto it = levels_.upper_bound(t);
    double level = it == levels_.begin() ? 0 : std::prev(it)->second;
    levels_.emplace(t, level);
  }
  std::map<double, double> levels_;
};

bool isRing(OpKind k) {
  return k == OpKind::AllReduce || k == OpKind::AllGather || k == OpKind::ReduceScatter;
}

/// The devices a communication op sends from and receives on.
void commEnds(const Op& op, std::set<int64_t>& senders, std::set<int64_t>& receivers) {
  for (unsigned i = 0; i < op.numOperands(); ++i)
    senders.insert(operandDevice(op, i));
  for (unsigned r = 0; r < op.numResults(); ++r)
    receivers.insert(*valueDevice(op.result(r)));
  if (isRing(op.kind())) {
    senders.insert(receivers.begin(), receivers.end());
    receivers = senders;
    return;
  }
  // Rooted ops: the root only sends (broadcast, shard, copy) or only
  // receives (reduce_to, unshard); a copy to itself moves nothing.
  bool rootSends = op.numOperands() == 1;
  std::set<int64_t>& root = rootSends ? senders : receivers;
  std::set<int64_t>& others = rootSends ? receivers : senders;
  for (int64_t d : root)
    others.erase(d);
}

} // namespace

double earliestGap(double t, double d, const std::vector<const LinkBusy*>& busy) {
  for (bool moved = true; moved;) {
    moved = false;
    for (const LinkBusy* b : busy) {
      // A port serves one op at a time: its intervals do not overlap, so,
      // sorted by start, they are sorted by end too. Skip those ending by t.
      auto it = std::upper_bound(
          b->begin(), b->end(), t,
          [](double x, const std::pair<double, double>& iv) { return x < iv.second; });
      for (; it != b->end() && it->first < t + d; ++it)
        if (t < it->second) { // overlaps [t, t + d): start after it
          t = it->second;
          moved = true;
        }
    }
  }
  return t;
}

void occupy(LinkBusy& busy, double start, double end) {
  busy.insert(std::upper_bound(busy.begin(), busy.end(), std::make_pair(start, end)), {start, end});
}

SimCosts simCosts(const CostModel& model, bool timeline) {
  SimCosts c;
  c.timeline = timeline;
  c.opSeconds = [&model](const Op& op) { return model.opSeconds(op); };
  c.commSeconds = [&model](const Op& op) { return model.commSeconds(op); };
  c.devicesPerNode = model.spec().devicesPerNode;
  c.devicesPerGpu = model.spec().devicesPerGpu;
  c.opFill = [&model](const Op& op) { return model.fill(op); };
  c.hostFill = [&model](const Op& op, int64_t devices) { return model.hostFill(op, devices); };
  c.wakeSeconds = model.wakeSeconds();
  c.stepGapSeconds = model.stepGapSeconds();
  // What a profile measured: each participant's own times and waits of a
  // communication op (without one, the replay counts no occurrences) and
  // each stream's start.
  if (model.hasProfile()) {
    c.commSecondsOn = [&model](const Op& op, int64_t device, int64_t occurrence) {
      return model.measuredSecondsOn(op, device, occurrence);
    };
    c.commWaitOn = [&model](const Op& op, int64_t device, int64_t occurrence) {
      return model.measuredWaitOn(op, device, occurrence);
    };
    c.streamStartSeconds = [&model](int64_t device, int64_t stream) {
      return model.streamStartSeconds(device, stream);
    };
  }
  return c;
}

llvm::Expected<SimResult> simulate(const Graph& g, const SimCosts& costs) {
  SimResult res;
  std::unordered_map<const Value*, double> ready; // results: when they are written
  ready.reserve(g.ops().size() + g.ops().size() / 4);
  std::unordered_map<Resource, double, ResourceHash> streamFree; // FIFO streams: when the
                                                                 // last op ends
  // A stream is free from its thread's start on.
  auto freeAt = [&](const Resource& s) -> double& {
    auto [it, added] = streamFree.emplace(s, 0.0);
    if (added && costs.streamStartSeconds)
      it->second = std::max(0.0, costs.streamStartSeconds(s.id, s.sub));
    return it->second;
  };
  std::unordered_map<Resource, LinkBusy, ResourceHash> links;
  std::unordered_map<int64_t, Occupancy> occupancy; // per GPU, its devices' compute ops
  std::unordered_map<int64_t, Occupancy> cores;     // per node, its devices' compute ops
  int64_t devices = 1; // the trainer's: each device's share of its node's cores
  for (const auto& op : g.ops())
    if (!op->info().isCommunication() && !op->info().isEvent())
      devices = std::max(devices, opDevice(*op) + 1);
  auto gpuOf = [&](int64_t d) { return costs.devicesPerGpu > 1 ? d / costs.devicesPerGpu : d; };
  auto nodeOf = [&](int64_t d) {
    return costs.devicesPerNode > 0 ? gpuOf(d) / costs.devicesPerNode : 0;
  };
  std::unordered_map<const Op*, size_t> position;
  position.reserve(g.ops().size());
  for (const auto& op : g.ops())
    position.emplace(op.get(), position.size());
  // An assign of an update that the memory plan writes over its param
  // copies nothing (codegen emits no kernel for it).
  auto freeAssign = [&](const Op& op) {
    const Value* v = op.operand(1);
    return v->definingOp() && paramWrittenOver(*v->definingOp(), v->resultIndex(), position);
  };

  // (mnemonic, loc, device) -> the communication ops of that key the device
  // has met so far.
  std::map<std::tuple<std::string, std::string, int64_t>, int64_t> commSeen;
  // The scheduled IR's events (place-events): when each was recorded. A
  // wait holds its stream until then, as cudaStreamWaitEvent does: this is
  // how a reuse of bytes waits for their last reader on another stream.
  std::unordered_map<int64_t, double> recorded;
  // Per op: the streams it takes, its link ports and their busy intervals,
  // each stream's count of the op's kind met before (a profile's
  // occurrence) and its end there.
  std::vector<Resource> streams, ports;
  std::vector<const LinkBusy*> busy;
  std::vector<int64_t> occurrence;
  std::vector<double> ends;
  for (const auto& opPtr : g.ops()) {
    const Op& op = *opPtr;
    double t = 0;
    int64_t stream = op.annotations().stream.value_or(0);
    if (op.info().isEvent()) {
      double& free = freeAt({Resource::Stream, opDevice(op), stream});
      if (op.kind() == OpKind::Record)
        recorded[op.getInt("event")] = free;
      else if (auto it = recorded.find(op.getInt("event"));
               it != recorded.end() && it->second > free)
        free = it->second + costs.wakeSeconds;
      continue;
    }
    bool comm = op.info().isCommunication();
    for (unsigned i = 0; i < op.numOperands(); ++i) {
      const Value* v = op.operand(i);
      if (v->kind() != ValueKind::Result)
        continue;
      auto it = ready.find(v);
      if (it == ready.end())
        return op.emitError("simulate: an operand is defined after its use (schedule the graph "
                            "in topological order)");
      // The stream that reads it: the op's, on the operand's device for a
      // communication op. Written by another stream after this one is free,
      // it blocks there and wakes after the write.
      Resource reader{Resource::Stream, comm ? operandDevice(op, i) : opDevice(op), stream};
      const Op& def = *v->definingOp();
      Resource writer{Resource::Stream,
                      def.info().isCommunication() ? *valueDevice(v) : opDevice(def),
                      def.annotations().stream.value_or(0)};
      bool blocks = !(writer == reader) && it->second > freeAt(reader);
      t = std::max(t, it->second + (blocks ? costs.wakeSeconds : 0));
    }
    streams.clear();
    busy.clear();
    ports.clear();
    double d = 0;
    int64_t bytes = 0;
    if (!comm) {
      streams.push_back({Resource::Stream, opDevice(op), stream});
      bool free = op.kind() == OpKind::Constant || (op.kind() == OpKind::Assign && freeAssign(op));
      d = free ? 0 : costs.opSeconds(op);
    } else {
      std::set<int64_t> senders, receivers, devices;
      commEnds(op, senders, receivers);
      for (unsigned i = 0; i < op.numOperands(); ++i)
        devices.insert(operandDevice(op, i));
      for (unsigned r = 0; r < op.numResults(); ++r)
        devices.insert(*valueDevice(op.result(r)));
      for (int64_t dev : devices)
        streams.push_back({Resource::Stream, dev, stream});
      std::set<int64_t> nodes;
      for (int64_t dev : devices)
        nodes.insert(nodeOf(dev));
      for (int64_t dev : senders) {
        ports.push_back({Resource::SendPort, dev});
        if (nodes.size() > 1)
          ports.push_back({Resource::NodeSend, nodeOf(dev)});
      }
      for (int64_t dev : receivers) {
        ports.push_back({Resource::RecvPort, dev});
        if (nodes.size() > 1)
          ports.push_back({Resource::NodeRecv, nodeOf(dev)});
      }
      std::sort(ports.begin(), ports.end());
      ports.erase(std::unique(ports.begin(), ports.end()), ports.end());
      for (const Resource& p : ports)
        busy.push_back(&links[p]);
      bytes = commBytes(op);
      d = bytes > 0 ? costs.commSeconds(op) : 0;
    }
    if (!(d >= 0) || !std::isfinite(d))
      return op.emitError(llvm::formatv("simulate: the cost model gives {0} seconds", d).str());
    for (const Resource& s : streams)
      t = std::max(t, freeAt(s));
    // Each participant's count of the communication ops of this mnemonic
    // and loc it met before this one (as its profile lists them).
    occurrence.assign(streams.size(), 0);
    if (comm && (costs.commSecondsOn || costs.commWaitOn))
      for (size_t k = 0; k < streams.size(); ++k)
        occurrence[k] = commSeen[{std::string(op.mnemonic()), op.loc().name, streams[k].id}]++;
    if (comm && d > 0 && costs.commWaitOn) {
      double measured = 0, replayed = 0;
      int64_t n = 0;
      for (size_t k = 0; k < streams.size(); ++k)
        if (auto w = costs.commWaitOn(op, streams[k].id, occurrence[k]); w && std::isfinite(*w)) {
          measured += *w;
          replayed += t - freeAt(streams[k]);
          ++n;
        }
      if (n > 0)
        t += std::max(0.0, (measured - replayed) / static_cast<double>(n));
    }
    t = earliestGap(t, d, busy);
    double fill = 0, host = 0;
    if (!comm && d > 0 && costs.opFill)
      fill = std::clamp(costs.opFill(op), 0.0, 1.0); // 0: none counted
    if (!comm && d > 0 && costs.hostFill)
      host = std::clamp(costs.hostFill(op, devices), 0.0, 1.0);
    // The earliest start at which both its device and its node's cores have
    // room (moving on for one may take the other's room: until both agree).
    for (double prev = -1; fill + host > 0 && t != prev;) {
      prev = t;
      if (fill > 0)
        t = occupancy[gpuOf(opDevice(op))].earliest(t, d, fill);
      if (host > 0)
        t = cores[nodeOf(opDevice(op))].earliest(t, d, host);
    }
    double end = t + d;
    if (fill > 0)
      occupancy[gpuOf(opDevice(op))].add(t, end, fill);
    if (host > 0)
      cores[nodeOf(opDevice(op))].add(t, end, host);
    // Each participant's own end (a measured profile), else the op's.
    ends.assign(streams.size(), end);
    for (size_t k = 0; k < streams.size(); ++k) {
      std::optional<double> own;
      if (comm && d > 0 && costs.commSecondsOn)
        own = costs.commSecondsOn(op, streams[k].id, occurrence[k]);
      if (own && *own >= 0 && std::isfinite(*own))
        ends[k] = t + *own;
    }
    for (size_t k = 0; k < streams.size(); ++k) {
      const Resource& s = streams[k];
      const double sEnd = ends[k];
      freeAt(s) = sEnd;
      (comm ? res.commSeconds : res.computeSeconds)[s.id] += sEnd - t;
      if (!costs.timeline || op.kind() == OpKind::Constant)
        continue;
      SimEvent ev;
      ev.name = std::string(op.mnemonic());
      ev.loc = op.loc().name;
      ev.device = s.id;
      ev.stream = s.sub;
      ev.start = t;
      ev.end = sEnd;
      ev.bytes = bytes;
      ev.comm = comm;
      res.events.push_back(std::move(ev));
    }
    if (d > 0)
      for (const Resource& p : ports)
        occupy(links[p], t, end);
    res.commBytes += bytes;
    // A communication op's result is ready when its device's part ends.
    auto endOn = [&](int64_t device) {
      for (size_t k = 0; k < streams.size(); ++k)
        if (streams[k].id == device)
          return ends[k];
      return end;
    };
    for (unsigned r = 0; r < op.numResults(); ++r)
      ready[op.result(r)] = comm ? endOn(*valueDevice(op.result(r))) : end;
    for (double e : ends)
      res.stepSeconds = std::max(res.stepSeconds, e);
    res.stepSeconds = std::max(res.stepSeconds, end);
  }
  res.stepGapSeconds = costs.stepGapSeconds;
  res.stepSeconds += costs.stepGapSeconds;
  std::stable_sort(res.events.begin(), res.events.end(), [](const SimEvent& a, const SimEvent& b) {
    return std::tie(a.start, a.device, a.stream) < std::tie(b.start, b.device, b.stream);
  });
  return res;
}

void writeChromeTrace(const std::vector<SimEvent>& events, llvm::raw_ostream& os) {
  // Microseconds, to the nanosecond: no rounding noise in the last digits.
  auto micros = [](double seconds) { return std::round(seconds * 1e9) / 1e3; };
  llvm::json::Array out;
  std::set<std::pair<int64_t, int64_t>> threads;
  for (const SimEvent& e : events)
    threads.insert({e.device, e.stream});
  std::set<int64_t> devices;
  for (const auto& [dev, stream] : threads) {
    if (devices.insert(dev).second)
      out.push_back(llvm::json::Object{
          {"name", "process_name"},
          {"ph", "M"},
          {"pid", dev},
          {"tid", 0},
          {"args", llvm::json::Object{{"name", "device " + std::to_string(dev)}}}});
    out.push_back(llvm::json::Object{
        {"name", "thread_name"},
        {"ph", "M"},
        {"pid", dev},
        {"tid", stream},
        {"args", llvm::json::Object{{"name", "stream " + std::to_string(stream)}}}});
  }
  for (const SimEvent& e : events) {
    llvm::json::Object args{{"loc", e.loc}};
    if (e.comm)
      args["bytes"] = e.bytes;
    out.push_back(llvm::json::Object{{"name", e.name},
                                     {"cat", e.comm ? "comm" : "compute"},
                                     {"ph", "X"},
                                     {"ts", micros(e.start)},
                                     {"dur", micros(e.end - e.start)},
                                     {"pid", e.device},
                                     {"tid", e.stream},
                                     {"args", std::move(args)}});
  }
  // One event per line: readable, and diffable between runs.
  os << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  for (size_t i = 0; i < out.size(); ++i)
    os << llvm::formatv("{0}", out[i]) << (i + 1 < out.size() ? ",\n" : "\n");
  os << "]}\n";
}

std::string describe(const SimResult& r) {
  std::string out = llvm::formatv("simulate: step {0:f3} ms, {1} bytes communicated",
                                  r.stepSeconds * 1e3, r.commBytes)
                        .str();
  if (r.stepGapSeconds > 0)
    out += llvm::formatv(" ({0:f3} ms of the step: the measured idle time between steps)",
                         r.stepGapSeconds * 1e3)
               .str();
  std::set<int64_t> devices;
  for (const auto& [d, s] : r.computeSeconds)
    devices.insert(d);
  for (const auto& [d, s] : r.commSeconds)
    devices.insert(d);
  for (int64_t d : devices) {
    auto get = [&](const std::map<int64_t, double>& m) {
      auto it = m.find(d);
      return it == m.end() ? 0.0 : it->second;
    };
    out += llvm::formatv("\nsimulate: device {0}: compute {1:f3} ms, communication {2:f3} ms", d,
                         get(r.computeSeconds) * 1e3, get(r.commSeconds) * 1e3)
               .str();
  }
  return out;
}

} // namespace lwcc
