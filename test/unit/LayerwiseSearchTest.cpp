//===- LayerwiseSearchTest.cpp - The layer-wise search is optimal ---------===//
#include "plan/LayerwiseSearch.h"

#include "TestUtil.h"
#include "plan/Pipelines.h"

#include <random>

namespace lwcc {
namespace {

using test::parseOk;

/// The least cost over every assignment of configs, by enumeration.
double bruteForce(const ConfigGraph& g) {
  size_t n = g.nodeCost.size();
  std::vector<size_t> choice(n, 0);
  double best = std::numeric_limits<double>::infinity();
  while (true) {
    best = std::min(best, g.cost(choice));
    size_t i = 0;
    while (i < n && ++choice[i] == g.nodeCost[i].size())
      choice[i++] = 0;
    if (i == n)
      return best;
  }
}

/// A random problem over `edges` with 1..maxConfigs configs per node and
/// costs in [0, 10).
ConfigGraph randomProblem(std::mt19937& rng, size_t nodes,
                          const std::vector<std::pair<size_t, size_t>>& edges, size_t maxConfigs) {
  std::uniform_int_distribution<size_t> configs(1, maxConfigs);
  std::uniform_real_distribution<double> cost(0, 10);
  ConfigGraph g;
  for (size_t i = 0; i < nodes; ++i) {
    std::vector<double> c(configs(rng));
    for (double& x : c)
      x = cost(rng);
    g.nodeCost.push_back(std::move(c));
  }
  for (auto [a, b] : edges) {
    ConfigGraph::Edge e{a, b, {}};
    for (size_t x = 0; x < g.nodeCost[a].size(); ++x) {
      std::vector<double> row(g.nodeCost[b].size());
      for (double& y : row)
        y = cost(rng);
      e.cost.push_back(std::move(row));
    }
    g.edges.push_back(std::move(e));
  }
  return g;
}

void expectOptimal(const ConfigGraph& g, const std::string& what) {
  ConfigSolution s = solveConfigGraph(g);
  ASSERT_EQ(s.choice.size(), g.nodeCost.size()) << what;
  for (size_t i = 0; i < s.choice.size(); ++i)
    ASSERT_LT(s.choice[i], g.nodeCost[i].size()) << what;
  EXPECT_NEAR(s.cost, g.cost(s.choice), 1e-9) << what;
  EXPECT_NEAR(s.cost, bruteForce(g), 1e-9) << what;
}

TEST(LayerwiseSearchTest, ChainsMatchBruteForce) {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 40; ++trial) {
    size_t n = 2 + trial % 6;
    std::vector<std::pair<size_t, size_t>> edges;
    for (size_t i = 0; i + 1 < n; ++i)
      edges.push_back({i, i + 1});
    expectOptimal(randomProblem(rng, n, edges, 4), "chain of " + std::to_string(n));
  }
}

TEST(LayerwiseSearchTest, DiamondsAndParallelEdgesMatchBruteForce) {
  std::mt19937 rng(2);
  for (int trial = 0; trial < 40; ++trial) {
    // 0 -> {1 -> 2, 3} -> 4 -> 5, a direct edge 0 -> 4 and a doubled edge
    // 4 -> 5 (two tensors between the same ops).
    std::vector<std::pair<size_t, size_t>> edges{{0, 1}, {1, 2}, {2, 4}, {0, 3},
                                                 {3, 4}, {0, 4}, {4, 5}, {4, 5}};
    expectOptimal(randomProblem(rng, 6, edges, 4), "diamond");
  }
}

TEST(LayerwiseSearchTest, IrreducibleGraphsMatchBruteForce) {
  // K4 plus a tail: every node of the clique has degree 3, so elimination
  // stops and the exhaustive search has to solve it.
  std::mt19937 rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<std::pair<size_t, size_t>> edges{{0, 1}, {0, 2}, {0, 3}, {1, 2},
                                                 {1, 3}, {2, 3}, {3, 4}, {4, 5}};
    ConfigGraph g = randomProblem(rng, 6, edges, 3);
    EXPECT_EQ(solveConfigGraph(g).reducedNodes, 4u);
    expectOptimal(g, "clique");
  }
}

TEST(LayerwiseSearchTest, ExhaustiveSearchesAreExact) {
  // Within its budget the search says it is exact (the tests above check
  // the optimum).
  std::mt19937 rng(5);
  std::vector<std::pair<size_t, size_t>> edges;
  for (size_t a = 0; a < 6; ++a)
    for (size_t b = a + 1; b < 6; ++b)
      edges.push_back({a, b});
  ConfigGraph g = randomProblem(rng, 6, edges, 4);
  ConfigSolution s = solveConfigGraph(g);
  EXPECT_TRUE(s.exact);
  EXPECT_NEAR(s.cost, bruteForce(g), 1e-9);
}

