// The CUDA backend's step runner: device memory from cudaMalloc, copies and
// phases on the stream of the runner's own context (made current around each
// call, so that several runners on several GPUs share a thread), and each
// phase of a key >= 0 recorded once into a CUDA graph (after a first direct
// run that searches algorithms and sizes the workspace) and replayed from
// then on. A negative key runs its phase directly every time (the one-off
// init phases, profiled steps whose per-op events must be recorded live). A
// phase recorded before a workspace was replaced is recorded again
// (Context.h).
//
// A recording that fails (a cuDNN engine or cuBLAS refusing stream capture,
// an instantiation CUDA turns down) is not an error of the step: nothing it
// recorded ran, so the runner says so once on stderr and from then on runs
// that phase directly, starting with this call.
//
// Uploads: a batch in page-locked memory of allocateHost goes to the GPU on
// a copy stream of its own, into one of two staging buffers, so that the
// next step's batch crosses PCIe while the current step computes; the
// step's stream then waits for it and copies it into place (a device copy,
// some 50 us for AlexNet's 77 MB batch where the host copy takes 3 ms).
#include "cuda/Context.h"
#include "cuda/EmaKernels.cuh"
#include "lwrt/nvtx.h"
#include "lwrt/trainer.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

namespace lwrt::cuda {

namespace {

std::string describe(cudaError_t st, const char* call) {
  return std::string(call) + ": " + cudaGetErrorString(st);
}

/// The live runners' contexts (Comm.cu's groups find theirs here).
std::mutex registryMutex;
std::map<const StepRunner*, Context*>& registry() {
  static auto* runners = new std::map<const StepRunner*, Context*>();
  return *runners;
}

class CudaRunner final : public StepRunner {
public:
  CudaRunner(const RunnerOptions& options, std::string name, std::unique_ptr<Context> ctx,
             int64_t usedBefore)
      : options_(options), name_(std::move(name)), ctx_(std::move(ctx)), usedBefore_(usedBefore) {
    std::lock_guard<std::mutex> lock(registryMutex);
    registry()[this] = ctx_.get();
  }
  ~CudaRunner() override {
    {
      std::lock_guard<std::mutex> lock(registryMutex);
      registry().erase(this);
    }
    ContextScope scope(*ctx_);
    for (cudaEvent_t e : events_)
      cudaEventDestroy(e);
    for (cudaEvent_t e : fences_)
      cudaEventDestroy(e);
    if (copyStream_)
      cudaStreamSynchronize(copyStream_);
    for (Stage& st : stages_) {
      if (st.filled)
        cudaEventDestroy(st.filled);
      if (st.drained)
        cudaEventDestroy(st.drained);
      if (st.buffer)
        cudaFree(st.buffer);
    }
    if (copyStream_)
      cudaStreamDestroy(copyStream_);
    for (auto& [key, phase] : phases_) {
      if (phase.exec)
        cudaGraphExecDestroy(phase.exec);
      if (phase.graph)
        cudaGraphDestroy(phase.graph);
    }
    if (primaryContext() == ctx_.get())
      setPrimaryContext(nullptr);
    destroyContext(*ctx_);
  }

  std::string description() const override { return name_; }
  std::string notes() const override {
    const Context& c = *ctx_;
    std::string notes = "cuDNN convolution plans: " + std::to_string(c.convPlansGraph) +
                        " on the graph API, " + std::to_string(c.convPlansLegacy) +
                        " on the legacy API";
    if (c.convPlansFused > 0)
      notes += " (" + std::to_string(c.convPlansFused) +
               " forward ones with their bias and ReLU in the plan)";
    if (c.convGraphFailures > 0)
      notes += " (" + std::to_string(c.convGraphFailures) +
               " of them after the graph API failed; first: " + c.convGraphFailure + ")";
    if (c.convPlansGraph + c.convPlansLegacy > 0)
      notes += "; convolution algorithm workspaces up to " + std::to_string(c.convWorkspaceMost) +
               " bytes (allowed: " + std::to_string(c.convWorkspaceLimit) + ")";
    // How the convolutions' algorithms were chosen (none: nothing to say).
    if (c.convPlansGraph + c.convPlansLegacy > 0 && c.autotuneCache)
      notes += "; autotune cache " + autotuneCache().path() + ": " +
               std::to_string(autotuneCache().found()) + " choices read, " +
               std::to_string(autotuneCache().timed()) + " timed and added";
    else if (c.convPlansGraph + c.convPlansLegacy > 0)
      notes += c.timeAlgorithms ? "; algorithms timed in this run (--autotune=timed)"
                                : "; algorithms from cuDNN's heuristics (--autotune=off)";
    if (rerecorded_ > 0)
      notes +=
          "; CUDA graphs recorded again after a workspace grew: " + std::to_string(rerecorded_);
    if (!captureFailure_.empty())
      notes += "; CUDA graphs off (recording failed: " + captureFailure_ + ")";
    return notes;
  }

