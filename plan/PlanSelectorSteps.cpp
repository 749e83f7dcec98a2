//===- PlanSelectorSteps.cpp - The steps of a strategy's selection --------===//
#include "ir/Params.h"
#include "ir/Verifier.h"
#include "passes/TrainingSupport.h"
#include "plan/PlanSelector.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace lwcc {

llvm::Error PlanSelector::run() {
  gatherCandidates();
  startCompactPrices();
  if (llvm::Error e = priceInOrder())
    return e;
  restoreOrder();
  considering = plans.size();
  for (auto step : {&PlanSelector::memoryVariants, &PlanSelector::fewerRecomputed,
                    &PlanSelector::fewerSharded, &PlanSelector::pipelinesUntilFit})
    if (llvm::Error e = (this->*step)())
      return e;
  return keep();
}

void PlanSelector::gatherCandidates() {
  if (strat == "layerwise")
    for (const char* s : {"layerwise", "data", "owt", "model"}) {
      PlanChoice p;
      p.strategy = s;
      p.microbatches = options_.microbatches.value_or(1);
      plans.push_back(p);
    }
  // The layer-wise selection (the default strategy's) keeps one device's
  // step: pipelines whose micro-batches would give batch norm other
  // statistics are left out unless the user allowed them.
  keepsStep = strat == "layerwise" && !options_.microbatches && !options_.microbatchStatistics &&
              normalizesByBatch(g);
  if (keepsStep)
    sel.changesStepWhy = "batch norm would normalize each micro-batch by its own statistics, "
                         "not the whole batch's (--strategy=pipeline, --microbatches=M or "
                         "--batch-norm-per-microbatch allows it)";
  for (const PlanChoice& p : pipelineCandidates(g))
    if (keepsStep && p.microbatches > 1)
      sel.changesStep.push_back(p.name());
    else
      plans.push_back(p);
  compactSoon.resize(plans.size());
  compactEarly.resize(plans.size());
  pricing.resize(plans.size());
}

void PlanSelector::startCompactPrices() {
  // The order considered: every candidate but those pipelines, then those
  // (fewer micro-batches first), so that the fastest that fits before them
  // is the fastest of all the others.
  for (bool more : {false, true}) {
    for (size_t k = 0; k < plans.size(); ++k)
      if (fewer(k).empty() != more)
        order.push_back(k);
    if (!more)
      others = order.size();
  }
  // The compact prices of the pipelines before the others, started now
  // beside the first candidates (with one thread, when first asked for);
  // once the first of them is considered,
  // those priced already first, then the lowest compact price first (the
  // fastest that fits found early leaves the others out), then those
  // without one.
  for (size_t q = 0; q < others && options_.compactPipelines; ++q)
    if (const size_t k = order[q]; plans[k].strategy == "pipeline" &&
                                   !evaluations_.count(keyOf(plans[k])) && compactAllowed(plans[k]))
      compactSoon[k] = std::async(options_.threads > 1 ? std::launch::async : std::launch::deferred,
                                  [this, plan = plans[k]] { return compactPrice(g, plan); })
                           .share();
  // The pipelines of more micro-batches than stages: their compact prices
  // computed early, on threads of their own, once those of their siblings
  // of fewer are known, where the siblings' bound (siblingCompactBound,
  // with the lowest of those compact prices for the fastest that fits) does
  // not already leave them out: most of them are needed, and computed
  // while the others are priced they do not wait until every other
  // candidate is considered. Which are computed depends on compact prices
  // alone, and a decision that may use one waits for it (with one thread
  // each is computed there), so the choice and the output do not depend on
  // the threads.
  std::vector<std::shared_future<std::optional<double>>> firstCompacts;
  for (const auto& f : compactSoon)
    if (f.valid())
      firstCompacts.push_back(f);
  // A plan priced already (for an earlier selection) bounds the fastest
  // that fits too.
  double pricedLeast = std::numeric_limits<double>::infinity();
  for (const auto& [key, ev] : evaluations_)
    if (ev.error.empty() && ev.fits)
      pricedLeast = std::min(pricedLeast, ev.sim.stepSeconds);
  if (!firstCompacts.empty())
    for (size_t k = 0; k < plans.size(); ++k) {
      std::vector<size_t> before = fewer(k);
      if (before.empty() || evaluations_.count(keyOf(plans[k])) || !compactAllowed(plans[k]))
        continue;
      std::vector<std::pair<int64_t, std::shared_future<std::optional<double>>>> siblings;
      for (size_t j : before)
        if (compactSoon[j].valid())
          siblings.push_back({plans[j].microbatches, compactSoon[j]});
      compactEarly[k] =
          std::async(options_.threads > 1 ? std::launch::async : std::launch::deferred,
                     [this, plan = plans[k], siblings, firstCompacts, pricedLeast] {
                       double least = pricedLeast;
                       for (const auto& f : firstCompacts)
                         if (std::optional<double> c = f.get())
                           least = std::min(least, *c);
                       auto bubble = [&](int64_t m) { return bubbleFactor(plan.stages, m); };
                       for (const auto& [m, f] : siblings)
                         if (std::optional<double> c = f.get();
                             c &&
                             *c * bubble(plan.microbatches) / bubble(m) > kCompactMargin * least)
                           return false;
                       if (!std::isfinite(least))
                         return false;
                       compactPrice(g, plan);
                       return true;
                     })
              .share();
    }
}

