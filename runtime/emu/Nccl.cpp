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
#include "NcclInternal.h"

namespace lwemu::nccl {

namespace {

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
    for (ncclComm* c : j.ranks) {
      why += ' ';
      why += rankName(c);
    }
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

} // namespace lwemu::nccl

using namespace lwemu::nccl;

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