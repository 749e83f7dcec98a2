//===- Kernels.h - Reference kernels shared by interpreter files -*- C++ -*-===//
//
// Internal to the reference interpreter: the context an eval function gets,
// index helpers, and the eval functions that live outside Interpreter.cpp
// (the training ops, in TrainKernels.cpp).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <functional>
#include <vector>

#include "ir/IR.h"
#include "ir/Tensor.h"

namespace lwcc {

struct EvalCtx {
  const Op& op;
  std::vector<const Tensor*> in;
  std::vector<Tensor> out;
  /// Where assign ops record new param values (by initializer name); null
  /// when the caller discards updates.
  WeightMap* updates = nullptr;

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
} // namespace kernels

#define LWCC_TRAIN_KERNELS(X)                                                                      \
  X(Sign) X(SoftmaxXent) X(MseLoss) X(SoftmaxXentGrad) X(MseLossGrad) X(Conv2dGradInput)          \
  X(Conv2dGradFilter) X(MaxPool2dGrad) X(AvgPool2dGrad) X(LrnGrad) X(ReluGrad) X(LeakyReluGrad)  \
  X(SigmoidGrad) X(TanhGrad) X(ClipGrad) X(SoftmaxGrad) X(LogSoftmaxGrad) X(BatchNormTrain)      \
  X(BatchNormGrad) X(SliceGrad) X(GatherGrad) X(DropoutMask) X(SgdUpdate) X(AdamUpdate)          \
  X(LrSchedule) X(Assign)
#define X(E) llvm::Error eval##E(EvalCtx&);
LWCC_TRAIN_KERNELS(X)
#undef X

} // namespace lwcc
