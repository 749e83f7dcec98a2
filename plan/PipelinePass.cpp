//===- PipelinePass.cpp - The pipeline-partition pass ---------------------===//
//
// --pipeline-partition=stages=S,...: pipeline stages by PipeDream's dynamic
// program (plan/PipelinePartition.h). Options: gpus, stages, microbatches,
// schedule=1f1b|gpipe|zb-h1 (for memory), spec, devices_per_node, profile, tf32,
// report=1 (a note per stage and the estimated bubble).
//
//===----------------------------------------------------------------------===//
#include "passes/PassOptions.h"
#include "plan/PipelinePartition.h"
#include "plan/Pipelines.h"

#include "llvm/Support/FormatVariadic.h"

namespace lwcc {

namespace {

class PipelinePass : public Pass {
public:
  PipelinePass(PipelineOptions o, CostModel cm) : o_(o), cm_(std::move(cm)) {}
  std::string_view name() const override { return "pipeline-partition"; }

  llvm::Error run(Graph& g, PassContext& ctx) override {
    return partitionPipeline(g, cm_, o_, ctx.diag);
  }

private:
  PipelineOptions o_;
  CostModel cm_;
};

} // namespace

llvm::Expected<std::unique_ptr<Pass>> createPipelinePass(std::string_view options) {
  auto opts =
      PassOptions::parse("pipeline-partition", options, "stages",
                         {"stages", "gpus", "microbatches", "schedule", "spec", "devices_per_node",
                          "devices_per_gpu", "profile", "tf32", "report"});
  if (!opts)
    return opts.takeError();
  PipelineOptions o;
  for (auto [key, field] : {std::pair{"gpus", &o.gpus}, std::pair{"stages", &o.stages},
                            std::pair{"microbatches", &o.microbatches}}) {
    auto v = opts->getIntIn(key, *field, 1, 4096);
    if (!v)
      return v.takeError();
    *field = *v;
  }
  auto schedule = opts->getChoice("schedule", "1f1b", {"1f1b", "gpipe", "zb-h1"});
  if (!schedule)
    return schedule.takeError();
  o.gpipe = *schedule == "gpipe";
  o.zeroBubble = *schedule == "zb-h1";
  auto report = opts->getFlag("report", false);
  if (!report)
    return report.takeError();
  o.report = *report;
  auto cm = costModelFromOptions(*opts);
  if (!cm)
    return cm.takeError();
  return std::make_unique<PipelinePass>(o, std::move(*cm));
}

} // namespace lwcc
