//===- lwcc.cpp - The lwcc driver -----------------------------------------===//
//
//   lwcc MODEL.onnx -o TRAINER [--target=cuda|cpu] [--gpus=N] [--strategy=...] [...]
//   lwcc MODEL.onnx --emit=ir|train-ir|parallel-ir|scheduled-ir|plan|source|exe [-o OUT] [-v]
//   lwcc MODEL.onnx --print-pipeline [--emit=...]: the pass list lwcc-opt @FILE replays
//   lwcc MODEL.onnx --run-reference | --train-reference | --check-gradients |
//     --check-memory-plan: the reference interpreter's runs and checks
//   lwcc --list-onnx-ops | --version. `lwcc --help` has the rest.
//
// MODEL may be a binary ONNX file or ONNX text (.onnxtext). The flags
// (Options.h) fill the typed options of the compile pipeline
// (plan/Pipelines.h); the planner (Planner.h) selects the plan of the
// strategies it compares. Exit status: 0 on success, 1 for a bad model or
// failed run, 2 for bad usage.
//
//===----------------------------------------------------------------------===//
#include "codegen/Codegen.h"
#include "frontend/Frontend.h"
#include "ir/Printer.h"
#include "passes/MemoryPlan.h"
#include "plan/Hypergraph.h"
#include "plan/Pipelines.h"
#include "plan/PlanReport.h"
#include "plan/Planner.h"
#include "tools/lwcc/Options.h"
#include "tools/lwcc/Recipes.h"
#include "tools/lwcc/ReferenceModes.h"
#include "tools/lwcc/TrainerBuild.h"
#include "tools/lwcc/TrainerParts.h"
#include "tools/lwcc/Version.h"

#include "llvm/Support/BuryPointer.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <filesystem>
#include <optional>

using namespace lwcc;
using namespace lwcc::flags;
namespace fs = std::filesystem;

#ifdef LWCC_WITH_JEMALLOC
// jemalloc's options, read as lwcc starts (MALLOC_CONF's come after): thread
// caches of more objects, collected less often. The planner's threads build
// and drop graphs of 10^5 ops: the allocator's functions are a quarter of
// its instructions (callgrind, Inception-v3 on 16 devices), and with these
// options its plan took 0.83 s where it took 0.87 (15 runs each).
extern "C" {
const char* malloc_conf =
    "tcache_nslots_small_max:2048,lg_tcache_nslots_mul:3,tcache_gc_incr_bytes:1048576";
}
#endif

