//===- lwcc.cpp - The lwcc driver -----------------------------------------===//
//
// lwcc MODEL.onnx -o TRAINER [--target=cuda|cpu] [--gpus=N] [...]: the trainer.
// lwcc MODEL.onnx --emit=STAGE: one stage's output (ir, train-ir, parallel-ir,
// scheduled-ir, plan, source, exe).
// lwcc MODEL.onnx --run-reference | --train-reference | --check-gradients |
// --check-memory-plan: the reference interpreter's runs and checks.
// lwcc --list-onnx-ops: the ONNX op types lwcc imports. `lwcc --help` has the rest.
//
// MODEL may be a binary ONNX file or ONNX text (.onnxtext). Exit status: 0
// on success, 1 for a bad model or failed run, 2 for bad usage.
//
//===----------------------------------------------------------------------===//
#include "codegen/Codegen.h"
#include "frontend/ExportTemplate.h"
#include "frontend/Frontend.h"
#include "interp/Eval.h"
#include "interp/Interpreter.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "passes/GradCheck.h"
#include "passes/MemoryPlan.h"
#include "passes/Pass.h"
#include "passes/StepOrder.h"
#include "plan/CostModel.h"
#include "plan/PlanReport.h"
#include "tools/lwcc/Recipes.h"
#include "tools/lwcc/TrainerBuild.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>

using namespace lwcc;
namespace cl = llvm::cl;
namespace fs = std::filesystem;

