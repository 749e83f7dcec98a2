// The CUDA backend's multi-device group: worker threads, the device sums and
// copies, NCCL communicators (Group.h). Events and the host rendezvous are in
// CommRendezvous.cu.
#include "common/Cluster.h"
#include "cuda/Group.h"
#include "cuda/KernelSupport.cuh"
#include "lwrt/bf16.h"
#include "lwrt/f16.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <set>

namespace lwrt::cuda {

namespace {

template <typename T> __global__ void sumInto(T* acc, const T* x, int64_t n, bool first) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x)
    acc[i] = first ? x[i] : acc[i] + x[i];
}

/// sumInto for bf16 (fp16 when !bf16) values: each addition in float32,
/// rounded to the type (lwrt/bf16.h, lwrt/f16.h). Two devices' sum is the
/// CPU backend's (float32, rounded once); more round after each addition.
__global__ void sumInto16(uint16_t* acc, const uint16_t* x, int64_t n, bool first, bool bf16) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    if (first) {
      acc[i] = x[i];
    } else if (bf16) {
      acc[i] = floatToBf16(bf16ToFloat(acc[i]) + bf16ToFloat(x[i]));
    } else {
      acc[i] = floatToF16(f16ToFloat(acc[i]) + f16ToFloat(x[i]));
    }
  }
}

} // namespace

/// acc = x (first) or acc + x, n elements of type t, on `stream`; false
/// for a type that is not summed.
bool launchSum(cudaStream_t stream, void* acc, const void* x, DType t, int64_t n, bool first) {
  if (t == DType::F32)
    sumInto<float><<<blocksFor(n), kThreads, 0, stream>>>(static_cast<float*>(acc),
                                                          static_cast<const float*>(x), n, first);
  else if (t == DType::F64)
    sumInto<double><<<blocksFor(n), kThreads, 0, stream>>>(static_cast<double*>(acc),
                                                           static_cast<const double*>(x), n, first);
  else if (is16Bit(t))
    sumInto16<<<blocksFor(n), kThreads, 0, stream>>>(
        static_cast<uint16_t*>(acc), static_cast<const uint16_t*>(x), n, first, t == DType::BF16);
  else
    return false;
  return true;
}

namespace {

std::string joined(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) {
    if (!s.empty())
      s += ','; // not `"," + ...`: a GCC 12 -O3 -Wrestrict false positive
    s += std::to_string(x);
  }
  return s;
}

} // namespace

bool accumulate(Context& exec, void* acc, const void* x, DType t, int64_t n, bool first) {
  if (n == 0)
    return true;
  if (!launchSum(exec.stream, acc, x, t, n, first))
    return fail(__FILE__, __LINE__, "sums take F32, F64, bf16 or fp16 tensors");
  LWRT_CUDA(cudaGetLastError());
  return true;
}

bool copyRows(Context& exec, const TensorView& src, int srcGpu, int64_t srcRow,
              const TensorView& dst, int dstGpu, int64_t dstRow, int64_t axis, int64_t rows) {
  int64_t outer = 1, inner = dtypeSize(src.dtype);
  for (int64_t d = 0; d < axis; ++d)
    outer *= src.shape[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < src.shape.size(); ++d)
    inner *= src.shape[d];
  const int64_t srcAxis = src.rank() == 0 ? 1 : src.shape[static_cast<size_t>(axis)];
  const int64_t dstAxis = dst.rank() == 0 ? 1 : dst.shape[static_cast<size_t>(axis)];
  size_t width = static_cast<size_t>(rows * inner), height = static_cast<size_t>(outer);
  size_t spitch = static_cast<size_t>(srcAxis * inner),
         dpitch = static_cast<size_t>(dstAxis * inner);
  auto* from = static_cast<const char*>(src.data) + srcRow * inner;
  auto* to = static_cast<char*>(dst.data) + dstRow * inner;
  if (width == 0 || height == 0 || (from == to && srcGpu == dstGpu))
    return true;
  if (height == 1 || (width == spitch && width == dpitch)) {
    if (srcGpu == dstGpu)
      LWRT_CUDA(cudaMemcpyAsync(to, from, width * height, cudaMemcpyDeviceToDevice, exec.stream));
    else
      LWRT_CUDA(cudaMemcpyPeerAsync(to, dstGpu, from, srcGpu, width * height, exec.stream));
    return true;
  }
  if (srcGpu == dstGpu) {
    LWRT_CUDA(cudaMemcpy2DAsync(to, dpitch, from, spitch, width, height, cudaMemcpyDeviceToDevice,
                                exec.stream));
    return true;
  }
  cudaMemcpy3DPeerParms p{};
  p.srcPtr = make_cudaPitchedPtr(const_cast<char*>(from), spitch, width, height);
  p.srcDevice = srcGpu;
  p.dstPtr = make_cudaPitchedPtr(to, dpitch, width, height);
  p.dstDevice = dstGpu;
  p.extent = make_cudaExtent(width, height, 1);
  LWRT_CUDA(cudaMemcpy3DPeerAsync(&p, exec.stream));
  return true;
}

