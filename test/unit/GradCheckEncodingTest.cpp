//===- GradCheckEncodingTest.cpp - Gradient rules of the encoding ops -----===//
//
// cumsum, tile, mod, sin, cos and the norm reductions (ir/EncodingOps.cpp),
// checked against central finite differences over random configurations
// (GradCheckCase.h).
//
//===----------------------------------------------------------------------===//
#include "GradCheckCase.h"

using namespace lwcc;
using namespace lwcc::test;
using Dist = GradCase::Dist;

namespace {

TEST(GradCheck, CumSum) {
  // Every combination of exclusive and reverse, on a random axis spelled
  // either way.
  forSeeds(8, [](GradCase& c, int seed) {
    Shape xs = c.randShape(1, 4);
    int64_t rank = static_cast<int64_t>(xs.size());
    int64_t axis = c.spellAxis(c.randInt(0, rank - 1), rank);
    int64_t exclusive = (seed - 1) % 2, reverse = ((seed - 1) / 2) % 2;
    c.noteShape("x", xs).note("axis ").note(axis).note(" exclusive ").note(exclusive);
    c.note(" reverse ").note(reverse);
    c.test(OpKind::CumSum, {c.param(xs)},
           {{"axis", axis}, {"exclusive", exclusive}, {"reverse", reverse}});
  });
}

TEST(GradCheck, Tile) {
  // Seed 1 repeats nothing; the others a random repeat per dim.
  forSeeds(6, [](GradCase& c, int seed) {
    Shape xs = c.randShape(1, 4, 3);
    Ints repeats;
    for (size_t d = 0; d < xs.size(); ++d)
      repeats.push_back(seed == 1 ? 1 : c.randInt(1, 3));
    c.noteShape("x", xs).noteInts("repeats", repeats);
    c.test(OpKind::Tile, {c.param(xs)}, {{"repeats", repeats}});
  });
}

TEST(GradCheck, ModFmod) {
  // Equal shapes, then each side broadcast.
  forSeeds(6, [](GradCase& c, int seed) {
    int64_t m = c.randInt(2, 4), n = c.randInt(2, 4);
    const std::pair<Shape, Shape> kinds[] = {{{m, n}, {m, n}}, {{m, n}, {n}}, {{n}, {m, n}}};
    auto [as, bs] = kinds[(seed - 1) % 3];
    c.noteShape("a", as).noteShape("b", bs);
    Value* a = c.param(as, Dist::Normal);
    c.test(OpKind::Mod, {a, c.param(bs, Dist::AwayFromZero)}, {{"fmod", 1}});
  });
}

TEST(GradCheck, Sin) {
  forSeeds(3, [](GradCase& c, int) {
    Shape xs = c.randShape(1, 4);
    c.noteShape("x", xs);
    c.test(OpKind::Sin, {c.param(xs)});
  });
}

TEST(GradCheck, Cos) {
  forSeeds(3, [](GradCase& c, int) {
    Shape xs = c.randShape(1, 4);
    c.noteShape("x", xs);
    c.test(OpKind::Cos, {c.param(xs)});
  });
}

void checkNorm(OpKind kind, Dist dist) {
  forSeeds(6, [&](GradCase& c, int seed) {
    auto [xs, attrs] = randReduction(c, seed, false);
    int64_t keep = seed % 2;
    attrs.push_back({"keepdims", keep});
    c.noteShape("x", xs).note("keepdims ").note(keep);
    c.test(kind, {c.param(xs, dist)}, attrs);
  });
}

TEST(GradCheck, ReduceL1) { checkNorm(OpKind::ReduceL1, Dist::AwayFromZero); }
TEST(GradCheck, ReduceL2) { checkNorm(OpKind::ReduceL2, Dist::Normal); }
TEST(GradCheck, ReduceSumSquare) { checkNorm(OpKind::ReduceSumSquare, Dist::Normal); }

TEST(GradCheck, ReduceL2OfZerosIsZero) {
  // A zero norm passes no gradient (as PyTorch's), not NaN.
  forSeeds(1, [](GradCase& c, int) {
    Value* x = c.paramOf({2, 3}, {0, 0, 0, 1, -2, 0.5});
    Value* n = c.emit(OpKind::ReduceL2, {x}, {{"axes", Ints{1}}, {"keepdims", 0}});
    c.result(c.emit(OpKind::Mul, {n, c.floatConstant({}, {1.0})}));
  });
}

} // namespace
