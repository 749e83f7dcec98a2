// The CPU backend's multi-device step: a worker thread per (device, stream)
// runs that stream's functions of the step; communication ops are
// rendezvous of their participants, events are per-step generation
// counters. Threads synchronize only through the mutex of the op or event
// they share (and the step's start and end), so a wait missing from a
// generated step is a data race that ThreadSanitizer reports. A profiled
// step gives each thread its (device, stream)'s recorder (lwrt/profile.h):
// a blocked wait for an event, and a participant's wait for the last one to
// arrive at a communication op, are waits the recorder leaves out of the
// ops' times; a blocked wait also notes the thread's wake-up after the
// record.
#include "lwrt/comm.h"

#include "lwrt/cpu_threads.h"
#include "lwrt/profile.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

namespace lwrt::cpu {

namespace {

enum class Kind : uint8_t {
  AllReduce,
  AllGather,
  ReduceScatter,
  Broadcast,
  ReduceTo,
  DeviceCopy,
  Shard,
  Unshard
};

/// What every participant of a communication op must agree on.
struct Signature {
  Kind kind = Kind::AllReduce;
  std::vector<int64_t> devices;
  int64_t src = -1, dst = -1; ///< -1: the op has none
  int64_t axis = 0;
  std::vector<int64_t> sizes;

  bool operator==(const Signature& o) const {
    return kind == o.kind && devices == o.devices && src == o.src && dst == o.dst &&
           axis == o.axis && sizes == o.sizes;
  }
  /// The devices that call the op: `devices`, src and dst.
  std::vector<int64_t> participants() const {
    std::vector<int64_t> p = devices;
    if (src >= 0)
      p.push_back(src);
    if (dst >= 0)
      p.push_back(dst);
    std::sort(p.begin(), p.end());
    p.erase(std::unique(p.begin(), p.end()), p.end());
    return p;
  }
};

/// One device's views of an op (in and out: one each, or a bucket's).
struct Part {
  std::vector<TensorView> in, out;
  bool hasIn = false, hasOut = false;
};

using Parts = std::vector<const Part*>; ///< by device; null: not a participant

/// A communication op's meeting point, reused every step.
struct OpSlot {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t generation = 0; ///< of the arrivals below
  size_t arrived = 0, expected = 0;
  bool mismatch = false;
  Signature sig;
  std::vector<Part> parts;   ///< by device
  std::vector<bool> present; ///< by device
  uint64_t doneGeneration = 0;
  bool ok = false;
  /// When the last participant arrived (the op's work starts there).
  std::chrono::steady_clock::time_point lastArrival;
};

struct EventSlot {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0; ///< the generation of the step that last recorded it
  std::chrono::steady_clock::time_point recordedAt; ///< when (for a profile's wake-ups)
};

/// A thread running one posted task at a time.
class Worker {
public:
  Worker() : thread_([this] { loop(); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      task_ = std::move(task);
    }
    cv_.notify_all();
  }

private:
  void loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || task_; });
        if (!task_)
          return;
        task = std::move(task_);
        task_ = nullptr;
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> task_;
  bool stopping_ = false;
  std::thread thread_; // last: starts after the members it uses exist
};

bool isSumType(DType t) { return t == DType::F32 || t == DType::F64; }

bool usable(const TensorView& v) { return v.data != nullptr || v.numel() == 0; }

bool sameType(const TensorView& a, const TensorView& b) {
  return a.dtype == b.dtype && a.shape == b.shape;
}

/// `whole` with dim `axis` set to `rows`.
std::vector<int64_t> withDim(std::vector<int64_t> whole, int64_t axis, int64_t rows) {
  whole[static_cast<size_t>(axis)] = rows;
  return whole;
}

