// emu/Runtime.cpp - the emulated device's CUDA runtime API: devices, memory, copies, errors
//
// Devices: LWEMU_DEVICES of them (default 8, as a DGX H100), each with an
// H100 SXM's properties (sm_90, 132 SMs, 80 GB), named "emulated GPU (NVIDIA
// H100 80GB HBM3)" so that a trainer's first line says what it runs on.
// Device memory is host memory aligned to 256 bytes as cudaMalloc's,
// recorded with its device in the allocation table that every copy and
// library call checks; an allocation past the device's memory fails with
// cudaErrorMemoryAllocation. cudaFree synchronizes the device first, as
// it does on a GPU, and fills the freed bytes with 0xff (NaN in every
// float type), so a kernel that reads freed memory computes NaN. Each
// device's most bytes held at once is kept; with LWEMU_MEMORY_PEAKS=FILE
// the process writes them there as it exits, one "device BYTES" line per
// device that held any (a test's measure of a trainer's peak, transients
// included, which cudaMemGetInfo after a step cannot see).
//
// Copies follow the documented behaviour of each kind: a host-to-device
// cudaMemcpyAsync from pageable memory takes the source at the call, one
// from pinned memory (cudaHostAlloc) when it runs; a device-to-host one to
// pageable memory returns only when the copy is done, to pinned memory at
// once. A copy whose pointers do not lie where its kind says, or outside
// an allocation, is cudaErrorInvalidValue.
#include "Internal.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace lwemu {

