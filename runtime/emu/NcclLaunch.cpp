// emu/NcclLaunch.cpp - the emulated NCCL's tasks: rendezvous, data movement, sends, hangs
//
// What an issued NCCL launch does on its streams (emu/Nccl.cpp says what is
// emulated and the rules it enforces): each collective joins the rendezvous
// of its communicator's k-th collective and the last rank to arrive computes
// every rank's result; sends are posted for the matching receives; a wait
// without progress anywhere ends in the hang report.
#include "NcclInternal.h"

namespace lwemu::nccl {

const char* kindName(Kind k) {
  static const char* const names[] = {"ncclAllReduce", "ncclAllGather", "ncclReduceScatter",
                                      "ncclReduce",    "ncclBroadcast", "ncclSend",
                                      "ncclRecv"};
  return names[static_cast<int>(k)];
}

namespace {

const char* typeName(ncclDataType_t t) {
  static const char* const names[] = {"int8",    "uint8",    "int32",      "uint32",
                                      "int64",   "uint64",   "float16",    "float32",
                                      "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  return t >= 0 && t < ncclNumTypes ? names[t] : "?";
}

/// The bytes of one element (`t` a valid type).

} // namespace

size_t sizeOf(ncclDataType_t t) {
  static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  static_assert(sizeof sizes / sizeof *sizes == ncclNumTypes);
  return sizes[t];
}

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

namespace {

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
} // namespace

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

namespace {

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

} // namespace

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
      if (c) {
        out += ' ';
        out += rankName(c);
      }
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

} // namespace lwemu::nccl
