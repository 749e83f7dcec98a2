// The trainer's main loop around the generated phases: options, buffers,
// initial weights, data, the optimizer's settings, progress and the JSONL
// log, evaluation, checkpoints and resume, export, and the checks that stop
// a run with a clear message (exit 1) instead of training on garbage.
#include "lwrt/trainer.h"

#include "MultiDevice.h"
#include "Processes.h"
#include "lwrt/checkpoint.h"
#include "lwrt/data.h"
#include "lwrt/export.h"
#include "lwrt/feed.h"
#include "lwrt/image_data.h"
#include "lwrt/lr_schedule.h"
#include "lwrt/profile.h"
#include "lwrt/progress.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unistd.h>

namespace lwrt {

namespace {

const char* kUsage =
    "usage: %s [options]\n"
    "data:\n"
    "  --data=synthetic|idx:DIR|folder:DIR|cifar10:DIR|raw:DIR   batches (default synthetic:\n"
    "                       seeded random inputs)\n"
    "      idx:DIR      MNIST-style IDX files (train-*, t10k-*; .gz or plain)\n"
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
    "  --eval                   top-1 and top-5 accuracy on the test split after each epoch\n"
    "optimizer (defaults: what lwcc compiled in, see --help):\n"
    "  --optimizer=sgd|adam|adamw --lr=X --momentum=X --weight-decay=X --nesterov[=0|1]\n"
    "  --beta1=X --beta2=X --eps=X --lr-schedule=constant|step|cosine --warmup-steps=N\n"
    "  --total-steps=N --step-size=N --gamma=X --min-lr=X\n"
    "  --label-smoothing=E  the cross-entropy's label smoothing, in [0, 1]\n"
    "  --clip-grad-norm=X   the gradients' largest global L2 norm (lwcc --clip-grad-norm)\n"
    "output:\n"
    "  --progress=auto|live|lines|off   --print-every=K   --log=FILE.jsonl\n"
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
    "  --cudnn-benchmark    choose each convolution's algorithm by timing the\n"
    "                       candidates (the fastest, but runs may then differ in their\n"
    "                       bits); default: cuDNN's heuristics, the same in every run\n"
    "  --kernels=cudnn|own  pooling, LRN, batch norm and softmax on cuDNN (default,\n"
    "                       where it covers the op) or on lwcc's own kernels, which\n"
    "                       sum in the CPU backend's order\n"
    "several processes (mpirun -np R TRAINER ..., R dividing the logical devices):\n"
    "  --peer-timeout=S     a process that hears nothing from another for S seconds\n"
    "                       ends the job, naming it (default 60)\n";

struct Options {
  std::string data = "synthetic";
  std::string augment;          ///< "" (the data's default), standard, flip, none
  double evalCrop = 0;          ///< --eval-crop: the evaluation center crop's fraction (0: none)
  std::vector<float> mean, std; ///< folder and cifar10 normalization (empty: defaults)
  bool skipBadImages = false;
  int64_t trainExamples = 0, evalExamples = 0, syntheticBatches = 100;
  int64_t dataThreads = 0, prefetch = 2; ///< 0: from the core count
  bool dataOnly = false;
  int64_t epochs = 1;
  std::optional<int64_t> steps;
  uint64_t seed = 0;
  bool seedGiven = false;
  bool eval = false;
  std::string progress = "auto";
  int64_t printEvery = 0;
  std::string log;
  std::string checkpointDir;
  int64_t checkpointEvery = 0;
  int64_t keepCheckpoints = 3;
  int64_t profile = 0;
  std::string profileOps, trace; ///< --profile-ops, --trace files
  std::string resume;            ///< "", "latest", "auto" or a file
  std::string exportPath;
  std::string weights;
  std::string dump;
  RunnerOptions runner;
  std::vector<int> devices; ///< --devices: the device of each logical device
  bool checkReplicas = false;
  double peerTimeout = 60; ///< --peer-timeout, under mpirun
  Hyper hyper;
};

int usageError(const char* program, const std::string& problem) {
  if (launchedRank() != 0) // under mpirun every rank fails alike: rank 0 says it
    return 2;
  std::fprintf(stderr, "%s: %s\n", program, problem.c_str());
  std::fprintf(stderr, kUsage, program);
  return 2;
}

bool parseInt(const std::string& text, int64_t& out) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno)
    return false;
  out = v;
  return true;
}

bool isImageData(const std::string& data) {
  return data.rfind("folder:", 0) == 0 || data.rfind("cifar10:", 0) == 0;
}

bool parseDouble(const std::string& text, double& out) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v))
    return false;
  out = v;
  return true;
}

int64_t bytesOf(DType t, const std::vector<int64_t>& shape) {
  int64_t n = dtypeSize(t);
  for (int64_t d : shape)
    n *= d;
  return n;
}

int64_t numelOf(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

bool readFile(const std::string& path, std::vector<unsigned char>& out, int64_t expected,
              std::string& error) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    error = path + ": cannot open";
    return false;
  }
  int64_t size = static_cast<int64_t>(in.tellg());
  if (expected >= 0 && size != expected) {
    error =
        path + ": holds " + std::to_string(size) + " bytes, expected " + std::to_string(expected);
    return false;
  }
  out.resize(static_cast<size_t>(size));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(out.data()), size);
  if (!in) {
    error = path + ": cannot read";
    return false;
  }
  return true;
}

bool writeFile(const std::string& path, const void* src, int64_t bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(src), bytes);
  return static_cast<bool>(out);
}

std::string fileSafe(std::string name) {
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
      c = '_';
  return name;
}

/// The learning rate of `step` (steps completed before it), as the
/// generated lr_schedule computes it; for the log.
double scheduledLr(const Hyper& h, int64_t s) {
  return lwrt::scheduledLr(LrScheduleParams{static_cast<LrScheduleKind>(h.schedule), h.lr,
                                            h.warmupSteps, h.totalSteps, h.stepSize, h.gamma,
                                            h.minLr},
                           s);
}

/// Device memory that releases itself.
struct DeviceBuffer {
  StepRunner* runner = nullptr;
  unsigned char* ptr = nullptr;
  ~DeviceBuffer() {
    if (runner && ptr)
      runner->release(ptr);
  }
};

bool isFloatType(DType t) { return t == DType::F32 || t == DType::F64; }

