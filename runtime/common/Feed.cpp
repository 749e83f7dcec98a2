// The trainer's input pipeline: batches prepared ahead of the step on their
// own threads into the runner's host buffers, synthetic inputs drawn by a
// counter-based generator, and the input layout of a classifier.
#include "lwrt/feed.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

namespace lwrt {

namespace {

int64_t numelOf(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// splitmix64's finalizer: a bijective mix of 64 bits.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

/// Element k of a stream: the mix of a Weyl sequence, as splitmix64 draws.
inline uint64_t streamAt(uint64_t base, int64_t k) {
  return mix64(base + static_cast<uint64_t>(k + 1) * kGolden);
}

/// Four 16-bit uniforms summed, centered and scaled to unit variance: an
/// Irwin-Hall approximation of a standard normal in [-3.47, 3.47].
inline float normalOf(uint64_t h) {
  constexpr float kScale = 1.0f / 37837.23f; // 1 / sqrt((65536^2 - 1) / 3)
  int64_t sum =
      static_cast<int64_t>((h & 0xFFFF) + ((h >> 16) & 0xFFFF) + ((h >> 32) & 0xFFFF) + (h >> 48)) -
      131070;
  return static_cast<float>(sum) * kScale;
}

template <typename T> void fillNormal(unsigned char* dst, int64_t n, uint64_t base) {
  T* out = reinterpret_cast<T*>(dst);
  for (int64_t k = 0; k < n; ++k)
    out[k] = static_cast<T>(normalOf(streamAt(base, k)));
}

template <typename T>
void fillClasses(unsigned char* dst, int64_t n, uint64_t base, int64_t classes) {
  T* out = reinterpret_cast<T*>(dst);
  for (int64_t k = 0; k < n; ++k)
    out[k] = static_cast<T>(((streamAt(base, k) >> 32) * static_cast<uint64_t>(classes)) >> 32);
}

} // namespace

std::optional<ImageLayout> imageLayout(const ModelInfo& m, std::string& why) {
  ImageLayout l;
  for (const InputInfo& in : m.inputs) {
    if (in.isLabel) {
      if (l.label) {
        why = "the model has more than one label input";
        return std::nullopt;
      }
      l.label = &in;
    } else {
      if (l.image) {
        why = "the model has more than one data input";
        return std::nullopt;
      }
      l.image = &in;
    }
  }
  if (!l.image || !l.label) {
    why = "the model needs one image input and one label input";
    return std::nullopt;
  }
  if (m.classes <= 0) {
    why = "the loss is not a classification loss (softmax cross-entropy)";
    return std::nullopt;
  }
  if ((l.image->dtype != DType::F32 && l.image->dtype != DType::F64) ||
      (l.label->dtype != DType::I64 && l.label->dtype != DType::I32)) {
    why = "the image input must be float and the labels integers";
    return std::nullopt;
  }
  const std::vector<int64_t>& s = l.image->shape;
  if (s.size() == 4) {
    l.shape = s;
  } else if (s.size() == 2) {
    int64_t side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(s[1]))));
    if (side * side != s[1]) {
      why = "the image input [N, " + std::to_string(s[1]) + "] is not a flattened square image";
      return std::nullopt;
    }
    l.shape = {s[0], 1, side, side};
  } else {
    why = "the image input has rank " + std::to_string(s.size()) + ", not 4 ([N,C,H,W]) or 2";
    return std::nullopt;
  }
  if (l.label->shape.size() != 1 || l.label->shape[0] != l.shape[0]) {
    why = "the label input is not [N]";
    return std::nullopt;
  }
  return l;
}

void storeBatch(const ImageLayout& l, const float* images, const int64_t* labels,
                unsigned char* inputs) {
  int64_t n = numelOf(l.shape);
  unsigned char* img = inputs + l.image->offset;
  if (l.image->dtype == DType::F32) {
    if (static_cast<const void*>(img) != static_cast<const void*>(images))
      std::memcpy(img, images, static_cast<size_t>(n) * 4);
  } else {
    for (int64_t k = 0; k < n; ++k) {
      double v = images[k];
      std::memcpy(img + 8 * k, &v, 8);
    }
  }
  unsigned char* lab = inputs + l.label->offset;
  for (int64_t k = 0; k < l.shape[0]; ++k) {
    if (l.label->dtype == DType::I64) {
      std::memcpy(lab + 8 * k, &labels[k], 8);
    } else {
      int32_t v = static_cast<int32_t>(labels[k]);
      std::memcpy(lab + 4 * k, &v, 4);
    }
  }
}

