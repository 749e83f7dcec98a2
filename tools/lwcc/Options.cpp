//===- Options.cpp - lwcc's command-line flags ----------------------------===//
#include "tools/lwcc/Options.h"

#include "ir/Diagnostics.h"
#include "tools/lwcc/Recipes.h"

#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <limits>
#include <thread>

namespace lwcc::flags {

cl::OptionCategory category("lwcc options");

cl::opt<std::string> modelFile(cl::Positional, cl::desc("<model.onnx | model.onnxtext>"),
                               cl::cat(category));
cl::opt<std::string> outputFile("o", cl::desc("Output file (default: stdout)"),
                                cl::value_desc("file"), cl::init("-"), cl::cat(category));
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
cl::opt<int64_t> devicesPerGpu(
    "devices-per-gpu",
    cl::desc("Logical devices that share one GPU, as a trainer runs them with "
             "--devices=0,0,...: the cost model prices their kernels sharing its compute and "
             "memory, and what moves between them as copies inside it (default the device "
             "spec's, 1)"),
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
cl::opt<bool> compareCandidates(
    "check-search",
    cl::desc("With --strategy=layerwise on several devices: simulate the searched plan beside "
             "data, model and owt parallelism and keep the fastest (default true; =false keeps "
             "the search's plan)"),
    cl::init(true), cl::cat(category));
cl::opt<int64_t> planThreadsFlag(
    "plan-threads",
    cl::desc("Candidate plans the planner prices at the same time, each on a thread and a copy "
             "of the model (default 0: one per core, at most 4; 1: one after another). The "
             "choice and the output do not depend on it"),
    cl::value_desc("N"), cl::init(0), cl::cat(category));
cl::opt<bool> foldReplicas(
    "plan-fold",
    cl::desc("The planner prices a candidate once for the devices that run the same ops as "
             "another (data parallelism's replicas), where its cost model allows it exactly "
             "(default true; =false prices every device's ops: the same choice and report)"),
    cl::init(true), cl::cat(category));
cl::opt<bool> compactPipelines(
    "plan-compact",
    cl::desc("The planner prices each pipeline candidate first from one replica's one "
             "micro-batch (its stages' times and transfers, the schedule replayed: a compact "
             "price), simulates the whole step of the most promising first and leaves out one "
             "whose compact price is more than 1.25x the fastest that fits (default true; "
             "=false simulates every candidate whole)"),
    cl::init(true), cl::cat(category));
cl::opt<int64_t> microbatches(
    "microbatches",
    cl::desc("Micro-batches per step (default 1): forward and backward run on M slices of the "
             "batch, their gradients summed before one update (any strategy; the pipeline "
             "planner's choice for --strategy=pipeline when not given)"),
    cl::init(1), cl::cat(category));
cl::opt<bool> noFuse("no-fuse",
                     cl::desc("One runtime call per op: no fused kernels (their losses equal the "
                              "fused trainer's up to float reassociation; for bisection)"),
                     cl::init(false), cl::cat(category));
cl::opt<bool> batchNormPerMicrobatch(
    "batch-norm-per-microbatch",
    cl::desc("Let the default (layer-wise) planner keep a micro-batched pipeline for a model "
             "with batch norm, which then normalizes each micro-batch by its own statistics: "
             "a faster step that is not one device's (by default such plans are left out, and "
             "--emit=plan names them)"),
    cl::init(false), cl::cat(category));
cl::opt<int64_t> stages("stages",
                        cl::desc("--strategy=pipeline: pipeline stages, dividing --gpus (default: "
                                 "the planner's choice)"),
                        cl::init(0), cl::cat(category));
cl::opt<std::string> schedule("schedule",
                              cl::desc("The order of each device's micro-batches: 1f1b "
                                       "(default), gpipe or zb-h1 (1f1b with the weight "
                                       "gradients put off into its bubble)"),
                              cl::init("1f1b"), cl::cat(category));
cl::opt<std::string>
    recompute("recompute",
              cl::desc("Activations for the backward: none (kept from the forward), all "
                       "(every one but the convolutions' and matrix products' outputs "
                       "computed again right before the backward needs it: less memory, more "
                       "compute, the same training), K (those of the K layers whose values "
                       "hold the most bytes) or auto (default: the planner's choice on "
                       "several devices, taken where no plan fits a device's memory without, "
                       "for the fewest layers that fit)"),
              cl::init("auto"), cl::cat(category));
cl::opt<std::string>
    shard("shard",
          cl::desc("Sharded data parallelism over the replicas of each replicated param: none "
                   "(each replica keeps all of it), zero1 (ZeRO stage 1: its gradients "
                   "reduce-scattered, each device updating its share of the rows with its share "
                   "of the optimizer state, the param all-gathered: 1/p of the state per "
                   "device), zero2 (zero1, and each whole gradient freed once it is "
                   "reduce-scattered), fsdp (ZeRO stage 3: the param itself kept as shares, "
                   "gathered before each layer's forward and again before its backward, its "
                   "gradient reduce-scattered: 1/p of params, gradients and state) or auto "
                   "(default: the planner's choice, taken where no plan fits a device's memory "
                   "without); the same training"),
          cl::init("auto"), cl::cat(category));
cl::opt<int64_t> shardMinBytes(
    "shard-min-bytes",
    cl::desc("With --shard=fsdp: only the params of at least N bytes kept as shares, the smaller "
             "ones replicated (default 0: all; the planner picks its own under --shard=auto)"),
    cl::init(0), cl::cat(category));
cl::opt<int64_t> bucketBytes("bucket-bytes",
                             cl::desc("Gradient all-reduce bucket size in bytes (default 25 MiB)"),
                             cl::init(int64_t{25} << 20), cl::cat(category));

// Training.
cl::opt<std::string> loss("loss", cl::desc("The loss: softmax-xent (default), mse or none"),
                          cl::init("softmax-xent"), cl::cat(category));
cl::opt<int64_t> ignoreIndex(
    "ignore-index",
    cl::desc("softmax-xent: labels equal to N count for nothing and the mean is over the others "
             "(a causal language model's -100, as PyTorch's cross_entropy)"),
    cl::cat(category));
cl::opt<bool> shiftLabels(
    "shift-labels",
    cl::desc("softmax-xent on [N, T, V] logits: a causal language model's loss as Hugging Face "
             "computes it from labels equal to the input ids: the logits at positions 0..T-2 "
             "against the labels at 1..T-1 (use with --ignore-index=-100 for padding)"),
    cl::cat(category));
cl::opt<bool> noAttentionFusion(
    "no-attention-fusion",
    cl::desc("Train attention as the model's plain ops (matmul, softmax, ...) instead of one "
             "attention op"),
    cl::cat(category));
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
    cl::desc("An initializer several nodes read as a weight: auto (default: a Gather's table "
             "that a matrix product also reads, GPT-2's and BERT's tied embedding, stays one "
             "param; a vector, the exporters' deduplicated norms and biases, is untied; any "
             "other is an error naming it), untie (one param per consumer, as in the network "
             "exported) or keep (one tied param, its gradient summed; running statistics still "
             "per layer); then, comma-separated, keep:NAME or untie:NAME for one initializer "
             "(e.g. auto,keep:lm_head.weight)"),
    cl::init("auto"), cl::cat(category));

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
cl::opt<int64_t> opsPerFile("ops-per-file",
                            cl::desc("A training step of more ops than this is written as "
                                     "source files of about this many ops, compiled in "
                                     "parallel (default 1500; 0: one file)"),
                            cl::init(1500), cl::cat(category));
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

cl::opt<bool> printPipelineFlag(
    "print-pipeline",
    cl::desc("Print the passes this compile runs (for --emit=train-ir and parallel-ir the "
             "training step, for plan up to the memory plan, else up to the schedule's proof), "
             "one --pass=options a line: `lwcc-opt @FILE` replays them on --emit=ir's output"),
    cl::cat(category));

namespace {

int usage(const std::string& message) {
  llvm::errs() << "lwcc: " << message << "\n";
  return 2;
}

} // namespace

int checkUsage() {
  // Flags whose values name a choice: an unknown one is bad usage.
  struct Choice {
    const cl::opt<std::string>& flag;
    std::vector<std::string> allowed;
  };
  for (const Choice& c :
       {Choice{loss, {"softmax-xent", "mse", "none"}}, Choice{optimizer, {"sgd", "adam", "adamw"}},
        Choice{lrSchedule, {"constant", "step", "cosine"}},
        Choice{bnRunningVar, {"unbiased", "biased"}}}) {
    if (std::find(c.allowed.begin(), c.allowed.end(), c.flag.getValue()) != c.allowed.end())
      continue;
    std::string list;
    for (const std::string& a : c.allowed)
      list += (list.empty() ? "" : ", ") + a;
    return usage("--" + c.flag.ArgStr.str() + "=" + c.flag.getValue() + " is not one of: " + list);
  }
  if (auto tied = parseTiedChoice(tiedInitializers); !tied)
    return usage(llvm::toString(tied.takeError()));
  if (int rc = recipes::checkUsage(loss))
    return rc;
  if (shiftLabels && loss != "softmax-xent")
    return usage("--shift-labels applies to the softmax-xent loss only");
  if (ignoreIndex.getNumOccurrences() && loss != "softmax-xent")
    return usage("--ignore-index needs the softmax-xent loss");
  if (ignoreIndex.getNumOccurrences() && ignoreIndex == std::numeric_limits<int64_t>::min())
    return usage("--ignore-index=" + std::to_string(ignoreIndex) + " is not supported");
  if (lrSchedule == "cosine" && totalSteps < 1)
    return usage("--lr-schedule=cosine needs --total-steps=N (N >= 1)");
  if (lrSchedule == "step" && stepSize < 1)
    return usage("--lr-schedule=step needs --step-size=N (N >= 1)");
  if (gpus < 1 || gpus > 1024)
    return usage("--gpus must be in 1..1024");
  if (!strategy.empty() && strategy != "data" && strategy != "model" && strategy != "owt" &&
      strategy != "layerwise" && strategy != "hypergraph" && strategy != "pipeline")
    return usage("--strategy=" + strategy +
                 " is not one of: layerwise, data, model, owt, hypergraph, pipeline");
  if (microbatches < 1 || microbatches > 4096)
    return usage("--microbatches must be in 1..4096");
  if (schedule != "1f1b" && schedule != "gpipe" && schedule != "zb-h1")
    return usage("--schedule=" + schedule + " is not one of: 1f1b, gpipe, zb-h1");
  if (recompute != "none" && recompute != "all" && recompute != "auto" && recomputeLayersFlag() < 1)
    return usage("--recompute=" + recompute +
                 " is not one of: none, all, auto, or a number of layers (1 or more)");
  if (shard != "none" && shard != "zero1" && shard != "zero2" && shard != "fsdp" && shard != "auto")
    return usage("--shard=" + shard + " is not one of: none, zero1, zero2, fsdp, auto");
  if (std::string why = zero1Conflict(); shard != "none" && shard != "auto" && !why.empty())
    return usage("--shard=" + shard + " does not go with " + why);
  if (shardMinBytes < 0)
    return usage("--shard-min-bytes=" + std::to_string(shardMinBytes) + " is negative");
  if (shardMinBytes.getNumOccurrences() && shard != "fsdp")
    return usage("--shard-min-bytes needs --shard=fsdp (it says which params FSDP shards)");
  if (stages.getNumOccurrences() && strategy != "pipeline")
    return usage("--stages is for --strategy=pipeline");
  if (strategy == "pipeline" && gpus < 2)
    return usage("--strategy=pipeline needs --gpus=N with N >= 2");
  if (stages.getNumOccurrences() && (stages < 1 || gpus % stages != 0))
    return usage("--stages=" + std::to_string(stages) +
                 " does not divide --gpus=" + std::to_string(gpus));
  if (bucketBytes < 0)
    return usage("--bucket-bytes must be >= 0");
  if (streams < 1 || streams > 8)
    return usage("--streams must be in 1..8");
  if (streamPolicy != "sim" && streamPolicy != "all")
    return usage("--stream-policy must be sim or all");
  if (fragments < 1 || fragments > 64)
    return usage("--fragments must be in 1..64");
  if (fragmentAlong != "samples" && fragmentAlong != "channels" && fragmentAlong != "any")
    return usage("--fragment-along must be samples, channels or any");
  if (fragments > 1 && (streams < 3 || gpus > 1 || microbatches > 1))
    return usage("--fragments=" + std::to_string(fragments) +
                 " cuts the batch of one device's step into pieces on its branch streams: "
                 "it needs --streams=3 or more, --gpus 1 and --microbatches 1");
  if (tf32 && noTf32)
    return usage("--tf32 and --no-tf32 contradict each other");
  if (mixedPrecision != "off") {
    if (mixedPrecision != "bf16" && mixedPrecision != "fp16")
      return usage("--mixed-precision=" + mixedPrecision + " is not one of: off, bf16, fp16");
    if (precision != Precision::F32)
      return usage("--mixed-precision rounds float32 values: it does not go with "
                   "--precision=f64");
  }
  if (lossScale.getNumOccurrences() || lossScaleInterval.getNumOccurrences()) {
    if (mixedPrecision != "fp16")
      return usage("--loss-scale and --loss-scale-interval go with --mixed-precision=fp16 "
                   "(bf16 and float32 need no scaling)");
    // The pass checks its options (a power of two, an interval >= 1).
    PipelineText text;
    for (const PipelineStep& s : trainingStepPipeline(pipelineOptions(fixedPlan("data"), true)))
      if (s.pass == "loss-scale")
        text.push_back(s);
    if (auto pass = buildPipeline(text); !pass)
      return usage(llvm::toString(pass.takeError()));
  }
  if (planThreadsFlag < 0)
    return usage("--plan-threads must be 0 (one per core) or a positive number");
  if (batch.getNumOccurrences() && batch <= 0)
    return usage("--batch must be a positive integer");
  if (emulateGpu) {
    if (target.getNumOccurrences() && target != "cuda")
      return usage("--emulate-gpu builds a cuda trainer, not --target=" + target);
    target = "cuda";
  }
  if (target != "cpu" && target != "cuda")
    return usage("--target=" + target + " is not one of: cuda, cpu");
  // A bad spec or profile is reported before any work.
  if (auto spec = loadDeviceSpec(deviceSpecName()); !spec) {
    printErrors(llvm::errs(), spec.takeError());
    return 1;
  } else if (spec->calibration && spec->calibration->emulated) {
    llvm::errs() << "lwcc: warning: " << deviceSpecName()
                 << ": its efficiency was fitted on the emulated GPU (calibration.emulated), "
                    "not measured on a GPU: a test of the calibration, not a GPU's figures\n";
  }
  if (devicesPerGpu.getNumOccurrences() && devicesPerGpu < 1)
    return usage("--devices-per-gpu takes a positive count, got " + std::to_string(devicesPerGpu));
  if (devicesPerNode.getNumOccurrences() && devicesPerNode < 1)
    return usage("--devices-per-node takes a positive count, got " +
                 std::to_string(devicesPerNode));
  if (!costProfile.empty())
    if (auto p = loadOpProfile(costProfile); !p) {
      printErrors(llvm::errs(), p.takeError());
      return 1;
    }
  return 0;
}

int checkBuildUsage() {
  if (opsPerFile < 0)
    return usage("--ops-per-file=" + std::to_string(opsPerFile) + " is negative");
  if (weightsMode != "embed" && weightsMode != "separate")
    return usage("--weights=" + weightsMode + " is not one of: embed, separate");
  if (!llvm::StringRef(arch).startswith("sm_") || arch.size() < 5 ||
      !std::all_of(arch.begin() + 3, arch.end(), [](char c) { return std::isdigit(c); }))
    return usage("--arch=" + arch + " is not of the form sm_XX (e.g. sm_90)");
  if ((emit == Emit::Source || emit == Emit::Exe) && outputFile == "-")
    return usage("--emit=source and --emit=exe need -o");
  if (!stepIr.empty() && emit != Emit::Source && emit != Emit::Exe)
    return usage("--step-ir builds a trainer from a scheduled step: it goes with -o "
                 "(or --emit=source)");
  return 0;
}

std::string chosenStrategy() {
  if (!strategy.empty())
    return strategy;
  return gpus > 1 ? "layerwise" : "data";
}

int64_t recomputeLayersFlag() {
  int64_t k = 0;
  return llvm::StringRef(recompute).getAsInteger(10, k) || k < 1 ? 0 : k;
}

std::string deviceSpecName() {
  if (!deviceSpec.empty())
    return deviceSpec;
  return target == "cpu" ? "cpu" : "h100";
}

TiedChoice tiedMode() {
  // checkUsage() has parsed it.
  auto tied = parseTiedChoice(tiedInitializers);
  return tied ? *tied : (llvm::consumeError(tied.takeError()), TiedChoice());
}

llvm::Expected<DeviceSpec> loadSpec() {
  auto spec = loadDeviceSpec(deviceSpecName());
  if (spec && devicesPerNode > 0)
    spec->devicesPerNode = devicesPerNode;
  if (spec && devicesPerGpu > 0)
    spec->devicesPerGpu = devicesPerGpu;
  return spec;
}

int64_t planThreads() {
  if (planThreadsFlag > 0)
    return planThreadsFlag;
  return std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 4);
}

