// --data=tokens:PATH's loader: llm.c's token shards (the header, its
// errors), the shards a glob names, which model inputs take the tokens,
// the windows of a batch and their shuffle, a process's rows, and the npy
// loader's int64 token arrays beside it.
#include "lwrt/npy.h"
#include "lwrt/tokens.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <optional>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using lwrt::DType;
using lwrt::InputInfo;
using lwrt::TokenDataOptions;
using lwrt::TokenShard;
using lwrt::TokenWindows;

class RuntimeTokens : public ::testing::Test {
protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "lwrt-tokens-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }

  struct Header {
    int32_t magic = lwrt::kTokenShardMagic, version = 1;
    std::optional<int32_t> count; ///< default: the tokens'
    long keep = -1;               ///< bytes of tokens written (-1: all)
    int extra = 0;                ///< bytes after the tokens
  };

  /// Writes a shard of `tokens` (uint16 for version 1, uint32 otherwise).
  std::string shard(const std::string& name, const std::vector<uint32_t>& tokens, Header h) {
    std::vector<int32_t> header(256, 0);
    header[0] = h.magic;
    header[1] = h.version;
    header[2] = h.count ? *h.count : static_cast<int32_t>(tokens.size());
    std::string bytes(reinterpret_cast<const char*>(header.data()), 1024);
    for (uint32_t t : tokens) {
      if (h.version == 1) {
        const uint16_t v = static_cast<uint16_t>(t);
        bytes.append(reinterpret_cast<const char*>(&v), 2);
      } else {
        bytes.append(reinterpret_cast<const char*>(&t), 4);
      }
    }
    if (h.keep >= 0)
      bytes.resize(1024 + static_cast<size_t>(h.keep));
    bytes.append(static_cast<size_t>(h.extra), '\0');
    const std::string path = dir + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  std::string shard(const std::string& name, const std::vector<uint32_t>& tokens) {
    return shard(name, tokens, Header{});
  }

  std::string dir;
};

/// Tokens from..from+n-1 mapped to distinct values below 1000.
std::vector<uint32_t> stream(uint32_t from, uint32_t n) {
  std::vector<uint32_t> v(n);
  for (uint32_t k = 0; k < n; ++k)
    v[k] = (from + k) * 7 % 1000;
  return v;
}

/// A causal LM as lwcc builds it: input_ids int64 [B, T] at offset 0 and
/// softmax cross-entropy's label input int64 [B * T] after it.
std::vector<InputInfo> causalLm(int64_t b, int64_t t) {
  return {{"input_ids", DType::I64, {b, t}, false, 0},
          {"label", DType::I64, {b * t}, true, 8 * b * t}};
}

int64_t valueAt(const std::vector<unsigned char>& buffer, int64_t offset, DType t, int64_t k) {
  if (t == DType::I32) {
    int32_t v;
    std::memcpy(&v, buffer.data() + offset + 4 * k, 4);
    return v;
  }
  int64_t v;
  std::memcpy(&v, buffer.data() + offset + 8 * k, 8);
  return v;
}

TEST_F(RuntimeTokens, ShardHeaders) {
  TokenShard s;
  std::string error;
  ASSERT_TRUE(lwrt::readTokenShard(shard("a.bin", {1, 65535, 7}), s, &error)) << error;
  EXPECT_EQ(s.version, 1);
  EXPECT_EQ(s.count, 3);
  EXPECT_EQ(s.at(1), 65535u);
  EXPECT_EQ(s.largest(), 65535u);
  EXPECT_EQ(s.firstAtLeast(8), 1);
  EXPECT_EQ(s.firstAtLeast(65536), -1);
  Header v2;
  v2.version = 2;
  ASSERT_TRUE(lwrt::readTokenShard(shard("b.bin", {70000, 3}, v2), s, &error)) << error;
  EXPECT_EQ(s.version, 2);
  EXPECT_EQ(s.at(0), 70000u);
  // An empty shard is a shard.
  ASSERT_TRUE(lwrt::readTokenShard(shard("c.bin", {}), s, &error)) << error;
  EXPECT_EQ(s.count, 0);
}

TEST_F(RuntimeTokens, MalformedShards) {
  TokenShard s;
  std::string error;
  auto fails = [&](const std::string& path, const std::string& words) {
    error.clear();
    EXPECT_FALSE(lwrt::readTokenShard(path, s, &error));
    EXPECT_NE(error.find(path + ": "), std::string::npos) << error;
    EXPECT_NE(error.find(words), std::string::npos) << "want '" << words << "': " << error;
  };
  fails(dir + "/missing.bin", "cannot open");
  fails(dir, "not a regular file");
  std::ofstream(dir + "/short.bin") << "tiny";
  fails(dir + "/short.bin", "4 bytes, shorter than a token shard's 1024-byte header");
  Header h;
  h.magic = 20240521;
  fails(shard("magic.bin", {1, 2}, h), "magic 20240521 at offset 0, not 20240520");
  h = {};
  h.version = 3;
  fails(shard("version.bin", {1, 2}, h), "version 3 at offset 4");
  h = {};
  h.count = -2;
  fails(shard("negative.bin", {}, h), "token count -2 at offset 8 is negative");
  h = {};
  h.count = 10;
  fails(shard("count.bin", {1, 2, 3}, h),
        "truncated: the header says 10 tokens (offset 8), 1044 bytes with the header, but the "
        "file ends at offset 1030, inside token 3");
  h = {};
  h.keep = 5;
  fails(shard("cut.bin", {1, 2, 3}, h), "file ends at offset 1029, inside token 2");
  h = {};
  h.extra = 2; // uint32 tokens under version 1 would read as twice the count
  fails(shard("long.bin", {1, 2, 3}, h), "2 bytes after its 3 tokens, from offset 1030");
}

TEST_F(RuntimeTokens, ShardPatterns) {
  shard("tiny_train_000002.bin", stream(0, 10));
  shard("tiny_train_000001.bin", stream(0, 10));
  shard("tiny_val_000000.bin", stream(0, 10));
  std::vector<std::string> paths;
  std::string error;
  ASSERT_TRUE(lwrt::tokenShardPaths(dir + "/tiny_train_*.bin", paths, &error)) << error;
  EXPECT_EQ(paths, (std::vector<std::string>{dir + "/tiny_train_000001.bin",
                                             dir + "/tiny_train_000002.bin"}));
  ASSERT_TRUE(lwrt::tokenShardPaths(dir + "/tiny_val_000000.bin", paths, &error));
  EXPECT_EQ(paths, std::vector<std::string>{dir + "/tiny_val_000000.bin"});
  EXPECT_FALSE(lwrt::tokenShardPaths(dir + "/other_*.bin", paths, &error));
  EXPECT_EQ(error, dir + "/other_*.bin: no file matches");
  EXPECT_EQ(lwrt::validationPattern("/data/tiny_train_*.bin"), "/data/tiny_val_*.bin");
  EXPECT_EQ(lwrt::validationPattern("/train/shakespeare_train.bin"), "/train/shakespeare_val.bin");
  EXPECT_EQ(lwrt::validationPattern("/train/tokens.bin"), "");
}

TEST_F(RuntimeTokens, ModelLayouts) {
  std::string why;
  // lwcc's softmax cross-entropy: labels [B * T].
  auto lm = causalLm(2, 4);
  auto l = lwrt::tokenLayout(lm, why);
  ASSERT_TRUE(l) << why;
  EXPECT_EQ(l->ids, &lm[0]);
  EXPECT_EQ(l->labels, &lm[1]);
  EXPECT_EQ(l->batch, 2);
  EXPECT_EQ(l->length, 4);
  // A loss in the graph: labels as a second data input, found by name.
  std::vector<InputInfo> two = {{"targets", DType::I64, {2, 4}, false, 0},
                                {"tokens", DType::I32, {2, 4}, false, 64}};
  l = lwrt::tokenLayout(two, why);
  ASSERT_TRUE(l) << why;
  EXPECT_EQ(l->ids, &two[1]);
  EXPECT_EQ(l->labels, &two[0]);
  two[0].name = "a";
  two[1].name = "b"; // no name says which: the second
  l = lwrt::tokenLayout(two, why);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->labels, &two[1]);
  // One input alone: no labels.
  std::vector<InputInfo> one = {lm[0]};
  l = lwrt::tokenLayout(one, why);
  ASSERT_TRUE(l) << why;
  EXPECT_EQ(l->labels, nullptr);
  // What token data cannot feed.
  auto refused = [&](std::vector<InputInfo> inputs, const std::string& words) {
    why.clear();
    EXPECT_FALSE(lwrt::tokenLayout(inputs, why));
    EXPECT_NE(why.find(words), std::string::npos) << "want '" << words << "': " << why;
  };
  std::vector<InputInfo> image = {{"x", DType::F32, {2, 1, 4, 4}, false, 0}, lm[1]};
  refused(image, "the token input 'x' float32[2, 1, 4, 4] is not an integer [B, T]");
  std::vector<InputInfo> classes = lm;
  classes[1].shape = {2};
  refused(classes, "the labels 'label' int64[2] are not integers [B, T] or [B * T]");
  refused({lm[0], lm[0], lm[1]}, "the model has 3 inputs");
  refused({lm[1]}, "the model has no token input");
}

