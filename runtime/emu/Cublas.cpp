// emu/Cublas.cpp - cuBLAS on the emulated device: handles and the GEMMs lwcc calls, as documented
//
// Emulates exactly the cuBLAS functions lwcc's CUDA runtime calls (cublasCreate,
// Destroy, SetStream, SetWorkspace, SetMathMode, GetProperty, GetStatusString,
// Sgemm, Dgemm, GemmEx and their strided-batched forms), with the signatures of
// the CUDA toolkit's cublas_api.h and cuBLAS's documented semantics:
//  - a handle is bound to the device current at cublasCreate; its work goes to
//    its stream (cublasSetStream, which also returns the handle to cuBLAS's
//    own workspace, as documented); cublasDestroy synchronizes the device;
//  - a GEMM's arguments are checked at the call and refused with cuBLAS's
//    status there: negative sizes, a bad transpose, a leading dimension below
//    max(1, rows), a null alpha or beta, a negative batch count:
//    CUBLAS_STATUS_INVALID_VALUE; a type, compute type or algorithm combination
//    outside cuBLAS's table: CUBLAS_STATUS_NOT_SUPPORTED. Every matrix is then
//    checked against the device allocations over its extent (to the last
//    element the call touches, every batch), alpha and beta are read (host
//    pointer mode, cuBLAS's default and the only one lwcc uses), and the
//    product is queued on the handle's stream;
//  - column-major storage; op(X) is X, or X transposed for CUBLAS_OP_T and
//    CUBLAS_OP_C (equal for real types); beta == 0 means C is not read, so a
//    NaN there does not propagate;
//  - float32 compute (CUBLAS_COMPUTE_32F*, Sgemm) accumulates products in
//    float32 (fused multiply-adds along k), 16-bit operands (CUDA_R_16F,
//    CUDA_R_16BF) widened exactly, and rounds once at the store to C's type
//    (lwrt/f16.h, lwrt/bf16.h); float64 compute is all float64;
//  - TF32 as an H100 computes it: with the math mode CUBLAS_TF32_TENSOR_OP_MATH
//    (for float32 data under CUBLAS_COMPUTE_32F or Sgemm) or the compute type
//    CUBLAS_COMPUTE_32F_FAST_TF32, float32 operands are rounded to TF32 (10
//    mantissa bits, to nearest, ties away from zero as cvt.rna.tf32.f32) before
//    they are multiplied; never under CUBLAS_COMPUTE_32F_PEDANTIC or the
//    default math mode.
// Not emulated, and stopped with a message naming the call rather than
// computed differently from a GPU: what cuBLAS supports but lwcc never asks
// for (integer and complex GEMMs, 16-bit compute, the FAST_16F, FAST_16BF and
// emulated compute types and math modes), since their rounding would be a
// guess. A handle that is not live (destroyed, or never made) stops the run
// as the use-after-free it would be on a GPU.
// Device memory: a handle holds what cuBLAS 13.1's took on an H100 (measured
// with cudaMemGetInfo): 2 MiB of its own and its default workspace pool for
// the streams it runs on without a workspace set, 64 MiB unless
// CUBLAS_WORKSPACE_CONFIG (":KiB:COUNT", repeated) sizes it otherwise.
#include "Internal.h"
#include "lwrt/bf16.h"
#include "lwrt/f16.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <cublas_v2.h>
#include <mutex>
#include <set>
#include <string>
#include <vector>

struct cublasContext {
  int device = 0;
  cudaStream_t stream = nullptr;
  void* workspace = nullptr; ///< set by cublasSetWorkspace (null: cuBLAS's own)
  size_t workspaceBytes = 0;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  size_t held = 0; ///< device memory the handle holds (holdDeviceMemory)
};

