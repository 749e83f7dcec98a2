//===- PlanSelector.cpp - The rules of a strategy's selection -------------===//
#include "plan/PlanSelector.h"

#include "ir/Verifier.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace lwcc {

PlanSelector::PlanSelector(Planner& planner, const Graph& graph, const std::string& strategy)
    : planner_(planner), g(graph), strat(strategy), options_(planner.options_),
      model_(planner.model_), evaluations_(planner.evaluations_), freer_(planner.freer_) {}

std::optional<double> PlanSelector::compactOf(size_t k) {
  if (compactSoon[k].valid())
    return compactSoon[k].get();
  if (compactEarly[k].valid())
    compactEarly[k].wait(); // then known, or not computed
  return compactPrice(g, plans[k]);
}

void PlanSelector::verifyFastest(const std::optional<std::string>& verified) {
  fastestVerified = {}; // the previous one's step is freed: waited for
  if (verified) {
    std::promise<std::string> known;
    known.set_value(*verified);
    fastestVerified = known.get_future();
  } else if (fastestStep && fastestStep->foldedInto().empty() && options_.threads > 1)
    fastestVerified = std::async(std::launch::async, [step = fastestStep.get()] {
      llvm::Error e = verifyGraph(*step);
      return e ? llvm::toString(std::move(e)) : std::string();
    });
}

void PlanSelector::consider(const PlanEvaluation& ev, std::unique_ptr<Graph> step,
                            FinishedAhead ahead) {
  const PlanChoice& plan = ev.plan;
  if (!ev.error.empty()) {
    if (firstError.empty())
      firstError = ev.error;
    if (options_.verbose)
      llvm::errs() << "lwcc: planner: " << plan.name() << " left out: " << ev.error << "\n";
    return;
  }
  if (built.empty())
    sel.searchSeconds = ev.strategySeconds;
  sel.candidates.push_back({plan.name(), ev.sim.stepSeconds});
  built.push_back(&ev);
  builtAt.push_back(considering);
  const size_t i = built.size() - 1;
  // Step 2 considers candidates out of their order (below): of equal ones
  // the earliest in it is kept, and the first is the earliest.
  const bool tie = fastest && ev.sim.stepSeconds == built[*fastest]->sim.stepSeconds &&
                   considering < builtAt[*fastest];
  if (ev.fits && (!fastest || faster(ev, *built[*fastest]) || tie)) {
    fastest = i;
    if (fastestVerified.valid())
      fastestVerified.wait(); // before its step is freed
    freer_->free(std::move(fastestStep));
    fastestStep = std::move(step);
    fastestFinished = fastestStep ? std::move(ahead.finished) : std::nullopt;
    verifyFastest(fastestStep ? ahead.verified : std::nullopt);
  } else if (!firstAt || considering < *firstAt) {
    firstAt = considering;
    freer_->free(std::move(firstStep));
    firstStep = std::move(step);
  }
  freer_->free(std::move(step));
}

llvm::Error PlanSelector::evaluateAndConsider(const PlanChoice& plan) {
  std::unique_ptr<Graph> step;
  auto ev = evaluate(g, plan, &step, false);
  if (!ev)
    return ev.takeError();
  consider(**ev, std::move(step));
  return llvm::Error::success();
}

std::optional<std::pair<PlanChoice, PlanChoice>> PlanSelector::halves(size_t k) {
  const PlanChoice& p = plans[k];
  if (p.strategy != "pipeline" || options_.microbatches || p.microbatches % 4)
    return std::nullopt;
  PlanChoice half = p, quarter = p;
  half.microbatches /= 2;
  quarter.microbatches /= 4;
  auto before = [&](const PlanChoice& c) {
    return std::any_of(plans.begin(), plans.begin() + static_cast<std::ptrdiff_t>(k),
                       [&](const PlanChoice& o) { return keyOf(o) == keyOf(c); });
  };
  if (!before(half) || !before(quarter))
    return std::nullopt;
  return std::make_pair(half, quarter);
}

