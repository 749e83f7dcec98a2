//===- MemoryPlan.cpp - Arena offsets for every op result -----------------===//
#include "passes/MemoryPlan.h"

#include "cost/DeviceSpec.h"
#include "interp/Eval.h"
#include "interp/Interpreter.h"
#include "ir/FusedOps.h"
#include "ir/Params.h"
#include "passes/Pass.h"
#include "passes/PassOptions.h"
#include "passes/TrainingSupport.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace lwcc {

namespace {

/// Ops whose result is a view of operand #0 (no data moves): the op table's
/// `view` trait.
bool isAlias(const Op& op) { return op.info().view; }

/// Whether an op's kernel may write result #0 over operand `i` element by
/// element (the shapes must match too: the caller checks).
bool mayRunInPlace(const Op& op, unsigned i) { return op.info().mayWriteOver(0, i); }

using Buffer = ArenaBuffer;

/// Byte ranges [lo, hi) of an arena, sorted, disjoint, and those that touch
/// merged: the union of some placed buffers' bytes.
class OffsetUnion {
public:
  void add(int64_t lo, int64_t hi) {
    // The first range that ends at or after `lo` and those up to `hi` merge.
    auto first = std::lower_bound(spans_.begin(), spans_.end(), lo,
                                  [](const Span& s, int64_t v) { return s.second < v; });
    auto last = first;
    for (; last != spans_.end() && last->first <= hi; ++last) {
      lo = std::min(lo, last->first);
      hi = std::max(hi, last->second);
    }
    if (first == last) {
      spans_.insert(first, {lo, hi});
      return;
    }
    *first = {lo, hi};
    spans_.erase(first + 1, last);
  }
  /// The lowest offset at or above `at` where `bytes` bytes meet none of
  /// the ranges. `from` is a range no later one ends before `at` (0, or
  /// what the call before returned there for an `at` no higher): the
  /// first range to look at, updated.
  int64_t clearFrom(int64_t at, int64_t bytes, size_t& from) const {
    auto it = spans_.begin() + static_cast<std::ptrdiff_t>(from);
    if (it != spans_.end() && it->second <= at)
      it = std::upper_bound(it, spans_.end(), at,
                            [](int64_t v, const Span& s) { return v < s.second; });
    from = static_cast<size_t>(it - spans_.begin());
    for (; it != spans_.end() && it->first < at + bytes; ++it)
      at = it->second;
    return at;
  }
  bool empty() const { return spans_.empty(); }

private:
  using Span = std::pair<int64_t, int64_t>;
  std::vector<Span> spans_;
};

/// The bytes of one device's placed buffers that are live at the same time
/// as a given one, found without visiting each of those buffers (a
/// pipeline's many micro-batches in flight keep thousands live beside each
/// buffer, and the placement was quadratic in them). Two segment trees over
/// the device's buffer boundaries (their ranks): a placed buffer overlaps
/// [first, last] when it is live at `first` (`cover_`: each placed interval
/// in the O(log n) nodes that make it up, so the nodes above `first`'s leaf
/// hold those live there) or when it starts in (first, last] (`starts_`: a
/// node holds every buffer starting in its range). Each node keeps only the
/// union of its buffers' bytes, which a packed arena makes a few ranges.
/// Pinned buffers overlap every buffer and are kept aside.
class LiveIndex {
public:
  void addTime(size_t t) { times_.push_back(t); }
  /// After every addTime.
  void seal() {
    std::sort(times_.begin(), times_.end());
    times_.erase(std::unique(times_.begin(), times_.end()), times_.end());
    cover_.assign(2 * times_.size(), {});
    starts_.assign(2 * times_.size(), {});
  }
  void add(const Buffer& b) {
    const int64_t lo = b.offset, hi = b.offset + b.bytes;
    if (b.pinned) {
      pinned_.add(lo, hi);
      return;
    }
    const size_t n = times_.size();
    for (size_t l = rank(b.first) + n, h = rank(b.last) + 1 + n; l < h; l /= 2, h /= 2) {
      if (l & 1)
        cover_[l++].add(lo, hi);
      if (h & 1)
        cover_[--h].add(lo, hi);
    }
    for (size_t i = rank(b.first) + n; i > 0; i /= 2)
      starts_[i].add(lo, hi);
  }
  /// The lowest offset where `b` meets no placed buffer live beside it.
  int64_t lowestClear(const Buffer& b) {
    std::vector<std::pair<const OffsetUnion*, size_t>>& sets = sets_;
    sets.clear();
    auto use = [&](const OffsetUnion& u) {
      if (!u.empty())
        sets.emplace_back(&u, 0);
    };
    use(pinned_);
    const size_t n = times_.size();
    if (b.pinned) {
      if (n > 0)
        use(starts_[1]); // the root: every placed buffer
    } else {
      const size_t first = rank(b.first), last = rank(b.last);
      for (size_t i = first + n; i > 0; i /= 2)
        use(cover_[i]);
      for (size_t l = first + 1 + n, h = last + 1 + n; l < h; l /= 2, h /= 2) {
        if (l & 1)
          use(starts_[l++]);
        if (h & 1)
          use(starts_[--h]);
      }
    }
    // Each union moves the offset past what it overlaps, until none does.
    int64_t at = 0;
    for (size_t clear = 0, k = 0; clear < sets.size(); k = (k + 1) % sets.size()) {
      const int64_t next = sets[k].first->clearFrom(at, b.bytes, sets[k].second);
      clear = next == at ? clear + 1 : 1;
      at = next;
    }
    return at;
  }

private:
  size_t rank(size_t t) const {
    return std::lower_bound(times_.begin(), times_.end(), t) - times_.begin();
  }
  std::vector<size_t> times_;
  std::vector<OffsetUnion> cover_, starts_;
  OffsetUnion pinned_;
  std::vector<std::pair<const OffsetUnion*, size_t>> sets_; // lowestClear's, and its cursors
};

} // namespace

