// ConvGraph.cu - convolutions on cuDNN's graph API (backend descriptors)
//
// One configuration (direction, element type, TF32, shapes, attributes,
// buffer alignment, epilogue) becomes, at its first call:
//   1. tensor descriptors for x, w, y (NCHW strides, unique ids 'x' 'w' 'y'),
//      a convolution descriptor with separate pre and post paddings (so
//      asymmetric ONNX pads need no padded copy, unlike the legacy API),
//      one convolution operation (forward, backward data or backward
//      filter), for a forward epilogue pointwise operations after it (+ the
//      bias b [1,M,1,1], uid 'b', then ReLU) through virtual tensors, and an
//      operation graph holding them;
//   2. the engine configurations of heuristics mode A (mode FALLBACK when A
//      offers none that qualifies), filtered by their numerical notes:
//      never nondeterministic (a resumed run must compute the same weights),
//      never down-converting inputs or reducing in reduced precision, and
//      tensor cores (TF32 for F32 data) only when the context allows TF32;
//   3. an execution plan for each qualifying configuration (configurations
//      that cannot be finalized, or want more than the context's
//      convWorkspaceLimit (at most kConvWorkspaceLimit), are
//      skipped), at most kMaxCandidates of them;
//   4. with --autotune=cache or timed, each candidate timed on the real buffers (one warm-up, then
//      kTimedRuns runs between CUDA events); the fastest is kept and the
//      rest destroyed. A candidate that fails to run, or leaves a CUDA error
//      behind, is dropped (the error cleared); only a sticky error, after
//      which the CUDA context cannot work at all, ends the run. Without it
//      (--autotune=off) the heuristics' first candidate is kept untimed, the
//      same in every run; with the autotune cache's choice for the
//      configuration ("graph engine=K") the K-th candidate is taken
//      untimed, and with cache a choice made by timing is recorded there.
// Any failure of steps 1 to 3 (cuDNN refusing a descriptor), or no
// candidate left, makes the configuration fall back to the legacy API (an
// epilogue graph: to the plain convolution and the own epilogue kernel);
// the context counts the failures and keeps the first reason for the
// trainer's report.
//
// Lifetimes: the kept plan owns every descriptor it was built from (the
// tensors, operations and operation graph, and its engine configuration),
// released after the plan, as cuDNN's frontend keeps them alive with it;
// the context releases its plans before its cuDNN handle.
//
// LWRT_CONV_GRAPH_FAULT=describe|time makes step 1 or every timed candidate
// of step 4 fail for every configuration, as a cuDNN error or a faulting
// kernel launch would (tools/gpu/check.sh checks the fallback with it).
// Calls then execute the kept plan with a variant pack per buffer triple,
// made once and cached (the arena gives every call site fixed addresses),
// so a replayed step does no descriptor work.
#include "cuda/Conv.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

