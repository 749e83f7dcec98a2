// emu/Cudnn.cpp - the emulated cuDNN: handles, versions, error strings, legacy descriptors
//
// The emulated cuDNN defines exactly the cuDNN functions lwcc's CUDA runtime
// calls, with the signatures of cuDNN's headers, from cuDNN's documented
// semantics:
//   - this file: cudnnCreate (the handle is bound to the calling thread's
//     current device and to the legacy default stream until cudnnSetStream),
//     cudnnDestroy (which synchronizes the device, as cuDNN's does), the
//     version and error-string calls, and the tensor, filter, convolution,
//     pooling and LRN descriptors;
//   - CudnnOps.cpp: pooling, LRN, batch norm, softmax;
//   - CudnnConv.cpp: the three convolution directions' calls, heuristics,
//     workspaces and Find*Ex searches; CudnnConvAlgos.cpp: every documented
//     algorithm's support, workspace and order of summation;
//   - CudnnGraph.cpp: the backend (graph) API, whose descriptors are kept
//     and finalized but whose heuristics offer no engine, so lwcc's runtime
//     takes its documented fallback to the legacy convolution calls.
//
// Every call checks its arguments when it is made and returns the status
// cuDNN documents for a bad one; then it checks each device operand against
// the emulator's allocation table (the extent a descriptor gives it) and
// enqueues the computation on the handle's stream. alpha and beta are read
// at the call (host memory).
//
// Descriptors are host objects; the emulator computes in 4-d tensors only
// (cudnnSetTensor4dDescriptor, NCHW or NHWC) and in float, double, half and
// bfloat16 (16-bit data computed in float32, rounded once at the store, with
// lwcc's own roundings, lwrt/bf16.h and lwrt/f16.h). cuDNN's other data
// types are refused with CUDNN_STATUS_NOT_SUPPORTED when a descriptor is set.
#include "CudnnInternal.h"
#include "Internal.h"

#include <atomic>
#include <climits>
#include <mutex>
#include <random>
#include <string>
#include <unordered_map>

namespace lwemu::dnn {

namespace {

struct Registry {
  std::mutex m;
  std::unordered_map<const void*, Kind> live;
};

Registry& registry() {
  static Registry* r = new Registry; // never destroyed: stream workers may outlive main
  return *r;
}

const char* kindName(Kind k) {
  switch (k) {
  case Kind::Handle:
    return "cuDNN handle";
  case Kind::Tensor:
    return "tensor descriptor";
  case Kind::Filter:
    return "filter descriptor";
  case Kind::Convolution:
    return "convolution descriptor";
  case Kind::Pooling:
    return "pooling descriptor";
  case Kind::Lrn:
    return "LRN descriptor";
  case Kind::Backend:
    break;
  }
  return "backend descriptor";
}

} // namespace

void addLive(const void* p, Kind kind) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.m);
  r.live[p] = kind;
}

bool removeLive(const void* p, Kind kind) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.m);
  auto it = r.live.find(p);
  if (it == r.live.end() || it->second != kind)
    return false;
  r.live.erase(it);
  return true;
}

void checkLive(const void* p, Kind kind, const char* call, const char* what) {
  if (!p)
    return;
  Registry& r = registry();
  std::unique_lock<std::mutex> lock(r.m);
  auto it = r.live.find(p);
  if (it != r.live.end() && it->second == kind)
    return;
  lock.unlock();
  fatal(std::string(call) + ": " + what + " is not a live " + kindName(kind) +
        " (destroyed, or never created)");
}

size_t dataSize(cudnnDataType_t t) {
  switch (t) {
  case CUDNN_DATA_FLOAT:
    return 4;
  case CUDNN_DATA_DOUBLE:
    return 8;
  case CUDNN_DATA_HALF:
  case CUDNN_DATA_BFLOAT16:
    return 2;
  default:
    return 0;
  }
}

cudnnStatus_t typeStatus(cudnnDataType_t t) {
  if (dataSize(t) != 0)
    return CUDNN_STATUS_SUCCESS;
  int v = static_cast<int>(t);
  return v >= 0 && v <= static_cast<int>(CUDNN_DATA_COMPLEX_FP64) ? CUDNN_STATUS_NOT_SUPPORTED
                                                                  : CUDNN_STATUS_BAD_PARAM;
}

Scale readScale(const void* alpha, const void* beta, cudnnDataType_t t) {
  Scale s;
  if (t == CUDNN_DATA_DOUBLE) {
    s.alpha = *static_cast<const double*>(alpha);
    s.beta = *static_cast<const double*>(beta);
  } else {
    s.alpha = *static_cast<const float*>(alpha);
    s.beta = *static_cast<const float*>(beta);
  }
  return s;
}

