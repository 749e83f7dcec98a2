// Training progress: the console line's fields, rates over a sliding
// window and the ETA from an injected clock, live versus plain output, the
// JSONL log (each line checked by a small JSON parser), and the check for a
// non-finite loss.
#include "lwrt/progress.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <gtest/gtest.h>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

using lwrt::LiveMode;
using lwrt::ProgressOptions;
using lwrt::ProgressReporter;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// A FILE* writing to memory; text() flushes and returns what was written.
class MemStream {
public:
  MemStream() : file_(::open_memstream(&buf_, &size_)) {}
  ~MemStream() {
    std::fclose(file_);
    std::free(buf_);
  }
  FILE* file() const { return file_; }
  std::string text() {
    std::fflush(file_);
    return std::string(buf_, size_);
  }
  /// What is visible without flushing: what the writer flushed itself.
  std::string flushed() const { return buf_ ? std::string(buf_, size_) : std::string(); }

private:
  char* buf_ = nullptr;
  size_t size_ = 0;
  FILE* file_;
};

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
    out.push_back(text.substr(start, nl - start));
  if (start < text.size())
    out.push_back(text.substr(start));
  return out;
}

/// A fake clock: tests set `now`.
struct FakeClock {
  double now = 100.0;
  lwrt::ProgressClock fn() {
    return [this] { return now; };
  }
};

/// Parses a flat JSON object ({"key": number|string|null|true|false, ...})
/// into key -> raw value text; false when `s` is not one.
bool parseFlatObject(const std::string& s, std::map<std::string, std::string>& out) {
  size_t i = 0;
  auto ws = [&] {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i])))
      ++i;
  };
  auto str = [&](std::string& v) {
    if (i >= s.size() || s[i] != '"')
      return false;
    for (++i; i < s.size() && s[i] != '"'; ++i) {
      if (static_cast<unsigned char>(s[i]) < 0x20)
        return false;
      if (s[i] == '\\') {
        if (++i >= s.size() || std::string("\"\\/bfnrtu").find(s[i]) == std::string::npos)
          return false;
      }
      v += s[i];
    }
    return i++ < s.size();
  };
  auto number = [&](std::string& v) {
    size_t start = i;
    if (i < s.size() && s[i] == '-')
      ++i;
    if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i])))
      return false;
    if (s[i] == '0')
      ++i;
    else
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])))
        ++i;
    if (i < s.size() && s[i] == '.') {
      if (++i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i])))
        return false;
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])))
        ++i;
    }
    if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
      ++i;
      if (i < s.size() && (s[i] == '+' || s[i] == '-'))
        ++i;
      if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i])))
        return false;
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])))
        ++i;
    }
    v = s.substr(start, i - start);
    return true;
  };
  ws();
  if (i >= s.size() || s[i++] != '{')
    return false;
  ws();
  if (i < s.size() && s[i] == '}')
    return ++i == s.size();
  for (;;) {
    std::string key, value;
    ws();
    if (!str(key) || out.count(key))
      return false;
    ws();
    if (i >= s.size() || s[i++] != ':')
      return false;
    ws();
    if (i < s.size() && s[i] == '"') {
      if (!str(value))
        return false;
      value = "\"" + value + "\"";
    } else if (s.compare(i, 4, "null") == 0 || s.compare(i, 4, "true") == 0) {
      value = s.substr(i, 4);
      i += 4;
    } else if (s.compare(i, 5, "false") == 0) {
      value = "false";
      i += 5;
    } else if (!number(value)) {
      return false;
    }
    out[key] = value;
    ws();
    if (i < s.size() && s[i] == ',') {
      ++i;
      continue;
    }
    if (i < s.size() && s[i] == '}') {
      ++i;
      ws();
      return i == s.size();
    }
    return false;
  }
}

TEST(RuntimeProgress, TinyJsonParserRejectsBadJson) {
  std::map<std::string, std::string> m;
  EXPECT_TRUE(parseFlatObject(R"({"a":1,"b":-2.5e-3,"c":null,"d":"x\"y"})", m));
  EXPECT_EQ(m["b"], "-2.5e-3");
  for (const char* bad : {"", "{", R"({"a":nan})", R"({"a":inf})", R"({"a":1,})", R"({"a":01})",
                          R"({a:1})", R"({"a":1}x)", R"({"a":1 "b":2})", R"({"a":1,"a":2})"}) {
    std::map<std::string, std::string> n;
    EXPECT_FALSE(parseFlatObject(bad, n)) << bad;
  }
}

