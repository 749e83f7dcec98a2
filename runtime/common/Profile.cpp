// The trainer's --profile-ops and --trace files (lwrt/profile.h).
#include "lwrt/profile.h"

#include "lwrt/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <set>

namespace lwrt {

namespace {

/// Writes `text` to `file` (replacing it).
bool writeFile(const std::string& file, const std::string& text, std::string* error) {
  std::FILE* f = std::fopen(file.c_str(), "wb");
  if (!f) {
    *error = file + ": cannot write";
    return false;
  }
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok)
    *error = file + ": cannot write";
  return ok;
}

/// The communication ops' mnemonics (ir/Ops.def, COMM_OP rows): "comm" in
/// the trace, as lwcc --trace has them.
bool isCommunication(const std::string& op) {
  static const std::set<std::string> comm = {"all_reduce", "all_gather", "reduce_scatter",
                                             "broadcast",  "reduce_to",  "device_copy",
                                             "shard",      "unshard"};
  return comm.count(op) > 0;
}

} // namespace

void MarkRecorder::start(int device, int stream, Clock::time_point origin) {
  device_ = device;
  stream_ = stream;
  origin_ = origin;
  last_ = begin_ = Clock::now();
  idle_ = Clock::duration::zero();
  began_ = false;
  marks_.clear();
  wokeSeconds_ = 0;
  wakes_ = 0;
  calls_ = 0;
}

void MarkRecorder::begin(Clock::time_point t) {
  last_ = begin_ = t;
  idle_ = Clock::duration::zero();
  began_ = true;
}

void MarkRecorder::mark(const char* label) {
  Clock::time_point now = Clock::now();
  Clock::duration own = std::max(Clock::duration::zero(), now - last_ - idle_);
  marks_.push_back({label, device_, stream_,
                    std::chrono::duration<double>(now - own - origin_).count(),
                    std::chrono::duration<double, std::milli>(own).count(),
                    std::chrono::duration<double, std::milli>(idle_).count()});
  last_ = now;
  idle_ = Clock::duration::zero();
}

void MarkRecorder::waited(Clock::time_point from, Clock::time_point to) {
  from = std::max(from, last_);
  if (to > from)
    idle_ += to - from;
}

void MarkRecorder::woke(Clock::duration latency) {
  wokeSeconds_ += std::chrono::duration<double>(latency).count();
  ++wakes_;
}

void MarkRecorder::markFn(void* context, const char* label) {
  static_cast<MarkRecorder*>(context)->mark(label);
}

void MarkRecorder::takeInto(ProfiledStep& step) {
  step.ops.insert(step.ops.end(), marks_.begin(), marks_.end());
  if (began_ || !marks_.empty())
    step.streams.push_back(
        {device_, stream_, std::chrono::duration<double>(begin_ - origin_).count()});
  step.wokeSeconds += wokeSeconds_;
  step.wakes += wakes_;
  step.calls[device_] += calls_;
  calls_ = 0;
  marks_.clear();
}

StepMarks::StepMarks(int devices, int streams, MarkRecorder::Clock::time_point origin)
    : devices_(devices), streams_(streams),
      recorders_(static_cast<size_t>(devices) * static_cast<size_t>(streams)) {
  restart(origin);
}

void StepMarks::restart(MarkRecorder::Clock::time_point origin) {
  for (int d = 0; d < devices_; ++d)
    for (int s = 0; s < streams_; ++s)
      at(d, s).start(d, s, origin);
}

ProfiledStep StepMarks::take() {
  ProfiledStep step;
  for (MarkRecorder& r : recorders_)
    r.takeInto(step);
  return step;
}

std::pair<std::string, std::string> OpTimeline::splitLabel(const std::string& label) {
  size_t space = label.find(' ');
  if (space == std::string::npos)
    return {label, ""};
  std::string op = label.substr(0, space), loc = label.substr(space + 1);
  if (loc == op) // the generated code labels an op without a location by its mnemonic
    loc.clear();
  return {op, loc};
}

