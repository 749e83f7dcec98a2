// Checkpoint files: bit-exact round trips, every kind of corruption the
// reader must catch, refusal of another model's checkpoint, atomic
// replacement when a write fails, and finding/pruning checkpoints.
#include "lwrt/checkpoint.h"

#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <iterator>
#include <string>
#include <sys/resource.h>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;
using lwrt::Checkpoint;
using lwrt::CheckpointState;
using lwrt::DType;
using lwrt::NamedTensor;

std::vector<unsigned char> readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void writeBytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

void putLE(std::vector<unsigned char>& file, size_t offset, uint64_t v, int width) {
  for (int i = 0; i < width; ++i)
    file[offset + i] = static_cast<unsigned char>(v >> (8 * i));
}

/// Recomputes the trailing checksum after a deliberate edit, so that the
/// reader's structural checks (not the checksum) must catch it.
void reseal(std::vector<unsigned char>& file) {
  putLE(file, file.size() - 8, lwrt::fnv1a64(file.data(), file.size() - 8), 8);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class RuntimeCheckpoint : public ::testing::Test {
protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("lwcc-ckpt-" + std::to_string(::getpid()) + "-" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);

    state_.fingerprint = 0x0123456789abcdefull;
    state_.step = 1234;
    state_.epoch = 3;
    state_.batch = 17;
    for (int i = 0; i < 40; ++i)
      state_.rng.push_back(static_cast<unsigned char>(i * 37 + 5));
    state_.autotune = "GPU sm_90\tconv.bwd-data bf16\tgraph engine=2\n";
    // Values whose bits must survive: -0, a NaN payload, a denormal, inf.
    weights_ = {1.5f, -0.0f, 3.25e-39f, INFINITY, -2.0f, 7.0f};
    uint32_t nanBits = 0x7fc12345u;
    std::memcpy(&weights_[4], &nanBits, 4);
    moments_ = {-1, 0, 1, INT64_MAX, INT64_MIN};
    halves_ = {0x3c00, 0x7e01, 0x8000, 0xffff};
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, ec);
    fs::remove_all(dir_, ec);
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::vector<NamedTensor> tensors() {
    std::vector<NamedTensor> t(5);
    t[0] = {"fc.weight", {weights_.data(), DType::F32, {2, 3}}};
    t[1] = {"adam.m", {moments_.data(), DType::I64, {5}}};
    t[2] = {"bf16", {halves_.data(), DType::BF16, {2, 1, 2}}};
    t[3] = {"scalar", {&flag_, DType::Bool, {}}};
    t[4] = {"empty", {nullptr, DType::F32, {0, 4}}};
    return t;
  }

  /// A good checkpoint at `name`; returns its bytes.
  std::vector<unsigned char> good(const std::string& name = "good.lwckpt") {
    EXPECT_EQ(lwrt::writeCheckpoint(path(name), state_, tensors()), "");
    return readBytes(path(name));
  }

  /// Writes `bytes` and returns what reading them says.
  std::string readError(const std::vector<unsigned char>& bytes) {
    writeBytes(path("bad.lwckpt"), bytes);
    Checkpoint c;
    return lwrt::readCheckpoint(path("bad.lwckpt"), c);
  }

  fs::path dir_;
  CheckpointState state_;
  std::vector<float> weights_;
  std::vector<int64_t> moments_;
  std::vector<uint16_t> halves_;
  bool flag_ = true;
};

TEST_F(RuntimeCheckpoint, RoundTripIsBitExact) {
  auto bytes = good();
  Checkpoint c;
  ASSERT_EQ(lwrt::readCheckpoint(path("good.lwckpt"), state_.fingerprint, c), "");
  EXPECT_EQ(c.state.fingerprint, state_.fingerprint);
  EXPECT_EQ(c.state.step, 1234);
  EXPECT_EQ(c.state.epoch, 3);
  EXPECT_EQ(c.state.autotune, state_.autotune);
  EXPECT_EQ(c.state.batch, 17);
  EXPECT_EQ(c.state.rng, state_.rng);
  auto want = tensors();
  ASSERT_EQ(c.tensors.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& got = c.tensors[i];
    EXPECT_EQ(got.name, want[i].name);
    EXPECT_EQ(got.dtype, want[i].view.dtype);
    EXPECT_EQ(got.shape, want[i].view.shape);
    ASSERT_EQ(static_cast<int64_t>(got.data.size()), want[i].view.bytes()) << got.name;
    if (!got.data.empty()) {
      EXPECT_EQ(std::memcmp(got.data.data(), want[i].view.data, got.data.size()), 0) << got.name;
    }
  }
  ASSERT_NE(c.find("adam.m"), nullptr);
  EXPECT_EQ(c.find("adam.m")->shape, std::vector<int64_t>{5});
  EXPECT_EQ(c.find("missing"), nullptr);

  // Writing what was read gives the same bytes: nothing is lost or reordered.
  ASSERT_EQ(lwrt::writeCheckpoint(path("again.lwckpt"), c), "");
  EXPECT_EQ(readBytes(path("again.lwckpt")), bytes);
  EXPECT_FALSE(fs::exists(path("good.lwckpt.tmp")));
}