namespace {

/// The greedy placement (placeBuffers) of the buffers `ids` of one device.
void placeDevice(std::vector<ArenaBuffer>& buffers, std::vector<size_t> bySize) {
  std::stable_sort(bySize.begin(), bySize.end(),
                   [&](size_t a, size_t b) { return buffers[a].bytes > buffers[b].bytes; });
  LiveIndex index;
  for (size_t id : bySize) {
    index.addTime(buffers[id].first);
    index.addTime(buffers[id].last);
  }
  index.seal();
  for (size_t idx : bySize) {
    Buffer& b = buffers[idx];
    b.offset = index.lowestClear(b);
    index.add(b);
  }
}

/// What the placement of a device's buffers depends on: each buffer's
/// size, whether it is pinned, and the order of its lifetime's ends among
/// the device's others (their ranks), buffer by buffer in their order.
std::vector<int64_t> placementShape(const std::vector<ArenaBuffer>& buffers,
                                    const std::vector<size_t>& ids) {
  std::vector<size_t> times;
  for (size_t id : ids) {
    times.push_back(buffers[id].first);
    times.push_back(buffers[id].last);
  }
  std::sort(times.begin(), times.end());
  times.erase(std::unique(times.begin(), times.end()), times.end());
  auto rank = [&](size_t t) {
    return static_cast<int64_t>(std::lower_bound(times.begin(), times.end(), t) - times.begin());
  };
  std::vector<int64_t> shape;
  shape.reserve(4 * ids.size());
  for (size_t id : ids) {
    const ArenaBuffer& b = buffers[id];
    shape.insert(shape.end(), {b.bytes, b.pinned ? 1 : 0, rank(b.first), rank(b.last)});
  }
  return shape;
}

} // namespace

void placeBuffers(std::vector<ArenaBuffer>& buffers) {
  std::map<int64_t, std::vector<size_t>> byDevice;
  for (size_t i = 0; i < buffers.size(); ++i)
    byDevice[buffers[i].device].push_back(i);
  // Devices that run the same program (the replicas of data parallelism, a
  // pipeline stage's) have buffers of the same shape: placed once, their
  // offsets copied.
  std::map<std::vector<int64_t>, const std::vector<size_t>*> placedShapes;
  for (const auto& [device, ids] : byDevice) {
    auto [it, isNew] = placedShapes.emplace(placementShape(buffers, ids), &ids);
    if (isNew) {
      placeDevice(buffers, ids);
      continue;
    }
    const std::vector<size_t>& same = *it->second;
    for (size_t k = 0; k < ids.size(); ++k)
      buffers[ids[k]].offset = buffers[same[k]].offset;
  }
}

std::map<int64_t, int64_t> unsharedBytes(const Graph& g) {
  std::map<int64_t, int64_t> out;
  for (const auto& op : g.ops())
    for (unsigned r = 0; r < op->numResults(); ++r) {
      const Value* v = op->result(r);
      out[valueDevice(v).value_or(0)] += bufferBytes(std::max<int64_t>(v->type().sizeInBytes(), 1));
    }
  return out;
}

