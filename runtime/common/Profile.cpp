// The trainer's --profile-ops and --trace files (lwrt/profile.h).
#include "lwrt/profile.h"

#include "lwrt/progress.h"

#include <algorithm>
#include <cstdio>

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

} // namespace

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
  steps_.push_back({startSeconds, marksMs});
}

bool OpTimeline::writeProfile(const std::string& file, const std::string& device,
                              std::string* error) const {
  // The i-th op of every step is the same op: its mean over the steps (the
  // step's expected time is the sum of its ops' means; a median per op
  // would drop the interruptions a loaded machine spreads over all ops).
  std::vector<std::pair<std::string, double>> ops;
  std::vector<int64_t> counts;
  for (const Step& s : steps_)
    for (size_t i = 0; i < s.marks.size(); ++i) {
      if (i >= ops.size()) {
        ops.push_back({s.marks[i].first, 0});
        counts.push_back(0);
      }
      if (ops[i].first != s.marks[i].first)
        continue; // a step that ran other ops: never for one program
      ops[i].second += s.marks[i].second;
      ++counts[i];
    }
  for (size_t i = 0; i < ops.size(); ++i)
    ops[i].second /= static_cast<double>(std::max<int64_t>(counts[i], 1));
  std::string out = "{\"device\": " + jsonString(device) +
                    ", \"steps\": " + std::to_string(steps_.size()) + ", \"ops\": [";
  for (size_t i = 0; i < ops.size(); ++i) {
    auto [op, loc] = splitLabel(ops[i].first);
    double seconds = ops[i].second / 1e3;
    out += std::string(i ? ",\n  " : "\n  ") + "{\"op\": " + jsonString(op) +
           ", \"loc\": " + jsonString(loc) +
           ", \"device\": 0, \"seconds\": " + jsonNumber(seconds) + "}";
  }
  out += "\n]}\n";
  return writeFile(file, out, error);
}

bool OpTimeline::writeTrace(const std::string& file, std::string* error) const {
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n"
                    "{\"args\":{\"name\":\"device 0\"},\"name\":\"process_name\",\"ph\":\"M\","
                    "\"pid\":0,\"tid\":0},\n"
                    "{\"args\":{\"name\":\"stream 0\"},\"name\":\"thread_name\",\"ph\":\"M\","
                    "\"pid\":0,\"tid\":0}";
  for (size_t k = 0; k < steps_.size(); ++k) {
    double t = steps_[k].start * 1e6; // microseconds
    for (const auto& [label, ms] : steps_[k].marks) {
      auto [op, loc] = splitLabel(label);
      out += ",\n{\"args\":{\"loc\":" + jsonString(loc) + ",\"step\":" + std::to_string(k) +
             "},\"cat\":\"compute\",\"dur\":" + jsonNumber(ms * 1e3) +
             ",\"name\":" + jsonString(op) +
             ",\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":" + jsonNumber(t) + "}";
      t += ms * 1e3;
    }
  }
  out += "\n]}\n";
  return writeFile(file, out, error);
}

} // namespace lwrt
