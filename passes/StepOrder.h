//===- StepOrder.h - Streams, events and bytes of a scheduled step -*- C++ -*-===//
//
// What the event pass (PlaceEvents.cpp) and the schedule verifier
// (VerifySchedule.cpp) share:
//  - lanes: where an op runs. A lane is one stream of one device; a compute
//    op or an event op runs on its @dev's @stream, a communication op on its
//    @stream of every device it reads or writes, a constant on none (it is
//    written once, at start-up, before any step);
//  - the bytes an op reads and writes on a device: a value in the arena at
//    its @buf offset, a param (and an update the memory plan writes over
//    it) in that param's own storage; inputs are host data the step only
//    reads, and views that share their operand's bytes touch nothing;
//  - ByteTracker, a sweep over the ops in order that knows, for every range
//    of bytes, which value lives there now and which ops wrote and read it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <compare>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace lwcc {

/// One stream of one device.
struct Lane {
  int64_t device = 0, stream = 0;
  friend auto operator<=>(const Lane&, const Lane&) = default;
  friend bool operator==(const Lane&, const Lane&) = default;
  std::string str() const;
};

/// The lanes `op` runs on (see above), ordered by device.
std::vector<Lane> lanesOf(const Op& op);

/// A range of bytes of one device: the arena (region -1) or the storage of
/// the param with that index in the graph.
struct Bytes {
  int64_t device = 0, region = -1;
  int64_t lo = 0, hi = 0;
  bool overlaps(const Bytes& o) const {
    return device == o.device && region == o.region && lo < o.hi && o.lo < hi;
  }
  friend bool operator==(const Bytes&, const Bytes&) = default;
};

/// One read or write of `value`'s bytes by an op on a device.
struct Access {
  const Value* value;
  Bytes bytes;
  bool write;
};

/// Where the values of a graph live.
class StepLayout {
public:
  explicit StepLayout(const Graph& g);
  /// Whether every op with results has @buf (a memory-planned graph). Without
  /// a plan no two values share bytes.
  bool planned() const { return planned_; }
  /// The bytes of `v`, or nullopt for inputs (host data).
  std::optional<Bytes> bytesOf(const Value* v) const;
  /// Whether the op reads its operand and writes its result in the same
  /// bytes (a view that aliases, an assign of an update written over its
  /// param): no kernel runs.
  bool aliases(const Op& op) const;
  /// The reads (operands) then the writes (results; an assign's param) of
  /// `op` on `device`. An op that aliases reads what it aliases.
  std::vector<Access> accessesOf(const Op& op, int64_t device) const;
  /// accessesOf(op, lanes[k].device) for each of `lanes` (lanesOf(op)):
  /// each operand's and result's device found once, not once per lane (a
  /// collective over N devices has N operands, results and lanes).
  std::vector<std::vector<Access>> accessesOnLanes(const Op& op,
                                                   const std::vector<Lane>& lanes) const;
  /// The graph-order index of `op`.
  size_t position(const Op* op) const { return position_.at(op); }

private:
  std::unordered_map<const Op*, size_t> position_;
  std::unordered_map<const Value*, int64_t> paramIndex_;
  bool planned_ = true;
};

/// The bytes of every value, swept in the order the ops run: which value
/// lives in each range now, the node that wrote it and the nodes that read
/// it. Nodes are the caller's ids (an op on one lane); -1 is "before the
/// step" (params, constants).
class ByteTracker {
public:
  struct Storage {
    Bytes bytes;
    int writer = -1;
    std::vector<int> readers;
    /// The value and views of it that live here; or, in what is left of a
    /// storage that a write partly covered, that lived here (find() no
    /// longer finds them).
    std::vector<const Value*> values;
  };
  /// The storage that holds `v` now, or null (never written, or its bytes
  /// were written since).
  const Storage* find(const Value* v) const;
  /// Notes a read of `v` by `node`; false when `v` does not live anywhere.
  bool read(const Value* v, int node);
  /// `view` lives in the storage of `of` from now on.
  void alias(const Value* view, const Value* of);
  /// The storages that writing `b` ends (they overlap it), for the caller to
  /// check or order before the write.
  std::vector<const Storage*> overlapping(const Bytes& b) const;
  /// `node` writes `v` into `b`: the overlapping storages end, `v` lives there.
  void write(const Value* v, const Bytes& b, int node);

private:
  using Key = std::pair<int64_t, int64_t>; // (device, region)
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<int64_t>()(k.first * 1000003 + k.second);
    }
  };
  /// A region per device: its arena, and each param (a step of many devices
  /// has tens of thousands).
  std::unordered_map<Key, std::map<int64_t, Storage>, KeyHash> live_; // by lo
  std::unordered_map<const Value*, std::pair<Key, int64_t>> where_;
};

/// A short description of a node's op for messages: "'conv2d' op "conv1"
/// on device 0 stream 2".
std::string describeOn(const Op& op, const Lane& lane);

} // namespace lwcc

namespace lwcc {

/// The event pass (PlaceEvents.cpp): replaces the graph's record and wait
/// ops with the ones its streams need; returns the number of events.
llvm::Expected<int64_t> placeEvents(Graph& g);

/// The schedule verifier (VerifySchedule.cpp): an error naming both ops and
/// the missing order when some access of the step is not ordered.
llvm::Error verifySchedule(const Graph& g);

} // namespace lwcc