namespace {

int fail(llvm::Error e) {
  printErrors(llvm::errs(), std::move(e));
  return 1;
}

/// Seconds the last strategy pass (parallelize, hypergraph,
/// pipeline-partition) took: the search's time where the planner selects.
double strategySeconds = 0;
/// The plan of the module's training step, once built.
PlanChoice builtPlan;
/// The memory plan of the module's step where the planner finished the
/// step it kept ahead (Planner::setFinish): the caller's passes are not
/// run on it again.
std::optional<MemoryPlanStats> builtFinished;
std::optional<Planner> planner;

/// Runs the training-step pipeline of `plan` on `g`, its diagnostics and pass
/// times written to `log`; returns the seconds its strategy pass took. The
/// planner calls it from several threads, each with a graph and log of its
/// own.
llvm::Expected<double> buildWithPlan(Graph& g, const PlanChoice& plan, bool withOptimizer,
                                     llvm::raw_ostream& log = llvm::errs(), bool verify = true,
                                     bool fold = false) {
  TrainingPipelineOptions o = pipelineOptions(plan, withOptimizer);
  o.verifyStep = verify;
  o.foldReplicas = fold;
  auto pipeline = buildPipeline(trainingStepPipeline(o));
  if (!pipeline)
    return pipeline.takeError();
  PassContext ctx = PassContext::printingTo(log);
  double seconds = 0;
  PassRunOptions opts;
  opts.timePasses = timePasses ? &log : nullptr;
  opts.afterPass = [&](const Pass& pass, double s) {
    if (pass.name() == "parallelize" || pass.name() == "hypergraph" ||
        pass.name() == "pipeline-partition")
      seconds = s;
  };
  if (llvm::Error e = runPipeline(g, *pipeline, ctx, opts))
    return e;
  return seconds;
}

/// The training step of strategy `strat` built on `g`: the planner's plan
/// where it selects one.
llvm::Expected<PlanChoice> buildTrainingStep(Graph& g, bool withOptimizer,
                                             const std::string& strat) {
  auto plan = planner->plan(g, strat, fixedPlan(strat));
  if (!plan)
    return plan.takeError();
  auto seconds = buildWithPlan(g, *plan, withOptimizer);
  if (!seconds)
    return seconds.takeError();
  const PlanSelection* selection = planner->selection(strat);
  strategySeconds = selection ? selection->searchSeconds : *seconds;
  return *plan;
}

/// The module's graph replaced by its training step (the planner's kept
/// step where it selects).
llvm::Error buildModuleStep(Module& m, bool withOptimizer) {
  const std::string strat = chosenStrategy();
  auto plan = planner->plan(*m.graph, strat, fixedPlan(strat));
  if (!plan)
    return plan.takeError();
  if (std::string w = planner->batchNormWarning(*m.graph, strat, *plan); !w.empty())
    llvm::errs() << "lwcc: warning: " << w << "\n";
  // A plan the planner selected was built whole while selecting: take it.
  if (withOptimizer)
    if (auto kept = planner->takeKeptStep(strat)) {
      m.graph = std::move(kept);
      builtFinished = planner->keptStepFinished(strat);
      strategySeconds = planner->selection(strat)->searchSeconds;
      builtPlan = *plan;
      return llvm::Error::success();
    }
  auto built = buildTrainingStep(*m.graph, withOptimizer, strat);
  if (!built)
    return built.takeError();
  builtPlan = *built;
  return llvm::Error::success();
}

/// The pipeline's steps after the training step, on the built step `g`, as
/// far as `until`; returns the memory plan's statistics and the number of
/// events placed.
llvm::Expected<std::pair<MemoryPlanStats, int64_t>>
finishStep(Graph& g, TrainingPipelineOptions::Until until, const PlanChoice& plan = builtPlan) {
  TrainingPipelineOptions o = pipelineOptions(plan, true);
  o.until = until;
  auto pipeline = buildPipeline(afterTrainingStepPipeline(o));
  if (!pipeline)
    return pipeline.takeError();
  MemoryPlanStats stats;
  PassContext ctx = PassContext::printingTo(llvm::errs());
  ctx.memoryPlanStats = &stats;
  if (llvm::Error e = runPipeline(g, *pipeline, ctx))
    return e;
  int64_t events = 0;
  for (const auto& op : g.ops())
    events += op->kind() == OpKind::Record;
  return std::make_pair(stats, events);
}

/// --print-pipeline: the passes of this compile, as far as --emit goes.
int printPipelineMode(Module& m) {
  auto plan = planner->plan(*m.graph, chosenStrategy(), fixedPlan(chosenStrategy()));
  if (!plan)
    return fail(plan.takeError());
  using Until = TrainingPipelineOptions::Until;
  TrainingPipelineOptions o = pipelineOptions(*plan, true);
  o.until = emit == Emit::TrainIR || emit == Emit::ParallelIR ? Until::TrainingStep
            : emit == Emit::Plan                              ? Until::MemoryPlan
                                                              : Until::ScheduledStep;
  std::error_code ec;
  llvm::ToolOutputFile out(outputFile, ec, llvm::sys::fs::OF_Text);
  if (ec) {
    llvm::errs() << outputFile << ": error: cannot write: " << ec.message() << "\n";
    return 1;
  }
  printPipeline(trainingPipeline(o), out.os());
  out.keep();
  return 0;
}

/// --emit=source and --emit=exe: the trainer of the scheduled step.
int buildTrainerMode(Module& module, const char* argv0) {
  auto eval = evalGraph(*module.graph);
  if (!eval)
    return fail(eval.takeError());
  // What the memory plan leaves each device's convolutions (CUDA).
  std::vector<int64_t> convWorkspaces;
  if (!stepIr.empty()) {
    if (int rc = loadStepIr(module))
      return rc;
  } else {
    if (llvm::Error e = buildModuleStep(module, true))
      return fail(std::move(e));
    auto done = finishStep(*module.graph, TrainingPipelineOptions::Until::ScheduledStep);
    if (!done)
      return fail(done.takeError());
    if (verbose) {
      for (const auto& [device, bytes] : done->first.peakBytes)
        llvm::errs() << llvm::formatv("lwcc: memory plan: device {0}: arena {1} bytes (peak)\n",
                                      device, bytes);
      llvm::errs() << llvm::formatv("lwcc: schedule: {0} events\n", done->second);
    }
    if (target == "cuda") {
      auto spec = loadSpec();
      if (!spec)
        return fail(spec.takeError());
      const MemoryPlanStats& stats = done->first;
      const std::map<int64_t, int64_t> limits = convWorkspaceLimits(*module.graph, stats, *spec);
      if (!limits.empty() && !stats.peakBytes.empty()) {
        convWorkspaces.assign(static_cast<size_t>(stats.peakBytes.rbegin()->first + 1), -1);
        for (const auto& [device, bytes] : limits)
          convWorkspaces[static_cast<size_t>(device)] = bytes;
      }
      if (verbose)
        for (const auto& [device, bytes] : limits)
          llvm::errs() << llvm::formatv(
              "lwcc: memory plan: device {0}: convolution workspace up to {1} MiB a stream\n",
              device, bytes >> 20);
    }
  }
  if (!traceFile.empty()) {
    auto model = costModel();
    if (!model)
      return fail(model.takeError());
    if (llvm::Error e = writeSimulatedTrace(*module.graph, *model, traceFile))
      return fail(std::move(e));
  }
  const bool embedWeights = weightsMode == "embed";
  CodegenOptions co;
  co.target = target;
  co.modelName = llvm::sys::path::filename(modelFile.getValue()).str();
  co.tf32 = noTf32 ? "Off" : tf32 ? "All" : "Convolutions";
  if (mixedPrecision == "fp16")
    co.lossScaleInit = lossScale;
  co.eval = eval->get();
  co.embedWeights = embedWeights;
  co.fuseCalls = !noFuse;
  if (ignoreIndex.getNumOccurrences())
    co.ignoreIndex = ignoreIndex.getValue();
  co.shiftLabels = shiftLabels;
  co.opsPerFile = static_cast<size_t>(opsPerFile.getValue());
  co.convWorkspaceBytes = std::move(convWorkspaces);
  addExportTemplate(*module.graph, co);
  std::string prefix = installPrefix(argv0);
  TrainerBuildOptions bo;
  bo.target = target;
  bo.arch = arch;
  bo.nvcc = nvccPath;
  bo.cudaLibs.assign(cudaLibs.begin(), cudaLibs.end());
  bo.verbose = verbose;
  bo.emulateGpu = emulateGpu;
  if (emit == Emit::Source) {
    auto trainer = generateTrainer(module, co);
    if (!trainer)
      return fail(trainer.takeError());
    return emitSource(*trainer, outputFile, prefix, bo);
  }
  // The blobs are embedded from the build folder by absolute path.
  llvm::SmallString<128> dir;
  if (llvm::sys::fs::createUniqueDirectory("lwcc-trainer", dir)) {
    llvm::errs() << "lwcc: error: cannot create a temporary folder\n";
    return 1;
  }
  std::string tmp = fs::absolute(dir.str().str()).string();
  co.weightsFile = tmp + "/trainer.weights";
  co.exportFile = tmp + "/trainer.onnx-template";
  auto trainer = generateTrainer(module, co);
  int rc = trainer ? buildExe(*trainer, tmp, outputFile, prefix, bo) : fail(trainer.takeError());
  if (rc == 0 && !embedWeights && !writeBlob(outputFile + ".weights", trainer->weights)) {
    llvm::errs() << outputFile << ".weights: error: cannot write\n";
    rc = 1;
  }
  fs::remove_all(tmp);
  return rc;
}

/// --emit=plan's report of the memory-planned step `g`.
int printPlanReport(const Graph& g, const MemoryPlanStats& plan, const CostModel& model,
                    const std::vector<StrategyPlan>& strategyPlans, llvm::raw_ostream& os) {
  printPlan(g, plan, os, {!noFuse, target != "cpu"});
  if (llvm::Error e = printStreamPlan(g, model, os))
    return fail(std::move(e));
  if (gpus > 1)
    printParallelPlan(g, model, chosenStrategy(), gpus, strategyPlans, planner->selections(),
                      schedule, os);
  else if (auto sim = simulate(g, simCosts(model)))
    os << llvm::formatv("predicted step on {0}: {1:f3} ms\n", model.spec().name,
                        sim->stepSeconds * 1e3);
  else
    return fail(sim.takeError());
  if (planJson.empty())
    return 0;
  std::error_code jec;
  llvm::raw_fd_ostream json(planJson, jec);
  if (jec) {
    llvm::errs() << planJson << ": error: cannot write: " << jec.message() << "\n";
    return 1;
  }
  std::optional<PipelinePlan> pipe;
  for (const StrategyPlan& sp : strategyPlans)
    if (sp.name == chosenStrategy())
      pipe = pipelinePlan(g, sp, schedule);
  const PlanSelection* selection = planner->selection(chosenStrategy());
  writePlanJson(chosenStrategy(), strategySeconds, model.spec().name, strategyPlans,
                selection ? selection : planner->selection("layerwise"), layerPlans(g, model),
                pipe ? &*pipe : nullptr, &plan, recomputedLayers(g), shardedParams(g), json);
  return 0;
}

/// --emit=ir, train-ir, parallel-ir, scheduled-ir and plan.
int emitMode(Module& module) {
  if (emit == Emit::ParallelIR && gpus < 2) {
    llvm::errs() << "lwcc: --emit=parallel-ir needs --gpus=N with N >= 2\n";
    return 2;
  }
  auto model = costModel();
  if (!model)
    return fail(model.takeError());
  std::vector<StrategyPlan> strategyPlans;
  if (emit == Emit::Plan && gpus > 1) {
    auto plans = planStrategies(
        *planner, *module.graph, {"data", "model", "owt", "layerwise", "hypergraph", "pipeline"},
        chosenStrategy(), fixedPlan, costProfile.empty() || planProfile() ? nullptr : &*model);
    if (!plans)
      return fail(plans.takeError());
    strategyPlans = std::move(*plans);
  }
  std::optional<MemoryPlanStats> plan;
  if (emit != Emit::IR) {
    if (llvm::Error e = buildModuleStep(module, true))
      return fail(std::move(e));
    if (verbose)
      llvm::errs() << llvm::formatv("lwcc: training step: {0} ops, {1} params with state\n",
                                    module.graph->numOps(), module.graph->params().size());
    if (!traceFile.empty())
      if (llvm::Error e = writeSimulatedTrace(*module.graph, *model, traceFile))
        return fail(std::move(e));
    if (emit == Emit::Plan || emit == Emit::ScheduledIR || verbose) {
      // -v plans a copy so that --emit=train-ir prints the graph unannotated.
      std::unique_ptr<Graph> copy;
      Graph* target = module.graph.get();
      if (emit != Emit::Plan && emit != Emit::ScheduledIR) {
        copy = module.graph->clone();
        target = copy.get();
      }
      using Until = TrainingPipelineOptions::Until;
      if (emit == Emit::Plan && builtFinished) {
        plan = *builtFinished;
      } else {
        auto done = finishStep(*target, emit == Emit::ScheduledIR ? Until::ScheduledStep
                                                                  : Until::MemoryPlan);
        if (!done)
          return fail(done.takeError());
        plan = done->first;
        if (verbose && emit == Emit::ScheduledIR)
          llvm::errs() << llvm::formatv("lwcc: schedule: {0} events\n", done->second);
      }
      // The rows of the plan kept: this step's memory plan.
      for (StrategyPlan& row : strategyPlans)
        if (row.chosenPlan && row.error.empty())
          row.peakBytes = plan->peakBytes;
      if (verbose)
        for (const auto& [device, bytes] : plan->peakBytes)
          llvm::errs() << llvm::formatv("lwcc: memory plan: device {0}: arena {1} bytes (peak), "
                                        "{2} bytes without sharing\n",
                                        device, bytes, plan->totalBytes);
    }
  }
  std::error_code ec;
  llvm::ToolOutputFile out(outputFile, ec, llvm::sys::fs::OF_Text);
  if (ec) {
    llvm::errs() << outputFile << ": error: cannot write: " << ec.message() << "\n";
    return 1;
  }
  if (emit == Emit::Plan) {
    if (int rc = printPlanReport(*module.graph, *plan, *model, strategyPlans, out.os()))
      return rc;
  } else {
    printGraph(*module.graph, out.os());
  }
  out.keep();
  return 0;
}

void printVersion(llvm::raw_ostream& os) {
  os << "lwcc " << kLwccVersion << " (git " << kLwccGitCommit << ")\n";
}

} // namespace

