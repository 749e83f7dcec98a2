// The devices of a multi-device trainer (ModelInfo::numDevices > 1), as the
// main loop (common/Trainer.cpp) sees them: a runner, an arena, a state and
// an input buffer per logical device, the backend's group running the step
// over them, and the logical host image of the state (ParamInfo offsets)
// scattered into and gathered from the devices' placements. Under mpirun
// (a Cluster) this process holds some of the devices (LocalDevices): it
// runs, uploads and fences those; reading the params back, the loss and
// the outputs are collective, each process sending its devices' pieces to
// rank 0, which alone evaluates, checkpoints and exports.
#pragma once

#include "lwrt/trainer.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace lwrt {

class Cluster;

/// The logical devices this process holds: every one in a one-process
/// run; under mpirun, rank r holds N/R consecutive ones from r * N/R.
struct LocalDevices {
  int first = 0, count = 0;
  bool holds(int64_t d) const { return d >= first && d < first + count; }
};
LocalDevices localDevices(const ModelInfo& m, const Cluster* cluster);

/// The device to open for local logical device `d`: its entry of
/// `physical` (--devices) when given; under mpirun, the GPUs of this
/// process's place among those of its machine (node-local rank k: GPUs
/// k * count ...); -1 in a one-process run without --devices (round-robin
/// over the devices found).
int physicalDevice(const ModelInfo& m, const Cluster* cluster, const std::vector<int>& physical,
                   int64_t d);

/// Under mpirun, why a GPU physicalDevice() named may not exist: which
/// GPUs this process drives and how to start fewer processes per machine.
std::string gpuPlacementHint(const ModelInfo& m, const Cluster& cluster);

/// The bytes of device `d`'s input buffer: the rows of each input it
/// reads (ModelInfo::deviceInputs), else the whole batch.
int64_t deviceInputBytes(const ModelInfo& m, int d);

/// The rows [first, second) of each batch that the devices `here` read:
/// the span of their ModelInfo::inputRows, the whole batch when the model
/// does not say, {0, 0} when they read none.
std::pair<int64_t, int64_t> inputRowsOf(const ModelInfo& m, const LocalDevices& here,
                                        int64_t batch);
/// Those of this process's devices under mpirun; the whole batch otherwise.
std::pair<int64_t, int64_t> localInputRows(const ModelInfo& m, const Cluster* cluster,
                                           int64_t batch);

/// "" when the multi-device tables of `m` hang together (devices, buffer
/// sizes, placements covering every param once, outputs inside their
/// device's arena), else what is wrong.
std::string checkMultiDeviceModel(const ModelInfo& m);

/// "0,1,2,3" -> {0, 1, 2, 3}; false on anything but a list of non-negative
/// integers.
bool parseDeviceList(const std::string& text, std::vector<int>& out);

/// A run of bytes of one float type in a state buffer: what the weights'
/// moving average (--ema) updates.
struct StateRange {
  int64_t offset = 0, count = 0; ///< in bytes from the buffer, in elements
  DType type = DType::F32;
};
/// `ranges` sorted by offset, neighbours of one type that touch joined.
std::vector<StateRange> mergeRanges(std::vector<StateRange> ranges);

class MultiDevice {
public:
  /// Which of a device's state buffers a copy reaches: the params the step
  /// trains, or their moving average (--ema, after allocateAverage).
  enum class Copy { Params, Average };

  /// The runners of this process's logical devices after its first (whose
  /// runner is `first`, created by the caller on physicalDevice()), the
  /// group and nothing else. `physical`: the device of each logical one
  /// (empty: round-robin over the devices the backend opens, probing 1, 2,
  /// ... until one fails; under mpirun see physicalDevice). `warning` says
  /// when several logical devices share a GPU. Null with `error` set.
  static std::unique_ptr<MultiDevice> create(const ModelInfo& m, StepRunner* first,
                                             const RunnerOptions& options,
                                             const std::vector<int>& physical, Cluster* cluster,
                                             RunnerFactory createRunner, GroupFactory createGroup,
                                             std::string& warning, std::string& error);
  ~MultiDevice();

