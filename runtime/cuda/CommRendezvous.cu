// The CUDA backend's multi-device group, its events and host rendezvous
// (Group.h): recordEvent and waitEvent, and the ops that meet on the host
// (logical devices sharing a GPU, a subset of the devices, uneven or strided
// shard pieces), whose last participant does the copies and sums.
#include "cuda/Group.h"
#include "cuda/KernelSupport.cuh"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace lwrt::cuda {

namespace {

/// A whole tensor `src` -> `dst` (same byte size).
bool copyWhole(Context& exec, const TensorView& src, int srcGpu, const TensorView& dst,
               int dstGpu) {
  if (src.data == dst.data && srcGpu == dstGpu)
    return true;
  size_t n = static_cast<size_t>(src.bytes());
  if (n == 0)
    return true;
  if (srcGpu == dstGpu)
    LWRT_CUDA(cudaMemcpyAsync(dst.data, src.data, n, cudaMemcpyDeviceToDevice, exec.stream));
  else
    LWRT_CUDA(cudaMemcpyPeerAsync(dst.data, dstGpu, src.data, srcGpu, n, exec.stream));
  return true;
}

} // namespace

template <typename Pred>
bool Group::await(std::unique_lock<std::mutex>& lock, Pred ready, const std::string& what) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(deadlockSeconds_);
  if (!cv_.wait_until(lock, deadline, [&] { return aborted_ || stop_ || ready(); })) {
    aborted_ = true; // the others stop waiting too
    cv_.notify_all();
    return fail(__FILE__, __LINE__,
                what + ": nothing arrived for " + std::to_string(deadlockSeconds_) +
                    " s (LWRT_DEADLOCK_SECONDS): the step's functions wait for each other");
  }
  if (ready())
    return true;
  return fail(__FILE__, __LINE__, what + ": another function of the step failed meanwhile");
}

//===--- Events ------------------------------------------------------------===//

bool Group::recordEvent(const StepBuffers& b, int event) {
  if (event < 0 || event >= numEvents_)
    return fail(__FILE__, __LINE__,
                "recordEvent: event " + std::to_string(event) + " is outside the model's " +
                    std::to_string(numEvents_));
  size_t k = static_cast<size_t>(b.device * numEvents_ + event);
  LWRT_CUDA(cudaEventRecord(events_[k], context().stream));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    eventRecorded_[k] = step_;
  }
  cv_.notify_all();
  return true;
}

bool Group::waitEvent(const StepBuffers& b, int event) {
  if (event < 0 || event >= numEvents_)
    return fail(__FILE__, __LINE__,
                "waitEvent: event " + std::to_string(event) + " is outside the model's " +
                    std::to_string(numEvents_));
  size_t k = static_cast<size_t>(b.device * numEvents_ + event);
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!await(
            lock, [&] { return eventRecorded_[k] == step_; },
            "waitEvent " + std::to_string(event) + " on device " + std::to_string(b.device) +
                ", stream " + std::to_string(b.stream) + " (not recorded yet)"))
      return false;
  }
  LWRT_CUDA(cudaStreamWaitEvent(context().stream, events_[k], 0));
  return true;
}

//===--- The host rendezvous -----------------------------------------------===//

void* Group::staging(int op, int gpu, size_t bytes) {
  auto& [ptr, size] = staging_[{op, gpu}];
  if (size >= bytes)
    return ptr;
  void* p = nullptr;
  if (cudaMalloc(&p, std::max<size_t>(bytes, 256)) != cudaSuccess)
    return nullptr;
  if (ptr)
    retired_.push_back(ptr); // earlier steps' work may still read it
  ptr = p;
  size = std::max<size_t>(bytes, 256);
  return ptr;
}

