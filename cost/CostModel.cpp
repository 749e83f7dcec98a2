//===- CostModel.cpp - Time of ops and transfers on a device spec ---------===//
#include "cost/CostModel.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace lwcc {

//===--- Measured profiles -----------------------------------------------===//

std::optional<double> OpProfile::lookup(std::string_view mnemonic, const std::string& loc,
                                        int64_t device) const {
  auto it = entries.find({std::string(mnemonic), loc, device});
  if (it != entries.end() && it->second.count > 0)
    return it->second.seconds / static_cast<double>(it->second.count);
  // The same op measured on other devices.
  double sum = 0;
  int64_t count = 0;
  for (auto e = entries.lower_bound({std::string(mnemonic), loc, INT64_MIN});
       e != entries.end() && std::get<0>(e->first) == mnemonic && std::get<1>(e->first) == loc;
       ++e) {
    sum += e->second.seconds;
    count += e->second.count;
  }
  if (count == 0)
    return std::nullopt;
  return sum / static_cast<double>(count);
}

llvm::Expected<OpProfile> parseOpProfile(llvm::StringRef text, const std::string& origin) {
  auto json = llvm::json::parse(text);
  if (!json)
    return makeError(origin + ": invalid JSON: " + llvm::toString(json.takeError()));
  const llvm::json::Object* obj = json->getAsObject();
  if (!obj)
    return makeError(origin + ": a cost profile must be a JSON object");
  OpProfile profile;
  if (auto d = obj->getString("device"))
    profile.device = d->str();
  const llvm::json::Array* ops = obj->getArray("ops");
  if (!ops)
    return makeError(origin + ": missing array 'ops'");
  std::optional<int64_t> devices;
  if (obj->get("devices")) {
    auto n = obj->getInteger("devices");
    if (!n || *n < 1)
      return makeError(origin + ": field 'devices' must be a positive integer");
    devices = *n;
  }
  for (auto [key, field] : {std::pair{"step_gap_seconds", &profile.stepGapSeconds},
                            std::pair{"wake_seconds", &profile.wakeSeconds}}) {
    if (!obj->get(key))
      continue;
    auto v = obj->getNumber(key);
    if (!v || !(*v >= 0) || !std::isfinite(*v))
      return makeError(origin + ": field '" + key + "' must be a non-negative number");
    *field = *v;
  }
  if (obj->get("stream_starts")) {
    const llvm::json::Array* starts = obj->getArray("stream_starts");
    if (!starts)
      return makeError(origin + ": field 'stream_starts' must be an array");
    for (size_t i = 0; i < starts->size(); ++i) {
      std::string where = origin + ": stream_starts[" + std::to_string(i) + "]";
      const llvm::json::Object* e = (*starts)[i].getAsObject();
      auto d = e ? e->getInteger("device") : llvm::None;
      auto st = e ? e->getInteger("stream") : llvm::None;
      auto v = e ? e->getNumber("seconds") : llvm::None;
      if (!d || *d < 0 || !st || *st < 0 || !v || !(*v >= 0) || !std::isfinite(*v))
        return makeError(where + ": an entry must be {\"device\": D, \"stream\": S, "
                                 "\"seconds\": T} with non-negative numbers");
      profile.streamStarts[std::make_pair(int64_t(*d), int64_t(*st))] = *v;
    }
  }
  int64_t lastDevice = 0;
  for (size_t i = 0; i < ops->size(); ++i) {
    std::string where = origin + ": ops[" + std::to_string(i) + "]";
    const llvm::json::Object* e = (*ops)[i].getAsObject();
    if (!e)
      return makeError(where + ": an entry must be an object");
    auto mnemonic = e->getString("op");
    if (!mnemonic)
      return makeError(where + ": missing string field 'op'");
    if (!lookupOpKind(*mnemonic))
      return makeError(where + ": unknown op '" + mnemonic->str() + "'");
    auto loc = e->getString("loc");
    if (!loc)
      return makeError(where + ": missing string field 'loc'");
    auto seconds = e->getNumber("seconds");
    if (!seconds || *seconds < 0)
      return makeError(where + ": field 'seconds' must be a non-negative number");
    int64_t device = 0;
    if (e->get("device")) {
      auto d = e->getInteger("device");
      if (!d || *d < 0)
        return makeError(where + ": field 'device' must be a non-negative integer");
      device = *d;
    }
    if (devices && device >= *devices)
      return makeError(where + ": device " + std::to_string(device) + " of a profile of " +
                       std::to_string(*devices) + " devices");
    lastDevice = std::max(lastDevice, device);
    double waited = 0;
    if (e->get("waited_seconds")) {
      auto w = e->getNumber("waited_seconds");
      if (!w || !(*w >= 0) || !std::isfinite(*w))
        return makeError(where + ": field 'waited_seconds' must be a non-negative number");
      waited = *w;
    }
    const std::tuple<std::string, std::string, int64_t> key{mnemonic->str(), loc->str(), device};
    OpProfile::Entry& entry = profile.entries[key];
    entry.seconds += *seconds;
    entry.waitedSeconds += waited;
    entry.count += 1;
    profile.occurrences[key].push_back({*seconds, waited, 1});
  }
  profile.devices = devices.value_or(lastDevice + 1);
  return profile;
}

