// lwrt/progress.h - training progress: console lines, a JSONL log, the loss check
// defines: ProgressClock, steadySeconds, LiveMode, ProgressOptions, ProgressReporter,
//          formatDuration, formatProgressLine, StepRecord, EvalRecord, JsonlLogger,
//          jsonNumber, jsonString, checkFiniteLoss
//
// The reporter prints lines such as
//   epoch 2/5  step 120/1875  loss 0.4213  1234 img/s  25.9 ms/step  ETA 1m12s
// with rates measured over a sliding window of steps. On a terminal it
// redraws one live line with '\r'; elsewhere (a file, a pipe) it prints a
// plain line every K steps. Time comes from an injectable clock.
//
// The JSONL logger writes one JSON object per line and flushes each:
//   {"type":"step","step":120,"epoch":2,"loss":0.421300012,"img_per_s":1234,"step_ms":25.9,"lr":0.01}
// (a multi-device trainer adds "batch", the global batch, and "devices")
//   {"type":"eval","epoch":2,"accuracy":0.9712,"top5":0.9981,"loss":0.0931}
// (a language model: {"type":"eval","epoch":2,"loss":1.52,"perplexity":4.57})
// Numbers are printed with %.9g (floats read back exactly); a non-finite
// number is written as null, as JSON has no NaN.
#pragma once

#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lwrt {

/// Seconds on a monotonic clock.
using ProgressClock = std::function<double()>;
/// std::chrono::steady_clock in seconds: the default clock.
double steadySeconds();

enum class LiveMode : uint8_t {
  Auto, ///< live when the stream is a terminal
  On,
  Off,
};

struct ProgressOptions {
  int64_t totalSteps = 0;    ///< steps in the whole run (0: unknown, no ETA)
  int64_t stepsPerEpoch = 0; ///< > 0: "epoch e/E  step s/stepsPerEpoch"
  int64_t itemsPerStep = 0;  ///< the batch size (0: no items rate)
  std::string unit = "img";  ///< what an item is called in "<n> <unit>/s"
  int64_t every = 1;         ///< plain mode: a line every K steps (and at ends)
  int64_t window = 50;       ///< the rates cover the last `window` steps
  double liveInterval = 0.1; ///< live mode: seconds between redraws at least
  LiveMode live = LiveMode::Auto;
  ProgressClock clock; ///< empty: steadySeconds
};

/// "12s", "1m12s", "2h05m", "3d04h"; "--" for a negative or non-finite time.
std::string formatDuration(double seconds);

/// The line for `step` (steps completed, from 1) ending with `loss` (and the
/// gradients' norm when given), given the time per step in milliseconds
/// (NaN: not known yet, no rates or ETA).
std::string formatProgressLine(const ProgressOptions& options, int64_t step, double loss,
                               double msPerStep, std::optional<double> gradNorm = std::nullopt);

class ProgressReporter {
public:
  /// Reports to `out` (not owned); the clock starts at step 0.
  ProgressReporter(FILE* out, ProgressOptions options);
  ~ProgressReporter();
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  /// Restarts timing at `step` steps completed (a resumed run's step).
  void begin(int64_t step = 0);
  /// `step` (steps completed, from 1) has finished with `loss` (and the
  /// gradients' global L2 norm, when the step clips them).
  void step(int64_t step, double loss, std::optional<double> gradNorm = std::nullopt);
  /// Prints `text` as a line of its own (an evaluation's result), keeping a
  /// live line intact below it.
  void message(const std::string& text);
  /// Ends a live line with a newline; no-op otherwise or if already done.
  void finish();

  bool live() const { return live_; }
  /// Over the window; NaN before two timed points.
  double msPerStep() const;
  /// items per second over the window; NaN when unknown or itemsPerStep is 0.
  double itemsPerSecond() const;
  /// Seconds left after `step` at the window's rate; NaN when unknown.
  double etaSeconds(int64_t step) const;

private:
  void draw(const std::string& line);

  FILE* out_;
  ProgressOptions options_;
  bool live_ = false;
  std::deque<std::pair<int64_t, double>> window_; ///< (step, time)
  size_t liveLength_ = 0;                         ///< of the live line shown, 0: none
  double lastDraw_ = 0;
  int64_t lastStep_ = 0;
  double lastLoss_ = 0;
  std::optional<double> lastGradNorm_;
  bool pending_ = false; ///< live mode: a step not drawn yet
};

/// A JSON number: %.9g for finite values, null otherwise.
std::string jsonNumber(double v);
/// A quoted JSON string with the needed escapes.
std::string jsonString(std::string_view s);

struct StepRecord {
  int64_t step = 0;
  double loss = 0;
  double imgPerSec = 0;
  double stepMs = 0;
  std::optional<int64_t> epoch;
  std::optional<double> lr;
  /// Multi-device trainers: the global batch and the number of devices.
  std::optional<int64_t> batch, devices;
  /// fp16 training: the loss scale after the step, and whether the step
  /// was skipped (its gradients overflowed).
  std::optional<double> lossScale;
  bool skipped = false;
  /// Clipped gradients (lwcc --clip-grad-norm): their global L2 norm before
  /// clipping.
  std::optional<double> gradNorm;
};

struct EvalRecord {
  int64_t epoch = 0;
  std::optional<double> accuracy; ///< top-1 (a classifier)
  std::optional<double> loss;
  std::optional<int64_t> step;
  std::optional<double> top5;       ///< top-5: the label among the 5 largest logits
  std::optional<double> perplexity; ///< a language model's: exp of the loss per token
};

/// A device's memory after training (the trainer's report): what the plan
/// gave it and what the backend measured in use.
struct MemoryRecord {
  std::vector<int64_t> devices; ///< the logical devices on the one measured
  int64_t physical = 0;         ///< the device they opened (a GPU's index)
  int64_t arenaBytes = 0;       ///< their planned arenas
  int64_t stateBytes = 0;       ///< their params and optimizer state
  int64_t otherBytes = 0;       ///< the trainer's other buffers: batch, moving average
  int64_t measuredBytes = -1;   ///< the backend's measure (-1: none)
};

class JsonlLogger {
public:
  /// Logs to `out`, which stays the caller's.
  explicit JsonlLogger(FILE* out);
  /// Opens `path` for writing (appending when `append`: a resumed run), or
  /// returns null with `error` naming the file.
  static std::unique_ptr<JsonlLogger> open(const std::string& path, bool append,
                                           std::string& error);
  ~JsonlLogger();
  JsonlLogger(const JsonlLogger&) = delete;
  JsonlLogger& operator=(const JsonlLogger&) = delete;

  void step(const StepRecord& r);
  void eval(const EvalRecord& r);
  void memory(const MemoryRecord& r);
  /// False once a line failed to be written or flushed.
  bool ok() const { return ok_; }

private:
  JsonlLogger(FILE* out, bool owned) : out_(out), owned_(owned) {}
  void writeLine(const std::string& line);

  FILE* out_;
  bool owned_ = false;
  bool ok_ = true;
};

/// "" when `loss` is finite; otherwise a message naming the step and value.
std::string checkFiniteLoss(int64_t step, double loss);

} // namespace lwrt
