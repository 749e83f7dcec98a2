//===- HypergraphPass.cpp - The hypergraph pass ---------------------------===//
//
// --hypergraph=gpus=N[,imbalance=X]: each op whole on one device (or split
// by its units), by Zoltan PHG (plan/Hypergraph.h), with the ops weighted by
// their time on the cost model of spec, devices_per_node, profile and tf32.
//
//===----------------------------------------------------------------------===//
#include "cost/CostModel.h"
#include "passes/PassOptions.h"
#include "plan/Hypergraph.h"
#include "plan/Pipelines.h"

#include "llvm/Support/FormatVariadic.h"

namespace lwcc {

namespace {

class HypergraphPass : public Pass {
public:
  HypergraphPass(int64_t gpus, double imbalance, CostModel model)
      : gpus_(gpus), imbalance_(imbalance), model_(std::move(model)) {}
  std::string_view name() const override { return "hypergraph"; }

  llvm::Error run(Graph& g, PassContext& ctx) override {
    // An op's forward time stands for its work: its backward ops run where
    // it runs and cost about twice as much, for every op alike.
    auto stats = partitionHypergraph(g, gpus_, imbalance_,
                                     [&](const Op& op) { return model_.opSeconds(op); });
    if (!stats)
      return stats.takeError();
    if (ctx.diag) {
      std::string weights;
      for (double w : stats->partWeights)
        weights += (weights.empty() ? "" : ", ") + llvm::formatv("{0:f0}", w).str();
      ctx.diag(Severity::Note, {},
               llvm::formatv("hypergraph: {0} ops as {1} units ({2} ops cut), {3} nets into {4} "
                             "parts; part weights [{5}], max/avg {6:f3} {7} {8:f3}{9}; Zoltan's "
                             "{10:f3}, {11} units moved; cut {12} bytes",
                             stats->ops, stats->vertices, stats->splitOps, stats->nets,
                             stats->parts, weights, stats->imbalance(),
                             stats->imbalance() <= stats->imbalanceTol + 1e-9 ? "<=" : ">",
                             stats->imbalanceTol,
                             stats->boundFeasible ? ""
                                                  : " (the bound is unreachable: one unit weighs "
                                                    "more than a part may)",
                             stats->zoltanImbalance, stats->repairMoves, stats->cutBytes)
                   .str());
    }
    return llvm::Error::success();
  }

private:
  int64_t gpus_;
  double imbalance_;
  CostModel model_;
};

} // namespace

llvm::Expected<std::unique_ptr<Pass>> createHypergraphPass(std::string_view options) {
  auto opts = PassOptions::parse(
      "hypergraph", options, "gpus",
      {"gpus", "imbalance", "spec", "devices_per_node", "devices_per_gpu", "profile", "tf32"});
  if (!opts)
    return opts.takeError();
  auto gpus = opts->getIntIn("gpus", 1, 1, 1024);
  if (!gpus)
    return gpus.takeError();
  auto imbalance = opts->getFloat("imbalance", 1.1);
  if (!imbalance)
    return imbalance.takeError();
  if (!(*imbalance >= 1.0) || *imbalance > 100)
    return makeError(
        llvm::formatv("hypergraph: imbalance must be in 1..100, got {0}", *imbalance).str());
  auto cost = costModelFromOptions(*opts);
  if (!cost)
    return cost.takeError();
  return std::make_unique<HypergraphPass>(*gpus, *imbalance, std::move(*cost));
}

} // namespace lwcc
