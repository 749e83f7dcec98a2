// emu/Nccl.cpp - NCCL on the emulated device: communicators among its devices, collectives, sends
//
// Emulates exactly the NCCL functions lwcc's CUDA runtime calls (ncclGetUniqueId,
// CommInitRank, CommInitAll, CommDestroy, GetErrorString, GroupStart, GroupEnd,
// AllReduce, AllGather, ReduceScatter, Reduce, Broadcast, Send, Recv), with
// nccl.h's signatures and NCCL's documented semantics.
//
// Communicators join the emulated devices of this one process: ncclCommInitRank
// blocks until all nranks ranks of its unique id have joined (at the outermost
// ncclGroupEnd inside a group), each rank bound to the device current at its
// call; two ranks on one device are refused with ncclInvalidUsage, as NCCL
// refuses duplicate GPUs. Several processes are not emulated: ranks of another
// process never join, and the joining ranks are reported as a hang.
//
// A call checks its arguments at once (ncclInvalidArgument, ncclInvalidUsage
// as NCCL returns them), its buffers against the device allocations and the
// communicator's device (an illegal address on a GPU stops the run), and its
// stream's device against the communicator's, then queues one task on its
// stream. When that task runs, each collective joins the rendezvous of its
// communicator's k-th collective (k counted per rank as its tasks run, so a
// replayed CUDA graph counts again); the last rank to arrive computes every
// rank's result (sums in rank order, each addition rounded to the data type,
// so that every rank gets the same bits) and releases the others. A send is
// posted for its receiver and taken by the matching receive: sends and
// receives match per (communicator, sender, receiver) in issue order.
//
// NCCL's rules are enforced rather than assumed:
//  - ranks whose k-th collectives differ (kind, count, type, op, root), or a
//    send and its receive that differ (count, type), would hang or corrupt
//    memory on GPUs: the run stops at once naming what each rank issued;
//  - a wait that sees no NCCL progress anywhere, and no change in any stream's
//    state (lwemu::describeStreams), for lwemu::hangSeconds() stops the run as
//    a hang, naming what each rank of the communicators involved waits in, and
//    the calls the others have not made;
//  - groups nest per host thread; the calls of the outermost group are issued
//    at its ncclGroupEnd, one task per stream, so that one thread can drive
//    several devices, and each task first posts all its sends, then runs its
//    collectives, then completes its receives, then waits until its own sends
//    are taken (the sends and receives of one group never deadlock);
//  - one NCCL operation at a time per device: a GPU need not run two NCCL
//    kernels at once, so the emulator models the strictest legal GPU. A task
//    holds its device's NCCL slot from the start of its NCCL work to its end
//    (the tasks of one group share it). Communicators used from several host
//    threads without one common order of their operations across devices then
//    deadlock, as NCCL's documentation warns they may ("Using multiple NCCL
//    communicators concurrently"), and the hang report names the slot holder.
// Only ncclSum is emulated among the reductions (lwcc calls no other), and
// no float8 reduction; asking for them stops the run rather than guessing.
// Communicator handles are never freed, so that a destroyed one is reported
// when used again instead of reading freed memory.
#include "Emu.h"
#include "lwrt/bf16.h"
#include "lwrt/f16.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cuda_runtime_api.h>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nccl.h>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

enum class Kind { AllReduce, AllGather, ReduceScatter, Reduce, Broadcast, Send, Recv };

/// One NCCL call as issued.
struct Call {
  Kind kind;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0; ///< per rank: AllGather's sendcount, ReduceScatter's recvcount
  ncclDataType_t type = ncclUint8;
  ncclRedOp_t op = ncclSum;
  int root = -1; ///< the root, or the peer of a send or receive
  ncclComm* comm = nullptr;
  cudaStream_t stream = nullptr;
};

struct Shared;

} // namespace

/// A communicator handle: one rank's side.
struct ncclComm {
  Shared* shared = nullptr; ///< set when every rank has joined
  int rank = 0, nranks = 0, device = 0;
  ncclResult_t init = ncclInProgress; ///< until every rank has joined
  bool destroyed = false;
  uint64_t issued = 0;  ///< collectives issued by the host
  uint64_t started = 0; ///< collectives its tasks have begun: k of the next
  std::string lastIssued;
  std::map<int, uint64_t> sendsIssued, recvsIssued; ///< per peer
  std::map<uint64_t, std::string> waits;            ///< per task: what it waits for
};

