// EmuCublasTest.cpp - the emulated cuBLAS (emu/Cublas.cpp) against a direct computation of each
// GEMM
//
// Every GEMM lwcc calls, with each transpose, leading dimensions larger than
// the rows, strided batches, each data type, alpha and beta (beta = 0 over a
// NaN C), TF32 rounding where cuBLAS applies it and nowhere else, and each
// refusal once. Values are small integers or dyadic fractions wherever a
// result is compared bit for bit, so that the direct computation is exact.
#include "EmuTestUtil.h"
#include "lwrt/bf16.h"
#include "lwrt/f16.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

using lwemu_test::toDevice;
using lwemu_test::toHost;

/// Small integers in [-4, 4]: every product and sum below is exact in float32.
std::vector<float> smallInts(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-4, 4);
  std::vector<float> v(n);
  for (float& x : v)
    x = static_cast<float>(d(rng));
  return v;
}

/// Element (i, j) of op(X), X column-major with leading dimension ld.
template <typename T> double opAt(const std::vector<T>& x, bool trans, int ld, int i, int j) {
  return static_cast<double>(trans ? x[static_cast<size_t>(j + i * ld)]
                                   : x[static_cast<size_t>(i + j * ld)]);
}

/// alpha op(A) op(B) + beta C in float64, column-major, into a copy of C.
template <typename T>
std::vector<double> reference(bool ta, bool tb, int m, int n, int k, double alpha,
                              const std::vector<T>& a, int lda, const std::vector<T>& b, int ldb,
                              double beta, const std::vector<T>& c, int ldc) {
  std::vector<double> out(c.begin(), c.end());
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double s = 0;
      for (int p = 0; p < k; ++p)
        s += opAt(a, ta, lda, i, p) * opAt(b, tb, ldb, p, j);
      double prior =
          beta == 0 ? 0 : beta * static_cast<double>(c[static_cast<size_t>(i + j * ldc)]);
      out[static_cast<size_t>(i + j * ldc)] = alpha * s + prior;
    }
  return out;
}

struct Blas {
  cublasHandle_t h = nullptr;
  cudaStream_t s = nullptr;
  Blas() {
    EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
    // A blocking stream: the tests' cudaMemcpy calls order with its work.
    EXPECT_EQ(cudaStreamCreate(&s), cudaSuccess);
    EXPECT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasSetStream(h, s), CUBLAS_STATUS_SUCCESS);
  }
  ~Blas() {
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  }
  void sync() { EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess); }
};

const cublasOperation_t kOps[] = {CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_C};

} // namespace

/// The device memory in use on device 0, as cudaMemGetInfo reports it.
static size_t usedOnDevice0() {
  size_t free = 0, total = 0;
  EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  return total - free;
}

