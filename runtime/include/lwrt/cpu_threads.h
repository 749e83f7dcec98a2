// lwrt/cpu_threads.h - the CPU backend's threads
// defines: cpu::setThreads, cpu::threads, cpu::setThreadBudget, cpu::threadBudget, cpu::cores
//
// The CPU kernels run on one pool (OpenMP's, shared with oneDNN; OpenBLAS
// runs single-threaded on its threads). Each thread that runs kernels has a
// team size of its own: the trainer gives the thread that runs a step the
// trainer's --threads, and each stream thread of a multi-device trainer its
// device's share of them.
#pragma once

namespace lwrt::cpu {

/// The threads the calling thread's kernels use from now on (at least 1).
void setThreads(int n);
/// The calling thread's team size.
int threads();
/// The cores a trainer's steps share (--threads; at most 0 or less: every
/// core). Set once, before the step's threads start.
void setThreadBudget(int n);
int threadBudget();
/// The machine's cores (at least 1).
int cores();

} // namespace lwrt::cpu
