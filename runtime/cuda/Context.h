// cuda/Context.h - the CUDA backend's per-device state (not installed)
// defines: Context, context, ContextScope, setPrimaryContext, foundCudaVersions,
//          builtCudaVersions, initContext, initStreamContext, destroyContext,
//          ensureWorkspace, runnerContext, fail,
//          LWRT_CUDA, LWRT_CUDNN, LWRT_CUBLAS, kThreads, blocksFor
//
// The generated step calls kernels with TensorViews only (the signatures of
// the CPU backend), so everything else a CUDA kernel needs lives here: the
// stream all work goes to, the cuDNN and cuBLAS handles bound to it, a
// shared workspace, the TF32 switch, and the first error.
//
// Which context: each runner (one per logical device) owns one, and a
// multi-device group adds one per further (device, stream) of the step.
// Kernels find theirs with context(): the context the calling host thread
// made current (ContextScope, which also selects its GPU; the runner does
// it around each of its calls, the group once on each worker thread), or
// else the primary one (the first runner's), so that a single-device
// trainer behaves as with one process-wide context. A context is used by
// one host thread at a time.
//
// Errors: every CUDA, cuDNN and cuBLAS call goes through LWRT_CUDA /
// LWRT_CUDNN / LWRT_CUBLAS, which on failure record "file:line: call:
// library error string" as the context's error (the first one wins) and
// make the enclosing kernel return false. Data errors found on the device
// (a label out of range) set *errorFlag, which the runner reads after a
// step; kernels never trap.
//
// Capture: while `capturing` is set the step is being recorded into a CUDA
// graph; kernels then must not allocate, synchronize or run algorithm
// searches (they use what the first, uncaptured step set up). A recorded
// graph holds the workspace addresses of its capture: when a later
// uncaptured phase (an evaluation pass with a new convolution
// configuration) grows a workspace, the old one is freed only after the
// device is idle, and `workspaceGeneration` changes so that the runner
// records its graphs again before replaying them.
//
// Ordering: all work goes to the context's non-blocking streams, never to
// the legacy default stream (a cudaMemset there is unordered with them).
#pragma once

#include "cuda/Preflight.h"

#include <cstddef>
#include <cstdint>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <memory>
#include <string>
#include <vector>

namespace lwrt {
class StepRunner;
}

