// numpy .npy files as a data source (--data=npy:DIR). The format
// (numpy.lib.format): the magic "\x93NUMPY", a major and minor version, the
// header's length (2 bytes little-endian in 1.0, 4 in 2.0 and 3.0), then
// the header, a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 1, 28, 28), }
// padded with spaces and a newline, then the array's bytes in C order.
#include "lwrt/data.h"

#include <cstring>
#include <fstream>

namespace lwrt {

namespace {

bool fail(std::string* error, const std::string& what) {
  if (error)
    *error = what;
  return false;
}

struct NpyArray {
  std::string path;
  std::string descr;
  std::vector<int64_t> shape;
  std::vector<unsigned char> body; ///< the array's bytes
};

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

bool readNpy(const std::string& path, NpyArray& out, std::string* error) {
  out.path = path;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in)
    return fail(error, path + ": cannot open");
  const int64_t size = static_cast<int64_t>(in.tellg());
  std::vector<unsigned char> file(static_cast<size_t>(size));
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(file.data()), size))
    return fail(error, path + ": cannot read");
  if (size < 10 || std::memcmp(file.data(), "\x93NUMPY", 6) != 0)
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
  const std::string header(reinterpret_cast<const char*>(file.data() + at),
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
  out.shape.clear();
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
  int64_t itemSize = 0;
  if (out.descr == "<f4" || out.descr == "<i4")
    itemSize = 4;
  else if (out.descr == "<i8")
    itemSize = 8;
  else if (out.descr == "|u1" || out.descr == "<u1")
    itemSize = 1;
  else
    return fail(error, path + ": dtype '" + out.descr +
                           "' (images are float32 '<f4' or uint8 '|u1', labels int64 '<i8' "
                           "or int32 '<i4')");
  int64_t bytes = itemSize;
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
  out.body.assign(file.begin() + at, file.begin() + at + bytes);
  return true;
}

std::string shapeText(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t k = 0; k < shape.size(); ++k)
    s += (k ? ", " : "") + std::to_string(shape[k]);
  return s + ")";
}

bool exists(const std::string& path) { return static_cast<bool>(std::ifstream(path)); }

} // namespace

std::unique_ptr<NpyData> NpyData::open(const std::string& dir, const std::string& split,
                                       const std::vector<int64_t>& shape, const NpyOptions& options,
                                       std::string* error) {
  if (split != "train" && split != "test") {
    fail(error, "npy split '" + split + "' is neither train nor test");
    return nullptr;
  }
  if (shape.size() != 4 || shape[0] < 1 || shape[1] < 1 || shape[2] < 1 || shape[3] < 1) {
    fail(error, "npy data: the batch shape is not [N, C, H, W]");
    return nullptr;
  }
  const std::string base = dir.empty() ? std::string(".") : dir;
  std::string xPath = base + "/x_" + split + ".npy", yPath = base + "/y_" + split + ".npy";
  if (split == "train" && !exists(xPath) && exists(base + "/x.npy")) {
    xPath = base + "/x.npy";
    yPath = base + "/y.npy";
  }
  NpyArray x, y;
  if (!readNpy(xPath, x, error) || !readNpy(yPath, y, error))
    return nullptr;
  if (x.descr != "<f4" && x.descr != "|u1" && x.descr != "<u1") {
    fail(error, xPath + ": images of dtype '" + x.descr + "' (float32 '<f4' or uint8 '|u1')");
    return nullptr;
  }
  if (y.descr != "<i8" && y.descr != "<i4") {
    fail(error, yPath + ": labels of dtype '" + y.descr + "' (int64 '<i8' or int32 '<i4')");
    return nullptr;
  }
  const bool fits =
      (x.shape.size() == 4 && x.shape[1] == shape[1] && x.shape[2] == shape[2] &&
       x.shape[3] == shape[3]) ||
      (x.shape.size() == 3 && shape[1] == 1 && x.shape[1] == shape[2] && x.shape[2] == shape[3]);
  if (!fits) {
    fail(error, xPath + ": shape " + shapeText(x.shape) + ", the model takes (N, " +
                    std::to_string(shape[1]) + ", " + std::to_string(shape[2]) + ", " +
                    std::to_string(shape[3]) + ") images");
    return nullptr;
  }
  const int64_t count = x.shape[0];
  if (y.shape.size() != 1 || y.shape[0] != count) {
    fail(error, yPath + ": shape " + shapeText(y.shape) + ", expected (" + std::to_string(count) +
                    ",): one label per image of " + xPath);
    return nullptr;
  }
  int64_t examples = count;
  if (options.maxExamples > 0)
    examples = std::min<int64_t>(examples, options.maxExamples);
  if (examples < shape[0]) {
    fail(error, xPath + ": " + std::to_string(examples) + " examples" +
                    (examples < count ? " (maxExamples)" : "") + ", fewer than the batch size " +
                    std::to_string(shape[0]));
    return nullptr;
  }
  std::unique_ptr<NpyData> data(new NpyData(shape, examples, options));
  data->labels_.resize(static_cast<size_t>(examples));
  for (int64_t k = 0; k < examples; ++k) {
    int64_t v;
    if (y.descr == "<i8") {
      std::memcpy(&v, y.body.data() + 8 * k, 8);
    } else {
      int32_t w;
      std::memcpy(&w, y.body.data() + 4 * k, 4);
      v = w;
    }
    if (v < 0 || (options.classes > 0 && v >= options.classes)) {
      fail(error, yPath + ": label " + std::to_string(v) + " of example " + std::to_string(k) +
                      (v < 0 ? " is negative"
                             : " is not below the class count " + std::to_string(options.classes)));
      return nullptr;
    }
    data->labels_[static_cast<size_t>(k)] = v;
  }
  data->bytes_ = x.descr != "<f4";
  const size_t keep = static_cast<size_t>(examples * data->imageSize() * (data->bytes_ ? 1 : 4));
  x.body.resize(keep);
  x.body.shrink_to_fit();
  data->images_ = std::move(x.body);
  return data;
}

bool NpyData::load(int64_t index, uint64_t, float* image, int64_t* label, std::string*) const {
  const int64_t n = imageSize();
  if (bytes_) {
    const unsigned char* src = images_.data() + static_cast<size_t>(index * n);
    for (int64_t k = 0; k < n; ++k)
      image[k] = static_cast<float>(src[k]) / 255.0f;
  } else {
    std::memcpy(image, images_.data() + static_cast<size_t>(index * n) * 4,
                static_cast<size_t>(n) * 4);
  }
  *label = labels_[static_cast<size_t>(index)];
  return true;
}

} // namespace lwrt
