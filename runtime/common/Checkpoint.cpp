// Checkpoint files: the atomic writer, the validating reader, and the
// helpers that find and prune checkpoints in a folder. See lwrt/checkpoint.h
// for the layout.
#include "lwrt/checkpoint.h"

#include "AtomicFile.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <limits>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace lwrt {

namespace {

constexpr char kMagic[8] = {'L', 'W', 'C', 'C', 'C', 'K', 'P', 'T'};
constexpr uint64_t kHeaderBytes = 24; // magic, version, reserved, payload bytes
constexpr uint64_t kChecksumBytes = 8;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;
constexpr const char* kPrefix = "ckpt-";
constexpr const char* kSuffix = ".lwckpt";

std::string hex64(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
  return buf;
}

bool validDType(uint8_t code) { return code <= static_cast<uint8_t>(DType::Bool); }

/// numel * dtypeSize, or false on a negative dim or an overflow of int64.
bool tensorBytes(DType dtype, const std::vector<int64_t>& shape, uint64_t& bytes) {
  uint64_t n = static_cast<uint64_t>(dtypeSize(dtype));
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  for (int64_t d : shape) {
    if (d < 0)
      return false;
    uint64_t ud = static_cast<uint64_t>(d);
    if (ud != 0 && n > kMax / ud)
      return false;
    n *= ud;
  }
  bytes = n;
  return true;
}

void putU64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    p[i] = static_cast<unsigned char>(v >> (8 * i));
}

uint64_t getU64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

uint32_t getU32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

/// Buffered writes to a file descriptor that hash everything they write.
class HashingWriter {
public:
  explicit HashingWriter(int fd) : fd_(fd) { buffer_.reserve(kBufferBytes); }

  /// False once a write failed; error() says why.
  bool ok() const { return err_ == 0; }
  int error() const { return err_; }
  uint64_t hash() const { return hash_; }

  void bytes(const void* data, size_t size) {
    if (!ok() || size == 0)
      return;
    hash_ = fnv1a64(data, size, hash_);
    const auto* p = static_cast<const unsigned char*>(data);
    if (size >= kBufferBytes) {
      flush();
      writeAll(p, size);
      return;
    }
    if (buffer_.size() + size > kBufferBytes)
      flush();
    buffer_.insert(buffer_.end(), p, p + size);
  }
  void u8(uint8_t v) { bytes(&v, 1); }
  void u32(uint32_t v) {
    unsigned char b[4];
    for (int i = 0; i < 4; ++i)
      b[i] = static_cast<unsigned char>(v >> (8 * i));
    bytes(b, 4);
  }
  void u64(uint64_t v) {
    unsigned char b[8];
    putU64(b, v);
    bytes(b, 8);
  }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }

  void flush() {
    if (ok() && !buffer_.empty())
      writeAll(buffer_.data(), buffer_.size());
    buffer_.clear();
  }

private:
  static constexpr size_t kBufferBytes = 1 << 16;

  void writeAll(const unsigned char* p, size_t size) {
    if (ok())
      err_ = lwrt::writeAll(fd_, p, size);
  }

  int fd_;
  int err_ = 0;
  uint64_t hash_ = kFnv1aOffset;
  std::vector<unsigned char> buffer_;
};

/// Checks the tensors and returns the payload's size, or an error.
std::string checkTensors(const std::vector<NamedTensor>& tensors, size_t stateBytes,
                         uint64_t& payload) {
  payload = 8 + 8 + 8 + 8 + 8 + 8 + stateBytes + 8;
  std::set<std::string> names;
  for (const NamedTensor& t : tensors) {
    const TensorView& v = t.view;
    if (!names.insert(t.name).second)
      return "tensor '" + t.name + "' appears twice";
    if (t.name.size() > std::numeric_limits<uint32_t>::max())
      return "tensor name too long";
    if (!validDType(static_cast<uint8_t>(v.dtype)))
      return "tensor '" + t.name + "' has an unknown element type";
    if (v.shape.size() > 255)
      return "tensor '" + t.name + "' has rank " + std::to_string(v.shape.size()) +
             ", more than 255";
    uint64_t bytes = 0;
    if (!tensorBytes(v.dtype, v.shape, bytes))
      return "tensor '" + t.name + "' has an invalid shape";
    if (bytes > 0 && !v.data)
      return "tensor '" + t.name + "' has no data";
    payload += 4 + t.name.size() + 1 + 1 + 8 * v.shape.size() + 8 + bytes;
    if (payload > (uint64_t(1) << 62))
      return "the checkpoint would exceed 2^62 bytes";
  }
  return "";
}

