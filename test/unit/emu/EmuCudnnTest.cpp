// emu/EmuCudnnTest.cpp - the emulated cuDNN against direct computations written here
//
// Every emulated cuDNN call lwcc's runtime makes, on device memory of the
// emulated CUDA runtime: the three convolution directions (groups, pads,
// strides, dilations, both modes, alpha and beta) with every algorithm
// against a plain computation, algorithms that differ in bits, the
// non-deterministic ones varying from run to run, TF32, 16-bit data rounded
// once; pooling (the tie rule), LRN, batch norm, softmax; the graph API
// offering no engine; and each refusal (a bad descriptor, too small a
// workspace, Find during a capture, a destroyed descriptor, host memory).
#include "lwrt/bf16.h"
#include "lwrt/f16.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <gtest/gtest.h>
#include <random>
#include <set>
#include <vector>

namespace {

//===--- Helpers ----------------------------------------------------------===//

/// Device memory holding `bytes`, freed with it.
class Dev {
public:
  explicit Dev(size_t bytes) {
    if (bytes > 0) {
      EXPECT_EQ(cudaMalloc(&p_, bytes), cudaSuccess);
    }
    bytes_ = bytes;
  }
  template <typename T> explicit Dev(const std::vector<T>& v) : Dev(v.size() * sizeof(T)) {
    EXPECT_EQ(cudaMemcpy(p_, v.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Dev() {
    if (p_)
      cudaFree(p_);
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  void* get() const { return p_; }
  /// The contents as T, after everything queued has run.
  template <typename T> std::vector<T> read() const {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<T> v(bytes_ / sizeof(T));
    EXPECT_EQ(cudaMemcpy(v.data(), p_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }

private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

std::vector<float> randomFloats(size_t n, unsigned seed, float lo = -1, float hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& f : v)
    f = d(gen);
  return v;
}

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float tf32(float f) { // to nearest, ties away from zero
  uint32_t u = bitsOf(f);
  u = (u + 0x1000u) & 0xffffe000u;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

class EmuCudnn : public ::testing::Test {
protected:
  void SetUp() override { ASSERT_EQ(cudnnCreate(&h), CUDNN_STATUS_SUCCESS); }
  void TearDown() override { EXPECT_EQ(cudnnDestroy(h), CUDNN_STATUS_SUCCESS); }
  cudnnHandle_t h = nullptr;
};

cudnnTensorDescriptor_t tensor(int n, int c, int hh, int w, cudnnDataType_t t = CUDNN_DATA_FLOAT) {
  cudnnTensorDescriptor_t d = nullptr;
  EXPECT_EQ(cudnnCreateTensorDescriptor(&d), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, t, n, c, hh, w), CUDNN_STATUS_SUCCESS);
  return d;
}

void expectNear(const std::vector<float>& got, const std::vector<double>& want, double tol,
                const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << what << " at " << i;
}

//===--- Convolution references -------------------------------------------===//

struct Conv {
  int N, C, H, W, K, G, R, S, padH, padW, strH, strW, dilH, dilW;
  bool flip = false; ///< CUDNN_CONVOLUTION
  int Cg() const { return C / G; }
  int P() const { return (H + 2 * padH - (dilH * (R - 1) + 1)) / strH + 1; }
  int Q() const { return (W + 2 * padW - (dilW * (S - 1) + 1)) / strW + 1; }
  size_t xn() const { return size_t(N) * C * H * W; }
  size_t wn() const { return size_t(K) * Cg() * R * S; }
  size_t yn() const { return size_t(N) * K * P() * Q(); }
  size_t xi(int n, int c, int h, int w) const { return ((size_t(n) * C + c) * H + h) * W + w; }
  size_t yi(int n, int k, int p, int q) const { return ((size_t(n) * K + k) * P() + p) * Q() + q; }
  size_t wi(int k, int c, int r, int s) const {
    if (flip) {
      r = R - 1 - r;
      s = S - 1 - s;
    }
    return ((size_t(k) * Cg() + c) * R + r) * S + s;
  }
  /// Calls f(x index, w index, y index) for every product of the convolution.
  template <typename F> void each(F&& f) const {
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k)
        for (int p = 0; p < P(); ++p)
          for (int q = 0; q < Q(); ++q)
            for (int c = 0; c < Cg(); ++c)
              for (int r = 0; r < R; ++r)
                for (int s = 0; s < S; ++s) {
                  int h = p * strH - padH + r * dilH, w = q * strW - padW + s * dilW;
                  if (h >= 0 && h < H && w >= 0 && w < W)
                    f(xi(n, k / (K / G) * Cg() + c, h, w), wi(k, c, r, s), yi(n, k, p, q));
                }
  }
};

std::vector<double> refForward(const Conv& c, const std::vector<float>& x,
                               const std::vector<float>& w) {
  std::vector<double> y(c.yn(), 0.0);
  c.each([&](size_t xi, size_t wi, size_t yi) { y[yi] += double(x[xi]) * w[wi]; });
  return y;
}

std::vector<double> refBackwardData(const Conv& c, const std::vector<float>& dy,
                                    const std::vector<float>& w) {
  std::vector<double> dx(c.xn(), 0.0);
  c.each([&](size_t xi, size_t wi, size_t yi) { dx[xi] += double(dy[yi]) * w[wi]; });
  return dx;
}

std::vector<double> refBackwardFilter(const Conv& c, const std::vector<float>& x,
                                      const std::vector<float>& dy) {
  std::vector<double> dw(c.wn(), 0.0);
  c.each([&](size_t xi, size_t wi, size_t yi) { dw[wi] += double(x[xi]) * dy[yi]; });
  return dw;
}

/// The descriptors of a convolution, destroyed with it.
struct ConvDescs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  ConvDescs(const Conv& c, cudnnDataType_t t = CUDNN_DATA_FLOAT,
            cudnnMathType_t math = CUDNN_FMA_MATH) {
    x = tensor(c.N, c.C, c.H, c.W, t);
    y = tensor(c.N, c.K, c.P(), c.Q(), t);
    EXPECT_EQ(cudnnCreateFilterDescriptor(&w), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetFilter4dDescriptor(w, t, CUDNN_TENSOR_NCHW, c.K, c.Cg(), c.R, c.S),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnCreateConvolutionDescriptor(&conv), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetConvolution2dDescriptor(conv, c.padH, c.padW, c.strH, c.strW, c.dilH, c.dilW,
                                              c.flip ? CUDNN_CONVOLUTION : CUDNN_CROSS_CORRELATION,
                                              t == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE
                                                                     : CUDNN_DATA_FLOAT),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetConvolutionGroupCount(conv, c.G), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetConvolutionMathType(conv, math), CUDNN_STATUS_SUCCESS);
  }
  ~ConvDescs() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(conv);
  }
};

// Groups, asymmetric strides, dilation, pads: what the general algorithms take.
const Conv kGeneral{2, 4, 7, 6, 6, 2, 3, 2, 1, 2, 2, 1, 1, 2};
// A 3x3, unit-stride, one-group case every implemented algorithm takes.
const Conv kUnit{2, 3, 6, 5, 4, 1, 3, 3, 1, 1, 1, 1, 1, 1};

/// Runs forward algorithm `algo` with the workspace it asks for; the status.
cudnnStatus_t forward(cudnnHandle_t h, const ConvDescs& d, int algo, const Dev& x, const Dev& w,
                      const Dev& y, float alpha = 1, float beta = 0) {
  size_t bytes = 0;
  auto a = static_cast<cudnnConvolutionFwdAlgo_t>(algo);
  cudnnStatus_t s = cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, a, &bytes);
  if (s != CUDNN_STATUS_SUCCESS)
    return s;
  Dev ws(bytes);
  s = cudnnConvolutionForward(h, &alpha, d.x, x.get(), d.w, w.get(), d.conv, a, ws.get(), bytes,
                              &beta, d.y, y.get());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return s;
}

cudnnStatus_t backwardData(cudnnHandle_t h, const ConvDescs& d, int algo, const Dev& dy,
                           const Dev& w, const Dev& dx, float alpha = 1, float beta = 0) {
  size_t bytes = 0;
  auto a = static_cast<cudnnConvolutionBwdDataAlgo_t>(algo);
  cudnnStatus_t s =
      cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.conv, d.x, a, &bytes);
  if (s != CUDNN_STATUS_SUCCESS)
    return s;
  Dev ws(bytes);
  s = cudnnConvolutionBackwardData(h, &alpha, d.w, w.get(), d.y, dy.get(), d.conv, a, ws.get(),
                                   bytes, &beta, d.x, dx.get());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return s;
}

cudnnStatus_t backwardFilter(cudnnHandle_t h, const ConvDescs& d, int algo, const Dev& x,
                             const Dev& dy, const Dev& dw, float alpha = 1, float beta = 0) {
  size_t bytes = 0;
  auto a = static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo);
  cudnnStatus_t s =
      cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv, d.w, a, &bytes);
  if (s != CUDNN_STATUS_SUCCESS)
    return s;
  Dev ws(bytes);
  s = cudnnConvolutionBackwardFilter(h, &alpha, d.x, x.get(), d.y, dy.get(), d.conv, a, ws.get(),
                                     bytes, &beta, d.w, dw.get());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return s;
}

