//===- ParallelizePass.cpp - A parallel config for every op ---------------===//
#include "passes/PassOptions.h"
#include "plan/LayerwiseSearch.h"
#include "plan/Pipelines.h"

#include "llvm/Support/FormatVariadic.h"

#include <unordered_map>
#include <unordered_set>

namespace lwcc {

namespace {

/// Gives every op of a training graph (before autodiff) a parallel config
/// over `gpus` devices, by strategy:
///   data   the sample dim of every op that has one: samples are split
///          from the data and label inputs onwards;
///   model  the channel dim (dim 1) of every op whose rule can split it;
///          samples are never split;
///   owt    One Weird Trick: fully connected layers (gemm, matmul) and the
///          ops computed from them split channels, the layers before split
///          samples.
/// Steps:
///  1. The data and label inputs count as split along dim 0 (data, owt) or
///     whole (model).
///  2. Each op in order takes the first that its parallel rule accepts:
///     (a) the strategy's dim (model: 1; owt: 1 in the fully connected
///     part); (b) the dim along which an operand is already split, so that
///     the op follows its input without moving it; (c) none: the op runs
///     whole on every device (@par(devices = [...]) without degrees).
///  3. Constants and assigns get no config: materialize places constants
///     where they are read and writes each piece of an assigned param.
/// An op with a multi-device config gets @par(<dim> = gpus, devices = all).
///   layerwise  each op the config that minimises the step's predicted
///          time on the device spec (LayerwiseSearch.h): a split of one dim
///          its rule accepts, or the whole op, over devices 0..k-1 for k a
///          power of two up to gpus (and gpus itself).
/// With report=1 the pass notes the predicted step time of the configs
/// under the layer-wise cost function (and the search time). bucket_bytes:
/// the gradient buckets grad-sync will make (the search charges a param its
/// share of a bucket's all-reduce latency; 0, the default: a whole
/// all-reduce per param).
class ParallelizePass : public Pass {
public:
  ParallelizePass(std::string strategy, int64_t gpus, std::optional<CostModel> cost, bool report,
                  int64_t bucketBytes)
      : strategy_(std::move(strategy)), gpus_(gpus), cost_(std::move(cost)), report_(report),
        bucketBytes_(bucketBytes) {}
  std::string_view name() const override { return "parallelize"; }