bool Group::meet(const CommSpec& spec, const CommPart& part) {
  std::string where = std::string(spec.name()) + " (comm op " + std::to_string(spec.op) + ")";
  if (spec.op < 0 || spec.op >= static_cast<int>(meetings_.size()))
    return fail(__FILE__, __LINE__,
                where + ": the op number is outside the model's " +
                    std::to_string(meetings_.size()));
  Meeting& m = meetings_[static_cast<size_t>(spec.op)];
  size_t me = static_cast<size_t>(part.device);
  Context& c = *part.ctx;
  LWRT_CUDA(cudaEventRecord(m.ready[me], c.stream));
  const size_t count = spec.participants().size();
  std::unique_lock<std::mutex> lock(mutex_);
  if (m.step != step_) {
    m.step = step_;
    m.parts.clear();
    m.error.clear();
  }
  m.parts.push_back(part);
  if (m.parts.size() == count) {
    // The last to arrive runs the op on its stream, after every participant's
    // earlier work.
    bool ok = true;
    for (const CommPart& p : m.parts) {
      cudaError_t st = cudaStreamWaitEvent(c.stream, m.ready[static_cast<size_t>(p.device)], 0);
      if (st != cudaSuccess) {
        ok = fail(__FILE__, __LINE__, where + ": cudaStreamWaitEvent: " + cudaGetErrorString(st));
        break;
      }
    }
    if (ok)
      ok = executeLocal(spec, m.parts, c);
    if (ok) {
      cudaError_t st = cudaEventRecord(m.done[me], c.stream);
      if (st != cudaSuccess)
        ok = fail(__FILE__, __LINE__, where + ": cudaEventRecord: " + cudaGetErrorString(st));
    }
    if (!ok) {
      m.error = c.error.empty() ? where + " failed" : c.error;
      aborted_ = true;
    }
    m.doneStep = step_;
    cv_.notify_all();
    return ok;
  }
  const int64_t step = step_;
  if (!await(
          lock, [&] { return m.doneStep == step; },
          where + " on device " + std::to_string(part.device) + " (" +
              std::to_string(m.parts.size()) + " of " + std::to_string(count) +
              " participants arrived)"))
    return false;
  if (!m.error.empty())
    return fail(__FILE__, __LINE__, where + ": another function of the step failed: " + m.error);
  // The executor's done event: its last record is this step's.
  size_t exec = static_cast<size_t>(m.parts.back().device);
  cudaEvent_t done = m.done[exec];
  lock.unlock();
  if (exec != me)
    LWRT_CUDA(cudaStreamWaitEvent(c.stream, done, 0));
  return true;
}

