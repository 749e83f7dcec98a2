//===- GradCheckAttentionTest.cpp - attention against finite differences ==//
//
// The attention op's gradient rule (attention_grad) checked against central
// finite differences over random configurations (GradCheckCase.h): leading
// dims, Tq != Tk, D != Dv, causal or not, an additive mask of a broadcast
// shape or none. And its forward against the ops it stands for (matmul,
// mul, add, softmax, matmul) in float64.
//
//===----------------------------------------------------------------------===//
#include "GradCheckCase.h"
#include "interp/Interpreter.h"

#include <cmath>

using namespace lwcc;
using namespace lwcc::test;

namespace {

/// A random attention configuration: q, k, v, mask shapes (mask empty for
/// none), the scale and causal.
struct AttentionCase {
  Shape q, k, v, mask;
  double scale = 1.0;
  int64_t causal = 0;
};

AttentionCase randAttention(GradCase& c, int seed) {
  AttentionCase a;
  Shape lead = c.randShape(0, 2, 3);
  int64_t tq = c.randInt(1, 4), tk = c.randInt(1, 4), d = c.randInt(1, 3), dv = c.randInt(1, 3);
  a.causal = seed % 3 == 0 ? 1 : 0;
  a.scale = 1.0 / std::sqrt(static_cast<double>(d));
  a.q = lead, a.k = lead, a.v = lead;
  a.q.insert(a.q.end(), {tq, d});
  a.k.insert(a.k.end(), {tk, d});
  a.v.insert(a.v.end(), {tk, dv});
  if (seed % 2 == 0) {
    // A mask of [Tq, Tk], [1, Tk] or the whole [..., Tq, Tk], broadcast.
    Shape full = lead;
    full.insert(full.end(), {tq, tk});
    int kind = static_cast<int>(c.randInt(0, 2));
    a.mask = kind == 0 ? Shape{tq, tk} : kind == 1 ? Shape{1, tk} : full;
  }
  c.noteShape("q", a.q).noteShape("k", a.k).noteShape("v", a.v);
  c.noteShape("mask", a.mask).note("causal ").note(a.causal);
  return a;
}

std::vector<Value*> attentionOperands(GradCase& c, const AttentionCase& a) {
  std::vector<Value*> ops{c.param(a.q), c.param(a.k), c.param(a.v)};
  if (!a.mask.empty()) {
    std::vector<double> m(static_cast<size_t>(TensorType(DType::F64, a.mask).numElements()));
    for (double& x : m)
      x = c.uniform(-1.0, 1.0);
    ops.push_back(c.floatConstant(a.mask, std::move(m)));
  }
  return ops;
}

TEST(GradCheck, Attention) {
  forSeeds(12, [](GradCase& c, int seed) {
    AttentionCase a = randAttention(c, seed);
    std::vector<Value*> operands = attentionOperands(c, a);
    auto r = c.emitN(OpKind::Attention, operands,
                     {{"scale", Attribute(a.scale)}, {"causal", Attribute(a.causal)}}, 2);
    c.result(r[0]); // lse is for the backward only
  });
}

/// A trainable mask is refused with an error naming the op.
TEST(Attention, TrainableMaskIsRefused) {
  GradCase c(1);
  Value* q = c.param({2, 3});
  Value* m = c.param({2, 2});
  auto r = c.emitN(OpKind::Attention, {q, q, q, m}, {}, 2);
  c.graph().addOutput(c.emit(OpKind::ReduceSum, {r[0]}, {{"keepdims", 0}}));
  std::string err = errorText(runPassesOn(c.graph(), {"autodiff"}));
  EXPECT_NE(err.find("mask of attention takes no gradient"), std::string::npos) << err;
}

/// attention equals softmax(scale * q k^T + mask [+ causal -inf]) v computed
/// by the plain ops, in float64.
TEST(Attention, MatchesUnfusedOps) {
  for (int seed = 1; seed <= 12; ++seed) {
    GradCase c(static_cast<uint64_t>(seed));
    AttentionCase a = randAttention(c, seed);
    SCOPED_TRACE(c.description());
    std::vector<Value*> operands = attentionOperands(c, a);
    auto fused = c.emitN(OpKind::Attention, operands,
                         {{"scale", Attribute(a.scale)}, {"causal", Attribute(a.causal)}}, 2);
    int64_t rank = static_cast<int64_t>(a.k.size());
    Ints perm(static_cast<size_t>(rank));
    for (int64_t d = 0; d < rank; ++d)
      perm[d] = d;
    std::swap(perm[rank - 1], perm[rank - 2]);
    Value* kt = c.emit(OpKind::Transpose, {operands[1]}, {{"perm", Attribute(perm)}});
    Value* s = c.emit(OpKind::MatMul, {operands[0], kt});
    s = c.emit(OpKind::Mul, {s, c.floatConstant({}, {a.scale})});
    if (operands.size() > 3)
      s = c.emit(OpKind::Add, {s, operands[3]});
    int64_t tq = a.q[a.q.size() - 2], tk = a.k[a.k.size() - 2];
    if (a.causal) {
      std::vector<double> m(static_cast<size_t>(tq * tk));
      for (int64_t i = 0; i < tq; ++i)
        for (int64_t j = 0; j < tk; ++j)
          m[i * tk + j] = j > i ? -INFINITY : 0.0;
      s = c.emit(OpKind::Add, {s, c.floatConstant({tq, tk}, m)});
    }
    Value* p = c.emit(OpKind::Softmax, {s}, {{"axis", Attribute(int64_t{-1})}});
    Value* plain = c.emit(OpKind::MatMul, {p, operands[2]});
    c.graph().addOutput(fused[0]);
    c.graph().addOutput(plain);
    auto out = interpret(c.graph(), {}, c.weights(), Precision::F64);
    ASSERT_TRUE(!!out) << llvm::toString(out.takeError());
    ASSERT_EQ((*out)[0].f.size(), (*out)[1].f.size());
    for (size_t k = 0; k < (*out)[0].f.size(); ++k)
      EXPECT_NEAR((*out)[0].f[k], (*out)[1].f[k], 1e-12 * (1 + std::abs((*out)[1].f[k])))
          << "element " << k;
  }
}

} // namespace
