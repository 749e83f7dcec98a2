// numpy .npy files as the model's inputs (--data=npy:DIR), memory-mapped. The format
// (numpy.lib.format): the magic "\x93NUMPY", a major and minor version, the
// header's length (2 bytes little-endian in 1.0, 4 in 2.0 and 3.0), then
// the header, a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 1, 28, 28), }
// padded with spaces and a newline, then the array's bytes in C order.
#include "lwrt/npy.h"

#include "Trainer.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <optional>
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

/// Bytes per element of a dtype this trainer reads, or 0.
int64_t itemSizeOf(const std::string& descr) {
  if (descr == "<f8" || descr == "<i8")
    return 8;
  if (descr == "<f4" || descr == "<i4")
    return 4;
  if (descr == "<f2")
    return 2;
  if (descr == "|u1" || descr == "<u1" || descr == "|b1")
    return 1;
  return 0;
}

/// The value of `key` in the header dict: the text after "'key':" up to
/// the next top-level comma or closing brace.
bool headerValue(const std::string& header, const std::string& key, std::string& value) {
  size_t at = header.find("'" + key + "'");
  if (at == std::string::npos)
    return false;
  at = header.find(':', at);
  if (at == std::string::npos)
    return false;
  size_t end = at + 1;
  int depth = 0;
  for (; end < header.size(); ++end) {
    char c = header[end];
    if (c == '(')
      ++depth;
    else if (c == ')')
      --depth;
    else if ((c == ',' || c == '}') && depth == 0)
      break;
  }
  value = header.substr(at + 1, end - at - 1);
  const size_t first = value.find_first_not_of(" \t");
  const size_t last = value.find_last_not_of(" \t");
  value = first == std::string::npos ? "" : value.substr(first, last - first + 1);
  return true;
}

} // namespace

bool readNpy(const std::string& path, NpyArray& out, std::string* error) {
  out = NpyArray{};
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
  if (size < 10) {
    ::close(fd);
    return fail(error, path + ": not a .npy file (no \\x93NUMPY magic)");
  }
  void* base = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED)
    return fail(error, path + ": cannot map: " + std::strerror(errno));
  out.mapping = std::shared_ptr<const void>(
      base, [size](const void* p) { ::munmap(const_cast<void*>(p), static_cast<size_t>(size)); });
  const unsigned char* file = static_cast<const unsigned char*>(base);
  if (std::memcmp(file, "\x93NUMPY", 6) != 0)
    return fail(error, path + ": not a .npy file (no \\x93NUMPY magic)");
  const int major = file[6];
  int64_t headerLength = 0, at = 0;
  if (major == 1) {
    headerLength = file[8] | file[9] << 8;
    at = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12)
      return fail(error, path + ": truncated header");
    headerLength = static_cast<int64_t>(file[8]) | static_cast<int64_t>(file[9]) << 8 |
                   static_cast<int64_t>(file[10]) << 16 | static_cast<int64_t>(file[11]) << 24;
    at = 12;
  } else {
    return fail(error, path + ": .npy format version " + std::to_string(major) +
                           " (this trainer reads 1.0 to 3.0)");
  }
  if (at + headerLength > size)
    return fail(error, path + ": truncated header");
  const std::string header(reinterpret_cast<const char*>(file + at),
                           static_cast<size_t>(headerLength));
  std::string descr, order, shape;
  if (!headerValue(header, "descr", descr) || !headerValue(header, "fortran_order", order) ||
      !headerValue(header, "shape", shape))
    return fail(error, path + ": the header lacks descr, fortran_order or shape: " + header);
  if (descr.size() < 2 || (descr.front() != '\'' && descr.front() != '"') ||
      descr.back() != descr.front())
    return fail(error, path + ": descr " + descr + " is not a simple dtype (a structured array?)");
  out.descr = descr.substr(1, descr.size() - 2);
  if (order == "True")
    return fail(error, path + ": a Fortran-order array (fortran_order True); save it in C order, "
                              "np.save(path, np.ascontiguousarray(a))");
  if (order != "False")
    return fail(error, path + ": fortran_order is " + order);
  if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')')
    return fail(error, path + ": shape " + shape + " is not a tuple");
  for (size_t k = 1; k + 1 < shape.size();) {
    while (k + 1 < shape.size() && (shape[k] == ' ' || shape[k] == ','))
      ++k;
    if (k + 1 >= shape.size())
      break;
    char* end = nullptr;
    const long long d = std::strtoll(shape.c_str() + k, &end, 10);
    if (end == shape.c_str() + k || d < 0)
      return fail(error, path + ": shape " + shape + " is not a tuple of sizes");
    out.shape.push_back(d);
    k = static_cast<size_t>(end - shape.c_str());
  }
  out.itemSize = itemSizeOf(out.descr);
  if (out.itemSize == 0)
    return fail(error, path + ": dtype '" + out.descr +
                           "' (this trainer reads '<f4', '<f8', '<f2', '<i8', '<i4', '|u1' "
                           "and '|b1')");
  int64_t bytes = out.itemSize;
  for (int64_t d : out.shape) {
    if (d > 0 && bytes > (int64_t(1) << 50) / d)
      return fail(error, path + ": shape " + shape + " is too large");
    bytes *= d;
  }
  at += headerLength;
  if (size - at < bytes)
    return fail(error, path + ": holds " + std::to_string(size - at) +
                           " bytes of data, its shape " + shape + " needs " +
                           std::to_string(bytes));
  out.data = file + at;
  return true;
}