TEST(RuntimeProgress, FormatsDurations) {
  EXPECT_EQ(lwrt::formatDuration(0), "0s");
  EXPECT_EQ(lwrt::formatDuration(59.4), "59s");
  EXPECT_EQ(lwrt::formatDuration(72), "1m12s");
  EXPECT_EQ(lwrt::formatDuration(3599), "59m59s");
  EXPECT_EQ(lwrt::formatDuration(3600), "1h00m");
  EXPECT_EQ(lwrt::formatDuration(3725), "1h02m");
  EXPECT_EQ(lwrt::formatDuration(90000), "1d01h");
  EXPECT_EQ(lwrt::formatDuration(-1), "--");
  EXPECT_EQ(lwrt::formatDuration(kNaN), "--");
  EXPECT_EQ(lwrt::formatDuration(INFINITY), "--");
}

TEST(RuntimeProgress, FormatsTheLine) {
  ProgressOptions o;
  o.totalSteps = 1875;
  o.itemsPerStep = 32;
  // 32 images in 25.9 ms: 1235.5 img/s; 1755 steps left: 45.5 s.
  EXPECT_EQ(lwrt::formatProgressLine(o, 120, 0.42131, 25.9),
            "step 120/1875  loss 0.4213  1236 img/s  25.9 ms/step  ETA 45s");
  // Before any rate is known: no rates, no ETA.
  EXPECT_EQ(lwrt::formatProgressLine(o, 1, 2.302585, kNaN), "step 1/1875  loss 2.3026");
  // Slow and fast steps keep a useful precision.
  o.totalSteps = 0;
  o.itemsPerStep = 1;
  o.unit = "seq";
  EXPECT_EQ(lwrt::formatProgressLine(o, 7, 1, 2500),
            "step 7  loss 1.0000  0.400 seq/s  2500 ms/step");
  o.itemsPerStep = 0;
  EXPECT_EQ(lwrt::formatProgressLine(o, 7, kNaN, 0.25), "step 7  loss nan  0.250 ms/step");
}

TEST(RuntimeProgress, FormatsEpochs) {
  ProgressOptions o;
  o.stepsPerEpoch = 1875;
  o.totalSteps = 5 * 1875;
  o.itemsPerStep = 32;
  // Step 1995 overall is step 120 of epoch 2; 7380 steps left at 25.9 ms.
  EXPECT_EQ(lwrt::formatProgressLine(o, 1875 + 120, 0.42131, 25.9),
            "epoch 2/5  step 120/1875  loss 0.4213  1236 img/s  25.9 ms/step  ETA 3m11s");
  EXPECT_EQ(lwrt::formatProgressLine(o, 1875, 0.5, kNaN), "epoch 1/5  step 1875/1875  loss 0.5000");
  EXPECT_EQ(lwrt::formatProgressLine(o, 1876, 0.5, kNaN), "epoch 2/5  step 1/1875  loss 0.5000");
  EXPECT_EQ(lwrt::formatProgressLine(o, 5 * 1875, 0.5, 10),
            "epoch 5/5  step 1875/1875  loss 0.5000  3200 img/s  10.0 ms/step  ETA 0s");
  o.totalSteps = 0; // epochs without a known total
  EXPECT_EQ(lwrt::formatProgressLine(o, 3751, 0.5, kNaN), "epoch 3  step 1/1875  loss 0.5000");
}