/// Copies `rows` entries of dim `axis` from `src` (from entry srcRow) to
/// `dst` (from entry dstRow); the other dims are those of `src`.
void copyRows(const unsigned char* src, const std::vector<int64_t>& srcShape, int64_t srcRow,
              unsigned char* dst, int64_t dstRows, int64_t dstRow, int64_t axis, int64_t rows,
              int64_t elemBytes) {
  int64_t outer = 1, inner = elemBytes;
  for (int64_t d = 0; d < axis; ++d)
    outer *= srcShape[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < srcShape.size(); ++d)
    inner *= srcShape[d];
  const int64_t srcRows = srcShape[static_cast<size_t>(axis)];
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + (o * dstRows + dstRow) * inner, src + (o * srcRows + srcRow) * inner,
                static_cast<size_t>(rows * inner));
}

/// Into `sum`: the element-wise sum of `views` in their order (the first
/// one copied, the others added), as the reference interpreter adds.
template <typename T> void sumViews(const std::vector<const TensorView*>& views, T* sum) {
  const int64_t n = views[0]->numel();
  const T* first = views[0]->as<const T>();
  for (int64_t i = 0; i < n; ++i)
    sum[i] = first[i];
  for (size_t v = 1; v < views.size(); ++v) {
    const T* x = views[v]->as<const T>();
    for (int64_t i = 0; i < n; ++i)
      sum[i] += x[i];
  }
}

std::vector<unsigned char> sumOf(const std::vector<const TensorView*>& views) {
  std::vector<unsigned char> sum(static_cast<size_t>(views[0]->bytes()));
  if (views[0]->dtype == DType::F32)
    sumViews(views, reinterpret_cast<float*>(sum.data()));
  else
    sumViews(views, reinterpret_cast<double*>(sum.data()));
  return sum;
}

void copyOut(const std::vector<unsigned char>& bytes, const TensorView& out) {
  if (!bytes.empty())
    std::memcpy(out.data, bytes.data(), bytes.size());
}

/// Checks that the views of `sizes[i]` entries of `axis` on each device
/// concatenate into `whole`: same element type and rank, the other dims
/// equal.
bool piecesFit(const Signature& s, const std::vector<const TensorView*>& pieces,
               const TensorView& whole) {
  if (s.sizes.size() != s.devices.size() || s.axis < 0 || s.axis >= whole.rank())
    return false;
  int64_t total = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (s.sizes[i] < 0 || !usable(*pieces[i]) || pieces[i]->dtype != whole.dtype ||
        pieces[i]->shape != withDim(whole.shape, s.axis, s.sizes[i]))
      return false;
    total += s.sizes[i];
  }
  return total == whole.shape[static_cast<size_t>(s.axis)];
}

/// The views `which` (in or out) of `devices`' parts; false when one is
/// missing.
bool viewsOf(const Parts& parts, const std::vector<int64_t>& devices, bool in,
             std::vector<const TensorView*>& views) {
  views.clear();
  for (int64_t d : devices) {
    const Part* p = parts[static_cast<size_t>(d)];
    const std::vector<TensorView>& v = in ? p->in : p->out;
    if (!(in ? p->hasIn : p->hasOut) || v.size() != 1 || !usable(v[0]))
      return false;
    views.push_back(&v[0]);
  }
  return true;
}

bool performAllReduce(const Signature& s, const Parts& parts) {
  const Part& first = *parts[static_cast<size_t>(s.devices[0])];
  const size_t k = first.in.size();
  for (int64_t d : s.devices) {
    const Part& p = *parts[static_cast<size_t>(d)];
    if (p.in.size() != k || p.out.size() != k)
      return false;
    for (size_t t = 0; t < k; ++t)
      if (!isSumType(p.in[t].dtype) || !sameType(p.in[t], first.in[t]) ||
          !sameType(p.out[t], first.in[t]) || !usable(p.in[t]) || !usable(p.out[t]))
        return false;
  }
  for (size_t t = 0; t < k; ++t) {
    std::vector<const TensorView*> ins;
    for (int64_t d : s.devices)
      ins.push_back(&parts[static_cast<size_t>(d)]->in[t]);
    std::vector<unsigned char> sum = sumOf(ins); // outputs may alias inputs
    for (int64_t d : s.devices)
      copyOut(sum, parts[static_cast<size_t>(d)]->out[t]);
  }
  return true;
}

