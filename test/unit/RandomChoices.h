//===- RandomChoices.h - The random choices of a seeded test case -*- C++ -*-===//
//
// The randomized cases (GradCase, KCase) draw their shapes, axes and values
// from one seeded generator through these choices, so a seed names a case.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace lwcc::test {

class RandomChoices {
public:
  explicit RandomChoices(uint64_t seed) : rng_(seed) {}

  int64_t randInt(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  double uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng_);
  }
  bool coin() { return randInt(0, 1) == 1; }
  /// A shape of rank in [minRank, maxRank] with dims in [1, maxDim].
  std::vector<int64_t> randShape(int64_t minRank, int64_t maxRank, int64_t maxDim = 4) {
    std::vector<int64_t> s(randInt(minRank, maxRank));
    for (int64_t& d : s)
      d = randInt(1, maxDim);
    return s;
  }
  /// `axis` of a rank-`rank` tensor, spelled negatively half of the time.
  int64_t spellAxis(int64_t axis, int64_t rank) { return coin() ? axis - rank : axis; }
  /// A non-empty random subset of a rank-`rank` tensor's axes in
  /// increasing order, each spelled as spellAxis does.
  std::vector<int64_t> randAxes(int64_t rank) {
    std::vector<int64_t> axes;
    for (int64_t d = 0; d < rank; ++d)
      if (coin())
        axes.push_back(spellAxis(d, rank));
    if (axes.empty())
      axes.push_back(spellAxis(randInt(0, rank - 1), rank));
    return axes;
  }
  std::mt19937_64& rng() { return rng_; }

protected:
  std::mt19937_64 rng_;
};

} // namespace lwcc::test
