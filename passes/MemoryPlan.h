//===- MemoryPlan.h - Liveness-based arena planning -------------*- C++ -*-===//
//
// The memory plan gives every op result an offset in one arena per device
// (the @buf annotation):
//  1. Walk the ops in order. A result gets a buffer of its size rounded up
//     to 256 bytes; views (reshape, flatten, identity) share their
//     operand's buffer; an elementwise op writes in place over an operand of
//     its type whose buffer dies at that op. Constants are pinned.
//  2. A buffer lives from its first definition to its last read; graph
//     outputs live to the end of the step.
//  3. Greedy by size: the largest buffers are placed first, each at the
//     lowest offset that no buffer live at the same time occupies.
// Params and inputs live outside the arena. With in-place planning, a
// result whose only use is the assign of a param that the op may overwrite
// element by element (an optimizer update's new weight or state, step + 1)
// and that no later op reads is written straight over the param: its @buf
// is kOverParam and the assign copies nothing (ir/Params.h's paramWrittenOver).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"
#include "ir/Tensor.h"

#include <map>

namespace lwcc {

/// The alignment of every buffer in an arena, in bytes: what CUDA
/// allocations and cuDNN like.
constexpr int64_t kBufferAlignment = 256;
/// A buffer's bytes in an arena: its value's, rounded up to kBufferAlignment.
inline int64_t bufferBytes(int64_t n) {
  return (n + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

/// What one device's memory holds: its params and the other state outside
/// the arena, and the arena's buffers live where the most bytes are.
struct MemoryBreakdown {
  int64_t params = 0;      ///< trainable params (master weights)
  int64_t state = 0;       ///< the other params: optimizer state, running statistics, the step
  size_t at = 0;           ///< the op (position in the step) where the most arena bytes are live
  int64_t live = 0;        ///< the arena bytes live there, of which:
  int64_t activations = 0; ///< forward values (recomputed ones too)
  int64_t gradients = 0;   ///< backward values: gradients, their all-reduce, updates
  int64_t constants = 0;   ///< constants (always live)
  int64_t gathered = 0;    ///< params gathered from their shares (shard=fsdp)
  /// The most bytes of backward values and gathered params live at once
  /// anywhere in the step (with params and state: the model's own memory).
  int64_t gradientPeak = 0;
};

struct MemoryPlanStats {
  std::map<int64_t, int64_t> peakBytes;         ///< arena size per device
  std::map<int64_t, MemoryBreakdown> breakdown; ///< per device
  int64_t totalBytes = 0;                       ///< all buffers, without sharing
  size_t buffers = 0;
  size_t inPlace = 0, aliased = 0;
  size_t overParams = 0; ///< results written over the param they update
};

/// A buffer of a device's arena: the storage shared by a value and its
/// aliases (or results written in place over it).
struct ArenaBuffer {
  int64_t bytes = 0;
  int64_t device = 0;
  size_t first = 0, last = 0; ///< op positions where it is live (inclusive)
  bool pinned = false;        ///< constants: written once, never reused
  int64_t offset = -1;        ///< set by placeBuffers
};

/// Greedy by size: places the largest buffers first (equal sizes in their
/// order), each at the lowest offset that no buffer already placed on its
/// device and live at the same time (a pinned one always is) uses.
void placeBuffers(std::vector<ArenaBuffer>& buffers);

/// Each device's bytes of every op result, none shared, as planMemory sizes
/// its buffers: no device's arena is larger (each buffer ends at most at the
/// sum of the buffers placed up to it), so a step that fits with these
/// fits with its plan.
std::map<int64_t, int64_t> unsharedBytes(const Graph& g);

/// The @buf offset of a result that lives in its param's storage.
constexpr int64_t kOverParam = -1;

/// The streams each device's ops run on (a communication op on every device
/// it touches), by device.
std::map<int64_t, int64_t> streamsPerDevice(const Graph& g);

/// Sets @buf on every op with results. With `freeScattered`, a value that a
/// reduce_scatter on another stream reads is free after it (ZeRO-2's and
/// FSDP's whole gradients), not held to the step's end.
llvm::Expected<MemoryPlanStats> planMemory(Graph& g, bool inPlace = true,
                                           bool freeScattered = false);

/// Runs `g` as a device would under its plan: every op result is stored in
/// its element type at its @buf offset of its device's byte arena, and
/// operands are read back from there. Returns the outputs; with a correct
/// plan they equal interpret(..., Precision::F32) exactly.
llvm::Expected<std::vector<Tensor>> runInArenas(const Graph& g, const std::vector<Tensor>& inputs,
                                                const WeightMap& weights);

struct DeviceSpec;
/// An error that gives the numbers when what a device holds needs more
/// memory than a device of `spec` has: its arena, the params it holds, the
/// input batch (a spec with inputsOnDevice), and on a spec with library
/// workspaces (a GPU's) those of each stream, the CUDA runtime's own 256
/// bytes (its error flag) and each stream's largest
/// padded convolution input (convPadBytes, in whole MiB as the CUDA
/// runtime grows a stream's workspace). The convolutions' algorithm
/// workspaces take what is left (convWorkspaceLimits).
llvm::Error checkDeviceMemory(const Graph& g, const MemoryPlanStats& stats, const DeviceSpec& spec);

/// The most algorithm workspace the CUDA runtime lets a convolution take
/// (a cuDNN algorithm or engine that wants more is passed over).
constexpr int64_t kConvWorkspaceLimitBytes = int64_t{1} << 30;

/// The bytes of the padded copy of its image that the CUDA runtime makes
/// for a convolution (conv2d, conv2d_grad_input, conv2d_grad_filter) whose
/// pads differ between the two sides of a dim (cuDNN pads both sides
/// alike): N*C*(H+|top-bottom|)*(W+|left-right|) elements, 256-byte
/// aligned; 0 for other ops and even pads.
int64_t convPadBytes(const Op& op);

/// On a spec with library workspaces (a GPU's): for each device with
/// convolutions, the algorithm workspace each of its convolutions may take,
/// the memory checkDeviceMemory leaves shared by the device's streams that
/// run convolutions, in whole MiB, at most kConvWorkspaceLimitBytes. A CUDA
/// trainer passes over algorithms that want more, so a plan that fits stays
/// within the device's memory. Empty on other specs.
std::map<int64_t, int64_t> convWorkspaceLimits(const Graph& g, const MemoryPlanStats& stats,
                                               const DeviceSpec& spec);

/// Checks that no two values that are live at the same time share bytes,
/// except a view and its operand, or an in-place result and the operand it
/// overwrites.
llvm::Error checkMemoryPlan(const Graph& g);

} // namespace lwcc