bool performAllGather(const Signature& s, const Parts& parts) {
  std::vector<const TensorView*> ins, outs;
  if (!viewsOf(parts, s.devices, true, ins) || !viewsOf(parts, s.devices, false, outs))
    return false;
  for (const TensorView* o : outs)
    if (!sameType(*o, *outs[0]))
      return false;
  if (!piecesFit(s, ins, *outs[0]))
    return false;
  const TensorView& whole = *outs[0];
  std::vector<unsigned char> all(static_cast<size_t>(whole.bytes()));
  int64_t row = 0, rows = whole.shape[static_cast<size_t>(s.axis)];
  for (size_t i = 0; i < ins.size(); ++i) {
    copyRows(static_cast<const unsigned char*>(ins[i]->data), ins[i]->shape, 0, all.data(), rows,
             row, s.axis, s.sizes[i], dtypeSize(whole.dtype));
    row += s.sizes[i];
  }
  for (const TensorView* o : outs)
    copyOut(all, *o);
  return true;
}

bool performReduceScatter(const Signature& s, const Parts& parts) {
  std::vector<const TensorView*> ins, outs;
  if (!viewsOf(parts, s.devices, true, ins) || !viewsOf(parts, s.devices, false, outs))
    return false;
  for (const TensorView* in : ins)
    if (!isSumType(in->dtype) || !sameType(*in, *ins[0]))
      return false;
  if (!piecesFit(s, outs, *ins[0]))
    return false;
  std::vector<unsigned char> sum = sumOf(ins);
  const TensorView& whole = *ins[0];
  int64_t row = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (outs[i]->numel() > 0)
      copyRows(sum.data(), whole.shape, row, static_cast<unsigned char*>(outs[i]->data), s.sizes[i],
               0, s.axis, s.sizes[i], dtypeSize(whole.dtype));
    row += s.sizes[i];
  }
  return true;
}

/// broadcast, device_copy: `in` on src to `out` on each of `devices`.
bool performCopy(const Signature& s, const Parts& parts) {
  std::vector<const TensorView*> in, outs;
  if (!viewsOf(parts, {s.src}, true, in) || !viewsOf(parts, s.devices, false, outs))
    return false;
  for (const TensorView* o : outs)
    if (!sameType(*o, *in[0]))
      return false;
  std::vector<unsigned char> bytes(static_cast<size_t>(in[0]->bytes()));
  if (!bytes.empty())
    std::memcpy(bytes.data(), in[0]->data, bytes.size());
  for (const TensorView* o : outs)
    copyOut(bytes, *o);
  return true;
}

bool performReduceTo(const Signature& s, const Parts& parts) {
  std::vector<const TensorView*> ins, out;
  if (!viewsOf(parts, s.devices, true, ins) || !viewsOf(parts, {s.dst}, false, out))
    return false;
  for (const TensorView* in : ins)
    if (!isSumType(in->dtype) || !sameType(*in, *ins[0]))
      return false;
  if (!sameType(*out[0], *ins[0]))
    return false;
  copyOut(sumOf(ins), *out[0]);
  return true;
}

bool performShard(const Signature& s, const Parts& parts) {
  std::vector<const TensorView*> in, outs;
  if (!viewsOf(parts, {s.src}, true, in) || !viewsOf(parts, s.devices, false, outs) ||
      !piecesFit(s, outs, *in[0]))
    return false;
  const TensorView& whole = *in[0];
  std::vector<unsigned char> bytes(static_cast<size_t>(whole.bytes()));
  if (!bytes.empty())
    std::memcpy(bytes.data(), whole.data, bytes.size());
  int64_t row = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (outs[i]->numel() > 0)
      copyRows(bytes.data(), whole.shape, row, static_cast<unsigned char*>(outs[i]->data),
               s.sizes[i], 0, s.axis, s.sizes[i], dtypeSize(whole.dtype));
    row += s.sizes[i];
  }
  return true;
}