namespace {

std::string shapeText(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t k = 0; k < shape.size(); ++k)
    s += (k ? ", " : "") + std::to_string(shape[k]);
  return s + ")";
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

/// The per-example shape without dimensions of size 1.
std::vector<int64_t> squeezed(std::vector<int64_t>::const_iterator first,
                              std::vector<int64_t>::const_iterator last) {
  std::vector<int64_t> out;
  for (; first != last; ++first)
    if (*first != 1)
      out.push_back(*first);
  return out;
}

/// The file dtypes an input of type `t` takes, as the error lists them.
const char* accepted(DType t) {
  switch (t) {
  case DType::F32:
    return "'<f4', or uint8 pixels '|u1', divided by 255";
  case DType::F64:
    return "'<f8', or uint8 pixels '|u1', divided by 255";
  case DType::F16:
    return "'<f2'";
  case DType::BF16:
    return "none: numpy has no bfloat16";
  case DType::I64:
  case DType::I32:
    return "'<i8' or '<i4'";
  case DType::Bool:
    return "'|b1'";
  }
  return "?";
}

/// How a file's elements become the input's.
enum class Conv { Copy, Pixels, Widen, Narrow };

/// The conversion from `descr` to `t`, or nothing when `t` does not take it.
std::optional<Conv> conversion(const std::string& descr, DType t) {
  const bool u8 = descr == "|u1" || descr == "<u1";
  switch (t) {
  case DType::F32:
    return descr == "<f4" ? std::optional(Conv::Copy)
           : u8           ? std::optional(Conv::Pixels)
                          : std::nullopt;
  case DType::F64:
    return descr == "<f8" ? std::optional(Conv::Copy)
           : u8           ? std::optional(Conv::Pixels)
                          : std::nullopt;
  case DType::F16:
    return descr == "<f2" ? std::optional(Conv::Copy) : std::nullopt;
  case DType::I64:
    return descr == "<i8"   ? std::optional(Conv::Copy)
           : descr == "<i4" ? std::optional(Conv::Widen)
                            : std::nullopt;
  case DType::I32:
    return descr == "<i4"   ? std::optional(Conv::Copy)
           : descr == "<i8" ? std::optional(Conv::Narrow)
                            : std::nullopt;
  case DType::Bool:
    return descr == "|b1" ? std::optional(Conv::Copy) : std::nullopt;
  case DType::BF16:
    break;
  }
  return std::nullopt;
}

int64_t integerAt(const NpyArray& a, int64_t k) {
  if (a.itemSize == 8) {
    int64_t v;
    std::memcpy(&v, a.data + 8 * k, 8);
    return v;
  }
  int32_t v;
  std::memcpy(&v, a.data + 4 * k, 4);
  return v;
}

std::string sanitized(const std::string& name) {
  std::string out = name;
  for (char& c : out)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_')
      c = '_';
  return out;
}

} // namespace

std::vector<std::string> npyInputFiles(const std::string& dir, const std::string& split,
                                       const std::vector<InputInfo>& inputs, size_t input) {
  const std::string base = dir.empty() ? std::string(".") : dir;
  size_t labels = 0;
  for (const InputInfo& in : inputs)
    labels += in.isLabel;
  const bool pair = inputs.size() == 2 && labels == 1;
  const std::string name = sanitized(inputs[input].name);
  const char* letter = inputs[input].isLabel ? "y" : "x";
  std::vector<std::string> files;
  if (pair)
    files.push_back(base + "/" + letter + "_" + split + ".npy");
  files.push_back(base + "/" + name + "_" + split + ".npy");
  if (split == "train") {
    if (pair)
      files.push_back(base + "/" + letter + ".npy");
    files.push_back(base + "/" + name + ".npy");
  }
  // An input named "x" or "y" would name its file twice.
  std::vector<std::string> unique;
  for (const std::string& f : files)
    if (std::find(unique.begin(), unique.end(), f) == unique.end())
      unique.push_back(f);
  return unique;
}

