// The trainer's main loop around the generated phases: buffers, data, the
// steps with progress and the JSONL log, and the checks that stop a run with
// a clear message (exit 1) instead of training on garbage. The flags are in
// TrainerFlags.cpp, evaluation in TrainerEval.cpp, weights, resume,
// checkpoints and export in TrainerCheckpoint.cpp.
#include "Trainer.h"

#include "Processes.h"
#include "lwrt/autotune.h"
#include "lwrt/checkpoint.h"
#include "lwrt/image_data.h"
#include "lwrt/lr_schedule.h"
#include "lwrt/npy.h"
#include "lwrt/tokens.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace lwrt::trainer {

bool isImageData(const std::string& data) {
  return data.rfind("folder:", 0) == 0 || data.rfind("cifar10:", 0) == 0;
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

namespace {

/// The learning rate of `step` (steps completed before it), as the
/// generated lr_schedule computes it; for the log.
double scheduledLr(const Hyper& h, int64_t s) {
  return lwrt::scheduledLr(LrScheduleParams{static_cast<LrScheduleKind>(h.schedule), h.lr,
                                            h.warmupSteps, h.totalSteps, h.stepSize, h.gamma,
                                            h.minLr},
                           s);
}

} // namespace

bool Trainer::allocate(DeviceBuffer& b, int64_t bytes, const char* what, std::string& error) {
  b.runner = runner_.get();
  b.ptr = static_cast<unsigned char*>(runner_->allocate(bytes, &error));
  if (!b.ptr)
    error = std::string(what) + ": " + error;
  return b.ptr != nullptr;
}

std::vector<MemoryRecord> Trainer::measureMemory() const {
  std::vector<MemoryRecord> records;
  if (!leader())
    return records;
  const int64_t ema = o_.ema > 0 ? 1 : 0;
  if (!multi_) {
    MemoryRecord r;
    r.devices = {0};
    r.physical = o_.runner.device;
    r.arenaBytes = m_.arenaBytes;
    r.stateBytes = m_.stateBytes;
    // The batch, the evaluation's arena and the moving average.
    r.otherBytes = m_.inputBytes + (evalArena_.ptr && !evalInArena_ ? m_.evalArenaBytes : 0) +
                   ema * m_.stateBytes;
    r.measuredBytes = runner_->memoryInUse();
    records.push_back(r);
  } else {
    // Logical devices that share a GPU are measured together, by the
    // runner that opened it first.
    const LocalDevices& here = multi_->local();
    for (int d = here.first; d < here.first + here.count; ++d) {
      const auto dd = static_cast<size_t>(d);
      MemoryRecord* r = nullptr;
      for (MemoryRecord& x : records)
        if (x.physical == multi_->physical(d))
          r = &x;
      if (!r) {
        records.emplace_back();
        r = &records.back();
        r->physical = multi_->physical(d);
        r->measuredBytes = multi_->runner(d)->memoryInUse();
      }
      r->devices.push_back(d);
      r->arenaBytes += m_.deviceArenaBytes[dd];
      r->stateBytes += m_.deviceStateBytes[dd];
      // Each device's rows of the batch (the CPU's read the host's) and
      // its moving average.
      r->otherBytes += (multi_->runner(d)->readsHostMemory() ? 0 : deviceInputBytes(m_, d)) +
                       ema * m_.deviceStateBytes[dd] + (d == here.first ? m_.arenaBytes : 0);
    }
  }
  return records;
}

void Trainer::reportMemory(const std::vector<MemoryRecord>& records) {
  for (const MemoryRecord& r : records) {
    if (log_)
      log_->memory(r);
    if (o_.progress == "off")
      continue;
    // Appended piece by piece: GCC 12's -O3 misreads `"," + std::string`
    // (a -Wrestrict false positive).
    std::string devices;
    for (int64_t d : r.devices) {
      if (!devices.empty())
        devices += ',';
      devices += std::to_string(d);
    }
    const int64_t planned = r.arenaBytes + r.stateBytes;
    std::printf("%s: memory of device%s %s: planned %lld bytes (arena %lld, params and state "
                "%lld), other buffers %lld",
                program_, r.devices.size() > 1 ? "s" : "", devices.c_str(),
                static_cast<long long>(planned), static_cast<long long>(r.arenaBytes),
                static_cast<long long>(r.stateBytes), static_cast<long long>(r.otherBytes));
    if (r.measuredBytes >= 0)
      std::printf("; in use %lld, measured (%+.1f%% of planned and other)",
                  static_cast<long long>(r.measuredBytes),
                  100.0 * static_cast<double>(r.measuredBytes - planned - r.otherBytes) /
                      static_cast<double>(std::max<int64_t>(1, planned + r.otherBytes)));
    std::printf("\n");
  }
}

void Trainer::releaseBuffer(DeviceBuffer& b) {
  if (b.runner && b.ptr)
    b.runner->release(b.ptr);
  b.ptr = nullptr;
}

bool Trainer::openTokenData(std::string& error) {
  TokenDataOptions to;
  to.seed = o_.seed;
  to.vocab = m_.classes; // the softmax cross-entropy's classes: the vocabulary
  to.maxExamples = o_.trainExamples;
  const std::string pattern = o_.data.substr(7);
  auto train = TokenWindows::open(pattern, m_.inputs, to, &error);
  if (!train)
    return false;
  std::string line = "tokens: " + std::to_string(train->numExamples()) + " training windows of " +
                     std::to_string(train->windowTokens()) + " tokens (" + pattern + ": " +
                     std::to_string(train->shards().size()) + " shard(s), " +
                     std::to_string(train->totalTokens()) + " tokens)";
  train_ = std::move(train);
  if (o_.eval && leader()) { // under mpirun rank 0 alone evaluates
    const std::string val =
        o_.evalData.empty() ? validationPattern(pattern) : o_.evalData.substr(7);
    if (val.empty()) {
      error = "--eval with --data=tokens:" + pattern + " needs --eval-data=tokens:PATH (no " +
              "'train' in the file name to name the validation shards by)";
      return false;
    }
    to.shuffle = false;
    to.maxExamples = o_.evalExamples;
    auto test = TokenWindows::open(val, m_.inputs, to, &error);
    if (!test)
      return false;
    line += ", " + std::to_string(test->numExamples()) + " validation windows (" + val + ")";
    test_ = std::move(test);
  }
  if (leader())
    std::printf("%s: data: %s\n", program_, line.c_str());
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
    const int64_t perEpoch = batchesPerEpoch_;
    const InputBatches* train = train_.get();
    // Under mpirun, the samples this process's devices read.
    const std::pair<int64_t, int64_t> rows = localInputRows(m_, cluster_, train->batchSize());
    feed_ = createPrefetchFeed(
        *runner_, bytes,
        [perEpoch, train, rows](int64_t step, unsigned char* dst, std::string* error) {
          DataSource::Position p{static_cast<uint64_t>(step / perEpoch),
                                 static_cast<uint64_t>(step % perEpoch)};
          return train->batch(p, dst, error, rows);
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
  if (log_ || tb_) {
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
    if (log_)
      log_->step(r);
    if (tb_)
      tb_->step(r);
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
  // Image loaders write the classifier's image and label inputs.
  const std::optional<ImageLayout> layout = imageLayout(m_, why);
  if (o_.data.rfind("idx:", 0) == 0) {
    if (!layout)
      return fail("--data=idx: " + why);
    IdxOptions io;
    io.seed = o_.seed;
    io.classes = m_.classes;
    io.maxExamples = o_.trainExamples;
    auto train = IdxData::open(o_.data.substr(4), "train", layout->shape, io, &error);
    if (!train)
      return fail("data: " + error);
    train_ = imageBatches(*layout, std::move(train));
    if (o_.eval && leader()) { // under mpirun rank 0 alone evaluates
      io.shuffle = false;
      io.maxExamples = o_.evalExamples;
      auto test = IdxData::open(o_.data.substr(4), "t10k", layout->shape, io, &error);
      if (!test)
        return fail("data: " + error);
      test_ = imageBatches(*layout, std::move(test));
    }
  } else if (o_.data.rfind("npy:", 0) == 0) {
    NpyInputOptions no;
    no.seed = o_.seed;
    no.classes = m_.classes;
    if (m_.hasIgnoreIndex)
      no.ignoreIndex = m_.ignoreIndex;
    no.maxExamples = o_.trainExamples;
    auto train = NpyInputs::open(o_.data.substr(4), "train", m_.inputs, no, &error);
    if (!train)
      return fail("data: " + error);
    std::vector<std::string> trainFiles = train->files(), testFiles;
    train_ = std::move(train);
    if (o_.eval && leader()) {
      no.shuffle = false;
      no.maxExamples = o_.evalExamples;
      auto test = NpyInputs::open(o_.data.substr(4), "test", m_.inputs, no, &error);
      if (!test)
        return fail("data: " + error);
      testFiles = test->files();
      test_ = std::move(test);
    }
    if (leader()) {
      std::string line = "npy: " + std::to_string(train_->numExamples()) + " training examples (";
      for (size_t k = 0; k < trainFiles.size(); ++k)
        line += (k ? ", " : "") + trainFiles[k];
      line += ")";
      if (test_)
        line += ", " + std::to_string(test_->numExamples()) + " test examples";
      std::printf("%s: data: %s\n", program_, line.c_str());
    }
  } else if (o_.data.rfind("tokens:", 0) == 0) {
    if (m_.shiftLabels)
      return fail("--data=" + o_.data +
                  ": token data's labels are the next tokens already, and "
                  "this trainer (lwcc --shift-labels) would shift them again: compile it "
                  "without --shift-labels for token data");
    if (!openTokenData(error))
      return fail("data: " + error);
  } else if (isImageData(o_.data)) {
    if (!layout)
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
    if (!openImageDataSet(o_.data, layout->shape, io, o_.augment, o_.eval, o_.evalExamples,
                          m_.classes, set, &error))
      return fail("data: " + error);
    for (const std::string& note : set.notes)
      std::printf("%s: data: %s\n", program_, note.c_str());
    train_ = imageBatches(*layout, std::move(set.train));
    if (set.test)
      test_ = imageBatches(*layout, std::move(set.test));
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
  if (train_)
    batchesPerEpoch_ = train_->batchesPerEpoch();
  if (o_.eval) {
    if (!m_.eval)
      return fail("--eval: this trainer has no evaluation pass");
    if (std::string bad = evaluationProblem(); !bad.empty())
      return fail("--eval: " + bad);
  }
  int64_t totalSteps = o_.steps ? *o_.steps : o_.epochs * batchesPerEpoch_;
  if (o_.hyper.schedule == 2 && o_.hyper.totalSteps <= 0)
    o_.hyper.totalSteps = totalSteps;

  // A device group runs the step functions of several devices, or of
  // several streams of one (deviceSteps).
  const bool multiDevice = m_.numDevices > 1 || !m_.deviceSteps.empty();
  if (cluster_)
    cluster_->setTimeout(o_.peerTimeout);
  // The first of this process's logical devices (under mpirun, rank r's).
  const int firstLocal = multiDevice ? localDevices(m_, cluster_).first : 0;
  if (int first = multiDevice ? physicalDevice(m_, cluster_, o_.devices, firstLocal) : -1;
      first >= 0)
    o_.runner.device = first;
  o_.runner.convWorkspaceBytes = m_.convWorkspaceFor(firstLocal);
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
  // A multi-device trainer's devices hold their own state, arenas and
  // batches: the whole state, the evaluation's arena and its batch go on
  // device 0 only while it evaluates (evaluate()), so that a model sharded
  // over the devices does not also need all of itself on device 0 to train.
  // One device evaluates (--eval) in its training arena where the
  // evaluation's fits (a forward pass of the same batch: nearly always),
  // since the two never run at once: evaluate() writes the evaluation's
  // constants first and the step's again after it. Else in an arena of
  // its own, set up only for --eval.
  const bool evaluates = o_.eval && m_.eval && leader() && !multiDevice;
  evalInArena_ = evaluates && m_.evalArenaBytes <= m_.arenaBytes;
  if (!allocate(arena_, m_.arenaBytes, "arena", error) ||
      (leader() && !multiDevice && !allocate(state_, m_.stateBytes, "state", error)) ||
      ((!multiDevice || o_.dataOnly) && !allocate(inputs_, m_.inputBytes, "inputs", error)) ||
      (evaluates && !evalInArena_ && !allocate(evalArena_, m_.evalArenaBytes, "eval arena", error)))
    return fail(error);
  if (evalInArena_)
    evalArena_.ptr = arena_.ptr; // a view (no runner: arena_ owns it)
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
  if (o_.ema > 0 && hostEma_.empty()) // not resumed: the average starts at the params
    hostEma_ = hostState_;
  if (!setUpEma(error))
    return fail(error);
  if ((multi_ ? !multi_->init(&o_.hyper, error)
              : !runner_->run(
                    -1, [&](std::string* e) { return m_.init(buffers_, e); }, &error)) ||
      (evaluates && !evalInArena_ &&
       !runner_->run(
           -1, [&](std::string* e) { return m_.evalInit(evalBuffers_, e); }, &error)))
    return fail("initializing: " + error);

  ProgressOptions po;
  po.totalSteps = totalSteps;
  po.stepsPerEpoch = o_.steps ? 0 : batchesPerEpoch_;
  po.itemsPerStep = train_ ? train_->batchSize() : m_.inputs.empty() ? 0 : m_.inputs[0].shape[0];
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
  if (!o_.tensorboard.empty() && leader() &&
      !(tb_ = TensorBoardWriter::open(o_.tensorboard, error)))
    return fail(error);
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
    int64_t stepCalls = 0; // one device's runtime calls this step (--profile)
    if (zeroCopy)          // the step reads the prepared batch where it is
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
      marked.calls = &stepCalls;
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
    if (o_.ema > 0 && !updateEma(s, error))
      return fail("step " + std::to_string(s + 1) + ": " + error);
    if (zeroCopy)
      feed_->release(s); // the step has run
    // The marks go to the timeline as they are: tallying them (--profile)
    // waits for the end, so a profiled step costs the host little more.
    if (profiling && deviceMarks) {
      timeline_.addStep(deviceMarks->take());
      ++profiled_;
    } else if (profiling) {
      timeline_.addStep(markStart, runner_->takeMarks(), stepCalls);
      ++profiled_;
    }
    if (pending) {
      if (std::string bad = finishStep(*pending, false); !bad.empty())
        return fail(bad);
    }
    pending = now;
    stepOutputs_.clear(); // arena_ holds this step's outputs
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
  // Measured before the last evaluation sets up its buffers.
  std::vector<MemoryRecord> memory;
  if (totalSteps > startStep_)
    memory = measureMemory();
  if (o_.eval && lastEvalStep != totalSteps && totalSteps > startStep_ &&
      !evaluate((totalSteps + batchesPerEpoch_ - 1) / batchesPerEpoch_, totalSteps, error))
    return fail(error);
  progress_->finish();
  reportMemory(memory);
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
  if (leader() && autotuneCache().timed() > 0)
    std::printf("%s: autotune: %d choices made by timing the candidates, kept in %s for later "
                "runs and resumes\n",
                program_, autotuneCache().timed(), autotuneCache().path().c_str());
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
  if (tb_ && !tb_->ok())
    return fail(tb_->path() + ": cannot write the TensorBoard events");
  return 0;
}

} // namespace lwrt::trainer
