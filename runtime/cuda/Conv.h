// cuda/Conv.h - what the two cuDNN convolution paths share (not installed)
// defines: ConvGeom, convGeom, ConvDir, kConvWorkspaceLimit, ConvEpilogue, GraphConv,
//          GraphConvPtr, buildGraphConv, runGraphConv, graphConvMs
//
// A convolution of one configuration runs on cuDNN's graph API (the backend
// descriptors of cudnn_graph.h, ConvGraph.cu) unless the context asks for
// the legacy API or no graph engine takes the configuration; then it runs
// on the legacy cudnnConvolution* calls (ConvKernels.cu). A forward
// convolution's bias, and the ReLU codegen fuses into it (conv2dAct), run
// in the same graph-API plan when an engine takes that graph and is faster
// than the plain convolution followed by the own epilogue kernel.
#pragma once

#include "cuda/Context.h"
#include "lwrt/autotune.h"
#include "lwrt/kernel_checks.h"
#include "lwrt/nn_params.h"
#include "lwrt/tensor.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lwrt::cuda {

enum class ConvDir : int64_t { Forward, BackwardData, BackwardFilter };

/// The most workspace a convolution algorithm or engine may take; a
/// trainer's context may allow less (Context::convWorkspaceLimit).
constexpr size_t kConvWorkspaceLimit = size_t(1) << 30;

/// What a forward plan computes after the convolution: + bias[M] (per
/// output channel), then max(., 0).
struct ConvEpilogue {
  bool bias = false;
  bool relu = false;
  bool any() const { return bias || relu; }
};

/// One configuration's execution plan on the graph API (opaque), with the
/// descriptors it was built from: cuDNN's lifetime rules want those to
/// outlive the plan, so they are released with it, after it, and all of
/// it before the cuDNN handle (Context::convPlans).
struct GraphConv;
struct GraphConvDeleter {
  void operator()(GraphConv* plan) const;
};
using GraphConvPtr = std::unique_ptr<GraphConv, GraphConvDeleter>;

/// Builds the operation graph of one convolution (x [N,C,H,W], w
/// [M,C/G,KH,KW], y [N,M,OH,OW]; for the backward directions x and w are
/// the gradients dx, dw the call writes; a forward one with `epi`'s bias
/// b [M] and ReLU after it), lists the engines cuDNN's heuristics offer,
/// keeps those that are deterministic, fit the workspace limit and (for F32
/// without TF32) use no tensor cores, and times up to eight of them on the
/// real buffers, keeping the fastest. `align` is the byte alignment every
/// buffer of the calls will have. `tuneKey` (non-empty when the context
/// keeps an autotune cache): the configuration's name there; an engine the
/// cache names ("graph engine=K": the K-th qualifying candidate, which the
/// heuristics list in the same order for a GPU and cuDNN version) is taken
/// untimed, and a choice made by timing is recorded.
///
/// Returns true with *out set, or true with *out null when no graph engine
/// takes the configuration (the caller uses the legacy API, or for an
/// epilogue the plain convolution and its own kernel), or false with the
/// context's error when CUDA itself fails.
bool buildGraphConv(ConvDir dir, const ConvGeom& g, const Conv2dParams& p, DType t, int64_t align,
                    ConvEpilogue epi, void* x, void* w, void* y, void* b, GraphConvPtr* out,
                    const std::string& tuneKey = "");

/// Alignment of the pieces carved out of the workspace.
constexpr size_t kAlign = 256;
inline size_t alignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

/// One convolution configuration's cuDNN setup, made at its first call and
/// kept with the context that made it (a plan holds its context's cuDNN
/// handle and workspace; Context::convPlans releases it before the
/// handle): a graph API plan, or when there is none the legacy descriptors
/// below; for a forward one with an epilogue, the fused graph API plan
/// when it won.
struct ConvPlan {
  ConvPlan() = default;
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;
  ~ConvPlan() {
    if (x)
      cudnnDestroyTensorDescriptor(x);
    if (y)
      cudnnDestroyTensorDescriptor(y);
    if (w)
      cudnnDestroyFilterDescriptor(w);
    if (conv)
      cudnnDestroyConvolutionDescriptor(conv);
  }
  GraphConvPtr graph;
  GraphConvPtr fused;                  ///< convolution, bias and ReLU in one plan
  cudnnTensorDescriptor_t x = nullptr; ///< the input, padded when `padded`
  cudnnTensorDescriptor_t y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  DType dtype = DType::F32; ///< of x, w and y
  int algo = 0;             ///< a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  size_t algoBytes = 0;     ///< the algorithm's workspace
  /// Asymmetric pads: cuDNN pads both sides by the smaller pad and the input
  /// is copied into [N, C, Hp, Wp] at (offH, offW), padBytes at the start of
  /// the workspace.
  bool padded = false;
  int64_t Hp = 0, Wp = 0, offH = 0, offW = 0;
  size_t padBytes = 0;
};

/// True when convolutions of type t may use tensor cores: bf16 and fp16
/// always, F32 when the context allows TF32.
bool tensorOpsAllowed(DType t);

/// Creates the plan's legacy descriptors (not its algorithm).
bool makeDescriptors(const ConvGeom& g, const Conv2dParams& p, DType t, ConvPlan& plan);

/// The name of a convolution configuration in the autotune cache
/// (lwrt/autotune.h): direction, element type, TF32, alignment, shapes and
/// attributes; "" when the context keeps no cache.
std::string convTuneKey(ConvDir dir, const ConvGeom& g, const Conv2dParams& p, DType t,
                        int64_t align);

/// Records a choice made by timing in the autotune cache under the
/// context's device; returns the choice in effect (another device's of the
/// run, when it recorded one first: the caller takes that). A cache file
/// that cannot be written is warned about once; the run goes on.
std::string recordChoice(const std::string& key, const std::string& choice);

/// Runs the plan on the context's stream with the context's workspace (b:
/// the bias of a plan with one, else ignored).
bool runGraphConv(GraphConv& plan, void* x, void* w, void* y, void* b);

/// The plan's measured time per run when it was chosen.
float graphConvMs(const GraphConv& plan);

/// The workspace the plan's engine takes.
size_t graphConvWorkspace(const GraphConv& plan);

} // namespace lwrt::cuda
