// The CUDA trainer's start-up check of driver and library versions
// (runtime/cuda/Preflight.h): the verdicts, without a GPU.
#include "cuda/Preflight.h"

#include <algorithm>
#include <gtest/gtest.h>

using namespace lwrt::cuda;

namespace {

/// Built against CUDA 13.0, cuDNN 9.19.0, cuBLAS 13.1.0.
CudaVersions built() { return cudaNeeds(13000, 91900, 13, 1, 0); }

/// A machine with exactly that.
CudaVersions matching() {
  CudaVersions v;
  v.driver = 13000;
  v.runtime = 13000;
  v.cudnn = 91900;
  v.cudnnCudart = 13000;
  v.cublasMajor = 13;
  v.cublasMinor = 1;
  return v;
}

TEST(CudaPreflight, TheVersionsBuiltAgainstPass) {
  EXPECT_EQ(checkCudaVersions(matching(), built()), "");
  EXPECT_EQ(describeCudaVersions(matching()), "driver CUDA 13.0, cuDNN 9.19.0, cuBLAS 13.1.0");
}

TEST(CudaPreflight, NewerDriversAndLibrariesOfTheSameMajorPass) {
  CudaVersions v = matching();
  v.driver = 13020;      // minor-version compatibility: any CUDA 13 driver
  v.cudnn = 92103;       // cuDNN 9.21.3
  v.cudnnCudart = 13010; // built for CUDA 13.1
  v.cublasMinor = 4;
  EXPECT_EQ(checkCudaVersions(v, built()), "");
  v.driver = 14000;
  EXPECT_EQ(checkCudaVersions(v, built()), "");
}

TEST(CudaPreflight, NoDriverSaysWhatToInstall) {
  CudaVersions v = matching();
  v.driver = 0;
  EXPECT_EQ(checkCudaVersions(v, built()),
            "no NVIDIA driver found (libcuda.so.1 cannot be loaded): install an NVIDIA driver for "
            "CUDA 13.0 or newer (release 580+)");
  EXPECT_EQ(describeCudaVersions(v), "no driver, cuDNN 9.19.0, cuBLAS 13.1.0");
}

TEST(CudaPreflight, AnOlderDriverIsNamed) {
  CudaVersions v = matching();
  v.driver = 12040;
  std::string why = checkCudaVersions(v, built());
  EXPECT_NE(why.find("the NVIDIA driver supports CUDA 12.4, this trainer needs CUDA 13.0"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("release 580+"), std::string::npos) << why;
}

TEST(CudaPreflight, CudnnOfAnotherMajorOrOlderOrForAnotherCudaIsRefused) {
  CudaVersions v = matching();
  v.cudnn = 80907; // cuDNN 8.9.7
  EXPECT_NE(checkCudaVersions(v, built())
                .find("cuDNN 8.9.7 found, this trainer was built with "
                      "9.19.0: install cuDNN 9 for CUDA 13"),
            std::string::npos);
  v.cudnn = 91000; // 9.10.0: older than the headers
  EXPECT_NE(checkCudaVersions(v, built()).find("cuDNN 9.10.0 found"), std::string::npos);
  v = matching();
  v.cudnnCudart = 12080; // cuDNN 9 built for CUDA 12
  EXPECT_NE(
      checkCudaVersions(v, built()).find("is built for CUDA 12.8, this trainer uses CUDA 13.0"),
      std::string::npos);
}

TEST(CudaPreflight, EveryProblemGetsItsOwnLine) {
  CudaVersions v;
  v.cudnn = 80907;
  v.cublasMajor = 12;
  std::string why = checkCudaVersions(v, built());
  EXPECT_EQ(std::count(why.begin(), why.end(), '\n'), 2) << why;
  EXPECT_NE(why.find("cuBLAS 12.0 found, this trainer needs cuBLAS 13.x"), std::string::npos);
}

} // namespace