bool performUnshard(const Signature& s, const Parts& parts) {
  std::vector<const TensorView*> ins, out;
  if (!viewsOf(parts, s.devices, true, ins) || !viewsOf(parts, {s.dst}, false, out) ||
      !piecesFit(s, ins, *out[0]))
    return false;
  const TensorView& whole = *out[0];
  std::vector<unsigned char> all(static_cast<size_t>(whole.bytes()));
  int64_t row = 0, rows = whole.shape[static_cast<size_t>(s.axis)];
  for (size_t i = 0; i < ins.size(); ++i) {
    copyRows(static_cast<const unsigned char*>(ins[i]->data), ins[i]->shape, 0, all.data(), rows,
             row, s.axis, s.sizes[i], dtypeSize(whole.dtype));
    row += s.sizes[i];
  }
  copyOut(all, whole);
  return true;
}

bool perform(const Signature& s, const Parts& parts) {
  switch (s.kind) {
  case Kind::AllReduce:
    return performAllReduce(s, parts);
  case Kind::AllGather:
    return performAllGather(s, parts);
  case Kind::ReduceScatter:
    return performReduceScatter(s, parts);
  case Kind::Broadcast:
  case Kind::DeviceCopy:
    return performCopy(s, parts);
  case Kind::ReduceTo:
    return performReduceTo(s, parts);
  case Kind::Shard:
    return performShard(s, parts);
  case Kind::Unshard:
    return performUnshard(s, parts);
  }
  return false;
}

class CpuGroup final : public DeviceGroup {
public:
  CpuGroup(const ModelInfo& m) : m_(m), ops_(static_cast<size_t>(m.numCommOps)) {
    events_ = std::vector<EventSlot>(static_cast<size_t>(m.numEvents));
    std::map<std::pair<int, int>, size_t> index;
    for (size_t k = 0; k < m.deviceSteps.size(); ++k) {
      auto key = std::make_pair(m.deviceSteps[k].device, m.deviceSteps[k].stream);
      auto [it, added] = index.emplace(key, queues_.size());
      if (added)
        queues_.push_back({key.first, key.second, {}});
      queues_[it->second].steps.push_back(k);
    }
    for (size_t k = 0; k < queues_.size(); ++k) {
      waits_.push_back(std::make_unique<Wait>());
      workers_.push_back(std::make_unique<Worker>());
    }
    if (const char* v = std::getenv("LWRT_DEADLOCK_SECONDS"); v && std::atoi(v) > 0)
      deadlockSeconds_ = std::atoi(v);
    // The emulated devices share the trainer's threads (--threads): each
    // device's stream threads run its kernels on its share. Left at every
    // core, the devices' concurrent kernels would run several threads per
    // core, each device stalling the others at random, so that a step took
    // twice the time.
    threadsPerDevice_ = std::max(1, threadBudget() / std::max(1, m.numDevices));
  }