TEST(LayerwiseSearchTest, ADenseCoreStopsAtTheBudgetWithAGoodChoice) {
  // A clique of 40 nodes of 5 configs (5^40 choices) leaves elimination
  // nothing to remove; the branch and bound stops at its budget, and the
  // choice it keeps, improved node by node, is no worse than each node
  // taking its cheapest config alone nor than every node's first config,
  // and no single node's change improves it.
  std::mt19937 rng(6);
  const size_t n = 40;
  std::vector<std::pair<size_t, size_t>> edges;
  for (size_t a = 0; a < n; ++a)
    for (size_t b = a + 1; b < n; ++b)
      edges.push_back({a, b});
  ConfigGraph g = randomProblem(rng, n, edges, 5);
  for (auto& c : g.nodeCost)
    c.resize(5, 5.0);
  for (auto& e : g.edges)
    for (auto& row : e.cost)
      row.resize(5, 5.0);
  for (auto& e : g.edges)
    e.cost.resize(5, std::vector<double>(5, 5.0));
  ConfigSolution s = solveConfigGraph(g);
  EXPECT_FALSE(s.exact);
  EXPECT_EQ(s.reducedNodes, n);
  ASSERT_EQ(s.choice.size(), n);
  EXPECT_NEAR(s.cost, g.cost(s.choice), 1e-9);
  std::vector<size_t> cheapest(n), first(n, 0);
  for (size_t i = 0; i < n; ++i)
    cheapest[i] = static_cast<size_t>(std::min_element(g.nodeCost[i].begin(), g.nodeCost[i].end()) -
                                      g.nodeCost[i].begin());
  EXPECT_LE(s.cost, g.cost(cheapest));
  EXPECT_LE(s.cost, g.cost(first));
  for (size_t i = 0; i < n; ++i)
    for (size_t c = 0; c < 5; ++c) {
      std::vector<size_t> other = s.choice;
      other[i] = c;
      EXPECT_GE(g.cost(other), s.cost - 1e-9) << "node " << i << " config " << c;
    }
}

TEST(LayerwiseSearchTest, RandomDagsMatchBruteForce) {
  std::mt19937 rng(4);
  std::bernoulli_distribution link(0.35);
  for (int trial = 0; trial < 30; ++trial) {
    size_t n = 3 + trial % 5;
    std::vector<std::pair<size_t, size_t>> edges;
    for (size_t b = 1; b < n; ++b) {
      edges.push_back({b - 1, b});
      for (size_t a = 0; a + 1 < b; ++a)
        if (link(rng))
          edges.push_back({a, b});
    }
    expectOptimal(randomProblem(rng, n, edges, 3), "dag");
  }
}

/// A chain whose optimum is known: see test/lit/parallel/layerwise-*.
constexpr const char* kMlp = R"(
graph @mlp(%x: f32[64,256] @data, %y: i64[64] @label) {
  %w1 = param "w1" : f32[256,256]
  %w2 = param "w2" : f32[256,256]
  %h = matmul(%x, %w1) : f32[64,256] loc("fc1")
  %r = relu(%h) : f32[64,256] loc("relu")
  %o = matmul(%r, %w2) : f32[64,256] loc("fc2")
  %l = softmax_xent(%o, %y) : f32[] loc("loss")
  return %l
}
)";

DeviceSpec specWith(double flops, double bandwidth, double latency) {
  DeviceSpec s;
  s.name = "test";
  s.fp32Flops = s.tf32Flops = flops;
  s.memBandwidth = 1e15;
  s.launchSeconds = 0;
  s.memoryBytes = int64_t{1} << 40;
  s.intraBandwidth = s.interBandwidth = bandwidth;
  s.intraLatency = s.interLatency = latency;
  s.devicesPerNode = 8;
  return s;
}

TEST(LayerwiseSearchTest, GraphSearchMatchesItsCostFunction) {
  // The chosen configs' cost, recomputed from the @par they wrote, is the
  // predicted cost; and no classic strategy is cheaper.
  for (double bw : {1e6, 1e9, 1e12}) {
    CostModel cm(specWith(1e9, bw, 1e-6));
    auto g = parseOk(kMlp);
    ASSERT_TRUE(g);
    auto r = searchLayerwise(*g, cm, 4);
    ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
    auto again = layerwiseCostOf(*g, cm, 4);
    ASSERT_TRUE(static_cast<bool>(again)) << llvm::toString(again.takeError());
    EXPECT_NEAR(*again, r->predictedSeconds, 1e-12 + 1e-9 * r->predictedSeconds);
    for (const char* strategy : {"data", "model", "owt"}) {
      auto h = parseOk(kMlp);
      auto pass = createParallelizePass(std::string("strategy=") + strategy + ",gpus=4");
      ASSERT_TRUE(static_cast<bool>(pass));
      PassContext ctx;
      ASSERT_FALSE(static_cast<bool>((*pass)->run(*h, ctx)));
      auto t = layerwiseCostOf(*h, cm, 4);
      ASSERT_TRUE(static_cast<bool>(t));
      EXPECT_LE(r->predictedSeconds, *t * (1 + 1e-12)) << strategy << " at " << bw << " B/s";
    }
  }
}

