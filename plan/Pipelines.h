//===- Pipelines.h - The pipelines lwcc runs, from typed options -*- C++ -*-===//
//
// lwcc compiles a model with one pipeline of registered passes, built here
// from one typed struct (TrainingPipelineOptions) that the driver fills from
// its flags:
//  1. dce, then the training step: canonicalize, the loss, training
//     semantics, the plan over devices (parallelize, hypergraph or
//     pipeline-partition; micro-batches; materialize), autodiff (and recompute), gradient
//     all-reduces, the update, dce, streams, the micro-batch order, verify;
//  2. the memory plan, checked to fit a device of the spec;
//  3. the events of the streams (place-events) and the proof that the
//     schedule orders every access (verify-schedule).
// The pipeline is kept in its textual form, one `--pass=options` a line:
// lwcc builds its passes from exactly the text that `lwcc --print-pipeline`
// prints, so `lwcc-opt @FILE` (a response file) replays a compile on the
// imported IR (`lwcc --emit=ir`) to the same scheduled IR.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "passes/Pass.h"

#include <optional>
#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
}

namespace lwcc {

// The factories of the passes that search a plan (PlanPasses.def).
#define PASS_WITH_OPTIONS(NAME, CREATE, DESC)                                                      \
  llvm::Expected<std::unique_ptr<Pass>> CREATE(std::string_view options);
#include "plan/PlanPasses.def"
#undef PASS_WITH_OPTIONS

/// A registered pass: passes/Passes.def's and PlanPasses.def's.
struct PassInfo {
  std::string_view name;
  std::string_view description;
  /// Creates the pass from its option text ("" when none was given).
  llvm::Expected<std::unique_ptr<Pass>> (*create)(std::string_view options);
  bool takesOptions;
};

/// Every registered pass, in the order of a compile (PassRegistry.cpp).
const std::vector<PassInfo>& allPasses();
const PassInfo* lookupPass(std::string_view name);

/// Named pipelines (Pipelines.cpp).
struct PipelineInfo {
  std::string_view name;
  std::string_view description;
  std::vector<std::string_view> passes;
};
const std::vector<PipelineInfo>& allPipelines();
llvm::Expected<PassPipeline> buildPipeline(std::string_view name);
/// A pipeline of the named passes, in order. Each entry is a pass name,
/// optionally followed by '=' and its options ("append-loss=mse").
llvm::Expected<PassPipeline> buildPipeline(const std::vector<std::string>& passNames);

/// One pass of a pipeline: its registered name and its option text ("" for
/// none), as `lwcc-opt --NAME=OPTIONS` takes them.
struct PipelineStep {
  std::string pass;
  std::string options;
};
using PipelineText = std::vector<PipelineStep>;

/// The plan of the training step over devices: a strategy (data, model, owt,
/// layerwise, hypergraph), or pipeline stages and micro-batches.
struct PlanChoice {
  std::string strategy = "data";
  int64_t stages = 0;       ///< pipeline: stages dividing the devices
  int64_t microbatches = 1; ///< micro-batches per step (any strategy)
  bool recompute = false;   ///< cheap activations computed again (recompute)
  /// With recompute: only the layers' of this many layers whose values
  /// hold the most bytes (recompute's top=K; 0: every layer's).
  int64_t recomputeTop = 0;
  /// Sharded data parallelism over the replicas of each replicated param:
  /// "none"; "zero1" (ZeRO stage 1: gradients reduce-scattered, each
  /// device's share of the rows updated with its share of the optimizer
  /// state, the param all-gathered); "zero2" (stage 2: zero1, and each
  /// whole gradient freed once it is reduce-scattered); "fsdp" (stage 3:
  /// the param itself kept as shares, gathered where it is read, forward
  /// and backward, its gradient reduce-scattered to the shares).
  std::string shard = "none";
  /// fsdp: only the trained params of at least this many bytes are kept as
  /// shares, the others replicated (their gradients all-reduced); 0: all.
  int64_t shardMinBytes = 0;
  /// A pipeline's compact-price piece (plan/PipelinePreview.h): its first
  /// micro-batch alone, each stage's first replica standing for the others
  /// (fold-replicas=replicas=R); not a step to train. Named
  /// "pipeline/S/M:one".
  bool oneMicrobatch = false;
  /// The strategy, or "pipeline/S/M" for S stages of M micro-batches;
  /// "+zero1", "+zero2" or "+fsdp" after it with sharding ("+fsdp>=N" with
  /// shardMinBytes N), "+recompute" with recomputation ("+recompute(K)"
  /// of recomputeTop K).
  std::string name() const;
};

/// Whether the memory plan of `plan`'s step frees a gradient once a
/// reduce_scatter on another stream has read it (ZeRO-2, FSDP), its bytes'
/// reuse waiting for the reduce-scatter (memory-plan's free_scattered=1).
bool freesScattered(const PlanChoice& plan);

/// How the planning passes price ops.
struct Pricing {
  std::string spec = "h100";  ///< a preset name or a JSON file
  int64_t devicesPerNode = 0; ///< 0: the spec's own
  int64_t devicesPerGpu = 0;  ///< logical devices per GPU; 0: the spec's own
  std::string profile;        ///< measured op times ("" for none)
  enum class Tf32 { Default, All, Off } tf32 = Tf32::Default;
  bool report = false; ///< each planning pass notes what it chose
};

/// The optimizer pass's settings; an unset number takes the pass's default
/// for the kind.
struct OptimizerSettings {
  std::string kind = "sgd"; ///< sgd, adam or adamw
  std::optional<double> lr, momentum, weightDecay, beta1, beta2, gamma, minLr;
  bool nesterov = false;
  std::string schedule = "constant"; ///< constant, step or cosine
  int64_t warmup = 0, totalSteps = 0, stepSize = 0;
  std::vector<std::string> noDecay; ///< bias, norm
  /// Parameter groups, each "PATTERN:lr=X:wd=Y" (either item may be absent).
  std::vector<std::string> groups;
};

/// Every choice of lwcc's compile pipeline.
struct TrainingPipelineOptions {
  // The loss and the training semantics.
  std::string loss = "softmax-xent";
  double labelSmoothing = 0;
  /// softmax-xent: the label that counts for nothing (a causal LM's -100).
  std::optional<int64_t> ignoreIndex;
  /// softmax-xent on [N, T, V]: logits at 0..T-2 against labels at 1..T-1.
  bool shiftLabels = false;
  /// fuse-attention: attention subgraphs as one attention op (off:
  /// --no-attention-fusion, the plain ops).
  bool attentionFusion = true;
  std::vector<std::string> freeze; ///< glob patterns of frozen params
  bool freezeBn = false;
  std::string bnRunningVar = "unbiased";
  std::string mixedPrecision = "off"; ///< off, bf16 or fp16
  // The plan over devices, and how it is priced.
  int64_t gpus = 1;
  PlanChoice plan;
  std::string schedule = "1f1b"; ///< micro-batch order: 1f1b, gpipe or zb-h1
  int64_t bucketBytes = int64_t{25} << 20;
  Pricing pricing;
  // Streams and fragments.
  int64_t streams = 1;
  std::string streamPolicy = "sim";
  int64_t fragments = 1;
  std::string fragmentAlong = "any";
  // The update.
  bool withOptimizer = true; ///< false: gradients are the step's outputs
  OptimizerSettings optimizer;
  std::optional<double> clipGradNorm;
  double lossScale = 65536.0;
  int64_t lossScaleInterval = 2000;
  // What follows the training step.
  enum class Until { TrainingStep, MemoryPlan, ScheduledStep } until = Until::ScheduledStep;
  /// The device spec whose memory each device's arena and params must fit
  /// ("" checks nothing).
  std::string memorySpec;
  bool verifySchedule = true;
  /// Whether the training step ends with verify: the planner builds its
  /// candidates without and verifies the one it keeps.
  bool verifyStep = true;
  /// Whether devices that run another's ops are left out after materialize
  /// (fold-replicas): a candidate the planner only prices (not with
  /// sharding, gradient clipping or fp16's loss scale).
  bool foldReplicas = false;
  /// Whether chains of elementwise ops become fused ops, each one generated
  /// kernel (the fuse pass; --no-fuse builds one runtime call per op).
  bool fuse = true;
};

/// The whole pipeline (steps 1 to 3 above, as far as `until`).
PipelineText trainingPipeline(const TrainingPipelineOptions& o);
/// Step 1 alone: the training step.
PipelineText trainingStepPipeline(const TrainingPipelineOptions& o);
/// Steps 2 and 3 alone: what follows the training step.
PipelineText afterTrainingStepPipeline(const TrainingPipelineOptions& o);
/// The trainer's evaluation graph: the imported model simplified (computing
/// in `mixedPrecision` as training does) and memory-planned.
PipelineText evaluationPipeline(const std::string& mixedPrecision);

/// The passes of `text`, created from their options.
llvm::Expected<PassPipeline> buildPipeline(const PipelineText& text);
/// One `--pass=options` a line: a response file of lwcc-opt.
void printPipeline(const PipelineText& text, llvm::raw_ostream& os);

} // namespace lwcc