namespace lwrt::cuda {

namespace {

constexpr int kMaxCandidates = 8;
constexpr int kTimedRuns = 3;
/// Variant packs kept per plan before the cache starts over.
constexpr size_t kMaxPacks = 64;

/// A backend descriptor that destroys itself.
class Desc {
public:
  Desc() = default;
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  Desc(Desc&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  Desc& operator=(Desc&& o) noexcept {
    std::swap(d_, o.d_);
    return *this;
  }
  ~Desc() {
    if (d_)
      (void)cudnnBackendDestroyDescriptor(d_);
  }
  cudnnStatus_t create(cudnnBackendDescriptorType_t type) {
    return cudnnBackendCreateDescriptor(type, &d_);
  }
  cudnnBackendDescriptor_t get() const { return d_; }
  cudnnBackendDescriptor_t* addr() { return &d_; }

private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

/// Sets one attribute (a count of values of one type).
template <typename V>
cudnnStatus_t set(Desc& d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                  int64_t count, const V* values) {
  return cudnnBackendSetAttribute(d.get(), name, type, count, values);
}

constexpr int64_t kUidX = 'x', kUidW = 'w', kUidY = 'y', kUidB = 'b';
/// The virtual tensors between a convolution and its epilogue.
constexpr int64_t kUidConv = 'c', kUidBiased = 'a';

/// Whether LWRT_CONV_GRAPH_FAULT names `stage` (a test of the fallbacks).
bool faultInjected(const char* stage) {
  static const char* fault = std::getenv("LWRT_CONV_GRAPH_FAULT");
  return fault && std::strcmp(fault, stage) == 0;
}

/// A kernel launched with no threads: the launch fails with a (non-sticky)
/// invalid-configuration error, as a faulting candidate would leave one.
__global__ void launchedWithoutThreads() {}

/// An NCHW tensor descriptor with unique id `uid` (`virt`: an intermediate
/// of the graph that never reaches memory).
bool tensor(Desc& d, const int64_t (&dims)[4], cudnnDataType_t dt, int64_t uid, int64_t align,
            bool virt = false) {
  int64_t strides[4] = {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
  if (faultInjected("describe")) // as cuDNN refusing the descriptor
    return fail(__FILE__, __LINE__, "cudnnBackendFinalize: refused (LWRT_CONV_GRAPH_FAULT)");
  LWRT_CUDNN(d.create(CUDNN_BACKEND_TENSOR_DESCRIPTOR));
  LWRT_CUDNN(set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
  LWRT_CUDNN(set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
  LWRT_CUDNN(set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
  LWRT_CUDNN(set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  LWRT_CUDNN(set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
  if (virt) {
    bool yes = true;
    LWRT_CUDNN(set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes));
  }
  LWRT_CUDNN(cudnnBackendFinalize(d.get()));
  return true;
}

/// A pointwise operation y = mode(x[, b]) computed in `prec`.
bool pointwise(std::deque<Desc>& keep, cudnnPointwiseMode_t mode, cudnnDataType_t prec, Desc& x,
               Desc* b, Desc& y, Desc*& op) {
  Desc& pw = keep.emplace_back();
  LWRT_CUDNN(pw.create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR));
  LWRT_CUDNN(set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
  LWRT_CUDNN(set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
  LWRT_CUDNN(cudnnBackendFinalize(pw.get()));
  Desc& o = keep.emplace_back();
  LWRT_CUDNN(o.create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR));
  LWRT_CUDNN(set(o, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                 pw.addr()));
  LWRT_CUDNN(
      set(o, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, x.addr()));
  if (b)
    LWRT_CUDNN(
        set(o, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, b->addr()));
  LWRT_CUDNN(
      set(o, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, y.addr()));
  LWRT_CUDNN(cudnnBackendFinalize(o.get()));
  op = &o;
  return true;
}

/// The convolution descriptor: cross-correlation, as ONNX's Conv.
bool convolution(Desc& d, const Conv2dParams& p, cudnnDataType_t compute) {
  int64_t dims = 2;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  int64_t pre[2] = {p.pads[0], p.pads[1]}, post[2] = {p.pads[2], p.pads[3]};
  LWRT_CUDNN(d.create(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR));
  LWRT_CUDNN(set(d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims));
  LWRT_CUDNN(set(d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute));
  LWRT_CUDNN(set(d, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
  LWRT_CUDNN(set(d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pre));
  LWRT_CUDNN(set(d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, post));
  LWRT_CUDNN(set(d, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, p.dilations));
  LWRT_CUDNN(set(d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, p.strides));
  LWRT_CUDNN(cudnnBackendFinalize(d.get()));
  return true;
}

/// The attribute names of one direction's operation: x, w, y, descriptor,
/// alpha, beta (x and w are dx and dw for the backward directions).
struct OpNames {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};

OpNames opNames(ConvDir dir) {
  switch (dir) {
  case ConvDir::Forward:
    return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
            CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
            CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
            CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
            CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
            CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
            CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
  case ConvDir::BackwardData:
    return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
  case ConvDir::BackwardFilter:
    break;
  }
  return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
}

/// Whether an engine's numerical notes let it run this configuration.
bool qualifies(Desc& cfg, bool tensorCores) {
  Desc engine;
  if (engine.create(CUDNN_BACKEND_ENGINE_DESCRIPTOR) != CUDNN_STATUS_SUCCESS)
    return false;
  int64_t n = 0;
  if (cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                               engine.addr()) != CUDNN_STATUS_SUCCESS)
    return false;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  n = 0;
  if (cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                               CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n,
                               notes) != CUDNN_STATUS_SUCCESS)
    return false;
  for (int64_t k = 0; k < n && k < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; ++k) {
    switch (notes[k]) {
    case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC:
    case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
    case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION:
      return false;
    case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:
      if (!tensorCores)
        return false;
      break;
    default:
      break;
    }
  }
  return true;
}

/// The engine configurations heuristics `mode` offers for `graph`.
std::vector<Desc> engineConfigs(Desc& graph, cudnnBackendHeurMode_t mode) {
  std::vector<Desc> out;
  Desc heur;
  if (heur.create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR) != CUDNN_STATUS_SUCCESS ||
      set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
          graph.addr()) != CUDNN_STATUS_SUCCESS ||
      set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode) !=
          CUDNN_STATUS_SUCCESS ||
      cudnnBackendFinalize(heur.get()) != CUDNN_STATUS_SUCCESS)
    return out;
  int64_t count = 0;
  if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                               nullptr) != CUDNN_STATUS_SUCCESS ||
      count <= 0)
    return out;
  std::vector<Desc> cfgs(static_cast<size_t>(count));
  std::vector<cudnnBackendDescriptor_t> raw;
  for (Desc& c : cfgs) {
    if (c.create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR) != CUDNN_STATUS_SUCCESS)
      return out;
    raw.push_back(c.get());
  }
  int64_t got = 0;
  if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                               raw.data()) != CUDNN_STATUS_SUCCESS)
    return out;
  cfgs.resize(static_cast<size_t>(std::clamp<int64_t>(got, 0, count)));
  return cfgs;
}

/// A finalized execution plan, the engine configuration it was made from
/// (kept with it), and its workspace.
struct Candidate {
  Desc cfg;
  Desc plan;
  size_t workspace = 0;
  float ms = 0;
  int ordinal = 0; ///< its place among the qualifying candidates (the cache's name)
};

/// An execution plan of `cfg`, or false when cuDNN will not finalize it
/// (the configuration is then skipped, not an error).
bool makePlan(Desc& cfg, Candidate& c) {
  cudnnHandle_t handle = context().cudnn;
  if (c.plan.create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) != CUDNN_STATUS_SUCCESS ||
      set(c.plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle) !=
          CUDNN_STATUS_SUCCESS ||
      set(c.plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
          cfg.addr()) != CUDNN_STATUS_SUCCESS ||
      cudnnBackendFinalize(c.plan.get()) != CUDNN_STATUS_SUCCESS)
    return false;
  int64_t bytes = 0, n = 0;
  if (cudnnBackendGetAttribute(c.plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                               CUDNN_TYPE_INT64, 1, &n, &bytes) != CUDNN_STATUS_SUCCESS ||
      bytes < 0 || static_cast<size_t>(bytes) > context().convWorkspaceLimit)
    return false;
  c.workspace = static_cast<size_t>(bytes);
  return true;
}

