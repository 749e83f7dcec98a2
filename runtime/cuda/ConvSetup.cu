// ConvSetup.cu - the legacy API's descriptors of a convolution plan and
// the configuration's names in the autotune cache (cuda/Conv.h).
#include "cuda/Conv.h"
#include "cuda/KernelSupport.cuh"

#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <mutex>
#include <string>

namespace lwrt::cuda {
namespace {

/// The element type of the tensors cuDNN sees.
cudnnDataType_t cudnnType(DType t) {
  switch (t) {
  case DType::F64:
    return CUDNN_DATA_DOUBLE;
  case DType::BF16:
    return CUDNN_DATA_BFLOAT16;
  case DType::F16:
    return CUDNN_DATA_HALF;
  default:
    return CUDNN_DATA_FLOAT;
  }
}

/// The type cuDNN computes a convolution of tensors of type t in: float32
/// for everything but F64.
cudnnDataType_t cudnnComputeType(DType t) {
  return t == DType::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
}

} // namespace

bool tensorOpsAllowed(DType t) { return is16Bit(t) || (t == DType::F32 && context().convTf32); }

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
                                             CUDNN_CROSS_CORRELATION, cudnnComputeType(t)));
  LWRT_CUDNN(cudnnSetConvolutionGroupCount(plan.conv, i(g.G)));
  // FP32 without TF32 must stay on FMA kernels: cuDNN's default math lets
  // Ampere and later use TF32 tensor cores.
  cudnnMathType_t math = t == DType::F64       ? CUDNN_DEFAULT_MATH
                         : tensorOpsAllowed(t) ? CUDNN_TENSOR_OP_MATH
                                               : CUDNN_FMA_MATH;
  plan.dtype = t;
  LWRT_CUDNN(cudnnSetConvolutionMathType(plan.conv, math));
  return true;
}

std::string convTuneKey(ConvDir dir, const ConvGeom& g, const Conv2dParams& p, DType t,
                        int64_t align) {
  const Context& c = context();
  if (!c.autotuneCache)
    return "";
  const char* dirName = dir == ConvDir::Forward        ? "conv.fwd"
                        : dir == ConvDir::BackwardData ? "conv.bwd-data"
                                                       : "conv.bwd-filter";
  auto join = [](std::initializer_list<int64_t> v, const char* sep) {
    std::string out;
    for (int64_t d : v)
      out += (out.empty() ? "" : sep) + std::to_string(d);
    return out;
  };
  return std::string(dirName) + " " + dtypeName(t) + (c.convTf32 ? " tf32" : "") + " x" +
         join({g.N, g.C, g.H, g.W}, "x") + " w" + join({g.M, g.Cg, g.KH, g.KW}, "x") + " groups" +
         std::to_string(g.G) + " stride" + join({p.strides[0], p.strides[1]}, "x") + " pads" +
         join({p.pads[0], p.pads[1], p.pads[2], p.pads[3]}, ",") + " dilation" +
         join({p.dilations[0], p.dilations[1]}, "x") + " align" + std::to_string(align);
}

std::string recordChoice(const std::string& key, const std::string& choice) {
  std::string error;
  std::string taken = autotuneCache().record(context().autotuneDevice, key, choice, &error);
  if (!error.empty()) {
    static std::once_flag warned;
    std::call_once(warned, [&] {
      std::fprintf(stderr, "warning: %s; the autotune choices of this run are not kept\n",
                   error.c_str());
    });
  }
  return taken;
}

} // namespace lwrt::cuda
