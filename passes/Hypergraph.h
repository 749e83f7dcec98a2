//===- Hypergraph.h - Model parallelism by hypergraph partitioning -*- C++ -*-===//
//
// --strategy=hypergraph: every op of the training graph (before autodiff)
// runs whole on one device, the devices chosen by partitioning a hypergraph
// with Zoltan's PHG:
//   vertices  the ops that get a parallel config, weighted by their cost;
//   nets      each value read by ops (and each param shared by several
//             ops), its pins the op that writes it and the ops that read
//             it, weighted by its bytes;
// into N parts that minimise the connectivity-1 cut (the bytes copied
// between devices, forward; backward copies the gradients back the same
// way) with every part's weight at most IMBALANCE_TOL times the average.
// Each op then gets @par(devices = [part]); materialize inserts the
// device_copy ops between parts.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include "llvm/Support/Error.h"

#include <functional>
#include <vector>

namespace lwcc {

struct HypergraphStats {
  int64_t parts = 0;
  double imbalanceTol = 0;
  int64_t vertices = 0, nets = 0;
  /// The summed vertex weights of each part, and of all.
  std::vector<double> partWeights;
  double totalWeight = 0;
  /// Sum over nets of (parts the net touches - 1) x its bytes.
  int64_t cutBytes = 0;
  /// The heaviest part over the average part.
  double imbalance() const;
  /// Whether the partitioner could meet the bound at all: no single vertex
  /// is heavier than the bound allows a part.
  bool boundFeasible = true;
};

/// Partitions the ops of `g` (parallelizable, not yet parallelized) into
/// `parts` parts with Zoltan PHG and gives each op @par(devices = [part]).
/// `weight` gives an op's cost (any unit; only ratios matter).
llvm::Expected<HypergraphStats> partitionHypergraph(Graph& g, int64_t parts, double imbalanceTol,
                                                    const std::function<double(const Op&)>& weight);

} // namespace lwcc