/// A finalized variant pack: the three buffers (and the bias, when `b` is
/// not null) and the workspace.
bool variantPack(Desc& d, void* x, void* w, void* y, void* b, void* ws) {
  void* ptrs[4] = {x, w, y, b};
  int64_t uids[4] = {kUidX, kUidW, kUidY, kUidB};
  int64_t n = b ? 4 : 3;
  LWRT_CUDNN(d.create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR));
  LWRT_CUDNN(set(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs));
  LWRT_CUDNN(set(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids));
  LWRT_CUDNN(set(d, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
  LWRT_CUDNN(cudnnBackendFinalize(d.get()));
  return true;
}

/// The two timing events of a search, destroyed when it ends.
struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  ~Events() {
    if (start)
      (void)cudaEventDestroy(start);
    if (stop)
      (void)cudaEventDestroy(stop);
  }
};

enum class Timed { Ok, Dropped, ContextLost };

/// Times `c` on the buffers: one warm-up, then kTimedRuns runs. Dropped when
/// the candidate fails to run or leaves a CUDA error behind (cleared);
/// ContextLost, with the context's error, when that error is sticky.
Timed timeCandidate(Candidate& c, void* x, void* w, void* y, void* b, void* ws, cudaEvent_t start,
                    cudaEvent_t stop) {
  Context& ctx = context();
  Desc pack;
  if (!variantPack(pack, x, w, y, b, ws)) {
    ctx.error.clear();
    return Timed::Dropped;
  }
  bool ran = cudnnBackendExecute(ctx.cudnn, c.plan.get(), pack.get()) == CUDNN_STATUS_SUCCESS &&
             cudaEventRecord(start, ctx.stream) == cudaSuccess;
  if (ran && faultInjected("time"))
    launchedWithoutThreads<<<1, 0, 0, ctx.stream>>>();
  for (int k = 0; ran && k < kTimedRuns; ++k)
    ran = cudnnBackendExecute(ctx.cudnn, c.plan.get(), pack.get()) == CUDNN_STATUS_SUCCESS;
  ran = ran && cudaEventRecord(stop, ctx.stream) == cudaSuccess &&
        cudaEventSynchronize(stop) == cudaSuccess &&
        cudaEventElapsedTime(&c.ms, start, stop) == cudaSuccess;
  // Whatever this candidate launched has finished; an error it left is its
  // own. cudaGetLastError clears an ordinary one; a sticky one (a fault in
  // a kernel) stays, and every later call reports it.
  cudaError_t synced = cudaStreamSynchronize(ctx.stream);
  cudaError_t last = cudaGetLastError();
  if (synced == cudaSuccess && last == cudaSuccess)
    return ran ? Timed::Ok : Timed::Dropped;
  cudaError_t again = cudaStreamSynchronize(ctx.stream);
  if (again == cudaSuccess && cudaGetLastError() == cudaSuccess)
    return Timed::Dropped;
  fail(__FILE__, __LINE__,
       std::string("a cuDNN graph engine being timed left a sticky CUDA error (") +
           cudaGetErrorString(again != cudaSuccess ? again : synced) +
           "); the CUDA context cannot be used any more: run again with --cudnn-api=legacy");
  return Timed::ContextLost;
}