  bool runStep(const std::vector<StepBuffers>& buffers, std::string* error) override {
    if (buffers.size() != static_cast<size_t>(m_.numDevices)) {
      if (error)
        *error = "the step needs the buffers of " + std::to_string(m_.numDevices) +
                 " devices, got " + std::to_string(buffers.size());
      return false;
    }
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t generation = ++generation_;
    remaining_ = queues_.size();
    failure_.clear();
    for (size_t q = 0; q < queues_.size(); ++q)
      workers_[q]->post([this, q, generation, &buffers] { runQueue(q, generation, buffers); });
    // Every second, a look for a deadlock: every unfinished function waiting
    // and nothing arriving or recorded for deadlockSeconds_.
    int stalled = 0;
    uint64_t seen = progress_.load(std::memory_order_relaxed);
    while (!done_.wait_for(lock, std::chrono::seconds(1), [&] { return remaining_ == 0; })) {
      uint64_t now = progress_.load(std::memory_order_relaxed);
      stalled = now == seen && allWaiting() ? stalled + 1 : 0;
      seen = now;
      if (stalled < deadlockSeconds_ || !failure_.empty())
        continue;
      failure_ = "the step is deadlocked, every function waits: " + whoWaits();
      lock.unlock();
      abort(generation);
      lock.lock();
    }
    if (!failure_.empty()) {
      if (error)
        *error = failure_;
      return false;
    }
    return true;
  }

  std::string notes() const override {
    return std::to_string(m_.numDevices) + " emulated devices, " + std::to_string(queues_.size()) +
           " stream threads, " + std::to_string(threadsPerDevice_) + " kernel threads per device";
  }

  /// A participant's arrival at op `op` of the current step: the last one
  /// performs the op over everyone's views, the others wait for it.
  bool arrive(const StepBuffers& b, int op, Signature sig, Part part) {
    if (op < 0 || static_cast<size_t>(op) >= ops_.size())
      return false;
    progress_.fetch_add(1, std::memory_order_relaxed);
    const uint64_t generation = generation_;
    const size_t devices = static_cast<size_t>(m_.numDevices);
    std::vector<int64_t> who = sig.participants();
    for (int64_t d : sig.devices)
      if (std::count(sig.devices.begin(), sig.devices.end(), d) != 1)
        return false;
    const bool hasSrc =
        sig.kind == Kind::Broadcast || sig.kind == Kind::DeviceCopy || sig.kind == Kind::Shard;
    const bool hasDst = sig.kind == Kind::ReduceTo || sig.kind == Kind::Unshard;
    if (hasSrc != (sig.src >= 0) || hasDst != (sig.dst >= 0))
      return false;
    if (sig.devices.empty() || who.front() < 0 || who.back() >= m_.numDevices ||
        !std::binary_search(who.begin(), who.end(), int64_t(b.device)))
      return false;
    OpSlot& slot = ops_[static_cast<size_t>(op)];
    std::unique_lock<std::mutex> lock(slot.mu);
    if (slot.generation != generation) { // the first to arrive this step
      slot.generation = generation;
      slot.arrived = 0;
      slot.expected = who.size();
      slot.mismatch = false;
      slot.sig = sig;
      slot.parts.assign(devices, Part{});
      slot.present.assign(devices, false);
    }
    if (!(slot.sig == sig) || slot.present[static_cast<size_t>(b.device)]) {
      slot.mismatch = true; // the op fails for everyone; this one leaves now
      return false;
    }
    slot.present[static_cast<size_t>(b.device)] = true;
    slot.parts[static_cast<size_t>(b.device)] = std::move(part);
    if (++slot.arrived == slot.expected) {
      slot.lastArrival = std::chrono::steady_clock::now();
      bool ok = !slot.mismatch;
      if (ok) {
        Parts parts(devices, nullptr);
        for (size_t d = 0; d < devices; ++d)
          if (slot.present[d])
            parts[d] = &slot.parts[d];
        ok = perform(slot.sig, parts);
      }
      slot.ok = ok;
      slot.doneGeneration = generation;
      lock.unlock();
      slot.cv.notify_all();
      return ok;
    }
    Waiting waiting(Wait::Op, op);
    const auto arrived = std::chrono::steady_clock::now();
    slot.cv.wait(lock, [&] { return slot.doneGeneration == generation || aborted(generation); });
    if (recording_ && slot.doneGeneration == generation) // waiting for the others is not the op's
      recording_->waited(arrived, slot.lastArrival);
    return slot.doneGeneration == generation && slot.ok;
  }

