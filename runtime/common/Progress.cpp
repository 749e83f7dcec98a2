// Training progress: the console reporter, the JSONL logger and the check
// for a non-finite loss. See lwrt/progress.h.
#include "lwrt/progress.h"

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <limits>
#include <unistd.h>

namespace lwrt {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string integer(int64_t v) { return std::to_string(v); }

/// 1234, 56.7, 0.123: fewer decimals as the number grows.
std::string rate(double v) {
  if (v >= 100)
    return format("%.0f", v);
  if (v >= 1)
    return format("%.1f", v);
  return format("%.3f", v);
}

} // namespace

double steadySeconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string formatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0)
    return "--";
  if (seconds >= 1e12)
    return "--";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  char buf[64];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%" PRId64 "s", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%" PRId64 "m%02" PRId64 "s", s / 60, s % 60);
  else if (s < 86400)
    std::snprintf(buf, sizeof buf, "%" PRId64 "h%02" PRId64 "m", s / 3600, s % 3600 / 60);
  else
    std::snprintf(buf, sizeof buf, "%" PRId64 "d%02" PRId64 "h", s / 86400, s % 86400 / 3600);
  return buf;
}

std::string formatProgressLine(const ProgressOptions& o, int64_t step, double loss,
                               double msPerStep, std::optional<double> gradNorm) {
  std::string line;
  if (o.stepsPerEpoch > 0) {
    const int64_t done = step > 0 ? step - 1 : 0;
    // Appended piece by piece (GCC 12's -O3 -Wrestrict false positive).
    line = "epoch ";
    line += integer(done / o.stepsPerEpoch + 1);
    if (o.totalSteps > 0) {
      line += '/';
      line += integer((o.totalSteps + o.stepsPerEpoch - 1) / o.stepsPerEpoch);
    }
    line += "  step ";
    line += integer(step > 0 ? done % o.stepsPerEpoch + 1 : 0);
    line += '/';
    line += integer(o.stepsPerEpoch);
  } else {
    // Appended piece by piece: GCC 12 reports a false -Wrestrict inside
    // `"literal" + std::string` here at -O3.
    line = "step ";
    line += integer(step);
    if (o.totalSteps > 0) {
      line += '/';
      line += integer(o.totalSteps);
    }
  }
  line += "  loss " + format("%.4f", loss);
  if (gradNorm)
    line += "  grad norm " + format("%.4g", *gradNorm);
  if (std::isfinite(msPerStep) && msPerStep > 0) {
    if (o.itemsPerStep > 0)
      line += "  " + rate(static_cast<double>(o.itemsPerStep) * 1000.0 / msPerStep) + " " + o.unit +
              "/s";
    line += "  " + rate(msPerStep) + " ms/step";
    if (o.totalSteps > 0) {
      const int64_t left = o.totalSteps > step ? o.totalSteps - step : 0;
      line += "  ETA " + formatDuration(static_cast<double>(left) * msPerStep / 1000.0);
    }
  }
  return line;
}

ProgressReporter::ProgressReporter(FILE* out, ProgressOptions options)
    : out_(out), options_(std::move(options)) {
  if (!options_.clock)
    options_.clock = steadySeconds;
  if (options_.every < 1)
    options_.every = 1;
  if (options_.window < 1)
    options_.window = 1;
  switch (options_.live) {
  case LiveMode::On:
    live_ = true;
    break;
  case LiveMode::Off:
    live_ = false;
    break;
  case LiveMode::Auto: {
    const int fd = out_ ? ::fileno(out_) : -1;
    live_ = fd >= 0 && ::isatty(fd);
    break;
  }
  }
  begin(0);
}

ProgressReporter::~ProgressReporter() { finish(); }

void ProgressReporter::begin(int64_t step) {
  window_.clear();
  window_.emplace_back(step, options_.clock());
}

double ProgressReporter::msPerStep() const {
  if (window_.size() < 2)
    return kNaN;
  const auto& [s0, t0] = window_.front();
  const auto& [s1, t1] = window_.back();
  if (s1 <= s0 || t1 <= t0)
    return kNaN;
  return (t1 - t0) * 1000.0 / static_cast<double>(s1 - s0);
}

double ProgressReporter::itemsPerSecond() const {
  const double ms = msPerStep();
  if (options_.itemsPerStep <= 0 || std::isnan(ms))
    return kNaN;
  return static_cast<double>(options_.itemsPerStep) * 1000.0 / ms;
}

double ProgressReporter::etaSeconds(int64_t step) const {
  const double ms = msPerStep();
  if (options_.totalSteps <= 0 || std::isnan(ms))
    return kNaN;
  const int64_t left = options_.totalSteps > step ? options_.totalSteps - step : 0;
  return static_cast<double>(left) * ms / 1000.0;
}

void ProgressReporter::draw(const std::string& line) {
  if (!out_)
    return;
  if (live_) {
    std::string text = "\r" + line;
    if (line.size() < liveLength_)
      text.append(liveLength_ - line.size(), ' ');
    std::fputs(text.c_str(), out_);
    liveLength_ = line.size();
  } else {
    std::fputs((line + "\n").c_str(), out_);
  }
  std::fflush(out_);
}