// A handle holds device memory, as cuBLAS 13.1's did on an H100: 2 MiB and
// the default workspace pool, 64 MiB unless CUBLAS_WORKSPACE_CONFIG sizes
// it (read when the handle is made), until cublasDestroy.
TEST(EmuCublas, HandleHoldsDeviceMemoryAsCublasDoes) {
  constexpr size_t kMiB = size_t{1} << 20;
  const char* before = std::getenv("CUBLAS_WORKSPACE_CONFIG");
  const std::string saved = before ? before : "";
  const size_t base = usedOnDevice0();
  for (const auto& [config, held] :
       std::vector<std::pair<const char*, size_t>>{{nullptr, 66 * kMiB},
                                                   {":0:0", 2 * kMiB},
                                                   {":4096:8", 34 * kMiB},
                                                   {":16:8:4096:2", 2 * kMiB + 8320 * 1024},
                                                   {"junk", 66 * kMiB}}) {
    if (config)
      setenv("CUBLAS_WORKSPACE_CONFIG", config, 1);
    else
      unsetenv("CUBLAS_WORKSPACE_CONFIG");
    cublasHandle_t h = nullptr;
    ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(usedOnDevice0() - base, held) << (config ? config : "unset");
    EXPECT_EQ(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(usedOnDevice0(), base);
  }
  if (before)
    setenv("CUBLAS_WORKSPACE_CONFIG", saved.c_str(), 1);
  else
    unsetenv("CUBLAS_WORKSPACE_CONFIG");
}

TEST(EmuCublas, HandleSettingsAndProperties) {
  int v = -1;
  EXPECT_EQ(cublasGetProperty(MAJOR_VERSION, &v), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(v, CUBLAS_VER_MAJOR);
  EXPECT_EQ(cublasGetProperty(MINOR_VERSION, &v), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(v, CUBLAS_VER_MINOR);
  EXPECT_EQ(cublasGetProperty(PATCH_LEVEL, &v), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(v, CUBLAS_VER_PATCH);
  EXPECT_EQ(cublasGetProperty(MAJOR_VERSION, nullptr), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_STREQ(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE),
               "an invalid numeric value was used as an argument");
  EXPECT_EQ(cublasCreate(nullptr), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasSetStream(nullptr, nullptr), CUBLAS_STATUS_NOT_INITIALIZED);

  Blas b;
  EXPECT_EQ(cublasSetMathMode(
                b.h, static_cast<cublasMath_t>(CUBLAS_TF32_TENSOR_OP_MATH |
                                               CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasSetMathMode(b.h, static_cast<cublasMath_t>(7)), CUBLAS_STATUS_INVALID_VALUE);
  void* ws = nullptr;
  ASSERT_EQ(cudaMalloc(&ws, 1 << 16), cudaSuccess);
  EXPECT_EQ(cublasSetWorkspace(b.h, ws, 1 << 16), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasSetWorkspace(b.h, static_cast<char*>(ws) + 16, 1024),
            CUBLAS_STATUS_INVALID_VALUE); // not aligned to 256 bytes
  b.sync();
  EXPECT_EQ(cublasSetStream(b.h, b.s), CUBLAS_STATUS_SUCCESS); // back to cuBLAS's own workspace
  EXPECT_EQ(cudaFree(ws), cudaSuccess);
  // The freed workspace is no longer the handle's: a GEMM runs.
  std::vector<float> one{2};
  float *a = toDevice(one), *c = toDevice(one);
  float alpha = 1, beta = 0;
  EXPECT_EQ(cublasSgemm(b.h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &alpha, a, 1, a, 1, &beta, c, 1),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(toHost(c, 1)[0], 4.0f);
  cudaFree(a);
  cudaFree(c);
}

TEST(EmuCublas, SgemmEveryTransposeWithLargeLeadingDimensions) {
  Blas b;
  const int m = 5, n = 4, k = 3;
  for (cublasOperation_t ta : kOps)
    for (cublasOperation_t tb : kOps) {
      bool tA = ta != CUBLAS_OP_N, tB = tb != CUBLAS_OP_N;
      int lda = (tA ? k : m) + 2, ldb = (tB ? n : k) + 3, ldc = m + 1;
      auto ha = smallInts(static_cast<size_t>(lda * (tA ? m : k)), 1);
      auto hb = smallInts(static_cast<size_t>(ldb * (tB ? k : n)), 2);
      auto hc = smallInts(static_cast<size_t>(ldc * n), 3);
      float *a = toDevice(ha), *bb = toDevice(hb), *c = toDevice(hc);
      float alpha = 1.5f, beta = -0.5f;
      ASSERT_EQ(cublasSgemm(b.h, ta, tb, m, n, k, &alpha, a, lda, bb, ldb, &beta, c, ldc),
                CUBLAS_STATUS_SUCCESS);
      auto want = reference(tA, tB, m, n, k, alpha, ha, lda, hb, ldb, beta, hc, ldc);
      auto got = toHost(c, hc.size());
      for (size_t i = 0; i < got.size(); ++i) // the rows past m keep their values
        EXPECT_EQ(got[i], static_cast<float>(want[i]))
            << "ta " << ta << " tb " << tb << " at " << i;
      cudaFree(a);
      cudaFree(bb);
      cudaFree(c);
    }
}

TEST(EmuCublas, DgemmAgainstFloat64) {
  Blas b;
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> d(-1, 1);
  const int m = 7, n = 6, k = 9, lda = 9, ldb = 11, ldc = 8; // a: k x m transposed, b: k x n
  std::vector<double> ha(static_cast<size_t>(lda * m)), hb(static_cast<size_t>(ldb * n)),
      hc(static_cast<size_t>(ldc * n));
  for (auto* v : {&ha, &hb, &hc})
    for (double& x : *v)
      x = d(rng);
  double *a = toDevice(ha), *bb = toDevice(hb), *c = toDevice(hc);
  double alpha = 0.75, beta = 2;
  ASSERT_EQ(
      cublasDgemm(b.h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a, lda, bb, ldb, &beta, c, ldc),
      CUBLAS_STATUS_SUCCESS);
  auto want = reference(true, false, m, n, k, alpha, ha, lda, hb, ldb, beta, hc, ldc);
  auto got = toHost(c, hc.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-13);
  cudaFree(a);
  cudaFree(bb);
  cudaFree(c);
}

TEST(EmuCublas, BetaZeroDoesNotReadC) {
  Blas b;
  const int m = 3, n = 2, k = 2;
  auto ha = smallInts(m * k, 4), hb = smallInts(k * n, 5);
  std::vector<float> hc(m * n, std::numeric_limits<float>::quiet_NaN());
  float *a = toDevice(ha), *bb = toDevice(hb), *c = toDevice(hc);
  float alpha = 2, beta = 0;
  ASSERT_EQ(cublasSgemm(b.h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a, m, bb, k, &beta, c, m),
            CUBLAS_STATUS_SUCCESS);
  auto want = reference(false, false, m, n, k, alpha, ha, m, hb, k, 0.0, hc, m);
  auto got = toHost(c, hc.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(got[i], static_cast<float>(want[i]));
  // The same through GemmEx with bf16 data.
  std::vector<uint16_t> h16a, h16b, h16c(m * n, 0x7fc0); // bf16 NaN
  for (float x : ha)
    h16a.push_back(lwrt::floatToBf16(x));
  for (float x : hb)
    h16b.push_back(lwrt::floatToBf16(x));
  uint16_t *a16 = toDevice(h16a), *b16 = toDevice(h16b), *c16 = toDevice(h16c);
  ASSERT_EQ(cublasGemmEx(b.h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a16, CUDA_R_16BF, m, b16,
                         CUDA_R_16BF, k, &beta, c16, CUDA_R_16BF, m, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  auto got16 = toHost(c16, h16c.size());
  for (size_t i = 0; i < got16.size(); ++i)
    EXPECT_EQ(lwrt::bf16ToFloat(got16[i]), static_cast<float>(want[i]));
  for (void* p : {(void*)a, (void*)bb, (void*)c, (void*)a16, (void*)b16, (void*)c16})
    cudaFree(p);
}

TEST(EmuCublas, GemmEx16BitTypesRoundOnceAtTheStore) {
  Blas b;
  // k = 2: 1 * 1 + 1 * (2^-8 + 2^-9) = 1 + 3 * 2^-9, exact in float32; bf16
  // (7 mantissa bits) rounds it up to 1 + 2^-7, fp16 keeps it.
  const float tiny = 1.0f / 256 + 1.0f / 512;
  std::vector<float> fa{1, 1}, fb{1, tiny};
  float exact = 1 + tiny;
  struct Case {
    cudaDataType t;
    uint16_t (*to)(float);
    float (*from)(uint16_t);
  } cases[] = {{CUDA_R_16BF, lwrt::floatToBf16, lwrt::bf16ToFloat},
               {CUDA_R_16F, lwrt::floatToF16, lwrt::f16ToFloat}};
  for (const Case& cs : cases) {
    std::vector<uint16_t> ha{cs.to(fa[0]), cs.to(fa[1])}, hb{cs.to(fb[0]), cs.to(fb[1])};
    ASSERT_EQ(cs.from(hb[1]), tiny); // exact in both types
    uint16_t *a = toDevice(ha), *bb = toDevice(hb);
    uint16_t* c16 = toDevice(std::vector<uint16_t>{0});
    float* c32 = toDevice(std::vector<float>{0});
    float alpha = 1, beta = 0;
    // a as a 1 x 2 row (lda 1), b as a 2 x 1 column.
    ASSERT_EQ(cublasGemmEx(b.h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 2, &alpha, a, cs.t, 1, bb, cs.t, 2,
                           &beta, c16, cs.t, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasGemmEx(b.h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 2, &alpha, a, cs.t, 1, bb, cs.t, 2,
                           &beta, c32, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(toHost(c16, 1)[0], cs.to(exact)) << cs.t;
    EXPECT_EQ(toHost(c32, 1)[0], exact) << cs.t;
    for (void* p : {(void*)a, (void*)bb, (void*)c16, (void*)c32})
      cudaFree(p);
  }
  EXPECT_NE(lwrt::roundToBf16(exact), exact);
  EXPECT_EQ(lwrt::roundToF16(exact), exact);
}

TEST(EmuCublas, StridedBatchedEachType) {
  Blas b;
  const int m = 3, n = 2, k = 4, batch = 3;
  const long long sa = 0, sb = k * n + 5, sc = m * n + 2; // A broadcast to every batch
  auto ha = smallInts(m * k, 8);
  auto hb = smallInts(static_cast<size_t>(sb * batch), 9);
  auto hc = smallInts(static_cast<size_t>(sc * batch), 10);
  auto check = [&](auto got, auto beta) {
    for (int q = 0; q < batch; ++q) {
      std::vector<float> bq(hb.begin() + q * sb, hb.begin() + q * sb + k * n);
      std::vector<float> cq(hc.begin() + q * sc, hc.begin() + q * sc + m * n);
      auto want = reference(false, false, m, n, k, 1.0, ha, m, bq, k, beta, cq, m);
      for (int i = 0; i < m * n; ++i)
        EXPECT_EQ(static_cast<double>(got(q * sc + i)), want[static_cast<size_t>(i)])
            << "batch " << q << " at " << i;
    }
  };
  // float32 and float64: T's gemm on copies of the operands.
  auto typed = [&](auto zero, auto gemm) {
    using T = decltype(zero);
    std::vector<T> ta(ha.begin(), ha.end()), tb(hb.begin(), hb.end()), tc(hc.begin(), hc.end());
    T *a = toDevice(ta), *bb = toDevice(tb), *c = toDevice(tc);
    T alpha = 1, beta = T(0.5);
    ASSERT_EQ(gemm(b.h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a, m, sa, bb, k, sb, &beta, c, m,
                   sc, batch),
              CUBLAS_STATUS_SUCCESS);
    auto got = toHost(c, tc.size());
    check([&](long long i) { return got[static_cast<size_t>(i)]; }, 0.5);
    for (void* p : {(void*)a, (void*)bb, (void*)c})
      cudaFree(p);
  };
  typed(0.0f, cublasSgemmStridedBatched);
  typed(0.0, cublasDgemmStridedBatched);
  for (cudaDataType t : {CUDA_R_16BF, CUDA_R_16F}) { // 16-bit, exact for small integers
    auto to = [&](const std::vector<float>& v) {
      std::vector<uint16_t> out;
      for (float x : v)
        out.push_back(t == CUDA_R_16BF ? lwrt::floatToBf16(x) : lwrt::floatToF16(x));
      return out;
    };
    uint16_t *a = toDevice(to(ha)), *bb = toDevice(to(hb)), *c = toDevice(to(hc));
    float alpha = 1, beta = 0.5f;
    ASSERT_EQ(cublasGemmStridedBatchedEx(b.h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a, t, m,
                                         sa, bb, t, k, sb, &beta, c, t, m, sc, batch,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    auto got = toHost(c, hc.size());
    check(
        [&](long long i) {
          uint16_t h = got[static_cast<size_t>(i)];
          return t == CUDA_R_16BF ? lwrt::bf16ToFloat(h) : lwrt::f16ToFloat(h);
        },
        0.5);
    for (void* p : {(void*)a, (void*)bb, (void*)c})
      cudaFree(p);
  }
}

TEST(EmuCublas, Tf32RoundingWhereCublasAppliesIt) {
  Blas b;
  // 1 + 2^-12 is below TF32's half ulp at 1 (2^-11): TF32 makes it 1. 1 + 2^-11
  // is a tie: to nearest, away from zero, it becomes 1 + 2^-10.
  const float below = 1 + 1.0f / 4096, tie = 1 + 1.0f / 2048;
  float* a = toDevice(std::vector<float>{below, tie});
  float* one = toDevice(std::vector<float>{1});
  float* c = toDevice(std::vector<float>{0, 0});
  float alpha = 1, beta = 0;
  auto run = [&](cublasMath_t math, cublasComputeType_t compute, bool sgemm) {
    EXPECT_EQ(cublasSetMathMode(b.h, math), CUBLAS_STATUS_SUCCESS);
    if (sgemm)
      EXPECT_EQ(
          cublasSgemm(b.h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 1, 1, &alpha, a, 2, one, 1, &beta, c, 2),
          CUBLAS_STATUS_SUCCESS);
    else
      EXPECT_EQ(cublasGemmEx(b.h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 1, 1, &alpha, a, CUDA_R_32F, 2, one,
                             CUDA_R_32F, 1, &beta, c, CUDA_R_32F, 2, compute, CUBLAS_GEMM_DEFAULT),
                CUBLAS_STATUS_SUCCESS);
    return toHost(c, 2);
  };
  const std::vector<float> exact{below, tie}, tf32{1, 1 + 1.0f / 1024};
  EXPECT_EQ(run(CUBLAS_DEFAULT_MATH, CUBLAS_COMPUTE_32F, true), exact);
  EXPECT_EQ(run(CUBLAS_TF32_TENSOR_OP_MATH, CUBLAS_COMPUTE_32F, true), tf32);
  EXPECT_EQ(run(CUBLAS_DEFAULT_MATH, CUBLAS_COMPUTE_32F, false), exact);
  EXPECT_EQ(run(CUBLAS_TF32_TENSOR_OP_MATH, CUBLAS_COMPUTE_32F, false), tf32);
  EXPECT_EQ(run(CUBLAS_DEFAULT_MATH, CUBLAS_COMPUTE_32F_FAST_TF32, false), tf32);
  EXPECT_EQ(run(CUBLAS_TF32_TENSOR_OP_MATH, CUBLAS_COMPUTE_32F_PEDANTIC, false), exact);
  EXPECT_EQ(run(CUBLAS_PEDANTIC_MATH, CUBLAS_COMPUTE_32F, true), exact);
  // float64 never rounds to TF32.
  double* da = toDevice(std::vector<double>{below});
  double* d1 = toDevice(std::vector<double>{1});
  double* dc = toDevice(std::vector<double>{0});
  double dAlpha = 1, dBeta = 0;
  EXPECT_EQ(cublasSetMathMode(b.h, CUBLAS_TF32_TENSOR_OP_MATH), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(
      cublasDgemm(b.h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &dAlpha, da, 1, d1, 1, &dBeta, dc, 1),
      CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(toHost(dc, 1)[0], static_cast<double>(below));
  for (void* p : {(void*)a, (void*)one, (void*)c, (void*)da, (void*)d1, (void*)dc})
    cudaFree(p);
}

TEST(EmuCublas, RefusesBadArgumentsAtTheCall) {
  Blas b;
  float* x = toDevice(std::vector<float>(64, 1));
  float alpha = 1, beta = 0;
  auto sgemm = [&](cublasOperation_t ta, int m, int lda, int ldc, const float* al) {
    return cublasSgemm(b.h, ta, CUBLAS_OP_N, m, 2, 2, al, x, lda, x, 2, &beta, x, ldc);
  };
  EXPECT_EQ(sgemm(CUBLAS_OP_N, 4, 3, 4, &alpha), CUBLAS_STATUS_INVALID_VALUE); // lda < m
  EXPECT_EQ(sgemm(CUBLAS_OP_T, 4, 1, 4, &alpha), CUBLAS_STATUS_INVALID_VALUE); // lda < k
  EXPECT_EQ(sgemm(CUBLAS_OP_N, 4, 4, 3, &alpha), CUBLAS_STATUS_INVALID_VALUE); // ldc < m
  EXPECT_EQ(sgemm(CUBLAS_OP_N, -1, 4, 4, &alpha), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(sgemm(static_cast<cublasOperation_t>(3), 4, 4, 4, &alpha), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(sgemm(CUBLAS_OP_N, 4, 4, 4, nullptr), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(sgemm(CUBLAS_OP_N, 0, 1, 1, &alpha), CUBLAS_STATUS_SUCCESS); // nothing to do
  EXPECT_EQ(cublasSgemmStridedBatched(b.h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &alpha, x, 2, 4, x, 2,
                                      4, &beta, x, 2, 4, -1),
            CUBLAS_STATUS_INVALID_VALUE);
  auto ex = [&](cudaDataType at, cudaDataType bt, cudaDataType ct, cublasComputeType_t compute,
                cublasGemmAlgo_t algo) {
    return cublasGemmEx(b.h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &alpha, x, at, 2, x, bt, 2, &beta,
                        x, ct, 2, compute, algo);
  };
  EXPECT_EQ(ex(CUDA_R_16F, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(ex(CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16F, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(ex(CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_64F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(
      ex(CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
      CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(
      ex(CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, static_cast<cublasGemmAlgo_t>(50)),
      CUBLAS_STATUS_NOT_SUPPORTED);
  b.sync();
  EXPECT_EQ(toHost(x, 64), std::vector<float>(64, 1)); // nothing ran
  cudaFree(x);
}

namespace {

void gemmPastItsAllocation() {
  Blas b;
  float* x = toDevice(std::vector<float>(16, 1));
  float alpha = 1, beta = 0;
  // B is 4 x 4 with ldb 5: it spans x[0..18], past the 16 allocated.
  cublasSgemm(b.h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &alpha, x, 4, x, 5, &beta, x, 4);
}

void gemmWithFreedWorkspace() {
  Blas b;
  void* ws = nullptr;
  cudaMalloc(&ws, 4096);
  cublasSetWorkspace(b.h, ws, 4096);
  cudaFree(ws);
  float* x = toDevice(std::vector<float>(4, 1));
  float alpha = 1, beta = 0;
  cublasSgemm(b.h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &alpha, x, 2, x, 2, &beta, x, 2);
}

} // namespace

TEST(EmuCublas, OperandOutsideItsAllocationStops) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(gemmPastItsAllocation(),
               "cublasSgemm: B: 76 bytes at .* are not inside one device allocation");
}

TEST(EmuCublas, FreedWorkspaceStops) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(gemmWithFreedWorkspace(), "cublasSgemm: the workspace given to cublasSetWorkspace");
}