llvm::Expected<OpProfile> loadOpProfile(const std::string& file) {
  auto buf = llvm::MemoryBuffer::getFile(file);
  if (!buf)
    return makeError(file + ": cannot read cost profile: " + buf.getError().message());
  return parseOpProfile((*buf)->getBuffer(), file);
}

//===--- The model ---------------------------------------------------------===//

CostModel::CostModel(DeviceSpec spec, std::optional<OpProfile> profile)
    : spec_(std::move(spec)), profile_(std::move(profile)) {}

double CostModel::streamStartSeconds(int64_t device, int64_t stream) const {
  if (!profile_)
    return 0;
  auto it = profile_->streamStarts.find({device, stream});
  return it == profile_->streamStarts.end() ? 0 : it->second;
}

double CostModel::flops(const Op& op) const {
  if (op.info().isCommunication())
    return 0;
  if (op.info().costRule) {
    CostContext ctx{&spec_};
    return op.info().costRule(op, ctx);
  }
  double n = 0;
  for (unsigned r = 0; r < op.numResults(); ++r)
    n += static_cast<double>(op.result(r)->type().numElements());
  return n;
}

double CostModel::bytes(const Op& op) const {
  if (op.info().isCommunication() || op.info().view)
    return 0;
  // A slice reads only the elements it copies (a micro-batch's rows of the
  // batch, a device's piece of a tensor).
  if (op.kind() == OpKind::Slice)
    return 2 * static_cast<double>(op.result()->type().sizeInBytes());
  double b = 0;
  for (Value* v : op.operands())
    b += static_cast<double>(v->type().sizeInBytes());
  for (unsigned r = 0; r < op.numResults(); ++r)
    b += static_cast<double>(op.result(r)->type().sizeInBytes());
  return b;
}

std::string_view CostModel::precision(const Op* op) const {
  if (op)
    for (const Value* v : op->operands()) {
      if (v->type().dtype == DType::BF16)
        return "bf16";
      if (v->type().dtype == DType::F16)
        return "fp16";
    }
  const bool conv = op && (op->kind() == OpKind::Conv2d || op->kind() == OpKind::Conv2dGradInput ||
                           op->kind() == OpKind::Conv2dGradFilter);
  const bool tf32 = tf32_ == Tf32::All || (tf32_ == Tf32::Convolutions && conv);
  return tf32 ? "tf32" : "fp32";
}

double CostModel::peakFlops(const Op* op) const {
  const std::string_view p = precision(op);
  return p == "bf16"   ? spec_.bf16Flops
         : p == "fp16" ? spec_.fp16Flops
         : p == "tf32" ? spec_.tf32Flops
                       : spec_.fp32Flops;
}

double CostModel::computeSeconds(double flops, double bytes, const Op* op, double share) const {
  if (flops <= 0 && bytes <= 0)
    return 0;
  const double s = std::clamp(share, 1e-6, 1.0);
  const KindEfficiency* e =
      spec_.efficiencyOf(op ? op->mnemonic() : std::string_view(), precision(op));
  if (!e)
    return std::max(flops / (peakFlops(op) * s), bytes / spec_.memBandwidth) + spec_.launchSeconds;
  // The calibrated kind: each rate saturates with the kernel's size.
  const double compute =
      flops > 0 ? (flops + e->computeHalfFlops) / (e->computeFraction * peakFlops(op) * s) : 0;
  const double memory =
      bytes > 0 ? (bytes + e->bandwidthHalfBytes) / (e->bandwidthFraction * spec_.memBandwidth) : 0;
  return std::max(compute, memory) + spec_.launchSeconds;
}

double CostModel::opSeconds(const Op& op) const {
  if (op.info().isCommunication())
    return commSeconds(op);
  if (op.info().view || op.kind() == OpKind::Constant)
    return 0; // no kernel: a view aliases, a constant is set up once
  if (auto t = measuredSeconds(op))
    return *t;
  return computeSeconds(flops(op), bytes(op), &op, fill(op));
}