  int64_t memoryInUse() const override {
    ContextScope scope(*ctx_);
    size_t freeBytes = 0, total = 0;
    if (usedBefore_ < 0 || cudaMemGetInfo(&freeBytes, &total) != cudaSuccess)
      return -1;
    return static_cast<int64_t>(total - freeBytes) - usedBefore_;
  }
  void* allocate(int64_t bytes, std::string* error) override {
    ContextScope scope(*ctx_);
    void* p = nullptr;
    size_t n = static_cast<size_t>(std::max<int64_t>(bytes, 1));
    // Zeroed on the context's stream, where every later copy and kernel on
    // this memory goes (the legacy default stream would not order them).
    cudaError_t st = cudaMalloc(&p, n);
    if (st == cudaSuccess)
      st = cudaMemsetAsync(p, 0, n, ctx_->stream);
    if (st != cudaSuccess) {
      if (error)
        *error = "cannot allocate " + std::to_string(bytes) +
                 " bytes of GPU memory: " + cudaGetErrorString(st);
      if (p)
        cudaFree(p);
      return nullptr;
    }
    return p;
  }
  void release(void* memory) override {
    ContextScope scope(*ctx_);
    if (memory)
      cudaFree(memory);
  }
  bool upload(void* dst, const void* src, int64_t bytes, std::string* error) override {
    ContextScope scope(*ctx_);
    if (bytes >= kStagedUploadBytes && pinned(src, bytes))
      return stagedUpload(dst, src, static_cast<size_t>(bytes), error);
    cudaError_t st =
        cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, ctx_->stream);
    return check(st, "cudaMemcpyAsync (to the GPU)", error);
  }
  bool download(void* dst, const void* src, int64_t bytes, std::string* error) override {
    ContextScope scope(*ctx_);
    cudaError_t st =
        cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, ctx_->stream);
    if (!check(st, "cudaMemcpyAsync (from the GPU)", error))
      return false;
    return check(cudaStreamSynchronize(ctx_->stream), "cudaStreamSynchronize", error);
  }

