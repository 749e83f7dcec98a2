// CudnnOps.cu - LRN, batch norm and softmax on cuDNN's legacy calls
// (cuda/CudnnOps.h).
//
// Descriptors are host objects made per call and destroyed after it (a few
// microseconds; a step replayed from a CUDA graph makes none). Every tensor
// is described as NCHW with the op's dims folded into four: [N, C, rest, 1]
// for batch norm (cuDNN's spatial mode normalizes over N and the rest),
// [outer, n, inner, 1] for softmax (CUDNN_SOFTMAX_MODE_CHANNEL: along dim 1).
//
// Batch norm's training call gives the batch statistics through its running
// averages: with factor 1 they are the batch mean and the unbiased batch
// variance (cuDNN keeps PyTorch's running-variance rule), over buffers
// zeroed first (a factor of 1 still multiplies what was there by 0, and
// NaN * 0 is NaN). The op's variance is the population one: times
// (m - 1) / m. Its backward runs on lwcc's own kernels (BatchNormKernels.cu):
// on an H200, ResNet-18's batch norm backward took 2.9 ms of a step there
// against 6.0 ms on cudnnBatchNormalizationBackward (float32, batch 128).
//
// Reproducibility: cuDNN's LRN, batch norm and softmax calls are
// deterministic (cuDNN's documentation lists none of them among the calls
// that use atomics); they do not sum in the CPU backend's order, which
// --kernels=own restores.
#include "cuda/CudnnOps.h"
#include "cuda/KernelSupport.cuh"

#include <initializer_list>

namespace lwrt::cuda {

namespace {

/// The descriptors of one call, destroyed with it.
struct Descs {
  cudnnTensorDescriptor_t t[3] = {nullptr, nullptr, nullptr};
  cudnnLRNDescriptor_t lrn = nullptr;
  Descs() = default;
  Descs(const Descs&) = delete;
  Descs& operator=(const Descs&) = delete;
  ~Descs() {
    for (cudnnTensorDescriptor_t d : t)
      if (d)
        cudnnDestroyTensorDescriptor(d);
    if (lrn)
      cudnnDestroyLRNDescriptor(lrn);
  }
};

cudnnDataType_t cudnnType(DType t) {
  return t == DType::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
}

/// d = an NCHW descriptor of dims n, c, h, w in type `t`.
bool nchw(cudnnTensorDescriptor_t& d, DType t, int64_t n, int64_t c, int64_t h, int64_t w) {
  LWRT_CUDNN(cudnnCreateTensorDescriptor(&d));
  LWRT_CUDNN(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, cudnnType(t), static_cast<int>(n),
                                        static_cast<int>(c), static_cast<int>(h),
                                        static_cast<int>(w)));
  return true;
}

CudnnRun ran(bool ok) { return ok ? CudnnRun::Ran : CudnnRun::Failed; }

/// Whether cuDNN may take the op at all: --kernels=cudnn and sizes within
/// its int dims and 2^31 elements.
bool covered(std::initializer_list<int64_t> dims, int64_t elements) {
  return context().cudnnOps && fitsInt(dims) && elements <= INT_MAX;
}

/// [N, C, rest] of a batch-norm operand x [N, C, ...].
void channelDims(const TensorView& x, int64_t& n, int64_t& c, int64_t& rest) {
  n = x.shape[0];
  c = x.shape[1];
  rest = 1;
  for (int64_t d = 2; d < x.rank(); ++d)
    rest *= x.shape[static_cast<size_t>(d)];
}

/// x and the [1, C, 1, 1] descriptor cuDNN derives for its statistics.
bool bnDescs(const TensorView& x, Descs& d) {
  int64_t n, c, rest;
  channelDims(x, n, c, rest);
  if (!nchw(d.t[0], x.dtype, n, c, rest, 1))
    return false;
  LWRT_CUDNN(cudnnCreateTensorDescriptor(&d.t[1]));
  LWRT_CUDNN(cudnnDeriveBNTensorDescriptor(d.t[1], d.t[0], CUDNN_BATCHNORM_SPATIAL));
  return true;
}

bool bnCovered(const TensorView& x) {
  if (x.rank() < 2)
    return false;
  int64_t n, c, rest;
  channelDims(x, n, c, rest);
  return covered({n, c, rest}, x.numel());
}

/// v *= s, for the C statistics of a channel.
template <typename T> __global__ void scaleVector(T* v, double s, int64_t n) {
  LWRT_GRID_STRIDE(i, n) { v[i] = static_cast<T>(static_cast<double>(v[i]) * s); }
}

template <typename T> bool scaleStatistics(const TensorView& v, double s) {
  LWRT_LAUNCH(scaleVector<T>, blocksFor(v.numel()), kThreads, v.as<T>(), s, v.numel());
  return true;
}

} // namespace

