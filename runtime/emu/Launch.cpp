// emu/Launch.cpp - kernel launches on the emulated device: the grid, and a block's threads as
// fibers
//
// A launch is checked as the hardware checks it (lwemu/cuda_emu.h lists
// the limits) and becomes one task on its stream. The task runs the grid's
// blocks one after another on the stream's worker thread, and each block's
// threads as fibers of that thread, so that __syncthreads and __shared__
// behave as on a GPU:
//   1. thread 0 of the block runs on a fiber of its own;
//   2. if it returns without reaching __syncthreads, the block has no
//      barrier (CUDA requires every thread of a block to reach the same
//      __syncthreads, or none), and threads 1.. run as plain calls; one that
//      reaches a __syncthreads then is a divergent barrier, which stops the
//      run naming the kernel;
//   3. otherwise every thread gets a fiber, and the block runs in rounds:
//      each live thread runs until its next __syncthreads or its end, and a
//      round ends with every live thread at the barrier, which the next
//      round releases (threads that have exited count as arrived, as on
//      sm_70 and later).
// Fibers switch with a few instructions of assembly on x86-64 (callee-saved
// registers, the stack pointer, and the floating-point control words), and
// tell AddressSanitizer and ThreadSanitizer about each switch.
#include "Internal.h"
#include "lwemu/cuda_emu.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/mman.h>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

#if !defined(__x86_64__)
#error "the emulated GPU's fibers are written for x86-64"
#endif

// lwemu_swap(save, load): saves the callee-saved state on the current stack,
// stores the stack pointer in *save, and continues on the stack `load`.
// lwemu_fiber_entry: the first return address of a new fiber's stack; calls
// r13(r12) and never returns (a fiber ends by switching away).
asm(R"(
  .text
  .globl lwemu_swap
  .type lwemu_swap,@function
lwemu_swap:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size lwemu_swap,.-lwemu_swap
  .globl lwemu_fiber_entry
  .type lwemu_fiber_entry,@function
lwemu_fiber_entry:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size lwemu_fiber_entry,.-lwemu_fiber_entry
)");

extern "C" void lwemu_swap(void** save, void* load);
extern "C" void lwemu_fiber_entry();

namespace lwemu {

namespace {

constexpr size_t kStackBytes = 256 * 1024; // ASan's frames are large
constexpr size_t kPage = 4096;

struct Fiber {
  void* sp = nullptr;
  char* stack = nullptr; ///< lowest usable byte (a guard page below)
  uint3 index{};
  bool done = false;
  bool atBarrier = false;
#if defined(__SANITIZE_THREAD__)
  void* tsan = nullptr;
#endif
};

/// A worker thread's block: its fibers (stacks kept between launches).
struct BlockRun {
  std::vector<Fiber> fibers;
  void* schedulerSp = nullptr;
  Fiber* current = nullptr;
  const std::function<void()>* body = nullptr;
  bool plain = false;  ///< threads run as plain calls (no barrier)
  bool synced = false; ///< a thread reached __syncthreads
  const LaunchSite* site = nullptr;
#if defined(__SANITIZE_THREAD__)
  void* tsanScheduler = nullptr;
#endif
#if defined(__SANITIZE_ADDRESS__)
  const void* schedulerStack = nullptr;
  size_t schedulerStackSize = 0;
#endif
};

thread_local BlockRun* tlsRun = nullptr;

char* newStack() {
  void* p = mmap(nullptr, kStackBytes + kPage, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    fatal("no memory for a GPU thread's stack");
  mprotect(p, kPage, PROT_NONE); // a guard page: an overflow faults
  return static_cast<char*>(p) + kPage;
}

[[noreturn]] void fiberMain(void* arg);

/// Switches from the scheduler to fiber f (and back when it yields).
void resume(BlockRun& run, Fiber& f) {
  run.current = &f;
  threadIdx = f.index;
#if defined(__SANITIZE_THREAD__)
  __tsan_switch_to_fiber(f.tsan, 0);
#endif
#if defined(__SANITIZE_ADDRESS__)
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f.stack, kStackBytes);
#endif
  lwemu_swap(&run.schedulerSp, f.sp);
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  run.current = nullptr;
}

/// Switches from the current fiber back to the scheduler.
void yieldToScheduler(BlockRun& run, bool finished) {
  Fiber& f = *run.current;
#if defined(__SANITIZE_THREAD__)
  __tsan_switch_to_fiber(run.tsanScheduler, 0);
#endif
#if defined(__SANITIZE_ADDRESS__)
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(finished ? nullptr : &fake, run.schedulerStack,
                                 run.schedulerStackSize);
#else
  (void)finished;
#endif
  lwemu_swap(&f.sp, run.schedulerSp);
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake, &run.schedulerStack, &run.schedulerStackSize);
#endif
  threadIdx = f.index;
}

void fiberMain(void* arg) {
  auto* run = static_cast<BlockRun*>(arg);
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(nullptr, &run->schedulerStack, &run->schedulerStackSize);
#endif
  (*run->body)();
  run->current->done = true;
  yieldToScheduler(*run, true);
  std::abort(); // a finished fiber is never resumed
}

/// Prepares fiber i to start the block's thread body.
void start(BlockRun& run, size_t i, uint3 index) {
  Fiber& f = run.fibers[i];
  if (!f.stack)
    f.stack = newStack();
#if defined(__SANITIZE_THREAD__)
  if (!f.tsan)
    f.tsan = __tsan_create_fiber(0);
#endif
  f.index = index;
  f.done = false;
  f.atBarrier = false;
  // The initial frame lwemu_swap pops: control words, r15..rbp, return address.
  auto* top = reinterpret_cast<uint64_t*>(f.stack + kStackBytes);
  uint64_t* sp = top - 8;
  uint32_t csr[2] = {0x1f80, 0x037f}; // MXCSR and x87 control word at reset
  std::memcpy(&sp[0], csr, sizeof csr);
  sp[1] = 0;                                      // r15
  sp[2] = 0;                                      // r14
  sp[3] = reinterpret_cast<uint64_t>(&fiberMain); // r13: the function
  sp[4] = reinterpret_cast<uint64_t>(&run);       // r12: its argument
  sp[5] = 0;                                      // rbx
  sp[6] = 0;                                      // rbp
  sp[7] = reinterpret_cast<uint64_t>(&lwemu_fiber_entry);
  f.sp = sp;
}

uint3 indexOf(unsigned t, dim3 block) {
  return uint3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
}

void runBlock(BlockRun& run, dim3 block) {
  unsigned n = block.x * block.y * block.z;
  if (run.fibers.size() < n)
    run.fibers.resize(n);
  run.synced = false;
  run.plain = false;
  start(run, 0, indexOf(0, block));
  resume(run, run.fibers[0]);
  if (run.fibers[0].done && !run.synced) { // no barrier in this block: plain calls
    run.plain = true;
    for (unsigned t = 1; t < n; ++t) {
      threadIdx = indexOf(t, block);
      (*run.body)();
    }
    run.plain = false;
    return;
  }
  for (unsigned t = 1; t < n; ++t) { // the others up to the first barrier
    start(run, t, indexOf(t, block));
    resume(run, run.fibers[t]);
  }
  for (;;) { // a round: every live thread past one barrier
    bool live = false;
    for (unsigned t = 0; t < n; ++t) {
      Fiber& f = run.fibers[t];
      if (f.done)
        continue;
      f.atBarrier = false;
      resume(run, f);
      live |= !f.done;
    }
    if (!live)
      return;
  }
}

} // namespace

