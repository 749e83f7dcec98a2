// cpu/Parallel.h - the CPU kernels' thread pool (not installed)
// defines: poolThreads, parallelFor, parallelChunks
//
// The pool is OpenMP's (libgomp). Debian's oneDNN is built on OpenMP, so
// its primitives and these loops share one team of threads per calling
// thread; OpenBLAS runs single-threaded on those threads (NNKernels.cpp
// splits a product between them). Each thread that runs a step (the
// trainer's main thread, or a multi-device trainer's stream threads) sets
// its own team size (setThreads, lwrt/cpu_threads.h).
//
// Splits depend only on the sizes and the team size, never on timing, so a
// kernel gives the same bits whenever it runs with the same thread count;
// parallelChunks' chunks do not even depend on the thread count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <omp.h>

// ThreadSanitizer does not see libgomp's fork and join (libgomp is not
// instrumented), so the loops below tell it: everything the calling thread
// did before a loop happens before each chunk, and each chunk before what
// the caller does after it.
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#define LWRT_TSAN_ACQUIRE(addr) __tsan_acquire(addr)
#define LWRT_TSAN_RELEASE(addr) __tsan_release(addr)
#else
#define LWRT_TSAN_ACQUIRE(addr) ((void)(addr))
#define LWRT_TSAN_RELEASE(addr) ((void)(addr))
#endif

namespace lwrt::cpu::detail {

/// The calling thread's team size (setThreads), 1 inside a parallel loop.
inline int poolThreads() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

/// Calls fn(begin, end) for contiguous ranges covering [0, n), one per
/// thread of the calling thread's team, each of at least `grain` items
/// (except when n is smaller), in parallel. The ranges depend on n, grain
/// and the team size only.
template <typename Fn> void parallelFor(int64_t n, int64_t grain, const Fn& fn) {
  if (n <= 0)
    return;
  const int64_t parts = std::min<int64_t>(poolThreads(), (n + std::max<int64_t>(grain, 1) - 1) /
                                                             std::max<int64_t>(grain, 1));
  if (parts <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  char fork = 0, join = 0;
  LWRT_TSAN_RELEASE(&fork);
#pragma omp parallel num_threads(static_cast <int>(parts))
  {
    LWRT_TSAN_ACQUIRE(&fork);
    const int64_t t = omp_get_thread_num(), team = omp_get_num_threads();
    const int64_t begin = n * t / team, end = n * (t + 1) / team;
    if (begin < end)
      fn(begin, end);
    LWRT_TSAN_RELEASE(&join);
  }
  LWRT_TSAN_ACQUIRE(&join);
}

/// Calls fn(chunk, begin, end) for the chunks [k*chunk, min(n, (k+1)*chunk))
/// of [0, n), spread over the team. The chunks do not depend on the team
/// size: a reduction that sums per-chunk partials in chunk order gives the
/// same bits with any number of threads.
template <typename Fn> void parallelChunks(int64_t n, int64_t chunk, const Fn& fn) {
  if (n <= 0)
    return;
  chunk = std::max<int64_t>(chunk, 1);
  const int64_t chunks = (n + chunk - 1) / chunk;
  parallelFor(chunks, 1, [&](int64_t first, int64_t last) {
    for (int64_t k = first; k < last; ++k)
      fn(k, k * chunk, std::min(n, (k + 1) * chunk));
  });
}

} // namespace lwrt::cpu::detail