namespace {

/// stats.breakdown: each device's params and state, and its live arena
/// bytes at the point of most, by what made each buffer (its first value).
void breakDown(const Graph& g, const std::vector<Op*>& order,
               const std::vector<ArenaBuffer>& buffers,
               const std::unordered_map<const Value*, size_t>& bufferOf, MemoryPlanStats& stats) {
  // The weights: what an optimizer update updates (before the optimizer:
  // the trainable params); the rest is state.
  std::set<const Value*> trained;
  for (const Op* op : order)
    if (op->kind() == OpKind::SgdUpdate || op->kind() == OpKind::AdamUpdate) {
      // Under ZeRO-1 the update reads its share of the param's rows.
      const Value* w = op->operand(0);
      const Op* def = w->definingOp();
      trained.insert(def && def->kind() == OpKind::Slice ? def->operand(0) : w);
    }
  if (trained.empty())
    for (const Value* p : trainableParams(g))
      trained.insert(p);
  for (const auto& p : g.params()) {
    MemoryBreakdown& m = stats.breakdown[valueDevice(p.get()).value_or(0)];
    // Each at an aligned offset of the device's state, as the trainer
    // holds it.
    (trained.count(p.get()) ? m.params : m.state) += bufferBytes(p->type().sizeInBytes());
  }
  enum Kind { Activation, Gradient, Constant, Gathered };
  std::vector<Kind> kind(buffers.size(), Activation);
  // The backward: autodiff's ops, from the loss gradient's seed on, but
  // forward values computed again (recompute).
  bool seeded = false;
  for (size_t pos = 0; pos < order.size(); ++pos) {
    const Op* op = order[pos];
    seeded = seeded || isGradientSeed(*op);
    const bool b = seeded && !isRecomputed(*op);
    for (unsigned r = 0; r < op->numResults(); ++r) {
      auto it = bufferOf.find(op->result(r));
      if (it == bufferOf.end() || buffers[it->second].first != pos)
        continue;
      kind[it->second] = buffers[it->second].pinned ? Constant
                         : gathersParamShares(*op)  ? Gathered
                         : b                        ? Gradient
                                                    : Activation;
    }
  }
  // Live bytes per device at each op: +bytes at first, -bytes after last
  // (constants, written at start-up, at every op).
  // Per device, (position, change) pairs, summed by position in order.
  using Changes = std::vector<std::pair<size_t, int64_t>>;
  std::map<int64_t, Changes> delta, model;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const ArenaBuffer& b = buffers[i];
    Changes& d = delta[b.device];
    d.emplace_back(b.pinned ? 0 : b.first, b.bytes);
    if (!b.pinned)
      d.emplace_back(b.last + 1, -b.bytes);
    if (kind[i] == Gradient || kind[i] == Gathered) {
      Changes& m = model[b.device];
      m.emplace_back(b.first, b.bytes);
      m.emplace_back(b.last + 1, -b.bytes);
    }
  }
  // Calls f(position, live bytes after every change there) in order.
  auto sweep = [](Changes& changes, auto f) {
    std::sort(changes.begin(), changes.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    int64_t live = 0;
    for (size_t k = 0; k < changes.size();) {
      const size_t pos = changes[k].first;
      for (; k < changes.size() && changes[k].first == pos; ++k)
        live += changes[k].second;
      f(pos, live);
    }
  };
  for (auto& [device, d] : model) {
    MemoryBreakdown& m = stats.breakdown[device];
    sweep(d, [&](size_t, int64_t live) { m.gradientPeak = std::max(m.gradientPeak, live); });
  }
  for (auto& [device, d] : delta) {
    MemoryBreakdown& m = stats.breakdown[device];
    sweep(d, [&](size_t pos, int64_t live) {
      if (live > m.live) {
        m.live = live;
        m.at = pos;
      }
    });
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    const ArenaBuffer& b = buffers[i];
    MemoryBreakdown& m = stats.breakdown[b.device];
    if (!b.pinned && (b.first > m.at || b.last < m.at))
      continue;
    (kind[i] == Constant   ? m.constants
     : kind[i] == Gradient ? m.gradients
     : kind[i] == Gathered ? m.gathered
                           : m.activations) += b.bytes;
  }
}

} // namespace