  llvm::Error run(Graph& g, PassContext& ctx) override {
    for (const auto& op : g.ops())
      if (op->annotations().par || op->annotations().device || op->info().isCommunication())
        return op->emitError("parallelize: the graph is already parallelized");
    if (strategy_ == "layerwise") {
      auto r = searchLayerwise(g, *cost_, gpus_, bucketBytes_);
      if (!r)
        return r.takeError();
      if (report_ && ctx.diag)
        ctx.diag(Severity::Note, {},
                 llvm::formatv("parallelize: layerwise on {0} x {1}: predicted step {2:e4} s, "
                               "search_s {3:f4} ({4} ops, {5} left after elimination{6})",
                               gpus_, cost_->spec().name, r->predictedSeconds, r->searchSeconds,
                               r->ops, r->reducedNodes,
                               r->exact ? ""
                                        : "; past the search's budget: the best found, "
                                          "improved node by node")
                     .str());
      return llvm::Error::success();
    }
    if (llvm::Error e = classic(g))
      return e;
    if (report_ && ctx.diag) {
      auto t = layerwiseCostOf(g, *cost_, gpus_, bucketBytes_);
      if (!t)
        return t.takeError();
      ctx.diag(Severity::Note, {},
               llvm::formatv("parallelize: {0} on {1} x {2}: predicted step {3:e4} s", strategy_,
                             gpus_, cost_->spec().name, *t)
                   .str());
    }
    return llvm::Error::success();
  }

private:
  /// data, model and owt (steps above).
  llvm::Error classic(Graph& g) {
    std::vector<int64_t> all(gpus_);
    for (int64_t d = 0; d < gpus_; ++d)
      all[d] = d;
    // The dim along which each value is split (absent: whole).
    std::unordered_map<const Value*, int64_t> split;
    if (strategy_ != "model")
      for (const auto& in : g.inputs())
        if (in->type().rank() > 0 && in->type().shape[0] >= gpus_)
          split[in.get()] = 0;
    std::unordered_set<const Value*> fullyConnected;
    // How the first op that reads each param takes it (the dim its plan
    // splits, -1: whole): a later op may not take it otherwise (a tied
    // embedding, the table of a Gather and the weight of the output layer),
    // whose gradients could not be combined.
    std::unordered_map<const Value*, int64_t> paramDims;
    for (auto& opPtr : g.ops()) {
      Op& op = *opPtr;
      if (op.kind() == OpKind::Constant || op.kind() == OpKind::Assign || op.numResults() == 0)
        continue;
      bool fc = op.kind() == OpKind::Gemm || op.kind() == OpKind::MatMul;
      for (Value* v : op.operands())
        fc |= fullyConnected.count(v) > 0;
      if (fc)
        for (unsigned i = 0; i < op.numResults(); ++i)
          fullyConnected.insert(op.result(i));

      std::optional<int64_t> dim;
      std::optional<SplitPlan> plan;
      auto accept = [&](int64_t d) {
        if (dim || !op.info().parallel || parSplitValue(op)->type().rank() <= d ||
            parSplitValue(op)->type().shape[d] < gpus_)
          return;
        if (auto p = op.info().parallel(op, d);
            p && splitUnits(*p, parSplitValue(op)->type().shape[d]) >= gpus_) {
          for (unsigned i = 0; i < op.numOperands(); ++i)
            if (auto it = paramDims.find(op.operand(i));
                it != paramDims.end() && it->second != p->operandDims[i])
              return;
          dim = d;
          plan = std::move(p);
        }
      };
      if (strategy_ == "model" || (strategy_ == "owt" && fc))
        accept(1);
      // Follow an operand that is split already.
      for (unsigned i = 0; i < op.numOperands() && !dim; ++i) {
        auto it = split.find(op.operand(i));
        if (it == split.end() || !op.info().parallel)
          continue;
        for (int64_t d = 0; d < parSplitValue(op)->type().rank() && !dim; ++d) {
          auto p = op.info().parallel(op, d);
          if (p && p->operandDims[i] == it->second)
            accept(d);
        }
      }
      for (unsigned i = 0; i < op.numOperands(); ++i)
        if (op.operand(i)->kind() == ValueKind::Param)
          paramDims.emplace(op.operand(i), plan ? plan->operandDims[i] : -1);
      ParallelConfig cfg;
      cfg.devices = all;
      if (dim) {
        cfg.degrees.emplace_back(parDimName(*dim, parSplitValue(op)->type().rank()), gpus_);
        for (unsigned r = 0; r < op.numResults(); ++r)
          if (plan->resultDims[r] >= 0)
            split[op.result(r)] = plan->resultDims[r];
      }
      op.annotations().par = std::move(cfg);
    }
    return llvm::Error::success();
  }

  std::string strategy_;
  int64_t gpus_;
  std::optional<CostModel> cost_;
  bool report_;
  int64_t bucketBytes_; ///< grad-sync's buckets (0: one all-reduce per param)
};

} // namespace

llvm::Expected<std::unique_ptr<Pass>> createParallelizePass(std::string_view options) {
  auto opts = PassOptions::parse("parallelize", options, "strategy",
                                 {"strategy", "gpus", "spec", "devices_per_node", "devices_per_gpu",
                                  "profile", "tf32", "report", "bucket_bytes"});
  if (!opts)
    return opts.takeError();
  auto strategy = opts->getChoice("strategy", "data", {"data", "model", "owt", "layerwise"});
  if (!strategy)
    return strategy.takeError();
  auto gpus = opts->getIntIn("gpus", 1, 1, 1024);
  if (!gpus)
    return gpus.takeError();
  auto report = opts->getFlag("report", false);
  if (!report)
    return report.takeError();
  auto bucketBytes = opts->getIntIn("bucket_bytes", 0, 0, INT64_MAX);
  if (!bucketBytes)
    return bucketBytes.takeError();
  std::optional<CostModel> cost;
  if (*strategy == "layerwise" || *report) {
    auto cm = costModelFromOptions(*opts);
    if (!cm)
      return cm.takeError();
    cost.emplace(std::move(*cm));
  }
  return std::make_unique<ParallelizePass>(*strategy, *gpus, std::move(cost), *report,
                                           *bucketBytes);
}

} // namespace lwcc
