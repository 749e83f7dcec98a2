//===- Pipelines.cpp - Every named pipeline, in one place -----------------===//
#include "passes/Pass.h"

namespace lwcc {

const std::vector<PipelineInfo>& allPipelines() {
  static const std::vector<PipelineInfo> pipelines = {
      {"cleanup",
       "Simplify a model graph and re-check it",
       {"canonicalize", "dce", "shape-infer", "verify"}},
      {"train",
       "Build the training step: loss, training semantics, backward, SGD update",
       {"canonicalize", "append-loss", "train-mode", "autodiff", "optimizer", "dce", "verify"}},
  };
  return pipelines;
}

llvm::Expected<PassPipeline> buildPipeline(std::string_view name) {
  for (const PipelineInfo& p : allPipelines())
    if (p.name == name)
      return buildPipeline(std::vector<std::string>(p.passes.begin(), p.passes.end()));
  return makeError("unknown pipeline '" + std::string(name) + "'");
}

} // namespace lwcc
