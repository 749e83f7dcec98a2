// The trainer's data loaders: IDX decoding (plain and gzipped), normalization,
// bilinear resize, channel replication, batching, per-epoch shuffling,
// seek/resume, synthetic data, and every error on bad arguments or files.
#include "lwrt/data.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include <zlib.h>

namespace {

namespace fs = std::filesystem;
using lwrt::DataSource;
using lwrt::IdxData;
using lwrt::IdxOptions;
using lwrt::SyntheticData;

/// A fresh temporary folder, removed with the fixture.
class RuntimeData : public ::testing::Test {
protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "lwrt-data-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }

  /// An IDX file's bytes: big-endian magic and dims, then `body`.
  static std::string idxBytes(uint32_t magic, const std::vector<uint32_t>& dims,
                              const std::vector<uint8_t>& body) {
    std::string s;
    auto put = [&](uint32_t v) {
      for (int k = 3; k >= 0; --k)
        s.push_back(static_cast<char>((v >> (8 * k)) & 0xFF));
    };
    put(magic);
    for (uint32_t d : dims)
      put(d);
    s.append(body.begin(), body.end());
    return s;
  }

  void writeFile(const std::string& name, const std::string& bytes, bool gz = false) {
    std::string path = dir + "/" + name + (gz ? ".gz" : "");
    if (gz) {
      gzFile f = gzopen(path.c_str(), "wb");
      ASSERT_NE(f, nullptr);
      if (!bytes.empty()) {
        ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
                  static_cast<int>(bytes.size()));
      }
      ASSERT_EQ(gzclose(f), Z_OK);
    } else {
      std::ofstream out(path, std::ios::binary);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      ASSERT_TRUE(out.good());
    }
  }

  /// `count` images of rows x cols whose pixel (i, y, x) is pixel(i, y, x),
  /// and labels label(i), as `split` files.
  template <class Pixel, class Label>
  void writeSet(const std::string& split, uint32_t count, uint32_t rows, uint32_t cols, Pixel pixel,
                Label label, bool gz = false) {
    std::vector<uint8_t> images, labels;
    for (uint32_t i = 0; i < count; ++i) {
      for (uint32_t y = 0; y < rows; ++y)
        for (uint32_t x = 0; x < cols; ++x)
          images.push_back(static_cast<uint8_t>(pixel(i, y, x)));
      labels.push_back(static_cast<uint8_t>(label(i)));
    }
    writeFile(split + "-images-idx3-ubyte", idxBytes(0x803, {count, rows, cols}, images), gz);
    writeFile(split + "-labels-idx1-ubyte", idxBytes(0x801, {count}, labels), gz);
  }

  /// The default set: 10 images of 2x3, pixel 20 * i + 3 * y + x, label i.
  void writeDefault(bool gz = false) {
    writeSet(
        "train", 10, 2, 3, [](uint32_t i, uint32_t y, uint32_t x) { return 20 * i + 3 * y + x; },
        [](uint32_t i) { return i; }, gz);
  }

  std::unique_ptr<IdxData> open(const std::vector<int64_t>& shape, IdxOptions o = {},
                                const std::string& split = "train") {
    std::string error;
    auto d = IdxData::open(dir, split, shape, o, &error);
    EXPECT_TRUE(d) << error;
    return d;
  }

  /// The error of opening `split` with `shape`; "" when it opened.
  std::string openError(const std::vector<int64_t>& shape, IdxOptions o = {},
                        const std::string& split = "train") {
    std::string error;
    auto d = IdxData::open(dir, split, shape, o, &error);
    if (d)
      return "";
    EXPECT_FALSE(error.empty());
    return error;
  }

  std::string dir;
};

struct Batch {
  std::vector<float> images;
  std::vector<int64_t> labels;
  bool operator==(const Batch&) const = default;
};

Batch draw(DataSource& d) {
  Batch b{std::vector<float>(static_cast<size_t>(d.batchSize() * d.imageSize()), -99.0f),
          std::vector<int64_t>(static_cast<size_t>(d.batchSize()), -1)};
  d.next(b.images.data(), b.labels.data());
  return b;
}

float norm(int byte, float mean = 0.2860f, float std = 0.3530f) {
  return (static_cast<float>(byte) / 255.0f - mean) / std;
}

#define EXPECT_MESSAGE(text, part1, part2)                                                         \
  do {                                                                                             \
    std::string message_ = (text);                                                                 \
    EXPECT_NE(message_.find(part1), std::string::npos) << message_;                                \
    EXPECT_NE(message_.find(part2), std::string::npos) << message_;                                \
  } while (0)

// --- decoding -------------------------------------------------------------------

