// ConvKernels.cu - the convolutions of lwrt/cuda_nn.h
//
// Each convolution configuration (direction, element type, TF32, shapes,
// attributes, buffer alignment, epilogue) gets a plan at its first call. By
// default that is an execution plan of cuDNN's graph API (ConvGraph.cu: the
// heuristics' first qualifying engine). Configurations no graph engine
// takes, and all of them when the trainer runs with --cudnn-api=legacy, use
// cuDNN's legacy API (NCHW descriptors, groups, dilations): the first
// deterministic algorithm of cudnnGet*Algorithm_v7's heuristics, within a
// 1 GiB workspace, untimed (--autotune=off). With --autotune=cache or
// timed the candidates are timed on the real buffers instead
// (cudnnFind*AlgorithmEx, graph plans between CUDA events) and the fastest
// kept; with cache (a GPU's default) the choice is then read from the
// autotune cache (lwrt/autotune.h) by later runs and resumes, so that every
// run computes the same bits; timed ones may differ from run to run.
// The legacy API takes symmetric pads only, so there a
// convolution with pads[top] != pads[bottom] (or left != right) runs on a
// copy of its input padded by the difference, kept at the start of the
// context's workspace (the gradient for the input is computed for that copy
// and cropped).
//
// A forward convolution's bias, and the ReLU after it when codegen fuses
// the two (conv2dAct: the ReLU writes over the convolution's result, which
// nothing else reads), are the plan's epilogue: one graph-API plan of
// convolution, bias and ReLU when cuDNN has an engine for that graph (when
// timed: and it is faster than the plain convolution followed by the own
// epilogue kernel; a decision the autotune cache keeps), else the plain convolution and the own
// epilogue kernel (one pass over y: bias and ReLU together, a block row per
// plane).
//
// TF32: F32 convolutions use TF32 tensor cores unless the trainer runs with
// --no-tf32 (Context::convTf32, PyTorch's default); F64 never.
//
// bf16 and fp16 (mixed precision): x, w and y in 16 bits, cuDNN computing
// in float32 on tensor cores, each result rounded once, as the CPU
// backend's 16-bit kernels do. Such a convolution carries no bias or ReLU
// (mixed precision adds the bias in float32, after the cast back).
#include "cuda/Conv.h"
#include "cuda/KernelSupport.cuh"
#include "lwrt/cuda_nn.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lwrt::cuda {
namespace {

//===--- Small kernels ----------------------------------------------------===//

/// y = relu?(y + b[c]) (b null: no bias) for y [N, M, P] as planes x P, on
/// a planeGrid(N * M, P): the plane's channel once per block row.
template <typename T>
__global__ void convEpilogue(T* y, const T* b, unsigned M, unsigned P, unsigned planes, bool relu) {
  for (unsigned plane = blockIdx.y; plane < planes; plane += gridDim.y) {
    const T bias = b ? b[plane % M] : T(0);
    T* row = y + static_cast<size_t>(plane) * P;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < P; i += gridDim.x * blockDim.x) {
      T v = row[i] + bias;
      row[i] = relu && !(v > T(0)) ? T(0) : v;
    }
  }
}

/// y[n, c, :] = b[c] for y [N, M, P] (a convolution with no input element).
template <typename T>
__global__ void fillChannelBias(T* y, const T* b, unsigned M, unsigned P, unsigned planes) {
  for (unsigned plane = blockIdx.y; plane < planes; plane += gridDim.y) {
    T* row = y + static_cast<size_t>(plane) * P;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < P; i += gridDim.x * blockDim.x)
      row[i] = b[plane % M];
  }
}

/// xp [NC, Hp, Wp] = x [NC, H, W] placed at (offH, offW), zeros around:
/// blocks along y walk the padded rows (nc * Hp + h), threads a row.
template <typename T>
__global__ void padPlanes(const T* x, T* xp, unsigned H, unsigned W, unsigned Hp, unsigned Wp,
                          unsigned offH, unsigned offW, size_t rows) {
  for (size_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const unsigned h = static_cast<unsigned>(r % Hp); // once per row
    const size_t nc = r / Hp;
    const bool inside = h >= offH && h - offH < H;
    for (unsigned w = blockIdx.x * blockDim.x + threadIdx.x; w < Wp; w += gridDim.x * blockDim.x)
      xp[r * Wp + w] =
          inside && w >= offW && w - offW < W ? x[(nc * H + (h - offH)) * W + (w - offW)] : T(0);
  }
}