namespace {

cl::OptionCategory category("lwcc options");

cl::opt<std::string> modelFile(cl::Positional, cl::desc("<model.onnx | model.onnxtext>"),
                               cl::cat(category));
cl::opt<std::string> outputFile("o", cl::desc("Output file (default: stdout)"),
                                cl::value_desc("file"), cl::init("-"), cl::cat(category));
enum class Emit { IR, TrainIR, ParallelIR, ScheduledIR, Plan, Source, Exe };
cl::opt<Emit> emit("emit", cl::desc("What to produce"),
                   cl::values(clEnumValN(Emit::IR, "ir", "the model IR (.lwir)"),
                              clEnumValN(Emit::TrainIR, "train-ir",
                                         "the training step: forward, loss, backward, update"),
                              clEnumValN(Emit::ParallelIR, "parallel-ir",
                                         "the training step on --gpus devices: per-device ops "
                                         "and their communication"),
                              clEnumValN(Emit::ScheduledIR, "scheduled-ir",
                                         "the training step as the trainer runs it: memory "
                                         "plan (@buf), streams and their record and wait "
                                         "events (lwcc-opt --verify-schedule checks it)"),
                              clEnumValN(Emit::Plan, "plan",
                                         "the training step's memory plan: a table of buffers"),
                              clEnumValN(Emit::Source, "source",
                                         "the trainer's sources in the folder given by -o"),
                              clEnumValN(Emit::Exe, "exe",
                                         "the trainer executable given by -o (the default "
                                         "with -o)")),
                   cl::init(Emit::IR), cl::cat(category));

// Parallelization.
cl::opt<int64_t> gpus("gpus", cl::desc("Devices to train on (default 1)"), cl::init(1),
                      cl::cat(category));
cl::opt<std::string>
    strategy("strategy",
             cl::desc("How layers are parallelized over --gpus devices: "
                      "layerwise (default: the fastest config per layer on "
                      "--device-spec, or a pipeline when one is faster), data, model, owt (One "
                      "Weird Trick), hypergraph (units of work onto devices by Zoltan "
                      "partitioning) or pipeline (stages of consecutive layers, micro-batches)"),
             cl::cat(category));
cl::opt<std::string> deviceSpec("device-spec",
                                cl::desc("The devices the cost model prices: h100, h200, a100, "
                                         "p100-cluster, cpu or a JSON file (default h100 for "
                                         "--target=cuda, cpu for --target=cpu)"),
                                cl::value_desc("name|file.json"), cl::cat(category));
cl::opt<int64_t> devicesPerNode(
    "devices-per-node",
    cl::desc("Devices that share a node (a machine): the cost model prices the links between "
             "nodes apart (default the device spec's). A trainer run as several processes under "
             "mpirun has its processes' devices on their machines"),
    cl::init(0), cl::cat(category));
cl::opt<std::string> costProfile("cost-profile",
                                 cl::desc("Measured per-op times (the trainer's --profile-ops "
                                          "file) that the cost model uses instead of its own"),
                                 cl::value_desc("file.json"), cl::cat(category));
cl::opt<std::string> traceFile("trace",
                               cl::desc("Write the simulator's timeline of the training step as "
                                        "Chrome trace-event JSON (opens in Perfetto)"),
                               cl::value_desc("file.json"), cl::cat(category));
cl::opt<std::string> planJson("plan-json",
                              cl::desc("With --emit=plan: write every strategy's predicted step "
                                       "time, bytes and peak memory, and the layers, as JSON"),
                              cl::value_desc("file.json"), cl::cat(category));
cl::opt<bool> checkSearch(
    "check-search",
    cl::desc("With --strategy=layerwise on several devices: simulate the searched plan beside "
             "data, model and owt parallelism and keep the fastest (default true; =false keeps "
             "the search's plan)"),
    cl::init(true), cl::cat(category));
cl::opt<int64_t> microbatches(
    "microbatches",
    cl::desc("Micro-batches per step (default 1): forward and backward run on M slices of the "
             "batch, their gradients summed before one update (any strategy; the pipeline "
             "planner's choice for --strategy=pipeline when not given)"),
    cl::init(1), cl::cat(category));
cl::opt<int64_t> stages("stages",
                        cl::desc("--strategy=pipeline: pipeline stages, dividing --gpus (default: "
                                 "the planner's choice)"),
                        cl::init(0), cl::cat(category));
cl::opt<std::string> schedule("schedule",
                              cl::desc("The order of each device's micro-batches: 1f1b "
                                       "(default) or gpipe"),
                              cl::init("1f1b"), cl::cat(category));
cl::opt<int64_t> bucketBytes("bucket-bytes",
                             cl::desc("Gradient all-reduce bucket size in bytes (default 25 MiB)"),
                             cl::init(int64_t{25} << 20), cl::cat(category));

// Training.
cl::opt<std::string> loss("loss", cl::desc("The loss: softmax-xent (default), mse or none"),
                          cl::init("softmax-xent"), cl::cat(category));
cl::opt<std::string> optimizer("optimizer", cl::desc("sgd (default), adam or adamw"),
                               cl::init("sgd"), cl::cat(category));
cl::opt<double> lr("lr", cl::desc("Learning rate (default 0.01 for sgd, 0.001 for adam/adamw)"),
                   cl::cat(category));
cl::opt<double> momentum("momentum", cl::desc("SGD momentum (default 0.9)"), cl::cat(category));
cl::opt<double> weightDecay("weight-decay",
                            cl::desc("Weight decay (default 5e-4 sgd, 0 adam, 0.01 adamw)"),
                            cl::cat(category));
cl::opt<bool> nesterov("nesterov", cl::desc("Nesterov momentum for SGD"), cl::cat(category));
cl::opt<double> beta1("beta1", cl::desc("Adam beta1 (default 0.9)"), cl::cat(category));
cl::opt<double> beta2("beta2", cl::desc("Adam beta2 (default 0.999)"), cl::cat(category));
cl::opt<std::string> lrSchedule("lr-schedule", cl::desc("constant (default), step or cosine"),
                                cl::init("constant"), cl::cat(category));
cl::opt<int64_t> warmupSteps("warmup-steps", cl::desc("Linear warm-up steps"), cl::init(0),
                             cl::cat(category));
cl::opt<int64_t> totalSteps("total-steps", cl::desc("Steps of a cosine schedule"), cl::init(0),
                            cl::cat(category));
cl::opt<int64_t> stepSize("step-size", cl::desc("Steps between decays of a step schedule"),
                          cl::init(0), cl::cat(category));
cl::opt<double> gamma("gamma", cl::desc("Decay factor of a step schedule (default 0.1)"),
                      cl::cat(category));
cl::opt<double> minLr("min-lr", cl::desc("Final learning rate of a cosine schedule (default 0)"),
                      cl::cat(category));
cl::opt<std::string> bnRunningVar("bn-running-var",
                                  cl::desc("Batch norm's running variance update: unbiased "
                                           "(default; PyTorch's rule) or biased (ONNX's rule)"),
                                  cl::init("unbiased"), cl::cat(category));
cl::opt<std::string> mixedPrecision(
    "mixed-precision",
    cl::desc("off (default), bf16 or fp16: convolutions and matrix products (and their "
             "gradients) compute on 16-bit operands, as PyTorch's autocast runs them; params, "
             "their updates, batch norm and the loss stay float32; fp16 with dynamic loss "
             "scaling"),
    cl::init("off"), cl::cat(category));
cl::opt<double> lossScale("loss-scale",
                          cl::desc("fp16: the initial loss scale, a power of two (default 65536, "
                                   "as PyTorch's GradScaler)"),
                          cl::init(65536.0), cl::cat(category));
cl::opt<int64_t> lossScaleInterval(
    "loss-scale-interval",
    cl::desc("fp16: finite steps in a row after which the loss scale doubles (default 2000)"),
    cl::init(2000), cl::cat(category));
cl::opt<std::string> tiedInitializers(
    "tied-initializers",
    cl::desc("An initializer several nodes read (PyTorch's exporter deduplicates equal "
             "values): untie (default; one param per consumer, as in the network exported) or "
             "keep (one tied param, its gradient summed; running statistics still per layer)"),
    cl::init("untie"), cl::cat(category));

// Checks on the reference interpreter.
cl::opt<bool>
    checkGradientsFlag("check-gradients",
                       cl::desc("Check every param's gradient against finite "
                                "differences in float64; exit 1 above 1e-6 (elements on a "
                                "kink of relu or max are re-drawn, not failed)"),
                       cl::cat(category));
cl::opt<uint64_t> checkSeed("check-seed",
                            cl::desc("Seed of --check-gradients' inputs and sampled elements"),
                            cl::init(1), cl::cat(category));
cl::opt<int64_t> checkSamples("check-samples",
                              cl::desc("Elements checked per param by --check-gradients"),
                              cl::init(6), cl::cat(category));
cl::opt<bool> checkMemoryPlanFlag(
    "check-memory-plan",
    cl::desc("Plan the training step's memory, run one step in the planned arenas and compare "
             "with the interpreter; exit 1 on any difference"),
    cl::cat(category));
cl::opt<bool> trainReference("train-reference",
                             cl::desc("Run training steps on the reference interpreter"),
                             cl::cat(category));
cl::opt<int64_t> steps("steps", cl::desc("Steps for --train-reference"), cl::init(1),
                       cl::cat(category));
cl::opt<std::string> dumpDir("dump",
                             cl::desc("Where --train-reference writes losses, first-step "
                                      "gradients and final params (TensorProto files; "
                                      "float64 with --precision=f64)"),
                             cl::value_desc("dir"), cl::cat(category));
cl::opt<std::string> target("target",
                            cl::desc("Where the trainer runs: cuda (default; built with nvcc) or "
                                     "cpu (built with the host compiler)"),
                            cl::init("cuda"), cl::cat(category));
cl::opt<bool> emulateGpu(
    "emulate-gpu",
    cl::desc("Build the cuda trainer against the emulated CUDA device (a test device: the "
             "same generated CUDA source and CUDA runtime, compiled with the host compiler "
             "and run on emulated GPUs; no GPU or nvcc needed). Implies --target=cuda"),
    cl::cat(category));
cl::opt<std::string> arch("arch", cl::desc("GPU architecture of a cuda trainer (default sm_90)"),
                          cl::init("sm_90"), cl::cat(category));
cl::opt<bool> tf32("tf32",
                   cl::desc("The cuda trainer's default: TF32 math for matrix products too, "
                            "not only for convolutions (PyTorch's default is convolutions "
                            "only); the plan is priced at the TF32 peak. The trainer's "
                            "--tf32=conv|all|off overrides it"),
                   cl::cat(category));
cl::opt<bool> noTf32("no-tf32",
                     cl::desc("The cuda trainer's default: strict float32, no TF32 math even "
                              "for convolutions"),
                     cl::cat(category));
cl::opt<int64_t> streams("streams",
                         cl::desc("Streams per device of the trainer's step, 1 (default) to 8: "
                                  "2 puts weight gradients and updates on a second stream, 3 "
                                  "and more add streams for independent branches"),
                         cl::init(1), cl::cat(category));
cl::opt<std::string>
    streamPolicy("stream-policy",
                 cl::desc("Which branches get streams of their own with --streams=3 or more: "
                          "sim (default: where the simulator predicts a shorter step) or all"),
                 cl::init("sim"), cl::cat(category));
cl::opt<int64_t> fragments(
    "fragments",
    cl::desc("Fragments of the batch inside a device (FiLayer), 1 (default) to 64, with "
             "--streams=3 or more on one device: K pieces of the batch flow through runs of "
             "layers (or through one heavy op) on the branch streams, where the simulator "
             "predicts a shorter step (every run with --stream-policy=all)"),
    cl::init(1), cl::cat(category));
cl::opt<std::string> fragmentAlong(
    "fragment-along",
    cl::desc("What --fragments may cut: samples (fragments of the batch), channels (one heavy "
             "op as K ops on slices of its output channels: batch 1 too) or any (default)"),
    cl::init("any"), cl::cat(category));
cl::opt<std::string> stepIr(
    "step-ir",
    cl::desc("Build the trainer from this scheduled IR (what --emit=scheduled-ir printed, "
             "perhaps edited) instead of the model's compiled step; the model gives the initial "
             "weights, the evaluation pass and the export. Its schedule is proven as lwcc's own"),
    cl::value_desc("FILE.lwir"), cl::cat(category));
cl::opt<bool> noVerifySchedule(
    "no-verify-schedule",
    cl::desc("Testing only: build the trainer without proving its schedule race-free"), cl::Hidden,
    cl::cat(category));
cl::opt<std::string> weightsMode("weights",
                                 cl::desc("embed (default): the initial weights inside the "
                                          "trainer; separate: in TRAINER.weights (or "
                                          "DIR/trainer.weights for --emit=source), read at "
                                          "start-up"),
                                 cl::init("embed"), cl::cat(category));
cl::opt<std::string> nvccPath("nvcc",
                              cl::desc("The nvcc to build cuda trainers with (default: "
                                       "$CUDA_HOME/bin/nvcc, /usr/local/cuda/bin/nvcc, PATH)"),
                              cl::value_desc("path"), cl::cat(category));
cl::list<std::string> cudaLibs("cuda-libs",
                               cl::desc("Folders holding libcudnn.so.9, libcublas.so.13 and "
                                        "libnccl.so.2 when nvcc's own do not (pip's nvidia "
                                        "wheels); searched first when linking and at run time"),
                               cl::value_desc("dir"), cl::CommaSeparated, cl::cat(category));
cl::opt<bool> verbose("v", cl::desc("Report what each stage produced on stderr"),
                      cl::cat(category));
cl::opt<int64_t> batch("batch", cl::desc("Value of a symbolic leading (batch) dim of the inputs"),
                       cl::init(0), cl::cat(category));
cl::opt<bool> timePasses("pass-times",
                         cl::desc("Print each pass's wall time and op count to stderr"),
                         cl::cat(category));
cl::opt<bool> runReference("run-reference", cl::desc("Run the model on the reference interpreter"),
                           cl::cat(category));
cl::opt<std::string> inputsDir("inputs",
                               cl::desc("Folder with input_0.pb, input_1.pb, ... (TensorProto)"),
                               cl::value_desc("dir"), cl::cat(category));
cl::opt<std::string> outputsDir("outputs", cl::desc("Folder to write output_0.pb, ... into"),
                                cl::value_desc("dir"), cl::cat(category));
cl::opt<Precision> precision("precision", cl::desc("Float precision of the interpreter"),
                             cl::values(clEnumValN(Precision::F32, "f32", "float (default)"),
                                        clEnumValN(Precision::F64, "f64", "double")),
                             cl::init(Precision::F32), cl::cat(category));
cl::opt<bool> listOnnxOps("list-onnx-ops", cl::desc("List the ONNX op types lwcc imports"),
                          cl::cat(category));

int fail(llvm::Error e) {
  printErrors(llvm::errs(), std::move(e));
  return 1;
}

/// The options of the optimizer pass from the command line.
std::string optimizerOptions() {
  std::string o = optimizer;
  auto num = [&](const char* key, const cl::opt<double>& v) {
    if (v.getNumOccurrences())
      o += std::string(",") + key + "=" + llvm::formatv("{0:e16}", v.getValue()).str();
  };
  num("lr", lr);
  num("momentum", momentum);
  num("weight_decay", weightDecay);
  num("beta1", beta1);
  num("beta2", beta2);
  num("gamma", gamma);
  num("min_lr", minLr);
  if (nesterov)
    o += ",nesterov=1";
  o += ",schedule=" + lrSchedule;
  o += ",warmup=" + std::to_string(warmupSteps);
  o += ",total_steps=" + std::to_string(totalSteps);
  o += ",step_size=" + std::to_string(stepSize);
  return o + recipes::optimizerOptions();
}

/// Seconds the last strategy pass (parallelize, hypergraph) took.
double strategySeconds = 0;
/// The strategy --strategy names, or the default: layerwise for several
/// devices.
std::string chosenStrategy() {
  if (!strategy.empty())
    return strategy;
  return gpus > 1 ? "layerwise" : "data";
}

/// The device spec --device-spec names, or the target's default.
std::string deviceSpecName() {
  if (!deviceSpec.empty())
    return deviceSpec;
  return target == "cpu" ? "cpu" : "h100";
}

/// The device spec with --devices-per-node applied.
llvm::Expected<DeviceSpec> loadSpec() {
  auto spec = loadDeviceSpec(deviceSpecName());
  if (spec && devicesPerNode > 0)
    spec->devicesPerNode = devicesPerNode;
  return spec;
}

/// Whether --cost-profile also guides the planner (the searches, the
/// candidates it compares, the streams it assigns): a one-device profile
/// prices the whole ops they weigh. A profile of several devices holds one
/// plan's pieces: it prices that plan (the final simulation), and the
/// planner chooses on the spec as it did for the trainer that measured it.
bool planProfile() {
  static const bool guides = [] {
    if (costProfile.empty())
      return false;
    auto p = loadOpProfile(costProfile);
    if (!p) {
      llvm::consumeError(p.takeError()); // the passes given it report it
      return true;
    }
    return p->devices <= 1;
  }();
  return guides;
}

/// The passes' options naming the device spec (and --devices-per-node).
std::string specOptions() {
  std::string o = ",spec=" + deviceSpecName();
  if (devicesPerNode > 0)
    o += ",devices_per_node=" + std::to_string(devicesPerNode);
  return o;
}

/// What a planning pass prices with: the profile (where it guides the
/// planner), TF32, and with -v a report.
std::string pricingOptions() {
  std::string o;
  if (planProfile())
    o += ",profile=" + costProfile;
  if (tf32 || noTf32) // the trainers' default (convolutions on TF32) otherwise
    o += noTf32 ? ",tf32=off" : ",tf32=all";
  if (verbose)
    o += ",report=1";
  return o;
}

/// The hypergraph pass, its ops weighted by their time on the device spec.
std::string hypergraphOptions() {
  std::string o = "hypergraph=gpus=" + std::to_string(gpus) + specOptions();
  if (planProfile())
    o += ",profile=" + costProfile;
  return o;
}

/// The parallelize pass for strategy `strat`, priced on the device spec.
std::string parallelizeOptions(const std::string& strat) {
  std::string o = "parallelize=strategy=" + strat + ",gpus=" + std::to_string(gpus) + specOptions();
  o += pricingOptions();
  // The search prices the gradient all-reduces as grad-sync buckets them.
  o += ",bucket_bytes=" + std::to_string(bucketBytes);
  return o;
}

/// A plan over a device's memory (its arena and the params it holds) is an
/// error that gives the numbers.
llvm::Error checkDeviceMemory(const Graph& g, const MemoryPlanStats& stats) {
  auto spec = loadSpec();
  if (!spec)
    return spec.takeError();
  std::map<int64_t, int64_t> params;
  for (const auto& p : g.params())
    params[p->device().value_or(0)] += p->type().sizeInBytes();
  std::string over;
  for (const auto& [device, arena] : stats.peakBytes) {
    int64_t total = arena + params[device];
    if (total > spec->memoryBytes)
      over += llvm::formatv("\n  device {0}: {1} bytes ({2} arena + {3} params) > {4} bytes",
                            device, total, arena, params[device], spec->memoryBytes)
                  .str();
  }
  if (over.empty())
    return llvm::Error::success();
  return makeError("the plan needs more memory than a device of spec '" + spec->name +
                   "' has:" + over);
}

/// The scheduled step of a memory-planned graph: the record and wait ops
/// its streams need (codegen emits exactly these), then the proof that
/// every access is ordered, which no trainer is built without.
llvm::Error scheduleStep(Graph& g) {
  auto events = placeEvents(g);
  if (!events)
    return events.takeError();
  if (verbose)
    llvm::errs() << llvm::formatv("lwcc: schedule: {0} events\n", *events);
  return noVerifySchedule ? llvm::Error::success() : verifySchedule(g);
}

/// --step-ir: the scheduled step read back in place of `m`'s, checked as
/// lwcc checks its own (a valid graph, every result placed in the memory
/// plan, every param's initial value known, the schedule proven). Errors
/// are printed with the file's line:col; returns 0 or 1.
int loadStepIr(Module& m) {
  llvm::SourceMgr sm;
  auto buffer = llvm::MemoryBuffer::getFile(stepIr);
  if (!buffer) {
    llvm::errs() << stepIr << ": error: cannot read: " << buffer.getError().message() << "\n";
    return 1;
  }
  unsigned id = sm.AddNewSourceBuffer(std::move(*buffer), llvm::SMLoc());
  auto g = parseGraph(sm, id);
  if (!g) {
    printErrors(llvm::errs(), g.takeError(), &sm);
    return 1;
  }
  llvm::Error e = verifyGraph(**g);
  for (const auto& op : (*g)->ops()) {
    if (e)
      break;
    if (op->numResults() && !op->annotations().bufferOffsets)
      e = op->emitError("--step-ir: the op has no place in the memory plan (@buf): give the "
                        "scheduled IR that lwcc --emit=scheduled-ir prints");
  }
  for (const auto& p : (*g)->params()) {
    if (e)
      break;
    if (!p->zeroInit() && !m.weights.count(p->paramName()))
      e = makeError(p->loc(), "--step-ir: param '%" + p->name() + "' starts from initializer '" +
                                  p->paramName() + "', which " + modelFile.getValue() +
                                  " does not have");
  }
  if (!e && !noVerifySchedule)
    e = verifySchedule(**g);
  if (e) {
    printErrors(llvm::errs(), std::move(e), &sm);
    return 1;
  }
  m.graph = std::move(*g);
  return 0;
}

/// A plan a candidate of the planner names: a strategy, or for pipelines
/// "pipeline/S/M" (S stages, M micro-batches).
struct PlanName {
  std::string strategy;
  int64_t stages = 0, microbatches = 1;
};

PlanName parsePlanName(const std::string& name) {
  PlanName p;
  p.microbatches = microbatches;
  llvm::SmallVector<llvm::StringRef, 3> parts;
  llvm::StringRef(name).split(parts, '/');
  p.strategy = parts[0].str();
  if (parts.size() == 3) {
    parts[1].getAsInteger(10, p.stages);
    parts[2].getAsInteger(10, p.microbatches);
  }
  return p;
}

std::string pipelineName(int64_t s, int64_t m) {
  return "pipeline/" + std::to_string(s) + "/" + std::to_string(m);
}

/// The pipeline pass for S stages of M micro-batches.
std::string pipelineOptions(int64_t s, int64_t m) {
  std::string o = "pipeline-partition=stages=" + std::to_string(s) +
                  ",gpus=" + std::to_string(gpus) + ",microbatches=" + std::to_string(m) +
                  ",schedule=" + schedule + specOptions();
  o += pricingOptions();
  return o;
}

/// The options of fp16's loss-scale pass: --loss-scale and
/// --loss-scale-interval.
std::string lossScaleOptions() {
  std::ostringstream o;
  o.precision(17);
  o << "init=" << static_cast<double>(lossScale)
    << ",interval=" << static_cast<int64_t>(lossScaleInterval);
  return o.str();
}

/// Runs the passes that build the training graph with the plan `name`
/// (a strategy, or pipeline/S/M) as it is (no simulator check);
/// `withOptimizer` false stops after autodiff (gradients as outputs,
/// nothing updated).
llvm::Error buildWithStrategy(Graph& g, bool withOptimizer, const std::string& name) {
  PlanName plan = parsePlanName(name);
  const std::string& strat = plan.strategy;
  std::vector<std::string> names = {"canonicalize", recipes::appendLossPass(loss)};
  for (std::string& p : recipes::beforeTrainMode())
    names.push_back(std::move(p));
  names.push_back("train-mode=bn_running_var=" + bnRunningVar);
  if (mixedPrecision != "off")
    names.push_back("mixed-precision=dtype=" + mixedPrecision);
  std::string micro = "microbatch=m=" + std::to_string(plan.microbatches);
  if (gpus > 1) {
    // Materialize before autodiff: the backward pass differentiates the
    // per-device ops and their communication; replicas' gradients are summed.
    names.push_back(strat == "hypergraph" ? hypergraphOptions()
                    : strat == "pipeline" ? pipelineOptions(plan.stages, plan.microbatches)
                                          : parallelizeOptions(strat));
    // Micro-batches copy the configs the strategy chose.
    if (plan.microbatches > 1)
      names.push_back(micro);
    names.push_back("materialize");
    names.push_back("autodiff");
    // Gradient all-reduces on stream 1 of each device, beside backward.
    names.push_back("grad-sync=bucket_bytes=" + std::to_string(bucketBytes) + ",stream=1");
  } else {
    if (plan.microbatches > 1)
      names.push_back(micro);
    if (fragments > 1) {
      std::string o = "fragment=k=" + std::to_string(fragments) +
                      ",streams=" + std::to_string(streams) + ",policy=" + streamPolicy +
                      ",along=" + fragmentAlong + specOptions();
      if (planProfile())
        o += ",profile=" + costProfile;
      if (tf32 || noTf32)
        o += noTf32 ? ",tf32=off" : ",tf32=all";
      names.push_back(o);
    }
    names.push_back("autodiff");
  }
  if (withOptimizer) {
    names.push_back("optimizer=" + optimizerOptions());
    for (std::string& p : recipes::afterOptimizer())
      names.push_back(std::move(p));
  }
  if (mixedPrecision == "fp16")
    names.push_back("loss-scale=" + lossScaleOptions());
  names.push_back("dce");
  if (streams > 1) {
    std::string o = "stream-assign=streams=" + std::to_string(streams) + ",policy=" + streamPolicy +
                    specOptions();
    o += pricingOptions();
    names.push_back(o);
  }
  if (plan.microbatches > 1)
    names.push_back("schedule=" + schedule);
  names.push_back("verify");
  auto pipeline = buildPipeline(names);
  if (!pipeline)
    return pipeline.takeError();
  PassContext ctx;
  ctx.diag = [](Severity sev, const Location& loc, const std::string& msg) {
    printDiagnostic(llvm::errs(), sev, loc, msg);
  };
  // One pass at a time, to time the one that chooses the configs.
  PassRunOptions opts;
  opts.timePasses = timePasses ? &llvm::errs() : nullptr;
  for (auto& pass : *pipeline) {
    auto start = std::chrono::steady_clock::now();
    PassPipeline one;
    one.push_back(std::move(pass));
    if (llvm::Error e = runPipeline(g, one, ctx, opts))
      return e;
    if (one[0]->name() == "parallelize" || one[0]->name() == "hypergraph" ||
        one[0]->name() == "pipeline-partition")
      strategySeconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return llvm::Error::success();
}

llvm::Expected<CostModel> costModel(bool withProfile = true);

/// The plan the planner settled on (--strategy=layerwise with
/// --check-search, or --strategy=pipeline without --stages or
/// --microbatches), once per run, and its training graph until the module
/// takes it.
std::map<std::string, SearchCheck> settled;
std::map<std::string, std::unique_ptr<Graph>> keptGraphs;

/// What the planner settled for strategy `strat`, or null.
const SearchCheck* settledFor(const std::string& strat) {
  auto it = settled.find(strat);
  return it == settled.end() ? nullptr : &it->second;
}

/// The batch: dim 0 of the model's first input.
int64_t batchOf(const Graph& g) {
  for (const auto& in : g.inputs())
    if (in->type().rank() > 0)
      return in->type().shape[0];
  return 1;
}

/// The pipeline plans the planner tries: S stages for each S > 1 dividing
/// --gpus (only --stages when given), with --microbatches when given, else
/// S, 2S and 4S micro-batches (at most one per sample, and enough samples
/// per micro-batch for a stage's replicas).
std::vector<std::string> pipelineCandidates(const Graph& g) {
  std::vector<std::string> out;
  int64_t n = batchOf(g);
  for (int64_t s = stages > 0 ? stages : 2; s <= gpus; ++s) {
    if (gpus % s || (stages > 0 && s != stages))
      continue;
    int64_t replicas = gpus / s;
    std::vector<int64_t> ms;
    if (microbatches.getNumOccurrences())
      ms = {microbatches};
    else
      for (int64_t m : {s, 2 * s, 4 * s})
        if (m <= n && n / m >= replicas)
          ms.push_back(m);
    if (ms.empty())
      ms = {std::max<int64_t>(1, n / replicas)};
    for (int64_t m : ms)
      out.push_back(pipelineName(s, m));
  }
  return out;
}

/// The planner: builds each candidate plan, simulates its step and keeps
/// the fastest one that fits the devices' memory. For layerwise, the
/// search minimises an additive cost (each op's compute, its operands'
/// re-layouts, its params' gradient all-reduce: Jia et al.'s model), which
/// cannot see the bucketed all-reduce overlapping backward that the
/// simulator (and the trainer) has, nor pipelines: so the searched plan is
/// simulated beside data, owt and model parallelism (configs inside the
/// search's space) and the pipeline plans, and the fastest that fits the
/// devices' memory kept (ties keep the search's). When none fits, each
/// pipeline tries 8S, 16S, ... micro-batches (fewer activations in flight)
/// until one does; when still none fits, the first candidate is kept and
/// the compile reports the memory it needs.
llvm::Error settlePlan(const Graph& g, const std::string& strat) {
  auto model = costModel(planProfile());
  if (!model)
    return model.takeError();
  SearchCheck check;
  std::vector<std::string> names;
  if (strat == "layerwise")
    names = {"layerwise", "data", "owt", "model"};
  for (const std::string& p : pipelineCandidates(g))
    names.push_back(p);
  std::vector<std::unique_ptr<Graph>> built;
  std::vector<bool> fits;
  std::string firstError;
  // Builds, simulates and memory-plans one candidate; one the batch or the
  // memory does not allow (micro-batches too small to split over a plan's
  // devices, no pipeline cut that fits) is left out.
  auto consider = [&](const std::string& name) -> llvm::Error {
    auto candidate = g.clone();
    if (llvm::Error e = buildWithStrategy(*candidate, true, name)) {
      std::string why = llvm::toString(std::move(e));
      if (firstError.empty())
        firstError = why;
      if (verbose)
        llvm::errs() << "lwcc: planner: " << name << " left out: " << why << "\n";
      return llvm::Error::success();
    }
    if (check.candidates.empty())
      check.searchSeconds = strategySeconds;
    auto sim = simulate(*candidate, simCosts(*model));
    if (!sim)
      return sim.takeError();
    check.candidates.push_back({name, sim->stepSeconds});
    auto probe = candidate->clone(); // planned aside: the kept graph stays unannotated
    auto stats = planMemory(*probe);
    if (!stats)
      return stats.takeError();
    llvm::Error over = checkDeviceMemory(*probe, *stats);
    fits.push_back(!over);
    llvm::consumeError(std::move(over));
    built.push_back(std::move(candidate));
    return llvm::Error::success();
  };
  for (const std::string& name : names)
    if (llvm::Error e = consider(name))
      return e;
  // Nothing fits a device: smaller micro-batches hold fewer activations per
  // stage (1F1B), so each pipeline tries twice as many until one fits.
  if (std::find(fits.begin(), fits.end(), true) == fits.end() &&
      !microbatches.getNumOccurrences()) {
    int64_t n = batchOf(g);
    for (int64_t st = stages > 0 ? stages : 2; st <= gpus; ++st) {
      if (gpus % st || (stages > 0 && st != stages))
        continue;
      for (int64_t m = 8 * st; m <= n && n / m >= gpus / st; m *= 2) {
        size_t before = built.size();
        if (llvm::Error e = consider(pipelineName(st, m)))
          return e;
        if (built.size() > before && fits.back())
          break;
      }
    }
  }
  if (built.empty())
    return makeError("the planner found no " + strat + " plan for --gpus=" + std::to_string(gpus) +
                     (firstError.empty() ? std::string() : ": " + firstError));
  std::vector<size_t> order(built.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return check.candidates[a].second < check.candidates[b].second;
  });
  size_t kept = order.front();
  bool found = false;
  for (size_t i : order)
    if (fits[i]) {
      kept = i;
      found = true;
      break;
    }
  if (!found)
    kept = 0; // the compile reports what the first candidate needs
  // A tie with the search's plan keeps the search's.
  if (strat == "layerwise" && fits[0] && check.candidates[0].first == "layerwise" &&
      check.candidates[0].second <= check.candidates[kept].second)
    kept = 0;
  check.kept = check.candidates[kept].first;
  keptGraphs[strat] = std::move(built[kept]);
  if (verbose) {
    llvm::errs() << "lwcc: " << strat << ": simulated step:";
    for (size_t i = 0; i < check.candidates.size(); ++i)
      llvm::errs() << llvm::formatv(" {0} {1:f3} ms{2}", check.candidates[i].first,
                                    check.candidates[i].second * 1e3,
                                    fits[i] ? "" : " (over memory)");
    llvm::errs() << "; kept " << check.kept << "\n";
  }
  settled[strat] = std::move(check);
  return llvm::Error::success();
}

/// Whether strategy `strat` is settled by settlePlan: layerwise with
/// --check-search on several devices, pipeline unless --stages and
/// --microbatches both fix it.
bool checksSearch(const std::string& strat) {
  if (strat == "pipeline")
    return !(stages > 0 && microbatches.getNumOccurrences());
  return strat == "layerwise" && gpus > 1 && checkSearch;
}

/// The plan name strategy `strat` builds when the planner does not settle it.
std::string fixedPlan(const std::string& strat) {
  if (strat == "pipeline")
    return pipelineName(stages, microbatches);
  return strat;
}

/// The training graph of strategy `strat`; layerwise (with --check-search,
/// on several devices) and pipeline keep the planner's plan.
llvm::Error buildTrainingGraph(Graph& g, bool withOptimizer, const std::string& strat) {
  if (!checksSearch(strat))
    return buildWithStrategy(g, withOptimizer, fixedPlan(strat));
  if (!settledFor(strat))
    if (llvm::Error e = settlePlan(g, strat))
      return e;
  const SearchCheck& check = *settledFor(strat);
  llvm::Error e = buildWithStrategy(g, withOptimizer, check.kept);
  strategySeconds = check.searchSeconds; // the search's time, whichever plan is kept
  return e;
}

llvm::Error buildTrainingGraph(Module& m, bool withOptimizer) {
  const std::string strat = chosenStrategy();
  if (checksSearch(strat) && withOptimizer) {
    // The kept plan was built whole while settling: take it, not a rebuild.
    if (!settledFor(strat))
      if (llvm::Error e = settlePlan(*m.graph, strat))
        return e;
    if (auto& kept = keptGraphs[strat]) {
      m.graph = std::move(kept);
      strategySeconds = settledFor(strat)->searchSeconds;
      return llvm::Error::success();
    }
  }
  return buildTrainingGraph(*m.graph, withOptimizer, strat);
}

/// The strategies --emit=plan compares.
std::vector<std::string> allStrategies() {
  return {"data", "model", "owt", "layerwise", "hypergraph", "pipeline"};
}

/// The cost model the simulator prices the step on.
llvm::Expected<CostModel> costModel(bool withProfile) {
  auto spec = loadSpec();
  if (!spec)
    return spec.takeError();
  std::optional<OpProfile> profile;
  if (!costProfile.empty() && withProfile) {
    auto p = loadOpProfile(costProfile);
    if (!p)
      return p.takeError();
    profile = std::move(*p);
  }
  CostModel model(std::move(*spec), std::move(profile));
  model.setTf32(noTf32 ? CostModel::Tf32::Off
                : tf32 ? CostModel::Tf32::All
                       : CostModel::Tf32::Convolutions);
  return model;
}

std::vector<Tensor> readInputs(const Graph& g, const std::string& dir, llvm::Error& err) {
  std::vector<Tensor> inputs;
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    std::string path = (fs::path(dir) / ("input_" + std::to_string(k) + ".pb"));
    auto t = readTensorFile(path);
    if (!t) {
      err = t.takeError();
      return {};
    }
    inputs.push_back(std::move(*t));
  }
  err = llvm::Error::success();
  return inputs;
}

