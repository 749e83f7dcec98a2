// The trainer's data loaders: per-epoch shuffling, synthetic data and
// MNIST-style IDX files (plain or gzipped).
#include "lwrt/data.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <sys/stat.h>
#include <zlib.h>

namespace lwrt {

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Uniform in [0, bound) without modulo bias.
uint64_t below(uint64_t& state, uint64_t bound) {
  uint64_t limit = UINT64_MAX - UINT64_MAX % bound; // multiples of bound fit below it
  for (;;) {
    uint64_t r = splitmix64(state);
    if (r < limit)
      return r % bound;
  }
}

bool fail(std::string* error, const std::string& message) {
  if (error)
    *error = message;
  return false;
}

/// Checks [N, C, H, W]: four positive dims whose product fits comfortably.
bool checkShape(const std::vector<int64_t>& shape, std::string* error) {
  std::string text = "[";
  for (size_t k = 0; k < shape.size(); ++k)
    text += (k ? ", " : "") + std::to_string(shape[k]);
  text += "]";
  if (shape.size() != 4)
    return fail(error, "batch shape " + text + " is not [N, C, H, W]");
  int64_t total = 1;
  for (int64_t d : shape) {
    if (d <= 0)
      return fail(error, "batch shape " + text + " has a dimension that is not positive");
    if (d > (int64_t(1) << 40) / total)
      return fail(error, "batch shape " + text + " is too large");
    total *= d;
  }
  return true;
}

uint32_t bigEndian32(const unsigned char* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

std::string hex8(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

/// A zlib read error without the path zlib puts in front of its message.
std::string zlibError(const std::string& path, int code, const char* msg) {
  std::string m = msg ? msg : "";
  if (m.rfind(path + ": ", 0) == 0)
    m = m.substr(path.size() + 2);
  if (code == Z_BUF_ERROR)
    return "truncated: the gzip stream ends early (" + m + ")";
  if (code == Z_DATA_ERROR)
    return "corrupt gzip data (" + m + ")";
  if (code == Z_ERRNO)
    return "read error: " + std::string(std::strerror(errno));
  return m.empty() ? "read error" : m;
}

/// One IDX file, read whole: its dims and its bytes after the header.
struct IdxFile {
  std::string path;
  std::vector<uint32_t> dims;
  std::vector<unsigned char> body;
};

/// Reads `<base>` or `<base>.gz` (gzread passes plain files through), checks
/// the magic number (unsigned bytes, `ndim` dims) and that the data is
/// exactly as long as the dims say. Reads in chunks and never past the
/// expected length plus one, so a lying header costs no memory.
bool readIdx(const std::string& base, uint32_t ndim, IdxFile& out, std::string* error) {
  struct stat st;
  std::string path = base;
  bool gz = false;
  if (::stat(path.c_str(), &st) != 0) {
    path = base + ".gz";
    gz = true;
    if (::stat(path.c_str(), &st) != 0)
      return fail(error, "cannot open " + base + " or " + path + ": " + std::strerror(errno));
  }
  out.path = path;
  if (!S_ISREG(st.st_mode))
    return fail(error, path + ": not a regular file");
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f)
    return fail(error,
                "cannot open " + path + ": " + (errno ? std::strerror(errno) : "out of memory"));
  struct Closer {
    gzFile f;
    ~Closer() { gzclose(f); }
  } closer{f};
  gzbuffer(f, 1 << 17);

  // Reads up to `n` bytes into dst; the count read, or -1 on a zlib error.
  auto readSome = [&](unsigned char* dst, size_t n, std::string* why) -> int64_t {
    size_t got = 0;
    while (got < n) {
      unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30));
      int r = gzread(f, dst + got, chunk);
      if (r <= 0) {
        int code = Z_OK;
        const char* msg = gzerror(f, &code);
        if (r == 0 && (code == Z_OK || code == Z_STREAM_END))
          break;
        *why = zlibError(path, code, msg);
        return -1;
      }
      got += static_cast<size_t>(r);
    }
    return static_cast<int64_t>(got);
  };