/// x [NC, H, W] = the window of xp [NC, Hp, Wp] at (offH, offW), a row at
/// a time as padPlanes.
template <typename T>
__global__ void cropPlanes(const T* xp, T* x, unsigned H, unsigned W, unsigned Hp, unsigned Wp,
                           unsigned offH, unsigned offW, size_t rows) {
  for (size_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const size_t nc = r / H, h = r % H; // once per row
    for (unsigned w = blockIdx.x * blockDim.x + threadIdx.x; w < W; w += gridDim.x * blockDim.x)
      x[r * W + w] = xp[(nc * Hp + h + offH) * Wp + w + offW];
  }
}

/// Launches padPlanes / cropPlanes over `rows` rows of `width` elements.
template <typename Kernel, typename... Args>
bool launchRows(Kernel kernel, size_t rows, unsigned width, Args... args) {
  PlaneGrid pg = planeGrid(static_cast<int64_t>(rows), width);
  kernel<<<pg.grid, pg.block, 0, context().stream>>>(args..., rows);
  LWRT_CUDA(cudaGetLastError());
  return true;
}

//===--- Plans ------------------------------------------------------------===//

using ConvPlans = std::map<std::vector<int64_t>, std::unique_ptr<ConvPlan>>;

ConvPlans& convPlans() {
  Context& c = context();
  if (!c.convPlans)
    c.convPlans = std::make_shared<ConvPlans>();
  return *static_cast<ConvPlans*>(c.convPlans.get());
}

/// Copies x [N, C, H, W] into the plan's padded input at `to`.
template <typename T>
bool padInput(const ConvPlan& plan, const ConvGeom& g, const void* x, void* to) {
  return launchRows(padPlanes<T>, static_cast<size_t>(g.N * g.C * plan.Hp),
                    static_cast<unsigned>(plan.Wp), static_cast<const T*>(x), static_cast<T*>(to),
                    static_cast<unsigned>(g.H), static_cast<unsigned>(g.W),
                    static_cast<unsigned>(plan.Hp), static_cast<unsigned>(plan.Wp),
                    static_cast<unsigned>(plan.offH), static_cast<unsigned>(plan.offW));
}

/// An algorithm result the plan may use: it ran, is deterministic (so that a
/// resumed run computes the same weights), fits the context's workspace
/// limit (what the memory plan left the device), and uses
/// tensor cores only when TF32 is on.
template <typename Perf> bool acceptable(const Perf& q, bool tensorOps) {
  if (q.status != CUDNN_STATUS_SUCCESS || q.determinism != CUDNN_DETERMINISTIC ||
      q.memory > context().convWorkspaceLimit)
    return false;
  return tensorOps || (q.mathType != CUDNN_TENSOR_OP_MATH &&
                       q.mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);
}

/// The first acceptable result (cuDNN lists the fastest first), or null.
template <typename Perf>
const Perf* firstAcceptable(const std::vector<Perf>& perf, int n, bool tensorOps) {
  for (int k = 0; k < n; ++k)
    if (acceptable(perf[k], tensorOps))
      return &perf[k];
  return nullptr;
}

/// The most workspace an acceptable heuristic candidate asks for.
template <typename Perf> size_t searchBytes(const std::vector<Perf>& perf, int n, bool tensorOps) {
  size_t bytes = 0;
  for (int k = 0; k < n; ++k)
    if (acceptable(perf[k], tensorOps))
      bytes = std::max(bytes, perf[k].memory);
  return bytes;
}

/// The memory of one algorithm search: the padded input (if any), then a
/// workspace for the candidates, both in the stream's own workspace, grown
/// as a run of the plan would grow it (to padBytes + wantWs, at most the
/// padded copy and the workspace limit: what the memory plan leaves the
/// stream), so that a search holds nothing beside what the step holds.
/// Where padBytes + wantWs cannot be had, padBytes alone (the search then
/// tries the algorithms that need no workspace).
struct SearchScratch {
  char* base = nullptr;
  size_t wsBytes = 0;
  bool allocate(size_t padBytes, size_t wantWs) {
    wsBytes = 0;
    if (wantWs > 0 && tryWorkspace(padBytes + wantWs))
      wsBytes = wantWs;
    else if (!ensureWorkspace(padBytes))
      return false;
    base = static_cast<char*>(context().workspace);
    return true;
  }
  void* ws(size_t padBytes) const { return wsBytes ? base + padBytes : nullptr; }
};