  /// Each device's arena, state and (when the runner cannot read host
  /// memory) input buffer.
  bool allocate(std::string& error);
  /// The logical host image -> every placement of every param.
  bool upload(const unsigned char* hostState, std::string& error, Copy to = Copy::Params);
  /// Every param from its first replica (or its shards) -> the host image;
  /// with `checkReplicas`, fails when another replica differs. Under
  /// mpirun every process calls it; rank 0 gets the image.
  bool download(unsigned char* hostState, bool checkReplicas, std::string& error,
                Copy source = Copy::Params);
  /// --ema: a second state buffer on each of this process's devices, laid
  /// out as the state, for the moving average of the params marked in
  /// `averaged` (indexes of ModelInfo::params); upload(Copy::Average)
  /// fills it.
  bool allocateAverage(const std::vector<bool>& averaged, std::string& error);
  /// Each device moves its pieces of the averaged params (replicas and
  /// shards alike) towards the params: ema += weight * (param - ema), on
  /// its runner after the launched step.
  bool updateAverage(double weight, std::string& error);
  /// Each device's deviceInit, on its runner.
  bool init(const Hyper* hyper, std::string& error);
  /// Launches one step on `batch` (host memory of the first runner; read
  /// in place by a runner that reads host memory, else uploaded to each).
  /// With `marks` (a profiled step), each op's time lands there.
  bool step(const unsigned char* batch, const Hyper* hyper, StepMarks* marks, std::string& error);
  /// The loss of the last step into `dst` (allocateHost memory of the first
  /// runner), there once a fence taken after it has passed.
  bool downloadLossAsync(void* dst, std::string& error);
  /// Starts copying the first `bytes` of param `param` (an index in
  /// ModelInfo::params) from the first of this process's devices that holds
  /// a replica of it to `dst` (host memory of runner 0); nothing where none
  /// does. Ordered after the launched step like downloadLossAsync.
  bool downloadParamAsync(int param, void* dst, int64_t bytes, std::string& error);
  /// Under mpirun, after that fence: the loss from the process holding it
  /// to every other (each stops on the same non-finite loss).
  bool shareLoss(void* loss, std::string& error);
  /// A fence over every device; waitFence returns once each has passed.
  bool fence(int64_t* id, std::string& error);
  bool waitFence(int64_t id, std::string& error);
  /// Output `o` from its device's arena (after the work launched so far);
  /// under mpirun every process calls it, rank 0 gets it.
  bool downloadOutput(const OutputInfo& o, void* dst, std::string& error);
  std::string takeDeviceError();
  /// "4 logical devices on CPU, 2 threads" or "... on GPUs 0,1 (NVIDIA ...)".
  std::string description() const;
  int numDevices() const { return static_cast<int>(runners_.size()); }
  const LocalDevices& local() const { return local_; }
  /// Local logical device `d`'s runner and the device it opened (a GPU's
  /// index; several logical devices may share one).
  StepRunner* runner(int d) const { return runners_[static_cast<size_t>(d)]; }
  int physical(int d) const { return physical_[static_cast<size_t>(d)]; }

private:
  /// Device `d`'s rows of `batch` (the host's, the whole batch) into its
  /// input buffer `in`.
  bool uploadBatch(size_t d, unsigned char* in, const unsigned char* batch, std::string& error);

  MultiDevice(const ModelInfo& m) : m_(m) {}
  struct Memory {
    StepRunner* runner = nullptr;
    unsigned char* ptr = nullptr;
  };
  bool allocateOn(int device, int64_t bytes, const char* what, Memory& out, std::string& error);
  /// The rank holding logical device `d`.
  int rankOf(int64_t d) const { return static_cast<int>(d / local_.count); }

  const ModelInfo& m_;
  Cluster* cluster_ = nullptr;
  LocalDevices local_;
  std::vector<int> physical_;                      ///< by logical device (-1: another process's)
  std::vector<std::unique_ptr<StepRunner>> owned_; ///< the local ones but the first (the caller's)
  std::vector<StepRunner*> runners_;               ///< by logical device (null: another process's)
  std::vector<Memory> memory_;                     ///< every allocation, released at the end
  std::vector<unsigned char*> arenas_, states_, inputs_;
  std::vector<unsigned char*> averages_;           ///< --ema, by logical device
  std::vector<std::vector<StateRange>> averaged_;  ///< what updateAverage moves, by device
  std::map<int64_t, std::vector<int64_t>> fences_; ///< id -> each runner's fence
  int64_t nextFence_ = 0;
  std::unique_ptr<DeviceGroup> group_; ///< last: stops its threads first
};

} // namespace lwrt
