// emu/Streams.cpp - streams, events, stream capture and CUDA graphs of the emulated device
//
// A stream is a host worker thread running its queue of tasks in order, so
// that work on different streams really runs at the same time and a
// missing event is a real race. Each stream counts the tasks queued and
// completed; an event record is a task, and the event remembers the
// (stream, task number) of its most recent record, so cudaStreamWaitEvent
// waits for the record that was most recent when it was called, as CUDA
// specifies. One mutex and condition variable guard all of it (the
// emulator favours obviously right over fast).
//
// The legacy default stream (nullptr) of each device synchronizes with the
// device's blocking streams: its work waits for everything queued on them
// before, and theirs waits for its work queued before (cudaStreamNonBlocking
// streams take no part).
//
// Capture (cudaStreamBeginCapture): the stream's tasks are recorded as
// nodes of a graph, each depending on the nodes the stream's last work
// ended with; an event recorded during the capture carries those nodes, and
// a stream that waits on it joins the capture (a fork), which must be
// joined back into the origin stream before cudaStreamEndCapture. In
// global and thread-local mode the calls that synchronize or allocate are
// refused (cudaErrorStreamCaptureUnsupported) and invalidate the capture,
// as CUDA does. A graph's launch replays its nodes on one worker per
// captured stream, each node after the nodes it depends on, so the
// branches of a captured step run concurrently as on a GPU.
//
// Hangs: a wait that sees no task anywhere finish for hangSeconds(), while
// every stream with work is itself waiting, reports every stream's state
// and stops the run.
#include "Internal.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace lwemu {