/// Sets the plan's algorithm to `q`, and with TF32 the math type `q` was
/// measured with (the caller then asks cuDNN for its workspace).
template <typename Perf> bool adopt(ConvPlan& plan, const Perf& q, bool tensorOps) {
  plan.algo = static_cast<int>(q.algo);
  if (tensorOps)
    LWRT_CUDNN(cudnnSetConvolutionMathType(plan.conv, q.mathType));
  return true;
}

const char* kNoAlgo = "conv2d: cuDNN offers no deterministic algorithm for this convolution "
                      "within the workspace limit";

/// Adopts the first acceptable algorithm of cuDNN's heuristics (no timing);
/// `workspace(algo)` asks cuDNN for its workspace into plan.algoBytes.
template <typename Perf, typename Workspace>
bool adoptHeuristic(ConvPlan& plan, const std::vector<Perf>& heur, int nh, bool tc,
                    Workspace workspace) {
  const Perf* q = firstAcceptable(heur, nh, tc);
  if (!q)
    return LWRT_REJECT(kNoAlgo);
  if (!adopt(plan, *q, tc))
    return false;
  LWRT_CUDNN(workspace(q->algo));
  return true;
}

/// The algorithm a cache choice ("legacy algo=A math=M") names, when the
/// heuristics list it as acceptable here.
template <typename Perf>
std::optional<Perf> namedAlgorithm(const std::vector<Perf>& heur, int nh, bool tc,
                                   const std::string& choice) {
  int algo = -1, math = -1;
  if (std::sscanf(choice.c_str(), "legacy algo=%d math=%d", &algo, &math) != 2 ||
      (!tc && (math == CUDNN_TENSOR_OP_MATH || math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)))
    return std::nullopt;
  for (int k = 0; k < nh; ++k)
    if (static_cast<int>(heur[k].algo) == algo && acceptable(heur[k], tc)) {
      Perf q = heur[k];
      q.mathType = static_cast<cudnnMathType_t>(math);
      return q;
    }
  return std::nullopt;
}

/// The algorithm the autotune cache names for `key`, when it fits here;
/// else nothing, and a choice that does not fit is forgotten (timed again).
template <typename Perf>
std::optional<Perf> cachedAlgorithm(const std::vector<Perf>& heur, int nh, bool tc,
                                    const std::string& key) {
  if (key.empty())
    return std::nullopt;
  const std::string& device = context().autotuneDevice;
  std::optional<std::string> choice = autotuneCache().find(device, key);
  if (!choice)
    return std::nullopt;
  if (std::optional<Perf> q = namedAlgorithm(heur, nh, tc, *choice))
    return q;
  autotuneCache().drop(device, key);
  return std::nullopt;
}

/// The algorithm timing chose (`q`), recorded when the context keeps a
/// cache; or the one another device of the run recorded first.
template <typename Perf>
Perf settledAlgorithm(const std::string& key, const Perf& q, const std::vector<Perf>& heur, int nh,
                      bool tc) {
  if (key.empty())
    return q;
  std::string mine = "legacy algo=" + std::to_string(static_cast<int>(q.algo)) +
                     " math=" + std::to_string(static_cast<int>(q.mathType));
  std::string taken = recordChoice(key, mine);
  if (taken == mine)
    return q;
  return namedAlgorithm(heur, nh, tc, taken).value_or(q);
}

/// Forward: picks the algorithm; `x` is the unpadded input.
template <typename T>
bool searchForward(ConvPlan& plan, const ConvGeom& g, const void* x, const void* w, void* y,
                   const std::string& tuneKey) {
  Context& c = context();
  bool tc = tensorOpsAllowed(plan.dtype);
  int maxCount = 0;
  LWRT_CUDNN(cudnnGetConvolutionForwardAlgorithmMaxCount(c.cudnn, &maxCount));
  std::vector<cudnnConvolutionFwdAlgoPerf_t> heur(std::max(maxCount, 1)), found(heur.size());
  int nh = 0, nf = 0;
  LWRT_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(c.cudnn, plan.x, plan.w, plan.conv, plan.y,
                                                    maxCount, &nh, heur.data()));
  if (!c.timeAlgorithms) // cuDNN's heuristics alone: the same choice in every run
    return adoptHeuristic(plan, heur, nh, tc, [&](cudnnConvolutionFwdAlgo_t a) {
      return cudnnGetConvolutionForwardWorkspaceSize(c.cudnn, plan.x, plan.w, plan.conv, plan.y, a,
                                                     &plan.algoBytes);
    });
  if (std::optional cached = cachedAlgorithm(heur, nh, tc, tuneKey)) {
    if (!adopt(plan, *cached, tc))
      return false;
    LWRT_CUDNN(cudnnGetConvolutionForwardWorkspaceSize(c.cudnn, plan.x, plan.w, plan.conv, plan.y,
                                                       cached->algo, &plan.algoBytes));
    return true;
  }
  SearchScratch s;
  if (!s.allocate(plan.padBytes, searchBytes(heur, nh, tc)))
    return false;
  const void* xin = x;
  if (plan.padded) {
    if (!padInput<T>(plan, g, x, s.base))
      return false;
    xin = s.base;
  }
  LWRT_CUDNN(cudnnFindConvolutionForwardAlgorithmEx(c.cudnn, plan.x, xin, plan.w, w, plan.conv,
                                                    plan.y, y, maxCount, &nf, found.data(),
                                                    s.ws(plan.padBytes), s.wsBytes));
  const cudnnConvolutionFwdAlgoPerf_t* q = firstAcceptable(found, nf, tc);
  if (!q)
    q = firstAcceptable(heur, nh, tc);
  if (!q)
    return LWRT_REJECT(kNoAlgo);
  const auto chosen = settledAlgorithm(tuneKey, *q, heur, nh, tc);
  if (!adopt(plan, chosen, tc))
    return false;
  LWRT_CUDNN(cudnnGetConvolutionForwardWorkspaceSize(c.cudnn, plan.x, plan.w, plan.conv, plan.y,
                                                     chosen.algo, &plan.algoBytes));
  return true;
}

