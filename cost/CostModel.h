//===- CostModel.h - Time of ops and transfers on a device spec -*- C++ -*-===//
//
// Prices ops and communication on a DeviceSpec:
//  - an op's FLOPs come from its cost rule in the op table (ir/CostRules.cpp;
//    ops without one count one FLOP per result element), its bytes are the
//    bytes it reads and writes (operands and results; views move nothing, a
//    slice reads only what it copies);
//  - opSeconds = max(flops / peak, bytes / memory bandwidth) + launch, or
//    the measured time of the op when a profile has it; where the spec has
//    an efficiency for the op's kind (DeviceSpec.h's "efficiency"), each
//    rate is that kind's share of the peak, saturating with the size;
//  - a link between two devices is the intra-node link when both sit in one
//    node (DeviceSpec::node), the inter-node link otherwise; a collective
//    over devices that span nodes runs at the inter-node figures;
//  - collectives use ring algorithms over p devices with S bytes per
//    device: all_reduce 2(p-1)/p * S / bw + 2(p-1) * latency, all_gather
//    and reduce_scatter (p-1)/p * S_whole / bw + (p-1) * latency,
//    broadcast and reduce_to a pipelined chain S / bw + (p-1) * latency,
//    device_copy S / bw + latency, shard and unshard one copy per remote
//    piece from (to) the root, one after another.
//
// Measured profile (--cost-profile=FILE.json; the trainer's
// --profile-ops=FILE.json writes it):
//
//   {"device": "cpu", "devices": 2, "ops": [
//     {"op": "conv2d", "loc": "conv1", "device": 0, "seconds": 1.2e-4}, ...]}
//
// What a step spends outside its ops, which the simulator adds
// (cost/Simulator.h), all optional and non-negative: "step_gap_seconds",
// the devices' mean idle time from one step's last op to the start of the
// next (the host's work between steps); "stream_starts", a list of
// {"device": D, "stream": S, "seconds": T}, each stream's mean delay from
// the step's start to its thread beginning the step; "wake_seconds", the
// mean time a stream that blocked on an event another stream records takes
// to go on after the record (a thread's wake-up on the CPU backend).
//
// "op" is the mnemonic, "loc" the op's location name (Location::name, the
// ONNX node name that backward ops, and the shards and communication ops
// materialize makes of an op, inherit), "device" the @dev the op ran on
// (absent: 0), "seconds" the mean time of one run of the op. "devices" is
// the count of logical devices of the trainer that measured it (absent: one
// more than the largest "device"). Several entries with the same (op, loc,
// device) are ops that share the key; an op takes their mean. An op with
// no entry on its device takes the mean of its (op, loc) entries on other
// devices; with none at all, the analytic time.
//
// A profile of several devices holds what each device ran: the pieces of
// the model's ops its strategy made. Its times price the ops of a parallel
// graph (isMultiDevice: the materialized IR, whose ops are those pieces) as
// they are, with no scaling; an op of a graph no strategy has split yet (the
// whole op: what the layer-wise search and the hypergraph partitioner weigh)
// takes the analytic time instead. A communication op has an entry for each participant (from
// the moment its last participant arrived to its end, as each saw it): the
// op takes the mean of the entries of its participants (its operands' and
// results' devices) under its mnemonic and loc; with none, the lookup above
// on opDevice(op); with nothing measured, the ring formulas. The simulator
// keeps each participant busy for its own entry (measuredSecondsOn).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "cost/DeviceSpec.h"
#include "ir/IR.h"

#include <map>
#include <optional>
#include <tuple>

namespace lwcc {

/// What a cost rule may read besides the op (ir/OpTable.h's CostRule).
struct CostContext {
  const DeviceSpec* spec = nullptr;
};

/// Measured per-op seconds, keyed as described above.
struct OpProfile {
  std::string device; ///< the spec or machine the times were measured on
  struct Entry {
    double seconds = 0;
    double waitedSeconds = 0; ///< summed "waited_seconds": its stream's waits before it
    int64_t count = 0;
  };
  /// The logical devices of the trainer that measured it.
  int64_t devices = 1;
  /// (mnemonic, loc name, device) -> summed seconds and count.
  std::map<std::tuple<std::string, std::string, int64_t>, Entry> entries;
  /// The same keys -> each entry in the profile's order: the k-th op of a
  /// key on a device (a forward transfer and the backward one of the same
  /// layer share a loc, but not their times and waits).
  std::map<std::tuple<std::string, std::string, int64_t>, std::vector<Entry>> occurrences;
  /// The devices' idle time between steps ("step_gap_seconds"), and a
  /// stream's wake-up after blocking on an event ("wake_seconds"): 0 when
  /// the profile does not say.
  double stepGapSeconds = 0, wakeSeconds = 0;
  /// (device, stream) -> its thread's mean delay from the step's start
  /// ("stream_starts"; a stream not listed starts with the step).
  std::map<std::pair<int64_t, int64_t>, double> streamStarts;
  /// The measured time of an op with this key, or nullopt.
  std::optional<double> lookup(std::string_view mnemonic, const std::string& loc,
                               int64_t device) const;
};

/// Reads a profile file; errors name the file and the entry.
llvm::Expected<OpProfile> loadOpProfile(const std::string& file);
llvm::Expected<OpProfile> parseOpProfile(llvm::StringRef json, const std::string& origin);

class CostModel {
public:
  explicit CostModel(DeviceSpec spec, std::optional<OpProfile> profile = std::nullopt);

