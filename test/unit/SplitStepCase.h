//===- SplitStepCase.h - A split step against the one-device step -*- C++ -*-===//
//
// The tests of ops split over devices (@par on convolutions, pools,
// resizes) build one model twice: as the one-device step (autodiff) and as
// its materialized split (materialize, autodiff, grad-sync), then run both
// on the reference interpreter in float64 with the same random weights and
// inputs: the loss and the gradient of every param must agree.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "TestUtil.h"
#include "interp/Interpreter.h"
#include "plan/Pipelines.h"

#include <gtest/gtest.h>
#include <map>
#include <memory>
#include <random>

namespace lwcc::test {

/// Runs the named passes on `g`; a failure is a test failure.
inline bool runPassesOk(Graph& g, std::vector<std::string> names) {
  auto pipeline = buildPipeline(names);
  EXPECT_TRUE(bool(pipeline));
  if (!pipeline) {
    llvm::consumeError(pipeline.takeError());
    return false;
  }
  PassContext ctx;
  if (llvm::Error e = runPipeline(g, *pipeline, ctx)) {
    ADD_FAILURE() << llvm::toString(std::move(e));
    return false;
  }
  return true;
}

/// One model's step on one device and split as its @par annotations say.
struct SplitStep {
  std::unique_ptr<Graph> one, many;
};

/// Both steps of the model `text`; empty graphs (and a test failure) when a
/// pass fails.
inline SplitStep buildSplitStep(const std::string& text) {
  SplitStep s{parseOk(text), parseOk(text)};
  if (!s.one || !s.many || !runPassesOk(*s.one, {"autodiff", "verify"}) ||
      !runPassesOk(*s.many, {"materialize", "autodiff", "grad-sync", "verify"}))
    return {};
  return s;
}

/// Expects both steps to give the same loss and param gradients on random
/// weights and input from `seed`, with `labels` for the label input;
/// returns how many param gradients were compared.
inline size_t expectSameStep(const SplitStep& s, unsigned seed, std::vector<int64_t> labels) {
  std::mt19937 rng(seed);
  auto random = [&](const TensorType& t) {
    Tensor x(t);
    std::uniform_real_distribution<double> u(-1, 1);
    for (double& v : x.f)
      v = u(rng);
    return x;
  };
  WeightMap weights;
  for (const auto& p : s.one->params())
    weights[p->paramName()] = random(p->type());
  std::vector<Tensor> inputs = {random(s.one->inputs()[0]->type()),
                                Tensor(s.one->inputs()[1]->type())};
  inputs[1].i = std::move(labels);
  auto a = interpret(*s.one, inputs, weights, Precision::F64);
  auto b = interpret(*s.many, inputs, weights, Precision::F64);
  EXPECT_TRUE(bool(a)) << (a ? "" : llvm::toString(a.takeError()));
  EXPECT_TRUE(bool(b)) << (b ? "" : llvm::toString(b.takeError()));
  if (!a || !b)
    return 0;
  EXPECT_NEAR((*a)[0].f[0], (*b)[0].f[0], 1e-12);
  std::map<std::string, const Tensor*> expected;
  for (size_t o = 1; o < s.one->outputs().size(); ++o)
    expected[s.one->outputGradOf(o)->paramName()] = &(*a)[o];
  size_t compared = 0;
  for (size_t o = 1; o < s.many->outputs().size(); ++o) {
    const Value* p = s.many->outputGradOf(o);
    EXPECT_TRUE(p->shard().empty()) << p->name(); // every param whole here
    const Tensor& want = *expected.at(p->paramName());
    const Tensor& got = (*b)[o];
    EXPECT_EQ(want.f.size(), got.f.size()) << p->name();
    for (size_t k = 0; k < want.f.size() && k < got.f.size(); ++k)
      EXPECT_NEAR(want.f[k], got.f[k], 1e-10) << p->name() << "[" << k << "]";
    ++compared;
  }
  return compared;
}

} // namespace lwcc::test