llvm::Error PlanSelector::priceInOrder() {
  const size_t ahead = static_cast<size_t>(std::max<int64_t>(1, options_.threads));
  for (size_t at = 0; at < order.size(); ++at) {
    if (!ordered && at < others && plans[order[at]].strategy == "pipeline")
      orderPipelines(at);
    if (at >= others)
      startCompact(at);
    const size_t i = order[at];
    considering = i;
    if (std::string why = leftOut(i); !why.empty()) {
      if (options_.verbose)
        llvm::errs() << "lwcc: planner: " << plans[i].name() << " left out: " << why << "\n";
      sel.leftOut.push_back({plans[i].name(), why});
      pricing[i] = {};
      continue;
    }
    // The threads kept busy: candidates priced ahead (pricedAhead) and
    // plans the report asks for, as many at a time as `ahead`, started as
    // soon as a thread is free, not only once the one considered is priced.
    auto refill = [&] {
      size_t inFlight = 0;
      for (size_t q = at; q < order.size(); ++q)
        inFlight += pricing[order[q]].valid() && !isReady(pricing[order[q]]);
      // A step being finished ahead is not a candidate's pricing: a thread
      // for the next one (finishing is the kept step's last work, which the
      // caller would otherwise do alone after the selection).
      inFlight -= std::min<size_t>(inFlight, finishing.load());
      // A plan the report asks for (hypergraph's: its partition alone takes
      // a quarter of a second for Inception-v3 on 16 devices) starts first,
      // beside the first candidate, so that it does not run on alone after
      // the selection's last: the longest first.
      if (at == 0 && inFlight < ahead && ahead > 1)
        priceSpare(g, plans);
      inFlight += spareInFlight();
      // Once a candidate is considered and the pipelines' compact prices
      // are known, the pipeline of the lowest (the first in their order)
      // is priced before the others that wait, where it may be priced
      // ahead: of the candidates left it is the likeliest kept, and where
      // its compact price is below the fastest step so far its step is
      // finished ahead too (finishAhead), while the others are priced.
      if (!ordered && std::all_of(compactSoon.begin(), compactSoon.end(),
                                  [](const auto& f) { return !f.valid() || isReady(f); }))
        for (size_t q = at; q < others; ++q)
          if (plans[order[q]].strategy == "pipeline") {
            orderPipelines(q);
            break;
          }
      for (size_t q = at; q < others && inFlight < ahead && ordered && fastest; ++q) {
        const size_t k = order[q];
        if (plans[k].strategy != "pipeline")
          continue;
        if (!pricing[k].valid() && !evaluations_.count(keyOf(plans[k])) &&
            (q == at || pricedAhead(k, at))) {
          const std::optional<double> c = knownCompactPrice(plans[k]);
          startPricing(k, c && *c < built[*fastest]->sim.stepSeconds);
          ++inFlight;
        }
        break;
      }
      for (size_t q = at; q < order.size() && inFlight < ahead; ++q) {
        if (!ordered && q < others && plans[order[q]].strategy == "pipeline")
          orderPipelines(q);
        const size_t k = order[q];
        if (!pricing[k].valid() && !evaluations_.count(keyOf(plans[k])) &&
            (q == at || pricedAhead(k, at))) {
          startPricing(k, false);
          ++inFlight;
        }
      }
      // A thread left free prices a plan the report asks for.
      while (inFlight < ahead && priceSpare(g, plans))
        ++inFlight;
    };
    refill();
    if (!pricing[i].valid()) { // priced for an earlier selection
      if (llvm::Error e = evaluateAndConsider(plans[i]))
        return e;
      continue;
    }
    if (ahead > 1)
      while (pricing[i].wait_for(std::chrono::milliseconds(2)) != std::future_status::ready)
        refill();
    Priced priced = pricing[i].get();
    FinishedAhead finishedAhead = std::move(priced.ahead);
    std::unique_ptr<Graph> step;
    auto recorded = record(priced, &step);
    if (!recorded)
      return recorded.takeError();
    // Under -v each pipeline's compact price beside its simulated step
    // (with --plan-compact=false too: how near the compact price is).
    if (std::optional<double> c = !options_.verbose || !(*recorded)->error.empty() ? std::nullopt
                                  : options_.compactPipelines ? knownCompactPrice(plans[i])
                                                              : compactPrice(g, plans[i]);
        c)
      llvm::errs() << llvm::formatv("lwcc: planner: {0}: compact price {1:f3} ms, simulated "
                                    "{2:f3} ms\n",
                                    plans[i].name(), *c * 1e3, (*recorded)->sim.stepSeconds * 1e3);
    consider(**recorded, std::move(step), std::move(finishedAhead));
  }
  return llvm::Error::success();
}