/// The first non-finite element of the float params in a host state image,
/// as "param[index]", or "".
std::string firstNonFinite(const ModelInfo& m, const unsigned char* state) {
  for (const ParamInfo& p : m.params) {
    if (!isFloatType(p.dtype))
      continue;
    int64_t n = numelOf(p.shape);
    for (int64_t k = 0; k < n; ++k) {
      double v;
      if (p.dtype == DType::F32) {
        float f;
        std::memcpy(&f, state + p.offset + 4 * k, 4);
        v = f;
      } else {
        std::memcpy(&v, state + p.offset + 8 * k, 8);
      }
      if (!std::isfinite(v))
        return p.name + "[" + std::to_string(k) + "]";
    }
  }
  return "";
}

class Trainer {
public:
  Trainer(const char* program, const ModelInfo& m, Options o, Cluster* cluster)
      : program_(program), m_(m), o_(std::move(o)), cluster_(cluster) {}

  int run(RunnerFactory createRunner, GroupFactory createGroup);
  /// The error the run stopped on ("" after a success).
  const std::string& lastError() const { return lastError_; }

private:
  int fail(const std::string& what) {
    if (progress_)
      progress_->finish();
    if (cluster_)
      std::fprintf(stderr, "%s (rank %d): error: %s\n", program_, cluster_->rank(), what.c_str());
    else
      std::fprintf(stderr, "%s: error: %s\n", program_, what.c_str());
    lastError_ = what;
    return 1;
  }
  /// Under mpirun only rank 0 prints progress, logs, evaluates and writes
  /// checkpoints, exports and dumps; every rank reads the params back.
  bool leader() const { return !cluster_ || cluster_->rank() == 0; }
  bool allocate(DeviceBuffer& b, int64_t bytes, const char* what, std::string& error);
  bool loadInitialState(std::string& error);
  bool resumeFrom(const std::string& path, std::string& error);
  /// The input pipeline of the training steps [first, end).
  bool makeFeed(int64_t first, int64_t end, std::string& error);
  /// Threads preparing batches: --data-threads, or the cores less one (1 to 4).
  int dataThreads() const {
    unsigned cores = std::thread::hardware_concurrency();
    return o_.dataThreads > 0 ? static_cast<int>(o_.dataThreads)
                              : static_cast<int>(std::clamp<unsigned>(cores, 2, 5) - 1);
  }
  /// A launched step whose loss (copied back asynchronously) is read later.
  struct Launched {
    int64_t step;
    int64_t fence;
    const unsigned char* loss; ///< host copy of the loss (then the loss scale, fp16)
  };
  /// Waits for a launched step and reports it: progress, log, the device's
  /// data errors (every `deviceCheckEvery_` steps and when `sync`), a
  /// non-finite loss. "" or why the run stops.
  std::string finishStep(const Launched& l, bool sync);
  /// --data-only: the pipeline alone over the run's steps.
  int timeDataOnly(int64_t totalSteps);
  bool saveCheckpoint(int64_t step, std::string& error);
  bool evaluate(int64_t epoch, int64_t step, std::string& error);
  bool downloadState(std::string& error) {
    if (multi_)
      return multi_->download(hostState_.data(), o_.checkReplicas, error);
    return runner_->download(hostState_.data(), state_.ptr, m_.stateBytes, &error);
  }
  /// Multi-device trainers: the devices, created after runner_ (device 0's).
  bool createDevices(GroupFactory createGroup, std::string& error);
  bool waitFence(int64_t id, std::string* error) {
    return multi_ ? multi_->waitFence(id, *error) : runner_->waitFence(id, error);
  }
  bool writeExport(std::string& error);
  bool dump(std::string& error);

  const char* program_;
  const ModelInfo& m_;
  Options o_;
  Cluster* cluster_ = nullptr; ///< under mpirun
  std::string lastError_;
  RunnerFactory createRunner_ = nullptr;
  std::unique_ptr<StepRunner> runner_;
  DeviceBuffer arena_, evalArena_, state_, inputs_;
  /// Multi-device trainers: every device; then state_ holds the whole
  /// params for evaluation on device 0.
  std::unique_ptr<MultiDevice> multi_;
  struct HostBuffer {
    StepRunner* runner = nullptr;
    void* ptr = nullptr;
    ~HostBuffer() {
      if (runner && ptr)
        runner->releaseHost(ptr);
    }
  } lossMemory_;
  unsigned char* lossHost_ = nullptr; ///< in lossMemory_: two steps' losses (and scales)
  /// fp16 training: the loss scale before the step being finished, and the
  /// steps skipped for overflow so far in this run.
  double lossScale_ = 0;
  int64_t skippedSteps_ = 0;
  int64_t deviceCheckEvery_ = 1;
  int64_t progressItems_ = 0; ///< items per step
  /// Batches drawn up front (a pool) and the seconds that took.
  int64_t drawnUpFront_ = 0;
  double drawSeconds_ = 0;
  std::chrono::steady_clock::time_point lastFinish_;
  double lastLoss_ = 0;
  std::vector<unsigned char> hostState_, hostInputs_;
  StepBuffers buffers_{}, evalBuffers_{};
  std::optional<ImageLayout> layout_;
  std::unique_ptr<DataSource> train_, test_;
  std::vector<unsigned char> rawBatch_;
  int64_t batchesPerEpoch_ = 1;
  int64_t startStep_ = 0;
  std::unique_ptr<ProgressReporter> progress_;
  std::unique_ptr<JsonlLogger> log_;
  std::vector<float> evalLogits_; ///< of the first batch of the last evaluation
  int64_t lastCheckpoint_ = -1;
  int64_t profiled_ = 0;
  OpTimeline timeline_; ///< the profiled steps' marks (--profile, --profile-ops, --trace)
  std::optional<StepMarks> stepMarks_; ///< multi-device: reused by every profiled step
  void printProfile();
  /// Last: its threads read the data sources and the runner's memory, so it
  /// goes first.
  std::unique_ptr<BatchFeed> feed_;
};