  bool record(int event) {
    if (event < 0 || static_cast<size_t>(event) >= events_.size())
      return false;
    EventSlot& e = events_[static_cast<size_t>(event)];
    progress_.fetch_add(1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(e.mu);
      e.recorded = generation_;
      if (recording_)
        e.recordedAt = std::chrono::steady_clock::now();
    }
    e.cv.notify_all();
    return true;
  }

  bool wait(int event) {
    if (event < 0 || static_cast<size_t>(event) >= events_.size())
      return false;
    const uint64_t generation = generation_;
    EventSlot& e = events_[static_cast<size_t>(event)];
    std::unique_lock<std::mutex> lock(e.mu);
    Waiting waiting(Wait::Event, event);
    const bool blocks = e.recorded < generation;
    const auto from = recording_ && blocks ? std::chrono::steady_clock::now()
                                           : std::chrono::steady_clock::time_point{};
    e.cv.wait(lock, [&] { return e.recorded >= generation || aborted(generation); });
    if (recording_ && blocks) { // the wait is the stream's idle time, no op's
      const auto now = std::chrono::steady_clock::now();
      recording_->waited(from, now);
      if (e.recorded >= generation)
        recording_->woke(now - e.recordedAt);
    }
    return e.recorded >= generation;
  }

private:
  struct Queue {
    int device, stream;
    std::vector<size_t> steps; ///< indexes in deviceSteps, in order
  };

  /// What a function's thread is doing, for the deadlock report: relaxed
  /// atomics, so that reading them orders nothing.
  struct Wait {
    enum Kind : int { Running, Op, Event, Finished };
    std::atomic<int> kind{Running}, index{0}, step{0};
  };
  static thread_local Wait* current_;
  /// The calling thread's recorder in a profiled step, else null.
  static thread_local MarkRecorder* recording_;
  /// Marks the calling function's thread as waiting while in scope.
  struct Waiting {
    Waiting(int kind, int index) {
      if (current_) {
        current_->index.store(index, std::memory_order_relaxed);
        current_->kind.store(kind, std::memory_order_relaxed);
      }
    }
    ~Waiting() {
      if (current_)
        current_->kind.store(Wait::Running, std::memory_order_relaxed);
    }
  };

  bool allWaiting() const {
    bool any = false;
    for (const auto& w : waits_) {
      int k = w->kind.load(std::memory_order_relaxed);
      if (k == Wait::Running)
        return false;
      any = any || k != Wait::Finished;
    }
    return any;
  }
  std::string whoWaits() const {
    std::string s;
    for (const auto& w : waits_) {
      int k = w->kind.load(std::memory_order_relaxed);
      if (k != Wait::Op && k != Wait::Event)
        continue;
      s += (s.empty() ? "" : "; ") +
           m_.deviceSteps[static_cast<size_t>(w->step.load(std::memory_order_relaxed))].name +
           (k == Wait::Op ? " in communication op " : " for event ") +
           std::to_string(w->index.load(std::memory_order_relaxed));
    }
    return s;
  }

  bool aborted(uint64_t generation) const {
    return abortedGeneration_.load(std::memory_order_relaxed) == generation;
  }