/// want = alpha * r + beta * prior.
std::vector<double> blended(const std::vector<double>& r, const std::vector<float>& prior,
                            double alpha, double beta) {
  std::vector<double> out(r.size());
  for (size_t i = 0; i < r.size(); ++i)
    out[i] = alpha * r[i] + beta * prior[i];
  return out;
}

//===--- Handles ----------------------------------------------------------===//

TEST_F(EmuCudnn, HandleVersionsStreamsAndErrorStrings) {
  EXPECT_EQ(cudnnGetVersion(), size_t(CUDNN_VERSION));
  EXPECT_EQ(cudnnGetCudartVersion(), size_t(CUDART_VERSION));
  EXPECT_STREQ(cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM), "CUDNN_STATUS_BAD_PARAM");
  EXPECT_STREQ(cudnnGetErrorString(CUDNN_STATUS_EXECUTION_FAILED_CUDART),
               "CUDNN_STATUS_EXECUTION_FAILED_CUDART");
  EXPECT_EQ(cudnnCreate(nullptr), CUDNN_STATUS_BAD_PARAM);
  cudaStream_t s = nullptr, other = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  EXPECT_EQ(cudnnSetStream(h, s), CUDNN_STATUS_SUCCESS);
  // A stream of another device does not go with a handle of device 0.
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&other), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudnnSetStream(h, other), CUDNN_STATUS_MAPPING_ERROR);
  EXPECT_EQ(cudnnSetStream(nullptr, s), CUDNN_STATUS_BAD_PARAM);
  // Work goes to the handle's stream.
  auto* td = tensor(1, 3, 1, 1);
  Dev x(std::vector<float>{1, 2, 3}), y(std::vector<float>(3));
  float one = 1, zero = 0;
  EXPECT_EQ(cudnnSoftmaxForward(h, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one, td,
                                x.get(), &zero, td, y.get()),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_NEAR(y.read<float>()[2], std::exp(3.0) / (std::exp(1.0) + std::exp(2.0) + std::exp(3.0)),
              1e-6);
  EXPECT_EQ(cudnnSetStream(h, nullptr), CUDNN_STATUS_SUCCESS);
  cudnnDestroyTensorDescriptor(td);
  cudaStreamDestroy(s);
  cudaStreamDestroy(other);
}

//===--- Convolutions -----------------------------------------------------===//

TEST_F(EmuCudnn, ConvForwardEveryAlgorithmMatchesDirect) {
  for (const bool unit : {false, true}) {
    const Conv& c = unit ? kUnit : kGeneral;
    ConvDescs d(c);
    auto xv = randomFloats(c.xn(), 1), wv = randomFloats(c.wn(), 2),
         prior = randomFloats(c.yn(), 3);
    Dev x(xv), w(wv);
    const auto want = blended(refForward(c, xv, wv), prior, 0.5, 2.0);
    int ran = 0;
    for (int algo = 0; algo < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; ++algo) {
      Dev y(prior);
      cudnnStatus_t s = forward(h, d, algo, x, w, y, 0.5f, 2.0f);
      if (s == CUDNN_STATUS_NOT_SUPPORTED)
        continue;
      ASSERT_EQ(s, CUDNN_STATUS_SUCCESS) << "algo " << algo;
      expectNear(y.read<float>(), want, 1e-5, "forward");
      ++ran;
    }
    // All but DIRECT (never implemented) take the unit case.
    EXPECT_EQ(ran, unit ? 7 : 3);
  }
}

TEST_F(EmuCudnn, ConvBackwardDataEveryAlgorithmMatchesDirect) {
  for (const bool unit : {false, true}) {
    const Conv& c = unit ? kUnit : kGeneral;
    ConvDescs d(c);
    auto dyv = randomFloats(c.yn(), 4), wv = randomFloats(c.wn(), 5),
         prior = randomFloats(c.xn(), 6);
    Dev dy(dyv), w(wv);
    const auto want = blended(refBackwardData(c, dyv, wv), prior, 1.5, -1.0);
    int ran = 0;
    for (int algo = 0; algo < CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT; ++algo) {
      Dev dx(prior);
      cudnnStatus_t s = backwardData(h, d, algo, dy, w, dx, 1.5f, -1.0f);
      if (s == CUDNN_STATUS_NOT_SUPPORTED)
        continue;
      ASSERT_EQ(s, CUDNN_STATUS_SUCCESS) << "algo " << algo;
      expectNear(dx.read<float>(), want, 1e-5, "backward data");
      ++ran;
    }
    EXPECT_EQ(ran, unit ? 6 : 2);
  }
}