int checkGradientsMode(Module& m) {
  if (gpus > 1) {
    llvm::errs() << "lwcc: --check-gradients checks the step of one device; check the parallel "
                    "step against it with --train-reference\n";
    return 2;
  }
  if (llvm::Error e = buildTrainingGraph(m, false))
    return fail(std::move(e));
  std::vector<Tensor> inputs = randomInputs(*m.graph, checkSeed);
  GradCheckOptions opts;
  opts.seed = checkSeed;
  opts.samplesPerParam = checkSamples;
  auto results = checkGradients(*m.graph, inputs, m.weights, opts);
  if (!results)
    return fail(results.takeError());
  constexpr double kTolerance = 1e-6;
  bool ok = true;
  int64_t kinks = 0, unresolved = 0;
  llvm::outs() << llvm::formatv("{0,-40} {1,8} {2,6} {3,14}\n", "param", "checked", "kinks",
                                "worst rel err");
  for (const ParamGradCheck& r : *results) {
    bool pass = r.worstRelError <= kTolerance;
    ok &= pass;
    kinks += r.kinks;
    unresolved += r.unresolved;
    std::string worst = r.worstIndex < 0 ? "-" : llvm::formatv("{0:e2}", r.worstRelError).str();
    llvm::outs() << llvm::formatv(
        "{0,-40} {1,8} {2,6} {3,14}{4}\n", r.param, r.checked, r.kinks, worst,
        pass ? ""
             : llvm::formatv("  FAIL (element {0}{1}: analytic {2:e6}, numeric {3:e6})",
                             r.worstIndex, r.worstRedrawn ? " at a re-drawn point" : "", r.analytic,
                             r.numeric)
                   .str());
  }
  // Kinks are no failures: there the loss has no derivative to compare with.
  if (kinks > 0)
    llvm::outs() << llvm::formatv(
        "{0} element(s) sat on a kink of the loss (relu at 0, tied maxima: one-sided differences "
        "disagree) and were compared at a re-drawn point; {1} stayed on kinks and were not "
        "compared\n",
        kinks, unresolved);
  llvm::outs() << llvm::formatv("{0} params checked; tolerance {1:e0}: {2}\n", results->size(),
                                kTolerance, ok ? "all within" : "FAILED");
  return ok ? 0 : 1;
}

