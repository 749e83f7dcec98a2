//===- Pipelines.cpp - Every pipeline, in one place -----------------------===//
#include "plan/Pipelines.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <sstream>

namespace lwcc {

std::string PlanChoice::name() const {
  std::string s = strategy != "pipeline"
                      ? strategy
                      : "pipeline/" + std::to_string(stages) + "/" + std::to_string(microbatches);
  if (shard != "none")
    s += "+" + shard;
  if (shard == "fsdp" && shardMinBytes > 0)
    s += ">=" + std::to_string(shardMinBytes);
  if (recompute && recomputeTop > 0)
    s += "+recompute(" + std::to_string(recomputeTop) + ")";
  else if (recompute)
    s += "+recompute";
  return s + (oneMicrobatch ? ":one" : "");
}

namespace {

/// A float option at full precision.
std::string exact(double v) { return llvm::formatv("{0:e16}", v).str(); }

std::string joined(const std::vector<std::string>& items, char sep) {
  std::string out;
  for (const std::string& s : items)
    out += (out.empty() ? "" : std::string(1, sep)) + s;
  return out;
}

/// The options naming the device spec (and its devices per node).
std::string specOptions(const Pricing& p) {
  std::string o = ",spec=" + p.spec;
  if (p.devicesPerNode > 0)
    o += ",devices_per_node=" + std::to_string(p.devicesPerNode);
  if (p.devicesPerGpu > 0)
    o += ",devices_per_gpu=" + std::to_string(p.devicesPerGpu);
  return o;
}

std::string profileOption(const Pricing& p) {
  return p.profile.empty() ? "" : ",profile=" + p.profile;
}

/// TF32 when not the trainers' default (convolutions on TF32).
std::string tf32Option(const Pricing& p) {
  switch (p.tf32) {
  case Pricing::Tf32::Default:
    return "";
  case Pricing::Tf32::All:
    return ",tf32=all";
  case Pricing::Tf32::Off:
    return ",tf32=off";
  }
  return "";
}

/// What a planning pass prices with: the profile, TF32, and a report.
std::string pricingOptions(const Pricing& p) {
  return profileOption(p) + tf32Option(p) + (p.report ? ",report=1" : "");
}

std::string optimizerOptions(const OptimizerSettings& s) {
  std::string o = s.kind;
  auto num = [&](const char* key, const std::optional<double>& v) {
    if (v)
      o += std::string(",") + key + "=" + exact(*v);
  };
  num("lr", s.lr);
  num("momentum", s.momentum);
  num("weight_decay", s.weightDecay);
  num("beta1", s.beta1);
  num("beta2", s.beta2);
  num("gamma", s.gamma);
  num("min_lr", s.minLr);
  if (s.nesterov)
    o += ",nesterov=1";
  o += ",schedule=" + s.schedule;
  o += ",warmup=" + std::to_string(s.warmup);
  o += ",total_steps=" + std::to_string(s.totalSteps);
  o += ",step_size=" + std::to_string(s.stepSize);
  if (!s.noDecay.empty())
    o += ",no_decay=" + joined(s.noDecay, ';');
  if (!s.groups.empty())
    o += ",groups=" + joined(s.groups, ';');
  return o;
}

/// The pass that gives every op its config on several devices.
PipelineStep strategyStep(const TrainingPipelineOptions& o) {
  const PlanChoice& plan = o.plan;
  const std::string gpus = std::to_string(o.gpus);
  if (plan.strategy == "hypergraph")
    return {"hypergraph", "gpus=" + gpus + specOptions(o.pricing) + profileOption(o.pricing)};
  if (plan.strategy == "pipeline")
    return {"pipeline-partition", "stages=" + std::to_string(plan.stages) + ",gpus=" + gpus +
                                      ",microbatches=" + std::to_string(plan.microbatches) +
                                      ",schedule=" + o.schedule + specOptions(o.pricing) +
                                      pricingOptions(o.pricing)};
  // The search prices the gradient all-reduces as grad-sync buckets them.
  return {"parallelize", "strategy=" + plan.strategy + ",gpus=" + gpus + specOptions(o.pricing) +
                             pricingOptions(o.pricing) +
                             ",bucket_bytes=" + std::to_string(o.bucketBytes)};
}

/// The recompute pass's options for a plan: how many layers, where not
/// every one.
std::string recomputeOptions(const PlanChoice& plan) {
  return plan.recomputeTop > 0 ? "top=" + std::to_string(plan.recomputeTop) : "";
}

} // namespace

bool freesScattered(const PlanChoice& plan) {
  return plan.shard == "zero2" || plan.shard == "fsdp";
}

PipelineText trainingStepPipeline(const TrainingPipelineOptions& o) {
  PipelineText p;
  const int64_t micro = o.plan.microbatches;
  p.push_back({"dce", ""}); // the importer runs no pass
  p.push_back({"canonicalize", ""});
  if (o.attentionFusion)
    p.push_back({"fuse-attention", ""});
  p.push_back({"append-loss",
               o.loss +
                   (o.labelSmoothing != 0 ? ",label_smoothing=" + exact(o.labelSmoothing) : "") +
                   (o.ignoreIndex ? ",ignore_index=" + std::to_string(*o.ignoreIndex) : "") +
                   (o.shiftLabels ? ",shift_labels=1" : "")});
  if (!o.freeze.empty())
    p.push_back({"freeze", "params=" + joined(o.freeze, ';') + ",bn=" + (o.freezeBn ? "1" : "0")});
  p.push_back({"train-mode", "bn_running_var=" + o.bnRunningVar});
  if (o.mixedPrecision != "off")
    p.push_back({"mixed-precision", "dtype=" + o.mixedPrecision});
  if (o.gpus > 1) {
    // Materialize before autodiff: the backward pass differentiates the
    // per-device ops and their communication; replicas' gradients are summed.
    p.push_back(strategyStep(o));
    // Micro-batches copy the configs the strategy chose (a compact price's
    // piece: the first alone).
    const bool one = o.plan.oneMicrobatch && o.plan.strategy == "pipeline";
    if (micro > 1)
      p.push_back({"microbatch", "m=" + std::to_string(micro) + (one ? ",first=1" : "")});
    const std::string& shard = o.plan.shard;
    std::string materialize = shard == "fsdp" ? "shard=fsdp" : "";
    if (shard == "fsdp" && o.plan.shardMinBytes > 0)
      materialize += ",min_bytes=" + std::to_string(o.plan.shardMinBytes);
    p.push_back({"materialize", materialize});
    // A candidate only priced: devices that run another's ops left out.
    // Not where a later pass makes a collective of the devices it finds
    // gradients on (clip-grad-norm, fp16's loss scale), nor with sharding.
    // A compact price's piece: each stage's first replica alone.
    if (one && o.plan.stages > 0 && o.gpus / o.plan.stages > 1)
      p.push_back({"fold-replicas", "replicas=" + std::to_string(o.gpus / o.plan.stages)});
    else if (o.foldReplicas && shard == "none" && !o.clipGradNorm && o.mixedPrecision != "fp16")
      p.push_back({"fold-replicas", ""});
    p.push_back({"autodiff", ""});
    if (o.plan.recompute)
      p.push_back({"recompute", recomputeOptions(o.plan)});
    // FSDP's gathers on the communication stream, one layer ahead.
    if (shard == "fsdp")
      p.push_back({"regather", "prefetch=1,stream=1"});
    // Gradient all-reduces (reduce-scatters under ZeRO-1 and 2) on stream 1
    // of each device, beside backward.
    p.push_back({"grad-sync", "bucket_bytes=" + std::to_string(o.bucketBytes) + ",stream=1" +
                                  (shard == "zero1" || shard == "zero2" ? ",shard=zero1"
                                   : shard == "fsdp"                    ? ",shard=fsdp"
                                                                        : "")});
  } else {
    if (micro > 1)
      p.push_back({"microbatch", "m=" + std::to_string(micro)});
    if (o.fragments > 1)
      p.push_back({"fragment",
                   "k=" + std::to_string(o.fragments) + ",streams=" + std::to_string(o.streams) +
                       ",policy=" + o.streamPolicy + ",along=" + o.fragmentAlong +
                       specOptions(o.pricing) + profileOption(o.pricing) + tf32Option(o.pricing)});
    p.push_back({"autodiff", ""});
    if (o.plan.recompute)
      p.push_back({"recompute", recomputeOptions(o.plan)});
  }
  if (o.withOptimizer) {
    p.push_back({"optimizer", optimizerOptions(o.optimizer)});
    if (o.clipGradNorm)
      p.push_back({"clip-grad-norm", "max_norm=" + exact(*o.clipGradNorm)});
  }
  if (o.mixedPrecision == "fp16") {
    std::ostringstream ls;
    ls.precision(17);
    ls << "init=" << o.lossScale << ",interval=" << o.lossScaleInterval;
    p.push_back({"loss-scale", ls.str()});
  }
  p.push_back({"dce", ""});
  if (o.fuse)
    p.push_back({"fuse", ""});
  if (o.streams > 1)
    p.push_back({"stream-assign", "streams=" + std::to_string(o.streams) +
                                      ",policy=" + o.streamPolicy + specOptions(o.pricing) +
                                      pricingOptions(o.pricing)});
  if (micro > 1 && !o.plan.oneMicrobatch)
    p.push_back({"schedule", o.schedule});
  if (o.verifyStep)
    p.push_back({"verify", ""});
  return p;
}

PipelineText afterTrainingStepPipeline(const TrainingPipelineOptions& o) {
  using Until = TrainingPipelineOptions::Until;
  PipelineText p;
  if (o.until == Until::TrainingStep)
    return p;
  std::string memory = o.memorySpec.empty() ? "" : "spec=" + o.memorySpec;
  if (!o.memorySpec.empty() && o.pricing.devicesPerGpu > 0)
    memory += ",devices_per_gpu=" + std::to_string(o.pricing.devicesPerGpu);
  if (freesScattered(o.plan))
    memory += memory.empty() ? "free_scattered=1" : ",free_scattered=1";
  p.push_back({"memory-plan", memory});
  if (o.until == Until::MemoryPlan)
    return p;
  p.push_back({"place-events", ""});
  if (o.verifySchedule)
    p.push_back({"verify-schedule", ""});
  return p;
}

PipelineText trainingPipeline(const TrainingPipelineOptions& o) {
  PipelineText p = trainingStepPipeline(o);
  for (PipelineStep& s : afterTrainingStepPipeline(o))
    p.push_back(std::move(s));
  return p;
}

PipelineText evaluationPipeline(const std::string& mixedPrecision) {
  PipelineText p = {{"canonicalize", ""}};
  if (mixedPrecision != "off") // evaluation computes as training does
    p.push_back({"mixed-precision", "dtype=" + mixedPrecision});
  p.push_back({"dce", ""});
  p.push_back({"verify", ""});
  p.push_back({"memory-plan", ""});
  return p;
}

llvm::Expected<PassPipeline> buildPipeline(const PipelineText& text) {
  std::vector<std::string> entries;
  for (const PipelineStep& s : text)
    entries.push_back(s.options.empty() ? s.pass : s.pass + "=" + s.options);
  return buildPipeline(entries);
}

void printPipeline(const PipelineText& text, llvm::raw_ostream& os) {
  for (const PipelineStep& s : text) {
    os << "--" << s.pass;
    if (!s.options.empty()) {
      os << "=";
      // A response file splits at blanks and reads quotes and backslashes.
      for (char c : s.options) {
        if (c == ' ' || c == '\t' || c == '"' || c == '\'' || c == '\\')
          os << '\\';
        os << c;
      }
    }
    os << "\n";
  }
}

const std::vector<PipelineInfo>& allPipelines() {
  // lwcc's training step on one device with its default flags.
  static const std::vector<std::string> train = [] {
    std::vector<std::string> names;
    for (const PipelineStep& s : trainingStepPipeline(TrainingPipelineOptions{}))
      names.push_back(s.options.empty() ? s.pass : s.pass + "=" + s.options);
    return names;
  }();
  static const std::vector<PipelineInfo> pipelines = {
      {"cleanup",
       "Simplify a model graph and re-check it",
       {"canonicalize", "dce", "shape-infer", "verify"}},
      {"train",
       "The training step lwcc builds on one device by default: loss, training semantics, "
       "backward, SGD update",
       std::vector<std::string_view>(train.begin(), train.end())},
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