/// Reads the whole file; "" or an error (without the path).
std::string slurp(const std::string& path, std::vector<unsigned char>& out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return "cannot open: " + errnoText(errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return "cannot stat: " + errnoText(err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return "not a regular file";
  }
  out.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      int err = errno;
      ::close(fd);
      return "read failed: " + errnoText(err);
    }
    if (n == 0)
      break; // shrank while reading: validated as a truncation below
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  ::close(fd);
  return "";
}

/// Bounds-checked reads from the payload.
class Reader {
public:
  Reader(const unsigned char* p, uint64_t size) : p_(p), left_(size) {}
  uint64_t left() const { return left_; }
  bool u8(uint8_t& v) {
    if (left_ < 1)
      return false;
    v = *p_;
    advance(1);
    return true;
  }
  bool u32(uint32_t& v) {
    if (left_ < 4)
      return false;
    v = getU32(p_);
    advance(4);
    return true;
  }
  bool u64(uint64_t& v) {
    if (left_ < 8)
      return false;
    v = getU64(p_);
    advance(8);
    return true;
  }
  bool i64(int64_t& v) {
    uint64_t u = 0;
    if (!u64(u))
      return false;
    v = static_cast<int64_t>(u);
    return true;
  }
  /// `size` bytes into `out`; false (allocating nothing) when fewer are left.
  bool bytes(uint64_t size, std::vector<unsigned char>& out) {
    if (size > left_)
      return false;
    out.assign(p_, p_ + size);
    advance(size);
    return true;
  }
  bool text(uint64_t size, std::string& out) {
    if (size > left_)
      return false;
    out.assign(reinterpret_cast<const char*>(p_), static_cast<size_t>(size));
    advance(size);
    return true;
  }

private:
  void advance(uint64_t n) {
    p_ += n;
    left_ -= n;
  }
  const unsigned char* p_;
  uint64_t left_;
};

/// Parses a checksummed payload; "" or an error (without the path).
std::string parsePayload(const unsigned char* p, uint64_t size, uint32_t version, Checkpoint& out) {
  Reader r(p, size);
  CheckpointState& s = out.state;
  uint64_t rngBytes = 0;
  if (!r.u64(s.fingerprint) || !r.i64(s.step) || !r.i64(s.epoch) || !r.i64(s.batch) ||
      !r.u64(rngBytes))
    return "corrupt: the payload ends inside the state";
  if (!r.bytes(rngBytes, s.rng))
    return "corrupt: RNG state of " + std::to_string(rngBytes) + " bytes exceeds the " +
           std::to_string(r.left()) + " bytes left";
  s.autotune.clear();
  if (version >= 2) {
    uint64_t autotuneBytes = 0;
    std::vector<unsigned char> text;
    if (!r.u64(autotuneBytes))
      return "corrupt: the payload ends inside the state";
    if (!r.bytes(autotuneBytes, text))
      return "corrupt: autotune record of " + std::to_string(autotuneBytes) +
             " bytes exceeds the " + std::to_string(r.left()) + " bytes left";
    s.autotune.assign(text.begin(), text.end());
  }
  uint64_t count = 0;
  if (!r.u64(count))
    return "corrupt: the payload ends before the tensor count";
  // Each tensor takes at least 14 bytes: bound the count before reserving.
  constexpr uint64_t kMinTensorBytes = 4 + 1 + 1 + 8;
  if (count > r.left() / kMinTensorBytes)
    return "corrupt: tensor count " + std::to_string(count) + " exceeds what the " +
           std::to_string(r.left()) + " bytes left can hold";
  out.tensors.clear();
  out.tensors.reserve(static_cast<size_t>(count));
  std::set<std::string> names;
  for (uint64_t i = 0; i < count; ++i) {
    std::string where = "tensor #" + std::to_string(i);
    CheckpointTensor t;
    uint32_t nameBytes = 0;
    if (!r.u32(nameBytes))
      return "corrupt: " + where + ": the payload ends before it";
    if (!r.text(nameBytes, t.name))
      return "corrupt: " + where + ": name of " + std::to_string(nameBytes) +
             " bytes exceeds the file";
    where += " '" + t.name + "'";
    if (!names.insert(t.name).second)
      return "corrupt: " + where + " appears twice";
    uint8_t code = 0, rank = 0;
    if (!r.u8(code) || !r.u8(rank))
      return "corrupt: " + where + ": the payload ends inside it";
    if (!validDType(code))
      return "corrupt: " + where + ": unknown element type code " + std::to_string(code);
    t.dtype = static_cast<DType>(code);
    t.shape.resize(rank);
    for (int64_t& d : t.shape)
      if (!r.i64(d))
        return "corrupt: " + where + ": the payload ends inside its shape";
    uint64_t expected = 0, dataBytes = 0;
    if (!tensorBytes(t.dtype, t.shape, expected))
      return "corrupt: " + where + ": invalid shape";
    if (!r.u64(dataBytes))
      return "corrupt: " + where + ": the payload ends inside it";
    if (dataBytes != expected)
      return "corrupt: " + where + ": " + std::to_string(dataBytes) +
             " data bytes, its shape needs " + std::to_string(expected);
    if (!r.bytes(dataBytes, t.data))
      return "corrupt: " + where + ": " + std::to_string(dataBytes) + " data bytes exceed the " +
             std::to_string(r.left()) + " bytes left";
    out.tensors.push_back(std::move(t));
  }
  if (r.left() != 0)
    return "corrupt: " + std::to_string(r.left()) + " unread bytes after the last tensor";
  return "";
}