TEST_F(RuntimeTokens, WindowsOfEveryShard) {
  // T = 4: windows of 5 tokens every 4; 11 tokens hold 2 ((11 - 1) / 4),
  // 3 tokens none, 13 tokens 3. Window w of a shard: tokens 4w .. 4w + 4.
  const auto a = stream(0, 11), c = stream(100, 13);
  shard("s_train_0.bin", a);
  shard("s_train_1.bin", stream(50, 3));
  Header v2;
  v2.version = 2;
  shard("s_train_2.bin", c, v2);
  std::string error;
  TokenDataOptions o;
  o.shuffle = false;
  auto data = TokenWindows::open(dir + "/s_train_*.bin", causalLm(2, 4), o, &error);
  ASSERT_TRUE(data) << error;
  EXPECT_EQ(data->numExamples(), 5);
  EXPECT_EQ(data->batchesPerEpoch(), 2);
  EXPECT_EQ(data->totalTokens(), 27);
  EXPECT_EQ(data->windowTokens(), 5);
  EXPECT_EQ(data->window(1), (std::pair<size_t, int64_t>{0, 4}));
  EXPECT_EQ(data->window(2), (std::pair<size_t, int64_t>{2, 0}));
  EXPECT_EQ(data->window(4), (std::pair<size_t, int64_t>{2, 8}));
  const std::vector<std::pair<const std::vector<uint32_t>*, int64_t>> windows = {
      {&a, 0}, {&a, 4}, {&c, 0}, {&c, 4}, {&c, 8}};
  // File order (an evaluation), wrapping past the last window.
  for (int64_t first : {0, 2, 4}) {
    std::vector<unsigned char> buffer(128, 0xEE);
    ASSERT_TRUE(data->examples(first, buffer.data(), &error));
    for (int64_t row = 0; row < 2; ++row) {
      const auto [tokens, start] = windows[static_cast<size_t>((first + row) % 5)];
      for (int64_t j = 0; j < 4; ++j) {
        EXPECT_EQ(valueAt(buffer, 0, DType::I64, row * 4 + j), (*tokens)[start + j]);
        EXPECT_EQ(valueAt(buffer, 64, DType::I64, row * 4 + j), (*tokens)[start + j + 1]);
      }
    }
  }
  // Without labels: windows of T tokens, every T (11 tokens hold 2, 13 hold 3).
  std::vector<InputInfo> one = {causalLm(2, 4)[0]};
  auto plain = TokenWindows::open(dir + "/s_train_*.bin", one, o, &error);
  ASSERT_TRUE(plain) << error;
  EXPECT_EQ(plain->numExamples(), 5);
  EXPECT_EQ(plain->windowTokens(), 4);
  o.maxExamples = 3;
  auto some = TokenWindows::open(dir + "/s_train_*.bin", causalLm(2, 4), o, &error);
  ASSERT_TRUE(some) << error;
  EXPECT_EQ(some->numExamples(), 3);
  EXPECT_EQ(some->batchesPerEpoch(), 1);
}