void Trainer::printProfile() {
  if (o_.profile == 0)
    return;
  if (std::string notes = runner_->notes(); !notes.empty())
    std::printf("backend: %s\n", notes.c_str());
  if (profiled_ == 0)
    return;
  // Milliseconds per op label over the profiled steps ("label @device" in
  // a multi-device trainer).
  const std::map<std::string, double> opMs = timeline_.msByOp(multi_ != nullptr);
  double total = 0;
  std::map<std::string, double> byKernel;
  for (const auto& [label, ms] : opMs) {
    total += ms;
    byKernel[label.substr(0, label.find(' '))] += ms;
  }
  auto share = [&](double ms) { return total > 0 ? 100.0 * ms / total : 0.0; };
  if (multi_) // ops of every device: "label @device"
    std::printf("profile: %lld steps on %s, %.3f ms of ops per step over %d devices in %zu ops "
                "(waits left out)\n",
                static_cast<long long>(profiled_), multi_->description().c_str(),
                total / static_cast<double>(profiled_), multi_->numDevices(), opMs.size());
  else
    std::printf("profile: %lld steps on %s, %.3f ms per step in %zu ops\n",
                static_cast<long long>(profiled_), runner_->description().c_str(),
                total / static_cast<double>(profiled_), opMs.size());
  std::vector<std::pair<double, std::string>> kernels, ops;
  for (const auto& [k, ms] : byKernel)
    kernels.push_back({ms, k});
  for (const auto& [k, ms] : opMs)
    ops.push_back({ms, k});
  std::sort(kernels.rbegin(), kernels.rend());
  std::sort(ops.rbegin(), ops.rend());
  std::printf("  %-28s %10s %7s\n", "kernel", "ms/step", "share");
  for (const auto& [ms, k] : kernels)
    std::printf("  %-28s %10.3f %6.1f%%\n", k.c_str(), ms / static_cast<double>(profiled_),
                share(ms));
  std::printf("  %-48s %10s %7s\n", "op (slowest 15)", "ms/step", "share");
  for (size_t i = 0; i < ops.size() && i < 15; ++i)
    std::printf("  %-48s %10.3f %6.1f%%\n", ops[i].second.substr(0, 48).c_str(),
                ops[i].first / static_cast<double>(profiled_), share(ops[i].first));
}

bool Trainer::allocate(DeviceBuffer& b, int64_t bytes, const char* what, std::string& error) {
  b.runner = runner_.get();
  b.ptr = static_cast<unsigned char*>(runner_->allocate(bytes, &error));
  if (!b.ptr)
    error = std::string(what) + ": " + error;
  return b.ptr != nullptr;
}

/// The embedded weights, or --weights: the non-zeroInit params, packed.
bool Trainer::loadInitialState(std::string& error) {
  std::vector<unsigned char> file;
  const unsigned char* blob = m_.weights;
  if (!blob && o_.weights.empty())
    o_.weights = std::string(program_) + ".weights";
  if (!o_.weights.empty()) {
    if (!readFile(o_.weights, file, m_.weightsBytes, error)) {
      error = "weights: " + error;
      return false;
    }
    blob = file.data();
  }
  int64_t at = 0;
  for (const ParamInfo& p : m_.params) {
    if (p.zeroInit)
      continue;
    int64_t n = bytesOf(p.dtype, p.shape);
    if (at + n > m_.weightsBytes) {
      error = "weights: the embedded weights are shorter than the params";
      return false;
    }
    std::memcpy(hostState_.data() + p.offset, blob + at, static_cast<size_t>(n));
    at += n;
  }
  return true;
}

bool Trainer::resumeFrom(const std::string& path, std::string& error) {
  Checkpoint c;
  error = readCheckpoint(path, m_.fingerprint, c);
  if (!error.empty())
    return false;
  for (const ParamInfo& p : m_.params) {
    const CheckpointTensor* t = c.find(p.name);
    if (!t) {
      error = path + ": has no tensor '" + p.name + "'";
      return false;
    }
    if (t->dtype != p.dtype || t->shape != p.shape ||
        static_cast<int64_t>(t->data.size()) != bytesOf(p.dtype, p.shape)) {
      error = path + ": tensor '" + p.name + "' does not have the model's type and shape";
      return false;
    }
    std::memcpy(hostState_.data() + p.offset, t->data.data(), t->data.size());
  }
  if (c.state.step < 0 || c.state.epoch != c.state.step / batchesPerEpoch_ ||
      c.state.batch != c.state.step % batchesPerEpoch_) {
    error = path + ": its data position (epoch " + std::to_string(c.state.epoch) + ", batch " +
            std::to_string(c.state.batch) + " after " + std::to_string(c.state.step) +
            " steps) does not fit " + std::to_string(batchesPerEpoch_) +
            " batches per epoch: resume with the data options of the run that wrote it";
    return false;
  }
  if (c.state.rng.size() == 8) {
    uint64_t seed;
    std::memcpy(&seed, c.state.rng.data(), 8);
    if (o_.seedGiven && seed != o_.seed)
      std::fprintf(stderr, "%s: warning: resuming with the checkpoint's seed %llu, not --seed\n",
                   program_, static_cast<unsigned long long>(seed));
    o_.seed = seed;
  }
  startStep_ = c.state.step;
  return true;
}

bool Trainer::makeFeed(int64_t first, int64_t end, std::string& error) {
  FeedOptions fo;
  unsigned cores = std::thread::hardware_concurrency();
  fo.threads = dataThreads();
  // Buffers: the prepared ones, the step's, and the previous step's while
  // its upload may still run.
  fo.depth = static_cast<int>(o_.prefetch) + 2;
  const int64_t bytes = m_.inputBytes;
  auto started = std::chrono::steady_clock::now();
  if (o_.data == "synthetic") {
    // A pool of distinct batches drawn once (at most 256 MiB of them): step
    // s trains on batch s % P.
    const int64_t budget = int64_t(256) << 20;
    int64_t pool =
        std::clamp<int64_t>(budget / std::max<int64_t>(bytes, 1), 1, o_.syntheticBatches);
    uint64_t seed = o_.seed;
    FeedOptions up = fo; // drawn before the first step: every core helps
    up.threads = std::max<int>(fo.threads, static_cast<int>(std::max(cores, 1u)));
    feed_ = createPoolFeed(
        *runner_, bytes,
        [this, seed](int64_t k, unsigned char* dst, std::string*) {
          fillSyntheticInputs(m_, dst, seed, static_cast<uint64_t>(k));
          return true;
        },
        pool, up, &error);
    drawnUpFront_ = pool;
  } else if (!train_) { // raw: the same batch every step
    feed_ = createPoolFeed(
        *runner_, bytes,
        [this](int64_t, unsigned char* dst, std::string*) {
          std::memcpy(dst, rawBatch_.data(), rawBatch_.size());
          return true;
        },
        1, fo, &error);
  } else {
    const ImageLayout layout = *layout_;
    const int64_t perEpoch = batchesPerEpoch_, n = layout.shape[0];
    const DataSource* train = train_.get();
    // Under mpirun, the samples this process's devices read.
    const std::pair<int64_t, int64_t> rows = localInputRows(m_, cluster_, n);
    feed_ = createPrefetchFeed(
        *runner_, bytes,
        [layout, perEpoch, n, train, rows](int64_t step, unsigned char* dst, std::string* error) {
          DataSource::Position p{static_cast<uint64_t>(step / perEpoch),
                                 static_cast<uint64_t>(step % perEpoch)};
          thread_local std::vector<int64_t> labels;
          thread_local std::vector<float> images;
          labels.resize(static_cast<size_t>(n));
          float* img = reinterpret_cast<float*>(dst + layout.image->offset);
          if (layout.image->dtype != DType::F32) { // converted from floats
            images.resize(static_cast<size_t>(numelOf(layout.shape)));
            img = images.data();
          }
          if (!train->batch(p, img, labels.data(), error, rows))
            return false;
          storeBatch(layout, img, labels.data(), dst);
          return true;
        },
        first, end, fo, &error);
  }
  drawSeconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return feed_ != nullptr;
}