TEST_F(EmuCudnn, ConvBackwardFilterEveryAlgorithmMatchesDirect) {
  for (const bool unit : {false, true}) {
    const Conv& c = unit ? kUnit : kGeneral;
    ConvDescs d(c);
    auto xv = randomFloats(c.xn(), 7), dyv = randomFloats(c.yn(), 8),
         prior = randomFloats(c.wn(), 9);
    Dev x(xv), dy(dyv);
    const auto want = blended(refBackwardFilter(c, xv, dyv), prior, 1.0, 1.0);
    int ran = 0;
    for (int algo = 0; algo < CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT; ++algo) {
      Dev dw(prior);
      cudnnStatus_t s = backwardFilter(h, d, algo, x, dy, dw, 1.0f, 1.0f);
      if (s == CUDNN_STATUS_NOT_SUPPORTED)
        continue;
      ASSERT_EQ(s, CUDNN_STATUS_SUCCESS) << "algo " << algo;
      expectNear(dw.read<float>(), want, 1e-5, "backward filter");
      ++ran;
    }
    // All but WINOGRAD (never implemented) take the unit case.
    EXPECT_EQ(ran, unit ? 6 : 3);
  }
}

TEST_F(EmuCudnn, ConvolutionModeMirrorsTheFilter) {
  Conv c = kGeneral;
  c.flip = true;
  ConvDescs d(c);
  auto xv = randomFloats(c.xn(), 10), wv = randomFloats(c.wn(), 11), dyv = randomFloats(c.yn(), 12);
  Dev x(xv), w(wv), y(c.yn() * 4), dy(dyv), dx(c.xn() * 4), dw(c.wn() * 4);
  ASSERT_EQ(forward(h, d, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, x, w, y), CUDNN_STATUS_SUCCESS);
  expectNear(y.read<float>(), refForward(c, xv, wv), 1e-5, "forward");
  ASSERT_EQ(backwardData(h, d, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, dy, w, dx), CUDNN_STATUS_SUCCESS);
  expectNear(dx.read<float>(), refBackwardData(c, dyv, wv), 1e-5, "backward data");
  ASSERT_EQ(backwardFilter(h, d, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, x, dy, dw),
            CUDNN_STATUS_SUCCESS);
  expectNear(dw.read<float>(), refBackwardFilter(c, xv, dyv), 1e-5, "backward filter");
}

TEST_F(EmuCudnn, AlgorithmsSumInTheirOwnOrders) {
  // Long sums: 16 channels x 3 x 3 per output, 2 x 12 x 12 per filter gradient.
  const Conv c{2, 16, 12, 12, 8, 1, 3, 3, 1, 1, 1, 1, 1, 1};
  ConvDescs d(c);
  auto xv = randomFloats(c.xn(), 13), wv = randomFloats(c.wn(), 14), dyv = randomFloats(c.yn(), 15);
  Dev x(xv), w(wv), dy(dyv), y0(c.yn() * 4), y4(c.yn() * 4);
  ASSERT_EQ(forward(h, d, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, x, w, y0),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(forward(h, d, CUDNN_CONVOLUTION_FWD_ALGO_FFT, x, w, y4), CUDNN_STATUS_SUCCESS);
  EXPECT_NE(y0.read<uint32_t>(), y4.read<uint32_t>()) << "sequential and FFT sums agree in bits";
  // A deterministic algorithm repeats its bits; BWD_FILTER_ALGO_0 varies from run to run.
  std::set<std::vector<uint32_t>> det, nondet;
  for (int run = 0; run < 4; ++run) {
    Dev a(c.wn() * 4), b(c.wn() * 4);
    ASSERT_EQ(backwardFilter(h, d, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, x, dy, a),
              CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(backwardFilter(h, d, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, x, dy, b),
              CUDNN_STATUS_SUCCESS);
    det.insert(a.read<uint32_t>());
    nondet.insert(b.read<uint32_t>());
  }
  EXPECT_EQ(det.size(), 1u);
  EXPECT_GT(nondet.size(), 1u);
}

TEST_F(EmuCudnn, HeuristicsReportDeterminismAndWorkspace) {
  ConvDescs d(kUnit);
  int count = 0, n = 0;
  ASSERT_EQ(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &count), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(count, int(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT));
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<size_t>(count));
  ASSERT_EQ(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, count, &n,
                                                          perf.data()),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(n, count);
  bool zero = false, nonzero = false;
  for (int i = 0; i < n; ++i) {
    const auto& q = perf[size_t(i)];
    bool nondet = q.algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 ||
                  q.algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
    EXPECT_EQ(q.determinism, nondet ? CUDNN_NON_DETERMINISTIC : CUDNN_DETERMINISTIC);
    EXPECT_EQ(q.mathType, CUDNN_FMA_MATH);
    // Supported first; the only unsupported one last.
    EXPECT_EQ(q.status, i + 1 < n ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED);
    if (q.status != CUDNN_STATUS_SUCCESS)
      continue;
    size_t bytes = 0;
    ASSERT_EQ(
        cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv, d.w, q.algo, &bytes),
        CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(bytes, q.memory);
    (bytes ? nonzero : zero) = true;
  }
  EXPECT_TRUE(zero && nonzero);
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> data(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
  ASSERT_EQ(
      cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, 6, &n, data.data()),
      CUDNN_STATUS_SUCCESS);
  for (int i = 0; i < n; ++i)
    EXPECT_EQ(data[size_t(i)].determinism, data[size_t(i)].algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0
                                               ? CUDNN_NON_DETERMINISTIC
                                               : CUDNN_DETERMINISTIC);
  EXPECT_EQ(
      cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, 0, &n, data.data()),
      CUDNN_STATUS_BAD_PARAM);
}

TEST_F(EmuCudnn, FindRunsEveryAlgorithmFastestFirst) {
  const Conv& c = kUnit;
  ConvDescs d(c);
  auto xv = randomFloats(c.xn(), 16), wv = randomFloats(c.wn(), 17);
  Dev x(xv), w(wv), y(c.yn() * 4), ws(size_t(1) << 20);
  std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
  int n = 0;
  ASSERT_EQ(cudnnFindConvolutionForwardAlgorithmEx(h, d.x, x.get(), d.w, w.get(), d.conv, d.y,
                                                   y.get(), int(perf.size()), &n, perf.data(),
                                                   ws.get(), size_t(1) << 20),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(n, int(perf.size()));
  int ok = 0;
  for (int i = 0; i < n; ++i) {
    if (perf[size_t(i)].status != CUDNN_STATUS_SUCCESS)
      continue;
    ASSERT_EQ(ok, i) << "a failed algorithm listed before a successful one";
    EXPECT_GE(perf[size_t(i)].time, 0.0f);
    if (i > 0) {
      EXPECT_LE(perf[size_t(i - 1)].time, perf[size_t(i)].time);
    }
    ++ok;
  }
  EXPECT_EQ(ok, 7);
  expectNear(y.read<float>(), refForward(c, xv, wv), 1e-5, "y after Find");
  // Without a workspace the algorithms that need one report BAD_PARAM.
  ASSERT_EQ(cudnnFindConvolutionForwardAlgorithmEx(h, d.x, x.get(), d.w, w.get(), d.conv, d.y,
                                                   y.get(), int(perf.size()), &n, perf.data(),
                                                   nullptr, 0),
            CUDNN_STATUS_SUCCESS);
  for (int i = 0; i < n; ++i) {
    if (perf[size_t(i)].memory > 0) {
      EXPECT_NE(perf[size_t(i)].status, CUDNN_STATUS_SUCCESS);
    }
  }
}

TEST_F(EmuCudnn, FindRefusedWhileCapturing) {
  ConvDescs d(kUnit);
  Dev x(kUnit.xn() * 4), w(kUnit.wn() * 4), dy(kUnit.yn() * 4), dw(kUnit.wn() * 4);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudnnSetStream(h, s), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
  int n = 0;
  EXPECT_EQ(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, d.x, x.get(), d.y, dy.get(), d.conv,
                                                          d.w, dw.get(), int(perf.size()), &n,
                                                          perf.data(), nullptr, 0),
            CUDNN_STATUS_EXECUTION_FAILED_CUDART);
  cudaGraph_t graph = nullptr;
  EXPECT_NE(cudaStreamEndCapture(s, &graph), cudaSuccess); // the Find invalidated the capture
  (void)cudaGetLastError();
  EXPECT_EQ(cudnnSetStream(h, nullptr), CUDNN_STATUS_SUCCESS);
  cudaStreamDestroy(s);
}

