// emu/EmuCudnnTest.cpp - the emulated cuDNN's convolutions against direct computations
//
// Every emulated cuDNN convolution call lwcc's runtime makes, on device
// memory of the emulated CUDA runtime: the three directions (groups, pads,
// strides, dilations, both modes, alpha and beta) with every algorithm
// against a plain computation, algorithms that differ in bits, the
// non-deterministic ones varying from run to run, TF32, 16-bit data rounded
// once; handles and streams; and each refusal (a bad descriptor, too small a
// workspace, Find during a capture). The other ops are in EmuCudnnOpsTest.cpp.
#include "EmuCudnnTestUtil.h"
#include "lwrt/bf16.h"
#include "lwrt/f16.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <gtest/gtest.h>
#include <set>
#include <vector>

namespace {

using namespace lwemu_test;

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
  {
    // A handle holds 8 MiB of its device's memory (cuDNN 9.19's on an H100)
    // until it is destroyed.
    size_t free0 = 0, free1 = 0, free2 = 0, total = 0;
    ASSERT_EQ(cudaMemGetInfo(&free0, &total), cudaSuccess);
    cudnnHandle_t more = nullptr;
    ASSERT_EQ(cudnnCreate(&more), CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(cudaMemGetInfo(&free1, &total), cudaSuccess);
    EXPECT_EQ(cudnnDestroy(more), CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(cudaMemGetInfo(&free2, &total), cudaSuccess);
    EXPECT_EQ(free0 - free1, size_t{8} << 20);
    EXPECT_EQ(free2, free0);
  }
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

} // namespace
