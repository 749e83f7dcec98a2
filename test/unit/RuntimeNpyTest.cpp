// --data=npy:DIR's loader: rows of every model input from memory-mapped .npy
// files, the epoch's shuffled order, a process's rows alone, the dtype
// conversions it allows, the file names it tries, and its errors.
#include "lwrt/npy.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using lwrt::DType;
using lwrt::InputInfo;
using lwrt::NpyInputOptions;
using lwrt::NpyInputs;

class RuntimeNpy : public ::testing::Test {
protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "lwrt-npy-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }

  /// Writes a version 1.0 .npy file of `descr` and `shape` holding `bytes`
  /// (cut to `keep` bytes of data when keep >= 0).
  std::string save(const std::string& name, const std::string& descr,
                   const std::vector<int64_t>& shape, const void* bytes, size_t size,
                   long keep = -1) {
    std::string s = "(";
    for (int64_t d : shape)
      s += std::to_string(d) + ", ";
    s += ")";
    std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + s + ", }";
    while ((10 + header.size() + 1) % 64 != 0)
      header += ' ';
    header += '\n';
    std::string path = dir + "/" + name;
    std::ofstream out(path, std::ios::binary);
    out.write("\x93NUMPY\x01\x00", 8);
    const uint16_t length = static_cast<uint16_t>(header.size());
    out.write(reinterpret_cast<const char*>(&length), 2);
    out << header;
    out.write(static_cast<const char*>(bytes), keep >= 0 ? keep : static_cast<long>(size));
    return path;
  }
  template <typename T>
  std::string save(const std::string& name, const std::string& descr,
                   const std::vector<int64_t>& shape, const std::vector<T>& values,
                   long keep = -1) {
    return save(name, descr, shape, values.data(), values.size() * sizeof(T), keep);
  }

  std::string dir;
};

/// A regression's inputs: features x [4, 3] float32 at offset 0, targets
/// [4, 2] float32 (the label input) after them.
std::vector<InputInfo> regression() {
  return {{"x", DType::F32, {4, 3}, false, 0}, {"target", DType::F32, {4, 2}, true, 64}};
}

std::vector<float> iota(size_t n, float from) {
  std::vector<float> v(n);
  for (size_t k = 0; k < n; ++k)
    v[k] = from + static_cast<float>(k);
  return v;
}

TEST_F(RuntimeNpy, RowsOfEveryInputInTheEpochsOrder) {
  save("x_train.npy", "<f4", {10, 3}, iota(30, 0));
  save("y_train.npy", "<f4", {10, 2}, iota(20, 100));
  NpyInputOptions o;
  o.seed = 9;
  std::string error;
  auto data = NpyInputs::open(dir, "train", regression(), o, &error);
  ASSERT_TRUE(data) << error;
  EXPECT_EQ(data->numExamples(), 10);
  EXPECT_EQ(data->batchesPerEpoch(), 2);
  EXPECT_EQ(data->files(), (std::vector<std::string>{dir + "/x_train.npy", dir + "/y_train.npy"}));
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    const std::vector<int64_t> order = lwrt::shuffledOrder(10, 9, epoch);
    for (uint64_t b = 0; b < 2; ++b) {
      std::vector<unsigned char> buffer(96, 0xEE);
      ASSERT_TRUE(data->batch({epoch, b}, buffer.data(), &error)) << error;
      for (int64_t k = 0; k < 4; ++k) {
        const int64_t example = order[static_cast<size_t>(b * 4 + k)];
        float x[3], y[2];
        std::memcpy(x, buffer.data() + 12 * k, 12);
        std::memcpy(y, buffer.data() + 64 + 8 * k, 8);
        EXPECT_EQ(x[0], static_cast<float>(3 * example));
        EXPECT_EQ(x[2], static_cast<float>(3 * example + 2));
        EXPECT_EQ(y[1], static_cast<float>(100 + 2 * example + 1));
      }
    }
  }
  // A process's rows alone: the others are left as they were.
  std::vector<unsigned char> whole(96), part(96, 0xEE);
  ASSERT_TRUE(data->batch({1, 1}, whole.data(), &error));
  ASSERT_TRUE(data->batch({1, 1}, part.data(), &error, {1, 3}));
  EXPECT_EQ(std::memcmp(part.data() + 12, whole.data() + 12, 24), 0);
  EXPECT_EQ(part[0], 0xEE);
  EXPECT_EQ(part[36], 0xEE);
  EXPECT_EQ(std::memcmp(part.data() + 64 + 8, whole.data() + 64 + 8, 16), 0);
  EXPECT_EQ(part[64], 0xEE);
  // Evaluation: file order, wrapping past the last example.
  std::vector<unsigned char> eval(96);
  ASSERT_TRUE(data->examples(8, eval.data(), &error));
  float first, last;
  std::memcpy(&first, eval.data(), 4);
  std::memcpy(&last, eval.data() + 36, 4);
  EXPECT_EQ(first, 24.0f); // example 8
  EXPECT_EQ(last, 3.0f);   // example 11 wraps to 1
  EXPECT_FALSE(data->batch({0, 2}, whole.data(), &error));
}