TEST_F(EmuCudnn, TooSmallWorkspaceIsBadParam) {
  ConvDescs d(kUnit);
  Dev x(kUnit.xn() * 4), w(kUnit.wn() * 4), y(kUnit.yn() * 4);
  size_t bytes = 0;
  const auto algo = CUDNN_CONVOLUTION_FWD_ALGO_GEMM;
  ASSERT_EQ(cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, algo, &bytes),
            CUDNN_STATUS_SUCCESS);
  ASSERT_GT(bytes, 0u);
  Dev ws(bytes);
  float one = 1, zero = 0;
  EXPECT_EQ(cudnnConvolutionForward(h, &one, d.x, x.get(), d.w, w.get(), d.conv, algo, ws.get(),
                                    bytes - 1, &zero, d.y, y.get()),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnConvolutionForward(h, &one, d.x, x.get(), d.w, w.get(), d.conv, algo, nullptr,
                                    bytes, &zero, d.y, y.get()),
            CUDNN_STATUS_BAD_PARAM);
  ASSERT_EQ(cudaMemset(ws.get(), 0, bytes), cudaSuccess);
  EXPECT_EQ(cudnnConvolutionForward(h, &one, d.x, x.get(), d.w, w.get(), d.conv, algo, ws.get(),
                                    bytes, &zero, d.y, y.get()),
            CUDNN_STATUS_SUCCESS);
  // The algorithm used its workspace as scratch: nothing there survives.
  auto after = ws.read<uint8_t>();
  EXPECT_EQ(std::count(after.begin(), after.end(), 0), 0);
}

TEST_F(EmuCudnn, BadDescriptorsAndArgumentsRefused) {
  cudnnTensorDescriptor_t t = nullptr;
  ASSERT_EQ(cudnnCreateTensorDescriptor(&t), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, -2, 3, 3),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_INT8, 1, 2, 3, 3),
            CUDNN_STATUS_NOT_SUPPORTED);
  cudnnDestroyTensorDescriptor(t);
  ConvDescs d(kUnit);
  EXPECT_EQ(cudnnSetConvolution2dDescriptor(d.conv, 1, 1, 0, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetConvolutionGroupCount(d.conv, 0), CUDNN_STATUS_BAD_PARAM);
  size_t bytes = 0;
  // y of the wrong spatial size; x with the wrong channel count; the wrong compute type.
  auto* badY = tensor(kUnit.N, kUnit.K, kUnit.P() + 1, kUnit.Q());
  EXPECT_EQ(cudnnGetConvolutionForwardWorkspaceSize(
                h, d.x, d.w, d.conv, badY, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, &bytes),
            CUDNN_STATUS_NOT_SUPPORTED);
  auto* badX = tensor(kUnit.N, kUnit.C + 1, kUnit.H, kUnit.W);
  EXPECT_EQ(cudnnGetConvolutionForwardWorkspaceSize(
                h, badX, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, &bytes),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y,
                                                    CUDNN_CONVOLUTION_FWD_ALGO_DIRECT, &bytes),
            CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(cudnnGetConvolutionForwardWorkspaceSize(
                h, d.x, d.w, d.conv, d.y, static_cast<cudnnConvolutionFwdAlgo_t>(99), &bytes),
            CUDNN_STATUS_BAD_PARAM);
  cudnnDestroyTensorDescriptor(badY);
  cudnnDestroyTensorDescriptor(badX);
  cudnnConvolutionDescriptor_t half = nullptr;
  ASSERT_EQ(cudnnCreateConvolutionDescriptor(&half), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnSetConvolution2dDescriptor(half, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_HALF),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnGetConvolutionForwardWorkspaceSize(
                h, d.x, d.w, half, d.y, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, &bytes),
            CUDNN_STATUS_NOT_SUPPORTED);
  cudnnDestroyConvolutionDescriptor(half);
  // Null operands, LRN and pooling descriptors out of range.
  float one = 1, zero = 0;
  EXPECT_EQ(cudnnConvolutionForward(h, &one, d.x, nullptr, d.w, nullptr, d.conv,
                                    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero,
                                    d.y, nullptr),
            CUDNN_STATUS_BAD_PARAM);
  cudnnLRNDescriptor_t lrn = nullptr;
  ASSERT_EQ(cudnnCreateLRNDescriptor(&lrn), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnSetLRNDescriptor(lrn, 17, 1e-4, 0.75, 2.0), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetLRNDescriptor(lrn, 5, 1e-4, 0.75, 0.0), CUDNN_STATUS_BAD_PARAM);
  cudnnDestroyLRNDescriptor(lrn);
  cudnnPoolingDescriptor_t pool = nullptr;
  ASSERT_EQ(cudnnCreatePoolingDescriptor(&pool), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnSetPooling2dDescriptor(pool, CUDNN_POOLING_MAX, CUDNN_NOT_PROPAGATE_NAN, 0, 2, 0,
                                        0, 1, 1),
            CUDNN_STATUS_BAD_PARAM);
  cudnnDestroyPoolingDescriptor(pool);
}