//===--- LRN --------------------------------------------------------------===//

namespace {

/// Whether cuDNN's LRN takes the window, and the descriptors for x.
CudnnRun lrnDescs(const TensorView& x, const LrnParams& p, Descs& d) {
  if (!covered({x.shape[0], x.shape[1], x.shape[2], x.shape[3]}, x.numel()) ||
      p.size < CUDNN_LRN_MIN_N || p.size > CUDNN_LRN_MAX_N || p.bias < CUDNN_LRN_MIN_K ||
      p.beta < CUDNN_LRN_MIN_BETA)
    return CudnnRun::NotCovered;
  // cuDNN's window is ONNX's: (size - 1) / 2 channels below, the rest
  // above; its alpha is divided by size as ONNX's is.
  bool ok = nchw(d.t[0], x.dtype, x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
  if (ok) {
    cudnnStatus_t st = cudnnCreateLRNDescriptor(&d.lrn);
    if (st == CUDNN_STATUS_SUCCESS)
      st = cudnnSetLRNDescriptor(d.lrn, static_cast<unsigned>(p.size), p.alpha, p.beta, p.bias);
    if (st != CUDNN_STATUS_SUCCESS)
      ok = fail(__FILE__, __LINE__,
                std::string("cudnnSetLRNDescriptor: ") + cudnnGetErrorString(st));
  }
  return ran(ok);
}

} // namespace

CudnnRun cudnnLrn(const TensorView& x, const TensorView& y, const LrnParams& p) {
  Descs d;
  CudnnRun r = lrnDescs(x, p, d);
  if (r != CudnnRun::Ran)
    return r;
  double one = 1, zero = 0; // double for F64 tensors, float otherwise
  float onef = 1, zerof = 0;
  bool f64 = x.dtype == DType::F64;
  cudnnStatus_t st = cudnnLRNCrossChannelForward(
      context().cudnn, d.lrn, CUDNN_LRN_CROSS_CHANNEL_DIM1, f64 ? static_cast<void*>(&one) : &onef,
      d.t[0], x.data, f64 ? static_cast<void*>(&zero) : &zerof, d.t[0], y.data);
  if (st != CUDNN_STATUS_SUCCESS)
    return ran(fail(__FILE__, __LINE__,
                    std::string("cudnnLRNCrossChannelForward: ") + cudnnGetErrorString(st)));
  return CudnnRun::Ran;
}

CudnnRun cudnnLrnGrad(const TensorView& x, const TensorView& y, const TensorView& dy,
                      const TensorView& dx, const LrnParams& p) {
  Descs d;
  CudnnRun r = lrnDescs(x, p, d);
  if (r != CudnnRun::Ran)
    return r;
  double one = 1, zero = 0;
  float onef = 1, zerof = 0;
  bool f64 = x.dtype == DType::F64;
  cudnnStatus_t st = cudnnLRNCrossChannelBackward(
      context().cudnn, d.lrn, CUDNN_LRN_CROSS_CHANNEL_DIM1, f64 ? static_cast<void*>(&one) : &onef,
      d.t[0], y.data, d.t[0], dy.data, d.t[0], x.data, f64 ? static_cast<void*>(&zero) : &zerof,
      d.t[0], dx.data);
  if (st != CUDNN_STATUS_SUCCESS)
    return ran(fail(__FILE__, __LINE__,
                    std::string("cudnnLRNCrossChannelBackward: ") + cudnnGetErrorString(st)));
  return CudnnRun::Ran;
}

//===--- Batch norm -------------------------------------------------------===//

CudnnRun cudnnBatchNorm(const TensorView& x, const TensorView& scale, const TensorView& bias,
                        const TensorView& mean, const TensorView& var, const TensorView& y,
                        double eps) {
  if (!bnCovered(x) || eps < CUDNN_BN_MIN_EPSILON)
    return CudnnRun::NotCovered;
  Descs d;
  if (!bnDescs(x, d))
    return CudnnRun::Failed;
  // alpha and beta are float for float tensors, double for double ones.
  double one = 1, zero = 0;
  float onef = 1, zerof = 0;
  bool f64 = x.dtype == DType::F64;
  cudnnStatus_t st = cudnnBatchNormalizationForwardInference(
      context().cudnn, CUDNN_BATCHNORM_SPATIAL, f64 ? static_cast<void*>(&one) : &onef,
      f64 ? static_cast<void*>(&zero) : &zerof, d.t[0], x.data, d.t[0], y.data, d.t[1], scale.data,
      bias.data, mean.data, var.data, eps);
  if (st != CUDNN_STATUS_SUCCESS)
    return ran(
        fail(__FILE__, __LINE__,
             std::string("cudnnBatchNormalizationForwardInference: ") + cudnnGetErrorString(st)));
  return CudnnRun::Ran;
}

CudnnRun cudnnBatchNormTrain(const TensorView& x, const TensorView& scale, const TensorView& bias,
                             const TensorView& y, const TensorView& mean, const TensorView& var,
                             double eps) {
  int64_t n, c, rest;
  if (!bnCovered(x) || eps < CUDNN_BN_MIN_EPSILON)
    return CudnnRun::NotCovered;
  channelDims(x, n, c, rest);
  const int64_t m = n * rest; // values per channel
  if (m < 2)
    return CudnnRun::NotCovered; // no unbiased variance to take the population one from
  Descs d;
  if (!bnDescs(x, d) || !zeroBytes(mean.data, mean.bytes()) || !zeroBytes(var.data, var.bytes()))
    return CudnnRun::Failed;
  double one = 1, zero = 0;
  float onef = 1, zerof = 0;
  bool f64 = x.dtype == DType::F64;
  cudnnStatus_t st = cudnnBatchNormalizationForwardTraining(
      context().cudnn, CUDNN_BATCHNORM_SPATIAL, f64 ? static_cast<void*>(&one) : &onef,
      f64 ? static_cast<void*>(&zero) : &zerof, d.t[0], x.data, d.t[0], y.data, d.t[1], scale.data,
      bias.data, 1.0, mean.data, var.data, eps, nullptr, nullptr);
  if (st != CUDNN_STATUS_SUCCESS)
    return ran(
        fail(__FILE__, __LINE__,
             std::string("cudnnBatchNormalizationForwardTraining: ") + cudnnGetErrorString(st)));
  double toPopulation = static_cast<double>(m - 1) / static_cast<double>(m);
  return ran(f64 ? scaleStatistics<double>(var, toPopulation)
                 : scaleStatistics<float>(var, toPopulation));
}

//===--- Softmax ----------------------------------------------------------===//

CudnnRun cudnnSoftmax(const TensorView& x, const TensorView& y, int64_t outer, int64_t n,
                      int64_t inner, bool log) {
  if (!covered({outer, n, inner}, x.numel()))
    return CudnnRun::NotCovered;
  Descs d;
  if (!nchw(d.t[0], x.dtype, outer, n, inner, 1))
    return CudnnRun::Failed;
  double one = 1, zero = 0;
  float onef = 1, zerof = 0;
  bool f64 = x.dtype == DType::F64;
  cudnnStatus_t st =
      cudnnSoftmaxForward(context().cudnn, log ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE,
                          CUDNN_SOFTMAX_MODE_CHANNEL, f64 ? static_cast<void*>(&one) : &onef,
                          d.t[0], x.data, f64 ? static_cast<void*>(&zero) : &zerof, d.t[0], y.data);
  if (st != CUDNN_STATUS_SUCCESS)
    return ran(
        fail(__FILE__, __LINE__, std::string("cudnnSoftmaxForward: ") + cudnnGetErrorString(st)));
  return CudnnRun::Ran;
}

CudnnRun cudnnSoftmaxGrad(const TensorView& y, const TensorView& dy, const TensorView& dx,
                          int64_t outer, int64_t n, int64_t inner, bool log) {
  if (!covered({outer, n, inner}, y.numel()))
    return CudnnRun::NotCovered;
  Descs d;
  if (!nchw(d.t[0], y.dtype, outer, n, inner, 1))
    return CudnnRun::Failed;
  double one = 1, zero = 0;
  float onef = 1, zerof = 0;
  bool f64 = y.dtype == DType::F64;
  cudnnStatus_t st = cudnnSoftmaxBackward(
      context().cudnn, log ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL,
      f64 ? static_cast<void*>(&one) : &onef, d.t[0], y.data, d.t[0], dy.data,
      f64 ? static_cast<void*>(&zero) : &zerof, d.t[0], dx.data);
  if (st != CUDNN_STATUS_SUCCESS)
    return ran(
        fail(__FILE__, __LINE__, std::string("cudnnSoftmaxBackward: ") + cudnnGetErrorString(st)));
  return CudnnRun::Ran;
}

} // namespace lwrt::cuda
