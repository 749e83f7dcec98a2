//===- Simulator.h - Replays a scheduled training step on a cost model -*- C++ -*-===//
//
// The simulator predicts how long one training step takes on N devices:
// it replays the materialized, scheduled graph (@dev, @stream, the
// communication ops) with each op's time from a cost model, and returns the
// step time (makespan), per-device busy times and a timeline that
// writeChromeTrace turns into Chrome trace-event JSON (Perfetto opens it;
// the trainer's --trace writes its measured timeline in the same format).
//
// The model:
//  - Every (device, stream) is a FIFO in program order: an op starts when
//    the ops before it on its stream have ended and its operands are ready
//    (a value read on another stream or device: the wait place-events puts
//    there). Graph inputs and params are ready at time 0. A stream
//    that would block on such a wait (the value is written after the
//    stream's previous op ended) goes on SimCosts::wakeSeconds after the
//    write: a blocked thread's wake-up on the CPU backend, as its profile
//    measures it.
//  - A stream's first op starts no earlier than SimCosts::streamStartSeconds
//    (its thread's measured delay from the step's start); the step is the
//    makespan plus SimCosts::stepGapSeconds, the devices' measured idle time
//    between steps.
//  - A communication op takes the stream of every device it reads or
//    writes (its @stream, else stream 0) for its whole duration, and the
//    links it uses, which are shared resources:
//      * inside a node, each device has a send port and a receive port
//        (full duplex); a copy uses the source's send port and the
//        destination's receive port; ring collectives (all_reduce,
//        all_gather, reduce_scatter) use both ports of every participant;
//        broadcast/shard send from the source, reduce_to/unshard receive
//        at the destination;
//      * across nodes, each node has one network port per direction, used
//        by a communication op whose participants span several nodes.
//    A link serves one op at a time; an op takes the earliest interval in
//    which its streams are free and all its links are idle.
//    With a measured profile, each participant is busy for its own measured
//    time of the op (SimCosts::commSecondsOn) and its results are ready
//    then; the links for the op's time.
//    With a profile that measured each participant's wait right before the
//    op (SimCosts::commWaitOn), the op starts later by what the measured
//    waits exceed the replayed ones, on average over its participants.
//  - Constants, and assigns of an update the memory plan writes over its
//    param (paramWrittenOver), take no time: codegen emits no kernel.
//  - Compute ops of a device's streams share the device: each takes
//    SimCosts::opFill of it (CostModel::fill: its parallel work over the
//    spec's concurrency) for its duration, and starts when its share is
//    free as well as its stream: small kernels of several streams run side
//    by side, kernels that fill the device one after another (every kernel
//    of a spec without concurrency, the CPU's). Without opFill, a device's
//    streams run their compute independently. Likewise a node's devices
//    share its cores (SimCosts::hostFill: the CPU backend's emulated
//    devices on the machine's cores).
//  - Reuse of planned buffers adds no ordering here (codegen's events for
//    reused bytes are not modelled); neither does the launch of events.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "cost/CostModel.h"
#include "ir/IR.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lwcc {

