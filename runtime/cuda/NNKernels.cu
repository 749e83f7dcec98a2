// NNKernels.cu - convolution, matrix products and pooling of lwrt/cuda_nn.h
//
// Each convolution configuration (direction, element type, TF32, shapes,
// attributes, buffer alignment) gets a plan at its first call. By default
// that is an execution plan of cuDNN's graph API (ConvGraph.cu: the fastest
// qualifying engine, timed on the real buffers). Configurations no graph
// engine takes, and all of them when the trainer runs with
// --cudnn-api=legacy, use cuDNN's legacy API (NCHW descriptors, groups,
// dilations): the fastest deterministic algorithm that
// cudnnFind*AlgorithmEx measures on the real buffers, within a 1 GiB
// workspace. The legacy API takes symmetric pads only, so there a
// convolution with pads[top] != pads[bottom] (or left != right) runs on a
// copy of its input padded by the difference, kept at the start of the
// context's workspace (the gradient for the input is computed for that copy
// and cropped).
//
// Matrix products go to cuBLAS (row-major operands seen as their column-major
// transposes, so C^T = B^T A^T). The pooling kernels are this file's own and
// follow the CPU backend's loops (cpu/NNKernels.cpp) so that ties, empty
// windows and divisors come out the same; their gradients gather per input
// element, summing in the CPU's order, so no float atomics are needed.
#include "cuda/Conv.h"
#include "cuda/KernelSupport.cuh"
#include "lwrt/cuda_nn.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <initializer_list>
#include <map>
#include <vector>

namespace lwrt::cuda {
namespace {

bool isFloat(DType t) { return t == DType::F32 || t == DType::F64; }

/// All views have element type `t` and hold data (or no elements).
bool sameType(DType t, std::initializer_list<const TensorView*> views) {
  for (const TensorView* v : views)
    if (v->dtype != t || (v->data == nullptr && v->numel() != 0))
      return false;
  return true;
}

/// Checks that `views` share a float element type (that of the first) and
/// hold data, then runs fn(T{}) for that type; false with the context's
/// error otherwise.
template <typename Fn>
bool floatOp(const char* op, std::initializer_list<const TensorView*> views, Fn fn) {
  DType t = (*views.begin())->dtype;
  if (!isFloat(t) || !sameType(t, views))
    return fail(__FILE__, __LINE__,
                std::string(op) + ": operands must be F32 or F64, all of one type, with data");
  if (t == DType::F32)
    return fn(float{});
  return fn(double{});
}

bool fitsInt(std::initializer_list<int64_t> values) {
  for (int64_t v : values)
    if (v < 0 || v > INT_MAX)
      return false;
  return true;
}

/// Sets `bytes` of device memory at `p` to zero, on the stream.
bool zero(void* p, int64_t bytes) {
  if (bytes > 0)
    LWRT_CUDA(cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), context().stream));
  return true;
}

#define LWRT_GRID_STRIDE(i, n)                                                                     \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);           \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

template <typename T> __device__ __forceinline__ T negInf() { return static_cast<T>(-INFINITY); }

//===--- Small elementwise kernels ----------------------------------------===//

/// y[n, m, p] += b[m] for y [N, M, P].
template <typename T>
__global__ void addChannelBias(T* y, const T* b, int64_t M, int64_t P, int64_t n) {
  LWRT_GRID_STRIDE(i, n) { y[i] += b[(i / P) % M]; }
}

/// y[n, c, h, w] = b[c] for y [N, C, H, W] (with P = H * W).
template <typename T>
__global__ void fillChannelBias(T* y, const T* b, int64_t M, int64_t P, int64_t n) {
  LWRT_GRID_STRIDE(i, n) { y[i] = b[(i / P) % M]; }
}

/// xp [NC, Hp, Wp] = x [NC, H, W] placed at (offH, offW), zeros around.
template <typename T>
__global__ void padPlanes(const T* x, T* xp, int64_t H, int64_t W, int64_t Hp, int64_t Wp,
                          int64_t offH, int64_t offW, int64_t n) {
  LWRT_GRID_STRIDE(i, n) {
    int64_t w = i % Wp, h = (i / Wp) % Hp, nc = i / (Wp * Hp);
    int64_t ih = h - offH, iw = w - offW;
    xp[i] = ih >= 0 && ih < H && iw >= 0 && iw < W ? x[(nc * H + ih) * W + iw] : T(0);
  }
}

/// x [NC, H, W] = the window of xp [NC, Hp, Wp] at (offH, offW).
template <typename T>
__global__ void cropPlanes(const T* xp, T* x, int64_t H, int64_t W, int64_t Hp, int64_t Wp,
                           int64_t offH, int64_t offW, int64_t n) {
  LWRT_GRID_STRIDE(i, n) {
    int64_t w = i % W, h = (i / W) % H, nc = i / (W * H);
    x[i] = xp[(nc * Hp + h + offH) * Wp + w + offW];
  }
}

/// y[m, n] = c[m * cs0 + n * cs1] for y [M, N].
template <typename T>
__global__ void broadcastMatrix(const T* c, T* y, int64_t N, int64_t cs0, int64_t cs1, int64_t n) {
  LWRT_GRID_STRIDE(i, n) { y[i] = c[(i / N) * cs0 + (i % N) * cs1]; }
}

/// y = s * y (0 where s is 0), as the CPU's empty products do.
template <typename T> __global__ void scaleInPlace(T* y, T s, int64_t n) {
  LWRT_GRID_STRIDE(i, n) { y[i] = s == T(0) ? T(0) : s * y[i]; }
}

//===--- Convolution ------------------------------------------------------===//

/// Alignment of the pieces carved out of the workspace.
constexpr size_t kAlign = 256;
size_t alignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

/// One convolution configuration's cuDNN setup, made at its first call and
/// kept for the process (descriptors are host objects; the plans are few),
/// per context (a plan holds its context's cuDNN handle and workspace):
/// a graph API plan, or when there is none the legacy descriptors below.
struct ConvPlan {
  GraphConv* graph = nullptr;
  cudnnTensorDescriptor_t x = nullptr; ///< the input, padded when `padded`
  cudnnTensorDescriptor_t y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  int algo = 0;         ///< a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  size_t algoBytes = 0; ///< the algorithm's workspace
  /// Asymmetric pads: cuDNN pads both sides by the smaller pad and the input
  /// is copied into [N, C, Hp, Wp] at (offH, offW), padBytes at the start of
  /// the workspace.
  bool padded = false;
  int64_t Hp = 0, Wp = 0, offH = 0, offW = 0;
  size_t padBytes = 0;
};

