//===- DeviceSpec.h - What a device and its links can do --------*- C++ -*-===//
//
// The figures the cost model prices ops and transfers with: peak FLOP/s,
// memory bandwidth and size, kernel launch overhead, and the links between
// devices inside a node and between nodes. Devices 0..devicesPerNode-1 form
// node 0, the next devicesPerNode node 1, and so on.
//
// A spec is a preset (h100, h200, a100, p100-cluster, cpu) or a JSON file:
//
//   {"name": "mygpu", "fp32_flops": 1.0e13, "tf32_flops": 1.0e13,
//    "bf16_flops": 2.0e13, "fp16_flops": 2.0e13,
//    "mem_bandwidth": 9.0e11, "launch_seconds": 5e-6, "memory_bytes": 17179869184,
//    "intra_bandwidth": 4.0e10, "intra_latency": 1e-5,
//    "inter_bandwidth": 1.25e10, "inter_latency": 2e-5, "devices_per_node": 4,
//    "concurrency": 163840, "host_cores": 0, "wake_seconds": 0,
//    "workspace_bytes_per_stream": 44040192}
//
// Bandwidths are bytes per second, latencies and launch overhead seconds.
// Every field is required except name (default: the file's stem),
// tf32_flops (default: fp32_flops), bf16_flops and fp16_flops (default:
// tf32_flops), concurrency, host_cores, wake_seconds and
// workspace_bytes_per_stream (default 0).
//
// workspace_bytes_per_stream: device memory the trainer's libraries keep
// for each stream a device runs (lwcc's CUDA runtime: a 32 MiB cuBLAS
// workspace and a cuDNN and a cuBLAS handle, 42 MiB per stream in all on
// an H100; the GPU presets have it), counted with each device's arena and
// params where a plan is checked against the memory.
//
// inputs_on_device (true or false, default false): whether the trainer
// keeps the rows of the step's input batch that a device reads on it (on
// one device the whole batch), counted there too (the GPU presets: lwcc's
// CUDA runtime uploads them to each device; the CPU backend's devices read
// the batch where it is).
//
// bf16_flops, fp16_flops: the peak of an op on bf16 or fp16 operands
// (lwcc --mixed-precision), the tensor cores' dense rate on GPUs that have
// them; on the CPU backend, which widens 16-bit operands to float32, the
// float32 rate.
//
// concurrency: the threads the device keeps in flight at once (a GPU's SMs
// times the resident threads per SM). A kernel with fewer parallel work
// items than that leaves the rest of the device to kernels of other
// streams; the simulator lets kernels of a device's streams overlap while
// their shares add up to at most the whole. 0: every kernel fills the
// device (the CPU backend: each kernel is threaded over all the device's
// cores), so a device's streams overlap communication, never compute.
//
// host_cores: the cores a node's devices share (the CPU backend's emulated
// devices, each running its kernels on max(1, cores / devices) of them;
// 0: each device has its own). The simulator lets the kernels of a node's
// devices run at once while their cores add up to at most host_cores, for
// the ops it prices analytically (a measured op's time already holds the
// cores it shared).
//
//
// wake_seconds: what a stream that waits for another stream's (or
// device's) result loses when it has to block: the CPU backend's stream
// threads sleep on the event and take a hand-off and a wake-up to go on;
// 0 on GPUs, whose streams wait on events in hardware. With a profile
// (lwcc --cost-profile) the simulator takes the wake-up it measured.
//
// efficiency (optional; tools/gpu/calibrate.py fits it from a GPU's
// --profile-ops runs): what each kind of kernel achieves of the peaks,
// saturating with its size:
//
//   "efficiency": {"conv2d@tf32": {"compute_fraction": 0.5,
//                                  "compute_half_flops": 1e8,
//                                  "bandwidth_fraction": 0.5,
//                                  "bandwidth_half_bytes": 1e6},
//                  "relu": {"bandwidth_fraction": 0.5}, "default": {...}}
//
// (the form, with made-up figures: no GPU has been calibrated yet).
// A kernel of F FLOPs reaches compute_fraction x peak x F / (F +
// compute_half_flops) FLOP/s (half of its fraction at compute_half_flops),
// and of B bytes bandwidth_fraction x mem_bandwidth x B / (B +
// bandwidth_half_bytes), so it takes
//
//   max((F + compute_half_flops) / (compute_fraction x peak x share),
//       (B + bandwidth_half_bytes) / (bandwidth_fraction x mem_bandwidth))
//   + launch_seconds
//
// (share: the part of the device it fills, cost/CostModel.h; a term whose
// F or B is 0 is 0). A half size is thus also a fixed time of the kind
// beyond the launch, half / (fraction x peak): a library's overhead. A key
// is an op's mnemonic (as --emit=ir prints it) or "default", optionally
// followed by "@fp32", "@tf32", "@bf16" or "@fp16", the peak the op is
// priced at (CostModel::precision); an op takes the first of
// "KIND@PRECISION", "KIND", "default@PRECISION", "default" that the table
// has, and without any of them (or without the table) the formula with
// fractions 1 and half sizes 0: max(F / (peak x share), B / bandwidth) +
// launch. Fractions are in (0, 1] (default 1), half sizes non-negative
// (default 0).
//
// devices_per_gpu (optional, default 1): logical devices that share one
// GPU, as a trainer runs them with --devices=0,0,... (lwcc
// --devices-per-gpu overrides it). Devices 0..K-1 are GPU 0, the next K
// GPU 1, and devices_per_node counts GPUs. The logical devices of a GPU
// share its compute (their kernels' shares of its concurrency add up to at
// most the whole, as a device's streams do) and its memory (their arenas,
// params and workspaces add up to at most memory_bytes); what moves between
// them is copied inside the GPU's memory (read and written: half its
// bandwidth, a launch each) and summed by the trainer's own kernels, not
// sent over a link.
//
// calibration (optional): where the efficiency was measured:
//
//   "calibration": {"date": "YYYY-MM-DD", "gpu": "NVIDIA H100 80GB HBM3",
//                   "emulated": false, "driver": "13.0", "cuda": "13.0",
//                   "cudnn": "9.19.0", "cublas": "13.1.0", "lwcc": "COMMIT",
//                   "models": ["resnet18"], "precisions": ["fp32"],
//                   "batches": [32, 64], "points": N, "notes": "..."}
//
// date, gpu and emulated are required, the rest optional (strings; models
// and precisions lists of strings, batches of positive integers, points a
// non-negative integer). "emulated": true marks a fit of the emulated CUDA
// device's times (a test of the calibration, not a GPU's figures): lwcc
// warns when it plans on such a spec.
//===----------------------------------------------------------------------===//
#pragma once

