// The trainer's flags (--help lists them) and trainerMain: the flags are
// parsed into Options, checked together, and handed to a Trainer.
#include "Processes.h"
#include "Trainer.h"
#include "lwrt/image_data.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace lwrt {
namespace trainer {

namespace {

const char* kUsage =
    "usage: %s [options]\n"
    "data:\n"
    "  --data=synthetic|idx:DIR|npy:DIR|tokens:PATH|folder:DIR|cifar10:DIR|raw:DIR   batches\n"
    "                       (default synthetic: seeded random inputs)\n"
    "      idx:DIR      MNIST-style IDX files (train-*, t10k-*; .gz or plain)\n"
    "      npy:DIR      numpy arrays, a row per example: x_train.npy and y_train.npy (the\n"
    "                   data and the labels or mse targets), or NAME_train.npy per input;\n"
    "                   *_test.npy for --eval; the inputs' dtypes (uint8 / 255 for floats)\n"
    "      tokens:PATH  llm.c token shards (a file or a glob such as DIR/x_train_*.bin) for\n"
    "                   a language model: windows of T + 1 tokens, input_ids [B, T] and\n"
    "                   the next tokens as labels; --eval reads the shards with 'val' for\n"
    "                   the file name's last 'train', or --eval-data=tokens:PATH\n"
    "      folder:DIR   JPEG/PNG images in DIR/train/CLASS/ and DIR/val/CLASS/\n"
    "      cifar10:DIR  CIFAR-10's binary files (data_batch_1..5.bin, test_batch.bin)\n"
    "      raw:DIR      one fixed batch, input_<k>.bin raw bytes per model input\n"
    "  --augment=standard|flip|none   folder and cifar10 training transform: random\n"
    "                       resized crop and flip (folder default), flip (cifar10\n"
    "                       default), or resize alone\n"
    "  --eval-crop=F        folder and cifar10 evaluation: Resize(size / F) + CenterCrop\n"
    "                       (F in (0, 1], e.g. 0.875); default: a folder's 0.875 crop after\n"
    "                       --augment=standard, the resized whole image otherwise\n"
    "  --mean=A[,B,C] --std=A[,B,C]   folder and cifar10 normalization per channel\n"
    "                       (default ImageNet's; 0.5, 0.5 for one channel)\n"
    "  --skip-bad-images    leave out unreadable images and folders with a warning\n"
    "  --train-examples=N   use the first N training examples (default all; folder:\n"
    "                       N spread over the classes)\n"
    "  --eval-data=tokens:PATH   the validation shards of --data=tokens:\n"
    "  --eval-examples=N    evaluate on the first N test examples (default all; folder:\n"
    "                       N spread over the classes)\n"
    "  --synthetic-batches=N   batches in a synthetic epoch (default 100; at most 256 MiB\n"
    "                       of them are drawn, and a longer epoch repeats them)\n"
    "  --data-threads=N     threads preparing batches ahead of the step (default: the\n"
    "                       cores less one, at most 4)\n"
    "  --prefetch=N         batches prepared ahead (default 2)\n"
    "  --data-only          time the input pipeline alone: prepare (and upload) the\n"
    "                       run's batches without training, and print img/s\n"
    "schedule:\n"
    "  --epochs=N (default 1)   --steps=N (overrides --epochs)   --seed=S\n"
    "  --eval                   the test split after each epoch: accuracy, top-5 and loss\n"
    "                           (an mse regression: its mean squared error; token data\n"
    "                           and sequences: the loss per token and its perplexity)\n"
    "optimizer (defaults: what lwcc compiled in, see --help):\n"
    "  --optimizer=sgd|adam|adamw --lr=X --momentum=X --weight-decay=X --nesterov[=0|1]\n"
    "  --beta1=X --beta2=X --eps=X --lr-schedule=constant|step|cosine --warmup-steps=N\n"
    "  --total-steps=N --step-size=N --gamma=X --min-lr=X\n"
    "  --label-smoothing=E  the cross-entropy's label smoothing, in [0, 1]\n"
    "  --clip-grad-norm=X   the gradients' largest global L2 norm (lwcc --clip-grad-norm)\n"
    "moving average of the params:\n"
    "  --ema=DECAY          after each step ema += (1 - DECAY) * (params - ema), DECAY in\n"
    "                       (0, 1) such as 0.999, on every device; checkpoints hold it and\n"
    "                       --dump writes it as ema_param_*.bin\n"
    "  --ema-warmup         the decay after step n (from 0) is min(DECAY, (1 + n) / (10 + n))\n"
    "  --eval-ema           --eval evaluates the average instead of the params\n"
    "  --export-ema         --export writes the average instead of the params\n"
    "output:\n"
    "  --progress=auto|live|lines|off   --print-every=K   --log=FILE.jsonl\n"
    "  --tensorboard=DIR    TensorBoard event files of what the log holds: train/loss,\n"
    "                       train/lr, train/grad_norm, eval/accuracy, eval/top5, ... by step\n"
    "  --checkpoint-dir=DIR --checkpoint-every=K --keep-checkpoints=K (default 3)\n"
    "  --resume[=FILE|auto]   continue from the latest checkpoint in --checkpoint-dir\n"
    "      (auto: if there is one), or from FILE\n"
    "  --export=FILE.onnx   the input model with the trained weights\n"
    "  --weights=FILE       initial weights instead of the embedded ones\n"
    "  --list-params        the params (name, type, shape) in the order of the weights\n"
    "  --dump=DIR           params, last step's outputs and eval logits as raw files\n"
    "  --profile=N          time every op of N steps (after the first) and print where\n"
    "                       the time goes (runs those steps without CUDA graphs) and\n"
    "                       what the backend chose (the cuDNN API of convolutions)\n"
    "  --profile-ops=FILE   per-op measured seconds of the profiled steps (every step\n"
    "                       after the first unless --profile=N), for lwcc --cost-profile\n"
    "                       (multi-device CPU trainers: per device, waits left out)\n"
    "  --trace=FILE         the profiled steps' measured timeline as Chrome trace JSON\n"
    "                       (pid the device, tid the stream)\n"
    "device:\n"
    "  --threads=N          CPU trainers: the threads the step's kernels run on\n"
    "                       (default: the cores; emulated devices share them)\n"
    "  --device=N   --no-cuda-graph\n"
    "  --tf32[=conv|all|off]  float32 math on TF32 tensor cores: for convolutions by\n"
    "                       default (PyTorch's defaults), --tf32 for matrix products\n"
    "                       too, --no-tf32 (=off) for neither: strict float32\n"
    "  --devices=A,B,...    multi-device trainers: the device of each logical device\n"
    "                       (default round-robin over the GPUs found; the CPU backend\n"
    "                       emulates every one)\n"
    "  --check-replicas     multi-device trainers: fail when the replicas of a param\n"
    "                       differ whenever the params are read back\n"
    "  --cudnn-api=graph|legacy   cuDNN API for convolutions (default graph; a\n"
    "                       configuration no graph engine takes uses legacy)\n"
    "  --autotune=cache|timed|off   how each convolution's algorithm is chosen:\n"
    "                       cache (default on a GPU) times the candidates once per\n"
    "                       GPU, library versions and configuration and keeps the\n"
    "                       fastest in the autotune cache, which later runs and\n"
    "                       resumes read: fast, and the same bits in every run;\n"
    "                       timed times them in every run (runs may differ in their\n"
    "                       bits); off takes cuDNN's heuristics (default on the\n"
    "                       emulated GPU)\n"
    "  --autotune-cache=F   the autotune cache file (default $LWCC_AUTOTUNE_CACHE,\n"
    "                       else $XDG_CACHE_HOME/lwcc/autotune.tsv, else\n"
    "                       ~/.cache/lwcc/autotune.tsv)\n"
    "  --cudnn-benchmark    --autotune=timed\n"
    "  --kernels=cudnn|own  pooling, LRN, batch norm and softmax on cuDNN (default,\n"
    "                       where it covers the op) or on lwcc's own kernels, which\n"
    "                       sum in the CPU backend's order\n"
    "several processes (mpirun -np R TRAINER ..., R dividing the logical devices):\n"
    "  --peer-timeout=S     a process that hears nothing from another for S seconds\n"
    "                       ends the job, naming it (default 60)\n";

bool parseInt(const std::string& text, int64_t& out) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno)
    return false;
  out = v;
  return true;
}

