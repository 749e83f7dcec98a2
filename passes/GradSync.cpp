//===- GradSync.cpp - Sum the gradients of replicated params --------------===//
#include "passes/Pass.h"
#include "passes/PassOptions.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace lwcc {

namespace {

/// After autodiff on a materialized graph, each device's copy of a param
/// has the gradient of that device's part of the loss; the param's gradient
/// is their sum. Steps:
///  1. Group the @grad outputs by initializer: a group of whole copies on
///     several devices is replicated; shards that do not overlap need no
///     sum; anything else is an error.
///  2. Order the replicated groups by the position of the op that writes
///     their last gradient: the order backward produces them.
///  3. Fill buckets in that order up to `bucket_bytes` (a bucket holds
///     groups on the same devices). Each bucket is one all_reduce, placed
///     right after its last gradient is written, so it overlaps the rest of
///     backward; only the updates of its params, which read its results,
///     wait for it. With `stream` = s > 0 the all_reduces get @stream(s): a
///     communication stream of each device, beside backward on stream 0.
///  4. With shard=zero1 (ZeRO stage 1), a replicated param whose dim 0 has
///     a row for each device is not all-reduced: one reduce_scatter, placed
///     as a bucket is, leaves each device the sum of its share of the rows
///     (the first dim0 % p devices one row more), which becomes that copy's
///     @grad output; the optimizer pass then updates each share on its
///     device with sharded state and all-gathers the param.
///  5. With shard=fsdp (materialize's), a param kept as shares has its
///     gradient from the reduce_scatter that autodiff made of its gather:
///     nothing to sum; the reduce_scatter goes on `stream` beside backward,
///     as a bucket does.
///  6. On a folded step (fold-replicas: a priced candidate whose left-out
///     devices' ops other devices' stand for), a left-out device's whole
///     copy of a param takes part in its group with a zero gradient where
///     the copy of the device that stands for it has a gradient, so that
///     each all_reduce spans the devices it spans in the whole step.
class GradSyncPass : public Pass {
public:
  GradSyncPass(int64_t bucketBytes, int64_t stream, bool zero1, bool fsdp)
      : bucketBytes_(bucketBytes), stream_(stream), zero1_(zero1), fsdp_(fsdp) {}
  std::string_view name() const override { return "grad-sync"; }