TEST(RuntimeProgress, PlainLinesEveryKSteps) {
  MemStream out;
  FakeClock clock;
  ProgressOptions o;
  o.totalSteps = 25;
  o.itemsPerStep = 32;
  o.every = 10;
  o.clock = clock.fn();
  ProgressReporter r(out.file(), o); // a memory stream is no terminal
  EXPECT_FALSE(r.live());
  for (int64_t s = 1; s <= 25; ++s) {
    clock.now += 2.0;
    r.step(s, 1.0 / static_cast<double>(s));
  }
  r.finish();
  auto got = lines(out.text());
  ASSERT_EQ(got.size(), 3u) << out.text();
  EXPECT_EQ(got[0], "step 10/25  loss 0.1000  16.0 img/s  2000 ms/step  ETA 30s");
  EXPECT_EQ(got[1], "step 20/25  loss 0.0500  16.0 img/s  2000 ms/step  ETA 10s");
  EXPECT_EQ(got[2], "step 25/25  loss 0.0400  16.0 img/s  2000 ms/step  ETA 0s");
  EXPECT_EQ(out.text().find('\r'), std::string::npos);
}

TEST(RuntimeProgress, PlainLinesAtEpochEnds) {
  MemStream out;
  FakeClock clock;
  ProgressOptions o;
  o.totalSteps = 9;
  o.stepsPerEpoch = 3;
  o.every = 100;
  o.clock = clock.fn();
  ProgressReporter r(out.file(), o);
  for (int64_t s = 1; s <= 9; ++s) {
    clock.now += 0.5;
    r.step(s, 0.25);
  }
  auto got = lines(out.text());
  ASSERT_EQ(got.size(), 3u) << out.text();
  EXPECT_EQ(got[0], "epoch 1/3  step 3/3  loss 0.2500  500 ms/step  ETA 3s");
  EXPECT_EQ(got[2], "epoch 3/3  step 3/3  loss 0.2500  500 ms/step  ETA 0s");
}

TEST(RuntimeProgress, RatesCoverASlidingWindow) {
  MemStream out;
  FakeClock clock;
  clock.now = 0;
  ProgressOptions o;
  o.totalSteps = 100;
  o.itemsPerStep = 10;
  o.window = 4;
  o.live = LiveMode::Off;
  o.clock = clock.fn();
  ProgressReporter r(out.file(), o);
  EXPECT_TRUE(std::isnan(r.msPerStep()));
  EXPECT_TRUE(std::isnan(r.etaSeconds(0)));
  const double times[] = {1, 2, 3, 4, 7, 10, 13, 16}; // 1 s/step, then 3 s/step
  for (int s = 1; s <= 8; ++s) {
    clock.now = times[s - 1];
    r.step(s, 0.5);
    if (s == 4) {
      EXPECT_DOUBLE_EQ(r.msPerStep(), 1000);
    }
    if (s == 6) { // steps 2..6: 8 s over 4 steps
      EXPECT_DOUBLE_EQ(r.msPerStep(), 2000);
    }
  }
  EXPECT_DOUBLE_EQ(r.msPerStep(), 3000); // only the slow steps remain
  EXPECT_DOUBLE_EQ(r.itemsPerSecond(), 10.0 / 3.0);
  EXPECT_DOUBLE_EQ(r.etaSeconds(8), 92 * 3.0);

  // A resumed run restarts timing at its step.
  r.begin(500);
  EXPECT_TRUE(std::isnan(r.msPerStep()));
  clock.now += 0.25;
  r.step(501, 0.5);
  EXPECT_DOUBLE_EQ(r.msPerStep(), 250);
}

TEST(RuntimeProgress, LiveLineRedrawsInPlace) {
  MemStream out;
  FakeClock clock;
  ProgressOptions o;
  o.totalSteps = 0;
  o.live = LiveMode::On;
  o.liveInterval = 0;
  o.clock = clock.fn();
  {
    ProgressReporter r(out.file(), o);
    EXPECT_TRUE(r.live());
    clock.now += 1;
    r.step(1, 10.0);
    clock.now += 1;
    r.step(2, 1.0);
    EXPECT_EQ(out.text(),
              "\rstep 1  loss 10.0000  1000 ms/step\rstep 2  loss 1.0000  1000 ms/step ");
    r.message("eval: accuracy 0.5");
    clock.now += 1;
    r.step(3, 1.0);
  } // the destructor ends the line
  EXPECT_EQ(out.text(), "\rstep 1  loss 10.0000  1000 ms/step"
                        "\rstep 2  loss 1.0000  1000 ms/step "
                        "\reval: accuracy 0.5               \n"
                        "\rstep 2  loss 1.0000  1000 ms/step"
                        "\rstep 3  loss 1.0000  1000 ms/step\n");
}

