//===- FusedKernels.h - The kernels of a trainer's fused ops ----*- C++ -*-===//
//
// Each fused op (passes/Fuse.cpp, ir/FusedOps.h) is computed by a kernel of
// the trainer's own source. One element function, written once from the
// op's body for the host and the device (LWRT_HOST_DEVICE), computes every
// statement of one element in registers; a CPU trainer calls it in a loop
// on its thread team (cpu::fusedFor), a CUDA trainer in a grid-stride
// kernel (LWRT_FUSED_LAUNCH), both from a function that takes the op's
// views (operands, then results) as every runtime call does. Each value is
// rounded to its statement's type as the runtime's kernel of that op rounds
// it, so a fused trainer computes what the unfused one did.
//
// A body with reductions (reduce_sum statements, ir/FusedOps.h) walks its
// iteration space one sum at a time: the element function adds each
// reduction's value to its accumulator (double) as it writes the
// elementwise results. On CUDA one block per sum (LWRT_FUSED_REDUCE_LAUNCH),
// its threads striding over the summed elements and then a fixed tree in
// shared memory; on the CPU one thread per range of sums, each summed in
// element order. Either way the order of the adds is fixed: the same bits
// on every run and thread count.
//
// Ops of the same body and types share one kernel, named after the layers
// of the first (fused_<layers>_<n>), with the IR it computes above it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include "llvm/Support/Error.h"

#include <map>
#include <string>

namespace lwcc::codegen {

class FusedKernels {
public:
  /// The kernels of the fused ops of `g` (CUDA kernels where `cuda`); an
  /// error names a fused op whose body has no kernel form.
  static llvm::Expected<FusedKernels> render(const Graph& g, bool cuda);

  /// The function a trainer calls for fused op `op`.
  const std::string& name(const Op& op) const { return names_.at(&op); }
  /// Their definitions, for the source's shared part ("" when none).
  const std::string& definitions() const { return text_; }
  bool empty() const { return names_.empty(); }

private:
  std::map<const Op*, std::string> names_;
  std::string text_;
};

} // namespace lwcc::codegen