  void* allocateHost(int64_t bytes, std::string* error) override {
    ContextScope scope(*ctx_);
    void* p = nullptr;
    size_t n = static_cast<size_t>(std::max<int64_t>(bytes, 1));
    cudaError_t st = cudaHostAlloc(&p, n, cudaHostAllocPortable);
    if (st != cudaSuccess) {
      if (error)
        *error = "cannot allocate " + std::to_string(bytes) +
                 " bytes of page-locked host memory: " + cudaGetErrorString(st);
      return nullptr;
    }
    std::memset(p, 0, n);
    std::lock_guard<std::mutex> lock(pinnedMutex_);
    pinned_[static_cast<const char*>(p)] = n;
    return p;
  }
  void releaseHost(void* memory) override {
    ContextScope scope(*ctx_);
    if (!memory)
      return;
    {
      std::lock_guard<std::mutex> lock(pinnedMutex_);
      pinned_.erase(static_cast<const char*>(memory));
    }
    cudaFreeHost(memory);
  }
  bool downloadAsync(void* dst, const void* src, int64_t bytes, std::string* error) override {
    ContextScope scope(*ctx_);
    cudaError_t st =
        cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, ctx_->stream);
    return check(st, "cudaMemcpyAsync (from the GPU)", error);
  }
  // Fences: a ring of events; a fence whose event was recorded again since
  // waits for the later work too, which is safe.
  bool fence(int64_t* id, std::string* error) override {
    ContextScope scope(*ctx_);
    size_t k = static_cast<size_t>(nextFence_ % kFenceRing);
    if (fences_.size() <= k) {
      cudaEvent_t e;
      if (!check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate", error))
        return false;
      fences_.push_back(e);
    }
    if (!check(cudaEventRecord(fences_[k], ctx_->stream), "cudaEventRecord", error))
      return false;
    *id = nextFence_++;
    return true;
  }
  bool waitFence(int64_t id, std::string* error) override {
    ContextScope scope(*ctx_);
    if (id < 0 || id >= nextFence_)
      return true;
    return check(cudaEventSynchronize(fences_[static_cast<size_t>(id % kFenceRing)]),
                 "cudaEventSynchronize", error);
  }

  bool emaUpdate(void* ema, const void* value, int64_t count, DType type, double weight,
                 std::string* error) override {
    ContextScope scope(*ctx_);
    std::string why;
    if (launched(emaLerp(ema, value, count, type, weight), &why))
      return true;
    if (error)
      *error = "the weights' moving average" + (why.rfind(": ", 0) == 0 ? why : ": " + why);
    return false;
  }

  bool run(int key, const std::function<bool(std::string*)>& launch, std::string* error) override {
    ContextScope scope(*ctx_);
    Context& c = *ctx_;
    if (key < 0 || !options_.graphs)
      return launched(launch(error), error);
    Phase& phase = phases_[key];
    if (phase.runs++ == 0 || phase.direct)
      return launched(launch(error), error);
    if (phase.exec && phase.generation != c.workspaceGeneration) {
      ++rerecorded_;
      cudaGraphExecDestroy(phase.exec);
      cudaGraphDestroy(phase.graph);
      phase.exec = nullptr;
      phase.graph = nullptr;
    }
    if (!phase.exec && !record(phase, launch)) {
      // Nothing of the step ran: run it directly, now and from now on.
      phase.direct = true;
      return launched(launch(error), error);
    }
    return check(cudaGraphLaunch(phase.exec, c.stream), "cudaGraphLaunch", error);
  }

  std::string takeDeviceError() override {
    ContextScope scope(*ctx_);
    Context& c = *ctx_;
    int flag = 0;
    cudaError_t st =
        cudaMemcpyAsync(&flag, c.errorFlag, sizeof(int), cudaMemcpyDeviceToHost, c.stream);
    if (st == cudaSuccess)
      st = cudaStreamSynchronize(c.stream);
    if (st != cudaSuccess)
      return describe(st, "reading the device error flag");
    if (flag == kNoDeviceError)
      return "";
    cudaMemsetAsync(c.errorFlag, 0, sizeof(int), c.stream);
    return flag == kLabelOutOfRange   ? "a label is outside the model's classes"
           : flag == kIndexOutOfRange ? "a gather index is out of range"
           : flag == kIntegerDivision
               ? "an integer division by zero (or of the smallest value by -1)"
               : "device error " + std::to_string(flag);
  }

  void startMarks() override {
    ContextScope scope(*ctx_);
    labels_.clear();
    used_ = 0;
    record();
  }
  void mark(const char* op) override {
    ContextScope scope(*ctx_);
    labels_.push_back(op);
    record();
  }
  std::vector<std::pair<const char*, double>> takeMarks() override {
    ContextScope scope(*ctx_);
    std::vector<std::pair<const char*, double>> out;
    if (used_ == 0 || cudaEventSynchronize(events_[used_ - 1]) != cudaSuccess)
      return out;
    for (size_t k = 0; k < labels_.size() && k + 1 < used_; ++k) {
      float ms = 0;
      cudaEventElapsedTime(&ms, events_[k], events_[k + 1]);
      out.emplace_back(labels_[k], ms);
    }
    return out;
  }

private:
  struct Phase {
    int runs = 0;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    uint64_t generation = 0; ///< the workspace generation it was recorded with
    bool direct = false;     ///< its recording failed: run directly
  };

  /// Records `launch` into the phase's graph. False, after saying once on
  /// stderr why, when the recording or its instantiation fails; the error
  /// state that left behind is cleared (no work of the phase ran).
  bool record(Phase& phase, const std::function<bool(std::string*)>& launch) {
    Context& c = *ctx_;
    phase.generation = c.workspaceGeneration;
    std::string why;
    cudaError_t st = cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeThreadLocal);
    if (st == cudaSuccess) {
      c.capturing = true;
      std::string failed;
      bool ok = launch(&failed);
      c.capturing = false;
      // A phase that failed on another of its streams ends the capture on
      // the stream it began on.
      if (c.current != 0 && !setStream(0) && ok)
        ok = false, failed = "returning to stream 0";
      cudaGraph_t graph = nullptr;
      st = cudaStreamEndCapture(c.stream, &graph);
      if (!ok)
        why = (failed.empty() ? std::string("an op") : failed) +
              (c.error.empty() ? "" : ": " + c.error);
      else if (st != cudaSuccess)
        why = describe(st, "cudaStreamEndCapture");
      else if ((st = cudaGraphInstantiate(&phase.exec, graph, 0)) != cudaSuccess)
        why = describe(st, "cudaGraphInstantiate");
      if (why.empty()) {
        phase.graph = graph;
        return true;
      }
      if (graph)
        cudaGraphDestroy(graph);
      phase.exec = nullptr;
    } else {
      why = describe(st, "cudaStreamBeginCapture");
    }
    c.error.clear();
    (void)cudaGetLastError(); // a refused capture's error is not sticky
    if (captureFailure_.empty()) {
      captureFailure_ = why;
      std::fprintf(stderr,
                   "warning: the step could not be recorded as a CUDA graph (%s); it runs "
                   "without CUDA graphs from now on\n",
                   why.c_str());
    }
    return false;
  }

  /// Whether [p, p + bytes) lies in page-locked memory of allocateHost.
  bool pinned(const void* p, int64_t bytes) {
    const char* q = static_cast<const char*>(p);
    std::lock_guard<std::mutex> lock(pinnedMutex_);
    auto it = pinned_.upper_bound(q);
    if (it == pinned_.begin())
      return false;
    --it;
    return q + bytes <= it->first + it->second;
  }

  /// The batch through a staging buffer on the copy stream (see the top).
  bool stagedUpload(void* dst, const void* src, size_t bytes, std::string* error) {
    Context& c = *ctx_;
    if (!copyStream_ && !check(cudaStreamCreateWithFlags(&copyStream_, cudaStreamNonBlocking),
                               "cudaStreamCreate", error))
      return false;
    Stage& st = stages_[nextStage_];
    nextStage_ = 1 - nextStage_;
    if (!st.filled && (!check(cudaEventCreateWithFlags(&st.filled, cudaEventDisableTiming),
                              "cudaEventCreate", error) ||
                       !check(cudaEventCreateWithFlags(&st.drained, cudaEventDisableTiming),
                              "cudaEventCreate", error)))
      return false;
    if (st.bytes < bytes) {
      // In-flight copies may use the old buffer: replace it on idle streams.
      if (st.buffer &&
          (!check(cudaStreamSynchronize(copyStream_), "cudaStreamSynchronize", error) ||
           !check(cudaStreamSynchronize(c.stream), "cudaStreamSynchronize", error) ||
           !check(cudaFree(st.buffer), "cudaFree", error)))
        return false;
      st.buffer = nullptr;
      st.bytes = 0;
      if (!check(cudaMalloc(&st.buffer, bytes), "cudaMalloc (upload staging)", error))
        return false;
      st.bytes = bytes;
    }
    // The copy waits until the step's stream has copied out what this
    // buffer held last; the step's stream waits for the copy.
    return check(cudaStreamWaitEvent(copyStream_, st.drained, 0), "cudaStreamWaitEvent", error) &&
           check(cudaMemcpyAsync(st.buffer, src, bytes, cudaMemcpyHostToDevice, copyStream_),
                 "cudaMemcpyAsync (to the GPU)", error) &&
           check(cudaEventRecord(st.filled, copyStream_), "cudaEventRecord", error) &&
           check(cudaStreamWaitEvent(c.stream, st.filled, 0), "cudaStreamWaitEvent", error) &&
           check(cudaMemcpyAsync(dst, st.buffer, bytes, cudaMemcpyDeviceToDevice, c.stream),
                 "cudaMemcpyAsync (staged batch)", error) &&
           check(cudaEventRecord(st.drained, c.stream), "cudaEventRecord", error);
  }

  void record() {
    if (used_ == events_.size()) {
      cudaEvent_t e;
      if (cudaEventCreate(&e) != cudaSuccess)
        return;
      events_.push_back(e);
    }
    cudaEventRecord(events_[used_++], ctx_->stream);
  }

  static constexpr int64_t kFenceRing = 8;
  std::vector<cudaEvent_t> fences_;
  int64_t nextFence_ = 0;
  std::vector<cudaEvent_t> events_;
  size_t used_ = 0;
  std::vector<const char*> labels_; ///< the generated code's literal labels

  /// Uploads from this size on go through the copy stream.
  static constexpr int64_t kStagedUploadBytes = int64_t{1} << 20;
  struct Stage {
    void* buffer = nullptr;
    size_t bytes = 0;
    cudaEvent_t filled = nullptr;  ///< the host copy into it has ended
    cudaEvent_t drained = nullptr; ///< the step's stream has copied it out
  };
  cudaStream_t copyStream_ = nullptr;
  Stage stages_[2];
  int nextStage_ = 0;
  std::mutex pinnedMutex_; ///< the feed's threads allocate host memory too
  std::map<const char*, size_t> pinned_;
  std::string captureFailure_;

  static bool check(cudaError_t st, const char* call, std::string* error) {
    if (st == cudaSuccess)
      return true;
    if (error)
      *error = describe(st, call);
    return false;
  }
  /// The result of a launch: a failed op's name gets the context's error.
  bool launched(bool ok, std::string* error) {
    Context& c = *ctx_;
    if (!ok) {
      if (error && !c.error.empty())
        *error += ": " + c.error;
      c.error.clear();
      return false;
    }
    return check(cudaGetLastError(), "a kernel launch", error);
  }

  RunnerOptions options_;
  std::string name_;
  std::unique_ptr<Context> ctx_;
  int64_t usedBefore_; ///< the GPU's used bytes before this runner (-1: unknown)
  std::map<int, Phase> phases_;
  int rerecorded_ = 0;
};