using ConvPlans = std::map<std::vector<int64_t>, ConvPlan>;

ConvPlans& convPlans() {
  Context& c = context();
  if (!c.convPlans)
    c.convPlans = std::make_shared<ConvPlans>();
  return *static_cast<ConvPlans*>(c.convPlans.get());
}

/// True when the context lets F32 convolutions use TF32 tensor cores.
bool tensorOpsAllowed(DType t) { return t == DType::F32 && context().tf32; }

cudnnDataType_t cudnnType(DType t) {
  return t == DType::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
}

/// Creates the plan's descriptors (not its algorithm).
bool makeDescriptors(const ConvGeom& g, const Conv2dParams& p, DType t, ConvPlan& plan) {
  int64_t pt = p.pads[0], pl = p.pads[1], pb = p.pads[2], pr = p.pads[3];
  int64_t ph = std::min(pt, pb), pw = std::min(pl, pr);
  plan.offH = pt - ph;
  plan.offW = pl - pw;
  plan.Hp = g.H + (pt - ph) + (pb - ph);
  plan.Wp = g.W + (pl - pw) + (pr - pw);
  plan.padded = plan.Hp != g.H || plan.Wp != g.W;
  if (plan.padded)
    plan.padBytes = alignUp(static_cast<size_t>(g.N * g.C * plan.Hp * plan.Wp * dtypeSize(t)));
  bool dimsFit = fitsInt({g.N, g.C, plan.Hp, plan.Wp, g.M, g.Cg, g.KH, g.KW, g.OH, g.OW}) &&
                 fitsInt({ph, pw, p.strides[0], p.strides[1], p.dilations[0], p.dilations[1]}) &&
                 fitsInt({g.G, g.N * g.C * plan.Hp * plan.Wp, g.N * g.M * g.OH * g.OW}) &&
                 fitsInt({g.M * g.Cg * g.KH * g.KW});
  if (!dimsFit)
    return LWRT_REJECT("conv2d: a dimension or tensor is too large for cuDNN (2^31 elements)");
  cudnnDataType_t dt = cudnnType(t);
  auto i = [](int64_t v) { return static_cast<int>(v); };
  LWRT_CUDNN(cudnnCreateTensorDescriptor(&plan.x));
  LWRT_CUDNN(cudnnSetTensor4dDescriptor(plan.x, CUDNN_TENSOR_NCHW, dt, i(g.N), i(g.C), i(plan.Hp),
                                        i(plan.Wp)));
  LWRT_CUDNN(cudnnCreateTensorDescriptor(&plan.y));
  LWRT_CUDNN(
      cudnnSetTensor4dDescriptor(plan.y, CUDNN_TENSOR_NCHW, dt, i(g.N), i(g.M), i(g.OH), i(g.OW)));
  LWRT_CUDNN(cudnnCreateFilterDescriptor(&plan.w));
  LWRT_CUDNN(
      cudnnSetFilter4dDescriptor(plan.w, dt, CUDNN_TENSOR_NCHW, i(g.M), i(g.Cg), i(g.KH), i(g.KW)));
  LWRT_CUDNN(cudnnCreateConvolutionDescriptor(&plan.conv));
  LWRT_CUDNN(cudnnSetConvolution2dDescriptor(plan.conv, i(ph), i(pw), i(p.strides[0]),
                                             i(p.strides[1]), i(p.dilations[0]), i(p.dilations[1]),
                                             CUDNN_CROSS_CORRELATION, dt));
  LWRT_CUDNN(cudnnSetConvolutionGroupCount(plan.conv, i(g.G)));
  // FP32 without TF32 must stay on FMA kernels: cuDNN's default math lets
  // Ampere and later use TF32 tensor cores.
  cudnnMathType_t math = t == DType::F64  ? CUDNN_DEFAULT_MATH
                         : context().tf32 ? CUDNN_TENSOR_OP_MATH
                                          : CUDNN_FMA_MATH;
  LWRT_CUDNN(cudnnSetConvolutionMathType(plan.conv, math));
  return true;
}

