//===- Recompute.cpp - Activations computed again for the backward --------===//
//
// `recompute` (lwcc --recompute=all) trades compute for memory. Run right
// after autodiff, it finds each forward value that a backward op reads and
// that a cheap op made, and computes it again right before the first
// backward op that reads it, instead of keeping it from the forward to the
// backward:
//
//   %y  = batch_norm_train(%c, ...)      %y  = batch_norm_train(%c, ...)
//   %r  = relu(%y)                       %r  = relu(%y)
//   %p  = max_pool2d(%r)                 %p  = max_pool2d(%r)
//   ...                                  ...
//   %dr = max_pool2d_grad(%dp, %r)  =>   %y.recompute = batch_norm_train(%c, ...)
//                                        %r.recompute = relu(%y.recompute)
//                                        %dr = max_pool2d_grad(%dp, %r.recompute)
//
// A value is kept (read by the backward as it is) when it is a param, an
// input or a constant, or the result of an op not computed again:
//  - convolutions and matrix products (conv2d, gemm, matmul): computing
//    them again would cost as much as their forward; they are the
//    checkpoints everything else is recomputed from (selective
//    recomputation: a convolution's output is kept, the batch norm, ReLU
//    and pooling after it are not);
//  - communication ops (a collective computed again would need every
//    device again) and random ones (dropout_mask: a recomputed dropout
//    multiplies by the mask the forward drew);
//  - assigns, which are never copied: batch norm's running statistics are
//    updated once;
//  - an op whose copy would need a chain of more than kMaxChain copies
//    back to kept values (a residual network's sums of sums: each block's
//    output would need every earlier block's, all made at the backward's
//    start and held through it). The chain is counted in graph order: a
//    value kept for this starts a new chain.
// An op computed again is a copy of its forward op (its config, device and
// micro-batch), reading kept values or other copies, at the place of the
// first backward op that needs one of its results; later backward readers
// share the copy. Its loc is the forward op's name with ".recompute"
// appended ("recompute" without one): the schedule pass runs it in its
// micro-batch's backward. The forward value's bytes are free once the
// forward has read it: the memory plan shares them with what follows. Copies compute the same bits
// as the forward (every kernel is deterministic), so a step with recomputation trains exactly as
// one without.
//
// With `top=K` only the cheap ops of the K layers (loc names) whose cheap
// results hold the most bytes are computed again (recomputableLayers); the
// others' values are kept as if they were not cheap. The planner's
// `--recompute=auto` recomputes the fewest layers that fit a device this
// way (`PLAN+recompute(K)`; `lwcc --recompute=K`).
//
//===----------------------------------------------------------------------===//
#include "passes/Pass.h"
#include "passes/PassOptions.h"
#include "passes/TrainingSupport.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

namespace lwcc {

namespace {

/// Whether a forward op is cheap to compute again: not a convolution or
/// product (what the others are computed again from), nor one whose value
/// must be kept (see above).
bool cheap(const Op& op) {
  switch (op.kind()) {
  case OpKind::Conv2d:
  case OpKind::Gemm:
  case OpKind::MatMul:
  case OpKind::Constant:
  case OpKind::Assign:
  case OpKind::DropoutMask:
    return false;
  default:
    return !op.info().isCommunication() && op.numResults() > 0;
  }
}

class RecomputePass : public Pass {
public:
  /// `top`: how many layers, the most bytes first, are computed again (0:
  /// every one).
  explicit RecomputePass(int64_t top) : top_(top) {}

  std::string_view name() const override { return "recompute"; }