TEST_F(RuntimeCheckpoint, EmptyCheckpointRoundTrips) {
  CheckpointState s;
  ASSERT_EQ(lwrt::writeCheckpoint(path("e.lwckpt"), s, {}), "");
  Checkpoint c;
  ASSERT_EQ(lwrt::readCheckpoint(path("e.lwckpt"), c), "");
  EXPECT_EQ(c.state.step, 0);
  EXPECT_TRUE(c.state.rng.empty());
  EXPECT_TRUE(c.tensors.empty());
}

TEST_F(RuntimeCheckpoint, RefusesAnotherModelsCheckpoint) {
  good();
  Checkpoint c;
  std::string err = lwrt::readCheckpoint(path("good.lwckpt"), 0xfeedull, c);
  EXPECT_TRUE(contains(err, path("good.lwckpt"))) << err;
  EXPECT_TRUE(contains(err, "another model")) << err;
  EXPECT_TRUE(contains(err, "0x0123456789abcdef")) << err;
  EXPECT_TRUE(contains(err, "0x000000000000feed")) << err;
}

TEST_F(RuntimeCheckpoint, MissingFileIsAnError) {
  Checkpoint c;
  std::string err = lwrt::readCheckpoint(path("nope.lwckpt"), c);
  EXPECT_TRUE(contains(err, path("nope.lwckpt"))) << err;
  EXPECT_TRUE(contains(err, "cannot open")) << err;
}

TEST_F(RuntimeCheckpoint, DetectsBadMagic) {
  auto bytes = good();
  bytes[3] ^= 0x20;
  std::string err = readError(bytes);
  EXPECT_TRUE(contains(err, "bad magic")) << err;
  EXPECT_TRUE(contains(err, path("bad.lwckpt"))) << err;
  EXPECT_TRUE(contains(readError({'h', 'e', 'l', 'l', 'o', '\n'}), "bad magic"));
}

TEST_F(RuntimeCheckpoint, DetectsWrongVersion) {
  auto bytes = good();
  putLE(bytes, 8, 7, 4);
  std::string err = readError(bytes);
  EXPECT_TRUE(contains(err, "version 7")) << err;
  EXPECT_TRUE(contains(err, "versions 1 to 2")) << err;
  putLE(bytes, 8, 0, 4);
  EXPECT_TRUE(contains(readError(bytes), "version 0"));
}

// The autotune record (version 2) comes back as written; a version 1 file,
// which has no such field, still reads, with an empty record.
TEST_F(RuntimeCheckpoint, KeepsTheAutotuneRecordAndReadsVersion1) {
  state_.autotune = "GPU A sm_90\tconv.fwd f32 1x3x8x8\tlegacy algo=1 math=1\n";
  good("v2.lwckpt");
  Checkpoint c;
  ASSERT_EQ(lwrt::readCheckpoint(path("v2.lwckpt"), c), "");
  EXPECT_EQ(c.state.autotune, state_.autotune);
  EXPECT_EQ(c.state.rng, state_.rng);

  state_.autotune.clear();
  auto bytes = good("v2-empty.lwckpt");
  const size_t autotuneLen = 64 + state_.rng.size();
  std::vector<unsigned char> v1(bytes.begin(), bytes.begin() + autotuneLen);
  v1.insert(v1.end(), bytes.begin() + autotuneLen + 8, bytes.end());
  putLE(v1, 8, 1, 4);
  uint64_t payload = 0;
  for (int i = 0; i < 8; ++i)
    payload |= uint64_t(bytes[16 + i]) << (8 * i);
  putLE(v1, 16, payload - 8, 8);
  reseal(v1);
  writeBytes(path("v1.lwckpt"), v1);
  Checkpoint old;
  ASSERT_EQ(lwrt::readCheckpoint(path("v1.lwckpt"), state_.fingerprint, old), "");
  EXPECT_EQ(old.state.step, 1234);
  EXPECT_EQ(old.state.autotune, "");
  ASSERT_EQ(old.tensors.size(), 5u);
  EXPECT_EQ(old.tensors[0].name, "fc.weight");
  EXPECT_EQ(std::memcmp(old.tensors[0].data.data(), weights_.data(), 6 * 4), 0);
}