/// Backward data: picks the algorithm; dx is the real (unpadded) result.
template <typename T>
bool searchBackwardData(ConvPlan& plan, const void* w, const void* dy, void* dx,
                        const std::string& tuneKey) {
  Context& c = context();
  bool tc = tensorOpsAllowed(plan.dtype);
  int maxCount = 0;
  LWRT_CUDNN(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(c.cudnn, &maxCount));
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> heur(std::max(maxCount, 1)), found(heur.size());
  int nh = 0, nf = 0;
  LWRT_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(c.cudnn, plan.w, plan.y, plan.conv, plan.x,
                                                         maxCount, &nh, heur.data()));
  if (!c.timeAlgorithms) // cuDNN's heuristics alone: the same choice in every run
    return adoptHeuristic(plan, heur, nh, tc, [&](cudnnConvolutionBwdDataAlgo_t a) {
      return cudnnGetConvolutionBackwardDataWorkspaceSize(c.cudnn, plan.w, plan.y, plan.conv,
                                                          plan.x, a, &plan.algoBytes);
    });
  if (std::optional cached = cachedAlgorithm(heur, nh, tc, tuneKey)) {
    if (!adopt(plan, *cached, tc))
      return false;
    LWRT_CUDNN(cudnnGetConvolutionBackwardDataWorkspaceSize(c.cudnn, plan.w, plan.y, plan.conv,
                                                            plan.x, cached->algo, &plan.algoBytes));
    return true;
  }
  SearchScratch s;
  if (!s.allocate(plan.padBytes, searchBytes(heur, nh, tc)))
    return false;
  void* out = plan.padded ? static_cast<void*>(s.base) : dx;
  LWRT_CUDNN(cudnnFindConvolutionBackwardDataAlgorithmEx(c.cudnn, plan.w, w, plan.y, dy, plan.conv,
                                                         plan.x, out, maxCount, &nf, found.data(),
                                                         s.ws(plan.padBytes), s.wsBytes));
  const cudnnConvolutionBwdDataAlgoPerf_t* q = firstAcceptable(found, nf, tc);
  if (!q)
    q = firstAcceptable(heur, nh, tc);
  if (!q)
    return LWRT_REJECT(kNoAlgo);
  const auto chosen = settledAlgorithm(tuneKey, *q, heur, nh, tc);
  if (!adopt(plan, chosen, tc))
    return false;
  LWRT_CUDNN(cudnnGetConvolutionBackwardDataWorkspaceSize(c.cudnn, plan.w, plan.y, plan.conv,
                                                          plan.x, chosen.algo, &plan.algoBytes));
  return true;
}

