//===- GradCheckTensorTest.cpp - Gradient rules of tensor ops -------------===//
//
// Broadcasting arithmetic, reductions, gemm and matmul, and shape ops,
// checked against central finite differences over random configurations
// (GradCheckCase.h; the neural-network ops are in GradCheckTest.cpp).
//
//===----------------------------------------------------------------------===//
#include "GradCheckCase.h"

using namespace lwcc;
using namespace lwcc::test;
using Dist = GradCase::Dist;

namespace {

//===----------------------------------------------------------------------===//
// Broadcasting arithmetic
//===----------------------------------------------------------------------===//

/// Operand shapes that numpy-broadcast: suffixes of a random shape with some
/// dims set to 1, so either side may have fewer dims or be stretched. Seed 1
/// uses equal shapes, seed 2 stretches both sides ([m, 1] and [1, n]).
std::pair<Shape, Shape> broadcastShapes(GradCase& c, int seed) {
  Shape out(c.randInt(1, 4));
  for (int64_t& d : out)
    d = c.randInt(2, 3);
  if (seed == 1)
    return {out, out};
  if (seed == 2)
    return {{out[0], 1}, {1, c.randInt(2, 3)}};
  auto operand = [&](int64_t rank) {
    Shape s(out.end() - rank, out.end());
    for (int64_t& d : s)
      if (c.randInt(0, 2) == 0)
        d = 1;
    return s;
  };
  Shape full = operand(static_cast<int64_t>(out.size()));
  Shape other = operand(c.randInt(0, static_cast<int64_t>(out.size())));
  if (seed % 2)
    return {full, other};
  return {other, full};
}

void checkBinary(OpKind kind, Dist a, Dist b) {
  forSeeds(8, [&](GradCase& c, int seed) {
    auto [as, bs] = broadcastShapes(c, seed);
    c.noteShape("a", as).noteShape("b", bs);
    Value* x = c.param(as, a);
    c.test(kind, {x, c.param(bs, b)});
  });
}

TEST(GradCheck, Add) { checkBinary(OpKind::Add, Dist::Normal, Dist::Normal); }
TEST(GradCheck, Sub) { checkBinary(OpKind::Sub, Dist::Normal, Dist::Normal); }
TEST(GradCheck, Mul) { checkBinary(OpKind::Mul, Dist::Normal, Dist::Normal); }
TEST(GradCheck, Div) { checkBinary(OpKind::Div, Dist::Normal, Dist::AwayFromZero); }
TEST(GradCheck, Pow) {
  // Positive bases; exponents of either sign.
  checkBinary(OpKind::Pow, Dist::Positive, Dist::Normal);
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

void checkReduce(OpKind kind) {
  forSeeds(6, [&](GradCase& c, int seed) {
    auto [xs, attrs] = randReduction(c, seed, true);
    int64_t keep = seed % 2;
    if (keep == 0 || c.coin()) // keepdims = 1 is the default
      attrs.push_back({"keepdims", keep});
    c.noteShape("x", xs).note("keepdims ").note(keep);
    c.test(kind, {c.param(xs)}, attrs);
  });
}

TEST(GradCheck, ReduceMean) { checkReduce(OpKind::ReduceMean); }
TEST(GradCheck, ReduceSum) { checkReduce(OpKind::ReduceSum); }

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

TEST(GradCheck, Gemm) {
  forSeeds(10, [](GradCase& c, int seed) {
    int64_t m = c.randInt(1, 4), k = c.randInt(1, 4), n = c.randInt(1, 4);
    int64_t ta = seed % 2, tb = (seed / 2) % 2;
    // C: absent, or any shape that broadcasts to [M, N].
    const std::vector<Shape> cShapes = {{}, {n}, {1, n}, {m, 1}, {1, 1}, {m, n}};
    int64_t which = (seed - 1) % 7;
    std::vector<NamedAttr> attrs = {{"transA", ta}, {"transB", tb}};
    if (seed > 2) { // seeds 1 and 2: alpha = beta = 1
      double alpha = c.uniform(-2, 2), beta = c.uniform(-2, 2);
      attrs.push_back({"alpha", alpha});
      attrs.push_back({"beta", beta});
      c.note("alpha ").note(alpha).note(" beta ").note(beta).note(" ");
    }
    Shape as = ta ? Shape{k, m} : Shape{m, k}, bs = tb ? Shape{n, k} : Shape{k, n};
    c.noteShape("A", as).noteShape("B", bs).note("transA ").note(ta).note(" transB ").note(tb);
    std::vector<Value*> operands = {c.param(as), c.param(bs)};
    if (which < 6) {
      c.noteShape(" C", cShapes[which]);
      operands.push_back(c.param(cShapes[which]));
    }
    c.test(OpKind::Gemm, operands, attrs);
  });
}

TEST(GradCheck, MatMul) {
  // Each kind of operand ranks twice: vectors, matrices, batches, and batch
  // dims that broadcast on both sides.
  forSeeds(18, [](GradCase& c, int seed) {
    int64_t m = c.randInt(1, 3), k = c.randInt(1, 4), n = c.randInt(1, 3);
    int64_t b1 = c.randInt(2, 3), b2 = c.randInt(2, 3);
    const std::vector<std::pair<Shape, Shape>> kinds = {
        {{k}, {k}},                       // dot product: a scalar
        {{k}, {k, n}},                    // vector @ matrix
        {{m, k}, {k}},                    // matrix @ vector
        {{m, k}, {k, n}},                 // matrix @ matrix
        {{k}, {b1, k, n}},                // vector @ batch
        {{b1, m, k}, {k}},                // batch @ vector
        {{b1, 1, m, k}, {b2, k, n}},      // batch dims broadcast both ways
        {{m, k}, {b1, k, n}},             // matrix against a batch
        {{b1, b2, m, k}, {1, b2, k, n}}}; // rank-4 batches, one stretched
    auto [as, bs] = kinds[(seed - 1) % kinds.size()];
    c.noteShape("a", as).noteShape("b", bs);
    c.test(OpKind::MatMul, {c.param(as), c.param(bs)});
  });
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

TEST(GradCheck, Reshape) {
  forSeeds(4, [](GradCase& c, int) {
    Shape xs = c.randShape(1, 4);
    // The same elements, dims shuffled, some merged, some 1s added.
    Shape to = xs;
    std::shuffle(to.begin(), to.end(), c.rng());
    if (to.size() > 1 && c.coin()) {
      to[1] *= to[0];
      to.erase(to.begin());
    }
    if (c.coin())
      to.insert(to.begin() + c.randInt(0, static_cast<int64_t>(to.size())), 1);
    c.noteShape("x", xs).noteShape("to", to);
    c.test(OpKind::Reshape, {c.param(xs)}, {{"shape", Ints(to)}});
  });
}

TEST(GradCheck, Flatten) {
  forSeeds(5, [](GradCase& c, int seed) {
    Shape xs = c.randShape(1, 4);
    int64_t rank = static_cast<int64_t>(xs.size());
    // Seed 2 flattens from axis 0 ([1, N]), seed 3 from axis rank ([N, 1]).
    int64_t axis = seed == 2 ? 0 : seed == 3 ? rank : c.randInt(0, rank);
    std::vector<NamedAttr> attrs;
    if (seed != 1) { // seed 1: the default axis 1
      if (axis < rank && c.coin())
        axis -= rank;
      attrs.push_back({"axis", axis});
      c.note("axis ").note(axis).note(" ");
    }
    c.noteShape("x", xs);
    c.test(OpKind::Flatten, {c.param(xs)}, attrs);
  });
}

TEST(GradCheck, Transpose) {
  // Seeds 1 and 2 rotate the dims: a perm that is not its own inverse.
  forSeeds(6, [](GradCase& c, int seed) {
    Shape xs = c.randShape(seed <= 2 ? 3 : 1, 4);
    Ints perm(xs.size());
    std::iota(perm.begin(), perm.end(), 0);
    if (seed <= 2)
      std::rotate(perm.begin(), perm.begin() + seed, perm.end());
    else
      std::shuffle(perm.begin(), perm.end(), c.rng());
    c.noteShape("x", xs).noteInts("perm", perm);
    c.test(OpKind::Transpose, {c.param(xs)}, {{"perm", perm}});
  });
}

TEST(GradCheck, Concat) {
  forSeeds(6, [](GradCase& c, int) {
    Shape base = c.randShape(1, 3);
    int64_t rank = static_cast<int64_t>(base.size());
    int64_t axis = c.randInt(0, rank - 1);
    std::vector<Value*> parts;
    for (int64_t i = c.randInt(1, 4); i > 0; --i) {
      Shape s = base;
      s[axis] = c.randInt(1, 3);
      c.noteShape("", s);
      parts.push_back(c.param(s));
    }
    axis = c.spellAxis(axis, rank);
    c.note("axis ").note(axis);
    c.test(OpKind::Concat, parts, {{"axis", axis}});
  });
}

TEST(GradCheck, Slice) {
  // Random starts and ends, out-of-range ones included; even seeds step
  // backwards on every sliced axis.
  forSeeds(8, [](GradCase& c, int seed) {
    Shape xs(c.randInt(1, 3));
    for (int64_t& d : xs)
      d = c.randInt(2, 6);
    int64_t rank = static_cast<int64_t>(xs.size());
    Ints axes(rank);
    std::iota(axes.begin(), axes.end(), 0);
    std::shuffle(axes.begin(), axes.end(), c.rng());
    axes.resize(c.randInt(1, rank));
    Ints starts, ends, steps;
    for (int64_t a : axes) {
      // At least two elements, so that the direction and stride matter.
      int64_t d = xs[a], start, end, step;
      do {
        step = (seed % 2 == 0 ? -1 : 1) * c.randInt(1, std::min<int64_t>(3, d - 1));
        start = c.randInt(-d - 2, d + 2);
        end = c.randInt(-d - 2, d + 2);
      } while (shape::resolveSlice(d, start, end, step).count < 2);
      starts.push_back(start);
      ends.push_back(end);
      steps.push_back(step);
    }
    std::vector<NamedAttr> attrs = {{"starts", starts}, {"ends", ends}};
    bool inOrder = std::is_sorted(axes.begin(), axes.end()) && axes[0] == 0 &&
                   axes.back() == static_cast<int64_t>(axes.size()) - 1;
    if (!inOrder || c.coin()) {
      for (int64_t& a : axes)
        a = c.spellAxis(a, rank);
      attrs.push_back({"axes", axes});
    }
    bool unit = std::all_of(steps.begin(), steps.end(), [](int64_t s) { return s == 1; });
    if (!unit || c.coin())
      attrs.push_back({"steps", steps});
    c.noteShape("x", xs).noteInts("starts", starts).noteInts("ends", ends);
    c.noteInts("axes", axes).noteInts("steps", steps);
    c.test(OpKind::Slice, {c.param(xs)}, attrs);
  });
}

TEST(GradCheck, Split) {
  // Odd seeds leave one part out of the loss: its gradient is zeros.
  forSeeds(6, [](GradCase& c, int seed) {
    Shape xs = c.randShape(1, 3);
    int64_t rank = static_cast<int64_t>(xs.size());
    int64_t axis = seed == 1 ? 0 : c.randInt(0, rank - 1);
    Ints sizes(c.randInt(1, 4));
    for (int64_t& s : sizes)
      s = c.randInt(1, 3);
    xs[axis] = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
    std::vector<NamedAttr> attrs = {{"split", sizes}};
    if (seed != 1) { // seed 1: the default axis 0
      axis = c.spellAxis(axis, rank);
      attrs.push_back({"axis", axis});
    }
    c.noteShape("x", xs).noteInts("split", sizes).note("axis ").note(axis);
    auto parts = c.emitN(OpKind::Split, {c.param(xs)}, attrs, static_cast<unsigned>(sizes.size()));
    int64_t skip = seed % 2 && parts.size() > 1 ? c.randInt(0, parts.size() - 1) : -1;
    for (size_t i = 0; i < parts.size(); ++i)
      if (static_cast<int64_t>(i) != skip)
        c.result(parts[i]);
  });
}

TEST(GradCheck, Gather) {
  // Repeated and negative indices; indices of rank 0 to 2.
  forSeeds(6, [](GradCase& c, int seed) {
    Shape xs = c.randShape(1, 3);
    int64_t rank = static_cast<int64_t>(xs.size());
    int64_t axis = seed == 1 ? 0 : c.randInt(0, rank - 1);
    Shape is = c.randShape(0, 2, 3);
    Ints idx(TensorType(DType::I64, is).numElements());
    for (int64_t& i : idx)
      i = c.randInt(-xs[axis], xs[axis] - 1);
    std::vector<NamedAttr> attrs;
    if (seed != 1) { // seed 1: the default axis 0
      axis = c.spellAxis(axis, rank);
      attrs.push_back({"axis", axis});
    }
    c.noteShape("x", xs).noteShape("indices", is).noteInts("", idx).note("axis ").note(axis);
    c.test(OpKind::Gather, {c.param(xs), c.intConstant(is, idx)}, attrs);
  });
}

TEST(GradCheck, Expand) {
  // Both the operand and 'shape' may be shorter and hold 1s.
  forSeeds(6, [](GradCase& c, int) {
    Shape out(c.randInt(1, 4));
    for (int64_t& d : out)
      d = c.randInt(2, 3);
    int64_t rank = static_cast<int64_t>(out.size());
    int64_t xr = c.randInt(0, rank), tr = c.coin() ? rank : c.randInt(0, rank);
    Shape xs(out.end() - xr, out.end()), to(out.end() - tr, out.end());
    for (int64_t d = 0; d < rank; ++d) {
      int64_t xi = d - (rank - xr), ti = d - (rank - tr);
      // Where both have the dim, one of them may be 1; where only one has
      // it, that one must be the result's.
      if (xi >= 0 && ti >= 0 && c.coin())
        (c.coin() ? xs[xi] : to[ti]) = 1;
    }
    if (xr < rank && tr < rank) // the longer one must carry the leading dims
      to.insert(to.begin(), out.begin(), out.begin() + (rank - tr));
    c.noteShape("x", xs).noteShape("shape", to);
    c.test(OpKind::Expand, {c.param(xs)}, {{"shape", Ints(to)}});
  });
}

TEST(GradCheck, Pad) {
  forSeeds(5, [](GradCase& c, int seed) {
    Shape xs = c.randShape(1, 3);
    Ints pads(2 * xs.size());
    for (int64_t& p : pads)
      p = c.randInt(0, 2);
    std::vector<NamedAttr> attrs = {{"pads", pads}};
    if (seed % 2)
      attrs.push_back({"mode", "constant"});
    if (seed > 2)
      attrs.push_back({"value", c.uniform(-2, 2)});
    c.noteShape("x", xs).noteInts("pads", pads);
    c.test(OpKind::Pad, {c.param(xs)}, attrs);
  });
}

TEST(GradCheck, Cast) {
  // Between float types the gradient is cast back (float64 interpretation
  // does not round).
  forSeeds(4, [](GradCase& c, int seed) {
    Shape xs = c.randShape(0, 3);
    const char* via = seed == 1 ? "f64" : seed == 2 ? "f16" : "f32";
    c.noteShape("x", xs).note("via ").note(via);
    Value* t = c.emit(OpKind::Cast, {c.param(xs)}, {{"to", via}});
    c.test(OpKind::Cast, {t}, {{"to", "f64"}});
  });
}

} // namespace