std::string Trainer::finishStep(const Launched& l, bool sync) {
  std::string error;
  const std::string at = "step " + std::to_string(l.step + 1) + ": ";
  if (!waitFence(l.fence, &error) ||
      (multi_ && !multi_->shareLoss(const_cast<unsigned char*>(l.loss), error)))
    return at + error;
  if (!runner_->readsHostMemory())
    feed_->release(l.step); // its upload has ended
  double loss = 0;
  if (m_.lossType == DType::F64) {
    std::memcpy(&loss, l.loss, 8);
  } else {
    float f;
    std::memcpy(&f, l.loss, 4);
    loss = f;
  }
  auto now = std::chrono::steady_clock::now();
  double ms = std::chrono::duration<double, std::milli>(now - lastFinish_).count();
  lastFinish_ = now;
  // Reading the device's error flag waits for the device: not every step.
  if (sync || (l.step + 1) % deviceCheckEvery_ == 0) {
    std::string deviceError = multi_ ? multi_->takeDeviceError() : runner_->takeDeviceError();
    if (!deviceError.empty())
      return at + deviceError;
  }
  // fp16: the scale after the step; a smaller one means the step's
  // gradients overflowed and its update was skipped.
  bool skipped = false;
  if (m_.lossScaleParam >= 0) {
    float v = 0;
    std::memcpy(&v, l.loss + 8, sizeof v);
    const double scale = v == 0 ? m_.lossScaleInit : v;
    skipped = scale < lossScale_;
    if (skipped) {
      ++skippedSteps_;
      if (leader())
        std::fprintf(stderr,
                     "%s: step %lld: fp16 gradients overflowed at loss scale %.9g; the update is "
                     "skipped and the scale now %.9g\n",
                     program_, static_cast<long long>(l.step + 1), lossScale_, scale);
    }
    lossScale_ = scale;
  }
  // Clipped gradients: their norm in the step, after the scale.
  std::optional<double> gradNorm;
  if (m_.gradNormParam >= 0) {
    float v = 0;
    std::memcpy(&v, l.loss + 12, sizeof v);
    gradNorm = v;
  }
  progress_->step(l.step + 1, loss, gradNorm);
  if (log_) {
    StepRecord r;
    r.step = l.step + 1;
    r.loss = loss;
    r.stepMs = ms;
    double rate = progress_->itemsPerSecond();
    r.imgPerSec = std::isfinite(rate) ? rate : progressItems_ / (ms / 1000.0);
    r.epoch = l.step / batchesPerEpoch_ + 1;
    if (o_.hyper.family != Hyper::None)
      r.lr = scheduledLr(o_.hyper, l.step);
    if (multi_) {
      r.batch = progressItems_;
      r.devices = multi_->numDevices();
    }
    if (m_.lossScaleParam >= 0) {
      r.lossScale = lossScale_;
      r.skipped = skipped;
    }
    r.gradNorm = gradNorm;
    log_->step(r);
  }
  std::string bad = checkFiniteLoss(l.step + 1, loss);
  if (!bad.empty())
    return bad + (lastCheckpoint_ >= 0 ? "; the last checkpoint, " +
                                             checkpointFileName(lastCheckpoint_) + ", is kept"
                                       : "");
  lastLoss_ = loss;
  return "";
}

int Trainer::timeDataOnly(int64_t totalSteps) {
  std::string error;
  const bool upload = !runner_->readsHostMemory();
  auto started = std::chrono::steady_clock::now();
  int64_t previous = -1, fence = 0;
  for (int64_t s = startStep_; s < totalSteps; ++s) {
    const unsigned char* batch = feed_->acquire(s, &error);
    if (!batch)
      return fail("data: " + error);
    if (upload && (!runner_->upload(inputs_.ptr, batch, m_.inputBytes, &error) ||
                   !runner_->fence(&fence, &error)))
      return fail("data: " + error);
    if (previous >= 0 && upload && !runner_->waitFence(previous, &error))
      return fail("data: " + error);
    if (upload && s > startStep_)
      feed_->release(s - 1);
    if (!upload)
      feed_->release(s);
    previous = fence;
  }
  if (upload && !runner_->waitFence(previous, &error))
    return fail("data: " + error);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  int64_t ran = std::max<int64_t>(0, totalSteps - startStep_);
  if (!leader())
    return 0;
  if (drawnUpFront_ > 0) // a pool: drawing it is the pipeline's work
    std::printf("%s: data only: drew %lld batches up front in %.2f s (%.1f img/s)\n", program_,
                static_cast<long long>(drawnUpFront_), drawSeconds_,
                static_cast<double>(drawnUpFront_ * progressItems_) / std::max(drawSeconds_, 1e-9));
  std::printf("%s: data only: %lld batches in %.2f s (%.1f img/s)%s\n", program_,
              static_cast<long long>(ran), seconds,
              static_cast<double>(ran * progressItems_) / std::max(seconds, 1e-9),
              upload ? ", uploaded" : "");
  return 0;
}

bool Trainer::saveCheckpoint(int64_t step, std::string& error) {
  if (!downloadState(error))
    return false;
  if (!leader()) { // rank 0 writes it
    lastCheckpoint_ = step;
    return true;
  }
  std::string bad = firstNonFinite(m_, hostState_.data());
  if (!bad.empty()) {
    error = "after step " + std::to_string(step) + " " + bad +
            " is not finite: no checkpoint written" +
            (lastCheckpoint_ >= 0 ? " (" + checkpointFileName(lastCheckpoint_) + " is kept)" : "");
    return false;
  }
  CheckpointState st;
  st.fingerprint = m_.fingerprint;
  st.step = step;
  st.epoch = step / batchesPerEpoch_;
  st.batch = step % batchesPerEpoch_;
  st.rng.resize(8);
  std::memcpy(st.rng.data(), &o_.seed, 8);
  std::vector<NamedTensor> tensors;
  for (const ParamInfo& p : m_.params)
    tensors.push_back({p.name, TensorView{hostState_.data() + p.offset, p.dtype, p.shape}});
  std::error_code ec;
  std::filesystem::create_directories(o_.checkpointDir, ec);
  std::string path = o_.checkpointDir + "/" + checkpointFileName(step);
  error = writeCheckpoint(path, st, tensors);
  if (!error.empty())
    return false;
  lastCheckpoint_ = step;
  error = keepLastCheckpoints(o_.checkpointDir, static_cast<int>(o_.keepCheckpoints));
  return error.empty();
}

