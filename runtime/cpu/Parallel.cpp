// cpu/Parallel.cpp - the CPU kernels' threads (lwrt/cpu_threads.h)
#include "Parallel.h"

#include "lwrt/cpu_threads.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <unistd.h>

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

namespace {

/// How long an idle thread of the pool spins before it sleeps, in libgomp's
/// units (~100,000 a millisecond, its manual says): ~0.1 ms, enough to
/// bridge the gap between one kernel's parallel loop and the next within a
/// step. libgomp's default (300,000, ~3 ms) keeps a waiting thread on its
/// core through a step's serial parts and between steps; on a machine where
/// another process is busy, a thread that spins while the one it waits for
/// has lost its core stalls the team: AlexNet at 2 threads, machine at load
/// 7, trained at 28-48 img/s with the default against 140-190 with this.
constexpr const char* kSpinCount = "10000";

/// NAME's value in the environment, or null.
char* lookup(const char* name) {
  const size_t n = std::strlen(name);
  for (char** e = environ; e && *e; ++e)
    if (std::strncmp(*e, name, n) == 0 && (*e)[n] == '=')
      return *e + n + 1;
  return nullptr;
}

} // namespace

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

/// The environment's defaults of the pool (see getenv below).
const char* poolDefault(const char* name) {
  if (std::strcmp(name, "GOMP_SPINCOUNT") == 0 && !lookup("OMP_WAIT_POLICY"))
    return kSpinCount;
  if (std::strcmp(name, "OPENBLAS_NUM_THREADS") == 0)
    return "1";
  return nullptr;
}

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

/// libgomp reads its spin count (GOMP_SPINCOUNT, OMP_WAIT_POLICY) and
/// OpenBLAS its thread count once, from the environment, as they are loaded:
/// before main and before any constructor of the program, and before an
/// environment set in .preinit_array survives (libc's start-up puts back
/// the one the program was started with). So the runtime answers for them:
/// this getenv, the program's own, is the one the dynamic linker binds every
/// library's getenv to. It reads the environment as libc's does; a variable
/// that is not there gets the pool's default (kSpinCount, OpenBLAS on one
/// thread), so a value the user exports still wins.
extern "C" char* getenv(const char* name) noexcept {
  if (char* value = lwrt::cpu::lookup(name))
    return value;
  return const_cast<char*>(lwrt::cpu::poolDefault(name));
}
