//===- DeviceMemory.cpp - What a device of a plan holds -------------------===//
//
// A planned step's bytes on each device beside its arena (params, inputs,
// the libraries' workspaces, padded convolution inputs), checked against a
// device spec's memory, and the convolutions' workspace limits from what is
// left.
//
//===----------------------------------------------------------------------===//
#include "cost/DeviceSpec.h"
#include "ir/Params.h"
#include "passes/MemoryPlan.h"
#include "passes/TrainingSupport.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <map>
#include <set>

namespace lwcc {

std::map<int64_t, int64_t> streamsPerDevice(const Graph& g) {
  std::map<int64_t, std::set<int64_t>> seen;
  for (const auto& op : g.ops()) {
    const int64_t stream = op->annotations().stream.value_or(0);
    if (op->info().isCommunication()) {
      for (const Value* v : op->operands())
        seen[v->device().value_or(0)].insert(stream);
      for (unsigned r = 0; r < op->numResults(); ++r)
        seen[op->result(r)->device().value_or(0)].insert(stream);
    } else {
      seen[op->annotations().device.value_or(0)].insert(stream);
    }
  }
  std::map<int64_t, int64_t> out;
  for (const auto& [device, streams] : seen)
    out[device] = static_cast<int64_t>(streams.size());
  return out;
}

namespace {

/// The ops the CUDA runtime runs as cuDNN convolutions (each direction).
bool isConvolution(const Op& op) {
  return op.kind() == OpKind::Conv2d || op.kind() == OpKind::Conv2dGradInput ||
         op.kind() == OpKind::Conv2dGradFilter;
}

} // namespace

int64_t convPadBytes(const Op& op) {
  if (!isConvolution(op))
    return 0;
  const bool grad = op.kind() == OpKind::Conv2dGradInput;
  // The image: x (operand 0), or the gradient's result dx of input_shape.
  const TensorType& x = grad ? op.result(0)->type() : op.operand(0)->type();
  const std::vector<int64_t> pads = op.getInts("pads");
  if (x.rank() != 4 || pads.size() != 4)
    return 0;
  const int64_t dh = std::abs(pads[0] - pads[2]), dw = std::abs(pads[1] - pads[3]);
  if (dh == 0 && dw == 0)
    return 0;
  const int64_t bytes =
      x.shape[0] * x.shape[1] * (x.shape[2] + dh) * (x.shape[3] + dw) * dtypeSize(x.dtype);
  return bufferBytes(bytes);
}

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

/// The CUDA runtime's own device memory per device: its error flag (an int
/// in one allocation, which a GPU rounds up).
constexpr int64_t kRuntimeBytesPerDevice = 256;

int64_t mibUp(int64_t n) { return (n + kMiB - 1) / kMiB * kMiB; }

/// What a device of a plan holds besides the convolutions' algorithm
/// workspaces (see checkDeviceMemory).
struct DeviceBytes {
  int64_t arena = 0, params = 0, inputs = 0;
  int64_t libraries = 0; ///< the spec's library workspaces, per stream
  int64_t runtime = 0;   ///< the CUDA runtime's own (kRuntimeBytesPerDevice)
  int64_t pads = 0;      ///< padded input copies: the largest of each stream's, whole MiB
  int64_t convStreams = 0;
  int64_t total() const { return arena + params + inputs + libraries + runtime + pads; }
  DeviceBytes& operator+=(const DeviceBytes& o) {
    arena += o.arena, params += o.params, inputs += o.inputs, libraries += o.libraries;
    runtime += o.runtime, pads += o.pads, convStreams += o.convStreams;
    return *this;
  }
};

std::map<int64_t, DeviceBytes> deviceBytes(const Graph& g, const MemoryPlanStats& stats,
                                           const DeviceSpec& spec) {
  std::map<int64_t, DeviceBytes> out;
  for (const auto& [device, arena] : stats.peakBytes)
    out[device].arena = arena;
  for (const auto& p : g.params())
    out[p->device().value_or(0)].params += bufferBytes(p->type().sizeInBytes());
  if (spec.workspaceBytesPerStream > 0) {
    const std::map<int64_t, int64_t> streams = streamsPerDevice(g);
    for (auto& [device, b] : out) {
      b.libraries = spec.workspaceBytesPerStream * (streams.count(device) ? streams.at(device) : 1);
      b.runtime = kRuntimeBytesPerDevice;
    }
    // A CUDA trainer's stream grows one workspace (to whole MiB) to the most
    // a kernel of it takes: a convolution with uneven pads copies its image
    // padded to the larger pad there, its algorithm's workspace after it.
    std::map<std::pair<int64_t, int64_t>, int64_t> pads; // (device, stream) -> bytes
    for (const auto& op : g.ops())
      if (isConvolution(*op)) {
        int64_t& most =
            pads[{op->annotations().device.value_or(0), op->annotations().stream.value_or(0)}];
        most = std::max(most, convPadBytes(*op));
      }
    for (const auto& [where, bytes] : pads) {
      out[where.first].pads += mibUp(bytes);
      ++out[where.first].convStreams;
    }
  }
  if (spec.inputsOnDevice) {
    // On several devices the rows of each input the device reads (as the
    // CUDA trainer packs them), else the whole batch.
    const int64_t devices = stats.peakBytes.empty() ? 1 : stats.peakBytes.rbegin()->first + 1;
    const PackedInputs held =
        devices > 1 ? packInputRows(g, devices, kBufferAlignment) : PackedInputs{};
    int64_t whole = 0;
    for (const auto& in : g.inputs())
      whole += bufferBytes(in->type().sizeInBytes());
    for (int64_t d = 0; d < devices; ++d)
      out[d].inputs = held.bytes.empty() ? whole : held.bytes[static_cast<size_t>(d)];
  }
  return out;
}

/// What each GPU holds: the sum of its logical devices' bytes (one device
/// each unless the spec's devices_per_gpu shares GPUs), for the devices the
/// plan placed an arena on.
std::map<int64_t, DeviceBytes> gpuBytes(const std::map<int64_t, DeviceBytes>& devices,
                                        const MemoryPlanStats& stats, const DeviceSpec& spec) {
  std::map<int64_t, DeviceBytes> out;
  for (const auto& [device, b] : devices)
    if (stats.peakBytes.count(device))
      out[spec.gpu(device)] += b;
  return out;
}

/// The logical devices of GPU `gpu`: "device D", or "GPU G (devices A-B)".
std::string gpuName(int64_t gpu, const DeviceSpec& spec) {
  if (spec.devicesPerGpu <= 1)
    return "device " + std::to_string(gpu);
  return llvm::formatv("GPU {0} (logical devices {1}-{2})", gpu, gpu * spec.devicesPerGpu,
                       (gpu + 1) * spec.devicesPerGpu - 1)
      .str();
}

} // namespace