std::vector<int64_t> CommSpec::participants() const {
  std::vector<int64_t> p = devices;
  auto add = [&](int64_t d) {
    if (std::find(p.begin(), p.end(), d) == p.end())
      p.push_back(d);
  };
  switch (kind) {
  case CommKind::Broadcast:
  case CommKind::Shard:
    if (std::find(p.begin(), p.end(), src) == p.end())
      p.insert(p.begin(), src);
    break;
  case CommKind::ReduceTo:
  case CommKind::Unshard:
    add(dst);
    break;
  case CommKind::Copy:
    p = {src, dst};
    break;
  default:
    break;
  }
  return p;
}

std::vector<int64_t> CommSpec::senders() const {
  switch (kind) {
  case CommKind::Broadcast:
  case CommKind::Copy:
  case CommKind::Shard:
    return {src};
  default:
    return devices;
  }
}

std::vector<int64_t> CommSpec::receivers() const {
  switch (kind) {
  case CommKind::ReduceTo:
  case CommKind::Unshard:
  case CommKind::Copy:
    return {dst};
  default:
    return devices;
  }
}

const char* CommSpec::name() const {
  switch (kind) {
  case CommKind::AllReduce:
    return "all_reduce";
  case CommKind::AllGather:
    return "all_gather";
  case CommKind::ReduceScatter:
    return "reduce_scatter";
  case CommKind::Broadcast:
    return "broadcast";
  case CommKind::ReduceTo:
    return "reduce_to";
  case CommKind::Copy:
    return "device_copy";
  case CommKind::Shard:
    return "shard";
  case CommKind::Unshard:
    return "unshard";
  }
  return "?";
}

//===--- The group ---------------------------------------------------------===//