namespace {

/// The device memory a handle holds: its own and the default workspace
/// pool CUBLAS_WORKSPACE_CONFIG sizes (":4096:8" is 8 buffers of 4096 KiB;
/// unset or not of that form: 64 MiB, what cuBLAS 13.1 took on an H100).
size_t handleBytes() {
  constexpr size_t kMiB = size_t{1} << 20;
  size_t pool = 64 * kMiB;
  if (const char* env = std::getenv("CUBLAS_WORKSPACE_CONFIG")) {
    size_t sum = 0;
    const char* p = env;
    bool ok = *p == ':';
    while (ok && *p == ':') {
      char* end = nullptr;
      unsigned long long kib = std::strtoull(p + 1, &end, 10);
      ok = end != p + 1 && *end == ':';
      if (!ok)
        break;
      const char* countAt = end + 1;
      unsigned long long count = std::strtoull(countAt, &end, 10);
      ok = end != countAt;
      sum += static_cast<size_t>(kib * count) * 1024;
      p = end;
    }
    if (ok && *p == 0)
      pool = sum;
  }
  return 2 * kMiB + pool;
}

/// The live handles (a destroyed one is not: its use stops the run).
struct Handles {
  std::mutex m;
  std::set<cublasContext*> live;
};

Handles& handles() {
  static Handles* h = new Handles; // never destroyed: stream workers may outlive main
  return *h;
}

/// A copy of the live handle's settings, or fatal for a dangling one.
/// Returns false for a null handle (CUBLAS_STATUS_NOT_INITIALIZED).
bool settingsOf(cublasHandle_t h, const char* call, cublasContext* out) {
  if (!h)
    return false;
  Handles& H = handles();
  std::lock_guard<std::mutex> lock(H.m);
  if (!H.live.count(h))
    lwemu::fatal(std::string(call) + ": the cuBLAS handle is not live (destroyed, or never made)");
  *out = *h;
  return true;
}

enum class Elem { F32, F64, F16, BF16 };

size_t sizeOf(Elem e) {
  switch (e) {
  case Elem::F64:
    return 8;
  case Elem::F32:
    return 4;
  default:
    return 2;
  }
}

/// `x` rounded to TF32: 10 mantissa bits, to nearest, ties away from zero.
float roundToTf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u)
    return x; // infinity and NaN stay as they are
  u = (u + 0x1000u) & 0xffffe000u;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

template <typename T> T load(const void* p, Elem e, size_t i) {
  switch (e) {
  case Elem::F64:
    return static_cast<T>(static_cast<const double*>(p)[i]);
  case Elem::F32:
    return static_cast<T>(static_cast<const float*>(p)[i]);
  case Elem::F16:
    return static_cast<T>(lwrt::f16ToFloat(static_cast<const uint16_t*>(p)[i]));
  case Elem::BF16:
    return static_cast<T>(lwrt::bf16ToFloat(static_cast<const uint16_t*>(p)[i]));
  }
  return T(0);
}

template <typename T> void store(void* p, Elem e, size_t i, T v) {
  switch (e) {
  case Elem::F64:
    static_cast<double*>(p)[i] = static_cast<double>(v);
    break;
  case Elem::F32:
    static_cast<float*>(p)[i] = static_cast<float>(v);
    break;
  case Elem::F16:
    static_cast<uint16_t*>(p)[i] = lwrt::floatToF16(static_cast<float>(v));
    break;
  case Elem::BF16:
    static_cast<uint16_t*>(p)[i] = lwrt::floatToBf16(static_cast<float>(v));
    break;
  }
}

/// One matrix operand: its data, type, leading dimension and batch stride (elements).
struct Operand {
  const void* data;
  Elem type;
  int ld;
  long long stride;
};

/// A GEMM as checked at the call, run on the handle's stream.
struct Gemm {
  bool transA, transB;
  int m, n, k, batch;
  Operand a, b, c;
  bool float64; ///< float64 compute, else float32
  bool tf32;    ///< float32 operands rounded to TF32
  double alpha, beta;
};

/// C = alpha op(A) op(B) + beta C for every batch, in compute type T.
template <typename T> void runGemm(const Gemm& g) {
  const size_t m = static_cast<size_t>(g.m), n = static_cast<size_t>(g.n),
               k = static_cast<size_t>(g.k);
  const T alpha = static_cast<T>(g.alpha), beta = static_cast<T>(g.beta);
  std::vector<T> pa(m * k), pb(n * k); // op(A) by rows, op(B) by columns: each dot contiguous
  auto operand = [&](const Operand& o, int batch, size_t i) {
    T v = load<T>(static_cast<const char*>(o.data) + static_cast<long long>(batch) * o.stride *
                                                         static_cast<long long>(sizeOf(o.type)),
                  o.type, i);
    if constexpr (std::is_same_v<T, float>)
      if (g.tf32 && o.type == Elem::F32)
        v = roundToTf32(v);
    return v;
  };
  const size_t lda = static_cast<size_t>(g.a.ld), ldb = static_cast<size_t>(g.b.ld),
               ldc = static_cast<size_t>(g.c.ld);
  for (int batch = 0; batch < g.batch; ++batch) {
    for (size_t i = 0; i < m; ++i)
      for (size_t p = 0; p < k; ++p)
        pa[i * k + p] = operand(g.a, batch, g.transA ? p + i * lda : i + p * lda);
    for (size_t j = 0; j < n; ++j)
      for (size_t p = 0; p < k; ++p)
        pb[j * k + p] = operand(g.b, batch, g.transB ? j + p * ldb : p + j * ldb);
    char* c = static_cast<char*>(const_cast<void*>(g.c.data)) +
              static_cast<long long>(batch) * g.c.stride * static_cast<long long>(sizeOf(g.c.type));
    for (size_t j = 0; j < n; ++j)
      for (size_t i = 0; i < m; ++i) {
        T acc = 0;
        const T* x = &pa[i * k];
        const T* y = &pb[j * k];
        for (size_t p = 0; p < k; ++p)
          acc = std::fma(x[p], y[p], acc);
        T out = alpha * acc;
        if (beta != T(0)) // beta == 0: C is not read
          out += beta * load<T>(c, g.c.type, i + j * ldc);
        store<T>(c, g.c.type, i + j * ldc, out);
      }
  }
}