namespace lwrt::cuda {

/// Device-side error codes written to Context::errorFlag.
enum DeviceError : int {
  kNoDeviceError = 0,
  kLabelOutOfRange = 1,
  kIndexOutOfRange = 2,
  kIntegerDivision = 3, ///< an integer division by zero or INT_MIN / -1
};

/// A stream of the step's schedule with the scratch memory of the work on
/// it (two streams must not share a workspace).
struct StreamSlot {
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  size_t workspaceBytes = 0;
  void* cublasWorkspace = nullptr;
};

struct Context {
  int device = -1; ///< the physical GPU
  cudaStream_t stream = nullptr;
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;
  /// TF32 tensor cores for F32 convolutions (cuDNN) and matrix products
  /// (cuBLAS's math mode): lwrt::Tf32.
  bool convTf32 = true, gemmTf32 = false;
  /// Pooling, LRN, batch norm and softmax on cuDNN where it covers the op
  /// (false: the own kernels, --kernels=own).
  bool cudnnOps = true;
  bool capturing = false;
  /// Convolutions on cuDNN's graph API (false: the legacy API for all), and
  /// how many configurations each API got.
  bool convGraphApi = true;
  /// Choose convolution algorithms and engines by timing them (--autotune=
  /// cache or timed); by cuDNN's heuristics, without timing, otherwise.
  bool timeAlgorithms = false;
  /// Take the choices of the process's autotune cache (lwrt/autotune.h),
  /// and record there what timing chose (--autotune=cache), under
  /// `autotuneDevice`: the GPU, its architecture and the library versions.
  bool autotuneCache = false;
  std::string autotuneDevice;
  /// The most workspace a convolution's algorithm or engine may take (at
  /// most kConvWorkspaceLimit): what lwcc's memory plan left the device's
  /// streams (lwrt::RunnerOptions::convWorkspaceBytes).
  size_t convWorkspaceLimit = size_t(1) << 30;
  /// The most workspace a convolution plan of this context took.
  size_t convWorkspaceMost = 0;
  int convPlansGraph = 0, convPlansLegacy = 0;
  /// Forward configurations whose bias (and ReLU) run in the convolution's
  /// graph-API plan.
  int convPlansFused = 0;
  /// How many configurations fell back to the legacy API because the graph
  /// API failed on them (not merely had no engine), and the first reason.
  int convGraphFailures = 0;
  std::string convGraphFailure;
  void* workspace = nullptr;
  size_t workspaceBytes = 0;
  /// Changes whenever a workspace is replaced: graphs recorded before
  /// then hold a freed address and must be recorded again.
  uint64_t workspaceGeneration = 0;
  int* errorFlag = nullptr;        ///< device memory, one int (DeviceError)
  void* cublasWorkspace = nullptr; ///< cuBLAS's own, fixed: it must not allocate while captured
  std::string error;               ///< the first failure, "" while none
  /// The streams of the schedule (#0 is `stream` at start) and the one in
  /// use, whose stream and workspaces the fields above hold; the events.
  std::vector<StreamSlot> slots;
  size_t current = 0;
  std::vector<cudaEvent_t> events;
  /// False for a stream context of a group, which shares its device's flag.
  bool ownsErrorFlag = true;
  /// A multi-device group's context: a replaced workspace is kept until the
  /// step's functions have all returned (freeReplaced) instead of freed on
  /// an idle device at once (a device-wide wait mid-step could wait for a
  /// collective whose peer needs this thread).
  bool keepReplaced = false;
  std::vector<void*> replaced;
  /// The convolution plans made with this context's cuDNN handle
  /// (ConvKernels.cu owns the type). Released before the handle: a plan
  /// must not outlive the handle it was made with.
  std::shared_ptr<void> convPlans;
};

/// The calling thread's current context, else the primary one.
Context& context();
/// The context of threads that set none: the first runner's (null: none).
void setPrimaryContext(Context* c);
Context* primaryContext();

/// Makes `c` the calling thread's current context and selects its GPU for
/// the scope; restores the previous one after.
class ContextScope {
public:
  explicit ContextScope(Context& c);
  ~ContextScope();
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

private:
  Context* previous_;
};

/// The context of a CUDA runner of this process (null for another runner).
Context* runnerContext(const StepRunner* runner);

/// The versions of the driver and libraries this process found, and the
/// ones it was built against (cuda/Preflight.h checks them).
CudaVersions foundCudaVersions();
CudaVersions builtCudaVersions();

/// Selects `device`, creates the stream, the handles (cuBLAS's math mode from
/// `gemmTf32`) and the error flag in `c`. False with `error` set, e.g. when
/// there is no GPU.
bool initContext(Context& c, int device, bool convTf32, bool gemmTf32, std::string* error);
/// A further stream of `base`'s device for a multi-device group: its own
/// stream, handles and workspaces, `base`'s settings and error flag.
bool initStreamContext(Context& c, const Context& base, std::string* error);
/// Releases everything initContext made; safe to call twice.
void destroyContext(Context& c);

/// Makes the workspace at least `bytes` (rounded up to whole MiB). A
/// replaced workspace is freed once the device is idle, and the
/// workspace generation changes. False, with the context's error set, when
/// it cannot be had or the step is being captured and the workspace is too
/// small.
bool ensureWorkspace(size_t bytes);
/// The same where less will do (an algorithm search, which then tries
/// fewer candidates): false, with no error set and no workspace left, when
/// the memory cannot be had.
bool tryWorkspace(size_t bytes);
/// Frees the workspaces a multi-device group's context replaced (see
/// keepReplaced), once nothing can wait for a thread any more: after every
/// function of the step has returned. cudaFree waits for the device.
bool freeReplaced(Context& c);

/// Makes stream `stream` (0..63) current, creating it at first use (not
/// while capturing), with its own workspaces; records and waits on events.
bool setStream(int64_t stream);
bool recordEvent(int64_t event);
bool waitEvent(int64_t event);

/// Records "file:line: what" as the context's error unless one is there;
/// returns false so that kernels can `return fail(...)`.
bool fail(const char* file, int line, const std::string& what);

/// Threads per block of the elementwise kernels, and the grid for n items
/// (grid-stride loops cover the rest).
constexpr int kThreads = 256;
inline unsigned blocksFor(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

} // namespace lwrt::cuda

#define LWRT_CUDA(call)                                                                            \
  do {                                                                                             \
    cudaError_t lwrt_status_ = (call);                                                             \
    if (lwrt_status_ != cudaSuccess)                                                               \
      return ::lwrt::cuda::fail(__FILE__, __LINE__,                                                \
                                std::string(#call) + ": " + cudaGetErrorString(lwrt_status_));     \
  } while (0)

#define LWRT_CUDNN(call)                                                                           \
  do {                                                                                             \
    cudnnStatus_t lwrt_status_ = (call);                                                           \
    if (lwrt_status_ != CUDNN_STATUS_SUCCESS)                                                      \
      return ::lwrt::cuda::fail(__FILE__, __LINE__,                                                \
                                std::string(#call) + ": " + cudnnGetErrorString(lwrt_status_));    \
  } while (0)

#define LWRT_CUBLAS(call)                                                                          \
  do {                                                                                             \
    cublasStatus_t lwrt_status_ = (call);                                                          \
    if (lwrt_status_ != CUBLAS_STATUS_SUCCESS)                                                     \
      return ::lwrt::cuda::fail(__FILE__, __LINE__,                                                \
                                std::string(#call) + ": " + cublasGetStatusString(lwrt_status_));  \
  } while (0)
