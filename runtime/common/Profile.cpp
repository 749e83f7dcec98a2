// The trainer's --profile-ops and --trace files (lwrt/profile.h).
#include "lwrt/profile.h"

#include "lwrt/progress.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
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
  last_ = Clock::now();
  marks_.clear();
}

void MarkRecorder::mark(const char* label) {
  Clock::time_point now = Clock::now();
  Clock::time_point from = std::min(last_, now);
  marks_.push_back({label, device_, stream_, std::chrono::duration<double>(from - origin_).count(),
                    std::chrono::duration<double, std::milli>(now - from).count()});
  last_ = now;
}

void MarkRecorder::idleUntil(Clock::time_point t) { last_ = std::max(last_, t); }

void MarkRecorder::markFn(void* context, const char* label) {
  static_cast<MarkRecorder*>(context)->mark(label);
}

StepMarks::StepMarks(int devices, int streams, MarkRecorder::Clock::time_point origin)
    : devices_(devices), streams_(streams),
      recorders_(static_cast<size_t>(devices) * static_cast<size_t>(streams)) {
  for (int d = 0; d < devices; ++d)
    for (int s = 0; s < streams; ++s)
      at(d, s).start(d, s, origin);
}

std::vector<OpMark> StepMarks::take() {
  std::vector<OpMark> all;
  for (MarkRecorder& r : recorders_) {
    std::vector<OpMark>& m = r.marks();
    all.insert(all.end(), std::make_move_iterator(m.begin()), std::make_move_iterator(m.end()));
    m.clear();
  }
  return all;
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

void OpTimeline::addStep(double startSeconds,
                         const std::vector<std::pair<std::string, double>>& marksMs) {
  std::vector<OpMark> marks;
  double t = startSeconds;
  for (const auto& [label, ms] : marksMs) {
    marks.push_back({label, 0, 0, t, ms});
    t += ms / 1e3;
  }
  steps_.push_back(std::move(marks));
}

bool OpTimeline::writeProfile(const std::string& file, const std::string& device, int devices,
                              std::string* error) const {
  // The i-th op of every step is the same op: its mean over the steps (the
  // step's expected time is the sum of its ops' means; a median per op
  // would drop the interruptions a loaded machine spreads over all ops).
  std::vector<OpMark> ops;
  std::vector<int64_t> counts;
  for (const std::vector<OpMark>& s : steps_)
    for (size_t i = 0; i < s.size(); ++i) {
      if (i >= ops.size()) {
        ops.push_back(s[i]);
        ops.back().ms = 0;
        counts.push_back(0);
      }
      if (ops[i].label != s[i].label || ops[i].device != s[i].device)
        continue; // a step that ran other ops: never for one program
      ops[i].ms += s[i].ms;
      ++counts[i];
    }
  for (size_t i = 0; i < ops.size(); ++i)
    ops[i].ms /= static_cast<double>(std::max<int64_t>(counts[i], 1));
  std::string out = "{\"device\": " + jsonString(device) +
                    ", \"devices\": " + std::to_string(devices) +
                    ", \"steps\": " + std::to_string(steps_.size()) + ", \"ops\": [";
  for (size_t i = 0; i < ops.size(); ++i) {
    auto [op, loc] = splitLabel(ops[i].label);
    out += std::string(i ? ",\n  " : "\n  ") + "{\"op\": " + jsonString(op) +
           ", \"loc\": " + jsonString(loc) + ", \"device\": " + std::to_string(ops[i].device) +
           ", \"seconds\": " + jsonNumber(ops[i].ms / 1e3) + "}";
  }
  out += "\n]}\n";
  return writeFile(file, out, error);
}

bool OpTimeline::writeTrace(const std::string& file, std::string* error) const {
  // The (device, stream) pairs that ran ops, named as lwcc --trace names them.
  std::set<std::pair<int, int>> threads;
  for (const std::vector<OpMark>& s : steps_)
    for (const OpMark& m : s)
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
    for (const OpMark& m : steps_[k]) {
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
