//===- Fuse.cpp - Elementwise ops fused into generated kernels ------------===//
#include "ir/FusedOps.h"
#include "passes/Pass.h"

#include <algorithm>
#include <map>
#include <set>

namespace lwcc {

namespace {

/// Whether `op` may join a fused region: an Elementwise or Broadcast op
/// (FusionKind, ir/OpTraits.def) of float operands and one float result.
bool fusible(const Op& op) {
  const FusionKind k = op.info().fusion;
  if ((k != FusionKind::Elementwise && k != FusionKind::Broadcast) || op.numResults() != 1)
    return false;
  // Gradient clipping's product its update takes in (gradScaleOf) costs
  // nothing there.
  if (const auto& uses = op.result()->uses();
      uses.size() == 1 && uses[0].user && gradScaleOf(*uses[0].user) == &op)
    return false;
  auto isFloat = [](const Value* v) {
    const DType t = v->type().dtype;
    return t == DType::F32 || t == DType::F64 || t == DType::BF16 || t == DType::F16;
  };
  if (!isFloat(op.result()) || op.result()->type().numElements() == 0)
    return false;
  return std::all_of(op.operands().begin(), op.operands().end(), isFloat);
}

/// Whether `op` may join the region that computes its operand as a
/// reduction (out-elementwise fusion): a reduce_sum of a float32 or float64
/// value over axes it names. Its value has the reduced shape; it is a
/// result of the region, never read by another member.
bool reducible(const Op& op) {
  if (op.kind() != OpKind::ReduceSum || !op.hasAttr("axes") || op.getInts("axes").empty())
    return false;
  const DType t = op.operand(0)->type().dtype;
  return (t == DType::F32 || t == DType::F64) && op.result()->type().numElements() > 0;
}

/// The dims (non-negative, sorted) a reduce_sum reduces.
std::vector<int64_t> reducedAxes(const Op& op) {
  std::vector<int64_t> axes = op.getInts("axes");
  const auto rank = static_cast<int64_t>(op.operand(0)->type().rank());
  for (int64_t& a : axes)
    a = a < 0 ? a + rank : a;
  std::sort(axes.begin(), axes.end());
  return axes;
}

/// Where an op runs: a region's ops share it. An op without @dev runs on
/// device 0 (opDevice: autodiff places the backward's sums there without one).
bool samePlace(const Op& a, const Op& b) {
  const Annotations &x = a.annotations(), &y = b.annotations();
  return opDevice(a) == opDevice(b) && x.stream == y.stream && x.microBatch == y.microBatch &&
         !x.bufferOffsets && !y.bufferOffsets;
}

/// A reduce_sum that keeps its reduced dims, read only by a reshape that
/// drops them (autodiff's gradient of a broadcast bias, then of the bias's
/// reshape), becomes the reduce_sum that drops them: one kernel, not a
/// reduction and a copy. The same sums in the same order.
void foldReshapedReductions(Graph& g) {
  std::vector<Op*> reshapes;
  for (const auto& op : g.ops())
    if ((op->kind() == OpKind::Reshape || op->kind() == OpKind::Flatten) &&
        op->operand(0)->definingOp() && op->operand(0)->definingOp()->kind() == OpKind::ReduceSum)
      reshapes.push_back(op.get());
  for (Op* reshape : reshapes) {
    Value* reduced = reshape->operand(0);
    Op* sum = reduced->definingOp();
    if (reduced->uses().size() != 1 || sum->getInt("keepdims") == 0 || !sum->hasAttr("axes") ||
        sum->annotations() != reshape->annotations() ||
        reshape->result()->type().dtype != reduced->type().dtype)
      continue;
    const Shape& kept = reduced->type().shape;
    std::vector<int64_t> axes = sum->getInts("axes");
    for (int64_t& a : axes)
      a = a < 0 ? a + static_cast<int64_t>(kept.size()) : a;
    Shape dropped;
    for (size_t d = 0; d < kept.size(); ++d)
      if (std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) == axes.end())
        dropped.push_back(kept[d]);
    if (dropped != reshape->result()->type().shape)
      continue;
    sum->setAttr("keepdims", int64_t{0});
    reduced->setType(reshape->result()->type());
    reshape->result()->replaceAllUsesWith(reduced);
    reduced->setName(reshape->result()->name());
    g.eraseOp(reshape);
  }
}

/// Mixed precision's casts of float32 params to bf16 or fp16 (the weights'
/// working copies) move to the step's start, side by side, in their order:
/// codegen writes them as one multi-tensor call (castGroup). They read the
/// params as the step starts, which is what they read where they were.
void hoistWeightCasts(Graph& g) {
  std::vector<Op*> casts;
  for (const auto& op : g.ops()) {
    const DType to = op->kind() == OpKind::Cast ? op->result()->type().dtype : DType::F32;
    if ((to == DType::BF16 || to == DType::F16) && op->operand(0)->kind() == ValueKind::Param &&
        op->operand(0)->type().dtype == DType::F32 && !op->annotations().microBatch &&
        !op->annotations().stream)
      casts.push_back(op.get());
  }
  std::set<const Op*> hoisted(casts.begin(), casts.end());
  Op* first = nullptr; // the first op that stays: each cast goes before it, in order
  for (const auto& op : g.ops())
    if (!hoisted.count(op.get())) {
      first = op.get();
      break;
    }
  for (Op* cast : casts)
    g.moveOp(cast, first);
}

/// Mixed precision's casts of a bf16 or fp16 weight gradient to float32
/// that only an optimizer update reads (its gradient, beside a float32
/// weight): the update reads the 16-bit gradient itself and widens each
/// element as it reads it, exactly as the cast did. One pass over the
/// gradient, not three (read 16 bits, write 32, read 32), and no launch.
/// The step's @grad output becomes the 16-bit gradient too (the same
/// values; a trainer's --dump and --train-reference write it as float32).
/// A gradient something else also reads (a clip's norm, an all-reduce, a
/// micro-batch's sum) keeps its cast.
void foldGradCasts(Graph& g) {
  std::vector<Op*> casts;
  for (const auto& op : g.ops()) {
    if (op->kind() != OpKind::Cast || op->result()->type().dtype != DType::F32)
      continue;
    const DType from = op->operand(0)->type().dtype;
    if (from != DType::BF16 && from != DType::F16)
      continue;
    int updates = 0, others = 0;
    for (const Use& u : op->result()->uses()) {
      if (!u.user)
        continue; // a graph output
      const bool update =
          (u.user->kind() == OpKind::SgdUpdate || u.user->kind() == OpKind::AdamUpdate) &&
          u.index == 1 && u.user->operand(0)->type().dtype == DType::F32;
      ++(update ? updates : others);
    }
    if (updates == 1 && others == 0)
      casts.push_back(op.get());
  }
  for (Op* cast : casts) {
    Value* grad = cast->operand(0);
    const std::string name = cast->result()->name();
    cast->result()->replaceAllUsesWith(grad);
    g.eraseOp(cast);
    if (grad->name().empty())
      grad->setName(name);
  }
}

/// fp16's loss scaling keeps a skipped step's params and optimizer state
/// with a where per result of each update: `where(finite, w', w)`, then
/// the assign. An update whose every result only such a where reads, all
/// on one flag, takes the flag instead (sgd_update's and adam_update's
/// optional `finite` operand): no pass over the params and state to keep
/// them, and the update writes over them in place again.
llvm::Error foldSkippedUpdates(Graph& g) {
  struct Fold {
    Op* update;
    std::vector<Op*> keeps; // one where per result
  };
  std::vector<Fold> folds;
  for (const auto& op : g.ops()) {
    const bool sgd = op->kind() == OpKind::SgdUpdate;
    if ((!sgd && op->kind() != OpKind::AdamUpdate) || op->numOperands() > (sgd ? 4u : 6u))
      continue;
    const std::vector<unsigned> kept =
        sgd ? std::vector<unsigned>{0, 2} : std::vector<unsigned>{0, 2, 3};
    Fold f{op.get(), {}};
    for (unsigned r = 0; r < op->numResults(); ++r) {
      const auto& uses = op->result(r)->uses();
      const Op* w = uses.size() == 1 ? uses[0].user : nullptr;
      if (!w || w->kind() != OpKind::Where || uses[0].index != 1 ||
          w->operand(2) != op->operand(kept[r]) ||
          w->operand(0)->type() != TensorType(DType::Bool, {}) ||
          (!f.keeps.empty() && w->operand(0) != f.keeps[0]->operand(0)))
        break;
      f.keeps.push_back(uses[0].user);
    }
    if (f.keeps.size() == op->numResults())
      folds.push_back(std::move(f));
  }
  std::map<const Op*, size_t> position;
  if (!folds.empty())
    for (const auto& op : g.ops())
      position.emplace(op.get(), position.size());
  for (Fold& f : folds) {
    // At the first where: after the flag, and after every operand of the
    // update (they come before the update, and it before the wheres).
    Op* first = *std::min_element(f.keeps.begin(), f.keeps.end(),
                                  [&](Op* a, Op* b) { return position.at(a) < position.at(b); });
    std::vector<Value*> operands(f.update->operands().begin(), f.update->operands().end());
    operands.push_back(f.keeps[0]->operand(0));
    Builder b(g);
    b.setInsertionPointBefore(first);
    b.setLoc(f.update->loc());
    auto folded =
        b.createInferred(f.update->kind(), operands, f.update->attrs(), f.update->numResults());
    if (!folded)
      return folded.takeError();
    (*folded)->annotations() = f.update->annotations();
    for (unsigned r = 0; r < f.update->numResults(); ++r) {
      Value* kept = f.keeps[r]->result();
      (*folded)->result(r)->setName(kept->name());
      kept->replaceAllUsesWith((*folded)->result(r));
      g.eraseOp(f.keeps[r]);
    }
    g.eraseOp(f.update);
  }
  return llvm::Error::success();
}

/// How far after a region's anchor an op that reads none of its values may
/// join it (step 1's horizontal case): near, so that no value lives much
/// longer than it did.
constexpr size_t kNearby = 8;

/// Horizontal fusion's bound on a value's elements: only small values
/// (statistics, not activations) are made earlier than they were.
constexpr int64_t kSmallElements = 65536;

/// An op the recompute pass put in the backward (its layer's location with
/// ".recompute"): it stays there, never moved up to an earlier anchor (that
/// would keep its value as long as recomputation meant to save).
bool recomputed(const Op& op) {
  const llvm::StringRef loc = op.loc().name;
  return loc == "recompute" || loc.endswith(".recompute");
}

/// Whether `op` reads a param that an assign placed before position `at`
/// overwrites: its read cannot move to `at`.
bool readsAssignedParam(const Op& op, size_t at, const std::map<const Op*, size_t>& position) {
  for (const Value* v : op.operands())
    if (v->kind() == ValueKind::Param)
      for (const Use& u : v->uses())
        if (u.user && u.user->kind() == OpKind::Assign && position.at(u.user) < at)
          return true;
  return false;
}

struct Region {
  std::vector<Op*> ops; ///< in graph order
  Shape shape;
  Op* anchor = nullptr;      ///< the member whose place the fused op takes
  std::vector<int64_t> axes; ///< what its reductions reduce (empty: none yet)
};

/// The shape of the iteration space `op` computes over: its result's, or
/// for a reduction its operand's.
const Shape& spaceOf(const Op& op) {
  return (op.kind() == OpKind::ReduceSum ? op.operand(0) : op.result())->type().shape;
}

/// Fuses chains of elementwise ops into `fused` ops, each one kernel. The
/// categories of ops a region holds (ir/OpTraits.def's FusionKind):
///  - elementwise and broadcast ops of float values: a statement each over
///    the region's iteration space (its `shape`);
///  - reductions (a reduce_sum of a float32 or float64 value a member
///    computes, over axes it names): the elementwise chain's value summed
///    in the same kernel, a result of the reduced shape. A reduction of a
///    value no region computes starts a region that an elementwise op
///    reading the same value joins (its sibling: one pass over the value). The value it sums
///    is written to memory only where something else reads it. Every
///    reduction of a region reduces the same dims; none is read by another
///    member (nothing is fused after a reduction).
/// The steps:
///  0. A reduce_sum keeping its dims and the reshape dropping them become
///     one reduce_sum (foldReshapedReductions); the casts of float32 params
///     to 16 bits move to the step's start (hoistWeightCasts), side by side
///     for one multi-tensor call; a cast of a 16-bit weight gradient to
///     float32 that only its update reads is left to the update
///     (foldGradCasts); fp16's where that keeps a skipped step's param or
///     state becomes the update's `finite` operand (foldSkippedUpdates).
///  1. Walk the ops in order. A fusible op (FusionKind Elementwise or
///     Broadcast, float values) joins the region of the producer of one of
///     its operands that allows it: the region computes the same shape (its
///     iteration space), on the same device, stream and micro-batch, and
///     either (a) the region's fused op can stay where it is (at its anchor,
///     the member that placed it): every other operand of the op is defined
///     before the anchor, so the op moves up to it; or (b) it can move down
///     to the op: no op outside the region reads one of its values before
///     the op, and no param it reads is assigned before the op. The op is
///     then the anchor. An op that reads no region's value joins the
///     latest region the same ways where it is at most kNearby ops after its
///     anchor (horizontal fusion: one launch for independent small ops).
///     Otherwise it starts a region of its own.
///  2. The regions of the op's other operands join its region where they
///     can move to its anchor: what they read is defined before it, and
///     what reads them outside the merged region comes after it.
///  3. A region of two or more ops becomes one fused op at its anchor: its
///     operands the values its members read from outside
///     it, in order of first read; its results the members' values that are
///     read outside it (a graph output included), in member order; its body
///     the members as statements (ir/FusedOps.h).
///  4. The members are erased. A lone op stays as it is (its runtime call,
///     or codegen's library epilogue after a convolution, is as good).
/// Fused intermediates so take no memory and no pass over memory; what the
/// region computes is unchanged (the interpreter runs its body op by op).
class FusePass : public Pass {
public:
  std::string_view name() const override { return "fuse"; }