namespace {

using Clock = std::chrono::steady_clock;

struct Capture;

struct Stream {
  int device = 0;
  bool blocking = true; ///< synchronizes with the legacy stream
  bool legacy = false;
  bool destroyed = false;
  std::deque<std::pair<std::string, std::function<void()>>> queue;
  uint64_t enqueued = 0, completed = 0;
  std::string running; ///< the task it runs now
  std::thread::id worker;
  Capture* capture = nullptr;   ///< the capture recording its work
  std::vector<int> captureDeps; ///< the nodes its next work depends on
};

struct Node {
  Stream* lane; ///< the stream it was captured from
  std::string name;
  std::function<void()> work;
  std::vector<int> deps;
};

struct Capture {
  Stream* origin = nullptr;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;
  bool invalidated = false;
  std::vector<Node> nodes;
  std::set<Stream*> streams;
};

struct Event {
  int device = 0;
  unsigned flags = 0;
  Stream* stream = nullptr; ///< of the most recent record (0: never recorded)
  uint64_t seq = 0;         ///< that record's task number on it
  Clock::time_point when;   ///< when that record ran
  Capture* capture = nullptr;
  std::vector<int> captureNodes;
};

struct Graph {
  std::vector<Node> nodes;
};

struct GraphExec {
  std::vector<Node> nodes;
  std::map<Stream*, Stream*> lanes; ///< captured stream -> replay worker
};

struct State {
  std::mutex m;
  std::condition_variable cv;
  uint64_t progress = 0; ///< tasks completed, everywhere
  std::set<Stream*> streams;
  std::vector<Stream*> legacy; ///< per device
  std::map<std::thread::id, std::string> blocked;
  std::set<Event*> events;
  std::set<Capture*> captures;
};

/// Never destroyed: stream workers may still wait on it while the process exits.
State& st() {
  static State* s = new State;
  return *s;
}

thread_local Stream* tlsWorker = nullptr;

void runWorker(Stream* s) {
  tlsWorker = s;
  setCurrentDevice(s->device);
  State& g = st();
  std::unique_lock<std::mutex> lock(g.m);
  for (;;) {
    g.cv.wait(lock, [&] { return !s->queue.empty() || s->destroyed; });
    if (s->queue.empty())
      return; // destroyed and drained
    auto task = std::move(s->queue.front());
    s->queue.pop_front();
    s->running = task.first;
    lock.unlock();
    task.second();
    task = {};
    lock.lock();
    s->running.clear();
    ++s->completed;
    ++g.progress;
    g.cv.notify_all();
  }
}

Stream* newStream(int device, bool blocking, bool legacy) {
  auto* s = new Stream;
  s->device = device;
  s->blocking = blocking;
  s->legacy = legacy;
  std::thread t(runWorker, s);
  s->worker = t.get_id();
  t.detach();
  return s;
}

/// The legacy stream of `device` (made on first use; call with the lock held).
Stream* legacyOf(int device) {
  State& g = st();
  if (g.legacy.empty())
    g.legacy.assign(static_cast<size_t>(deviceCount()), nullptr);
  Stream*& s = g.legacy[static_cast<size_t>(device)];
  if (!s) {
    s = newStream(device, true, true);
    g.streams.insert(s);
  }
  return s;
}

/// The stream a handle names, or null (lock held).
Stream* lookup(cudaStream_t h) {
  if (h == nullptr || h == cudaStreamLegacy || h == cudaStreamPerThread)
    return legacyOf(currentDevice());
  auto* s = reinterpret_cast<Stream*>(h);
  State& g = st();
  return g.streams.count(s) && !s->destroyed ? s : nullptr;
}

/// Whether every stream with work is waiting (lock held): a stall is a hang.
bool everyoneWaits() {
  State& g = st();
  for (Stream* s : g.streams)
    if (!s->running.empty() && !g.blocked.count(s->worker))
      return false;
  return true;
}

/// Waits (lock held) until `done` holds, reporting a hang as described above.
template <typename Done>
void waitUntil(std::unique_lock<std::mutex>& lock, const std::string& what, Done done) {
  State& g = st();
  if (done())
    return;
  auto self = std::this_thread::get_id();
  auto previous = g.blocked.find(self);
  std::string saved = previous != g.blocked.end() ? previous->second : std::string();
  bool had = previous != g.blocked.end();
  g.blocked[self] = what;
  uint64_t seen = g.progress;
  auto since = Clock::now();
  while (!done()) {
    g.cv.wait_for(lock, std::chrono::milliseconds(200));
    if (g.progress != seen) {
      seen = g.progress;
      since = Clock::now();
    } else if (Clock::now() - since > std::chrono::seconds(hangSeconds()) && everyoneWaits()) {
      lock.unlock();
      fatal("hang: " + what + ": nothing has run for " + std::to_string(hangSeconds()) +
            " s and every stream with work is waiting");
    }
  }
  if (had)
    g.blocked[self] = saved;
  else
    g.blocked.erase(self);
}

/// Queues a task on `s` (lock held), with the legacy stream's implicit order.
void push(Stream* s, std::string name, std::function<void()> work) {
  State& g = st();
  std::vector<std::pair<Stream*, uint64_t>> after;
  if (s->legacy) {
    for (Stream* o : g.streams)
      if (o->device == s->device && o->blocking && !o->legacy && o->completed < o->enqueued)
        after.push_back({o, o->enqueued});
  } else if (s->blocking) {
    Stream* l = legacyOf(s->device);
    if (l->completed < l->enqueued)
      after.push_back({l, l->enqueued});
  }
  if (!after.empty()) {
    s->queue.emplace_back("legacy-stream order", [after] {
      std::unique_lock<std::mutex> lock(st().m);
      waitUntil(lock, "the legacy stream's implicit synchronization", [&] {
        return std::all_of(after.begin(), after.end(),
                           [](auto& w) { return w.first->completed >= w.second; });
      });
    });
    ++s->enqueued;
  }
  s->queue.emplace_back(std::move(name), std::move(work));
  ++s->enqueued;
  g.cv.notify_all();
}

/// Records a node on a capturing stream (lock held).
void record(Stream* s, std::string name, std::function<void()> work) {
  Capture* c = s->capture;
  c->nodes.push_back(Node{s, std::move(name), std::move(work), s->captureDeps});
  s->captureDeps = {static_cast<int>(c->nodes.size()) - 1};
}

/// A wait on `s` for task `seq` of `on` (lock held).
void pushWait(Stream* s, Stream* on, uint64_t seq, std::string what) {
  push(s, "wait for " + what, [on, seq, what] {
    std::unique_lock<std::mutex> lock(st().m);
    waitUntil(lock, "wait for " + what, [&] { return on->completed >= seq; });
  });
}

void endCaptureOf(Capture* c) {
  for (Stream* s : c->streams) {
    s->capture = nullptr;
    s->captureDeps.clear();
  }
  for (Event* e : st().events) // an event recorded in the capture is complete after it
    if (e->capture == c) {
      e->capture = nullptr;
      e->captureNodes.clear();
    }
  st().captures.erase(c);
  delete c;
}

/// Whether the calling thread may not synchronize now (lock held); invalidates.
bool forbidden() {
  State& g = st();
  bool no = false;
  for (Capture* c : g.captures)
    if (c->mode == cudaStreamCaptureModeGlobal ||
        (c->mode == cudaStreamCaptureModeThreadLocal && c->thread == std::this_thread::get_id())) {
      c->invalidated = true;
      no = true;
    }
  return no;
}

} // namespace