/// Backward filter: picks the algorithm; `x` is the unpadded input.
template <typename T>
bool searchBackwardFilter(ConvPlan& plan, const ConvGeom& g, const void* x, const void* dy,
                          void* dw, const std::string& tuneKey) {
  Context& c = context();
  bool tc = tensorOpsAllowed(plan.dtype);
  int maxCount = 0;
  LWRT_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(c.cudnn, &maxCount));
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> heur(std::max(maxCount, 1)), found(heur.size());
  int nh = 0, nf = 0;
  LWRT_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(c.cudnn, plan.x, plan.y, plan.conv,
                                                           plan.w, maxCount, &nh, heur.data()));
  if (!c.timeAlgorithms) // cuDNN's heuristics alone: the same choice in every run
    return adoptHeuristic(plan, heur, nh, tc, [&](cudnnConvolutionBwdFilterAlgo_t a) {
      return cudnnGetConvolutionBackwardFilterWorkspaceSize(c.cudnn, plan.x, plan.y, plan.conv,
                                                            plan.w, a, &plan.algoBytes);
    });
  if (std::optional cached = cachedAlgorithm(heur, nh, tc, tuneKey)) {
    if (!adopt(plan, *cached, tc))
      return false;
    LWRT_CUDNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(
        c.cudnn, plan.x, plan.y, plan.conv, plan.w, cached->algo, &plan.algoBytes));
    return true;
  }
  SearchScratch s;
  if (!s.allocate(plan.padBytes, searchBytes(heur, nh, tc)))
    return false;
  const void* xin = x;
  if (plan.padded) {
    if (!padInput<T>(plan, g, x, s.base))
      return false;
    xin = s.base;
  }
  LWRT_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithmEx(
      c.cudnn, plan.x, xin, plan.y, dy, plan.conv, plan.w, dw, maxCount, &nf, found.data(),
      s.ws(plan.padBytes), s.wsBytes));
  const cudnnConvolutionBwdFilterAlgoPerf_t* q = firstAcceptable(found, nf, tc);
  if (!q)
    q = firstAcceptable(heur, nh, tc);
  if (!q)
    return LWRT_REJECT(kNoAlgo);
  const auto chosen = settledAlgorithm(tuneKey, *q, heur, nh, tc);
  if (!adopt(plan, chosen, tc))
    return false;
  LWRT_CUDNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(c.cudnn, plan.x, plan.y, plan.conv,
                                                            plan.w, chosen.algo, &plan.algoBytes));
  return true;
}

/// The largest power of two up to 16 that divides every address.
int64_t commonAlignment(std::initializer_list<const void*> ptrs) {
  int64_t align = 16;
  for (const void* q : ptrs)
    while (reinterpret_cast<uintptr_t>(q) % static_cast<uintptr_t>(align) != 0)
      align /= 2;
  return align;
}

/// Runs the own epilogue (bias and/or ReLU) over y [N, M, P].
template <typename T> bool runEpilogue(const ConvGeom& g, T* y, const T* b, bool relu) {
  if (!b && !relu)
    return true;
  if constexpr (std::is_same_v<T, uint16_t>) {
    return LWRT_REJECT("conv2d: a bf16 or fp16 convolution takes no bias or ReLU (mixed precision "
                       "adds them in float32)");
  } else {
    const int64_t planes = g.N * g.M, P = g.OH * g.OW;
    if (!fitsInt({planes, P}))
      return LWRT_REJECT("conv2d: more than 2^31 planes or plane elements for the epilogue");
    PlaneGrid pg = planeGrid(planes, P);
    convEpilogue<T><<<pg.grid, pg.block, 0, context().stream>>>(
        y, b, static_cast<unsigned>(g.M), static_cast<unsigned>(P), static_cast<unsigned>(planes),
        relu);
    LWRT_CUDA(cudaGetLastError());
    return true;
  }
}

/// The own epilogue's time per run on the real buffers (ms), for choosing
/// between it (after the plain plan) and a fused plan. Infinity when it
/// cannot be timed (the fused plan is then not taken).
template <typename T> float epilogueMs(const ConvGeom& g, T* y, const T* b, bool relu) {
  cudaEvent_t start = nullptr, stop = nullptr;
  float ms = INFINITY;
  if (cudaEventCreate(&start) == cudaSuccess && cudaEventCreate(&stop) == cudaSuccess &&
      runEpilogue(g, y, b, relu) && cudaEventRecord(start, context().stream) == cudaSuccess) {
    bool ok = true;
    for (int k = 0; ok && k < 3; ++k)
      ok = runEpilogue(g, y, b, relu);
    if (ok && cudaEventRecord(stop, context().stream) == cudaSuccess &&
        cudaEventSynchronize(stop) == cudaSuccess &&
        cudaEventElapsedTime(&ms, start, stop) == cudaSuccess)
      ms /= 3;
    else
      ms = INFINITY;
  }
  context().error.clear();
  (void)cudaGetLastError();
  if (start)
    cudaEventDestroy(start);
  if (stop)
    cudaEventDestroy(stop);
  return ms;
}

