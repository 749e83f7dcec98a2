// lwrt/nvtx.h - NVTX ranges around the phases of a CUDA trainer's step
// defines: PhaseRange
//
// A generated CUDA trainer opens a PhaseRange at the top of each phase
// (forwardPhase, backwardPhase or microBatchesPhase, updatePhase, eval), so that Nsight Systems
// shows the step's phases over the kernels they launch. NVTX 3 is header
// only and costs a branch when no profiler is attached; where the CUDA
// toolkit lacks its headers the ranges compile to nothing.
#pragma once

#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define LWRT_HAVE_NVTX 1
#endif

namespace lwrt::cuda {

/// An NVTX range from construction to destruction (on every return path).
class PhaseRange {
public:
  explicit PhaseRange([[maybe_unused]] const char* name) {
#ifdef LWRT_HAVE_NVTX
    nvtxRangePushA(name);
#endif
  }
  ~PhaseRange() {
#ifdef LWRT_HAVE_NVTX
    nvtxRangePop();
#endif
  }
  PhaseRange(const PhaseRange&) = delete;
  PhaseRange& operator=(const PhaseRange&) = delete;
};

} // namespace lwrt::cuda