/// Where the simulator takes its times from (a CostModel, or a test's
/// hand-written table).
struct SimCosts {
  /// Seconds of a compute op on its device.
  std::function<double(const Op&)> opSeconds;
  /// Seconds of a communication op with its links to itself.
  std::function<double(const Op&)> commSeconds;
  /// When set: one participant's own measured seconds of a communication
  /// op, or nullopt (then commSeconds). A profiled CPU trainer measures
  /// each participant from the last one's arrival until it goes on (the
  /// one that performs the op at once, the others once woken).
  /// `occurrence`: the op is the participant's k-th communication op of its
  /// mnemonic and loc in the step (its forward and backward transfers may
  /// share a loc).
  std::function<std::optional<double>(const Op&, int64_t device, int64_t occurrence)> commSecondsOn;
  /// Devices per node (0: every device on one node).
  int64_t devicesPerNode = 0;
  /// Logical devices per GPU (DeviceSpec::devicesPerGpu): the compute ops of
  /// a GPU's logical devices share its concurrency (opFill) as its streams'.
  int64_t devicesPerGpu = 1;
  /// A stream that reaches a wait for a value another stream writes before
  /// it is written goes on this long after the write (a thread's wake-up);
  /// and the devices idle this long between steps (the host's work). Both
  /// measured by a profile (CostModel::wakeSeconds, stepGapSeconds), else 0.
  double wakeSeconds = 0, stepGapSeconds = 0;
  /// When set: the delay of (device, stream) from the step's start before
  /// its first op may start (its thread's start, measured by a profile).
  std::function<double(int64_t device, int64_t stream)> streamStartSeconds;
  /// When set: a participant's measured mean wait right before a
  /// communication op (for events and for the other participants to
  /// arrive), or nullopt. Where the participants' measured waits exceed, on
  /// average, those of the replayed schedule, the op starts later by the
  /// difference: the last participant of a collective arrives, on average,
  /// later than the mean op times make it (their spread from step to step),
  /// which a replay of means cannot see.
  /// `occurrence` as for commSecondsOn.
  std::function<std::optional<double>(const Op&, int64_t device, int64_t occurrence)> commWaitOn;
  /// When set: the share of its device, in [0, 1], that a compute op
  /// occupies while it runs (0: none counted, as for a measured op).
  std::function<double(const Op&)> opFill;
  /// When set: the share of its node's cores, in [0, 1], a compute op of a
  /// trainer of `devices` devices takes while it runs (0: none counted).
  std::function<double(const Op&, int64_t devices)> hostFill;
  /// Whether SimResult::events is filled (false: the times alone, as the
  /// planner prices candidates: an event per op is most of a large step's
  /// replay).
  bool timeline = true;
};

/// The busy intervals of one link port, sorted by start (they do not
/// overlap: a port serves one op at a time).
using LinkBusy = std::vector<std::pair<double, double>>;

/// The earliest start >= `t` at which every port of `busy` is idle for `d`
/// seconds (an op takes the first such gap, before later ops' intervals
/// where one fits).
double earliestGap(double t, double d, const std::vector<const LinkBusy*>& busy);
/// Marks [start, end) busy on a port (a gap earliestGap found), in order.
void occupy(LinkBusy& busy, double start, double end);

/// The times of `model` (which must outlive the result); with `timeline`
/// the events too.
SimCosts simCosts(const CostModel& model, bool timeline = true);

/// One interval of the timeline: an op on one (device, stream). A
/// communication op has one interval per device it uses.
struct SimEvent {
  std::string name; ///< the op's mnemonic
  std::string loc;  ///< the op's location name (the layer)
  int64_t device = 0, stream = 0;
  double start = 0, end = 0; ///< seconds from the step's start
  int64_t bytes = 0;         ///< bytes the op moves between devices (comm ops)
  bool comm = false;
};

struct SimResult {
  /// The step's makespan plus the idle time between steps (stepGapSeconds).
  double stepSeconds = 0;
  double stepGapSeconds = 0;
  /// Per device: seconds its streams spend in compute ops (summed over
  /// streams) and in communication ops.
  std::map<int64_t, double> computeSeconds, commSeconds;
  /// Bytes moved between devices in one step.
  int64_t commBytes = 0;
  /// Ordered by start time, then device and stream (SimCosts::timeline).
  std::vector<SimEvent> events;
};

/// Replays `g` (topologically ordered ops with @dev/@stream) on `costs`.
llvm::Expected<SimResult> simulate(const Graph& g, const SimCosts& costs);

/// The step time, and per device its compute and communication time, as
/// lines of text ("simulate: step ... ms").
std::string describe(const SimResult& r);

/// The timeline as Chrome trace-event JSON: a complete ("X") event per
/// interval with pid = device, tid = stream, microsecond times, and the
/// process and thread names as metadata events.
void writeChromeTrace(const std::vector<SimEvent>& events, llvm::raw_ostream& os);

} // namespace lwcc