/// Parses "ckpt-<digits>.lwckpt"; false for any other name.
bool parseName(const std::string& name, int64_t& step) {
  const size_t pre = std::strlen(kPrefix), suf = std::strlen(kSuffix);
  if (name.size() <= pre + suf || name.compare(0, pre, kPrefix) != 0 ||
      name.compare(name.size() - suf, suf, kSuffix) != 0)
    return false;
  std::string digits = name.substr(pre, name.size() - pre - suf);
  if (digits.size() > 18)
    return false;
  int64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9')
      return false;
    v = v * 10 + (c - '0');
  }
  step = v;
  return true;
}

} // namespace

uint64_t fnv1a64(const void* bytes, size_t size, uint64_t hash) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  for (size_t i = 0; i < size; ++i) {
    hash ^= p[i];
    hash *= kFnvPrime;
  }
  return hash;
}

const CheckpointTensor* Checkpoint::find(const std::string& name) const {
  for (const CheckpointTensor& t : tensors)
    if (t.name == name)
      return &t;
  return nullptr;
}

std::string writeCheckpoint(const std::string& path, const CheckpointState& state,
                            const std::vector<NamedTensor>& tensors) {
  uint64_t payload = 0;
  if (std::string bad = checkTensors(tensors, state.rng.size() + state.autotune.size(), payload);
      !bad.empty())
    return path + ": cannot write checkpoint: " + bad;
  return writeFileAtomically(path, "checkpoint", [&](int fd) {
    HashingWriter w(fd);
    w.bytes(kMagic, sizeof kMagic);
    w.u32(kCheckpointVersion);
    w.u32(0);
    w.u64(payload);
    w.u64(state.fingerprint);
    w.i64(state.step);
    w.i64(state.epoch);
    w.i64(state.batch);
    w.u64(state.rng.size());
    w.bytes(state.rng.data(), state.rng.size());
    w.u64(state.autotune.size());
    w.bytes(state.autotune.data(), state.autotune.size());
    w.u64(tensors.size());
    for (const NamedTensor& t : tensors) {
      w.u32(static_cast<uint32_t>(t.name.size()));
      w.bytes(t.name.data(), t.name.size());
      w.u8(static_cast<uint8_t>(t.view.dtype));
      w.u8(static_cast<uint8_t>(t.view.shape.size()));
      for (int64_t d : t.view.shape)
        w.i64(d);
      uint64_t bytes = 0;
      tensorBytes(t.view.dtype, t.view.shape, bytes); // checked above
      w.u64(bytes);
      w.bytes(t.view.data, static_cast<size_t>(bytes));
    }
    w.u64(w.hash());
    w.flush();
    return w.ok() ? 0 : w.error();
  });
}

