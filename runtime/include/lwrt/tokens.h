// lwrt/tokens.h - llm.c's token shards as a language model's inputs (--data=tokens:PATH)
// defines: kTokenShardMagic, kTokenHeaderBytes, TokenShard, readTokenShard,
//          tokenShardPaths, validationPattern, TokenLayout, tokenLayout,
//          TokenDataOptions, TokenWindows
//
// A token shard (llm.c's format): a header of 256 little-endian int32,
// header[0] the magic 20240520, header[1] the version (1: the tokens are
// uint16, 2: uint32), header[2] the token count; then the tokens, exactly
// that many. Shards are memory-mapped, not read.
//
// A causal language model takes windows of the token stream: the model's
// token input [B, T] gets T consecutive tokens per row, and its labels
// (B * T of them: the softmax cross-entropy's [B * T] label input, or a
// second integer input [B, T]) the same tokens shifted by one, the next
// token of each position. Window k of a shard starts at token k * T and
// holds T + 1 tokens (T when the model has no label input: it shifts
// inside the graph), so consecutive windows share one token and a shard of
// n tokens holds (n - 1) / T of them (n / T without labels); windows never
// cross shards. The windows of every shard, in the shards' order, are the
// data set's examples: each epoch visits them in EpochOrders' order of
// (seed, epoch).
//
// Errors name the file and, where one applies, the byte offset: a file
// shorter than its header, a bad magic, an unsupported version, a negative
// count, a file shorter (or longer) than its count says, a token not below
// the vocabulary. Nothing here throws, crashes or reads outside a file.
#pragma once

#include "lwrt/data.h"
#include "lwrt/feed.h"
#include "lwrt/trainer.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lwrt {

constexpr int32_t kTokenShardMagic = 20240520;
constexpr int64_t kTokenHeaderBytes = 256 * 4;

/// One shard, mapped into memory.
struct TokenShard {
  std::string path;
  int version = 0;   ///< 1: uint16 tokens, 2: uint32
  int64_t count = 0; ///< tokens
  const unsigned char* tokens = nullptr;
  std::shared_ptr<const void> mapping; ///< keeps `tokens` mapped

  int64_t tokenBytes() const { return version == 1 ? 2 : 4; }
  /// Token `k` (< count).
  uint32_t at(int64_t k) const;
  /// The largest token, and the index of the first one at or above `limit`
  /// (-1: none).
  uint32_t largest() const;
  int64_t firstAtLeast(uint32_t limit) const;
};

/// Maps `path` and checks its header and size. False with `error` naming
/// the file (and the offset of a bad header field) on any problem.
bool readTokenShard(const std::string& path, TokenShard& out, std::string* error);

/// The shards `pattern` names: the file itself, or the files a glob
/// (`*`, `?`, `[...]`) matches, sorted by name. False with `error` set when
/// a glob matches nothing.
bool tokenShardPaths(const std::string& pattern, std::vector<std::string>& out, std::string* error);

/// The validation shards' pattern of training shards `train` (llm.c's
/// naming): the last "train" of its file name as "val"
/// (`/data/tiny_train_*.bin` -> `/data/tiny_val_*.bin`); "" when the file
/// name has no "train".
std::string validationPattern(const std::string& train);

/// Which of the model's inputs take the tokens.
struct TokenLayout {
  const InputInfo* ids = nullptr;    ///< integer [B, T]: window[0:T]
  const InputInfo* labels = nullptr; ///< integer, B * T values: window[1:T+1]; null: none
  int64_t batch = 0, length = 0;     ///< B and T
};

/// The token layout of `inputs`: one integer data input [B, T], and either
/// an integer label input of B * T values (lwcc's softmax cross-entropy
/// appends [B * T] for logits [B * T, V]), or a second integer data input
/// [B, T] of the labels (a loss computed in the graph: the input whose name
/// holds "label" or "target", else the second), or no labels at all (a
/// model that shifts inside the graph). Nothing with `why` set otherwise.
std::optional<TokenLayout> tokenLayout(const std::vector<InputInfo>& inputs, std::string& why);

struct TokenDataOptions {
  /// Use only the first maxExamples windows (0: all).
  int64_t maxExamples = 0;
  /// Shuffle the windows every epoch (training) or visit them in order (evaluation).
  bool shuffle = true;
  uint64_t seed = 0;
  /// When positive, every token must be below it (the model's vocabulary:
  /// its softmax cross-entropy's class count).
  int64_t vocab = 0;
};

/// --data=tokens:PATH: windows of the shards `pattern` names (tokenShardPaths).
class TokenWindows final : public InputBatches {
public:
  /// Null with `error` naming the file on any problem.
  static std::unique_ptr<TokenWindows> open(const std::string& pattern,
                                            const std::vector<InputInfo>& inputs,
                                            const TokenDataOptions& options = {},
                                            std::string* error = nullptr);
  ~TokenWindows() override;

  int64_t batchSize() const override { return layout_.batch; }
  int64_t numExamples() const override { return examples_; }
  void setSeed(uint64_t seed) override { orders_.setSeed(seed); }
  /// With `rows`, only those windows of the batch, when every input has one
  /// row per window; a label input of B * T rows takes every window (a
  /// process's rows of it are not windows).
  bool batch(DataSource::Position p, unsigned char* inputs, std::string* error,
             std::pair<int64_t, int64_t> rows = {0, -1}) const override;
  bool examples(int64_t first, unsigned char* inputs, std::string* error) const override;

  const TokenLayout& layout() const { return layout_; }
  const std::vector<TokenShard>& shards() const { return shards_; }
  /// Tokens per window: T + 1, or T without labels.
  int64_t windowTokens() const { return layout_.length + (layout_.labels ? 1 : 0); }
  /// Where window `index` (< numExamples()) starts: its shard and token.
  std::pair<size_t, int64_t> window(int64_t index) const;
  /// Every token of every shard.
  int64_t totalTokens() const;

private:
  TokenWindows(const TokenLayout& layout, int64_t examples, const TokenDataOptions& options);
  /// Writes window `index` at row `row` of `inputs`.
  void store(int64_t index, int64_t row, unsigned char* inputs) const;

  TokenLayout layout_;
  InputInfo ids_{}, labels_{}; ///< copies: layout_ points at them
  int64_t examples_;
  bool rowsAreWindows_ = true;
  EpochOrders orders_;
  std::vector<TokenShard> shards_;
  std::vector<int64_t> firstWindow_; ///< per shard, then the total
};

} // namespace lwrt