void PlanSelector::restoreOrder() // The candidates built, back in their order.
{
  std::vector<size_t> perm(built.size());
  std::iota(perm.begin(), perm.end(), size_t{0});
  std::stable_sort(perm.begin(), perm.end(),
                   [&](size_t a, size_t b) { return builtAt[a] < builtAt[b]; });
  std::vector<const PlanEvaluation*> b2;
  std::vector<std::pair<std::string, double>> c2;
  std::vector<size_t> at2;
  std::optional<size_t> fastest2;
  for (size_t k : perm) {
    if (fastest && *fastest == k)
      fastest2 = b2.size();
    b2.push_back(built[k]);
    c2.push_back(sel.candidates[k]);
    at2.push_back(builtAt[k]);
  }
  built = std::move(b2);
  sel.candidates = std::move(c2);
  builtAt = std::move(at2);
  fastest = fastest2;
}

llvm::Error PlanSelector::memoryVariants() {
  rounds.assign(2, {});
  if (options_.shardWhenOver)
    rounds[0].push_back({"zero1", false});
  if (options_.recomputeWhenOver)
    rounds[0].push_back({"none", true});
  if (options_.shardWhenOver && options_.recomputeWhenOver)
    rounds[0].push_back({"zero1", true});
  if (options_.shardWhenOver) {
    std::vector<int64_t> fsdpMinBytes = {0};
    if (int64_t big = largeParamBytes(g); big > 0)
      fsdpMinBytes.insert(fsdpMinBytes.begin(), big);
    std::vector<Variant> shardings = {{"zero2", false}};
    for (int64_t minBytes : fsdpMinBytes)
      shardings.push_back({"fsdp", false, minBytes});
    for (const Variant& v : shardings) {
      rounds[1].push_back(v);
      if (options_.recomputeWhenOver)
        rounds[1].push_back({v.shard, true, v.shardMinBytes});
    }
  }
  const size_t candidates = built.size();
  for (const std::vector<Variant>& variants : rounds) {
    for (size_t i = 0; i < candidates; ++i) {
      // Variants are for memory: a candidate that fits, or one slower than
      // the fastest that fits, is not priced again (its variants move or
      // compute more; zero1's smaller update can be faster, but a plan is
      // not sharded where it fits without).
      if (built[i]->fits ||
          (fastest && built[i]->sim.stepSeconds >= built[*fastest]->sim.stepSeconds))
        continue;
      for (const Variant& v : variants) {
        const PlanChoice again = withVariant(built[i]->plan, v);
        if (keyOf(again) == keyOf(built[i]->plan))
          continue;
        if (llvm::Error e = evaluateAndConsider(again))
          return e;
      }
    }
  }
  return llvm::Error::success();
}

