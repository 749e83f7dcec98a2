//===- Planner.cpp - Which plan lwcc builds for a strategy ----------------===//
#include "plan/Planner.h"

#include "ir/Params.h"
#include "ir/Verifier.h"
#include "passes/MemoryPlan.h"
#include "passes/StepOrder.h"
#include "passes/TrainingSupport.h"
#include "plan/PipelinePreview.h"
#include "plan/PlanSelector.h"

#include "llvm/Support/BuryPointer.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <future>
#include <limits>
#include <mutex>
#include <numeric>

namespace lwcc {

namespace {

/// The memory plan of a step that stays unannotated (a kept candidate's,
/// which the module's passes plan again): planned in place, its offsets
/// dropped after (a copy of a many-device step costs as much as its plan).
llvm::Expected<MemoryPlanStats> planMemoryUnannotated(Graph& step, bool freeScattered) {
  auto stats = planMemory(step, true, freeScattered);
  for (const auto& op : step.ops())
    op->annotations().bufferOffsets.reset();
  return stats;
}

/// A memory-planned step simulated on its scheduled IR (its events placed).
llvm::Expected<SimResult> simulateScheduled(Graph& planned, const SimCosts& costs) {
  if (auto events = placeEvents(planned); !events)
    return events.takeError();
  return simulate(planned, costs);
}

} // namespace

Planner::Freer::Freer() {
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || !steps_.empty(); });
      if (steps_.empty())
        return;
      std::unique_ptr<Graph> step = std::move(steps_.front());
      steps_.pop_front();
      lock.unlock();
      step.reset();
      lock.lock();
    }
  });
}

Planner::Freer::~Freer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void Planner::Freer::free(std::unique_ptr<Graph> step) {
  if (!step)
    return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    steps_.push_back(std::move(step));
  }
  wake_.notify_one();
}

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

std::string Planner::batchNormWarning(const Graph& g, const std::string& strat,
                                      const PlanChoice& plan) const {
  const PlanSelection* sel = selection(strat);
  if (!sel || options_.microbatches || plan.microbatches <= 1 || !normalizesByBatch(g))
    return "";
  return "the plan kept, " + sel->kept + ", splits each batch into " +
         std::to_string(plan.microbatches) +
         " micro-batches, and batch norm normalizes each by its own statistics: the step is not "
         "one device's (--microbatches=1, or a --strategy other than pipeline, keeps the whole "
         "batch's)";
}

std::unique_ptr<Graph> Planner::takeKeptStep(const std::string& strat) {
  auto it = keptSteps_.find(strat);
  return it == keptSteps_.end() ? nullptr : std::move(it->second);
}

void Planner::buryKeptSteps() {
  for (auto& [strat, step] : keptSteps_)
    llvm::BuryPointer(std::move(step));
}