TEST_F(RuntimeTokens, ShuffleIsAFunctionOfSeedAndEpoch) {
  const auto tokens = stream(0, 3 * 40 + 1); // 40 windows of T = 3
  shard("t.bin", tokens);
  std::string error;
  TokenDataOptions o;
  o.seed = 17;
  const std::vector<InputInfo> inputs = causalLm(4, 3);
  auto data = TokenWindows::open(dir + "/t.bin", inputs, o, &error);
  auto again = TokenWindows::open(dir + "/t.bin", inputs, o, &error);
  ASSERT_TRUE(data && again) << error;
  ASSERT_EQ(data->batchesPerEpoch(), 10);
  auto draw = [](const TokenWindows& d, uint64_t epoch, uint64_t b) {
    std::vector<unsigned char> buffer(192, 0xEE);
    EXPECT_TRUE(d.batch({epoch, b}, buffer.data(), nullptr));
    return buffer;
  };
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    const std::vector<int64_t> order = lwrt::shuffledOrder(40, 17, epoch);
    std::vector<int64_t> seen;
    for (uint64_t b = 0; b < 10; ++b) {
      const std::vector<unsigned char> buffer = draw(*data, epoch, b);
      for (int64_t row = 0; row < 4; ++row) {
        const int64_t w = order[static_cast<size_t>(b * 4 + row)];
        seen.push_back(w);
        for (int64_t j = 0; j < 3; ++j) {
          EXPECT_EQ(valueAt(buffer, 0, DType::I64, row * 3 + j), tokens[3 * w + j]);
          EXPECT_EQ(valueAt(buffer, 96, DType::I64, row * 3 + j), tokens[3 * w + j + 1]);
        }
      }
    }
    std::sort(seen.begin(), seen.end());
    for (int64_t k = 0; k < 40; ++k) // every window once an epoch
      EXPECT_EQ(seen[static_cast<size_t>(k)], k);
  }
  // The same (seed, epoch, batch) draws the same bytes, in any order of
  // drawing; another epoch or seed another order.
  EXPECT_EQ(draw(*data, 2, 5), draw(*again, 2, 5));
  EXPECT_EQ(draw(*again, 0, 0), draw(*data, 0, 0));
  EXPECT_NE(draw(*data, 0, 0), draw(*data, 1, 0));
  again->setSeed(18);
  EXPECT_NE(draw(*data, 0, 0), draw(*again, 0, 0));
  again->setSeed(17);
  EXPECT_EQ(draw(*data, 1, 3), draw(*again, 1, 3));
  std::vector<unsigned char> buffer(192);
  EXPECT_FALSE(data->batch({0, 10}, buffer.data(), &error));
  EXPECT_EQ(error, "token data: batch 10 of an epoch of 10");
}