/// Accuracy and mean cross-entropy of the inference graph on the test split
/// (every example: the last partial batch is padded and the padding not
/// counted).
bool Trainer::evaluate(int64_t epoch, int64_t step, std::string& error) {
  const int64_t n = layout_->shape[0], classes = m_.logitsShape.back();
  const int64_t rows = numelOf(m_.logitsShape) / classes;
  if (rows != n) {
    error = "evaluation: the logits are not [N, classes]";
    return false;
  }
  int64_t examples = o_.data == "synthetic" ? n * 10 : test_ ? test_->numExamples() : n;
  int64_t batches = (examples + n - 1) / n, correct = 0, top5 = 0;
  double lossSum = 0;
  std::vector<int64_t> labels(static_cast<size_t>(n));
  std::vector<unsigned char> logits(static_cast<size_t>(bytesOf(m_.logitsType, m_.logitsShape)));
  // Multi-device trainers evaluate on device 0 with the whole params
  // (under mpirun: rank 0, the others send it their devices' params).
  if (multi_ &&
      (!downloadState(error) ||
       (leader() && !runner_->upload(state_.ptr, hostState_.data(), m_.stateBytes, &error)))) {
    error = "evaluation: " + error;
    return false;
  }
  if (!leader())
    return true;
  // A test split's batches are decoded ahead on the data threads.
  std::unique_ptr<BatchFeed> feed;
  if (test_) {
    FeedOptions fo;
    fo.threads = dataThreads();
    fo.depth = fo.threads + 2; // a batch per thread, the one in use and one ready
    feed = createExampleFeed(*runner_, m_.inputBytes, *layout_, *test_, batches, fo, &error);
    if (!feed) {
      error = "evaluation: " + error;
      return false;
    }
  }
  for (int64_t b = 0; b < batches; ++b) {
    const unsigned char* batch = hostInputs_.data();
    if (o_.data == "synthetic") {
      fillSyntheticInputs(m_, hostInputs_.data(), o_.seed ^ 0x5EED5EED5EEDull, 1000000000ull + b);
    } else if (!test_) {
      std::memcpy(hostInputs_.data(), rawBatch_.data(), rawBatch_.size());
    } else if (!(batch = feed->acquire(b, &error))) {
      error = "evaluation: " + error;
      return false;
    }
    // The labels as the model sees them.
    for (int64_t k = 0; k < n; ++k) {
      const unsigned char* lab = batch + layout_->label->offset;
      if (layout_->label->dtype == DType::I64) {
        std::memcpy(&labels[k], lab + 8 * k, 8);
      } else {
        int32_t v;
        std::memcpy(&v, lab + 4 * k, 4);
        labels[k] = v;
      }
    }
    if (!runner_->upload(inputs_.ptr, batch, m_.inputBytes, &error) ||
        !runner_->run(
            1, [&](std::string* e) { return m_.eval(evalBuffers_, e); }, &error) ||
        !runner_->download(logits.data(), evalArena_.ptr + m_.logitsOffset,
                           static_cast<int64_t>(logits.size()), &error)) {
      error = "evaluation: " + error;
      return false;
    }
    if (feed) // the download waited for the step, and so for the upload
      feed->release(b);
    int64_t valid = std::min(n, examples - b * n);
    for (int64_t k = 0; k < valid; ++k) {
      std::vector<double> row(static_cast<size_t>(classes));
      for (int64_t j = 0; j < classes; ++j) {
        if (m_.logitsType == DType::F64) {
          std::memcpy(&row[j], logits.data() + 8 * (k * classes + j), 8);
        } else {
          float f;
          std::memcpy(&f, logits.data() + 4 * (k * classes + j), 4);
          row[j] = f;
        }
      }
      // The label's rank: logits above it, and equal ones before it (the
      // first maximum is the prediction).
      const int64_t label = labels[k];
      int64_t rank = classes;
      if (label >= 0 && label < classes && std::isfinite(row[label])) {
        rank = 0;
        for (int64_t j = 0; j < classes; ++j)
          rank += row[j] > row[label] || (row[j] == row[label] && j < label);
      }
      correct += rank == 0;
      top5 += rank < 5;
      double mx = *std::max_element(row.begin(), row.end()), sum = 0;
      for (double v : row)
        sum += std::exp(v - mx);
      if (labels[k] >= 0 && labels[k] < classes)
        lossSum += std::log(sum) + mx - row[labels[k]];
    }
    if (b == 0) {
      evalLogits_.resize(static_cast<size_t>(n * classes));
      for (int64_t k = 0; k < n * classes; ++k) {
        if (m_.logitsType == DType::F64) {
          double v;
          std::memcpy(&v, logits.data() + 8 * k, 8);
          evalLogits_[k] = static_cast<float>(v);
        } else {
          std::memcpy(&evalLogits_[k], logits.data() + 4 * k, 4);
        }
      }
    }
  }
  double accuracy = static_cast<double>(correct) / static_cast<double>(examples);
  double loss = lossSum / static_cast<double>(examples);
  char line[256];
  double accuracy5 = static_cast<double>(top5) / static_cast<double>(examples);
  std::snprintf(line, sizeof line,
                "eval  epoch %lld  accuracy %.4f (%lld/%lld)  top-5 %.4f  loss %.4f",
                static_cast<long long>(epoch), accuracy, static_cast<long long>(correct),
                static_cast<long long>(examples), accuracy5, loss);
  progress_->message(line);
  if (log_) {
    EvalRecord r;
    r.epoch = epoch;
    r.accuracy = accuracy;
    r.top5 = accuracy5;
    r.loss = loss;
    r.step = step;
    log_->eval(r);
  }
  return true;
}

bool Trainer::writeExport(std::string& error) {
  if (m_.exportTemplateBytes == 0) {
    error = "--export: this trainer holds no export template (lwcc could not map the model's "
            "initializers to its params)";
    return false;
  }
  if (!downloadState(error))
    return false;
  if (!leader())
    return true;
  std::vector<const void*> params;
  for (const ParamInfo& p : m_.params)
    params.push_back(hostState_.data() + p.offset);
  error = writeOnnxExport(o_.exportPath, m_.exportTemplate,
                          static_cast<size_t>(m_.exportTemplateBytes), m_.exportCuts, params);
  return error.empty();
}