/// The plan of a configuration, made at its first call on the real buffers
/// (in, w and out as the direction reads and writes them; b the bias of a
/// forward one with an epilogue): the graph API's fastest engine
/// (ConvGraph.cu), or when the context asks for the legacy API or no graph
/// engine takes it, the legacy descriptors and algorithm search; with an
/// epilogue, also the fused plan when it beats the plain one and the own
/// epilogue kernel. Null, with the context's error, when it cannot be had.
template <typename T>
ConvPlan* convPlan(ConvDir dir, const ConvGeom& g, const Conv2dParams& p, DType t, ConvEpilogue epi,
                   void* x, void* w, void* y, void* b) {
  int64_t align = commonAlignment({x, w, y, b});
  std::vector<int64_t> key = {static_cast<int64_t>(dir),
                              static_cast<int64_t>(t),
                              context().convTf32 ? 1 : 0,
                              align,
                              epi.bias,
                              epi.relu};
  for (int64_t v : {g.N, g.C, g.H, g.W, g.M, g.Cg, g.KH, g.KW, g.OH, g.OW, g.G})
    key.push_back(v);
  for (int64_t v : {p.strides[0], p.strides[1], p.pads[0], p.pads[1], p.pads[2], p.pads[3]})
    key.push_back(v);
  key.push_back(p.dilations[0]);
  key.push_back(p.dilations[1]);
  auto& plans = convPlans();
  auto it = plans.find(key);
  if (it != plans.end())
    return it->second.get();
  if (context().capturing) {
    LWRT_REJECT("conv2d: a convolution configuration first seen while the step is captured (the "
                "uncaptured first step sets up every configuration)");
    return nullptr;
  }
  auto plan = std::make_unique<ConvPlan>();
  Context& c = context();
  // The configuration's names in the autotune cache ("" without one).
  const std::string tuneKey = convTuneKey(dir, g, p, t, align);
  // A graph choice names its engine by its place among the candidates,
  // which the workspace limit filters: the limit is part of its name.
  auto named = [&](const std::string& api) {
    if (tuneKey.empty())
      return tuneKey;
    return tuneKey + " " + api +
           (api == "legacy" ? "" : " ws" + std::to_string(c.convWorkspaceLimit));
  };
  if (c.convGraphApi && !buildGraphConv(dir, g, p, t, align, ConvEpilogue{}, x, w, y, nullptr,
                                        &plan->graph, named("graph")))
    return nullptr;
  if (plan->graph) {
    ++c.convPlansGraph;
    c.convWorkspaceMost = std::max(c.convWorkspaceMost, graphConvWorkspace(*plan->graph));
    if (epi.any()) {
      // Whether the fused plan beats the plain one and the own epilogue:
      // timed (its engine may sum in another order than the plain one's, so
      // the choice is the cache's to keep), else taken where cuDNN has one.
      const std::string epiName =
          std::string("graph") + (epi.bias ? "+bias" : "") + (epi.relu ? "+relu" : "");
      const std::string fuseKey = named(epiName + " fuse");
      std::optional<std::string> decided;
      if (!fuseKey.empty() && (decided = autotuneCache().find(c.autotuneDevice, fuseKey)) &&
          *decided != "fused" && *decided != "apart") {
        autotuneCache().drop(c.autotuneDevice, fuseKey);
        decided.reset();
      }
      GraphConvPtr fused;
      if (decided != "apart" &&
          !buildGraphConv(dir, g, p, t, align, epi, x, w, y, b, &fused, named(epiName)))
        return nullptr;
      bool take =
          fused && (decided || !c.timeAlgorithms ||
                    graphConvMs(*fused) <
                        graphConvMs(*plan->graph) +
                            epilogueMs(g, static_cast<T*>(y), static_cast<const T*>(b), epi.relu));
      if (!fuseKey.empty() && !decided) // another device's decision, if it was first
        take = fused && recordChoice(fuseKey, take ? "fused" : "apart") == "fused";
      if (take) {
        c.convWorkspaceMost = std::max(c.convWorkspaceMost, graphConvWorkspace(*fused));
        plan->fused = std::move(fused);
        ++c.convPlansFused;
      }
    }
    return plans.emplace(std::move(key), std::move(plan)).first->second.get();
  }
  ++c.convPlansLegacy;
  if (!makeDescriptors(g, p, t, *plan))
    return nullptr;
  const std::string legacyKey = named("legacy");
  bool ok = dir == ConvDir::Forward        ? searchForward<T>(*plan, g, x, w, y, legacyKey)
            : dir == ConvDir::BackwardData ? searchBackwardData<T>(*plan, w, y, x, legacyKey)
                                           : searchBackwardFilter<T>(*plan, g, x, y, w, legacyKey);
  if (!ok)
    return nullptr;
  c.convWorkspaceMost = std::max(c.convWorkspaceMost, plan->algoBytes);
  return plans.emplace(std::move(key), std::move(plan)).first->second.get();
}

