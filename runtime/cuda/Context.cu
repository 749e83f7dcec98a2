// The CUDA backend's process-wide state: stream, handles, workspace, errors.
#include "cuda/Context.h"

namespace lwrt::cuda {

Context& context() {
  static Context c;
  return c;
}

bool fail(const char* file, int line, const std::string& what) {
  Context& c = context();
  if (c.error.empty())
    c.error = std::string(file) + ":" + std::to_string(line) + ": " + what;
  return false;
}

namespace {
bool setError(std::string* error, const std::string& what) {
  if (error)
    *error = what;
  return false;
}
} // namespace

bool initContext(int device, bool tf32, std::string* error) {
  Context& c = context();
  if (c.device >= 0)
    return setError(error, "the CUDA context is already initialized");
  int count = 0;
  cudaError_t st = cudaGetDeviceCount(&count);
  if (st != cudaSuccess || count == 0)
    return setError(error, std::string("no usable CUDA GPU (") +
                               (st != cudaSuccess ? cudaGetErrorString(st) : "0 devices") + ")");
  if (device < 0 || device >= count)
    return setError(error, "GPU " + std::to_string(device) + " does not exist (" +
                               std::to_string(count) + " visible)");
  auto check = [&](bool ok, const char* what, const char* why) {
    if (!ok)
      setError(error, std::string(what) + ": " + why);
    return ok;
  };
  if (!check((st = cudaSetDevice(device)) == cudaSuccess, "cudaSetDevice", cudaGetErrorString(st)))
    return false;
  if (!check((st = cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking)) == cudaSuccess,
             "cudaStreamCreate", cudaGetErrorString(st)))
    return false;
  cudnnStatus_t dst;
  if (!check((dst = cudnnCreate(&c.cudnn)) == CUDNN_STATUS_SUCCESS, "cudnnCreate",
             cudnnGetErrorString(dst)) ||
      !check((dst = cudnnSetStream(c.cudnn, c.stream)) == CUDNN_STATUS_SUCCESS, "cudnnSetStream",
             cudnnGetErrorString(dst)))
    return false;
  cublasStatus_t bst;
  if (!check((bst = cublasCreate(&c.cublas)) == CUBLAS_STATUS_SUCCESS, "cublasCreate",
             cublasGetStatusString(bst)) ||
      !check((bst = cublasSetStream(c.cublas, c.stream)) == CUBLAS_STATUS_SUCCESS,
             "cublasSetStream", cublasGetStatusString(bst)) ||
      !check((bst = cublasSetMathMode(c.cublas,
                                      tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH)) ==
                 CUBLAS_STATUS_SUCCESS,
             "cublasSetMathMode", cublasGetStatusString(bst)))
    return false;
  if (!check((st = cudaMalloc(&c.errorFlag, sizeof(int))) == cudaSuccess, "cudaMalloc",
             cudaGetErrorString(st)) ||
      !check((st = cudaMemset(c.errorFlag, 0, sizeof(int))) == cudaSuccess, "cudaMemset",
             cudaGetErrorString(st)))
    return false;
  c.device = device;
  c.tf32 = tf32;
  return true;
}

void destroyContext() {
  Context& c = context();
  if (c.stream)
    cudaStreamSynchronize(c.stream);
  if (c.workspace)
    cudaFree(c.workspace);
  if (c.errorFlag)
    cudaFree(c.errorFlag);
  if (c.cublas)
    cublasDestroy(c.cublas);
  if (c.cudnn)
    cudnnDestroy(c.cudnn);
  if (c.stream)
    cudaStreamDestroy(c.stream);
  c = Context{};
}

bool ensureWorkspace(size_t bytes) {
  Context& c = context();
  if (bytes <= c.workspaceBytes)
    return true;
  if (c.capturing)
    return fail(__FILE__, __LINE__,
                "a kernel needs " + std::to_string(bytes) +
                    " bytes of workspace while the step is "
                    "captured (" +
                    std::to_string(c.workspaceBytes) + " were set up)");
  LWRT_CUDA(cudaStreamSynchronize(c.stream));
  if (c.workspace) {
    LWRT_CUDA(cudaFree(c.workspace));
    c.workspace = nullptr;
    c.workspaceBytes = 0;
  }
  LWRT_CUDA(cudaMalloc(&c.workspace, bytes));
  c.workspaceBytes = bytes;
  return true;
}

} // namespace lwrt::cuda