bool Trainer::dump(std::string& error) {
  std::error_code ec;
  if (leader())
    std::filesystem::create_directories(o_.dump, ec);
  if (!downloadState(error))
    return false;
  for (const ParamInfo& p : m_.params) {
    if (!leader())
      break;
    std::string path = o_.dump + "/param_" + fileSafe(p.name) + ".bin";
    if (!writeFile(path, hostState_.data() + p.offset, bytesOf(p.dtype, p.shape))) {
      error = path + ": cannot write";
      return false;
    }
  }
  for (size_t k = 0; k < m_.outputs.size(); ++k) {
    const OutputInfo& out = m_.outputs[k];
    std::vector<unsigned char> bytes(static_cast<size_t>(bytesOf(out.dtype, out.shape)));
    if (multi_ ? !multi_->downloadOutput(out, bytes.data(), error)
               : !runner_->download(bytes.data(), arena_.ptr + out.offset,
                                    static_cast<int64_t>(bytes.size()), &error))
      return false;
    if (!leader())
      continue;
    std::string path = o_.dump + "/output_" + std::to_string(k) + ".bin";
    if (!writeFile(path, bytes.data(), static_cast<int64_t>(bytes.size()))) {
      error = path + ": cannot write";
      return false;
    }
  }
  if (!evalLogits_.empty() && leader()) {
    std::string path = o_.dump + "/eval_logits.bin";
    if (!writeFile(path, evalLogits_.data(), static_cast<int64_t>(evalLogits_.size() * 4))) {
      error = path + ": cannot write";
      return false;
    }
  }
  return true;
}

bool Trainer::createDevices(GroupFactory createGroup, std::string& error) {
  if (!createGroup) {
    error = "this trainer runs on " + std::to_string(m_.numDevices) +
            " devices but was built without a device group";
    return false;
  }
  if (std::string bad = checkMultiDeviceModel(m_); !bad.empty()) {
    error = "this trainer's device tables are inconsistent: " + bad;
    return false;
  }
  std::string warning;
  multi_ = MultiDevice::create(m_, runner_.get(), o_.runner, o_.devices, cluster_, createRunner_,
                               createGroup, warning, error);
  if (!multi_)
    return false;
  if (!warning.empty())
    std::fprintf(stderr, "%s: warning: %s\n", program_, warning.c_str());
  return multi_->allocate(error);
}