  std::string why;
  const char* what = gz ? " (decompressed)" : "";
  unsigned char header[4 + 4 * 3];
  size_t headerBytes = 4 + 4 * static_cast<size_t>(ndim);
  int64_t got = readSome(header, headerBytes, &why);
  if (got < 0)
    return fail(error, path + ": " + why);
  if (got < 4)
    return fail(error, path + ": truncated: " + std::to_string(got) + " bytes" + what +
                           ", too short for an IDX header");
  uint32_t magic = bigEndian32(header);
  uint32_t expected = 0x00000800u | ndim;
  if (magic != expected)
    return fail(error, path + ": bad magic number " + hex8(magic) + ", expected " + hex8(expected) +
                           (ndim == 3 ? " (IDX images: unsigned bytes, 3 dims)"
                                      : " (IDX labels: unsigned bytes, 1 dim)"));
  if (static_cast<size_t>(got) < headerBytes)
    return fail(error, path + ": truncated: " + std::to_string(got) + " bytes" + what +
                           ", the header alone needs " + std::to_string(headerBytes));
  out.dims.clear();
  uint64_t total = 1;
  for (uint32_t k = 0; k < ndim; ++k) {
    uint32_t d = bigEndian32(header + 4 + 4 * k);
    out.dims.push_back(d);
    if (d != 0 && total > (uint64_t(1) << 36) / d) // 64 GiB: a corrupt header
      return fail(error, path + ": header dims are implausibly large");
    total *= d;
  }
  if (!gz && static_cast<uint64_t>(st.st_size) != headerBytes + total)
    return fail(error, path + ": " + std::to_string(st.st_size) + " bytes, the header says " +
                           std::to_string(headerBytes + total) +
                           (static_cast<uint64_t>(st.st_size) < headerBytes + total
                                ? " (truncated)"
                                : " (trailing bytes)"));
  out.body.clear();
  size_t want = static_cast<size_t>(total);
  const size_t step = size_t(1) << 24;
  while (out.body.size() < want + 1) {
    size_t at = out.body.size();
    size_t n = std::min(step, want + 1 - at);
    out.body.resize(at + n);
    int64_t r = readSome(out.body.data() + at, n, &why);
    if (r < 0)
      return fail(error, path + ": " + why);
    out.body.resize(at + static_cast<size_t>(r));
    if (static_cast<size_t>(r) < n)
      break;
  }
  if (out.body.size() != want)
    return fail(error, path + ": " +
                           (out.body.size() < want
                                ? "truncated: " + std::to_string(headerBytes + out.body.size()) +
                                      " bytes" + what + ", the header says " +
                                      std::to_string(headerBytes + want)
                                : "trailing bytes" + std::string(what) + " after the " +
                                      std::to_string(headerBytes + want) + " the header says"));
  return true;
}

} // namespace

uint64_t hashWords(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t s = a;
  uint64_t h = splitmix64(s);
  s = h ^ b;
  h = splitmix64(s);
  s = h ^ c;
  return splitmix64(s);
}

std::vector<int64_t> shuffledOrder(int64_t n, uint64_t seed, uint64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (size_t k = 0; k < order.size(); ++k)
    order[k] = static_cast<int64_t>(k);
  uint64_t state = hashWords(seed, epoch, 0x5EED0F5EC0FFEEull);
  for (size_t k = order.size(); k > 1; --k) {
    size_t j = static_cast<size_t>(below(state, k));
    std::swap(order[k - 1], order[j]);
  }
  return order;
}

// --- DataSource ---------------------------------------------------------------

// --- EpochOrders --------------------------------------------------------------

struct EpochOrders::Cache {
  std::mutex mutex;
  uint64_t epoch[2] = {0, 0};
  std::shared_ptr<const std::vector<int64_t>> order[2]; ///< [0]: the latest
};