llvm::Error PlanSelector::fewerRecomputed() {
  if (options_.recomputeWhenOver) {
    const int64_t layers = static_cast<int64_t>(recomputableLayers(g).size());
    const size_t candidates = built.size();
    for (size_t i = 0; i < candidates && layers > 1; ++i) {
      const PlanChoice all = built[i]->plan;
      if (!built[i]->fits || !all.recompute || all.recomputeTop > 0)
        continue;
      PlanChoice plain = all;
      plain.recompute = false;
      if (auto it = evaluations_.find(keyOf(plain));
          fastest && it != evaluations_.end() && it->second.error.empty() &&
          it->second.sim.stepSeconds >= built[*fastest]->sim.stepSeconds)
        continue;
      int64_t lo = 1, hi = layers; // `layers` (every one) is known to fit
      while (lo < hi) {
        PlanChoice some = all;
        some.recomputeTop = lo + (hi - lo) / 2;
        auto fits = probe(some);
        if (!fits)
          return fits.takeError();
        if (*fits)
          hi = some.recomputeTop;
        else
          lo = some.recomputeTop + 1;
      }
    }
  }
  return llvm::Error::success();
}

llvm::Error PlanSelector::fewerSharded() {
  if (options_.shardWhenOver) {
    std::vector<int64_t> sizes; // ascending, distinct
    for (const Value* p : trainableParams(g))
      sizes.push_back(p->type().sizeInBytes());
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    const size_t candidates = built.size();
    for (size_t i = 0; i < candidates && sizes.size() > 1; ++i) {
      const PlanChoice at = built[i]->plan;
      if (!built[i]->fits || at.shard != "fsdp")
        continue;
      // One search per plan: from the fewest params known to fit.
      auto sibling = [&](const PlanEvaluation* o) {
        PlanChoice p = o->plan;
        p.shardMinBytes = at.shardMinBytes;
        return o->fits && keyOf(p) == keyOf(at) && o->plan.shardMinBytes > at.shardMinBytes;
      };
      if (std::any_of(built.begin(), built.begin() + static_cast<std::ptrdiff_t>(candidates),
                      sibling))
        continue;
      PlanChoice whole = at;
      whole.shard = "none";
      whole.shardMinBytes = 0;
      if (auto it = evaluations_.find(keyOf(whole));
          fastest && it != evaluations_.end() && it->second.error.empty() &&
          it->second.sim.stepSeconds >= built[*fastest]->sim.stepSeconds)
        continue;
      // sizes[lo] is known to fit (every param of at least it sharded).
      size_t lo = static_cast<size_t>(
          std::lower_bound(sizes.begin(), sizes.end(), at.shardMinBytes) - sizes.begin());
      size_t hi = sizes.size() - 1;
      while (lo < hi) {
        PlanChoice fewer = at;
        const size_t mid = lo + (hi - lo + 1) / 2;
        fewer.shardMinBytes = sizes[mid];
        auto fits = probe(fewer);
        if (!fits)
          return fits.takeError();
        if (*fits)
          lo = mid;
        else
          hi = mid - 1;
      }
    }
  }
  return llvm::Error::success();
}

