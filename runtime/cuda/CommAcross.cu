// The CUDA group across processes under mpirun (cuda/Group.h): the check
// that each GPU of a machine belongs to one process, the NCCL communicators
// over every process's GPUs, and the ops NCCL's collectives do not serve,
// carried by its sends and receives.
#include "common/Cluster.h"
#include "cuda/Group.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>

namespace lwrt::cuda {

namespace {

bool contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

/// `like` with dim `axis` set to `rows`.
std::vector<int64_t> withDim(std::vector<int64_t> like, int64_t axis, int64_t rows) {
  like[static_cast<size_t>(axis)] = rows;
  return like;
}

int64_t total(const std::vector<int64_t>& sizes) {
  int64_t n = 0;
  for (int64_t s : sizes)
    n += s;
  return n;
}

} // namespace

bool Group::initAcrossProcesses(int n, std::string* error) {
  auto failed = [&](const std::string& what) {
    if (error)
      *error = what;
    return false;
  };
  Cluster& c = *cluster_;
  // Each logical device on a GPU of its own, each GPU of a machine driven
  // by one process: NCCL refuses two ranks of a communicator on one GPU.
  // Rank 0 gathers every rank's "device gpu bus-id" lines and says what
  // is shared, the same message on every rank.
  std::string mine;
  for (int d = 0; d < n; ++d) {
    if (!local(d))
      continue;
    char bus[64] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, gpu(d)) != cudaSuccess)
      std::snprintf(bus, sizeof bus, "GPU %d", gpu(d));
    mine += std::to_string(d) + " " + std::to_string(gpu(d)) + " " + bus + "\n";
  }
  std::vector<unsigned char> verdict;
  std::string why;
  if (c.rank() != 0) {
    c.send(0, Cluster::kControl, std::vector<unsigned char>(mine.begin(), mine.end()));
    if (!c.receive(0, Cluster::kControl, verdict, &why))
      return failed(why);
  } else {
    struct Holder {
      int rank;
      int64_t device;
      int gpu;
    };
    std::map<std::pair<std::string, std::string>, Holder> holders; // (host, bus id)
    std::string problems;
    for (int r = 0; r < c.size(); ++r) {
      std::vector<unsigned char> lines(mine.begin(), mine.end());
      if (r != 0 && !c.receive(r, Cluster::kControl, lines, &why))
        return failed(why);
      std::istringstream in(std::string(lines.begin(), lines.end()));
      int64_t d;
      int g;
      std::string bus;
      while (in >> d >> g >> bus) {
        auto [it, added] = holders.emplace(std::make_pair(c.host(r), bus), Holder{r, d, g});
        if (added)
          continue;
        const Holder& h = it->second;
        std::string gpuName = "GPU " + std::to_string(g) + " (" + bus + ") of " + c.host(r);
        if (h.rank == r)
          problems += (problems.empty() ? "" : "; ") + std::string("logical devices ") +
                      std::to_string(h.device) + " and " + std::to_string(d) + " of rank " +
                      std::to_string(r) + " share " + gpuName;
        else
          problems += (problems.empty() ? "" : "; ") + std::string("ranks ") +
                      std::to_string(h.rank) + " and " + std::to_string(r) + " both drive " +
                      gpuName + " (logical devices " + std::to_string(h.device) + " and " +
                      std::to_string(d) + ")";
      }
    }
    if (!problems.empty())
      problems += ": across processes NCCL needs a GPU of its own for every logical device. "
                  "Start at most (GPUs of a machine) / (devices per process) processes on each "
                  "machine (mpirun --host a:P,b:P), map the GPUs with --devices, or share GPUs "
                  "in one process (no mpirun)";
    verdict.assign(problems.begin(), problems.end());
    for (int r = 1; r < c.size(); ++r)
      c.send(r, Cluster::kControl, verdict);
  }
  if (!verdict.empty())
    return failed(std::string(verdict.begin(), verdict.end()));
  // One communicator set per stream index over all n logical devices (rank
  // = logical device), this process's made together in one NCCL group.
  for (int s = 0; s < streams_; ++s) {
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (c.rank() == 0) {
      ncclResult_t st = ncclGetUniqueId(&id);
      if (st != ncclSuccess)
        return failed(std::string("ncclGetUniqueId: ") + ncclGetErrorString(st));
    }
    std::vector<unsigned char> bytes(sizeof id);
    std::memcpy(bytes.data(), &id, sizeof id);
    if (!c.broadcast(0, bytes, &why))
      return failed("NCCL's unique id from rank 0: " + why);
    std::memcpy(&id, bytes.data(), sizeof id);
    std::vector<ncclComm_t> set(static_cast<size_t>(n), nullptr);
    ncclResult_t st = ncclGroupStart();
    for (int d = 0; d < n && st == ncclSuccess; ++d) {
      if (!local(d))
        continue;
      if (cudaSetDevice(gpu(d)) != cudaSuccess)
        return failed("cudaSetDevice(" + std::to_string(gpu(d)) + ") failed");
      st = ncclCommInitRank(&set[static_cast<size_t>(d)], n, id, d);
    }
    ncclResult_t end = ncclGroupEnd();
    if (st == ncclSuccess)
      st = end;
    if (st != ncclSuccess) {
      for (ncclComm_t comm : set)
        if (comm)
          ncclCommDestroy(comm);
      return failed("ncclCommInitRank over the " + std::to_string(n) + " GPUs of " +
                    std::to_string(c.size()) + " processes (stream " + std::to_string(s) +
                    "): " + ncclGetErrorString(st));
    }
    comms_.push_back(std::move(set));
  }
  return true;
}

