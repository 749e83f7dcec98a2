// llm.c's token shards as a language model's inputs (--data=tokens:PATH),
// memory-mapped: the header check, the shards a glob names, which model
// inputs take the tokens, and the windows each batch is cut from.
#include "lwrt/tokens.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace lwrt {

namespace {

bool fail(std::string* error, const std::string& what) {
  if (error)
    *error = what;
  return false;
}

std::string str(int64_t v) { return std::to_string(v); }

int32_t littleEndian32(const unsigned char* p) {
  const uint32_t u =
      uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  int32_t v;
  std::memcpy(&v, &u, 4);
  return v;
}

bool isInteger(const InputInfo& in) { return in.dtype == DType::I64 || in.dtype == DType::I32; }

int64_t elementsOf(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

const char* typeName(DType t) {
  switch (t) {
  case DType::F32:
    return "float32";
  case DType::F64:
    return "float64";
  case DType::F16:
    return "float16";
  case DType::BF16:
    return "bfloat16";
  case DType::I64:
    return "int64";
  case DType::I32:
    return "int32";
  case DType::Bool:
    return "bool";
  }
  return "?";
}

std::string describe(const InputInfo& in) {
  std::string s = std::string(typeName(in.dtype)) + "[";
  for (size_t k = 0; k < in.shape.size(); ++k)
    s += (k ? ", " : "") + str(in.shape[k]);
  return "'" + in.name + "' " + s + "]";
}

bool namesLabels(const std::string& name) {
  std::string lower = name;
  for (char& c : lower)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower.find("label") != std::string::npos || lower.find("target") != std::string::npos;
}

/// Tokens [from, from + n) of `s` as the elements of `t` (int64 or int32) at `dst`.
void putTokens(const TokenShard& s, int64_t from, int64_t n, DType t, unsigned char* dst) {
  for (int64_t k = 0; k < n; ++k) {
    const uint32_t v = s.at(from + k);
    if (t == DType::I64) {
      const int64_t w = v;
      std::memcpy(dst + 8 * k, &w, 8);
    } else { // checked to fit when opened
      const int32_t w = static_cast<int32_t>(v);
      std::memcpy(dst + 4 * k, &w, 4);
    }
  }
}

} // namespace

uint32_t TokenShard::at(int64_t k) const {
  if (version == 1) {
    uint16_t v;
    std::memcpy(&v, tokens + 2 * k, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, tokens + 4 * k, 4);
  return v;
}

uint32_t TokenShard::largest() const {
  uint32_t most = 0;
  for (int64_t k = 0; k < count; ++k)
    most = std::max(most, at(k));
  return most;
}

int64_t TokenShard::firstAtLeast(uint32_t limit) const {
  for (int64_t k = 0; k < count; ++k)
    if (at(k) >= limit)
      return k;
  return -1;
}

bool readTokenShard(const std::string& path, TokenShard& out, std::string* error) {
  out = TokenShard{};
  out.path = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return fail(error, path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail(error, path + ": cannot open: not a regular file");
  }
  const int64_t size = static_cast<int64_t>(st.st_size);
  if (size < kTokenHeaderBytes) {
    ::close(fd);
    return fail(error, path + ": " + str(size) + " bytes, shorter than a token shard's " +
                           str(kTokenHeaderBytes) + "-byte header (256 int32)");
  }
  void* base = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED)
    return fail(error, path + ": cannot map: " + std::strerror(errno));
  out.mapping = std::shared_ptr<const void>(
      base, [size](const void* p) { ::munmap(const_cast<void*>(p), static_cast<size_t>(size)); });
  const unsigned char* file = static_cast<const unsigned char*>(base);
  const int32_t magic = littleEndian32(file), version = littleEndian32(file + 4),
                count = littleEndian32(file + 8);
  if (magic != kTokenShardMagic)
    return fail(error, path + ": magic " + str(magic) + " at offset 0, not " +
                           str(kTokenShardMagic) + ": not an llm.c token shard");
  if (version != 1 && version != 2)
    return fail(error, path + ": version " + str(version) +
                           " at offset 4 (this trainer reads 1, uint16 tokens, and 2, uint32)");
  if (count < 0)
    return fail(error, path + ": token count " + str(count) + " at offset 8 is negative");
  out.version = version;
  out.count = count;
  const int64_t expected = kTokenHeaderBytes + out.count * out.tokenBytes();
  if (size < expected)
    return fail(error, path + ": truncated: the header says " + str(count) +
                           " tokens (offset 8), " + str(expected) + " bytes with the header, " +
                           "but the file ends at offset " + str(size) + ", inside token " +
                           str((size - kTokenHeaderBytes) / out.tokenBytes()));
  if (size > expected)
    return fail(error, path + ": " + str(size - expected) + " bytes after its " + str(count) +
                           " tokens, from offset " + str(expected) +
                           ": the header's count (offset 8) or version (offset 4) does not fit "
                           "the file");
  out.tokens = file + kTokenHeaderBytes;
  return true;
}

bool tokenShardPaths(const std::string& pattern, std::vector<std::string>& out,
                     std::string* error) {
  out.clear();
  if (pattern.find_first_of("*?[") == std::string::npos) {
    out.push_back(pattern);
    return true;
  }
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  if (rc == 0)
    for (size_t k = 0; k < g.gl_pathc; ++k)
      out.emplace_back(g.gl_pathv[k]);
  ::globfree(&g);
  if (out.empty())
    return fail(error, pattern + ": no file matches");
  std::sort(out.begin(), out.end()); // byte order, whatever the locale
  return true;
}

std::string validationPattern(const std::string& train) {
  const size_t slash = train.rfind('/');
  const size_t name = slash == std::string::npos ? 0 : slash + 1;
  const size_t at = train.rfind("train");
  if (at == std::string::npos || at < name)
    return "";
  return train.substr(0, at) + "val" + train.substr(at + 5);
}

std::optional<TokenLayout> tokenLayout(const std::vector<InputInfo>& inputs, std::string& why) {
  std::vector<const InputInfo*> data, label;
  for (const InputInfo& in : inputs)
    (in.isLabel ? label : data).push_back(&in);
  if (data.empty()) {
    why = "the model has no token input";
    return std::nullopt;
  }
  if (label.size() + data.size() > 2) {
    why = "the model has " + str(static_cast<int64_t>(inputs.size())) +
          " inputs; token data feeds a token input [B, T] and its labels";
    return std::nullopt;
  }
  TokenLayout l;
  l.ids = data[0];
  if (!label.empty()) {
    l.labels = label[0];
  } else if (data.size() == 2) { // labels as a data input: a loss in the graph
    const bool first = namesLabels(data[0]->name), second = namesLabels(data[1]->name);
    l.ids = first && !second ? data[1] : data[0];
    l.labels = first && !second ? data[0] : data[1];
  }
  const InputInfo& ids = *l.ids;
  if (!isInteger(ids) || ids.shape.size() != 2 || ids.shape[0] < 1 || ids.shape[1] < 1) {
    why = "the token input " + describe(ids) + " is not an integer [B, T]";
    return std::nullopt;
  }
  l.batch = ids.shape[0];
  l.length = ids.shape[1];
  if (l.labels) {
    const InputInfo& y = *l.labels;
    if (!isInteger(y) || y.shape.empty() || elementsOf(y.shape) != l.batch * l.length ||
        (y.shape[0] != l.batch && y.shape[0] != l.batch * l.length)) {
      why = "the labels " + describe(y) + " are not integers [B, T] or [B * T] for the token " +
            "input " + describe(ids);
      return std::nullopt;
    }
  }
  return l;
}

TokenWindows::TokenWindows(const TokenLayout& layout, int64_t examples,
                           const TokenDataOptions& options)
    : layout_(layout), ids_(*layout.ids), examples_(examples),
      orders_(examples, options.shuffle, options.seed) {
  layout_.ids = &ids_;
  if (layout.labels) {
    labels_ = *layout.labels;
    layout_.labels = &labels_;
    rowsAreWindows_ = labels_.shape[0] == layout_.batch;
  }
}

TokenWindows::~TokenWindows() = default;

std::unique_ptr<TokenWindows> TokenWindows::open(const std::string& pattern,
                                                 const std::vector<InputInfo>& inputs,
                                                 const TokenDataOptions& options,
                                                 std::string* error) {
  std::string why;
  const std::optional<TokenLayout> layout = tokenLayout(inputs, why);
  if (!layout) {
    fail(error, "token data: " + why);
    return nullptr;
  }
  std::vector<std::string> paths;
  if (!tokenShardPaths(pattern, paths, error))
    return nullptr;
  const int64_t t = layout->length, span = t + (layout->labels ? 1 : 0);
  std::vector<TokenShard> shards(paths.size());
  std::vector<int64_t> first{0};
  int64_t tokens = 0;
  for (size_t k = 0; k < paths.size(); ++k) {
    if (!readTokenShard(paths[k], shards[k], error))
      return nullptr;
    const int64_t n = shards[k].count;
    first.push_back(first.back() + (n >= span ? (n - span) / t + 1 : 0));
    tokens += n;
  }
  const int64_t total = first.back();
  const int64_t examples = options.maxExamples > 0 ? std::min(total, options.maxExamples) : total;
  if (examples < layout->batch) {
    fail(error, pattern + ": " + str(examples) + " windows of " + str(span) + " tokens" +
                    (examples < total ? " (maxExamples)"
                                      : " in " + str(tokens) + " tokens of " +
                                            str(int64_t(paths.size())) + " shard(s)") +
                    ", fewer than the batch size " + str(layout->batch));
    return nullptr;
  }
  // Every token below the vocabulary, and below 2^31 for an int32 input.
  const bool narrow =
      layout->ids->dtype == DType::I32 || (layout->labels && layout->labels->dtype == DType::I32);
  int64_t limit = options.vocab > 0 ? options.vocab : INT64_MAX;
  if (narrow)
    limit = std::min<int64_t>(limit, int64_t(INT32_MAX) + 1);
  for (const TokenShard& s : shards) {
    const int64_t range = s.version == 1 ? int64_t(1) << 16 : int64_t(1) << 32;
    if (limit >= range || s.count == 0 || s.largest() < limit)
      continue;
    const int64_t k = s.firstAtLeast(static_cast<uint32_t>(limit));
    fail(error, s.path + ": token " + str(s.at(k)) + " (token " + str(k) + ", at offset " +
                    str(kTokenHeaderBytes + k * s.tokenBytes()) + ") " +
                    (options.vocab > 0 && limit == options.vocab
                         ? "is not below the vocabulary size " + str(options.vocab) +
                               " (the model's classes)"
                         : "does not fit the model's int32 input"));
    return nullptr;
  }
  std::unique_ptr<TokenWindows> data(new TokenWindows(*layout, examples, options));
  data->shards_ = std::move(shards);
  data->firstWindow_ = std::move(first);
  return data;
}

std::pair<size_t, int64_t> TokenWindows::window(int64_t index) const {
  const size_t s = static_cast<size_t>(
      std::upper_bound(firstWindow_.begin(), firstWindow_.end(), index) - firstWindow_.begin() - 1);
  return {s, (index - firstWindow_[s]) * layout_.length};
}

int64_t TokenWindows::totalTokens() const {
  int64_t n = 0;
  for (const TokenShard& s : shards_)
    n += s.count;
  return n;
}

void TokenWindows::store(int64_t index, int64_t row, unsigned char* inputs) const {
  const auto [s, start] = window(index);
  const TokenShard& shard = shards_[s];
  const int64_t t = layout_.length;
  putTokens(shard, start, t, ids_.dtype,
            inputs + ids_.offset + row * t * static_cast<int64_t>(dtypeSize(ids_.dtype)));
  if (layout_.labels)
    putTokens(shard, start + 1, t, labels_.dtype,
              inputs + labels_.offset + row * t * static_cast<int64_t>(dtypeSize(labels_.dtype)));
}

bool TokenWindows::batch(DataSource::Position p, unsigned char* inputs, std::string* error,
                         std::pair<int64_t, int64_t> rows) const {
  if (p.batch >= static_cast<uint64_t>(batchesPerEpoch()))
    return fail(error, "token data: batch " + str(static_cast<int64_t>(p.batch)) +
                           " of an epoch of " + str(batchesPerEpoch()));
  const std::shared_ptr<const std::vector<int64_t>> order = orders_.of(p.epoch);
  const int64_t n = layout_.batch, first = static_cast<int64_t>(p.batch) * n;
  int64_t begin = 0, end = n;
  if (rowsAreWindows_) {
    begin = std::max<int64_t>(rows.first, 0);
    end = rows.second < 0 ? n : std::min(rows.second, n);
  }
  for (int64_t k = begin; k < end; ++k)
    store(order ? (*order)[static_cast<size_t>(first + k)] : first + k, k, inputs);
  return true;
}

bool TokenWindows::examples(int64_t first, unsigned char* inputs, std::string*) const {
  for (int64_t k = 0; k < layout_.batch; ++k)
    store((first + k) % examples_, k, inputs);
  return true;
}

} // namespace lwrt
