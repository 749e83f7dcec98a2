//===- MicroBatcher.h - The batch of a step cut into pieces -----*- C++ -*-===//
//
// The machinery behind splitBatch and batchSplittableOps (BatchSplit.h),
// internal to the microbatch and fragment passes. The walk over the step
// (which ops run per piece, which once, the chained params and the final
// order) is in MicroBatcher.cpp; the per-piece copies of an op and the
// values they read and give (pieces of shared values, sums of partial
// results, the batch gathered back) in MicroBatchCopies.cpp.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"
#include "passes/TrainingSupport.h"

#include "llvm/Support/Error.h"

#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace lwcc {

class MicroBatcher {
public:
  /// How a value of the step is held once the batch is cut into micro-batches.
  ///   Shared:  one value for every micro-batch (params, what only they feed).
  ///   Batched: M pieces, piece m the rows of micro-batch m along `dim`.
  ///   PerMb:   M values, one per micro-batch, not pieces of a whole (a batch
  ///            norm's statistics of its micro-batch, what they feed).
  struct Dist {
    enum Kind { Shared, Batched, PerMb } kind = Shared;
    int64_t dim = -1;
    std::vector<Value*> pieces;
  };

  /// `only` (fragments): only these ops run per piece of the batch, each
  /// other op once on the whole batch; `suffix` names the pieces' values
  /// (x.mb0, x.fr0).
  /// `first` < m: only the first `first` micro-batches' copies are made
  /// (each of 1/m of the batch), the step summing theirs: a step the
  /// planner only prices (plan/PipelinePreview.h); 0: all m.
  MicroBatcher(Graph& g, int64_t m, const std::set<const Op*>* only = nullptr,
               std::string suffix = "mb", int64_t first = 0)
      : g_(g), b_(g), names_(g), m_(m), made_(first > 0 && first < m ? first : m), only_(only),
        suffix_(std::move(suffix)) {}

  /// The ops that could run on pieces of the batch as fragments: each reads
  /// rows of the batch and its rule splits it along them into results that
  /// all hold the pieces' rows (not a batch norm's statistics, a loss or a
  /// mean over samples), reading no param chained through the batch. The
  /// graph is unchanged.
  llvm::Expected<std::vector<Op*>> splittable();

  llvm::Error run();

private:
  /// The batch: dim 0 of the data and label inputs, which must agree.
  llvm::Error findBatch();

  /// Params that an assign updates from a value computed from the batch
  /// (batch norm's running statistics): each micro-batch updates them in
  /// turn, so ops reading them run per micro-batch.
  void findChainedParams();

  const Dist& distOf(const Value* v);

  llvm::Error visit(Op& op);

  /// Fragments: an op not cut runs once on the whole batch (the pieces it
  /// reads concatenated), and its results that hold the batch's rows (as
  /// its rule splits it) are sliced where a fragment reads them.
  llvm::Error whole(Op& op);

  /// A split of the op along the sample dims of its batched operands, or
  /// nullopt: the dim of the op's rule and the plan.
  std::pair<std::optional<SplitPlan>, int64_t> choosePlan(const Op& op);

  /// The op's config for micro-batch `mb`, whose split dim `dim` (of the
  /// value @par names) holds sizes_[mb] entries: explicit sizes along it
  /// are scaled to the micro-batch.
  llvm::Expected<std::optional<ParallelConfig>> configFor(const Op& op, int64_t dim, int64_t mb);

  /// M copies of `op`, copy m on micro-batch m: split by `plan` along `dim`
  /// (batched operands by their piece, shared ones sliced where the plan
  /// splits them), or without a plan each copy on the whole operands.
  llvm::Error replicate(Op& op, const std::optional<SplitPlan>& plan, int64_t dim);

  /// The unbiased variance of a batch norm's running update (train-mode's
  /// multiply of the batch variance by n/(n-1), n the values per channel
  /// of the batch) takes each micro-batch's own n.
  llvm::Error unbiasFactor(const Op& op, std::vector<Value*>& ins, int64_t mb);

  /// The piece of shared value `v` (or of an input) that micro-batch `mb`
  /// reads along `dim` (of size n_): the op that makes `v` computing just
  /// that piece when it can (a dropout mask keyed by the whole mask's
  /// element indices), else a slice of `v`.
  llvm::Expected<Value*> sharedPiece(Value* v, int64_t dim, int64_t mb,
                                     const std::optional<ParallelConfig>& readerPar);

  /// The step's value from the micro-batches' partial results: their sum,
  /// or for means each weighed by its micro-batch's share of the batch, or
  /// for a loss's mean over the labels that count (`labels`: each copy's
  /// labels) by its share of those labels (0 where it has none). On the
  /// first device of the op's config.
  llvm::Expected<Value*> combine(const Op& op, const std::vector<Value*>& parts, bool mean,
                                 const std::vector<Value*>& labels = {});
  /// The count of `labels` that are not `ignore`, a scalar of `dtype`.
  llvm::Expected<Value*> countKept(Value* labels, int64_t ignore, DType dtype,
                                   const std::optional<ParallelConfig>& at);

  /// The whole batch of a batched value, its pieces concatenated, before
  /// `before` (null: at the insertion point).
  llvm::Expected<Value*> gather(Value* v, const Dist& d, Op* before);

  /// An op that cannot run on micro-batches runs once, on the whole batch.
  llvm::Error wholeBatch(Op& op);

  /// assign(p, x) with x computed per micro-batch: micro-batch m's ops
  /// read p as micro-batch m-1 left it, and p takes the last one's value.
  llvm::Error chain(Op& assign);

  /// Reorders the ops so that each comes after the ops whose results it
  /// reads (the chained updates read later copies), keeping the order
  /// where it can.
  static llvm::Error sortTopologically(Graph& g);

  Graph& g_;
  Builder b_;
  UniqueNames names_;
  /// The entries of `v`'s batched `dim` per sample: 1, or T where it holds
  /// B * T rows (a [B * T] label input, a reshape merging the batch with
  /// the sequence). Micro-batch mb holds entries [offsets_[mb] * unit,
  /// (offsets_[mb] + sizes_[mb]) * unit).
  int64_t unitOf(const Value* v, int64_t dim) const {
    return v->type().shape[static_cast<size_t>(dim)] / n_;
  }

  int64_t m_, made_, n_ = 0; ///< micro-batches, those whose copies are made, samples
  const std::set<const Op*>* only_;
  std::string suffix_;
  std::vector<int64_t> offsets_, sizes_; ///< each micro-batch's samples
  std::unordered_map<const Value*, Dist> dist_;
  std::unordered_set<const Value*> chained_;
  std::map<std::tuple<const Value*, int64_t, int64_t>, Value*> pieces_;
  std::unordered_map<const Value*, Value*> gathered_;
  std::unordered_map<const Op*, int64_t> copyMb_; ///< each copy's micro-batch
  std::unordered_map<const Value*, const Op*> bnVar_;
  std::vector<Op*> replaced_;
  std::vector<std::pair<Value*, std::string>> renamed_;
};

} // namespace lwcc
