//===- Planner.cpp - Which plan lwcc builds for a strategy ----------------===//
#include "plan/Planner.h"

#include "passes/MemoryPlan.h"
#include "plan/Simulator.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

namespace lwcc {

namespace {

/// The batch: dim 0 of the model's first input.
int64_t batchOf(const Graph& g) {
  for (const auto& in : g.inputs())
    if (in->type().rank() > 0)
      return in->type().shape[0];
  return 1;
}

PlanChoice pipelinePlan(int64_t stages, int64_t microbatches) {
  PlanChoice p;
  p.strategy = "pipeline";
  p.stages = stages;
  p.microbatches = microbatches;
  return p;
}

} // namespace

Planner::Planner(PlannerOptions options, BuildStep build, CostModel model, DeviceSpec memory)
    : options_(std::move(options)), build_(std::move(build)), model_(std::move(model)),
      memory_(std::move(memory)) {}

bool Planner::selects(const std::string& strat) const {
  if (strat == "pipeline")
    return !(options_.stages > 0 && options_.microbatches);
  return strat == "layerwise" && options_.devices > 1 && options_.selectLayerwise;
}

const PlanSelection* Planner::selection(const std::string& strat) const {
  auto it = selections_.find(strat);
  return it == selections_.end() ? nullptr : &it->second;
}

std::unique_ptr<Graph> Planner::takeKeptStep(const std::string& strat) {
  auto it = keptSteps_.find(strat);
  return it == keptSteps_.end() ? nullptr : std::move(it->second);
}

llvm::Expected<PlanChoice> Planner::plan(const Graph& g, const std::string& strat,
                                         const PlanChoice& fixed) {
  if (!selects(strat))
    return fixed;
  if (!selection(strat))
    if (llvm::Error e = select(g, strat))
      return e;
  return kept_.at(strat);
}

/// The pipeline plans of step 1 (see Planner.h): at most one micro-batch
/// per sample, and enough samples per micro-batch for a stage's replicas.
std::vector<PlanChoice> Planner::pipelineCandidates(const Graph& g) const {
  std::vector<PlanChoice> out;
  const int64_t n = batchOf(g), devices = options_.devices, stages = options_.stages;
  for (int64_t s = stages > 0 ? stages : 2; s <= devices; ++s) {
    if (devices % s || (stages > 0 && s != stages))
      continue;
    int64_t replicas = devices / s;
    std::vector<int64_t> ms;
    if (options_.microbatches)
      ms = {*options_.microbatches};
    else
      for (int64_t m : {s, 2 * s, 4 * s})
        if (m <= n && n / m >= replicas)
          ms.push_back(m);
    if (ms.empty())
      ms = {std::max<int64_t>(1, n / replicas)};
    for (int64_t m : ms)
      out.push_back(pipelinePlan(s, m));
  }
  return out;
}

llvm::Error Planner::select(const Graph& g, const std::string& strat) {
  PlanSelection sel;
  std::vector<PlanChoice> plans;
  if (strat == "layerwise")
    for (const char* s : {"layerwise", "data", "owt", "model"}) {
      PlanChoice p;
      p.strategy = s;
      p.microbatches = options_.microbatches.value_or(1);
      plans.push_back(p);
    }
  for (const PlanChoice& p : pipelineCandidates(g))
    plans.push_back(p);
  std::vector<PlanChoice> built;
  std::vector<std::unique_ptr<Graph>> steps;
  std::vector<bool> fits;
  std::string firstError;
  // Step 2 for one candidate.
  auto consider = [&](const PlanChoice& plan) -> llvm::Error {
    auto candidate = g.clone();
    auto seconds = build_(*candidate, plan);
    if (!seconds) {
      std::string why = llvm::toString(seconds.takeError());
      if (firstError.empty())
        firstError = why;
      if (options_.verbose)
        llvm::errs() << "lwcc: planner: " << plan.name() << " left out: " << why << "\n";
      return llvm::Error::success();
    }
    if (sel.candidates.empty())
      sel.searchSeconds = *seconds;
    auto sim = simulate(*candidate, simCosts(model_));
    if (!sim)
      return sim.takeError();
    sel.candidates.push_back({plan.name(), sim->stepSeconds});
    auto probe = candidate->clone(); // planned aside: the kept step stays unannotated
    auto stats = planMemory(*probe);
    if (!stats)
      return stats.takeError();
    llvm::Error over = checkDeviceMemory(*probe, *stats, memory_);
    fits.push_back(!over);
    llvm::consumeError(std::move(over));
    built.push_back(plan);
    steps.push_back(std::move(candidate));
    return llvm::Error::success();
  };
  for (const PlanChoice& plan : plans)
    if (llvm::Error e = consider(plan))
      return e;
  // Step 3: nothing fits a device, so each pipeline tries twice as many
  // micro-batches (fewer activations per stage under 1F1B) until one fits.
  const int64_t devices = options_.devices, stages = options_.stages;
  if (std::find(fits.begin(), fits.end(), true) == fits.end() && !options_.microbatches) {
    int64_t n = batchOf(g);
    for (int64_t st = stages > 0 ? stages : 2; st <= devices; ++st) {
      if (devices % st || (stages > 0 && st != stages))
        continue;
      for (int64_t m = 8 * st; m <= n && n / m >= devices / st; m *= 2) {
        size_t before = steps.size();
        if (llvm::Error e = consider(pipelinePlan(st, m)))
          return e;
        if (steps.size() > before && fits.back())
          break;
      }
    }
  }
  if (steps.empty())
    return makeError("the planner found no " + strat +
                     " plan for --gpus=" + std::to_string(devices) +
                     (firstError.empty() ? std::string() : ": " + firstError));
  std::vector<size_t> order(steps.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return sel.candidates[a].second < sel.candidates[b].second;
  });
  size_t kept = 0; // when none fits: the compile reports what the first needs
  for (size_t i : order)
    if (fits[i]) {
      kept = i;
      break;
    }
  // A tie with the search's plan keeps the search's.
  if (strat == "layerwise" && fits[0] && sel.candidates[0].first == "layerwise" &&
      sel.candidates[0].second <= sel.candidates[kept].second)
    kept = 0;
  sel.kept = sel.candidates[kept].first;
  kept_[strat] = built[kept];
  keptSteps_[strat] = std::move(steps[kept]);
  if (options_.verbose) {
    llvm::errs() << "lwcc: " << strat << ": simulated step:";
    for (size_t i = 0; i < sel.candidates.size(); ++i)
      llvm::errs() << llvm::formatv(" {0} {1:f3} ms{2}", sel.candidates[i].first,
                                    sel.candidates[i].second * 1e3,
                                    fits[i] ? "" : " (over memory)");
    llvm::errs() << "; kept " << sel.kept << "\n";
  }
  selections_[strat] = std::move(sel);
  return llvm::Error::success();
}

} // namespace lwcc
