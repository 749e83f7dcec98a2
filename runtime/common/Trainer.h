// The trainer's main loop, split by concern: Trainer.cpp (the data, the
// step loop, run), TrainerFlags.cpp (the flags and trainerMain),
// TrainerEval.cpp (evaluation and the profile report),
// TrainerCheckpoint.cpp (initial weights, resume, checkpoints, export,
// dump) and TrainerEma.cpp (the params' moving average, --ema). This header holds what they share:
// the options and the class.
#pragma once

#include "Cluster.h"
#include "MultiDevice.h"
#include "TensorBoard.h"
#include "lwrt/checkpoint.h"
#include "lwrt/data.h"
#include "lwrt/feed.h"
#include "lwrt/profile.h"
#include "lwrt/progress.h"
#include "lwrt/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace lwrt::trainer {

/// The trainer's flags, parsed (TrainerFlags.cpp).
struct Options {
  std::string data = "synthetic";
  std::string evalData;         ///< --eval-data=tokens:PATH (token data's validation shards)
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
  std::string tensorboard; ///< --tensorboard: the event files' folder
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
  /// --ema=DECAY: the params' moving average (0: none); --ema-warmup,
  /// --eval-ema, --export-ema.
  double ema = 0;
  bool emaWarmup = false, evalEma = false, exportEma = false;
};

/// A usage error: the problem and the usage on stderr (rank 0 alone under
/// mpirun); returns 2.
int usageError(const char* program, const std::string& problem);
/// --data=folder:DIR or cifar10:DIR.
bool isImageData(const std::string& data);
int64_t bytesOf(DType t, const std::vector<int64_t>& shape);
int64_t numelOf(const std::vector<int64_t>& shape);
/// The whole file; `expected` its size in bytes, or -1 for any.
bool readFile(const std::string& path, std::vector<unsigned char>& out, int64_t expected,
              std::string& error);

/// Device memory that releases itself.
struct DeviceBuffer {
  StepRunner* runner = nullptr;
  unsigned char* ptr = nullptr;
  ~DeviceBuffer() {
    if (runner && ptr)
      runner->release(ptr);
  }
};

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
  /// Gives `b`'s memory back (after the work launched so far has run).
  void releaseBuffer(DeviceBuffer& b);
  /// After the last step: each device's memory as planned (arena, params
  /// and state), the trainer's other buffers on it (the batch, the moving
  /// average) and what the backend measures in use (the leader's devices).
  std::vector<MemoryRecord> measureMemory() const;
  /// The records on stdout unless --progress=off, and in the log.
  void reportMemory(const std::vector<MemoryRecord>& records);
  bool loadInitialState(std::string& error);
  bool resumeFrom(const std::string& path, std::string& error);
  /// --data=tokens:PATH: train_, and test_ for --eval (the validation shards).
  bool openTokenData(std::string& error);
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
  /// Why --eval cannot evaluate this model, or "": it evaluates a
  /// classifier (a softmax cross-entropy loss: logits [N, classes] against
  /// its label input) or a regression (mse: the output against its target
  /// input, of the same size).
  std::string evaluationProblem() const;
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

  // --ema (TrainerEma.cpp): the params' moving average, in a second state
  // buffer laid out as the state (one per device).
  /// Allocates it and uploads hostEma_ (the initial params, or a resumed
  /// checkpoint's average); --eval-ema points the evaluation at it.
  bool setUpEma(std::string& error);
  /// After step `s` (0-based) is launched: ema += (1 - decay) * (params - ema).
  bool updateEma(int64_t s, std::string& error);
  /// The average's host image into hostEma_.
  bool downloadEma(std::string& error);
  /// The checkpoint tensors of the average ("ema/" + param name).
  void emaTensors(std::vector<NamedTensor>& tensors) const;
  /// hostEma_ from a checkpoint's "ema/" tensors (from hostState_ when it
  /// has none); false with `error` when one does not fit.
  bool resumeEma(const Checkpoint& c, const std::string& path, std::string& error);

  const char* program_;
  const ModelInfo& m_;
  Options o_;
  Cluster* cluster_ = nullptr; ///< under mpirun
  std::string lastError_;
  RunnerFactory createRunner_ = nullptr;
  std::unique_ptr<StepRunner> runner_;
  DeviceBuffer arena_, evalArena_, state_, inputs_;
  /// One device's evaluation runs in arena_ (evalArena_ a view of it).
  bool evalInArena_ = false;
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
  /// --ema: the averaged params (by index in m_.params), the ranges of the
  /// one-device state they cover, the device buffer and its host image.
  std::vector<bool> averaged_;
  std::vector<StateRange> emaRanges_;
  DeviceBuffer ema_;
  std::vector<unsigned char> hostEma_;
  StepBuffers buffers_{}, evalBuffers_{};
  std::unique_ptr<InputBatches> train_, test_;
  std::vector<unsigned char> rawBatch_;
  int64_t batchesPerEpoch_ = 1;
  int64_t startStep_ = 0;
  std::unique_ptr<ProgressReporter> progress_;
  std::unique_ptr<JsonlLogger> log_;
  std::unique_ptr<TensorBoardWriter> tb_; ///< --tensorboard
  std::vector<float> evalLogits_;         ///< of the first batch of the last evaluation
  /// The last step's outputs (--dump), kept by an evaluation in arena_
  /// since that step; empty when arena_ holds them.
  std::vector<std::vector<unsigned char>> stepOutputs_;
  int64_t lastCheckpoint_ = -1;
  int64_t profiled_ = 0;
  OpTimeline timeline_; ///< the profiled steps' marks (--profile, --profile-ops, --trace)
  std::optional<StepMarks> stepMarks_; ///< multi-device: reused by every profiled step
  void printProfile();
  /// Last: its threads read the data sources and the runner's memory, so it
  /// goes first.
  std::unique_ptr<BatchFeed> feed_;
};

} // namespace lwrt::trainer