void ProgressReporter::step(int64_t step, double loss, std::optional<double> gradNorm) {
  const double now = options_.clock();
  if (!window_.empty() && step <= window_.back().first)
    window_.clear(); // went back (a restart): time afresh from here
  window_.emplace_back(step, now);
  while (window_.size() > static_cast<size_t>(options_.window) + 1)
    window_.pop_front();
  lastStep_ = step;
  lastLoss_ = loss;
  lastGradNorm_ = gradNorm;

  const bool last = options_.totalSteps > 0 && step >= options_.totalSteps;
  const bool epochEnd = options_.stepsPerEpoch > 0 && step % options_.stepsPerEpoch == 0;
  if (live_) {
    if (liveLength_ == 0 || last || now - lastDraw_ >= options_.liveInterval) {
      draw(formatProgressLine(options_, step, loss, msPerStep(), gradNorm));
      lastDraw_ = now;
      pending_ = false;
    } else {
      pending_ = true;
    }
    return;
  }
  if (step % options_.every == 0 || last || epochEnd)
    draw(formatProgressLine(options_, step, loss, msPerStep(), gradNorm));
}

void ProgressReporter::message(const std::string& text) {
  if (!out_)
    return;
  if (!live_ || liveLength_ == 0) {
    std::fputs((text + "\n").c_str(), out_);
    std::fflush(out_);
    return;
  }
  // Overwrite the live line with the message, then redraw it below.
  std::string shown = "\r" + text;
  if (text.size() < liveLength_)
    shown.append(liveLength_ - text.size(), ' ');
  std::fputs((shown + "\n").c_str(), out_);
  liveLength_ = 0;
  draw(formatProgressLine(options_, lastStep_, lastLoss_, msPerStep(), lastGradNorm_));
  pending_ = false;
}

void ProgressReporter::finish() {
  if (!live_ || !out_)
    return;
  if (pending_)
    draw(formatProgressLine(options_, lastStep_, lastLoss_, msPerStep(), lastGradNorm_));
  pending_ = false;
  if (liveLength_ > 0) {
    std::fputs("\n", out_);
    std::fflush(out_);
  }
  liveLength_ = 0;
}

std::string jsonNumber(double v) {
  if (!std::isfinite(v))
    return "null";
  return format("%.9g", v);
}

std::string jsonString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    default:
      if (static_cast<unsigned char>(c) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
        out += buf;
      } else {
        out += c;
      }
    }
  }
  return out + "\"";
}

JsonlLogger::JsonlLogger(FILE* out) : out_(out) {}

std::unique_ptr<JsonlLogger> JsonlLogger::open(const std::string& path, bool append,
                                               std::string& error) {
  FILE* f = std::fopen(path.c_str(), append ? "a" : "w");
  if (!f) {
    error = path + ": cannot open the log: " + std::strerror(errno);
    return nullptr;
  }
  return std::unique_ptr<JsonlLogger>(new JsonlLogger(f, true));
}

JsonlLogger::~JsonlLogger() {
  if (owned_ && out_)
    std::fclose(out_);
}

void JsonlLogger::writeLine(const std::string& line) {
  if (!out_) {
    ok_ = false;
    return;
  }
  const std::string text = line + "\n";
  if (std::fwrite(text.data(), 1, text.size(), out_) != text.size() || std::fflush(out_) != 0)
    ok_ = false;
}

void JsonlLogger::step(const StepRecord& r) {
  std::string line = "{\"type\":\"step\",\"step\":" + integer(r.step);
  if (r.epoch)
    line += ",\"epoch\":" + integer(*r.epoch);
  line += ",\"loss\":" + jsonNumber(r.loss);
  line += ",\"img_per_s\":" + jsonNumber(r.imgPerSec);
  line += ",\"step_ms\":" + jsonNumber(r.stepMs);
  if (r.lr)
    line += ",\"lr\":" + jsonNumber(*r.lr);
  if (r.batch)
    line += ",\"batch\":" + integer(*r.batch);
  if (r.devices)
    line += ",\"devices\":" + integer(*r.devices);
  if (r.lossScale)
    line += ",\"loss_scale\":" + jsonNumber(*r.lossScale);
  if (r.skipped)
    line += ",\"skipped\":true";
  if (r.gradNorm)
    line += ",\"grad_norm\":" + jsonNumber(*r.gradNorm);
  writeLine(line + "}");
}

void JsonlLogger::eval(const EvalRecord& r) {
  std::string line = "{\"type\":\"eval\"";
  if (r.step)
    line += ",\"step\":" + integer(*r.step);
  line += ",\"epoch\":" + integer(r.epoch);
  if (r.accuracy)
    line += ",\"accuracy\":" + jsonNumber(*r.accuracy);
  if (r.top5)
    line += ",\"top5\":" + jsonNumber(*r.top5);
  if (r.loss)
    line += ",\"loss\":" + jsonNumber(*r.loss);
  if (r.perplexity)
    line += ",\"perplexity\":" + jsonNumber(*r.perplexity);
  writeLine(line + "}");
}

void JsonlLogger::memory(const MemoryRecord& r) {
  // Appended piece by piece: GCC 12's -O3 misreads `"," + std::string`
  // (a -Wrestrict false positive).
  std::string line = "{\"type\":\"memory\",\"devices\":[";
  for (size_t i = 0; i < r.devices.size(); ++i) {
    if (i > 0)
      line += ',';
    line += integer(r.devices[i]);
  }
  line += "],\"physical\":";
  line += integer(r.physical);
  line += ",\"arena_bytes\":";
  line += integer(r.arenaBytes);
  line += ",\"state_bytes\":";
  line += integer(r.stateBytes);
  line += ",\"other_bytes\":";
  line += integer(r.otherBytes);
  line += ",\"measured_bytes\":";
  line += integer(r.measuredBytes);
  line += '}';
  writeLine(line);
}

std::string checkFiniteLoss(int64_t step, double loss) {
  if (std::isfinite(loss))
    return "";
  const char* what = std::isnan(loss) ? "nan" : (loss > 0 ? "inf" : "-inf");
  return "step " + integer(step) + ": the loss is " + what +
         ", not a finite number: training diverged (try a lower learning rate, or check the "
         "inputs and labels)";
}

} // namespace lwrt
