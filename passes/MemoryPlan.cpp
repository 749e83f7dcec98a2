//===- MemoryPlan.cpp - Arena offsets for every op result -----------------===//
#include "passes/MemoryPlan.h"

#include "interp/Eval.h"
#include "interp/Interpreter.h"
#include "ir/Params.h"
#include "passes/Pass.h"
#include "passes/PassOptions.h"
#include "passes/TrainingSupport.h"
#include "plan/DeviceSpec.h"

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

constexpr int64_t kAlignment = 256; // bytes: what CUDA allocations and cuDNN like

int64_t alignUp(int64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

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
      out[valueDevice(v).value_or(0)] += alignUp(std::max<int64_t>(v->type().sizeInBytes(), 1));
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
    (trained.count(p.get()) ? m.params : m.state) += alignUp(p->type().sizeInBytes());
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
      b.bytes = alignUp(std::max<int64_t>(v->type().sizeInBytes(), 1));
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

llvm::Error checkMemoryPlan(const Graph& g) {
  std::vector<const Op*> order;
  std::unordered_map<const Op*, size_t> position;
  for (const auto& op : g.ops()) {
    position[op.get()] = order.size();
    order.push_back(op.get());
  }
  const size_t end = order.size();
  std::unordered_map<const Value*, size_t> lastUse;
  for (size_t pos = 0; pos < order.size(); ++pos)
    for (Value* x : order[pos]->operands())
      lastUse[x] = pos;
  for (Value* out : g.outputs())
    lastUse[out] = end;

  // A storage is a value and the views of it that share its offset.
  struct Storage {
    const Op* def;
    int64_t device, lo, hi;
    size_t first, last;
    std::vector<const Value*> members;
  };
  std::vector<Storage> storages;
  std::unordered_map<const Value*, size_t> storageOf;
  for (size_t pos = 0; pos < order.size(); ++pos) {
    const Op* op = order[pos];
    if (op->numResults() == 0)
      continue;
    const auto& offsets = op->annotations().bufferOffsets;
    if (!offsets)
      return op->emitError("has no @buf: run memory-plan first");
    for (unsigned r = 0; r < op->numResults(); ++r) {
      const Value* v = op->result(r);
      int64_t lo = (*offsets)[r];
      if (lo == kOverParam) {
        if (!paramWrittenOver(*op, r, position))
          return op->emitError(llvm::formatv(
              "@buf({0}) of result #{1}: it is not an update written over its param (its only "
              "use must be the assign of an operand it may overwrite, read by no later op)",
              kOverParam, r));
        continue;
      }
      size_t last = lastUse.count(v) ? lastUse[v] : pos;
      if (r == 0 && isAlias(*op) && storageOf.count(op->operand(0)) &&
          storages[storageOf[op->operand(0)]].lo == lo) {
        Storage& s = storages[storageOf[op->operand(0)]];
        s.last = std::max(s.last, last);
        s.members.push_back(v);
        storageOf[v] = storageOf[op->operand(0)];
        continue;
      }
      bool pinned = op->kind() == OpKind::Constant;
      storageOf[v] = storages.size();
      storages.push_back({op,
                          valueDevice(v).value_or(0),
                          lo,
                          lo + v->type().sizeInBytes(),
                          pinned ? 0 : pos,
                          pinned ? end : last,
                          {v}});
    }
  }
  // Storages may share bytes only when their lifetimes do not overlap, or
  // when the later one is written in place over the earlier one by an op
  // that reads it as it dies.
  // The later of storages a < b sharing bytes while both live, or null
  // where it is written in place over the earlier one.
  auto conflict = [&](size_t a, size_t b) -> const Storage* {
    const Storage &x = storages[a], &y = storages[b];
    const Storage& later = x.first >= y.first ? x : y;
    const Storage& earlier = x.first >= y.first ? y : x;
    if (earlier.last == later.first && earlier.first < later.first)
      // ... by an op whose kernel may write over that operand.
      for (unsigned i = 0; i < later.def->numOperands(); ++i)
        for (const Value* m : earlier.members)
          if (later.def->operand(i) == m && mayRunInPlace(*later.def, i) &&
              m->type() == later.members.front()->type())
            return nullptr;
    return &later;
  };
  // A sweep over each device's storages in the order they become live: the
  // ones still live are kept by offset, and a new one is compared with
  // those whose bytes may reach it (starting less than the device's
  // longest storage below it), not with every storage of the step.
  std::map<int64_t, std::vector<size_t>> byDevice;
  for (size_t i = 0; i < storages.size(); ++i)
    byDevice[storages[i].device].push_back(i);
  std::optional<std::pair<size_t, size_t>> bad; // the first overlapping pair (a < b)
  for (auto& [device, ids] : byDevice) {
    int64_t longest = 0;
    for (size_t i : ids)
      longest = std::max(longest, storages[i].hi - storages[i].lo);
    std::stable_sort(ids.begin(), ids.end(),
                     [&](size_t a, size_t b) { return storages[a].first < storages[b].first; });
    std::multimap<int64_t, size_t> live; // offset -> storage
    using Ending = std::pair<size_t, std::multimap<int64_t, size_t>::iterator>;
    auto laterEnd = [](const Ending& a, const Ending& b) { return a.first > b.first; };
    std::priority_queue<Ending, std::vector<Ending>, decltype(laterEnd)> ending(laterEnd);
    for (size_t id : ids) {
      const Storage& y = storages[id];
      while (!ending.empty() && ending.top().first < y.first) {
        live.erase(ending.top().second);
        ending.pop();
      }
      for (auto it = live.upper_bound(y.lo - longest); it != live.end() && it->first < y.hi; ++it) {
        const Storage& x = storages[it->second];
        if (x.hi <= y.lo)
          continue;
        std::pair<size_t, size_t> pair = std::minmax(id, it->second);
        if (conflict(pair.first, pair.second) && (!bad || pair < *bad))
          bad = pair;
      }
      ending.push({y.last, live.emplace(y.lo, id)});
    }
  }
  if (bad) {
    const Storage& later = *conflict(bad->first, bad->second);
    const Storage& earlier =
        &later == &storages[bad->first] ? storages[bad->second] : storages[bad->first];
    return later.def->emitError(llvm::formatv("@buf [{0}, {1}) overlaps the live result of "
                                              "{2} at [{3}, {4})",
                                              later.lo, later.hi, earlier.def->describe(),
                                              earlier.lo, earlier.hi)
                                    .str());
  }
  return llvm::Error::success();
}

namespace {

/// Stores `t` at `offset` of `arena` in its element type.
void storeTensor(std::vector<unsigned char>& arena, int64_t offset, const Tensor& t) {
  unsigned char* p = arena.data() + offset;
  for (int64_t k = 0; k < t.size(); ++k) {
    switch (t.type.dtype) {
    case DType::F64:
      std::memcpy(p + 8 * k, &t.f[k], 8);
      break;
    case DType::I64:
      std::memcpy(p + 8 * k, &t.i[k], 8);
      break;
    case DType::I32: {
      int32_t v = static_cast<int32_t>(t.i[k]);
      std::memcpy(p + 4 * k, &v, 4);
      break;
    }
    case DType::Bool:
      p[k] = t.i[k] != 0;
      break;
    default: {
      float v = static_cast<float>(t.f[k]);
      std::memcpy(p + 4 * k, &v, 4);
      break;
    }
    }
  }
}

Tensor loadTensor(const std::vector<unsigned char>& arena, int64_t offset, const TensorType& type) {
  Tensor t(type);
  const unsigned char* p = arena.data() + offset;
  for (int64_t k = 0; k < t.size(); ++k) {
    switch (type.dtype) {
    case DType::F64:
      std::memcpy(&t.f[k], p + 8 * k, 8);
      break;
    case DType::I64:
      std::memcpy(&t.i[k], p + 8 * k, 8);
      break;
    case DType::I32: {
      int32_t v;
      std::memcpy(&v, p + 4 * k, 4);
      t.i[k] = v;
      break;
    }
    case DType::Bool:
      t.i[k] = p[k];
      break;
    default: {
      float v;
      std::memcpy(&v, p + 4 * k, 4);
      t.f[k] = v;
      break;
    }
    }
  }
  return t;
}

} // namespace

llvm::Expected<std::vector<Tensor>> runInArenas(const Graph& g, const std::vector<Tensor>& inputs,
                                                const WeightMap& weights) {
  if (llvm::Error e = checkMemoryPlan(g))
    return e;
  for (const auto& op : g.ops())
    for (unsigned r = 0; r < op->numResults(); ++r)
      if (DType t = op->result(r)->type().dtype; t == DType::F16 || t == DType::BF16)
        return op->emitError("runInArenas: f16 and bf16 values are not emulated");
  std::map<int64_t, std::vector<unsigned char>> arenas;
  for (const auto& op : g.ops())
    for (unsigned r = 0; r < op->numResults(); ++r) {
      auto& arena = arenas[valueDevice(op->result(r)).value_or(0)];
      if ((*op->annotations().bufferOffsets)[r] == kOverParam)
        continue;
      int64_t end = (*op->annotations().bufferOffsets)[r] + op->result(r)->type().sizeInBytes();
      if (static_cast<int64_t>(arena.size()) < end)
        arena.resize(end);
    }
  // Inputs and params live outside the arenas, stored in their element
  // types as everything else; so do updates written over their params.
  std::map<const Value*, Tensor> outside;
  auto keep = [&](const Value* v, const Tensor& t) {
    std::vector<unsigned char> bytes(t.type.sizeInBytes());
    storeTensor(bytes, 0, t);
    outside[v] = loadTensor(bytes, 0, t.type);
  };
  if (inputs.size() != g.inputs().size())
    return makeError("runInArenas: wrong number of inputs");
  for (size_t k = 0; k < g.inputs().size(); ++k)
    keep(g.input(k), inputs[k]);
  for (const auto& p : g.params()) {
    auto it = weights.find(p->paramName());
    if (it == weights.end()) {
      keep(p.get(), Tensor(p->type()));
    } else if (!p->shard().empty()) {
      auto piece = kernels::readShard(*p, it->second);
      if (!piece)
        return piece.takeError();
      keep(p.get(), *piece);
    } else {
      keep(p.get(), it->second);
    }
  }
  auto read = [&](const Value* v) -> Tensor {
    if (auto it = outside.find(v); it != outside.end())
      return it->second;
    const Op* def = v->definingOp();
    return loadTensor(arenas[valueDevice(v).value_or(0)],
                      (*def->annotations().bufferOffsets)[v->resultIndex()], v->type());
  };
  for (const auto& op : g.ops()) {
    std::vector<Tensor> operands;
    for (Value* v : op->operands())
      operands.push_back(read(v));
    std::vector<const Tensor*> ptrs;
    for (const Tensor& t : operands)
      ptrs.push_back(&t);
    auto results = evaluateOp(*op, ptrs, Precision::F32);
    if (!results)
      return results.takeError();
    for (unsigned r = 0; r < op->numResults(); ++r) {
      int64_t offset = (*op->annotations().bufferOffsets)[r];
      if (offset == kOverParam)
        keep(op->result(r), (*results)[r]);
      else
        storeTensor(arenas[valueDevice(op->result(r)).value_or(0)], offset, (*results)[r]);
    }
  }
  std::vector<Tensor> out;
  for (const Value* v : g.outputs())
    out.push_back(read(v));
  return out;
}

std::map<int64_t, int64_t> streamsPerDevice(const Graph& g) {
  std::map<int64_t, std::set<int64_t>> seen;
  for (const auto& op : g.ops()) {
    const int64_t stream = op->annotations().stream.value_or(0);
    if (op->info().isCommunication()) {
      for (const Value* v : op->operands())
        seen[v->device().value_or(0)].insert(stream);
      for (unsigned r = 0; r < op->numResults(); ++r)
        seen[op->result(r)->device().value_or(0)].insert(stream);
    } else {
      seen[op->annotations().device.value_or(0)].insert(stream);
    }
  }
  std::map<int64_t, int64_t> out;
  for (const auto& [device, streams] : seen)
    out[device] = static_cast<int64_t>(streams.size());
  return out;
}

namespace {

/// The ops the CUDA runtime runs as cuDNN convolutions (each direction).
bool isConvolution(const Op& op) {
  return op.kind() == OpKind::Conv2d || op.kind() == OpKind::Conv2dGradInput ||
         op.kind() == OpKind::Conv2dGradFilter;
}

} // namespace

int64_t convPadBytes(const Op& op) {
  if (!isConvolution(op))
    return 0;
  const bool grad = op.kind() == OpKind::Conv2dGradInput;
  // The image: x (operand 0), or the gradient's result dx of input_shape.
  const TensorType& x = grad ? op.result(0)->type() : op.operand(0)->type();
  const std::vector<int64_t> pads = op.getInts("pads");
  if (x.rank() != 4 || pads.size() != 4)
    return 0;
  const int64_t dh = std::abs(pads[0] - pads[2]), dw = std::abs(pads[1] - pads[3]);
  if (dh == 0 && dw == 0)
    return 0;
  const int64_t bytes =
      x.shape[0] * x.shape[1] * (x.shape[2] + dh) * (x.shape[3] + dw) * dtypeSize(x.dtype);
  return alignUp(bytes);
}

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

/// The CUDA runtime's own device memory per device: its error flag (an int
/// in one allocation, which a GPU rounds up).
constexpr int64_t kRuntimeBytesPerDevice = 256;

int64_t mibUp(int64_t n) { return (n + kMiB - 1) / kMiB * kMiB; }

/// What a device of a plan holds besides the convolutions' algorithm
/// workspaces (see checkDeviceMemory).
struct DeviceBytes {
  int64_t arena = 0, params = 0, inputs = 0;
  int64_t libraries = 0; ///< the spec's library workspaces, per stream
  int64_t runtime = 0;   ///< the CUDA runtime's own (kRuntimeBytesPerDevice)
  int64_t pads = 0;      ///< padded input copies: the largest of each stream's, whole MiB
  int64_t convStreams = 0;
  int64_t total() const { return arena + params + inputs + libraries + runtime + pads; }
};

std::map<int64_t, DeviceBytes> deviceBytes(const Graph& g, const MemoryPlanStats& stats,
                                           const DeviceSpec& spec) {
  std::map<int64_t, DeviceBytes> out;
  for (const auto& [device, arena] : stats.peakBytes)
    out[device].arena = arena;
  for (const auto& p : g.params())
    out[p->device().value_or(0)].params += alignUp(p->type().sizeInBytes());
  if (spec.workspaceBytesPerStream > 0) {
    const std::map<int64_t, int64_t> streams = streamsPerDevice(g);
    for (auto& [device, b] : out) {
      b.libraries = spec.workspaceBytesPerStream * (streams.count(device) ? streams.at(device) : 1);
      b.runtime = kRuntimeBytesPerDevice;
    }
    // A CUDA trainer's stream grows one workspace (to whole MiB) to the most
    // a kernel of it takes: a convolution with uneven pads copies its image
    // padded to the larger pad there, its algorithm's workspace after it.
    std::map<std::pair<int64_t, int64_t>, int64_t> pads; // (device, stream) -> bytes
    for (const auto& op : g.ops())
      if (isConvolution(*op)) {
        int64_t& most =
            pads[{op->annotations().device.value_or(0), op->annotations().stream.value_or(0)}];
        most = std::max(most, convPadBytes(*op));
      }
    for (const auto& [where, bytes] : pads) {
      out[where.first].pads += mibUp(bytes);
      ++out[where.first].convStreams;
    }
  }
  if (spec.inputsOnDevice) {
    // On several devices the rows of each input the device reads (as the
    // CUDA trainer packs them), else the whole batch.
    const int64_t devices = stats.peakBytes.empty() ? 1 : stats.peakBytes.rbegin()->first + 1;
    const PackedInputs held = devices > 1 ? packInputRows(g, devices, kAlignment) : PackedInputs{};
    int64_t whole = 0;
    for (const auto& in : g.inputs())
      whole += alignUp(in->type().sizeInBytes());
    for (int64_t d = 0; d < devices; ++d)
      out[d].inputs = held.bytes.empty() ? whole : held.bytes[static_cast<size_t>(d)];
  }
  return out;
}

} // namespace