TEST(RuntimeProgress, LiveLineIsThrottled) {
  MemStream out;
  FakeClock clock;
  ProgressOptions o;
  o.totalSteps = 100;
  o.live = LiveMode::On;
  o.liveInterval = 1.0;
  o.clock = clock.fn();
  ProgressReporter r(out.file(), o);
  for (int s = 1; s <= 5; ++s) {
    clock.now += 0.125;
    r.step(s, 0.5);
  }
  std::string shown = out.text();
  EXPECT_EQ(std::count(shown.begin(), shown.end(), '\r'), 1) << shown;
  r.finish(); // draws the pending step 5, then the newline
  shown = out.text();
  EXPECT_EQ(std::count(shown.begin(), shown.end(), '\r'), 2) << shown;
  EXPECT_NE(shown.find("\rstep 5/100  loss 0.5000  125 ms/step  ETA 12s\n"), std::string::npos)
      << shown;
  r.finish();
  EXPECT_EQ(out.text(), shown);
}

TEST(RuntimeProgress, AutoModeIsPlainOffATerminal) {
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ProgressOptions o;
  ProgressReporter r(f, o);
  EXPECT_EQ(r.live(), static_cast<bool>(::isatty(::fileno(f))));
  EXPECT_FALSE(r.live());
  std::fclose(f);
}

TEST(RuntimeProgress, JsonlLinesAreJsonAndFlushed) {
  MemStream out;
  lwrt::JsonlLogger log(out.file());
  const float loss = 0.4213f;
  log.step({120, loss, 1234.5, 25.9, 2, 0.01, std::nullopt, std::nullopt, std::nullopt, false,
            std::nullopt});
  EXPECT_NE(out.flushed().find('\n'), std::string::npos) << "not flushed per line";
  log.step({121, kNaN, kNaN, 25.9, std::nullopt, std::nullopt, std::nullopt, std::nullopt,
            std::nullopt, false, std::nullopt});
  log.eval({2, 0.9712, 0.0931, std::nullopt, 0.9981, std::nullopt});
  log.eval({3, 0.98, std::nullopt, 5625, std::nullopt, std::nullopt});
  log.eval({4, std::nullopt, 1.5, 7500, std::nullopt, 4.48168907}); // a language model
  EXPECT_TRUE(log.ok());

  auto got = lines(out.flushed());
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(got[0], R"({"type":"step","step":120,"epoch":2,"loss":0.421299994,)"
                    R"("img_per_s":1234.5,"step_ms":25.9,"lr":0.01})");
  EXPECT_EQ(got[1], R"({"type":"step","step":121,"loss":null,"img_per_s":null,"step_ms":25.9})");
  EXPECT_EQ(got[2], R"({"type":"eval","epoch":2,"accuracy":0.9712,"top5":0.9981,"loss":0.0931})");
  EXPECT_EQ(got[3], R"({"type":"eval","step":5625,"epoch":3,"accuracy":0.98})");
  EXPECT_EQ(got[4], R"({"type":"eval","step":7500,"epoch":4,"loss":1.5,"perplexity":4.48168907})");
  for (const std::string& line : got) {
    std::map<std::string, std::string> m;
    ASSERT_TRUE(parseFlatObject(line, m)) << line;
  }
  std::map<std::string, std::string> first;
  ASSERT_TRUE(parseFlatObject(got[0], first));
  for (const char* key : {"step", "loss", "img_per_s", "step_ms", "epoch", "lr"})
    EXPECT_TRUE(first.count(key)) << key;
  // %.9g gives the float back exactly.
  EXPECT_EQ(std::strtof(first["loss"].c_str(), nullptr), loss);
}

TEST(RuntimeProgress, JsonlStepOfAMultiDeviceTrainerGivesTheGlobalBatch) {
  MemStream out;
  lwrt::JsonlLogger log(out.file());
  log.step({3, 0.5, 100, 10, 1, std::nullopt, 64, 4, std::nullopt, false, std::nullopt});
  auto got = lines(out.flushed());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], R"({"type":"step","step":3,"epoch":1,"loss":0.5,"img_per_s":100,)"
                    R"("step_ms":10,"batch":64,"devices":4})");
}