llvm::Error PlanSelector::pipelinesUntilFit() {
  const int64_t devices = options_.devices, stages = options_.stages;
  if (!fastest && !options_.microbatches && !keepsStep) {
    int64_t n = batchOf(g);
    for (int64_t st = stages > 0 ? stages : 2; st <= devices; ++st) {
      if (devices % st || (stages > 0 && st != stages))
        continue;
      // Each plan of more micro-batches plain, then (where none fits) with
      // the variants of step 3, until one fits.
      auto fitsNow = [&](const PlanChoice& plan, bool& found) -> llvm::Error {
        size_t before = built.size();
        if (llvm::Error e = evaluateAndConsider(plan))
          return e;
        found = built.size() > before && built.back()->fits;
        return llvm::Error::success();
      };
      bool found = false;
      for (int64_t m = 8 * st; !found && m <= n && n / m >= devices / st; m *= 2)
        if (llvm::Error e = fitsNow(pipelinePlan(st, m), found))
          return e;
      for (int64_t m = 8 * st; !found && m <= n && n / m >= devices / st; m *= 2)
        for (const std::vector<Variant>& variants : rounds)
          for (size_t k = 0; !found && k < variants.size(); ++k)
            if (llvm::Error e = fitsNow(withVariant(pipelinePlan(st, m), variants[k]), found))
              return e;
    }
  }
  return llvm::Error::success();
}

llvm::Error PlanSelector::keep() {
  if (built.empty())
    return makeError("the planner found no " + strat +
                     " plan for --gpus=" + std::to_string(options_.devices) +
                     (firstError.empty() ? std::string() : ": " + firstError));
  // When none fits: the compile reports what the first needs.
  const size_t kept = fastest.value_or(0);
  sel.kept = sel.candidates[kept].first;
  planner_.kept_[strat] = built[kept]->plan;
  if (std::unique_ptr<Graph>& step = fastest ? fastestStep : firstStep) {
    // A folded candidate kept is built whole (what its build said was
    // said when it was priced).
    if (!step->foldedInto().empty()) {
      auto whole = g.clone();
      if (auto seconds = planner_.build_(*whole, built[kept]->plan, llvm::nulls(), false, false);
          !seconds)
        return seconds.takeError();
      step = std::move(whole);
    }
    // Candidates are built unverified: the one kept is verified here (the
    // fastest's already on its thread). --emit=plan reports the kept
    // plan's memory, planned on this step (planKeptMemory, or the caller's
    // passes on the step it takes), not built again for the report.
    if (fastest && fastestVerified.valid()) {
      if (std::string error = fastestVerified.get(); !error.empty())
        return makeError(error);
    } else if (llvm::Error e = verifyGraph(*step)) {
      return e;
    }
    planner_.keptSteps_[strat] = std::move(step);
    if (fastest && fastestFinished)
      planner_.keptFinished_[strat] = std::move(*fastestFinished);
  }
  if (options_.verbose) {
    llvm::errs() << "lwcc: " << strat << ": simulated step:";
    for (size_t i = 0; i < sel.candidates.size(); ++i)
      llvm::errs() << llvm::formatv(" {0} {1:f3} ms{2}", sel.candidates[i].first,
                                    sel.candidates[i].second * 1e3,
                                    built[i]->fits ? "" : " (over memory)");
    llvm::errs() << "; kept " << sel.kept << "\n";
  }
  planner_.selections_[strat] = std::move(sel);
  return llvm::Error::success();
}

} // namespace lwcc