llvm::Expected<MemoryPlanStats> planMemory(Graph& g, bool inPlace, bool freeScattered) {
  std::vector<Op*> order;
  std::unordered_map<const Op*, size_t> position;
  position.reserve(g.ops().size());
  for (auto& op : g.ops()) {
    position[op.get()] = order.size();
    order.push_back(op.get());
  }
  const size_t end = order.size(); // graph outputs are read after the last op

  // When each value is last read: graph outputs are read after the step,
  // and so is a value that the step's own work (no micro-batch: gradient
  // all-reduces, weight gradients and updates on stream 1) reads on another
  // stream than the one that wrote it: its bytes are not reused while that
  // stream may still read them, so reuse never makes stream 0 wait for it.
  // Within micro-batches (@mb: activations and gradients passed between
  // pipeline stages on streams of their own) a value is free after its last
  // reader, the reuse ordered by codegen's events: that bounds the
  // activations a 1F1B stage holds. With `freeScattered` (ZeRO-2, FSDP) so
  // is a gradient that a reduce_scatter reads: what reuses its bytes waits
  // for the reduce-scatter, and no whole gradient outlives its own; and so is
  // a param that FSDP gathers on the communication stream for a layer: what
  // reuses its bytes (the next layers' gathers) waits for the layer.
  std::unordered_map<const Value*, size_t> lastUse;
  lastUse.reserve(2 * order.size());
  auto streamOf = [](const Op* op) { return op ? op->annotations().stream.value_or(0) : 0; };
  for (size_t pos = 0; pos < order.size(); ++pos) {
    const Op& reader = *order[pos];
    const bool ordered = reader.annotations().microBatch.has_value() ||
                         (freeScattered && reader.kind() == OpKind::ReduceScatter);
    for (Value* x : reader.operands()) {
      const Op* def = x->definingOp();
      const bool gathered = freeScattered && def && gathersParamShares(*def);
      lastUse[x] = def && streamOf(def) != streamOf(&reader) && !ordered && !gathered
                       ? end
                       : std::max(lastUse[x], pos);
    }
  }
  for (Value* out : g.outputs())
    lastUse[out] = end;
  // An update that takes in gradient clipping's product reads the
  // product's gradient and factor itself (ir/FusedOps.h's gradScaleOf,
  // codegen's fold): they live until the update.
  for (size_t pos = 0; pos < order.size(); ++pos)
    if (const Op* mul = gradScaleOf(*order[pos]))
      for (Value* x : mul->operands())
        lastUse[x] = std::max(lastUse[x], pos);
  auto lastUseOf = [&](const Value* v, size_t def) {
    auto it = lastUse.find(v);
    return it == lastUse.end() ? def : it->second;
  };

  std::vector<Buffer> buffers;
  std::unordered_map<const Value*, size_t> bufferOf;
  bufferOf.reserve(2 * order.size());
  std::unordered_set<const Value*> overParam;
  MemoryPlanStats stats;
  auto join = [&](Value* v, size_t buffer, size_t pos) {
    bufferOf[v] = buffer;
    buffers[buffer].last = std::max(buffers[buffer].last, lastUseOf(v, pos));
  };
  for (size_t pos = 0; pos < order.size(); ++pos) {
    Op& op = *order[pos];
    for (unsigned r = 0; r < op.numResults(); ++r) {
      Value* v = op.result(r);
      // A collective's results live on several devices.
      int64_t device = valueDevice(v).value_or(0);
      // An update written straight over the param it updates: no buffer.
      if (inPlace && paramWrittenOver(op, r, position)) {
        overParam.insert(v);
        ++stats.overParams;
        continue;
      }
      // Views share their operand's buffer when it is in the arena.
      if (r == 0 && isAlias(op) && bufferOf.count(op.operand(0))) {
        join(v, bufferOf[op.operand(0)], pos);
        ++stats.aliased;
        continue;
      }
      if (r == 0 && inPlace) {
        bool placed = false;
        for (unsigned i = 0; i < op.numOperands() && !placed; ++i) {
          Value* x = op.operand(i);
          auto it = bufferOf.find(x);
          if (it == bufferOf.end() || !mayRunInPlace(op, i) || x->type() != v->type())
            continue;
          Buffer& b = buffers[it->second];
          // Legal when nothing reads the operand's buffer (the operand or a
          // view of it) after this op.
          if (b.pinned || b.last != pos || b.device != device)
            continue;
          join(v, it->second, pos);
          ++stats.inPlace;
          placed = true;
        }
        if (placed)
          continue;
      }
      Buffer b;
      b.bytes = bufferBytes(std::max<int64_t>(v->type().sizeInBytes(), 1));
      b.device = device;
      b.first = b.last = pos; // a result nobody reads lives while its op runs
      b.pinned = op.kind() == OpKind::Constant;
      buffers.push_back(b);
      join(v, buffers.size() - 1, pos);
    }
  }

  placeBuffers(buffers);

  for (Op* op : order) {
    if (op->numResults() == 0)
      continue;
    std::vector<int64_t> offsets;
    for (unsigned r = 0; r < op->numResults(); ++r)
      offsets.push_back(
          overParam.count(op->result(r)) ? kOverParam : buffers[bufferOf.at(op->result(r))].offset);
    op->annotations().bufferOffsets = offsets;
  }
  for (const Buffer& b : buffers) {
    stats.peakBytes[b.device] = std::max(stats.peakBytes[b.device], b.offset + b.bytes);
    stats.totalBytes += b.bytes;
  }
  stats.buffers = buffers.size();
  breakDown(g, order, buffers, bufferOf, stats);
  return stats;
}