namespace {

struct Allocation {
  size_t bytes;
  int device;
};

struct Memory {
  std::mutex m;
  std::map<uintptr_t, Allocation> device; ///< base -> allocation
  std::map<uintptr_t, size_t> pinned;
  std::vector<size_t> used; ///< per device
  std::vector<size_t> peak; ///< per device: the most `used` has been
  std::vector<std::vector<char>> peers;
};

constexpr size_t kH100Memory = 85'520'809'984; // 79.6 GiB, as an H100 80GB reports

void writePeaks();

Memory& mem() {
  static Memory* m = [] {
    if (std::getenv("LWEMU_MEMORY_PEAKS"))
      std::atexit(writePeaks);
    return new Memory; // never destroyed: workers may outlive main
  }();
  return *m;
}

/// LWEMU_MEMORY_PEAKS's file, written at exit (see the top).
void writePeaks() {
  Memory& M = mem();
  std::lock_guard<std::mutex> lock(M.m);
  FILE* f = std::fopen(std::getenv("LWEMU_MEMORY_PEAKS"), "w");
  if (!f)
    return;
  for (size_t d = 0; d < M.peak.size(); ++d)
    if (M.peak[d] > 0)
      std::fprintf(f, "%zu %zu\n", d, M.peak[d]);
  std::fclose(f);
}

/// Counts `bytes` more held on `device` (lock held): false, counting
/// nothing, where the device has not that much left.
bool hold(Memory& M, int device, size_t bytes) {
  if (M.used.empty()) {
    M.used.assign(static_cast<size_t>(deviceCount()), 0);
    M.peak.assign(M.used.size(), 0);
  }
  size_t& used = M.used[static_cast<size_t>(device)];
  if (bytes > kH100Memory - used)
    return false;
  used += bytes;
  M.peak[static_cast<size_t>(device)] = std::max(M.peak[static_cast<size_t>(device)], used);
  return true;
}

thread_local int tlsDevice = 0;
thread_local cudaError_t tlsLastError = cudaSuccess;

/// The allocation holding [p, p + n) (lock held), or null.
const Allocation* find(std::map<uintptr_t, Allocation>& table, const void* p, size_t n) {
  auto a = reinterpret_cast<uintptr_t>(p);
  auto it = table.upper_bound(a);
  if (it == table.begin())
    return nullptr;
  --it;
  if (a < it->first || a + n > it->first + it->second.bytes || a + n < a)
    return nullptr;
  return &it->second;
}

bool isPinned(const void* p, size_t n) {
  Memory& M = mem();
  std::lock_guard<std::mutex> lock(M.m);
  auto a = reinterpret_cast<uintptr_t>(p);
  auto it = M.pinned.upper_bound(a);
  if (it == M.pinned.begin())
    return false;
  --it;
  return a >= it->first && a + n <= it->first + it->second;
}

/// Whether the pointer is device memory (the whole range in one allocation),
/// host memory (no byte of it in an allocation), or neither (straddles).
enum class Where { Device, Host, Bad };
Where where(const void* p, size_t n, int* device) {
  Memory& M = mem();
  std::lock_guard<std::mutex> lock(M.m);
  if (const Allocation* a = find(M.device, p, n)) {
    if (device)
      *device = a->device;
    return Where::Device;
  }
  return find(M.device, p, 1) || (n > 0 && find(M.device, static_cast<const char*>(p) + n - 1, 1))
             ? Where::Bad
             : Where::Host;
}

cudaDeviceProp h100(int index) {
  cudaDeviceProp p;
  std::memset(&p, 0, sizeof p);
  std::snprintf(p.name, sizeof p.name, "emulated GPU (NVIDIA H100 80GB HBM3)");
  p.totalGlobalMem = kH100Memory;
  p.sharedMemPerBlock = 48 * 1024;
  p.regsPerBlock = 65536;
  p.warpSize = 32;
  p.memPitch = 2147483647;
  p.maxThreadsPerBlock = 1024;
  p.maxThreadsDim[0] = 1024;
  p.maxThreadsDim[1] = 1024;
  p.maxThreadsDim[2] = 64;
  p.maxGridSize[0] = 2147483647;
  p.maxGridSize[1] = 65535;
  p.maxGridSize[2] = 65535;
  p.totalConstMem = 65536;
  p.major = 9;
  p.minor = 0;
  p.textureAlignment = 512;
  p.multiProcessorCount = 132;
  p.integrated = 0;
  p.canMapHostMemory = 1;
  p.concurrentKernels = 1;
  p.pciBusID = 0x18 + index;
  p.pciDeviceID = 0;
  p.pciDomainID = 0;
  p.asyncEngineCount = 2;
  p.unifiedAddressing = 1;
  p.memoryBusWidth = 5120;
  p.l2CacheSize = 52428800;
  p.maxThreadsPerMultiProcessor = 2048;
  p.sharedMemPerMultiprocessor = 233472;
  p.regsPerMultiprocessor = 65536;
  p.managedMemory = 1;
  p.concurrentManagedAccess = 1;
  p.sharedMemPerBlockOptin = 232448;
  p.maxBlocksPerMultiProcessor = 32;
  return p;
}

bool validDevice(int d) { return d >= 0 && d < deviceCount(); }

/// Copies rows of `width` bytes, `height` of them, between pitched buffers.
void copyRows(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
              size_t height) {
  for (size_t r = 0; r < height; ++r)
    std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch,
                 width);
}

/// The bytes a pitched region of `height` rows spans.
size_t span(size_t pitch, size_t width, size_t height) {
  return height == 0 ? 0 : (height - 1) * pitch + width;
}

/// Checks a copy's pointers against its kind: nullptr when they fit.
cudaError_t checkKind(void* dst, size_t dbytes, const void* src, size_t sbytes,
                      cudaMemcpyKind kind) {
  Where d = where(dst, dbytes, nullptr), s = where(src, sbytes, nullptr);
  if (d == Where::Bad || s == Where::Bad)
    return cudaErrorInvalidValue;
  bool ok = true;
  switch (kind) {
  case cudaMemcpyHostToDevice:
    ok = s == Where::Host && d == Where::Device;
    break;
  case cudaMemcpyDeviceToHost:
    ok = s == Where::Device && d == Where::Host;
    break;
  case cudaMemcpyDeviceToDevice:
    ok = s == Where::Device && d == Where::Device;
    break;
  case cudaMemcpyHostToHost:
    ok = s == Where::Host && d == Where::Host;
    break;
  case cudaMemcpyDefault:
    break;
  default:
    return cudaErrorInvalidMemcpyDirection;
  }
  return ok ? cudaSuccess : cudaErrorInvalidValue;
}

