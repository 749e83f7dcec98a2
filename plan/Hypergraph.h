//===- Hypergraph.h - Model parallelism by hypergraph partitioning -*- C++ -*-===//
//
// --strategy=hypergraph: the training graph (before autodiff) is spread over
// N devices by partitioning a hypergraph of its units of work with Zoltan's
// PHG:
//   vertices  units of work weighted by their cost: a light op is one unit;
//             an op heavier than a sixteenth of a device's average share
//             is cut into k units along a dim its parallel rule splits
//             (the batch first, else the channels), each 1/k of its cost,
//             and the light ops next to it are cut the same way;
//   nets      per value (and per param), the units that produce and read
//             an overlapping piece of it, weighted by that piece's bytes
//             (units of the same dim and count overlap one to one; a whole
//             op, or a different dim, reaches every unit of the other);
// into N parts that minimise the connectivity-1 cut (the bytes copied
// between devices, forward; backward copies the gradients back the same
// way) with every part's weight at most IMBALANCE_TOL times the average.
// Where Zoltan's parts miss that bound (it treats it as a tolerance), a
// repair step moves units from the heaviest part to the lightest. Each op
// then runs on the parts that hold its units: whole on one device, or
// split along its unit dim with a piece per device (in device order) as
// large as the units it got (@par(..., sizes = [...])).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include "llvm/Support/Error.h"

#include <functional>
#include <thread>
#include <vector>

namespace lwcc {

struct HypergraphStats {
  int64_t parts = 0;
  double imbalanceTol = 0;
  /// The ops, the ops cut into several units, the units (vertices) and nets.
  int64_t ops = 0, splitOps = 0, vertices = 0, nets = 0;
  /// Zoltan's heaviest part over the average, before the repair step, and
  /// the units the repair moved.
  double zoltanImbalance = 1;
  int64_t repairMoves = 0;
  /// The summed vertex weights of each part, and of all.
  std::vector<double> partWeights;
  double totalWeight = 0;
  /// Sum over nets of (parts the net touches - 1) x its bytes.
  int64_t cutBytes = 0;
  /// The heaviest part over the average part.
  double imbalance() const;
  /// Whether the partitioner could meet the bound at all: no single unit
  /// is heavier than the bound allows a part.
  bool boundFeasible = true;
};

/// Partitions the units of work of `g` (not yet parallelized) into `parts`
/// parts with Zoltan PHG and gives each op the @par its units' parts make.
/// `weight` gives an op's cost (any unit; only ratios matter).
llvm::Expected<HypergraphStats> partitionHypergraph(Graph& g, int64_t parts, double imbalanceTol,
                                                    const std::function<double(const Op&)>& weight);

/// Starts MPI, which Zoltan needs, on a thread of its own (joined when the
/// result is destroyed): OpenMPI's start mostly waits (about 0.2 s, little
/// of it computing), so a compile that will partition starts it beside its
/// first steps rather than hold a planner thread with it.
std::jthread startMpiEarly();

} // namespace lwcc
