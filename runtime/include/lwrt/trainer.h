// lwrt/trainer.h - the main loop around a generated training step
// defines: InputInfo, ParamInfo, OutputInfo, ParamPlacement, DeviceStep, Hyper, StepBuffers,
//          ModelInfo, DeviceGroup, GroupFactory, RunnerOptions, StepRunner, RunnerFactory,
//          cpu::createRunner, cuda::createRunner, trainerMain
//
// lwcc generates, for each model, the phases of a training step (one kernel
// call per IR op), an evaluation pass (the inference graph), and a ModelInfo
// describing their buffers; trainerMain runs them on the backend the trainer
// was built for. It owns everything around the step: the arenas, the state
// (params and optimizer state, initialized from the weights lwcc embedded),
// data, the optimizer's settings, progress, evaluation, checkpoints and
// export.
#pragma once

#include "lwrt/autotune.h"
#include "lwrt/export.h"
#include "lwrt/tensor.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace lwrt {

struct InputInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  bool isLabel;
  int64_t offset; ///< in the input buffer
};

struct ParamInfo {
  std::string name; ///< initializer name
  DType dtype;
  std::vector<int64_t> shape;
  int64_t offset; ///< in the state buffer
  bool zeroInit;  ///< optimizer state and counters: not in the weights blob
};

/// A value the step returns (the loss, then the gradients), in the arena.
struct OutputInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  int64_t offset; ///< in the arena (of `device`, in a multi-device trainer)
  int device = 0;
};

/// Multi-device trainers: where one piece of a param lives. Every param of
/// ModelInfo::params has one or more placements: replicas (shardDim -1, the
/// whole tensor; all replicas hold the same bits) or shards (the entries
/// [shardBegin, shardBegin + shardSize) of dim shardDim, the other dims
/// whole; together the shards cover the param once).
struct ParamPlacement {
  int param;      ///< index in ModelInfo::params
  int device;     ///< logical device, 0 .. numDevices - 1
  int64_t offset; ///< in that device's state buffer
  int shardDim = -1;
  int64_t shardBegin = 0, shardSize = 0;
};

/// The optimizer's settings, read by the generated update phase. The
/// trainer's defaults are what lwcc was told; flags override them.
struct Hyper {
  enum Family : uint8_t { None, Sgd, Adam };
  Family family = None; ///< the compiled optimizer's state layout
  double lr = 0.01;
  double momentum = 0.9;
  double weightDecay = 0;
  int64_t nesterov = 0;
  double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8;
  int64_t decoupled = 0; ///< AdamW
  int schedule = 0;      ///< LrScheduleKind: 0 constant, 1 step, 2 cosine
  int64_t warmupSteps = 0, totalSteps = 0, stepSize = 0;
  double gamma = 0.1, minLr = 0;
  double labelSmoothing = 0; ///< of the softmax cross-entropy loss
  /// The gradients' largest global L2 norm (clip_coef's max_norm); 0 when
  /// the step does not clip (lwcc --clip-grad-norm).
  double clipGradNorm = 0;
};

struct StepBuffers;
class StepRunner;
class StepMarks;
using PhaseFn = bool (*)(const StepBuffers&, std::string* failed);

/// What the generated phases see. Pointers are device memory of the
/// trainer's backend; `hyper` is host memory.
struct StepBuffers {
  unsigned char* arena;
  unsigned char* state;
  unsigned char* inputs;
  const Hyper* hyper;
  /// When set (--profile), called after each op's launch with "kernel label".
  void (*mark)(void* context, const char* op) = nullptr;
  void* markContext = nullptr;
  /// When set (--profile), counts the step's runtime calls as they are
  /// made: a kernel, a library call or a collective each (what --emit=plan
  /// counts as `N kernels a step`; an op fused into another's call, a view
  /// or a constant makes none).
  int64_t* calls = nullptr;
  /// Multi-device trainers: the logical device and stream the function runs
  /// on, and the backend's DeviceGroup (lwrt/comm.h reads them).
  int device = 0;
  int stream = 0;
  void* group = nullptr;
  /// Multi-device trainers, profiled steps: a recorder per (device, stream)
  /// (lwrt/profile.h). The group points each function's `mark` and
  /// `markContext` at its own (device, stream)'s recorder.
  StepMarks* marks = nullptr;
};

/// Multi-device trainers: one function of the step, run on `device`'s
/// stream `stream` with that device's buffers.
struct DeviceStep {
  int device;
  int stream;
  PhaseFn fn;
  std::string name; ///< "step_d1_s0"
};