TEST_F(RuntimeNpy, ConversionsAndRowShapes) {
  // uint8 pixels (E, H, W) for a float32 [N, 1, H, W] input, int32 labels
  // for an int64 input.
  std::vector<unsigned char> pixels(5 * 2 * 2);
  for (size_t k = 0; k < pixels.size(); ++k)
    pixels[k] = static_cast<unsigned char>(k * 12);
  save("x_train.npy", "|u1", {5, 2, 2}, pixels);
  save("y_train.npy", "<i4", {5}, std::vector<int32_t>{3, 1, 4, 1, 5});
  std::vector<InputInfo> image = {{"image", DType::F32, {2, 1, 2, 2}, false, 0},
                                  {"label", DType::I64, {2}, true, 32}};
  NpyInputOptions o;
  o.shuffle = false;
  o.classes = 6;
  std::string error;
  auto data = NpyInputs::open(dir, "train", image, o, &error);
  ASSERT_TRUE(data) << error;
  std::vector<unsigned char> buffer(48);
  ASSERT_TRUE(data->batch({0, 1}, buffer.data(), &error));
  float p;
  std::memcpy(&p, buffer.data() + 4, 4);
  EXPECT_EQ(p, static_cast<float>(pixels[9]) / 255.0f);
  int64_t label;
  std::memcpy(&label, buffer.data() + 40, 8);
  EXPECT_EQ(label, 1);
  // Labels out of range name the file and the example.
  o.classes = 5;
  EXPECT_FALSE(NpyInputs::open(dir, "train", image, o, &error));
  EXPECT_NE(error.find(dir + "/y_train.npy: label 5 of example 4"), std::string::npos) << error;
  // A flat row (E, 4) for the image and a (E, 1) column for the labels.
  save("x_train.npy", "|u1", {5, 4}, pixels);
  save("y_train.npy", "<i8", {5, 1}, std::vector<int64_t>{0, 1, 2, 3, 4});
  EXPECT_TRUE(NpyInputs::open(dir, "train", image, o, &error)) << error;
  // int64 values for an int32 input must fit.
  image[1].dtype = DType::I32;
  o.classes = 0;
  save("y_train.npy", "<i8", {5}, std::vector<int64_t>{0, 1, int64_t(1) << 40, 3, 4});
  EXPECT_FALSE(NpyInputs::open(dir, "train", image, o, &error));
  EXPECT_NE(error.find("does not fit the model's int32 input 'label'"), std::string::npos) << error;
}

TEST_F(RuntimeNpy, FileNames) {
  const std::vector<InputInfo> two = regression();
  EXPECT_EQ(lwrt::npyInputFiles(dir, "train", two, 1),
            (std::vector<std::string>{dir + "/y_train.npy", dir + "/target_train.npy",
                                      dir + "/y.npy", dir + "/target.npy"}));
  EXPECT_EQ(lwrt::npyInputFiles(dir, "test", two, 0),
            (std::vector<std::string>{dir + "/x_test.npy"}));
  // Three inputs: by name alone, odd characters as '_'.
  std::vector<InputInfo> three = two;
  three.insert(three.begin(), {"mask:0/a", DType::Bool, {4, 3}, false, 128});
  EXPECT_EQ(lwrt::npyInputFiles(dir, "test", three, 0),
            (std::vector<std::string>{dir + "/mask_0_a_test.npy"}));
  // Named files take the place of x/y.
  save("x_train.npy", "<f4", {4, 3}, iota(12, 0));
  save("target.npy", "<f4", {4, 2}, iota(8, 0));
  std::string error;
  auto data = NpyInputs::open(dir, "train", two, {}, &error);
  ASSERT_TRUE(data) << error;
  EXPECT_EQ(data->files()[1], dir + "/target.npy");
}

TEST_F(RuntimeNpy, Errors) {
  std::string error;
  auto fails = [&](const std::string& words) {
    error.clear();
    EXPECT_FALSE(NpyInputs::open(dir, "train", regression(), {}, &error));
    EXPECT_NE(error.find(words), std::string::npos) << "want '" << words << "': " << error;
  };
  save("x_train.npy", "<f4", {6, 3}, iota(18, 0));
  fails(dir + "/y_train.npy: cannot open");
  save("y_train.npy", "<f8", {6, 2}, std::vector<double>(12));
  fails(dir + "/y_train.npy: dtype '<f8' for the model's float32 input 'target'");
  save("y_train.npy", ">f4", {6, 2}, iota(12, 0));
  fails(dir + "/y_train.npy: dtype '>f4'");
  save("y_train.npy", "<f4", {6, 3}, iota(18, 0));
  fails(dir + "/y_train.npy: shape (6, 3), but the model's input 'target' (4, 2)");
  save("y_train.npy", "<f4", {5, 2}, iota(10, 0));
  fails(dir + "/y_train.npy: 5 examples, but " + dir + "/x_train.npy holds 6");
  save("y_train.npy", "<f4", {6, 2}, iota(12, 0), 40);
  fails(dir + "/y_train.npy: holds 40 bytes of data");
  save("y_train.npy", "<f4", {3, 2}, iota(6, 0));
  save("x_train.npy", "<f4", {3, 3}, iota(9, 0));
  fails("3 examples, fewer than the batch size 4");
  std::ofstream(dir + "/x_train.npy") << "short";
  fails(dir + "/x_train.npy: not a .npy file");
  // An input without the batch dimension.
  save("x_train.npy", "<f4", {6, 3}, iota(18, 0));
  save("y_train.npy", "<f4", {6, 2}, iota(12, 0));
  std::vector<InputInfo> scalar = regression();
  scalar[1].shape = {};
  EXPECT_FALSE(NpyInputs::open(dir, "train", scalar, {}, &error));
  EXPECT_NE(error.find("input 'target' is ()"), std::string::npos) << error;
}

} // namespace
