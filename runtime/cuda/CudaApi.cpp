// The cuDNN, cuBLAS and NCCL functions the CUDA runtime calls, looked up in
// the libraries this process loaded (cuda/Preflight.h). The lists come from
// the runtime's own objects at build time (CudaApi.inc, written by
// ListCudaApi.cmake), so they hold exactly what a trainer can call.
#include "CudaApi.inc"

#include "cuda/Preflight.h"

#include <cublas_api.h>
#include <cudnn_version.h>
#include <dlfcn.h>

namespace lwrt::cuda {

namespace {

/// The names of `names` that no loaded library defines, at symbol version
/// `version` (the soname cuDNN and cuBLAS tag their functions with) or
/// unversioned (NCCL's).
template <size_t N>
std::vector<std::string> missing(const char* const (&names)[N], const std::string& version) {
  std::vector<std::string> out;
  for (const char* name : names) {
    if (!name)
      continue;
    void* f = version.empty() ? nullptr : dlvsym(RTLD_DEFAULT, name, version.c_str());
    if (!f)
      f = dlsym(RTLD_DEFAULT, name);
    if (!f)
      out.push_back(name);
  }
  return out;
}

// A trailing null keeps the arrays valid when a library has no function
// listed (NCCL in a build without multi-device code).
const char* const kCudnn[] = {LWRT_CUDNN_API nullptr};
const char* const kCublas[] = {LWRT_CUBLAS_API nullptr};
const char* const kNccl[] = {LWRT_NCCL_API nullptr};

} // namespace

std::vector<std::string> missingCudnnFunctions() {
  return missing(kCudnn, "libcudnn.so." + std::to_string(CUDNN_MAJOR));
}

std::vector<std::string> missingCublasFunctions() {
  return missing(kCublas, "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR));
}

std::vector<std::string> missingNcclFunctions() { return missing(kNccl, ""); }

} // namespace lwrt::cuda
