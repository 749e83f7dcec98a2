//===- StepOrder.cpp - Streams, events and bytes of a scheduled step ------===//
#include "passes/StepOrder.h"

#include "passes/MemoryPlan.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <set>

namespace lwcc {

std::string Lane::str() const {
  return llvm::formatv("device {0} stream {1}", device, stream).str();
}

std::vector<Lane> lanesOf(const Op& op) {
  if (op.kind() == OpKind::Constant)
    return {};
  const int64_t stream = op.annotations().stream.value_or(0);
  if (!op.info().isCommunication())
    return {Lane{opDevice(op), stream}};
  std::set<int64_t> devices;
  for (unsigned i = 0; i < op.numOperands(); ++i)
    devices.insert(operandDevice(op, i));
  for (unsigned r = 0; r < op.numResults(); ++r)
    devices.insert(valueDevice(op.result(r)).value_or(0));
  std::vector<Lane> lanes;
  for (int64_t d : devices)
    lanes.push_back({d, stream});
  return lanes;
}

StepLayout::StepLayout(const Graph& g) {
  for (const auto& op : g.ops()) {
    position_.emplace(op.get(), position_.size());
    if (op->numResults() && !op->annotations().bufferOffsets)
      planned_ = false;
  }
  for (const auto& p : g.params())
    paramIndex_.emplace(p.get(), static_cast<int64_t>(paramIndex_.size()));
  if (!planned_) { // each result its own bytes
    int64_t next = static_cast<int64_t>(paramIndex_.size());
    for (const auto& op : g.ops())
      for (unsigned r = 0; r < op->numResults(); ++r)
        paramIndex_.emplace(op->result(r), next++);
  }
}

std::optional<Bytes> StepLayout::bytesOf(const Value* v) const {
  if (v->kind() == ValueKind::Input)
    return std::nullopt;
  const int64_t device = valueDevice(v).value_or(0);
  const int64_t size = v->type().sizeInBytes();
  if (v->kind() == ValueKind::Param || !planned_)
    return Bytes{device, paramIndex_.at(v), 0, size};
  const Op& def = *v->definingOp();
  int64_t offset = (*def.annotations().bufferOffsets)[v->resultIndex()];
  if (offset == kOverParam) {
    // Written over the param that its only use, an assign, updates.
    const Value* p = v->uses().front().user->operand(0);
    return Bytes{device, paramIndex_.at(p), 0, size};
  }
  return Bytes{device, -1, offset, offset + size};
}

bool StepLayout::aliases(const Op& op) const {
  if (op.numOperands() == 0)
    return false;
  unsigned from = op.kind() == OpKind::Assign ? 1 : 0;
  const Value* to = op.kind() == OpKind::Assign         ? op.operand(0)
                    : op.info().view && op.numResults() ? op.result(0)
                                                        : nullptr;
  if (!to)
    return false;
  auto a = bytesOf(op.operand(from)), b = bytesOf(to);
  return a && b && a->device == b->device && a->region == b->region && a->lo == b->lo;
}

std::vector<Access> StepLayout::accessesOf(const Op& op, int64_t device) const {
  std::vector<Access> out;
  if (op.kind() == OpKind::Constant || op.info().isEvent())
    return out;
  const bool comm = op.info().isCommunication();
  for (unsigned i = 0; i < op.numOperands(); ++i) {
    if (comm && operandDevice(op, i) != device)
      continue;
    if (op.kind() == OpKind::Assign && i == 0)
      continue; // the target: written below
    if (auto b = bytesOf(op.operand(i)))
      out.push_back({op.operand(i), *b, false});
  }
  if (op.kind() == OpKind::Assign) {
    if (auto b = bytesOf(op.operand(0)))
      out.push_back({op.operand(0), *b, true});
    return out;
  }
  for (unsigned r = 0; r < op.numResults(); ++r) {
    const Value* v = op.result(r);
    if (comm && valueDevice(v).value_or(0) != device)
      continue;
    if (auto b = bytesOf(v))
      out.push_back({v, *b, true});
  }
  return out;
}

std::vector<std::vector<Access>> StepLayout::accessesOnLanes(const Op& op,
                                                             const std::vector<Lane>& lanes) const {
  std::vector<std::vector<Access>> out(lanes.size());
  if (!op.info().isCommunication()) {
    for (size_t k = 0; k < lanes.size(); ++k)
      out[k] = accessesOf(op, lanes[k].device);
    return out;
  }
  std::unordered_map<int64_t, std::vector<size_t>> on; // device -> its lanes
  for (size_t k = 0; k < lanes.size(); ++k)
    on[lanes[k].device].push_back(k);
  auto add = [&](int64_t device, const Access& a) {
    if (auto it = on.find(device); it != on.end())
      for (size_t k : it->second)
        out[k].push_back(a);
  };
  // As accessesOf: the reads, then the writes (no communication op is an
  // assign, a constant or an event).
  for (unsigned i = 0; i < op.numOperands(); ++i)
    if (auto b = bytesOf(op.operand(i)))
      add(operandDevice(op, i), {op.operand(i), *b, false});
  for (unsigned r = 0; r < op.numResults(); ++r)
    if (auto b = bytesOf(op.result(r)))
      add(valueDevice(op.result(r)).value_or(0), {op.result(r), *b, true});
  return out;
}

const ByteTracker::Storage* ByteTracker::find(const Value* v) const {
  auto it = where_.find(v);
  if (it == where_.end())
    return nullptr;
  auto region = live_.find(it->second.first);
  if (region == live_.end())
    return nullptr;
  auto s = region->second.find(it->second.second);
  return s == region->second.end() ? nullptr : &s->second;
}

bool ByteTracker::read(const Value* v, int node) {
  auto* s = const_cast<Storage*>(find(v));
  if (!s)
    return false;
  if (s->readers.empty() || s->readers.back() != node)
    s->readers.push_back(node);
  return true;
}

void ByteTracker::alias(const Value* view, const Value* of) {
  auto it = where_.find(of);
  if (it == where_.end() || !find(of))
    return;
  where_[view] = it->second;
  const_cast<Storage*>(find(of))->values.push_back(view);
}

std::vector<const ByteTracker::Storage*> ByteTracker::overlapping(const Bytes& b) const {
  std::vector<const Storage*> out;
  auto region = live_.find({b.device, b.region});
  if (region == live_.end())
    return out;
  const auto& m = region->second;
  // Storages do not overlap each other: the one starting before b.lo, and
  // those starting inside b.
  auto it = m.upper_bound(b.lo);
  if (it != m.begin()) {
    auto prev = std::prev(it);
    if (prev->second.bytes.hi > b.lo)
      out.push_back(&prev->second);
  }
  for (; it != m.end() && it->first < b.hi; ++it)
    out.push_back(&it->second);
  return out;
}

void ByteTracker::write(const Value* v, const Bytes& b, int node) {
  Key key{b.device, b.region};
  auto& m = live_[key];
  std::vector<Storage> rests;
  for (const Storage* s : overlapping(b)) {
    for (const Value* x : s->values)
      if (auto w = where_.find(x);
          w != where_.end() && w->second == std::make_pair(key, s->bytes.lo))
        where_.erase(w);
    // The bytes of s that b leaves alone hold no value any more (find() no
    // longer finds s's values), but a later write over them still comes
    // after s's writer and readers: keep them, with that history.
    for (auto [lo, hi] : {std::pair{s->bytes.lo, b.lo}, std::pair{b.hi, s->bytes.hi}})
      if (lo < hi) {
        Storage rest = *s;
        rest.bytes.lo = lo;
        rest.bytes.hi = hi;
        rests.push_back(std::move(rest));
      }
    m.erase(s->bytes.lo);
  }
  for (Storage& rest : rests) {
    const int64_t lo = rest.bytes.lo;
    m.emplace(lo, std::move(rest));
  }
  Storage s;
  s.bytes = b;
  s.writer = node;
  s.values = {v};
  m.emplace(b.lo, std::move(s));
  where_[v] = {key, b.lo};
}

std::string describeOn(const Op& op, const Lane& lane) {
  return op.describe() + " on " + lane.str();
}

} // namespace lwcc