/// How this runner's convolutions are chosen (RunnerOptions::autotune):
/// the context's settings, and for the cache its file opened (once a
/// process). `device` names the GPU and library versions a choice holds for.
/// False with `error` when the cache file cannot be read.
bool setUpAutotune(Context& ctx, const RunnerOptions& options, const std::string& device,
                   std::string* error) {
  AutotuneMode mode = options.autotune;
  if (mode == AutotuneMode::Default) {
#ifdef LWCC_EMULATED_GPU
    // The emulated device's timings measure the host's emulation of each
    // algorithm, not a GPU's: its default is cuDNN's heuristics; the cache
    // works there as on a GPU when asked for.
    mode = AutotuneMode::Off;
#else
    mode = AutotuneMode::Cache;
#endif
  }
  ctx.timeAlgorithms = mode != AutotuneMode::Off;
  ctx.autotuneCache = false;
  if (mode != AutotuneMode::Cache)
    return true;
  std::string path =
      options.autotuneCache.empty() ? defaultAutotuneCachePath() : options.autotuneCache;
  if (path.empty()) { // no HOME: timed in this run, kept nowhere
    std::fprintf(stderr, "warning: no autotune cache (no --autotune-cache, $LWCC_AUTOTUNE_CACHE, "
                         "$XDG_CACHE_HOME or $HOME): convolutions are timed in every run\n");
    return true;
  }
  if (!autotuneCache().open(path, error))
    return false;
  ctx.autotuneCache = true;
  ctx.autotuneDevice = device;
  return true;
}

} // namespace

