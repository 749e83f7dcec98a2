//===- Eval.h - What the interpreter's eval functions share ----*- C++ -*-===//
//
// Internal to the reference interpreter: the context an eval function gets,
// index helpers, and the eval functions that live outside Interpreter.cpp
// (the training ops in TrainOps.cpp, the communication ops in CommOps.cpp,
// and the families of ir/ActivationOps.cpp, ir/ResizeOps.cpp,
// ir/EncodingOps.cpp and ir/GradClipOps.cpp in the files of those names).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"
#include "ir/Tensor.h"
#include "runtime/include/lwrt/activation_math.h"

#include <functional>
#include <vector>

namespace lwcc {

struct EvalCtx {
  const Op& op;
  std::vector<const Tensor*> in;
  std::vector<Tensor> out;
  /// Where assign ops record new param values (by initializer name); null
  /// when the caller discards updates.
  WeightMap* updates = nullptr;
  /// The param values the step started from (for assigns to a shard).
  const WeightMap* weights = nullptr;
  /// The interpreter runs at float64 (--precision=f64): float32 tensors
  /// hold unrounded doubles, and kernels that mirror a float32 runtime
  /// computation compute in double instead.
  bool float64 = false;

  const Tensor& x(unsigned k = 0) const { return *in[k]; }
  Tensor& y(unsigned k = 0) { return out[k]; }
};

namespace kernels {
/// Row-major strides of `s`.
std::vector<int64_t> stridesOf(const Shape& s);
/// Calls fn(index, flat) for every index of `shape` in row-major order.
void forEachIndex(const Shape& shape,
                  const std::function<void(const std::vector<int64_t>&, int64_t)>& fn);
/// Element `k` of the counter-based dropout RNG: uniform in [0, 1).
double dropoutUniform(int64_t seed, int64_t step, int64_t k);

/// Where a slice (or slice_grad) op reads its input of shape `in`: per
/// axis, the first index and the step.
struct SliceMap {
  std::vector<int64_t> start, step;
};
SliceMap sliceMap(const Op& op, const Shape& in);

/// Calls fn(xi, wi, yi) for every (input, filter, output) element triple
/// that a 2-D convolution with the attributes of `op` multiplies together.
template <typename Fn>
void forEachConvTerm(const Op& op, const Shape& xs, const Shape& ws, const Shape& ys, Fn fn) {
  const auto& st = op.getInts("strides");
  const auto& pd = op.getInts("pads");
  const auto& dl = op.getInts("dilations");
  int64_t G = op.getInt("group"), Cg = ws[1], Mg = ws[0] / G;
  for (int64_t n = 0; n < ys[0]; ++n)
    for (int64_t m = 0; m < ys[1]; ++m) {
      int64_t g = m / Mg;
      for (int64_t oh = 0; oh < ys[2]; ++oh)
        for (int64_t ow = 0; ow < ys[3]; ++ow) {
          int64_t yi = ((n * ys[1] + m) * ys[2] + oh) * ys[3] + ow;
          for (int64_t ci = 0; ci < Cg; ++ci)
            for (int64_t i = 0; i < ws[2]; ++i) {
              int64_t ih = oh * st[0] - pd[0] + i * dl[0];
              if (ih < 0 || ih >= xs[2])
                continue;
              for (int64_t j = 0; j < ws[3]; ++j) {
                int64_t iw = ow * st[1] - pd[1] + j * dl[1];
                if (iw < 0 || iw >= xs[3])
                  continue;
                int64_t xi = ((n * xs[1] + g * Cg + ci) * xs[2] + ih) * xs[3] + iw;
                int64_t wi = ((m * Cg + ci) * ws[2] + i) * ws[3] + j;
                fn(xi, wi, yi);
              }
            }
        }
    }
}

/// Calls fn(xi, yi) for every input element inside each max-pool window,
/// windows in output order and taps in row-major order within a window.
template <typename Fn>
void forEachMaxPoolTap(const Op& op, const Shape& xs, const Shape& ys, Fn fn) {
  const auto& k = op.getInts("kernel");
  const auto& st = op.getInts("strides");
  const auto& pd = op.getInts("pads");
  const auto& dl = op.getInts("dilations");
  for (int64_t nc = 0; nc < ys[0] * ys[1]; ++nc)
    for (int64_t oh = 0; oh < ys[2]; ++oh)
      for (int64_t ow = 0; ow < ys[3]; ++ow) {
        int64_t yi = (nc * ys[2] + oh) * ys[3] + ow;
        for (int64_t i = 0; i < k[0]; ++i) {
          int64_t ih = oh * st[0] - pd[0] + i * dl[0];
          if (ih < 0 || ih >= xs[2])
            continue;
          for (int64_t j = 0; j < k[1]; ++j) {
            int64_t iw = ow * st[1] - pd[1] + j * dl[1];
            if (iw >= 0 && iw < xs[3])
              fn((nc * xs[2] + ih) * xs[3] + iw, yi);
          }
        }
      }
}

/// The input rows [h0, h1) and columns [w0, w1) an average-pool output
/// (oh, ow) covers, and its divisor: the window clipped to the padded input
/// counts pads when count_include_pad is set; otherwise only input elements.
struct AvgWindow {
  int64_t h0, h1, w0, w1, count;
};
AvgWindow avgPoolWindow(const Op& op, const Shape& xs, int64_t oh, int64_t ow);

/// The index into a tensor of shape `from` that broadcasts (numpy rules) to
/// element k of `to` (the shape rules checked rank and broadcasting).
inline lwrt::BroadcastIndex broadcastIndex(const Shape& to, const Shape& from) {
  lwrt::BroadcastIndex b;
  lwrt::makeBroadcastIndex(static_cast<int>(to.size()), to.data(), static_cast<int>(from.size()),
                           from.data(), b);
  return b;
}
} // namespace kernels

#define LWCC_TRAIN_KERNELS(X)                                                                      \
  X(Sign)                                                                                          \
  X(SoftmaxXent)                                                                                   \
  X(MseLoss)                                                                                       \
  X(SoftmaxXentGrad)                                                                               \
  X(MseLossGrad)                                                                                   \
  X(Conv2dGradInput)                                                                               \
  X(Conv2dGradFilter)                                                                              \
  X(MaxPool2dGrad) X(AvgPool2dGrad) X(LrnGrad) X(ReluGrad) X(LeakyReluGrad) X(SigmoidGrad)         \
      X(TanhGrad) X(ClipGrad) X(SoftmaxGrad) X(LogSoftmaxGrad) X(BatchNormTrain) X(BatchNormGrad)  \
          X(SliceGrad) X(GatherGrad) X(DropoutMask) X(SgdUpdate) X(AdamUpdate) X(LrSchedule)       \
              X(AllFinite) X(Assign) X(LayerNorm) X(LayerNormGrad) X(GatherNd) X(GatherNdGrad)     \
                  X(Record) X(Wait)
#define LWCC_COMM_KERNELS(X)                                                                       \
  X(AllReduce)                                                                                     \
  X(AllGather) X(ReduceScatter) X(Broadcast) X(ReduceTo) X(DeviceCopy) X(Shard) X(Unshard)
// Activations, prelu, max/min, compare, where (ActivationOps.cpp) and resize
// (ResizeOps.cpp).
#define LWCC_ZOO_KERNELS(X)                                                                        \
  X(HardSwish)                                                                                     \
  X(HardSigmoid)                                                                                   \
  X(Mish)                                                                                          \
  X(Softplus)                                                                                      \
  X(Softsign)                                                                                      \
  X(Elu) X(Selu) X(Celu) X(ThresholdedRelu) X(HardSwishGrad) X(HardSigmoidGrad) X(MishGrad)        \
      X(SoftplusGrad) X(SoftsignGrad) X(EluGrad) X(SeluGrad) X(CeluGrad) X(ThresholdedReluGrad)    \
          X(PRelu) X(PReluGrad) X(Max) X(Min) X(MaxGrad) X(MinGrad) X(Compare) X(Where) X(Resize)  \
              X(ResizeGrad)
// Position encodings and norms (EncodingOps.cpp).
#define LWCC_ENCODING_KERNELS(X)                                                                   \
  X(CumSum) X(Tile) X(Mod) X(Sin) X(Cos) X(ReduceL1) X(ReduceL2) X(ReduceSumSquare)
// Language models (LanguageOps.cpp).
#define LWCC_LANGUAGE_KERNELS(X) X(GatherElements) X(ScatterElements) X(NllLoss) X(NllLossGrad)
// Attention (AttentionOps.cpp).
#define LWCC_ATTENTION_KERNELS(X) X(Attention) X(AttentionGrad)
// Gradient clipping (GradClipOps.cpp).
#define LWCC_GRAD_CLIP_KERNELS(X) X(SquareSum) X(ClipCoef)
// A fused region: its body's ops, one after another (FusedOps.cpp).
#define LWCC_FUSED_KERNELS(X) X(Fused)
#define X(E) llvm::Error eval##E(EvalCtx&);
LWCC_TRAIN_KERNELS(X)
LWCC_COMM_KERNELS(X)
LWCC_ZOO_KERNELS(X)
LWCC_ENCODING_KERNELS(X)
LWCC_LANGUAGE_KERNELS(X)
LWCC_ATTENTION_KERNELS(X)
LWCC_GRAD_CLIP_KERNELS(X)
LWCC_FUSED_KERNELS(X)
#undef X

namespace kernels {
/// The part of `whole` (a param's initializer value) that the shard param
/// `p` holds.
llvm::Expected<Tensor> readShard(const Value& p, const Tensor& whole);
/// Writes `piece`, the value of shard param `p`, into `whole`.
void writeShard(const Value& p, const Tensor& piece, Tensor& whole);
/// Copies `rows` rows along `axis` of `src`, from row `srcRow`, into `dst`
/// at row `dstRow` (both tensors agree outside `axis`).
void copyRows(const Tensor& src, int64_t srcRow, Tensor& dst, int64_t dstRow, int64_t axis,
              int64_t rows);
} // namespace kernels

} // namespace lwcc
