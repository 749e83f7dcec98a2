// cpu/Parallel.cpp - the CPU kernels' threads (lwrt/cpu_threads.h)
#include "Parallel.h"

#include "lwrt/cpu_threads.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>

// libgomp's ABI: the entry point GCC's `#pragma omp parallel` compiles to,
// and the OpenMP routines (declared here rather than through omp.h, which
// Clang does not find without its own OpenMP runtime).
extern "C" {
void GOMP_parallel(void (*fn)(void*), void* data, unsigned numThreads, unsigned flags);
int omp_get_thread_num(void);
int omp_get_num_threads(void);
int omp_get_max_threads(void);
int omp_in_parallel(void);
void omp_set_num_threads(int n);
}

// ThreadSanitizer does not see libgomp's fork and join (libgomp is not
// instrumented): runTeam tells it that what the caller did before the
// region happens before each thread's part, and each part before what the
// caller does after it.
#if defined(__SANITIZE_THREAD__)
#define LWRT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LWRT_TSAN 1
#endif
#endif
#if defined(LWRT_TSAN)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#define LWRT_TSAN_ACQUIRE(addr) __tsan_acquire(addr)
#define LWRT_TSAN_RELEASE(addr) __tsan_release(addr)
#else
#define LWRT_TSAN_ACQUIRE(addr) ((void)(addr))
#define LWRT_TSAN_RELEASE(addr) ((void)(addr))
#endif

namespace lwrt::cpu {

namespace detail {

namespace {

/// One region: the body and its context. Its address is the region's fork
/// (the caller releases it before, each thread acquires it first, through
/// the pointer libgomp passes in a register) and one byte further its join.
struct Job {
  void (*body)(void*, int, int);
  void* context;
};

void teamMember(void* data) {
  LWRT_TSAN_ACQUIRE(data);
  const Job* job = static_cast<const Job*>(data);
  job->body(job->context, omp_get_thread_num(), omp_get_num_threads());
  LWRT_TSAN_RELEASE(static_cast<char*>(data) + 1);
}

} // namespace

int poolThreads() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

void runTeam(int parts, void (*body)(void*, int, int), void* context) {
  Job job{body, context};
  LWRT_TSAN_RELEASE(&job);
  GOMP_parallel(teamMember, &job, static_cast<unsigned>(std::max(parts, 1)), 0);
  LWRT_TSAN_ACQUIRE(reinterpret_cast<char*>(&job) + 1);
}

} // namespace detail

namespace {

std::atomic<int> budget{0};

} // namespace

int cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

void setThreads(int n) { omp_set_num_threads(std::max(1, n)); }

int threads() { return omp_get_max_threads(); }

void setThreadBudget(int n) { budget.store(n > 0 ? n : 0, std::memory_order_relaxed); }

int threadBudget() {
  int n = budget.load(std::memory_order_relaxed);
  return n > 0 ? n : cores();
}

} // namespace lwrt::cpu
