//===- DeviceSpec.cpp - Device presets and the JSON spec form -------------===//
#include "cost/DeviceSpec.h"

#include "ir/Diagnostics.h"
#include "ir/OpTable.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace lwcc {

namespace {

constexpr double kGB = 1e9;
constexpr int64_t kGiB = int64_t{1} << 30;

/// Presets, from public datasheets (per GPU, dense figures, one direction of
/// a link):
///  h100   NVIDIA H100 SXM5 datasheet: 67 TFLOP/s FP32, 494.7 TFLOP/s TF32
///         tensor (989 with sparsity), 3.35 TB/s HBM3, 80 GB; NVLink 4 at
///         900 GB/s both directions (450 one way); 8 GPUs per HGX node, one
///         400 Gb/s NDR InfiniBand adapter per GPU (50 GB/s).
///  h200   NVIDIA H200 SXM datasheet: the H100's compute, 4.8 TB/s HBM3e,
///         141 GB; the same NVLink and network.
///  a100   NVIDIA A100 SXM4 80GB datasheet: 19.5 TFLOP/s FP32, 156 TFLOP/s
///         TF32, 2.039 TB/s HBM2e, 80 GB; NVLink 3 at 600 GB/s both ways
///         (300 one way); 8 per node, 200 Gb/s HDR InfiniBand per GPU.
///  p100-cluster  the setting of Jia et al. (ICML 2018): Tesla P100 SXM2
///         datasheet, 10.6 TFLOP/s FP32 (no TF32), 732 GB/s HBM2, 16 GB;
///         4 GPUs per node on NVLink 1 (20 GB/s one way per link, one link
///         between a pair), nodes on 100 Gb/s EDR InfiniBand (12.5 GB/s).
/// concurrency: SMs times 2048 resident threads per SM (the same on the
/// three GPUs): H100 SXM5 132 SMs, A100 108, P100 56 (the datasheets).
/// Launch overhead and latencies are typical measured orders (a few
/// microseconds for a kernel launch and an NVLink hop, more through the
/// network stack), not datasheet figures.
///  cpu    this 2-core machine running emulated devices, measured here
///         (2026-11-22, a one-thread OpenBLAS cblas_sgemm and memcpy, as the
///         CPU trainer's kernels use them, machine under load): sgemm
///         56 GFLOP/s at 512^3 and 1024^3, memcpy of 64 MiB 9.1 GB/s (18 GB/s
///         of read plus write traffic, what `bytes` counts); a transfer
///         between emulated devices is such a memcpy. Redone with the
///         oneDNN and threaded kernels (2026-11-24, quiet, from the CPU
///         trainers' --profile-ops): a kernel call 1.7 us (what the
///         analytic step of the zoo's resnet18 and inception at test size
///         misses per op against their measured steps, fork and join of
///         the kernel threads included), a link's latency 11 us (an
///         all-reduce of a batch norm's few statistics between two devices
///         takes 22 us per participant, 2(p-1) latencies: a thread
///         hand-off and wake-up each way); host_cores 2, the machine's;
///         a blocked stream thread's wake-up 27 us (2026-11-24, the
///         --gpus 4 layer-wise AlexNet at test size: 26.7 us, 5.1 wakes
///         per step, in its --profile-ops).
///         Between nodes: the
///         processes of a trainer under mpirun (--devices-per-node; all
///         1024 devices are one node otherwise), measured here (2026-11-23,
///         load ~7) as messages between two processes through lwcc's
///         Cluster (OpenMPI shared memory): one way 15 us for 8 bytes,
///         340 us for 1 MiB, 1.7 ms for 4 MiB (2.5-3 GB/s).
/// What lwcc's CUDA runtime and its libraries hold on a GPU for each stream
/// of a device (runtime/cuda/Context.cu; measured with cudaMemGetInfo on an
/// H100, cuDNN 9.19, cuBLAS 13.1, 2026-11-26): its 32 MiB cuBLAS workspace,
/// a cuDNN handle (8 MiB) and a cuBLAS handle (2 MiB, its default workspace
/// pool sized to nothing). A multi-device trainer's streams have a pair of
/// handles each; one device's streams share one (10 MiB counted over).
constexpr int64_t kLibraryBytesPerStream = int64_t{42} << 20;

DeviceSpec preset(const std::string& name) {
  DeviceSpec s;
  s.name = name;
  if (name == "h100" || name == "h200") {
    s.fp32Flops = 67e12;
    s.tf32Flops = 494.7e12;
    s.bf16Flops = s.fp16Flops = 989.4e12;
    s.memBandwidth = name == "h100" ? 3.35e12 : 4.8e12;
    s.memoryBytes = name == "h100" ? 80 * kGiB : 141 * kGiB;
    s.launchSeconds = 4e-6;
    s.intraBandwidth = 450 * kGB;
    s.intraLatency = 3e-6;
    s.interBandwidth = 50 * kGB;
    s.interLatency = 8e-6;
    s.devicesPerNode = 8;
    s.concurrency = 132 * 2048; // SMs x resident threads per SM
    s.workspaceBytesPerStream = kLibraryBytesPerStream;
    s.inputsOnDevice = true;
  } else if (name == "a100") {
    s.fp32Flops = 19.5e12;
    s.tf32Flops = 156e12;
    s.bf16Flops = s.fp16Flops = 312e12;
    s.memBandwidth = 2.039e12;
    s.memoryBytes = 80 * kGiB;
    s.launchSeconds = 4e-6;
    s.intraBandwidth = 300 * kGB;
    s.intraLatency = 3e-6;
    s.interBandwidth = 25 * kGB;
    s.interLatency = 8e-6;
    s.devicesPerNode = 8;
    s.concurrency = 108 * 2048;
    s.workspaceBytesPerStream = kLibraryBytesPerStream;
    s.inputsOnDevice = true;
  } else if (name == "p100-cluster") {
    s.fp32Flops = 10.6e12;
    s.tf32Flops = 10.6e12;
    s.bf16Flops = 10.6e12; // no bf16 arithmetic: float32's
    s.fp16Flops = 21.2e12; // packed half2, no tensor cores
    s.memBandwidth = 732 * kGB;
    s.memoryBytes = 16 * kGiB;
    s.launchSeconds = 5e-6;
    s.intraBandwidth = 20 * kGB;
    s.intraLatency = 5e-6;
    s.interBandwidth = 12.5 * kGB;
    s.interLatency = 1e-5;
    s.devicesPerNode = 4;
    s.concurrency = 56 * 2048;
    s.workspaceBytesPerStream = kLibraryBytesPerStream;
    s.inputsOnDevice = true;
  } else if (name == "cpu") {
    s.fp32Flops = 56e9;
    s.tf32Flops = 56e9;
    s.bf16Flops = s.fp16Flops = 56e9; // widened to float32
    s.memBandwidth = 18 * kGB;
    s.memoryBytes = 4 * kGiB;
    s.launchSeconds = 1.7e-6;
    s.intraBandwidth = 9 * kGB;
    s.intraLatency = 11e-6;
    s.interBandwidth = 2.5 * kGB;
    s.interLatency = 1.5e-5;
    s.devicesPerNode = 1024;
    s.hostCores = 2;
    s.wakeSeconds = 27e-6;
  }
  return s;
}

/// The precisions a key of the efficiency table may name.
constexpr std::string_view kPrecisions[] = {"fp32", "tf32", "bf16", "fp16"};

/// "efficiency": each key a kind (an op's mnemonic or "default") with an
/// optional "@PRECISION", each value an object of the four parameters.
llvm::Error parseEfficiency(const llvm::json::Value& table, const std::string& origin,
                            DeviceSpec& s) {
  const llvm::json::Object* obj = table.getAsObject();
  if (!obj)
    return makeError(origin + ": field 'efficiency' must be an object of op kinds");
  for (const auto& [key, value] : *obj) {
    const std::string field = "efficiency." + key.str();
    auto [kind, precision] = llvm::StringRef(key).split('@');
    if (kind != "default" && !lookupOpKind(kind))
      return makeError(origin + ": field '" + field + "': unknown op kind '" + kind.str() +
                       "' (expected an op's mnemonic or 'default')");
    if (llvm::StringRef(key).contains('@') &&
        std::find(std::begin(kPrecisions), std::end(kPrecisions), std::string_view(precision)) ==
            std::end(kPrecisions))
      return makeError(origin + ": field '" + field + "': unknown precision '" + precision.str() +
                       "' (expected fp32, tf32, bf16 or fp16)");
    const llvm::json::Object* params = value.getAsObject();
    if (!params)
      return makeError(origin + ": field '" + field + "' must be an object");
    KindEfficiency e;
    struct Param {
      const char* name;
      double* out;
      bool fraction;
    };
    const Param known[] = {{"compute_fraction", &e.computeFraction, true},
                           {"compute_half_flops", &e.computeHalfFlops, false},
                           {"bandwidth_fraction", &e.bandwidthFraction, true},
                           {"bandwidth_half_bytes", &e.bandwidthHalfBytes, false}};
    for (const auto& kv : *params)
      if (std::none_of(std::begin(known), std::end(known),
                       [&](const Param& p) { return kv.first == p.name; }))
        return makeError(origin + ": unknown field '" + field + "." + kv.first.str() +
                         "' (expected compute_fraction, compute_half_flops, bandwidth_fraction "
                         "or bandwidth_half_bytes)");
    for (const Param& p : known) {
      const llvm::json::Value* v = params->get(p.name);
      if (!v)
        continue;
      auto d = v->getAsNumber();
      const std::string where = origin + ": field '" + field + "." + p.name + "'";
      if (!d)
        return makeError(where + " must be a number");
      if (p.fraction && !(*d > 0 && *d <= 1))
        return makeError(where + " must be in (0, 1], got " + std::to_string(*d));
      if (!p.fraction && !(*d >= 0 && std::isfinite(*d)))
        return makeError(where + " must be non-negative, got " + std::to_string(*d));
      *p.out = *d;
    }
    s.efficiency[key.str()] = e;
  }
  return llvm::Error::success();
}

/// "calibration": where the efficiency was measured.
llvm::Error parseCalibration(const llvm::json::Value& value, const std::string& origin,
                             DeviceSpec& s) {
  const llvm::json::Object* obj = value.getAsObject();
  if (!obj)
    return makeError(origin + ": field 'calibration' must be an object");
  Calibration c;
  const std::pair<const char*, std::string*> strings[] = {
      {"date", &c.date},   {"gpu", &c.gpu},       {"driver", &c.driver}, {"cuda", &c.cuda},
      {"cudnn", &c.cudnn}, {"cublas", &c.cublas}, {"lwcc", &c.lwcc},     {"notes", &c.notes}};
  const std::pair<const char*, std::vector<std::string>*> lists[] = {{"models", &c.models},
                                                                     {"precisions", &c.precisions}};
  auto where = [&](llvm::StringRef field) {
    return origin + ": field 'calibration." + field.str() + "'";
  };
  for (const auto& [key, v] : *obj) {
    if (auto it = std::find_if(std::begin(strings), std::end(strings),
                               [&](const auto& f) { return key == f.first; });
        it != std::end(strings)) {
      if (!v.getAsString())
        return makeError(where(key) + " must be a string");
      *it->second = v.getAsString()->str();
    } else if (auto l = std::find_if(std::begin(lists), std::end(lists),
                                     [&](const auto& f) { return key == f.first; });
               l != std::end(lists)) {
      const llvm::json::Array* a = v.getAsArray();
      if (!a || std::any_of(a->begin(), a->end(), [](const auto& e) { return !e.getAsString(); }))
        return makeError(where(key) + " must be a list of strings");
      for (const llvm::json::Value& e : *a)
        l->second->push_back(e.getAsString()->str());
    } else if (key == "batches") {
      const llvm::json::Array* a = v.getAsArray();
      if (!a || std::any_of(a->begin(), a->end(), [](const auto& e) {
            return !e.getAsInteger() || *e.getAsInteger() < 1;
          }))
        return makeError(where(key) + " must be a list of positive integers");
      for (const llvm::json::Value& e : *a)
        c.batches.push_back(*e.getAsInteger());
    } else if (key == "points") {
      if (!v.getAsInteger() || *v.getAsInteger() < 0)
        return makeError(where(key) + " must be a non-negative integer");
      c.points = *v.getAsInteger();
    } else if (key == "emulated") {
      if (!v.getAsBoolean())
        return makeError(where(key) + " must be true or false");
      c.emulated = *v.getAsBoolean();
    } else {
      return makeError(origin + ": unknown field 'calibration." + key.str() + "'");
    }
  }
  for (const char* required : {"date", "gpu", "emulated"})
    if (!obj->get(required))
      return makeError(origin + ": missing field 'calibration." + required + "'");
  s.calibration = std::move(c);
  return llvm::Error::success();
}

} // namespace

