//===- Regather.cpp - Sharded params gathered again for the backward ------===//
//
// `regather` completes sharded data parallelism (materialize's shard=fsdp,
// ZeRO stage 3). Materialize keeps each replicated trained param as shares
// of its rows and all_gathers the whole param where the forward reads it;
// autodiff's backward reads the same gathered values (a product's input
// gradient needs its weight), which would keep every gathered param from
// its layer's forward to its backward: all of them at once at the loss,
// as much as replicated params. Run after autodiff (and recompute), this
// pass gives the backward its own gather of each such param, right before
// the first backward op that reads it:
//
//   %w = all_gather(%w.s0.d0, %w.s32.d1)   %w = all_gather(%w.s0.d0, %w.s32.d1)
//   %y = gemm(%x, %w)                      %y = gemm(%x, %w)
//   ...                             =>     ...
//   %dx = gemm(%dy, %w)                    %w.regather = all_gather(%w.s0.d0, %w.s32.d1)
//                                          %dx = gemm(%dy, %w.regather)
//
// so a gathered param lives from its gather to its layer's last reader in
// each direction. A gather is every device's (one collective), so the
// devices meet in the same order. The gathered gradients go back to the
// shares by the all_gather's gradient rule: a reduce_scatter.
//
// prefetch=1 with stream=S > 0 (what lwcc's fsdp step runs) puts every
// gather of shares, the forward's and the backward's, on stream S, the
// communication stream grad-sync's reduce-scatters use, and issues each
// layer's gathers one layer early: right before the first op that reads the
// previous layer's gathers (in the same direction, micro-batch and devices),
// so the gather runs beside the previous layer's compute instead of before
// its own, and the layer waits only for what is left of it. A gathered param
// then lives one layer longer: two layers' params at once, as FSDP's
// prefetch of the next layer holds.
//
//===----------------------------------------------------------------------===//
#include "passes/Pass.h"
#include "passes/PassOptions.h"
#include "passes/TrainingSupport.h"

#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>

namespace lwcc {

namespace {

class RegatherPass : public Pass {
public:
  RegatherPass(bool prefetch, int64_t stream) : prefetch_(prefetch), stream_(stream) {}
  std::string_view name() const override { return "regather"; }

  llvm::Error run(Graph& g, PassContext&) override {
    std::vector<Op*> backward;
    bool seeded = false;
    for (auto& op : g.ops()) {
      seeded |= isGradientSeed(*op);
      if (seeded)
        backward.push_back(op.get());
    }
    if (!seeded)
      return makeError("regather: graph @" + g.name() +
                       " has no backward (run autodiff before regather)");
    Builder b(g);
    UniqueNames names(g);
    std::unordered_map<const Op*, Op*> again; // forward gather -> backward's
    for (Op* reader : backward) {
      if (isRegather(*reader))
        return reader->emitError("regather: the graph is regathered already");
      for (unsigned i = 0; i < reader->numOperands(); ++i) {
        Op* gather = reader->operand(i)->definingOp();
        if (!gather || !gathersParamShares(*gather) || gather == reader)
          continue;
        auto it = again.find(gather);
        if (it == again.end()) {
          b.setInsertionPointBefore(reader);
          std::unordered_map<const Value*, Value*> same;
          Op* copy = b.clone(*gather, same);
          Location loc = gather->loc();
          loc.name = loc.name.empty() ? "regather" : loc.name + ".regather";
          copy->setLoc(std::move(loc));
          for (unsigned r = 0; r < copy->numResults(); ++r)
            if (!gather->result(r)->name().empty())
              copy->result(r)->setName(names(gather->result(r)->name() + ".regather"));
          it = again.emplace(gather, copy).first;
        }
        const Value* v = reader->operand(i);
        for (unsigned r = 0; r < gather->numResults(); ++r)
          if (gather->result(r) == v)
            reader->setOperand(i, it->second->result(r));
      }
    }
    if (prefetch_)
      prefetch(g);
    return llvm::Error::success();
  }

private:
  /// Each layer's gathers of shares moved before the first reader of the
  /// previous layer's, and every such gather on stream_.
  void prefetch(Graph& g) {
    std::unordered_map<const Op*, size_t> position;
    std::vector<Op*> order;
    for (auto& op : g.ops()) {
      position[op.get()] = order.size();
      order.push_back(op.get());
    }
    // A layer: the gathers whose first reader is the same op. Layers in
    // order, by direction, micro-batch and devices.
    struct Layer {
      Op* reader = nullptr;
      std::vector<Op*> gathers;
    };
    using Key = std::tuple<bool, std::optional<int64_t>, std::vector<int64_t>>;
    std::map<Key, std::vector<Layer>> layers;
    for (Op* op : order) {
      if (!gathersParamShares(*op))
        continue;
      if (stream_ > 0)
        op->annotations().stream = stream_;
      Op* first = nullptr;
      for (unsigned r = 0; r < op->numResults(); ++r)
        for (const Use& use : op->result(r)->uses())
          if (use.user && (!first || position.at(use.user) < position.at(first)))
            first = use.user;
      if (!first)
        continue;
      Key key{isRegather(*op), op->annotations().microBatch, op->getInts("devices")};
      std::vector<Layer>& list = layers[key];
      if (list.empty() || list.back().reader != first)
        list.push_back({first, {}});
      list.back().gathers.push_back(op);
    }
    for (auto& [key, list] : layers)
      for (size_t k = 1; k < list.size(); ++k) {
        Op* before = list[k - 1].reader;
        // Only earlier: a layer read before the previous one's reader (its
        // gathers already early) stays.
        if (position.at(before) >= position.at(list[k].reader))
          continue;
        for (Op* gather : list[k].gathers)
          g.moveOp(gather, before);
      }
  }

  bool prefetch_;
  int64_t stream_;
};

} // namespace

llvm::Expected<std::unique_ptr<Pass>> createRegatherPass(std::string_view options) {
  auto opts = PassOptions::parse("regather", options, "prefetch", {"prefetch", "stream"});
  if (!opts)
    return opts.takeError();
  auto prefetch = opts->getFlag("prefetch", false);
  if (!prefetch)
    return prefetch.takeError();
  auto stream = opts->getIntIn("stream", 0, 0, 64);
  if (!stream)
    return stream.takeError();
  return std::make_unique<RegatherPass>(*prefetch, *stream);
}

} // namespace lwcc