TEST_F(RuntimeData, DecodesAndNormalizesPlainFiles) {
  writeDefault();
  IdxOptions o;
  o.shuffle = false;
  auto d = open({2, 1, 2, 3}, o);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->numExamples(), 10);
  EXPECT_EQ(d->batchesPerEpoch(), 5);
  EXPECT_EQ(d->fileRows(), 2);
  EXPECT_EQ(d->fileCols(), 3);
  for (int b = 0; b < 5; ++b) {
    Batch batch = draw(*d);
    for (int k = 0; k < 2; ++k) {
      int i = 2 * b + k;
      EXPECT_EQ(batch.labels[k], i);
      for (int y = 0; y < 2; ++y)
        for (int x = 0; x < 3; ++x)
          EXPECT_EQ(batch.images[k * 6 + y * 3 + x], norm(20 * i + 3 * y + x)) << i;
    }
  }
}

TEST_F(RuntimeData, MeanAndStdOptions) {
  writeDefault();
  IdxOptions o;
  o.shuffle = false;
  o.mean = 0.0f;
  o.std = 1.0f;
  auto d = open({1, 1, 2, 3}, o);
  ASSERT_TRUE(d);
  draw(*d);
  Batch b = draw(*d); // example 1: bytes 20..25
  EXPECT_FLOAT_EQ(b.images[0], 20.0f / 255.0f);
  EXPECT_FLOAT_EQ(b.images[5], 25.0f / 255.0f);
  o.mean = 0.5f;
  o.std = 0.25f;
  d = open({1, 1, 2, 3}, o);
  ASSERT_TRUE(d);
  b = draw(*d);
  EXPECT_FLOAT_EQ(b.images[0], -2.0f);                         // byte 0
  EXPECT_FLOAT_EQ(b.images[4], (4.0f / 255.0f - 0.5f) * 4.0f); // byte 4
}

TEST_F(RuntimeData, GzippedFilesMatchPlainOnes) {
  writeDefault(/*gz=*/false);
  IdxOptions o;
  o.shuffle = false;
  auto plain = open({5, 1, 2, 3}, o);
  ASSERT_TRUE(plain);
  fs::remove(dir + "/train-images-idx3-ubyte");
  fs::remove(dir + "/train-labels-idx1-ubyte");
  writeDefault(/*gz=*/true);
  auto gz = open({5, 1, 2, 3}, o);
  ASSERT_TRUE(gz);
  EXPECT_EQ(draw(*plain), draw(*gz));
  EXPECT_EQ(draw(*plain), draw(*gz));
}

TEST_F(RuntimeData, MaxExamplesTakesTheFirstOnes) {
  writeDefault();
  IdxOptions o;
  o.maxExamples = 7;
  auto d = open({2, 1, 2, 3}, o);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->numExamples(), 7);
  EXPECT_EQ(d->batchesPerEpoch(), 3);
  std::set<int64_t> seen;
  for (int b = 0; b < 3; ++b)
    for (int64_t l : draw(*d).labels)
      seen.insert(l);
  EXPECT_EQ(seen.size(), 6u);
  for (int64_t l : seen)
    EXPECT_LT(l, 7);
  o.maxExamples = 100; // more than there are: all of them
  d = open({2, 1, 2, 3}, o);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->numExamples(), 10);
}

// --- resize and channels --------------------------------------------------------

TEST_F(RuntimeData, BilinearUpscaleMatchesHandValues) {
  // [[0, 255], [51, 102]] -> [[0, 1], [0.2, 0.4]] with mean 0, std 1.
  const int px[2][2] = {{0, 255}, {51, 102}};
  writeSet(
      "train", 1, 2, 2, [&](uint32_t, uint32_t y, uint32_t x) { return px[y][x]; },
      [](uint32_t) { return 3; });
  IdxOptions o;
  o.mean = 0.0f;
  o.std = 1.0f;
  auto d = open({1, 1, 4, 4}, o);
  ASSERT_TRUE(d);
  Batch b = draw(*d);
  // 2 -> 4, align_corners=false: source coords 0 (clamped), 0.25, 0.75, 1.25 (-> pixel 1).
  auto at = [&](int y, int x) { return b.images[y * 4 + x]; };
  EXPECT_NEAR(at(0, 0), 0.0f, 1e-6);
  EXPECT_NEAR(at(0, 1), 0.25f, 1e-6);
  EXPECT_NEAR(at(0, 3), 1.0f, 1e-6);
  EXPECT_NEAR(at(3, 0), 0.2f, 1e-6);
  EXPECT_NEAR(at(3, 3), 0.4f, 1e-6);
  EXPECT_NEAR(at(1, 1), 0.25f, 1e-6); // .75 * (.75*0 + .25*1) + .25 * (.75*.2 + .25*.4)
  EXPECT_NEAR(at(2, 2), 0.45f, 1e-6); // .25 * (.25*0 + .75*1) + .75 * (.25*.2 + .75*.4)
  EXPECT_NEAR(at(2, 0), 0.15f, 1e-6); // .25 * 0 + .75 * .2
  EXPECT_EQ(b.labels[0], 3);
}