/// The bytes [offset of the first, end of the last] element a batched
/// operand of rows x cols touches, relative to its pointer; {0, 0} for none.
std::pair<long long, long long> extent(const Operand& o, int rows, int cols, int batch) {
  if (rows == 0 || cols == 0 || batch == 0)
    return {0, 0};
  long long size = static_cast<long long>(sizeOf(o.type));
  long long one = (static_cast<long long>(cols) - 1) * o.ld + rows;
  long long last = (static_cast<long long>(batch) - 1) * o.stride;
  return {std::min(0LL, last) * size, (std::max(0LL, last) + one) * size};
}

void checkOperand(const Operand& o, int rows, int cols, int batch, const std::string& what) {
  auto [from, to] = extent(o, rows, cols, batch);
  if (to > from)
    lwemu::checkDevice(static_cast<const char*>(o.data) + from, static_cast<size_t>(to - from),
                       what.c_str());
}

bool validOp(cublasOperation_t op) {
  return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

/// The documented CUBLAS_STATUS_INVALID_VALUE conditions of a GEMM.
bool invalidShape(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda, int ldb,
                  int ldc, const void* alpha, const void* beta, int batch) {
  if (m < 0 || n < 0 || k < 0 || batch < 0 || !validOp(ta) || !validOp(tb) || !alpha || !beta)
    return true;
  int rowsA = ta == CUBLAS_OP_N ? m : k, rowsB = tb == CUBLAS_OP_N ? k : n;
  return lda < std::max(1, rowsA) || ldb < std::max(1, rowsB) || ldc < std::max(1, m);
}

/// Checks the operands, the handle's stream and workspace, and queues `g`.
cublasStatus_t launch(const char* call, const cublasContext& h, Gemm g) {
  if (g.m == 0 || g.n == 0 || g.batch == 0)
    return CUBLAS_STATUS_SUCCESS; // nothing to compute: cuBLAS returns at once
  int device = lwemu::streamDevice(h.stream);
  if (device < 0)
    return CUBLAS_STATUS_EXECUTION_FAILED; // a destroyed stream: the launch fails
  if (device != h.device)
    lwemu::fatal(std::string(call) + ": the handle was made on device " + std::to_string(h.device) +
                 " but its stream runs on device " + std::to_string(device));
  std::string name(call);
  int rowsA = g.transA ? g.k : g.m, colsA = g.transA ? g.m : g.k;
  int rowsB = g.transB ? g.n : g.k, colsB = g.transB ? g.k : g.n;
  checkOperand(g.a, rowsA, colsA, g.batch, name + ": A");
  checkOperand(g.b, rowsB, colsB, g.batch, name + ": B");
  checkOperand(g.c, g.m, g.n, g.batch, name + ": C");
  if (h.workspace)
    lwemu::checkDevice(h.workspace, h.workspaceBytes,
                       (name + ": the workspace given to cublasSetWorkspace").c_str());
  cudaError_t e = lwemu::enqueue(h.stream, name, [g] {
    if (g.float64)
      runGemm<double>(g);
    else
      runGemm<float>(g);
  });
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

/// How a compute type and data types are served: emulated, valid in cuBLAS
/// but not emulated (the run stops), or outside cuBLAS's table.
enum class Support { Emulated, NotEmulated, NotSupported };

bool isReal16(cudaDataType t) { return t == CUDA_R_16F || t == CUDA_R_16BF; }

Support supportOf(cublasComputeType_t compute, cudaDataType at, cudaDataType bt, cudaDataType ct) {
  if (at != bt)
    return Support::NotSupported;
  switch (compute) {
  case CUBLAS_COMPUTE_32F:
  case CUBLAS_COMPUTE_32F_PEDANTIC:
    if ((isReal16(at) && (ct == at || ct == CUDA_R_32F)) || (at == CUDA_R_32F && ct == CUDA_R_32F))
      return Support::Emulated;
    if ((at == CUDA_R_8I && ct == CUDA_R_32F) ||
        ((at == CUDA_C_8I || at == CUDA_C_32F) && ct == CUDA_C_32F))
      return Support::NotEmulated;
    return Support::NotSupported;
  case CUBLAS_COMPUTE_32F_FAST_TF32:
    if (at == CUDA_R_32F && ct == CUDA_R_32F)
      return Support::Emulated;
    return at == CUDA_C_32F && ct == CUDA_C_32F ? Support::NotEmulated : Support::NotSupported;
  case CUBLAS_COMPUTE_32F_FAST_16F:
  case CUBLAS_COMPUTE_32F_FAST_16BF:
  case CUBLAS_COMPUTE_32F_EMULATED_16BFX9:
    return (at == CUDA_R_32F && ct == CUDA_R_32F) || (at == CUDA_C_32F && ct == CUDA_C_32F)
               ? Support::NotEmulated
               : Support::NotSupported;
  case CUBLAS_COMPUTE_64F:
  case CUBLAS_COMPUTE_64F_PEDANTIC:
    if (at == CUDA_R_64F && ct == CUDA_R_64F)
      return Support::Emulated;
    return at == CUDA_C_64F && ct == CUDA_C_64F ? Support::NotEmulated : Support::NotSupported;
  case CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT:
    return (at == CUDA_R_64F && ct == CUDA_R_64F) || (at == CUDA_C_64F && ct == CUDA_C_64F)
               ? Support::NotEmulated
               : Support::NotSupported;
  case CUBLAS_COMPUTE_16F:
  case CUBLAS_COMPUTE_16F_PEDANTIC:
    return at == CUDA_R_16F && ct == CUDA_R_16F ? Support::NotEmulated : Support::NotSupported;
  case CUBLAS_COMPUTE_32I:
  case CUBLAS_COMPUTE_32I_PEDANTIC:
    return at == CUDA_R_8I && ct == CUDA_R_32I ? Support::NotEmulated : Support::NotSupported;
  }
  return Support::NotSupported;
}

bool validAlgo(cublasGemmAlgo_t algo) {
  int a = static_cast<int>(algo);
  return a == CUBLAS_GEMM_DEFAULT || (a >= CUBLAS_GEMM_ALGO0 && a <= CUBLAS_GEMM_ALGO23) ||
         (a >= CUBLAS_GEMM_DFALT_TENSOR_OP && a <= CUBLAS_GEMM_ALGO15_TENSOR_OP);
}

Elem elemOf(cudaDataType t) {
  switch (t) {
  case CUDA_R_64F:
    return Elem::F64;
  case CUDA_R_16F:
    return Elem::F16;
  case CUDA_R_16BF:
    return Elem::BF16;
  default:
    return Elem::F32;
  }
}

/// The math mode without its flag bits.
int baseMath(cublasMath_t m) { return static_cast<int>(m) & 0xf; }

/// Whether a float32 GEMM under math mode `h.math` rounds to TF32; stops the
/// run for the math modes that make float32 GEMMs compute otherwise.
bool tf32ByMath(const cublasContext& h, const char* call) {
  int math = baseMath(h.math);
  if (math == CUBLAS_TENSOR_OP_MATH || math == CUBLAS_FP32_EMULATED_BF16X9_MATH)
    lwemu::fatal(std::string(call) + ": cuBLAS math mode " + std::to_string(math) +
                 " (reduced-precision float32) is not emulated");
  return math == CUBLAS_TF32_TENSOR_OP_MATH;
}

void refuseEmulatedFloat64(const cublasContext& h, const char* call) {
  if (baseMath(h.math) == CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH)
    lwemu::fatal(std::string(call) + ": CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH is not emulated");
}

/// The typed GEMMs (Sgemm, Dgemm and their strided-batched forms).
template <typename T>
cublasStatus_t typedGemm(const char* call, cublasHandle_t handle, cublasOperation_t ta,
                         cublasOperation_t tb, int m, int n, int k, const T* alpha, const T* a,
                         int lda, long long sa, const T* b, int ldb, long long sb, const T* beta,
                         T* c, int ldc, long long sc, int batch) {
  cublasContext h;
  if (!settingsOf(handle, call, &h))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (invalidShape(ta, tb, m, n, k, lda, ldb, ldc, alpha, beta, batch))
    return CUBLAS_STATUS_INVALID_VALUE;
  constexpr bool f64 = std::is_same_v<T, double>;
  constexpr Elem e = f64 ? Elem::F64 : Elem::F32;
  bool tf32 = false;
  if constexpr (f64)
    refuseEmulatedFloat64(h, call);
  else
    tf32 = tf32ByMath(h, call);
  Gemm g{ta != CUBLAS_OP_N,
         tb != CUBLAS_OP_N,
         m,
         n,
         k,
         batch,
         {a, e, lda, sa},
         {b, e, ldb, sb},
         {c, e, ldc, sc},
         f64,
         tf32,
         static_cast<double>(*alpha),
         static_cast<double>(*beta)};
  return launch(call, h, g);
}

/// cublasGemmEx and cublasGemmStridedBatchedEx.
cublasStatus_t gemmEx(const char* call, cublasHandle_t handle, cublasOperation_t ta,
                      cublasOperation_t tb, int m, int n, int k, const void* alpha, const void* a,
                      cudaDataType at, int lda, long long sa, const void* b, cudaDataType bt,
                      int ldb, long long sb, const void* beta, void* c, cudaDataType ct, int ldc,
                      long long sc, int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  cublasContext h;
  if (!settingsOf(handle, call, &h))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (invalidShape(ta, tb, m, n, k, lda, ldb, ldc, alpha, beta, batch))
    return CUBLAS_STATUS_INVALID_VALUE;
  Support s = supportOf(compute, at, bt, ct);
  if (s == Support::NotSupported || !validAlgo(algo))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (s == Support::NotEmulated)
    lwemu::fatal(std::string(call) + ": compute type " + std::to_string(compute) +
                 " with data types " + std::to_string(at) + ", " + std::to_string(bt) + ", " +
                 std::to_string(ct) + " is valid cuBLAS but not emulated");
  bool f64 = compute == CUBLAS_COMPUTE_64F || compute == CUBLAS_COMPUTE_64F_PEDANTIC;
  bool tf32 = false;
  if (f64)
    refuseEmulatedFloat64(h, call);
  else if (compute == CUBLAS_COMPUTE_32F_FAST_TF32)
    tf32 = true;
  else if (compute == CUBLAS_COMPUTE_32F && at == CUDA_R_32F)
    tf32 = tf32ByMath(h, call);
  // The scale type is the compute type's: float64 for 64F, float32 otherwise.
  double al = f64 ? *static_cast<const double*>(alpha) : *static_cast<const float*>(alpha);
  double be = f64 ? *static_cast<const double*>(beta) : *static_cast<const float*>(beta);
  Gemm g{ta != CUBLAS_OP_N,
         tb != CUBLAS_OP_N,
         m,
         n,
         k,
         batch,
         {a, elemOf(at), lda, sa},
         {b, elemOf(bt), ldb, sb},
         {c, elemOf(ct), ldc, sc},
         f64,
         tf32,
         al,
         be};
  return launch(call, h, g);
}

} // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (!handle)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (lwemu::captureForbids("cublasCreate")) // it allocates device memory
    return CUBLAS_STATUS_ALLOC_FAILED;
  const int device = lwemu::currentDevice();
  const size_t held = handleBytes();
  if (!lwemu::holdDeviceMemory(device, held))
    return CUBLAS_STATUS_ALLOC_FAILED;
  auto* h = new cublasContext;
  h->device = device;
  h->held = held;
  Handles& H = handles();
  std::lock_guard<std::mutex> lock(H.m);
  H.live.insert(h);
  *handle = h;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  cublasContext h;
  if (!settingsOf(handle, "cublasDestroy", &h))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  // cublasDestroy synchronizes the device, as documented.
  int current = 0;
  cudaGetDevice(&current);
  cudaSetDevice(h.device);
  cudaDeviceSynchronize();
  cudaSetDevice(current);
  Handles& H = handles();
  std::lock_guard<std::mutex> lock(H.m);
  H.live.erase(handle);
  lwemu::releaseDeviceMemory(handle->device, handle->held);
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  cublasContext h;
  if (!settingsOf(handle, "cublasSetStream", &h))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  std::lock_guard<std::mutex> lock(handles().m);
  handle->stream = stream;
  handle->workspace = nullptr; // back to cuBLAS's own workspace, as documented
  handle->workspaceBytes = 0;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  cublasContext h;
  if (!settingsOf(handle, "cublasSetWorkspace", &h))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0)
    return CUBLAS_STATUS_INVALID_VALUE; // must be aligned to 256 bytes
  if (workspace)
    lwemu::checkDevice(workspace, bytes, "cublasSetWorkspace: workspace");
  std::lock_guard<std::mutex> lock(handles().m);
  handle->workspace = bytes ? workspace : nullptr;
  handle->workspaceBytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  cublasContext h;
  if (!settingsOf(handle, "cublasSetMathMode", &h))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  int base = baseMath(mode), flags = static_cast<int>(mode) & ~0xf;
  bool known = base == CUBLAS_DEFAULT_MATH || base == CUBLAS_TENSOR_OP_MATH ||
               base == CUBLAS_PEDANTIC_MATH || base == CUBLAS_TF32_TENSOR_OP_MATH ||
               base == CUBLAS_FP32_EMULATED_BF16X9_MATH ||
               base == CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH;
  if (!known || (flags & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION))
    return CUBLAS_STATUS_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(handles().m);
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetProperty(libraryPropertyType type, int* value) {
  if (!value)
    return CUBLAS_STATUS_INVALID_VALUE;
  switch (type) {
  case MAJOR_VERSION:
    *value = CUBLAS_VER_MAJOR;
    return CUBLAS_STATUS_SUCCESS;
  case MINOR_VERSION:
    *value = CUBLAS_VER_MINOR;
    return CUBLAS_STATUS_SUCCESS;
  case PATCH_LEVEL:
    *value = CUBLAS_VER_PATCH;
    return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
  case CUBLAS_STATUS_SUCCESS:
    return "the operation completed successfully";
  case CUBLAS_STATUS_NOT_INITIALIZED:
    return "the library was not initialized";
  case CUBLAS_STATUS_ALLOC_FAILED:
    return "the resource allocation failed";
  case CUBLAS_STATUS_INVALID_VALUE:
    return "an invalid numeric value was used as an argument";
  case CUBLAS_STATUS_ARCH_MISMATCH:
    return "an absent device architectural feature is required";
  case CUBLAS_STATUS_MAPPING_ERROR:
    return "an access to GPU memory space failed";
  case CUBLAS_STATUS_EXECUTION_FAILED:
    return "the GPU program failed to execute";
  case CUBLAS_STATUS_INTERNAL_ERROR:
    return "an internal operation failed";
  case CUBLAS_STATUS_NOT_SUPPORTED:
    return "the functionality requested is not supported";
  case CUBLAS_STATUS_LICENSE_ERROR:
    return "an error was detected when checking the current licensing";
  }
  return "unknown cuBLAS status";
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float* alpha,
                              const float* A, int lda, const float* B, int ldb, const float* beta,
                              float* C, int ldc) {
  return typedGemm<float>("cublasSgemm", handle, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb,
                          0, beta, C, ldc, 0, 1);
}