double CostModel::fill(const Op& op, double share) const {
  if (op.info().isCommunication())
    return 1;
  if (measuredSeconds(op))
    return 0; // its measured time holds what it shared of the device
  if (spec_.concurrency <= 0)
    return 1;
  double items = 0;
  for (unsigned r = 0; r < op.numResults(); ++r)
    items = std::max(items, static_cast<double>(op.result(r)->type().numElements()));
  for (unsigned i = 0; i < op.numOperands(); ++i)
    items = std::max(items, static_cast<double>(op.operand(i)->type().numElements()) / 64);
  // A matrix product of few outputs splits its reduction dim over thread
  // blocks (cuBLAS's split-K): 64 multiply-adds a work item.
  if (op.kind() == OpKind::Gemm || op.kind() == OpKind::MatMul)
    items = std::max(items, flops(op) / 128);
  return std::clamp(items * share / static_cast<double>(spec_.concurrency), 1e-6, 1.0);
}

double CostModel::hostFill(const Op& op, int64_t devices) const {
  if (spec_.hostCores <= 0 || op.info().isCommunication() || measuredSeconds(op))
    return 0;
  const int64_t cores = spec_.hostCores;
  return static_cast<double>(std::max<int64_t>(1, cores / std::max<int64_t>(devices, 1))) /
         static_cast<double>(cores);
}

std::optional<double> CostModel::measuredSeconds(const Op& op) const {
  if (!profile_)
    return std::nullopt;
  const std::string& loc = op.loc().name;
  if (op.info().isCommunication()) {
    // The mean of its participants' entries: each measured the op from the
    // last arrival to its end.
    std::set<int64_t> participants;
    for (unsigned i = 0; i < op.numOperands(); ++i)
      participants.insert(operandDevice(op, i));
    for (unsigned r = 0; r < op.numResults(); ++r)
      participants.insert(op.info().placement(op, true, r));
    double sum = 0;
    int64_t count = 0;
    for (int64_t d : participants)
      if (auto it = profile_->entries.find({std::string(op.mnemonic()), loc, d});
          it != profile_->entries.end()) {
        sum += it->second.seconds;
        count += it->second.count;
      }
    if (count > 0)
      return sum / static_cast<double>(count);
    return profile_->lookup(op.mnemonic(), loc, opDevice(op));
  }
  // A profile of several devices holds the pieces its trainer ran: they
  // price the ops of a parallel graph as they are, but no whole op of a
  // graph that no strategy has split yet. (Only ops without a @dev look at
  // the graph: device 0's in a parallel graph, every op before.)
  if (profile_->devices > 1 && !op.annotations().device &&
      !(op.parent() && isMultiDevice(*op.parent())))
    return std::nullopt;
  return profile_->lookup(op.mnemonic(), loc, opDevice(op));
}

const OpProfile::Entry* CostModel::commEntryOn(const Op& op, int64_t device,
                                               int64_t occurrence) const {
  if (!profile_ || !op.info().isCommunication())
    return nullptr;
  const std::tuple<std::string, std::string, int64_t> key{std::string(op.mnemonic()), op.loc().name,
                                                          device};
  if (occurrence >= 0)
    if (auto it = profile_->occurrences.find(key);
        it != profile_->occurrences.end() && occurrence < static_cast<int64_t>(it->second.size()))
      return &it->second[static_cast<size_t>(occurrence)];
  auto it = profile_->entries.find(key);
  return it == profile_->entries.end() || it->second.count == 0 ? nullptr : &it->second;
}

std::optional<double> CostModel::measuredSecondsOn(const Op& op, int64_t device,
                                                   int64_t occurrence) const {
  if (const OpProfile::Entry* e = commEntryOn(op, device, occurrence))
    return e->seconds / static_cast<double>(e->count);
  return std::nullopt;
}

std::optional<double> CostModel::measuredWaitOn(const Op& op, int64_t device,
                                                int64_t occurrence) const {
  if (const OpProfile::Entry* e = commEntryOn(op, device, occurrence))
    return e->waitedSeconds / static_cast<double>(e->count);
  return std::nullopt;
}

double CostModel::linkBandwidth(const std::vector<int64_t>& devices) const {
  if (spec_.sameGpu(devices))
    return spec_.memBandwidth / 2;
  return spec_.sameNode(devices) ? spec_.intraBandwidth : spec_.interBandwidth;
}

double CostModel::linkLatency(const std::vector<int64_t>& devices) const {
  if (spec_.sameGpu(devices))
    return spec_.launchSeconds;
  return spec_.sameNode(devices) ? spec_.intraLatency : spec_.interLatency;
}

double CostModel::onGpuSeconds(double bytesMoved, double kernels) const {
  return bytesMoved / spec_.memBandwidth + kernels * spec_.launchSeconds;
}