int checkMemoryPlanMode(Module& m) {
  if (llvm::Error e = buildTrainingGraph(m, true))
    return fail(std::move(e));
  auto stats = planMemory(*m.graph);
  if (!stats)
    return fail(stats.takeError());
  std::vector<Tensor> inputs = randomInputs(*m.graph, checkSeed);
  auto planned = runInArenas(*m.graph, inputs, m.weights);
  if (!planned)
    return fail(planned.takeError());
  auto reference = interpret(*m.graph, inputs, m.weights, Precision::F32);
  if (!reference)
    return fail(reference.takeError());
  size_t differ = 0;
  for (size_t k = 0; k < reference->size(); ++k)
    differ += (*reference)[k].f != (*planned)[k].f || (*reference)[k].i != (*planned)[k].i;
  for (const auto& [device, bytes] : stats->peakBytes)
    llvm::outs() << llvm::formatv("device {0}: arena {1} bytes\n", device, bytes);
  llvm::outs() << llvm::formatv("{0} buffers, {1} bytes without sharing, {2} in place, {3} views; "
                                "{4} of {5} outputs differ from the interpreter\n",
                                stats->buffers, stats->totalBytes, stats->inPlace, stats->aliased,
                                differ, reference->size());
  return differ ? 1 : 0;
}