TEST_F(RuntimeCheckpoint, DetectsTruncation) {
  auto bytes = good();
  for (size_t keep :
       {size_t(0), size_t(5), size_t(8), size_t(12), size_t(23), size_t(24), size_t(31), size_t(40),
        bytes.size() / 2, bytes.size() - 9, bytes.size() - 1}) {
    std::vector<unsigned char> cut(bytes.begin(), bytes.begin() + keep);
    std::string err = readError(cut);
    EXPECT_TRUE(contains(err, "truncated")) << keep << ": " << err;
  }
  auto longer = bytes;
  longer.push_back(0);
  EXPECT_TRUE(contains(readError(longer), "past the end"));
}

TEST_F(RuntimeCheckpoint, DetectsFlippedBytes) {
  auto bytes = good();
  // Every header byte, a spread of payload bytes, every checksum byte.
  std::vector<size_t> where;
  for (size_t i = 0; i < bytes.size(); ++i)
    if (i < 32 || i % 11 == 0 || i + 8 >= bytes.size())
      where.push_back(i);
  for (size_t i : where) {
    auto bad = bytes;
    bad[i] ^= 0x01;
    std::string err = readError(bad);
    ASSERT_NE(err, "") << "flipped byte " << i << " went unnoticed";
    if (i >= 24) {
      EXPECT_TRUE(contains(err, "checksum mismatch")) << i << ": " << err;
    }
  }
}

TEST_F(RuntimeCheckpoint, BoundsAbsurdLengthsByTheFileSize) {
  // The payload length itself: huge, yet no allocation is attempted.
  auto bytes = good();
  auto bad = bytes;
  putLE(bad, 16, UINT64_MAX - 3, 8);
  EXPECT_TRUE(contains(readError(bad), "truncated"));

  // Fields inside the payload, with a valid checksum over the edit.
  const size_t rngLen = 24 + 32, autotuneLen = 64 + state_.rng.size();
  const size_t count = autotuneLen + 8 + state_.autotune.size();
  const size_t name0 = count + 8, rank0 = name0 + 4 + std::strlen("fc.weight") + 1;
  const size_t dim0 = rank0 + 1, bytes0 = dim0 + 16;
  struct Edit {
    size_t offset;
    uint64_t value;
    int width;
    const char* expect;
  };
  const Edit edits[] = {
      {rngLen, uint64_t(1) << 62, 8, "RNG state"},
      {rngLen, UINT64_MAX, 8, "RNG state"},
      {autotuneLen, uint64_t(1) << 62, 8, "autotune record"},
      {count, uint64_t(1) << 60, 8, "tensor count"},
      {count, 6, 8, "tensor #5"},
      {name0, 0xffffffffu, 4, "name of 4294967295 bytes"},
      {rank0 - 1, 99, 1, "unknown element type code 99"},
      {rank0, 255, 1, "tensor #0 'fc.weight'"},
      {dim0, uint64_t(1) << 62, 8, "invalid shape"},
      {dim0, uint64_t(-2), 8, "invalid shape"},
      {bytes0, uint64_t(1) << 40, 8, "data bytes"},
  };
  for (const Edit& e : edits) {
    auto edited = bytes;
    putLE(edited, e.offset, e.value, e.width);
    reseal(edited);
    std::string err = readError(edited);
    EXPECT_TRUE(contains(err, "corrupt")) << e.expect << ": " << err;
    EXPECT_TRUE(contains(err, e.expect)) << e.expect << ": " << err;
  }
}