/// The operation graph of one convolution and its epilogue (step 1), its
/// descriptors appended to `keep` (the graph last); false with the
/// context's error when cuDNN refuses a descriptor.
bool describe(ConvDir dir, const ConvGeom& g, const Conv2dParams& p, DType t, int64_t align,
              ConvEpilogue epi, std::deque<Desc>& keep) {
  // bf16 and fp16 tensors are computed in float32, as F32's.
  const cudnnDataType_t compute = t == DType::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  const cudnnDataType_t dt = t == DType::BF16  ? CUDNN_DATA_BFLOAT16
                             : t == DType::F16 ? CUDNN_DATA_HALF
                                               : compute;
  Desc& xd = keep.emplace_back();
  Desc& wd = keep.emplace_back();
  Desc& yd = keep.emplace_back();
  Desc& conv = keep.emplace_back();
  // With an epilogue the convolution writes a virtual tensor the pointwise
  // operations read; their last one writes y.
  Desc& cd = epi.any() ? keep.emplace_back() : yd;
  const int64_t yDims[4] = {g.N, g.M, g.OH, g.OW};
  if (!tensor(xd, {g.N, g.C, g.H, g.W}, dt, kUidX, align) ||
      !tensor(wd, {g.M, g.Cg, g.KH, g.KW}, dt, kUidW, align) ||
      !tensor(yd, yDims, dt, kUidY, align) || !convolution(conv, p, compute) ||
      (epi.any() && !tensor(cd, yDims, dt, kUidConv, align, true)))
    return false;
  OpNames names = opNames(dir);
  Desc& op = keep.emplace_back();
  LWRT_CUDNN(op.create(names.type));
  LWRT_CUDNN(set(op, names.x, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, xd.addr()));
  LWRT_CUDNN(set(op, names.w, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, wd.addr()));
  LWRT_CUDNN(set(op, names.y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, cd.addr()));
  LWRT_CUDNN(set(op, names.conv, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, conv.addr()));
  if (t == DType::F64) {
    double alpha = 1, beta = 0;
    LWRT_CUDNN(set(op, names.alpha, CUDNN_TYPE_DOUBLE, 1, &alpha));
    LWRT_CUDNN(set(op, names.beta, CUDNN_TYPE_DOUBLE, 1, &beta));
  } else {
    float alpha = 1, beta = 0;
    LWRT_CUDNN(set(op, names.alpha, CUDNN_TYPE_FLOAT, 1, &alpha));
    LWRT_CUDNN(set(op, names.beta, CUDNN_TYPE_FLOAT, 1, &beta));
  }
  LWRT_CUDNN(cudnnBackendFinalize(op.get()));
  std::vector<cudnnBackendDescriptor_t> ops = {op.get()};
  Desc* last = &cd; // the tensor the epilogue so far ends in
  if (epi.bias) {
    Desc& bd = keep.emplace_back();
    Desc& sum = epi.relu ? keep.emplace_back() : yd;
    Desc* add = nullptr;
    if (!tensor(bd, {1, g.M, 1, 1}, dt, kUidB, align) ||
        (epi.relu && !tensor(sum, yDims, dt, kUidBiased, align, true)) ||
        !pointwise(keep, CUDNN_POINTWISE_ADD, compute, *last, &bd, sum, add))
      return false;
    ops.push_back(add->get());
    last = &sum;
  }
  if (epi.relu) {
    Desc* relu = nullptr;
    if (!pointwise(keep, CUDNN_POINTWISE_RELU_FWD, compute, *last, nullptr, yd, relu))
      return false;
    ops.push_back(relu->get());
  }
  cudnnHandle_t handle = context().cudnn;
  Desc& graph = keep.emplace_back();
  LWRT_CUDNN(graph.create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR));
  LWRT_CUDNN(set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                 static_cast<int64_t>(ops.size()), ops.data()));
  LWRT_CUDNN(set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle));
  LWRT_CUDNN(cudnnBackendFinalize(graph.get()));
  return true;
}

