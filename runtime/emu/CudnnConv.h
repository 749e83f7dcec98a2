// emu/CudnnConv.h - what the emulated cuDNN's two convolution files share
// defines: lwemu::dnn::{ConvDir, ConvGeom, SumOrder, ConvAlgo, convGeometry, convAlgo, convMath,
//          runConv}
//
// CudnnConvAlgos.cpp is the arithmetic (each algorithm's support,
// workspace, summation order, TF32); CudnnConv.cpp the cuDNN calls around
// it (validation, heuristics, Find, the execution calls).
#pragma once

#include "CudnnInternal.h"

namespace lwemu::dnn {

enum class ConvDir { Fwd, BwdData, BwdFilter };

/// One convolution: x [N, C, H, W], w [K, Cg, R, S] in G groups, y [N, K,
/// P, Q], with element strides (x and y from their descriptors, w packed).
struct ConvGeom {
  int N, C, H, W, K, Cg, Kg, R, S, P, Q, G;
  int padH, padW, strH, strW, dilH, dilW;
  bool flip; ///< CUDNN_CONVOLUTION: the filter applies mirrored
  int64_t xs[4], ys[4], wk, wc, wr, ws;
  int64_t xElems, yElems, wElems;
  cudnnDataType_t type;
  cudnnMathType_t math;
  int64_t woff(int k, int c, int r, int s) const {
    if (flip) {
      r = R - 1 - r;
      s = S - 1 - s;
    }
    return k * wk + c * wc + r * wr + s * ws;
  }
};

/// How an algorithm sums an output element's terms (see CudnnConvAlgos.cpp).
enum class SumOrder { Sequential, Transposed, Blocked, Pairwise, Lanes, Shuffled };

/// What one algorithm does on one geometry (CudnnConvAlgos.cpp says which).
struct ConvAlgo {
  bool supported = false;
  SumOrder order = SumOrder::Sequential;
  int64_t param = 0; ///< Transposed: inner length; Blocked, Shuffled: chunk; Lanes: lanes
  bool deterministic = true;
  bool tensorCores = false;
  size_t workspace = 0;
};

/// The validated geometry of (x, w, conv, y), or the status cuDNN returns
/// for them (BAD_PARAM, NOT_SUPPORTED).
cudnnStatus_t convGeometry(const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                           const cudnnConvolutionStruct* cv, const cudnnTensorStruct* y,
                           ConvGeom& g);

/// What algorithm `algo` (in range) of direction `dir` does on `g`.
ConvAlgo convAlgo(ConvDir dir, int algo, const ConvGeom& g);

/// The math type the perf results report for algorithm `a` on `g`.
cudnnMathType_t convMath(const ConvAlgo& a, const ConvGeom& g);

/// Runs algorithm `a` of direction `dir` now, on the calling thread (a
/// stream's worker): the workspace overwritten first, then out = alpha *
/// the result + beta * out. The operands are (x, w) for the forward, (dy,
/// w) for the backward data, (x, dy) for the backward filter.
void runConv(ConvDir dir, const ConvGeom& g, const ConvAlgo& a, const void* in1, const void* in2,
             void* out, Scale sc, void* ws, uint64_t seed);

} // namespace lwemu::dnn
