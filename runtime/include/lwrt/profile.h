// lwrt/profile.h - measured per-op times and timelines of profiled steps
// defines: OpTimeline
//
// The trainer's --profile-ops=FILE.json and --trace=FILE.json. Each
// profiled step hands in the marks the step runner took (one per op, in
// launch order, labelled "mnemonic location" by the generated code, with
// its milliseconds) and when the step started. Then:
//  - writeProfile() writes the per-op times in the form lwcc's
//    --cost-profile reads (ir/CostModel.h):
//      {"device": "cpu", "ops": [
//        {"op": "conv2d", "loc": "conv1", "device": 0, "seconds": 1.2e-4}, ...]}
//    one entry per op of the step, in launch order, its time the mean over
//    the profiled steps (ops sharing a mnemonic and location keep separate
//    entries; lwcc takes their mean);
//  - writeTrace() writes the measured timeline as Chrome trace-event JSON,
//    the format of lwcc --trace (pid: device, tid: stream): the ops of each
//    profiled step one after another from the step's start, as the runner
//    measured them.
// The marks carry no device or stream: everything is on device 0, stream 0
// (a one-device trainer; a CPU trainer runs its streams in order).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lwrt {

class OpTimeline {
public:
  /// One profiled step: it started `startSeconds` after the run began.
  void addStep(double startSeconds, const std::vector<std::pair<std::string, double>>& marksMs);
  int64_t steps() const { return static_cast<int64_t>(steps_.size()); }

  /// The profile lwcc --cost-profile reads; `device` names the machine.
  bool writeProfile(const std::string& file, const std::string& device, std::string* error) const;
  /// The measured timeline, Chrome trace-event JSON.
  bool writeTrace(const std::string& file, std::string* error) const;

  /// "conv2d conv1" -> ("conv2d", "conv1"); a label without a location
  /// (the mnemonic twice, or alone) -> (mnemonic, "").
  static std::pair<std::string, std::string> splitLabel(const std::string& label);

private:
  struct Step {
    double start;
    std::vector<std::pair<std::string, double>> marks;
  };
  std::vector<Step> steps_;
};

} // namespace lwrt