  llvm::Error run(Graph& g, PassContext&) override {
    foldReshapedReductions(g);
    hoistWeightCasts(g);
    foldGradCasts(g);
    if (llvm::Error e = foldSkippedUpdates(g))
      return e;
    std::map<const Op*, size_t> position;
    size_t n = 0;
    for (const auto& op : g.ops())
      position[op.get()] = n++;
    std::vector<Region> regions;
    std::map<const Op*, size_t> regionOf;
    std::optional<size_t> latest; // the region the last fusible op joined
    // A value summed by a region's reduction that no region computes, and
    // that region.
    std::map<const Value*, size_t> summedBy;
    for (const auto& opPtr : g.ops()) {
      Op* op = opPtr.get();
      if (reducible(*op)) {
        // Joins the region that computes what it sums; else starts one that
        // an elementwise op reading the same value may join (the last
        // layer's bias gradient and the cast of the gradient it sums).
        const Op* producer = op->operand(0)->definingOp();
        auto it = producer ? regionOf.find(producer) : regionOf.end();
        if (it == regionOf.end() || producer->kind() == OpKind::ReduceSum) {
          if (recomputed(*op))
            continue;
          summedBy.emplace(op->operand(0), regions.size());
          regionOf[op] = regions.size();
          regions.push_back({{op}, spaceOf(*op), op, reducedAxes(*op)});
          continue;
        }
        Region& r = regions[it->second];
        const std::vector<int64_t> axes = reducedAxes(*op);
        if ((!r.axes.empty() && r.axes != axes) || !joins(r, it->second, op, position, regionOf))
          continue;
        r.axes = axes;
        r.ops.push_back(op);
        regionOf[op] = it->second;
        continue;
      }
      if (!fusible(*op))
        continue;
      std::optional<size_t> joined;
      for (const Value* v : op->operands()) {
        const Op* producer = v->definingOp();
        auto it = producer ? regionOf.find(producer) : regionOf.end();
        if (it == regionOf.end() || producer->kind() == OpKind::ReduceSum)
          continue;
        if (joins(regions[it->second], it->second, op, position, regionOf)) {
          joined = it->second;
          break;
        }
      }
      // Beside a region that sums one of its operands (a sibling: both
      // read the value element by element).
      for (const Value* v : op->operands()) {
        auto it = summedBy.find(v);
        if (joined || it == summedBy.end() || regions[it->second].ops.empty())
          continue;
        if (joins(regions[it->second], it->second, op, position, regionOf))
          joined = it->second;
      }
      // Beside the latest region (horizontally): an op a few ops after its
      // anchor that reads none of its values (the running mean's and
      // variance's updates of one batch norm).
      if (!joined && latest && !regions[*latest].ops.empty() &&
          position.at(op) - position.at(regions[*latest].anchor) <= kNearby &&
          op->result()->type().numElements() <= kSmallElements && !recomputed(*op) &&
          std::none_of(regions[*latest].ops.begin(), regions[*latest].ops.end(),
                       [](const Op* m) { return recomputed(*m); }) &&
          joins(regions[*latest], *latest, op, position, regionOf))
        joined = latest;
      if (!joined) {
        joined = regions.size();
        regions.push_back({{}, op->result()->type().shape, op, {}});
      }
      regions[*joined].ops.push_back(op);
      regionOf[op] = *joined;
      latest = joined;
      // Step 2: the regions of its other operands merged into its own.
      for (const Value* v : op->operands()) {
        const Op* producer = v->definingOp();
        auto it = producer ? regionOf.find(producer) : regionOf.end();
        if (it == regionOf.end() || it->second == *joined)
          continue;
        const size_t other = it->second;
        if (!regions[other].axes.empty() && !regions[*joined].axes.empty() &&
            regions[other].axes != regions[*joined].axes)
          continue;
        if (!merges(regions[*joined], regions[other], position, regionOf, *joined, other))
          continue;
        for (Op* m : regions[other].ops) {
          regions[*joined].ops.push_back(m);
          regionOf[m] = *joined;
        }
        if (regions[*joined].axes.empty())
          regions[*joined].axes = regions[other].axes;
        regions[other].ops.clear();
      }
    }
    for (Region& r : regions)
      std::sort(r.ops.begin(), r.ops.end(),
                [&](const Op* a, const Op* b) { return position.at(a) < position.at(b); });
    for (Region& r : regions)
      if (r.ops.size() >= 2)
        if (llvm::Error e = fuse(g, r))
          return e;
    return llvm::Error::success();
  }

private:
  /// Step 1: `op` joins region `r` (number `index`) at its anchor (a), or
  /// the region moves down to `op`, its new anchor (b); false where neither.
  static bool joins(Region& r, size_t index, Op* op, const std::map<const Op*, size_t>& position,
                    const std::map<const Op*, size_t>& regionOf) {
    if (readsReduction(*op, regionOf, index, index))
      return false;
    if (staysAtAnchor(r, *op, position, regionOf, index))
      return true;
    if (!movesToOp(r, *op, position))
      return false;
    r.anchor = op;
    return true;
  }