namespace {

/// The rendezvous of a communicator's k-th collective.
struct Meeting {
  std::vector<const Call*> calls; ///< per rank, null until it arrives
  int arrived = 0;
  bool done = false;
};

/// A send waiting for its receive.
struct Posted {
  const Call* call;
  bool taken = false;
};

/// A communicator: every rank's side.
struct Shared {
  int serial = 0;
  std::vector<ncclComm*> ranks;
  std::map<uint64_t, std::shared_ptr<Meeting>> meetings;
  std::map<std::pair<int, int>, std::deque<std::shared_ptr<Posted>>> channels; ///< (from, to)
  std::map<std::pair<int, int>, uint64_t> received;                            ///< (from, to)
};

/// The ranks of one unique id joining.
struct Joining {
  int serial = 0, nranks = 0, joined = 0;
  std::vector<ncclComm*> ranks;
};

/// A device's NCCL slot: the launch (a group, or one call) whose work runs there.
struct Slot {
  uint64_t launch = 0;
  std::map<uint64_t, std::string> holders; ///< task -> its calls
  std::string what() const {
    std::string out;
    for (auto& [task, calls] : holders)
      out += (out.empty() ? "" : "; ") + calls;
    return out;
  }
};

struct State {
  std::mutex m;
  std::condition_variable cv;
  uint64_t progress = 0; ///< NCCL events anywhere: a wait that sees none is a hang
  uint64_t launches = 0, tasks = 0;
  int ids = 0, joins = 0;
  std::set<ncclComm*> handles;
  std::vector<std::unique_ptr<Shared>> comms;
  std::map<std::string, std::shared_ptr<Joining>> joining; ///< by unique id
  std::map<int, Slot> slots;                               ///< by device
  bool reporting = false;
};

State& st() {
  static State* s = new State; // never destroyed: stream workers may outlive main
  return *s;
}

struct Group {
  int depth = 0;
  std::vector<Call> calls;
  std::vector<ncclComm*> inits;
  ncclResult_t error = ncclSuccess;
};
thread_local Group tlsGroup;

/// Makes `device` current on the calling host thread while it lives.
class OnDevice {
public:
  explicit OnDevice(int device) {
    cudaGetDevice(&saved_);
    cudaSetDevice(device);
  }
  ~OnDevice() { cudaSetDevice(saved_); }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

private:
  int saved_ = 0;
};

const char* kindName(Kind k) {
  static const char* const names[] = {"ncclAllReduce", "ncclAllGather", "ncclReduceScatter",
                                      "ncclReduce",    "ncclBroadcast", "ncclSend",
                                      "ncclRecv"};
  return names[static_cast<int>(k)];
}

const char* typeName(ncclDataType_t t) {
  static const char* const names[] = {"int8",    "uint8",    "int32",      "uint32",
                                      "int64",   "uint64",   "float16",    "float32",
                                      "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  return t >= 0 && t < ncclNumTypes ? names[t] : "?";
}

/// The bytes of one element (`t` a valid type).
size_t sizeOf(ncclDataType_t t) {
  static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  static_assert(sizeof sizes / sizeof *sizes == ncclNumTypes);
  return sizes[t];
}

bool isCollective(Kind k) { return k != Kind::Send && k != Kind::Recv; }
bool reduces(Kind k) {
  return k == Kind::AllReduce || k == Kind::ReduceScatter || k == Kind::Reduce;
}
bool rooted(Kind k) { return k == Kind::Reduce || k == Kind::Broadcast; }

std::string describe(const Call& c) {
  std::string s =
      std::string(kindName(c.kind)) + "(count " + std::to_string(c.count) + ", " + typeName(c.type);
  if (reduces(c.kind))
    s += c.op == ncclSum ? ", sum" : ", op " + std::to_string(c.op);
  if (rooted(c.kind))
    s += ", root " + std::to_string(c.root);
  if (c.kind == Kind::Send)
    s += ", to rank " + std::to_string(c.root);
  if (c.kind == Kind::Recv)
    s += ", from rank " + std::to_string(c.root);
  return s + ")";
}

std::string rankName(const ncclComm* c) {
  return "rank " + std::to_string(c->rank) + " (device " + std::to_string(c->device) + ")";
}

std::string commName(const ncclComm* c) {
  return "communicator #" + std::to_string(c->shared ? c->shared->serial : 0);
}

/// A refusal at the call: NCCL's code, with why on stderr (NCCL_DEBUG=WARN's line).
ncclResult_t refuse(ncclResult_t r, const std::string& why) {
  std::fprintf(stderr, "emulated NCCL WARN %s\n", why.c_str());
  if (tlsGroup.depth > 0 && tlsGroup.error == ncclSuccess)
    tlsGroup.error = r; // the group fails at its ncclGroupEnd, its calls dropped
  return r;
}

void bump() {
  ++st().progress;
  st().cv.notify_all();
}

std::string hangReport();

/// Waits (lock held) until `done`, stopping the run as a hang when for
/// hangSeconds() no NCCL operation made progress anywhere and no stream's
/// state changed either (a rank still computing towards its call is no hang).
template <typename Done> void await(std::unique_lock<std::mutex>& lock, Done done) {
  State& g = st();
  uint64_t seen = g.progress;
  std::string streams = lwemu::describeStreams();
  auto since = Clock::now(), sampled = since;
  while (!done()) {
    g.cv.wait_for(lock, std::chrono::milliseconds(50));
    auto now = Clock::now();
    if (g.progress != seen) {
      seen = g.progress;
      since = now;
    } else if (now - sampled >= std::chrono::milliseconds(250)) {
      sampled = now;
      std::string current = lwemu::describeStreams();
      if (current != streams && current.find("(the stream table is busy)") == std::string::npos) {
        streams = std::move(current);
        since = now;
      }
    }
    if (!g.reporting && now - since >= std::chrono::seconds(lwemu::hangSeconds())) {
      g.reporting = true;
      std::string report = hangReport();
      lock.unlock();
      lwemu::fatal(report);
    }
  }
}

/// Records what `task` of `comm` waits for while it lives (lock held when made and destroyed).
class Waiting {
public:
  Waiting(std::vector<ncclComm*> comms, uint64_t task, const std::string& what,
          const std::string& mark)
      : comms_(std::move(comms)), task_(task) {
    for (ncclComm* c : comms_)
      c->waits[task] = what;
    mark_.emplace("NCCL: " + mark);
  }
  ~Waiting() {
    for (ncclComm* c : comms_)
      c->waits.erase(task_);
  }
  Waiting(const Waiting&) = delete;
  Waiting& operator=(const Waiting&) = delete;

private:
  std::vector<ncclComm*> comms_;
  uint64_t task_;
  std::optional<lwemu::Blocked> mark_;
};

// --- The data movement, run by the last rank to arrive (no lock held) -----

template <typename U> void addInts(void* acc, const void* x, size_t n) {
  auto* a = static_cast<U*>(acc);
  auto* b = static_cast<const U*>(x);
  for (size_t i = 0; i < n; ++i)
    a[i] = static_cast<U>(a[i] + b[i]); // unsigned: wraps, as the GPU's integer add
}

template <uint16_t (*To)(float), float (*From)(uint16_t)>
void add16(void* acc, const void* x, size_t n) {
  auto* a = static_cast<uint16_t*>(acc);
  auto* b = static_cast<const uint16_t*>(x);
  for (size_t i = 0; i < n; ++i)
    a[i] = To(From(a[i]) + From(b[i])); // exact in float32, rounded once to the type
}

/// acc[i] = acc[i] + x[i], each addition rounded to `t`.
void sumInto(void* acc, const void* x, size_t n, ncclDataType_t t) {
  switch (t) {
  case ncclInt8:
  case ncclUint8:
    return addInts<uint8_t>(acc, x, n);
  case ncclInt32:
  case ncclUint32:
    return addInts<uint32_t>(acc, x, n);
  case ncclInt64:
  case ncclUint64:
    return addInts<uint64_t>(acc, x, n);
  case ncclFloat16:
    return add16<lwrt::floatToF16, lwrt::f16ToFloat>(acc, x, n);
  case ncclBfloat16:
    return add16<lwrt::floatToBf16, lwrt::bf16ToFloat>(acc, x, n);
  case ncclFloat32:
    for (size_t i = 0; i < n; ++i)
      static_cast<float*>(acc)[i] += static_cast<const float*>(x)[i];
    return;
  case ncclFloat64:
    for (size_t i = 0; i < n; ++i)
      static_cast<double*>(acc)[i] += static_cast<const double*>(x)[i];
    return;
  default:
    return; // refused at the call
  }
}

/// Every rank's result of a collective whose calls are `calls` (one per rank).
void compute(const std::vector<const Call*>& calls) {
  const Call& c = *calls[0];
  const size_t n = c.count, bytes = n * sizeOf(c.type), ranks = calls.size();
  auto at = [](const void* p, size_t off) { return static_cast<const char*>(p) + off; };
  std::vector<char> tmp; // staged first: in-place buffers are read before any is written
  switch (c.kind) {
  case Kind::AllReduce:
  case Kind::Reduce:
    tmp.assign(at(calls[0]->send, 0), at(calls[0]->send, bytes));
    for (size_t r = 1; r < ranks; ++r)
      sumInto(tmp.data(), calls[r]->send, n, c.type);
    for (size_t r = 0; r < ranks; ++r)
      if (c.kind == Kind::AllReduce || static_cast<int>(r) == c.root)
        std::memcpy(calls[r]->recv, tmp.data(), bytes);
    break;
  case Kind::Broadcast:
    tmp.assign(at(calls[c.root]->send, 0), at(calls[c.root]->send, bytes));
    for (size_t r = 0; r < ranks; ++r)
      std::memcpy(calls[r]->recv, tmp.data(), bytes);
    break;
  case Kind::AllGather:
    tmp.resize(bytes * ranks);
    for (size_t r = 0; r < ranks; ++r)
      std::memcpy(tmp.data() + r * bytes, calls[r]->send, bytes);
    for (size_t r = 0; r < ranks; ++r)
      std::memcpy(calls[r]->recv, tmp.data(), bytes * ranks);
    break;
  case Kind::ReduceScatter:
    tmp.assign(at(calls[0]->send, 0), at(calls[0]->send, bytes * ranks));
    for (size_t r = 1; r < ranks; ++r)
      sumInto(tmp.data(), calls[r]->send, n * ranks, c.type);
    for (size_t r = 0; r < ranks; ++r)
      std::memcpy(calls[r]->recv, tmp.data() + r * bytes, bytes);
    break;
  default:
    break;
  }
}

// --- A task: one stream's part of a launch ---------------------------------

bool sameCollective(const Call& a, const Call& b) {
  return a.kind == b.kind && a.count == b.count && a.type == b.type &&
         (!reduces(a.kind) || a.op == b.op) && (!rooted(a.kind) || a.root == b.root);
}

/// Joins the rendezvous of `c`'s communicator's next collective (lock held).
void collective(std::unique_lock<std::mutex>& lock, const Call& c, uint64_t task) {
  ncclComm* me = c.comm;
  Shared* s = me->shared;
  uint64_t k = me->started++;
  std::shared_ptr<Meeting>& entry = s->meetings[k];
  if (!entry) {
    entry = std::make_shared<Meeting>();
    entry->calls.assign(s->ranks.size(), nullptr);
  }
  std::shared_ptr<Meeting> meeting = entry;
  bool mismatch = false;
  for (const Call* other : meeting->calls)
    mismatch |= other && !sameCollective(*other, c);
  if (mismatch) {
    std::string what = "NCCL mismatch: " + commName(me) + "'s collective #" + std::to_string(k) +
                       " differs between its ranks (a hang or corrupt memory on GPUs):";
    for (size_t r = 0; r < meeting->calls.size(); ++r) {
      const Call* issued = static_cast<int>(r) == me->rank ? &c : meeting->calls[r];
      what += "\n  " + rankName(s->ranks[r]) +
              (issued ? " issued " + describe(*issued) : " has not reached it yet");
    }
    st().reporting = true;
    lock.unlock();
    lwemu::fatal(what);
  }
  meeting->calls[static_cast<size_t>(me->rank)] = &c;
  bump();
  if (++meeting->arrived == static_cast<int>(s->ranks.size())) {
    s->meetings.erase(k);
    lock.unlock();
    compute(meeting->calls);
    lock.lock();
    meeting->done = true;
    bump();
    return;
  }
  std::string what = "waits in its collective #" + std::to_string(k) + ", " + describe(c);
  Waiting w({me}, task, what,
            describe(c) + " #" + std::to_string(k) + " of " + commName(me) + ", " + rankName(me) +
                ": waits for the other ranks");
  await(lock, [&] { return meeting->done; });
}

/// Completes receive `c` from its peer's next send to this rank (lock held).
void receive(std::unique_lock<std::mutex>& lock, const Call& c, uint64_t task) {
  ncclComm* me = c.comm;
  Shared* s = me->shared;
  std::pair<int, int> key{c.root, me->rank};
  std::deque<std::shared_ptr<Posted>>& queue = s->channels[key];
  if (queue.empty()) {
    std::string what = "waits in " + describe(c) + ", its receive #" +
                       std::to_string(s->received[key]) + " from that rank";
    Waiting w({me}, task, what,
              describe(c) + " of " + commName(me) + ", " + rankName(me) + ": waits for the send");
    await(lock, [&] { return !queue.empty(); });
  }
  std::shared_ptr<Posted> posted = queue.front();
  queue.pop_front();
  const Call& from = *posted->call;
  if (from.count != c.count || from.type != c.type) {
    std::string what = "NCCL mismatch: on " + commName(me) + ", send #" +
                       std::to_string(s->received[key]) + " from rank " + std::to_string(c.root) +
                       " to rank " + std::to_string(me->rank) +
                       " differs from its receive (a hang or corrupt memory on GPUs):\n  " +
                       rankName(s->ranks[static_cast<size_t>(c.root)]) + " issued " +
                       describe(from) + "\n  " + rankName(me) + " issued " + describe(c);
    st().reporting = true;
    lock.unlock();
    lwemu::fatal(what);
  }
  ++s->received[key];
  if (c.count > 0) {
    lock.unlock();
    std::memmove(c.recv, from.send, c.count * sizeOf(c.type));
    lock.lock();
  }
  posted->taken = true;
  bump();
}

/// The NCCL work of one stream in launch `launch` on `device`.
void runTask(uint64_t launch, int device, const std::vector<Call>& calls) {
  State& g = st();
  std::unique_lock<std::mutex> lock(g.m);
  uint64_t task = ++g.tasks;
  std::vector<ncclComm*> comms;
  std::string what;
  for (const Call& c : calls) {
    if (std::find(comms.begin(), comms.end(), c.comm) == comms.end())
      comms.push_back(c.comm);
    what += (what.empty() ? "" : "; ") + describe(c) + " of " + commName(c.comm) + "'s rank " +
            std::to_string(c.comm->rank);
  }
  // 1. The device's NCCL slot: one launch's work at a time.
  Slot& slot = g.slots[device];
  if (slot.launch != 0 && slot.launch != launch) {
    std::string wait = what + " waits for device " + std::to_string(device) +
                       "'s NCCL slot, held by " + slot.what();
    Waiting w(comms, task, wait, wait + " (one NCCL operation at a time per device)");
    await(lock, [&] { return slot.launch == 0 || slot.launch == launch; });
  }
  slot.launch = launch;
  slot.holders[task] = what;
  bump();
  // 2. Every send posted; 3. the collectives in order; 4. the receives.
  std::vector<std::shared_ptr<Posted>> sent;
  for (const Call& c : calls)
    if (c.kind == Kind::Send) {
      sent.push_back(std::make_shared<Posted>(Posted{&c}));
      c.comm->shared->channels[{c.comm->rank, c.root}].push_back(sent.back());
      bump();
    }
  for (const Call& c : calls)
    if (isCollective(c.kind))
      collective(lock, c, task);
  for (const Call& c : calls)
    if (c.kind == Kind::Recv)
      receive(lock, c, task);
  // 5. The own sends taken.
  for (size_t i = 0; i < sent.size(); ++i)
    if (!sent[i]->taken) {
      const Call& c = *sent[i]->call;
      std::string wait =
          "waits until rank " + std::to_string(c.root) + " receives its " + describe(c);
      Waiting w({c.comm}, task, wait,
                describe(c) + " of " + commName(c.comm) + ", " + rankName(c.comm) +
                    ": waits for the receive");
      await(lock, [&] { return sent[i]->taken; });
    }
  // 6. The slot given back.
  slot.holders.erase(task);
  if (slot.holders.empty())
    slot.launch = 0;
  bump();
}

/// Queues `calls` (one launch: a group, or one call) as one task per stream.
ncclResult_t launch(std::vector<Call> calls) {
  if (calls.empty())
    return ncclSuccess;
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(st().m);
    id = ++st().launches;
  }
  std::vector<std::pair<std::pair<int, cudaStream_t>, std::vector<Call>>> tasks;
  for (const Call& c : calls) {
    std::pair<int, cudaStream_t> key{c.comm->device, c.stream};
    auto it = std::find_if(tasks.begin(), tasks.end(), [&](auto& t) { return t.first == key; });
    if (it == tasks.end())
      tasks.push_back({key, {c}});
    else
      it->second.push_back(c);
  }
  for (auto& [key, work] : tasks) {
    std::string name;
    for (const Call& c : work)
      name += (name.empty() ? "" : " + ") + std::string(kindName(c.kind));
    int device = key.first;
    OnDevice on(device); // the legacy stream (nullptr) is the communicator's device's
    cudaError_t e =
        lwemu::enqueue(key.second, name, [id, device, work = work] { runTask(id, device, work); });
    if (e != cudaSuccess)
      return refuse(ncclUnhandledCudaError, name + ": its stream cannot take work (" +
                                                std::string(cudaGetErrorString(e)) + ")");
  }
  return ncclSuccess;
}

// --- The hang report --------------------------------------------------------

/// What rank `c` has not done that the others of its communicator wait for (lock held).
std::string missing(const ncclComm* c) {
  const Shared* s = c->shared;
  std::string out;
  for (auto& [k, meeting] : s->meetings)
    if (!meeting->calls[static_cast<size_t>(c->rank)]) {
      out += "\n      has not started its collective #" + std::to_string(k) + ": ";
      out += c->issued <= k ? "never called"
             : !c->waits.empty()
                 ? "issued; it waits as said above"
                 : "issued, but its stream has not reached it (see the streams below)";
      out += c->issued > k ? ""
                           : " (it issued " + std::to_string(c->issued) + " collectives" +
                                 (c->lastIssued.empty() ? "" : ", the last " + c->lastIssued) + ")";
    }
  for (const ncclComm* o : s->ranks)
    for (auto& [peer, n] : o->recvsIssued)
      if (peer == c->rank && o->waits.size() > 0) {
        std::pair<int, int> key{c->rank, o->rank};
        auto ch = s->channels.find(key);
        auto rc = s->received.find(key);
        uint64_t got = rc == s->received.end() ? 0 : rc->second;
        bool queued = ch != s->channels.end() && !ch->second.empty();
        if (!queued && got < n)
          out += "\n      has not posted its send #" + std::to_string(got) + " to rank " +
                 std::to_string(o->rank) + " (it issued " +
                 std::to_string(c->sendsIssued.count(o->rank) ? c->sendsIssued.at(o->rank) : 0) +
                 " sends to it)";
      }
  for (auto& [key, queue] : s->channels)
    if (key.second == c->rank && !queue.empty())
      out += "\n      has not received " + std::to_string(queue.size()) +
             " send(s) posted by rank " + std::to_string(key.first);
  return out;
}

std::string hangReport() {
  State& g = st();
  std::string out = "NCCL hang: no NCCL operation made progress for " +
                    std::to_string(lwemu::hangSeconds()) + " s (LWEMU_HANG_SECONDS)";
  for (auto& [id, j] : g.joining) {
    out += "\n  ncclCommInitRank #" + std::to_string(j->serial) + " (" + std::to_string(j->nranks) +
           " ranks) waits for";
    for (int r = 0; r < j->nranks; ++r)
      if (!j->ranks[static_cast<size_t>(r)])
        out += " rank " + std::to_string(r);
    out += ", which never called it (joined:";
    for (ncclComm* c : j->ranks)
      if (c)
        out += " " + rankName(c);
    out += ")";
  }
  for (auto& s : g.comms) {
    bool active = !s->meetings.empty();
    for (ncclComm* c : s->ranks)
      active |= !c->waits.empty();
    for (auto& [key, queue] : s->channels)
      active |= !queue.empty();
    if (!active)
      continue;
    out += "\n  communicator #" + std::to_string(s->serial) + " (" +
           std::to_string(s->ranks.size()) + " ranks):";
    for (ncclComm* c : s->ranks) {
      out += "\n    " + rankName(c) + ":";
      for (auto& [task, what] : c->waits)
        out += "\n      " + what;
      std::string gap = missing(c);
      out += gap.empty() && c->waits.empty() ? " not in NCCL" : gap;
    }
  }
  bool slotWaits = false;
  for (auto& [device, slot] : g.slots)
    if (slot.launch)
      out += "\n  device " + std::to_string(device) + "'s NCCL slot is held by " + slot.what();
  for (auto& s : g.comms)
    for (ncclComm* c : s->ranks)
      for (auto& [task, what] : c->waits)
        slotWaits |= what.find("NCCL slot") != std::string::npos;
  if (slotWaits)
    out += "\n  At most one NCCL operation runs on a device at a time, as on the strictest GPU:"
           " communicators used from several host threads need one common order of their"
           " operations on every device, or they deadlock (NCCL's documentation: \"Using"
           " multiple NCCL communicators concurrently\").";
  return out;
}

// --- Checks at the call -----------------------------------------------------

/// The communicator's state, or fatal for a handle that is not a live one (lock taken).
ncclResult_t commState(ncclComm* c, const char* call) {
  std::lock_guard<std::mutex> lock(st().m);
  if (!st().handles.count(c))
    lwemu::fatal(std::string(call) + ": not an NCCL communicator");
  if (c->destroyed)
    lwemu::fatal(std::string(call) + ": the communicator (" + rankName(c) +
                 ") was destroyed by ncclCommDestroy");
  return c->init;
}

/// Checks a buffer: inside one allocation of the communicator's device.
void checkBuffer(const void* p, size_t bytes, const Call& c, const char* operand) {
  if (bytes == 0)
    return;
  std::string what = std::string(kindName(c.kind)) + ": " + operand;
  lwemu::checkDevice(p, bytes, what.c_str());
  int device = -1;
  lwemu::findAllocation(p, bytes, &device);
  if (device != c.comm->device)
    lwemu::fatal(what + " lies on device " + std::to_string(device) + ", but the communicator's " +
                 rankName(c.comm) + " runs on device " + std::to_string(c.comm->device));
}

/// Stops the run when two buffers overlap other than in the documented in-place way.
void checkOverlap(const Call& c, size_t sendBytes, size_t recvBytes, const char* inPlace,
                  const void* inPlaceSend) {
  auto s = reinterpret_cast<uintptr_t>(c.send), r = reinterpret_cast<uintptr_t>(c.recv);
  if (sendBytes && recvBytes && s < r + recvBytes && r < s + sendBytes && c.send != inPlaceSend)
    lwemu::fatal(std::string(kindName(c.kind)) +
                 ": sendbuff and recvbuff overlap without being in place (" + inPlace + ")");
}

/// Checks a call and issues it: into the open group, or as a launch of its own.
ncclResult_t issue(const Call& c) {
  const char* name = kindName(c.kind);
  if (!c.comm)
    return refuse(ncclInvalidArgument, std::string(name) + ": comm is null");
  ncclResult_t state = commState(c.comm, name);
  if (state == ncclInProgress)
    return refuse(ncclInvalidUsage, std::string(name) +
                                        ": the communicator's ncclCommInitRank has not completed"
                                        " (collectives and inits may not share a group)");
  if (state != ncclSuccess)
    return refuse(state, std::string(name) + ": the communicator failed to initialize");
  const int nranks = c.comm->nranks;
  if (c.type < 0 || c.type >= ncclNumTypes)
    return refuse(ncclInvalidArgument,
                  std::string(name) + ": invalid datatype " + std::to_string(c.type));
  if (reduces(c.kind)) {
    if (c.op < 0 || c.op >= ncclNumOps)
      return refuse(ncclInvalidArgument,
                    std::string(name) + ": invalid reduction operation " + std::to_string(c.op));
    if (c.op != ncclSum)
      lwemu::fatal(std::string(name) + ": only ncclSum is emulated, not op " +
                   std::to_string(c.op));
    if (c.type == ncclFloat8e4m3 || c.type == ncclFloat8e5m2)
      lwemu::fatal(std::string(name) + ": float8 reductions are not emulated");
  }
  if ((rooted(c.kind) || !isCollective(c.kind)) && (c.root < 0 || c.root >= nranks))
    return refuse(ncclInvalidArgument, std::string(name) + ": " +
                                           (rooted(c.kind) ? "root " : "peer ") +
                                           std::to_string(c.root) + " is not a rank of the " +
                                           std::to_string(nranks) + "-rank communicator");
  int streamDevice;
  {
    OnDevice on(c.comm->device); // NCCL runs on the communicator's device
    streamDevice = lwemu::streamDevice(c.stream);
  }
  if (streamDevice < 0)
    return refuse(ncclUnhandledCudaError, std::string(name) + ": the stream is not live");
  if (streamDevice != c.comm->device)
    return refuse(ncclInvalidUsage, std::string(name) + ": the stream belongs to device " +
                                        std::to_string(streamDevice) + ", the communicator's " +
                                        rankName(c.comm));
  if (isCollective(c.kind) && c.count == 0)
    return ncclSuccess; // an empty collective: NCCL launches nothing
  const size_t bytes = c.count * sizeOf(c.type), all = bytes * static_cast<size_t>(nranks);
  const bool isRoot = c.comm->rank == c.root;
  const auto* recv = static_cast<const char*>(c.recv);
  const auto* send = static_cast<const char*>(c.send);
  const size_t mine = bytes * static_cast<size_t>(c.comm->rank);
  switch (c.kind) {
  case Kind::AllReduce:
    checkBuffer(c.send, bytes, c, "sendbuff");
    checkBuffer(c.recv, bytes, c, "recvbuff");
    checkOverlap(c, bytes, bytes, "sendbuff == recvbuff", recv);
    break;
  case Kind::AllGather:
    checkBuffer(c.send, bytes, c, "sendbuff");
    checkBuffer(c.recv, all, c, "recvbuff");
    checkOverlap(c, bytes, all, "sendbuff == recvbuff + rank * sendcount", recv + mine);
    break;
  case Kind::ReduceScatter: {
    checkBuffer(c.send, all, c, "sendbuff");
    checkBuffer(c.recv, bytes, c, "recvbuff");
    // In place when recvbuff == sendbuff + rank * recvcount: recv lies in send.
    const void* inPlaceSend = recv == send + mine ? c.send : nullptr;
    checkOverlap(c, all, bytes, "recvbuff == sendbuff + rank * recvcount", inPlaceSend);
    break;
  }
  case Kind::Reduce:
    checkBuffer(c.send, bytes, c, "sendbuff");
    if (isRoot) {
      checkBuffer(c.recv, bytes, c, "recvbuff");
      checkOverlap(c, bytes, bytes, "sendbuff == recvbuff", recv);
    }
    break;
  case Kind::Broadcast:
    if (isRoot)
      checkBuffer(c.send, bytes, c, "sendbuff");
    checkBuffer(c.recv, bytes, c, "recvbuff");
    if (isRoot)
      checkOverlap(c, bytes, bytes, "sendbuff == recvbuff", recv);
    break;
  case Kind::Send:
    checkBuffer(c.send, bytes, c, "sendbuff");
    break;
  case Kind::Recv:
    checkBuffer(c.recv, bytes, c, "recvbuff");
    break;
  }
  if (tlsGroup.depth > 0 && !tlsGroup.inits.empty())
    return refuse(ncclInvalidUsage,
                  std::string(name) + ": collectives and ncclCommInitRank may not share a group");
  {
    std::lock_guard<std::mutex> lock(st().m);
    if (isCollective(c.kind)) {
      ++c.comm->issued;
      c.comm->lastIssued = describe(c);
    } else {
      ++(c.kind == Kind::Send ? c.comm->sendsIssued : c.comm->recvsIssued)[c.root];
    }
  }
  if (tlsGroup.depth == 0)
    return launch({c});
  tlsGroup.calls.push_back(c);
  return ncclSuccess;
}

/// Completes a joining when its last rank arrives (lock held).
void completeJoin(Joining& j) {
  State& g = st();
  std::set<int> devices;
  bool duplicate = false;
  for (ncclComm* c : j.ranks)
    duplicate |= !devices.insert(c->device).second;
  if (duplicate) {
    std::string why = "ncclCommInitRank: two ranks of one communicator on one device:";
    for (ncclComm* c : j.ranks)
      why += " " + rankName(c);
    std::fprintf(stderr, "emulated NCCL WARN %s\n", why.c_str());
    for (ncclComm* c : j.ranks)
      c->init = ncclInvalidUsage;
    return;
  }
  auto s = std::make_unique<Shared>();
  s->serial = static_cast<int>(g.comms.size()) + 1;
  s->ranks = j.ranks;
  for (ncclComm* c : j.ranks) {
    c->shared = s.get();
    c->init = ncclSuccess;
  }
  g.comms.push_back(std::move(s));
}

/// Waits (lock held) until `c`'s communicator is complete.
ncclResult_t awaitInit(std::unique_lock<std::mutex>& lock, ncclComm* c) {
  if (c->init == ncclInProgress) {
    lwemu::Blocked mark("ncclCommInitRank: " + rankName(c) + " waits for the other ranks");
    await(lock, [&] { return c->init != ncclInProgress; });
  }
  return c->init;
}

} // namespace