const KindEfficiency* DeviceSpec::efficiencyOf(std::string_view kind,
                                               std::string_view precision) const {
  if (efficiency.empty())
    return nullptr;
  // The keys on the stack: the planner prices ops by the million.
  char withKind[64], withDefault[32];
  auto joined = [&](char* buf, size_t size, std::string_view a) {
    const size_t n = std::min(a.size(), size - precision.size() - 1);
    std::copy_n(a.data(), n, buf);
    buf[n] = '@';
    std::copy_n(precision.data(), precision.size(), buf + n + 1);
    return std::string_view(buf, n + 1 + precision.size());
  };
  if (precision.size() > 8)
    precision = precision.substr(0, 8);
  for (std::string_view key :
       {joined(withKind, sizeof withKind, kind), kind,
        joined(withDefault, sizeof withDefault, "default"), std::string_view("default")})
    if (auto it = efficiency.find(key); it != efficiency.end())
      return &it->second;
  return nullptr;
}

bool DeviceSpec::sameNode(const std::vector<int64_t>& devices) const {
  if (devices.empty())
    return true;
  int64_t n = node(devices[0]);
  return std::all_of(devices.begin(), devices.end(), [&](int64_t d) { return node(d) == n; });
}

bool DeviceSpec::sameGpu(const std::vector<int64_t>& devices) const {
  if (devicesPerGpu <= 1 || devices.size() < 2)
    return false;
  const int64_t g = gpu(devices[0]);
  return std::all_of(devices.begin(), devices.end(), [&](int64_t d) { return gpu(d) == g; });
}

