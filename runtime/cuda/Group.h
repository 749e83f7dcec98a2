// cuda/Group.h - the CUDA backend's multi-device group (not installed)
// defines: CommKind, CommSpec, CommPart, Group, LWRT_NCCL
//
// A multi-device trainer's step is one function per (logical device,
// stream) (lwrt/trainer.h, DeviceStep). The group runs each on a host
// thread of its own, kept across steps, with the context of its (device,
// stream) current: stream 0 is the device's runner's context, the others
// are contexts the group makes on the same GPU (cuda/Context.h). Logical
// devices map onto the GPUs of their runners; several may share one.
//
// Communication (lwrt/comm.h) takes one of two paths, chosen from the op's
// attributes and the device map alone, so that every participant takes the
// same one:
//  - NCCL, when every logical device has a GPU of its own: one communicator
//    set over all devices (rank = logical device) per stream index, made
//    with the group (two host threads never share a communicator). The
//    collectives whose participants are all the devices (all-gather and
//    reduce-scatter: in rank order, with pieces of equal size; strided ones
//    go through a staging buffer, rank after rank) are NCCL's; device
//    copies, and shards and unshards with contiguous pieces, are its sends
//    and receives.
//  - A host rendezvous otherwise (logical devices sharing a GPU, a subset of
//    the devices, uneven or strided shard pieces): each participant records an
//    event on its stream and registers its views; the last to arrive makes
//    its stream wait for all of them, does the copies (peer copies between
//    GPUs) and the sums (in `devices` order, so replicas get identical
//    bits) on its stream, and records a done event that every
//    participant's stream waits for.
// Events (recordEvent / waitEvent): one CUDA event per (device, event id); a
// wait first waits on the host until this step's record was issued, since
// the functions launch concurrently.
//
// Under mpirun (a Cluster), the group holds this process's logical devices
// only, each on a GPU of its own (its node-local rank's, common/
// MultiDevice.h), and NCCL spans every process: one communicator set per
// stream index over all N logical devices (ncclCommInitRank, rank = logical
// device, the unique id from rank 0 by MPI_Bcast), after a check that no
// GPU of a machine went to two processes (NCCL refuses that: the group says
// which ranks share which GPU instead). An op whose participants are all
// here takes the paths above; one that spans processes and that NCCL's
// collectives do not serve (a subset of the devices, uneven or strided
// pieces) goes through NCCL's sends and receives (cuda/CommP2p.cu): each
// receiver gets every sender's input and computes its own result, sums in
// `devices` order, so that replicas get identical bits.
#pragma once