TEST_F(EmuCudnn, Tf32RoundsTheOperandsOfTensorCoreAlgorithms) {
  const Conv& c = kUnit;
  auto xv = randomFloats(c.xn(), 18), wv = randomFloats(c.wn(), 19);
  std::vector<float> xt(xv), wt(wv);
  for (float& f : xt)
    f = tf32(f);
  for (float& f : wt)
    f = tf32(f);
  const auto exact = refForward(c, xv, wv), rounded = refForward(c, xt, wt);
  Dev x(xv), w(wv);
  for (cudnnMathType_t math : {CUDNN_DEFAULT_MATH, CUDNN_TENSOR_OP_MATH, CUDNN_FMA_MATH}) {
    ConvDescs d(c, CUDNN_DATA_FLOAT, math);
    Dev y(c.yn() * 4), y0(c.yn() * 4);
    ASSERT_EQ(forward(h, d, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, x, w, y),
              CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(forward(h, d, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, x, w, y0),
              CUDNN_STATUS_SUCCESS);
    const bool tc = math != CUDNN_FMA_MATH;
    expectNear(y.read<float>(), tc ? rounded : exact, 1e-6, "tensor-core algorithm");
    expectNear(y0.read<float>(), exact, 1e-6, "FMA algorithm"); // never on tensor cores
    double worst = 0;
    auto got = y.read<float>();
    for (size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, std::fabs(got[i] - exact[i]));
    EXPECT_EQ(worst > 1e-4, tc) << "TF32's rounding shows only with tensor cores";
  }
}

TEST_F(EmuCudnn, SixteenBitDataRoundsOnceAtTheStore) {
  const Conv& c = kGeneral;
  for (cudnnDataType_t t : {CUDNN_DATA_BFLOAT16, CUDNN_DATA_HALF}) {
    auto to16 = [&](float f) {
      return t == CUDNN_DATA_HALF ? lwrt::floatToF16(f) : lwrt::floatToBf16(f);
    };
    auto from16 = [&](uint16_t u) {
      return t == CUDNN_DATA_HALF ? lwrt::f16ToFloat(u) : lwrt::bf16ToFloat(u);
    };
    auto xf = randomFloats(c.xn(), 20), wf = randomFloats(c.wn(), 21);
    std::vector<uint16_t> xs, wsv;
    for (float& f : xf)
      xs.push_back(to16(f)), f = from16(xs.back());
    for (float& f : wf)
      wsv.push_back(to16(f)), f = from16(wsv.back());
    // float32 sums in IMPLICIT_GEMM's order (c, r, s), padding included, one rounding.
    std::vector<float> acc(c.yn(), 0.0f);
    for (int n = 0; n < c.N; ++n)
      for (int k = 0; k < c.K; ++k)
        for (int p = 0; p < c.P(); ++p)
          for (int q = 0; q < c.Q(); ++q)
            for (int ch = 0; ch < c.Cg(); ++ch)
              for (int r = 0; r < c.R; ++r)
                for (int s = 0; s < c.S; ++s) {
                  int hh = p * c.strH - c.padH + r * c.dilH, ww = q * c.strW - c.padW + s * c.dilW;
                  bool in = hh >= 0 && hh < c.H && ww >= 0 && ww < c.W;
                  float a = in ? xf[c.xi(n, k / (c.K / c.G) * c.Cg() + ch, hh, ww)] : 0.0f;
                  acc[c.yi(n, k, p, q)] += a * wf[c.wi(k, ch, r, s)];
                }
    ConvDescs d(c, t, CUDNN_TENSOR_OP_MATH);
    Dev x(xs), w(wsv), y(c.yn() * 2);
    ASSERT_EQ(forward(h, d, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, x, w, y),
              CUDNN_STATUS_SUCCESS);
    auto got = y.read<uint16_t>();
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], to16(acc[i])) << "element " << i;
    // 16-bit data runs on the implicit-GEMM family only.
    EXPECT_EQ(forward(h, d, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, x, w, y), CUDNN_STATUS_NOT_SUPPORTED);
  }
}

TEST_F(EmuCudnn, BetaZeroDoesNotReadTheOutput) {
  const Conv& c = kUnit;
  ConvDescs d(c);
  Dev x(randomFloats(c.xn(), 22)), w(randomFloats(c.wn(), 23));
  Dev y(std::vector<float>(c.yn(), NAN));
  ASSERT_EQ(forward(h, d, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, x, w, y, 1.0f, 0.0f),
            CUDNN_STATUS_SUCCESS);
  for (float f : y.read<float>())
    ASSERT_TRUE(std::isfinite(f));
}

//===--- Pooling ----------------------------------------------------------===//

cudnnPoolingDescriptor_t pooling(cudnnPoolingMode_t mode, int win, int pad, int stride) {
  cudnnPoolingDescriptor_t p = nullptr;
  EXPECT_EQ(cudnnCreatePoolingDescriptor(&p), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnSetPooling2dDescriptor(p, mode, CUDNN_NOT_PROPAGATE_NAN, win, win, pad, pad,
                                        stride, stride),
            CUDNN_STATUS_SUCCESS);
  return p;
}