TEST_F(RuntimeData, BilinearDownscaleAveragesBlocks) {
  // 4x4 -> 2x2: source coords 0.5 and 2.5, the mean of each 2x2 block.
  writeSet(
      "train", 1, 4, 4, [](uint32_t, uint32_t y, uint32_t x) { return 10 * (4 * y + x); },
      [](uint32_t) { return 0; });
  IdxOptions o;
  o.mean = 0.0f;
  o.std = 1.0f / 255.0f; // values in bytes
  auto d = open({1, 1, 2, 2}, o);
  ASSERT_TRUE(d);
  Batch b = draw(*d);
  EXPECT_NEAR(b.images[0], 25.0f, 1e-4);  // (0 + 10 + 40 + 50) / 4
  EXPECT_NEAR(b.images[1], 45.0f, 1e-4);  // (20 + 30 + 60 + 70) / 4
  EXPECT_NEAR(b.images[2], 105.0f, 1e-4); // (80 + 90 + 120 + 130) / 4
  EXPECT_NEAR(b.images[3], 125.0f, 1e-4);
}

TEST_F(RuntimeData, Bilinear28To32) {
  auto pixel = [](uint32_t, uint32_t y, uint32_t x) { return (7 * y + 3 * x + y * x) % 256; };
  writeSet("train", 1, 28, 28, pixel, [](uint32_t) { return 0; });
  IdxOptions o;
  o.mean = 0.0f;
  o.std = 1.0f / 255.0f;
  auto d = open({1, 1, 32, 32}, o);
  ASSERT_TRUE(d);
  Batch b = draw(*d);
  auto p = [&](int y, int x) { return static_cast<double>(pixel(0, y, x)); };
  // Output 15: source 0.875 * 15.5 - 0.5 = 13.0625; output 31: 27.0625 -> pixel 27 only.
  double l = 0.0625;
  double top = (1 - l) * p(13, 13) + l * p(13, 14), bottom = (1 - l) * p(14, 13) + l * p(14, 14);
  EXPECT_NEAR(b.images[15 * 32 + 15], (1 - l) * top + l * bottom, 1e-3);
  EXPECT_NEAR(b.images[31 * 32 + 31], p(27, 27), 1e-3);
  EXPECT_NEAR(b.images[0], p(0, 0), 1e-3);
  // Output 4: source 0.875 * 4.5 - 0.5 = 3.4375 (rows); output 0 (cols): 0.
  l = 0.4375;
  EXPECT_NEAR(b.images[4 * 32 + 0], (1 - l) * p(3, 0) + l * p(4, 0), 1e-3);
}

TEST_F(RuntimeData, ReplicatesTheChannelForThree) {
  writeDefault();
  IdxOptions o;
  o.shuffle = false;
  auto gray = open({2, 1, 4, 6}, o);
  auto rgb = open({2, 3, 4, 6}, o);
  ASSERT_TRUE(gray && rgb);
  EXPECT_EQ(rgb->imageSize(), 72);
  for (int round = 0; round < 3; ++round) {
    Batch g = draw(*gray), c = draw(*rgb);
    EXPECT_EQ(g.labels, c.labels);
    for (int k = 0; k < 2; ++k)
      for (int ch = 0; ch < 3; ++ch)
        for (int j = 0; j < 24; ++j)
          ASSERT_EQ(c.images[k * 72 + ch * 24 + j], g.images[k * 24 + j]);
  }
}

// --- batching, shuffling, seek ---------------------------------------------------

TEST_F(RuntimeData, BatchesAndEpochsInFileOrder) {
  writeDefault();
  IdxOptions o;
  o.shuffle = false;
  auto d = open({3, 1, 2, 3}, o);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->batchesPerEpoch(), 3); // example 9 is dropped
  for (uint64_t epoch = 0; epoch < 3; ++epoch)
    for (uint64_t batch = 0; batch < 3; ++batch) {
      EXPECT_EQ(d->position(), (DataSource::Position{epoch, batch}));
      Batch b = draw(*d);
      int64_t first = static_cast<int64_t>(3 * batch);
      EXPECT_EQ(b.labels, (std::vector<int64_t>{first, first + 1, first + 2}));
    }
  EXPECT_EQ(d->position(), (DataSource::Position{3, 0}));
}

