// cpu/Parallel.cpp - the CPU kernels' threads (lwrt/cpu_threads.h)
#include "lwrt/cpu_threads.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <omp.h>
#include <thread>

namespace lwrt::cpu {

namespace {

/// How long an idle pool thread spins before it sleeps, in libgomp's units
/// (a pause each, about 20 ns here): ~0.2 ms, which bridges the gap between
/// one kernel's parallel loop and the next, where libgomp's default
/// (300,000, several ms) would hold a core through a step's serial parts
/// and between steps. libgomp reads it once, when it is loaded, before any
/// constructor of the program runs: hence .preinit_array, which the loader
/// runs first.
/// OpenBLAS, which reads OPENBLAS_NUM_THREADS when it is loaded too, gets
/// one thread: the pool calls it on each of its threads (cpu/Blas.h), and
/// threads of its own would spin beside the pool's.
void poolDefaults(int, char**, char**) {
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT"))
    setenv("GOMP_SPINCOUNT", "10000", 0);
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
}

[[gnu::section(".preinit_array"), gnu::used]] void (*const preinitPool)(int, char**,
                                                                        char**) = poolDefaults;

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