/// An algorithm result the plan may use: it ran, is deterministic (so that a
/// resumed run computes the same weights), fits the workspace limit, and uses
/// tensor cores only when TF32 is on.
template <typename Perf> bool acceptable(const Perf& q, bool tensorOps) {
  if (q.status != CUDNN_STATUS_SUCCESS || q.determinism != CUDNN_DETERMINISTIC ||
      q.memory > kConvWorkspaceLimit)
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

/// Device memory for one algorithm search: the padded input (if any) and a
/// workspace for the candidates. Freed after the search, synchronously (the
/// destructor frees it unchecked on an error path).
struct SearchScratch {
  char* base = nullptr;
  size_t wsBytes = 0;
  ~SearchScratch() {
    if (base)
      (void)cudaFree(base);
  }
  /// Allocates padBytes + wantWs, or padBytes alone when that fails (the
  /// search then tries the algorithms that need no workspace).
  bool allocate(size_t padBytes, size_t wantWs) {
    void* p = nullptr;
    wsBytes = 0;
    if (wantWs > 0) {
      if (cudaMalloc(&p, padBytes + wantWs) == cudaSuccess) {
        wsBytes = wantWs;
      } else {
        p = nullptr;              // not promised to be left null by a failed cudaMalloc
        (void)cudaGetLastError(); // clear the failed allocation: searching with less is fine
      }
    }
    if (!p && padBytes > 0)
      LWRT_CUDA(cudaMalloc(&p, padBytes));
    base = static_cast<char*>(p);
    return true;
  }
  void* ws(size_t padBytes) const { return wsBytes ? base + padBytes : nullptr; }
  bool release() {
    LWRT_CUDA(cudaStreamSynchronize(context().stream));
    char* p = base;
    base = nullptr;
    if (p)
      LWRT_CUDA(cudaFree(p));
    return true;
  }
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

/// Forward: picks the algorithm; `x` is the unpadded input.
template <typename T>
bool searchForward(ConvPlan& plan, const ConvGeom& g, const void* x, const void* w, void* y) {
  Context& c = context();
  bool tc = tensorOpsAllowed(sizeof(T) == 4 ? DType::F32 : DType::F64);
  int maxCount = 0;
  LWRT_CUDNN(cudnnGetConvolutionForwardAlgorithmMaxCount(c.cudnn, &maxCount));
  std::vector<cudnnConvolutionFwdAlgoPerf_t> heur(std::max(maxCount, 1)), found(heur.size());
  int nh = 0, nf = 0;
  LWRT_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(c.cudnn, plan.x, plan.w, plan.conv, plan.y,
                                                    maxCount, &nh, heur.data()));
  SearchScratch s;
  if (!s.allocate(plan.padBytes, searchBytes(heur, nh, tc)))
    return false;
  const void* xin = x;
  if (plan.padded) {
    int64_t n = g.N * g.C * plan.Hp * plan.Wp;
    LWRT_LAUNCH(padPlanes<T>, blocksFor(n), kThreads, static_cast<const T*>(x),
                reinterpret_cast<T*>(s.base), g.H, g.W, plan.Hp, plan.Wp, plan.offH, plan.offW, n);
    xin = s.base;
  }
  LWRT_CUDNN(cudnnFindConvolutionForwardAlgorithmEx(c.cudnn, plan.x, xin, plan.w, w, plan.conv,
                                                    plan.y, y, maxCount, &nf, found.data(),
                                                    s.ws(plan.padBytes), s.wsBytes));
  if (!s.release())
    return false;
  const cudnnConvolutionFwdAlgoPerf_t* q = firstAcceptable(found, nf, tc);
  if (!q)
    q = firstAcceptable(heur, nh, tc);
  if (!q)
    return LWRT_REJECT(kNoAlgo);
  if (!adopt(plan, *q, tc))
    return false;
  LWRT_CUDNN(cudnnGetConvolutionForwardWorkspaceSize(c.cudnn, plan.x, plan.w, plan.conv, plan.y,
                                                     q->algo, &plan.algoBytes));
  return true;
}

/// Backward data: picks the algorithm; dx is the real (unpadded) result.
template <typename T>
bool searchBackwardData(ConvPlan& plan, const void* w, const void* dy, void* dx) {
  Context& c = context();
  bool tc = tensorOpsAllowed(sizeof(T) == 4 ? DType::F32 : DType::F64);
  int maxCount = 0;
  LWRT_CUDNN(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(c.cudnn, &maxCount));
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> heur(std::max(maxCount, 1)), found(heur.size());
  int nh = 0, nf = 0;
  LWRT_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(c.cudnn, plan.w, plan.y, plan.conv, plan.x,
                                                         maxCount, &nh, heur.data()));
  SearchScratch s;
  if (!s.allocate(plan.padBytes, searchBytes(heur, nh, tc)))
    return false;
  void* out = plan.padded ? static_cast<void*>(s.base) : dx;
  LWRT_CUDNN(cudnnFindConvolutionBackwardDataAlgorithmEx(c.cudnn, plan.w, w, plan.y, dy, plan.conv,
                                                         plan.x, out, maxCount, &nf, found.data(),
                                                         s.ws(plan.padBytes), s.wsBytes));
  if (!s.release())
    return false;
  const cudnnConvolutionBwdDataAlgoPerf_t* q = firstAcceptable(found, nf, tc);
  if (!q)
    q = firstAcceptable(heur, nh, tc);
  if (!q)
    return LWRT_REJECT(kNoAlgo);
  if (!adopt(plan, *q, tc))
    return false;
  LWRT_CUDNN(cudnnGetConvolutionBackwardDataWorkspaceSize(c.cudnn, plan.w, plan.y, plan.conv,
                                                          plan.x, q->algo, &plan.algoBytes));
  return true;
}

/// Backward filter: picks the algorithm; `x` is the unpadded input.
template <typename T>
bool searchBackwardFilter(ConvPlan& plan, const ConvGeom& g, const void* x, const void* dy,
                          void* dw) {
  Context& c = context();
  bool tc = tensorOpsAllowed(sizeof(T) == 4 ? DType::F32 : DType::F64);
  int maxCount = 0;
  LWRT_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(c.cudnn, &maxCount));
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> heur(std::max(maxCount, 1)), found(heur.size());
  int nh = 0, nf = 0;
  LWRT_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(c.cudnn, plan.x, plan.y, plan.conv,
                                                           plan.w, maxCount, &nh, heur.data()));
  SearchScratch s;
  if (!s.allocate(plan.padBytes, searchBytes(heur, nh, tc)))
    return false;
  const void* xin = x;
  if (plan.padded) {
    int64_t n = g.N * g.C * plan.Hp * plan.Wp;
    LWRT_LAUNCH(padPlanes<T>, blocksFor(n), kThreads, static_cast<const T*>(x),
                reinterpret_cast<T*>(s.base), g.H, g.W, plan.Hp, plan.Wp, plan.offH, plan.offW, n);
    xin = s.base;
  }
  LWRT_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithmEx(
      c.cudnn, plan.x, xin, plan.y, dy, plan.conv, plan.w, dw, maxCount, &nf, found.data(),
      s.ws(plan.padBytes), s.wsBytes));
  if (!s.release())
    return false;
  const cudnnConvolutionBwdFilterAlgoPerf_t* q = firstAcceptable(found, nf, tc);
  if (!q)
    q = firstAcceptable(heur, nh, tc);
  if (!q)
    return LWRT_REJECT(kNoAlgo);
  if (!adopt(plan, *q, tc))
    return false;
  LWRT_CUDNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(c.cudnn, plan.x, plan.y, plan.conv,
                                                            plan.w, q->algo, &plan.algoBytes));
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

/// The plan of a configuration, made at its first call on the real buffers
/// (in, w and out as the direction reads and writes them): the graph API's
/// fastest engine (ConvGraph.cu), or when the context asks for the legacy
/// API or no graph engine takes it, the legacy descriptors and algorithm
/// search. Null, with the context's error, when it cannot be had.
template <typename T>
ConvPlan* convPlan(ConvDir dir, const ConvGeom& g, const Conv2dParams& p, DType t, void* x, void* w,
                   void* y) {
  int64_t align = commonAlignment({x, w, y});
  std::vector<int64_t> key = {static_cast<int64_t>(dir), static_cast<int64_t>(t),
                              context().tf32 ? 1 : 0, align};
  for (int64_t v : {g.N, g.C, g.H, g.W, g.M, g.Cg, g.KH, g.KW, g.OH, g.OW, g.G})
    key.push_back(v);
  for (int64_t v : {p.strides[0], p.strides[1], p.pads[0], p.pads[1], p.pads[2], p.pads[3]})
    key.push_back(v);
  key.push_back(p.dilations[0]);
  key.push_back(p.dilations[1]);
  auto& plans = convPlans();
  auto it = plans.find(key);
  if (it != plans.end())
    return &it->second;
  if (context().capturing) {
    LWRT_REJECT("conv2d: a convolution configuration first seen while the step is captured (the "
                "uncaptured first step sets up every configuration)");
    return nullptr;
  }
  ConvPlan plan;
  if (context().convGraphApi && !buildGraphConv(dir, g, p, t, align, x, w, y, &plan.graph))
    return nullptr;
  if (plan.graph) {
    ++context().convPlansGraph;
    return &plans.emplace(std::move(key), plan).first->second;
  }
  ++context().convPlansLegacy;
  if (!makeDescriptors(g, p, t, plan))
    return nullptr;
  bool ok = dir == ConvDir::Forward        ? searchForward<T>(plan, g, x, w, y)
            : dir == ConvDir::BackwardData ? searchBackwardData<T>(plan, w, y, x)
                                           : searchBackwardFilter<T>(plan, g, x, y, w);
  if (!ok)
    return nullptr;
  return &plans.emplace(std::move(key), plan).first->second;
}