TEST_F(RuntimeCheckpoint, ReplacesTheOldFileOnlyWhenComplete) {
  const std::string target = path("ckpt-1.lwckpt");
  ASSERT_EQ(lwrt::writeCheckpoint(target, state_, tensors()), "");
  const auto before = readBytes(target);
  CheckpointState next = state_;
  next.step = 9999;
  Checkpoint c;

  // A `.tmp` that cannot be created (a folder is in its way).
  fs::create_directory(target + ".tmp");
  std::string err = lwrt::writeCheckpoint(target, next, tensors());
  EXPECT_TRUE(contains(err, target)) << err;
  EXPECT_EQ(readBytes(target), before);
  fs::remove(target + ".tmp");

  // A write that fails midway: the file size limit stops it at 4 KiB.
  std::vector<float> big(64 * 1024, 1.0f);
  std::vector<NamedTensor> large = tensors();
  large.push_back({"big", {big.data(), DType::F32, {64, 1024}}});
  struct rlimit old;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  struct rlimit small = old;
  small.rlim_cur = 4096;
  auto oldHandler = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  err = lwrt::writeCheckpoint(target, next, large);
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, oldHandler);
  EXPECT_TRUE(contains(err, "writing")) << err;
  EXPECT_EQ(readBytes(target), before);
  EXPECT_FALSE(fs::exists(target + ".tmp"));

  // A folder that does not exist.
  err = lwrt::writeCheckpoint(path("no/such/dir/ckpt.lwckpt"), next, tensors());
  EXPECT_TRUE(contains(err, "no/such/dir/ckpt.lwckpt")) << err;

  // A read-only folder, where permissions apply (not to root).
  if (::geteuid() != 0) {
    fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec);
    err = lwrt::writeCheckpoint(target, next, tensors());
    fs::permissions(dir_, fs::perms::owner_all);
    EXPECT_TRUE(contains(err, "cannot create")) << err;
  }

  // Invalid input writes nothing.
  auto dup = tensors();
  dup[1].name = dup[0].name;
  EXPECT_TRUE(contains(lwrt::writeCheckpoint(target, next, dup), "appears twice"));

  ASSERT_EQ(readBytes(target), before);
  ASSERT_EQ(lwrt::readCheckpoint(target, c), "");
  EXPECT_EQ(c.state.step, 1234);

  // A successful write replaces it.
  ASSERT_EQ(lwrt::writeCheckpoint(target, next, tensors()), "");
  ASSERT_EQ(lwrt::readCheckpoint(target, c), "");
  EXPECT_EQ(c.state.step, 9999);
  EXPECT_FALSE(fs::exists(target + ".tmp"));
}

TEST_F(RuntimeCheckpoint, FindsTheLatestAndKeepsTheLastK) {
  EXPECT_EQ(lwrt::checkpointFileName(120), "ckpt-120.lwckpt");
  EXPECT_EQ(lwrt::latestCheckpoint(path("absent")), "");
  EXPECT_TRUE(lwrt::listCheckpoints(path("absent")).empty());
  EXPECT_EQ(lwrt::latestCheckpoint(dir_.string()), "");

  for (int64_t step : {5, 100, 20, 7}) {
    state_.step = step;
    ASSERT_EQ(lwrt::writeCheckpoint(path(lwrt::checkpointFileName(step)), state_, {}), "");
  }
  for (const char* junk : {"ckpt-abc.lwckpt", "ckpt-900.lwckpt.tmp", "ckpt-.lwckpt", "other.txt",
                           "ckpt-12.lwckpt.bak"})
    writeBytes(path(junk), {1, 2, 3});
  fs::create_directory(path("ckpt-500.lwckpt"));

  auto all = lwrt::listCheckpoints(dir_.string());
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].first, 5);
  EXPECT_EQ(all[1].first, 7);
  EXPECT_EQ(all[2].first, 20);
  EXPECT_EQ(all[3].first, 100);
  EXPECT_EQ(all[3].second, path("ckpt-100.lwckpt"));
  EXPECT_EQ(lwrt::latestCheckpoint(dir_.string()), path("ckpt-100.lwckpt"));

  EXPECT_EQ(lwrt::keepLastCheckpoints(dir_.string(), 0), "");
  EXPECT_EQ(lwrt::listCheckpoints(dir_.string()).size(), 4u);
  EXPECT_EQ(lwrt::keepLastCheckpoints(dir_.string(), 2), "");
  all = lwrt::listCheckpoints(dir_.string());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].first, 20);
  EXPECT_EQ(all[1].first, 100);
  EXPECT_TRUE(fs::exists(path("ckpt-900.lwckpt.tmp")));
  EXPECT_TRUE(fs::exists(path("other.txt")));
  EXPECT_TRUE(fs::exists(path("ckpt-500.lwckpt")));
  EXPECT_EQ(lwrt::keepLastCheckpoints(dir_.string(), 5), "");
  EXPECT_EQ(lwrt::listCheckpoints(dir_.string()).size(), 2u);

  Checkpoint c;
  ASSERT_EQ(lwrt::readCheckpoint(lwrt::latestCheckpoint(dir_.string()), c), "");
  EXPECT_EQ(c.state.step, 100);
}

} // namespace