cublasStatus_t cublasDgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const double* alpha,
                              const double* A, int lda, const double* B, int ldb,
                              const double* beta, double* C, int ldc) {
  return typedGemm<double>("cublasDgemm", handle, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb,
                           0, beta, C, ldc, 0, 1);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const float* alpha, const float* A, int lda,
                                         long long int strideA, const float* B, int ldb,
                                         long long int strideB, const float* beta, float* C,
                                         int ldc, long long int strideC, int batchCount) {
  return typedGemm<float>("cublasSgemmStridedBatched", handle, transa, transb, m, n, k, alpha, A,
                          lda, strideA, B, ldb, strideB, beta, C, ldc, strideC, batchCount);
}

cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const double* alpha, const double* A, int lda,
                                         long long int strideA, const double* B, int ldb,
                                         long long int strideB, const double* beta, double* C,
                                         int ldc, long long int strideC, int batchCount) {
  return typedGemm<double>("cublasDgemmStridedBatched", handle, transa, transb, m, n, k, alpha, A,
                           lda, strideA, B, ldb, strideB, beta, C, ldc, strideC, batchCount);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
  return gemmEx("cublasGemmEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype,
                ldb, 0, beta, C, Ctype, ldc, 0, 1, computeType, algo);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B,
                                          cudaDataType Btype, int ldb, long long int strideB,
                                          const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  return gemmEx("cublasGemmStridedBatchedEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda,
                strideA, B, Btype, ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount,
                computeType, algo);
}

} // extern "C"