  llvm::Error run(Graph& g, PassContext&) override {
    const auto& folded = g.foldedInto();
    if (!folded.empty() && (zero1_ || fsdp_))
      return makeError("grad-sync: a folded step (fold-replicas) shards no gradient");
    // Left-out devices' whole param copies, by initializer.
    std::map<std::string, std::vector<int64_t>> leftOut;
    for (const auto& p : g.params())
      if (p->shard().empty() && folded.count(p->device().value_or(0)))
        leftOut[p->paramName()].push_back(p->device().value_or(0));
    std::map<std::string, std::vector<unsigned>> groups; // initializer -> output indices
    for (unsigned i = 0; i < g.outputs().size(); ++i)
      if (const Value* p = g.outputGradOf(i)) {
        groups[p->paramName()].push_back(i);
        Op* def = g.outputs()[i]->definingOp();
        if (fsdp_ && stream_ > 0 && def && def->kind() == OpKind::ReduceScatter)
          def->annotations().stream = stream_;
      }
    std::unordered_map<const Op*, size_t> position;
    std::vector<Op*> opAt; // by position (the all-reduces go after these)
    for (const auto& op : g.ops()) {
      position[op.get()] = opAt.size();
      opAt.push_back(op.get());
    }
    auto writtenAt = [&](unsigned out) -> size_t {
      const Value* v = g.outputs()[out];
      return v->definingOp() ? position.at(v->definingOp()) : 0;
    };

    struct Group {
      std::vector<unsigned> outputs; // in device order; kZero: a left-out copy's
      std::vector<int64_t> devices;
      size_t last = 0;
      int64_t bytes = 0;
      unsigned firstOutput() const {
        return *std::find_if(outputs.begin(), outputs.end(), [](unsigned o) { return o != kZero; });
      }
    };
    std::vector<Group> replicated;
    for (auto& [init, outs] : groups) {
      // A left-out copy has a gradient where the copy of the device that
      // stands for it has one.
      std::vector<int64_t> zeros;
      if (auto it = leftOut.find(init); it != leftOut.end())
        for (int64_t d : it->second)
          if (std::any_of(outs.begin(), outs.end(), [&](unsigned o) {
                return g.outputGradOf(o)->device().value_or(0) == folded.at(d);
              }))
            zeros.push_back(d);
      if (outs.size() + zeros.size() < 2)
        continue;
      bool whole = true;
      for (unsigned o : outs)
        whole &= g.outputGradOf(o)->shard().empty();
      if (!whole) {
        if (llvm::Error e = checkDisjoint(g, init, outs))
          return e;
        continue;
      }
      Group grp;
      std::vector<std::pair<int64_t, unsigned>> byDevice;
      for (unsigned o : outs) {
        byDevice.emplace_back(g.outputGradOf(o)->device().value_or(0), o);
        grp.last = std::max(grp.last, writtenAt(o));
      }
      for (int64_t d : zeros)
        byDevice.emplace_back(d, kZero);
      std::sort(byDevice.begin(), byDevice.end());
      for (auto [d, o] : byDevice) {
        grp.devices.push_back(d);
        grp.outputs.push_back(o);
      }
      const TensorType& t = g.outputs()[outs[0]]->type();
      grp.bytes = t.numElements() * dtypeSize(t.dtype);
      replicated.push_back(std::move(grp));
    }
    std::stable_sort(replicated.begin(), replicated.end(),
                     [](const Group& a, const Group& b) { return a.last < b.last; });

    // ZeRO-1: the params with a row for each device are reduce-scattered.
    auto scattered = [&](const Group& grp) {
      const TensorType& t = g.outputs()[grp.firstOutput()]->type();
      return zero1_ && t.rank() >= 1 && t.shape[0] >= static_cast<int64_t>(grp.devices.size());
    };
    std::vector<std::vector<const Group*>> buckets;
    int64_t filled = 0;
    for (const Group& grp : replicated) {
      if (scattered(grp)) {
        if (llvm::Error e = reduceScatter(g, grp.outputs, grp.devices, opAt.at(grp.last)))
          return e;
        continue;
      }
      if (buckets.empty() || filled >= bucketBytes_ ||
          buckets.back().front()->devices != grp.devices) {
        buckets.emplace_back();
        filled = 0;
      }
      buckets.back().push_back(&grp);
      filled += grp.bytes;
    }
    Builder b(g);
    for (const auto& bucket : buckets) {
      std::vector<Value*> operands;
      size_t last = 0;
      for (const Group* grp : bucket)
        last = std::max(last, grp->last);
      b.setInsertionPointAfter(opAt.at(last));
      Location loc;
      loc.name = "grad-sync";
      b.setLoc(loc);
      for (const Group* grp : bucket)
        for (size_t k = 0; k < grp->outputs.size(); ++k) {
          if (grp->outputs[k] != kZero) {
            operands.push_back(g.outputs()[grp->outputs[k]]);
            continue;
          }
          b.setDevice(grp->devices[k]);
          const TensorType& t = g.outputs()[grp->firstOutput()]->type();
          operands.push_back(
              b.create(OpKind::Constant, {}, {t}, {{"value", Attribute(std::vector<double>{0.0})}})
                  ->result());
          b.setDevice(std::nullopt);
        }
      auto ar = b.createInferred(OpKind::AllReduce, operands,
                                 {{"devices", Attribute(bucket.front()->devices)}},
                                 static_cast<unsigned>(operands.size()));
      if (!ar)
        return ar.takeError();
      if (stream_ > 0)
        (*ar)->annotations().stream = stream_;
      size_t r = 0;
      for (const Group* grp : bucket)
        for (unsigned o : grp->outputs) {
          Value* sum = (*ar)->result(static_cast<unsigned>(r++));
          if (o == kZero)
            continue;
          sum->setName(g.outputs()[o]->name().empty() ? "" : g.outputs()[o]->name() + ".sum");
          g.setOutput(o, sum);
        }
    }
    return llvm::Error::success();
  }

private:
  /// ZeRO-1: one reduce_scatter after `after` of the gradient outputs
  /// `outputs` (a replicated param's copies on `devices`), whose shares
  /// become those outputs.
  llvm::Error reduceScatter(Graph& g, const std::vector<unsigned>& outputs,
                            const std::vector<int64_t>& devices, Op* after) {
    std::vector<Value*> operands;
    for (unsigned o : outputs)
      operands.push_back(g.outputs()[o]);
    const int64_t p = static_cast<int64_t>(devices.size());
    const int64_t rows = operands[0]->type().shape[0];
    std::vector<int64_t> sizes(static_cast<size_t>(p), rows / p);
    for (int64_t i = 0; i < rows % p; ++i)
      ++sizes[static_cast<size_t>(i)];
    Builder b(g);
    b.setInsertionPointAfter(after);
    Location loc;
    loc.name = "grad-sync";
    b.setLoc(loc);
    auto rs = b.createInferred(OpKind::ReduceScatter, operands,
                               {{"devices", Attribute(devices)},
                                {"axis", Attribute(int64_t{0})},
                                {"sizes", Attribute(sizes)}},
                               static_cast<unsigned>(p));
    if (!rs)
      return rs.takeError();
    if (stream_ > 0)
      (*rs)->annotations().stream = stream_;
    for (int64_t i = 0; i < p; ++i) {
      unsigned o = outputs[static_cast<size_t>(i)];
      Value* part = (*rs)->result(static_cast<unsigned>(i));
      part->setName(g.outputs()[o]->name().empty() ? "" : g.outputs()[o]->name() + ".part");
      g.setOutput(o, part);
    }
    return llvm::Error::success();
  }