/// The workspace for a plan: its padded input first, then the algorithm's.
bool planWorkspace(const ConvPlan& plan, char*& pad, void*& ws) {
  if (!ensureWorkspace(plan.padBytes + plan.algoBytes))
    return false;
  pad = static_cast<char*>(context().workspace);
  ws = plan.algoBytes ? pad + plan.padBytes : nullptr;
  return true;
}

template <typename T>
bool conv2dImpl(const TensorView& xv, const TensorView& wv, const TensorView* bv,
                const TensorView& yv, const Conv2dParams& p) {
  ConvGeom g;
  if (!convGeom(xv.shape, wv.shape, yv.shape, p, g))
    return LWRT_REJECT("conv2d: the shapes of x, w and y or the attributes do not fit");
  if (bv && (bv->dtype != xv.dtype || bv->shape != std::vector<int64_t>{g.M} ||
             (bv->data == nullptr && g.M != 0)))
    return LWRT_REJECT("conv2d: the bias must be [M] of x's element type");
  int64_t n = yv.numel();
  if (n == 0)
    return true;
  T* y = yv.as<T>();
  if (xv.numel() == 0) { // no input element (no channel, or all padding): y is the bias or 0
    if (!bv)
      return zero(y, yv.bytes());
    LWRT_LAUNCH(fillChannelBias<T>, blocksFor(n), kThreads, y, bv->as<T>(), g.M, g.OH * g.OW, n);
    return true;
  }
  ConvPlan* plan = convPlan<T>(ConvDir::Forward, g, p, xv.dtype, xv.data, wv.data, yv.data);
  if (plan && plan->graph) {
    if (!runGraphConv(*plan->graph, xv.data, wv.data, y))
      return false;
    if (bv)
      LWRT_LAUNCH(addChannelBias<T>, blocksFor(n), kThreads, y, bv->as<T>(), g.M, g.OH * g.OW, n);
    return true;
  }
  char* pad = nullptr;
  void* ws = nullptr;
  if (!plan || !planWorkspace(*plan, pad, ws))
    return false;
  const void* xin = xv.data;
  if (plan->padded) {
    int64_t np = g.N * g.C * plan->Hp * plan->Wp;
    LWRT_LAUNCH(padPlanes<T>, blocksFor(np), kThreads, xv.as<T>(), reinterpret_cast<T*>(pad), g.H,
                g.W, plan->Hp, plan->Wp, plan->offH, plan->offW, np);
    xin = pad;
  }
  T one = 1, zeroScale = 0;
  LWRT_CUDNN(cudnnConvolutionForward(context().cudnn, &one, plan->x, xin, plan->w, wv.data,
                                     plan->conv, static_cast<cudnnConvolutionFwdAlgo_t>(plan->algo),
                                     ws, plan->algoBytes, &zeroScale, plan->y, y));
  if (bv)
    LWRT_LAUNCH(addChannelBias<T>, blocksFor(n), kThreads, y, bv->as<T>(), g.M, g.OH * g.OW, n);
  return true;
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
    return zero(dxv.data, dxv.bytes());
  ConvPlan* plan = convPlan<T>(ConvDir::BackwardData, g, p, dyv.dtype, dxv.data, wv.data, dyv.data);
  if (plan && plan->graph)
    return runGraphConv(*plan->graph, dxv.data, wv.data, dyv.data);
  char* pad = nullptr;
  void* ws = nullptr;
  if (!plan || !planWorkspace(*plan, pad, ws))
    return false;
  void* out = plan->padded ? static_cast<void*>(pad) : dxv.data;
  T one = 1, zeroScale = 0;
  LWRT_CUDNN(cudnnConvolutionBackwardData(context().cudnn, &one, plan->w, wv.data, plan->y,
                                          dyv.data, plan->conv,
                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(plan->algo),
                                          ws, plan->algoBytes, &zeroScale, plan->x, out));
  if (plan->padded) {
    int64_t n = dxv.numel();
    LWRT_LAUNCH(cropPlanes<T>, blocksFor(n), kThreads, reinterpret_cast<const T*>(pad), dxv.as<T>(),
                g.H, g.W, plan->Hp, plan->Wp, plan->offH, plan->offW, n);
  }
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
    return zero(dwv.data, dwv.bytes());
  ConvPlan* plan =
      convPlan<T>(ConvDir::BackwardFilter, g, p, xv.dtype, xv.data, dwv.data, dyv.data);
  if (plan && plan->graph)
    return runGraphConv(*plan->graph, xv.data, dwv.data, dyv.data);
  char* pad = nullptr;
  void* ws = nullptr;
  if (!plan || !planWorkspace(*plan, pad, ws))
    return false;
  const void* xin = xv.data;
  if (plan->padded) {
    int64_t np = g.N * g.C * plan->Hp * plan->Wp;
    LWRT_LAUNCH(padPlanes<T>, blocksFor(np), kThreads, xv.as<T>(), reinterpret_cast<T*>(pad), g.H,
                g.W, plan->Hp, plan->Wp, plan->offH, plan->offW, np);
    xin = pad;
  }
  T one = 1, zeroScale = 0;
  LWRT_CUDNN(cudnnConvolutionBackwardFilter(
      context().cudnn, &one, plan->x, xin, plan->y, dyv.data, plan->conv,
      static_cast<cudnnConvolutionBwdFilterAlgo_t>(plan->algo), ws, plan->algoBytes, &zeroScale,
      plan->w, dwv.data));
  return true;
}