  const DeviceSpec& spec() const { return spec_; }
  bool hasProfile() const { return profile_.has_value(); }
  /// The profile's idle time between steps and wake-up after an event
  /// wait (0 without a profile).
  double stepGapSeconds() const { return profile_ ? profile_->stepGapSeconds : 0; }
  /// A blocked stream's wake-up: with a profile, what it measured (0 where
  /// its trainer never blocked); without, the spec's.
  double wakeSeconds() const { return profile_ ? profile_->wakeSeconds : spec_.wakeSeconds; }
  /// The profile's delay of (device, stream) from the step's start (0
  /// without one).
  double streamStartSeconds(int64_t device, int64_t stream) const;
  /// Which float32 ops are priced at the TF32 peak, as the trainers run
  /// them: convolutions (the default, PyTorch's and the trainers'), every
  /// op (lwcc --tf32), or none (--no-tf32).
  enum class Tf32 { Off, Convolutions, All };
  void setTf32(Tf32 mode) { tf32_ = mode; }

  /// FLOPs of one run of `op` (0 for communication ops).
  double flops(const Op& op) const;
  /// Bytes `op` reads and writes in device memory (0 for views).
  double bytes(const Op& op) const;
  /// The analytic time of an op with these figures on one device: at the
  /// spec's bf16 or fp16 peak where `op` (when given) has a bf16 or fp16
  /// operand, else float32's or TF32's (setTf32); a kernel that fills
  /// `share` of the device (fill) computes at that share of the peak (its
  /// arithmetic runs on that share of the SMs: a wave of few threads takes
  /// as long however few they are, so pieces of it side by side gain
  /// nothing), while its memory traffic still streams at the full
  /// bandwidth (a few threads, each with several loads in flight, keep the
  /// memory busy). With the spec's efficiency of the op's kind (none for a
  /// null `op`: the "default" entry, if any), each of the two at that
  /// kind's saturating rate (DeviceSpec.h).
  double computeSeconds(double flops, double bytes, const Op* op = nullptr, double share = 1) const;
  /// The peak FLOP/s `op` runs at (see computeSeconds).
  double peakFlops(const Op* op) const;
  /// Which of the spec's peaks that is: "bf16", "fp16", "tf32" or "fp32"
  /// (the key of the spec's efficiency table, after the op's kind).
  std::string_view precision(const Op* op) const;
  /// Time of one run of a compute op on its device: measured, or
  /// computeSeconds(flops, bytes, op, fill). Communication ops: commSeconds.
  double opSeconds(const Op& op) const;
  /// The share of its device a compute op's kernel occupies, in (0, 1]: its
  /// parallel work items (the elements of its largest result, or of its
  /// largest operand / 64 for a reduction to few outputs, or a matrix
  /// product's multiply-adds / 64, split-K) over the spec's
  /// concurrency; 1 when the spec has none (every kernel fills the device);
  /// 0 (none counted) for an op the profile measured: its time already
  /// holds what it shared of the device with the other streams' kernels.
  /// `share` < 1: the fill of that share of the op's work (a device's
  /// piece of a split op).
  double fill(const Op& op, double share = 1) const;
  /// The share of its node's cores a compute op of a trainer of `devices`
  /// devices takes: max(1, cores / devices) / cores on a spec whose devices
  /// share host_cores, when the op is priced analytically; 0 otherwise (a
  /// measured time already holds the cores it shared).
  double hostFill(const Op& op, int64_t devices) const;
  /// The profile's time of `op` on its device (or others; a communication
  /// op: the mean over its participants), if measured.
  std::optional<double> measuredSeconds(const Op& op) const;
  /// A communication op's entry on one participant (its own time, from the
  /// last arrival until it went on), if measured. `occurrence` >= 0: the
  /// op is that participant's k-th of its mnemonic and loc in the step, and
  /// the k-th such entry of the profile prices it (where the profile has
  /// it; the mean of them otherwise).
  std::optional<double> measuredSecondsOn(const Op& commOp, int64_t device,
                                          int64_t occurrence = -1) const;
  /// A participant's measured mean wait right before a communication op
  /// (for events and for the other participants), or nullopt; `occurrence`
  /// as for measuredSecondsOn.
  std::optional<double> measuredWaitOn(const Op& commOp, int64_t device,
                                       int64_t occurrence = -1) const;
  /// Time of a communication op (0 for other ops): measured, or by its
  /// kind, bytes and devices.
  double commSeconds(const Op& commOp) const;
  /// Time to move `bytes` from device `src` to device `dst` (0 when equal).
  double transferSeconds(int64_t bytes, int64_t src, int64_t dst) const;

  /// Collectives over `devices` with `bytes` per device (all_reduce) or of
  /// the whole tensor (all_gather, reduce_scatter, broadcast).
  double allReduceSeconds(double bytes, const std::vector<int64_t>& devices) const;
  double allGatherSeconds(double wholeBytes, const std::vector<int64_t>& devices) const;
  double reduceScatterSeconds(double wholeBytes, const std::vector<int64_t>& devices) const;
  double broadcastSeconds(double bytes, int64_t src, const std::vector<int64_t>& devices) const;

  /// The link figures between devices (bandwidth, latency): intra-node when
  /// all of `devices` share a node; for logical devices that share a GPU
  /// (DeviceSpec::devicesPerGpu) a copy inside its memory (half its
  /// bandwidth, one launch).
  double linkBandwidth(const std::vector<int64_t>& devices) const;
  double linkLatency(const std::vector<int64_t>& devices) const;
  /// What the trainer's kernels take to move `bytesMoved` (read and written)
  /// inside one GPU's memory in `kernels` launches.
  double onGpuSeconds(double bytesMoved, double kernels) const;

private:
  /// A communication op's profile entry on one participant, or null.
  const OpProfile::Entry* commEntryOn(const Op& op, int64_t device, int64_t occurrence) const;

  DeviceSpec spec_;
  std::optional<OpProfile> profile_;
  Tf32 tf32_ = Tf32::Convolutions;
};

} // namespace lwcc
