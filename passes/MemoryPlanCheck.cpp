//===- MemoryPlanCheck.cpp - A memory plan checked and run ----------------===//
//
// What proves a memory plan (@buf annotations, planned or written by hand):
// checkMemoryPlan's overlap and lifetime check, and runInArenas, which runs
// the step with every value stored at its offset of its device's arena, so
// that a plan whose buffers collide computes something else than the
// interpreter (--check-memory-plan).
//
//===----------------------------------------------------------------------===//
#include "interp/Eval.h"
#include "interp/Interpreter.h"
#include "ir/Params.h"
#include "passes/MemoryPlan.h"
#include "passes/TrainingSupport.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <queue>
#include <unordered_map>

namespace lwcc {

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
      if (r == 0 && op->info().view && storageOf.count(op->operand(0)) &&
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
          if (later.def->operand(i) == m && later.def->info().mayWriteOver(0, i) &&
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

} // namespace lwcc