  /// Whether `op` reads the value of a reduction of region `a` or `b`
  /// (nothing in a region reads its reductions).
  static bool readsReduction(const Op& op, const std::map<const Op*, size_t>& regionOf, size_t a,
                             size_t b) {
    for (const Value* v : op.operands()) {
      const Op* def = v->definingOp();
      if (!def || def->kind() != OpKind::ReduceSum)
        continue;
      auto it = regionOf.find(def);
      if (it != regionOf.end() && (it->second == a || it->second == b))
        return true;
    }
    return false;
  }

  /// Step 1 (a): `op` joins `r` (region number `index`) at its anchor.
  static bool staysAtAnchor(const Region& r, const Op& op,
                            const std::map<const Op*, size_t>& position,
                            const std::map<const Op*, size_t>& regionOf, size_t index) {
    if (spaceOf(op) != r.shape || !samePlace(*r.ops.front(), op) || recomputed(op))
      return false;
    const size_t anchor = position.at(r.anchor);
    for (const Value* v : op.operands()) {
      const Op* def = v->definingOp();
      if (!def)
        continue; // an input or a param: there from the start
      auto it = regionOf.find(def);
      if ((it == regionOf.end() || it->second != index) && position.at(def) >= anchor)
        return false;
    }
    return true;
  }