namespace {

/// Plans one arena per device (see MemoryPlan.h) and reports the peak as
/// a note (or to the caller that takes the statistics); with a device spec,
/// checks that the plan fits a device of it.
class MemoryPlanPass : public Pass {
public:
  MemoryPlanPass(bool inPlace, bool freeScattered, std::optional<DeviceSpec> spec)
      : inPlace_(inPlace), freeScattered_(freeScattered), spec_(std::move(spec)) {}
  std::string_view name() const override { return "memory-plan"; }
  llvm::Error run(Graph& g, PassContext& ctx) override {
    auto stats = planMemory(g, inPlace_, freeScattered_);
    if (!stats)
      return stats.takeError();
    if (ctx.memoryPlanStats)
      *ctx.memoryPlanStats = *stats;
    std::string arenas;
    for (const auto& [device, bytes] : stats->peakBytes)
      arenas += llvm::formatv("{0}device {1}: {2} bytes", arenas.empty() ? "" : ", ", device, bytes)
                    .str();
    if (ctx.diag && !ctx.memoryPlanStats)
      ctx.diag(Severity::Note, {},
               llvm::formatv("memory-plan: arena {0}; {1} buffers ({2} bytes unshared), {3} "
                             "in place, {4} views, {5} updates over their params",
                             arenas.empty() ? std::string("empty") : arenas, stats->buffers,
                             stats->totalBytes, stats->inPlace, stats->aliased, stats->overParams)
                   .str());
    if (spec_)
      if (llvm::Error e = checkDeviceMemory(g, *stats, *spec_))
        return e;
    return checkMemoryPlan(g);
  }

private:
  bool inPlace_, freeScattered_;
  std::optional<DeviceSpec> spec_;
};

/// Checks the @buf annotations a plan (or a person) wrote.
class CheckMemoryPlanPass : public Pass {
public:
  std::string_view name() const override { return "check-memory-plan"; }
  llvm::Error run(Graph& g, PassContext&) override { return checkMemoryPlan(g); }
};

} // namespace

std::unique_ptr<Pass> createCheckMemoryPlanPass() {
  return std::make_unique<CheckMemoryPlanPass>();
}

llvm::Expected<std::unique_ptr<Pass>> createMemoryPlanPass(std::string_view options) {
  auto opts = PassOptions::parse("memory-plan", options, "",
                                 {"in-place", "free_scattered", "spec", "devices_per_gpu"});
  if (!opts)
    return opts.takeError();
  auto inPlace = opts->getFlag("in-place", true);
  if (!inPlace)
    return inPlace.takeError();
  auto freeScattered = opts->getFlag("free_scattered", false);
  if (!freeScattered)
    return freeScattered.takeError();
  std::optional<DeviceSpec> spec;
  if (opts->has("spec")) {
    auto s = loadDeviceSpec(opts->getString("spec", ""));
    if (!s)
      return s.takeError();
    spec = std::move(*s);
    auto perGpu = opts->getInt("devices_per_gpu", spec->devicesPerGpu);
    if (!perGpu)
      return perGpu.takeError();
    if (*perGpu < 1)
      return makeError("memory-plan: option 'devices_per_gpu' must be positive, got " +
                       std::to_string(*perGpu));
    spec->devicesPerGpu = *perGpu;
  }
  return std::make_unique<MemoryPlanPass>(*inPlace, *freeScattered, std::move(spec));
}

} // namespace lwcc
