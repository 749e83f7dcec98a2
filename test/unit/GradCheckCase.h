//===- GradCheckCase.h - One gradient-check case per op config -*- C++ -*-===//
//
// A GradCase builds a small graph through the API: every float operand is an
// f64 param with seeded random values, integer operands are constants, and
// the op results chosen with result() feed a random projection
//   loss = sum over results r of reduce_sum(mul(r, W_r))
// with fixed random W_r, so that errors in different elements cannot cancel.
// check() runs autodiff and compares every element of every param's @grad
// output with central finite differences in float64.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "RandomChoices.h"
#include "TestUtil.h"
#include "passes/GradCheck.h"
#include "plan/Pipelines.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <sstream>

namespace lwcc::test {

using Ints = std::vector<int64_t>;

/// Relative error every analytic gradient element must stay under.
inline constexpr double kGradTolerance = 1e-6;

/// Runs the named passes on `g`; warnings go to `warnings` when given.
inline llvm::Error runPassesOn(Graph& g, const std::vector<std::string>& names,
                               std::vector<std::string>* warnings = nullptr) {
  auto pipeline = buildPipeline(names);
  if (!pipeline)
    return pipeline.takeError();
  PassContext ctx;
  if (warnings)
    ctx.diag = [warnings](Severity, const Location&, const std::string& m) {
      warnings->push_back(m);
    };
  return runPipeline(g, *pipeline, ctx);
}

class GradCase : public RandomChoices {
public:
  explicit GradCase(uint64_t seed) : RandomChoices(seed * 0x9E3779B97F4A7C15ull + 12345), b_(g_) {}
  GradCase(const GradCase&) = delete;
  GradCase& operator=(const GradCase&) = delete;

  //===--- Random choices -------------------------------------------------===//

  //===--- Operands -------------------------------------------------------===//

  /// How a param's random values are drawn.
  enum class Dist {
    Normal,       ///< N(0, 1)
    Positive,     ///< uniform [0.5, 2]: away from log/sqrt/reciprocal/pow singularities
    AwayFromZero, ///< +-uniform [0.2, 1.5]: away from the kink of relu, abs, leaky_relu
    Distinct,     ///< pairwise at least 0.03 apart, shuffled: no max-pool ties
  };

  Value* param(const Shape& s, Dist d = Dist::Normal) {
    int64_t n = TensorType(DType::F64, s).numElements();
    std::vector<double> v(n);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (int64_t k = 0; k < n; ++k) {
      switch (d) {
      case Dist::Normal:
        v[k] = normal(rng_);
        break;
      case Dist::Positive:
        v[k] = uniform(0.5, 2.0);
        break;
      case Dist::AwayFromZero:
        v[k] = (coin() ? 1 : -1) * uniform(0.2, 1.5);
        break;
      case Dist::Distinct:
        v[k] = (static_cast<double>(k) - static_cast<double>(n) / 2 + 0.5) * 0.03;
        break;
      }
    }
    if (d == Dist::Distinct)
      std::shuffle(v.begin(), v.end(), rng_);
    return paramOf(s, std::move(v));
  }

  /// A param as param() makes, held by `device`.
  Value* paramOn(int64_t device, const Shape& s) {
    Value* p = param(s);
    if (device != 0)
      p->setDevice(device);
    return p;
  }

  Value* paramOf(const Shape& s, std::vector<double> values) {
    std::string name = "p";
    name += std::to_string(g_.params().size());
    TensorType t(DType::F64, s);
    Value* p = g_.addParam(name, name, t);
    weights_[name] = Tensor::fromFloats(t, std::move(values));
    return p;
  }

  /// An i64 constant.
  Value* intConstant(const Shape& s, Ints values) {
    Op* c = b_.create(OpKind::Constant, {}, {TensorType(DType::I64, s)});
    c->setAttr("ivalue", Attribute(std::move(values)));
    return c->result();
  }

  Value* floatConstant(const Shape& s, std::vector<double> values, DType t = DType::F64) {
    Op* c = b_.create(OpKind::Constant, {}, {TensorType(t, s)});
    c->setAttr("value", Attribute(std::move(values)));
    return c->result();
  }

  //===--- Ops ------------------------------------------------------------===//

  /// Emits an op with inferred types; a failure fails the test, and every
  /// later emit and check() then does nothing.
  std::vector<Value*> emitN(OpKind kind, const std::vector<Value*>& operands,
                            std::vector<NamedAttr> attrs, unsigned numResults) {
    std::vector<Value*> out(numResults, nullptr);
    if (failed_)
      return out;
    auto op = b_.createInferred(kind, operands, std::move(attrs), numResults);
    if (!op) {
      ADD_FAILURE() << desc_ << "\ncannot build the case: " << llvm::toString(op.takeError());
      failed_ = true;
      return out;
    }
    for (unsigned i = 0; i < numResults; ++i)
      out[i] = (*op)->result(i);
    return out;
  }
  Value* emit(OpKind kind, const std::vector<Value*>& operands, std::vector<NamedAttr> attrs = {}) {
    return emitN(kind, operands, std::move(attrs), 1)[0];
  }

  /// Makes `v` part of the loss.
  void result(Value* v) { results_.push_back(v); }
  /// Emits the op and makes each of its results part of the loss.
  void test(OpKind kind, const std::vector<Value*>& operands, std::vector<NamedAttr> attrs = {},
            unsigned numResults = 1) {
    for (Value* v : emitN(kind, operands, std::move(attrs), numResults))
      result(v);
  }