TEST(LayerwiseSearchTest, SlowLinksKeepEverythingOnOneDevice) {
  // Links so slow that any transfer or sync costs more than all compute:
  // every op whole on device 0.
  CostModel cm(specWith(1e12, 1, 1));
  auto g = parseOk(kMlp);
  ASSERT_TRUE(g);
  ASSERT_TRUE(static_cast<bool>(searchLayerwise(*g, cm, 4)));
  for (const auto& op : g->ops()) {
    ASSERT_TRUE(op->annotations().par) << op->describe();
    EXPECT_TRUE(op->annotations().par->degrees.empty()) << op->describe();
    EXPECT_EQ(op->annotations().par->devices, std::vector<int64_t>{0}) << op->describe();
  }
}

TEST(LayerwiseSearchTest, RunningStatisticsHaveNoGradientToSync) {
  // %stat is written by an assign (a running statistic): replicating the
  // mul that reads it on 4 devices costs what one device's mul costs, with
  // no all-reduce of a gradient it does not have. The trained %w does pay
  // one when its matmul is replicated.
  constexpr const char* kStat = R"(
graph @g(%x: f32[64,256] @data) {
  %w = param "w" : f32[256,256]
  %stat = param "stat" : f32[65536]
  %h = matmul(%x, %w) : f32[64,256] loc("fc")
  %l = reduce_mean(%h) {axes = [0, 1], keepdims = 0} : f32[] loc("loss")
  %c = constant() {value = [0.9]} : f32[]
  %m = mul(%stat, %c) : f32[65536] loc("decay")
  assign(%stat, %m)
  return %l
}
)";
  CostModel cm(specWith(1e12, 1e3, 0));
  auto costWith = [&](std::vector<int64_t> matmulDevices, std::vector<int64_t> mulDevices) {
    auto g = parseOk(kStat);
    EXPECT_TRUE(g);
    for (auto& op : g->ops()) {
      if (op->kind() == OpKind::Constant || op->kind() == OpKind::Assign)
        continue;
      ParallelConfig par;
      par.devices = op->loc().name == "decay" ? mulDevices
                    : op->loc().name == "fc"  ? matmulDevices
                                              : std::vector<int64_t>{0};
      op->annotations().par = par;
    }
    auto t = layerwiseCostOf(*g, cm, 4);
    EXPECT_TRUE(static_cast<bool>(t)) << llvm::toString(t.takeError());
    return t ? *t : -1.0;
  };
  double one = costWith({0}, {0});
  EXPECT_NEAR(costWith({0}, {0, 1, 2, 3}), one, 1e-12 * one);
  // w's 256 KiB over 1 KB/s links: minutes of all-reduce.
  EXPECT_GT(costWith({0, 1, 2, 3}, {0}), one + 100);
}

TEST(LayerwiseSearchTest, MeasuredTimesDriveTheSearch) {
  // The same slow links, but a profile that measured relu at 1e8 s: now
  // splitting it over all four devices pays for any transfer.
  auto profile =
      parseOpProfile(R"({"ops": [{"op": "relu", "loc": "relu", "seconds": 1e8}]})", "p.json");
  ASSERT_TRUE(static_cast<bool>(profile));
  CostModel cm(specWith(1e12, 1, 1), std::move(*profile));
  auto g = parseOk(kMlp);
  ASSERT_TRUE(g);
  auto r = searchLayerwise(*g, cm, 4);
  ASSERT_TRUE(static_cast<bool>(r));
  bool seen = false;
  for (const auto& op : g->ops()) {
    if (op->loc().name != "relu")
      continue;
    const ParallelConfig& par = *op->annotations().par;
    ASSERT_EQ(par.degrees.size(), 1u);
    EXPECT_EQ(par.degrees[0].second, 4);
    seen = true;
  }
  EXPECT_TRUE(seen);
  // The measured time is in the cost: a quarter of 1e8 s, forward and backward.
  EXPECT_GE(r->predictedSeconds, 2 * 1e8 / 4);
}

} // namespace
} // namespace lwcc