bool Group::executeLocal(const CommSpec& spec, const std::vector<CommPart>& parts, Context& exec) {
  const int eg = exec.device;
  auto partOf = [&](int64_t d) -> const CommPart* {
    for (const CommPart& p : parts)
      if (p.device == d)
        return &p;
    return nullptr;
  };
  std::string where = std::string(spec.name()) + " (comm op " + std::to_string(spec.op) + ")";
  auto reject = [&](const std::string& why) {
    return fail(__FILE__, __LINE__, where + ": " + why);
  };
  std::vector<int64_t> offsets{0};
  for (int64_t s : spec.sizes)
    offsets.push_back(offsets.back() + s);

  // acc = the sum over `devices` of each one's `pick(part)`, in their order;
  // inputs on other GPUs are first copied next to it.
  auto sum = [&](auto pick, void* acc, DType t, int64_t n) -> bool {
    size_t bytes = static_cast<size_t>(n * dtypeSize(t));
    void* remote = nullptr;
    for (size_t k = 0; k < spec.devices.size(); ++k) {
      const CommPart* p = partOf(spec.devices[k]);
      const TensorView* x = p ? pick(*p) : nullptr;
      if (!x || x->dtype != t || x->numel() != n)
        return reject("device " + std::to_string(spec.devices[k]) +
                      "'s operand does not match the others");
      const void* src = x->data;
      if (gpu(p->device) != eg) {
        if (!remote && !(remote = staging(spec.op * 2 + 1, eg, bytes)))
          return reject("cannot allocate " + std::to_string(bytes) + " bytes of staging memory");
        LWRT_CUDA(cudaMemcpyPeerAsync(remote, eg, x->data, gpu(p->device), bytes, exec.stream));
        src = remote;
      }
      if (!launchSum(context().stream, acc, src, t, n, k == 0))
        return reject("sums take F32, F64, bf16 or fp16 tensors");
      LWRT_CUDA(cudaGetLastError());
    }
    return true;
  };
  auto accFor = [&](const TensorView& like, TensorView& acc) -> bool {
    acc = like;
    acc.data = staging(spec.op * 2, eg, static_cast<size_t>(like.bytes()));
    if (!acc.data)
      return reject("cannot allocate " + std::to_string(like.bytes()) + " bytes of staging memory");
    return true;
  };

  switch (spec.kind) {
  case CommKind::AllReduce: {
    const CommPart* first = partOf(spec.devices[0]);
    size_t tensors = first->ins->size();
    for (const CommPart& p : parts)
      if (p.ins->size() != tensors || p.outs->size() != tensors)
        return reject("the devices pass different numbers of tensors");
    for (size_t k = 0; k < tensors; ++k) {
      const TensorView& like = (*first->ins)[k];
      TensorView acc;
      if (!accFor(like, acc) ||
          !sum([&](const CommPart& p) { return &(*p.ins)[k]; }, acc.data, like.dtype, like.numel()))
        return false;
      for (const CommPart& p : parts) {
        if ((*p.outs)[k].bytes() != acc.bytes())
          return reject("an output's size differs from the inputs'");
        if (!copyWhole(exec, acc, eg, (*p.outs)[k], gpu(p.device)))
          return false;
      }
    }
    return true;
  }
  case CommKind::ReduceScatter: {
    const TensorView& like = *partOf(spec.devices[0])->in;
    TensorView acc;
    if (!accFor(like, acc) ||
        !sum([](const CommPart& p) { return p.in; }, acc.data, like.dtype, like.numel()))
      return false;
    for (size_t i = 0; i < spec.devices.size(); ++i) {
      const CommPart* p = partOf(spec.devices[i]);
      if (!copyRows(exec, acc, eg, offsets[i], *p->out, gpu(p->device), 0, spec.axis,
                    spec.sizes[i]))
        return false;
    }
    return true;
  }
  case CommKind::ReduceTo: {
    const TensorView& like = *partOf(spec.devices[0])->in;
    const CommPart* d = partOf(spec.dst);
    TensorView acc;
    if (!d->out || d->out->bytes() != like.bytes())
      return reject("the destination's output does not match the inputs");
    return accFor(like, acc) &&
           sum([](const CommPart& p) { return p.in; }, acc.data, like.dtype, like.numel()) &&
           copyWhole(exec, acc, eg, *d->out, gpu(spec.dst));
  }
  case CommKind::AllGather:
    for (int64_t j : spec.devices) {
      const CommPart* to = partOf(j);
      for (size_t i = 0; i < spec.devices.size(); ++i) {
        const CommPart* from = partOf(spec.devices[i]);
        if (!copyRows(exec, *from->in, gpu(from->device), 0, *to->out, gpu(j), offsets[i],
                      spec.axis, spec.sizes[i]))
          return false;
      }
    }
    return true;
  case CommKind::Broadcast:
  case CommKind::Copy: {
    const CommPart* from = partOf(spec.src);
    std::vector<int64_t> to =
        spec.kind == CommKind::Copy ? std::vector<int64_t>{spec.dst} : spec.devices;
    for (int64_t j : to) {
      const CommPart* p = partOf(j);
      if (!p->out || p->out->bytes() != from->in->bytes())
        return reject("device " + std::to_string(j) + "'s output does not match the input");
      if (!copyWhole(exec, *from->in, gpu(spec.src), *p->out, gpu(j)))
        return false;
    }
    return true;
  }
  case CommKind::Shard: {
    const CommPart* from = partOf(spec.src);
    for (size_t i = 0; i < spec.devices.size(); ++i) {
      const CommPart* p = partOf(spec.devices[i]);
      if (!copyRows(exec, *from->in, gpu(spec.src), offsets[i], *p->out, gpu(p->device), 0,
                    spec.axis, spec.sizes[i]))
        return false;
    }
    return true;
  }
  case CommKind::Unshard: {
    const CommPart* to = partOf(spec.dst);
    for (size_t i = 0; i < spec.devices.size(); ++i) {
      const CommPart* p = partOf(spec.devices[i]);
      if (!copyRows(exec, *p->in, gpu(p->device), 0, *to->out, gpu(spec.dst), offsets[i], spec.axis,
                    spec.sizes[i]))
        return false;
    }
    return true;
  }
  }
  return reject("unknown op");
}

} // namespace lwrt::cuda