/// Where float32 math may run on TF32 tensor cores (CUDA trainers), as
/// PyTorch decides it: its defaults are TF32 for convolutions
/// (torch.backends.cudnn.allow_tf32) and IEEE float32 for matrix products
/// (torch.backends.cuda.matmul.allow_tf32 = False). `--tf32` takes both,
/// `--no-tf32` neither (strict float32, the CPU backend's arithmetic).
enum class Tf32 : int { Off = 0, Convolutions = 1, All = 2 };

struct ModelInfo {
  std::string name;
  std::string target; ///< "cpu" or "cuda"
  uint64_t fingerprint = 0;
  std::vector<InputInfo> inputs;
  std::vector<ParamInfo> params;
  std::vector<OutputInfo> outputs; ///< #0 is the loss
  int64_t arenaBytes = 0, stateBytes = 0, inputBytes = 0;
  int64_t classes = 0; ///< label range of a softmax cross-entropy loss (0: none)
  /// lwcc --ignore-index: a label that counts for nothing (the loss leaves
  /// it out, data loaders take it, the evaluation skips it).
  bool hasIgnoreIndex = false;
  int64_t ignoreIndex = -100;
  /// lwcc --shift-labels: the loss takes the logits at t against the labels
  /// at t + 1 of each sequence (labels equal to the ids, as Hugging Face's).
  bool shiftLabels = false;
  int64_t lossOffset = 0; ///< arena offset of the loss, a float scalar
  DType lossType = DType::F32;
  Hyper defaults;
  Tf32 tf32 = Tf32::Convolutions; ///< the default of --tf32 / --no-tf32
  /// fp16 training (lwcc --mixed-precision=fp16): the index in `params` of
  /// the float32 loss scale (0 there stands for `lossScaleInit`, its value
  /// before the first step), or -1. A step whose gradients overflow leaves
  /// the params as they were and halves the scale.
  int lossScaleParam = -1;
  double lossScaleInit = 0;
  /// The index in `params` of the float32 scalar that holds the gradients'
  /// global L2 norm of the last step (lwcc --clip-grad-norm), or -1.
  int gradNormParam = -1;
  /// Write the constants into the arena once; false with `failed` set.
  PhaseFn init = nullptr;
  /// One training step: forward, loss, backward and update.
  PhaseFn step = nullptr;
  /// Evaluation: the inference graph on the batch in the input buffer (the
  /// image input at the train step's offset), in an arena of its own.
  PhaseFn evalInit = nullptr, eval = nullptr;
  int64_t evalArenaBytes = 0;
  int64_t logitsOffset = 0; ///< in the eval arena
  std::vector<int64_t> logitsShape;
  DType logitsType = DType::F32;
  /// Initial params (those not zeroInit, in order, packed), embedded.
  const unsigned char* weights = nullptr;
  int64_t weightsBytes = 0;
  /// The input model with the trained initializers cut out, embedded (empty:
  /// no export).
  const unsigned char* exportTemplate = nullptr;
  int64_t exportTemplateBytes = 0;
  std::vector<ExportCut> exportCuts; ///< ExportCut::param indexes `params`

  /// Multi-device trainers (lwcc --gpus N, N > 1). Then `params` are the
  /// logical, whole params: ParamInfo::offset and `stateBytes` describe a
  /// host image of them (what the weights blob, checkpoints, --dump and
  /// export hold), and each device has its own state buffer laid out by
  /// `placements`, and its own arena. `init` and `step` are null: each
  /// device's constants come from deviceInit[d], the step is `deviceSteps`,
  /// run together by the backend's DeviceGroup. The inputs buffer is the
  /// whole batch, the same on every device (the step slices each device's
  /// samples). The loss is at `lossOffset` in device `lossDevice`'s arena.
  /// Evaluation runs on device 0 with `evalArenaBytes` and the whole params
  /// at their ParamInfo::offset (a buffer of `stateBytes` of its own).
  int numDevices = 1;
  int streamsPerDevice = 1;
  std::vector<int64_t> deviceArenaBytes, deviceStateBytes; ///< per device
  /// CUDA: per logical device, the most workspace one of its convolutions'
  /// algorithms may take (RunnerOptions::convWorkspaceBytes; -1 or absent:
  /// the runtime's own limit): the memory lwcc's plan left it on the device
  /// spec it was compiled for.
  std::vector<int64_t> convWorkspaceBytes;
  /// The limit of logical device `d`.
  int64_t convWorkspaceFor(int d) const {
    return d >= 0 && static_cast<size_t>(d) < convWorkspaceBytes.size()
               ? convWorkspaceBytes[static_cast<size_t>(d)]
               : -1;
  }
  std::vector<ParamPlacement> placements;
  std::vector<PhaseFn> deviceInit; ///< per device
  std::vector<DeviceStep> deviceSteps;
  int numCommOps = 0, numEvents = 0;
  int lossDevice = 0;
  /// What each step trains on, per device: the samples of the batch the
  /// device computes with (empty: every device sees the whole batch).
  std::vector<int64_t> samplesPerDevice;
  /// Per device, the rows [first, second) of dim 0 of the inputs its step
  /// reads (empty: the whole batch): a process under mpirun prepares only
  /// its devices' rows of each batch.
  std::vector<std::pair<int64_t, int64_t>> inputRows;
  /// CUDA, several devices: per device, per input (in `inputs` order) the
  /// rows [begin, end) of dim 0 it holds and their offset in its input
  /// buffer (-1: none), packed into deviceInputBytes[device] bytes; empty:
  /// each device holds the whole batch.
  struct DeviceInput {
    int64_t begin = 0, end = 0, offset = -1;
  };
  std::vector<std::vector<DeviceInput>> deviceInputs;
  std::vector<int64_t> deviceInputBytes;
  /// A hash of the generated step (its ops, placements and offsets): the
  /// processes of a run under mpirun check that they run the same trainer.
  uint64_t planHash = 0;
};