TEST_F(EmuCudnn, MaxPoolingRoutesATieToTheLastMaximum) {
  // [[5, 5, 1], [5, 5, 1]], 2x2 windows at stride 1: both windows hold the
  // maximum 5 more than once; the last in window order is (1, 1) for both.
  auto* p = pooling(CUDNN_POOLING_MAX_DETERMINISTIC, 2, 0, 1);
  auto *xd = tensor(1, 1, 2, 3), *yd = tensor(1, 1, 1, 2);
  int n, c, hh, w;
  ASSERT_EQ(cudnnGetPooling2dForwardOutputDim(p, xd, &n, &c, &hh, &w), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(std::vector<int>({n, c, hh, w}), std::vector<int>({1, 1, 1, 2}));
  Dev x(std::vector<float>{5, 5, 1, 5, 5, 1}), y(std::vector<float>(2, NAN));
  Dev dy(std::vector<float>{10, 100}), dx(std::vector<float>(6, NAN));
  float one = 1, zero = 0;
  ASSERT_EQ(cudnnPoolingForward(h, p, &one, xd, x.get(), &zero, yd, y.get()), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(y.read<float>(), std::vector<float>({5, 5}));
  ASSERT_EQ(
      cudnnPoolingBackward(h, p, &one, yd, y.get(), yd, dy.get(), xd, x.get(), &zero, xd, dx.get()),
      CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(dx.read<float>(), std::vector<float>({0, 0, 0, 0, 110, 0}));
  // A y of another size than the pooled one is refused.
  auto* bad = tensor(1, 1, 2, 2);
  EXPECT_EQ(cudnnPoolingForward(h, p, &one, xd, x.get(), &zero, bad, y.get()),
            CUDNN_STATUS_BAD_PARAM);
  cudnnDestroyTensorDescriptor(bad);
  cudnnDestroyTensorDescriptor(xd);
  cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyPoolingDescriptor(p);
}

TEST_F(EmuCudnn, PoolingMatchesDirectWithPadding) {
  const int N = 2, C = 3, H = 5, W = 4, K = 3, pad = 1, st = 2;
  const int P = (H + 2 * pad - K) / st + 1, Q = (W + 2 * pad - K) / st + 1;
  auto xv = randomFloats(size_t(N) * C * H * W, 24), dyv = randomFloats(size_t(N) * C * P * Q, 25);
  auto *xd = tensor(N, C, H, W), *yd = tensor(N, C, P, Q);
  Dev x(xv), dy(dyv);
  for (auto mode :
       {CUDNN_POOLING_MAX, CUDNN_POOLING_MAX_DETERMINISTIC,
        CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING}) {
    std::vector<double> y(size_t(N) * C * P * Q), dx(xv.size(), 0.0);
    for (int nc = 0; nc < N * C; ++nc)
      for (int p = 0; p < P; ++p)
        for (int q = 0; q < Q; ++q) {
          double best = -INFINITY, sum = 0;
          int count = 0, arg = -1;
          for (int i = 0; i < K; ++i)
            for (int j = 0; j < K; ++j) {
              int hh = p * st - pad + i, ww = q * st - pad + j;
              if (hh < 0 || hh >= H || ww < 0 || ww >= W)
                continue;
              int at = (nc * H + hh) * W + ww;
              if (xv[size_t(at)] >= best)
                best = xv[size_t(at)], arg = at;
              sum += xv[size_t(at)];
              ++count;
            }
          const size_t yi = (size_t(nc) * P + p) * Q + q;
          const bool max = mode == CUDNN_POOLING_MAX || mode == CUDNN_POOLING_MAX_DETERMINISTIC;
          const int div = mode == CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING ? K * K : count;
          y[yi] = max ? best : sum / div;
          if (max)
            dx[size_t(arg)] += dyv[yi];
          else
            for (int i = 0; i < K; ++i)
              for (int j = 0; j < K; ++j) {
                int hh = p * st - pad + i, ww = q * st - pad + j;
                if (hh >= 0 && hh < H && ww >= 0 && ww < W)
                  dx[size_t((nc * H + hh) * W + ww)] += dyv[yi] / div;
              }
        }
    auto* pd = pooling(mode, K, pad, st);
    Dev yv(std::vector<float>(y.size(), NAN)), dxv(std::vector<float>(dx.size(), NAN));
    float one = 1, zero = 0;
    ASSERT_EQ(cudnnPoolingForward(h, pd, &one, xd, x.get(), &zero, yd, yv.get()),
              CUDNN_STATUS_SUCCESS);
    expectNear(yv.read<float>(), y, 1e-6, "pooling forward");
    ASSERT_EQ(cudnnPoolingBackward(h, pd, &one, yd, yv.get(), yd, dy.get(), xd, x.get(), &zero, xd,
                                   dxv.get()),
              CUDNN_STATUS_SUCCESS);
    expectNear(dxv.read<float>(), dx, 1e-6, "pooling backward");
    cudnnDestroyPoolingDescriptor(pd);
  }
  cudnnDestroyTensorDescriptor(xd);
  cudnnDestroyTensorDescriptor(yd);
}

//===--- LRN --------------------------------------------------------------===//

TEST_F(EmuCudnn, LrnAcrossChannelsMatchesCudnnFormula) {
  const int N = 2, C = 6, H = 2, W = 2;
  const unsigned n = 4; // even: one channel below, two above
  const double alpha = 0.3, beta = 0.75, k = 1.5;
  auto xv = randomFloats(size_t(N) * C * H * W, 26), dyv = randomFloats(xv.size(), 27);
  auto at = [&](int b, int c, int i) { return (size_t(b) * C + c) * H * W + size_t(i); };
  std::vector<double> y(xv.size()), dx(xv.size(), 0.0), s(xv.size());
  for (int b = 0; b < N; ++b)
    for (int i = 0; i < H * W; ++i)
      for (int c = 0; c < C; ++c) {
        double sum = 0;
        for (int j = std::max(0, c - 1); j <= std::min(C - 1, c + 2); ++j)
          sum += double(xv[at(b, j, i)]) * xv[at(b, j, i)];
        s[at(b, c, i)] = k + alpha / n * sum;
        y[at(b, c, i)] = xv[at(b, c, i)] * std::pow(s[at(b, c, i)], -beta);
      }
  // dy/dx by the chain rule, term by term.
  for (int b = 0; b < N; ++b)
    for (int i = 0; i < H * W; ++i)
      for (int c = 0; c < C; ++c) {
        dx[at(b, c, i)] += dyv[at(b, c, i)] * std::pow(s[at(b, c, i)], -beta);
        for (int j = std::max(0, c - 1); j <= std::min(C - 1, c + 2); ++j)
          dx[at(b, j, i)] += dyv[at(b, c, i)] * xv[at(b, c, i)] * -beta *
                             std::pow(s[at(b, c, i)], -beta - 1) * alpha / n * 2 * xv[at(b, j, i)];
      }
  cudnnLRNDescriptor_t lrn = nullptr;
  ASSERT_EQ(cudnnCreateLRNDescriptor(&lrn), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnSetLRNDescriptor(lrn, n, alpha, beta, k), CUDNN_STATUS_SUCCESS);
  auto* td = tensor(N, C, H, W);
  Dev x(xv), dy(dyv), yv(xv.size() * 4), dxv(xv.size() * 4);
  float one = 1, zero = 0;
  ASSERT_EQ(cudnnLRNCrossChannelForward(h, lrn, CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, td, x.get(),
                                        &zero, td, yv.get()),
            CUDNN_STATUS_SUCCESS);
  expectNear(yv.read<float>(), y, 1e-5, "LRN forward");
  ASSERT_EQ(cudnnLRNCrossChannelBackward(h, lrn, CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, td, yv.get(),
                                         td, dy.get(), td, x.get(), &zero, td, dxv.get()),
            CUDNN_STATUS_SUCCESS);
  expectNear(dxv.read<float>(), dx, 1e-5, "LRN backward");
  cudnnDestroyTensorDescriptor(td);
  cudnnDestroyLRNDescriptor(lrn);
}

//===--- Batch norm -------------------------------------------------------===//

struct BnRef {
  std::vector<double> mean, var; ///< per channel: the batch mean and the biased variance
};

BnRef bnStats(const std::vector<float>& x, int N, int C, int HW) {
  BnRef r{std::vector<double>(size_t(C), 0.0), std::vector<double>(size_t(C), 0.0)};
  const double m = double(N) * HW;
  for (int c = 0; c < C; ++c) {
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < HW; ++i)
        r.mean[size_t(c)] += x[(size_t(n) * C + c) * HW + size_t(i)] / m;
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < HW; ++i) {
        double d = x[(size_t(n) * C + c) * HW + size_t(i)] - r.mean[size_t(c)];
        r.var[size_t(c)] += d * d / m;
      }
  }
  return r;
}

TEST_F(EmuCudnn, BatchNormTrainingInferenceAndBackward) {
  const int N = 3, C = 2, H = 2, W = 2, HW = H * W;
  const double eps = 1e-3, factor = 0.3, m = N * HW;
  auto xv = randomFloats(size_t(N) * C * HW, 28), dyv = randomFloats(xv.size(), 29);
  std::vector<float> scale{1.5f, -0.5f}, bias{0.25f, 2.0f}, rmean{0.5f, -0.25f}, rvar{2.0f, 3.0f};
  const BnRef st = bnStats(xv, N, C, HW);
  auto *xd = tensor(N, C, H, W), *bd = tensor(1, 1, 1, 1);
  ASSERT_EQ(cudnnDeriveBNTensorDescriptor(bd, xd, CUDNN_BATCHNORM_SPATIAL), CUDNN_STATUS_SUCCESS);
  Dev x(xv), dy(dyv), y(xv.size() * 4), sc(scale), bi(bias), rm(rmean), rv(rvar), sm(8), si(8);
  float one = 1, zero = 0;
  ASSERT_EQ(cudnnBatchNormalizationForwardTraining(
                h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd, x.get(), xd, y.get(), bd, sc.get(),
                bi.get(), factor, rm.get(), rv.get(), eps, sm.get(), si.get()),
            CUDNN_STATUS_SUCCESS);
  std::vector<double> wantY(xv.size()), wantRm(2), wantRv(2), wantInv(2);
  for (size_t c = 0; c < 2; ++c) {
    wantInv[c] = 1 / std::sqrt(st.var[c] + eps);
    wantRm[c] = st.mean[c] * factor + rmean[c] * (1 - factor);
    wantRv[c] = st.var[c] * m / (m - 1) * factor + rvar[c] * (1 - factor); // unbiased
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < HW; ++i) {
        size_t at = (size_t(n) * C + c) * HW + size_t(i);
        wantY[at] = scale[c] * (xv[at] - st.mean[c]) * wantInv[c] + bias[c];
      }
  }
  expectNear(y.read<float>(), wantY, 1e-5, "y");
  expectNear(rm.read<float>(), wantRm, 1e-5, "running mean");
  expectNear(rv.read<float>(), wantRv, 1e-5, "running variance");
  expectNear(sm.read<float>(), st.mean, 1e-5, "saved mean");
  expectNear(si.read<float>(), wantInv, 1e-5, "saved inverse std");

  // Inference with the running statistics.
  Dev yi(xv.size() * 4);
  ASSERT_EQ(cudnnBatchNormalizationForwardInference(h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd,
                                                    x.get(), xd, yi.get(), bd, sc.get(), bi.get(),
                                                    rm.get(), rv.get(), eps),
            CUDNN_STATUS_SUCCESS);
  std::vector<double> wantYi(xv.size());
  for (size_t at = 0; at < xv.size(); ++at) {
    size_t c = at / HW % C;
    wantYi[at] = scale[c] * (xv[at] - wantRm[c]) / std::sqrt(wantRv[c] + eps) + bias[c];
  }
  expectNear(yi.read<float>(), wantYi, 1e-5, "inference");

  // Backward, with the saved statistics and without; the parameter
  // gradients accumulate (betaParamDiff 1), dx is overwritten.
  std::vector<double> wantDx(xv.size()), dscale(2, 0.0), dbias(2, 0.0);
  for (size_t at = 0; at < xv.size(); ++at) {
    size_t c = at / HW % C;
    dbias[c] += dyv[at];
    dscale[c] += dyv[at] * (xv[at] - st.mean[c]) * wantInv[c];
  }
  for (size_t at = 0; at < xv.size(); ++at) {
    size_t c = at / HW % C;
    double xhat = (xv[at] - st.mean[c]) * wantInv[c];
    wantDx[at] = scale[c] * wantInv[c] * (dyv[at] - dbias[c] / m - xhat * dscale[c] / m);
  }
  for (bool saved : {true, false}) {
    Dev dx(std::vector<float>(xv.size(), NAN)), ds(std::vector<float>{1, 2}),
        db(std::vector<float>{3, 4});
    ASSERT_EQ(cudnnBatchNormalizationBackward(h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &one,
                                              xd, x.get(), xd, dy.get(), xd, dx.get(), bd, sc.get(),
                                              ds.get(), db.get(), eps, saved ? sm.get() : nullptr,
                                              saved ? si.get() : nullptr),
              CUDNN_STATUS_SUCCESS);
    expectNear(dx.read<float>(), wantDx, 1e-5, "dx");
    expectNear(ds.read<float>(), {dscale[0] + 1, dscale[1] + 2}, 1e-5, "dscale");
    expectNear(db.read<float>(), {dbias[0] + 3, dbias[1] + 4}, 1e-5, "dbias");
  }
  // One saved statistic without the other is refused.
  EXPECT_EQ(cudnnBatchNormalizationBackward(h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero,
                                            xd, x.get(), xd, dy.get(), xd, y.get(), bd, sc.get(),
                                            sm.get(), si.get(), eps, sm.get(), nullptr),
            CUDNN_STATUS_BAD_PARAM);
  cudnnDestroyTensorDescriptor(xd);
  cudnnDestroyTensorDescriptor(bd);
}

