// lwrt/profile.h - measured per-op times and timelines of profiled steps
// defines: OpMark, StreamStart, ProfiledStep, MarkRecorder, StepMarks, OpTimeline
//
// The trainer's --profile-ops=FILE.json and --trace=FILE.json. Each
// profiled step hands in the marks its ops left (labelled "mnemonic
// location" by the generated code): on one device, the runner's marks (each
// op's milliseconds, in launch order), laid one after another from the
// step's start; in a multi-device trainer, a MarkRecorder per (device,
// stream), which the group hands the function running there and which notes
// when each op started and how long it took. Then:
//  - writeProfile() writes the per-op times in the form lwcc's
//    --cost-profile reads (cost/CostModel.h):
//      {"device": "cpu", "devices": 2, "steps": 3, "step_gap_seconds": 4e-5,
//       "wake_seconds": 2e-5, "wakes_per_step": 12,
//       "stream_starts": [{"device": 1, "stream": 0, "seconds": 3e-6}, ...],
//       "ops": [{"op": "conv2d", "loc": "conv1", "device": 0, "seconds": 1.2e-4}, ...]}
//    one entry per op of the step and device it ran on (a communication op
//    has one per participant), in (device, stream, launch) order, its time
//    the mean over the profiled steps (ops sharing a mnemonic, location and
//    device keep separate entries; lwcc takes their mean); "devices" is the
//    trainer's count of logical devices (its ops are that many devices'
//    pieces of the model's ops). What the step spends outside its ops:
//    "step_gap_seconds", the mean time from the end of a profiled step's
//    last op to the start of the next step (its first stream's thread
//    beginning it: the host's work between steps; written with two
//    profiled steps or more); "stream_starts", in a multi-device trainer,
//    each (device, stream)'s mean delay from the step's start to its thread
//    beginning the step; "wake_seconds", the mean time from an event's
//    record to the resumption of a stream that had blocked waiting for it
//    (a thread's wake-up; only when a stream blocked), "wakes_per_step" how
//    often that happened; and in an op's entry "waited_seconds" (only where
//    it is not 0), the mean time its stream waited right before it: for
//    events, and in a communication op for the other participants to
//    arrive (on a loaded machine the last of them arrives later, on
//    average, than the mean op times say);
//  - writeTrace() writes the measured timeline as Chrome trace-event JSON,
//    the format of lwcc --trace: pid the device, tid the stream, ts the
//    op's start in microseconds since the run began, dur its time.
//
// What an op's time is: on one device, from the end of the previous op to
// its own end. In a multi-device trainer a stream also waits: for an event
// another stream records, and in a communication op for the other
// participants to arrive. The waits are not the op's: a recorder leaves
// them out (waited), so an op's time is what its stream spent since the
// previous op's end less the waits; its trace event ends when the op did,
// and the waits show as gaps. A communication op's time on a participant
// is its own work before arriving, and the op from its last participant's
// arrival until this one went on.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace lwrt {

/// One op of a profiled step.
struct OpMark {
  /// "mnemonic location": the generated code's string literal, which lives
  /// as long as the program (a profiled step copies no string).
  const char* label = "";
  int device = 0, stream = 0;
  double start = 0;    ///< seconds since the run began
  double ms = 0;       ///< the op's own time: it ended at start + ms
  double waitedMs = 0; ///< the stream's waits since the previous op (events, other participants)
};

/// When the thread of one (device, stream) began a profiled step.
struct StreamStart {
  int device = 0, stream = 0;
  double start = 0; ///< seconds since the run began
};

/// What one profiled step measured.
struct ProfiledStep {
  std::vector<OpMark> ops;          ///< by device, stream and launch order
  std::vector<StreamStart> streams; ///< one per (device, stream) that ran
  double wokeSeconds = 0;           ///< summed wake-ups after event waits
  int64_t wakes = 0;
  std::map<int, int64_t> calls; ///< runtime calls by device (StepBuffers::calls)
};

/// The marks of one (device, stream) in one profiled step; used by one
/// thread at a time (the one running that stream's functions).
class MarkRecorder {
public:
  using Clock = std::chrono::steady_clock;
  /// Clears the marks; times are taken relative to `origin`. Until begin(),
  /// the stream's time starts at this call.
  void start(int device, int stream, Clock::time_point origin);
  /// The stream's thread began the step at `t`.
  void begin(Clock::time_point t);
  /// The op launched last has ended now: it ran since the previous mark
  /// (or begin), less the time the stream waited in between.
  void mark(const char* label);
  /// The stream waited from `from` to `to` (for an event, or for the other
  /// participants of a communication op): no op's time.
  void waited(Clock::time_point from, Clock::time_point to);
  /// The stream blocked on an event another stream recorded and resumed
  /// `latency` after the record: its thread's wake-up.
  void woke(Clock::duration latency);
  /// For StepBuffers::mark: `context` is a MarkRecorder.
  static void markFn(void* context, const char* label);
  /// For StepBuffers::calls: this stream's runtime calls this step.
  int64_t* calls() { return &calls_; }
  /// Appends this step's marks, start and wake-ups to `step`; clears the marks.
  void takeInto(ProfiledStep& step);

private:
  int device_ = 0, stream_ = 0;
  Clock::time_point origin_, begin_, last_;
  Clock::duration idle_{}; ///< waited since the last mark
  bool began_ = false;
  std::vector<OpMark> marks_;
  double wokeSeconds_ = 0;
  int64_t wakes_ = 0;
  int64_t calls_ = 0;
};

/// A multi-device trainer's profiled step: a recorder per (device,
/// stream), at device * streams + stream.
class StepMarks {
public:
  StepMarks(int devices, int streams, MarkRecorder::Clock::time_point origin);
  /// Starts every recorder again for the next profiled step (each keeps
  /// the room its marks took, so a step allocates nothing while it runs).
  void restart(MarkRecorder::Clock::time_point origin);
  MarkRecorder& at(int device, int stream) {
    return recorders_[static_cast<size_t>(device * streams_ + stream)];
  }
  int devices() const { return devices_; }
  int streams() const { return streams_; }
  /// Every recorder's marks, starts and wake-ups.
  ProfiledStep take();

private:
  int devices_, streams_;
  std::vector<MarkRecorder> recorders_;
};

class OpTimeline {
public:
  /// One profiled step of a one-device trainer: it started `startSeconds`
  /// after the run began, its ops ran one after another as `marksMs` says,
  /// making `calls` runtime calls.
  void addStep(double startSeconds, const std::vector<std::pair<const char*, double>>& marksMs,
               int64_t calls);
  /// One profiled step of a multi-device trainer, its ops in the same
  /// order every step.
  void addStep(ProfiledStep step);
  int64_t steps() const { return static_cast<int64_t>(steps_.size()); }
  /// Runtime calls a step by device, the mean over the steps.
  std::map<int, double> callsPerStep() const;
  /// Milliseconds per op over every step: by label, or with `byDevice` by
  /// "label @device".
  std::map<std::string, double> msByOp(bool byDevice) const;

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
  std::vector<ProfiledStep> steps_;
};

} // namespace lwrt
