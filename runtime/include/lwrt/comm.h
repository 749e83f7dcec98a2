// lwrt/comm.h - what a multi-device step calls besides kernels: communication and events
// defines: cpu::allReduce, allGather, reduceScatter, broadcast, reduceTo, deviceCopy, shard,
//          unshard, recordEvent, waitEvent (the same in namespace cuda)
//
// A trainer lwcc compiled for --gpus N > 1 runs its step as one function per
// (device, stream) (ModelInfo::deviceSteps), all called together by the
// backend's DeviceGroup (lwrt/trainer.h), each on a thread of its own, with
// StepBuffers::device, ::stream and ::group set. Each function calls, in
// graph order, the kernels of its ops and, for every communication op of the
// IR (ir/Ops.def, COMM_OP rows) this device takes part in, the function
// below with the op's views that live on this device. `op` numbers the
// communication op in the step (0 .. ModelInfo::numCommOps - 1), the same
// on every device, so that the participants meet; `devices`, `src`, `dst`,
// `axis` and `sizes` are the op's attributes.
//
// Semantics (those of the reference interpreter, interp/CommOps.cpp):
//  - A call returns once this device's part is launched on its stream (the
//    CPU backend: once the whole operation has run). Every participant's
//    part is ordered after the work its stream launched before the call,
//    and the work its stream launches after the call sees the result.
//  - Sums run over `devices` in their order, the same on every device, so
//    all replicas get identical bits (float sums are not reassociated).
//  - Views are F32 or F64 for the summing ops, any element type otherwise.
//  - False, with nothing written, when the views do not fit the op (the
//    trainer then stops with the failed op's name).
// Events: recordEvent(b, e) marks the point in this (device, stream) that
// waitEvent(b, e) on another (device, stream) of the same device waits for,
// within the same step; each event is recorded by one function once per
// step (0 <= e < ModelInfo::numEvents). Nothing else orders two streams: a
// missing wait is a race.
#pragma once

#include "lwrt/tensor.h"
#include "lwrt/trainer.h"

#include <cstdint>
#include <vector>

namespace lwrt {
namespace cpu {
#include "lwrt/comm_decls.inc"
/// The CPU backend's group: a worker thread per (device, stream) of this
/// process's devices; MPI (`cluster`) to the devices of other processes.
std::unique_ptr<DeviceGroup> createGroup(const ModelInfo& model,
                                         const std::vector<StepRunner*>& runners, Cluster* cluster,
                                         std::string* error);
} // namespace cpu
namespace cuda {
#include "lwrt/comm_decls.inc"
/// The CUDA backend's group: NCCL between distinct GPUs (one communicator
/// over every process's GPUs under mpirun), local copies and reductions
/// between logical devices that share one. Null with `error` set.
std::unique_ptr<DeviceGroup> createGroup(const ModelInfo& model,
                                         const std::vector<StepRunner*>& runners, Cluster* cluster,
                                         std::string* error);
} // namespace cuda
} // namespace lwrt
