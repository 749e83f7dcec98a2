//===- MemoryPlanTest.cpp - Greedy placement of arena buffers -------------===//
#include "passes/MemoryPlan.h"

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

} // namespace
