//===- MemoryPlanTest.cpp - Greedy placement of arena buffers -------------===//
#include "passes/MemoryPlan.h"

#include "TestUtil.h"

#include "llvm/Support/FormatVariadic.h"

#include "gtest/gtest.h"
#include <algorithm>
#include <numeric>
#include <random>

using namespace lwcc;

namespace {

/// The placement by its definition, quadratic: in size order (equal sizes
/// in their order), each buffer at the lowest offset clear of every buffer
/// placed before it on its device and live at the same time.
std::vector<int64_t> placedByDefinition(std::vector<ArenaBuffer> buffers) {
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return buffers[a].bytes > buffers[b].bytes; });
  std::vector<size_t> placed;
  for (size_t i : order) {
    ArenaBuffer& b = buffers[i];
    // The lowest offset is 0 or the end of a buffer in the way.
    std::vector<int64_t> candidates = {0};
    for (size_t j : placed)
      candidates.push_back(buffers[j].offset + buffers[j].bytes);
    std::sort(candidates.begin(), candidates.end());
    for (int64_t at : candidates) {
      bool clear = true;
      for (size_t j : placed) {
        const ArenaBuffer& o = buffers[j];
        bool together = b.pinned || o.pinned || (o.first <= b.last && b.first <= o.last);
        if (o.device == b.device && together && at < o.offset + o.bytes && o.offset < at + b.bytes)
          clear = false;
      }
      if (clear) {
        b.offset = at;
        break;
      }
    }
    placed.push_back(i);
  }
  std::vector<int64_t> out;
  for (const ArenaBuffer& b : buffers)
    out.push_back(b.offset);
  return out;
}

TEST(MemoryPlan, PlacementIsTheLowestClearOffsetInSizeOrder) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 200; ++round) {
    const size_t n = 1 + rng() % 120, steps = 1 + rng() % 60;
    const int64_t devices = 1 + static_cast<int64_t>(rng() % 3);
    std::vector<ArenaBuffer> buffers(n);
    for (ArenaBuffer& b : buffers) {
      // Few distinct sizes: ties in size order matter too.
      b.bytes = 256 * static_cast<int64_t>(1 + rng() % 6);
      b.device = static_cast<int64_t>(rng() % devices);
      b.first = rng() % steps;
      // Some live to the end, as a step's gradients do.
      b.last = rng() % 4 == 0 ? steps : b.first + rng() % (steps - b.first + 1);
      b.pinned = rng() % 20 == 0;
    }
    std::vector<int64_t> want = placedByDefinition(buffers);
    placeBuffers(buffers);
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(buffers[i].offset, want[i]) << "round " << round << ", buffer " << i;
  }
}

TEST(MemoryPlan, ManyBuffersLiveTogetherArePlacedByTheDefinition) {
  // A pipeline stage's pattern: each micro-batch's activations live from
  // its forward to its backward, nested, so hundreds are live beside each
  // buffer, with short-lived temporaries between them and a few pinned.
  std::mt19937_64 rng(29);
  for (int round = 0; round < 6; ++round) {
    std::vector<ArenaBuffer> buffers;
    const size_t microbatches = 6 + rng() % 6, layers = 20, steps = 2 * microbatches * layers + 4;
    for (size_t m = 0; m < microbatches; ++m)
      for (size_t k = 0; k < layers; ++k) {
        ArenaBuffer act;
        act.bytes = 256 * static_cast<int64_t>(1 + rng() % 9);
        act.first = m * layers + k;
        act.last = steps - 1 - m * layers - k - rng() % 2;
        buffers.push_back(act);
        ArenaBuffer tmp = act;
        tmp.bytes = 256 * static_cast<int64_t>(1 + rng() % 12);
        tmp.last = tmp.first + rng() % 3;
        buffers.push_back(tmp);
      }
    for (int p = 0; p < 3; ++p)
      buffers.push_back({256 * static_cast<int64_t>(1 + rng() % 9), 0, 0, 0, true, -1});
    std::shuffle(buffers.begin(), buffers.end(), rng);
    std::vector<int64_t> want = placedByDefinition(buffers);
    placeBuffers(buffers);
    for (size_t i = 0; i < buffers.size(); ++i)
      ASSERT_EQ(buffers[i].offset, want[i]) << "round " << round << ", buffer " << i;
  }
}

