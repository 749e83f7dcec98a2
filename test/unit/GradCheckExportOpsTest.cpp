//===- GradCheckExportOpsTest.cpp - Gradients of the exporters' ops -------===//
//
// The ops that PyTorch's exporters need beyond the classic CNN set
// (layer_norm, erf, gather_nd), checked like every other gradient rule
// against central finite differences in float64 (GradCheckCase.h).
//
//===----------------------------------------------------------------------===//
#include "GradCheckCase.h"

using namespace lwcc;
using namespace lwcc::test;
using Dist = GradCase::Dist;

namespace {

TEST(GradCheck, LayerNorm) {
  // Any rank and axis; the ConvNeXt form (channels last, axis = rank - 1)
  // is seed 1.
  forSeeds(8, [](GradCase& c, int seed) {
    Shape xs = seed == 1 ? Shape{2, 3, 3, 4} : c.randShape(1, 4, 4);
    int64_t rank = static_cast<int64_t>(xs.size());
    int64_t axis = seed == 1 ? rank - 1 : c.randInt(0, rank - 1);
    // A normalized size of 1 makes y = bias: keep at least 2 elements.
    if (xs.back() == 1)
      xs.back() = 2;
    double eps = c.uniform(1e-5, 0.1);
    Shape ns(xs.begin() + axis, xs.end());
    c.noteShape("x", xs).note("axis ").note(axis).note(" epsilon ").note(eps);
    auto r = c.emitN(OpKind::LayerNorm, {c.param(xs), c.param(ns), c.param(ns)},
                     {{"axis", axis}, {"epsilon", eps}}, 3);
    c.result(r[0]);
  });
}

TEST(GradCheck, LayerNormStatisticsHaveNoGradient) {
  // A loss that reads mean or inv_std_dev is refused at the op, by name.
  for (unsigned stat : {1u, 2u}) {
    GradCase c(1);
    auto r = c.emitN(OpKind::LayerNorm, {c.param({2, 3}), c.param({3}), c.param({3})},
                     {{"axis", int64_t{1}}}, 3);
    Value* s = c.emit(OpKind::ReduceSum, {r[stat]}, {{"keepdims", int64_t{0}}});
    c.graph().addOutput(s);
    std::string err = errorText(runPassesOn(c.graph(), {"autodiff"}));
    EXPECT_NE(err.find("layer_norm"), std::string::npos) << err;
    EXPECT_NE(err.find("mean and inv_std_dev"), std::string::npos) << err;
  }
}

TEST(GradCheck, Erf) {
  forSeeds(4, [](GradCase& c, int) {
    Shape xs = c.randShape(0, 3);
    c.noteShape("x", xs);
    c.test(OpKind::Erf, {c.param(xs)});
  });
}

TEST(GradCheck, GatherNd) {
  // Repeated index tuples (their gradients add up), negative indices,
  // batch dims, and the exporter's adaptive-pool form: two index dims of
  // an NCHW tensor moved to the front.
  forSeeds(8, [](GradCase& c, int seed) {
    Shape xs = seed == 1 ? Shape{3, 2, 2, 2} : c.randShape(1, 4, 3);
    int64_t rank = static_cast<int64_t>(xs.size());
    int64_t b = seed == 1 ? 0 : c.randInt(0, rank - 1);
    int64_t k = seed == 1 ? 2 : c.randInt(1, rank - b);
    Shape is(xs.begin(), xs.begin() + b);
    for (int64_t d = c.randInt(0, 2); d > 0; --d)
      is.push_back(c.randInt(1, 3));
    is.push_back(k);
    int64_t tuples = TensorType(DType::I64, is).numElements() / k;
    Ints idx;
    for (int64_t t = 0; t < tuples; ++t)
      for (int64_t j = 0; j < k; ++j)
        idx.push_back(c.randInt(-xs[b + j], xs[b + j] - 1));
    c.noteShape("x", xs).noteShape("indices", is).noteInts("", idx).note("batch_dims ").note(b);
    c.test(OpKind::GatherNd, {c.param(xs), c.intConstant(is, idx)}, {{"batch_dims", b}});
  });
}

} // namespace