int main(int argc, char** argv) {
  cl::SetVersionPrinter(printVersion);
  cl::HideUnrelatedOptions({&category, &recipes::optionCategory()});
  if (!cl::ParseCommandLineOptions(argc, argv, "lwcc: ONNX to training programs\n", &llvm::errs()))
    return 2;
  if (listOnnxOps) {
    for (const std::string& op : supportedOnnxOps())
      llvm::outs() << op << "\n";
    return 0;
  }
  if (modelFile.empty()) {
    llvm::errs() << "lwcc: no model given (lwcc MODEL.onnx ...); see --help\n";
    return 2;
  }
  if (int rc = checkUsage())
    return rc;
  ImportOptions opts;
  if (batch > 0)
    opts.batch = batch;
  opts.tied = tiedMode();
  opts.diag = [](Severity sev, const Location& loc, const std::string& msg) {
    printDiagnostic(llvm::errs(), sev, loc, msg);
  };
  if (!emit.getNumOccurrences() && outputFile != "-")
    emit = Emit::Exe; // `lwcc MODEL -o trainer`
  // The weights' values go into trainers and the reference modes; --emit's
  // IR and plans print none.
  opts.weights = runReference || checkGradientsFlag || trainReference || checkMemoryPlanFlag ||
                 emit == Emit::Source || emit == Emit::Exe;
  // Zoltan's MPI started beside the import where a hypergraph partition
  // is coming (--emit=plan's row, or the strategy), joined at the end.
  std::jthread mpi;
  if (gpus > 1 && (emit == Emit::Plan || (strategy == "hypergraph" && emit != Emit::IR)))
    mpi = startMpiEarly();
  auto module = importFile(modelFile, opts);
  if (!module)
    return fail(module.takeError());
  if (llvm::Error e = eliminateDeadCode(*module))
    return fail(std::move(e));

  auto planModel = costModel(planProfile());
  if (!planModel)
    return fail(planModel.takeError());
  auto memorySpec = loadSpec();
  if (!memorySpec)
    return fail(memorySpec.takeError());
  PlannerOptions po;
  po.devices = gpus;
  po.stages = stages;
  if (microbatches.getNumOccurrences())
    po.microbatches = microbatches;
  po.microbatchStatistics = batchNormPerMicrobatch;
  po.selectLayerwise = compareCandidates;
  po.recomputeWhenOver = recompute == "auto";
  po.shardWhenOver = shard == "auto" && zero1Conflict().empty();
  if (shard != "auto")
    po.shard = shard;
  po.verbose = verbose;
  po.reportsStrategies = emit == Emit::Plan;
  po.threads = planThreads();
  po.foldReplicas = foldReplicas;
  // The compact price replays one compute stream per device and the 1f1b
  // or gpipe order of whole tasks.
  po.compactPipelines = compactPipelines;
  po.compactModels = streams <= 1 && schedule != "zb-h1";
  po.gpipe = schedule == "gpipe";
  po.bucketBytes = bucketBytes;
  planner.emplace(
      po,
      [](Graph& g, const PlanChoice& plan, llvm::raw_ostream& log, bool verify, bool fold) {
        return buildWithPlan(g, plan, true, log, verify, fold);
      },
      std::move(*planModel), std::move(*memorySpec));
  // --emit=plan's memory plan of the kept step (the passes after the
  // training step) may be run by the planner ahead, while it prices others.
  if (emit == Emit::Plan)
    planner->setFinish([](Graph& step, const PlanChoice& plan) -> llvm::Expected<MemoryPlanStats> {
      auto done = finishStep(step, TrainingPipelineOptions::Until::MemoryPlan, plan);
      if (!done)
        return done.takeError();
      return done->first;
    });

  if (runReference)
    return runReferenceMode(*module);
  if (checkGradientsFlag)
    return checkGradientsMode(*module, buildModuleStep);
  if (trainReference)
    return trainReferenceMode(*module, buildModuleStep);
  if (checkMemoryPlanFlag)
    return checkMemoryPlanMode(*module, buildModuleStep);
  if (verbose)
    llvm::errs() << llvm::formatv("lwcc: imported @{0}: {1} inputs, {2} params, {3} ops\n",
                                  module->graph->name(), module->graph->inputs().size(),
                                  module->graph->params().size(), module->graph->numOps());
  if (int rc = checkBuildUsage())
    return rc;
  if (printPipelineFlag)
    return printPipelineMode(*module);
  if (emit == Emit::Source || emit == Emit::Exe)
    return buildTrainerMode(*module, argv[0]);
  const int rc = emitMode(*module);
  // The process ends without freeing the steps it built (as compilers
  // do): freeing them took 0.02 s of Inception-v3's 16-device plan.
  llvm::BuryPointer(std::move(module->graph));
  planner->buryKeptSteps();
  return rc;
}
