// NNKernels.cu - matrix products and pooling of lwrt/cuda_nn.h (the
// convolutions are ConvKernels.cu's)
//
// Matrix products go to cuBLAS (row-major operands seen as their column-major
// transposes, so C^T = B^T A^T), in IEEE float32 unless the trainer runs
// with --tf32 (cuBLAS's math mode, Context::gemmTf32: PyTorch's default
// rule for matmuls). bf16 and fp16 products (mixed precision) read 16-bit
// operands and write a 16-bit result, accumulating in float32
// (cublasGemmEx with CUBLAS_COMPUTE_32F; the context's math mode forbids
// reductions in 16 bits), as the CPU backend's 16-bit products do.
//
// Pooling's forward runs on cuDNN (cudnnPoolingForward) where it computes
// what the op asks: symmetric pads smaller than the window, no dilation, the
// floor-mode output size (ceil mode adding no window), sizes within int.
// Max pooling uses CUDNN_POOLING_MAX_DETERMINISTIC. The backward of both
// poolings, and every other case (and --kernels=own), use this file's own
// kernels: cuDNN's max-pooling backward documents no rule for a window whose
// maximum appears twice, and needs the forward's y, which the op does not
// have; average pooling's op has neither x nor y. The own kernels follow the CPU
// backend's loops (cpu/NNKernels.cpp) so that ties, empty windows and
// divisors come out the same; their gradients gather per input element,
// summing in the CPU's order, so no float atomics are needed. They walk
// planes on a planeGrid (the plane once per block row; 32-bit indices
// within a plane).
#include "cuda/KernelSupport.cuh"
#include "lwrt/cuda_nn.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>