  llvm::Error run(Graph& g, PassContext&) override {
    // Forward: the ops before the loss gradient's seed; the cheap ones
    // within a short chain are computed again. Backward: autodiff's ops,
    // from the seed on (some, such as a weight's transpose, read forward
    // values only), the readers of the copies.
    std::unordered_map<const Op*, int64_t> chain; // copies back to kept values
    std::vector<Op*> readers;
    std::set<std::string> layers; // top_'s layers
    if (top_ > 0)
      for (const auto& [layer, bytes] : recomputableLayers(g))
        if (static_cast<int64_t>(layers.size()) < top_)
          layers.insert(layer);
    for (auto& op : g.ops()) {
      if (isRecomputed(*op))
        return op->emitError("recompute: the graph is already recomputed");
      if (!readers.empty() || isGradientSeed(*op)) {
        readers.push_back(op.get());
        continue;
      }
      if (!cheap(*op) || (top_ > 0 && !layers.count(op->loc().name)))
        continue;
      int64_t longest = 0;
      for (const Value* v : op->operands())
        if (const Op* d = v->definingOp(); d && chain.count(d))
          longest = std::max(longest, chain.at(d));
      if (longest < kMaxChain)
        chain[op.get()] = longest + 1;
    }
    if (readers.empty())
      return makeError("recompute: graph @" + g.name() +
                       " has no backward (run autodiff before recompute)");
    Builder b(g);
    UniqueNames names(g);
    std::unordered_map<const Value*, Value*> copies;
    for (Op* reader : readers) {
      b.setInsertionPointBefore(reader);
      for (unsigned i = 0; i < reader->numOperands(); ++i)
        if (Value* c = copyOf(b, names, chain, copies, reader->operand(i)))
          reader->setOperand(i, c);
    }
    return llvm::Error::success();
  }

private:
  /// The longest chain of copies one recomputed value may need.
  static constexpr int64_t kMaxChain = 4;

  int64_t top_;

  /// The copy of forward value `v` (made now, before the builder's
  /// insertion point, with the copies of its operands), or null when `v` is
  /// kept.
  static Value* copyOf(Builder& b, UniqueNames& names,
                       const std::unordered_map<const Op*, int64_t>& chain,
                       std::unordered_map<const Value*, Value*>& copies, Value* v) {
    Op* def = v->definingOp();
    if (!def || !chain.count(def))
      return nullptr;
    if (auto it = copies.find(v); it != copies.end())
      return it->second;
    std::unordered_map<const Value*, Value*> map;
    for (Value* x : def->operands())
      if (Value* c = copyOf(b, names, chain, copies, x))
        map[x] = c;
    Op* copy = b.clone(*def, map);
    Location loc = def->loc();
    loc.name = loc.name.empty() ? "recompute" : loc.name + ".recompute";
    copy->setLoc(std::move(loc));
    for (unsigned r = 0; r < def->numResults(); ++r) {
      Value* c = copy->result(r);
      if (!c->name().empty())
        c->setName(names(c->name() + ".recompute"));
      copies[def->result(r)] = c;
    }
    return copies.at(v);
  }
};

} // namespace

llvm::Expected<std::unique_ptr<Pass>> createRecomputePass(std::string_view options) {
  auto opts = PassOptions::parse("recompute", options, "top", {"top"});
  if (!opts)
    return opts.takeError();
  auto top = opts->getInt("top", 0);
  if (!top)
    return top.takeError();
  if (*top < 0 || (opts->has("top") && *top == 0))
    return makeError("recompute: top=" + std::to_string(*top) +
                     " is not a number of layers (1 or more)");
  return std::make_unique<RecomputePass>(*top);
}

std::vector<std::pair<std::string, int64_t>> recomputableLayers(const Graph& g) {
  std::map<std::string, int64_t> bytes;
  for (const auto& op : g.ops()) {
    if (isGradientSeed(*op))
      break;
    const std::string& name = op->loc().name;
    if (!cheap(*op) || name.empty())
      continue;
    for (unsigned r = 0; r < op->numResults(); ++r)
      bytes[name] += op->result(r)->type().sizeInBytes();
  }
  std::vector<std::pair<std::string, int64_t>> out(bytes.begin(), bytes.end());
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

} // namespace lwcc
