// cuda/KernelSupport.cuh - what the CUDA kernel files share (not installed)
// defines: LWRT_REJECT, LWRT_LAUNCH, LWRT_GRID_STRIDE, kReduceThreads, blockSum, isFloatType,
//          sameType, floatOp, is16Bit, floatOr16Op, Elem, StoreOf, ParamOf, activationOp,
//          fitsInt, zeroBytes, PlaneGrid, planeGrid
#pragma once

#include "cuda/Context.h"
#include "lwrt/bf16.h"
#include "lwrt/f16.h"
#include "lwrt/tensor.h"

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <string>
#include <type_traits>

/// Records why a kernel does not take its operands and returns false.
#define LWRT_REJECT(what) ::lwrt::cuda::fail(__FILE__, __LINE__, what)

/// Launches kernel<<<grid, block>>> on the context's stream and checks the launch.
#define LWRT_LAUNCH(kernel, grid, block, ...)                                                      \
  do {                                                                                             \
    kernel<<<(grid), (block), 0, ::lwrt::cuda::context().stream>>>(__VA_ARGS__);                   \
    LWRT_CUDA(cudaGetLastError());                                                                 \
  } while (0)

/// for (i = this thread; i < n; i += every thread of the grid), in int64_t.
#define LWRT_GRID_STRIDE(i, n)                                                                     \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);           \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

namespace lwrt::cuda {

inline bool isFloatType(DType t) { return t == DType::F32 || t == DType::F64; }

/// All views have element type `t` and hold data (or no elements).
inline bool sameType(DType t, std::initializer_list<const TensorView*> views) {
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
  if (!isFloatType(t) || !sameType(t, views))
    return fail(__FILE__, __LINE__,
                std::string(op) + ": operands must be F32 or F64, all of one type, with data");
  if (t == DType::F32)
    return fn(float{});
  return fn(double{});
}

/// bf16 and fp16: stored as their 16 bits (uint16_t in kernels), computed
/// by cuDNN and cuBLAS in float32.
inline bool is16Bit(DType t) { return t == DType::BF16 || t == DType::F16; }

/// floatOp for the ops that take bf16 and fp16 operands too (convolutions
/// and matrix products): fn(uint16_t{}) for those, the kernel reading the
/// element type from its views.
template <typename Fn>
bool floatOr16Op(const char* op, std::initializer_list<const TensorView*> views, Fn fn) {
  DType t = (*views.begin())->dtype;
  if (!is16Bit(t))
    return floatOp(op, views, fn);
  if (!sameType(t, views))
    return fail(__FILE__, __LINE__,
                std::string(op) + ": operands must be of one element type, with data");
  return fn(uint16_t{});
}

/// Element types of the kernels that take mixed precision's 16-bit
/// activations (pooling, batch norm): float and double as they are; bf16
/// and fp16 (tags) stored as their 16 bits and computed in float32, each
/// result rounded once with lwrt/bf16.h's and lwrt/f16.h's rounding, as
/// the CPU backend computes them. ParamOf: the type of a normalization's
/// per-channel values (float32 for the 16-bit types).
struct Bf16Tag {};
struct F16Tag {};
template <typename T> struct Elem {
  using Store = T;
  using Value = T;
  static __device__ T load(T v) { return v; }
  static __device__ T store(T v) { return v; }
};
template <> struct Elem<Bf16Tag> {
  using Store = uint16_t;
  using Value = float;
  static __device__ float load(uint16_t h) { return bf16ToFloat(h); }
  static __device__ uint16_t store(float v) { return floatToBf16(v); }
};
template <> struct Elem<F16Tag> {
  using Store = uint16_t;
  using Value = float;
  static __device__ float load(uint16_t h) { return f16ToFloat(h); }
  static __device__ uint16_t store(float v) { return floatToF16(v); }
};
template <typename T> using StoreOf = typename Elem<T>::Store;
template <typename T> using ParamOf = std::conditional_t<std::is_floating_point_v<T>, T, float>;

/// The ops that take mixed precision's 16-bit activations (max and average pooling;
/// batch norm, with float32 parameters): `acts` of one float type, or bf16
/// or fp16, `params` (none for pooling) of float32 for those and of the
/// activations' type otherwise; fn(E{}) with E the
/// Elem tag (float, double, Bf16Tag, F16Tag).
template <typename Fn>
bool activationOp(const char* op, std::initializer_list<const TensorView*> acts,
                  std::initializer_list<const TensorView*> params, Fn fn) {
  DType t = (*acts.begin())->dtype;
  if (!(isFloatType(t) || is16Bit(t)) || !sameType(t, acts) ||
      !sameType(is16Bit(t) ? DType::F32 : t, params))
    return fail(__FILE__, __LINE__,
                std::string(op) + ": activations must be F32 or F64 with parameters of their type, "
                                  "or BF16 or F16 with F32 parameters, each with data");
  if (t == DType::BF16)
    return fn(Bf16Tag{});
  if (t == DType::F16)
    return fn(F16Tag{});
  if (t == DType::F32)
    return fn(float{});
  return fn(double{});
}

/// The type of the alpha and beta that cuDNN and cuBLAS take for elements
/// of type T: double for double, float for float, bf16 and fp16.
template <typename T> using ScaleOf = std::conditional_t<std::is_same_v<T, double>, double, float>;

inline bool fitsInt(std::initializer_list<int64_t> values) {
  for (int64_t v : values)
    if (v < 0 || v > INT_MAX)
      return false;
  return true;
}

/// Sets `bytes` of device memory at `p` to zero, on the context's stream.
inline bool zeroBytes(void* p, int64_t bytes) {
  if (bytes > 0)
    LWRT_CUDA(cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), context().stream));
  return true;
}

/// A grid over `planes` planes of `size` elements each: blockIdx.y walks
/// the planes (looping past 65535), blockIdx.x and the threads the elements
/// of one, so a kernel finds an element's plane (its channel) without a
/// division per element, and small planes still give many blocks.
struct PlaneGrid {
  dim3 grid, block;
};
inline PlaneGrid planeGrid(int64_t planes, int64_t size, unsigned threads = 256) {
  int64_t x = std::clamp<int64_t>((size + threads - 1) / threads, 1, 1024);
  int64_t y = std::clamp<int64_t>(planes, 1, 65535);
  return {dim3(static_cast<unsigned>(x), static_cast<unsigned>(y)), dim3(threads)};
}

/// Threads of the reduction kernels (a power of two, at most this many).
constexpr int kReduceThreads = 256;

/// The sum of v over the block, in a fixed order (a tree over blockDim.x,
/// a power of two); `shared` holds blockDim.x doubles.
inline __device__ double blockSum(double v, double* shared) {
  unsigned t = threadIdx.x;
  shared[t] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s)
      shared[t] += shared[t + s];
    __syncthreads();
  }
  double r = shared[0];
  __syncthreads();
  return r;
}

} // namespace lwrt::cuda
