//===- SimulatorTest.cpp - The simulator, the hypergraph partition, profiles -===//
#include "cost/Simulator.h"

#include "TestUtil.h"
#include "lwrt/profile.h"
#include "plan/Hypergraph.h"

#include <algorithm>
#include <set>
#include <tuple>

namespace lwcc::test {
namespace {

/// Every compute op 1 s, every communication op 2 s.
SimCosts unitCosts(int64_t devicesPerNode = 0) {
  SimCosts c;
  c.opSeconds = [](const Op&) { return 1.0; };
  c.commSeconds = [](const Op&) { return 2.0; };
  c.devicesPerNode = devicesPerNode;
  return c;
}

TEST(SimulatorTest, StreamsAreFifoAndDependencesWait) {
  auto g = parseOk(R"(graph @g(%x: f32[4] @data) {
  %a = relu(%x) : f32[4] @dev(0) loc("a")
  %b = neg(%x) : f32[4] @dev(0) @stream(1) loc("b")
  %c = add(%a, %b) : f32[4] @dev(0) loc("c")
  %d = relu(%x) : f32[4] @dev(0) @stream(1) loc("d")
  return %c, %d
})");
  ASSERT_TRUE(g);
  auto r = simulate(*g, unitCosts());
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  // a, b 0-1 on their streams; c waits for both: 1-2; d follows b: 1-2.
  EXPECT_DOUBLE_EQ(r->stepSeconds, 2.0);
  EXPECT_DOUBLE_EQ(r->computeSeconds.at(0), 4.0);
  ASSERT_EQ(r->events.size(), 4u);
  EXPECT_EQ(r->events.back().loc, "d"); // ties at 1 s: device, then stream order
  EXPECT_DOUBLE_EQ(r->events.back().start, 1.0);
}

TEST(SimulatorTest, StreamsShareTheirDeviceByTheKernelsFill) {
  // Three 1 s kernels on three streams of one device, then one that reads
  // them all. Each taking half the device: two run at once, the third after
  // them; each filling it: one at a time; a second device is another.
  auto g = parseOk(R"(graph @g(%x: f32[4] @data) {
  %a = relu(%x) : f32[4] @dev(0) loc("a")
  %b = neg(%x) : f32[4] @dev(0) @stream(2) loc("b")
  %c = neg(%x) : f32[4] @dev(0) @stream(3) loc("c")
  %o = relu(%x) : f32[4] @dev(1) @stream(2) loc("o")
  %s = add(%a, %b) : f32[4] @dev(0) loc("s")
  %t = add(%s, %c) : f32[4] @dev(0) loc("t")
  return %t, %o
})");
  ASSERT_TRUE(g);
  // fill 0.5: a and b 0-1, c 1-2 with s beside it, t 2-3; fill 0.3: a, b
  // and c 0-1, s 1-2, t 2-3; fill 1: a 0-1, b 1-2, c 2-3, s 3-4, t 4-5.
  // o, on device 1, runs 0-1 whatever device 0 does.
  for (auto [fill, want] : {std::pair{0.5, 3.0}, {0.3, 3.0}, {1.0, 5.0}}) {
    SimCosts c = unitCosts();
    c.opFill = [fill = fill](const Op&) { return fill; };
    auto r = simulate(*g, c);
    ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
    EXPECT_DOUBLE_EQ(r->stepSeconds, want) << "fill " << fill;
    for (const SimEvent& e : r->events) {
      if (e.loc == "o") {
        EXPECT_DOUBLE_EQ(e.start, 0.0) << "fill " << fill;
      }
      if (e.loc == "c") {
        EXPECT_DOUBLE_EQ(e.start, fill == 0.3 ? 0.0 : fill == 0.5 ? 1.0 : 2.0) << "fill " << fill;
      }
    }
  }
  // Without opFill the streams run their compute independently.
  auto r = simulate(*g, unitCosts());
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  EXPECT_DOUBLE_EQ(r->stepSeconds, 3.0);
}

TEST(SimulatorTest, LogicalDevicesShareTheirGpusCompute) {
  // One 1 s kernel on each of four devices. On four GPUs they run at once;
  // two devices a GPU, each GPU runs its two one after the other (filling
  // it) or side by side (half of it each).
  auto g = parseOk(R"(graph @g(%x: f32[4] @data) {
  %a = relu(%x) : f32[4] @dev(0) loc("a")
  %b = relu(%x) : f32[4] @dev(1) loc("b")
  %c = relu(%x) : f32[4] @dev(2) loc("c")
  %d = relu(%x) : f32[4] @dev(3) loc("d")
  return %a, %b, %c, %d
})");
  ASSERT_TRUE(g);
  for (auto [perGpu, fill, want] :
       {std::tuple{int64_t{1}, 1.0, 1.0}, {2, 1.0, 2.0}, {2, 0.5, 1.0}, {4, 1.0, 4.0}}) {
    SimCosts c = unitCosts();
    c.devicesPerGpu = perGpu;
    c.opFill = [fill = fill](const Op&) { return fill; };
    auto r = simulate(*g, c);
    ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
    EXPECT_DOUBLE_EQ(r->stepSeconds, want) << perGpu << " a GPU, fill " << fill;
  }
}