TEST_F(RuntimeData, ShuffledOrderIsASeededPermutation) {
  auto a = lwrt::shuffledOrder(1000, 7, 0);
  std::set<int64_t> all(a.begin(), a.end());
  EXPECT_EQ(all.size(), 1000u);
  EXPECT_EQ(*all.begin(), 0);
  EXPECT_EQ(*all.rbegin(), 999);
  EXPECT_EQ(a, lwrt::shuffledOrder(1000, 7, 0));
  EXPECT_NE(a, lwrt::shuffledOrder(1000, 7, 1));
  EXPECT_NE(a, lwrt::shuffledOrder(1000, 8, 0));
  std::vector<int64_t> identity(1000);
  for (int k = 0; k < 1000; ++k)
    identity[k] = k;
  EXPECT_NE(a, identity);
  EXPECT_TRUE(lwrt::shuffledOrder(0, 1, 2).empty());
  EXPECT_EQ(lwrt::shuffledOrder(1, 1, 2), std::vector<int64_t>{0});
}

TEST_F(RuntimeData, ShufflesEachEpochDeterministically) {
  writeSet(
      "train", 64, 2, 2, [](uint32_t i, uint32_t, uint32_t x) { return i + x; },
      [](uint32_t i) { return i; });
  IdxOptions o;
  o.seed = 42;
  auto a = open({8, 1, 2, 2}, o), b = open({8, 1, 2, 2}, o);
  o.seed = 43;
  auto c = open({8, 1, 2, 2}, o);
  ASSERT_TRUE(a && b && c);
  std::vector<int64_t> epoch0, epoch1, other;
  for (int k = 0; k < 8; ++k) {
    Batch x = draw(*a);
    EXPECT_EQ(x, draw(*b));
    for (int j = 0; j < 8; ++j)
      EXPECT_FLOAT_EQ(x.images[j * 4 + 1], norm(static_cast<int>(x.labels[j]) + 1));
    epoch0.insert(epoch0.end(), x.labels.begin(), x.labels.end());
    Batch y = draw(*c);
    other.insert(other.end(), y.labels.begin(), y.labels.end());
  }
  for (int k = 0; k < 8; ++k) {
    Batch x = draw(*a);
    epoch1.insert(epoch1.end(), x.labels.begin(), x.labels.end());
  }
  EXPECT_EQ(std::set<int64_t>(epoch0.begin(), epoch0.end()).size(), 64u);
  EXPECT_EQ(std::set<int64_t>(epoch1.begin(), epoch1.end()).size(), 64u);
  EXPECT_NE(epoch0, epoch1);
  EXPECT_NE(epoch0, other);
  EXPECT_EQ(epoch0, lwrt::shuffledOrder(64, 42, 0));
  EXPECT_EQ(epoch1, lwrt::shuffledOrder(64, 42, 1));
}

TEST_F(RuntimeData, SeekResumesTheSameBatches) {
  writeSet(
      "train", 23, 3, 3, [](uint32_t i, uint32_t y, uint32_t x) { return 11 * i + y * 3 + x; },
      [](uint32_t i) { return i % 10; }, /*gz=*/true);
  IdxOptions o;
  o.seed = 5;
  auto d = open({4, 3, 5, 5}, o);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->batchesPerEpoch(), 5);
  // Draw into the second epoch, remember a mid-run position, go on.
  for (int k = 0; k < 3; ++k)
    draw(*d);
  DataSource::Position saved = d->position();
  EXPECT_EQ(saved, (DataSource::Position{0, 3}));
  std::vector<Batch> first;
  for (int k = 0; k < 9; ++k)
    first.push_back(draw(*d));
  EXPECT_EQ(d->position(), (DataSource::Position{2, 2}));
  // Seek back: the same batches again.
  ASSERT_TRUE(d->seek(saved));
  for (int k = 0; k < 9; ++k)
    EXPECT_EQ(draw(*d), first[k]) << k;
  // A fresh loader resumed there (a restarted run): the same batches too.
  auto resumed = open({4, 3, 5, 5}, o);
  ASSERT_TRUE(resumed);
  ASSERT_TRUE(resumed->seek({1, 1}));
  for (int k = 3; k < 9; ++k)
    EXPECT_EQ(draw(*resumed), first[k]) << k;
  // Out of range.
  std::string error;
  EXPECT_FALSE(d->seek({0, 5}, &error));
  EXPECT_MESSAGE(error, "batch 5", "5 batches");
}