/// A pitched copy on `stream` with the documented host-memory behaviour.
cudaError_t copy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                   size_t height, cudaMemcpyKind kind, cudaStream_t stream, bool sync,
                   const char* call) {
  if (width > dpitch || width > spitch)
    return fail(cudaErrorInvalidPitchValue);
  if (width == 0 || height == 0)
    return cudaSuccess;
  size_t dbytes = span(dpitch, width, height), sbytes = span(spitch, width, height);
  if (cudaError_t e = checkKind(dst, dbytes, src, sbytes, kind))
    return fail(e);
  if (!validStream(stream))
    return fail(cudaErrorInvalidResourceHandle);
  // Overlapping source and destination: undefined for every CUDA copy.
  auto d0 = reinterpret_cast<uintptr_t>(dst), s0 = reinterpret_cast<uintptr_t>(src);
  if (d0 < s0 + sbytes && s0 < d0 + dbytes)
    fatal(std::string(call) +
          ": the source and destination overlap (undefined behaviour on a GPU)");
  bool hostSrc = where(src, sbytes, nullptr) == Where::Host;
  bool hostDst = where(dst, dbytes, nullptr) == Where::Host;
  if ((sync || (hostDst && !isPinned(dst, dbytes))) && captureForbids(call))
    return fail(cudaErrorStreamCaptureUnsupported);
  std::function<void()> work;
  if (hostSrc && !isPinned(src, sbytes)) { // pageable: staged at the call
    auto staged = std::make_shared<std::vector<char>>(width * height);
    copyRows(staged->data(), width, src, spitch, width, height);
    work = [=] { copyRows(dst, dpitch, staged->data(), width, width, height); };
  } else {
    work = [=] { copyRows(dst, dpitch, src, spitch, width, height); };
  }
  if (cudaError_t e = enqueue(stream, call, std::move(work)))
    return fail(e);
  if (sync || (hostDst && !isPinned(dst, dbytes)))
    waitStream(stream, call);
  return cudaSuccess;
}

} // namespace

[[noreturn]] void fatal(const std::string& what) {
  std::fprintf(stderr, "emulated GPU: %s\n  while running: %s\n%s", what.c_str(),
               runningTask().c_str(), describeStreams().c_str());
  std::fflush(stderr);
  std::abort();
}

int deviceCount() {
  static int n = [] {
    const char* v = std::getenv("LWEMU_DEVICES");
    int k = v ? std::atoi(v) : 8;
    return k >= 1 && k <= 64 ? k : 8;
  }();
  return n;
}

int currentDevice() { return tlsDevice; }
void setCurrentDevice(int device) { tlsDevice = device; }

cudaError_t fail(cudaError_t e) {
  tlsLastError = e;
  return e;
}

bool findAllocation(const void* p, size_t bytes, int* device) {
  Memory& M = mem();
  std::lock_guard<std::mutex> lock(M.m);
  const Allocation* a = find(M.device, p, bytes == 0 ? 1 : bytes);
  if (a && device)
    *device = a->device;
  return a != nullptr;
}

void checkDevice(const void* p, size_t bytes, const char* what) {
  if (bytes == 0)
    return;
  if (!findAllocation(p, bytes)) {
    char where[64];
    std::snprintf(where, sizeof where, "%p", p);
    fatal(std::string(what) + ": " + std::to_string(bytes) + " bytes at " + where +
          " are not inside one device allocation (an illegal address on a GPU)");
  }
}

size_t deviceMemoryTotal() { return kH100Memory; }

bool holdDeviceMemory(int device, size_t bytes) {
  Memory& M = mem();
  std::lock_guard<std::mutex> lock(M.m);
  return hold(M, device, bytes);
}

void releaseDeviceMemory(int device, size_t bytes) {
  Memory& M = mem();
  std::lock_guard<std::mutex> lock(M.m);
  M.used[static_cast<size_t>(device)] -= bytes;
}

} // namespace lwemu