TEST(RuntimeProgress, JsonlStepOfAnFp16TrainerGivesTheScaleAndSkips) {
  MemStream out;
  lwrt::JsonlLogger log(out.file());
  log.step(
      {1, 2.5, 100, 10, 1, std::nullopt, std::nullopt, std::nullopt, 32768.0, true, std::nullopt});
  log.step({2, 2.25, 100, 10, 1, std::nullopt, std::nullopt, std::nullopt, 32768.0, false,
            std::nullopt});
  auto got = lines(out.flushed());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], R"({"type":"step","step":1,"epoch":1,"loss":2.5,"img_per_s":100,)"
                    R"("step_ms":10,"loss_scale":32768,"skipped":true})");
  EXPECT_EQ(got[1], R"({"type":"step","step":2,"epoch":1,"loss":2.25,"img_per_s":100,)"
                    R"("step_ms":10,"loss_scale":32768})");
}

TEST(RuntimeProgress, JsonlFloatsReadBackExactly) {
  MemStream out;
  lwrt::JsonlLogger log(out.file());
  const float values[] = {0.1f, 1.0f / 3.0f, 3.4028235e38f, 1.17549435e-38f, 1e-45f, -2.5f, 0.0f};
  for (float v : values)
    log.step({1, v, 0, 0, std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt,
              false, std::nullopt});
  auto got = lines(out.flushed());
  ASSERT_EQ(got.size(), std::size(values));
  for (size_t i = 0; i < got.size(); ++i) {
    std::map<std::string, std::string> m;
    ASSERT_TRUE(parseFlatObject(got[i], m)) << got[i];
    EXPECT_EQ(std::strtof(m["loss"].c_str(), nullptr), values[i]) << got[i];
  }
}

TEST(RuntimeProgress, JsonlEscapesAndFiles) {
  EXPECT_EQ(lwrt::jsonString("a\"b\\c\nd\x01"), R"("a\"b\\c\nd\u0001")");
  EXPECT_EQ(lwrt::jsonNumber(INFINITY), "null");
  EXPECT_EQ(lwrt::jsonNumber(-0.5), "-0.5");

  std::string error;
  EXPECT_EQ(lwrt::JsonlLogger::open("/nonexistent-dir/x/log.jsonl", false, error), nullptr);
  EXPECT_NE(error.find("/nonexistent-dir/x/log.jsonl"), std::string::npos) << error;

  char name[] = "/tmp/lwcc-jsonl-XXXXXX";
  int fd = ::mkstemp(name);
  ASSERT_GE(fd, 0);
  ::close(fd);
  for (bool append : {false, true}) {
    auto log = lwrt::JsonlLogger::open(name, append, error);
    ASSERT_NE(log, nullptr) << error;
    log->eval({1, 0.5, std::nullopt, std::nullopt, std::nullopt, std::nullopt});
    EXPECT_TRUE(log->ok());
  }
  FILE* f = std::fopen(name, "r");
  ASSERT_NE(f, nullptr);
  char buf[256] = {};
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  ::unlink(name);
  EXPECT_EQ(std::string(buf, n), "{\"type\":\"eval\",\"epoch\":1,\"accuracy\":0.5}\n"
                                 "{\"type\":\"eval\",\"epoch\":1,\"accuracy\":0.5}\n");
}

TEST(RuntimeProgress, DetectsANonFiniteLoss) {
  EXPECT_EQ(lwrt::checkFiniteLoss(5, 0.25), "");
  EXPECT_EQ(lwrt::checkFiniteLoss(5, -1e30), "");
  std::string nan = lwrt::checkFiniteLoss(120, std::numeric_limits<float>::quiet_NaN());
  EXPECT_NE(nan.find("step 120"), std::string::npos) << nan;
  EXPECT_NE(nan.find("nan"), std::string::npos) << nan;
  EXPECT_NE(lwrt::checkFiniteLoss(7, INFINITY).find("step 7: the loss is inf"), std::string::npos);
  EXPECT_NE(lwrt::checkFiniteLoss(8, -INFINITY).find("-inf"), std::string::npos);
}

} // namespace