void fillSyntheticInputs(const ModelInfo& m, unsigned char* inputs, uint64_t seed, uint64_t index) {
  uint64_t batch = mix64(mix64(seed + kGolden) ^ (index * 0xD1B54A32D192ED03ull));
  for (size_t j = 0; j < m.inputs.size(); ++j) {
    const InputInfo& in = m.inputs[j];
    int64_t n = numelOf(in.shape);
    unsigned char* p = inputs + in.offset;
    uint64_t base = mix64(batch ^ ((j + 1) * 0xA0761D6478BD642Full));
    int64_t classes = m.classes > 0 ? m.classes : 2;
    switch (in.dtype) {
    case DType::I64:
      fillClasses<int64_t>(p, n, base, classes);
      break;
    case DType::I32:
      fillClasses<int32_t>(p, n, base, classes);
      break;
    case DType::F64:
      fillNormal<double>(p, n, base);
      break;
    default:
      fillNormal<float>(p, n, base);
      break;
    }
  }
}

namespace {

/// Host buffers of the runner, released with the feed.
class HostBuffers {
public:
  explicit HostBuffers(StepRunner& runner) : runner_(runner) {}
  ~HostBuffers() {
    for (unsigned char* b : buffers_)
      runner_.releaseHost(b);
  }
  bool allocate(size_t count, int64_t bytes, std::string* error) {
    for (size_t k = 0; k < count; ++k) {
      void* p = runner_.allocateHost(bytes, error);
      if (!p) {
        if (error)
          *error = "input buffers: " + *error;
        return false;
      }
      buffers_.push_back(static_cast<unsigned char*>(p));
    }
    return true;
  }
  unsigned char* operator[](size_t k) const { return buffers_[k]; }

private:
  StepRunner& runner_;
  std::vector<unsigned char*> buffers_;
};

class PrefetchFeed final : public BatchFeed {
public:
  PrefetchFeed(StepRunner& runner, FillFn fill, int64_t first, int64_t end, int depth)
      : buffers_(runner), fill_(std::move(fill)), end_(end), depth_(depth), next_(first),
        released_(first), ready_(static_cast<size_t>(depth), -1),
        errors_(static_cast<size_t>(depth)) {}

  ~PrefetchFeed() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    for (std::thread& t : threads_)
      t.join();
  }

  bool start(int64_t bytes, int threads, std::string* error) {
    if (!buffers_.allocate(static_cast<size_t>(depth_), bytes, error))
      return false;
    for (int k = 0; k < threads; ++k)
      threads_.emplace_back([this] { work(); });
    return true;
  }

  const unsigned char* acquire(int64_t step, std::string* error) override {
    if (step >= end_) {
      if (error)
        *error = "step " + std::to_string(step) + " is past the steps this feed prepares";
      return nullptr;
    }
    size_t slot = static_cast<size_t>(step % depth_);
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return ready_[slot] == step; });
    if (!errors_[slot].empty()) {
      if (error)
        *error = errors_[slot];
      return nullptr;
    }
    return buffers_[slot];
  }

  void release(int64_t step) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      released_ = std::max(released_, step + 1);
    }
    changed_.notify_all();
  }

private:
  /// Claims the next step whose buffer is free, fills it, marks it ready.
  void work() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return stop_ || (next_ < end_ && next_ < released_ + depth_); });
      if (stop_)
        return;
      int64_t step = next_++;
      size_t slot = static_cast<size_t>(step % depth_);
      lock.unlock();
      std::string error;
      bool ok = fill_(step, buffers_[slot], &error);
      lock.lock();
      errors_[slot] = ok ? "" : error.empty() ? "preparing the batch failed" : error;
      ready_[slot] = step;
      changed_.notify_all();
    }
  }

  HostBuffers buffers_;
  FillFn fill_;
  const int64_t end_;
  const int depth_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stop_ = false;
  int64_t next_;                    ///< the next step to claim
  int64_t released_;                ///< every step below it is released
  std::vector<int64_t> ready_;      ///< per buffer: the step it holds, once filled
  std::vector<std::string> errors_; ///< per buffer: why filling it failed
  std::vector<std::thread> threads_;
};

class PoolFeed final : public BatchFeed {
public:
  PoolFeed(StepRunner& runner, int64_t batches) : buffers_(runner), batches_(batches) {}