/// The inference graph of the imported model, planned: the trainer's
/// evaluation pass.
llvm::Expected<std::unique_ptr<Graph>> evalGraph(const Graph& imported) {
  std::unique_ptr<Graph> g = imported.clone();
  std::vector<std::string> names = {"canonicalize", "dce", "verify"};
  if (mixedPrecision != "off") // evaluation computes as training does
    names.insert(names.begin() + 1, "mixed-precision=dtype=" + mixedPrecision);
  auto pipeline = buildPipeline(names);
  if (!pipeline)
    return pipeline.takeError();
  PassContext ctx;
  ctx.diag = [](Severity sev, const Location& loc, const std::string& msg) {
    if (sev == Severity::Error)
      printDiagnostic(llvm::errs(), sev, loc, msg);
  };
  if (llvm::Error e = runPipeline(*g, *pipeline, ctx))
    return e;
  auto stats = planMemory(*g);
  if (!stats)
    return stats.takeError();
  return g;
}

/// The export template: the trained initializers of the training step cut
/// out of the input model. Failing leaves the trainer without --export (a
/// warning says why) rather than failing the build.
void addExportTemplate(const Graph& train, CodegenOptions& o) {
  // The trainer's params are the logical ones: one per initializer name
  // (replicas and shards on several devices are one), whole.
  std::vector<ExportParamSpec> specs;
  std::vector<uint32_t> index;
  std::set<std::string> seen;
  uint32_t logical = 0;
  for (const auto& pp : train.params()) {
    const Value* p = pp.get();
    if (!seen.insert(p->paramName()).second)
      continue;
    uint32_t k = logical++;
    if (p->zeroInit())
      continue;
    specs.push_back({p->paramName(), p->type().dtype, p->wholeType().numElements()});
    index.push_back(k);
  }
  auto t = buildExportTemplate(modelFile, specs,
                               tiedInitializers == "keep" ? TiedInitializers::Keep
                                                          : TiedInitializers::Untie);
  if (!t) {
    std::string why = llvm::toString(t.takeError());
    llvm::errs() << "lwcc: warning: the trainer cannot --export: " << why << "\n";
    return;
  }
  o.exportTemplate = std::move(t->bytes);
  for (const ExportCut& c : t->cuts)
    o.exportCuts.push_back({c.offset, index[c.param], c.bytes});
}

