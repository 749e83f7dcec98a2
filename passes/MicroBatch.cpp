//===- MicroBatch.cpp - The step as M micro-batches -----------------------===//
#include "passes/BatchSplit.h"
#include "passes/MicroBatcher.h"
#include "passes/Pass.h"
#include "passes/PassOptions.h"

#include "llvm/Support/FormatVariadic.h"

namespace lwcc {

namespace {

/// Cuts the step's batch into M micro-batches (m=M): each op that reads
/// the batch runs once per micro-batch on its rows, and the step sums what
/// the micro-batches give (gradient accumulation once autodiff has run):
///  1. The batch is dim 0 of the inputs, N samples (the smallest dim 0; an
///     input of T rows per sample, the [B * T] labels of a [B * T, V]
///     logits export, holds T rows of each); micro-batch i holds N/M
///     samples, the first N%M micro-batches one more. A value whose
///     batched dim holds T entries per sample (a reshape merging the batch
///     with the sequence) is cut T entries per sample.
///  2. In order, an op reading the batch runs M times (@mb(i)), split along
///     its samples as its parallel rule says (as data parallelism splits
///     it): a shared operand the rule splits is sliced (a dropout mask is
///     drawn for the micro-batch's rows of the whole mask, so masks keep
///     each sample's global index); results split the same way hold the
///     micro-batch's rows; partial results (the loss, means over samples)
///     are summed, means weighed by each micro-batch's share of the batch
///     (a loss over the labels that count: by its share of them);
///     other results (a batch norm's statistics) are the micro-batch's own.
///     An op reading the batch that no rule splits runs once on the
///     concatenated rows.
///  3. A param an assign updates from the batch (running statistics) is
///     updated by each micro-batch in turn: micro-batch i reads what i-1
///     computed and the assign takes the last; the unbiased variance's
///     n/(n-1) becomes each micro-batch's own.
///  4. Ops that read no batch run once; the ops are reordered to keep
///     definitions before uses. Copies keep their op's config (@par),
///     explicit piece sizes scaled to the micro-batch.
/// m=1 changes nothing. first=K (K < M): only the first K micro-batches'
/// copies are made, each of 1/M of the batch, the step summing theirs: not
/// a step to train, a piece of one to price (the planner's compact price of
/// a pipeline, plan/PipelinePreview.h).
class MicroBatchPass : public Pass {
public:
  MicroBatchPass(int64_t m, int64_t first) : m_(m), first_(first) {}
  std::string_view name() const override { return "microbatch"; }

  llvm::Error run(Graph& g, PassContext&) override {
    if (m_ == 1)
      return llvm::Error::success();
    if (llvm::Error e = requireNotDifferentiated(g, "microbatch"))
      return e;
    for (const auto& op : g.ops()) {
      if (op->annotations().microBatch)
        return op->emitError("microbatch: the graph has micro-batches already");
      if (op->annotations().device || op->info().isCommunication())
        return op->emitError("microbatch: the graph is materialized already (microbatch runs "
                             "before materialize)");
    }
    return MicroBatcher(g, m_, nullptr, "mb", first_).run();
  }

private:
  int64_t m_, first_;
};

} // namespace

llvm::Error splitBatch(Graph& g, int64_t pieces, const std::set<const Op*>* only,
                       const std::string& suffix) {
  return MicroBatcher(g, pieces, only, suffix).run();
}

llvm::Expected<std::vector<Op*>> batchSplittableOps(Graph& g) {
  return MicroBatcher(g, 1).splittable();
}

/// An error unless `g` is not differentiated yet (`pass` runs before
/// autodiff).
llvm::Error requireNotDifferentiated(const Graph& g, const std::string& pass) {
  for (size_t i = 0; i < g.outputs().size(); ++i)
    if (g.outputGradOf(i))
      return makeError(pass + ": graph @" + g.name() + " is differentiated already (" + pass +
                       " runs before autodiff)");
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<Pass>> createMicroBatchPass(std::string_view options) {
  auto opts = PassOptions::parse("microbatch", options, "m", {"m", "first"});
  if (!opts)
    return opts.takeError();
  auto m = opts->getIntIn("m", 1, 1, 4096);
  if (!m)
    return m.takeError();
  auto first = opts->getIntIn("first", 0, 0, *m);
  if (!first)
    return first.takeError();
  return std::make_unique<MicroBatchPass>(*m, *first);
}

} // namespace lwcc