/// Leaves a configuration to the legacy API after the graph API failed on
/// it: counted, the first reason kept, the context's error cleared.
bool fallBack(const std::string& why) {
  Context& c = context();
  ++c.convGraphFailures;
  if (c.convGraphFailure.empty())
    c.convGraphFailure = why;
  c.error.clear();
  return true;
}

} // namespace

struct GraphConv {
  // Declared in the order they were made: destroyed in reverse, the plan
  // (and the variant packs that name it) before what it was built from.
  std::deque<Desc> sources; ///< tensors, operations, the operation graph
  Desc cfg;
  Desc plan;
  size_t workspace = 0;
  float ms = 0;
  bool bias = false;
  std::map<std::tuple<void*, void*, void*, void*, void*>, Desc> packs;
};

void GraphConvDeleter::operator()(GraphConv* plan) const { delete plan; }

float graphConvMs(const GraphConv& plan) { return plan.ms; }

size_t graphConvWorkspace(const GraphConv& plan) { return plan.workspace; }

bool buildGraphConv(ConvDir dir, const ConvGeom& g, const Conv2dParams& p, DType t, int64_t align,
                    ConvEpilogue epi, void* x, void* w, void* y, void* b, GraphConvPtr* out,
                    const std::string& tuneKey) {
  out->reset();
  Context& ctx = context();
  bool tensorCores = t == DType::BF16 || t == DType::F16 || (t == DType::F32 && ctx.convTf32);
  if (dir != ConvDir::Forward)
    epi = ConvEpilogue{};
  // 1. The operation graph; one cuDNN cannot describe is a configuration
  // for the legacy API (an epilogue: for the plain convolution).
  auto kept = std::make_unique<GraphConv>();
  if (!ctx.error.empty()) // a failure before this configuration stays one
    return false;
  if (!describe(dir, g, p, t, align, epi, kept->sources)) {
    if (epi.any()) { // not a failure of the graph API: this fusion is not offered
      ctx.error.clear();
      return true;
    }
    return fallBack("describing it: " + ctx.error);
  }
  Desc& graph = kept->sources.back();
  // 2 and 3. Qualifying engines with a finalized plan.
  std::vector<Candidate> candidates;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<Desc> cfgs = engineConfigs(graph, mode);
    for (Desc& cfg : cfgs) {
      if (static_cast<int>(candidates.size()) == kMaxCandidates)
        break;
      Candidate c;
      c.ordinal = static_cast<int>(candidates.size());
      if (qualifies(cfg, tensorCores) && makePlan(cfg, c)) {
        c.cfg = std::move(cfg);
        candidates.push_back(std::move(c));
      }
    }
    if (!candidates.empty())
      break;
  }
  if (candidates.empty())
    return true; // no engine takes it: the legacy API's, not a failure
  // 4. The fastest on the real buffers (--autotune=cache or timed), or the
  // one the autotune cache names; otherwise the heuristics' first, untimed,
  // the same in every run.
  bool cached = false;
  if (!ctx.timeAlgorithms) {
    candidates.resize(1);
  } else if (!tuneKey.empty()) {
    if (std::optional<std::string> choice = autotuneCache().find(ctx.autotuneDevice, tuneKey)) {
      int k = -1;
      if (std::sscanf(choice->c_str(), "graph engine=%d", &k) == 1 && k >= 0 &&
          k < static_cast<int>(candidates.size())) {
        Candidate only = std::move(candidates[static_cast<size_t>(k)]);
        candidates.clear();
        candidates.push_back(std::move(only));
        cached = true;
      } else { // not a choice among this configuration's engines: timed again
        autotuneCache().drop(ctx.autotuneDevice, tuneKey);
      }
    }
  }
  size_t most = 0;
  for (const Candidate& c : candidates)
    most = std::max(most, c.workspace);
  // The candidates run in the stream's workspace, grown as a run of the
  // plan would grow it (at most the workspace limit: what the memory plan
  // left the stream), not in memory beside it.
  void* ws = nullptr;
  if (most > 0 && tryWorkspace(most)) {
    ws = ctx.workspace;
  } else if (most > 0) { // time only the candidates that need no workspace
    candidates.erase(std::remove_if(candidates.begin(), candidates.end(),
                                    [](const Candidate& c) { return c.workspace > 0; }),
                     candidates.end());
  }
  Events ev;
  LWRT_CUDA(cudaEventCreate(&ev.start));
  LWRT_CUDA(cudaEventCreate(&ev.stop));
  int best = -1;
  size_t dropped = 0;
  void* bias = epi.bias ? b : nullptr;
  std::vector<bool> ran(candidates.size(), false);
  for (size_t k = 0; k < candidates.size(); ++k) {
    Timed timed = timeCandidate(candidates[k], x, w, y, bias, ws, ev.start, ev.stop);
    if (timed == Timed::ContextLost)
      return false;
    dropped += timed == Timed::Dropped;
    ran[k] = timed == Timed::Ok;
    if (timed == Timed::Ok &&
        (best < 0 || candidates[k].ms < candidates[static_cast<size_t>(best)].ms))
      best = static_cast<int>(k);
  }
  if (best < 0) {
    if (epi.any())
      return true; // the plain convolution's own plan decides
    return fallBack("all " + std::to_string(dropped) + " engine(s) failed when timed");
  }
  if (!tuneKey.empty() && !cached) {
    // Another device of the run may have recorded its choice first: take
    // that one where it is among the candidates timed here.
    std::string taken = recordChoice(
        tuneKey, "graph engine=" + std::to_string(candidates[static_cast<size_t>(best)].ordinal));
    for (size_t k = 0; k < candidates.size(); ++k)
      if (ran[k] && taken == "graph engine=" + std::to_string(candidates[k].ordinal))
        best = static_cast<int>(k);
  }
  Candidate& chosen = candidates[static_cast<size_t>(best)];
  kept->cfg = std::move(chosen.cfg);
  kept->plan = std::move(chosen.plan);
  kept->workspace = chosen.workspace;
  kept->ms = chosen.ms / static_cast<float>(kTimedRuns);
  kept->bias = epi.bias;
  out->reset(kept.release());
  return true;
}

bool runGraphConv(GraphConv& plan, void* x, void* w, void* y, void* b) {
  if (!ensureWorkspace(plan.workspace))
    return false;
  Context& ctx = context();
  void* ws = plan.workspace ? ctx.workspace : nullptr;
  void* bias = plan.bias ? b : nullptr;
  auto key = std::make_tuple(x, w, y, bias, ws);
  auto it = plan.packs.find(key);
  if (it == plan.packs.end()) {
    if (plan.packs.size() >= kMaxPacks && !ctx.capturing)
      plan.packs.clear();
    Desc pack;
    if (!variantPack(pack, x, w, y, bias, ws))
      return false;
    it = plan.packs.emplace(key, std::move(pack)).first;
  }
  LWRT_CUDNN(cudnnBackendExecute(ctx.cudnn, plan.plan.get(), it->second.get()));
  return true;
}

} // namespace lwrt::cuda