/// The workspace for a plan: its padded input first, then the algorithm's.
bool planWorkspace(const ConvPlan& plan, char*& pad, void*& ws) {
  if (!ensureWorkspace(plan.padBytes + plan.algoBytes))
    return false;
  pad = static_cast<char*>(context().workspace);
  ws = plan.algoBytes ? pad + plan.padBytes : nullptr;
  return true;
}

/// y = conv(x, w) (+ b) (then max(., 0) when `relu`).
template <typename T>
bool conv2dImpl(const TensorView& xv, const TensorView& wv, const TensorView* bv,
                const TensorView& yv, const Conv2dParams& p, bool relu) {
  ConvGeom g;
  if (!convGeom(xv.shape, wv.shape, yv.shape, p, g))
    return LWRT_REJECT("conv2d: the shapes of x, w and y or the attributes do not fit");
  if (bv && (bv->dtype != xv.dtype || bv->shape != std::vector<int64_t>{g.M} ||
             (bv->data == nullptr && g.M != 0)))
    return LWRT_REJECT("conv2d: the bias must be [M] of x's element type");
  if (is16Bit(xv.dtype) && (bv || relu))
    return LWRT_REJECT("conv2d: a bf16 or fp16 convolution takes no bias or ReLU (mixed precision "
                       "adds them in float32)");
  if (yv.numel() == 0)
    return true;
  T* y = yv.as<T>();
  const T* b = bv ? bv->as<T>() : nullptr;
  if (xv.numel() == 0) { // no input element (no channel, or all padding): y is the bias or 0
    if (!bv)
      return zeroBytes(y, yv.bytes());
    const int64_t planes = g.N * g.M, P = g.OH * g.OW;
    if (!fitsInt({planes, P}))
      return LWRT_REJECT("conv2d: more than 2^31 planes or plane elements");
    PlaneGrid pg = planeGrid(planes, P);
    fillChannelBias<T><<<pg.grid, pg.block, 0, context().stream>>>(
        y, b, static_cast<unsigned>(g.M), static_cast<unsigned>(P), static_cast<unsigned>(planes));
    LWRT_CUDA(cudaGetLastError());
    return runEpilogue<T>(g, y, nullptr, relu);
  }
  ConvEpilogue epi{bv != nullptr, relu};
  ConvPlan* plan = convPlan<T>(ConvDir::Forward, g, p, xv.dtype, epi, xv.data, wv.data, yv.data,
                               bv ? bv->data : nullptr);
  if (plan && plan->fused)
    return runGraphConv(*plan->fused, xv.data, wv.data, y, bv ? bv->data : nullptr);
  if (plan && plan->graph)
    return runGraphConv(*plan->graph, xv.data, wv.data, y, nullptr) &&
           runEpilogue<T>(g, y, b, relu);
  char* pad = nullptr;
  void* ws = nullptr;
  if (!plan || !planWorkspace(*plan, pad, ws))
    return false;
  const void* xin = xv.data;
  if (plan->padded) {
    if (!padInput<T>(*plan, g, xv.data, pad))
      return false;
    xin = pad;
  }
  ScaleOf<T> one = 1, zeroScale = 0;
  LWRT_CUDNN(cudnnConvolutionForward(context().cudnn, &one, plan->x, xin, plan->w, wv.data,
                                     plan->conv, static_cast<cudnnConvolutionFwdAlgo_t>(plan->algo),
                                     ws, plan->algoBytes, &zeroScale, plan->y, y));
  return runEpilogue<T>(g, y, b, relu);
}

