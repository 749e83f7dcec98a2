// cpu/CommOps.h - what the CPU group's communication ops compute (not installed)
// defines: cpu::Kind, Signature, Part, Parts, perform, packInputs, unpackInputs
//
// A communication op of a multi-device step (lwrt/comm.h) meets its
// participants; the one that arrives last performs it over everyone's
// views (cpu/Comm.cpp). Under mpirun some participants live in other
// processes: each process performs the op for its own receiving devices
// over the inputs of every sending device, its own views and copies of the
// others' (packInputs / unpackInputs, carried by MPI). Every sum runs over
// `devices` in their order, wherever its operands came from, so a run on R
// processes computes the same bits as one process.
#pragma once

#include "lwrt/tensor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace lwrt::cpu {

enum class Kind : uint8_t {
  AllReduce,
  AllGather,
  ReduceScatter,
  Broadcast,
  ReduceTo,
  DeviceCopy,
  Shard,
  Unshard
};

/// What every participant of a communication op must agree on.
struct Signature {
  Kind kind = Kind::AllReduce;
  std::vector<int64_t> devices;
  int64_t src = -1, dst = -1; ///< -1: the op has none
  int64_t axis = 0;
  std::vector<int64_t> sizes;

  bool operator==(const Signature& o) const {
    return kind == o.kind && devices == o.devices && src == o.src && dst == o.dst &&
           axis == o.axis && sizes == o.sizes;
  }
  /// The devices that call the op: `devices`, src and dst, sorted.
  std::vector<int64_t> participants() const;
  /// The devices whose `in` views the op reads.
  std::vector<int64_t> senders() const;
  /// The devices whose `out` views it writes.
  std::vector<int64_t> receivers() const;
  /// A hash of all of the above, that processes compare.
  uint64_t hash() const;
  /// "all_reduce over devices 0,1,2,3".
  std::string str() const;
};

/// One device's views of an op (in and out: one each, or a bucket's). A
/// part of another process (`local` false) holds only its inputs, copies
/// that live as long as the op.
struct Part {
  std::vector<TensorView> in, out;
  bool hasIn = false, hasOut = false;
  bool local = true;
};

using Parts = std::vector<const Part*>; ///< by device; null: not a participant

/// Performs the op: every local receiver's outputs from the senders'
/// inputs. False, with nothing written, when the views do not fit the op.
bool perform(const Signature& s, const Parts& parts);

/// The inputs of `parts` (device, part) as one message for another process.
std::vector<unsigned char> packInputs(const Signature& s,
                                      const std::vector<std::pair<int64_t, const Part*>>& parts);
/// A message of packInputs -> (device, remote part) whose views point into
/// `bytes` (kept alive by the caller). False with `error` when it is not
/// one of this op's (another signature) or malformed.
bool unpackInputs(const Signature& s, const std::vector<unsigned char>& bytes,
                  std::vector<std::pair<int64_t, Part>>& out, std::string* error);

} // namespace lwrt::cpu
