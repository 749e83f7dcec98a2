//===- Options.h - lwcc's command-line flags --------------------*- C++ -*-===//
//
// Every flag of the lwcc driver (Recipes.h holds the training recipes'), the
// checks of their values, and what they choose: the device spec, the cost
// model, and the typed options of the compile pipeline (plan/Pipelines.h).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "cost/CostModel.h"
#include "frontend/SharedInitializers.h"
#include "interp/Interpreter.h"
#include "plan/Pipelines.h"

#include "llvm/Support/CommandLine.h"

#include <string>

namespace lwcc::flags {

namespace cl = llvm::cl;

/// The --help category of the driver's flags.
extern cl::OptionCategory category;

enum class Emit { IR, TrainIR, ParallelIR, ScheduledIR, Plan, Source, Exe };

extern cl::opt<std::string> modelFile;
extern cl::opt<std::string> outputFile;
extern cl::opt<Emit> emit;
extern cl::opt<int64_t> gpus;
extern cl::opt<int64_t> ignoreIndex;
extern cl::opt<bool> shiftLabels;
extern cl::opt<std::string> strategy;
extern cl::opt<std::string> deviceSpec;
extern cl::opt<int64_t> devicesPerNode;
extern cl::opt<std::string> costProfile;
extern cl::opt<std::string> traceFile;
extern cl::opt<std::string> planJson;
extern cl::opt<bool> compareCandidates;
extern cl::opt<int64_t> planThreadsFlag;
extern cl::opt<bool> foldReplicas;
extern cl::opt<bool> compactPipelines;
extern cl::opt<int64_t> microbatches;
extern cl::opt<bool> batchNormPerMicrobatch;
extern cl::opt<bool> noFuse;
extern cl::opt<int64_t> stages;
extern cl::opt<std::string> schedule;
extern cl::opt<std::string> recompute;
extern cl::opt<std::string> shard;
extern cl::opt<int64_t> shardMinBytes;
extern cl::opt<int64_t> bucketBytes;
extern cl::opt<std::string> loss;
extern cl::opt<std::string> optimizer;
extern cl::opt<double> lr;
extern cl::opt<double> momentum;
extern cl::opt<double> weightDecay;
extern cl::opt<bool> nesterov;
extern cl::opt<double> beta1;
extern cl::opt<double> beta2;
extern cl::opt<std::string> lrSchedule;
extern cl::opt<int64_t> warmupSteps;
extern cl::opt<int64_t> totalSteps;
extern cl::opt<int64_t> stepSize;
extern cl::opt<double> gamma;
extern cl::opt<double> minLr;
extern cl::opt<std::string> bnRunningVar;
extern cl::opt<std::string> mixedPrecision;
extern cl::opt<double> lossScale;
extern cl::opt<int64_t> lossScaleInterval;
extern cl::opt<std::string> tiedInitializers;
extern cl::opt<bool> checkGradientsFlag;
extern cl::opt<uint64_t> checkSeed;
extern cl::opt<int64_t> checkSamples;
extern cl::opt<bool> checkMemoryPlanFlag;
extern cl::opt<bool> trainReference;
extern cl::opt<int64_t> steps;
extern cl::opt<std::string> dumpDir;
extern cl::opt<std::string> target;
extern cl::opt<bool> emulateGpu;
extern cl::opt<std::string> arch;
extern cl::opt<bool> tf32;
extern cl::opt<bool> noTf32;
extern cl::opt<int64_t> streams;
extern cl::opt<std::string> streamPolicy;
extern cl::opt<int64_t> fragments;
extern cl::opt<std::string> fragmentAlong;
extern cl::opt<std::string> stepIr;
extern cl::opt<bool> noVerifySchedule;
extern cl::opt<std::string> weightsMode;
extern cl::opt<int64_t> opsPerFile;
extern cl::opt<std::string> nvccPath;
extern cl::list<std::string> cudaLibs;
extern cl::opt<bool> verbose;
extern cl::opt<int64_t> batch;
extern cl::opt<bool> timePasses;
extern cl::opt<bool> runReference;
extern cl::opt<std::string> inputsDir;
extern cl::opt<std::string> outputsDir;
extern cl::opt<Precision> precision;
extern cl::opt<bool> listOnnxOps;
extern cl::opt<bool> printPipelineFlag;

/// Checks the flags' values before the model is read: 0, 1 (a bad device
/// spec or profile) or 2 (bad usage), with a message.
int checkUsage();
/// Checks the flags of a trainer or IR build (after the reference modes,
/// which ignore them): 0 or 2 with a message.
int checkBuildUsage();

/// The strategy --strategy names, or the default: layerwise for several
/// devices.
std::string chosenStrategy();
/// The device spec --device-spec names, or the target's default.
std::string deviceSpecName();
/// --recompute=K's number of layers, or 0 where it names no number.
int64_t recomputeLayersFlag();
/// The device spec with --devices-per-node applied.
llvm::Expected<DeviceSpec> loadSpec();
/// --tied-initializers as the frontend takes it.
TiedChoice tiedMode();
/// The candidates the planner prices at once (--plan-threads, 0: per core).
int64_t planThreads();
/// Whether --cost-profile also guides the planner (see Options.cpp).
bool planProfile();
/// The cost model the simulator prices the step on (with --cost-profile
/// unless `withProfile` is false).
llvm::Expected<CostModel> costModel(bool withProfile = true);
/// The pipeline the flags ask for, building the plan `plan`; `withOptimizer`
/// false stops after autodiff (gradients as outputs, nothing updated).
TrainingPipelineOptions pipelineOptions(const PlanChoice& plan, bool withOptimizer);
/// Why the other flags rule out --shard=zero1: "FLAG yet (reason)", or
/// "" when nothing does (the planner may then shard under --shard=auto).
std::string zero1Conflict();
/// The plan strategy `strat` builds when the planner does not choose it:
/// --stages and --microbatches as given.
PlanChoice fixedPlan(const std::string& strat);

} // namespace lwcc::flags