template <typename T>
bool conv2dGradInputImpl(const TensorView& dyv, const TensorView& wv, const TensorView& dxv,
                         const Conv2dParams& p) {
  ConvGeom g;
  if (!convGeom(dxv.shape, wv.shape, dyv.shape, p, g))
    return LWRT_REJECT(
        "conv2d_grad_input: the shapes of dy, w and dx or the attributes do not fit");
  if (dxv.numel() == 0)
    return true;
  if (dyv.numel() == 0 || wv.numel() == 0)
    return zeroBytes(dxv.data, dxv.bytes());
  ConvPlan* plan = convPlan<T>(ConvDir::BackwardData, g, p, dyv.dtype, ConvEpilogue{}, dxv.data,
                               wv.data, dyv.data, nullptr);
  if (plan && plan->graph)
    return runGraphConv(*plan->graph, dxv.data, wv.data, dyv.data, nullptr);
  char* pad = nullptr;
  void* ws = nullptr;
  if (!plan || !planWorkspace(*plan, pad, ws))
    return false;
  void* out = plan->padded ? static_cast<void*>(pad) : dxv.data;
  ScaleOf<T> one = 1, zeroScale = 0;
  LWRT_CUDNN(cudnnConvolutionBackwardData(context().cudnn, &one, plan->w, wv.data, plan->y,
                                          dyv.data, plan->conv,
                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(plan->algo),
                                          ws, plan->algoBytes, &zeroScale, plan->x, out));
  if (plan->padded)
    return launchRows(cropPlanes<T>, static_cast<size_t>(g.N * g.C * g.H),
                      static_cast<unsigned>(g.W), reinterpret_cast<const T*>(pad), dxv.as<T>(),
                      static_cast<unsigned>(g.H), static_cast<unsigned>(g.W),
                      static_cast<unsigned>(plan->Hp), static_cast<unsigned>(plan->Wp),
                      static_cast<unsigned>(plan->offH), static_cast<unsigned>(plan->offW));
  return true;
}

template <typename T>
bool conv2dGradFilterImpl(const TensorView& xv, const TensorView& dyv, const TensorView& dwv,
                          const Conv2dParams& p) {
  ConvGeom g;
  if (!convGeom(xv.shape, dwv.shape, dyv.shape, p, g))
    return LWRT_REJECT(
        "conv2d_grad_filter: the shapes of x, dy and dw or the attributes do not fit");
  if (dwv.numel() == 0)
    return true;
  if (xv.numel() == 0) // no image
    return zeroBytes(dwv.data, dwv.bytes());
  ConvPlan* plan = convPlan<T>(ConvDir::BackwardFilter, g, p, xv.dtype, ConvEpilogue{}, xv.data,
                               dwv.data, dyv.data, nullptr);
  if (plan && plan->graph)
    return runGraphConv(*plan->graph, xv.data, dwv.data, dyv.data, nullptr);
  char* pad = nullptr;
  void* ws = nullptr;
  if (!plan || !planWorkspace(*plan, pad, ws))
    return false;
  const void* xin = xv.data;
  if (plan->padded) {
    if (!padInput<T>(*plan, g, xv.data, pad))
      return false;
    xin = pad;
  }
  ScaleOf<T> one = 1, zeroScale = 0;
  LWRT_CUDNN(cudnnConvolutionBackwardFilter(
      context().cudnn, &one, plan->x, xin, plan->y, dyv.data, plan->conv,
      static_cast<cudnnConvolutionBwdFilterAlgo_t>(plan->algo), ws, plan->algoBytes, &zeroScale,
      plan->w, dwv.data));
  return true;
}

} // namespace

//===--- Entry points -----------------------------------------------------===//

bool conv2d(const TensorView& x, const TensorView& w, const TensorView* bias, const TensorView& y,
            const Conv2dParams& p) {
  return floatOr16Op("conv2d", {&x, &w, &y},
                     [&](auto t) { return conv2dImpl<decltype(t)>(x, w, bias, y, p, false); });
}

bool conv2dAct(const TensorView& x, const TensorView& w, const TensorView* bias,
               const TensorView& y, const Conv2dParams& p, const Activation& act) {
  if (act.kind == Activation::Clip)
    return LWRT_REJECT("conv2d: a fused clip is not supported on CUDA (only relu)");
  const bool relu = act.kind == Activation::Relu;
  return floatOr16Op("conv2d", {&x, &w, &y},
                     [&](auto t) { return conv2dImpl<decltype(t)>(x, w, bias, y, p, relu); });
}

bool conv2dGradInput(const TensorView& dy, const TensorView& w, const TensorView& dx,
                     const Conv2dParams& p) {
  return floatOr16Op("conv2d_grad_input", {&dy, &w, &dx},
                     [&](auto t) { return conv2dGradInputImpl<decltype(t)>(dy, w, dx, p); });
}

bool conv2dGradFilter(const TensorView& x, const TensorView& dy, const TensorView& dw,
                      const Conv2dParams& p) {
  return floatOr16Op("conv2d_grad_filter", {&x, &dy, &dw},
                     [&](auto t) { return conv2dGradFilterImpl<decltype(t)>(x, dy, dw, p); });
}

} // namespace lwrt::cuda