llvm::Error checkDeviceMemory(const Graph& g, const MemoryPlanStats& stats,
                              const DeviceSpec& spec) {
  std::string over;
  for (const auto& [device, b] : deviceBytes(g, stats, spec)) {
    if (!stats.peakBytes.count(device) || b.total() <= spec.memoryBytes)
      continue;
    over +=
        llvm::formatv(
            "\n  device {0}: {1} bytes ({2} arena + {3} params{4}{5}{6}) > {7} bytes", device,
            b.total(), b.arena, b.params,
            spec.workspaceBytesPerStream > 0
                ? llvm::formatv(" + {0} library workspaces + {1} runtime", b.libraries, b.runtime)
                      .str()
                : std::string(),
            b.pads > 0 ? llvm::formatv(" + {0} padded convolution inputs", b.pads).str()
                       : std::string(),
            b.inputs > 0 ? llvm::formatv(" + {0} input batch", b.inputs).str() : std::string(),
            spec.memoryBytes)
            .str();
  }
  if (over.empty())
    return llvm::Error::success();
  return makeError("the plan needs more memory than a device of spec '" + spec.name +
                   "' has:" + over);
}

std::map<int64_t, int64_t> convWorkspaceLimits(const Graph& g, const MemoryPlanStats& stats,
                                               const DeviceSpec& spec) {
  std::map<int64_t, int64_t> out;
  if (spec.workspaceBytesPerStream <= 0)
    return out;
  for (const auto& [device, b] : deviceBytes(g, stats, spec)) {
    if (!stats.peakBytes.count(device) || b.convStreams == 0)
      continue;
    const int64_t left = std::max<int64_t>(0, spec.memoryBytes - b.total());
    out[device] = std::min(kConvWorkspaceLimitBytes, left / b.convStreams / kMiB * kMiB);
  }
  return out;
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
  auto opts =
      PassOptions::parse("memory-plan", options, "", {"in-place", "free_scattered", "spec"});
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
  }
  return std::make_unique<MemoryPlanPass>(*inPlace, *freeScattered, std::move(spec));
}

} // namespace lwcc
