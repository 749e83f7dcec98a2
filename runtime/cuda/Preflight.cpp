// The CUDA trainer's start-up check of driver and library versions.
#include "cuda/Preflight.h"

namespace lwrt::cuda {

namespace {

std::string cudaVersion(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

std::string cudnnVersion(int v) {
  return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." +
         std::to_string(v % 100);
}

/// The first NVIDIA driver release of a CUDA major version (Linux).
std::string driverRelease(int cudaMajor) {
  switch (cudaMajor) {
  case 12:
    return "525";
  case 13:
    return "580";
  default:
    return "";
  }
}

} // namespace

CudaVersions cudaNeeds(int runtime, int cudnn, int cublasMajor, int cublasMinor, int cublasPatch) {
  CudaVersions v;
  v.driver = runtime / 1000 * 1000; // minor-version compatibility: any driver of the major
  v.runtime = runtime;
  v.cudnn = cudnn;
  v.cudnnCudart = runtime;
  v.cublasMajor = cublasMajor;
  v.cublasMinor = cublasMinor;
  v.cublasPatch = cublasPatch;
  return v;
}

std::string checkCudaVersions(const CudaVersions& found, const CudaVersions& built) {
  std::string problems;
  auto add = [&](const std::string& line) { problems += (problems.empty() ? "" : "\n") + line; };
  std::string release = driverRelease(built.driver / 1000);
  std::string driverHint = "install an NVIDIA driver for CUDA " + cudaVersion(built.driver) +
                           " or newer" + (release.empty() ? "" : " (release " + release + "+)");
  if (found.driver == 0)
    add("no NVIDIA driver found (libcuda.so.1 cannot be loaded): " + driverHint);
  else if (found.driver < built.driver)
    add("the NVIDIA driver supports CUDA " + cudaVersion(found.driver) +
        ", this trainer needs CUDA " + cudaVersion(built.driver) + ": " + driverHint);
  std::string cudnnHint = "install cuDNN " + std::to_string(built.cudnn / 10000) + " for CUDA " +
                          std::to_string(built.runtime / 1000) + ", version " +
                          cudnnVersion(built.cudnn) + " or a newer " +
                          std::to_string(built.cudnn / 10000) +
                          ".x (libcudnn.so.9 beside the trainer, in /usr/local/cuda/lib64 or "
                          "on LD_LIBRARY_PATH)";
  if (found.cudnn / 10000 != built.cudnn / 10000 || found.cudnn < built.cudnn)
    add("cuDNN " + cudnnVersion(found.cudnn) + " found, this trainer was built with " +
        cudnnVersion(built.cudnn) + ": " + cudnnHint);
  else if (found.cudnnCudart / 1000 != built.runtime / 1000)
    add("the cuDNN found (" + cudnnVersion(found.cudnn) + ") is built for CUDA " +
        cudaVersion(found.cudnnCudart) + ", this trainer uses CUDA " + cudaVersion(built.runtime) +
        ": " + cudnnHint);
  if (found.cublasMajor != built.cublasMajor)
    add("cuBLAS " + std::to_string(found.cublasMajor) + "." + std::to_string(found.cublasMinor) +
        " found, this trainer needs cuBLAS " + std::to_string(built.cublasMajor) +
        ".x: install the CUDA " + std::to_string(built.runtime / 1000) +
        " math libraries (libcublas.so." + std::to_string(built.cublasMajor) + ")");
  return problems;
}

std::string describeCudaVersions(const CudaVersions& found) {
  return (found.driver ? "driver CUDA " + cudaVersion(found.driver) : std::string("no driver")) +
         ", cuDNN " + cudnnVersion(found.cudnn) + ", cuBLAS " + std::to_string(found.cublasMajor) +
         "." + std::to_string(found.cublasMinor) + "." + std::to_string(found.cublasPatch);
}

} // namespace lwrt::cuda