const std::vector<std::string>& deviceSpecPresets() {
  static const std::vector<std::string> names{"h100", "h200", "a100", "p100-cluster", "cpu"};
  return names;
}

llvm::Expected<DeviceSpec> deviceSpecPreset(const std::string& name) {
  const auto& names = deviceSpecPresets();
  if (std::find(names.begin(), names.end(), name) == names.end())
    return makeError("unknown device spec '" + name +
                     "' (expected h100, h200, a100, p100-cluster, cpu or a .json file)");
  return preset(name);
}

llvm::Expected<DeviceSpec> parseDeviceSpec(llvm::StringRef text, const std::string& origin) {
  auto json = llvm::json::parse(text);
  if (!json)
    return makeError(origin + ": invalid JSON: " + llvm::toString(json.takeError()));
  const llvm::json::Object* obj = json->getAsObject();
  if (!obj)
    return makeError(origin + ": a device spec must be a JSON object");
  static const char* const known[] = {"name",
                                      "fp32_flops",
                                      "tf32_flops",
                                      "bf16_flops",
                                      "fp16_flops",
                                      "mem_bandwidth",
                                      "launch_seconds",
                                      "memory_bytes",
                                      "intra_bandwidth",
                                      "intra_latency",
                                      "inter_bandwidth",
                                      "inter_latency",
                                      "devices_per_node",
                                      "devices_per_gpu",
                                      "concurrency",
                                      "host_cores",
                                      "wake_seconds",
                                      "workspace_bytes_per_stream",
                                      "inputs_on_device",
                                      "efficiency",
                                      "calibration"};
  for (const auto& kv : *obj)
    if (std::find(std::begin(known), std::end(known), kv.first.str()) == std::end(known))
      return makeError(origin + ": unknown field '" + kv.first.str() + "'");
  DeviceSpec s;
  s.name = llvm::sys::path::stem(origin).str();
  if (const llvm::json::Value* v = obj->get("name")) {
    if (!v->getAsString())
      return makeError(origin + ": field 'name' must be a string");
    s.name = v->getAsString()->str();
  }
  auto number = [&](const char* field, double& out, bool required, bool allowZero) -> llvm::Error {
    const llvm::json::Value* v = obj->get(field);
    if (!v) {
      if (required)
        return makeError(origin + ": missing field '" + field + "'");
      return llvm::Error::success();
    }
    auto d = v->getAsNumber();
    if (!d)
      return makeError(origin + ": field '" + field + "' must be a number");
    if (*d < 0 || (!allowZero && *d == 0))
      return makeError(origin + ": field '" + field + "' must be " +
                       (allowZero ? "non-negative" : "positive") + ", got " + std::to_string(*d));
    out = *d;
    return llvm::Error::success();
  };
  if (const llvm::json::Value* v = obj->get("inputs_on_device")) {
    if (!v->getAsBoolean())
      return makeError(origin + ": field 'inputs_on_device' must be true or false");
    s.inputsOnDevice = *v->getAsBoolean();
  }
  double memory = 0, perNode = 0, concurrency = 0, hostCores = 0, workspace = 0;
  struct Field {
    const char* name;
    double* out;
    bool required, allowZero;
  };
  const Field fields[] = {
      {"fp32_flops", &s.fp32Flops, true, false},
      {"tf32_flops", &s.tf32Flops, false, false},
      {"bf16_flops", &s.bf16Flops, false, false},
      {"fp16_flops", &s.fp16Flops, false, false},
      {"mem_bandwidth", &s.memBandwidth, true, false},
      {"launch_seconds", &s.launchSeconds, true, true},
      {"memory_bytes", &memory, true, false},
      {"intra_bandwidth", &s.intraBandwidth, true, false},
      {"intra_latency", &s.intraLatency, true, true},
      {"inter_bandwidth", &s.interBandwidth, true, false},
      {"inter_latency", &s.interLatency, true, true},
      {"devices_per_node", &perNode, true, false},
      {"concurrency", &concurrency, false, true},
      {"host_cores", &hostCores, false, true},
      {"wake_seconds", &s.wakeSeconds, false, true},
      {"workspace_bytes_per_stream", &workspace, false, true},
  };
  for (const Field& f : fields)
    if (llvm::Error e = number(f.name, *f.out, f.required, f.allowZero))
      return e;
  if (!obj->get("tf32_flops"))
    s.tf32Flops = s.fp32Flops;
  if (!obj->get("bf16_flops"))
    s.bf16Flops = s.tf32Flops;
  if (!obj->get("fp16_flops"))
    s.fp16Flops = s.tf32Flops;
  if (perNode != static_cast<double>(static_cast<int64_t>(perNode)))
    return makeError(origin + ": field 'devices_per_node' must be an integer");
  for (auto [field, v] : {std::pair{"concurrency", concurrency},
                          {"host_cores", hostCores},
                          {"workspace_bytes_per_stream", workspace}})
    if (v != static_cast<double>(static_cast<int64_t>(v)))
      return makeError(origin + ": field '" + field + "' must be an integer");
  s.memoryBytes = static_cast<int64_t>(memory);
  s.devicesPerNode = static_cast<int64_t>(perNode);
  s.concurrency = static_cast<int64_t>(concurrency);
  s.hostCores = static_cast<int64_t>(hostCores);
  s.workspaceBytesPerStream = static_cast<int64_t>(workspace);
  if (const llvm::json::Value* v = obj->get("efficiency"))
    if (llvm::Error e = parseEfficiency(*v, origin, s))
      return e;
  if (const llvm::json::Value* v = obj->get("calibration"))
    if (llvm::Error e = parseCalibration(*v, origin, s))
      return e;
  if (const llvm::json::Value* v = obj->get("devices_per_gpu")) {
    llvm::Optional<int64_t> k = v->getAsInteger();
    if (!k || *k < 1)
      return makeError(origin + ": field 'devices_per_gpu' must be a positive integer");
    s.devicesPerGpu = *k;
  }
  return s;
}