extern "C" {

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
  case ncclSuccess:
    return "no error";
  case ncclUnhandledCudaError:
    return "unhandled cuda error (the emulated NCCL printed why to stderr)";
  case ncclSystemError:
    return "unhandled system error";
  case ncclInternalError:
    return "internal error";
  case ncclInvalidArgument:
    return "invalid argument (the emulated NCCL printed why to stderr)";
  case ncclInvalidUsage:
    return "invalid usage (the emulated NCCL printed why to stderr)";
  case ncclRemoteError:
    return "remote process exited or there was a network error";
  case ncclInProgress:
    return "NCCL operation in progress";
  default:
    return "unknown result code";
  }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id)
    return refuse(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is null");
  std::memset(id, 0, sizeof *id);
  std::lock_guard<std::mutex> lock(st().m);
  std::snprintf(id->internal, sizeof id->internal, "lwemu-nccl-id-%d", ++st().ids);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  if (!comm)
    return refuse(ncclInvalidArgument, "ncclCommInitRank: comm is null");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return refuse(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " of " +
                                           std::to_string(nranks));
  if (!tlsGroup.calls.empty())
    return refuse(ncclInvalidUsage,
                  "ncclCommInitRank: collectives and ncclCommInitRank may not share a group");
  State& g = st();
  std::unique_lock<std::mutex> lock(g.m);
  std::string key(commId.internal, sizeof commId.internal);
  std::shared_ptr<Joining>& j = g.joining[key];
  if (!j) {
    j = std::make_shared<Joining>();
    j->serial = ++g.joins;
    j->nranks = nranks;
    j->ranks.assign(static_cast<size_t>(nranks), nullptr);
  }
  if (j->nranks != nranks || j->ranks[static_cast<size_t>(rank)]) {
    lock.unlock();
    return refuse(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " of " +
                                           std::to_string(nranks) +
                                           " does not fit the ranks already joined to this id");
  }
  auto* c = new ncclComm;
  c->rank = rank;
  c->nranks = nranks;
  c->device = lwemu::currentDevice();
  g.handles.insert(c);
  j->ranks[static_cast<size_t>(rank)] = c;
  if (++j->joined == nranks) {
    completeJoin(*j);
    g.joining.erase(key);
  }
  bump();
  *comm = c;
  if (tlsGroup.depth > 0) {
    tlsGroup.inits.push_back(c);
    return ncclSuccess;
  }
  ncclResult_t r = awaitInit(lock, c);
  if (r != ncclSuccess) {
    c->destroyed = true;
    *comm = nullptr;
  }
  return r;
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (!comms || ndev < 1)
    return refuse(ncclInvalidArgument, "ncclCommInitAll: comms is null or ndev < 1");
  std::vector<int> devices(static_cast<size_t>(ndev));
  for (int i = 0; i < ndev; ++i) {
    devices[static_cast<size_t>(i)] = devlist ? devlist[i] : i;
    if (devices[static_cast<size_t>(i)] < 0 ||
        devices[static_cast<size_t>(i)] >= lwemu::deviceCount())
      return refuse(ncclInvalidArgument, "ncclCommInitAll: no device " +
                                             std::to_string(devices[static_cast<size_t>(i)]));
  }
  if (std::set<int>(devices.begin(), devices.end()).size() != devices.size())
    return refuse(ncclInvalidUsage, "ncclCommInitAll: a device is listed twice");
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  ncclResult_t r = ncclGroupStart();
  for (int i = 0; i < ndev && r == ncclSuccess; ++i) {
    OnDevice on(devices[static_cast<size_t>(i)]);
    r = ncclCommInitRank(&comms[i], ndev, id, i);
  }
  ncclResult_t end = ncclGroupEnd();
  return r != ncclSuccess ? r : end;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm)
    return refuse(ncclInvalidArgument, "ncclCommDestroy: comm is null");
  commState(comm, "ncclCommDestroy");
  std::lock_guard<std::mutex> lock(st().m);
  comm->destroyed = true; // queued work still runs: it holds the communicator
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++tlsGroup.depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  Group& grp = tlsGroup;
  if (grp.depth == 0)
    return refuse(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--grp.depth > 0)
    return ncclSuccess;
  std::vector<Call> calls = std::move(grp.calls);
  std::vector<ncclComm*> inits = std::move(grp.inits);
  ncclResult_t error = grp.error;
  grp = Group{};
  if (error != ncclSuccess)
    return error; // a call of the group was refused: nothing of it runs
  ncclResult_t result = ncclSuccess;
  if (!inits.empty()) {
    std::unique_lock<std::mutex> lock(st().m);
    for (ncclComm* c : inits)
      if (ncclResult_t r = awaitInit(lock, c); r != ncclSuccess && result == ncclSuccess)
        result = r;
  }
  if (result != ncclSuccess)
    return result;
  return launch(std::move(calls));
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  return issue({Kind::AllReduce, sendbuff, recvbuff, count, datatype, op, -1, comm, stream});
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return issue(
      {Kind::AllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, -1, comm, stream});
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  return issue(
      {Kind::ReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, -1, comm, stream});
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return issue({Kind::Reduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream});
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  return issue({Kind::Broadcast, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream});
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return issue({Kind::Send, sendbuff, nullptr, count, datatype, ncclSum, peer, comm, stream});
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return issue({Kind::Recv, nullptr, recvbuff, count, datatype, ncclSum, peer, comm, stream});
}

} // extern "C"