EpochOrders::EpochOrders(int64_t n, bool shuffle, uint64_t seed)
    : n_(n), shuffle_(shuffle), seed_(seed), cache_(std::make_unique<Cache>()) {}

EpochOrders::~EpochOrders() = default;

std::shared_ptr<const std::vector<int64_t>> EpochOrders::of(uint64_t epoch) const {
  if (!shuffle_)
    return nullptr;
  Cache& c = *cache_;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    for (int k = 0; k < 2; ++k)
      if (c.order[k] && c.epoch[k] == epoch)
        return c.order[k];
  }
  // Drawn outside the lock; two threads may both draw it, equal either way.
  auto order = std::make_shared<const std::vector<int64_t>>(shuffledOrder(n_, seed_, epoch));
  std::lock_guard<std::mutex> lock(c.mutex);
  c.order[1] = std::move(c.order[0]);
  c.epoch[1] = c.epoch[0];
  c.order[0] = order;
  c.epoch[0] = epoch;
  return order;
}

int64_t EpochOrders::at(uint64_t epoch, int64_t slot) const {
  return shuffle_ ? (*of(epoch))[static_cast<size_t>(slot)] : slot;
}

void EpochOrders::setSeed(uint64_t seed) {
  seed_ = seed;
  std::lock_guard<std::mutex> lock(cache_->mutex);
  cache_->order[0].reset();
  cache_->order[1].reset();
}

// --- DataSource ---------------------------------------------------------------

DataSource::DataSource(std::vector<int64_t> shape, int64_t examples, bool shuffle, uint64_t seed)
    : shape_(std::move(shape)), examples_(examples), orders_(examples, shuffle, seed) {}

DataSource::~DataSource() = default;

bool DataSource::batch(Position p, float* images, int64_t* labels, std::string* error,
                       std::pair<int64_t, int64_t> rows) const {
  int64_t n = batchSize(), size = imageSize();
  int64_t first = static_cast<int64_t>(p.batch) * n;
  std::shared_ptr<const std::vector<int64_t>> order = orders_.of(p.epoch);
  const int64_t end = rows.second < 0 ? n : std::min(rows.second, n);
  for (int64_t k = std::max<int64_t>(rows.first, 0); k < end; ++k)
    if (!load(order ? (*order)[static_cast<size_t>(first + k)] : first + k, p.epoch,
              images + k * size, labels + k, error))
      return false;
  return true;
}

bool DataSource::next(float* images, int64_t* labels, std::string* error) {
  bool ok = batch(pos_, images, labels, error);
  if (++pos_.batch >= static_cast<uint64_t>(batchesPerEpoch())) {
    pos_.batch = 0;
    ++pos_.epoch;
  }
  return ok;
}

bool DataSource::seek(Position p, std::string* error) {
  if (p.batch >= static_cast<uint64_t>(batchesPerEpoch()))
    return fail(error, "cannot seek to batch " + std::to_string(p.batch) + " of epoch " +
                           std::to_string(p.epoch) + ": an epoch has " +
                           std::to_string(batchesPerEpoch()) + " batches");
  pos_ = p;
  return true;
}

// --- SyntheticData ------------------------------------------------------------

SyntheticData::SyntheticData(std::vector<int64_t> shape, int64_t classes, uint64_t seed,
                             int64_t examples)
    : DataSource(std::move(shape), examples, /*shuffle=*/true, seed), classes_(classes),
      seed_(seed) {}

std::unique_ptr<SyntheticData> SyntheticData::create(const std::vector<int64_t>& shape,
                                                     int64_t classes, uint64_t seed,
                                                     int64_t examples, std::string* error) {
  if (!checkShape(shape, error))
    return nullptr;
  if (classes < 1 || classes >= (int64_t(1) << 31)) {
    fail(error,
         "synthetic data: the class count " + std::to_string(classes) + " is not in [1, 2^31)");
    return nullptr;
  }
  if (examples < shape[0]) {
    fail(error, "synthetic data: " + std::to_string(examples) +
                    " examples, fewer than the batch size " + std::to_string(shape[0]));
    return nullptr;
  }
  return std::unique_ptr<SyntheticData>(new SyntheticData(shape, classes, seed, examples));
}

