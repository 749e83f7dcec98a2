// TensorBoard event files: TFRecord framing with masked CRC-32C around
// Event protos written field by field (tensorflow/core/util/event.proto,
// summary.proto). The fields used:
//   Event:   wall_time = 1 (double), step = 2 (int64), file_version = 3
//            (string), summary = 5 (Summary)
//   Summary: value = 1 (repeated Value)
//   Value:   tag = 1 (string), simple_value = 2 (float)
#include "TensorBoard.h"

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <unistd.h>
#include <vector>

namespace lwrt {

namespace {

// The reflected table of the Castagnoli polynomial 0x1EDC6F41.
const std::array<uint32_t, 256>& crcTable() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

// Protobuf's wire format: a key is (field << 3) | wire type.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void fixed(std::string& out, const void* bytes, size_t n) { // little-endian hosts
  out.append(static_cast<const char*>(bytes), n);
}
void lengthDelimited(std::string& out, int field, const std::string& bytes) {
  varint(out, static_cast<uint64_t>(field) << 3 | 2);
  varint(out, bytes.size());
  out += bytes;
}

double wallTime() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// An Event's wall_time and step.
std::string eventHeader(int64_t step) {
  std::string e;
  const double t = wallTime();
  varint(e, 1 << 3 | 1);
  fixed(e, &t, 8);
  varint(e, 2 << 3 | 0);
  varint(e, static_cast<uint64_t>(step));
  return e;
}

/// A Summary of (tag, value) pairs.
class Scalars {
public:
  void add(const std::string& tag, double v) {
    std::string value;
    lengthDelimited(value, 1, tag);
    const float f = static_cast<float>(v);
    varint(value, 2 << 3 | 5);
    fixed(value, &f, 4);
    lengthDelimited(summary_, 1, value);
  }
  std::string event(int64_t step) const {
    std::string e = eventHeader(step);
    lengthDelimited(e, 5, summary_);
    return e;
  }

private:
  std::string summary_;
};

} // namespace

uint32_t crc32c(const void* data, size_t n) {
  const auto& table = crcTable();
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i)
    c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t maskedCrc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

std::unique_ptr<TensorBoardWriter> TensorBoardWriter::open(const std::string& dir,
                                                           std::string& error) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = '\0';
  const std::string path = dir + "/events.out.tfevents." +
                           std::to_string(static_cast<long long>(wallTime())) + "." + host + "." +
                           std::to_string(getpid()) + ".lwcc";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    error = "--tensorboard: cannot create " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  std::unique_ptr<TensorBoardWriter> w(new TensorBoardWriter(f, path));
  std::string first = eventHeader(0);
  lengthDelimited(first, 3, "brain.Event:2");
  w->write(first);
  if (!w->ok()) {
    error = "--tensorboard: cannot write " + path;
    return nullptr;
  }
  return w;
}

TensorBoardWriter::~TensorBoardWriter() { std::fclose(f_); }

void TensorBoardWriter::write(const std::string& event) {
  const uint64_t length = event.size();
  const uint32_t lengthCrc = maskedCrc32c(&length, 8);
  const uint32_t dataCrc = maskedCrc32c(event.data(), event.size());
  std::string record;
  fixed(record, &length, 8);
  fixed(record, &lengthCrc, 4);
  record += event;
  fixed(record, &dataCrc, 4);
  ok_ = ok_ && std::fwrite(record.data(), 1, record.size(), f_) == record.size() &&
        std::fflush(f_) == 0;
}

void TensorBoardWriter::step(const StepRecord& r) {
  Scalars s;
  s.add("train/loss", r.loss);
  if (r.lr)
    s.add("train/lr", *r.lr);
  if (r.gradNorm)
    s.add("train/grad_norm", *r.gradNorm);
  if (r.lossScale)
    s.add("train/loss_scale", *r.lossScale);
  s.add("train/img_per_s", r.imgPerSec);
  write(s.event(r.step));
}

void TensorBoardWriter::eval(const EvalRecord& r) {
  Scalars s;
  if (r.accuracy)
    s.add("eval/accuracy", *r.accuracy);
  if (r.top5)
    s.add("eval/top5", *r.top5);
  if (r.loss)
    s.add("eval/loss", *r.loss);
  if (r.perplexity)
    s.add("eval/perplexity", *r.perplexity);
  write(s.event(r.step ? *r.step : r.epoch));
}

} // namespace lwrt