llvm::Error Planner::planKeptMemory(const std::string& strat) {
  auto it = keptSteps_.find(strat);
  if (it == keptSteps_.end() || !it->second)
    return llvm::Error::success();
  PlanEvaluation& ev = evaluations_.at(keyOf(kept_.at(strat)));
  if (ev.memoryPlanned)
    return llvm::Error::success();
  if (auto finished = keptStepFinished(strat)) { // its memory planned ahead
    ev.peakBytes = finished->peakBytes;
    ev.memoryPlanned = true;
    return llvm::Error::success();
  }
  auto stats = planMemoryUnannotated(*it->second, freesEarly(ev.plan));
  if (!stats)
    return stats.takeError();
  ev.peakBytes = stats->peakBytes;
  ev.memoryPlanned = true;
  return llvm::Error::success();
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

llvm::Expected<std::unique_ptr<Graph>> Planner::buildStep(const Graph& g, const PlanChoice& plan) {
  auto step = g.clone();
  auto seconds = build_(*step, plan, llvm::errs(), true, false);
  if (!seconds)
    return seconds.takeError();
  return step;
}

bool Planner::freesEarly(const PlanChoice& plan) const {
  PlanChoice built = plan;
  if (options_.shard != "none") // --shard forces it for every candidate
    built.shard = options_.shard;
  return freesScattered(built);
}

bool Planner::pricesScheduled(const PlanChoice& plan, const CostModel& model) const {
  return freesEarly(plan) && !model.hasProfile();
}

llvm::Expected<SimResult> Planner::simulateOn(const Graph& g, const PlanChoice& plan,
                                              const CostModel& model) {
  auto step = buildStep(g, plan);
  if (!step)
    return step.takeError();
  if (!pricesScheduled(plan, model))
    return simulate(**step, simCosts(model));
  if (auto stats = planMemory(**step, true, true); !stats)
    return stats.takeError();
  return simulateScheduled(**step, simCosts(model));
}

bool Planner::compactAllowed(const PlanChoice& plan) const {
  return options_.compactModels && !model_.hasProfile() && model_.spec().hostCores <= 0 &&
         plan.strategy == "pipeline" && plan.stages > 1 && plan.shard == "none" &&
         !plan.recompute && options_.shard == "none" && options_.devices % plan.stages == 0;
}

std::optional<double> Planner::knownCompactPrice(const PlanChoice& plan) const {
  std::lock_guard<std::mutex> lock(compactMutex_);
  auto it = compactPrices_.find(keyOf(plan));
  return it == compactPrices_.end() ? std::nullopt : it->second;
}

std::optional<double> Planner::compactPrice(const Graph& g, const PlanChoice& plan) const {
  if (!compactAllowed(plan))
    return std::nullopt;
  {
    std::lock_guard<std::mutex> lock(compactMutex_);
    if (auto it = compactPrices_.find(keyOf(plan)); it != compactPrices_.end())
      return it->second;
  }
  std::optional<double> price = compactPriceOf(g, plan);
  std::lock_guard<std::mutex> lock(compactMutex_);
  return compactPrices_.emplace(keyOf(plan), price).first->second;
}

std::optional<double> Planner::compactPriceOf(const Graph& g, const PlanChoice& plan) const {
  PlanChoice one = plan;
  one.oneMicrobatch = true;
  auto piece = g.clone();
  std::string log;
  llvm::raw_string_ostream os(log);
  auto built = build_(*piece, one, os, false, false);
  if (!built) {
    llvm::consumeError(built.takeError());
    return std::nullopt;
  }
  auto read = readPipelinePiece(*piece, model_, options_.devices / plan.stages);
  if (!read || read->stages != plan.stages)
    return std::nullopt;
  PipelinePreviewOptions o;
  o.replicas = options_.devices / plan.stages;
  o.microbatches = plan.microbatches;
  o.gpipe = options_.gpipe;
  o.bucketBytes = options_.bucketBytes;
  double t = previewPipeline(*read, model_, o);
  if (!std::isfinite(t))
    return std::nullopt;
  return t;
}

bool Planner::folds() const {
  return options_.foldReplicas && !model_.hasProfile() && model_.spec().hostCores <= 0;
}

namespace {

/// A folded step's per-device figures given to the devices it left out:
/// those of the device whose ops stand for theirs.
template <class T>
void unfold(std::map<int64_t, T>& perDevice, const std::map<int64_t, int64_t>& into) {
  for (auto [left, by] : into)
    if (auto it = perDevice.find(by); it != perDevice.end()) {
      T value = it->second;
      perDevice[left] = value;
    }
}

} // namespace

Planner::Priced Planner::price(const Graph& g, const PlanChoice& plan, bool keepStep,
                               bool withMemory) const {
  Priced out;
  out.ev.plan = plan;
  llvm::raw_string_ostream log(out.log);
  auto candidate = g.clone();
  auto seconds = build_(*candidate, plan, log, false, folds());
  if (!seconds) {
    out.ev.error = llvm::toString(seconds.takeError());
    return out;
  }
  out.ev.strategySeconds = *seconds;
  const bool early = freesEarly(plan);
  auto sim = simulate(*candidate, simCosts(model_, false));
  if (!sim) {
    out.failure = llvm::toString(sim.takeError());
    return out;
  }
  out.ev.sim = std::move(*sim);
  out.foldedInto = candidate->foldedInto();
  if (!out.foldedInto.empty() && options_.verbose)
    log << llvm::formatv("lwcc: planner: {0} priced on {1} of {2} devices (each of the others "
                         "runs the ops of one of them)\n",
                         plan.name(),
                         options_.devices - static_cast<int64_t>(out.foldedInto.size()),
                         options_.devices);
  // Only a candidate's fit is needed, unless it is a report's row (a
  // pipeline is one only when kept): where its results fit unshared, its
  // plan fits, and the memory plan of a large step (a pipeline's many
  // micro-batches) is its largest cost.
  if (!withMemory && !early && (plan.strategy == "pipeline" || !options_.reportsStrategies)) {
    MemoryPlanStats bound;
    bound.peakBytes = unsharedBytes(*candidate);
    llvm::Error over = checkDeviceMemory(*candidate, bound, memory_);
    out.ev.fits = !over;
    llvm::consumeError(std::move(over));
    if (out.ev.fits) {
      if (keepStep)
        out.step = std::move(candidate);
      return out;
    }
  }
  // A kept step stays unannotated: planned on a copy where its pricing
  // places events in it.
  const bool scheduled = pricesScheduled(plan, model_);
  std::unique_ptr<Graph> probe = keepStep && scheduled ? candidate->clone() : nullptr;
  Graph& planned = probe ? *probe : *candidate;
  auto stats = keepStep && !scheduled ? planMemoryUnannotated(planned, early)
                                      : planMemory(planned, true, early);
  if (!stats) {
    out.failure = llvm::toString(stats.takeError());
    return out;
  }
  out.ev.peakBytes = stats->peakBytes;
  out.ev.memoryPlanned = true;
  llvm::Error over = checkDeviceMemory(planned, *stats, memory_);
  out.ev.fits = !over;
  llvm::consumeError(std::move(over));
  if (scheduled) {
    auto waited = simulateScheduled(planned, simCosts(model_, false));
    if (!waited) {
      out.failure = llvm::toString(waited.takeError());
      return out;
    }
    out.ev.sim = std::move(*waited);
  }
  if (keepStep)
    out.step = std::move(candidate);
  return out;
}

void Planner::finishAhead(Priced& priced, const PlanChoice& plan) const {
  if (!finish_ || !priced.step || !priced.failure.empty() || !priced.ev.error.empty() ||
      !priced.ev.fits || !priced.step->foldedInto().empty())
    return;
  FinishedAhead& ahead = priced.ahead;
  llvm::Error e = verifyGraph(*priced.step);
  ahead.verified = e ? llvm::toString(std::move(e)) : std::string();
  if (!ahead.verified->empty())
    return;
  auto stats = finish_(*priced.step, plan);
  if (!stats) {
    llvm::consumeError(stats.takeError());
    priced.step.reset();
    ahead.verified.reset();
    return;
  }
  ahead.finished = std::move(*stats);
}

llvm::Expected<const PlanEvaluation*> Planner::record(Priced& priced,
                                                      std::unique_ptr<Graph>* step) {
  llvm::errs() << priced.log;
  if (!priced.failure.empty())
    return makeError(priced.failure);
  if (step)
    *step = std::move(priced.step);
  // The left-out devices' figures are those of the devices standing for them.
  unfold(priced.ev.sim.computeSeconds, priced.foldedInto);
  unfold(priced.ev.sim.commSeconds, priced.foldedInto);
  unfold(priced.ev.peakBytes, priced.foldedInto);
  const Key key = keyOf(priced.ev.plan);
  return &(evaluations_[key] = std::move(priced.ev));
}

llvm::Expected<const PlanEvaluation*> Planner::evaluate(const Graph& g, const PlanChoice& plan,
                                                        std::unique_ptr<Graph>* step,
                                                        bool withMemory) {
  auto it = evaluations_.find(keyOf(plan));
  if (it != evaluations_.end() && (it->second.memoryPlanned || !withMemory))
    return &it->second;
  // Priced in a thread a selection left free (with its memory plan).
  if (auto spare = spare_.find(keyOf(plan)); spare != spare_.end()) {
    Priced priced = spare->second.get();
    spare_.erase(spare);
    return record(priced, step);
  }
  // New, or priced without its memory plan: built again to plan it.
  Priced priced = price(g, plan, step != nullptr, withMemory);
  return record(priced, step);
}

size_t Planner::spareInFlight() const {
  return static_cast<size_t>(std::count_if(spare_.begin(), spare_.end(),
                                           [](const auto& s) { return !isReady(s.second); }));
}

bool Planner::priceSpare(const Graph& g, const std::vector<PlanChoice>& candidates) {
  while (!soon_.empty()) {
    const PlanChoice plan = soon_.front();
    soon_.erase(soon_.begin());
    const Key key = keyOf(plan);
    if (evaluations_.count(key) || spare_.count(key) ||
        std::any_of(candidates.begin(), candidates.end(),
                    [&](const PlanChoice& c) { return keyOf(c) == key; }))
      continue; // priced, or the selection's to price
    // On its own copy: `g` is the caller's, and the thread may outlive the
    // selection.
    std::shared_ptr<const Graph> copy = g.clone();
    spare_[key] = std::async(std::launch::async,
                             [this, copy, plan] { return price(*copy, plan, false, true); });
    return true;
  }
  return false;
}

llvm::Error Planner::select(const Graph& g, const std::string& strat) {
  return PlanSelector(*this, g, strat).run();
}

} // namespace lwcc