TEST_F(EmuCudnn, BatchNormRunningAverageReadsTheOldValueEvenAtFactorOne) {
  // cuDNN's update is new * factor + old * (1 - factor): NaN * 0 stays NaN.
  auto *xd = tensor(2, 1, 1, 2), *bd = tensor(1, 1, 1, 1);
  ASSERT_EQ(cudnnDeriveBNTensorDescriptor(bd, xd, CUDNN_BATCHNORM_SPATIAL), CUDNN_STATUS_SUCCESS);
  Dev x(std::vector<float>{1, 2, 3, 4}), y(16), sc(std::vector<float>{1}),
      bi(std::vector<float>{0}), rm(std::vector<float>{NAN}), rv(std::vector<float>{0});
  float one = 1, zero = 0;
  ASSERT_EQ(cudnnBatchNormalizationForwardTraining(h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd,
                                                   x.get(), xd, y.get(), bd, sc.get(), bi.get(),
                                                   1.0, rm.get(), rv.get(), 1e-5, nullptr, nullptr),
            CUDNN_STATUS_SUCCESS);
  EXPECT_TRUE(std::isnan(rm.read<float>()[0]));
  EXPECT_NEAR(rv.read<float>()[0], 5.0 / 3.0, 1e-6); // the unbiased variance of 1..4
  cudnnDestroyTensorDescriptor(xd);
  cudnnDestroyTensorDescriptor(bd);
}

//===--- Softmax ----------------------------------------------------------===//

TEST_F(EmuCudnn, SoftmaxForwardAndBackwardInEveryMode) {
  const int N = 2, C = 4, W = 3;
  auto xv = randomFloats(size_t(N) * C * W, 30, -3, 3), dyv = randomFloats(xv.size(), 31);
  auto* td = tensor(N, C, 1, W);
  Dev x(xv), dy(dyv);
  for (auto algo : {CUDNN_SOFTMAX_FAST, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_LOG})
    for (auto mode : {CUDNN_SOFTMAX_MODE_CHANNEL, CUDNN_SOFTMAX_MODE_INSTANCE}) {
      // Groups: (n, w) over c, or n over (c, w).
      auto group = [&](size_t at) {
        size_t n = at / (C * W), w = at % W;
        return mode == CUDNN_SOFTMAX_MODE_CHANNEL ? n * W + w : n;
      };
      std::vector<double> sum(size_t(N) * W, 0.0), y(xv.size()), dot(sum.size(), 0.0),
          dx(xv.size());
      for (size_t at = 0; at < xv.size(); ++at)
        sum[group(at)] += std::exp(double(xv[at]));
      for (size_t at = 0; at < xv.size(); ++at) {
        double p = std::exp(double(xv[at])) / sum[group(at)];
        y[at] = algo == CUDNN_SOFTMAX_LOG ? std::log(p) : p;
        dot[group(at)] += algo == CUDNN_SOFTMAX_LOG ? dyv[at] : dyv[at] * p;
      }
      for (size_t at = 0; at < xv.size(); ++at) {
        double p = std::exp(double(xv[at])) / sum[group(at)];
        dx[at] = algo == CUDNN_SOFTMAX_LOG ? dyv[at] - p * dot[group(at)]
                                           : p * (dyv[at] - dot[group(at)]);
      }
      Dev yv(xv.size() * 4), dxv(xv.size() * 4);
      float one = 1, zero = 0;
      ASSERT_EQ(cudnnSoftmaxForward(h, algo, mode, &one, td, x.get(), &zero, td, yv.get()),
                CUDNN_STATUS_SUCCESS);
      expectNear(yv.read<float>(), y, 1e-5, "softmax");
      ASSERT_EQ(cudnnSoftmaxBackward(h, algo, mode, &one, td, yv.get(), td, dy.get(), &zero, td,
                                     dxv.get()),
                CUDNN_STATUS_SUCCESS);
      expectNear(dxv.read<float>(), dx, 1e-5, "softmax backward");
    }
  float one = 1, zero = 0;
  EXPECT_EQ(cudnnSoftmaxForward(h, static_cast<cudnnSoftmaxAlgorithm_t>(7),
                                CUDNN_SOFTMAX_MODE_CHANNEL, &one, td, x.get(), &zero, td, x.get()),
            CUDNN_STATUS_BAD_PARAM);
  cudnnDestroyTensorDescriptor(td);
}