bool parseDouble(const std::string& text, double& out) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v))
    return false;
  out = v;
  return true;
}

} // namespace

int usageError(const char* program, const std::string& problem) {
  if (launchedRank() != 0) // under mpirun every rank fails alike: rank 0 says it
    return 2;
  std::fprintf(stderr, "%s: %s\n", program, problem.c_str());
  std::fprintf(stderr, kUsage, program);
  return 2;
}

namespace {

/// The trainer's flags and run; `cluster` under mpirun, `why` the error it
/// stopped on.
int parseAndRun(int argc, char** argv, const ModelInfo& m, RunnerFactory createRunner,
                GroupFactory createGroup, Cluster* cluster, std::string& why) {
  const char* program = argc > 0 ? argv[0] : "trainer";
  const bool talks = !cluster || cluster->rank() == 0; // under mpirun rank 0 prints
  Options o;
  o.hyper = m.defaults;
  o.runner.tf32 = m.tf32;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string key = a, value;
    bool hasValue = false;
    if (size_t eq = a.find('='); eq != std::string::npos) {
      key = a.substr(0, eq);
      value = a.substr(eq + 1);
      hasValue = true;
    }
    auto intArg = [&](int64_t& out, int64_t min) {
      return hasValue && parseInt(value, out) && out >= min;
    };
    auto numArg = [&](double& out) { return hasValue && parseDouble(value, out); };
    auto bad = [&](const std::string& what) { return usageError(program, key + " " + what); };
    int64_t iv = 0;
    if (key == "--help" || key == "-h") {
      if (!talks)
        return 0;
      std::printf(kUsage, program);
      std::printf("\nthis trainer: %s, target %s%s, optimizer %s, lr %g, schedule %s\n",
                  m.name.c_str(), m.target.c_str(),
                  m.numDevices > 1
                      ? (", " + std::to_string(m.numDevices) + " logical devices").c_str()
                      : "",
                  m.defaults.family == Hyper::Sgd    ? "sgd"
                  : m.defaults.family == Hyper::Adam ? (m.defaults.decoupled ? "adamw" : "adam")
                                                     : "none",
                  m.defaults.lr,
                  m.defaults.schedule == 1   ? "step"
                  : m.defaults.schedule == 2 ? "cosine"
                                             : "constant");
      return 0;
    } else if (key == "--list-params" && !hasValue) {
      if (!talks)
        return 0;
      static const char* names[] = {"f32", "f64", "f16", "bf16", "i64", "i32", "bool"};
      for (const ParamInfo& p : m.params) {
        std::string shape;
        for (int64_t d : p.shape) {
          if (!shape.empty())
            shape += ',';
          shape += std::to_string(d);
        }
        std::printf("%s %s [%s]%s\n", p.name.c_str(), names[static_cast<int>(p.dtype)],
                    shape.c_str(), p.zeroInit ? " zeros" : "");
      }
      return 0;
    } else if (key == "--data") {
      o.data = value;
      if (o.data != "synthetic" && o.data.rfind("raw:", 0) != 0 && o.data.rfind("idx:", 0) != 0 &&
          o.data.rfind("npy:", 0) != 0 && o.data.rfind("tokens:", 0) != 0 && !isImageData(o.data))
        return bad("is synthetic, idx:DIR, npy:DIR, tokens:PATH, folder:DIR, cifar10:DIR or "
                   "raw:DIR");
      if (isImageData(o.data) && o.data.back() == ':')
        return bad("names no folder");
      if (o.data == "tokens:")
        return bad("names no file");
    } else if (key == "--eval-data") {
      o.evalData = value;
      if (o.evalData.rfind("tokens:", 0) != 0 || o.evalData == "tokens:")
        return bad("is tokens:PATH");
    } else if (key == "--eval-crop") {
      if (!numArg(o.evalCrop) || !(o.evalCrop > 0) || o.evalCrop > 1)
        return bad("takes a fraction in (0, 1], such as 0.875");
    } else if (key == "--augment") {
      Augment augment;
      if (!parseAugment(value, augment))
        return bad("is standard, flip or none");
      o.augment = value;
    } else if (key == "--mean" || key == "--std") {
      std::vector<float>& v = key == "--mean" ? o.mean : o.std;
      v.clear();
      for (size_t at = 0; hasValue && at <= value.size();) {
        size_t comma = std::min(value.find(',', at), value.size());
        double d;
        if (!parseDouble(value.substr(at, comma - at), d))
          return bad("takes 1 or 3 comma-separated numbers");
        v.push_back(static_cast<float>(d));
        at = comma + 1;
      }
      if (v.empty() || v.size() == 2 || v.size() > 3 ||
          (key == "--std" && std::any_of(v.begin(), v.end(), [](float x) { return !(x > 0); })))
        return bad(key == "--std" ? "takes 1 or 3 comma-separated positive numbers"
                                  : "takes 1 or 3 comma-separated numbers");
    } else if (key == "--skip-bad-images" && !hasValue) {
      o.skipBadImages = true;
    } else if (key == "--train-examples") {
      if (!intArg(o.trainExamples, 1))
        return bad("takes a positive count");
    } else if (key == "--eval-examples") {
      if (!intArg(o.evalExamples, 1))
        return bad("takes a positive count");
    } else if (key == "--synthetic-batches") {
      if (!intArg(o.syntheticBatches, 1))
        return bad("takes a positive count");
    } else if (key == "--data-threads") {
      if (!intArg(o.dataThreads, 1) || o.dataThreads > 64)
        return bad("takes a count in [1, 64]");
    } else if (key == "--prefetch") {
      if (!intArg(o.prefetch, 1) || o.prefetch > 64)
        return bad("takes a count in [1, 64]");
    } else if (key == "--data-only" && !hasValue) {
      o.dataOnly = true;
    } else if (key == "--epochs") {
      if (!intArg(o.epochs, 0))
        return bad("takes a count");
    } else if (key == "--steps") {
      if (!intArg(iv, 0))
        return bad("takes a count");
      o.steps = iv;
    } else if (key == "--seed") {
      if (!intArg(iv, 0))
        return bad("takes a non-negative integer");
      o.seed = static_cast<uint64_t>(iv);
      o.seedGiven = true;
    } else if (key == "--eval" && !hasValue) {
      o.eval = true;
    } else if (key == "--optimizer") {
      Hyper::Family want = value == "sgd"                        ? Hyper::Sgd
                           : value == "adam" || value == "adamw" ? Hyper::Adam
                                                                 : Hyper::None;
      if (want == Hyper::None)
        return bad("is sgd, adam or adamw");
      if (want != m.defaults.family)
        return usageError(program,
                          "--optimizer=" + value + ": this trainer was compiled for " +
                              (m.defaults.family == Hyper::Sgd ? "sgd" : "adam/adamw") +
                              " and holds that optimizer's state; compile with lwcc --optimizer=" +
                              value + " to train with " + value);
      if (want == Hyper::Adam) {
        int64_t decoupled = value == "adamw";
        if (decoupled != o.hyper.decoupled)
          o.hyper.weightDecay = decoupled ? 0.01 : 0.0;
        o.hyper.decoupled = decoupled;
      }
    } else if (key == "--lr") {
      if (!numArg(o.hyper.lr) || o.hyper.lr < 0)
        return bad("takes a non-negative number");
    } else if (key == "--momentum") {
      if (!numArg(o.hyper.momentum) || o.hyper.momentum < 0 || o.hyper.momentum >= 1)
        return bad("takes a number in [0, 1)");
    } else if (key == "--weight-decay") {
      if (!numArg(o.hyper.weightDecay) || o.hyper.weightDecay < 0)
        return bad("takes a non-negative number");
    } else if (key == "--nesterov") {
      if (!hasValue)
        o.hyper.nesterov = 1;
      else if (value == "0" || value == "1")
        o.hyper.nesterov = value == "1";
      else
        return bad("is 0 or 1");
    } else if (key == "--beta1" || key == "--beta2") {
      double& b = key == "--beta1" ? o.hyper.beta1 : o.hyper.beta2;
      if (!numArg(b) || b < 0 || b >= 1)
        return bad("takes a number in [0, 1)");
    } else if (key == "--eps") {
      if (!numArg(o.hyper.epsilon) || o.hyper.epsilon <= 0)
        return bad("takes a positive number");
    } else if (key == "--lr-schedule") {
      if (value == "constant")
        o.hyper.schedule = 0;
      else if (value == "step")
        o.hyper.schedule = 1;
      else if (value == "cosine")
        o.hyper.schedule = 2;
      else
        return bad("is constant, step or cosine");
    } else if (key == "--warmup-steps") {
      if (!intArg(o.hyper.warmupSteps, 0))
        return bad("takes a count");
    } else if (key == "--total-steps") {
      if (!intArg(o.hyper.totalSteps, 1))
        return bad("takes a positive count");
    } else if (key == "--step-size") {
      if (!intArg(o.hyper.stepSize, 1))
        return bad("takes a positive count");
    } else if (key == "--gamma") {
      if (!numArg(o.hyper.gamma) || o.hyper.gamma <= 0)
        return bad("takes a positive number");
    } else if (key == "--min-lr") {
      if (!numArg(o.hyper.minLr) || o.hyper.minLr < 0)
        return bad("takes a non-negative number");
    } else if (key == "--label-smoothing") {
      if (m.classes == 0)
        return bad("needs a softmax cross-entropy loss, which this trainer does not have");
      if (!numArg(o.hyper.labelSmoothing) || !(o.hyper.labelSmoothing >= 0) ||
          o.hyper.labelSmoothing > 1)
        return bad("takes a number in [0, 1]");
    } else if (key == "--clip-grad-norm") {
      if (m.defaults.clipGradNorm == 0)
        return bad("needs a trainer whose step clips gradients (lwcc --clip-grad-norm=X)");
      if (!numArg(o.hyper.clipGradNorm) || !(o.hyper.clipGradNorm > 0) ||
          !std::isfinite(o.hyper.clipGradNorm))
        return bad("takes a finite number > 0");
    } else if (key == "--ema") {
      if (!numArg(o.ema) || !(o.ema > 0) || !(o.ema < 1))
        return bad("takes a decay in (0, 1), such as 0.999");
    } else if (key == "--ema-warmup" && !hasValue) {
      o.emaWarmup = true;
    } else if (key == "--eval-ema" && !hasValue) {
      o.evalEma = true;
    } else if (key == "--export-ema" && !hasValue) {
      o.exportEma = true;
    } else if (key == "--progress") {
      if (value != "auto" && value != "live" && value != "lines" && value != "off")
        return bad("is auto, live, lines or off");
      o.progress = value;
    } else if (key == "--print-every") {
      if (!intArg(o.printEvery, 1))
        return bad("takes a positive count");
    } else if (key == "--log") {
      if (value.empty())
        return bad("takes a file");
      o.log = value;
    } else if (key == "--tensorboard") {
      if (value.empty())
        return bad("takes a folder");
      o.tensorboard = value;
    } else if (key == "--checkpoint-dir") {
      if (value.empty())
        return bad("takes a folder");
      o.checkpointDir = value;
    } else if (key == "--checkpoint-every") {
      if (!intArg(o.checkpointEvery, 1))
        return bad("takes a positive count");
    } else if (key == "--keep-checkpoints") {
      if (!intArg(o.keepCheckpoints, 1))
        return bad("takes a positive count");
    } else if (key == "--resume") {
      o.resume = hasValue ? value : "latest";
      if (o.resume.empty())
        return bad("takes a file or auto");
    } else if (key == "--export") {
      if (value.empty())
        return bad("takes a file");
      o.exportPath = value;
    } else if (key == "--profile") {
      if (!intArg(o.profile, 1))
        return bad("takes a positive count of steps");
      if ((m.numDevices > 1 || !m.deviceSteps.empty()) && m.target == "cuda")
        return bad("not yet for multi-device CUDA trainers (nor multi-stream ones)");
    } else if (key == "--profile-ops" || key == "--trace") {
      if (value.empty())
        return bad("takes a file");
      if ((m.numDevices > 1 || !m.deviceSteps.empty()) && m.target == "cuda")
        return bad("not yet for multi-device CUDA trainers (nor multi-stream ones)");
      (key == "--trace" ? o.trace : o.profileOps) = value;
    } else if (key == "--weights") {
      if (value.empty())
        return bad("takes a file");
      o.weights = value;
    } else if (key == "--dump") {
      if (value.empty())
        return bad("takes a folder");
      o.dump = value;
    } else if (key == "--device") {
      if (!intArg(iv, 0))
        return bad("takes a device index");
      if (m.numDevices > 1)
        return bad("does not apply to this trainer of " + std::to_string(m.numDevices) +
                   " logical devices: map them with --devices=A,B,...");
      o.runner.device = static_cast<int>(iv);
    } else if (key == "--devices") {
      if (!parseDeviceList(value, o.devices))
        return bad("takes a comma-separated list of device indexes");
      if (o.devices.size() != static_cast<size_t>(std::max(m.numDevices, 1)))
        return bad("lists " + std::to_string(o.devices.size()) + " devices; this trainer has " +
                   std::to_string(std::max(m.numDevices, 1)) + " logical devices");
      o.runner.device = o.devices[0];
      if (m.numDevices <= 1)
        o.devices.clear();
    } else if (key == "--threads") {
      if (m.target != "cpu")
        return bad("is for CPU trainers");
      if (!intArg(iv, 1) || iv > 1024)
        return bad("takes a count in [1, 1024]");
      o.runner.threads = static_cast<int>(iv);
    } else if (key == "--check-replicas" && !hasValue) {
      o.checkReplicas = true;
    } else if (key == "--tf32" && !hasValue) {
      o.runner.tf32 = Tf32::All;
    } else if (key == "--tf32") {
      if (value != "conv" && value != "all" && value != "off")
        return bad("takes conv, all or off");
      o.runner.tf32 = value == "all" ? Tf32::All : value == "conv" ? Tf32::Convolutions : Tf32::Off;
    } else if (key == "--no-tf32" && !hasValue) {
      o.runner.tf32 = Tf32::Off;
    } else if (key == "--kernels") {
      if (value != "cudnn" && value != "own")
        return bad("takes cudnn or own");
      o.runner.cudnnOps = value == "cudnn";
    } else if (key == "--no-cuda-graph" && !hasValue) {
      o.runner.graphs = false;
    } else if (key == "--cudnn-benchmark" && !hasValue) {
      o.runner.autotune = AutotuneMode::Timed;
    } else if (key == "--autotune") {
      if (value == "cache")
        o.runner.autotune = AutotuneMode::Cache;
      else if (value == "timed")
        o.runner.autotune = AutotuneMode::Timed;
      else if (value == "off")
        o.runner.autotune = AutotuneMode::Off;
      else
        return bad("takes cache, timed or off");
    } else if (key == "--autotune-cache") {
      if (value.empty())
        return bad("takes a file");
      o.runner.autotuneCache = value;
    } else if (key == "--cudnn-api") {
      if (value != "graph" && value != "legacy")
        return bad("takes graph or legacy");
      o.runner.cudnnGraphApi = value == "graph";
    } else if (key == "--peer-timeout") {
      if (!numArg(o.peerTimeout) || o.peerTimeout < 1)
        return bad("takes a number of seconds, at least 1");
    } else {
      return usageError(program, "unknown argument '" + a + "'");
    }
  }
  if (o.hyper.schedule == 1 && o.hyper.stepSize < 1)
    return usageError(program, "--lr-schedule=step needs --step-size=N");
  if ((o.emaWarmup || o.evalEma || o.exportEma) && o.ema == 0)
    return usageError(program, "--ema-warmup, --eval-ema and --export-ema need --ema=DECAY");
  if (o.evalEma && !o.eval)
    return usageError(program, "--eval-ema needs --eval");
  if (o.exportEma && o.exportPath.empty())
    return usageError(program, "--export-ema needs --export=FILE");
  if (!o.evalData.empty() && o.data.rfind("tokens:", 0) != 0)
    return usageError(program, "--eval-data applies to --data=tokens:PATH");
  if (o.checkpointEvery > 0 && o.checkpointDir.empty())
    return usageError(program, "--checkpoint-every needs --checkpoint-dir");
  if ((!o.augment.empty() || !o.mean.empty() || !o.std.empty() || o.skipBadImages ||
       o.evalCrop > 0) &&
      !isImageData(o.data))
    return usageError(program, "--augment, --eval-crop, --mean, --std and --skip-bad-images "
                               "apply to --data=folder:DIR and --data=cifar10:DIR");
  if (cluster && (o.profile > 0 || !o.profileOps.empty() || !o.trace.empty()))
    return usageError(program, "--profile, --profile-ops and --trace: not yet under mpirun (run "
                               "the trainer as one process to profile it)");
  Trainer t(program, m, std::move(o), cluster);
  int status = t.run(createRunner, createGroup);
  why = t.lastError();
  return status;
}

} // namespace
} // namespace trainer

int trainerMain(int argc, char** argv, const ModelInfo& m, RunnerFactory createRunner) {
  return trainerMain(argc, argv, m, createRunner, nullptr);
}

int trainerMain(int argc, char** argv, const ModelInfo& m, RunnerFactory createRunner,
                GroupFactory createGroup) {
  // Under mpirun (more than one rank): MPI, and the check that every rank
  // runs this trainer with these flags; a plain run starts no MPI.
  std::unique_ptr<Cluster> cluster;
  if (int status = startProcesses(argc, argv, m, cluster); status != 0)
    return status;
  std::string why;
  int status = trainer::parseAndRun(argc, argv, m, createRunner, createGroup, cluster.get(), why);
  return endProcesses(cluster.get(), argc > 0 ? argv[0] : "trainer", status, why);
}

} // namespace lwrt