void OpTimeline::addStep(ProfiledStep step) { steps_.push_back(std::move(step)); }

std::map<std::string, double> OpTimeline::msByOp(bool byDevice) const {
  std::map<std::string, double> ms;
  for (const ProfiledStep& s : steps_)
    for (const OpMark& m : s.ops)
      ms[byDevice ? m.label + std::string(" @") + std::to_string(m.device) : m.label] += m.ms;
  return ms;
}

std::map<int, double> OpTimeline::callsPerStep() const {
  std::map<int, double> out;
  for (const ProfiledStep& s : steps_)
    for (const auto& [device, n] : s.calls)
      out[device] += static_cast<double>(n) / static_cast<double>(steps_.size());
  return out;
}

void OpTimeline::addStep(double startSeconds,
                         const std::vector<std::pair<const char*, double>>& marksMs,
                         int64_t calls) {
  ProfiledStep step;
  step.calls[0] = calls;
  step.ops.reserve(marksMs.size());
  step.streams.push_back({0, 0, startSeconds});
  double t = startSeconds;
  for (const auto& [label, ms] : marksMs) {
    step.ops.push_back({label, 0, 0, t, ms});
    t += ms / 1e3;
  }
  steps_.push_back(std::move(step));
}

bool OpTimeline::writeProfile(const std::string& file, const std::string& device, int devices,
                              std::string* error) const {
  // The i-th op of every step is the same op: its mean over the steps (the
  // step's expected time is the sum of its ops' means; a median per op
  // would drop the interruptions a loaded machine spreads over all ops).
  std::vector<OpMark> ops;
  std::vector<int64_t> counts;
  for (const ProfiledStep& step : steps_) {
    const std::vector<OpMark>& s = step.ops;
    for (size_t i = 0; i < s.size(); ++i) {
      if (i >= ops.size()) {
        ops.push_back(s[i]);
        ops.back().ms = 0;
        ops.back().waitedMs = 0;
        counts.push_back(0);
      }
      if (std::strcmp(ops[i].label, s[i].label) != 0 || ops[i].device != s[i].device)
        continue; // a step that ran other ops: never for one program
      ops[i].ms += s[i].ms;
      ops[i].waitedMs += s[i].waitedMs;
      ++counts[i];
    }
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    ops[i].ms /= static_cast<double>(std::max<int64_t>(counts[i], 1));
    ops[i].waitedMs /= static_cast<double>(std::max<int64_t>(counts[i], 1));
  }
  // A step starts when the first of its streams' threads began it.
  auto stepStart = [](const ProfiledStep& step) {
    double t = std::numeric_limits<double>::infinity();
    for (const StreamStart& st : step.streams)
      t = std::min(t, st.start);
    for (const OpMark& m : step.ops)
      t = std::min(t, m.start);
    return std::isfinite(t) ? t : 0.0;
  };
  // In one pass over the steps: the idle time between consecutive profiled
  // steps (they are consecutive steps of the run), from a step's last op's
  // end to the next step's start; each stream's delay from its step's start;
  // the wake-ups.
  double gaps = 0, woke = 0, prevEnd = 0;
  int64_t pairs = 0, wakes = 0;
  bool prevRan = false; // the previous step ran ops: it has an end
  std::map<std::pair<int, int>, std::pair<double, int64_t>> delays;
  for (const ProfiledStep& step : steps_) {
    const double t0 = stepStart(step);
    if (prevRan) {
      gaps += std::max(0.0, t0 - prevEnd);
      ++pairs;
    }
    prevRan = !step.ops.empty();
    prevEnd = 0;
    for (const OpMark& m : step.ops)
      prevEnd = std::max(prevEnd, m.start + m.ms / 1e3);
    woke += step.wokeSeconds;
    wakes += step.wakes;
    for (const StreamStart& st : step.streams) {
      auto& [sum, n] = delays[{st.device, st.stream}];
      sum += st.start - t0;
      ++n;
    }
  }
  std::string out = "{\"device\": " + jsonString(device) +
                    ", \"devices\": " + std::to_string(devices) +
                    ", \"steps\": " + std::to_string(steps_.size());
  if (pairs > 0)
    out += ", \"step_gap_seconds\": " + jsonNumber(gaps / static_cast<double>(pairs));
  if (wakes > 0)
    out += ", \"wake_seconds\": " + jsonNumber(woke / static_cast<double>(wakes)) +
           ", \"wakes_per_step\": " +
           jsonNumber(static_cast<double>(wakes) / static_cast<double>(steps_.size()));
  if (delays.size() > 1) {
    out += ", \"stream_starts\": [";
    const char* sep = "";
    for (const auto& [key, sum] : delays) {
      out += sep;
      out += "{\"device\": " + std::to_string(key.first) +
             ", \"stream\": " + std::to_string(key.second) +
             ", \"seconds\": " + jsonNumber(sum.first / static_cast<double>(sum.second)) + "}";
      sep = ", ";
    }
    out += "]";
  }
  out += ", \"ops\": [";
  for (size_t i = 0; i < ops.size(); ++i) {
    auto [op, loc] = splitLabel(ops[i].label);
    out += std::string(i ? ",\n  " : "\n  ") + "{\"op\": " + jsonString(op) +
           ", \"loc\": " + jsonString(loc) + ", \"device\": " + std::to_string(ops[i].device) +
           ", \"seconds\": " + jsonNumber(ops[i].ms / 1e3) +
           (ops[i].waitedMs > 0 ? ", \"waited_seconds\": " + jsonNumber(ops[i].waitedMs / 1e3)
                                : std::string()) +
           "}";
  }
  out += "\n]}\n";
  return writeFile(file, out, error);
}