  /// Step 2's test: whether region `from` (number `fromIndex`) can join
  /// region `into` (number `intoIndex`) at its anchor.
  static bool merges(const Region& into, const Region& from,
                     const std::map<const Op*, size_t>& position,
                     const std::map<const Op*, size_t>& regionOf, size_t intoIndex,
                     size_t fromIndex) {
    if (from.ops.empty() || from.shape != into.shape ||
        !samePlace(*into.ops.front(), *from.ops.front()))
      return false;
    const size_t anchor = position.at(into.anchor);
    auto inEither = [&](const Op* op) {
      auto it = op ? regionOf.find(op) : regionOf.end();
      return it != regionOf.end() && (it->second == intoIndex || it->second == fromIndex);
    };
    for (const Region* r : {&into, &from})
      for (const Op* m : r->ops)
        if (readsReduction(*m, regionOf, intoIndex, fromIndex))
          return false;
    for (const Op* m : from.ops) {
      for (const Value* v : m->operands()) {
        const Op* def = v->definingOp();
        if (def && !inEither(def) && position.at(def) >= anchor)
          return false;
      }
      if (readsAssignedParam(*m, anchor, position))
        return false;
      for (const Use& u : m->result()->uses())
        if (u.user && !inEither(u.user) && position.at(u.user) < anchor)
          return false;
    }
    return true;
  }