TEST_F(RuntimeTokens, ProcessRows) {
  shard("t.bin", stream(0, 4 * 12 + 1));
  std::string error;
  TokenDataOptions o;
  o.seed = 3;
  // Labels [B, T] (a loss in the graph): a process writes its rows alone.
  std::vector<InputInfo> rows = {{"ids", DType::I64, {4, 4}, false, 0},
                                 {"labels", DType::I32, {4, 4}, false, 128}};
  auto data = TokenWindows::open(dir + "/t.bin", rows, o, &error);
  ASSERT_TRUE(data) << error;
  std::vector<unsigned char> whole(192), part(192, 0xEE);
  ASSERT_TRUE(data->batch({1, 2}, whole.data(), &error));
  ASSERT_TRUE(data->batch({1, 2}, part.data(), &error, {2, 4}));
  EXPECT_EQ(part[0], 0xEE);
  EXPECT_EQ(part[128], 0xEE);
  EXPECT_EQ(std::memcmp(part.data() + 64, whole.data() + 64, 64), 0);
  EXPECT_EQ(std::memcmp(part.data() + 160, whole.data() + 160, 32), 0);
  EXPECT_EQ(valueAt(whole, 128, DType::I32, 0), valueAt(whole, 0, DType::I64, 1));
  // Labels [B * T]: the rows a process is given are not windows, so it
  // writes the whole batch.
  auto lm = TokenWindows::open(dir + "/t.bin", causalLm(4, 4), o, &error);
  ASSERT_TRUE(lm) << error;
  std::vector<unsigned char> all(256), some(256, 0xEE);
  ASSERT_TRUE(lm->batch({1, 2}, all.data(), &error));
  ASSERT_TRUE(lm->batch({1, 2}, some.data(), &error, {2, 4}));
  EXPECT_EQ(all, some);
}

