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

/// "cudnnA" / "2 functions (cudnnA, cudnnB)", at most four names.
std::string functionList(const std::vector<std::string>& names) {
  if (names.size() == 1)
    return names[0];
  std::string s = std::to_string(names.size()) + " functions (";
  for (size_t k = 0; k < names.size() && k < 4; ++k)
    s += (k ? ", " : "") + names[k];
  return s + (names.size() > 4 ? ", ...)" : ")");
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
  const int cudnnMajor = built.cudnn / 10000, cudaMajor = built.runtime / 1000;
  std::string cudnnHint = "install cuDNN " + std::to_string(cudnnMajor) + " for CUDA " +
                          std::to_string(cudaMajor) + " (libcudnn.so." +
                          std::to_string(cudnnMajor) +
                          " beside the trainer, on LD_LIBRARY_PATH or in /usr/local/cuda/lib64; "
                          "pip's nvidia-cudnn-cu" +
                          std::to_string(cudaMajor) + " has it)";
  if (found.cudnn / 10000 != cudnnMajor)
    add("cuDNN " + cudnnVersion(found.cudnn) + " found, this trainer needs cuDNN " +
        std::to_string(cudnnMajor) + " (any " + std::to_string(cudnnMajor) +
        ".x with the functions it calls): " + cudnnHint);
  else if (found.cudnnCudart / 1000 != cudaMajor)
    add("the cuDNN found (" + cudnnVersion(found.cudnn) + ") is built for CUDA " +
        cudaVersion(found.cudnnCudart) + ", this trainer uses CUDA " + cudaVersion(built.runtime) +
        ": " + cudnnHint);
  else if (!found.missingCudnn.empty())
    add("the cuDNN found (" + cudnnVersion(found.cudnn) + ") lacks " +
        functionList(found.missingCudnn) + ", which this trainer calls: install a newer cuDNN " +
        std::to_string(cudnnMajor) + " for CUDA " + std::to_string(cudaMajor) +
        " (it was built with " + cudnnVersion(built.cudnn) + ", which has them)");
  std::string cublasHint = "install the CUDA " + std::to_string(cudaMajor) +
                           " math libraries (libcublas.so." + std::to_string(built.cublasMajor) +
                           "; pip's nvidia-cublas has it)";
  if (found.cublasMajor != built.cublasMajor)
    add("cuBLAS " + std::to_string(found.cublasMajor) + "." + std::to_string(found.cublasMinor) +
        " found, this trainer needs cuBLAS " + std::to_string(built.cublasMajor) +
        ".x: " + cublasHint);
  else if (!found.missingCublas.empty())
    add("the cuBLAS found (" + std::to_string(found.cublasMajor) + "." +
        std::to_string(found.cublasMinor) + "." + std::to_string(found.cublasPatch) + ") lacks " +
        functionList(found.missingCublas) + ", which this trainer calls: " + cublasHint +
        ", version " + std::to_string(built.cublasMajor) + "." + std::to_string(built.cublasMinor) +
        " or newer");
  return problems;
}

std::string checkNcclFunctions(const std::vector<std::string>& missing, int cudaMajor) {
  if (missing.empty())
    return "";
  const std::string cuda = std::to_string(cudaMajor);
  return "CUDA preflight: the NCCL found (libnccl.so.2) lacks " + functionList(missing) +
         ", which this trainer calls: install a newer NCCL 2 for CUDA " + cuda +
         " (pip's nvidia-nccl-cu" + cuda + " has one)";
}

std::string describeCudaVersions(const CudaVersions& found) {
  return (found.driver ? "driver CUDA " + cudaVersion(found.driver) : std::string("no driver")) +
         ", cuDNN " + cudnnVersion(found.cudnn) + ", cuBLAS " + std::to_string(found.cublasMajor) +
         "." + std::to_string(found.cublasMinor) + "." + std::to_string(found.cublasPatch);
}

} // namespace lwrt::cuda