  void runQueue(size_t q, uint64_t generation, const std::vector<StepBuffers>& buffers) {
    const Queue& queue = queues_[q];
    std::string failure;
    if (threads() != threadsPerDevice_)
      setThreads(threadsPerDevice_);
    current_ = waits_[q].get();
    current_->kind.store(Wait::Running, std::memory_order_relaxed);
    StepMarks* marks = buffers[static_cast<size_t>(queue.device)].marks;
    if (marks && (queue.device >= marks->devices() || queue.stream >= marks->streams()))
      failure = "the profiled step has no recorder for device " + std::to_string(queue.device) +
                " stream " + std::to_string(queue.stream);
    if (marks && failure.empty()) {
      recording_ = &marks->at(queue.device, queue.stream);
      recording_->begin(std::chrono::steady_clock::now()); // the thread starts here
    }
    for (size_t k : queue.steps) {
      if (!failure.empty())
        break;
      const DeviceStep& step = m_.deviceSteps[k];
      current_->step.store(static_cast<int>(k), std::memory_order_relaxed);
      StepBuffers b = buffers[static_cast<size_t>(queue.device)];
      b.device = queue.device;
      b.stream = queue.stream;
      b.group = this;
      if (recording_) {
        b.mark = &MarkRecorder::markFn;
        b.markContext = recording_;
      }
      std::string failed;
      bool ok = false;
      try {
        ok = step.fn(b, &failed);
      } catch (const std::exception& e) {
        failed = e.what();
      } catch (...) {
        failed = "unknown error";
      }
      if (!ok) {
        failure = step.name + ": " + (failed.empty() ? "failed" : failed);
        break;
      }
    }
    current_->kind.store(Wait::Finished, std::memory_order_relaxed);
    current_ = nullptr;
    recording_ = nullptr;
    progress_.fetch_add(1, std::memory_order_relaxed);
    if (!failure.empty()) {
      bool first;
      {
        std::lock_guard<std::mutex> lock(mu_);
        first = failure_.empty();
        if (first)
          failure_ = failure;
      }
      if (first)
        abort(generation);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      --remaining_;
    }
    done_.notify_all();
  }

  /// Wakes every participant and waiter of this step: a function failed,
  /// so the ops and events it would have reached never complete.
  void abort(uint64_t generation) {
    abortedGeneration_.store(generation, std::memory_order_relaxed);
    for (OpSlot& s : ops_) {
      std::lock_guard<std::mutex> lock(s.mu);
      s.cv.notify_all();
    }
    for (EventSlot& e : events_) {
      std::lock_guard<std::mutex> lock(e.mu);
      e.cv.notify_all();
    }
  }

  const ModelInfo& m_;
  std::vector<OpSlot> ops_;
  std::vector<EventSlot> events_;
  std::vector<Queue> queues_;
  std::mutex mu_; ///< the step's start and end: remaining_, failure_
  std::condition_variable done_;
  uint64_t generation_ = 0; ///< the step running (written before it starts)
  std::atomic<uint64_t> abortedGeneration_{0};
  std::atomic<uint64_t> progress_{0};        ///< arrivals, records and finished functions
  int deadlockSeconds_ = 10;                 ///< LWRT_DEADLOCK_SECONDS
  int threadsPerDevice_ = 1;                 ///< each stream thread's kernel threads
  std::vector<std::unique_ptr<Wait>> waits_; ///< by queue
  size_t remaining_ = 0;
  std::string failure_;
  std::vector<std::unique_ptr<Worker>> workers_; // last: joined first
};

thread_local CpuGroup::Wait* CpuGroup::current_ = nullptr;
thread_local MarkRecorder* CpuGroup::recording_ = nullptr;

CpuGroup* groupOf(const StepBuffers& b) { return static_cast<CpuGroup*>(b.group); }

Part partOf(const TensorView* in, const TensorView* out) {
  Part p;
  if (in) {
    p.in = {*in};
    p.hasIn = true;
  }
  if (out) {
    p.out = {*out};
    p.hasOut = true;
  }
  return p;
}

bool call(const StepBuffers& b, int op, Signature sig, Part part) {
  CpuGroup* g = groupOf(b);
  return g && g->arrive(b, op, std::move(sig), std::move(part));
}

} // namespace

bool allReduce(const StepBuffers& b, int op, const std::vector<int64_t>& devices,
               const std::vector<TensorView>& in, const std::vector<TensorView>& out) {
  Part p;
  p.in = in;
  p.out = out;
  p.hasIn = p.hasOut = true;
  return call(b, op, Signature{Kind::AllReduce, devices, -1, -1, 0, {}}, std::move(p));
}