std::string PlanSelector::slowerThanFewer(size_t k) {
  auto hq = halves(k);
  if (!hq)
    return "";
  auto h = evaluations_.find(keyOf(hq->first)), q = evaluations_.find(keyOf(hq->second));
  if (h == evaluations_.end() || q == evaluations_.end() || !h->second.error.empty() ||
      !q->second.error.empty() || !(h->second.fits || q->second.fits) ||
      !(h->second.sim.stepSeconds > q->second.sim.stepSeconds))
    return "";
  return llvm::formatv("{0} ({1:f3} ms) is slower than {2} ({3:f3} ms), so more micro-batches "
                       "are slower still",
                       hq->first.name(), h->second.sim.stepSeconds * 1e3, hq->second.name(),
                       q->second.sim.stepSeconds * 1e3)
      .str();
}

std::vector<size_t> PlanSelector::fewer(size_t k) {
  std::vector<size_t> out;
  const PlanChoice& p = plans[k];
  if (p.strategy != "pipeline" || options_.microbatches)
    return out;
  for (size_t j = 0; j < plans.size(); ++j) {
    PlanChoice o = plans[j];
    if (o.strategy != "pipeline" || o.microbatches >= p.microbatches)
      continue;
    o.microbatches = p.microbatches;
    if (keyOf(o) == keyOf(p))
      out.push_back(j);
  }
  return out;
}

std::string PlanSelector::bubbleBound(size_t k) {
  if (!fastest || model_.hasProfile())
    return "";
  const PlanChoice& p = plans[k];
  auto bubble = [&](int64_t m) { return bubbleFactor(p.stages, m); };
  double bound = 0;
  std::optional<size_t> from;
  for (size_t j : fewer(k)) {
    auto it = evaluations_.find(keyOf(plans[j]));
    if (it == evaluations_.end() || !it->second.error.empty())
      continue;
    const double b =
        it->second.sim.stepSeconds * bubble(p.microbatches) / bubble(plans[j].microbatches);
    if (b > bound) {
      bound = b;
      from = j;
    }
  }
  const PlanEvaluation& best = *built[*fastest];
  if (!from || !(bound > best.sim.stepSeconds))
    return "";
  return llvm::formatv("at least {0:f3} ms ({1}'s {2:f3} ms with the bubble of {3} "
                       "micro-batches), slower than {4} ({5:f3} ms)",
                       bound * 1e3, plans[*from].name(),
                       evaluations_.at(keyOf(plans[*from])).sim.stepSeconds * 1e3, p.microbatches,
                       best.plan.name(), best.sim.stepSeconds * 1e3)
      .str();
}

std::optional<double> PlanSelector::compactLimit(size_t k) {
  if (!fastest || !options_.compactPipelines || !compactAllowed(plans[k]))
    return std::nullopt;
  return kCompactMargin * built[*fastest]->sim.stepSeconds;
}

std::string PlanSelector::siblingCompactBound(size_t k, bool wait) {
  std::optional<double> over = compactLimit(k);
  if (!over)
    return "";
  const PlanChoice& p = plans[k];
  const PlanEvaluation& best = *built[*fastest];
  auto bubble = [&](int64_t m) { return bubbleFactor(p.stages, m); };
  for (size_t j : fewer(k)) {
    if (wait && compactSoon[j].valid())
      compactSoon[j].wait();
    if (wait && compactEarly[j].valid())
      compactEarly[j].wait();
    if (std::optional<double> c = knownCompactPrice(plans[j]);
        c && *c * bubble(p.microbatches) / bubble(plans[j].microbatches) > *over)
      return llvm::formatv("at least {0:f3} ms by {1}'s compact price ({2:f3} ms) with the "
                           "bubble of {3} micro-batches, more than {4} x {5}'s {6:f3} ms",
                           *c * bubble(p.microbatches) / bubble(plans[j].microbatches) * 1e3,
                           plans[j].name(), *c * 1e3, p.microbatches, kCompactMargin,
                           best.plan.name(), best.sim.stepSeconds * 1e3)
          .str();
  }
  return "";
}

std::string PlanSelector::compactBound(size_t k) {
  if (std::string why = siblingCompactBound(k, true); !why.empty())
    return why;
  std::optional<double> over = compactLimit(k);
  if (!over)
    return "";
  const PlanEvaluation& best = *built[*fastest];
  std::optional<double> c = compactOf(k);
  if (!c || !(*c > *over))
    return "";
  return llvm::formatv("its compact price, {0:f3} ms (one micro-batch's stages and transfers, "
                       "the schedule replayed), is more than {1} x {2}'s {3:f3} ms",
                       *c * 1e3, kCompactMargin, best.plan.name(), best.sim.stepSeconds * 1e3)
      .str();
}