llvm::json::Value deviceSpecJson(const DeviceSpec& s) {
  llvm::json::Object obj{{"name", s.name},
                         {"fp32_flops", s.fp32Flops},
                         {"tf32_flops", s.tf32Flops},
                         {"bf16_flops", s.bf16Flops},
                         {"fp16_flops", s.fp16Flops},
                         {"mem_bandwidth", s.memBandwidth},
                         {"launch_seconds", s.launchSeconds},
                         {"memory_bytes", s.memoryBytes},
                         {"intra_bandwidth", s.intraBandwidth},
                         {"intra_latency", s.intraLatency},
                         {"inter_bandwidth", s.interBandwidth},
                         {"inter_latency", s.interLatency},
                         {"devices_per_node", s.devicesPerNode},
                         {"devices_per_gpu", s.devicesPerGpu},
                         {"concurrency", s.concurrency},
                         {"host_cores", s.hostCores},
                         {"wake_seconds", s.wakeSeconds},
                         {"workspace_bytes_per_stream", s.workspaceBytesPerStream},
                         {"inputs_on_device", s.inputsOnDevice}};
  if (!s.efficiency.empty()) {
    llvm::json::Object table;
    for (const auto& [key, e] : s.efficiency)
      table[key] = llvm::json::Object{{"compute_fraction", e.computeFraction},
                                      {"compute_half_flops", e.computeHalfFlops},
                                      {"bandwidth_fraction", e.bandwidthFraction},
                                      {"bandwidth_half_bytes", e.bandwidthHalfBytes}};
    obj["efficiency"] = std::move(table);
  }
  if (const auto& c = s.calibration) {
    llvm::json::Object cal{{"date", c->date}, {"gpu", c->gpu}, {"emulated", c->emulated}};
    for (auto [key, v] : {std::pair{"driver", &c->driver},
                          {"cuda", &c->cuda},
                          {"cudnn", &c->cudnn},
                          {"cublas", &c->cublas},
                          {"lwcc", &c->lwcc},
                          {"notes", &c->notes}})
      if (!v->empty())
        cal[key] = *v;
    if (!c->models.empty())
      cal["models"] = llvm::json::Array(c->models);
    if (!c->precisions.empty())
      cal["precisions"] = llvm::json::Array(c->precisions);
    if (!c->batches.empty())
      cal["batches"] = llvm::json::Array(c->batches);
    if (c->points > 0)
      cal["points"] = c->points;
    obj["calibration"] = std::move(cal);
  }
  return llvm::json::Value(std::move(obj));
}

llvm::Expected<DeviceSpec> loadDeviceSpec(const std::string& nameOrJsonFile) {
  if (!llvm::StringRef(nameOrJsonFile).endswith(".json"))
    return deviceSpecPreset(nameOrJsonFile);
  auto buf = llvm::MemoryBuffer::getFile(nameOrJsonFile);
  if (!buf)
    return makeError(nameOrJsonFile + ": cannot read device spec: " + buf.getError().message());
  return parseDeviceSpec((*buf)->getBuffer(), nameOrJsonFile);
}

} // namespace lwcc
