// emu/CudnnInternal.h - what the emulated cuDNN's files share
// defines: cudnnContext, cudnnTensorStruct, cudnnFilterStruct, cudnnConvolutionStruct,
//          cudnnPoolingStruct, cudnnLRNStruct, lwemu::dnn::{Kind, addLive, removeLive,
//          checkLive, F32, F64, BF16, F16, withType, dataSize, typeStatus, Scale, readScale,
//          blend, extentElems, operand, submit, runSeed, mix}
//
// The emulated cuDNN: Cudnn.cpp (handles and the legacy descriptors),
// CudnnOps.cpp (pooling, LRN, batch norm, softmax), CudnnConv.cpp and
// CudnnConvAlgos.cpp (convolutions, sharing CudnnConv.h) and CudnnGraph.cpp
// (the backend API). Their opaque handle types are the structs cuDNN's
// headers name, defined here.
//
// Handles and descriptors are recorded while they live: a call given one
// that was destroyed (or never made) stops the run (fatal), as reading
// freed memory would crash or corrupt a real one; a null one is the
// CUDNN_STATUS_BAD_PARAM cuDNN documents.
#pragma once

#include "Emu.h"
#include "lwrt/bf16.h"
#include "lwrt/f16.h"

#include <cstdint>
#include <cstring>
#include <cudnn.h>
#include <functional>

/// A cuDNN handle: the device it was created on and the stream its work goes to.
struct cudnnContext {
  int device = 0;
  cudaStream_t stream = nullptr;
};

/// The device memory a cuDNN handle holds: what cuDNN 9.19's took on an
/// H100 (8 to 10 MiB, measured with cudaMemGetInfo at its 2 MiB steps).
constexpr size_t kCudnnHandleBytes = size_t{8} << 20;

/// A 4-d tensor descriptor: dims n, c, h, w and their strides in elements.
struct cudnnTensorStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int dims[4] = {0, 0, 0, 0};
  int64_t strides[4] = {0, 0, 0, 0};
};

/// A 4-d filter descriptor [k, c, h, w], packed in `format` (KCRS or KRSC).
struct cudnnFilterStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW;
  int k = 0, c = 0, h = 0, w = 0;
};

struct cudnnConvolutionStruct {
  bool set = false; ///< by cudnnSetConvolution2dDescriptor
  int padH = 0, padW = 0, strideH = 1, strideW = 1, dilH = 1, dilW = 1;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnDataType_t computeType = CUDNN_DATA_FLOAT;
  int groups = 1;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

struct cudnnPoolingStruct {
  bool set = false;
  cudnnPoolingMode_t mode = CUDNN_POOLING_MAX;
  cudnnNanPropagation_t nan = CUDNN_NOT_PROPAGATE_NAN;
  int winH = 0, winW = 0, padH = 0, padW = 0, strideH = 1, strideW = 1;
};

/// cuDNN's documented defaults (cudnnCreateLRNDescriptor).
struct cudnnLRNStruct {
  unsigned n = 5;
  double alpha = 1e-4, beta = 0.75, k = 2.0;
};

namespace lwemu::dnn {

enum class Kind { Handle, Tensor, Filter, Convolution, Pooling, Lrn, Backend };

/// Records `p` as a live object of `kind`.
void addLive(const void* p, Kind kind);
/// Forgets `p`; false when it was not a live object of `kind`.
bool removeLive(const void* p, Kind kind);
/// fatal() unless `p` is null or a live object of `kind` (`call` names the
/// call, `what` the argument).
void checkLive(const void* p, Kind kind, const char* call, const char* what);

/// Element types: storage, the type cuDNN computes in (float32 for 16-bit
/// data, rounded once at the store), load and store.
struct F32 {
  using Store = float;
  using Acc = float;
  static float load(const void* p, int64_t i) { return static_cast<const float*>(p)[i]; }
  static void store(void* p, int64_t i, float v) { static_cast<float*>(p)[i] = v; }
};
struct F64 {
  using Store = double;
  using Acc = double;
  static double load(const void* p, int64_t i) { return static_cast<const double*>(p)[i]; }
  static void store(void* p, int64_t i, double v) { static_cast<double*>(p)[i] = v; }
};
struct BF16 {
  using Store = uint16_t;
  using Acc = float;
  static float load(const void* p, int64_t i) {
    return lwrt::bf16ToFloat(static_cast<const uint16_t*>(p)[i]);
  }
  static void store(void* p, int64_t i, float v) {
    static_cast<uint16_t*>(p)[i] = lwrt::floatToBf16(v);
  }
};
struct F16 {
  using Store = uint16_t;
  using Acc = float;
  static float load(const void* p, int64_t i) {
    return lwrt::f16ToFloat(static_cast<const uint16_t*>(p)[i]);
  }
  static void store(void* p, int64_t i, float v) {
    static_cast<uint16_t*>(p)[i] = lwrt::floatToF16(v);
  }
};

/// Calls f(E{}) with the element type of `t` (one the emulator computes in).
template <typename Fn> void withType(cudnnDataType_t t, Fn&& f) {
  switch (t) {
  case CUDNN_DATA_DOUBLE:
    f(F64{});
    break;
  case CUDNN_DATA_HALF:
    f(F16{});
    break;
  case CUDNN_DATA_BFLOAT16:
    f(BF16{});
    break;
  default:
    f(F32{});
    break;
  }
}

/// Bytes of an element of `t`; 0 for a type the emulator does not compute in.
size_t dataSize(cudnnDataType_t t);

/// SUCCESS for float, double, half and bfloat16; NOT_SUPPORTED for another
/// of cuDNN's data types (int8, fp8, ...: not emulated); BAD_PARAM for a
/// value that is no cudnnDataType_t.
cudnnStatus_t typeStatus(cudnnDataType_t t);

/// alpha and beta as the caller passed them (host memory, read at the
/// call): double for double data, float otherwise.
struct Scale {
  double alpha = 1, beta = 0;
};
Scale readScale(const void* alpha, const void* beta, cudnnDataType_t t);

/// Stores alpha * r + beta * (the prior value) at element i of `out` (beta
/// == 0: the prior value is not read, so a NaN there does not propagate),
/// computed in the accumulation type and rounded once.
template <typename E> void blend(void* out, int64_t i, typename E::Acc r, const Scale& s) {
  using A = typename E::Acc;
  A v = static_cast<A>(s.alpha) * r;
  if (s.beta != 0)
    v += static_cast<A>(s.beta) * E::load(out, i);
  E::store(out, i, v);
}

/// The elements a tensor descriptor spans (its largest offset + 1).
int64_t extentElems(const cudnnTensorStruct& t);

/// fatal() unless [p, p + bytes) is device memory; names "call: what".
void operand(const void* p, size_t bytes, const char* call, const char* what);

/// Enqueues `work` on the handle's stream; EXECUTION_FAILED when the
/// stream cannot take it (destroyed, or an invalidated capture), as a
/// failed kernel launch inside cuDNN.
cudnnStatus_t submit(cudnnHandle_t h, const char* call, std::function<void()> work);

/// A seed that differs from run to run of every call: for the orders of
/// cuDNN's non-deterministic algorithms (atomics on a GPU). Drawn when the
/// work runs, so a replayed CUDA graph varies too.
uint64_t runSeed();

/// A well-mixed 64-bit hash of `x` (splitmix64's finalizer).
inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

} // namespace lwemu::dnn