std::string writeCheckpoint(const std::string& path, const Checkpoint& checkpoint) {
  std::vector<NamedTensor> views;
  views.reserve(checkpoint.tensors.size());
  for (const CheckpointTensor& t : checkpoint.tensors) {
    uint64_t bytes = 0;
    if (!tensorBytes(t.dtype, t.shape, bytes) || bytes != t.data.size())
      return path + ": cannot write checkpoint: tensor '" + t.name + "' holds " +
             std::to_string(t.data.size()) + " bytes, its shape needs " + std::to_string(bytes);
    TensorView v;
    v.data = const_cast<unsigned char*>(t.data.data());
    v.dtype = t.dtype;
    v.shape = t.shape;
    views.push_back({t.name, std::move(v)});
  }
  return writeCheckpoint(path, checkpoint.state, views);
}

std::string readCheckpoint(const std::string& path, Checkpoint& out) {
  auto fail = [&](const std::string& what) { return path + ": " + what; };
  std::vector<unsigned char> file;
  if (std::string bad = slurp(path, file); !bad.empty())
    return fail(bad);
  const uint64_t size = file.size();
  const unsigned char* p = file.data();
  const size_t magicSeen = static_cast<size_t>(std::min<uint64_t>(size, sizeof kMagic));
  if (magicSeen > 0 && std::memcmp(p, kMagic, magicSeen) != 0)
    return fail("not a checkpoint (bad magic bytes)");
  if (size < kHeaderBytes + kChecksumBytes)
    return fail("truncated: " + std::to_string(size) + " bytes, less than the " +
                std::to_string(kHeaderBytes + kChecksumBytes) + " of an empty checkpoint");
  const uint32_t version = getU32(p + 8);
  if (version < 1 || version > kCheckpointVersion)
    return fail("checkpoint format version " + std::to_string(version) +
                ", this runtime reads versions 1 to " + std::to_string(kCheckpointVersion));
  if (getU32(p + 12) != 0)
    return fail("corrupt: reserved header field is not zero");
  const uint64_t payload = getU64(p + 16);
  const uint64_t body = size - kHeaderBytes - kChecksumBytes;
  if (payload > body)
    return fail("truncated: " + std::to_string(size) + " bytes, the header says " +
                (payload > std::numeric_limits<uint64_t>::max() - kHeaderBytes - kChecksumBytes
                     ? std::string("more than 2^64")
                     : std::to_string(payload + kHeaderBytes + kChecksumBytes)));
  if (payload < body)
    return fail("corrupt: " + std::to_string(body - payload) +
                " bytes past the end the header gives");
  const uint64_t stored = getU64(p + kHeaderBytes + payload);
  const uint64_t computed = fnv1a64(p, static_cast<size_t>(kHeaderBytes + payload));
  if (stored != computed)
    return fail("checksum mismatch (stored " + hex64(stored) + ", computed " + hex64(computed) +
                "): the file is corrupt");
  if (std::string bad = parsePayload(p + kHeaderBytes, payload, version, out); !bad.empty())
    return fail(bad);
  return "";
}

std::string readCheckpoint(const std::string& path, uint64_t fingerprint, Checkpoint& out) {
  if (std::string bad = readCheckpoint(path, out); !bad.empty())
    return bad;
  if (out.state.fingerprint != fingerprint)
    return path + ": checkpoint of another model (fingerprint " + hex64(out.state.fingerprint) +
           ", this model's is " + hex64(fingerprint) + ")";
  return "";
}

std::string checkpointFileName(int64_t step) { return kPrefix + std::to_string(step) + kSuffix; }

std::vector<std::pair<int64_t, std::string>> listCheckpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    int64_t step = 0;
    if (!parseName(it->path().filename().string(), step))
      continue;
    std::error_code typeEc;
    if (!it->is_regular_file(typeEc))
      continue;
    found.emplace_back(step, it->path().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::string latestCheckpoint(const std::string& dir) {
  auto all = listCheckpoints(dir);
  return all.empty() ? std::string() : all.back().second;
}

std::string keepLastCheckpoints(const std::string& dir, int keep) {
  if (keep <= 0)
    return "";
  auto all = listCheckpoints(dir);
  std::string errors;
  const size_t drop = all.size() > static_cast<size_t>(keep) ? all.size() - keep : 0;
  for (size_t i = 0; i < drop; ++i) {
    if (::unlink(all[i].second.c_str()) == 0 || errno == ENOENT)
      continue;
    const std::string why = errnoText(errno);
    errors += (errors.empty() ? "" : "; ") + all[i].second + ": cannot delete: " + why;
  }
  return errors;
}

} // namespace lwrt
