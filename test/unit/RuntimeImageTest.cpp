// The image loaders' transforms and files: RandomResizedCrop's draws, the
// evaluation's center crop, resampling (identity, flip, channels, averages),
// normalization, the messages for files that are not images, and CIFAR-10's
// files and their errors. (Decoding every JPEG and PNG kind against Pillow,
// training on image folders and the fuzz are in test/e2e/image_data.py.)
#include "lwrt/image.h"
#include "lwrt/image_data.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using lwrt::Augment;
using lwrt::CropBox;
using lwrt::Pixels;

TEST(RuntimeImage, RandomResizedCropStaysInTheImageWithTheRatiosAsked) {
  int flips = 0, fallbacks = 0;
  double meanArea = 0;
  const int draws = 4000;
  for (int s = 0; s < draws; ++s) {
    CropBox b = lwrt::sampleCrop(Augment::Standard, 400, 300, 224, 224, 1000 + s);
    ASSERT_GE(b.x0, 0);
    ASSERT_GE(b.y0, 0);
    ASSERT_LE(b.x0 + b.width, 400);
    ASSERT_LE(b.y0 + b.height, 300);
    ASSERT_EQ(b.x0, std::floor(b.x0)); // whole pixels, as torchvision's crop
    ASSERT_EQ(b.width, std::floor(b.width));
    double area = b.width * b.height / (400.0 * 300.0), ratio = b.width / b.height;
    // Rounding to whole pixels moves area and ratio a little.
    EXPECT_GE(area, 0.08 * 0.97);
    EXPECT_LE(area, 1.0);
    EXPECT_GE(ratio, 0.75 * 0.98);
    EXPECT_LE(ratio, 4.0 / 3.0 * 1.02);
    meanArea += area / draws;
    flips += b.flip;
    fallbacks += b.width == 400 && b.height == 300;
    CropBox again = lwrt::sampleCrop(Augment::Standard, 400, 300, 224, 224, 1000 + s);
    EXPECT_EQ(again.x0, b.x0);
    EXPECT_EQ(again.flip, b.flip);
  }
  // Area uniform in [0.08, 1] where the crop fits: torchvision's get_params
  // averages 0.435 of a 400x300 image (4000 draws).
  EXPECT_NEAR(meanArea, 0.435, 0.02);
  EXPECT_NEAR(flips, draws / 2, draws / 20);
  EXPECT_LT(fallbacks, draws / 20);
  // An image too narrow for any try: the center crop of the ratio clamped.
  CropBox thin = lwrt::sampleCrop(Augment::Standard, 10, 400, 8, 8, 3);
  EXPECT_EQ(thin.width, 10);
  EXPECT_EQ(thin.height, 13); // round(10 / (3/4))
  EXPECT_EQ(thin.y0, (400 - 13) / 2);
}

TEST(RuntimeImage, EvaluationCropIsResizeToSizeOver0875ThenCenterCrop) {
  // 400x300 for 224: shorter side to 256 (341x256), crop 224 at (58, 16).
  CropBox b = lwrt::sampleCrop(Augment::CenterCrop, 400, 300, 224, 224, 0);
  const double s = 300.0 / 256.0;
  EXPECT_NEAR(b.x0, 58 * 400.0 / 341.0, 1e-9);
  EXPECT_NEAR(b.y0, 16 * s, 1e-9);
  EXPECT_NEAR(b.width, 224 * 400.0 / 341.0, 1e-9);
  EXPECT_NEAR(b.height, 224 * s, 1e-9);
  EXPECT_FALSE(b.flip);
  // Resizing and flips: the whole image; flip only with Flip.
  CropBox whole = lwrt::sampleCrop(Augment::None, 40, 30, 8, 8, 5);
  EXPECT_EQ(whole.width, 40);
  EXPECT_FALSE(whole.flip);
  int flips = 0;
  for (int k = 0; k < 200; ++k)
    flips += lwrt::sampleCrop(Augment::Flip, 40, 30, 8, 8, k).flip;
  EXPECT_GT(flips, 60);
  EXPECT_LT(flips, 140);
}

Pixels image(int64_t w, int64_t h, int channels, unsigned (*value)(int64_t, int64_t, int)) {
  Pixels p;
  p.channels = channels;
  p.width = p.imageWidth = w;
  p.height = p.imageHeight = h;
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int c = 0; c < channels; ++c)
        p.data.push_back(static_cast<unsigned char>(value(x, y, c)));
  return p;
}