void launchKernel(const LaunchSite& site, dim3 grid, dim3 block, size_t sharedBytes,
                  cudaStream_t stream, std::function<void()> thread) {
  unsigned long long threads = 1ull * block.x * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || threads == 0 || threads > 1024 ||
      block.x > 1024 || block.y > 1024 || block.z > 64 || grid.x > 2147483647u || grid.y > 65535 ||
      grid.z > 65535 || sharedBytes > 48 * 1024) {
    fail(cudaErrorInvalidConfiguration);
    return;
  }
  if (!validStream(stream) || streamDevice(stream) != currentDevice()) {
    fail(cudaErrorInvalidResourceHandle); // a stream of another device than the current one
    return;
  }
  LaunchSite where = site;
  std::string name = std::string("kernel ") + site.kernel + " (" + site.file + ":" +
                     std::to_string(site.line) + ")";
  cudaError_t e = enqueue(stream, name, [where, grid, block, body = std::move(thread)] {
    static thread_local BlockRun pooled; // its fibers' stacks are kept for the next launch
    BlockRun& run = pooled;
    run.body = &body;
    run.site = &where;
#if defined(__SANITIZE_THREAD__)
    run.tsanScheduler = __tsan_get_current_fiber();
#endif
    BlockRun* outer = tlsRun;
    tlsRun = &run;
    gridDim = grid;
    blockDim = block;
    for (unsigned z = 0; z < grid.z; ++z)
      for (unsigned y = 0; y < grid.y; ++y)
        for (unsigned x = 0; x < grid.x; ++x) {
          blockIdx = uint3{x, y, z};
          runBlock(run, block);
        }
    tlsRun = outer;
  });
  if (e != cudaSuccess)
    fail(e);
}

} // namespace lwemu

void __syncthreads() {
  lwemu::BlockRun* run = lwemu::tlsRun;
  if (!run || !run->current) {
    if (run && run->plain)
      lwemu::fatal(std::string("divergent __syncthreads in kernel ") + run->site->kernel + " (" +
                   run->site->file + ":" + std::to_string(run->site->line) +
                   "): thread 0 of the block ended without reaching it");
    lwemu::fatal("__syncthreads outside a kernel");
  }
  run->synced = true;
  run->current->atBarrier = true;
  lwemu::yieldToScheduler(*run, false);
}