llvm::Error checkDeviceMemory(const Graph& g, const MemoryPlanStats& stats,
                              const DeviceSpec& spec) {
  std::string over;
  for (const auto& [gpu, b] : gpuBytes(deviceBytes(g, stats, spec), stats, spec)) {
    if (b.total() <= spec.memoryBytes)
      continue;
    over +=
        llvm::formatv(
            "\n  {0}: {1} bytes ({2} arena + {3} params{4}{5}{6}) > {7} bytes", gpuName(gpu, spec),
            b.total(), b.arena, b.params,
            spec.workspaceBytesPerStream > 0
                ? llvm::formatv(" + {0} library workspaces + {1} runtime", b.libraries, b.runtime)
                      .str()
                : std::string(),
            b.pads > 0 ? llvm::formatv(" + {0} padded convolution inputs", b.pads).str()
                       : std::string(),
            b.inputs > 0 ? llvm::formatv(" + {0} input batch", b.inputs).str() : std::string(),
            spec.memoryBytes)
            .str();
  }
  if (over.empty())
    return llvm::Error::success();
  return makeError("the plan needs more memory than a device of spec '" + spec.name +
                   "' has:" + over);
}

std::map<int64_t, int64_t> convWorkspaceLimits(const Graph& g, const MemoryPlanStats& stats,
                                               const DeviceSpec& spec) {
  std::map<int64_t, int64_t> out;
  if (spec.workspaceBytesPerStream <= 0)
    return out;
  // What the GPU has left, shared by the convolution streams of its
  // logical devices.
  const std::map<int64_t, DeviceBytes> devices = deviceBytes(g, stats, spec);
  const std::map<int64_t, DeviceBytes> gpus = gpuBytes(devices, stats, spec);
  for (const auto& [device, b] : devices) {
    if (!stats.peakBytes.count(device) || b.convStreams == 0)
      continue;
    const DeviceBytes& on = gpus.at(spec.gpu(device));
    const int64_t left = std::max<int64_t>(0, spec.memoryBytes - on.total());
    out[device] = std::min(kConvWorkspaceLimitBytes, left / on.convStreams / kMiB * kMiB);
  }
  return out;
}

} // namespace lwcc