TEST(RuntimeImage, ResampleAtTheSameSizeCopiesFlipsAndNormalizes) {
  Pixels p = image(5, 4, 3, [](int64_t x, int64_t y, int c) {
    return static_cast<unsigned>(10 * x + 50 * y + 3 * c);
  });
  lwrt::Normalize unit = lwrt::Normalize::of({0.0f}, {1.0f});
  std::vector<float> out(3 * 4 * 5);
  for (bool flip : {false, true}) {
    lwrt::resampleInto(p, {0, 0, 5, 4, flip}, 4, 5, 3, unit, out.data());
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 4; ++y)
        for (int x = 0; x < 5; ++x) {
          int sx = flip ? 4 - x : x;
          EXPECT_FLOAT_EQ(out[(c * 4 + y) * 5 + x] * 255.0f, 10 * sx + 50 * y + 3 * c);
        }
  }
  // Per channel (x / 255 - mean) / std; a gray image fills all three.
  Pixels gray = image(2, 2, 1, [](int64_t x, int64_t y, int) { return unsigned(100 * x + y); });
  lwrt::Normalize n = lwrt::Normalize::of({0.5f, 0.25f, 0.0f}, {0.5f, 0.25f, 2.0f});
  std::vector<float> g(3 * 4);
  lwrt::resampleInto(gray, {0, 0, 2, 2, false}, 2, 2, 3, n, g.data());
  const float v = 101.0f / 255.0f; // pixel (1, 1)
  EXPECT_NEAR(g[3], (v - 0.5f) / 0.5f, 1e-6);
  EXPECT_NEAR(g[4 + 3], (v - 0.25f) / 0.25f, 1e-6);
  EXPECT_NEAR(g[8 + 3], v / 2.0f, 1e-6);
}

TEST(RuntimeImage, DownscalingAveragesAndKeepsLinearRamps) {
  // Halving: PIL's triangle filter of support 2 weighs pixels 2x-1..2x+2 as
  // 1, 3, 3, 1 (the borders clamp); a constant stays itself.
  Pixels ramp = image(16, 2, 1, [](int64_t x, int64_t, int) { return unsigned(8 * x); });
  lwrt::Normalize unit = lwrt::Normalize::of({0.0f}, {1.0f});
  std::vector<float> out(8);
  lwrt::resampleInto(ramp, {0, 0, 16, 2, false}, 1, 8, 1, unit, out.data());
  for (int x = 1; x < 7; ++x) // interior: the mean of 2x and 2x + 1
    EXPECT_NEAR(out[x] * 255.0f, 8 * (2 * x + 0.5), 1e-3) << x;
  EXPECT_NEAR(out[0] * 255.0f, (3 * 0 + 3 * 8 + 1 * 16) / 7.0, 1e-3);
  Pixels flat = image(37, 23, 3, [](int64_t, int64_t, int c) { return unsigned(40 + c); });
  std::vector<float> small(3 * 5 * 7);
  lwrt::resampleInto(flat, {3.5, 2.25, 30, 19, false}, 5, 7, 3, unit, small.data());
  for (size_t k = 0; k < small.size(); ++k)
    EXPECT_NEAR(small[k] * 255.0f, 40 + static_cast<float>(k / 35), 1e-3);
}

TEST(RuntimeImage, FilesThatAreNotImagesSayWhatTheyAre) {
  std::string error;
  lwrt::ImageHeader h;
  EXPECT_FALSE(lwrt::readImageHeader(nullptr, 0, h, &error));
  EXPECT_NE(error.find("empty file"), std::string::npos) << error;
  const std::string gif = "GIF89a....", text = "hello, world";
  EXPECT_FALSE(lwrt::readImageHeader(reinterpret_cast<const unsigned char*>(gif.data()), gif.size(),
                                     h, &error));
  EXPECT_NE(error.find("a GIF image"), std::string::npos) << error;
  EXPECT_FALSE(lwrt::readImageHeader(reinterpret_cast<const unsigned char*>(text.data()),
                                     text.size(), h, &error));
  EXPECT_NE(error.find("starts with bytes 68 65 6c 6c"), std::string::npos) << error;
  // A JPEG header that ends early; a PNG whose IHDR lies about its size.
  const unsigned char jpeg[] = {0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, 'J', 'F'};
  EXPECT_FALSE(lwrt::readImageHeader(jpeg, sizeof jpeg, h, &error));
  EXPECT_EQ(error.rfind("JPEG: ", 0), 0u) << error;
  std::vector<float> out(3 * 8 * 8);
  lwrt::TransformSpec spec;
  spec.outH = spec.outW = 8;
  EXPECT_FALSE(lwrt::transformEncoded(jpeg, sizeof jpeg, spec, 0, out.data(), &error));
  std::vector<unsigned char> bytes;
  EXPECT_FALSE(lwrt::readFileBytes("/nonexistent/x.png", bytes, &error));
  EXPECT_NE(error.find("No such file"), std::string::npos) << error;
  EXPECT_FALSE(lwrt::readFileBytes("/", bytes, &error));
  EXPECT_NE(error.find("a folder"), std::string::npos) << error;
}

