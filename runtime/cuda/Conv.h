// cuda/Conv.h - what the two cuDNN convolution paths share (not installed)
// defines: ConvGeom, convGeom, ConvDir, kConvWorkspaceLimit, GraphConv,
//          buildGraphConv, runGraphConv
//
// A convolution of one configuration runs on cuDNN's graph API (the backend
// descriptors of cudnn_graph.h, ConvGraph.cu) unless the context asks for
// the legacy API or no graph engine takes the configuration; then it runs
// on the legacy cudnnConvolution* calls (NNKernels.cu).
#pragma once

#include "cuda/Context.h"
#include "lwrt/nn_params.h"
#include "lwrt/tensor.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lwrt::cuda {

/// The geometry of one convolution, checked against the views.
struct ConvGeom {
  int64_t N, C, H, W, M, Cg, KH, KW, OH, OW, G;
};

/// Fills `g` from the shapes of x, w and y; false when they or the
/// attributes do not fit together.
bool convGeom(const std::vector<int64_t>& xs, const std::vector<int64_t>& ws,
              const std::vector<int64_t>& ys, const Conv2dParams& p, ConvGeom& g);

enum class ConvDir : int64_t { Forward, BackwardData, BackwardFilter };

/// The most workspace a convolution algorithm or engine may take.
constexpr size_t kConvWorkspaceLimit = size_t(1) << 30;

/// One configuration's execution plan on the graph API (opaque).
struct GraphConv;

/// Builds the operation graph of one convolution (x [N,C,H,W], w
/// [M,C/G,KH,KW], y [N,M,OH,OW]; for the backward directions x and w are
/// the gradients dx, dw the call writes), lists the engines cuDNN's
/// heuristics offer, keeps those that are deterministic, fit the workspace
/// limit and (for F32 without TF32) use no tensor cores, and times up to
/// eight of them on the real buffers, keeping the fastest. `align` is the
/// byte alignment every buffer of the calls will have.
///
/// Returns true with *out set, or true with *out null when no graph engine
/// takes the configuration (the caller uses the legacy API), or false with
/// the context's error when CUDA itself fails.
bool buildGraphConv(ConvDir dir, const ConvGeom& g, const Conv2dParams& p, DType t, int64_t align,
                    void* x, void* w, void* y, GraphConv** out);

/// Runs the plan on the context's stream with the context's workspace.
bool runGraphConv(GraphConv& plan, void* x, void* w, void* y);

} // namespace lwrt::cuda