/// Multi-device trainers: runs the step's functions together. Built from
/// one StepRunner per logical device (runners[d], which owns device d's
/// memory; its stream is the device's stream 0).
class DeviceGroup {
public:
  virtual ~DeviceGroup() = default;
  /// One step: calls every function of ModelInfo::deviceSteps, each on a
  /// thread of its own, with buffers[device] (device, stream and group
  /// set), and returns once all have returned: on the CPU the step has run,
  /// on CUDA it is launched (ordered before later work on each runner's
  /// stream). False with `error` naming the function and what failed.
  /// With StepBuffers::marks set (a profiled step), each op's time lands in
  /// its (device, stream)'s recorder, without the time the stream spent
  /// waiting for events and for the other participants of communication
  /// ops; a group that cannot time ops fails the step.
  virtual bool runStep(const std::vector<StepBuffers>& buffers, std::string* error) = 0;
  /// What the group chose ("NCCL between 4 GPUs", "2 logical devices on
  /// GPU 0: local copies"), or "".
  virtual std::string notes() const { return ""; }
};

class Cluster; // common/Cluster.h: the processes of a run under mpirun

/// `runners` has one entry per logical device: null for the devices of
/// other processes, when `cluster` is set (a run under mpirun, this process
/// holding some of the devices); `cluster` is null in a one-process run.
using GroupFactory = std::unique_ptr<DeviceGroup> (*)(const ModelInfo& model,
                                                      const std::vector<StepRunner*>& runners,
                                                      Cluster* cluster, std::string* error);

struct RunnerOptions {
  int device = 0;
  /// CPU: the threads the step's kernels share (--threads; 0: every core).
  int threads = 0;
  Tf32 tf32 = Tf32::Convolutions;
  bool graphs = true; ///< CUDA: record the step once and replay it
  /// CUDA: convolutions on cuDNN's graph API (false: its legacy API).
  bool cudnnGraphApi = true;
  /// CUDA: how each convolution configuration's algorithm (legacy API) or
  /// engine (graph API) is chosen (--autotune, lwrt/autotune.h). Cache: the
  /// candidates timed on the real buffers at the configuration's first call
  /// on this GPU and library versions, the fastest kept in the autotune
  /// cache file, later runs and resumes taking it from there: fast and the
  /// same bits in every run. Timed: timed in every run, no cache
  /// (--cudnn-benchmark, PyTorch's cudnn.benchmark; timings vary, so two
  /// runs may differ in their bits). Off: cuDNN's heuristics, untimed.
  /// Default: Cache on a GPU, Off on the emulated device (whose timings
  /// measure the host's emulation, not a GPU).
  AutotuneMode autotune = AutotuneMode::Default;
  /// The cache file (--autotune-cache; "": defaultAutotuneCachePath()).
  std::string autotuneCache;
  /// CUDA: pooling, LRN, batch norm and softmax on cuDNN where it covers
  /// the op (false: lwcc's own kernels, summed in the CPU backend's order).
  bool cudnnOps = true;
  /// CUDA: the most workspace a convolution's algorithm or engine may take
  /// on this device (-1: the runtime's own limit, 1 GiB): what lwcc's memory
  /// plan left the device (ModelInfo::convWorkspaceBytes).
  int64_t convWorkspaceBytes = -1;
};

