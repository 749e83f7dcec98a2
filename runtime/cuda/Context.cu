// The CUDA backend's per-device state: stream, handles, workspace, errors;
// the calling thread's current one.
#include "cuda/Context.h"

#include <atomic>
#include <cstdlib>
#include <mutex>

namespace lwrt::cuda {

namespace {
thread_local Context* current = nullptr;
std::atomic<Context*> primary{nullptr};
} // namespace

Context& context() {
  if (current)
    return *current;
  if (Context* p = primary.load())
    return *p;
  static Context none; // no runner yet: kernels fail on its null handles
  return none;
}

void setPrimaryContext(Context* c) { primary.store(c); }
Context* primaryContext() { return primary.load(); }

ContextScope::ContextScope(Context& c) : previous_(current) {
  current = &c;
  if (c.device >= 0)
    (void)cudaSetDevice(c.device); // a failure shows at the scope's first call
}

ContextScope::~ContextScope() {
  current = previous_;
  if (previous_ && previous_->device >= 0)
    (void)cudaSetDevice(previous_->device);
}

bool fail(const char* file, int line, const std::string& what) {
  Context& c = context();
  if (c.error.empty())
    c.error = std::string(file) + ":" + std::to_string(line) + ": " + what;
  return false;
}

namespace {
/// cuBLAS's workspace: 32 MiB, what NVIDIA suggests for Hopper.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

/// cuBLAS gives each handle a default workspace pool (64 MiB on an H100
/// with cuBLAS 13.1) for streams that have no workspace of their own. lwcc
/// sets its own on every stream it runs cuBLAS on, so the pool would only
/// hold memory: it is sized to nothing before the first handle is made,
/// unless the user sized it (CUBLAS_WORKSPACE_CONFIG, which cuBLAS reads
/// when it makes a handle).
void noDefaultCublasPool() {
  static std::once_flag once;
  std::call_once(once, [] { setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0", 0); });
}

bool setError(std::string* error, const std::string& what) {
  if (error)
    *error = what;
  return false;
}

/// cuBLAS's math mode: TF32 for float32 products when asked; bf16 and fp16
/// products (which use tensor cores either way) sum in float32 throughout,
/// never in 16 bits between split parts, as the CPU backend's do.
cublasMath_t blasMathMode(bool gemmTf32) {
  return static_cast<cublasMath_t>((gemmTf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH) |
                                   CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
}
} // namespace

CudaVersions foundCudaVersions() {
  CudaVersions v;
  if (cudaDriverGetVersion(&v.driver) != cudaSuccess)
    v.driver = 0;
  if (cudaRuntimeGetVersion(&v.runtime) != cudaSuccess)
    v.runtime = 0;
  v.cudnn = static_cast<int>(cudnnGetVersion());
  v.cudnnCudart = static_cast<int>(cudnnGetCudartVersion());
  if (cublasGetProperty(MAJOR_VERSION, &v.cublasMajor) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(MINOR_VERSION, &v.cublasMinor) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(PATCH_LEVEL, &v.cublasPatch) != CUBLAS_STATUS_SUCCESS)
    v.cublasMajor = v.cublasMinor = v.cublasPatch = 0;
  v.missingCudnn = missingCudnnFunctions();
  v.missingCublas = missingCublasFunctions();
  return v;
}

CudaVersions builtCudaVersions() {
  return cudaNeeds(CUDART_VERSION, CUDNN_VERSION, CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR,
                   CUBLAS_VER_PATCH);
}

bool initContext(Context& c, int device, bool convTf32, bool gemmTf32, std::string* error) {
  if (c.device >= 0)
    return setError(error, "the CUDA context is already initialized");
  noDefaultCublasPool();
  int count = 0;
  cudaError_t st = cudaGetDeviceCount(&count);
  if (st != cudaSuccess || count == 0)
    return setError(error, std::string("no usable CUDA GPU (") +
                               (st != cudaSuccess ? cudaGetErrorString(st) : "0 devices") + ")");
  if (device < 0 || device >= count)
    return setError(error, "GPU " + std::to_string(device) + " does not exist (" +
                               std::to_string(count) + " visible)");
  auto cudaOk = [&](cudaError_t status, const char* what) {
    if (status != cudaSuccess)
      setError(error, std::string(what) + ": " + cudaGetErrorString(status));
    return status == cudaSuccess;
  };
  auto cudnnOk = [&](cudnnStatus_t status, const char* what) {
    if (status != CUDNN_STATUS_SUCCESS)
      setError(error, std::string(what) + ": " + cudnnGetErrorString(status));
    return status == CUDNN_STATUS_SUCCESS;
  };
  auto cublasOk = [&](cublasStatus_t status, const char* what) {
    if (status != CUBLAS_STATUS_SUCCESS)
      setError(error, std::string(what) + ": " + cublasGetStatusString(status));
    return status == CUBLAS_STATUS_SUCCESS;
  };
  if (!cudaOk(cudaSetDevice(device), "cudaSetDevice") ||
      !cudaOk(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking), "cudaStreamCreate") ||
      !cudnnOk(cudnnCreate(&c.cudnn), "cudnnCreate") ||
      !cudnnOk(cudnnSetStream(c.cudnn, c.stream), "cudnnSetStream") ||
      !cublasOk(cublasCreate(&c.cublas), "cublasCreate") ||
      !cublasOk(cublasSetStream(c.cublas, c.stream), "cublasSetStream") ||
      !cublasOk(cublasSetMathMode(c.cublas, blasMathMode(gemmTf32)), "cublasSetMathMode") ||
      !cudaOk(cudaMalloc(&c.cublasWorkspace, kCublasWorkspaceBytes), "cudaMalloc") ||
      !cublasOk(cublasSetWorkspace(c.cublas, c.cublasWorkspace, kCublasWorkspaceBytes),
                "cublasSetWorkspace") ||
      !cudaOk(cudaMalloc(&c.errorFlag, sizeof(int)), "cudaMalloc") ||
      !cudaOk(cudaMemsetAsync(c.errorFlag, 0, sizeof(int), c.stream), "cudaMemsetAsync") ||
      !cudaOk(cudaStreamSynchronize(c.stream), "cudaStreamSynchronize")) {
    destroyContext(c);
    return false;
  }
  c.slots.push_back({c.stream, nullptr, 0, c.cublasWorkspace});
  c.current = 0;
  c.device = device;
  c.convTf32 = convTf32;
  c.gemmTf32 = gemmTf32;
  return true;
}

bool initStreamContext(Context& c, const Context& base, std::string* error) {
  auto failed = [&](const std::string& what) {
    if (error)
      *error = what + " (a stream of GPU " + std::to_string(base.device) + ")";
    destroyContext(c);
    return false;
  };
  if (c.device >= 0 || base.device < 0)
    return failed("initStreamContext: the context is in use, or its base is not");
  noDefaultCublasPool();
  c.ownsErrorFlag = false;
  c.errorFlag = base.errorFlag;
  c.convTf32 = base.convTf32;
  c.gemmTf32 = base.gemmTf32;
  c.cudnnOps = base.cudnnOps;
  c.convGraphApi = base.convGraphApi;
  c.timeAlgorithms = base.timeAlgorithms;
  c.autotuneCache = base.autotuneCache;
  c.autotuneDevice = base.autotuneDevice;
  c.convWorkspaceLimit = base.convWorkspaceLimit;
  cudaError_t st = cudaSetDevice(base.device);
  if (st == cudaSuccess)
    st = cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking);
  if (st == cudaSuccess)
    st = cudaMalloc(&c.cublasWorkspace, kCublasWorkspaceBytes);
  if (st != cudaSuccess)
    return failed(std::string("creating a stream context: ") + cudaGetErrorString(st));
  cudnnStatus_t dn = cudnnCreate(&c.cudnn);
  if (dn == CUDNN_STATUS_SUCCESS)
    dn = cudnnSetStream(c.cudnn, c.stream);
  if (dn != CUDNN_STATUS_SUCCESS)
    return failed(std::string("cudnnCreate/cudnnSetStream: ") + cudnnGetErrorString(dn));
  cublasStatus_t bl = cublasCreate(&c.cublas);
  if (bl == CUBLAS_STATUS_SUCCESS)
    bl = cublasSetStream(c.cublas, c.stream);
  if (bl == CUBLAS_STATUS_SUCCESS)
    bl = cublasSetMathMode(c.cublas, blasMathMode(c.gemmTf32));
  if (bl == CUBLAS_STATUS_SUCCESS)
    bl = cublasSetWorkspace(c.cublas, c.cublasWorkspace, kCublasWorkspaceBytes);
  if (bl != CUBLAS_STATUS_SUCCESS)
    return failed(std::string("cublasCreate and its settings: ") + cublasGetStatusString(bl));
  c.slots.push_back({c.stream, nullptr, 0, c.cublasWorkspace});
  c.current = 0;
  c.device = base.device;
  return true;
}

void destroyContext(Context& c) {
  if (c.device >= 0) {
    cudaSetDevice(c.device);
    cudaDeviceSynchronize();
  }
  // cuDNN's lifetime rules: the plans (and the descriptors they were built
  // from) go before the handle they were made with.
  c.convPlans.reset();
  if (!c.slots.empty()) { // the current slot's workspace lives in the fields
    c.slots[c.current].workspace = c.workspace;
    c.slots[c.current].workspaceBytes = c.workspaceBytes;
    for (size_t k = 1; k < c.slots.size(); ++k) {
      cudaFree(c.slots[k].workspace);
      cudaFree(c.slots[k].cublasWorkspace);
      cudaStreamDestroy(c.slots[k].stream);
    }
    c.stream = c.slots[0].stream;
    c.workspace = c.slots[0].workspace;
    c.cublasWorkspace = c.slots[0].cublasWorkspace;
  }
  for (cudaEvent_t e : c.events)
    cudaEventDestroy(e);
  if (c.workspace)
    cudaFree(c.workspace);
  for (void* p : c.replaced)
    cudaFree(p);
  if (c.errorFlag && c.ownsErrorFlag)
    cudaFree(c.errorFlag);
  if (c.cublasWorkspace)
    cudaFree(c.cublasWorkspace);
  if (c.cublas)
    cublasDestroy(c.cublas);
  if (c.cudnn)
    cudnnDestroy(c.cudnn);
  if (c.stream)
    cudaStreamDestroy(c.stream);
  c = Context{};
}

namespace {
/// ensureWorkspace's growth; where `mayFail` and the memory cannot be had,
/// false with no error set and the context left without a workspace.
bool growWorkspace(size_t bytes, bool mayFail) {
  Context& c = context();
  if (bytes <= c.workspaceBytes)
    return true;
  if (c.capturing)
    return fail(__FILE__, __LINE__,
                "a kernel needs " + std::to_string(bytes) +
                    " bytes of workspace while the step is "
                    "captured (" +
                    std::to_string(c.workspaceBytes) + " were set up)");
  constexpr size_t kMiB = size_t{1} << 20;
  bytes = (bytes + kMiB - 1) / kMiB * kMiB;
  if (c.workspace && c.keepReplaced) {
    c.replaced.push_back(c.workspace); // work in flight on this stream may use it
    c.workspace = nullptr;
    c.workspaceBytes = 0;
    ++c.workspaceGeneration;
  } else if (c.workspace) {
    // Work in flight on any stream, or a recorded graph replayed before,
    // may still use it: free it only on an idle device, and have every
    // graph recorded with it recorded again.
    LWRT_CUDA(cudaDeviceSynchronize());
    LWRT_CUDA(cudaFree(c.workspace));
    c.workspace = nullptr;
    c.workspaceBytes = 0;
    ++c.workspaceGeneration;
  }
  if (mayFail) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      (void)cudaGetLastError(); // the caller goes on with less
      return false;
    }
    c.workspace = p;
  } else {
    LWRT_CUDA(cudaMalloc(&c.workspace, bytes));
  }
  c.workspaceBytes = bytes;
  return true;
}
} // namespace