TEST(MemoryPlan, ReplicatedDevicesArePlacedByTheDefinitionToo) {
  // Devices running one program (data parallelism's replicas) interleave
  // their ops in the step: device d's op at t is at 4t + d. Device 3 runs
  // it with one buffer's size or lifetime changed: its placement may differ.
  std::mt19937_64 rng(13);
  for (int round = 0; round < 100; ++round) {
    const size_t n = 1 + rng() % 60, steps = 1 + rng() % 30;
    std::vector<ArenaBuffer> one(n);
    for (ArenaBuffer& b : one) {
      b.bytes = 256 * static_cast<int64_t>(1 + rng() % 6);
      b.first = rng() % steps;
      b.last = rng() % 4 == 0 ? steps : b.first + rng() % (steps - b.first + 1);
      b.pinned = rng() % 20 == 0;
    }
    std::vector<ArenaBuffer> buffers;
    for (int64_t d = 0; d < 4; ++d)
      for (ArenaBuffer b : one) {
        b.device = d;
        b.first = 4 * b.first + d;
        b.last = 4 * b.last + d;
        buffers.push_back(b);
      }
    ArenaBuffer& changed = buffers[3 * n + rng() % n];
    if (rng() % 2)
      changed.bytes += 256;
    else
      changed.last += 4 * (1 + rng() % 3);
    std::vector<int64_t> want = placedByDefinition(buffers);
    placeBuffers(buffers);
    for (size_t i = 0; i < buffers.size(); ++i)
      ASSERT_EQ(buffers[i].offset, want[i]) << "round " << round << ", buffer " << i;
  }
}

TEST(MemoryPlan, BuffersLiveTogetherDoNotShareBytes) {
  std::vector<ArenaBuffer> buffers(5);
  buffers[0] = {512, 0, 0, 3, false, -1};
  buffers[1] = {256, 0, 2, 5, false, -1}; // live with 0 and 2: above both
  buffers[2] = {512, 0, 4, 6, false, -1}; // after 0: reuses its bytes
  buffers[3] = {256, 1, 0, 6, false, -1}; // another device: its own arena
  buffers[4] = {256, 0, 9, 9, true, -1};  // pinned: clear of every other buffer
  placeBuffers(buffers);
  EXPECT_EQ(buffers[0].offset, 0);
  EXPECT_EQ(buffers[2].offset, 0);
  EXPECT_EQ(buffers[1].offset, 512);
  EXPECT_EQ(buffers[3].offset, 0);
  EXPECT_EQ(buffers[4].offset, 768);
}

/// One op of a random planned graph: its result's rows (of 8 floats),
/// device and offset, and its operand (an earlier result, or -1 and -2: the
/// inputs of 8 and 16 rows). exp may write over its operand, gemm not.
struct PlannedOp {
  std::string kind;
  int64_t rows = 0, device = 0, offset = 0;
  int operand = -1;
};

/// What checkMemoryPlan must say of `ops` (lines from `line0`) by its
/// definition, quadratic: every pair of results on one device sharing bytes
/// while both live, the first pair in op order, unless the later is
/// written in place over the earlier by an op that reads it as it dies
/// ("" when none).
std::string overlapByDefinition(const std::vector<PlannedOp>& ops, size_t line0) {
  const size_t n = ops.size();
  std::vector<size_t> last(n);
  for (size_t i = 0; i < n; ++i) {
    last[i] = i;
    for (size_t j = i + 1; j < n; ++j)
      if (ops[j].operand == static_cast<int>(i))
        last[i] = j;
  }
  last[n - 1] = n; // returned
  for (size_t a = 0; a < n; ++a)
    for (size_t b = a + 1; b < n; ++b) {
      const PlannedOp &x = ops[a], &y = ops[b];
      const int64_t xhi = x.offset + 32 * x.rows, yhi = y.offset + 32 * y.rows;
      if (x.device != y.device || xhi <= y.offset || yhi <= x.offset || last[a] < b)
        continue;
      bool inPlace = last[a] == b && y.kind == "exp" && y.operand == static_cast<int>(a);
      if (!inPlace)
        return llvm::formatv("t.lwir:{0}:3: '{1}' op: @buf [{2}, {3}) overlaps the live "
                             "result of '{4}' op at [{5}, {6})",
                             line0 + b, y.kind, y.offset, yhi, x.kind, x.offset, xhi)
            .str();
    }
  return "";
}