/// The bilinear resize written per output pixel (PyTorch's
/// upsample_bilinear2d, align_corners=false): the loader's separable
/// resize must give the same floats, bit for bit.
std::vector<float> resizedByPixel(const std::vector<uint8_t>& src, int64_t rows, int64_t cols,
                                  int64_t h, int64_t w, float mean, float std) {
  struct Tap {
    int64_t i0, i1;
    float l0, l1;
  };
  auto taps = [](int64_t in, int64_t out) {
    std::vector<Tap> t;
    float scale = static_cast<float>(in) / static_cast<float>(out);
    for (int64_t d = 0; d < out; ++d) {
      float s = std::max(scale * (static_cast<float>(d) + 0.5f) - 0.5f, 0.0f);
      int64_t i0 = std::min<int64_t>(static_cast<int64_t>(s), in - 1);
      int64_t i1 = i0 < in - 1 ? i0 + 1 : i0;
      float l1 = std::min(std::max(s - static_cast<float>(i0), 0.0f), 1.0f);
      t.push_back({i0, i1, 1.0f - l1, l1});
    }
    return t;
  };
  auto ty = taps(rows, h), tx = taps(cols, w);
  auto n = [&](int64_t y, int64_t x) { return (src[y * cols + x] / 255.0f - mean) / std; };
  std::vector<float> out;
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      const Tap &a = ty[y], &b = tx[x];
      float top = b.l0 * n(a.i0, b.i0) + b.l1 * n(a.i0, b.i1);
      float bottom = b.l0 * n(a.i1, b.i0) + b.l1 * n(a.i1, b.i1);
      out.push_back(a.l0 * top + a.l1 * bottom);
    }
  return out;
}

TEST_F(RuntimeData, SeparableResizeEqualsThePerPixelFormula) {
  auto pixel = [](uint32_t i, uint32_t y, uint32_t x) {
    return (13 * i + 7 * y + 3 * x + y * x) % 256;
  };
  writeSet("train", 2, 28, 28, pixel, [](uint32_t) { return 1; });
  std::vector<uint8_t> first;
  for (uint32_t y = 0; y < 28; ++y)
    for (uint32_t x = 0; x < 28; ++x)
      first.push_back(static_cast<uint8_t>(pixel(0, y, x)));
  IdxOptions o;
  o.shuffle = false;
  for (auto [h, w] : {std::pair<int64_t, int64_t>{224, 224}, {32, 20}, {9, 5}}) {
    auto d = open({1, 3, h, w}, o);
    ASSERT_TRUE(d);
    Batch b = draw(*d);
    std::vector<float> want = resizedByPixel(first, 28, 28, h, w, o.mean, o.std);
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t k = 0; k < h * w; ++k)
        ASSERT_EQ(b.images[static_cast<size_t>(c * h * w + k)], want[static_cast<size_t>(k)])
            << h << "x" << w << " channel " << c << " pixel " << k;
  }
}

TEST_F(RuntimeData, BatchAtAPositionFromManyThreads) {
  writeSet(
      "train", 37, 6, 6, [](uint32_t i, uint32_t y, uint32_t x) { return 5 * i + y * 6 + x; },
      [](uint32_t i) { return i % 10; });
  IdxOptions o;
  o.seed = 3;
  auto d = open({4, 3, 12, 12}, o);
  ASSERT_TRUE(d);
  const int64_t perEpoch = d->batchesPerEpoch(), steps = 4 * perEpoch;
  std::vector<Batch> sequential;
  for (int64_t s = 0; s < steps; ++s)
    sequential.push_back(draw(*d));
  // Four threads draw the same positions at once, in interleaved orders and
  // across epoch boundaries (the epochs' orders are drawn concurrently).
  std::vector<Batch> parallel(static_cast<size_t>(steps),
                              Batch{std::vector<float>(4 * 432), std::vector<int64_t>(4)});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int64_t s = (steps - 1 - t); s >= 0; s -= 4) {
        DataSource::Position p{static_cast<uint64_t>(s / perEpoch),
                               static_cast<uint64_t>(s % perEpoch)};
        d->batch(p, parallel[s].images.data(), parallel[s].labels.data());
      }
    });
  for (std::thread& t : threads)
    t.join();
  for (int64_t s = 0; s < steps; ++s)
    EXPECT_EQ(parallel[s], sequential[s]) << "step " << s;
  EXPECT_EQ(d->position(), (DataSource::Position{4, 0})); // batch() does not move it
}

// --- synthetic data --------------------------------------------------------------

