// The CPU backend's devices, streams and events: one worker thread per
// stream, events as (recorded, completed) generation counters.
#include "lwrt/device.h"

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace lwrt {

namespace {

class CpuEvent : public Event {
public:
  /// Called when a record is launched: the generation it will complete.
  uint64_t nextGeneration() {
    std::lock_guard<std::mutex> lock(mu_);
    return ++recorded_;
  }
  uint64_t latestRecorded() {
    std::lock_guard<std::mutex> lock(mu_);
    return recorded_;
  }
  void complete(uint64_t generation) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      completed_ = std::max(completed_, generation);
    }
    cv_.notify_all();
  }
  void waitFor(uint64_t generation) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return completed_ >= generation; });
  }

private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t recorded_ = 0, completed_ = 0;
};

class CpuStream : public Stream {
public:
  CpuStream() : worker_([this] { run(); }) {}
  ~CpuStream() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  void launch(std::function<void()> work) override { push(std::move(work)); }

  void record(Event& event) override {
    auto& e = static_cast<CpuEvent&>(event);
    uint64_t generation = e.nextGeneration();
    push([&e, generation] { e.complete(generation); });
  }

  void wait(Event& event) override {
    auto& e = static_cast<CpuEvent&>(event);
    uint64_t generation = e.latestRecorded();
    if (generation == 0)
      return;
    push([&e, generation] { e.waitFor(generation); });
  }

  std::string synchronize() override {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [&] { return queue_.empty() && !busy_; });
    std::string error = error_;
    error_.clear();
    return error;
  }

private:
  void push(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(task));
    }
    cv_.notify_all();
  }

  void run() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty())
          return; // stopping, and everything launched has run
        task = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
      }
      std::string failure;
      try {
        task();
      } catch (const std::exception& e) {
        failure = e.what();
      } catch (...) {
        failure = "unknown error";
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        busy_ = false;
        if (!failure.empty() && error_.empty())
          error_ = failure;
      }
      idle_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_, idle_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false, stopping_ = false;
  std::string error_;
  std::thread worker_; // last: starts after the members it uses exist
};

class CpuDevice : public Device {
public:
  explicit CpuDevice(int index) : index_(index) {}
  int index() const override { return index_; }
  void* allocate(int64_t bytes) override {
    if (bytes < 0)
      return nullptr;
    size_t rounded = static_cast<size_t>((bytes + 255) / 256 * 256);
    return std::aligned_alloc(256, rounded == 0 ? 256 : rounded);
  }
  void release(void* memory) override { std::free(memory); }
  std::unique_ptr<Stream> createStream() override { return std::make_unique<CpuStream>(); }
  std::unique_ptr<Event> createEvent() override { return std::make_unique<CpuEvent>(); }
  void copyFromHost(void* dst, const void* src, int64_t bytes, Stream& stream) override {
    stream.launch([=] { std::memcpy(dst, src, static_cast<size_t>(bytes)); });
  }
  void copyToHost(void* dst, const void* src, int64_t bytes, Stream& stream) override {
    stream.launch([=] { std::memcpy(dst, src, static_cast<size_t>(bytes)); });
  }

private:
  int index_;
};

/// The rendezvous of one collective: participants arrive on their streams'
/// threads; the last to arrive combines the buffers, then all leave.
class Rendezvous {
public:
  Rendezvous(size_t n, std::function<void()> combine) : n_(n), combine_(std::move(combine)) {}
  void arrive() {
    std::unique_lock<std::mutex> lock(mu_);
    if (++arrived_ == n_) {
      combine_();
      done_ = true;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return done_; });
  }

private:
  std::mutex mu_;
  std::condition_variable cv_;
  size_t n_, arrived_ = 0;
  bool done_ = false;
  std::function<void()> combine_;
};

bool fits(const CollectiveBuffers& c) {
  if (c.buffers.empty() || c.buffers.size() != c.streams.size())
    return false;
  for (size_t k = 0; k < c.buffers.size(); ++k)
    if (!c.streams[k] || c.buffers[k].dtype != c.buffers[0].dtype ||
        c.buffers[k].shape != c.buffers[0].shape ||
        (c.buffers[k].data == nullptr && c.buffers[k].numel() != 0))
      return false;
  return true;
}

template <typename T> void sumInto(const std::vector<TensorView>& bs) {
  const int64_t n = bs[0].numel();
  for (int64_t i = 0; i < n; ++i) {
    T total = 0; // in device order, so every run adds in the same order
    for (const TensorView& b : bs)
      total += b.as<T>()[i];
    for (const TensorView& b : bs)
      b.as<T>()[i] = total;
  }
}

void launchAll(const CollectiveBuffers& c, std::function<void()> combine) {
  auto r = std::make_shared<Rendezvous>(c.buffers.size(), std::move(combine));
  for (Stream* s : c.streams)
    s->launch([r] { r->arrive(); });
}

class CpuBackend : public Backend {
public:
  explicit CpuBackend(int n) {
    for (int i = 0; i < n; ++i)
      devices_.push_back(std::make_unique<CpuDevice>(i));
  }
  std::string name() const override { return "cpu"; }
  int numDevices() const override { return static_cast<int>(devices_.size()); }
  Device& device(int index) override { return *devices_.at(static_cast<size_t>(index)); }

  bool allReduceSum(const CollectiveBuffers& c) override {
    if (!fits(c))
      return false;
    DType t = c.buffers[0].dtype;
    if (t != DType::F32 && t != DType::F64)
      return false;
    std::vector<TensorView> bs = c.buffers;
    launchAll(c, [bs, t] { t == DType::F32 ? sumInto<float>(bs) : sumInto<double>(bs); });
    return true;
  }

  bool broadcast(const CollectiveBuffers& c, int root) override {
    if (!fits(c) || root < 0 || static_cast<size_t>(root) >= c.buffers.size())
      return false;
    std::vector<TensorView> bs = c.buffers;
    launchAll(c, [bs, root] {
      for (size_t k = 0; k < bs.size(); ++k)
        if (static_cast<int>(k) != root && bs[k].bytes() > 0)
          std::memcpy(bs[k].data, bs[static_cast<size_t>(root)].data,
                      static_cast<size_t>(bs[k].bytes()));
    });
    return true;
  }

private:
  std::vector<std::unique_ptr<CpuDevice>> devices_;
};

} // namespace

std::unique_ptr<Backend> createCpuBackend(int numDevices) {
  if (numDevices < 1)
    throw std::invalid_argument("createCpuBackend: at least one device");
  return std::make_unique<CpuBackend>(numDevices);
}

} // namespace lwrt