int64_t extentElems(const cudnnTensorStruct& t) {
  int64_t last = 0;
  for (int d = 0; d < 4; ++d)
    last += static_cast<int64_t>(t.dims[d] - 1) * t.strides[d];
  return last + 1;
}

void operand(const void* p, size_t bytes, const char* call, const char* what) {
  checkDevice(p, bytes, (std::string(call) + ": " + what).c_str());
}

cudnnStatus_t submit(cudnnHandle_t h, const char* call, std::function<void()> work) {
  return enqueue(h->stream, call, std::move(work)) == cudaSuccess ? CUDNN_STATUS_SUCCESS
                                                                  : CUDNN_STATUS_EXECUTION_FAILED;
}

uint64_t runSeed() {
  static const uint64_t process = (static_cast<uint64_t>(std::random_device{}()) << 32) ^
                                  static_cast<uint64_t>(std::random_device{}());
  static std::atomic<uint64_t> counter{0};
  return mix(process ^ mix(counter.fetch_add(1, std::memory_order_relaxed)));
}

} // namespace lwemu::dnn

using namespace lwemu;
using namespace lwemu::dnn;

namespace {

/// Whether `f` is a 4-d layout the emulator takes (NCHW_VECT_C is int8 only).
cudnnStatus_t formatStatus(cudnnTensorFormat_t f) {
  if (f == CUDNN_TENSOR_NCHW || f == CUDNN_TENSOR_NHWC)
    return CUDNN_STATUS_SUCCESS;
  return f == CUDNN_TENSOR_NCHW_VECT_C ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_BAD_PARAM;
}

template <typename T> cudnnStatus_t createObject(T** out, Kind kind) {
  if (!out)
    return CUDNN_STATUS_BAD_PARAM;
  *out = new T;
  addLive(*out, kind);
  return CUDNN_STATUS_SUCCESS;
}

/// Destroying null is a no-op, as cuDNN's; a non-live one stops the run.
template <typename T> cudnnStatus_t destroyObject(T* p, Kind kind, const char* call) {
  if (!p)
    return CUDNN_STATUS_SUCCESS;
  if (!removeLive(p, kind))
    fatal(std::string(call) + ": not a live descriptor (destroyed twice, or never created)");
  delete p;
  return CUDNN_STATUS_SUCCESS;
}

} // namespace

extern "C" {

//===--- Handles, versions, errors ----------------------------------------===//

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (!handle)
    return CUDNN_STATUS_BAD_PARAM;
  if (!holdDeviceMemory(currentDevice(), kCudnnHandleBytes))
    return CUDNN_STATUS_ALLOC_FAILED;
  auto* h = new cudnnContext;
  h->device = currentDevice();
  addLive(h, Kind::Handle);
  *handle = h;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  if (!handle)
    return CUDNN_STATUS_BAD_PARAM;
  checkLive(handle, Kind::Handle, "cudnnDestroy", "handle");
  // cuDNN documents that releasing a handle synchronizes its device.
  int current = 0;
  if (cudaGetDevice(&current) == cudaSuccess && current != handle->device)
    (void)cudaSetDevice(handle->device);
  (void)cudaDeviceSynchronize();
  if (current != handle->device)
    (void)cudaSetDevice(current);
  removeLive(handle, Kind::Handle);
  releaseDeviceMemory(handle->device, kCudnnHandleBytes);
  delete handle;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId) {
  if (!handle)
    return CUDNN_STATUS_BAD_PARAM;
  checkLive(handle, Kind::Handle, "cudnnSetStream", "handle");
  bool special =
      streamId == nullptr || streamId == cudaStreamLegacy || streamId == cudaStreamPerThread;
  if (!special) {
    int device = streamDevice(streamId);
    if (device < 0)
      return CUDNN_STATUS_BAD_PARAM; // not a live stream
    if (device != handle->device)
      return CUDNN_STATUS_MAPPING_ERROR; // the stream belongs to another device's context
  }
  handle->stream = streamId;
  return CUDNN_STATUS_SUCCESS;
}

size_t cudnnGetVersion(void) { return CUDNN_VERSION; }

