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
//
// Under mpirun (a Cluster), the group runs this process's devices only. An
// op whose participants span processes is met by this process's
// participants as above; the last of them sends the inputs of its sending
// devices to every other process holding a receiving device, receives the
// inputs it needs from the others, and performs the op for its own
// receivers (cpu/CommOps.h: sums in device order, so the bits are those of
// one process). A failed process or a lost one fails the op with the
// Cluster's message.
#include "lwrt/comm.h"

#include "common/Cluster.h"
#include "cpu/CommOps.h"
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
#include <sched.h>
#include <set>
#include <thread>

namespace lwrt::cpu {

namespace {

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

class CpuGroup final : public DeviceGroup {
public:
  CpuGroup(const ModelInfo& m, Cluster* cluster)
      : m_(m), cluster_(cluster), ops_(static_cast<size_t>(m.numCommOps)) {
    if (cluster_) {
      perRank_ = m.numDevices / cluster_->size();
      firstLocal_ = cluster_->rank() * perRank_;
    } else {
      perRank_ = m.numDevices;
    }
    events_ = std::vector<EventSlot>(static_cast<size_t>(m.numEvents));
    std::map<std::pair<int, int>, size_t> index;
    for (size_t k = 0; k < m.deviceSteps.size(); ++k) {
      if (!local(m.deviceSteps[k].device))
        continue; // another process runs it
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
    // twice the time. The share is of the whole job's devices, not this
    // process's, so that a device's kernels split their work alike, and give
    // the same bits, however many processes run the devices.
    threadsPerDevice_ = std::max(1, threadBudget() / std::max(1, m.numDevices));
  }

  bool local(int64_t device) const {
    return device >= firstLocal_ && device < firstLocal_ + perRank_;
  }
  int rankOf(int64_t device) const { return static_cast<int>(device / perRank_); }

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
    remoteError_.clear();
    for (size_t q = 0; q < queues_.size(); ++q)
      workers_[q]->post([this, q, generation, &buffers] { runQueue(q, generation, buffers); });
    // Every second, a look for a deadlock: every unfinished function waiting
    // and nothing arriving or recorded for deadlockSeconds_ (under mpirun,
    // where some wait for other processes: in every process).
    int stalled = 0;
    uint64_t seen = progress_.load(std::memory_order_relaxed);
    while (!done_.wait_for(lock, std::chrono::seconds(1), [&] { return remaining_ == 0; })) {
      uint64_t now = progress_.load(std::memory_order_relaxed);
      const bool waiting = allWaiting();
      if (cluster_)
        cluster_->stepActivity(now, waiting);
      stalled = now == seen && waiting ? stalled + 1 : 0;
      seen = now;
      if (stalled < deadlockSeconds_ || !failure_.empty())
        continue;
      if (cluster_ && waitsForOthers() && !cluster_->othersWaiting(deadlockSeconds_))
        continue; // another process is busy: what it sends will come
      failure_ = std::string("the step is deadlocked, every function waits") +
                 (cluster_ ? " in every process" : "") + ": " + whoWaits();
      lock.unlock();
      abort(generation);
      lock.lock();
    }
    if (cluster_)
      cluster_->stepEnded();
    if (!failure_.empty()) {
      if (!remoteError_.empty() && failure_.find(remoteError_) == std::string::npos)
        failure_ += ": " + remoteError_;
      if (error)
        *error = failure_;
      return false;
    }
    return true;
  }