bool allGather(const StepBuffers& b, int op, const std::vector<int64_t>& devices, int64_t axis,
               const std::vector<int64_t>& sizes, const TensorView& in, const TensorView& out) {
  return call(b, op, Signature{Kind::AllGather, devices, -1, -1, axis, sizes}, partOf(&in, &out));
}

bool reduceScatter(const StepBuffers& b, int op, const std::vector<int64_t>& devices, int64_t axis,
                   const std::vector<int64_t>& sizes, const TensorView& in, const TensorView& out) {
  return call(b, op, Signature{Kind::ReduceScatter, devices, -1, -1, axis, sizes},
              partOf(&in, &out));
}

bool broadcast(const StepBuffers& b, int op, int64_t src, const std::vector<int64_t>& devices,
               const TensorView* in, const TensorView* out) {
  return call(b, op, Signature{Kind::Broadcast, devices, src, -1, 0, {}}, partOf(in, out));
}

bool reduceTo(const StepBuffers& b, int op, const std::vector<int64_t>& devices, int64_t dst,
              const TensorView* in, const TensorView* out) {
  return call(b, op, Signature{Kind::ReduceTo, devices, -1, dst, 0, {}}, partOf(in, out));
}

bool deviceCopy(const StepBuffers& b, int op, int64_t src, int64_t dst, const TensorView* in,
                const TensorView* out) {
  if (src == dst)
    return false;
  return call(b, op, Signature{Kind::DeviceCopy, {dst}, src, -1, 0, {}}, partOf(in, out));
}

bool shard(const StepBuffers& b, int op, int64_t src, const std::vector<int64_t>& devices,
           int64_t axis, const std::vector<int64_t>& sizes, const TensorView* in,
           const TensorView* out) {
  return call(b, op, Signature{Kind::Shard, devices, src, -1, axis, sizes}, partOf(in, out));
}

bool unshard(const StepBuffers& b, int op, const std::vector<int64_t>& devices, int64_t dst,
             int64_t axis, const std::vector<int64_t>& sizes, const TensorView* in,
             const TensorView* out) {
  return call(b, op, Signature{Kind::Unshard, devices, -1, dst, axis, sizes}, partOf(in, out));
}

bool recordEvent(const StepBuffers& b, int event) {
  CpuGroup* g = groupOf(b);
  return g && g->record(event);
}

bool waitEvent(const StepBuffers& b, int event) {
  CpuGroup* g = groupOf(b);
  return g && g->wait(event);
}

std::unique_ptr<DeviceGroup>
createGroup(const ModelInfo& model, const std::vector<StepRunner*>& runners, std::string* error) {
  auto bad = [&](const std::string& why) -> std::unique_ptr<DeviceGroup> {
    if (error)
      *error = why;
    return nullptr;
  };
  if (model.numDevices < 1 || model.streamsPerDevice < 1)
    return bad("a group needs at least one device and one stream per device");
  if (runners.size() != static_cast<size_t>(model.numDevices))
    return bad("a group of " + std::to_string(model.numDevices) + " devices got " +
               std::to_string(runners.size()) + " runners");
  if (model.numCommOps < 0 || model.numEvents < 0)
    return bad("negative count of communication ops or events");
  for (const DeviceStep& s : model.deviceSteps)
    if (!s.fn || s.device < 0 || s.device >= model.numDevices || s.stream < 0 ||
        s.stream >= model.streamsPerDevice)
      return bad("step function '" + s.name + "' runs on device " + std::to_string(s.device) +
                 " stream " + std::to_string(s.stream) + ", outside the model's " +
                 std::to_string(model.numDevices) + " devices of " +
                 std::to_string(model.streamsPerDevice) + " streams");
  return std::make_unique<CpuGroup>(model);
}

} // namespace lwrt::cpu