  /// Step 1 (b): `op` joins `r`, whose fused op moves to `op`.
  static bool movesToOp(const Region& r, const Op& op,
                        const std::map<const Op*, size_t>& position) {
    if (spaceOf(op) != r.shape || !samePlace(*r.ops.front(), op))
      return false;
    const size_t at = position.at(&op);
    // A param the region reads keeps its value until `op` (the region's
    // reads move to `op`'s place).
    if (readsAssignedParam(op, at, position) ||
        std::any_of(r.ops.begin(), r.ops.end(),
                    [&](const Op* m) { return readsAssignedParam(*m, at, position); }))
      return false;
    std::set<const Op*> members(r.ops.begin(), r.ops.end());
    for (const Op* m : r.ops)
      for (const Use& u : m->result()->uses())
        if (u.user && u.user != &op && !members.count(u.user) && position.at(u.user) < at)
          return false;
    return true;
  }

  /// Steps 2 and 3 for one region.
  static llvm::Error fuse(Graph& g, const Region& r) {
    std::set<const Op*> members(r.ops.begin(), r.ops.end());
    std::map<const Value*, int> statementOf;
    std::vector<Value*> operands;
    std::map<const Value*, int> operandOf;
    std::vector<FusedStatement> body;
    std::vector<std::string> layers;
    for (const Op* m : r.ops) {
      FusedStatement st{m->kind(), {}, m->result()->type().dtype, {}};
      for (Value* v : m->operands()) {
        if (auto s = statementOf.find(v); s != statementOf.end()) {
          st.args.push_back(s->second);
          continue;
        }
        auto [it, added] = operandOf.emplace(v, static_cast<int>(operands.size()));
        if (added)
          operands.push_back(v);
        st.args.push_back(-(it->second + 1));
      }
      if (m->kind() == OpKind::ReduceSum)
        st.attrs = {{"axes", r.axes}, {"keepdims", m->getInt("keepdims")}};
      else if (m->kind() != OpKind::Cast)
        st.attrs = fusedAttrsOf(*m);
      statementOf[m->result()] = static_cast<int>(body.size());
      body.push_back(std::move(st));
      const std::string& layer = m->loc().name;
      if (!layer.empty() && std::find(layers.begin(), layers.end(), layer) == layers.end())
        layers.push_back(layer);
    }
    std::vector<Value*> leaving;
    std::vector<int64_t> results;
    for (const Op* m : r.ops) {
      const auto& uses = m->result()->uses();
      if (std::any_of(uses.begin(), uses.end(),
                      [&](const Use& u) { return !u.user || !members.count(u.user); })) {
        leaving.push_back(m->result());
        results.push_back(statementOf.at(m->result()));
      }
    }
    Op* last = r.anchor;
    Builder b(g);
    b.setInsertionPointBefore(last);
    b.setLoc(r.ops.front()->loc());
    std::string names;
    for (const std::string& l : layers)
      names += (names.empty() ? "" : ",") + l;
    std::vector<NamedAttr> attrs = {
        {"body", printFusedBody(body)}, {"results", results}, {"shape", r.shape}};
    if (!names.empty())
      attrs.push_back({"layers", names});
    auto fused = b.createInferred(OpKind::Fused, operands, std::move(attrs),
                                  static_cast<unsigned>(leaving.size()));
    if (!fused)
      return fused.takeError();
    (*fused)->annotations() = last->annotations();
    for (size_t k = 0; k < leaving.size(); ++k) {
      (*fused)->result(static_cast<unsigned>(k))->setName(leaving[k]->name());
      leaving[k]->replaceAllUsesWith((*fused)->result(static_cast<unsigned>(k)));
    }
    for (auto it = r.ops.rbegin(); it != r.ops.rend(); ++it)
      g.eraseOp(*it);
    return llvm::Error::success();
  }
};

} // namespace

std::unique_ptr<Pass> createFusePass() { return std::make_unique<FusePass>(); }

} // namespace lwcc