  /// Appends to the configuration text shown on failure.
  template <typename T> GradCase& note(const T& what) {
    std::ostringstream os;
    os << what;
    desc_ += os.str();
    return *this;
  }
  GradCase& noteShape(const char* what, const Shape& s) {
    return note(what).note(shapeStr(s)).note(" ");
  }
  GradCase& noteInts(const char* what, const Ints& v) {
    return note(what).note(Attribute(v).str()).note(" ");
  }

  Graph& graph() { return g_; }
  const WeightMap& weights() const { return weights_; }

  //===--- The check ------------------------------------------------------===//

  /// Builds the loss, differentiates, and checks every element of every
  /// param against central finite differences.
  void check() {
    if (failed_)
      return;
    ASSERT_FALSE(results_.empty()) << desc_;
    Value* loss = nullptr;
    for (Value* r : results_) {
      int64_t n = r->type().numElements();
      std::vector<double> w(n);
      for (double& x : w)
        x = uniform(-1.0, 1.0);
      // Each result's term is computed where the result lives and summed
      // on device 0.
      int64_t d = valueDevice(r).value_or(0);
      b_.setDevice(d ? std::optional<int64_t>(d) : std::nullopt);
      Value* m =
          emit(OpKind::Mul, {r, floatConstant(r->type().shape, std::move(w), r->type().dtype)});
      Value* s = emit(OpKind::ReduceSum, {m}, {{"keepdims", 0}});
      b_.setDevice(std::nullopt);
      if (d != 0)
        s = emit(OpKind::DeviceCopy, {s}, {{"src", d}, {"dst", int64_t{0}}});
      loss = loss ? emit(OpKind::Add, {loss, s}) : s;
    }
    if (failed_)
      return;
    g_.addOutput(loss);
    ASSERT_EQ(errorText(verifyGraph(g_)), "") << desc_;
    ASSERT_EQ(errorText(runPassesOn(g_, {"autodiff"})), "") << desc_ << "\n" << printGraph(g_);
    ASSERT_EQ(errorText(verifyGraph(g_)), "") << desc_ << "\n" << printGraph(g_);
    // Every param reaches the loss, so each gets a @grad output, in order.
    ASSERT_EQ(g_.outputs().size(), 1 + g_.params().size()) << desc_ << "\n" << printGraph(g_);
    for (size_t i = 0; i < g_.params().size(); ++i)
      EXPECT_EQ(g_.outputGradOf(i + 1), g_.param(i)) << desc_;

    GradCheckOptions opts;
    opts.tolerance = kGradTolerance;
    opts.samplesPerParam = 1;
    for (const auto& p : g_.params())
      opts.samplesPerParam = std::max(opts.samplesPerParam, p->type().numElements());
    auto checks = checkGradients(g_, {}, weights_, opts);
    ASSERT_TRUE(!!checks) << desc_ << "\n" << llvm::toString(checks.takeError());
    ASSERT_EQ(checks->size(), g_.params().size()) << desc_;
    for (size_t i = 0; i < checks->size(); ++i) {
      const ParamGradCheck& c = (*checks)[i];
      EXPECT_EQ(c.param, g_.param(i)->paramName()) << desc_;
      EXPECT_EQ(c.checked, g_.param(i)->type().numElements()) << desc_ << " param " << c.param;
      EXPECT_LT(c.worstRelError, kGradTolerance)
          << desc_ << "\nparam " << c.param << " " << g_.param(i)->type().str() << ": element "
          << c.worstIndex << " analytic " << c.analytic << " numeric " << c.numeric << "\n"
          << printGraph(g_);
    }
  }

  const std::string& description() const { return desc_; }

private:
  Graph g_{"gradcheck"};
  Builder b_;
  WeightMap weights_;
  std::vector<Value*> results_;
  std::string desc_;
  bool failed_ = false;
};

/// Runs body(c, seed) on GradCases seeded 1..numSeeds, then checks each.
/// With LWCC_GRADCHECK_VERBOSE set, prints every configuration.
template <typename Fn> void forSeeds(int numSeeds, Fn body) {
  for (int seed = 1; seed <= numSeeds; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    GradCase c(static_cast<uint64_t>(seed));
    c.note("seed ").note(seed).note(": ");
    body(c, seed);
    if (std::getenv("LWCC_GRADCHECK_VERBOSE"))
      std::printf("  %s\n", c.description().c_str());
    c.check();
  }
}

/// A reduction's x (rank 1 to 4) and its axes attribute: seeds 1 and 2
/// reduce every axis (no attribute), the others a random non-empty subset
/// (in random order with `shuffle`), noted in the case.
inline std::pair<Shape, std::vector<NamedAttr>> randReduction(GradCase& c, int seed, bool shuffle) {
  Shape xs = c.randShape(1, 4);
  std::vector<NamedAttr> attrs;
  if (seed > 2) {
    Ints axes = c.randAxes(static_cast<int64_t>(xs.size()));
    if (shuffle)
      std::shuffle(axes.begin(), axes.end(), c.rng());
    attrs.push_back({"axes", axes});
    c.noteInts("axes", axes);
  }
  return {xs, attrs};
}

} // namespace lwcc::test
