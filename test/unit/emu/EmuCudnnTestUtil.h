// emu/EmuCudnnTestUtil.h - what the emulated cuDNN's tests share
// defines: Dev, randomFloats, bitsOf, tf32, EmuCudnn, tensor, expectNear
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <gtest/gtest.h>
#include <random>
#include <vector>

namespace lwemu_test {

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

inline std::vector<float> randomFloats(size_t n, unsigned seed, float lo = -1, float hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& f : v)
    f = d(gen);
  return v;
}

inline uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float tf32(float f) { // to nearest, ties away from zero
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

inline cudnnTensorDescriptor_t tensor(int n, int c, int hh, int w,
                                      cudnnDataType_t t = CUDNN_DATA_FLOAT) {
  cudnnTensorDescriptor_t d = nullptr;
  EXPECT_EQ(cudnnCreateTensorDescriptor(&d), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, t, n, c, hh, w), CUDNN_STATUS_SUCCESS);
  return d;
}

inline void expectNear(const std::vector<float>& got, const std::vector<double>& want, double tol,
                       const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << what << " at " << i;
}

} // namespace lwemu_test