TEST(MemoryPlan, CheckFindsTheFirstOverlapOfLiveResults) {
  std::mt19937_64 rng(11);
  int rejected = 0, accepted = 0;
  for (int round = 0; round < 400; ++round) {
    const size_t n = 2 + rng() % 40;
    const int64_t devices = 1 + static_cast<int64_t>(rng() % 2);
    std::vector<PlannedOp> ops(n);
    std::string text = "graph @g(%x: f32[8,8] @data, %y: f32[16,8] @data) {\n"
                       "  %w = param \"w\" : f32[8,8]\n";
    for (size_t i = 0; i < n; ++i) {
      // Few offsets: many results share bytes, some of them in place.
      PlannedOp& op = ops[i];
      op.kind = rng() % 3 ? "exp" : "gemm";
      op.device = static_cast<int64_t>(rng() % devices);
      op.offset = 64 * static_cast<int64_t>(rng() % 16);
      op.operand =
          i == 0 || rng() % 5 == 0 ? -1 - static_cast<int>(rng() % 2) : static_cast<int>(rng() % i);
      op.rows = op.operand == -1 ? 8 : op.operand == -2 ? 16 : ops[op.operand].rows;
      std::string arg = op.operand == -1   ? "%x"
                        : op.operand == -2 ? "%y"
                                           : "%v" + std::to_string(op.operand);
      text += llvm::formatv("  %v{0} = {1}({2}{3}) : f32[{4},8] @dev({5}) @buf({6})\n", i, op.kind,
                            arg, op.kind == "gemm" ? ", %w" : "", op.rows, op.device, op.offset)
                  .str();
    }
    text += llvm::formatv("  return %v{0}\n}\n", n - 1).str();
    auto g = test::parseOk(text, "t.lwir");
    ASSERT_TRUE(g) << text;
    const std::string want = overlapByDefinition(ops, 3);
    llvm::Error e = checkMemoryPlan(*g);
    const std::string got = e ? llvm::toString(std::move(e)) : "";
    ASSERT_EQ(got, want) << text;
    ++(want.empty() ? accepted : rejected);
  }
  // Both answers are exercised.
  EXPECT_GT(accepted, 20);
  EXPECT_GT(rejected, 20);
}

} // namespace

// The CUDA runtime's padded copy of a convolution's image where its pads
// differ between the sides of a dim (cuDNN pads both sides alike), in each
// direction: x for the forward and the filter gradient, dx for the input
// gradient; none with even pads or for other ops.
TEST(MemoryPlan, ConvolutionsWithUnevenPadsCopyTheirImagePadded) {
  auto g = parseGraph(R"(graph @g(%x: f32[2,3,9,9] @data) {
  %w = param "w" : f32[4,3,2,2]
  %y = conv2d(%x, %w) {pads = [0, 0, 1, 1]} : f32[2,4,9,9]
  %e = conv2d(%x, %w) {pads = [1, 1, 1, 1]} : f32[2,4,10,10]
  %dx = conv2d_grad_input(%y, %w) {pads = [1, 0, 0, 0], input_shape = [2, 3, 9, 9]} : f32[2,3,9,9]
  %dw = conv2d_grad_filter(%x, %y) {pads = [0, 2, 0, 0], filter_shape = [4, 3, 2, 2]} : f32[4,3,2,2]
  %r = relu(%y) : f32[2,4,9,9]
  return %y, %e, %dx, %dw, %r
}
)",
                      "t.lwir");
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  std::vector<int64_t> bytes;
  for (const auto& op : (*g)->ops())
    bytes.push_back(convPadBytes(*op));
  // 2*3*10*10 floats (2400 bytes, to 2560), 2*3*10*9 (2160, 2304), 2*3*9*11 (2376, 2560).
  EXPECT_EQ(bytes, (std::vector<int64_t>{2560, 0, 2304, 2560, 0}));
}
