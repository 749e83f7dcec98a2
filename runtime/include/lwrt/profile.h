// lwrt/profile.h - measured per-op times and timelines of profiled steps
// defines: OpMark, MarkRecorder, StepMarks, OpTimeline
//
// The trainer's --profile-ops=FILE.json and --trace=FILE.json. Each
// profiled step hands in the marks its ops left (labelled "mnemonic
// location" by the generated code): on one device, the runner's marks (each
// op's milliseconds, in launch order), laid one after another from the
// step's start; in a multi-device trainer, a MarkRecorder per (device,
// stream), which the group hands the function running there and which notes
// when each op started and how long it took. Then:
//  - writeProfile() writes the per-op times in the form lwcc's
//    --cost-profile reads (ir/CostModel.h):
//      {"device": "cpu", "devices": 2, "steps": 3, "ops": [
//        {"op": "conv2d", "loc": "conv1", "device": 0, "seconds": 1.2e-4}, ...]}
//    one entry per op of the step and device it ran on (a communication op
//    has one per participant), in (device, stream, launch) order, its time
//    the mean over the profiled steps (ops sharing a mnemonic, location and
//    device keep separate entries; lwcc takes their mean); "devices" is the
//    trainer's count of logical devices (its ops are that many devices'
//    pieces of the model's ops);
//  - writeTrace() writes the measured timeline as Chrome trace-event JSON,
//    the format of lwcc --trace: pid the device, tid the stream, ts the
//    op's start in microseconds since the run began, dur its time.
//
// What an op's time is: on one device, from the end of the previous op to
// its own end. In a multi-device trainer a stream also waits: for an event
// another stream records, and in a communication op for the other
// participants to arrive. The waits are not the op's: a recorder's clock
// skips them (idleUntil), so an op's time starts when its stream was last
// done waiting, and a communication op's when its last participant arrived;
// the trace shows the waits as gaps.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lwrt {

/// One op of a profiled step.
struct OpMark {
  std::string label; ///< "mnemonic location"
  int device = 0, stream = 0;
  double start = 0; ///< seconds since the run began
  double ms = 0;
};

/// The marks of one (device, stream) in one profiled step; used by one
/// thread at a time (the one running that stream's functions).
class MarkRecorder {
public:
  using Clock = std::chrono::steady_clock;
  /// Starts recording now; times are taken relative to `origin`.
  void start(int device, int stream, Clock::time_point origin);
  /// The op launched last has ended now: it ran since the previous mark
  /// (or start, or the end of a wait).
  void mark(const char* label);
  /// The stream waited until `t` (an event, or a communication op's other
  /// participants): the next op's time starts there.
  void idleUntil(Clock::time_point t);
  /// For StepBuffers::mark: `context` is a MarkRecorder.
  static void markFn(void* context, const char* label);
  std::vector<OpMark>& marks() { return marks_; }

private:
  int device_ = 0, stream_ = 0;
  Clock::time_point origin_, last_;
  std::vector<OpMark> marks_;
};

/// A multi-device trainer's profiled step: a recorder per (device,
/// stream), at device * streams + stream.
class StepMarks {
public:
  StepMarks(int devices, int streams, MarkRecorder::Clock::time_point origin);
  MarkRecorder& at(int device, int stream) {
    return recorders_[static_cast<size_t>(device * streams_ + stream)];
  }
  int devices() const { return devices_; }
  int streams() const { return streams_; }
  /// Every recorder's marks, by device, stream and launch order.
  std::vector<OpMark> take();

private:
  int devices_, streams_;
  std::vector<MarkRecorder> recorders_;
};

class OpTimeline {
public:
  /// One profiled step of a one-device trainer: it started `startSeconds`
  /// after the run began, its ops ran one after another as `marksMs` says.
  void addStep(double startSeconds, const std::vector<std::pair<std::string, double>>& marksMs);
  /// One profiled step of any trainer, its ops in the same order every step.
  void addStep(std::vector<OpMark> marks) { steps_.push_back(std::move(marks)); }
  int64_t steps() const { return static_cast<int64_t>(steps_.size()); }

  /// The profile lwcc --cost-profile reads; `device` names the machine,
  /// `devices` counts the trainer's logical devices.
  bool writeProfile(const std::string& file, const std::string& device, int devices,
                    std::string* error) const;
  /// The measured timeline, Chrome trace-event JSON.
  bool writeTrace(const std::string& file, std::string* error) const;

  /// "conv2d conv1" -> ("conv2d", "conv1"); a label without a location
  /// (the mnemonic twice, or alone) -> (mnemonic, "").
  static std::pair<std::string, std::string> splitLabel(const std::string& label);

private:
  std::vector<std::vector<OpMark>> steps_;
};

} // namespace lwrt