int hangSeconds() {
  static int s = [] {
    const char* v = std::getenv("LWEMU_HANG_SECONDS");
    return v && std::atoi(v) > 0 ? std::atoi(v) : 30;
  }();
  return s;
}

Blocked::Blocked(std::string what) {
  State& g = st();
  std::lock_guard<std::mutex> lock(g.m);
  auto it = g.blocked.find(std::this_thread::get_id());
  if (it != g.blocked.end())
    previous_ = it->second;
  g.blocked[std::this_thread::get_id()] = std::move(what);
}

Blocked::~Blocked() {
  State& g = st();
  std::lock_guard<std::mutex> lock(g.m);
  if (previous_.empty())
    g.blocked.erase(std::this_thread::get_id());
  else
    g.blocked[std::this_thread::get_id()] = previous_;
}

std::string describeStreams() {
  State& g = st();
  std::unique_lock<std::mutex> lock(g.m, std::try_to_lock); // a report must not hang
  std::string out;
  if (!lock.owns_lock())
    return "  (the stream table is busy)\n";
  for (Stream* s : g.streams) {
    if (s->destroyed && s->queue.empty() && s->running.empty())
      continue;
    char head[96];
    std::snprintf(head, sizeof head, "  device %d %s stream %p: ", s->device,
                  s->legacy ? "legacy" : (s->blocking ? "blocking" : "non-blocking"),
                  static_cast<void*>(s));
    out += head;
    auto b = g.blocked.find(s->worker);
    if (s->running.empty())
      out += "idle";
    else
      out += "runs " + s->running + (b != g.blocked.end() ? ", waiting: " + b->second : "");
    if (!s->queue.empty())
      out +=
          "; " + std::to_string(s->queue.size()) + " more queued, next " + s->queue.front().first;
    out += "\n";
  }
  for (auto& [id, what] : g.blocked) {
    bool worker = false;
    for (Stream* s : g.streams)
      worker |= s->worker == id;
    if (!worker)
      out += "  a host thread waits: " + what + "\n";
  }
  return out;
}

bool captureForbids(const char* call) {
  std::lock_guard<std::mutex> lock(st().m);
  (void)call;
  return forbidden();
}

cudaError_t enqueue(cudaStream_t h, std::string name, std::function<void()> work) {
  State& g = st();
  std::lock_guard<std::mutex> lock(g.m);
  Stream* s = lookup(h);
  if (!s)
    return cudaErrorInvalidResourceHandle;
  if (s->capture) {
    if (s->capture->invalidated)
      return cudaErrorStreamCaptureInvalidated;
    record(s, std::move(name), std::move(work));
    return cudaSuccess;
  }
  if (s->legacy) // the legacy stream may not be used while a blocking stream of it captures
    for (Capture* c : g.captures)
      for (Stream* o : c->streams)
        if (o->device == s->device && o->blocking) {
          c->invalidated = true;
          return cudaErrorStreamCaptureImplicit;
        }
  push(s, std::move(name), std::move(work));
  return cudaSuccess;
}

bool validStream(cudaStream_t h) {
  std::lock_guard<std::mutex> lock(st().m);
  return lookup(h) != nullptr;
}

int streamDevice(cudaStream_t h) {
  std::lock_guard<std::mutex> lock(st().m);
  Stream* s = lookup(h);
  return s ? s->device : -1;
}

bool isCapturing(cudaStream_t h) {
  std::lock_guard<std::mutex> lock(st().m);
  Stream* s = lookup(h);
  return s && s->capture;
}

