// emu/NcclInternal.h - what the emulated NCCL's files share (not installed)
// defines: Kind, Call, ncclComm, Meeting, Posted, Shared, Joining, Slot, State, st, Group,
//          tlsGroup, OnDevice, kindName, sizeOf, isCollective, reduces, rooted,
//          describe, rankName, commName, refuse,
//          bump, await, Waiting, launch, hangReport
//
// Nccl.cpp checks and issues the calls (nccl.h's functions); NcclLaunch.cpp
// runs them on the streams: rendezvous, data movement, sends and receives,
// the hang report. Both share the state below under its one mutex.
#pragma once

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

namespace lwemu::nccl {

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

} // namespace lwemu::nccl

/// A communicator handle: one rank's side.
struct ncclComm {
  lwemu::nccl::Shared* shared = nullptr; ///< set when every rank has joined
  int rank = 0, nranks = 0, device = 0;
  ncclResult_t init = ncclInProgress; ///< until every rank has joined
  bool destroyed = false;
  uint64_t issued = 0;  ///< collectives issued by the host
  uint64_t started = 0; ///< collectives its tasks have begun: k of the next
  std::string lastIssued;
  std::map<int, uint64_t> sendsIssued, recvsIssued; ///< per peer
  std::map<uint64_t, std::string> waits;            ///< per task: what it waits for
};

namespace lwemu::nccl {

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

inline State& st() {
  static State* s = new State; // never destroyed: stream workers may outlive main
  return *s;
}

struct Group {
  int depth = 0;
  std::vector<Call> calls;
  std::vector<ncclComm*> inits;
  ncclResult_t error = ncclSuccess;
};
inline thread_local Group tlsGroup;

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

const char* kindName(Kind k);
size_t sizeOf(ncclDataType_t t);
inline bool isCollective(Kind k) { return k != Kind::Send && k != Kind::Recv; }
inline bool reduces(Kind k) {
  return k == Kind::AllReduce || k == Kind::ReduceScatter || k == Kind::Reduce;
}
inline bool rooted(Kind k) { return k == Kind::Reduce || k == Kind::Broadcast; }
/// "AllReduce(count, type, op, root)" of a call, for messages.
std::string describe(const Call& c);
std::string rankName(const ncclComm* c);
std::string commName(const ncclComm* c);
/// A refusal at the call: NCCL's code, with why on stderr (NCCL_DEBUG=WARN's line).
ncclResult_t refuse(ncclResult_t r, const std::string& why);
/// Records NCCL progress and wakes every waiter (lock held).
void bump();
/// Issues `calls` (one group, or one call): a task per stream.
ncclResult_t launch(std::vector<Call> calls);
/// What every rank of the live communicators waits in, and the calls not made.
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

} // namespace lwemu::nccl
