// cpu/Parallel.h - the CPU kernels' thread pool (not installed)
// defines: poolThreads, parallelFor, parallelChunks
//
// The pool is OpenMP's (libgomp). Debian's oneDNN is built on OpenMP, so
// its primitives and these loops share one team of threads per calling
// thread; OpenBLAS runs single-threaded on those threads (cpu/Blas.h
// splits a product between them). Each thread that runs a step (the
// trainer's main thread, or a multi-device trainer's stream threads) sets
// its own team size (setThreads, lwrt/cpu_threads.h). The loops enter the
// team through libgomp's entry point for a parallel region (runTeam in
// Parallel.cpp) rather than `#pragma omp`, so that any compiler builds them
// and ThreadSanitizer is told of the region's fork and join.
//
// Splits depend only on the sizes and the team size, never on timing, so a
// kernel gives the same bits whenever it runs with the same thread count;
// parallelChunks' chunks do not even depend on the thread count.
#pragma once

#include <algorithm>
#include <cstdint>

namespace lwrt::cpu::detail {

/// The calling thread's team size (setThreads), 1 inside a parallel loop.
int poolThreads();

/// Runs body(context, t, team) on `parts` threads of the caller's team
/// (fewer if the pool gives fewer), t = 0 .. team - 1, the caller being
/// t = 0; returns when all have returned.
void runTeam(int parts, void (*body)(void* context, int t, int team), void* context);

/// Calls fn(begin, end) for contiguous ranges covering [0, n), one per
/// thread of the calling thread's team, each of at least `grain` items
/// (except when n is smaller), in parallel. The ranges depend on n, grain
/// and the team size only.
template <typename Fn> void parallelFor(int64_t n, int64_t grain, const Fn& fn) {
  if (n <= 0)
    return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t parts = std::min<int64_t>(poolThreads(), (n + grain - 1) / grain);
  if (parts <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  struct Loop {
    int64_t n;
    const Fn* fn;
  } loop{n, &fn};
  runTeam(
      static_cast<int>(parts),
      [](void* context, int t, int team) {
        const Loop& l = *static_cast<const Loop*>(context);
        const int64_t begin = l.n * t / team, end = l.n * (t + 1) / team;
        if (begin < end)
          (*l.fn)(begin, end);
      },
      &loop);
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