  bool fill(int64_t bytes, const FillFn& fill, int threads, std::string* error) {
    if (!buffers_.allocate(static_cast<size_t>(batches_), bytes, error))
      return false;
    std::atomic<int64_t> next{0};
    std::mutex mutex;
    std::string failed;
    auto work = [&] {
      for (int64_t k; (k = next++) < batches_;) {
        std::string e;
        if (!fill(k, buffers_[static_cast<size_t>(k)], &e)) {
          std::lock_guard<std::mutex> lock(mutex);
          if (failed.empty())
            failed = e.empty() ? "preparing a batch failed" : e;
        }
      }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t)
      pool.emplace_back(work);
    work();
    for (std::thread& t : pool)
      t.join();
    if (!failed.empty() && error)
      *error = failed;
    return failed.empty();
  }

  const unsigned char* acquire(int64_t step, std::string*) override {
    return buffers_[static_cast<size_t>(step % batches_)];
  }
  void release(int64_t) override {}

private:
  HostBuffers buffers_;
  int64_t batches_;
};

} // namespace

std::unique_ptr<BatchFeed> createPrefetchFeed(StepRunner& runner, int64_t bytes, FillFn fill,
                                              int64_t first, int64_t end,
                                              const FeedOptions& options, std::string* error) {
  auto feed = std::make_unique<PrefetchFeed>(runner, std::move(fill), first, end,
                                             std::max(2, options.depth));
  if (!feed->start(bytes, std::max(1, options.threads), error))
    return nullptr;
  return feed;
}

std::unique_ptr<BatchFeed> createPoolFeed(StepRunner& runner, int64_t bytes, FillFn fill,
                                          int64_t batches, const FeedOptions& options,
                                          std::string* error) {
  auto feed = std::make_unique<PoolFeed>(runner, std::max<int64_t>(1, batches));
  if (!feed->fill(bytes, fill, std::max(1, options.threads), error))
    return nullptr;
  return feed;
}

std::unique_ptr<BatchFeed> createExampleFeed(StepRunner& runner, int64_t bytes,
                                             const InputBatches& data, int64_t batches,
                                             const FeedOptions& options, std::string* error) {
  const InputBatches* source = &data;
  return createPrefetchFeed(
      runner, bytes,
      [source](int64_t b, unsigned char* dst, std::string* e) {
        return source->examples(b * source->batchSize(), dst, e);
      },
      0, batches, options, error);
}

namespace {

/// A DataSource's float images and int64 labels stored in the model's
/// input types.
class ImageBatches final : public InputBatches {
public:
  ImageBatches(const ImageLayout& layout, std::unique_ptr<DataSource> data)
      : layout_(layout), data_(std::move(data)) {}

  int64_t batchSize() const override { return data_->batchSize(); }
  int64_t numExamples() const override { return data_->numExamples(); }
  void setSeed(uint64_t seed) override { data_->setSeed(seed); }

  bool batch(DataSource::Position p, unsigned char* inputs, std::string* error,
             std::pair<int64_t, int64_t> rows) const override {
    return store(inputs, [&](float* images, int64_t* labels) {
      return data_->batch(p, images, labels, error, rows);
    });
  }

  bool examples(int64_t first, unsigned char* inputs, std::string* error) const override {
    const int64_t n = data_->batchSize(), size = data_->imageSize();
    const int64_t count = data_->numExamples();
    return store(inputs, [&](float* images, int64_t* labels) {
      for (int64_t k = 0; k < n; ++k)
        if (!data_->example((first + k) % count, images + k * size, labels + k, error))
          return false;
      return true;
    });
  }

private:
  /// Runs `load` on float images (the input buffer's own when the image
  /// input is float32) and int64 labels, then stores them in the layout.
  template <typename Load> bool store(unsigned char* inputs, Load&& load) const {
    thread_local std::vector<int64_t> labels;
    thread_local std::vector<float> images;
    labels.assign(static_cast<size_t>(data_->batchSize()), 0);
    float* img = reinterpret_cast<float*>(inputs + layout_.image->offset);
    if (layout_.image->dtype != DType::F32) { // converted from floats
      images.assign(static_cast<size_t>(numelOf(layout_.shape)), 0.0f);
      img = images.data();
    }
    if (!load(img, labels.data()))
      return false;
    storeBatch(layout_, img, labels.data(), inputs);
    return true;
  }

  ImageLayout layout_;
  std::unique_ptr<DataSource> data_;
};

} // namespace

std::unique_ptr<InputBatches> imageBatches(const ImageLayout& layout,
                                           std::unique_ptr<DataSource> data) {
  return std::make_unique<ImageBatches>(layout, std::move(data));
}

} // namespace lwrt
