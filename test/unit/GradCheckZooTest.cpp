//===- GradCheckZooTest.cpp - Gradients of the model-collection ops -------===//
//
// The activations of today's CNN model collections, prelu, max/min, resize
// and batch norm's inference form (whose statistics the graph computes),
// checked element by element against central finite differences in
// float64 (GradCheckCase.h), away from their kinks: KinkTest.cpp checks
// the kinks against PyTorch's rule.
//
//===----------------------------------------------------------------------===//
#include "GradCheckCase.h"

#include <cmath>

using namespace lwcc;
using namespace lwcc::test;
using Dist = GradCase::Dist;

namespace {

/// Checks op(x) over random shapes of rank 0 to 4.
void checkUnary(OpKind kind, Dist dist, std::vector<NamedAttr> attrs = {}) {
  forSeeds(3, [&](GradCase& c, int) {
    Shape xs = c.randShape(0, 4);
    c.noteShape("x", xs);
    c.test(kind, {c.param(xs, dist)}, attrs);
  });
}

TEST(GradCheckZoo, HardSwish) {
  // Normal values times 4 reach both flat ends and the ramp, away from +-3.
  forSeeds(3, [](GradCase& c, int) {
    Shape xs = c.randShape(1, 4);
    std::vector<double> v(TensorType(DType::F64, xs).numElements());
    for (double& x : v) {
      x = c.uniform(-6.0, 6.0);
      if (std::fabs(std::fabs(x) - 3.0) < 0.05)
        x += 0.2;
    }
    c.noteShape("x", xs);
    c.test(OpKind::HardSwish, {c.paramOf(xs, v)});
  });
}

TEST(GradCheckZoo, HardSigmoid) {
  forSeeds(4, [](GradCase& c, int seed) {
    Shape xs = c.randShape(1, 4);
    double alpha = seed == 1 ? 1.0 / 6.0 : c.uniform(0.1, 0.5), beta = c.uniform(0.3, 0.7);
    std::vector<double> v(TensorType(DType::F64, xs).numElements());
    for (double& x : v) { // away from the ends of the ramp, alpha x + beta in {0, 1}
      x = c.uniform(-8.0, 8.0);
      for (double end : {-beta / alpha, (1 - beta) / alpha})
        if (std::fabs(x - end) < 0.05)
          x += 0.2;
    }
    c.noteShape("x", xs).note("alpha ").note(alpha).note(" beta ").note(beta);
    c.test(OpKind::HardSigmoid, {c.paramOf(xs, v)}, {{"alpha", alpha}, {"beta", beta}});
  });
}

TEST(GradCheckZoo, SmoothActivations) {
  checkUnary(OpKind::Mish, Dist::Normal);
  checkUnary(OpKind::Softplus, Dist::Normal);
  checkUnary(OpKind::Softsign, Dist::AwayFromZero);
}

TEST(GradCheckZoo, ExponentialLinearUnits) {
  checkUnary(OpKind::Elu, Dist::AwayFromZero);
  checkUnary(OpKind::Elu, Dist::AwayFromZero, {{"alpha", 0.4}});
  checkUnary(OpKind::Selu, Dist::AwayFromZero);
  checkUnary(OpKind::Selu, Dist::AwayFromZero, {{"alpha", 1.2}, {"gamma", 0.8}});
  checkUnary(OpKind::Celu, Dist::AwayFromZero);
  checkUnary(OpKind::Celu, Dist::AwayFromZero, {{"alpha", 1.7}});
}

TEST(GradCheckZoo, ThresholdedRelu) {
  forSeeds(3, [](GradCase& c, int) {
    Shape xs = c.randShape(1, 4);
    double alpha = c.uniform(-0.5, 0.5);
    std::vector<double> v(TensorType(DType::F64, xs).numElements());
    for (double& x : v)
      x = alpha + (c.coin() ? 1 : -1) * c.uniform(0.2, 1.5);
    c.noteShape("x", xs).note("alpha ").note(alpha);
    c.test(OpKind::ThresholdedRelu, {c.paramOf(xs, v)}, {{"alpha", alpha}});
  });
}

TEST(GradCheckZoo, PRelu) {
  // Slopes shared, per channel ([C, 1, 1] as the exporters write it) and
  // per element.
  forSeeds(4, [](GradCase& c, int seed) {
    Shape xs = {c.randInt(1, 2), c.randInt(1, 3), c.randInt(1, 3), c.randInt(1, 3)};
    Shape ss = seed == 1 ? Shape{1} : seed == 2 ? Shape{xs[1], 1, 1} : seed == 3 ? xs : Shape{};
    c.noteShape("x", xs).noteShape("slope", ss);
    c.test(OpKind::PRelu, {c.param(xs, Dist::AwayFromZero), c.param(ss)});
  });
}

TEST(GradCheckZoo, MaxAndMin) {
  for (OpKind kind : {OpKind::Max, OpKind::Min})
    forSeeds(3, [&](GradCase& c, int seed) {
      Shape s = c.randShape(1, 3);
      Shape t = seed == 1 ? s : seed == 2 ? Shape{s.back()} : Shape{};
      c.noteShape("a", s).noteShape("b", t);
      // Distinct values in one draw: no ties between a and b.
      int64_t n = TensorType(DType::F64, s).numElements(),
              m = TensorType(DType::F64, t).numElements();
      std::vector<double> v(n + m);
      for (size_t k = 0; k < v.size(); ++k)
        v[k] = (static_cast<double>(k) - static_cast<double>(v.size()) / 2) * 0.1;
      std::shuffle(v.begin(), v.end(), c.rng());
      c.test(kind,
             {c.paramOf(s, {v.begin(), v.begin() + n}), c.paramOf(t, {v.begin() + n, v.end()})});
    });
}

TEST(GradCheckZoo, Where) {
  // A run-time condition (compare of a constant), x and y broadcast.
  forSeeds(3, [](GradCase& c, int seed) {
    Shape s = c.randShape(1, 3);
    Shape xs = seed == 2 ? Shape{s.back()} : s, ys = seed == 3 ? Shape{} : s;
    c.noteShape("cond", s).noteShape("x", xs).noteShape("y", ys);
    int64_t n = TensorType(DType::F64, s).numElements();
    std::vector<double> v(n);
    for (double& e : v)
      e = c.uniform(-1, 1);
    Value* cond = c.emit(OpKind::Compare, {c.floatConstant(s, v), c.floatConstant({}, {0.0})},
                         {{"kind", std::string("greater")}});
    c.test(OpKind::Where, {cond, c.param(xs), c.param(ys)});
  });
}

TEST(GradCheckZoo, Resize) {
  struct M {
    const char *mode, *coord, *nearest;
  };
  const M modes[] = {{"nearest", "asymmetric", "floor"},
                     {"nearest", "half_pixel", "round_prefer_ceil"},
                     {"nearest", "half_pixel", "round_prefer_floor"},
                     {"linear", "half_pixel", "floor"},
                     {"linear", "pytorch_half_pixel", "floor"},
                     {"linear", "align_corners", "floor"},
                     {"linear", "asymmetric", "floor"},
                     {"cubic", "half_pixel", "floor"},
                     {"cubic", "align_corners", "floor"}};
  for (const M& m : modes)
    forSeeds(2, [&](GradCase& c, int seed) {
      Shape xs = {c.randInt(1, 2), c.randInt(1, 2), c.randInt(1, 4), c.randInt(2, 4)};
      // Up and down, integer and other scales, and a size 1.
      std::vector<double> scales = {1.0, 1.0, seed == 1 ? 2.0 : 0.75, seed == 1 ? 1.5 : 2.5};
      Shape out = xs;
      for (size_t d = 2; d < 4; ++d)
        out[d] = std::max<int64_t>(1, static_cast<int64_t>(std::floor(xs[d] * scales[d])));
      std::vector<NamedAttr> attrs = {{"sizes", out},
                                      {"scales", scales},
                                      {"mode", std::string(m.mode)},
                                      {"coordinate_transformation_mode", std::string(m.coord)},
                                      {"nearest_mode", std::string(m.nearest)}};
      if (std::string(m.mode) == "cubic" && seed == 2)
        attrs.push_back({"exclude_outside", int64_t{1}});
      c.noteShape("x", xs).noteShape("out", out).note(m.mode).note(" ").note(m.coord);
      c.test(OpKind::Resize, {c.param(xs)}, attrs);
    });
}

TEST(GradCheckZoo, BatchNormWithComputedStatistics) {
  // The dynamo exporter's F.batch_norm without running statistics: the
  // batch's mean and (biased) variance computed in the graph feed batch
  // norm's inference form.
  forSeeds(3, [](GradCase& c, int) {
    Shape xs = {c.randInt(1, 3), c.randInt(1, 3), c.randInt(2, 4)};
    int64_t C = xs[1];
    c.noteShape("x", xs);
    Value* x = c.param(xs);
    Ints axes = {0, 2};
    Value* mean = c.emit(OpKind::ReduceMean, {x}, {{"axes", axes}, {"keepdims", int64_t{0}}});
    Value* m3 = c.emit(OpKind::Reshape, {mean}, {{"shape", Ints{1, C, 1}}});
    Value* d = c.emit(OpKind::Sub, {x, m3});
    Value* sq = c.emit(OpKind::Mul, {d, d});
    Value* var = c.emit(OpKind::ReduceMean, {sq}, {{"axes", axes}, {"keepdims", int64_t{0}}});
    c.test(OpKind::BatchNorm, {x, c.param({C}), c.param({C}), mean, var},
           {{"epsilon", 1e-3}, {"momentum", 1.0}});
  });
  // Given mean and variance (params here): every operand's gradient.
  forSeeds(2, [](GradCase& c, int) {
    Shape xs = {c.randInt(1, 3), c.randInt(1, 3), c.randInt(1, 3), c.randInt(1, 3)};
    int64_t C = xs[1];
    c.noteShape("x", xs);
    c.test(OpKind::BatchNorm,
           {c.param(xs), c.param({C}), c.param({C}), c.param({C}), c.param({C}, Dist::Positive)});
  });
}

} // namespace