namespace lwrt::cuda {
namespace {

template <typename T> __device__ __forceinline__ T negInf() { return static_cast<T>(-INFINITY); }

/// y[m, n] = c[m * cs0 + n * cs1] for y [M, N], on a planeGrid(M, N).
template <typename T>
__global__ void broadcastMatrix(const T* c, T* y, unsigned M, unsigned N, int64_t cs0,
                                int64_t cs1) {
  for (unsigned m = blockIdx.y; m < M; m += gridDim.y)
    for (unsigned n = blockIdx.x * blockDim.x + threadIdx.x; n < N; n += gridDim.x * blockDim.x)
      y[static_cast<size_t>(m) * N + n] = c[m * cs0 + n * cs1];
}

/// y = s * y (0 where s is 0), as the CPU's empty products do.
template <typename T> __global__ void scaleInPlace(T* y, T s, int64_t n) {
  LWRT_GRID_STRIDE(i, n) { y[i] = s == T(0) ? T(0) : s * y[i]; }
}

//===--- Linear algebra ---------------------------------------------------===//

// cuBLAS by element type (t: the tensors' DType, which tells bf16 from fp16
// when T is uint16_t). Operands are column-major, as cuBLAS sees them.
cublasStatus_t blasGemm(DType, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                        const float* alpha, const float* a, int lda, const float* b, int ldb,
                        const float* beta, float* c, int ldc) {
  return cublasSgemm(context().cublas, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
cublasStatus_t blasGemm(DType, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                        const double* alpha, const double* a, int lda, const double* b, int ldb,
                        const double* beta, double* c, int ldc) {
  return cublasDgemm(context().cublas, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
cudaDataType_t blasType16(DType t) { return t == DType::BF16 ? CUDA_R_16BF : CUDA_R_16F; }
cublasStatus_t blasGemm(DType t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                        const float* alpha, const uint16_t* a, int lda, const uint16_t* b, int ldb,
                        const float* beta, uint16_t* c, int ldc) {
  const cudaDataType_t dt = blasType16(t);
  return cublasGemmEx(context().cublas, ta, tb, m, n, k, alpha, a, dt, lda, b, dt, ldb, beta, c, dt,
                      ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}
cublasStatus_t blasGemmBatched(DType, int m, int n, int k, const float* alpha, const float* a,
                               int lda, long long sa, const float* b, int ldb, long long sb,
                               const float* beta, float* c, int ldc, long long sc, int count) {
  return cublasSgemmStridedBatched(context().cublas, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, alpha, a,
                                   lda, sa, b, ldb, sb, beta, c, ldc, sc, count);
}
cublasStatus_t blasGemmBatched(DType, int m, int n, int k, const double* alpha, const double* a,
                               int lda, long long sa, const double* b, int ldb, long long sb,
                               const double* beta, double* c, int ldc, long long sc, int count) {
  return cublasDgemmStridedBatched(context().cublas, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, alpha, a,
                                   lda, sa, b, ldb, sb, beta, c, ldc, sc, count);
}
cublasStatus_t blasGemmBatched(DType t, int m, int n, int k, const float* alpha, const uint16_t* a,
                               int lda, long long sa, const uint16_t* b, int ldb, long long sb,
                               const float* beta, uint16_t* c, int ldc, long long sc, int count) {
  const cudaDataType_t dt = blasType16(t);
  return cublasGemmStridedBatchedEx(context().cublas, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, alpha, a,
                                    dt, lda, sa, b, dt, ldb, sb, beta, c, dt, ldc, sc, count,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

template <typename T>
bool gemmImpl(const TensorView& av, const TensorView& bv, const TensorView* cv,
              const TensorView& yv, const GemmParams& p) {
  if (av.rank() != 2 || bv.rank() != 2 || yv.rank() != 2 || (p.transA != 0 && p.transA != 1) ||
      (p.transB != 0 && p.transB != 1))
    return LWRT_REJECT("gemm: a, b and y must be matrices and transA, transB 0 or 1");
  bool ta = p.transA != 0, tb = p.transB != 0;
  int64_t M = ta ? av.shape[1] : av.shape[0], K = ta ? av.shape[0] : av.shape[1];
  int64_t Kb = tb ? bv.shape[1] : bv.shape[0], N = tb ? bv.shape[0] : bv.shape[1];
  if (K != Kb || yv.shape[0] != M || yv.shape[1] != N)
    return LWRT_REJECT("gemm: the shapes of a, b and y do not fit");
  // Strides of c seen from [M, N]; 0 where broadcast.
  int64_t cs[2] = {0, 0};
  if (cv) {
    if (cv->rank() > 2)
      return LWRT_REJECT("gemm: c must have rank 0, 1 or 2");
    int64_t acc = 1;
    for (int64_t d = cv->rank(); d-- > 0;) {
      int64_t dim = cv->shape[d], out = yv.shape[2 - cv->rank() + d];
      if (dim != 1 && dim != out)
        return LWRT_REJECT("gemm: c does not broadcast to [M, N]");
      cs[2 - cv->rank() + d] = dim == 1 ? 0 : acc;
      acc *= dim;
    }
  }
  if (M == 0 || N == 0)
    return true;
  if (!fitsInt({M, N, K, av.shape[1], bv.shape[1]}))
    return LWRT_REJECT("gemm: a dimension is too large for cuBLAS (2^31)");
  T* y = yv.as<T>();
  int64_t n = M * N;
  ScaleOf<T> beta = 0;
  if (cv) {
    if (!fitsInt({M, N}))
      return LWRT_REJECT("gemm: a dimension is too large for cuBLAS (2^31)");
    PlaneGrid pg = planeGrid(M, N);
    broadcastMatrix<T><<<pg.grid, pg.block, 0, context().stream>>>(
        cv->as<T>(), y, static_cast<unsigned>(M), static_cast<unsigned>(N), cs[0], cs[1]);
    LWRT_CUDA(cudaGetLastError());
    beta = static_cast<ScaleOf<T>>(p.beta);
  }
  if (K == 0) { // an empty product: y = beta c
    if (!cv)
      return zeroBytes(y, yv.bytes());
    if constexpr (std::is_same_v<T, uint16_t>)
      return LWRT_REJECT("gemm: a bf16 or fp16 gemm takes no c");
    else
      LWRT_LAUNCH(scaleInPlace<T>, blocksFor(n), kThreads, y, beta, n);
    return true;
  }
  // Row-major y = op(A) op(B) is column-major y^T = op(B)^T op(A)^T, and a
  // row-major matrix is its column-major transpose: pass B first.
  ScaleOf<T> alpha = static_cast<ScaleOf<T>>(p.alpha);
  LWRT_CUBLAS(blasGemm(av.dtype, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                       static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), &alpha,
                       bv.as<T>(), static_cast<int>(bv.shape[1]), av.as<T>(),
                       static_cast<int>(av.shape[1]), &beta, y, static_cast<int>(N)));
  return true;
}

/// Whether the batch offsets sum_d idx[d] * s[d] over dims [from, rank) are
/// q * stride for q the flat index over those dims; sets stride (in matrices).
bool linearOffsets(const std::vector<int64_t>& s, const std::vector<int64_t>& batch, size_t from,
                   int64_t& stride) {
  stride = -1;
  int64_t inner = 1;
  for (size_t d = batch.size(); d-- > from;) {
    if (batch[d] != 1) {
      if (stride < 0)
        stride = s[d]; // inner is 1 at the innermost dim of extent > 1
      else if (s[d] != stride * inner)
        return false;
    }
    inner *= batch[d];
  }
  if (stride < 0)
    stride = 0;
  return true;
}

template <typename T>
bool matmulImpl(const TensorView& av, const TensorView& bv, const TensorView& yv) {
  std::vector<int64_t> as = av.shape, bs = bv.shape;
  if (as.empty() || bs.empty())
    return LWRT_REJECT("matmul: operands must have rank 1 or more");
  bool vecA = as.size() == 1, vecB = bs.size() == 1;
  if (vecA)
    as.insert(as.begin(), 1);
  if (vecB)
    bs.push_back(1);
  int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  if (bs[bs.size() - 2] != K)
    return LWRT_REJECT("matmul: the inner dimensions of a and b differ");
  // Broadcast batch dims, and each operand's batch strides (0 where broadcast).
  size_t ra = as.size() - 2, rb = bs.size() - 2, rank = std::max(ra, rb);
  std::vector<int64_t> batch(rank), sa(rank, 0), sb(rank, 0);
  int64_t acca = 1, accb = 1;
  for (size_t i = rank; i-- > 0;) {
    int64_t da = i < rank - ra ? 1 : as[i - (rank - ra)];
    int64_t db = i < rank - rb ? 1 : bs[i - (rank - rb)];
    if (da != db && da != 1 && db != 1)
      return LWRT_REJECT("matmul: the batch dimensions do not broadcast");
    batch[i] = da == 1 ? db : da;
    sa[i] = da == 1 ? 0 : acca;
    sb[i] = db == 1 ? 0 : accb;
    acca *= da;
    accb *= db;
  }
  std::vector<int64_t> want = batch;
  if (!vecA)
    want.push_back(M);
  if (!vecB)
    want.push_back(N);
  if (yv.shape != want)
    return LWRT_REJECT("matmul: y's shape is not the broadcast product's");
  int64_t nb = 1;
  for (int64_t d : batch)
    nb *= d;
  if (nb == 0 || M == 0 || N == 0)
    return true;
  T* y = yv.as<T>();
  if (K == 0)
    return zeroBytes(y, yv.bytes());
  if (!fitsInt({M, N, K}))
    return LWRT_REJECT("matmul: a dimension is too large for cuBLAS (2^31)");
  const T *a = av.as<T>(), *b = bv.as<T>();
  ScaleOf<T> one = 1, zeroScale = 0;
  int m = static_cast<int>(M), n = static_cast<int>(N), k = static_cast<int>(K);
  // b shared by every batch and a's batches contiguous: one product with
  // nb * M rows.
  int64_t strideA = 0, strideB = 0;
  if (linearOffsets(sa, batch, 0, strideA) && linearOffsets(sb, batch, 0, strideB) &&
      strideB == 0 && (strideA == 1 || nb == 1) && fitsInt({nb * M})) {
    LWRT_CUBLAS(blasGemm(av.dtype, CUBLAS_OP_N, CUBLAS_OP_N, n, static_cast<int>(nb * M), k, &one,
                         b, n, a, k, &zeroScale, y, n));
    return true;
  }
  // Otherwise strided batches over the innermost batch dims whose offsets
  // are regular, looping over the outer ones.
  size_t from = 0;
  while (!(linearOffsets(sa, batch, from, strideA) && linearOffsets(sb, batch, from, strideB)))
    ++from; // from == rank always works
  int64_t inner = 1;
  for (size_t d = from; d < rank; ++d)
    inner *= batch[d];
  if (!fitsInt({inner}))
    return LWRT_REJECT("matmul: too many batches for one cuBLAS call (2^31)");
  std::vector<int64_t> idx(from, 0);
  for (int64_t o = 0; o < nb / inner; ++o) {
    int64_t oa = 0, ob = 0;
    for (size_t d = 0; d < from; ++d) {
      oa += idx[d] * sa[d];
      ob += idx[d] * sb[d];
    }
    LWRT_CUBLAS(blasGemmBatched(av.dtype, n, m, k, &one, b + ob * K * N, n, strideB * K * N,
                                a + oa * M * K, k, strideA * M * K, &zeroScale,
                                y + o * inner * M * N, n, M * N, static_cast<int>(inner)));
    for (size_t d = from; d-- > 0;) {
      if (++idx[d] < batch[d])
        break;
      idx[d] = 0;
    }
  }
  return true;
}

//===--- Pooling ----------------------------------------------------------===//

/// Checks x and y as NCHW with the same N and C, and the window attributes.
bool poolShapes(const TensorView& x, const TensorView& y, const int64_t* kernel,
                const int64_t* strides, const int64_t* pads, const int64_t* dil) {
  if (x.rank() != 4 || y.rank() != 4 || x.shape[0] != y.shape[0] || x.shape[1] != y.shape[1])
    return false;
  for (int i = 0; i < 2; ++i)
    if (kernel[i] < 1 || strides[i] < 1 || (dil && dil[i] < 1) || pads[i] < 0 || pads[i + 2] < 0)
      return false;
  return true;
}

/// The geometry of a pooling: `planes` planes of H x W in, OH x OW out;
/// everything but the plane count fits an int.
struct PoolGeom {
  size_t planes;
  int H, W, OH, OW;
  int k[2], s[2], d[2], pads[4];
};

/// False (with the context's error) when a plane or an attribute does not
/// fit 32-bit indexing.
bool poolGeom(const TensorView& x, const TensorView& y, const int64_t* kernel,
              const int64_t* strides, const int64_t* pads, const int64_t* dil, PoolGeom& g) {
  int64_t H = x.shape[2], W = x.shape[3], OH = y.shape[2], OW = y.shape[3];
  bool fits = fitsInt({H, W, OH, OW, H * W, OH * OW, kernel[0], kernel[1], strides[0], strides[1],
                       pads[0], pads[1], pads[2], pads[3]}) &&
              (!dil || fitsInt({dil[0], dil[1]}));
  if (!fits)
    return LWRT_REJECT("pooling: a plane over 2^31 elements, or an attribute over 2^31");
  g.planes = static_cast<size_t>(x.shape[0] * x.shape[1]);
  g.H = static_cast<int>(H);
  g.W = static_cast<int>(W);
  g.OH = static_cast<int>(OH);
  g.OW = static_cast<int>(OW);
  for (int i = 0; i < 2; ++i) {
    g.k[i] = static_cast<int>(kernel[i]);
    g.s[i] = static_cast<int>(strides[i]);
    g.d[i] = dil ? static_cast<int>(dil[i]) : 1;
  }
  for (int i = 0; i < 4; ++i)
    g.pads[i] = static_cast<int>(pads[i]);
  return true;
}

/// Loops over the planes of a planeGrid and the `size` elements of each:
/// `plane` (size_t) and `q` (unsigned, within the plane).
#define LWRT_FOR_PLANES(plane, q, g, size)                                                         \
  for (size_t plane = blockIdx.y; plane < (g).planes; plane += gridDim.y)                          \
    for (unsigned q = blockIdx.x * blockDim.x + threadIdx.x; q < (size);                           \
         q += gridDim.x * blockDim.x)

/// y = the max of each window's taps, -inf where it has none. `acc < v`
/// keeps the CPU's std::max, which skips NaNs.
template <typename T>
__global__ void maxPoolForward(const StoreOf<T>* x, StoreOf<T>* y, PoolGeom g) {
  using V = typename Elem<T>::Value;
  const unsigned out = static_cast<unsigned>(g.OH * g.OW), in = static_cast<unsigned>(g.H * g.W);
  LWRT_FOR_PLANES(plane, q, g, out) {
    const int oh = static_cast<int>(q / static_cast<unsigned>(g.OW)),
              ow = static_cast<int>(q) - oh * g.OW;
    const StoreOf<T>* xp = x + plane * in;
    V acc = negInf<V>();
    for (int kh = 0; kh < g.k[0]; ++kh) {
      int ih = oh * g.s[0] - g.pads[0] + kh * g.d[0];
      if (ih < 0 || ih >= g.H)
        continue;
      for (int kw = 0; kw < g.k[1]; ++kw) {
        int iw = ow * g.s[1] - g.pads[1] + kw * g.d[1];
        if (iw >= 0 && iw < g.W) {
          V v = Elem<T>::load(xp[ih * g.W + iw]);
          if (acc < v)
            acc = v;
        }
      }
    }
    y[plane * out + q] = Elem<T>::store(acc);
  }
}

/// arg[yi] = the in-plane index of the first maximum of window yi (taps in
/// row-major order), -1 for an empty window.
template <typename T> __global__ void maxPoolArgmax(const StoreOf<T>* x, int* arg, PoolGeom g) {
  using V = typename Elem<T>::Value;
  const unsigned out = static_cast<unsigned>(g.OH * g.OW), in = static_cast<unsigned>(g.H * g.W);
  LWRT_FOR_PLANES(plane, q, g, out) {
    const int oh = static_cast<int>(q / static_cast<unsigned>(g.OW)),
              ow = static_cast<int>(q) - oh * g.OW;
    const StoreOf<T>* xp = x + plane * in;
    int best = -1;
    V bestV = V(0);
    for (int kh = 0; kh < g.k[0]; ++kh) {
      int ih = oh * g.s[0] - g.pads[0] + kh * g.d[0];
      if (ih < 0 || ih >= g.H)
        continue;
      for (int kw = 0; kw < g.k[1]; ++kw) {
        int iw = ow * g.s[1] - g.pads[1] + kw * g.d[1];
        if (iw < 0 || iw >= g.W)
          continue;
        V v = Elem<T>::load(xp[ih * g.W + iw]);
        if (best < 0 || v > bestV) {
          best = ih * g.W + iw;
          bestV = v;
        }
      }
    }
    arg[plane * out + q] = best;
  }
}

/// a / b rounded down, for b > 0.
__device__ __forceinline__ int floorDiv(int a, int b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

/// dx[xi] = the sum of dy over the windows whose first maximum is xi, added
/// in increasing window order as the CPU scatters them.
template <typename T>
__global__ void maxPoolGather(const int* arg, const StoreOf<T>* dy, StoreOf<T>* dx, PoolGeom g) {
  using V = typename Elem<T>::Value;
  const unsigned out = static_cast<unsigned>(g.OH * g.OW), in = static_cast<unsigned>(g.H * g.W);
  LWRT_FOR_PLANES(plane, q, g, in) {
    const int ih = static_cast<int>(q / static_cast<unsigned>(g.W)),
              iw = static_cast<int>(q) - ih * g.W;
    const int self = static_cast<int>(q);
    const int* ap = arg + plane * out;
    const StoreOf<T>* dp = dy + plane * out;
    V acc = V(0);
    if (g.d[0] == 1 && g.d[1] == 1) {
      // Undilated: the windows holding (ih, iw) are a rectangle of rows
      // [oh0, oh1] and columns [ow0, ow1], visited in increasing window
      // order with four divisions in all rather than two per tap.
      const int oh0 = max(floorDiv(ih + g.pads[0] - g.k[0], g.s[0]) + 1, 0),
                oh1 = min(floorDiv(ih + g.pads[0], g.s[0]), g.OH - 1),
                ow0 = max(floorDiv(iw + g.pads[1] - g.k[1], g.s[1]) + 1, 0),
                ow1 = min(floorDiv(iw + g.pads[1], g.s[1]), g.OW - 1);
      for (int oh = oh0; oh <= oh1; ++oh)
        for (int ow = ow0; ow <= ow1; ++ow) {
          int yi = oh * g.OW + ow;
          if (ap[yi] == self)
            acc += Elem<T>::load(dp[yi]);
        }
      dx[plane * in + q] = Elem<T>::store(acc);
      continue;
    }
    // Tap kh of window oh reads row oh*s - pad + kh*d: decreasing kh visits
    // increasing oh.
    for (int kh = g.k[0] - 1; kh >= 0; --kh) {
      int t = ih + g.pads[0] - kh * g.d[0];
      if (t < 0 || t % g.s[0] != 0 || t / g.s[0] >= g.OH)
        continue;
      int oh = t / g.s[0];
      for (int kw = g.k[1] - 1; kw >= 0; --kw) {
        int u = iw + g.pads[1] - kw * g.d[1];
        if (u < 0 || u % g.s[1] != 0 || u / g.s[1] >= g.OW)
          continue;
        int yi = oh * g.OW + u / g.s[1];
        if (ap[yi] == self)
          acc += Elem<T>::load(dp[yi]);
      }
    }
    dx[plane * in + q] = Elem<T>::store(acc);
  }
}

/// The CPU's avgWindow: input rows [h0, h1), columns [w0, w1), and the divisor.
struct AvgWindow {
  int h0, h1, w0, w1, count;
};
__device__ AvgWindow avgWindow(const PoolGeom& g, bool includePad, int oh, int ow) {
  AvgWindow w;
  w.h0 = oh * g.s[0] - g.pads[0];
  w.w0 = ow * g.s[1] - g.pads[1];
  w.h1 = min(w.h0 + g.k[0], g.H + g.pads[2]);
  w.w1 = min(w.w0 + g.k[1], g.W + g.pads[3]);
  int padded = (w.h1 - w.h0) * (w.w1 - w.w0);
  w.h0 = max(w.h0, 0);
  w.w0 = max(w.w0, 0);
  w.h1 = min(w.h1, g.H);
  w.w1 = min(w.w1, g.W);
  w.count = includePad ? padded : (w.h1 - w.h0) * (w.w1 - w.w0);
  return w;
}

template <typename T>
__global__ void avgPoolForward(const StoreOf<T>* x, StoreOf<T>* y, PoolGeom g, bool includePad) {
  using V = typename Elem<T>::Value;
  const unsigned out = static_cast<unsigned>(g.OH * g.OW), in = static_cast<unsigned>(g.H * g.W);
  LWRT_FOR_PLANES(plane, q, g, out) {
    const int oh = static_cast<int>(q / static_cast<unsigned>(g.OW)),
              ow = static_cast<int>(q) - oh * g.OW;
    AvgWindow win = avgWindow(g, includePad, oh, ow);
    const StoreOf<T>* xp = x + plane * in;
    V sum = V(0);
    for (int ih = win.h0; ih < win.h1; ++ih)
      for (int iw = win.w0; iw < win.w1; ++iw)
        sum += Elem<T>::load(xp[ih * g.W + iw]);
    y[plane * out + q] = Elem<T>::store(win.count > 0 ? sum / static_cast<V>(win.count) : V(0));
  }
}

/// dx[xi] = the sum of dy / count over the windows holding xi, in
/// increasing window order as the CPU scatters them.
template <typename T>
__global__ void avgPoolGather(const StoreOf<T>* dy, StoreOf<T>* dx, PoolGeom g, bool includePad) {
  using V = typename Elem<T>::Value;
  const unsigned out = static_cast<unsigned>(g.OH * g.OW), in = static_cast<unsigned>(g.H * g.W);
  LWRT_FOR_PLANES(plane, q, g, in) {
    const int ih = static_cast<int>(q / static_cast<unsigned>(g.W)),
              iw = static_cast<int>(q) - ih * g.W;
    // Window oh starts at oh*s - pad and spans k rows: it can hold ih for
    // oh in [floor((ih + pad - k) / s) + 1, floor((ih + pad) / s)].
    int oh0 = max(floorDiv(ih + g.pads[0] - g.k[0], g.s[0]) + 1, 0);
    int oh1 = min(floorDiv(ih + g.pads[0], g.s[0]), g.OH - 1);
    int ow0 = max(floorDiv(iw + g.pads[1] - g.k[1], g.s[1]) + 1, 0);
    int ow1 = min(floorDiv(iw + g.pads[1], g.s[1]), g.OW - 1);
    const StoreOf<T>* dp = dy + plane * out;
    V acc = V(0);
    for (int oh = oh0; oh <= oh1; ++oh)
      for (int ow = ow0; ow <= ow1; ++ow) {
        AvgWindow win = avgWindow(g, includePad, oh, ow);
        if (win.count <= 0 || ih < win.h0 || ih >= win.h1 || iw < win.w0 || iw >= win.w1)
          continue;
        acc += Elem<T>::load(dp[oh * g.OW + ow]) / static_cast<V>(win.count);
      }
    dx[plane * in + q] = Elem<T>::store(acc);
  }
}

/// One block per (n, c) plane: y = the plane's mean, summed in double.
template <typename T> __global__ void planeMean(const T* x, T* y, int64_t spatial) {
  __shared__ double shared[kReduceThreads];
  const T* plane = x + static_cast<int64_t>(blockIdx.x) * spatial;
  double sum = 0;
  for (int64_t s = threadIdx.x; s < spatial; s += kReduceThreads)
    sum += static_cast<double>(plane[s]);
  sum = blockSum(sum, shared);
  if (threadIdx.x == 0)
    y[blockIdx.x] = static_cast<T>(sum / static_cast<double>(spatial));
}

/// Launches a pooling kernel over the planes of `g`, `size` elements each.
template <typename Kernel, typename... Args>
bool launchPlanes(Kernel kernel, const PoolGeom& g, int64_t size, Args... args) {
  PlaneGrid pg = planeGrid(static_cast<int64_t>(g.planes), size);
  kernel<<<pg.grid, pg.block, 0, context().stream>>>(args...);
  LWRT_CUDA(cudaGetLastError());
  return true;
}

//===--- Pooling on cuDNN -------------------------------------------------===//

/// One call's cuDNN pooling descriptors (host objects, made per call; a
/// replayed CUDA graph makes none).
struct CudnnPool {
  cudnnPoolingDescriptor_t pool = nullptr;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  CudnnPool() = default;
  CudnnPool(const CudnnPool&) = delete;
  CudnnPool& operator=(const CudnnPool&) = delete;
  ~CudnnPool() {
    if (pool)
      cudnnDestroyPoolingDescriptor(pool);
    if (x)
      cudnnDestroyTensorDescriptor(x);
    if (y)
      cudnnDestroyTensorDescriptor(y);
  }
};

/// Whether cuDNN's pooling computes what the op asks (see the top).
bool cudnnPoolFits(const TensorView& x, const TensorView& y, const PoolGeom& g) {
  if (!context().cudnnOps || !fitsInt({x.numel(), y.numel(), x.shape[0], x.shape[1]}))
    return false;
  for (int i = 0; i < 2; ++i) {
    int in = i == 0 ? g.H : g.W, out = i == 0 ? g.OH : g.OW;
    if (g.d[i] != 1 || g.pads[i] != g.pads[i + 2] || g.pads[i] >= g.k[i] ||
        in + 2 * g.pads[i] < g.k[i] || out != (in + 2 * g.pads[i] - g.k[i]) / g.s[i] + 1)
      return false;
  }
  return true;
}

/// Fills `d` for pooling x into y with `mode`; false with the context's
/// error when cuDNN refuses (or computes another output size).
bool cudnnPool(const TensorView& x, const TensorView& y, const PoolGeom& g, cudnnPoolingMode_t mode,
               CudnnPool& d) {
  cudnnDataType_t dt = x.dtype == DType::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  auto i = [](int64_t v) { return static_cast<int>(v); };
  LWRT_CUDNN(cudnnCreateTensorDescriptor(&d.x));
  LWRT_CUDNN(cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NCHW, dt, i(x.shape[0]), i(x.shape[1]),
                                        g.H, g.W));
  LWRT_CUDNN(cudnnCreateTensorDescriptor(&d.y));
  LWRT_CUDNN(cudnnSetTensor4dDescriptor(d.y, CUDNN_TENSOR_NCHW, dt, i(y.shape[0]), i(y.shape[1]),
                                        g.OH, g.OW));
  LWRT_CUDNN(cudnnCreatePoolingDescriptor(&d.pool));
  LWRT_CUDNN(cudnnSetPooling2dDescriptor(d.pool, mode, CUDNN_NOT_PROPAGATE_NAN, g.k[0], g.k[1],
                                         g.pads[0], g.pads[1], g.s[0], g.s[1]));
  int n = 0, c = 0, h = 0, w = 0;
  LWRT_CUDNN(cudnnGetPooling2dForwardOutputDim(d.pool, d.x, &n, &c, &h, &w));
  if (n != y.shape[0] || c != y.shape[1] || h != g.OH || w != g.OW)
    return LWRT_REJECT("pooling: cuDNN computes another output size than the op's");
  return true;
}

//===--- Pooling entry points ---------------------------------------------===//

template <typename T>
bool maxPool2dImpl(const TensorView& xv, const TensorView& yv, const MaxPool2dParams& p) {
  if (!poolShapes(xv, yv, p.kernel, p.strides, p.pads, p.dilations))
    return LWRT_REJECT("max_pool2d: the shapes of x and y or the attributes do not fit");
  PoolGeom g;
  if (yv.numel() == 0)
    return true;
  if (!poolGeom(xv, yv, p.kernel, p.strides, p.pads, p.dilations, g))
    return false;
  if constexpr (std::is_floating_point_v<T>)
    if (cudnnPoolFits(xv, yv, g)) {
      CudnnPool d;
      T one = 1, zero = 0;
      if (!cudnnPool(xv, yv, g, CUDNN_POOLING_MAX_DETERMINISTIC, d))
        return false;
      LWRT_CUDNN(
          cudnnPoolingForward(context().cudnn, d.pool, &one, d.x, xv.data, &zero, d.y, yv.data));
      return true;
    }
  return launchPlanes(maxPoolForward<T>, g, g.OH * g.OW, xv.as<StoreOf<T>>(), yv.as<StoreOf<T>>(),
                      g);
}

template <typename T>
bool maxPool2dGradImpl(const TensorView& xv, const TensorView& dyv, const TensorView& dxv,
                       const MaxPool2dParams& p) {
  if (!poolShapes(xv, dyv, p.kernel, p.strides, p.pads, p.dilations) || dxv.shape != xv.shape)
    return LWRT_REJECT("max_pool2d_grad: the shapes of x, dy and dx or the attributes do not fit");
  int64_t nx = dxv.numel(), ny = dyv.numel();
  if (nx == 0)
    return true;
  if (ny == 0)
    return zeroBytes(dxv.data, dxv.bytes());
  PoolGeom g;
  if (!poolGeom(xv, dyv, p.kernel, p.strides, p.pads, p.dilations, g))
    return false;
  // Always the own kernels, also where cuDNN would take the op: cuDNN
  // documents no rule for a window whose maximum appears twice (its
  // backward may route the gradient to another of them than the first, the
  // CPU backend's and PyTorch's rule), and it reads the forward's y, which
  // would have to be recomputed every step.
  if (!ensureWorkspace(static_cast<size_t>(ny) * sizeof(int)))
    return false;
  int* arg = static_cast<int*>(context().workspace);
  return launchPlanes(maxPoolArgmax<T>, g, g.OH * g.OW, xv.as<StoreOf<T>>(), arg, g) &&
         launchPlanes(maxPoolGather<T>, g, g.H * g.W, static_cast<const int*>(arg),
                      dyv.as<StoreOf<T>>(), dxv.as<StoreOf<T>>(), g);
}

template <typename T>
bool avgPool2dImpl(const TensorView& xv, const TensorView& yv, const AvgPool2dParams& p) {
  if (!poolShapes(xv, yv, p.kernel, p.strides, p.pads, nullptr))
    return LWRT_REJECT("avg_pool2d: the shapes of x and y or the attributes do not fit");
  if (yv.numel() == 0)
    return true;
  PoolGeom g;
  if (!poolGeom(xv, yv, p.kernel, p.strides, p.pads, nullptr, g))
    return false;
  if constexpr (std::is_floating_point_v<T>)
    if (cudnnPoolFits(xv, yv, g)) {
      CudnnPool d;
      T one = 1, zero = 0;
      if (!cudnnPool(xv, yv, g,
                     p.count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                         : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
                     d))
        return false;
      LWRT_CUDNN(
          cudnnPoolingForward(context().cudnn, d.pool, &one, d.x, xv.data, &zero, d.y, yv.data));
      return true;
    }
  return launchPlanes(avgPoolForward<T>, g, g.OH * g.OW, xv.as<StoreOf<T>>(), yv.as<StoreOf<T>>(),
                      g, p.count_include_pad != 0);
}

template <typename T>
bool avgPool2dGradImpl(const TensorView& dyv, const TensorView& dxv, const AvgPool2dParams& p) {
  if (!poolShapes(dxv, dyv, p.kernel, p.strides, p.pads, nullptr))
    return LWRT_REJECT("avg_pool2d_grad: the shapes of dy and dx or the attributes do not fit");
  if (dxv.numel() == 0)
    return true;
  if (dyv.numel() == 0)
    return zeroBytes(dxv.data, dxv.bytes());
  PoolGeom g;
  if (!poolGeom(dxv, dyv, p.kernel, p.strides, p.pads, nullptr, g))
    return false;
  return launchPlanes(avgPoolGather<T>, g, g.H * g.W, dyv.as<StoreOf<T>>(), dxv.as<StoreOf<T>>(), g,
                      p.count_include_pad != 0);
}

template <typename T> bool globalAvgPoolImpl(const TensorView& xv, const TensorView& yv) {
  bool ok = xv.rank() >= 3 && yv.rank() == xv.rank() && yv.shape[0] == xv.shape[0] &&
            yv.shape[1] == xv.shape[1];
  for (int64_t d = 2; ok && d < yv.rank(); ++d)
    ok = yv.shape[d] == 1;
  if (!ok)
    return LWRT_REJECT("global_avg_pool: y must be x's shape with 1 for every spatial dim");
  int64_t nc = xv.shape[0] * xv.shape[1], spatial = 1;
  for (int64_t d = 2; d < xv.rank(); ++d)
    spatial *= xv.shape[d];
  if (nc == 0)
    return true;
  if (nc > INT_MAX)
    return LWRT_REJECT("global_avg_pool: more than 2^31 planes");
  LWRT_LAUNCH(planeMean<T>, static_cast<unsigned>(nc), kReduceThreads, xv.as<T>(), yv.as<T>(),
              spatial);
  return true;
}

} // namespace

//===--- Entry points -----------------------------------------------------===//

bool gemm(const TensorView& a, const TensorView& b, const TensorView* c, const TensorView& y,
          const GemmParams& p) {
  if (c && !sameType(a.dtype, {c}))
    return LWRT_REJECT("gemm: c must have a's element type and hold data");
  if (c && is16Bit(a.dtype))
    return LWRT_REJECT("gemm: a bf16 or fp16 gemm takes no c (mixed precision adds the bias in "
                       "float32)");
  return floatOr16Op("gemm", {&a, &b, &y},
                     [&](auto t) { return gemmImpl<decltype(t)>(a, b, c, y, p); });
}

bool matmul(const TensorView& a, const TensorView& b, const TensorView& y) {
  return floatOr16Op("matmul", {&a, &b, &y},
                     [&](auto t) { return matmulImpl<decltype(t)>(a, b, y); });
}

bool maxPool2d(const TensorView& x, const TensorView& y, const MaxPool2dParams& p) {
  return activationOp("max_pool2d", {&x, &y}, {},
                      [&](auto e) { return maxPool2dImpl<decltype(e)>(x, y, p); });
}

bool maxPool2dGrad(const TensorView& x, const TensorView& dy, const TensorView& dx,
                   const MaxPool2dParams& p) {
  return activationOp("max_pool2d_grad", {&x, &dy, &dx}, {},
                      [&](auto e) { return maxPool2dGradImpl<decltype(e)>(x, dy, dx, p); });
}

bool avgPool2d(const TensorView& x, const TensorView& y, const AvgPool2dParams& p) {
  return activationOp("avg_pool2d", {&x, &y}, {},
                      [&](auto e) { return avgPool2dImpl<decltype(e)>(x, y, p); });
}

bool avgPool2dGrad(const TensorView& dy, const TensorView& dx, const AvgPool2dParams& p) {
  return activationOp("avg_pool2d_grad", {&dy, &dx}, {},
                      [&](auto e) { return avgPool2dGradImpl<decltype(e)>(dy, dx, p); });
}

bool globalAvgPool(const TensorView& x, const TensorView& y) {
  return floatOp("global_avg_pool", {&x, &y},
                 [&](auto t) { return globalAvgPoolImpl<decltype(t)>(x, y); });
}

} // namespace lwrt::cuda