bool Group::fallback(const CommSpec& spec, const CommPart& part) {
  if (cluster_)
    for (int64_t d : spec.participants())
      if (!local(d))
        return sendReceive(spec, part);
  return meet(spec, part);
}

void* Group::received(int op, size_t k, int64_t to, int64_t from, int gpu, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& [ptr, size] = received_[{op, k, to, from}];
  if (size >= bytes && ptr)
    return ptr;
  void* p = nullptr;
  if (cudaSetDevice(gpu) != cudaSuccess ||
      cudaMalloc(&p, std::max<size_t>(bytes, 256)) != cudaSuccess)
    return nullptr;
  if (ptr)
    retired_.push_back(ptr); // earlier steps' work may still use it
  ptr = p;
  size = std::max<size_t>(bytes, 256);
  return ptr;
}

bool Group::sendReceive(const CommSpec& spec, const CommPart& part) {
  const std::string where = std::string(spec.name()) + " (comm op " + std::to_string(spec.op) +
                            ") on device " + std::to_string(part.device);
  auto reject = [&](const std::string& why) {
    return fail(__FILE__, __LINE__, where + ": " + why);
  };
  const int64_t me = part.device;
  Context& c = *part.ctx;
  const int g = gpu(me);
  ncclComm_t comm = communicator(static_cast<int>(me), part.stream);
  const std::vector<int64_t> senders = spec.senders(), receivers = spec.receivers();
  const bool sends = contains(senders, me), receives = contains(receivers, me);
  const size_t tensors = spec.kind == CommKind::AllReduce ? part.ins->size() : 1;
  auto input = [&](size_t k) -> const TensorView& {
    return spec.kind == CommKind::AllReduce ? (*part.ins)[k] : *part.in;
  };
  auto output = [&](size_t k) -> const TensorView& {
    return spec.kind == CommKind::AllReduce ? (*part.outs)[k] : *part.out;
  };
  std::vector<int64_t> offsets{0};
  for (int64_t s : spec.sizes)
    offsets.push_back(offsets.back() + s);
  auto indexOf = [&](int64_t d) {
    return static_cast<size_t>(std::find(spec.devices.begin(), spec.devices.end(), d) -
                               spec.devices.begin());
  };
  // The shape of device q's input, as this receiver knows it from its own
  // views and the op's sizes.
  auto inputShape = [&](int64_t q, size_t k) -> std::vector<int64_t> {
    const TensorView& out = output(k);
    switch (spec.kind) {
    case CommKind::AllGather:
    case CommKind::Unshard:
      return withDim(out.shape, spec.axis, spec.sizes[indexOf(q)]);
    case CommKind::Shard:
      return withDim(out.shape, spec.axis, total(spec.sizes));
    case CommKind::AllReduce:
    case CommKind::ReduceScatter:
      return input(k).shape; // every sender's is the same
    default:
      return out.shape; // broadcast, copy, reduce_to: the output's
    }
  };
  auto bytesOf = [&](const std::vector<int64_t>& shape, DType t) {
    int64_t b = dtypeSize(t);
    for (int64_t d : shape)
      b *= d;
    return static_cast<size_t>(b);
  };
  const bool direct = spec.kind == CommKind::Broadcast || spec.kind == CommKind::Copy;
  // Every sender's input to every other receiver; this receiver's from every
  // other sender into its staging (broadcast and copy: into the output).
  std::vector<std::vector<TensorView>> got(tensors); // by tensor, in `senders` order
  ncclResult_t st = ncclGroupStart();
  for (size_t k = 0; k < tensors && st == ncclSuccess; ++k) {
    if (sends)
      for (int64_t r : receivers)
        if (r != me && st == ncclSuccess)
          st = ncclSend(input(k).data, static_cast<size_t>(input(k).bytes()), ncclUint8,
                        static_cast<int>(r), comm, c.stream);
    if (!receives)
      continue;
    for (int64_t q : senders) {
      if (q == me) {
        got[k].push_back(input(k));
        continue;
      }
      // The sums' receivers send too: their input has the type; the others'
      // output does.
      const bool summing = spec.kind == CommKind::AllReduce || spec.kind == CommKind::ReduceScatter;
      TensorView v{nullptr, summing ? input(k).dtype : output(k).dtype, inputShape(q, k)};
      const size_t bytes = bytesOf(v.shape, v.dtype);
      v.data = direct ? output(k).data : received(spec.op, k, me, q, g, bytes);
      if (!v.data) {
        (void)ncclGroupEnd();
        return reject("cannot allocate " + std::to_string(bytes) + " bytes of staging memory");
      }
      if (st == ncclSuccess)
        st = ncclRecv(v.data, bytes, ncclUint8, static_cast<int>(q), comm, c.stream);
      got[k].push_back(v);
    }
  }
  ncclResult_t end = ncclGroupEnd();
  if (st == ncclSuccess)
    st = end;
  if (st != ncclSuccess)
    return reject(std::string("NCCL's sends and receives: ") + ncclGetErrorString(st));
  if (!receives)
    return true;
  // This receiver's result from the inputs, on its stream.
  for (size_t k = 0; k < tensors; ++k) {
    const TensorView& out = output(k);
    const std::vector<TensorView>& ins = got[k]; // in `senders` order
    switch (spec.kind) {
    case CommKind::AllReduce:
    case CommKind::ReduceTo:
    case CommKind::ReduceScatter: {
      // The sum in `devices` order (senders are `devices`), then this
      // receiver's part of it.
      const TensorView& like = ins[0];
      TensorView acc = like;
      acc.data = received(spec.op, k, me, -1, g, static_cast<size_t>(like.bytes()));
      if (!acc.data)
        return reject("cannot allocate " + std::to_string(like.bytes()) +
                      " bytes of staging memory");
      for (size_t i = 0; i < ins.size(); ++i)
        if (ins[i].dtype != like.dtype || ins[i].numel() != like.numel() ||
            !accumulate(c, acc.data, ins[i].data, like.dtype, like.numel(), i == 0))
          return reject("the inputs do not match");
      if (spec.kind == CommKind::ReduceScatter) {
        const size_t i = indexOf(me);
        if (!copyRows(c, acc, g, offsets[i], out, g, 0, spec.axis, spec.sizes[i]))
          return false;
      } else if (out.bytes() > 0) {
        if (out.bytes() != acc.bytes())
          return reject("the output's size differs from the inputs'");
        LWRT_CUDA(cudaMemcpyAsync(out.data, acc.data, static_cast<size_t>(out.bytes()),
                                  cudaMemcpyDeviceToDevice, c.stream));
      }
      break;
    }
    case CommKind::AllGather:
    case CommKind::Unshard:
      for (size_t i = 0; i < ins.size(); ++i)
        if (!copyRows(c, ins[i], g, 0, out, g, offsets[i], spec.axis, spec.sizes[i]))
          return false;
      break;
    case CommKind::Shard: {
      const size_t i = indexOf(me);
      if (!copyRows(c, ins[0], g, offsets[i], out, g, 0, spec.axis, spec.sizes[i]))
        return false;
      break;
    }
    case CommKind::Broadcast:
    case CommKind::Copy:
      // Received straight into the output; the source that also receives
      // copies its own input.
      if (me == spec.src && out.data != input(k).data && out.bytes() > 0)
        LWRT_CUDA(cudaMemcpyAsync(out.data, input(k).data, static_cast<size_t>(out.bytes()),
                                  cudaMemcpyDeviceToDevice, c.stream));
      break;
    }
  }
  return true;
}

} // namespace lwrt::cuda