//===--- The graph API ----------------------------------------------------===//

/// A finalized backend tensor descriptor [n, c, h, w] with unique id `uid`.
cudnnBackendDescriptor_t graphTensor(std::vector<int64_t> dims, int64_t uid) {
  cudnnBackendDescriptor_t d = nullptr;
  EXPECT_EQ(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &d),
            CUDNN_STATUS_SUCCESS);
  int64_t strides[4] = {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1}, align = 16;
  cudnnDataType_t t = CUDNN_DATA_FLOAT;
  EXPECT_EQ(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(
      cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data()),
      CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(
      cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align),
      CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnBackendFinalize(d), CUDNN_STATUS_SUCCESS);
  return d;
}

TEST_F(EmuCudnn, GraphApiDescribesButOffersNoEngine) {
  // x [1, 4, 5, 5], w [8, 4, 3, 3], pads 1, y [1, 8, 5, 5], as ConvGraph.cu builds it.
  auto x = graphTensor({1, 4, 5, 5}, 'x'), w = graphTensor({8, 4, 3, 3}, 'w'),
       y = graphTensor({1, 8, 5, 5}, 'y'), bad = graphTensor({1, 8, 4, 5}, 'z');
  cudnnBackendDescriptor_t conv = nullptr, op = nullptr, badOp = nullptr, graph = nullptr,
                           heur = nullptr, engine = nullptr;
  ASSERT_EQ(cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &conv),
            CUDNN_STATUS_SUCCESS);
  int64_t dims = 2, pads[2] = {1, 1}, ones[2] = {1, 1};
  cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  EXPECT_EQ(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1,
                                     &dims),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE,
                                     1, &comp),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE,
                                     CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(
      cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_INT64, 1, &dims),
      CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE);
  for (auto name : {CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS})
    EXPECT_EQ(cudnnBackendSetAttribute(conv, name, CUDNN_TYPE_INT64, 2, pads),
              CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnBackendFinalize(conv), CUDNN_STATUS_BAD_PARAM); // no strides nor dilations yet
  for (auto name : {CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES})
    EXPECT_EQ(cudnnBackendSetAttribute(conv, name, CUDNN_TYPE_INT64, 2, ones),
              CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnBackendFinalize(conv), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1,
                                     &dims),
            CUDNN_STATUS_NOT_INITIALIZED);
  auto makeOp = [&](cudnnBackendDescriptor_t out, cudnnBackendDescriptor_t& o) {
    ASSERT_EQ(
        cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, &o),
        CUDNN_STATUS_SUCCESS);
    float alpha = 1, beta = 0;
    for (auto [name, d] : {std::pair{CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x},
                           std::pair{CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w},
                           std::pair{CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, out},
                           std::pair{CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv}})
      EXPECT_EQ(cudnnBackendSetAttribute(o, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d),
                CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnBackendSetAttribute(o, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                                       CUDNN_TYPE_FLOAT, 1, &alpha),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnBackendSetAttribute(o, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                                       CUDNN_TYPE_FLOAT, 1, &beta),
              CUDNN_STATUS_SUCCESS);
  };
  makeOp(y, op);
  ASSERT_EQ(cudnnBackendFinalize(op), CUDNN_STATUS_SUCCESS);
  makeOp(bad, badOp);
  EXPECT_EQ(cudnnBackendFinalize(badOp), CUDNN_STATUS_BAD_PARAM); // y of the wrong height
  ASSERT_EQ(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &graph),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &badOp),
            CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED);
  EXPECT_EQ(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(
      cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h),
      CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnBackendFinalize(graph), CUDNN_STATUS_SUCCESS);
  // The heuristics finalize with no engine configuration, in every mode.
  for (auto hm : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    ASSERT_EQ(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(
        cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm),
        CUDNN_STATUS_SUCCESS);
    int64_t count = -1;
    EXPECT_EQ(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
              CUDNN_STATUS_NOT_INITIALIZED);
    ASSERT_EQ(cudnnBackendFinalize(heur), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(count, 0);
    EXPECT_EQ(cudnnBackendDestroyDescriptor(heur), CUDNN_STATUS_SUCCESS);
  }
  // No engine exists at any index; nothing executes.
  ASSERT_EQ(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine),
            CUDNN_STATUS_SUCCESS);
  int64_t index = 0;
  EXPECT_EQ(cudnnBackendSetAttribute(engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(
      cudnnBackendSetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &index),
      CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnBackendFinalize(engine), CUDNN_STATUS_NOT_SUPPORTED);
  cudnnBackendDescriptor_t plan = nullptr, pack = nullptr;
  ASSERT_EQ(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnBackendExecute(h, plan, pack), CUDNN_STATUS_NOT_SUPPORTED);
  for (auto d : {plan, pack, engine, graph, op, badOp, conv, x, w, y, bad})
    EXPECT_EQ(cudnnBackendDestroyDescriptor(d), CUDNN_STATUS_SUCCESS);
}

//===--- What would crash a GPU ---------------------------------------------===//

void useDestroyedDescriptor() {
  cudnnTensorDescriptor_t t = nullptr;
  cudnnCreateTensorDescriptor(&t);
  cudnnDestroyTensorDescriptor(t);
  cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 1, 1);
}

void passHostMemory() {
  cudnnHandle_t h = nullptr;
  cudnnCreate(&h);
  auto* td = tensor(1, 2, 1, 1);
  std::vector<float> host(2);
  float one = 1, zero = 0;
  cudnnSoftmaxForward(h, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one, td, host.data(),
                      &zero, td, host.data());
}

TEST_F(EmuCudnn, DestroyedDescriptorsAndHostPointersStopTheRun) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(useDestroyedDescriptor(), "not a live tensor descriptor");
  EXPECT_DEATH(passHostMemory(), "cudnnSoftmaxForward: x");
}

} // namespace
