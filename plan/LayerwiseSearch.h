//===- LayerwiseSearch.h - Layer-wise parallel config search ----*- C++ -*-===//
//
// The configuration search of --strategy=layerwise (Jia, Lin, Qi, Aiken,
// ICML 2018): each op of the training graph (before autodiff) picks one of
// its candidate configs so that the sum of
//   - each op's compute time on its shard, forward and backward,
//   - the parameter sync of each op (all-reduce of the gradients of params
//     it holds whole on several devices) and its optimizer update,
//   - the re-layout of every tensor between its producer's config and each
//     consumer's (forward, and the gradient's way back),
// is least, under a CostModel (analytic times, or the measured time of the
// whole op from a profile, scaled to the shard). The search works on a ConfigGraph: node and
// edge elimination reduce it, an exhaustive search solves what remains, and
// the eliminated nodes are chosen backwards from it. The result is optimal
// for the cost function.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "cost/CostModel.h"

#include <cstddef>
#include <vector>

namespace lwcc {

/// A candidate config of one op: `dim` split (-1: the whole op) over the
/// devices 0..degree-1. A whole op with degree > 1 runs on every one of
/// them (replicated).
struct LayerConfig {
  int64_t dim = -1;
  int64_t degree = 1;
  friend bool operator==(const LayerConfig&, const LayerConfig&) = default;
};

/// The search problem: a cost per node and config, a cost per edge and
/// pair of its end nodes' configs. Costs must be non-negative.
struct ConfigGraph {
  std::vector<std::vector<double>> nodeCost; ///< [node][config]
  struct Edge {
    size_t a, b;
    std::vector<std::vector<double>> cost; ///< [config of a][config of b]
  };
  std::vector<Edge> edges;
  /// The cost of one config index per node.
  double cost(const std::vector<size_t>& choice) const;
};

struct ConfigSolution {
  std::vector<size_t> choice;
  double cost = 0;
  size_t reducedNodes = 0; ///< nodes left for the exhaustive search
  bool exact = true;       ///< the search ended within its budget: optimal
};

/// An optimal choice: repeatedly eliminates a node with at most two
/// neighbours (a leaf folds into its neighbour's costs; a node between two
/// neighbours becomes an edge between them, merged with any edge already
/// there), then searches the remaining nodes exhaustively (branch and
/// bound), then picks each eliminated node's config from its neighbours'.
/// The exhaustive search has a budget of visits; past it the choice is the
/// best found, improved node by node, and not `exact`.
ConfigSolution solveConfigGraph(const ConfigGraph& g);

struct LayerwiseResult {
  double predictedSeconds = 0; ///< the chosen configs' cost
  double searchSeconds = 0;    ///< building the costs and solving
  size_t ops = 0, reducedNodes = 0;
  bool exact = true; ///< the search's choice is optimal (ConfigSolution::exact)
};

/// Chooses and records (@par) a config for every op of `g` (a training
/// graph before autodiff) over `gpus` devices. `bucketBytes` > 0: the
/// gradients are all-reduced in buckets of that size (grad-sync), so a
/// param pays the bandwidth of its own all-reduce but only its share of a
/// bucket's latency; 0: every param's all-reduce on its own.
llvm::Expected<LayerwiseResult> searchLayerwise(Graph& g, const CostModel& cm, int64_t gpus,
                                                int64_t bucketBytes = 0);

/// Backward time as a multiple of forward (the search's and the pipeline
/// partition's estimate): convolutions and matrix products compute the
/// input's and the weight's gradient (only the weight's for a graph
/// input), other differentiable ops one gradient, the rest none.
double backwardTimeFactor(const Op& op);

/// The same cost function for the @par configs `g` holds already (any
/// strategy): the predicted step time the search compares.
llvm::Expected<double> layerwiseCostOf(const Graph& g, const CostModel& cm, int64_t gpus,
                                       int64_t bucketBytes = 0);

} // namespace lwcc
