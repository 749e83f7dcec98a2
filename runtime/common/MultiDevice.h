// The devices of a multi-device trainer (ModelInfo::numDevices > 1), as the
// main loop (common/Trainer.cpp) sees them: a runner, an arena, a state and
// an input buffer per logical device, the backend's group running the step
// over them, and the logical host image of the state (ParamInfo offsets)
// scattered into and gathered from the devices' placements.
#pragma once

#include "lwrt/trainer.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace lwrt {

/// "" when the multi-device tables of `m` hang together (devices, buffer
/// sizes, placements covering every param once, outputs inside their
/// device's arena), else what is wrong.
std::string checkMultiDeviceModel(const ModelInfo& m);

/// "0,1,2,3" -> {0, 1, 2, 3}; false on anything but a list of non-negative
/// integers.
bool parseDeviceList(const std::string& text, std::vector<int>& out);

class MultiDevice {
public:
  /// The runners of logical devices 1.. (device 0's is `first`, created by
  /// the caller on physical[0]), the group and nothing else. `physical`:
  /// the device of each logical one (empty: round-robin over the devices
  /// the backend opens, probing 1, 2, ... until one fails). `warning` says
  /// when several logical devices share a GPU. Null with `error` set.
  static std::unique_ptr<MultiDevice> create(const ModelInfo& m, StepRunner* first,
                                             const RunnerOptions& options,
                                             const std::vector<int>& physical,
                                             RunnerFactory createRunner, GroupFactory createGroup,
                                             std::string& warning, std::string& error);
  ~MultiDevice();

  /// Each device's arena, state and (when the runner cannot read host
  /// memory) input buffer.
  bool allocate(std::string& error);
  /// The logical host image -> every placement of every param.
  bool upload(const unsigned char* hostState, std::string& error);
  /// Every param from its first replica (or its shards) -> the host image;
  /// with `checkReplicas`, fails when another replica differs.
  bool download(unsigned char* hostState, bool checkReplicas, std::string& error);
  /// Each device's deviceInit, on its runner.
  bool init(const Hyper* hyper, std::string& error);
  /// Launches one step on `batch` (host memory of the first runner; read
  /// in place by a runner that reads host memory, else uploaded to each).
  /// With `marks` (a profiled step), each op's time lands there.
  bool step(const unsigned char* batch, const Hyper* hyper, StepMarks* marks, std::string& error);
  /// The loss of the last step into `dst` (allocateHost memory of the first
  /// runner), there once a fence taken after it has passed.
  bool downloadLossAsync(void* dst, std::string& error);
  /// A fence over every device; waitFence returns once each has passed.
  bool fence(int64_t* id, std::string& error);
  bool waitFence(int64_t id, std::string& error);
  /// Output `o` from its device's arena (after the work launched so far).
  bool downloadOutput(const OutputInfo& o, void* dst, std::string& error);
  std::string takeDeviceError();
  /// "4 logical devices on CPU, 2 threads" or "... on GPUs 0,1 (NVIDIA ...)".
  std::string description() const;
  int numDevices() const { return static_cast<int>(runners_.size()); }

private:
  MultiDevice(const ModelInfo& m) : m_(m) {}
  struct Memory {
    StepRunner* runner = nullptr;
    unsigned char* ptr = nullptr;
  };
  bool allocateOn(int device, int64_t bytes, const char* what, Memory& out, std::string& error);

  const ModelInfo& m_;
  std::vector<int> physical_;
  std::vector<std::unique_ptr<StepRunner>> owned_; ///< devices 1.. (device 0's is the caller's)
  std::vector<StepRunner*> runners_;               ///< by logical device
  std::vector<Memory> memory_;                     ///< every allocation, released at the end
  std::vector<unsigned char*> arenas_, states_, inputs_;
  std::map<int64_t, std::vector<int64_t>> fences_; ///< id -> each runner's fence
  int64_t nextFence_ = 0;
  std::unique_ptr<DeviceGroup> group_; ///< last: stops its threads first
};

} // namespace lwrt