bool Group::init(const ModelInfo& model, const std::vector<StepRunner*>& runners, Cluster* cluster,
                 std::string* error) {
  auto failed = [&](const std::string& what) {
    if (error)
      *error = what;
    return false;
  };
  // One device with several streams comes here too (the step's streams
  // are the group's workers); it needs no NCCL.
  if (model.numDevices < 1 || static_cast<int>(runners.size()) != model.numDevices)
    return failed("the CUDA group needs one runner per logical device (" +
                  std::to_string(model.numDevices) + " devices, " + std::to_string(runners.size()) +
                  " runners)");
  // The NCCL found must have what the group calls (cuda/Preflight.h).
  if (std::string why = checkNcclFunctions(missingNcclFunctions(), CUDART_VERSION / 1000);
      !why.empty())
    return failed(why);
  streams_ = std::max(1, model.streamsPerDevice);
  cluster_ = cluster;
  if (const char* v = std::getenv("LWRT_DEADLOCK_SECONDS"); v && std::atoi(v) > 0)
    deadlockSeconds_ = std::atoi(v);
  for (StepRunner* r : runners) {
    if (!r && cluster) { // another process's device
      gpus_.push_back(-1);
      continue;
    }
    Context* c = runnerContext(r);
    if (!c || c->device < 0)
      return failed("the CUDA group got a runner that is not a CUDA runner");
    gpus_.push_back(c->device);
  }
  int n = model.numDevices;
  contexts_.assign(static_cast<size_t>(n * streams_), nullptr);
  for (int d = 0; d < n; ++d) {
    if (!local(d))
      continue;
    contexts_[static_cast<size_t>(d * streams_)] = runnerContext(runners[static_cast<size_t>(d)]);
    for (int s = 1; s < streams_; ++s) {
      auto c = std::make_unique<Context>();
      std::string why;
      if (!initStreamContext(*c, *contexts_[static_cast<size_t>(d * streams_)], &why))
        return failed("device " + std::to_string(d) + ", stream " + std::to_string(s) + ": " + why);
      contexts_[static_cast<size_t>(d * streams_ + s)] = c.get();
      ownContexts_.push_back(std::move(c));
    }
  }
  for (Context* c : contexts_)
    if (c)
      c->keepReplaced = true;
  // Events and the rendezvous' ready/done events, each on its device.
  numEvents_ = std::max(0, model.numEvents);
  events_.assign(static_cast<size_t>(n * numEvents_), nullptr);
  eventRecorded_.assign(events_.size(), 0);
  meetings_.resize(static_cast<size_t>(std::max(0, model.numCommOps)));
  for (Meeting& m : meetings_) {
    m.ready.assign(static_cast<size_t>(n), nullptr);
    m.done.assign(static_cast<size_t>(n), nullptr);
  }
  for (int d = 0; d < n; ++d) {
    if (!local(d))
      continue;
    cudaError_t st = cudaSetDevice(gpus_[static_cast<size_t>(d)]);
    auto create = [&](cudaEvent_t* e) {
      if (st == cudaSuccess)
        st = cudaEventCreateWithFlags(e, cudaEventDisableTiming);
    };
    for (int e = 0; e < numEvents_; ++e)
      create(&events_[static_cast<size_t>(d * numEvents_ + e)]);
    for (Meeting& m : meetings_) {
      create(&m.ready[static_cast<size_t>(d)]);
      create(&m.done[static_cast<size_t>(d)]);
    }
    if (st != cudaSuccess)
      return failed(std::string("cudaEventCreateWithFlags on GPU ") +
                    std::to_string(gpus_[static_cast<size_t>(d)]) + ": " + cudaGetErrorString(st));
  }
  // Peer access between this process's GPUs where the hardware has it
  // (NVLink, PCIe): the device-to-device copies of the steps that do not go
  // through NCCL then travel directly instead of through host memory. A
  // pair without it keeps the staged copies.
  std::string peerNotes;
  {
    int current = 0;
    (void)cudaGetDevice(&current);
    std::set<int> gpus;
    for (int d = 0; d < n; ++d)
      if (local(d))
        gpus.insert(gpus_[static_cast<size_t>(d)]);
    for (int a : gpus)
      for (int b : gpus) {
        int can = 0;
        if (a == b || cudaDeviceCanAccessPeer(&can, a, b) != cudaSuccess || !can ||
            cudaSetDevice(a) != cudaSuccess)
          continue;
        cudaError_t st = cudaDeviceEnablePeerAccess(b, 0);
        if (st != cudaSuccess && st != cudaErrorPeerAccessAlreadyEnabled)
          peerNotes += (peerNotes.empty() ? "" : "; ") + std::string("no peer access from GPU ") +
                       std::to_string(a) + " to " + std::to_string(b) + ": " +
                       cudaGetErrorString(st);
      }
    (void)cudaGetLastError(); // an already-enabled pair is not an error
    (void)cudaSetDevice(current);
  }
  // NCCL when every device has a GPU of its own: one communicator set per
  // stream index, rank = logical device.
  if (cluster) {
    if (!initAcrossProcesses(n, error))
      return false;
  } else if (n > 1 && distinctGpus([&] {
               std::vector<int64_t> all;
               for (int d = 0; d < n; ++d)
                 all.push_back(d);
               return all;
             }())) {
    for (int s = 0; s < streams_; ++s) {
      std::vector<ncclComm_t> set(static_cast<size_t>(n), nullptr);
      ncclResult_t st = ncclCommInitAll(set.data(), n, gpus_.data());
      if (st != ncclSuccess) {
        for (ncclComm_t c : set)
          if (c)
            ncclCommDestroy(c);
        return failed("ncclCommInitAll over GPUs " +
                      joined(std::vector<int64_t>(gpus_.begin(), gpus_.end())) + " (stream " +
                      std::to_string(s) + "): " + ncclGetErrorString(st));
      }
      comms_.push_back(std::move(set));
    }
  }
  // Notes: which path the devices get.
  std::map<int, std::vector<int64_t>> byGpu;
  for (int d = 0; d < n; ++d)
    if (local(d))
      byGpu[gpus_[static_cast<size_t>(d)]].push_back(d);
  std::string shared;
  for (const auto& [g, ds] : byGpu)
    if (ds.size() > 1)
      shared += (shared.empty() ? "" : "; ") + std::string("logical devices ") + joined(ds) +
                " share GPU " + std::to_string(g);
  if (cluster)
    notes_ = "NCCL between the " + std::to_string(n) + " GPUs of " +
             std::to_string(cluster->size()) + " processes";
  else if (nccl())
    notes_ = "NCCL between " + std::to_string(byGpu.size()) + " GPUs";
  else if (byGpu.size() > 1)
    notes_ = "peer copies between " + std::to_string(byGpu.size()) +
             " GPUs (no NCCL: " + "some share a GPU)";
  if (!peerNotes.empty())
    notes_ += (notes_.empty() ? "" : "; ") + peerNotes;
  if (!shared.empty())
    notes_ += (notes_.empty() ? "" : "; ") + std::string("warning: ") + shared +
              " (local copies and reductions on their GPU, no NCCL between them)";
  notes_ += (notes_.empty() ? "" : "; ") + std::string("the step is launched directly on ") +
            std::to_string(n * streams_) +
            " streams (no CUDA graphs with several devices or streams)";
  // The workers, one per function of this process's devices, alive until
  // the group ends.
  for (const DeviceStep& s : model.deviceSteps) {
    if (s.device < 0 || s.device >= n || s.stream < 0 || s.stream >= streams_ || !s.fn)
      return failed("step function " + s.name + " names device " + std::to_string(s.device) +
                    ", stream " + std::to_string(s.stream) + " outside the model's " +
                    std::to_string(n) + " devices and " + std::to_string(streams_) + " streams");
    if (!local(s.device))
      continue; // another process runs it
    auto w = std::make_unique<Worker>();
    w->step = s;
    w->ctx = contexts_[static_cast<size_t>(s.device * streams_ + s.stream)];
    workers_.push_back(std::move(w));
  }
  for (size_t k = 0; k < workers_.size(); ++k)
    workers_[k]->thread = std::thread([this, k] { work(k); });
  return true;
}