#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lwcc {

/// A kind of kernel's fitted share of the peaks and the sizes at which it
/// reaches half of it (see "efficiency" above).
struct KindEfficiency {
  double computeFraction = 1;
  double computeHalfFlops = 0;
  double bandwidthFraction = 1;
  double bandwidthHalfBytes = 0;
};

/// Where a spec's efficiency was measured (see "calibration" above).
struct Calibration {
  std::string date, gpu, driver, cuda, cudnn, cublas, lwcc, notes;
  bool emulated = false;
  std::vector<std::string> models, precisions;
  std::vector<int64_t> batches;
  int64_t points = 0;
};

struct DeviceSpec {
  std::string name;
  double fp32Flops = 0;     ///< peak FP32 FLOP/s
  double tf32Flops = 0;     ///< peak TF32 tensor-core FLOP/s (fp32Flops where there is none)
  double bf16Flops = 0;     ///< peak FLOP/s on bf16 operands (tensor cores, dense)
  double fp16Flops = 0;     ///< peak FLOP/s on fp16 operands (tensor cores, dense)
  double memBandwidth = 0;  ///< device memory, bytes/s
  double launchSeconds = 0; ///< fixed cost of one kernel
  int64_t memoryBytes = 0;  ///< device memory size
  double intraBandwidth = 0, intraLatency = 0; ///< one link inside a node, bytes/s and s
  double interBandwidth = 0, interLatency = 0; ///< between nodes, bytes/s and s
  int64_t devicesPerNode = 1;                  ///< GPUs per node
  int64_t devicesPerGpu = 1; ///< logical devices per GPU (see devices_per_gpu above)
  int64_t concurrency = 0;   ///< threads in flight (0: every kernel fills the device)
  /// Cores the devices of a node share (0: each device has its own): the
  /// CPU backend's emulated devices split the machine's cores, each
  /// device's kernels running on max(1, cores / devices) of them.
  int64_t hostCores = 0;
  /// A blocked stream's wake-up after the result it waited for (seconds).
  double wakeSeconds = 0;
  /// Library workspaces per stream a device runs (bytes).
  int64_t workspaceBytesPerStream = 0;
  /// Whether each device holds the rows of the input batch it reads (the
  /// CUDA runtime's devices; the CPU backend's read the host's batch).
  bool inputsOnDevice = false;
  /// Per kind of kernel ("KIND", "KIND@PRECISION", "default", ...): its
  /// efficiency; empty: every kernel at the peaks.
  std::map<std::string, KindEfficiency, std::less<>> efficiency;
  /// Where the efficiency was measured, when the spec says.
  std::optional<Calibration> calibration;

  /// The efficiency of a kernel of op `kind` (a mnemonic; empty: none)
  /// priced at `precision` ("fp32", "tf32", "bf16", "fp16"): the table's
  /// first of KIND@PRECISION, KIND, default@PRECISION, default, or null.
  const KindEfficiency* efficiencyOf(std::string_view kind, std::string_view precision) const;

  /// The GPU (or CPU device) that logical device `device` runs on.
  int64_t gpu(int64_t device) const { return devicesPerGpu > 1 ? device / devicesPerGpu : device; }
  /// The node that logical device `device` belongs to.
  int64_t node(int64_t device) const {
    return devicesPerNode > 0 ? gpu(device) / devicesPerNode : 0;
  }
  /// Whether all of `devices` (two or more) run on one GPU.
  bool sameGpu(const std::vector<int64_t>& devices) const;
  /// Whether all of `devices` sit in one node.
  bool sameNode(const std::vector<int64_t>& devices) const;
};

/// The preset names, in the order --help lists them.
const std::vector<std::string>& deviceSpecPresets();
/// A preset by name, or nullopt-like error for an unknown one.
llvm::Expected<DeviceSpec> deviceSpecPreset(const std::string& name);
/// A preset name, or a JSON file (see above). Errors name the file and field.
llvm::Expected<DeviceSpec> loadDeviceSpec(const std::string& nameOrJsonFile);
/// Parses the JSON form; `origin` names the source in errors.
llvm::Expected<DeviceSpec> parseDeviceSpec(llvm::StringRef json, const std::string& origin);
/// The JSON form of `spec` (every field, efficiency and calibration where
/// it has them), which parseDeviceSpec reads back as the same spec.
llvm::json::Value deviceSpecJson(const DeviceSpec& spec);

} // namespace lwcc