#include "cuda/Context.h"
#include "lwrt/comm.h"

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <nccl.h>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#define LWRT_NCCL(call)                                                                            \
  do {                                                                                             \
    ncclResult_t lwrt_nccl_ = (call);                                                              \
    if (lwrt_nccl_ != ncclSuccess)                                                                 \
      return ::lwrt::cuda::fail(__FILE__, __LINE__,                                                \
                                std::string(#call) + ": " + ncclGetErrorString(lwrt_nccl_));       \
  } while (0)

namespace lwrt {
class Cluster;
}

namespace lwrt::cuda {

enum class CommKind {
  AllReduce,
  AllGather,
  ReduceScatter,
  Broadcast,
  ReduceTo,
  Copy,
  Shard,
  Unshard
};

/// A communication op's attributes (lwrt/comm.h).
struct CommSpec {
  CommKind kind;
  int op;
  std::vector<int64_t> devices;
  int64_t src = -1, dst = -1, axis = 0;
  std::vector<int64_t> sizes;
  /// Who takes part: `devices`, with src (broadcast, shard) or dst
  /// (reduce_to, unshard) added when not among them; {src, dst} for a copy.
  std::vector<int64_t> participants() const;
  /// The devices whose input the op reads, and those whose output it writes.
  std::vector<int64_t> senders() const;
  std::vector<int64_t> receivers() const;
  const char* name() const;
};

/// Copies `rows` entries along `axis` from `src` (from row srcRow) into
/// `dst` (from row dstRow), the other dims of the two equal, on `exec`'s
/// stream (peer copies where the GPUs differ).
bool copyRows(Context& exec, const TensorView& src, int srcGpu, int64_t srcRow,
              const TensorView& dst, int dstGpu, int64_t dstRow, int64_t axis, int64_t rows);
/// acc = x (first) or acc + x, `n` F32 or F64 elements, on `exec`'s stream.
bool accumulate(Context& exec, void* acc, const void* x, DType t, int64_t n, bool first);
/// acc = x (first) or acc + x, n elements of type t, on `stream`, unchecked; false
/// for a type that is not summed.
bool launchSum(cudaStream_t stream, void* acc, const void* x, DType t, int64_t n, bool first);

/// One participant's views (null where it has none).
struct CommPart {
  int64_t device = -1;
  Context* ctx = nullptr;
  const std::vector<TensorView>* ins = nullptr; ///< all-reduce
  const std::vector<TensorView>* outs = nullptr;
  const TensorView* in = nullptr;
  const TensorView* out = nullptr;
  int stream = 0; ///< the stream index of the calling function
};

class Group final : public DeviceGroup {
public:
  ~Group() override;
  /// `runners`: one per logical device, null for another process's
  /// (`cluster` then set).
  bool init(const ModelInfo& model, const std::vector<StepRunner*>& runners, Cluster* cluster,
            std::string* error);
  bool runStep(const std::vector<StepBuffers>& buffers, std::string* error) override;
  std::string notes() const override { return notes_; }

  /// The physical GPU of logical device d (-1: another process's).
  int gpu(int64_t d) const { return gpus_[static_cast<size_t>(d)]; }
  /// Whether logical device d is this process's.
  bool local(int64_t d) const { return gpu(d) >= 0; }
  int numDevices() const { return static_cast<int>(gpus_.size()); }
  /// True when the participants are on distinct GPUs.
  bool distinctGpus(const std::vector<int64_t>& participants) const;

  bool recordEvent(const StepBuffers& b, int event);
  bool waitEvent(const StepBuffers& b, int event);

  /// The host rendezvous path: returns once the op is launched (by whoever
  /// arrived last) and this participant's stream waits for it.
  bool meet(const CommSpec& spec, const CommPart& part);
  /// The path of an op NCCL's collectives do not serve: the host
  /// rendezvous when its participants are all this process's, else NCCL's
  /// sends and receives (cuda/CommP2p.cu).
  bool fallback(const CommSpec& spec, const CommPart& part);
  /// Whether NCCL serves the group (every device on a GPU of its own).
  bool nccl() const { return !comms_.empty(); }
  /// True when `devices` are all the group's devices (in rank order when
  /// `inOrder`) and NCCL serves the group.
  bool ncclOverAll(const std::vector<int64_t>& devices, bool inOrder) const;
  /// Device `device`'s communicator for its functions on stream `stream`.
  ncclComm_t communicator(int device, int stream) const {
    return comms_[static_cast<size_t>(stream)][static_cast<size_t>(device)];
  }
  /// Device memory of at least `bytes` on `gpu` for op `op` (kept across
  /// steps); call with the group's lock held.
  void* staging(int op, int gpu, size_t bytes);
  /// The same, taking the lock (the NCCL path's all-gather and
  /// reduce-scatter with strided pieces). Null when it cannot be had.
  void* stagingFor(int op, int gpu, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    return staging(op * 2, gpu, bytes);
  }

private:
  /// Under mpirun: each GPU of a machine driven by one process, then the
  /// communicators over every process's devices.
  bool initAcrossProcesses(int n, std::string* error);
  /// NCCL's sends and receives for an op across processes (CommP2p.cu).
  bool sendReceive(const CommSpec& spec, const CommPart& part);
  /// Device memory of at least `bytes` on `gpu` for tensor `k` of device
  /// `from`'s input of op `op` received by device `to` (kept across steps;
  /// from -1: `to`'s sum). Null when it cannot be had.
  void* received(int op, size_t k, int64_t to, int64_t from, int gpu, size_t bytes);
  void work(size_t index);
  /// Waits on the host for `ready` while the step is live; false with the
  /// context's error set (naming `what`) when a function failed meanwhile,
  /// or when nothing came for LWRT_DEADLOCK_SECONDS (default 120: a host
  /// wait is for another thread to issue work, not for the GPU), which
  /// then fails the step instead of hanging the trainer.
  template <typename Pred>
  bool await(std::unique_lock<std::mutex>& lock, Pred ready, const std::string& what);
  bool executeLocal(const CommSpec& spec, const std::vector<CommPart>& parts, Context& exec);

  struct Worker {
    DeviceStep step;
    Context* ctx = nullptr;
    std::thread thread;
    std::string error;
  };
  struct Meeting {
    int64_t step = -1;
    std::vector<CommPart> parts;
    int64_t doneStep = -1;
    std::string error;
    std::vector<cudaEvent_t> ready, done; ///< per logical device
  };

  std::vector<int> gpus_;
  int streams_ = 1;
  std::vector<std::unique_ptr<Context>> ownContexts_; ///< streams >= 1
  std::vector<Context*> contexts_;                    ///< [device * streams_ + stream]
  std::vector<std::unique_ptr<Worker>> workers_;
  std::string notes_;

  std::mutex mutex_;
  std::condition_variable cv_;
  const std::vector<StepBuffers>* buffers_ = nullptr;
  int64_t step_ = 0;     ///< the step being run (1, 2, ...)
  size_t pending_ = 0;   ///< functions of the step not returned yet
  bool aborted_ = false; ///< a function failed during this step
  bool broken_ = false;  ///< a step failed: the group's state is undefined
  bool stop_ = false;

  int deadlockSeconds_ = 120; ///< LWRT_DEADLOCK_SECONDS
  int numEvents_ = 0;
  std::vector<cudaEvent_t> events_;            ///< [device * numEvents_ + event]
  std::vector<int64_t> eventRecorded_;         ///< the step each was last recorded in
  std::vector<Meeting> meetings_;              ///< per comm op
  std::vector<std::vector<ncclComm_t>> comms_; ///< [stream][device]; empty: no NCCL
  std::map<std::pair<int, int>, std::pair<void*, size_t>> staging_; ///< (op, gpu)
  std::vector<void*> retired_; ///< staging replaced by a larger one
  Cluster* cluster_ = nullptr; ///< under mpirun
  /// (op, tensor, receiving device, sending device) -> its staging for
  /// sendReceive.
  std::map<std::tuple<int, size_t, int64_t, int64_t>, std::pair<void*, size_t>> received_;
};

} // namespace lwrt::cuda
