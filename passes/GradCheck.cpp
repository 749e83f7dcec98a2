//===- GradCheck.cpp ------------------------------------------------------===//
//
// For each sampled element of each param:
//   1. five-point central differences at a few steps; the best agreement
//      with the analytic gradient counts, so a step that crosses a kink
//      near the point is outvoted. Within tolerance: done.
//   2. otherwise, second-order one-sided differences at small steps. Where
//      the loss is smooth they agree to O(h^3) (their h^2 terms are equal),
//      so a difference beyond rounding marks a kink at the point: a relu
//      input at 0, a tie of two maxima. Without one, the disagreement of
//      step 1 is a wrong gradient.
//   3. at a kink the element moves by a random offset (1e-4 to 1e-2), the
//      analytic gradient is recomputed there and steps 1 and 2 repeat, up to
//      `redraws` times; an element at a kink every time is unresolved.
//
//===----------------------------------------------------------------------===//
#include "passes/GradCheck.h"

#include "passes/Pass.h"

#include <algorithm>
#include <cmath>
#include <limits>
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

double relError(double analytic, double numeric, double floor) {
  return std::fabs(analytic - numeric) / std::max({std::fabs(analytic), std::fabs(numeric), floor});
}

/// The loss as a function of one element of one param (the others fixed).
class ElementProbe {
public:
  ElementProbe(const Graph& g, const Graph& lossGraph, size_t output,
               const std::vector<Tensor>& inputs, WeightMap& weights, Tensor& value, int64_t k)
      : g_(g), f_(lossGraph), output_(output), inputs_(inputs), w_(weights), value_(value), k_(k),
        home_(value.f[k]) {}
  ~ElementProbe() { value_.f[k_] = home_; }
  ElementProbe(const ElementProbe&) = delete;
  ElementProbe& operator=(const ElementProbe&) = delete;

  double home() const { return home_; }

  llvm::Expected<double> loss(double x) {
    value_.f[k_] = x;
    auto out = interpret(f_, inputs_, w_, Precision::F64);
    value_.f[k_] = home_;
    if (!out)
      return out.takeError();
    return (*out)[0].f[0];
  }

  /// The analytic gradient of the element with the element at x.
  llvm::Expected<double> analytic(double x) {
    value_.f[k_] = x;
    auto out = interpret(g_, inputs_, w_, Precision::F64);
    value_.f[k_] = home_;
    if (!out)
      return out.takeError();
    return (*out)[output_].f[k_];
  }

private:
  const Graph& g_;
  const Graph& f_;
  size_t output_;
  const std::vector<Tensor>& inputs_;
  WeightMap& w_;
  Tensor& value_;
  int64_t k_;
  double home_;
};

struct Comparison {
  double err = INFINITY;
  double numeric = 0;
};

/// Step 1: five-point central differences (error O(h^4)) at x.
llvm::Expected<Comparison> central(ElementProbe& p, double x, double analytic,
                                   const GradCheckOptions& o) {
  Comparison best;
  for (double h : {1e-4, 1e-5, 1e-3, 1e-6}) {
    double at[4];
    const double offsets[4] = {2 * h, h, -h, -2 * h};
    for (int j = 0; j < 4; ++j) {
      auto l = p.loss(x + offsets[j]);
      if (!l)
        return l.takeError();
      at[j] = *l;
    }
    double numeric = (8 * (at[1] - at[2]) - (at[0] - at[3])) / (12 * h);
    double err = relError(analytic, numeric, o.floor);
    if (err < best.err)
      best = {err, numeric};
    if (best.err <= o.tolerance)
      break;
  }
  return best;
}