/// A one-device profile prices the whole ops the planner weighs (the
/// searches, the candidates it compares, the streams it assigns). A profile
/// of several devices holds one plan's pieces: it prices that plan (the
/// final simulation), and the planner chooses on the spec as it did for the
/// trainer that measured it.
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

std::string zero1Conflict() {
  if (recipes::clipsGradients())
    return "--clip-grad-norm yet (the norm would need every device's share of the gradients)";
  if (mixedPrecision == "fp16")
    return "--mixed-precision=fp16 yet (the overflow check would need every device's share of "
           "the gradients)";
  return "";
}

PlanChoice fixedPlan(const std::string& strat) {
  PlanChoice p;
  p.strategy = strat;
  p.microbatches = microbatches;
  if (strat == "pipeline")
    p.stages = stages;
  return p;
}

TrainingPipelineOptions pipelineOptions(const PlanChoice& plan, bool withOptimizer) {
  TrainingPipelineOptions o;
  o.loss = loss;
  if (ignoreIndex.getNumOccurrences())
    o.ignoreIndex = ignoreIndex;
  o.shiftLabels = shiftLabels;
  o.attentionFusion = !noAttentionFusion;
  o.bnRunningVar = bnRunningVar;
  o.mixedPrecision = mixedPrecision;
  o.gpus = gpus;
  o.plan = plan;
  o.plan.recompute = plan.recompute || (recompute != "none" && recompute != "auto");
  if (recompute == "all")
    o.plan.recomputeTop = 0;
  else if (int64_t k = recomputeLayersFlag(); k > 0)
    o.plan.recomputeTop = k;
  if (shard != "auto" && shard != "none")
    o.plan.shard = shard;
  if (shard == "fsdp")
    o.plan.shardMinBytes = shardMinBytes;
  o.schedule = schedule;
  o.bucketBytes = bucketBytes;
  o.pricing.spec = deviceSpecName();
  o.pricing.devicesPerNode = devicesPerNode > 0 ? int64_t(devicesPerNode) : 0;
  o.pricing.devicesPerGpu = devicesPerGpu > 0 ? int64_t(devicesPerGpu) : 0;
  if (planProfile())
    o.pricing.profile = costProfile;
  o.pricing.tf32 = noTf32 ? Pricing::Tf32::Off : tf32 ? Pricing::Tf32::All : Pricing::Tf32::Default;
  o.pricing.report = verbose;
  o.streams = streams;
  o.fuse = !noFuse;
  o.streamPolicy = streamPolicy;
  o.fragments = fragments;
  o.fragmentAlong = fragmentAlong;
  o.withOptimizer = withOptimizer;
  OptimizerSettings& s = o.optimizer;
  s.kind = optimizer;
  auto given = [](const cl::opt<double>& v) {
    return v.getNumOccurrences() ? std::optional<double>(v.getValue()) : std::nullopt;
  };
  s.lr = given(lr);
  s.momentum = given(momentum);
  s.weightDecay = given(weightDecay);
  s.beta1 = given(beta1);
  s.beta2 = given(beta2);
  s.gamma = given(gamma);
  s.minLr = given(minLr);
  s.nesterov = nesterov;
  s.schedule = lrSchedule;
  s.warmup = warmupSteps;
  s.totalSteps = totalSteps;
  s.stepSize = stepSize;
  recipes::addTo(o);
  o.lossScale = lossScale;
  o.lossScaleInterval = lossScaleInterval;
  o.memorySpec = deviceSpecName();
  o.verifySchedule = !noVerifySchedule;
  return o;
}

} // namespace lwcc::flags
