// emu/EmuCudnnOpsTest.cpp - the emulated cuDNN's other ops against direct computations
//
// Pooling (the tie rule), LRN, batch norm and softmax on device memory of
// the emulated CUDA runtime against plain computations; the graph API
// offering no engine; and what would crash a GPU (a destroyed descriptor,
// host memory) stopping the run.
#include "EmuCudnnTestUtil.h"

#include <algorithm>
#include <cmath>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <gtest/gtest.h>
#include <vector>

namespace {

using namespace lwemu_test;

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