  static llvm::Error checkDisjoint(const Graph& g, const std::string& init,
                                   const std::vector<unsigned>& outs) {
    // Shards of one dim that do not overlap: each holds its own gradient.
    int64_t dim = -1;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (unsigned o : outs) {
      const Value* p = g.outputGradOf(o);
      if (p->shard().size() != 1 || (dim >= 0 && p->shard()[0].dim != dim))
        return makeError(p->loc(), "grad-sync: param \"" + init +
                                       "\" is used both whole and as shards, or split along "
                                       "several dims; its gradients cannot be combined yet");
      dim = p->shard()[0].dim;
      ranges.emplace_back(p->shard()[0].offset, p->shard()[0].offset + p->type().shape[dim]);
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i)
      if (ranges[i].first < ranges[i - 1].second)
        return makeError("grad-sync: shards of param \"" + init +
                         "\" overlap; their gradients cannot be combined yet");
    return llvm::Error::success();
  }

  static constexpr unsigned kZero = ~0u;
  int64_t bucketBytes_, stream_;
  bool zero1_, fsdp_;
};

} // namespace

llvm::Expected<std::unique_ptr<Pass>> createGradSyncPass(std::string_view options) {
  auto opts =
      PassOptions::parse("grad-sync", options, "bucket_bytes", {"bucket_bytes", "stream", "shard"});
  if (!opts)
    return opts.takeError();
  auto bytes = opts->getIntIn("bucket_bytes", int64_t{25} << 20, 0, INT64_MAX);
  if (!bytes)
    return bytes.takeError();
  auto stream = opts->getIntIn("stream", 0, 0, 64);
  if (!stream)
    return stream.takeError();
  auto shard = opts->getChoice("shard", "none", {"none", "zero1", "fsdp"});
  if (!shard)
    return shard.takeError();
  return std::make_unique<GradSyncPass>(*bytes, *stream, *shard == "zero1", *shard == "fsdp");
}

} // namespace lwcc