size_t cudnnGetCudartVersion(void) { return CUDART_VERSION; }

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
#define LWEMU_STATUS(s)                                                                            \
  case s:                                                                                          \
    return #s;
    LWEMU_STATUS(CUDNN_STATUS_SUCCESS)
    LWEMU_STATUS(CUDNN_STATUS_NOT_INITIALIZED)
    LWEMU_STATUS(CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH)
    LWEMU_STATUS(CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH)
    LWEMU_STATUS(CUDNN_STATUS_DEPRECATED)
    LWEMU_STATUS(CUDNN_STATUS_LICENSE_ERROR)
    LWEMU_STATUS(CUDNN_STATUS_RUNTIME_IN_PROGRESS)
    LWEMU_STATUS(CUDNN_STATUS_RUNTIME_FP_OVERFLOW)
    LWEMU_STATUS(CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED)
    LWEMU_STATUS(CUDNN_STATUS_BAD_PARAM)
    LWEMU_STATUS(CUDNN_STATUS_INVALID_VALUE)
    LWEMU_STATUS(CUDNN_STATUS_BAD_PARAM_NULL_POINTER)
    LWEMU_STATUS(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER)
    LWEMU_STATUS(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED)
    LWEMU_STATUS(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND)
    LWEMU_STATUS(CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT)
    LWEMU_STATUS(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH)
    LWEMU_STATUS(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH)
    LWEMU_STATUS(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES)
    LWEMU_STATUS(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE)
    LWEMU_STATUS(CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH)
    LWEMU_STATUS(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE)
    LWEMU_STATUS(CUDNN_STATUS_NOT_SUPPORTED)
    LWEMU_STATUS(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN)
    LWEMU_STATUS(CUDNN_STATUS_NOT_SUPPORTED_SHAPE)
    LWEMU_STATUS(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE)
    LWEMU_STATUS(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT)
    LWEMU_STATUS(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER)
    LWEMU_STATUS(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART)
    LWEMU_STATUS(CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH)
    LWEMU_STATUS(CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING)
    LWEMU_STATUS(CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE)
    LWEMU_STATUS(CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT)
    LWEMU_STATUS(CUDNN_STATUS_NOT_SUPPORTED_PADDING)
    LWEMU_STATUS(CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM)
    LWEMU_STATUS(CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API)
    LWEMU_STATUS(CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE)
    LWEMU_STATUS(CUDNN_STATUS_INTERNAL_ERROR)
    LWEMU_STATUS(CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED)
    LWEMU_STATUS(CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE)
    LWEMU_STATUS(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED)
    LWEMU_STATUS(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
    LWEMU_STATUS(CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM)
    LWEMU_STATUS(CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED)
    LWEMU_STATUS(CUDNN_STATUS_EXECUTION_FAILED)
    LWEMU_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER)
    LWEMU_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CUBLAS)
    LWEMU_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CUDART)
    LWEMU_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CURAND)
#undef LWEMU_STATUS
  }
  return "CUDNN_UNKNOWN_STATUS";
}

//===--- Tensor and filter descriptors ------------------------------------===//

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* tensorDesc) {
  return createObject(tensorDesc, Kind::Tensor);
}

cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t tensorDesc) {
  return destroyObject(tensorDesc, Kind::Tensor, "cudnnDestroyTensorDescriptor");
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t tensorDesc,
                                         cudnnTensorFormat_t format, cudnnDataType_t dataType,
                                         int n, int c, int h, int w) {
  if (!tensorDesc)
    return CUDNN_STATUS_BAD_PARAM;
  checkLive(tensorDesc, Kind::Tensor, "cudnnSetTensor4dDescriptor", "tensorDesc");
  if (n <= 0 || c <= 0 || h <= 0 || w <= 0)
    return CUDNN_STATUS_BAD_PARAM;
  if (cudnnStatus_t s = formatStatus(format); s != CUDNN_STATUS_SUCCESS)
    return s;
  if (cudnnStatus_t s = typeStatus(dataType); s != CUDNN_STATUS_SUCCESS)
    return s;
  const int64_t N = n, C = c, H = h, W = w;
  if (N * C * H * W > INT_MAX) // cuDNN's limit of 2 Giga-elements per tensor
    return CUDNN_STATUS_NOT_SUPPORTED;
  cudnnTensorStruct& t = *tensorDesc;
  t.type = dataType;
  t.dims[0] = n;
  t.dims[1] = c;
  t.dims[2] = h;
  t.dims[3] = w;
  if (format == CUDNN_TENSOR_NCHW) {
    t.strides[0] = C * H * W;
    t.strides[1] = H * W;
    t.strides[2] = W;
    t.strides[3] = 1;
  } else { // NHWC
    t.strides[0] = H * W * C;
    t.strides[1] = 1;
    t.strides[2] = W * C;
    t.strides[3] = C;
  }
  t.set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* filterDesc) {
  return createObject(filterDesc, Kind::Filter);
}

cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t filterDesc) {
  return destroyObject(filterDesc, Kind::Filter, "cudnnDestroyFilterDescriptor");
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t filterDesc,
                                         cudnnDataType_t dataType, cudnnTensorFormat_t format,
                                         int k, int c, int h, int w) {
  if (!filterDesc)
    return CUDNN_STATUS_BAD_PARAM;
  checkLive(filterDesc, Kind::Filter, "cudnnSetFilter4dDescriptor", "filterDesc");
  if (k <= 0 || c <= 0 || h <= 0 || w <= 0)
    return CUDNN_STATUS_BAD_PARAM;
  if (cudnnStatus_t s = formatStatus(format); s != CUDNN_STATUS_SUCCESS)
    return s;
  if (cudnnStatus_t s = typeStatus(dataType); s != CUDNN_STATUS_SUCCESS)
    return s;
  if (static_cast<int64_t>(k) * c * h * w > INT_MAX)
    return CUDNN_STATUS_NOT_SUPPORTED;
  *filterDesc = cudnnFilterStruct{true, dataType, format, k, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}

//===--- Convolution descriptors ------------------------------------------===//

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* convDesc) {
  return createObject(convDesc, Kind::Convolution);
}

cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t convDesc) {
  return destroyObject(convDesc, Kind::Convolution, "cudnnDestroyConvolutionDescriptor");
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t convDesc, int pad_h,
                                              int pad_w, int u, int v, int dilation_h,
                                              int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t computeType) {
  if (!convDesc)
    return CUDNN_STATUS_BAD_PARAM;
  checkLive(convDesc, Kind::Convolution, "cudnnSetConvolution2dDescriptor", "convDesc");
  if (pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dilation_h <= 0 || dilation_w <= 0 ||
      (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION) ||
      typeStatus(computeType) == CUDNN_STATUS_BAD_PARAM)
    return CUDNN_STATUS_BAD_PARAM;
  cudnnConvolutionStruct& d = *convDesc;
  d.padH = pad_h;
  d.padW = pad_w;
  d.strideH = u;
  d.strideW = v;
  d.dilH = dilation_h;
  d.dilW = dilation_w;
  d.mode = mode;
  d.computeType = computeType;
  d.set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t convDesc, int groupCount) {
  if (!convDesc || groupCount < 1)
    return CUDNN_STATUS_BAD_PARAM;
  checkLive(convDesc, Kind::Convolution, "cudnnSetConvolutionGroupCount", "convDesc");
  convDesc->groups = groupCount;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc,
                                          cudnnMathType_t mathType) {
  if (!convDesc)
    return CUDNN_STATUS_BAD_PARAM;
  checkLive(convDesc, Kind::Convolution, "cudnnSetConvolutionMathType", "convDesc");
  if (mathType != CUDNN_DEFAULT_MATH && mathType != CUDNN_TENSOR_OP_MATH &&
      mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION && mathType != CUDNN_FMA_MATH)
    return CUDNN_STATUS_BAD_PARAM;
  convDesc->math = mathType;
  return CUDNN_STATUS_SUCCESS;
}

//===--- Pooling descriptors ----------------------------------------------===//

cudnnStatus_t cudnnCreatePoolingDescriptor(cudnnPoolingDescriptor_t* poolingDesc) {
  return createObject(poolingDesc, Kind::Pooling);
}

cudnnStatus_t cudnnDestroyPoolingDescriptor(cudnnPoolingDescriptor_t poolingDesc) {
  return destroyObject(poolingDesc, Kind::Pooling, "cudnnDestroyPoolingDescriptor");
}