TEST(RuntimeSyntheticData, DeterministicAndSeekable) {
  std::string error;
  auto a = SyntheticData::create({4, 2, 3, 3}, 10, 9, 20, &error);
  ASSERT_TRUE(a) << error;
  auto b = SyntheticData::create({4, 2, 3, 3}, 10, 9, 20);
  auto c = SyntheticData::create({4, 2, 3, 3}, 10, 10, 20);
  ASSERT_TRUE(b && c);
  EXPECT_EQ(a->numExamples(), 20);
  EXPECT_EQ(a->batchesPerEpoch(), 5);
  std::vector<Batch> run;
  for (int k = 0; k < 12; ++k) {
    run.push_back(draw(*a));
    EXPECT_EQ(run.back(), draw(*b));
  }
  EXPECT_NE(run[0], draw(*c));
  // Example values depend only on (seed, index): epoch 1 reorders epoch 0's examples.
  std::multiset<float> e0, e1;
  for (int k = 0; k < 5; ++k) {
    e0.insert(run[k].images.begin(), run[k].images.end());
    e1.insert(run[5 + k].images.begin(), run[5 + k].images.end());
  }
  EXPECT_EQ(e0, e1);
  EXPECT_NE(run[0], run[5]);
  ASSERT_TRUE(b->seek({1, 2}));
  for (int k = 7; k < 12; ++k)
    EXPECT_EQ(draw(*b), run[k]);
  // Normal-ish values and labels in range.
  auto big = SyntheticData::create({64, 1, 16, 16}, 7, 3, 64);
  ASSERT_TRUE(big);
  Batch x = draw(*big);
  double sum = 0, sq = 0;
  for (float v : x.images) {
    ASSERT_TRUE(std::isfinite(v));
    sum += v;
    sq += double(v) * v;
  }
  double n = static_cast<double>(x.images.size()), mean = sum / n;
  EXPECT_NEAR(mean, 0.0, 0.05);
  EXPECT_NEAR(std::sqrt(sq / n - mean * mean), 1.0, 0.05);
  std::set<int64_t> classes;
  for (int64_t l : x.labels) {
    EXPECT_GE(l, 0);
    EXPECT_LT(l, 7);
    classes.insert(l);
  }
  EXPECT_EQ(classes.size(), 7u);
}

TEST(RuntimeSyntheticData, Errors) {
  std::string error;
  EXPECT_FALSE(SyntheticData::create({4, 1, 3}, 10, 0, 8, &error));
  EXPECT_MESSAGE(error, "[4, 1, 3]", "not [N, C, H, W]");
  EXPECT_FALSE(SyntheticData::create({4, 0, 3, 3}, 10, 0, 8, &error));
  EXPECT_MESSAGE(error, "[4, 0, 3, 3]", "not positive");
  EXPECT_FALSE(SyntheticData::create({4, 1, 3, 3}, 0, 0, 8, &error));
  EXPECT_MESSAGE(error, "class count 0", "synthetic");
  EXPECT_FALSE(SyntheticData::create({4, 1, 3, 3}, 10, 0, 3, &error));
  EXPECT_MESSAGE(error, "3 examples", "batch size 4");
  EXPECT_FALSE(SyntheticData::create({4, 1, 3, 3}, 10, 0, 3)); // no error out-param
}

// --- errors ---------------------------------------------------------------------

TEST_F(RuntimeData, MissingFiles) {
  std::string e = openError({1, 1, 2, 3});
  EXPECT_MESSAGE(e, dir + "/train-images-idx3-ubyte.gz", "No such file");
  writeDefault();
  fs::remove(dir + "/train-labels-idx1-ubyte");
  e = openError({1, 1, 2, 3});
  EXPECT_MESSAGE(e, dir + "/train-labels-idx1-ubyte", "No such file");
  fs::create_directory(dir + "/train-labels-idx1-ubyte");
  e = openError({1, 1, 2, 3});
  EXPECT_MESSAGE(e, dir + "/train-labels-idx1-ubyte:", "not a regular file");
  e = openError({1, 1, 2, 3}, {}, "t10k");
  EXPECT_MESSAGE(e, "t10k-images-idx3-ubyte", "No such file");
  std::string error;
  EXPECT_FALSE(IdxData::open(dir + "/nowhere", "train", {1, 1, 2, 3}, {}, &error));
  EXPECT_MESSAGE(error, dir + "/nowhere/train-images", "No such file");
}

TEST_F(RuntimeData, BadArguments) {
  writeDefault();
  EXPECT_MESSAGE(openError({1, 1, 2, 3}, {}, "test"), "split 'test'", "train nor t10k");
  EXPECT_MESSAGE(openError({1, 2, 2, 3}), "C = 2", "1 channel");
  EXPECT_MESSAGE(openError({1, 4, 2, 3}), "C = 4", "1 channel");
  EXPECT_MESSAGE(openError({1, 2, 3}), "[1, 2, 3]", "not [N, C, H, W]");
  EXPECT_MESSAGE(openError({0, 1, 2, 3}), "[0, 1, 2, 3]", "not positive");
  EXPECT_MESSAGE(openError({1, 1, -2, 3}), "[1, 1, -2, 3]", "not positive");
  EXPECT_MESSAGE(openError({11, 1, 2, 3}), "10 examples", "batch size 11");
  IdxOptions o;
  o.maxExamples = 3;
  EXPECT_MESSAGE(openError({4, 1, 2, 3}, o), "3 examples (maxExamples)", "batch size 4");
  o = {};
  o.std = 0.0f;
  EXPECT_MESSAGE(openError({1, 1, 2, 3}, o), "std", "positive");
  o = {};
  o.maxExamples = -1;
  EXPECT_MESSAGE(openError({1, 1, 2, 3}, o), "maxExamples", "negative");
}