TEST_F(RuntimeTokens, DataErrors) {
  std::string error;
  auto fails = [&](const std::string& pattern, const std::vector<InputInfo>& inputs,
                   const std::string& words, TokenDataOptions o = {}) {
    error.clear();
    EXPECT_FALSE(TokenWindows::open(pattern, inputs, o, &error));
    EXPECT_NE(error.find(words), std::string::npos) << "want '" << words << "': " << error;
  };
  fails(dir + "/none_*.bin", causalLm(2, 4), dir + "/none_*.bin: no file matches");
  fails(dir + "/missing.bin", causalLm(2, 4), dir + "/missing.bin: cannot open");
  std::vector<InputInfo> image = {{"x", DType::F32, {2, 1, 4, 4}, false, 0}};
  shard("ok.bin", stream(0, 100));
  fails(dir + "/ok.bin", image, "token data: the token input 'x'");
  // A malformed shard among good ones is named.
  Header h;
  h.magic = 7;
  shard("m_1.bin", stream(0, 100));
  shard("m_2.bin", stream(0, 100), h);
  fails(dir + "/m_*.bin", causalLm(2, 4), dir + "/m_2.bin: magic 7 at offset 0");
  // Too few windows: 8 tokens hold one window of 5 with T = 4.
  shard("few.bin", stream(0, 8));
  fails(dir + "/few.bin", causalLm(2, 4),
        dir + "/few.bin: 1 windows of 5 tokens in 8 tokens of 1 shard(s), fewer than the batch "
              "size 2");
  TokenDataOptions o;
  o.maxExamples = 1;
  fails(dir + "/ok.bin", causalLm(2, 4), "1 windows of 5 tokens (maxExamples)", o);
  // A token outside the vocabulary: its value, index and byte offset.
  std::vector<uint32_t> tokens = stream(0, 100);
  tokens[37] = 1000;
  shard("vocab.bin", tokens);
  o = {};
  o.vocab = 1000;
  fails(dir + "/vocab.bin", causalLm(2, 4),
        dir + "/vocab.bin: token 1000 (token 37, at offset 1098) is not below the vocabulary "
              "size 1000",
        o);
  o.vocab = 1001;
  EXPECT_TRUE(TokenWindows::open(dir + "/vocab.bin", causalLm(2, 4), o, &error)) << error;
  // uint32 tokens that an int32 input cannot hold.
  Header v2;
  v2.version = 2;
  tokens[37] = 0x80000000u;
  shard("wide.bin", tokens, v2);
  std::vector<InputInfo> narrow = causalLm(2, 4);
  narrow[0].dtype = DType::I32;
  fails(dir + "/wide.bin", narrow,
        dir + "/wide.bin: token 2147483648 (token 37, at offset 1172) does not fit the model's "
              "int32 input");
  EXPECT_TRUE(TokenWindows::open(dir + "/wide.bin", causalLm(2, 4), {}, &error)) << error;
}