TEST(SimulatorTest, DevicesShareTheirNodesCores) {
  // One 1 s kernel on each of four devices of one node, each taking half of
  // its cores: two at a time, the step 2 s; on one device each (or without
  // hostFill) all at once.
  auto g = parseOk(R"(graph @g(%x: f32[4] @data) {
  %a = relu(%x) : f32[4] @dev(0) loc("a")
  %b = relu(%x) : f32[4] @dev(1) loc("b")
  %c = relu(%x) : f32[4] @dev(2) loc("c")
  %d = relu(%x) : f32[4] @dev(3) loc("d")
  return %a, %b, %c, %d
})");
  ASSERT_TRUE(g);
  SimCosts c = unitCosts();
  int64_t seen = 0;
  c.hostFill = [&seen](const Op&, int64_t devices) {
    seen = devices;
    return 0.5;
  };
  auto r = simulate(*g, c);
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  EXPECT_EQ(seen, 4);
  EXPECT_DOUBLE_EQ(r->stepSeconds, 2.0);
  c.devicesPerNode = 1; // a node per device
  r = simulate(*g, c);
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  EXPECT_DOUBLE_EQ(r->stepSeconds, 1.0);
  r = simulate(*g, unitCosts());
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  EXPECT_DOUBLE_EQ(r->stepSeconds, 1.0);
}

TEST(SimulatorTest, MeasuredWaitsBeyondTheReplayDelayACollective) {
  // Device 1 reaches the all-reduce at 1 s, device 0 at 2 s: the replay
  // waits 1 s on device 1, 0.5 s on average. Measured waits of 1.5 s on
  // average start the op 1 s later (3-5), fewer than the replay's change
  // nothing.
  auto g = parseOk(R"(graph @g(%x: f32[4] @data) {
  %a = relu(%x) : f32[4] @dev(0) loc("a")
  %b = relu(%a) : f32[4] @dev(0) loc("b")
  %c = relu(%x) : f32[4] @dev(1) loc("c")
  %s0, %s1 = all_reduce(%b, %c) {devices = [0, 1]} : f32[4], f32[4] loc("sum")
  return %s0, %s1
})");
  ASSERT_TRUE(g);
  for (auto [w0, w1, step] : {std::tuple{1.0, 2.0, 5.0}, {0.0, 0.5, 4.0}}) {
    SimCosts c = unitCosts();
    c.commWaitOn = [w0 = w0, w1 = w1](const Op&, int64_t d, int64_t) -> std::optional<double> {
      return d == 0 ? w0 : w1;
    };
    auto r = simulate(*g, c);
    ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
    EXPECT_DOUBLE_EQ(r->stepSeconds, step) << w0 << " " << w1;
  }
}

TEST(SimulatorTest, CollectivesTakeEveryParticipantsStream) {
  auto g = parseOk(R"(graph @g(%x: f32[4] @data) {
  %a = relu(%x) : f32[4] @dev(0) loc("a")
  %b = relu(%x) : f32[4] @dev(1) loc("b")
  %c = relu(%b) : f32[4] @dev(1) loc("c")
  %s0, %s1 = all_reduce(%a, %c) {devices = [0, 1]} : f32[4], f32[4] loc("sum")
  %e = relu(%s0) : f32[4] @dev(0) loc("e")
  return %e
})");
  ASSERT_TRUE(g);
  auto r = simulate(*g, unitCosts());
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  // The all_reduce waits for c (1-2) on device 1: 2-4 on both; e 4-5.
  EXPECT_DOUBLE_EQ(r->stepSeconds, 5.0);
  EXPECT_DOUBLE_EQ(r->commSeconds.at(0), 2.0);
  EXPECT_DOUBLE_EQ(r->commSeconds.at(1), 2.0);
  EXPECT_EQ(r->commBytes, 2 * 1 * 16);
}

TEST(SimulatorTest, ABadCostIsAnError) {
  auto g = parseOk(R"(graph @g(%x: f32[4] @data) {
  %a = relu(%x) : f32[4] loc("a")
  return %a
})");
  ASSERT_TRUE(g);
  SimCosts c = unitCosts();
  c.opSeconds = [](const Op&) { return -1.0; };
  auto r = simulate(*g, c);
  ASSERT_FALSE(static_cast<bool>(r));
  EXPECT_NE(llvm::toString(r.takeError()).find("the cost model gives -1"), std::string::npos);
}

