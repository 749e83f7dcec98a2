// emu/Internal.h - what the emulated runtime's own files share beyond Emu.h
// defines: Stream, setLastError, fail, validStream, resolveStream, waitStream, waitDevice,
//          activeThreadCapture, kernelName, WorkerScope
#pragma once

#include "Emu.h"

#include <cstdint>
#include <string>

namespace lwemu {

/// Records `e` as the calling thread's last error (cudaGetLastError) and
/// returns it: every runtime call that fails goes through here, as in CUDA.
cudaError_t fail(cudaError_t e);
inline cudaError_t setLastError(cudaError_t e) { return e == cudaSuccess ? e : fail(e); }

/// Whether `s` is a live stream handle (nullptr and the legacy and
/// per-thread handles included).
bool validStream(cudaStream_t s);

/// Waits on the calling host thread until everything queued on `s` so
/// far has run (not allowed while the thread captures: the caller checks).
void waitStream(cudaStream_t s, const char* call);

/// Waits until every stream of `device` is idle.
void waitDevice(int device, const char* call);

/// Whether `s` is being captured (its work is recorded, not run).
bool isCapturing(cudaStream_t s);

/// The report name of the kernel or call the calling worker runs now.
std::string runningTask();

/// Sets the calling thread's current device (stream workers run their
/// tasks on their stream's device).
void setCurrentDevice(int device);

/// The bytes of device memory in use on `device`, and its total.
size_t deviceMemoryTotal();

/// Counts `bytes` of `device`'s memory as held by a library (cuBLAS's and
/// cuDNN's handles: what they take on a GPU, measured on an H100), so that
/// cudaMemGetInfo and a later cudaMalloc see them; false when the device
/// has not that much free. Nothing is allocated: the libraries' emulations
/// keep their state in host memory.
bool holdDeviceMemory(int device, size_t bytes);
void releaseDeviceMemory(int device, size_t bytes);

} // namespace lwemu