/// The npy loader reads int64 token arrays too: a causal LM's input_ids
/// [B, T] from (E, T) rows and its [B * T] labels from (E, T) rows, each
/// example's T labels together.
TEST_F(RuntimeTokens, NpyTokenArrays) {
  const int64_t e = 6, t = 4;
  std::vector<int64_t> x(e * t), y(e * t);
  for (int64_t k = 0; k < e * t; ++k) {
    x[static_cast<size_t>(k)] = 10 * k;
    y[static_cast<size_t>(k)] = 10 * k + 1;
  }
  auto save = [&](const std::string& name, const std::vector<int64_t>& values,
                  const std::string& shape) {
    std::string header = "{'descr': '<i8', 'fortran_order': False, 'shape': " + shape + ", }";
    while ((10 + header.size() + 1) % 64 != 0)
      header += ' ';
    header += '\n';
    std::ofstream out(dir + "/" + name, std::ios::binary);
    out.write("\x93NUMPY\x01\x00", 8);
    const uint16_t length = static_cast<uint16_t>(header.size());
    out.write(reinterpret_cast<const char*>(&length), 2);
    out << header;
    out.write(reinterpret_cast<const char*>(values.data()),
              static_cast<std::streamsize>(values.size() * 8));
  };
  save("x_train.npy", x, "(6, 4)");
  save("y_train.npy", y, "(6, 4)");
  lwrt::NpyInputOptions o;
  o.seed = 5;
  o.classes = 1000;
  std::string error;
  auto data = lwrt::NpyInputs::open(dir, "train", causalLm(2, t), o, &error);
  ASSERT_TRUE(data) << error;
  EXPECT_EQ(data->batchSize(), 2);
  EXPECT_EQ(data->numExamples(), e);
  const std::vector<int64_t> order = lwrt::shuffledOrder(e, 5, 1);
  std::vector<unsigned char> buffer(128);
  ASSERT_TRUE(data->batch({1, 2}, buffer.data(), &error)) << error;
  for (int64_t row = 0; row < 2; ++row)
    for (int64_t j = 0; j < t; ++j) {
      const int64_t example = order[static_cast<size_t>(4 + row)];
      EXPECT_EQ(valueAt(buffer, 0, DType::I64, row * t + j), 10 * (example * t + j));
      EXPECT_EQ(valueAt(buffer, 64, DType::I64, row * t + j), 10 * (example * t + j) + 1);
    }
  // A process's rows of a [B * T] label input are not examples: it writes them all.
  std::vector<unsigned char> some(128, 0xEE);
  ASSERT_TRUE(data->batch({1, 2}, some.data(), &error, {1, 2}));
  EXPECT_EQ(some, buffer);
  o.classes = 200; // labels 1 .. 231
  EXPECT_FALSE(lwrt::NpyInputs::open(dir, "train", causalLm(2, t), o, &error));
  EXPECT_NE(error.find("y_train.npy: label 201 of example 5 is not below the class count 200"),
            std::string::npos)
      << error;
  // A classifier of token rows as before: int64 [N, T] with one label each.
  save("y_train.npy", {3, 1, 4, 1, 5, 9}, "(6,)");
  std::vector<InputInfo> classifier = {{"input_ids", DType::I64, {2, t}, false, 0},
                                       {"label", DType::I64, {2}, true, 64}};
  auto rows = lwrt::NpyInputs::open(dir, "train", classifier, {}, &error);
  ASSERT_TRUE(rows) << error;
  std::vector<unsigned char> eval(80);
  ASSERT_TRUE(rows->examples(4, eval.data(), &error));
  EXPECT_EQ(valueAt(eval, 0, DType::I64, 3), 10 * (4 * t + 3));
  EXPECT_EQ(valueAt(eval, 64, DType::I64, 0), 5);
  EXPECT_EQ(valueAt(eval, 64, DType::I64, 1), 9);
}

} // namespace
