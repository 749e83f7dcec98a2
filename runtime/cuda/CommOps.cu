// The communication calls of a multi-device CUDA step (lwrt/comm.h): each
// checks this device's views, then takes NCCL's collectives, or the
// group's host rendezvous, or, across processes, NCCL's sends and receives
// (cuda/Group.h says which, and why).
#include "cuda/Group.h"

#include <algorithm>

namespace lwrt::cuda {

namespace {

/// The calling function's group, or null with the context's error set.
Group* groupOf(const StepBuffers& b, const CommSpec& spec) {
  auto* g = static_cast<Group*>(b.group);
  std::string where = std::string(spec.name()) + " (comm op " + std::to_string(spec.op) + ")";
  if (!g) {
    fail(__FILE__, __LINE__, where + ": called outside a multi-device group");
    return nullptr;
  }
  for (int64_t d : spec.participants())
    if (d < 0 || d >= g->numDevices()) {
      fail(__FILE__, __LINE__,
           where + ": device " + std::to_string(d) + " is outside the group's " +
               std::to_string(g->numDevices()));
      return nullptr;
    }
  std::vector<int64_t> p = spec.participants();
  if (std::find(p.begin(), p.end(), int64_t{b.device}) == p.end()) {
    fail(__FILE__, __LINE__,
         where + ": device " + std::to_string(b.device) + " does not take part in it");
    return nullptr;
  }
  return g;
}

/// Checks of this device's views; each returns false with the error set.
struct Checker {
  const CommSpec& spec;
  int64_t device;
  bool reject(const std::string& why) const {
    return fail(__FILE__, __LINE__,
                std::string(spec.name()) + " (comm op " + std::to_string(spec.op) + ") on device " +
                    std::to_string(device) + ": " + why);
  }
  bool present(const TensorView* v, const char* what) const {
    return v && v->data ? true : reject(std::string("no ") + what + " view");
  }
  bool summable(const TensorView& v) const {
    const bool ok = v.dtype == DType::F32 || v.dtype == DType::F64 || v.dtype == DType::BF16 ||
                    v.dtype == DType::F16;
    return ok ? true : reject("sums take F32, F64, bf16 or fp16 views");
  }
  bool sameSize(const TensorView& a, const TensorView& b) const {
    return a.dtype == b.dtype && a.numel() == b.numel()
               ? true
               : reject("the input and output differ in type or size");
  }
  /// `v` is `rows` long along the axis, with the other dims of `like`.
  bool rows(const TensorView& v, const TensorView& like, int64_t rows) const {
    if (spec.axis < 0 || spec.axis >= v.rank() || v.rank() != like.rank() || v.dtype != like.dtype)
      return reject("the views do not fit the axis " + std::to_string(spec.axis));
    for (int64_t d = 0; d < v.rank(); ++d) {
      int64_t want = d == spec.axis ? rows : like.shape[static_cast<size_t>(d)];
      if (v.shape[static_cast<size_t>(d)] != want)
        return reject("a view is " + std::to_string(v.shape[static_cast<size_t>(d)]) +
                      " long along dim " + std::to_string(d) + ", not " + std::to_string(want));
    }
    return true;
  }
  /// `v` has the axis and is `rows` long along it.
  bool alongAxis(const TensorView& v, int64_t rows) const {
    if (spec.axis < 0 || spec.axis >= v.rank() || v.shape[static_cast<size_t>(spec.axis)] != rows)
      return reject("a view is not " + std::to_string(rows) + " long along axis " +
                    std::to_string(spec.axis));
    return true;
  }
  bool sizes() const {
    if (spec.sizes.size() != spec.devices.size())
      return reject(std::to_string(spec.sizes.size()) + " sizes for " +
                    std::to_string(spec.devices.size()) + " devices");
    return true;
  }
};

int64_t total(const std::vector<int64_t>& sizes) {
  int64_t n = 0;
  for (int64_t s : sizes)
    n += s;
  return n;
}

size_t indexOf(const std::vector<int64_t>& v, int64_t x) {
  return static_cast<size_t>(std::find(v.begin(), v.end(), x) - v.begin());
}

/// The entries before `axis`, and the bytes of one row along it.
void geometry(const TensorView& v, int64_t axis, int64_t* outer, int64_t* rowBytes) {
  *outer = 1;
  *rowBytes = dtypeSize(v.dtype);
  for (int64_t d = 0; d < v.rank(); ++d) {
    if (d < axis)
      *outer *= v.shape[static_cast<size_t>(d)];
    else if (d > axis)
      *rowBytes *= v.shape[static_cast<size_t>(d)];
  }
}

bool equalSizes(const std::vector<int64_t>& sizes) {
  return std::adjacent_find(sizes.begin(), sizes.end(), std::not_equal_to<>()) == sizes.end();
}

/// NCCL's type for a summable DType (bf16 and fp16 sums round their partial
/// sums to the type: equal to the CPU backend's float32 sum rounded once on
/// two devices, within reassociation on more).
ncclDataType_t ncclType(DType t) {
  switch (t) {
  case DType::F64:
    return ncclFloat64;
  case DType::BF16:
    return ncclBfloat16;
  case DType::F16:
    return ncclFloat16;
  default:
    return ncclFloat32;
  }
}

char* at(const TensorView& v, int64_t bytes) { return static_cast<char*>(v.data) + bytes; }

} // namespace

bool allReduce(const StepBuffers& b, int op, const std::vector<int64_t>& devices,
               const std::vector<TensorView>& in, const std::vector<TensorView>& out) {
  CommSpec spec{CommKind::AllReduce, op, devices, -1, -1, 0, {}};
  Checker check{spec, b.device};
  Group* g = groupOf(b, spec);
  if (!g)
    return false;
  if (in.size() != out.size())
    return check.reject("as many outputs as inputs are needed");
  for (size_t k = 0; k < in.size(); ++k)
    if (!check.present(&in[k], "input") || !check.present(&out[k], "output") ||
        !check.summable(in[k]) || !check.sameSize(in[k], out[k]))
      return false;
  if (!g->ncclOverAll(devices, false))
    return g->fallback(spec, {b.device, &context(), &in, &out, nullptr, nullptr, b.stream});
  ncclComm_t comm = g->communicator(b.device, b.stream);
  // The bucket in one NCCL group: out[k] = the sum of in[k].
  LWRT_NCCL(ncclGroupStart());
  for (size_t k = 0; k < in.size(); ++k) {
    ncclResult_t st = ncclAllReduce(in[k].data, out[k].data, static_cast<size_t>(in[k].numel()),
                                    ncclType(in[k].dtype), ncclSum, comm, context().stream);
    if (st != ncclSuccess) {
      (void)ncclGroupEnd();
      return check.reject(std::string("ncclAllReduce: ") + ncclGetErrorString(st));
    }
  }
  LWRT_NCCL(ncclGroupEnd());
  return true;
}

bool allGather(const StepBuffers& b, int op, const std::vector<int64_t>& devices, int64_t axis,
               const std::vector<int64_t>& sizes, const TensorView& in, const TensorView& out) {
  CommSpec spec{CommKind::AllGather, op, devices, -1, -1, axis, sizes};
  Checker check{spec, b.device};
  Group* g = groupOf(b, spec);
  if (!g || !check.sizes() || !check.present(&in, "input") || !check.present(&out, "output") ||
      !check.rows(in, out, sizes[indexOf(devices, b.device)]) || !check.rows(out, in, total(sizes)))
    return false;
  int64_t outer, rowBytes;
  geometry(in, axis, &outer, &rowBytes);
  if (!g->ncclOverAll(devices, true) || !equalSizes(sizes))
    return g->fallback(spec, {b.device, &context(), nullptr, nullptr, &in, &out, b.stream});
  ncclComm_t comm = g->communicator(b.device, b.stream);
  if (outer == 1) {
    LWRT_NCCL(ncclAllGather(in.data, out.data, static_cast<size_t>(in.bytes()), ncclUint8, comm,
                            context().stream));
    return true;
  }
  // Pieces strided along the axis: gathered rank after rank into staging
  // memory, then each put in its place.
  size_t piece = static_cast<size_t>(in.bytes());
  auto* staged = static_cast<char*>(g->stagingFor(op, context().device, piece * devices.size()));
  if (!staged)
    return check.reject("cannot allocate " + std::to_string(piece * devices.size()) +
                        " bytes of staging memory");
  LWRT_NCCL(ncclAllGather(in.data, staged, piece, ncclUint8, comm, context().stream));
  size_t width = static_cast<size_t>(sizes[0] * rowBytes);
  for (size_t r = 0; r < devices.size(); ++r)
    LWRT_CUDA(cudaMemcpy2DAsync(at(out, static_cast<int64_t>(r * width)),
                                static_cast<size_t>(total(sizes) * rowBytes), staged + r * piece,
                                width, width, static_cast<size_t>(outer), cudaMemcpyDeviceToDevice,
                                context().stream));
  return true;
}

bool reduceScatter(const StepBuffers& b, int op, const std::vector<int64_t>& devices, int64_t axis,
                   const std::vector<int64_t>& sizes, const TensorView& in, const TensorView& out) {
  CommSpec spec{CommKind::ReduceScatter, op, devices, -1, -1, axis, sizes};
  Checker check{spec, b.device};
  Group* g = groupOf(b, spec);
  if (!g || !check.sizes() || !check.present(&in, "input") || !check.present(&out, "output") ||
      !check.summable(in) || !check.rows(in, out, total(sizes)) ||
      !check.rows(out, in, sizes[indexOf(devices, b.device)]))
    return false;
  int64_t outer, rowBytes;
  geometry(in, axis, &outer, &rowBytes);
  if (!g->ncclOverAll(devices, true) || !equalSizes(sizes))
    return g->fallback(spec, {b.device, &context(), nullptr, nullptr, &in, &out, b.stream});
  ncclComm_t comm = g->communicator(b.device, b.stream);
  const void* send = in.data;
  if (outer != 1) {
    // Pieces strided along the axis: packed rank after rank into staging
    // memory first, so that each rank's piece is contiguous, as `out` is.
    size_t piece = static_cast<size_t>(out.bytes()),
           width = static_cast<size_t>(sizes[0] * rowBytes);
    auto* staged = static_cast<char*>(g->stagingFor(op, context().device, piece * devices.size()));
    if (!staged)
      return check.reject("cannot allocate " + std::to_string(piece * devices.size()) +
                          " bytes of staging memory");
    for (size_t r = 0; r < devices.size(); ++r)
      LWRT_CUDA(cudaMemcpy2DAsync(
          staged + r * piece, width, at(in, static_cast<int64_t>(r * width)),
          static_cast<size_t>(total(sizes) * rowBytes), width, static_cast<size_t>(outer),
          cudaMemcpyDeviceToDevice, context().stream));
    send = staged;
  }
  LWRT_NCCL(ncclReduceScatter(send, out.data, static_cast<size_t>(out.numel()), ncclType(in.dtype),
                              ncclSum, comm, context().stream));
  return true;
}

bool broadcast(const StepBuffers& b, int op, int64_t src, const std::vector<int64_t>& devices,
               const TensorView* in, const TensorView* out) {
  CommSpec spec{CommKind::Broadcast, op, devices, src, -1, 0, {}};
  Checker check{spec, b.device};
  Group* g = groupOf(b, spec);
  if (!g)
    return false;
  bool isSrc = b.device == src;
  bool receives = std::find(devices.begin(), devices.end(), int64_t{b.device}) != devices.end();
  if ((isSrc && !check.present(in, "input")) || (receives && !check.present(out, "output")) ||
      (isSrc && receives && !check.sameSize(*in, *out)))
    return false;
  std::vector<int64_t> p = spec.participants();
  if (!g->ncclOverAll(p, false))
    return g->fallback(spec, {b.device, &context(), nullptr, nullptr, in, out, b.stream});
  ncclComm_t comm = g->communicator(b.device, b.stream);
  const TensorView& mine = isSrc ? *in : *out;
  void* recv = receives ? out->data : in->data; // the root without an output: in place
  LWRT_NCCL(ncclBroadcast(isSrc ? in->data : recv, recv, static_cast<size_t>(mine.bytes()),
                          ncclUint8, static_cast<int>(src), comm, context().stream));
  return true;
}

bool reduceTo(const StepBuffers& b, int op, const std::vector<int64_t>& devices, int64_t dst,
              const TensorView* in, const TensorView* out) {
  CommSpec spec{CommKind::ReduceTo, op, devices, -1, dst, 0, {}};
  Checker check{spec, b.device};
  Group* g = groupOf(b, spec);
  if (!g)
    return false;
  bool sends = std::find(devices.begin(), devices.end(), int64_t{b.device}) != devices.end();
  bool isDst = b.device == dst;
  if ((sends && (!check.present(in, "input") || !check.summable(*in))) ||
      (isDst && !check.present(out, "output")) || (sends && isDst && !check.sameSize(*in, *out)))
    return false;
  if (!g->ncclOverAll(devices, false))
    return g->fallback(spec, {b.device, &context(), nullptr, nullptr, in, out, b.stream});
  ncclComm_t comm = g->communicator(b.device, b.stream);
  LWRT_NCCL(ncclReduce(in->data, isDst ? out->data : in->data, static_cast<size_t>(in->numel()),
                       ncclType(in->dtype), ncclSum, static_cast<int>(dst), comm,
                       context().stream));
  return true;
}

bool deviceCopy(const StepBuffers& b, int op, int64_t src, int64_t dst, const TensorView* in,
                const TensorView* out) {
  CommSpec spec{CommKind::Copy, op, {}, src, dst, 0, {}};
  Checker check{spec, b.device};
  if (src == dst)
    return check.reject("the source and destination are the same device");
  Group* g = groupOf(b, spec);
  if (!g)
    return false;
  bool isSrc = b.device == src;
  if ((isSrc && !check.present(in, "input")) || (!isSrc && !check.present(out, "output")))
    return false;
  // Between two GPUs of this process: a peer copy (a copy engine, no NCCL
  // kernel). NCCL's sends and receives, each a kernel on its own stream
  // and communicator, could deadlock when a GPU does not run two of them
  // at once and the devices issue them in different orders (a pipeline's
  // forward and backward transfers); across processes there is no other way.
  if (!g->nccl() || (g->local(src) && g->local(dst)))
    return g->fallback(spec, {b.device, &context(), nullptr, nullptr, in, out, b.stream});
  ncclComm_t comm = g->communicator(b.device, b.stream);
  if (isSrc)
    LWRT_NCCL(ncclSend(in->data, static_cast<size_t>(in->bytes()), ncclUint8, static_cast<int>(dst),
                       comm, context().stream));
  else
    LWRT_NCCL(ncclRecv(out->data, static_cast<size_t>(out->bytes()), ncclUint8,
                       static_cast<int>(src), comm, context().stream));
  return true;
}

bool shard(const StepBuffers& b, int op, int64_t src, const std::vector<int64_t>& devices,
           int64_t axis, const std::vector<int64_t>& sizes, const TensorView* in,
           const TensorView* out) {
  CommSpec spec{CommKind::Shard, op, devices, src, -1, axis, sizes};
  Checker check{spec, b.device};
  Group* g = groupOf(b, spec);
  if (!g || !check.sizes())
    return false;
  bool isSrc = b.device == src;
  size_t mine = indexOf(devices, b.device);
  bool receives = mine < devices.size();
  if ((isSrc && !check.present(in, "input")) || (receives && !check.present(out, "output")))
    return false;
  if (!check.alongAxis(isSrc ? *in : *out, isSrc ? total(sizes) : sizes[mine]) ||
      (isSrc && receives && !check.rows(*out, *in, sizes[mine])))
    return false;
  int64_t outer, rowBytes;
  geometry(isSrc ? *in : *out, axis, &outer, &rowBytes);
  if (!g->nccl() || outer != 1)
    return g->fallback(spec, {b.device, &context(), nullptr, nullptr, in, out, b.stream});
  ncclComm_t comm = g->communicator(b.device, b.stream);
  // Contiguous slabs: the source sends slab i to devices[i] (its own by a copy).
  LWRT_NCCL(ncclGroupStart());
  int64_t offset = 0;
  for (size_t i = 0; isSrc && i < devices.size(); offset += sizes[i] * rowBytes, ++i) {
    size_t bytes = static_cast<size_t>(sizes[i] * rowBytes);
    if (devices[i] == src) {
      cudaError_t st = cudaMemcpyAsync(out->data, at(*in, offset), bytes, cudaMemcpyDeviceToDevice,
                                       context().stream);
      if (st != cudaSuccess) {
        (void)ncclGroupEnd();
        return check.reject(std::string("cudaMemcpyAsync: ") + cudaGetErrorString(st));
      }
    } else if (ncclResult_t st = ncclSend(at(*in, offset), bytes, ncclUint8,
                                          static_cast<int>(devices[i]), comm, context().stream);
               st != ncclSuccess) {
      (void)ncclGroupEnd();
      return check.reject(std::string("ncclSend: ") + ncclGetErrorString(st));
    }
  }
  if (receives && !isSrc) {
    ncclResult_t st = ncclRecv(out->data, static_cast<size_t>(out->bytes()), ncclUint8,
                               static_cast<int>(src), comm, context().stream);
    if (st != ncclSuccess) {
      (void)ncclGroupEnd();
      return check.reject(std::string("ncclRecv: ") + ncclGetErrorString(st));
    }
  }
  LWRT_NCCL(ncclGroupEnd());
  return true;
}

bool unshard(const StepBuffers& b, int op, const std::vector<int64_t>& devices, int64_t dst,
             int64_t axis, const std::vector<int64_t>& sizes, const TensorView* in,
             const TensorView* out) {
  CommSpec spec{CommKind::Unshard, op, devices, -1, dst, axis, sizes};
  Checker check{spec, b.device};
  Group* g = groupOf(b, spec);
  if (!g || !check.sizes())
    return false;
  bool isDst = b.device == dst;
  size_t mine = indexOf(devices, b.device);
  bool sends = mine < devices.size();
  if ((isDst && !check.present(out, "output")) || (sends && !check.present(in, "input")))
    return false;
  if (!check.alongAxis(isDst ? *out : *in, isDst ? total(sizes) : sizes[mine]) ||
      (isDst && sends && !check.rows(*in, *out, sizes[mine])))
    return false;
  int64_t outer, rowBytes;
  geometry(isDst ? *out : *in, axis, &outer, &rowBytes);
  if (!g->nccl() || outer != 1)
    return g->fallback(spec, {b.device, &context(), nullptr, nullptr, in, out, b.stream});
  ncclComm_t comm = g->communicator(b.device, b.stream);
  // Contiguous slabs: devices[i] sends its piece to the destination, which
  // places it at its offset (its own by a copy).
  LWRT_NCCL(ncclGroupStart());
  int64_t offset = 0;
  for (size_t i = 0; isDst && i < devices.size(); offset += sizes[i] * rowBytes, ++i) {
    size_t bytes = static_cast<size_t>(sizes[i] * rowBytes);
    if (devices[i] == dst) {
      cudaError_t st = cudaMemcpyAsync(at(*out, offset), in->data, bytes, cudaMemcpyDeviceToDevice,
                                       context().stream);
      if (st != cudaSuccess) {
        (void)ncclGroupEnd();
        return check.reject(std::string("cudaMemcpyAsync: ") + cudaGetErrorString(st));
      }
    } else if (ncclResult_t st = ncclRecv(at(*out, offset), bytes, ncclUint8,
                                          static_cast<int>(devices[i]), comm, context().stream);
               st != ncclSuccess) {
      (void)ncclGroupEnd();
      return check.reject(std::string("ncclRecv: ") + ncclGetErrorString(st));
    }
  }
  if (sends && !isDst) {
    ncclResult_t st = ncclSend(in->data, static_cast<size_t>(in->bytes()), ncclUint8,
                               static_cast<int>(dst), comm, context().stream);
    if (st != ncclSuccess) {
      (void)ncclGroupEnd();
      return check.reject(std::string("ncclSend: ") + ncclGetErrorString(st));
    }
  }
  LWRT_NCCL(ncclGroupEnd());
  return true;
}

bool recordEvent(const StepBuffers& b, int event) {
  auto* g = static_cast<Group*>(b.group);
  if (!g)
    return fail(__FILE__, __LINE__, "recordEvent: called outside a multi-device group");
  return g->recordEvent(b, event);
}

bool waitEvent(const StepBuffers& b, int event) {
  auto* g = static_cast<Group*>(b.group);
  if (!g)
    return fail(__FILE__, __LINE__, "waitEvent: called outside a multi-device group");
  return g->waitEvent(b, event);
}

} // namespace lwrt::cuda
