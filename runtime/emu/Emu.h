// emu/Emu.h - the emulated CUDA device's internals, shared by its files
// defines: fatal, hangSeconds, checkDevice, findAllocation, deviceCount, currentDevice,
//          streamDevice, enqueue, captureForbids, Blocked, describeStreams
//
// The emulated CUDA device is a test device: the unchanged CUDA runtime of
// lwcc (runtime/cuda) and a generated trainer.cu, compiled as host C++,
// run against an emulation of the CUDA runtime API (Runtime.cpp), of kernel
// launches (Launch.cpp), of cuBLAS (Cublas.cpp), of cuDNN (Cudnn.cpp) and of
// NCCL (Nccl.cpp), each written from the documented semantics of the real
// thing. It never makes a CUDA code path easier than a GPU would: what the
// hardware or a library refuses, it refuses with the same error code, and
// what would crash or hang a GPU run stops the emulated run with a message
// (fatal) naming the call or kernel.
//
// Device memory is host memory handed out by cudaMalloc and recorded in an
// allocation table: every library call checks its pointers against it
// (checkDevice), and kernels' accesses are checked by AddressSanitizer when
// the emulated build uses it.
//
// Streams: each stream is a worker thread running its queue of tasks in
// order; library calls validate their arguments at the call (returning the
// library's error status there, as the real libraries do) and enqueue the
// computation on the stream bound to their handle (enqueue), which records
// it into a CUDA graph instead while that stream is being captured.
#pragma once

#include <cstddef>
#include <cuda_runtime_api.h>
#include <functional>
#include <string>

namespace lwemu {

/// Stops the run: prints "emulated GPU: <what>" and every stream's state to
/// stderr and aborts. For what would crash, fault or hang a real GPU.
[[noreturn]] void fatal(const std::string& what);

/// Seconds a wait may make no progress before it is reported as a hang
/// (LWEMU_HANG_SECONDS, default 30).
int hangSeconds();

/// The live device allocation holding [p, p + bytes), or false. `device`
/// (when not null) receives its device.
bool findAllocation(const void* p, size_t bytes, int* device = nullptr);

/// fatal() unless [p, p + bytes) lies inside one live device allocation;
/// `what` names the call and operand ("cudnnConvolutionForward: x").
/// bytes == 0 checks nothing.
void checkDevice(const void* p, size_t bytes, const char* what);

/// The number of emulated devices (LWEMU_DEVICES, default 8).
int deviceCount();

/// The device cudaSetDevice made current on the calling host thread.
int currentDevice();

/// The device a stream belongs to (the current device for the legacy
/// default stream, nullptr).
int streamDevice(cudaStream_t s);

/// Runs `work` on stream `s` after everything queued on it before (the
/// legacy default stream, nullptr, with its implicit synchronization), or
/// records it into the CUDA graph being captured on `s`. `name` names the
/// work in reports (the library call). Returns cudaErrorInvalidResourceHandle
/// for a destroyed stream, cudaSuccess otherwise.
cudaError_t enqueue(cudaStream_t s, std::string name, std::function<void()> work);

/// For a call that synchronizes or allocates (cudnnFind*, a blocking
/// copy): true when the calling host thread may not make it now because a
/// stream capture in global or thread-local mode is under way on it (or,
/// for global mode, on any thread); the capture is then invalidated, as
/// CUDA does. The caller returns its library's error.
bool captureForbids(const char* call);

/// Marks the calling thread (a stream worker, or a host thread in a
/// synchronizing call) as waiting for `what` while it lives; hang reports
/// list the marks (describeStreams).
class Blocked {
public:
  explicit Blocked(std::string what);
  ~Blocked();
  Blocked(const Blocked&) = delete;
  Blocked& operator=(const Blocked&) = delete;

private:
  std::string previous_;
};

/// One line per stream and blocked thread: its device, the task it runs or
/// what it waits for, and how many tasks are queued behind it.
std::string describeStreams();

} // namespace lwemu