/// Step 2: whether the loss has a kink at x. The one-sided derivatives
///   D+ = (-3 L(x) + 4 L(x+h) - L(x+2h)) / 2h,  D- = (3 L(x) - 4 L(x-h) + L(x-2h)) / 2h
/// both equal L' - h^2 L'''/3 + O(h^3) where L is smooth; a difference
/// beyond the rounding of the five losses (with a wide margin) and the
/// tolerance is a change of slope.
llvm::Expected<bool> kinkAt(ElementProbe& p, double x, const GradCheckOptions& o) {
  auto l0 = p.loss(x);
  if (!l0)
    return l0.takeError();
  for (double h : {1e-5, 1e-6}) {
    double l[4];
    const double offsets[4] = {h, 2 * h, -h, -2 * h};
    double largest = std::fabs(*l0);
    for (int j = 0; j < 4; ++j) {
      auto v = p.loss(x + offsets[j]);
      if (!v)
        return v.takeError();
      l[j] = *v;
      largest = std::max(largest, std::fabs(l[j]));
    }
    double plus = (-3 * *l0 + 4 * l[0] - l[1]) / (2 * h);
    double minus = (3 * *l0 - 4 * l[2] + l[3]) / (2 * h);
    double rounding = 100 * std::numeric_limits<double>::epsilon() * largest / h;
    double scale = std::max({std::fabs(plus), std::fabs(minus), o.floor});
    if (std::fabs(plus - minus) > std::max(rounding, o.tolerance * scale))
      return true;
  }
  return false;
}

/// The outcome for one element.
struct ElementCheck {
  bool kink = false;       ///< the first probe point was at a kink
  bool unresolved = false; ///< ... and so was every re-drawn one
  bool redrawn = false;    ///< compared at a re-drawn point
  double err = 0, analytic = 0, numeric = 0;
};

llvm::Expected<ElementCheck> checkElement(ElementProbe& p, double analytic,
                                          const GradCheckOptions& o, std::mt19937_64& rng) {
  ElementCheck r;
  double x = p.home();
  for (int attempt = 0;; ++attempt) {
    auto c = central(p, x, analytic, o);
    if (!c)
      return c.takeError();
    r.err = c->err;
    r.analytic = analytic;
    r.numeric = c->numeric;
    r.redrawn = attempt > 0;
    if (c->err <= o.tolerance)
      return r;
    auto kink = kinkAt(p, x, o);
    if (!kink)
      return kink.takeError();
    if (!*kink) // smooth here: a real disagreement
      return r;
    r.kink = true;
    if (attempt == o.redraws) {
      r.unresolved = true;
      return r;
    }
    // Re-draw: log-uniform in [1e-4, 1e-2], either sign, from the original point.
    std::uniform_real_distribution<double> exponent(-4.0, -2.0);
    double step = std::pow(10.0, exponent(rng)) * std::max(1.0, std::fabs(p.home()));
    x = p.home() + (rng() % 2 ? step : -step);
    auto a = p.analytic(x);
    if (!a)
      return a.takeError();
    analytic = *a;
  }
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
  // Re-drawn points come from a stream of their own: the sampled elements
  // do not depend on how many kinks were met.
  std::mt19937_64 redraw(opts.seed ^ 0x9e3779b97f4a7c15ULL);
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
      ElementProbe probe(g, *f, o, inputs, w, value, k);
      auto e = checkElement(probe, grad.f[k], opts, redraw);
      if (!e)
        return e.takeError();
      ++r.checked;
      r.kinks += e->kink;
      if (e->unresolved) {
        ++r.unresolved;
        continue;
      }
      if (e->err > r.worstRelError || r.worstIndex < 0) {
        r.worstRelError = e->err;
        r.worstIndex = k;
        r.analytic = e->analytic;
        r.numeric = e->numeric;
        r.worstRedrawn = e->redrawn;
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
          classes = u.user->operand(0)->type().shape.back();
      std::uniform_int_distribution<int64_t> label(0, classes - 1);
      for (int64_t& v : t.i)
        v = in->type().dtype == DType::Bool ? label(rng) % 2 : label(rng);
    }
    out.push_back(std::move(t));
  }
  return out;
}

} // namespace lwcc