std::string fileSafe(std::string name) {
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
      c = '_';
  return name;
}

/// A float tensor as --train-reference dumps it: in float64 when the
/// interpreter ran in float64, so that nothing is rounded away.
Tensor dumped(const Tensor& t) {
  Tensor out = t;
  if (precision == Precision::F64 && out.isFloatData())
    out.type.dtype = DType::F64;
  return out;
}

int trainReferenceMode(Module& m) {
  if (inputsDir.empty() || dumpDir.empty()) {
    llvm::errs() << "lwcc: --train-reference needs --inputs DIR and --dump DIR\n";
    return 2;
  }
  if (llvm::Error e = buildTrainingGraph(m, true))
    return fail(std::move(e));
  llvm::Error err = llvm::Error::success();
  std::vector<Tensor> inputs = readInputs(*m.graph, inputsDir, err);
  if (err)
    return fail(std::move(err));
  std::error_code ec;
  fs::create_directories(dumpDir.getValue(), ec);
  WeightMap state = m.weights;
  const Graph& g = *m.graph;
  for (int64_t s = 0; s < steps; ++s) {
    auto outs = runStep(g, inputs, state, precision);
    if (!outs)
      return fail(outs.takeError());
    auto write = [&](const Tensor& t, const std::string& file) -> bool {
      if (llvm::Error e = writeTensorFile(dumped(t), file, fs::path(dumpDir.getValue()) / file)) {
        printErrors(llvm::errs(), std::move(e));
        return false;
      }
      return true;
    };
    if (!write((*outs)[0], "loss_" + std::to_string(s) + ".pb"))
      return 1;
    if (s == 0) {
      // One gradient per initializer: the shards of a split param together.
      std::map<std::string, Tensor> grads;
      for (size_t o = 1; o < outs->size(); ++o)
        if (const Value* p = g.outputGradOf(o)) {
          if (p->shard().empty()) {
            grads[p->paramName()] = (*outs)[o];
            continue;
          }
          auto it = grads.try_emplace(p->paramName(), Tensor(p->wholeType())).first;
          kernels::writeShard(*p, (*outs)[o], it->second);
        }
      for (const auto& [name, t] : grads)
        if (!write(t, "grad_" + fileSafe(name) + ".pb"))
          return 1;
    }
    double l = (*outs)[0].f[0];
    llvm::outs() << llvm::formatv("step {0,4}/{1}  loss {2:f6}\n", s + 1, steps.getValue(), l);
    llvm::outs().flush();
    if (!std::isfinite(l)) {
      llvm::errs() << "lwcc: the loss is " << l << " at step " << s << "\n";
      return 1;
    }
  }
  for (const auto& p : g.params())
    if (isFloat(p->type().dtype) && !p->zeroInit())
      if (auto it = state.find(p->paramName()); it != state.end())
        if (llvm::Error e = writeTensorFile(dumped(it->second), p->paramName(),
                                            fs::path(dumpDir.getValue()) /
                                                ("param_" + fileSafe(p->paramName()) + ".pb")))
          return fail(std::move(e));
  return 0;
}