std::string PlanSelector::leftOut(size_t k) {
  std::string why = slowerThanFewer(k);
  if (why.empty())
    why = bubbleBound(k);
  return why.empty() ? compactBound(k) : why;
}

bool PlanSelector::aheadOfCompact(size_t k, size_t at) {
  std::optional<double> c = compactSoon[k].get();
  if (!c || !leftOut(k).empty())
    return false;
  for (size_t q = at; q < others && order[q] != k; ++q) {
    if (compactSoon[order[q]].valid())
      if (std::optional<double> b = compactSoon[order[q]].get(); b && *c > kCompactMargin * *b)
        return false;
    // One priced already (for an earlier selection) that will leave it out.
    if (auto e = evaluations_.find(keyOf(plans[order[q]]));
        e != evaluations_.end() && e->second.error.empty() && e->second.fits &&
        *c > kCompactMargin * e->second.sim.stepSeconds)
      return false;
  }
  return true;
}

bool PlanSelector::pricedAhead(size_t k, size_t at) {
  if (compactSoon[k].valid())
    return ordered && aheadOfCompact(k, at);
  std::vector<size_t> before = fewer(k);
  if (before.empty())
    return true;
  return at >= others &&
         std::all_of(before.begin(), before.end(),
                     [&](size_t j) { return evaluations_.count(keyOf(plans[j])) > 0; }) &&
         leftOut(k).empty();
}

void PlanSelector::orderPipelines(size_t at) {
  ordered = true;
  std::vector<size_t> slots, ks;
  for (size_t q = at; q < others; ++q)
    if (plans[order[q]].strategy == "pipeline") {
      slots.push_back(q);
      ks.push_back(order[q]);
    }
  auto rank = [&](size_t k) {
    if (evaluations_.count(keyOf(plans[k])))
      return -1.0;
    std::optional<double> c = compactSoon[k].valid() ? compactSoon[k].get() : std::nullopt;
    return c ? *c : std::numeric_limits<double>::infinity();
  };
  std::stable_sort(ks.begin(), ks.end(), [&](size_t a, size_t b) { return rank(a) < rank(b); });
  for (size_t j = 0; j < slots.size(); ++j)
    order[slots[j]] = ks[j];
}

void PlanSelector::startPricing(size_t k, bool finish) {
  pricing[k] = std::async(std::launch::async, [this, plan = plans[k], finish] {
    Priced priced = price(g, plan, true, false);
    if (finish) {
      ++finishing;
      finishAhead(priced, plan);
      --finishing;
    }
    return priced;
  });
}

void PlanSelector::startCompact(size_t from) {
  if (!options_.compactPipelines || options_.threads <= 1 || !fastest)
    return;
  for (size_t q = from; q < order.size(); ++q) {
    const size_t k = order[q];
    if (compactEarly[k].valid() && compactEarly[k].get())
      continue; // computed early
    if (compactSoon[k].valid() || evaluations_.count(keyOf(plans[k])) ||
        !compactAllowed(plans[k]) || knownCompactPrice(plans[k]) || !slowerThanFewer(k).empty() ||
        !bubbleBound(k).empty() || !siblingCompactBound(k, false).empty())
      continue;
    compactSoon[k] = std::async(std::launch::async, [this, plan = plans[k]] {
                       return compactPrice(g, plan);
                     }).share();
  }
}

PlanChoice PlanSelector::withVariant(PlanChoice plan, const Variant& v) {
  if (v.shard != "none") {
    plan.shard = v.shard;
    plan.shardMinBytes = v.shardMinBytes;
  }
  plan.recompute |= v.recompute;
  return plan;
}

llvm::Expected<bool> PlanSelector::probe(const PlanChoice& plan) {
  for (const PlanEvaluation* b : built)
    if (keyOf(b->plan) == keyOf(plan))
      return b->fits;
  std::unique_ptr<Graph> step;
  auto ev = evaluate(g, plan, &step, false);
  if (!ev)
    return ev.takeError();
  const bool fits = (*ev)->error.empty() && (*ev)->fits;
  consider(**ev, std::move(step));
  return fits;
}

} // namespace lwcc