/// How the trainer runs generated phases on its backend.
class StepRunner {
public:
  virtual ~StepRunner() = default;
  /// The device, in words ("CPU, 2 threads", "NVIDIA H100 80GB HBM3").
  virtual std::string description() const = 0;
  /// Zeroed device memory; null with `error` set when it cannot be had.
  virtual void* allocate(int64_t bytes, std::string* error) = 0;
  virtual void release(void* memory) = 0;
  /// Host -> device, ordered after the work launched so far. From
  /// allocateHost memory it may return before the copy ends: keep the bytes
  /// unchanged until a fence taken after it has passed.
  virtual bool upload(void* dst, const void* src, int64_t bytes, std::string* error) = 0;
  /// Device -> host, after the work launched so far has run.
  virtual bool download(void* dst, const void* src, int64_t bytes, std::string* error) = 0;

  /// Zeroed host memory for batches and read-backs: page-locked on CUDA
  /// (asynchronous copies), aligned on the CPU. Null with `error` set.
  virtual void* allocateHost(int64_t bytes, std::string* error) = 0;
  virtual void releaseHost(void* memory) = 0;
  /// True when the phases read host memory (the CPU backend): the trainer
  /// points the step at a prepared batch instead of uploading it.
  virtual bool readsHostMemory() const { return false; }
  /// Device -> host into allocateHost memory, ordered after the work
  /// launched so far, without waiting: the bytes are there once a fence
  /// taken after it has passed.
  virtual bool downloadAsync(void* dst, const void* src, int64_t bytes, std::string* error) = 0;
  /// Marks the work and copies launched so far; waitFence(id) returns once
  /// they have run. No other host synchronisation happens in a step.
  virtual bool fence(int64_t* id, std::string* error) = 0;
  virtual bool waitFence(int64_t id, std::string* error) = 0;
  /// Runs a phase: `launch` enqueues its work. A backend may record the
  /// work of phase `key` once (after a first, direct run) and replay the
  /// recording afterwards without calling `launch` again; a negative key is
  /// never recorded (one-off phases, profiled steps).
  virtual bool run(int key, const std::function<bool(std::string*)>& launch,
                   std::string* error) = 0;
  /// A data error the device found since the last call (a label out of
  /// range), or "".
  virtual std::string takeDeviceError() = 0;
  /// The weights' moving average (--ema): ema[i] += weight * (value[i] -
  /// ema[i]) for `count` elements of `type` (F32 or F64) in device memory,
  /// ordered after the work launched so far, the weight rounded to `type`.
  virtual bool emaUpdate(void* ema, const void* value, int64_t count, DType type, double weight,
                         std::string* error) = 0;

  /// Profiling: startMarks() begins a profiled phase, mark(op) ends the op
  /// launched last, and takeMarks() returns each op's time in milliseconds
  /// (after the phase's work has run), in launch order. `op` is the
  /// generated code's label, a string literal: kept as the pointer.
  virtual void startMarks() = 0;
  virtual void mark(const char* op) = 0;
  virtual std::vector<std::pair<const char*, double>> takeMarks() = 0;
  /// What the backend chose while running ("" when nothing to say), e.g.
  /// which cuDNN API took the convolutions.
  virtual std::string notes() const { return ""; }
  /// The device memory in use now, measured, in bytes, or -1 when the
  /// backend cannot tell. CUDA: the GPU's used memory (cudaMemGetInfo) less
  /// what was in use before this runner set up its context (other
  /// processes, the CUDA context itself): with the trainer's buffers, the
  /// libraries' handles and workspaces and NCCL's; shared by the logical
  /// devices on that GPU. CPU: the bytes its allocate() gave out and not
  /// released.
  virtual int64_t memoryInUse() const { return -1; }
};

using RunnerFactory = std::unique_ptr<StepRunner> (*)(const RunnerOptions&, std::string* error);

namespace cpu {
std::unique_ptr<StepRunner> createRunner(const RunnerOptions& options, std::string* error);
}
namespace cuda {
/// Null with `error` set when there is no usable GPU.
std::unique_ptr<StepRunner> createRunner(const RunnerOptions& options, std::string* error);
} // namespace cuda

/// The trainer program; see the usage text in common/TrainerFlags.cpp
/// (`TRAINER --help`). Returns the exit status: 0, 1 for a failed run or bad
/// input, 2 for bad usage.
int trainerMain(int argc, char** argv, const ModelInfo& model, RunnerFactory createRunner);
/// The same for a multi-device trainer (model.numDevices > 1): one runner
/// per logical device (RunnerOptions::device from --devices, default
/// round-robin over the GPUs found), and a group over them.
int trainerMain(int argc, char** argv, const ModelInfo& model, RunnerFactory createRunner,
                GroupFactory createGroup);

} // namespace lwrt