struct NpyInputs::Column {
  InputInfo input;
  NpyArray array;
  Conv conv = Conv::Copy;
  int64_t elements = 0; ///< per example
};

NpyInputs::NpyInputs(int64_t batch, int64_t examples, const NpyInputOptions& options)
    : batch_(batch), examples_(examples), orders_(examples, options.shuffle, options.seed) {}

NpyInputs::~NpyInputs() = default;

std::unique_ptr<NpyInputs> NpyInputs::open(const std::string& dir, const std::string& split,
                                           const std::vector<InputInfo>& inputs,
                                           const NpyInputOptions& options, std::string* error) {
  if (split != "train" && split != "test") {
    fail(error, "npy split '" + split + "' is neither train nor test");
    return nullptr;
  }
  if (inputs.empty()) {
    fail(error, "npy data: the model has no inputs");
    return nullptr;
  }
  // The batch N: the first input's rows. An input of k * N rows holds k
  // of them per example (a causal LM's [N * T] labels of input_ids [N, T]).
  const int64_t n = inputs[0].shape.empty() ? 0 : inputs[0].shape[0];
  std::vector<Column> columns(inputs.size());
  int64_t count = -1;
  std::string countFile;
  bool rowsAreExamples = true;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const InputInfo& in = inputs[k];
    if (in.shape.empty() || n < 1 || in.shape[0] % n != 0) {
      fail(error, "npy data: the model's input '" + in.name + "' is " + shapeText(in.shape) +
                      ", not one row (or k rows) per example of a batch of " + std::to_string(n));
      return nullptr;
    }
    rowsAreExamples = rowsAreExamples && in.shape[0] == n;
    const std::vector<std::string> tried = npyInputFiles(dir, split, inputs, k);
    std::string path = tried[0];
    for (const std::string& f : tried)
      if (exists(f)) {
        path = f;
        break;
      }
    Column& c = columns[k];
    c.input = in;
    if (!readNpy(path, c.array, error)) {
      if (!exists(path) && error && tried.size() > 1) {
        *error += " (the model's " + std::string(in.isLabel ? "label" : "input") + " '" + in.name +
                  "'; also tried";
        for (size_t t = 1; t < tried.size(); ++t)
          *error += " " + tried[t];
        *error += ")";
      }
      return nullptr;
    }
    const NpyArray& a = c.array;
    std::optional<Conv> conv = conversion(a.descr, in.dtype);
    if (!conv) {
      fail(error, path + ": dtype '" + a.descr + "' for the model's " + dtypeName(in.dtype) +
                      " input '" + in.name + "' (it takes " + accepted(in.dtype) + ")");
      return nullptr;
    }
    c.conv = *conv;
    // Per example: the file's shape after its first dimension against the
    // input's after the batch dimension.
    std::vector<int64_t> want(in.shape.begin() + 1, in.shape.end());
    if (in.shape[0] != n)
      want.insert(want.begin(), in.shape[0] / n);
    c.elements = trainer::numelOf(want);
    const bool fits =
        !a.shape.empty() &&
        (squeezed(a.shape.begin() + 1, a.shape.end()) == squeezed(want.begin(), want.end()) ||
         ((a.shape.size() <= 2 || want.size() <= 1) &&
          trainer::numelOf(std::vector<int64_t>(a.shape.begin() + 1, a.shape.end())) ==
              c.elements));
    if (!fits) {
      std::vector<int64_t> expect = want;
      expect.insert(expect.begin(), a.shape.empty() ? 0 : a.shape[0]);
      fail(error, path + ": shape " + shapeText(a.shape) + ", but the model's input '" + in.name +
                      "' " + shapeText(in.shape) + " takes rows of " + shapeText(want) +
                      ": an array " + shapeText(expect));
      return nullptr;
    }
    if (count >= 0 && a.shape[0] != count) {
      fail(error, path + ": " + std::to_string(a.shape[0]) + " examples, but " + countFile +
                      " holds " + std::to_string(count) + ": every file holds one row per example");
      return nullptr;
    }
    count = a.shape[0];
    countFile = path;
  }
  int64_t examples = count;
  if (options.maxExamples > 0)
    examples = std::min<int64_t>(examples, options.maxExamples);
  if (examples < n) {
    fail(error, columns[0].array.path + ": " + std::to_string(examples) + " examples" +
                    (examples < count ? " (maxExamples)" : "") + ", fewer than the batch size " +
                    std::to_string(n));
    return nullptr;
  }
  // Integer values checked once: labels in range, int64 values that an
  // int32 input holds.
  for (const Column& c : columns) {
    const bool label = c.input.isLabel && options.classes > 0;
    if (c.array.itemSize < 4 || (c.input.dtype != DType::I64 && c.input.dtype != DType::I32) ||
        (!label && c.conv != Conv::Narrow))
      continue;
    for (int64_t k = 0; k < examples * c.elements; ++k) {
      const int64_t v = integerAt(c.array, k);
      std::string bad;
      if (label && options.ignoreIndex && v == *options.ignoreIndex)
        continue; // the loss leaves it out
      if (label && v < 0)
        bad = " is negative";
      else if (label && v >= options.classes)
        bad = " is not below the class count " + std::to_string(options.classes);
      else if (v < INT32_MIN || v > INT32_MAX)
        bad = " does not fit the model's int32 input '" + c.input.name + "'";
      if (!bad.empty()) {
        fail(error, c.array.path + ": " + (label ? "label " : "value ") + std::to_string(v) +
                        " of example " + std::to_string(k / std::max<int64_t>(c.elements, 1)) +
                        bad);
        return nullptr;
      }
    }
  }
  std::unique_ptr<NpyInputs> data(new NpyInputs(n, examples, options));
  data->columns_ = std::move(columns);
  data->rowsAreExamples_ = rowsAreExamples;
  return data;
}

