//===- GradCheck.cpp ------------------------------------------------------===//
#include "passes/GradCheck.h"

#include "passes/Pass.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace lwcc {

namespace {

/// The loss alone: `g` without its backward part.
std::unique_ptr<Graph> lossOnly(const Graph& g) {
  auto f = g.clone();
  Value* loss = f->outputs()[0];
  f->clearOutputs();
  f->addOutput(loss);
  PassContext ctx;
  llvm::cantFail(createDCEPass()->run(*f, ctx));
  return f;
}

llvm::Expected<double> lossAt(const Graph& f, const std::vector<Tensor>& inputs,
                              const WeightMap& weights) {
  auto out = interpret(f, inputs, weights, Precision::F64);
  if (!out)
    return out.takeError();
  return (*out)[0].f[0];
}

} // namespace

llvm::Expected<std::vector<ParamGradCheck>> checkGradients(const Graph& g,
                                                           const std::vector<Tensor>& inputs,
                                                           const WeightMap& weights,
                                                           const GradCheckOptions& opts) {
  auto analytic = interpret(g, inputs, weights, Precision::F64);
  if (!analytic)
    return analytic.takeError();
  auto f = lossOnly(g);
  // Weights as float64 values the finite differences can perturb.
  WeightMap w = weights;
  std::mt19937_64 rng(opts.seed);
  std::vector<ParamGradCheck> results;
  for (size_t o = 1; o < g.outputs().size(); ++o) {
    const Value* p = g.outputGradOf(o);
    if (!p)
      continue;
    const Tensor& grad = (*analytic)[o];
    auto wit = w.find(p->paramName());
    if (wit == w.end())
      return makeError(p->loc(), "no value for param '%" + p->name() + "'");
    Tensor& value = wit->second;
    ParamGradCheck r;
    r.param = p->paramName();
    int64_t n = value.size();
    std::vector<int64_t> picks;
    if (n <= opts.samplesPerParam) {
      for (int64_t k = 0; k < n; ++k)
        picks.push_back(k);
    } else {
      int64_t big = 0;
      for (int64_t k = 1; k < n; ++k)
        if (std::fabs(grad.f[k]) > std::fabs(grad.f[big]))
          big = k;
      picks.push_back(big);
      std::uniform_int_distribution<int64_t> pick(0, n - 1);
      while (static_cast<int64_t>(picks.size()) < opts.samplesPerParam) {
        int64_t k = pick(rng);
        if (std::find(picks.begin(), picks.end(), k) == picks.end())
          picks.push_back(k);
      }
    }
    for (int64_t k : picks) {
      double a = grad.f[k], best = INFINITY, bestNumeric = 0;
      double saved = value.f[k];
      // Five-point central differences (error O(h^4)) at a few steps; the
      // best agreement counts, so a step that crosses a kink is outvoted.
      for (double h : {1e-4, 1e-5, 1e-3, 1e-6}) {
        double at[4];
        const double offsets[4] = {2 * h, h, -h, -2 * h};
        for (int j = 0; j < 4; ++j) {
          value.f[k] = saved + offsets[j];
          auto l = lossAt(*f, inputs, w);
          if (!l) {
            value.f[k] = saved;
            return l.takeError();
          }
          at[j] = *l;
        }
        value.f[k] = saved;
        double numeric = (8 * (at[1] - at[2]) - (at[0] - at[3])) / (12 * h);
        double err =
            std::fabs(a - numeric) / std::max({std::fabs(a), std::fabs(numeric), opts.floor});
        if (err < best) {
          best = err;
          bestNumeric = numeric;
        }
        if (best <= opts.tolerance)
          break;
      }
      ++r.checked;
      if (best > r.worstRelError || r.worstIndex < 0) {
        r.worstRelError = best;
        r.worstIndex = k;
        r.analytic = a;
        r.numeric = bestNumeric;
      }
    }
    results.push_back(r);
  }
  return results;
}

std::vector<Tensor> randomInputs(const Graph& g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<Tensor> out;
  for (const auto& in : g.inputs()) {
    Tensor t(in->type());
    if (t.isFloatData()) {
      for (double& v : t.f)
        v = normal(rng);
    } else {
      int64_t classes = 4;
      for (const Use& u : in->uses())
        if (u.user && u.user->kind() == OpKind::SoftmaxXent)
          classes = u.user->operand(0)->type().shape[1];
      std::uniform_int_distribution<int64_t> label(0, classes - 1);
      for (int64_t& v : t.i)
        v = in->type().dtype == DType::Bool ? label(rng) % 2 : label(rng);
    }
    out.push_back(std::move(t));
  }
  return out;
}

} // namespace lwcc