cudnnStatus_t cudnnSetPooling2dDescriptor(cudnnPoolingDescriptor_t poolingDesc,
                                          cudnnPoolingMode_t mode,
                                          cudnnNanPropagation_t maxpoolingNanOpt, int windowHeight,
                                          int windowWidth, int verticalPadding,
                                          int horizontalPadding, int verticalStride,
                                          int horizontalStride) {
  if (!poolingDesc)
    return CUDNN_STATUS_BAD_PARAM;
  checkLive(poolingDesc, Kind::Pooling, "cudnnSetPooling2dDescriptor", "poolingDesc");
  bool modeOk = mode == CUDNN_POOLING_MAX || mode == CUDNN_POOLING_MAX_DETERMINISTIC ||
                mode == CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING ||
                mode == CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
  bool nanOk =
      maxpoolingNanOpt == CUDNN_NOT_PROPAGATE_NAN || maxpoolingNanOpt == CUDNN_PROPAGATE_NAN;
  if (!modeOk || !nanOk || windowHeight <= 0 || windowWidth <= 0 || verticalStride <= 0 ||
      horizontalStride <= 0 || verticalPadding < 0 || horizontalPadding < 0)
    return CUDNN_STATUS_BAD_PARAM;
  *poolingDesc = cudnnPoolingStruct{true,
                                    mode,
                                    maxpoolingNanOpt,
                                    windowHeight,
                                    windowWidth,
                                    verticalPadding,
                                    horizontalPadding,
                                    verticalStride,
                                    horizontalStride};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetPooling2dForwardOutputDim(const cudnnPoolingDescriptor_t poolingDesc,
                                                const cudnnTensorDescriptor_t inputTensorDesc,
                                                int* n, int* c, int* h, int* w) {
  if (!poolingDesc || !inputTensorDesc || !n || !c || !h || !w)
    return CUDNN_STATUS_BAD_PARAM;
  checkLive(poolingDesc, Kind::Pooling, "cudnnGetPooling2dForwardOutputDim", "poolingDesc");
  checkLive(inputTensorDesc, Kind::Tensor, "cudnnGetPooling2dForwardOutputDim", "inputTensorDesc");
  const cudnnPoolingStruct& p = *poolingDesc;
  const cudnnTensorStruct& x = *inputTensorDesc;
  if (!p.set || !x.set)
    return CUDNN_STATUS_BAD_PARAM;
  // cuDNN: outputDim = 1 + (inputDim + 2 * padding - windowDim) / poolingStride.
  int roomH = x.dims[2] + 2 * p.padH - p.winH, roomW = x.dims[3] + 2 * p.padW - p.winW;
  if (roomH < 0 || roomW < 0)
    return CUDNN_STATUS_BAD_PARAM; // the window is larger than the padded input
  *n = x.dims[0];
  *c = x.dims[1];
  *h = 1 + roomH / p.strideH;
  *w = 1 + roomW / p.strideW;
  return CUDNN_STATUS_SUCCESS;
}

//===--- LRN descriptors and batch norm's derived descriptor --------------===//

cudnnStatus_t cudnnCreateLRNDescriptor(cudnnLRNDescriptor_t* normDesc) {
  return createObject(normDesc, Kind::Lrn);
}

cudnnStatus_t cudnnDestroyLRNDescriptor(cudnnLRNDescriptor_t lrnDesc) {
  return destroyObject(lrnDesc, Kind::Lrn, "cudnnDestroyLRNDescriptor");
}

cudnnStatus_t cudnnSetLRNDescriptor(cudnnLRNDescriptor_t normDesc, unsigned lrnN, double lrnAlpha,
                                    double lrnBeta, double lrnK) {
  if (!normDesc)
    return CUDNN_STATUS_BAD_PARAM;
  checkLive(normDesc, Kind::Lrn, "cudnnSetLRNDescriptor", "normDesc");
  if (lrnN < CUDNN_LRN_MIN_N || lrnN > CUDNN_LRN_MAX_N || !(lrnK >= CUDNN_LRN_MIN_K) ||
      !(lrnBeta >= CUDNN_LRN_MIN_BETA))
    return CUDNN_STATUS_BAD_PARAM;
  *normDesc = cudnnLRNStruct{lrnN, lrnAlpha, lrnBeta, lrnK};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDeriveBNTensorDescriptor(cudnnTensorDescriptor_t derivedBnDesc,
                                            const cudnnTensorDescriptor_t xDesc,
                                            cudnnBatchNormMode_t mode) {
  if (!derivedBnDesc || !xDesc)
    return CUDNN_STATUS_BAD_PARAM;
  checkLive(derivedBnDesc, Kind::Tensor, "cudnnDeriveBNTensorDescriptor", "derivedBnDesc");
  checkLive(xDesc, Kind::Tensor, "cudnnDeriveBNTensorDescriptor", "xDesc");
  if (!xDesc->set)
    return CUDNN_STATUS_BAD_PARAM;
  const cudnnTensorStruct x = *xDesc;
  // The statistics are float for float, half and bfloat16 data, double for double.
  cudnnDataType_t t = x.type == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  switch (mode) {
  case CUDNN_BATCHNORM_SPATIAL:
  case CUDNN_BATCHNORM_SPATIAL_PERSISTENT:
    return cudnnSetTensor4dDescriptor(derivedBnDesc, CUDNN_TENSOR_NCHW, t, 1, x.dims[1], 1, 1);
  case CUDNN_BATCHNORM_PER_ACTIVATION:
    return cudnnSetTensor4dDescriptor(derivedBnDesc, CUDNN_TENSOR_NCHW, t, 1, x.dims[1], x.dims[2],
                                      x.dims[3]);
  }
  return CUDNN_STATUS_BAD_PARAM;
}

} // extern "C"