void NpyInputs::store(int64_t index, int64_t row, unsigned char* inputs) const {
  for (const Column& c : columns_) {
    const int64_t e = c.elements, out = dtypeSize(c.input.dtype);
    const unsigned char* src = c.array.data + index * e * c.array.itemSize;
    unsigned char* dst = inputs + c.input.offset + row * e * out;
    switch (c.conv) {
    case Conv::Copy:
      std::memcpy(dst, src, static_cast<size_t>(e * out));
      break;
    case Conv::Pixels: // as float32 pixel / 255, then widened for a float64 input
      for (int64_t k = 0; k < e; ++k) {
        const float v = static_cast<float>(src[k]) / 255.0f;
        if (c.input.dtype == DType::F64) {
          const double d = v;
          std::memcpy(dst + 8 * k, &d, 8);
        } else {
          std::memcpy(dst + 4 * k, &v, 4);
        }
      }
      break;
    case Conv::Widen:
      for (int64_t k = 0; k < e; ++k) {
        int32_t v;
        std::memcpy(&v, src + 4 * k, 4);
        const int64_t w = v;
        std::memcpy(dst + 8 * k, &w, 8);
      }
      break;
    case Conv::Narrow: // checked to fit when opened
      for (int64_t k = 0; k < e; ++k) {
        int64_t v;
        std::memcpy(&v, src + 8 * k, 8);
        const int32_t w = static_cast<int32_t>(v);
        std::memcpy(dst + 4 * k, &w, 4);
      }
      break;
    }
  }
}

bool NpyInputs::batch(DataSource::Position p, unsigned char* inputs, std::string* error,
                      std::pair<int64_t, int64_t> rows) const {
  if (p.batch >= static_cast<uint64_t>(batchesPerEpoch()))
    return fail(error, "npy data: batch " + std::to_string(p.batch) + " of an epoch of " +
                           std::to_string(batchesPerEpoch()));
  const std::shared_ptr<const std::vector<int64_t>> order = orders_.of(p.epoch);
  const int64_t first = static_cast<int64_t>(p.batch) * batch_;
  // A process's rows are examples only when every input has a row per example.
  const int64_t begin = rowsAreExamples_ ? std::max<int64_t>(rows.first, 0) : 0;
  const int64_t end = !rowsAreExamples_ || rows.second < 0 ? batch_ : std::min(rows.second, batch_);
  for (int64_t k = begin; k < end; ++k)
    store(order ? (*order)[static_cast<size_t>(first + k)] : first + k, k, inputs);
  return true;
}

bool NpyInputs::examples(int64_t first, unsigned char* inputs, std::string*) const {
  for (int64_t k = 0; k < batch_; ++k)
    store((first + k) % examples_, k, inputs);
  return true;
}

std::vector<std::string> NpyInputs::files() const {
  std::vector<std::string> out;
  for (const Column& c : columns_)
    out.push_back(c.array.path);
  return out;
}

} // namespace lwrt
