// The CPU backend's step runner: host memory, phases run on the calling
// thread, whose kernels use the trainer's --threads (lwrt/cpu_threads.h).
#include "lwrt/cpu_tensor.h"
#include "lwrt/cpu_threads.h"
#include "lwrt/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

namespace lwrt::cpu {

namespace {

class CpuRunner final : public StepRunner {
public:
  std::string description() const override {
    return "CPU, " + std::to_string(threadBudget()) + " threads";
  }
  void* allocate(int64_t bytes, std::string* error) override {
    size_t rounded = 0;
    void* p = zeroed(bytes, &rounded, error);
    if (!p)
      return nullptr;
    std::lock_guard<std::mutex> lock(memoryMutex_);
    allocated_[p] = static_cast<int64_t>(rounded);
    inUse_ += static_cast<int64_t>(rounded);
    return p;
  }
  void release(void* memory) override {
    {
      std::lock_guard<std::mutex> lock(memoryMutex_);
      auto it = allocated_.find(memory);
      if (it != allocated_.end()) {
        inUse_ -= it->second;
        allocated_.erase(it);
      }
    }
    std::free(memory);
  }
  int64_t memoryInUse() const override {
    std::lock_guard<std::mutex> lock(memoryMutex_);
    return inUse_;
  }
  bool upload(void* dst, const void* src, int64_t bytes, std::string*) override {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
    return true;
  }
  bool download(void* dst, const void* src, int64_t bytes, std::string*) override {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
    return true;
  }
  // The step runs on the calling thread: every copy is done when it returns.
  // Host memory is not the device's: not counted in memoryInUse().
  void* allocateHost(int64_t bytes, std::string* error) override {
    size_t rounded = 0;
    return zeroed(bytes, &rounded, error);
  }
  void releaseHost(void* memory) override { std::free(memory); }
  bool readsHostMemory() const override { return true; }
  bool downloadAsync(void* dst, const void* src, int64_t bytes, std::string* error) override {
    return download(dst, src, bytes, error);
  }
  bool fence(int64_t* id, std::string*) override {
    *id = fences_++;
    return true;
  }
  bool waitFence(int64_t, std::string*) override { return true; }

  bool run(int, const std::function<bool(std::string*)>& launch, std::string* error) override {
    if (threads() != threadBudget())
      setThreads(threadBudget());
    return launch(error);
  }
  std::string takeDeviceError() override { return ""; }
  // One multiply and one add per element, the weight rounded to the type:
  // cuda/EmaKernels.cu's arithmetic.
  bool emaUpdate(void* ema, const void* value, int64_t count, DType type, double weight,
                 std::string* error) override {
    if (type == DType::F32)
      lerp(static_cast<float*>(ema), static_cast<const float*>(value), count,
           static_cast<float>(weight));
    else if (type == DType::F64)
      lerp(static_cast<double*>(ema), static_cast<const double*>(value), count, weight);
    else if (error)
      *error = "the weights' moving average: averages F32 or F64 params";
    return type == DType::F32 || type == DType::F64;
  }

  void startMarks() override {
    marks_.clear();
    last_ = std::chrono::steady_clock::now();
  }
  void mark(const char* op) override {
    auto now = std::chrono::steady_clock::now();
    marks_.emplace_back(op, std::chrono::duration<double, std::milli>(now - last_).count());
    last_ = now;
  }
  std::vector<std::pair<const char*, double>> takeMarks() override { return std::move(marks_); }

private:
  /// Zeroed memory of `bytes` rounded up to 256 (`*rounded`), 256-aligned.
  static void* zeroed(int64_t bytes, size_t* rounded, std::string* error) {
    *rounded = static_cast<size_t>((std::max<int64_t>(bytes, 1) + 255) / 256 * 256);
    void* p = std::aligned_alloc(256, *rounded);
    if (!p) {
      if (error)
        *error = "cannot allocate " + std::to_string(bytes) + " bytes";
      return nullptr;
    }
    std::memset(p, 0, *rounded);
    return p;
  }
  mutable std::mutex memoryMutex_;
  std::map<void*, int64_t> allocated_;
  int64_t inUse_ = 0;
  template <typename T> static void lerp(T* ema, const T* value, int64_t n, T weight) {
    for (int64_t i = 0; i < n; ++i) {
      const T e = ema[i];
      ema[i] = e + weight * (value[i] - e);
    }
  }

  int64_t fences_ = 0;
  std::vector<std::pair<const char*, double>> marks_;
  std::chrono::steady_clock::time_point last_;
};

} // namespace

bool setStream(int64_t stream) { return stream >= 0; }
bool recordEvent(int64_t event) { return event >= 0; }
bool waitEvent(int64_t event) { return event >= 0; }

std::unique_ptr<StepRunner> createRunner(const RunnerOptions& options, std::string*) {
  setThreadBudget(options.threads);
  return std::make_unique<CpuRunner>();
}

} // namespace lwrt::cpu