//===--- Linear algebra ---------------------------------------------------===//

// cuBLAS by element type. Operands are column-major, as cuBLAS sees them.
cublasStatus_t blasGemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                        const float* alpha, const float* a, int lda, const float* b, int ldb,
                        const float* beta, float* c, int ldc) {
  return cublasSgemm(context().cublas, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
cublasStatus_t blasGemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                        const double* alpha, const double* a, int lda, const double* b, int ldb,
                        const double* beta, double* c, int ldc) {
  return cublasDgemm(context().cublas, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
cublasStatus_t blasGemmBatched(int m, int n, int k, const float* alpha, const float* a, int lda,
                               long long sa, const float* b, int ldb, long long sb,
                               const float* beta, float* c, int ldc, long long sc, int count) {
  return cublasSgemmStridedBatched(context().cublas, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, alpha, a,
                                   lda, sa, b, ldb, sb, beta, c, ldc, sc, count);
}
cublasStatus_t blasGemmBatched(int m, int n, int k, const double* alpha, const double* a, int lda,
                               long long sa, const double* b, int ldb, long long sb,
                               const double* beta, double* c, int ldc, long long sc, int count) {
  return cublasDgemmStridedBatched(context().cublas, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, alpha, a,
                                   lda, sa, b, ldb, sb, beta, c, ldc, sc, count);
}

template <typename T>
bool gemmImpl(const TensorView& av, const TensorView& bv, const TensorView* cv,
              const TensorView& yv, const GemmParams& p) {
  if (av.rank() != 2 || bv.rank() != 2 || yv.rank() != 2 || (p.transA != 0 && p.transA != 1) ||
      (p.transB != 0 && p.transB != 1))
    return LWRT_REJECT("gemm: a, b and y must be matrices and transA, transB 0 or 1");
  bool ta = p.transA != 0, tb = p.transB != 0;
  int64_t M = ta ? av.shape[1] : av.shape[0], K = ta ? av.shape[0] : av.shape[1];
  int64_t Kb = tb ? bv.shape[1] : bv.shape[0], N = tb ? bv.shape[0] : bv.shape[1];
  if (K != Kb || yv.shape[0] != M || yv.shape[1] != N)
    return LWRT_REJECT("gemm: the shapes of a, b and y do not fit");
  // Strides of c seen from [M, N]; 0 where broadcast.
  int64_t cs[2] = {0, 0};
  if (cv) {
    if (cv->rank() > 2)
      return LWRT_REJECT("gemm: c must have rank 0, 1 or 2");
    int64_t acc = 1;
    for (int64_t d = cv->rank(); d-- > 0;) {
      int64_t dim = cv->shape[d], out = yv.shape[2 - cv->rank() + d];
      if (dim != 1 && dim != out)
        return LWRT_REJECT("gemm: c does not broadcast to [M, N]");
      cs[2 - cv->rank() + d] = dim == 1 ? 0 : acc;
      acc *= dim;
    }
  }
  if (M == 0 || N == 0)
    return true;
  if (!fitsInt({M, N, K, av.shape[1], bv.shape[1]}))
    return LWRT_REJECT("gemm: a dimension is too large for cuBLAS (2^31)");
  T* y = yv.as<T>();
  int64_t n = M * N;
  T beta = T(0);
  if (cv) {
    LWRT_LAUNCH(broadcastMatrix<T>, blocksFor(n), kThreads, cv->as<T>(), y, N, cs[0], cs[1], n);
    beta = static_cast<T>(p.beta);
  }
  if (K == 0) { // an empty product: y = beta c
    if (!cv)
      return zero(y, yv.bytes());
    LWRT_LAUNCH(scaleInPlace<T>, blocksFor(n), kThreads, y, beta, n);
    return true;
  }
  // Row-major y = op(A) op(B) is column-major y^T = op(B)^T op(A)^T, and a
  // row-major matrix is its column-major transpose: pass B first.
  T alpha = static_cast<T>(p.alpha);
  LWRT_CUBLAS(blasGemm(tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                       static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), &alpha,
                       bv.as<T>(), static_cast<int>(bv.shape[1]), av.as<T>(),
                       static_cast<int>(av.shape[1]), &beta, y, static_cast<int>(N)));
  return true;
}

/// Whether the batch offsets sum_d idx[d] * s[d] over dims [from, rank) are
/// q * stride for q the flat index over those dims; sets stride (in matrices).
bool linearOffsets(const std::vector<int64_t>& s, const std::vector<int64_t>& batch, size_t from,
                   int64_t& stride) {
  stride = -1;
  int64_t inner = 1;
  for (size_t d = batch.size(); d-- > from;) {
    if (batch[d] != 1) {
      if (stride < 0)
        stride = s[d]; // inner is 1 at the innermost dim of extent > 1
      else if (s[d] != stride * inner)
        return false;
    }
    inner *= batch[d];
  }
  if (stride < 0)
    stride = 0;
  return true;
}

template <typename T>
bool matmulImpl(const TensorView& av, const TensorView& bv, const TensorView& yv) {
  std::vector<int64_t> as = av.shape, bs = bv.shape;
  if (as.empty() || bs.empty())
    return LWRT_REJECT("matmul: operands must have rank 1 or more");
  bool vecA = as.size() == 1, vecB = bs.size() == 1;
  if (vecA)
    as.insert(as.begin(), 1);
  if (vecB)
    bs.push_back(1);
  int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  if (bs[bs.size() - 2] != K)
    return LWRT_REJECT("matmul: the inner dimensions of a and b differ");
  // Broadcast batch dims, and each operand's batch strides (0 where broadcast).
  size_t ra = as.size() - 2, rb = bs.size() - 2, rank = std::max(ra, rb);
  std::vector<int64_t> batch(rank), sa(rank, 0), sb(rank, 0);
  int64_t acca = 1, accb = 1;
  for (size_t i = rank; i-- > 0;) {
    int64_t da = i < rank - ra ? 1 : as[i - (rank - ra)];
    int64_t db = i < rank - rb ? 1 : bs[i - (rank - rb)];
    if (da != db && da != 1 && db != 1)
      return LWRT_REJECT("matmul: the batch dimensions do not broadcast");
    batch[i] = da == 1 ? db : da;
    sa[i] = da == 1 ? 0 : acca;
    sb[i] = db == 1 ? 0 : accb;
    acca *= da;
    accb *= db;
  }
  std::vector<int64_t> want = batch;
  if (!vecA)
    want.push_back(M);
  if (!vecB)
    want.push_back(N);
  if (yv.shape != want)
    return LWRT_REJECT("matmul: y's shape is not the broadcast product's");
  int64_t nb = 1;
  for (int64_t d : batch)
    nb *= d;
  if (nb == 0 || M == 0 || N == 0)
    return true;
  T* y = yv.as<T>();
  if (K == 0)
    return zero(y, yv.bytes());
  if (!fitsInt({M, N, K}))
    return LWRT_REJECT("matmul: a dimension is too large for cuBLAS (2^31)");
  const T *a = av.as<T>(), *b = bv.as<T>();
  T one = 1, zeroScale = 0;
  int m = static_cast<int>(M), n = static_cast<int>(N), k = static_cast<int>(K);
  // b shared by every batch and a's batches contiguous: one product with
  // nb * M rows.
  int64_t strideA = 0, strideB = 0;
  if (linearOffsets(sa, batch, 0, strideA) && linearOffsets(sb, batch, 0, strideB) &&
      strideB == 0 && (strideA == 1 || nb == 1) && fitsInt({nb * M})) {
    LWRT_CUBLAS(blasGemm(CUBLAS_OP_N, CUBLAS_OP_N, n, static_cast<int>(nb * M), k, &one, b, n, a, k,
                         &zeroScale, y, n));
    return true;
  }
  // Otherwise strided batches over the innermost batch dims whose offsets
  // are regular, looping over the outer ones.
  size_t from = 0;
  while (!(linearOffsets(sa, batch, from, strideA) && linearOffsets(sb, batch, from, strideB)))
    ++from; // from == rank always works
  int64_t inner = 1;
  for (size_t d = from; d < rank; ++d)
    inner *= batch[d];
  if (!fitsInt({inner}))
    return LWRT_REJECT("matmul: too many batches for one cuBLAS call (2^31)");
  std::vector<int64_t> idx(from, 0);
  for (int64_t o = 0; o < nb / inner; ++o) {
    int64_t oa = 0, ob = 0;
    for (size_t d = 0; d < from; ++d) {
      oa += idx[d] * sa[d];
      ob += idx[d] * sb[d];
    }
    LWRT_CUBLAS(blasGemmBatched(n, m, k, &one, b + ob * K * N, n, strideB * K * N, a + oa * M * K,
                                k, strideA * M * K, &zeroScale, y + o * inner * M * N, n, M * N,
                                static_cast<int>(inner)));
    for (size_t d = from; d-- > 0;) {
      if (++idx[d] < batch[d])
        break;
      idx[d] = 0;
    }
  }
  return true;
}

//===--- Pooling ----------------------------------------------------------===//

/// Checks x and y as NCHW with the same N and C, and the window attributes.
bool poolShapes(const TensorView& x, const TensorView& y, const int64_t* kernel,
                const int64_t* strides, const int64_t* pads, const int64_t* dil) {
  if (x.rank() != 4 || y.rank() != 4 || x.shape[0] != y.shape[0] || x.shape[1] != y.shape[1])
    return false;
  for (int i = 0; i < 2; ++i)
    if (kernel[i] < 1 || strides[i] < 1 || (dil && dil[i] < 1) || pads[i] < 0 || pads[i + 2] < 0)
      return false;
  return true;
}

/// The geometry of a pooling: NC planes of H x W in, OH x OW out.
struct PoolGeom {
  int64_t NC, H, W, OH, OW;
  int64_t k[2], s[2], d[2], pads[4];
};

PoolGeom poolGeom(const TensorView& x, const TensorView& y, const int64_t* kernel,
                  const int64_t* strides, const int64_t* pads, const int64_t* dil) {
  PoolGeom g{
      x.shape[0] * x.shape[1], x.shape[2], x.shape[3], y.shape[2], y.shape[3], {}, {}, {}, {}};
  for (int i = 0; i < 2; ++i) {
    g.k[i] = kernel[i];
    g.s[i] = strides[i];
    g.d[i] = dil ? dil[i] : 1;
  }
  for (int i = 0; i < 4; ++i)
    g.pads[i] = pads[i];
  return g;
}

/// y = the max of each window's taps, -inf where it has none. `acc < v`
/// keeps the CPU's std::max, which skips NaNs.
template <typename T> __global__ void maxPoolForward(const T* x, T* y, PoolGeom g, int64_t n) {
  LWRT_GRID_STRIDE(i, n) {
    int64_t ow = i % g.OW, oh = (i / g.OW) % g.OH, nc = i / (g.OW * g.OH);
    const T* plane = x + nc * g.H * g.W;
    T acc = negInf<T>();
    for (int64_t kh = 0; kh < g.k[0]; ++kh) {
      int64_t ih = oh * g.s[0] - g.pads[0] + kh * g.d[0];
      if (ih < 0 || ih >= g.H)
        continue;
      for (int64_t kw = 0; kw < g.k[1]; ++kw) {
        int64_t iw = ow * g.s[1] - g.pads[1] + kw * g.d[1];
        if (iw >= 0 && iw < g.W) {
          T v = plane[ih * g.W + iw];
          if (acc < v)
            acc = v;
        }
      }
    }
    y[i] = acc;
  }
}

/// arg[yi] = the in-plane index of the first maximum of window yi (taps in
/// row-major order), -1 for an empty window.
template <typename T> __global__ void maxPoolArgmax(const T* x, int* arg, PoolGeom g, int64_t n) {
  LWRT_GRID_STRIDE(i, n) {
    int64_t ow = i % g.OW, oh = (i / g.OW) % g.OH, nc = i / (g.OW * g.OH);
    const T* plane = x + nc * g.H * g.W;
    int64_t best = -1;
    T bestV = T(0);
    for (int64_t kh = 0; kh < g.k[0]; ++kh) {
      int64_t ih = oh * g.s[0] - g.pads[0] + kh * g.d[0];
      if (ih < 0 || ih >= g.H)
        continue;
      for (int64_t kw = 0; kw < g.k[1]; ++kw) {
        int64_t iw = ow * g.s[1] - g.pads[1] + kw * g.d[1];
        if (iw < 0 || iw >= g.W)
          continue;
        T v = plane[ih * g.W + iw];
        if (best < 0 || v > bestV) {
          best = ih * g.W + iw;
          bestV = v;
        }
      }
    }
    arg[i] = static_cast<int>(best);
  }
}

/// dx[xi] = the sum of dy over the windows whose first maximum is xi, added
/// in increasing window order as the CPU scatters them.
template <typename T>
__global__ void maxPoolGather(const int* arg, const T* dy, T* dx, PoolGeom g, int64_t n) {
  LWRT_GRID_STRIDE(i, n) {
    int64_t iw = i % g.W, ih = (i / g.W) % g.H, nc = i / (g.W * g.H);
    int64_t self = ih * g.W + iw;
    T acc = T(0);
    // Tap kh of window oh reads row oh*s - pad + kh*d: decreasing kh visits
    // increasing oh.
    for (int64_t kh = g.k[0] - 1; kh >= 0; --kh) {
      int64_t t = ih + g.pads[0] - kh * g.d[0];
      if (t < 0 || t % g.s[0] != 0 || t / g.s[0] >= g.OH)
        continue;
      int64_t oh = t / g.s[0];
      for (int64_t kw = g.k[1] - 1; kw >= 0; --kw) {
        int64_t u = iw + g.pads[1] - kw * g.d[1];
        if (u < 0 || u % g.s[1] != 0 || u / g.s[1] >= g.OW)
          continue;
        int64_t yi = (nc * g.OH + oh) * g.OW + u / g.s[1];
        if (arg[yi] == self)
          acc += dy[yi];
      }
    }
    dx[i] = acc;
  }
}

/// The CPU's avgWindow: input rows [h0, h1), columns [w0, w1), and the divisor.
struct AvgWindow {
  int64_t h0, h1, w0, w1, count;
};
__device__ AvgWindow avgWindow(const PoolGeom& g, bool includePad, int64_t oh, int64_t ow) {
  AvgWindow w;
  w.h0 = oh * g.s[0] - g.pads[0];
  w.w0 = ow * g.s[1] - g.pads[1];
  w.h1 = min(w.h0 + g.k[0], g.H + g.pads[2]);
  w.w1 = min(w.w0 + g.k[1], g.W + g.pads[3]);
  int64_t padded = (w.h1 - w.h0) * (w.w1 - w.w0);
  w.h0 = max(w.h0, int64_t(0));
  w.w0 = max(w.w0, int64_t(0));
  w.h1 = min(w.h1, g.H);
  w.w1 = min(w.w1, g.W);
  w.count = includePad ? padded : (w.h1 - w.h0) * (w.w1 - w.w0);
  return w;
}

template <typename T>
__global__ void avgPoolForward(const T* x, T* y, PoolGeom g, bool includePad, int64_t n) {
  LWRT_GRID_STRIDE(i, n) {
    int64_t ow = i % g.OW, oh = (i / g.OW) % g.OH, nc = i / (g.OW * g.OH);
    AvgWindow win = avgWindow(g, includePad, oh, ow);
    const T* plane = x + nc * g.H * g.W;
    T sum = T(0);
    for (int64_t ih = win.h0; ih < win.h1; ++ih)
      for (int64_t iw = win.w0; iw < win.w1; ++iw)
        sum += plane[ih * g.W + iw];
    y[i] = win.count > 0 ? sum / static_cast<T>(win.count) : T(0);
  }
}

/// floor(a / b) for b > 0.
__device__ __forceinline__ int64_t floorDiv(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

/// dx[xi] = the sum of dy / count over the windows holding xi, in
/// increasing window order as the CPU scatters them.
template <typename T>
__global__ void avgPoolGather(const T* dy, T* dx, PoolGeom g, bool includePad, int64_t n) {
  LWRT_GRID_STRIDE(i, n) {
    int64_t iw = i % g.W, ih = (i / g.W) % g.H, nc = i / (g.W * g.H);
    // Window oh starts at oh*s - pad and spans k rows: it can hold ih for
    // oh in [floor((ih + pad - k) / s) + 1, floor((ih + pad) / s)].
    int64_t oh0 = max(floorDiv(ih + g.pads[0] - g.k[0], g.s[0]) + 1, int64_t(0));
    int64_t oh1 = min(floorDiv(ih + g.pads[0], g.s[0]), g.OH - 1);
    int64_t ow0 = max(floorDiv(iw + g.pads[1] - g.k[1], g.s[1]) + 1, int64_t(0));
    int64_t ow1 = min(floorDiv(iw + g.pads[1], g.s[1]), g.OW - 1);
    T acc = T(0);
    for (int64_t oh = oh0; oh <= oh1; ++oh)
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        AvgWindow win = avgWindow(g, includePad, oh, ow);
        if (win.count <= 0 || ih < win.h0 || ih >= win.h1 || iw < win.w0 || iw >= win.w1)
          continue;
        acc += dy[(nc * g.OH + oh) * g.OW + ow] / static_cast<T>(win.count);
      }
    dx[i] = acc;
  }
}

/// One block per (n, c) plane: y = the plane's mean, summed in double.
template <typename T> __global__ void planeMean(const T* x, T* y, int64_t spatial) {
  __shared__ double shared[kReduceThreads];
  const T* plane = x + static_cast<int64_t>(blockIdx.x) * spatial;
  double sum = 0;
  for (int64_t s = threadIdx.x; s < spatial; s += kReduceThreads)
    sum += static_cast<double>(plane[s]);
  sum = blockSum(sum, shared);
  if (threadIdx.x == 0)
    y[blockIdx.x] = static_cast<T>(sum / static_cast<double>(spatial));
}

template <typename T>
bool maxPool2dImpl(const TensorView& xv, const TensorView& yv, const MaxPool2dParams& p) {
  if (!poolShapes(xv, yv, p.kernel, p.strides, p.pads, p.dilations))
    return LWRT_REJECT("max_pool2d: the shapes of x and y or the attributes do not fit");
  int64_t n = yv.numel();
  if (n == 0)
    return true;
  PoolGeom g = poolGeom(xv, yv, p.kernel, p.strides, p.pads, p.dilations);
  LWRT_LAUNCH(maxPoolForward<T>, blocksFor(n), kThreads, xv.as<T>(), yv.as<T>(), g, n);
  return true;
}

template <typename T>
bool maxPool2dGradImpl(const TensorView& xv, const TensorView& dyv, const TensorView& dxv,
                       const MaxPool2dParams& p) {
  if (!poolShapes(xv, dyv, p.kernel, p.strides, p.pads, p.dilations) || dxv.shape != xv.shape)
    return LWRT_REJECT("max_pool2d_grad: the shapes of x, dy and dx or the attributes do not fit");
  if (xv.shape[2] * xv.shape[3] > INT_MAX)
    return LWRT_REJECT("max_pool2d_grad: an input plane over 2^31 elements");
  int64_t nx = dxv.numel(), ny = dyv.numel();
  if (nx == 0)
    return true;
  if (ny == 0)
    return zero(dxv.data, dxv.bytes());
  PoolGeom g = poolGeom(xv, dyv, p.kernel, p.strides, p.pads, p.dilations);
  if (!ensureWorkspace(static_cast<size_t>(ny) * sizeof(int)))
    return false;
  int* arg = static_cast<int*>(context().workspace);
  LWRT_LAUNCH(maxPoolArgmax<T>, blocksFor(ny), kThreads, xv.as<T>(), arg, g, ny);
  LWRT_LAUNCH(maxPoolGather<T>, blocksFor(nx), kThreads, arg, dyv.as<T>(), dxv.as<T>(), g, nx);
  return true;
}

template <typename T>
bool avgPool2dImpl(const TensorView& xv, const TensorView& yv, const AvgPool2dParams& p) {
  if (!poolShapes(xv, yv, p.kernel, p.strides, p.pads, nullptr))
    return LWRT_REJECT("avg_pool2d: the shapes of x and y or the attributes do not fit");
  int64_t n = yv.numel();
  if (n == 0)
    return true;
  PoolGeom g = poolGeom(xv, yv, p.kernel, p.strides, p.pads, nullptr);
  LWRT_LAUNCH(avgPoolForward<T>, blocksFor(n), kThreads, xv.as<T>(), yv.as<T>(), g,
              p.count_include_pad != 0, n);
  return true;
}

template <typename T>
bool avgPool2dGradImpl(const TensorView& dyv, const TensorView& dxv, const AvgPool2dParams& p) {
  if (!poolShapes(dxv, dyv, p.kernel, p.strides, p.pads, nullptr))
    return LWRT_REJECT("avg_pool2d_grad: the shapes of dy and dx or the attributes do not fit");
  int64_t n = dxv.numel();
  if (n == 0)
    return true;
  if (dyv.numel() == 0)
    return zero(dxv.data, dxv.bytes());
  PoolGeom g = poolGeom(dxv, dyv, p.kernel, p.strides, p.pads, nullptr);
  LWRT_LAUNCH(avgPoolGather<T>, blocksFor(n), kThreads, dyv.as<T>(), dxv.as<T>(), g,
              p.count_include_pad != 0, n);
  return true;
}

template <typename T> bool globalAvgPoolImpl(const TensorView& xv, const TensorView& yv) {
  bool ok = xv.rank() >= 3 && yv.rank() == xv.rank() && yv.shape[0] == xv.shape[0] &&
            yv.shape[1] == xv.shape[1];
  for (int64_t d = 2; ok && d < yv.rank(); ++d)
    ok = yv.shape[d] == 1;
  if (!ok)
    return LWRT_REJECT("global_avg_pool: y must be x's shape with 1 for every spatial dim");
  int64_t nc = xv.shape[0] * xv.shape[1], spatial = 1;
  for (int64_t d = 2; d < xv.rank(); ++d)
    spatial *= xv.shape[d];
  if (nc == 0)
    return true;
  if (nc > INT_MAX)
    return LWRT_REJECT("global_avg_pool: more than 2^31 planes");
  LWRT_LAUNCH(planeMean<T>, static_cast<unsigned>(nc), kReduceThreads, xv.as<T>(), yv.as<T>(),
              spatial);
  return true;
}

} // namespace

//===--- Entry points -----------------------------------------------------===//

bool conv2d(const TensorView& x, const TensorView& w, const TensorView* bias, const TensorView& y,
            const Conv2dParams& p) {
  return floatOp("conv2d", {&x, &w, &y},
                 [&](auto t) { return conv2dImpl<decltype(t)>(x, w, bias, y, p); });
}

bool conv2dGradInput(const TensorView& dy, const TensorView& w, const TensorView& dx,
                     const Conv2dParams& p) {
  return floatOp("conv2d_grad_input", {&dy, &w, &dx},
                 [&](auto t) { return conv2dGradInputImpl<decltype(t)>(dy, w, dx, p); });
}

bool conv2dGradFilter(const TensorView& x, const TensorView& dy, const TensorView& dw,
                      const Conv2dParams& p) {
  return floatOp("conv2d_grad_filter", {&x, &dy, &dw},
                 [&](auto t) { return conv2dGradFilterImpl<decltype(t)>(x, dy, dw, p); });
}

bool gemm(const TensorView& a, const TensorView& b, const TensorView* c, const TensorView& y,
          const GemmParams& p) {
  if (c && !sameType(a.dtype, {c}))
    return LWRT_REJECT("gemm: c must have a's element type and hold data");
  return floatOp("gemm", {&a, &b, &y},
                 [&](auto t) { return gemmImpl<decltype(t)>(a, b, c, y, p); });
}

bool matmul(const TensorView& a, const TensorView& b, const TensorView& y) {
  return floatOp("matmul", {&a, &b, &y}, [&](auto t) { return matmulImpl<decltype(t)>(a, b, y); });
}

bool maxPool2d(const TensorView& x, const TensorView& y, const MaxPool2dParams& p) {
  return floatOp("max_pool2d", {&x, &y},
                 [&](auto t) { return maxPool2dImpl<decltype(t)>(x, y, p); });
}

bool maxPool2dGrad(const TensorView& x, const TensorView& dy, const TensorView& dx,
                   const MaxPool2dParams& p) {
  return floatOp("max_pool2d_grad", {&x, &dy, &dx},
                 [&](auto t) { return maxPool2dGradImpl<decltype(t)>(x, dy, dx, p); });
}

bool avgPool2d(const TensorView& x, const TensorView& y, const AvgPool2dParams& p) {
  return floatOp("avg_pool2d", {&x, &y},
                 [&](auto t) { return avgPool2dImpl<decltype(t)>(x, y, p); });
}

bool avgPool2dGrad(const TensorView& dy, const TensorView& dx, const AvgPool2dParams& p) {
  return floatOp("avg_pool2d_grad", {&dy, &dx},
                 [&](auto t) { return avgPool2dGradImpl<decltype(t)>(dy, dx, p); });
}

bool globalAvgPool(const TensorView& x, const TensorView& y) {
  return floatOp("global_avg_pool", {&x, &y},
                 [&](auto t) { return globalAvgPoolImpl<decltype(t)>(x, y); });
}

} // namespace lwrt::cuda