bool SyntheticData::load(int64_t index, uint64_t, float* image, int64_t* label,
                         std::string*) const {
  const double twoPi = 6.283185307179586476925;
  uint64_t base = hashWords(seed_, static_cast<uint64_t>(index), 0x1A6E5ull);
  int64_t size = imageSize();
  for (int64_t j = 0; j < size; ++j) {
    uint64_t s = base ^ static_cast<uint64_t>(j) * 0xD1B54A32D192ED03ull;
    uint64_t h = splitmix64(s);
    double u1 = (static_cast<double>(h >> 32) + 1.0) * 0x1p-32; // (0, 1]
    double u2 = static_cast<double>(h & 0xFFFFFFFFu) * 0x1p-32; // [0, 1)
    image[j] = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(twoPi * u2));
  }
  uint64_t h = hashWords(seed_, static_cast<uint64_t>(index), 0x1ABE1ull);
  *label = static_cast<int64_t>(((h >> 32) * static_cast<uint64_t>(classes_)) >> 32);
  return true;
}

// --- IdxData ------------------------------------------------------------------

IdxData::IdxData(std::vector<int64_t> shape, int64_t examples, const IdxOptions& options)
    : DataSource(std::move(shape), examples, options.shuffle, options.seed) {
  for (int b = 0; b < 256; ++b)
    normalized_[b] = (static_cast<float>(b) / 255.0f - options.mean) / options.std;
}

std::unique_ptr<IdxData> IdxData::open(const std::string& dir, const std::string& split,
                                       const std::vector<int64_t>& shape, const IdxOptions& options,
                                       std::string* error) {
  if (split != "train" && split != "t10k") {
    fail(error, "IDX split '" + split + "' is neither train nor t10k");
    return nullptr;
  }
  if (!checkShape(shape, error))
    return nullptr;
  if (shape[1] != 1 && shape[1] != 3) {
    fail(error, "IDX images have 1 channel, replicated to 3 if asked; the batch shape has C = " +
                    std::to_string(shape[1]));
    return nullptr;
  }
  if (!(options.std > 0.0f) || !std::isfinite(options.std) || !std::isfinite(options.mean)) {
    fail(error, "IDX normalization: std must be positive and finite, mean finite");
    return nullptr;
  }
  if (options.maxExamples < 0) {
    fail(error, "IDX maxExamples is negative");
    return nullptr;
  }
  std::string prefix = (dir.empty() ? std::string(".") : dir) + "/" + split;
  IdxFile images, labels;
  if (!readIdx(prefix + "-images-idx3-ubyte", 3, images, error) ||
      !readIdx(prefix + "-labels-idx1-ubyte", 1, labels, error))
    return nullptr;
  uint32_t count = images.dims[0], rows = images.dims[1], cols = images.dims[2];
  if (rows == 0 || cols == 0) {
    fail(error, images.path + ": images of " + std::to_string(rows) + "x" + std::to_string(cols) +
                    " pixels");
    return nullptr;
  }
  if (labels.dims[0] != count) {
    fail(error, labels.path + ": " + std::to_string(labels.dims[0]) + " labels, but " +
                    images.path + " has " + std::to_string(count) + " images");
    return nullptr;
  }
  if (options.classes > 0)
    for (size_t k = 0; k < labels.body.size(); ++k)
      if (labels.body[k] >= options.classes) {
        fail(error, labels.path + ": label " + std::to_string(labels.body[k]) + " of example " +
                        std::to_string(k) + " is not below the class count " +
                        std::to_string(options.classes));
        return nullptr;
      }
  int64_t examples = count;
  if (options.maxExamples > 0)
    examples = std::min<int64_t>(examples, options.maxExamples);
  if (examples < shape[0]) {
    fail(error, images.path + ": " + std::to_string(examples) + " examples" +
                    (examples < count ? " (maxExamples)" : "") + ", fewer than the batch size " +
                    std::to_string(shape[0]));
    return nullptr;
  }

  std::unique_ptr<IdxData> data(new IdxData(shape, examples, options));
  data->rows_ = rows;
  data->cols_ = cols;
  size_t plane = size_t(rows) * cols;
  images.body.resize(static_cast<size_t>(examples) * plane);
  images.body.shrink_to_fit();
  labels.body.resize(static_cast<size_t>(examples));
  data->pixels_ = std::move(images.body);
  data->labels_ = std::move(labels.body);
  if (shape[2] != rows || shape[3] != cols) {
    // PyTorch's upsample_bilinear2d with align_corners=false: source
    // coordinate (dst + 0.5) * in / out - 0.5, clamped at 0, in float.
    auto taps = [](int64_t in, int64_t out) {
      std::vector<Tap> t(static_cast<size_t>(out));
      float scale = static_cast<float>(in) / static_cast<float>(out);
      for (int64_t d = 0; d < out; ++d) {
        float src = scale * (static_cast<float>(d) + 0.5f) - 0.5f;
        if (src < 0)
          src = 0;
        int64_t i0 = static_cast<int64_t>(src);
        if (i0 > in - 1)
          i0 = in - 1;
        int64_t i1 = i0 < in - 1 ? i0 + 1 : i0;
        // At the last pixel PyTorch keeps the weight and reads it twice.
        float l1 = std::min(std::max(src - static_cast<float>(i0), 0.0f), 1.0f);
        t[static_cast<size_t>(d)] = {i0, i1, 1.0f - l1, l1};
      }
      return t;
    };
    data->rowTaps_ = taps(rows, shape[2]);
    data->colTaps_ = taps(cols, shape[3]);
  }
  return data;
}

