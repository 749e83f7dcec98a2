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
//===----------------------------------------------------------------------===//
#include "passes/Pass.h"
#include "passes/TrainingSupport.h"

#include <unordered_map>

namespace lwcc {

namespace {

class RegatherPass : public Pass {
public:
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
    return llvm::Error::success();
  }
};

} // namespace

std::unique_ptr<Pass> createRegatherPass() { return std::make_unique<RegatherPass>(); }

} // namespace lwcc