Group::~Group() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_)
    if (w->thread.joinable())
      w->thread.join();
  for (size_t d = 0; d < gpus_.size(); ++d) {
    if (gpus_[d] < 0)
      continue;
    cudaSetDevice(gpus_[d]);
    cudaDeviceSynchronize();
  }
  for (auto& set : comms_)
    for (ncclComm_t c : set)
      if (c)
        ncclCommDestroy(c);
  for (cudaEvent_t e : events_)
    if (e)
      cudaEventDestroy(e);
  for (Meeting& m : meetings_) {
    for (cudaEvent_t e : m.ready)
      if (e)
        cudaEventDestroy(e);
    for (cudaEvent_t e : m.done)
      if (e)
        cudaEventDestroy(e);
  }
  for (auto& [key, mem] : staging_)
    cudaFree(mem.first);
  for (auto& [key, mem] : received_)
    cudaFree(mem.first);
  for (void* p : retired_)
    cudaFree(p);
  for (auto& c : ownContexts_)
    destroyContext(*c);
}

void Group::work(size_t index) {
  Worker& w = *workers_[index];
  ContextScope scope(*w.ctx); // for the thread's life: its GPU and its context
  int64_t seen = 0;
  for (;;) {
    StepBuffers b;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || step_ != seen; });
      if (stop_)
        return;
      seen = step_;
      b = (*buffers_)[static_cast<size_t>(w.step.device)];
    }
    b.device = w.step.device;
    b.stream = w.step.stream;
    b.group = this;
    std::string failed;
    bool ok = w.step.fn(b, &failed);
    if (ok) {
      cudaError_t st = cudaGetLastError();
      if (st != cudaSuccess) {
        ok = false;
        failed = std::string("a kernel launch: ") + cudaGetErrorString(st);
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    w.error.clear();
    if (!ok) {
      w.error = w.step.name + ": " + (failed.empty() ? "failed" : failed);
      if (!w.ctx->error.empty())
        w.error += ": " + w.ctx->error;
      w.ctx->error.clear();
      aborted_ = true;
    }
    --pending_;
    cv_.notify_all();
  }
}