std::string runningTask() {
  if (!tlsWorker)
    return "host code";
  std::lock_guard<std::mutex> lock(st().m);
  return tlsWorker->running;
}

void waitStream(cudaStream_t h, const char* call) {
  std::unique_lock<std::mutex> lock(st().m);
  Stream* s = lookup(h);
  if (!s)
    return;
  uint64_t until = s->enqueued;
  waitUntil(lock, std::string(call) + " (host)", [&] { return s->completed >= until; });
}

void waitDevice(int device, const char* call) {
  std::unique_lock<std::mutex> lock(st().m);
  std::vector<std::pair<Stream*, uint64_t>> until;
  for (Stream* s : st().streams)
    if (s->device == device)
      until.push_back({s, s->enqueued});
  waitUntil(lock, std::string(call) + " (host, device " + std::to_string(device) + ")", [&] {
    return std::all_of(until.begin(), until.end(),
                       [](auto& w) { return w.first->completed >= w.second; });
  });
}

} // namespace lwemu

using namespace lwemu;

extern "C" {

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* out, unsigned int flags) {
  if (!out || (flags & ~cudaStreamNonBlocking))
    return fail(cudaErrorInvalidValue);
  if (captureForbids("cudaStreamCreate"))
    return fail(cudaErrorStreamCaptureUnsupported);
  Stream* s = newStream(currentDevice(), !(flags & cudaStreamNonBlocking), false);
  std::lock_guard<std::mutex> lock(st().m);
  st().streams.insert(s);
  *out = reinterpret_cast<cudaStream_t>(s);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* out) { return cudaStreamCreateWithFlags(out, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t h) {
  State& g = st();
  std::lock_guard<std::mutex> lock(g.m);
  if (h == nullptr || h == cudaStreamLegacy || h == cudaStreamPerThread)
    return fail(cudaErrorInvalidResourceHandle);
  Stream* s = lookup(h);
  if (!s)
    return fail(cudaErrorInvalidResourceHandle);
  if (s->capture) // destroying a capturing stream invalidates the capture
    s->capture->invalidated = true;
  s->destroyed = true; // its queued work still runs, then the worker ends
  g.cv.notify_all();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t h) {
  if (!validStream(h))
    return fail(cudaErrorInvalidResourceHandle);
  if (isCapturing(h) || captureForbids("cudaStreamSynchronize"))
    return fail(cudaErrorStreamCaptureUnsupported);
  waitStream(h, "cudaStreamSynchronize");
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t h) {
  std::lock_guard<std::mutex> lock(st().m);
  Stream* s = lookup(h);
  if (!s)
    return fail(cudaErrorInvalidResourceHandle);
  if (s->capture)
    return fail(cudaErrorStreamCaptureUnsupported);
  return s->completed >= s->enqueued ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaDeviceSynchronize(void) {
  if (captureForbids("cudaDeviceSynchronize"))
    return fail(cudaErrorStreamCaptureUnsupported);
  waitDevice(currentDevice(), "cudaDeviceSynchronize");
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* out, unsigned int flags) {
  if (!out || (flags & ~(cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess)))
    return fail(cudaErrorInvalidValue);
  auto* e = new Event;
  e->device = currentDevice();
  e->flags = flags;
  std::lock_guard<std::mutex> lock(st().m);
  st().events.insert(e);
  *out = reinterpret_cast<cudaEvent_t>(e);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* out) { return cudaEventCreateWithFlags(out, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t h) {
  std::lock_guard<std::mutex> lock(st().m);
  auto* e = reinterpret_cast<Event*>(h);
  if (!st().events.erase(e))
    return fail(cudaErrorInvalidResourceHandle);
  // Waits already queued keep their (stream, record) pair; the event itself
  // is kept as freed memory would be on a GPU: never touched again.
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t h, cudaStream_t sh) {
  State& g = st();
  std::lock_guard<std::mutex> lock(g.m);
  auto* e = reinterpret_cast<Event*>(h);
  if (!g.events.count(e))
    return fail(cudaErrorInvalidResourceHandle);
  Stream* s = lookup(sh);
  if (!s || s->device != e->device) // an event records on a stream of its own device
    return fail(cudaErrorInvalidResourceHandle);
  if (s->capture) {
    if (s->capture->invalidated)
      return fail(cudaErrorStreamCaptureInvalidated);
    e->capture = s->capture;
    e->captureNodes = s->captureDeps;
    return cudaSuccess;
  }
  e->capture = nullptr;
  push(s, "event record", [e] {
    std::lock_guard<std::mutex> l(st().m);
    e->when = Clock::now();
  });
  e->stream = s;
  e->seq = s->enqueued;
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t sh, cudaEvent_t h, unsigned int flags) {
  State& g = st();
  std::lock_guard<std::mutex> lock(g.m);
  auto* e = reinterpret_cast<Event*>(h);
  Stream* s = lookup(sh);
  if (!g.events.count(e) || !s)
    return fail(cudaErrorInvalidResourceHandle);
  if (flags & ~cudaEventWaitExternal)
    return fail(cudaErrorInvalidValue);
  if (e->capture) { // an event recorded in a capture: the stream joins it
    Capture* c = e->capture;
    if (!g.captures.count(c))
      return fail(cudaErrorStreamCaptureIsolation);
    if (s->capture && s->capture != c)
      return fail(cudaErrorStreamCaptureIsolation);
    if (!s->capture) {
      s->capture = c;
      c->streams.insert(s);
      s->captureDeps.clear();
    }
    for (int n : e->captureNodes)
      if (std::find(s->captureDeps.begin(), s->captureDeps.end(), n) == s->captureDeps.end())
        s->captureDeps.push_back(n);
    return cudaSuccess;
  }
  if (s->capture) // a capture may not wait on work outside it
    return fail(cudaErrorStreamCaptureIsolation);
  if (e->stream) // a never-recorded event is complete: no wait
    pushWait(s, e->stream, e->seq, "event");
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t h) {
  std::unique_lock<std::mutex> lock(st().m);
  auto* e = reinterpret_cast<Event*>(h);
  if (!st().events.count(e))
    return fail(cudaErrorInvalidResourceHandle);
  if (e->capture || forbidden())
    return fail(cudaErrorStreamCaptureUnsupported);
  if (Stream* s = e->stream) {
    uint64_t seq = e->seq;
    waitUntil(lock, "cudaEventSynchronize (host)", [&] { return s->completed >= seq; });
  }
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t h) {
  std::lock_guard<std::mutex> lock(st().m);
  auto* e = reinterpret_cast<Event*>(h);
  if (!st().events.count(e))
    return fail(cudaErrorInvalidResourceHandle);
  if (e->capture)
    return fail(cudaErrorStreamCaptureUnsupported);
  return !e->stream || e->stream->completed >= e->seq ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  std::lock_guard<std::mutex> lock(st().m);
  auto* x = reinterpret_cast<Event*>(a);
  auto* y = reinterpret_cast<Event*>(b);
  if (!ms || !st().events.count(x) || !st().events.count(y))
    return fail(cudaErrorInvalidResourceHandle);
  if ((x->flags | y->flags) & cudaEventDisableTiming)
    return fail(cudaErrorInvalidResourceHandle);
  if (!x->stream || !y->stream)
    return fail(cudaErrorInvalidResourceHandle);
  if (x->stream->completed < x->seq || y->stream->completed < y->seq)
    return fail(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(y->when - x->when).count();
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t h, cudaStreamCaptureMode mode) {
  State& g = st();
  std::lock_guard<std::mutex> lock(g.m);
  if (h == nullptr || h == cudaStreamLegacy || h == cudaStreamPerThread)
    return fail(cudaErrorStreamCaptureUnsupported); // the legacy stream cannot be captured
  Stream* s = lookup(h);
  if (!s)
    return fail(cudaErrorInvalidResourceHandle);
  if (s->capture)
    return fail(cudaErrorIllegalState);
  auto* c = new Capture;
  c->origin = s;
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->streams.insert(s);
  g.captures.insert(c);
  s->capture = c;
  s->captureDeps.clear();
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t h, cudaStreamCaptureStatus* status) {
  std::lock_guard<std::mutex> lock(st().m);
  Stream* s = lookup(h);
  if (!s || !status)
    return fail(cudaErrorInvalidValue);
  *status = !s->capture               ? cudaStreamCaptureStatusNone
            : s->capture->invalidated ? cudaStreamCaptureStatusInvalidated
                                      : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t h, cudaGraph_t* out) {
  State& g = st();
  std::lock_guard<std::mutex> lock(g.m);
  Stream* s = lookup(h);
  if (!s || !out)
    return fail(cudaErrorInvalidValue);
  Capture* c = s->capture;
  if (!c)
    return fail(cudaErrorIllegalState);
  if (c->origin != s) {
    c->invalidated = true;
    return fail(cudaErrorStreamCaptureUnmatched);
  }
  if (c->mode != cudaStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id()) {
    c->invalidated = true;
    return fail(cudaErrorStreamCaptureWrongThread);
  }
  // Every forked stream must have joined back: its last nodes are ancestors
  // of (or are) the origin's last nodes.
  std::vector<char> reach(c->nodes.size(), 0);
  std::vector<int> pending(s->captureDeps.begin(), s->captureDeps.end());
  while (!pending.empty()) {
    int n = pending.back();
    pending.pop_back();
    if (reach[static_cast<size_t>(n)])
      continue;
    reach[static_cast<size_t>(n)] = 1;
    for (int d : c->nodes[static_cast<size_t>(n)].deps)
      pending.push_back(d);
  }
  bool unjoined = false;
  for (Stream* o : c->streams)
    for (int n : o->captureDeps)
      unjoined |= !reach[static_cast<size_t>(n)];
  bool invalid = c->invalidated;
  auto* graph = new Graph{std::move(c->nodes)};
  endCaptureOf(c);
  if (invalid || unjoined) {
    delete graph;
    *out = nullptr;
    return fail(invalid ? cudaErrorStreamCaptureInvalidated : cudaErrorStreamCaptureUnjoined);
  }
  *out = reinterpret_cast<cudaGraph_t>(graph);
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* out, cudaGraph_t h, unsigned long long flags) {
  if (!out || !h || flags != 0)
    return fail(cudaErrorInvalidValue);
  auto* exec = new GraphExec{reinterpret_cast<Graph*>(h)->nodes, {}};
  std::lock_guard<std::mutex> lock(st().m);
  for (Node& n : exec->nodes)
    if (!exec->lanes.count(n.lane)) {
      Stream* lane = newStream(n.lane->device, false, false);
      st().streams.insert(lane);
      exec->lanes[n.lane] = lane;
    }
  *out = reinterpret_cast<cudaGraphExec_t>(exec);
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t h, cudaStream_t sh) {
  State& g = st();
  std::lock_guard<std::mutex> lock(g.m);
  auto* exec = reinterpret_cast<GraphExec*>(h);
  Stream* s = lookup(sh);
  if (!exec || !s)
    return fail(cudaErrorInvalidResourceHandle);
  if (s->capture)
    return fail(cudaErrorStreamCaptureUnsupported);
  // Each lane starts after the work queued on s; each node runs on its
  // lane after its dependencies; s continues after every lane.
  uint64_t start = s->enqueued;
  for (auto& [from, lane] : exec->lanes)
    pushWait(lane, s, start, "graph launch");
  std::vector<uint64_t> done(exec->nodes.size());
  for (size_t i = 0; i < exec->nodes.size(); ++i) {
    Node& n = exec->nodes[i];
    Stream* lane = exec->lanes[n.lane];
    for (int d : n.deps) {
      Stream* other = exec->lanes[exec->nodes[static_cast<size_t>(d)].lane];
      if (other != lane)
        pushWait(lane, other, done[static_cast<size_t>(d)], "graph node " + n.name);
    }
    push(lane, n.name, n.work);
    done[i] = lane->enqueued;
  }
  for (auto& [from, lane] : exec->lanes)
    pushWait(s, lane, lane->enqueued, "graph completion");
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t h) {
  if (!h)
    return fail(cudaErrorInvalidValue);
  auto* exec = reinterpret_cast<GraphExec*>(h);
  std::lock_guard<std::mutex> lock(st().m);
  for (auto& [from, lane] : exec->lanes)
    lane->destroyed = true; // queued replays still finish (they hold copies of the nodes)
  st().cv.notify_all();
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t h) {
  if (!h)
    return fail(cudaErrorInvalidValue);
  delete reinterpret_cast<Graph*>(h);
  return cudaSuccess;
}

} // extern "C"