TEST_F(RuntimeData, BadMagicNumbers) {
  std::vector<uint8_t> six(6, 1), one(1, 0);
  writeFile("train-images-idx3-ubyte", idxBytes(0x801, {1, 2, 3}, six));
  writeFile("train-labels-idx1-ubyte", idxBytes(0x801, {1}, one));
  std::string e = openError({1, 1, 2, 3});
  EXPECT_MESSAGE(e, dir + "/train-images-idx3-ubyte:", "bad magic number 0x00000801");
  EXPECT_MESSAGE(e, "expected 0x00000803", "images");
  writeFile("train-images-idx3-ubyte", idxBytes(0x803, {1, 2, 3}, six));
  writeFile("train-labels-idx1-ubyte", idxBytes(0x803, {1}, one), /*gz=*/true);
  fs::remove(dir + "/train-labels-idx1-ubyte");
  e = openError({1, 1, 2, 3});
  EXPECT_MESSAGE(e, dir + "/train-labels-idx1-ubyte.gz:", "bad magic number 0x00000803");
  EXPECT_MESSAGE(e, "expected 0x00000801", "labels");
  // A float IDX file (type 0x0d) is not an image file either.
  writeFile("train-images-idx3-ubyte", idxBytes(0xd03, {1, 2, 3}, six));
  EXPECT_MESSAGE(openError({1, 1, 2, 3}), "train-images-idx3-ubyte:", "bad magic number");
}