bool Group::runStep(const std::vector<StepBuffers>& buffers, std::string* error) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto failed = [&](const std::string& what) {
    if (error)
      *error = what;
    return false;
  };
  if (broken_)
    return failed("the multi-device step cannot run again after a failed step");
  if (buffers.size() != gpus_.size())
    return failed("runStep got " + std::to_string(buffers.size()) + " buffer sets for " +
                  std::to_string(gpus_.size()) + " devices");
  if (buffers[0].marks) // the trainer refuses --profile for these
    return failed("a multi-device CUDA step does not time its ops yet");
  buffers_ = &buffers;
  aborted_ = false;
  pending_ = workers_.size();
  ++step_;
  cv_.notify_all();
  cv_.wait(lock, [&] { return pending_ == 0; });
  buffers_ = nullptr;
  if (!aborted_) {
    // Every function of the step has returned: a workspace replaced during
    // it (the first step's, as the convolutions pick their algorithms) can
    // be freed now, and only now, so that the memory plan's workspace is
    // all the step holds from the next step on.
    for (Context* c : contexts_) {
      if (!c || c->replaced.empty())
        continue;
      ContextScope scope(*c);
      if (!freeReplaced(*c))
        return failed("freeing the workspaces the step replaced on GPU " +
                      std::to_string(c->device) + ": " + c->error);
    }
    return true;
  }
  broken_ = true;
  // The first function that failed by itself, not because another did.
  std::string first, any;
  for (auto& w : workers_) {
    if (w->error.empty())
      continue;
    if (any.empty())
      any = w->error;
    if (first.empty() && w->error.find("another function of the step failed") == std::string::npos)
      first = w->error;
  }
  return failed(first.empty() ? any : first);
}

bool Group::distinctGpus(const std::vector<int64_t>& participants) const {
  std::set<int> seen;
  for (int64_t d : participants)
    if (!seen.insert(gpu(d)).second)
      return false;
  return true;
}

//===--- NCCL ---------------------------------------------------------------===//

bool Group::ncclOverAll(const std::vector<int64_t>& devices, bool inOrder) const {
  if (!nccl() || devices.size() != gpus_.size())
    return false;
  std::vector<bool> seen(gpus_.size(), false);
  for (size_t k = 0; k < devices.size(); ++k) {
    int64_t d = devices[k];
    if (d < 0 || d >= numDevices() || seen[static_cast<size_t>(d)] ||
        (inOrder && d != static_cast<int64_t>(k)))
      return false;
    seen[static_cast<size_t>(d)] = true;
  }
  return true;
}

//===--- The backend's entry point -----------------------------------------===//

std::unique_ptr<DeviceGroup> createGroup(const ModelInfo& model,
                                         const std::vector<StepRunner*>& runners, Cluster* cluster,
                                         std::string* error) {
  auto group = std::make_unique<Group>();
  if (!group->init(model, runners, cluster, error))
    return nullptr;
  return group;
}

} // namespace lwrt::cuda