Context* runnerContext(const StepRunner* runner) {
  std::lock_guard<std::mutex> lock(registryMutex);
  auto it = registry().find(runner);
  return it == registry().end() ? nullptr : it->second;
}

std::unique_ptr<StepRunner> createRunner(const RunnerOptions& options, std::string* error) {
  // Preflight: the driver and libraries this trainer needs, before any of
  // them is used.
  CudaVersions found = foundCudaVersions(), built = builtCudaVersions();
  if (std::string missing = checkCudaVersions(found, built); !missing.empty()) {
    if (error)
      *error = "CUDA preflight: " + missing + "\n(found " + describeCudaVersions(found) +
               "; built with " + describeCudaVersions(built) + ")";
    return nullptr;
  }
  // What the GPU has in use before this runner's context and libraries
  // (memoryInUse() counts from here).
  int64_t usedBefore = -1;
  size_t freeBytes = 0, total = 0;
  if (cudaSetDevice(options.device) == cudaSuccess &&
      cudaMemGetInfo(&freeBytes, &total) == cudaSuccess)
    usedBefore = static_cast<int64_t>(total - freeBytes);
  auto ctx = std::make_unique<Context>();
  if (!initContext(*ctx, options.device, options.tf32 != Tf32::Off, options.tf32 == Tf32::All,
                   error))
    return nullptr;
  // NVTX initializes itself at its first call, filling a table of function
  // pointers that later calls read without a lock: make that first call
  // here, on the main thread, before a multi-device step's threads start.
  { PhaseRange startUp("lwcc start-up"); }
  ctx->convGraphApi = options.cudnnGraphApi;
  cudaDeviceProp prop{};
  std::string name = "GPU " + std::to_string(options.device);
  if (cudaGetDeviceProperties(&prop, options.device) == cudaSuccess)
    name = std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
           std::to_string(prop.minor) + ", " + describeCudaVersions(found) + ")";
  if (!setUpAutotune(*ctx, options, name, error))
    return nullptr;
  if (options.convWorkspaceBytes >= 0)
    ctx->convWorkspaceLimit =
        std::min(ctx->convWorkspaceLimit, static_cast<size_t>(options.convWorkspaceBytes));
  ctx->cudnnOps = options.cudnnOps;
  if (!primaryContext())
    setPrimaryContext(ctx.get());
  return std::make_unique<CudaRunner>(options, name, std::move(ctx), usedBefore);
}

} // namespace lwrt::cuda