int Trainer::run(RunnerFactory createRunner, GroupFactory createGroup) {
  createRunner_ = createRunner;
  std::string error;
  // Data first: a bad path fails before a GPU is touched.
  std::string why;
  layout_ = imageLayout(m_, why);
  if (o_.data.rfind("idx:", 0) == 0) {
    if (!layout_)
      return fail("--data=idx: " + why);
    IdxOptions io;
    io.seed = o_.seed;
    io.classes = m_.classes;
    io.maxExamples = o_.trainExamples;
    train_ = IdxData::open(o_.data.substr(4), "train", layout_->shape, io, &error);
    if (!train_)
      return fail("data: " + error);
    batchesPerEpoch_ = train_->batchesPerEpoch();
    if (o_.eval && leader()) { // under mpirun rank 0 alone evaluates
      io.shuffle = false;
      io.maxExamples = o_.evalExamples;
      test_ = IdxData::open(o_.data.substr(4), "t10k", layout_->shape, io, &error);
      if (!test_)
        return fail("data: " + error);
    }
  } else if (isImageData(o_.data)) {
    if (!layout_)
      return fail("--data=" + o_.data + ": " + why);
    ImageDataOptions io;
    io.mean = o_.mean;
    io.std = o_.std;
    io.seed = o_.seed;
    io.maxExamples = o_.trainExamples;
    io.skipBad = o_.skipBadImages;
    io.evalCrop = o_.evalCrop;
    io.threads = dataThreads();
    io.warn = [program = program_](const std::string& w) {
      std::fprintf(stderr, "%s: warning: %s\n", program, w.c_str());
    };
    ImageDataSet set;
    if (!openImageDataSet(o_.data, layout_->shape, io, o_.augment, o_.eval, o_.evalExamples,
                          m_.classes, set, &error))
      return fail("data: " + error);
    for (const std::string& note : set.notes)
      std::printf("%s: data: %s\n", program_, note.c_str());
    train_ = std::move(set.train);
    test_ = std::move(set.test);
    batchesPerEpoch_ = train_->batchesPerEpoch();
  } else if (o_.data.rfind("raw:", 0) == 0) {
    rawBatch_.assign(static_cast<size_t>(m_.inputBytes), 0);
    std::string dir = o_.data.substr(4);
    for (size_t k = 0; k < m_.inputs.size(); ++k) {
      std::vector<unsigned char> bytes;
      const InputInfo& in = m_.inputs[k];
      if (!readFile(dir + "/input_" + std::to_string(k) + ".bin", bytes,
                    bytesOf(in.dtype, in.shape), error))
        return fail("data: " + error);
      std::memcpy(rawBatch_.data() + in.offset, bytes.data(), bytes.size());
    }
    batchesPerEpoch_ = 1;
  } else {
    batchesPerEpoch_ = o_.syntheticBatches;
  }
  if (o_.eval && (!layout_ || !m_.eval))
    return fail("--eval: " + (m_.eval ? why : std::string("this trainer has no evaluation pass")));
  int64_t totalSteps = o_.steps ? *o_.steps : o_.epochs * batchesPerEpoch_;
  if (o_.hyper.schedule == 2 && o_.hyper.totalSteps <= 0)
    o_.hyper.totalSteps = totalSteps;

  // A device group runs the step functions of several devices, or of
  // several streams of one (deviceSteps).
  const bool multiDevice = m_.numDevices > 1 || !m_.deviceSteps.empty();
  if (cluster_)
    cluster_->setTimeout(o_.peerTimeout);
  // The first of this process's logical devices (under mpirun, rank r's).
  if (int first = multiDevice
                      ? physicalDevice(m_, cluster_, o_.devices, localDevices(m_, cluster_).first)
                      : -1;
      first >= 0)
    o_.runner.device = first;
  runner_ = createRunner(o_.runner, &error);
  if (!runner_) {
    if (m_.target == "cuda" && cluster_ && error.find("does not exist") != std::string::npos)
      return fail(error + "\n" + gpuPlacementHint(m_, *cluster_));
    if (m_.target == "cuda")
      return fail(error + "\nthis trainer was built for CUDA GPUs; to train on the CPU, build one "
                          "with `lwcc MODEL --target=cpu -o TRAINER`");
    return fail(error);
  }
  hostState_.assign(static_cast<size_t>(m_.stateBytes), 0);
  hostInputs_.assign(static_cast<size_t>(m_.inputBytes), 0);
  // Under mpirun, rank 0 alone evaluates: the others need no whole state.
  const bool evaluates = m_.eval && leader();
  if (!allocate(arena_, m_.arenaBytes, "arena", error) ||
      (leader() && !allocate(state_, m_.stateBytes, "state", error)) ||
      !allocate(inputs_, m_.inputBytes, "inputs", error) ||
      (evaluates && !allocate(evalArena_, m_.evalArenaBytes, "eval arena", error)))
    return fail(error);
  if (multiDevice && !createDevices(createGroup, error))
    return fail(error);
  buffers_ = {arena_.ptr, state_.ptr, inputs_.ptr, &o_.hyper};
  evalBuffers_ = {evalArena_.ptr, state_.ptr, inputs_.ptr, &o_.hyper};

  // Initial state: a checkpoint, or the weights.
  std::string resumePath;
  if (o_.resume == "latest" || o_.resume == "auto") {
    if (o_.checkpointDir.empty())
      return usageError(program_, "--resume without a file needs --checkpoint-dir");
    resumePath = latestCheckpoint(o_.checkpointDir);
    if (resumePath.empty() && o_.resume == "latest")
      return fail("--resume: no checkpoint in " + o_.checkpointDir);
  } else {
    resumePath = o_.resume;
  }
  if (!loadInitialState(error))
    return fail(error);
  if (!resumePath.empty()) {
    uint64_t seed = o_.seed;
    if (!resumeFrom(resumePath, error))
      return fail("resume: " + error);
    lastCheckpoint_ = startStep_;
    // The checkpoint's seed shuffles (and augments) the training set from
    // here on.
    if (train_ && o_.seed != seed)
      train_->setSeed(o_.seed);
  }
  if (cluster_ &&
      !agreeOnState(*cluster_, hostState_.data(), hostState_.size(), startStep_, o_.seed, error))
    return fail(error);
  if ((state_.ptr && !runner_->upload(state_.ptr, hostState_.data(), m_.stateBytes, &error)) ||
      (multi_ && !multi_->upload(hostState_.data(), error)))
    return fail(error);
  if ((multi_ ? !multi_->init(&o_.hyper, error)
              : !runner_->run(
                    -1, [&](std::string* e) { return m_.init(buffers_, e); }, &error)) ||
      (evaluates && !runner_->run(
                        -1, [&](std::string* e) { return m_.evalInit(evalBuffers_, e); }, &error)))
    return fail("initializing: " + error);

  ProgressOptions po;
  po.totalSteps = totalSteps;
  po.stepsPerEpoch = o_.steps ? 0 : batchesPerEpoch_;
  po.itemsPerStep = layout_ ? layout_->shape[0] : m_.inputs.empty() ? 0 : m_.inputs[0].shape[0];
  po.live = o_.progress == "live"    ? LiveMode::On
            : o_.progress == "lines" ? LiveMode::Off
                                     : LiveMode::Auto;
  po.every = o_.printEvery > 0 ? o_.printEvery : std::max<int64_t>(1, totalSteps / 20);
  progress_ =
      std::make_unique<ProgressReporter>(o_.progress == "off" || !leader() ? nullptr : stdout, po);
  if (!o_.log.empty() && leader()) {
    log_ = JsonlLogger::open(o_.log, startStep_ > 0, error);
    if (!log_)
      return fail(error);
  }
  progressItems_ = po.itemsPerStep;
  deviceCheckEvery_ = po.every;
  lossMemory_.runner = runner_.get();
  lossMemory_.ptr = runner_->allocateHost(32, &error);
  lossHost_ = static_cast<unsigned char*>(lossMemory_.ptr);
  if (!lossHost_ || !makeFeed(startStep_, std::max(totalSteps, startStep_ + 1), error))
    return fail("data: " + error);
  if (o_.dataOnly)
    return timeDataOnly(totalSteps);
  if (m_.lossScaleParam >= 0) { // the scale the first step starts from
    float v = 0;
    std::memcpy(&v, hostState_.data() + m_.params[static_cast<size_t>(m_.lossScaleParam)].offset,
                sizeof v);
    lossScale_ = v == 0 ? m_.lossScaleInit : v;
  }
  std::string perDevice; // multi-device trainers: how the batch is split
  for (int64_t n : m_.samplesPerDevice)
    perDevice += (perDevice.empty() ? " (" : "+") + std::to_string(n);
  if (!perDevice.empty())
    perDevice += " per device)";
  if (leader())
    std::printf("%s: %s on %s: %lld steps from step %lld, %lld batches of %lld%s per epoch\n",
                program_, m_.name.c_str(),
                (multi_ ? multi_->description() : runner_->description()).c_str(),
                static_cast<long long>(totalSteps), static_cast<long long>(startStep_),
                static_cast<long long>(batchesPerEpoch_), static_cast<long long>(po.itemsPerStep),
                perDevice.c_str());
  std::fflush(stdout);
  progress_->begin(startStep_);

  // The steady state: the batch was prepared ahead on the feed's threads;
  // the step is launched with its upload and the loss's copy back, and the
  // previous step is reported while it runs. The host waits for the device
  // only through the previous step's fence, before a checkpoint or an
  // evaluation, and for its error flag every print interval.
  const bool zeroCopy = runner_->readsHostMemory();
  auto started = std::chrono::steady_clock::now();
  lastFinish_ = started;
  std::optional<Launched> pending;
  int64_t lastEvalStep = -1;
  for (int64_t s = startStep_; s < totalSteps; ++s) {
    const unsigned char* batch = feed_->acquire(s, &error);
    if (!batch)
      return fail("data: " + error);
    // --profile-ops and --trace alone profile every step after the first.
    const bool timed = o_.profile > 0 || !o_.profileOps.empty() || !o_.trace.empty();
    const bool profiling =
        timed && s > startStep_ && (o_.profile == 0 || s - startStep_ <= o_.profile);
    StepBuffers marked = buffers_;
    if (zeroCopy) // the step reads the prepared batch where it is
      marked.inputs = const_cast<unsigned char*>(batch);
    StepMarks* deviceMarks = nullptr; // multi-device: a recorder per (device, stream)
    if (profiling && multi_) {
      if (!stepMarks_)
        stepMarks_.emplace(m_.numDevices, std::max(m_.streamsPerDevice, 1), started);
      else
        stepMarks_->restart(started);
      deviceMarks = &*stepMarks_;
    }
    if (profiling && !multi_) {
      marked.mark = [](void* runner, const char* op) {
        static_cast<StepRunner*>(runner)->mark(op);
      };
      marked.markContext = runner_.get();
    }
    const double markStart =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    Launched now{s, 0, lossHost_ + 16 * (s % 2)};
    unsigned char* scaleHost = const_cast<unsigned char*>(now.loss) + 8;
    unsigned char* normHost = const_cast<unsigned char*>(now.loss) + 12;
    const int scaleParam = m_.lossScaleParam, normParam = m_.gradNormParam;
    if (multi_) { // every device's functions, together
      if (!multi_->step(batch, &o_.hyper, deviceMarks, error) ||
          !multi_->downloadLossAsync(const_cast<unsigned char*>(now.loss), error) ||
          (scaleParam >= 0 && !multi_->downloadParamAsync(scaleParam, scaleHost, 4, error)) ||
          (normParam >= 0 && !multi_->downloadParamAsync(normParam, normHost, 4, error)) ||
          !multi_->fence(&now.fence, error))
        return fail("step " + std::to_string(s + 1) + ": " + error);
    } else {
      bool launched = zeroCopy || runner_->upload(inputs_.ptr, batch, m_.inputBytes, &error);
      if (launched && profiling)
        runner_->startMarks();
      launched = launched && runner_->run(
                                 profiling ? -1 : 0,
                                 [&](std::string* e) { return m_.step(marked, e); }, &error);
      if (!launched ||
          !runner_->downloadAsync(const_cast<unsigned char*>(now.loss), arena_.ptr + m_.lossOffset,
                                  dtypeSize(m_.lossType), &error) ||
          (scaleParam >= 0 &&
           !runner_->downloadAsync(scaleHost,
                                   state_.ptr + m_.params[static_cast<size_t>(scaleParam)].offset,
                                   4, &error)) ||
          (normParam >= 0 &&
           !runner_->downloadAsync(normHost,
                                   state_.ptr + m_.params[static_cast<size_t>(normParam)].offset, 4,
                                   &error)) ||
          !runner_->fence(&now.fence, &error))
        return fail("step " + std::to_string(s + 1) + ": op " + error);
    }
    if (zeroCopy)
      feed_->release(s); // the step has run
    // The marks go to the timeline as they are: tallying them (--profile)
    // waits for the end, so a profiled step costs the host little more.
    if (profiling && deviceMarks) {
      timeline_.addStep(deviceMarks->take());
      ++profiled_;
    } else if (profiling) {
      timeline_.addStep(markStart, runner_->takeMarks());
      ++profiled_;
    }
    if (pending) {
      if (std::string bad = finishStep(*pending, false); !bad.empty())
        return fail(bad);
    }
    pending = now;
    const bool checkpoint =
        !o_.checkpointDir.empty() && o_.checkpointEvery > 0 && (s + 1) % o_.checkpointEvery == 0;
    const bool evaluation = o_.eval && (s + 1) % batchesPerEpoch_ == 0;
    if (checkpoint || evaluation || s + 1 == totalSteps) {
      std::string bad = finishStep(*pending, true);
      pending.reset();
      if (!bad.empty())
        return fail(bad);
    }
    if (checkpoint && !saveCheckpoint(s + 1, error))
      return fail("checkpoint: " + error);
    if (evaluation) {
      if (!evaluate((s + 1) / batchesPerEpoch_, s + 1, error))
        return fail(error);
      lastEvalStep = s + 1;
    }
  }
  if (o_.eval && lastEvalStep != totalSteps && totalSteps > startStep_ &&
      !evaluate((totalSteps + batchesPerEpoch_ - 1) / batchesPerEpoch_, totalSteps, error))
    return fail(error);
  progress_->finish();
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  int64_t ran = std::max<int64_t>(0, totalSteps - startStep_);
  if (ran > 0 && leader())
    std::printf("%s: %lld steps in %.1f s (%.1f img/s), last loss %.6g\n", program_,
                static_cast<long long>(ran), seconds,
                static_cast<double>(ran * po.itemsPerStep) / std::max(seconds, 1e-9), lastLoss_);
  if (ran > 0 && leader() && m_.lossScaleParam >= 0)
    std::printf("%s: fp16: %lld of %lld steps skipped for overflowing gradients; loss scale %.9g\n",
                program_, static_cast<long long>(skippedSteps_), static_cast<long long>(ran),
                lossScale_);
  printProfile();
  if (!o_.profileOps.empty() && !timeline_.writeProfile(o_.profileOps, runner_->description(),
                                                        std::max(m_.numDevices, 1), &error))
    return fail(error);
  if (!o_.trace.empty() && !timeline_.writeTrace(o_.trace, &error))
    return fail(error);
  if (!o_.checkpointDir.empty() && lastCheckpoint_ != totalSteps &&
      !saveCheckpoint(totalSteps, error))
    return fail("checkpoint: " + error);
  if (!o_.exportPath.empty()) {
    if (!writeExport(error))
      return fail("export: " + error);
    if (leader())
      std::printf("%s: exported the trained model to %s\n", program_, o_.exportPath.c_str());
  }
  if (!o_.dump.empty() && !dump(error))
    return fail("dump: " + error);
  if (log_ && !log_->ok())
    return fail(o_.log + ": cannot write the log");
  return 0;
}

} // namespace

int trainerMain(int argc, char** argv, const ModelInfo& m, RunnerFactory createRunner) {
  return trainerMain(argc, argv, m, createRunner, nullptr);
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
          !isImageData(o.data))
        return bad("is synthetic, idx:DIR, folder:DIR, cifar10:DIR or raw:DIR");
      if (isImageData(o.data) && o.data.back() == ':')
        return bad("names no folder");
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
      o.runner.cudnnBenchmark = true;
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

int trainerMain(int argc, char** argv, const ModelInfo& m, RunnerFactory createRunner,
                GroupFactory createGroup) {
  // Under mpirun (more than one rank): MPI, and the check that every rank
  // runs this trainer with these flags; a plain run starts no MPI.
  std::unique_ptr<Cluster> cluster;
  if (int status = startProcesses(argc, argv, m, cluster); status != 0)
    return status;
  std::string why;
  int status = parseAndRun(argc, argv, m, createRunner, createGroup, cluster.get(), why);
  return endProcesses(cluster.get(), argc > 0 ? argv[0] : "trainer", status, why);
}

} // namespace lwrt