using namespace lwemu;

extern "C" {

cudaError_t cudaGetDeviceCount(int* n) {
  if (!n)
    return fail(cudaErrorInvalidValue);
  *n = deviceCount();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int d) {
  if (!validDevice(d))
    return fail(cudaErrorInvalidDevice);
  setCurrentDevice(d);
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* d) {
  if (!d)
    return fail(cudaErrorInvalidValue);
  *d = currentDevice();
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (!p)
    return fail(cudaErrorInvalidValue);
  if (!validDevice(d))
    return fail(cudaErrorInvalidDevice);
  *p = h100(d);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int d) {
  if (!value)
    return fail(cudaErrorInvalidValue);
  if (!validDevice(d))
    return fail(cudaErrorInvalidDevice);
  cudaDeviceProp p = h100(d);
  switch (attr) {
  case cudaDevAttrMultiProcessorCount:
    *value = p.multiProcessorCount;
    return cudaSuccess;
  case cudaDevAttrComputeCapabilityMajor:
    *value = p.major;
    return cudaSuccess;
  case cudaDevAttrComputeCapabilityMinor:
    *value = p.minor;
    return cudaSuccess;
  case cudaDevAttrMaxThreadsPerBlock:
    *value = p.maxThreadsPerBlock;
    return cudaSuccess;
  case cudaDevAttrMaxSharedMemoryPerBlock:
    *value = static_cast<int>(p.sharedMemPerBlock);
    return cudaSuccess;
  default:
    return fail(cudaErrorInvalidValue);
  }
}

cudaError_t cudaDeviceGetPCIBusId(char* out, int len, int d) {
  if (!out || len <= 0)
    return fail(cudaErrorInvalidValue);
  if (!validDevice(d))
    return fail(cudaErrorInvalidDevice);
  std::snprintf(out, static_cast<size_t>(len), "00000000:%02X:00.0", h100(d).pciBusID);
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* v) {
  if (!v)
    return fail(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* v) {
  if (!v)
    return fail(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = tlsLastError;
  tlsLastError = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return tlsLastError; }

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
  case cudaSuccess:
    return "cudaSuccess";
  case cudaErrorInvalidValue:
    return "cudaErrorInvalidValue";
  case cudaErrorMemoryAllocation:
    return "cudaErrorMemoryAllocation";
  case cudaErrorInvalidConfiguration:
    return "cudaErrorInvalidConfiguration";
  case cudaErrorInvalidDevice:
    return "cudaErrorInvalidDevice";
  case cudaErrorInvalidResourceHandle:
    return "cudaErrorInvalidResourceHandle";
  case cudaErrorNotReady:
    return "cudaErrorNotReady";
  case cudaErrorStreamCaptureUnsupported:
    return "cudaErrorStreamCaptureUnsupported";
  case cudaErrorStreamCaptureInvalidated:
    return "cudaErrorStreamCaptureInvalidated";
  default:
    return "cudaError";
  }
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case cudaSuccess:
    return "no error";
  case cudaErrorInvalidValue:
    return "invalid argument";
  case cudaErrorMemoryAllocation:
    return "out of memory";
  case cudaErrorInvalidConfiguration:
    return "invalid configuration argument";
  case cudaErrorInvalidDevice:
    return "invalid device ordinal";
  case cudaErrorInvalidResourceHandle:
    return "invalid resource handle";
  case cudaErrorNotReady:
    return "device not ready";
  case cudaErrorInvalidPitchValue:
    return "invalid pitch argument";
  case cudaErrorInvalidMemcpyDirection:
    return "invalid copy direction for memcpy";
  case cudaErrorPeerAccessAlreadyEnabled:
    return "peer access is already enabled";
  case cudaErrorPeerAccessNotEnabled:
    return "peer access has not been enabled";
  case cudaErrorStreamCaptureUnsupported:
    return "operation not permitted when stream is capturing";
  case cudaErrorStreamCaptureInvalidated:
    return "operation failed due to a previous error during capture";
  case cudaErrorStreamCaptureUnjoined:
    return "capture was not joined back into the origin stream";
  case cudaErrorStreamCaptureIsolation:
    return "dependency created on uncaptured work in another stream";
  case cudaErrorStreamCaptureImplicit:
    return "operation would make the legacy stream depend on a capturing blocking stream";
  case cudaErrorStreamCaptureWrongThread:
    return "attempt to terminate a thread-local capture sequence from another thread";
  case cudaErrorStreamCaptureUnmatched:
    return "the capture sequence was not initiated in this stream";
  case cudaErrorIllegalState:
    return "the operation is not permitted in the current state";
  default:
    return "unknown error";
  }
}