bool OpTimeline::writeTrace(const std::string& file, std::string* error) const {
  // The (device, stream) pairs that ran ops, named as lwcc --trace names them.
  std::set<std::pair<int, int>> threads;
  for (const ProfiledStep& s : steps_)
    for (const OpMark& m : s.ops)
      threads.insert({m.device, m.stream});
  if (threads.empty())
    threads.insert({0, 0});
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [";
  std::set<int> named;
  const char* sep = "\n";
  for (const auto& [dev, stream] : threads) {
    // Appended piece by piece: GCC 12's -O3 misreads `"x" + std::string`
    // (a -Wrestrict false positive).
    std::string ids = ",\"pid\":";
    ids += std::to_string(dev);
    ids += ",\"tid\":";
    ids += std::to_string(stream);
    ids += "}";
    if (named.insert(dev).second) {
      out += sep;
      out += "{\"args\":{\"name\":\"device ";
      out += std::to_string(dev);
      out += "\"},\"name\":\"process_name\",\"ph\":\"M\"";
      out += ids;
      sep = ",\n";
    }
    out += sep;
    out += "{\"args\":{\"name\":\"stream ";
    out += std::to_string(stream);
    out += "\"},\"name\":\"thread_name\",\"ph\":\"M\"";
    out += ids;
  }
  for (size_t k = 0; k < steps_.size(); ++k)
    for (const OpMark& m : steps_[k].ops) {
      auto [op, loc] = splitLabel(m.label);
      out += ",\n{\"args\":{\"loc\":" + jsonString(loc) + ",\"step\":" + std::to_string(k) +
             "},\"cat\":" + (isCommunication(op) ? "\"comm\"" : "\"compute\"") +
             ",\"dur\":" + jsonNumber(m.ms * 1e3) + ",\"name\":" + jsonString(op) +
             ",\"ph\":\"X\",\"pid\":" + std::to_string(m.device) +
             ",\"tid\":" + std::to_string(m.stream) + ",\"ts\":" + jsonNumber(m.start * 1e6) + "}";
    }
  out += "\n]}\n";
  return writeFile(file, out, error);
}

} // namespace lwrt
