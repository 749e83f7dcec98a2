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

TEST(CudaPreflight, CudnnOfAnotherMajorOrForAnotherCudaIsRefused) {
  CudaVersions v = matching();
  v.cudnn = 80907; // cuDNN 8.9.7
  EXPECT_NE(checkCudaVersions(v, built())
                .find("cuDNN 8.9.7 found, this trainer needs cuDNN 9 (any 9.x with the functions "
                      "it calls): install cuDNN 9 for CUDA 13"),
            std::string::npos)
      << checkCudaVersions(v, built());
  v = matching();
  v.cudnnCudart = 12080; // cuDNN 9 built for CUDA 12
  EXPECT_NE(
      checkCudaVersions(v, built()).find("is built for CUDA 12.8, this trainer uses CUDA 13.0"),
      std::string::npos);
}

// What the trainer calls decides, not the minor version it was built with:
// the cuDNN 9.13 of a PyTorch wheel runs a trainer built with 9.19 when it
// has every function the runtime calls, and is refused, with the functions
// named, when it lacks one.
TEST(CudaPreflight, OlderMinorVersionsPassWhenTheyHaveWhatTheTrainerCalls) {
  CudaVersions v = matching();
  v.cudnn = 91300; // 9.13.0, older than the headers
  v.cublasMinor = 0;
  EXPECT_EQ(checkCudaVersions(v, built()), "");
  v.missingCudnn = {"cudnnBackendExecute"};
  EXPECT_EQ(checkCudaVersions(v, built()),
            "the cuDNN found (9.13.0) lacks cudnnBackendExecute, which this trainer calls: "
            "install a newer cuDNN 9 for CUDA 13 (it was built with 9.19.0, which has them)");
  v.missingCudnn = {"cudnnA", "cudnnB", "cudnnC", "cudnnD", "cudnnE"};
  EXPECT_NE(checkCudaVersions(v, built())
                .find("lacks 5 functions (cudnnA, cudnnB, cudnnC, cudnnD, ...), which"),
            std::string::npos)
      << checkCudaVersions(v, built());
  v = matching();
  v.missingCublas = {"cublasSgemm_v2", "cublasSetWorkspace_v2"};
  EXPECT_NE(checkCudaVersions(v, built())
                .find("the cuBLAS found (13.1.0) lacks 2 functions (cublasSgemm_v2, "
                      "cublasSetWorkspace_v2), which this trainer calls"),
            std::string::npos)
      << checkCudaVersions(v, built());
}

// A multi-device trainer's NCCL must have the functions the group calls.
TEST(CudaPreflight, NcclLackingAFunctionIsNamed) {
  EXPECT_EQ(checkNcclFunctions({}, 13), "");
  EXPECT_EQ(checkNcclFunctions({"ncclCommInitRankConfig"}, 13),
            "CUDA preflight: the NCCL found (libnccl.so.2) lacks ncclCommInitRankConfig, which "
            "this trainer calls: install a newer NCCL 2 for CUDA 13 (pip's nvidia-nccl-cu13 has "
            "one)");
  EXPECT_NE(checkNcclFunctions({"ncclA", "ncclB"}, 13).find("lacks 2 functions (ncclA, ncclB)"),
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