double CostModel::transferSeconds(int64_t bytes, int64_t src, int64_t dst) const {
  if (src == dst || bytes <= 0)
    return 0;
  if (spec_.sameGpu({src, dst}))
    return onGpuSeconds(2.0 * static_cast<double>(bytes), 1);
  const bool near = spec_.node(src) == spec_.node(dst); // sameNode without a list
  return static_cast<double>(bytes) / (near ? spec_.intraBandwidth : spec_.interBandwidth) +
         (near ? spec_.intraLatency : spec_.interLatency);
}

double CostModel::allReduceSeconds(double bytes, const std::vector<int64_t>& devices) const {
  double p = static_cast<double>(devices.size());
  if (p <= 1 || bytes <= 0)
    return 0;
  // On one GPU the trainer sums the p inputs into one buffer (each sum
  // reads two and writes one), then copies it to the p outputs.
  if (spec_.sameGpu(devices))
    return onGpuSeconds((3 * p - 1) * bytes + 2 * p * bytes, 2 * p);
  return 2 * (p - 1) / p * bytes / linkBandwidth(devices) + 2 * (p - 1) * linkLatency(devices);
}

double CostModel::allGatherSeconds(double wholeBytes, const std::vector<int64_t>& devices) const {
  double p = static_cast<double>(devices.size());
  if (p <= 1 || wholeBytes <= 0)
    return 0;
  // On one GPU: each device's piece copied to every device (p x p copies).
  if (spec_.sameGpu(devices))
    return onGpuSeconds(2 * p * wholeBytes, p * p);
  return (p - 1) / p * wholeBytes / linkBandwidth(devices) + (p - 1) * linkLatency(devices);
}

double CostModel::reduceScatterSeconds(double wholeBytes,
                                       const std::vector<int64_t>& devices) const {
  const double p = static_cast<double>(devices.size());
  // On one GPU: the p inputs summed into one buffer, its pieces copied out.
  if (p > 1 && wholeBytes > 0 && spec_.sameGpu(devices))
    return onGpuSeconds((3 * p - 1) * wholeBytes + 2 * wholeBytes, 2 * p);
  return allGatherSeconds(wholeBytes, devices);
}

double CostModel::broadcastSeconds(double bytes, int64_t src,
                                   const std::vector<int64_t>& devices) const {
  std::vector<int64_t> all = devices;
  if (std::find(all.begin(), all.end(), src) == all.end())
    all.push_back(src);
  double p = static_cast<double>(all.size());
  if (p <= 1 || bytes <= 0)
    return 0;
  // On one GPU: a copy to each of the others.
  if (spec_.sameGpu(all))
    return onGpuSeconds(2 * (p - 1) * bytes, p - 1);
  // A pipelined chain: the tensor streams through every link once.
  return bytes / linkBandwidth(all) + (p - 1) * linkLatency(all);
}

double CostModel::commSeconds(const Op& op) const {
  if (!op.info().isCommunication())
    return 0;
  if (auto t = measuredSeconds(op))
    return *t;
  auto size = [](const Value* v) { return static_cast<double>(v->type().sizeInBytes()); };
  std::vector<int64_t> devices;
  if (op.info().findAttr("devices"))
    devices = op.getInts("devices");
  size_t p = std::max<size_t>(devices.size(), 1);
  double total = 0;
  switch (op.kind()) {
  case OpKind::AllReduce:
    // Tensor-major operands, p per tensor: one device's share of each.
    for (unsigned i = 0; i < op.numOperands(); i += static_cast<unsigned>(p))
      total += size(op.operand(i));
    return allReduceSeconds(total, devices);
  case OpKind::AllGather:
    for (Value* v : op.operands())
      total += size(v);
    return allGatherSeconds(total, devices);
  case OpKind::ReduceScatter:
    for (unsigned i = 0; i < op.numOperands(); i += static_cast<unsigned>(p))
      total += size(op.operand(i));
    return reduceScatterSeconds(total, devices);
  case OpKind::Broadcast:
    return broadcastSeconds(size(op.operand(0)), op.getInt("src"), devices);
  case OpKind::ReduceTo:
    // The reverse of a broadcast.
    return broadcastSeconds(size(op.result(0)), op.getInt("dst"), devices);
  case OpKind::DeviceCopy:
    return transferSeconds(static_cast<int64_t>(size(op.result(0))), op.getInt("src"),
                           op.getInt("dst"));
  case OpKind::Shard:
    // One copy per remote piece, from the root, one after another.
    for (unsigned i = 0; i < op.numResults(); ++i)
      total +=
          transferSeconds(static_cast<int64_t>(size(op.result(i))), op.getInt("src"), devices[i]);
    return total;
  case OpKind::Unshard:
    for (unsigned i = 0; i < op.numOperands(); ++i)
      total +=
          transferSeconds(static_cast<int64_t>(size(op.operand(i))), devices[i], op.getInt("dst"));
    return total;
  default:
    return 0;
  }
}

} // namespace lwcc