  std::string notes() const override {
    std::string kernels = ", " + std::to_string(threadsPerDevice_) + " kernel threads per device";
    if (cluster_)
      return std::to_string(perRank_) + " emulated devices in each of " +
             std::to_string(cluster_->size()) + " processes (MPI between them), " +
             std::to_string(queues_.size()) + " stream threads here" + kernels;
    return std::to_string(m_.numDevices) + " emulated devices, " + std::to_string(queues_.size()) +
           " stream threads" + kernels;
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
        !std::binary_search(who.begin(), who.end(), int64_t(b.device)) || !local(b.device))
      return false;
    OpSlot& slot = ops_[static_cast<size_t>(op)];
    std::unique_lock<std::mutex> lock(slot.mu);
    if (slot.generation != generation) { // the first to arrive this step
      slot.generation = generation;
      slot.arrived = 0;
      slot.expected = static_cast<size_t>(
          std::count_if(who.begin(), who.end(), [&](int64_t d) { return local(d); }));
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
      Parts parts(devices, nullptr);
      for (size_t d = 0; d < devices; ++d)
        if (slot.present[d])
          parts[d] = &slot.parts[d];
      if (ok && cluster_ && spansProcesses(who)) {
        // The others wait for doneGeneration: the slot is this thread's
        // until then, and the lock is free for abort() meanwhile.
        lock.unlock();
        ok = exchange(op, generation, slot, parts);
        lock.lock();
      } else if (ok) {
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

  void noteRemoteError(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (remoteError_.empty())
      remoteError_ = why;
  }

  /// Whether `who` has devices of other processes.
  bool spansProcesses(const std::vector<int64_t>& who) const {
    return std::any_of(who.begin(), who.end(), [&](int64_t d) { return !local(d); });
  }

  /// The op across processes (see the file's comment), by the last local
  /// participant; `parts` holds the local ones.
  bool exchange(int op, uint64_t generation, OpSlot& slot, Parts& parts) {
    const Signature& sig = slot.sig;
    const int me = cluster_->rank(), tag = Cluster::kOpBase + op;
    std::set<int> receiving, sending;
    for (int64_t d : sig.receivers())
      receiving.insert(rankOf(d));
    for (int64_t d : sig.senders())
      sending.insert(rankOf(d));
    std::vector<std::pair<int64_t, const Part*>> mine;
    for (int64_t d : sig.senders())
      if (local(d))
        mine.emplace_back(d, parts[static_cast<size_t>(d)]);
    if (!mine.empty()) {
      std::vector<unsigned char> message = packInputs(sig, mine);
      for (int r : receiving)
        if (r != me)
          cluster_->send(r, tag, message);
    }
    if (!receiving.count(me))
      return true; // this process only sends
    std::vector<std::vector<unsigned char>> messages;
    std::vector<std::pair<int64_t, Part>> remote;
    for (int r : sending) {
      if (r == me)
        continue;
      messages.emplace_back();
      std::string why;
      std::vector<std::pair<int64_t, Part>> theirs;
      Waiting waiting(Wait::Remote, op);
      if (!cluster_->receive(r, tag, messages.back(), &why, [&] { return aborted(generation); }) ||
          !unpackInputs(sig, messages.back(), theirs, &why)) {
        if (aborted(generation))
          return false; // the step's own failure says why
        noteRemoteError("comm op " + std::to_string(op) + " (" + sig.str() + ") with rank " +
                        std::to_string(r) + ": " + why);
        return false;
      }
      for (auto& t : theirs)
        remote.push_back(std::move(t));
    }
    for (auto& [d, p] : remote) {
      if (d < 0 || d >= m_.numDevices || local(d) || parts[static_cast<size_t>(d)]) {
        noteRemoteError("comm op " + std::to_string(op) + ": another process sent device " +
                        std::to_string(d) + "'s inputs");
        return false;
      }
      parts[static_cast<size_t>(d)] = &p;
    }
    return perform(sig, parts);
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
    enum Kind : int { Running, Op, Event, Remote, Finished };
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
  bool waitsForOthers() const {
    return std::any_of(waits_.begin(), waits_.end(), [](const auto& w) {
      return w->kind.load(std::memory_order_relaxed) == Wait::Remote;
    });
  }
  std::string whoWaits() const {
    std::string s;
    for (const auto& w : waits_) {
      int k = w->kind.load(std::memory_order_relaxed);
      if (k != Wait::Op && k != Wait::Event && k != Wait::Remote)
        continue;
      s += (s.empty() ? "" : "; ") +
           m_.deviceSteps[static_cast<size_t>(w->step.load(std::memory_order_relaxed))].name +
           (k == Wait::Event ? " for event " : " in communication op ") +
           std::to_string(w->index.load(std::memory_order_relaxed)) +
           (k == Wait::Remote ? " (for another process)" : "");
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
        b.calls = recording_->calls();
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
    if (cluster_) // a function waiting for another process's inputs
      cluster_->wakeWaiters();
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
  Cluster* cluster_ = nullptr;
  int perRank_ = 1, firstLocal_ = 0; ///< this process's devices
  /// Why an op across processes failed this step (under mu_), for the
  /// step's error: the other functions of the op only see that it failed.
  std::string remoteError_;
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

std::unique_ptr<DeviceGroup> createGroup(const ModelInfo& model,
                                         const std::vector<StepRunner*>& runners, Cluster* cluster,
                                         std::string* error) {
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
  if (cluster) {
    if (model.numDevices % cluster->size() != 0)
      return bad(std::to_string(cluster->size()) + " processes cannot share " +
                 std::to_string(model.numDevices) + " devices evenly");
    if (int64_t(Cluster::kOpBase) + model.numCommOps > cluster->maxTag())
      return bad("the step's " + std::to_string(model.numCommOps) +
                 " communication ops need more message tags than MPI has (" +
                 std::to_string(cluster->maxTag()) + ")");
    const int per = model.numDevices / cluster->size(), first = cluster->rank() * per;
    for (int d = 0; d < model.numDevices; ++d)
      if ((runners[static_cast<size_t>(d)] != nullptr) != (d >= first && d < first + per))
        return bad("device " + std::to_string(d) + "'s runner is " +
                   (runners[static_cast<size_t>(d)] ? "here, but the device is another process's"
                                                    : "missing"));
  }
  return std::make_unique<CpuGroup>(model, cluster);
}

} // namespace lwrt::cpu