cudaError_t cudaMalloc(void** out, size_t bytes) {
  if (!out)
    return fail(cudaErrorInvalidValue);
  if (captureForbids("cudaMalloc"))
    return fail(cudaErrorStreamCaptureUnsupported);
  *out = nullptr;
  if (bytes == 0)
    return cudaSuccess;
  Memory& M = mem();
  int d = currentDevice();
  {
    std::lock_guard<std::mutex> lock(M.m);
    if (!hold(M, d, bytes)) // counted now: two threads cannot both take the last bytes
      return fail(cudaErrorMemoryAllocation);
  }
  size_t rounded = (bytes + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, rounded);
  std::lock_guard<std::mutex> lock(M.m);
  if (!p) {
    M.used[static_cast<size_t>(d)] -= bytes;
    return fail(cudaErrorMemoryAllocation);
  }
  std::memset(p, 0xff, rounded); // device memory starts as garbage, not zeros
  M.device[reinterpret_cast<uintptr_t>(p)] = Allocation{bytes, d};
  *out = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  if (!p)
    return cudaSuccess;
  if (captureForbids("cudaFree"))
    return fail(cudaErrorStreamCaptureUnsupported);
  Memory& M = mem();
  Allocation a;
  {
    std::lock_guard<std::mutex> lock(M.m);
    auto it = M.device.find(reinterpret_cast<uintptr_t>(p));
    if (it == M.device.end())
      return fail(cudaErrorInvalidValue);
    a = it->second;
  }
  waitDevice(a.device, "cudaFree"); // cudaFree synchronizes the device
  std::lock_guard<std::mutex> lock(M.m);
  M.device.erase(reinterpret_cast<uintptr_t>(p));
  M.used[static_cast<size_t>(a.device)] -= a.bytes;
  std::memset(p, 0xff, a.bytes);
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* freeBytes, size_t* total) {
  if (!freeBytes || !total)
    return fail(cudaErrorInvalidValue);
  Memory& M = mem();
  std::lock_guard<std::mutex> lock(M.m);
  size_t used = M.used.empty() ? 0 : M.used[static_cast<size_t>(currentDevice())];
  *total = kH100Memory;
  *freeBytes = kH100Memory - used;
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** out, size_t bytes, unsigned int flags) {
  if (!out || (flags & ~(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined)))
    return fail(cudaErrorInvalidValue);
  if (captureForbids("cudaHostAlloc"))
    return fail(cudaErrorStreamCaptureUnsupported);
  size_t rounded = (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096;
  void* p = std::aligned_alloc(4096, rounded);
  if (!p)
    return fail(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> lock(mem().m);
  mem().pinned[reinterpret_cast<uintptr_t>(p)] = bytes;
  *out = p;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** out, size_t bytes) { return cudaHostAlloc(out, bytes, 0); }

cudaError_t cudaFreeHost(void* p) {
  if (!p)
    return cudaSuccess;
  if (captureForbids("cudaFreeHost"))
    return fail(cudaErrorStreamCaptureUnsupported);
  {
    std::lock_guard<std::mutex> lock(mem().m);
    if (!mem().pinned.erase(reinterpret_cast<uintptr_t>(p)))
      return fail(cudaErrorInvalidValue);
  }
  for (int d = 0; d < deviceCount(); ++d) // synchronizes like cudaFree
    waitDevice(d, "cudaFreeHost");
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return copy2D(dst, n, src, n, n, 1, kind, stream, false, "cudaMemcpyAsync");
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  return copy2D(dst, n, src, n, n, 1, kind, nullptr, true, "cudaMemcpy");
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream) {
  return copy2D(dst, dpitch, src, spitch, width, height, kind, stream, false, "cudaMemcpy2DAsync");
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dstDevice, const void* src, int srcDevice, size_t n,
                                cudaStream_t stream) {
  if (!validDevice(dstDevice) || !validDevice(srcDevice))
    return fail(cudaErrorInvalidDevice);
  int ds = -1, ss = -1;
  if (n > 0 && (where(dst, n, &ds) != Where::Device || where(src, n, &ss) != Where::Device ||
                ds != dstDevice || ss != srcDevice))
    return fail(cudaErrorInvalidValue);
  return copy2D(dst, n, src, n, n, 1, cudaMemcpyDeviceToDevice, stream, false,
                "cudaMemcpyPeerAsync");
}

cudaError_t cudaMemcpy3DPeerAsync(const cudaMemcpy3DPeerParms* p, cudaStream_t stream) {
  if (!p || p->srcArray || p->dstArray)
    return fail(cudaErrorInvalidValue);
  if (!validDevice(p->dstDevice) || !validDevice(p->srcDevice))
    return fail(cudaErrorInvalidDevice);
  const cudaExtent& e = p->extent;
  if (e.depth != 1 || p->srcPos.z != 0 || p->dstPos.z != 0) // lwcc copies 2D regions only
    return fail(cudaErrorInvalidValue);
  const char* src =
      static_cast<const char*>(p->srcPtr.ptr) + p->srcPos.y * p->srcPtr.pitch + p->srcPos.x;
  char* dst = static_cast<char*>(p->dstPtr.ptr) + p->dstPos.y * p->dstPtr.pitch + p->dstPos.x;
  size_t sb = span(p->srcPtr.pitch, e.width, e.height),
         db = span(p->dstPtr.pitch, e.width, e.height);
  int ds = -1, ss = -1;
  if (sb > 0 && (where(dst, db, &ds) != Where::Device || where(src, sb, &ss) != Where::Device ||
                 ds != p->dstDevice || ss != p->srcDevice))
    return fail(cudaErrorInvalidValue);
  return copy2D(dst, p->dstPtr.pitch, src, p->srcPtr.pitch, e.width, e.height,
                cudaMemcpyDeviceToDevice, stream, false, "cudaMemcpy3DPeerAsync");
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  if (where(p, n, nullptr) != Where::Device)
    return fail(cudaErrorInvalidValue);
  if (cudaError_t e = enqueue(stream, "cudaMemsetAsync", [=] { std::memset(p, value, n); }))
    return fail(e);
  return cudaSuccess;
}

cudaError_t cudaMemset(void* p, int value, size_t n) {
  return cudaMemsetAsync(p, value, n, nullptr);
}

cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  if (!can)
    return fail(cudaErrorInvalidValue);
  if (!validDevice(device) || !validDevice(peer))
    return fail(cudaErrorInvalidDevice);
  *can = device != peer; // NVLink between every pair, as on an HGX H100
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags) {
  if (flags != 0)
    return fail(cudaErrorInvalidValue);
  if (!validDevice(peer) || peer == currentDevice())
    return fail(cudaErrorInvalidDevice);
  Memory& M = mem();
  std::lock_guard<std::mutex> lock(M.m);
  if (M.peers.empty())
    M.peers.assign(static_cast<size_t>(deviceCount()),
                   std::vector<char>(static_cast<size_t>(deviceCount()), 0));
  char& on = M.peers[static_cast<size_t>(currentDevice())][static_cast<size_t>(peer)];
  if (on)
    return fail(cudaErrorPeerAccessAlreadyEnabled);
  on = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceReset(void) {
  waitDevice(currentDevice(), "cudaDeviceReset");
  return cudaSuccess;
}

} // extern "C"