TEST(HypergraphTest, AChainOfEqualOpsIsCutIntoBalancedUnits) {
  std::string text = "graph @chain(%x: f32[256] @data) {\n  %v0 = relu(%x) : f32[256]\n";
  for (int i = 1; i < 8; ++i)
    text += "  %v" + std::to_string(i) + " = relu(%v" + std::to_string(i - 1) + ") : f32[256]\n";
  text += "  return %v7\n}\n";
  auto g = parseOk(text);
  ASSERT_TRUE(g);
  auto stats = partitionHypergraph(*g, 4, 1.1, [](const Op&) { return 1.0; });
  ASSERT_TRUE(static_cast<bool>(stats)) << llvm::toString(stats.takeError());
  // Each op weighs half a part: cut into 8 units of d0, a sixteenth of a
  // part each.
  EXPECT_EQ(stats->ops, 8);
  EXPECT_EQ(stats->splitOps, 8);
  EXPECT_EQ(stats->vertices, 8 * 8);
  EXPECT_TRUE(stats->boundFeasible);
  EXPECT_LE(stats->imbalance(), 1.1);
  ASSERT_EQ(stats->partWeights.size(), 4u);
  std::set<int64_t> devices;
  for (const auto& op : g->ops()) {
    const auto& par = op->annotations().par;
    ASSERT_TRUE(par);
    for (int64_t d : par->devices)
      devices.insert(d);
    if (par->devices.size() == 1) {
      EXPECT_TRUE(par->degrees.empty());
      EXPECT_TRUE(par->sizes.empty());
      continue;
    }
    // Split along d0 over its parts, a piece per part, 32 entries per unit.
    ASSERT_EQ(par->degrees.size(), 1u);
    EXPECT_EQ(par->degrees[0].first, "d0");
    EXPECT_EQ(par->degrees[0].second, static_cast<int64_t>(par->devices.size()));
    ASSERT_EQ(par->sizes.size(), par->devices.size());
    EXPECT_TRUE(std::is_sorted(par->devices.begin(), par->devices.end()));
    int64_t sum = 0;
    for (int64_t s : par->sizes) {
      EXPECT_EQ(s % 32, 0);
      sum += s;
    }
    EXPECT_EQ(sum, 256);
  }
  EXPECT_EQ(devices, (std::set<int64_t>{0, 1, 2, 3}));
  // The same partition again: Zoltan on one rank is deterministic.
  auto again = parseOk(text);
  ASSERT_TRUE(again);
  auto stats2 = partitionHypergraph(*again, 4, 1.1, [](const Op&) { return 1.0; });
  ASSERT_TRUE(static_cast<bool>(stats2));
  EXPECT_EQ(stats2->cutBytes, stats->cutBytes);
}

TEST(HypergraphTest, LightOpsStayWholeAndFollowACutNeighbour) {
  // "big" weighs 40 of 42: cut into units of batch rows of at most a
  // sixteenth of a part (42 / 2 / 16); "tail" is light but follows big's
  // cut; "side" reads a param alone: light, whole.
  auto g = parseOk(R"(graph @g(%x: f32[64,8] @data) {
  %w = param "w" : f32[8]
  %a = relu(%x) : f32[64,8] loc("big")
  %b = relu(%a) : f32[64,8] loc("tail")
  %c = relu(%w) : f32[8] loc("side")
  return %b, %c
})");
  ASSERT_TRUE(g);
  auto stats = partitionHypergraph(
      *g, 2, 1.1, [](const Op& op) { return op.loc().name == "big" ? 40.0 : 1.0; });
  ASSERT_TRUE(static_cast<bool>(stats)) << llvm::toString(stats.takeError());
  EXPECT_EQ(stats->splitOps, 2);
  // big: 40 / (21 / 16) -> 32 units; tail follows with 32; side is one.
  EXPECT_EQ(stats->vertices, 32 + 32 + 1);
  EXPECT_TRUE(stats->boundFeasible);
  EXPECT_LE(stats->imbalance(), 1.1);
}

TEST(HypergraphTest, AnOpThatCannotBeCutMakesTheBoundUnreachable) {
  // A one-entry tensor has no dim to cut.
  auto g = parseOk(R"(graph @g(%x: f32[1] @data) {
  %a = relu(%x) : f32[1] loc("big")
  %b = relu(%a) : f32[1] loc("small")
  return %b
})");
  ASSERT_TRUE(g);
  auto stats = partitionHypergraph(*g, 2, 1.1,
                                   [](const Op& op) { return op.loc().name == "big" ? 9.0 : 1.0; });
  ASSERT_TRUE(static_cast<bool>(stats));
  EXPECT_EQ(stats->splitOps, 0);
  EXPECT_FALSE(stats->boundFeasible);
}

TEST(ProfileTest, LabelsSplitIntoMnemonicAndLocation) {
  using lwrt::OpTimeline;
  EXPECT_EQ(OpTimeline::splitLabel("conv2d conv1"),
            (std::pair<std::string, std::string>{"conv2d", "conv1"}));
  EXPECT_EQ(OpTimeline::splitLabel("relu relu"), (std::pair<std::string, std::string>{"relu", ""}));
  EXPECT_EQ(OpTimeline::splitLabel("gemm"), (std::pair<std::string, std::string>{"gemm", ""}));
  EXPECT_EQ(OpTimeline::splitLabel("add block 1/add"),
            (std::pair<std::string, std::string>{"add", "block 1/add"}));
}

} // namespace
} // namespace lwcc::test