class RuntimeCifar : public ::testing::Test {
protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "lwrt-cifar-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  /// `records` records; pixel (r, c, p) = (7 r + 3 c + p) % 256, label r % 10.
  void write(const std::string& name, int records, int first = 0) {
    std::ofstream f(dir + "/" + name, std::ios::binary);
    for (int r = first; r < first + records; ++r) {
      f.put(static_cast<char>(r % 10));
      for (int c = 0; c < 3; ++c)
        for (int p = 0; p < 1024; ++p)
          f.put(static_cast<char>((7 * r + 3 * c + p) % 256));
    }
  }
  std::string dir;
};

TEST_F(RuntimeCifar, ReadsTheRecordsBack) {
  for (int k = 1; k <= 5; ++k)
    write("data_batch_" + std::to_string(k) + ".bin", 4, 4 * (k - 1));
  write("test_batch.bin", 6, 100);
  lwrt::ImageDataOptions o;
  o.augment = Augment::None;
  o.mean = {0.0f};
  o.std = {1.0f};
  o.shuffle = false;
  std::string error;
  auto train = lwrt::Cifar10Data::open(dir, true, {4, 3, 32, 32}, o, &error);
  ASSERT_TRUE(train) << error;
  EXPECT_EQ(train->numExamples(), 20);
  std::vector<float> img(3 * 32 * 32);
  for (int64_t r = 0; r < 20; ++r) {
    int64_t label = -1;
    ASSERT_TRUE(train->example(r, img.data(), &label, &error));
    EXPECT_EQ(label, r % 10);
    for (int c = 0; c < 3; ++c)
      for (int p = 0; p < 1024; p += 37)
        ASSERT_NEAR(img[static_cast<size_t>(c * 1024 + p)] * 255.0f,
                    static_cast<float>((7 * r + 3 * c + p) % 256), 1e-3);
  }
  auto test = lwrt::Cifar10Data::open(dir, false, {2, 3, 32, 32}, o, &error);
  ASSERT_TRUE(test) << error;
  EXPECT_EQ(test->numExamples(), 6);
  EXPECT_EQ(test->label(0), 0); // record 100
  // The model's size: 64x64 doubles every pixel (the bilinear filter
  // interpolates between them).
  auto big = lwrt::Cifar10Data::open(dir, false, {1, 3, 64, 64}, o, &error);
  ASSERT_TRUE(big) << error;
  std::vector<float> up(3 * 64 * 64);
  int64_t label;
  ASSERT_TRUE(big->example(0, up.data(), &label, &error));
  EXPECT_NEAR(up[0] * 255.0f, (7 * 100) % 256, 1e-3); // the corner keeps its pixel
}

TEST_F(RuntimeCifar, BadFilesAreNamed) {
  lwrt::ImageDataOptions o;
  std::string error;
  EXPECT_FALSE(lwrt::Cifar10Data::open(dir, false, {1, 3, 32, 32}, o, &error));
  EXPECT_NE(error.find("test_batch.bin"), std::string::npos) << error;
  write("test_batch.bin", 3);
  { std::ofstream(dir + "/test_batch.bin", std::ios::app).put('x'); }
  EXPECT_FALSE(lwrt::Cifar10Data::open(dir, false, {1, 3, 32, 32}, o, &error));
  EXPECT_NE(error.find("9220 bytes, not a whole number of 3073-byte records"), std::string::npos)
      << error;
  write("test_batch.bin", 3);
  {
    std::fstream f(dir + "/test_batch.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(3073);
    f.put(static_cast<char>(12));
  }
  EXPECT_FALSE(lwrt::Cifar10Data::open(dir, false, {1, 3, 32, 32}, o, &error));
  EXPECT_NE(error.find("record 1 has label 12"), std::string::npos) << error;
  write("test_batch.bin", 3);
  EXPECT_FALSE(lwrt::Cifar10Data::open(dir, false, {4, 3, 32, 32}, o, &error));
  EXPECT_NE(error.find("fewer than the batch size 4"), std::string::npos) << error;
  o.mean = {0.1f, 0.2f};
  EXPECT_FALSE(lwrt::Cifar10Data::open(dir, false, {1, 3, 32, 32}, o, &error));
  EXPECT_NE(error.find("--mean has 2 values"), std::string::npos) << error;
}

} // namespace