TEST_F(RuntimeData, TruncatedAndOversizedFiles) {
  std::vector<uint8_t> pixels(12, 7), labels(2, 1);
  std::string images = idxBytes(0x803, {2, 2, 3}, pixels);
  writeFile("train-labels-idx1-ubyte", idxBytes(0x801, {2}, labels));
  // Short body, plain and gzipped.
  writeFile("train-images-idx3-ubyte", images.substr(0, images.size() - 1));
  EXPECT_MESSAGE(openError({1, 1, 2, 3}), dir + "/train-images-idx3-ubyte:", "truncated");
  writeFile("train-images-idx3-ubyte", images.substr(0, images.size() - 5), /*gz=*/true);
  fs::remove(dir + "/train-images-idx3-ubyte");
  EXPECT_MESSAGE(openError({1, 1, 2, 3}), dir + "/train-images-idx3-ubyte.gz:", "truncated");
  // Short header.
  writeFile("train-images-idx3-ubyte", images.substr(0, 2));
  EXPECT_MESSAGE(openError({1, 1, 2, 3}), dir + "/train-images-idx3-ubyte:", "truncated");
  writeFile("train-images-idx3-ubyte", images.substr(0, 9));
  EXPECT_MESSAGE(openError({1, 1, 2, 3}), "header alone", "truncated");
  writeFile("train-images-idx3-ubyte", "");
  EXPECT_MESSAGE(openError({1, 1, 2, 3}), dir + "/train-images-idx3-ubyte:", "truncated");
  // Trailing bytes.
  writeFile("train-images-idx3-ubyte", images + "xy");
  EXPECT_MESSAGE(openError({1, 1, 2, 3}), dir + "/train-images-idx3-ubyte:", "trailing bytes");
  fs::remove(dir + "/train-images-idx3-ubyte");
  writeFile("train-images-idx3-ubyte", images + "z", /*gz=*/true);
  EXPECT_MESSAGE(openError({1, 1, 2, 3}), dir + "/train-images-idx3-ubyte.gz:", "trailing bytes");
  // A header claiming billions of images in a tiny file: an error, no huge allocation.
  writeFile("train-images-idx3-ubyte", idxBytes(0x803, {0xFFFFFFFFu, 28, 28}, pixels),
            /*gz=*/true);
  EXPECT_MESSAGE(openError({1, 1, 2, 3}), "train-images-idx3-ubyte.gz:", "implausibly large");
  writeFile("train-images-idx3-ubyte", idxBytes(0x803, {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, {}),
            /*gz=*/true);
  EXPECT_MESSAGE(openError({1, 1, 2, 3}), "train-images-idx3-ubyte.gz:", "implausibly large");
  writeFile("train-images-idx3-ubyte", idxBytes(0x803, {1000000, 28, 28}, pixels), /*gz=*/true);
  EXPECT_MESSAGE(openError({1, 1, 2, 3}), "train-images-idx3-ubyte.gz:", "truncated");
  writeFile("train-images-idx3-ubyte", idxBytes(0x803, {1000000, 28, 28}, pixels));
  EXPECT_MESSAGE(openError({1, 1, 2, 3}), "train-images-idx3-ubyte:", "(truncated)");
  // Zero-sized images.
  writeFile("train-images-idx3-ubyte", idxBytes(0x803, {2, 0, 3}, {}));
  EXPECT_MESSAGE(openError({1, 1, 2, 3}), "train-images-idx3-ubyte:", "0x3 pixels");
}

TEST_F(RuntimeData, CorruptGzipStream) {
  std::vector<uint8_t> pixels(600), labels(50, 1);
  for (size_t k = 0; k < pixels.size(); ++k)
    pixels[k] = static_cast<uint8_t>(k * 37);
  writeFile("train-images-idx3-ubyte", idxBytes(0x803, {50, 3, 4}, pixels), /*gz=*/true);
  writeFile("train-labels-idx1-ubyte", idxBytes(0x801, {50}, labels));
  ASSERT_TRUE(open({1, 1, 3, 4}));
  // Flip bytes in the middle of the deflate data.
  std::string path = dir + "/train-images-idx3-ubyte.gz";
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(bytes.size(), 40u);
  for (size_t k = 15; k < 30; ++k)
    bytes[k] = static_cast<char>(bytes[k] ^ 0x5A);
  writeFile("train-images-idx3-ubyte.gz", bytes);
  EXPECT_MESSAGE(openError({1, 1, 3, 4}), path + ": ", "corrupt gzip data");
  // Cut in the middle of the deflate data.
  writeFile("train-images-idx3-ubyte", idxBytes(0x803, {50, 3, 4}, pixels), /*gz=*/true);
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  writeFile("train-images-idx3-ubyte.gz", bytes.substr(0, bytes.size() / 2));
  EXPECT_MESSAGE(openError({1, 1, 3, 4}), path + ": truncated", "gzip stream ends early");
}

TEST_F(RuntimeData, CountMismatch) {
  writeFile("train-images-idx3-ubyte", idxBytes(0x803, {3, 1, 2}, std::vector<uint8_t>(6)));
  writeFile("train-labels-idx1-ubyte", idxBytes(0x801, {4}, std::vector<uint8_t>(4)));
  std::string e = openError({1, 1, 1, 2});
  EXPECT_MESSAGE(e, dir + "/train-labels-idx1-ubyte: 4 labels", "has 3 images");
}

TEST_F(RuntimeData, LabelsBeyondTheClassCount) {
  writeDefault(); // labels 0..9
  IdxOptions o;
  o.classes = 10;
  EXPECT_TRUE(open({1, 1, 2, 3}, o));
  o.classes = 9;
  std::string e = openError({1, 1, 2, 3}, o);
  EXPECT_MESSAGE(e, dir + "/train-labels-idx1-ubyte: label 9 of example 9",
                 "not below the class count 9");
}

// --- the real data set -------------------------------------------------------------

TEST(RuntimeFashionMnist, ReadsTheInstalledDataSet) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(dir + "/train-labels-idx1-ubyte.gz"))
    GTEST_SKIP() << dir << " is absent (tools/setup.sh installs dataset-fashion-mnist)";
  IdxOptions o;
  o.shuffle = false;
  o.classes = 10;
  std::string error;
  auto test = IdxData::open(dir, "t10k", {100, 1, 28, 28}, o, &error);
  ASSERT_TRUE(test) << error;
  EXPECT_EQ(test->numExamples(), 10000);
  EXPECT_EQ(test->batchesPerEpoch(), 100);
  Batch b = draw(*test);
  const std::vector<int64_t> t10kFirst = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7,
                                          4, 5, 7, 3, 4, 1, 2, 4, 8, 0};
  EXPECT_EQ(std::vector<int64_t>(b.labels.begin(), b.labels.begin() + 20), t10kFirst);
  // Row 14 of t10k image 0, bytes 12..14: 98, 136, 110.
  EXPECT_EQ(b.images[14 * 28 + 12], norm(98));
  EXPECT_EQ(b.images[14 * 28 + 14], norm(110));
  EXPECT_EQ(test->label(9999), 5);

  auto train = IdxData::open(dir, "train", {32, 1, 28, 28}, o, &error);
  ASSERT_TRUE(train) << error;
  EXPECT_EQ(train->numExamples(), 60000);
  EXPECT_EQ(train->batchesPerEpoch(), 1875);
  const std::vector<int64_t> trainFirst = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5,
                                           0, 9, 5, 5, 7, 9, 1, 0, 6, 4};
  b = draw(*train);
  EXPECT_EQ(std::vector<int64_t>(b.labels.begin(), b.labels.begin() + 20), trainFirst);
  EXPECT_EQ(b.images[14 * 28 + 12], norm(237));
  EXPECT_EQ(b.images[14 * 28 + 25], norm(255));
  EXPECT_EQ(train->label(59995), 5);
  EXPECT_EQ(train->label(59999), 5);
  EXPECT_EQ(train->label(59996), 1);
}

} // namespace