void IdxData::resize(const unsigned char* src, float* image, float* rows) const {
  const int64_t h = static_cast<int64_t>(rowTaps_.size()),
                w = static_cast<int64_t>(colTaps_.size());
  for (int64_t r = 0; r < rows_; ++r) {
    const unsigned char* in = src + r * cols_;
    float* out = rows + r * w;
    for (int64_t x = 0; x < w; ++x) {
      const Tap& tx = colTaps_[static_cast<size_t>(x)];
      out[x] = tx.l0 * normalized_[in[tx.i0]] + tx.l1 * normalized_[in[tx.i1]];
    }
  }
  for (int64_t y = 0; y < h; ++y) {
    const Tap& ty = rowTaps_[static_cast<size_t>(y)];
    const float* top = rows + ty.i0 * w;
    const float* bottom = rows + ty.i1 * w;
    float* out = image + y * w;
    const float l0 = ty.l0, l1 = ty.l1;
    for (int64_t x = 0; x < w; ++x)
      out[x] = l0 * top[x] + l1 * bottom[x];
  }
}

bool IdxData::load(int64_t index, uint64_t, float* image, int64_t* label, std::string*) const {
  const std::vector<int64_t>& s = shape();
  int64_t h = s[2], w = s[3];
  const unsigned char* src = pixels_.data() + static_cast<size_t>(index) * size_t(rows_ * cols_);
  if (rowTaps_.empty()) {
    for (int64_t k = 0; k < h * w; ++k)
      image[k] = normalized_[src[k]];
  } else {
    // Scratch for the rows resized along x, one per thread.
    thread_local std::vector<float> rows;
    rows.resize(static_cast<size_t>(rows_ * w));
    resize(src, image, rows.data());
  }
  for (int64_t c = 1; c < s[1]; ++c)
    std::memcpy(image + c * h * w, image, static_cast<size_t>(h * w) * sizeof(float));
  *label = labels_[static_cast<size_t>(index)];
  return true;
}

} // namespace lwrt