int runReferenceMode(const Module& m) {
  if (inputsDir.empty() || outputsDir.empty()) {
    llvm::errs() << "lwcc: --run-reference needs --inputs DIR and --outputs DIR\n";
    return 2;
  }
  std::vector<Tensor> inputs;
  for (size_t k = 0; k < m.graph->inputs().size(); ++k) {
    std::string path = (fs::path(inputsDir.getValue()) / ("input_" + std::to_string(k) + ".pb"));
    auto t = readTensorFile(path);
    if (!t)
      return fail(t.takeError());
    inputs.push_back(std::move(*t));
  }
  auto outputs = interpret(*m.graph, inputs, m.weights, precision);
  if (!outputs)
    return fail(outputs.takeError());
  std::error_code ec;
  fs::create_directories(outputsDir.getValue(), ec);
  if (ec) {
    llvm::errs() << outputsDir << ": error: cannot create: " << ec.message() << "\n";
    return 1;
  }
  for (size_t k = 0; k < outputs->size(); ++k) {
    std::string path = fs::path(outputsDir.getValue()) / ("output_" + std::to_string(k) + ".pb");
    if (llvm::Error e = writeTensorFile((*outputs)[k], m.graph->outputs()[k]->name(), path))
      return fail(std::move(e));
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
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
  // Flags whose values name a choice: an unknown one is bad usage.
  struct Choice {
    const cl::opt<std::string>& flag;
    std::vector<std::string> allowed;
  };
  for (const Choice& c :
       {Choice{loss, {"softmax-xent", "mse", "none"}}, Choice{optimizer, {"sgd", "adam", "adamw"}},
        Choice{lrSchedule, {"constant", "step", "cosine"}},
        Choice{bnRunningVar, {"unbiased", "biased"}},
        Choice{tiedInitializers, {"untie", "keep"}}}) {
    if (std::find(c.allowed.begin(), c.allowed.end(), c.flag.getValue()) != c.allowed.end())
      continue;
    std::string list;
    for (const std::string& a : c.allowed)
      list += (list.empty() ? "" : ", ") + a;
    llvm::errs() << "lwcc: --" << c.flag.ArgStr << "=" << c.flag.getValue()
                 << " is not one of: " << list << "\n";
    return 2;
  }
  if (int rc = recipes::checkUsage(loss))
    return rc;
  if (lrSchedule == "cosine" && totalSteps < 1) {
    llvm::errs() << "lwcc: --lr-schedule=cosine needs --total-steps=N (N >= 1)\n";
    return 2;
  }
  if (lrSchedule == "step" && stepSize < 1) {
    llvm::errs() << "lwcc: --lr-schedule=step needs --step-size=N (N >= 1)\n";
    return 2;
  }
  if (gpus < 1 || gpus > 1024) {
    llvm::errs() << "lwcc: --gpus must be in 1..1024\n";
    return 2;
  }
  if (!strategy.empty() && strategy != "data" && strategy != "model" && strategy != "owt" &&
      strategy != "layerwise" && strategy != "hypergraph" && strategy != "pipeline") {
    llvm::errs() << "lwcc: --strategy=" << strategy
                 << " is not one of: layerwise, data, model, owt, hypergraph, pipeline\n";
    return 2;
  }
  if (microbatches < 1 || microbatches > 4096) {
    llvm::errs() << "lwcc: --microbatches must be in 1..4096\n";
    return 2;
  }
  if (schedule != "1f1b" && schedule != "gpipe") {
    llvm::errs() << "lwcc: --schedule=" << schedule << " is not one of: 1f1b, gpipe\n";
    return 2;
  }
  if (stages.getNumOccurrences() && strategy != "pipeline") {
    llvm::errs() << "lwcc: --stages is for --strategy=pipeline\n";
    return 2;
  }
  if (strategy == "pipeline" && gpus < 2) {
    llvm::errs() << "lwcc: --strategy=pipeline needs --gpus=N with N >= 2\n";
    return 2;
  }
  if (stages.getNumOccurrences() && (stages < 1 || gpus % stages != 0)) {
    llvm::errs() << "lwcc: --stages=" << stages << " does not divide --gpus=" << gpus << "\n";
    return 2;
  }
  if (bucketBytes < 0) {
    llvm::errs() << "lwcc: --bucket-bytes must be >= 0\n";
    return 2;
  }
  if (streams < 1 || streams > 8) {
    llvm::errs() << "lwcc: --streams must be in 1..8\n";
    return 2;
  }
  if (streamPolicy != "sim" && streamPolicy != "all") {
    llvm::errs() << "lwcc: --stream-policy must be sim or all\n";
    return 2;
  }
  if (fragments < 1 || fragments > 64) {
    llvm::errs() << "lwcc: --fragments must be in 1..64\n";
    return 2;
  }
  if (fragmentAlong != "samples" && fragmentAlong != "channels" && fragmentAlong != "any") {
    llvm::errs() << "lwcc: --fragment-along must be samples, channels or any\n";
    return 2;
  }
  if (fragments > 1 && (streams < 3 || gpus > 1 || microbatches > 1)) {
    llvm::errs() << "lwcc: --fragments=" << fragments
                 << " cuts the batch of one device's step into pieces on its branch streams: "
                    "it needs --streams=3 or more, --gpus 1 and --microbatches 1\n";
    return 2;
  }
  if (tf32 && noTf32) {
    llvm::errs() << "lwcc: --tf32 and --no-tf32 contradict each other\n";
    return 2;
  }
  if (mixedPrecision != "off") {
    if (mixedPrecision != "bf16" && mixedPrecision != "fp16") {
      llvm::errs() << "lwcc: --mixed-precision=" << mixedPrecision
                   << " is not one of: off, bf16, fp16\n";
      return 2;
    }
    if (precision != Precision::F32) {
      llvm::errs() << "lwcc: --mixed-precision rounds float32 values: it does not go with "
                      "--precision=f64\n";
      return 2;
    }
  }
  if (lossScale.getNumOccurrences() || lossScaleInterval.getNumOccurrences()) {
    if (mixedPrecision != "fp16") {
      llvm::errs() << "lwcc: --loss-scale and --loss-scale-interval go with "
                      "--mixed-precision=fp16 (bf16 and float32 need no scaling)\n";
      return 2;
    }
    // The pass checks its options (a power of two, an interval >= 1).
    if (auto pass = createLossScalePass(lossScaleOptions()); !pass) {
      llvm::errs() << "lwcc: " << llvm::toString(pass.takeError()) << "\n";
      return 2;
    }
  }
  if (batch.getNumOccurrences() && batch <= 0) {
    llvm::errs() << "lwcc: --batch must be a positive integer\n";
    return 2;
  }
  ImportOptions opts;
  if (batch > 0)
    opts.batch = batch;
  opts.tied = tiedInitializers == "keep" ? TiedInitializers::Keep : TiedInitializers::Untie;
  opts.diag = [](Severity sev, const Location& loc, const std::string& msg) {
    printDiagnostic(llvm::errs(), sev, loc, msg);
  };
  if (emulateGpu) {
    if (target.getNumOccurrences() && target != "cuda") {
      llvm::errs() << "lwcc: --emulate-gpu builds a cuda trainer, not --target=" << target << "\n";
      return 2;
    }
    target = "cuda";
  }
  if (target != "cpu" && target != "cuda") {
    llvm::errs() << "lwcc: --target=" << target << " is not one of: cuda, cpu\n";
    return 2;
  }
  // A bad spec or profile is reported before any work.
  if (auto spec = loadDeviceSpec(deviceSpecName()); !spec)
    return fail(spec.takeError());
  if (devicesPerNode.getNumOccurrences() && devicesPerNode < 1) {
    llvm::errs() << "lwcc: --devices-per-node takes a positive count, got " << devicesPerNode
                 << "\n";
    return 2;
  }
  if (!costProfile.empty())
    if (auto p = loadOpProfile(costProfile); !p)
      return fail(p.takeError());
  auto module = importFile(modelFile, opts);
  if (!module)
    return fail(module.takeError());
  if (llvm::Error e = eliminateDeadCode(*module))
    return fail(std::move(e));

  if (runReference)
    return runReferenceMode(*module);
  if (checkGradientsFlag)
    return checkGradientsMode(*module);
  if (trainReference)
    return trainReferenceMode(*module);
  if (checkMemoryPlanFlag)
    return checkMemoryPlanMode(*module);
  if (verbose)
    llvm::errs() << llvm::formatv("lwcc: imported @{0}: {1} inputs, {2} params, {3} ops\n",
                                  module->graph->name(), module->graph->inputs().size(),
                                  module->graph->params().size(), module->graph->numOps());
  if (!emit.getNumOccurrences() && outputFile != "-")
    emit = Emit::Exe; // `lwcc MODEL -o trainer`
  if (weightsMode != "embed" && weightsMode != "separate") {
    llvm::errs() << "lwcc: --weights=" << weightsMode << " is not one of: embed, separate\n";
    return 2;
  }
  const bool embedWeights = weightsMode == "embed";
  if (!llvm::StringRef(arch).startswith("sm_") || arch.size() < 5 ||
      !std::all_of(arch.begin() + 3, arch.end(), [](char c) { return std::isdigit(c); })) {
    llvm::errs() << "lwcc: --arch=" << arch << " is not of the form sm_XX (e.g. sm_90)\n";
    return 2;
  }
  if ((emit == Emit::Source || emit == Emit::Exe) && outputFile == "-") {
    llvm::errs() << "lwcc: --emit=source and --emit=exe need -o\n";
    return 2;
  }
  if (!stepIr.empty() && emit != Emit::Source && emit != Emit::Exe) {
    llvm::errs() << "lwcc: --step-ir builds a trainer from a scheduled step: it goes with -o "
                    "(or --emit=source)\n";
    return 2;
  }
  std::optional<MemoryPlanStats> plan;
  if (emit == Emit::Source || emit == Emit::Exe) {
    auto eval = evalGraph(*module->graph);
    if (!eval)
      return fail(eval.takeError());
    if (!stepIr.empty()) {
      if (int rc = loadStepIr(*module))
        return rc;
    } else {
      if (llvm::Error e = buildTrainingGraph(*module, true))
        return fail(std::move(e));
      auto stats = planMemory(*module->graph);
      if (!stats)
        return fail(stats.takeError());
      if (verbose)
        for (const auto& [device, bytes] : stats->peakBytes)
          llvm::errs() << llvm::formatv("lwcc: memory plan: device {0}: arena {1} bytes (peak)\n",
                                        device, bytes);
      if (llvm::Error e = checkDeviceMemory(*module->graph, *stats))
        return fail(std::move(e));
      if (llvm::Error e = scheduleStep(*module->graph))
        return fail(std::move(e));
    }
    if (!traceFile.empty()) {
      auto model = costModel();
      if (!model)
        return fail(model.takeError());
      if (llvm::Error e = writeSimulatedTrace(*module->graph, *model, traceFile))
        return fail(std::move(e));
    }
    CodegenOptions co;
    co.target = target;
    co.modelName = llvm::sys::path::filename(modelFile.getValue()).str();
    co.tf32 = noTf32 ? "Off" : tf32 ? "All" : "Convolutions";
    if (mixedPrecision == "fp16")
      co.lossScaleInit = lossScale;
    co.eval = eval->get();
    co.embedWeights = embedWeights;
    addExportTemplate(*module->graph, co);
    std::string prefix = installPrefix(argv[0]);
    TrainerBuildOptions bo;
    bo.target = target;
    bo.arch = arch;
    bo.nvcc = nvccPath;
    bo.cudaLibs.assign(cudaLibs.begin(), cudaLibs.end());
    bo.verbose = verbose;
    bo.emulateGpu = emulateGpu;
    if (emit == Emit::Source) {
      auto trainer = generateTrainer(*module, co);
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
    auto trainer = generateTrainer(*module, co);
    int rc = trainer ? buildExe(*trainer, tmp, outputFile, prefix, bo) : fail(trainer.takeError());
    if (rc == 0 && !embedWeights && !writeBlob(outputFile + ".weights", trainer->weights)) {
      llvm::errs() << outputFile << ".weights: error: cannot write\n";
      rc = 1;
    }
    fs::remove_all(tmp);
    return rc;
  }
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
        *module->graph, allStrategies(), chosenStrategy(),
        [](Graph& g, const std::string& strat) { return buildTrainingGraph(g, true, strat); },
        *model);
    if (!plans)
      return fail(plans.takeError());
    strategyPlans = std::move(*plans);
  }
  if (emit == Emit::TrainIR || emit == Emit::ParallelIR || emit == Emit::ScheduledIR ||
      emit == Emit::Plan) {
    if (llvm::Error e = buildTrainingGraph(*module, true))
      return fail(std::move(e));
    if (verbose)
      llvm::errs() << llvm::formatv("lwcc: training step: {0} ops, {1} params with state\n",
                                    module->graph->numOps(), module->graph->params().size());
    if (!traceFile.empty())
      if (llvm::Error e = writeSimulatedTrace(*module->graph, *model, traceFile))
        return fail(std::move(e));
    if (emit == Emit::Plan || emit == Emit::ScheduledIR || verbose) {
      // -v plans a copy so that --emit=train-ir prints the graph unannotated.
      std::unique_ptr<Graph> copy;
      Graph* target = module->graph.get();
      if (emit != Emit::Plan && emit != Emit::ScheduledIR) {
        copy = module->graph->clone();
        target = copy.get();
      }
      auto stats = planMemory(*target);
      if (!stats)
        return fail(stats.takeError());
      if (llvm::Error e = checkDeviceMemory(*target, *stats))
        return fail(std::move(e));
      plan = *stats;
      if (emit == Emit::ScheduledIR)
        if (llvm::Error e = scheduleStep(*target))
          return fail(std::move(e));
      if (verbose)
        for (const auto& [device, bytes] : stats->peakBytes)
          llvm::errs() << llvm::formatv("lwcc: memory plan: device {0}: arena {1} bytes (peak), "
                                        "{2} bytes without sharing\n",
                                        device, bytes, stats->totalBytes);
    }
  }

  std::error_code ec;
  llvm::ToolOutputFile out(outputFile, ec, llvm::sys::fs::OF_Text);
  if (ec) {
    llvm::errs() << outputFile << ": error: cannot write: " << ec.message() << "\n";
    return 1;
  }
  switch (emit) {
  case Emit::IR:
  case Emit::TrainIR:
  case Emit::ParallelIR:
  case Emit::ScheduledIR:
    printGraph(*module->graph, out.os());
    break;
  case Emit::Plan:
    printPlan(*module->graph, *plan, out.os());
    if (llvm::Error e = printStreamPlan(*module->graph, *model, out.os()))
      return fail(std::move(e));
    if (gpus > 1)
      printParallelPlan(*module->graph, *model, chosenStrategy(), gpus, strategyPlans, settled,
                        schedule, out.os());
    else if (auto sim = simulate(*module->graph, simCosts(*model)))
      out.os() << llvm::formatv("predicted step on {0}: {1:f3} ms\n", model->spec().name,
                                sim->stepSeconds * 1e3);
    else
      return fail(sim.takeError());
    if (!planJson.empty()) {
      std::error_code jec;
      llvm::raw_fd_ostream json(planJson, jec);
      if (jec) {
        llvm::errs() << planJson << ": error: cannot write: " << jec.message() << "\n";
        return 1;
      }
      std::optional<PipelinePlan> pipe;
      for (const StrategyPlan& sp : strategyPlans)
        if (sp.name == chosenStrategy())
          pipe = pipelinePlan(*module->graph, sp, schedule);
      writePlanJson(chosenStrategy(), strategySeconds, model->spec().name, strategyPlans,
                    settledFor(chosenStrategy()) ? settledFor(chosenStrategy())
                                                 : settledFor("layerwise"),
                    layerPlans(*module->graph, *model), pipe ? &*pipe : nullptr, json);
    }
    break;
  case Emit::Source:
  case Emit::Exe:
    break; // handled above
  }
  out.keep();
  return 0;
}