bool ensureWorkspace(size_t bytes) { return growWorkspace(bytes, false); }

bool tryWorkspace(size_t bytes) { return growWorkspace(bytes, true); }

bool freeReplaced(Context& c) {
  if (c.replaced.empty())
    return true;
  LWRT_CUDA(cudaSetDevice(c.device));
  LWRT_CUDA(cudaDeviceSynchronize()); // the step's work in flight may still use them
  for (void* p : c.replaced)
    LWRT_CUDA(cudaFree(p));
  c.replaced.clear();
  return true;
}

bool setStream(int64_t stream) {
  Context& c = context();
  if (stream < 0 || stream > 63)
    return fail(__FILE__, __LINE__, "stream " + std::to_string(stream) + " is out of range");
  size_t k = static_cast<size_t>(stream);
  if (k == c.current)
    return true;
  while (c.slots.size() <= k) {
    if (c.capturing)
      return fail(__FILE__, __LINE__, "a stream was first used while the step was captured");
    StreamSlot slot;
    LWRT_CUDA(cudaStreamCreateWithFlags(&slot.stream, cudaStreamNonBlocking));
    LWRT_CUDA(cudaMalloc(&slot.cublasWorkspace, kCublasWorkspaceBytes));
    c.slots.push_back(slot);
  }
  c.slots[c.current].workspace = c.workspace;
  c.slots[c.current].workspaceBytes = c.workspaceBytes;
  const StreamSlot& next = c.slots[k];
  c.current = k;
  c.stream = next.stream;
  c.workspace = next.workspace;
  c.workspaceBytes = next.workspaceBytes;
  c.cublasWorkspace = next.cublasWorkspace;
  LWRT_CUDNN(cudnnSetStream(c.cudnn, c.stream));
  // cublasSetStream returns cuBLAS to its default workspace: set ours again.
  LWRT_CUBLAS(cublasSetStream(c.cublas, c.stream));
  LWRT_CUBLAS(cublasSetWorkspace(c.cublas, c.cublasWorkspace, kCublasWorkspaceBytes));
  return true;
}

namespace {
bool event(int64_t id, cudaEvent_t*& out) {
  Context& c = context();
  if (id < 0 || id > (int64_t{1} << 20))
    return fail(__FILE__, __LINE__, "event " + std::to_string(id) + " is out of range");
  while (c.events.size() <= static_cast<size_t>(id)) {
    cudaEvent_t e;
    LWRT_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    c.events.push_back(e);
  }
  out = &c.events[static_cast<size_t>(id)];
  return true;
}
} // namespace

bool recordEvent(int64_t id) {
  cudaEvent_t* e = nullptr;
  if (!event(id, e))
    return false;
  LWRT_CUDA(cudaEventRecord(*e, context().stream));
  return true;
}

bool waitEvent(int64_t id) {
  cudaEvent_t* e = nullptr;
  if (!event(id, e))
    return false;
  LWRT_CUDA(cudaStreamWaitEvent(context().stream, *e, 0));
  return true;
}

} // namespace lwrt::cuda
