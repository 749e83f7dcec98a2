//===- Planner.cpp - Which plan lwcc builds for a strategy ----------------===//
#include "plan/Planner.h"

#include "ir/Params.h"
#include "ir/Verifier.h"
#include "passes/MemoryPlan.h"
#include "passes/StepOrder.h"
#include "passes/TrainingSupport.h"
#include "plan/PipelinePreview.h"

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

/// How much a plan shards: none, zero1, zero2, fsdp.
int shardRank(const std::string& shard) {
  return shard == "zero1" ? 1 : shard == "zero2" ? 2 : shard == "fsdp" ? 3 : 0;
}

/// Whether candidate `a` is kept over `b`, the fastest fitting one so far:
/// it is faster, and where it shards more than `b`, faster by more than 1%.
/// A sharded plan's simulated gain over one that fits unsharded is its
/// smaller update (a share of the optimizer's work) with gathers it takes to
/// be hidden behind compute: under 1% that is within the simulator's error,
/// and its extra communication a risk on real links.
bool faster(const PlanEvaluation& a, const PlanEvaluation& b) {
  const double margin = shardRank(a.plan.shard) > shardRank(b.plan.shard) ? 0.99 : 1.0;
  return a.sim.stepSeconds < b.sim.stepSeconds * margin;
}

} // namespace

namespace {

/// The batch: dim 0 of the model's first input.
int64_t batchOf(const Graph& g) {
  for (const auto& in : g.inputs())
    if (in->type().rank() > 0)
      return in->type().shape[0];
  return 1;
}

/// The least size of the largest trained params that hold 90% of their
/// bytes, where smaller ones remain: FSDP's partial candidate shards those
/// and replicates the rest (biases and norms, whose gathers would cost more
/// latency than their bytes save); 0 where that would shard every param.
int64_t largeParamBytes(const Graph& g) {
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (const Value* p : trainableParams(g)) {
    sizes.push_back(p->type().sizeInBytes());
    total += sizes.back();
  }
  std::sort(sizes.rbegin(), sizes.rend());
  int64_t sum = 0;
  for (int64_t s : sizes) {
    sum += s;
    if (10 * sum >= 9 * total)
      return s > sizes.back() ? s : 0;
  }
  return 0;
}

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

/// Whether the model normalizes by batch statistics: micro-batches then
/// change what it computes (each micro-batch by its own).
bool normalizesByBatch(const Graph& g) {
  return std::any_of(g.ops().begin(), g.ops().end(), [](const auto& op) {
    return op->kind() == OpKind::BatchNorm || op->kind() == OpKind::BatchNormTrain;
  });
}

PlanChoice pipelinePlan(int64_t stages, int64_t microbatches) {
  PlanChoice p;
  p.strategy = "pipeline";
  p.stages = stages;
  p.microbatches = microbatches;
  return p;
}

/// A pipeline's step over a micro-batch's time at its busiest stage, for S
/// stages of M micro-batches under 1F1B or GPipe: (M + S - 1) / M.
double bubbleFactor(int64_t stages, int64_t microbatches) {
  return static_cast<double>(microbatches + stages - 1) / static_cast<double>(microbatches);
}

/// Whether the task of future `f` has ended (a deferred one has not).
template <class Future> bool isReady(const Future& f) {
  return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
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
  PlanSelection sel;
  std::vector<PlanChoice> plans;
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
  const bool keepsStep = strat == "layerwise" && !options_.microbatches &&
                         !options_.microbatchStatistics && normalizesByBatch(g);
  if (keepsStep)
    sel.changesStepWhy = "batch norm would normalize each micro-batch by its own statistics, "
                         "not the whole batch's (--strategy=pipeline, --microbatches=M or "
                         "--batch-norm-per-microbatch allows it)";
  for (const PlanChoice& p : pipelineCandidates(g))
    if (keepsStep && p.microbatches > 1)
      sel.changesStep.push_back(p.name());
    else
      plans.push_back(p);
  // The pipelines' compact prices (plan/PipelinePreview.h): those that
  // step 2 orders started below, the others' computed where a rule needs
  // them.
  std::vector<std::shared_future<std::optional<double>>> compactSoon(plans.size());
  // Those of more micro-batches than stages computed early (below): whether
  // each was.
  std::vector<std::shared_future<bool>> compactEarly(plans.size());
  auto compactOf = [&](size_t k) -> std::optional<double> {
    if (compactSoon[k].valid())
      return compactSoon[k].get();
    if (compactEarly[k].valid())
      compactEarly[k].wait(); // then known, or not computed
    return compactPrice(g, plans[k]);
  };
  std::vector<const PlanEvaluation*> built; // the candidates built, in order
  std::string firstError;
  // The fastest that fits so far (the earliest of equal ones: a tie keeps
  // the search's plan, the first), and the steps that may be kept: the
  // fastest's, and the first's (kept when none fits). The other candidates'
  // steps are dropped once priced.
  std::optional<size_t> fastest;
  std::unique_ptr<Graph> fastestStep, firstStep;
  // The fastest's step verified on a thread of its own while the selection
  // goes on (the one kept is verified, and is most often the fastest found
  // before the last candidates are left out): its error, or "". Declared
  // after the step, so that it waits before the step is freed.
  std::future<std::string> fastestVerified;
  // What the fastest's step was finished ahead with (Planner::finishAhead).
  std::optional<MemoryPlanStats> fastestFinished;
  // `verified`: its verifyGraph error or "" where it was verified ahead.
  auto verifyFastest = [&](const std::optional<std::string>& verified) {
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
  };
  // Each built candidate's place in `plans` (after them: step 3's), the one
  // considered now, and the earliest built.
  std::vector<size_t> builtAt;
  size_t considering = 0;
  std::optional<size_t> firstAt;
  // Step 2 for one evaluated candidate; `step` is its built step when it was
  // priced just now, `ahead` what it was finished ahead with, if it was.
  auto consider = [&](const PlanEvaluation& ev, std::unique_ptr<Graph> step,
                      FinishedAhead ahead = {}) {
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
  };
  // Step 2 for a candidate not yet priced here.
  auto evaluateAndConsider = [&](const PlanChoice& plan) -> llvm::Error {
    std::unique_ptr<Graph> step;
    auto ev = evaluate(g, plan, &step, false);
    if (!ev)
      return ev.takeError();
    consider(**ev, std::move(step));
    return llvm::Error::success();
  };
  // A pipeline of M micro-batches whose S-stage siblings of M/2 and M/4 are
  // candidates before it (4S after S and 2S) is priced only where it may be
  // kept. At S stages the step is taken as convex in M (the launches of
  // each micro-batch's ops grow with M, the bubble shrinks as 1/M): where
  // M/2's step is slower than M/4's, M's is slower still, and with one of
  // the two fitting M cannot be the fastest that fits. Returns the reason
  // to leave it out, or "".
  auto halves = [&](size_t k) -> std::optional<std::pair<PlanChoice, PlanChoice>> {
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
  };
  auto slowerThanFewer = [&](size_t k) -> std::string {
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
  };
  // The pipelines of S stages and fewer micro-batches than `k`'s, where `k`
  // is one of more than S (2S, 4S): their places in `plans`.
  auto fewer = [&](size_t k) {
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
  };
  // A pipeline of S stages and M micro-batches (1F1B or GPipe) takes about
  // (M + S - 1) times a micro-batch's time at its busiest stage (ZB-H1's
  // smaller bubble, (M + (S - 1) / 3), shrinks less with M), and a
  // micro-batch of 1/M of the batch takes no less than 1/M of the batch's
  // time (each op's roofline time and launch: per sample, a smaller
  // micro-batch is no faster); what does not shrink with M (the gradient
  // all-reduce after the last backward, the update) does not shrink. So
  // going from M' to M micro-batches shrinks the step by at most the bubble
  // factor g(M) / g(M') where g(M) = (M + S - 1) / M: where that bound from
  // a sibling of fewer micro-batches is slower than the fastest that fits,
  // the candidate cannot be kept (nor be made to fit by step 3, which
  // tries only those faster than the fastest that fits). Not on a
  // measured profile (--cost-profile), whose times need not scale so.
  // Returns the reason to leave it out, or "".
  auto bubbleBound = [&](size_t k) -> std::string {
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
  };
  // A pipeline whose compact price is more than kCompactMargin times the
  // fastest that fits: its whole step is not simulated.
  // Likewise one of more micro-batches than stages whose sibling of fewer
  // has a compact price that, with the bubble bound above, is.
  // The step a compact price must pass to leave `k` out, where one may.
  auto compactLimit = [&](size_t k) -> std::optional<double> {
    if (!fastest || !options_.compactPipelines || !compactAllowed(plans[k]))
      return std::nullopt;
    return kCompactMargin * built[*fastest]->sim.stepSeconds;
  };
  // With `wait`, a sibling's compact price being computed is waited for:
  // what a decision knows does not depend on the threads.
  auto siblingCompactBound = [&](size_t k, bool wait) -> std::string {
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
  };
  auto compactBound = [&](size_t k) -> std::string {
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
  };
  auto leftOut = [&](size_t k) {
    std::string why = slowerThanFewer(k);
    if (why.empty())
      why = bubbleBound(k);
    return why.empty() ? compactBound(k) : why;
  };
  // Whether `k` is priced before it is the one considered: a pipeline of
  // more micro-batches than stages only once every other candidate is
  // considered and its siblings of fewer are priced, and where they do not
  // leave it out (decided again when it is considered, so that the choice
  // does not depend on the threads).
  size_t others = 0;    // the candidates considered before those pipelines
  bool ordered = false; // the pipelines before `others` ordered by their compact prices
  std::vector<size_t> order;
  // A pipeline with a compact price is priced ahead only where no pipeline
  // before it (a lower compact price) could leave it out once simulated:
  // its compact price is within kCompactMargin of theirs (the compact
  // price being mostly below the simulated step).
  auto aheadOfCompact = [&](size_t k, size_t at) {
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
  };
  auto pricedAhead = [&](size_t k, size_t at) {
    if (compactSoon[k].valid())
      return ordered && aheadOfCompact(k, at);
    std::vector<size_t> before = fewer(k);
    if (before.empty())
      return true;
    return at >= others &&
           std::all_of(before.begin(), before.end(),
                       [&](size_t j) { return evaluations_.count(keyOf(plans[j])) > 0; }) &&
           leftOut(k).empty();
  };
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
                                  [this, &g, plan = plans[k]] { return compactPrice(g, plan); })
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
                     [this, &g, plan = plans[k], siblings, firstCompacts, pricedLeast] {
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
  auto orderPipelines = [&](size_t at) {
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
  };
  // The candidates not priced yet, `threads` at a time from the one
  // considered on (an std::async future waits for its task when dropped).
  std::atomic<size_t> finishing{0}; // steps being finished ahead
  std::vector<std::future<Priced>> pricing(plans.size());
  const size_t ahead = static_cast<size_t>(std::max<int64_t>(1, options_.threads));
  // Candidate `k` priced on a thread of its own, and with `finish` its step
  // finished ahead (finishAhead) there too.
  auto startPricing = [&](size_t k, bool finish) {
    pricing[k] = std::async(std::launch::async, [this, &g, &finishing, plan = plans[k], finish] {
      Priced priced = price(g, plan, true, false);
      if (finish) {
        ++finishing;
        finishAhead(priced, plan);
        --finishing;
      }
      return priced;
    });
  };
  // The compact prices of the pipelines of more micro-batches than stages
  // that no rule but their own compact price can leave out now, computed
  // side by side on threads of their own once every other candidate is
  // considered (when the planner's threads are free), not one after
  // another as each one's turn comes; one a sibling's compact price, not
  // known yet, would leave out is computed for nothing, on a thread that
  // would wait.
  auto startCompact = [&](size_t from) {
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
      compactSoon[k] = std::async(std::launch::async, [this, &g, plan = plans[k]] {
                         return compactPrice(g, plan);
                       }).share();
    }
  };
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
  // The candidates built, back in their order.
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
  considering = plans.size();
  // Step 3: each candidate over memory that would be faster than the
  // fastest that fits (every one, when none fits) is priced again with its
  // optimizer state sharded (ZeRO-1, --shard=auto) and with recomputation
  // (--recompute=auto), and with both; then, for those still faster than
  // the fastest that fits, with its gradients sharded too (ZeRO-2) and with
  // its params sharded (FSDP: first only the largest params, those holding
  // 90% of the bytes, then every one), alone and with recomputation. The
  // fastest that fits is kept. Then, when none
  // fits, each pipeline tries twice as many micro-batches (fewer
  // activations per stage under 1F1B) until one fits.
  struct Variant { // what is added
    std::string shard;
    bool recompute;
    int64_t shardMinBytes = 0;
  };
  auto withVariant = [](PlanChoice plan, const Variant& v) {
    if (v.shard != "none") {
      plan.shard = v.shard;
      plan.shardMinBytes = v.shardMinBytes;
    }
    plan.recompute |= v.recompute;
    return plan;
  };
  std::vector<std::vector<Variant>> rounds(2);
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
  // A bisection's probe (steps 3b and 3c): whether `plan` fits, considered
  // here unless this selection has already.
  auto probe = [&](const PlanChoice& plan) -> llvm::Expected<bool> {
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
  };
  // Step 3b: a candidate that fits only by recomputing every layer's cheap
  // values may fit recomputing fewer layers, which is faster (fewer copies
  // in the backward): the K layers whose values hold the most bytes
  // (recompute's top=K), the least K that fits found by bisection (its fit
  // taken as monotone in K). Not where the same plan without recomputation,
  // a bound on every K's step, is no faster than the fastest that fits.
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
  // Step 3c: a candidate that fits with its params sharded (FSDP) may fit
  // sharding fewer, which is faster (fewer gathers): only those of at least
  // T bytes, the largest T among the trainable params' sizes that fits
  // found by bisection (its fit taken as monotone in T). Not where the same
  // plan unsharded (a bound on every T's step) is no faster than the
  // fastest that fits.
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
  if (built.empty())
    return makeError("the planner found no " + strat +
                     " plan for --gpus=" + std::to_string(devices) +
                     (firstError.empty() ? std::string() : ": " + firstError));
  // When none fits: the compile reports what the first needs.
  const size_t kept = fastest.value_or(0);
  sel.kept = sel.candidates[kept].first;
  kept_[strat] = built[kept]->plan;
  if (std::unique_ptr<Graph>& step = fastest ? fastestStep : firstStep) {
    // A folded candidate kept is built whole (what its build said was
    // said when it was priced).
    if (!step->foldedInto().empty()) {
      auto whole = g.clone();
      if (auto seconds = build_(*whole, built[kept]->plan, llvm::nulls(), false, false); !seconds)
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
    keptSteps_[strat] = std::move(step);
    if (fastest && fastestFinished)
      keptFinished_[strat] = std::move(*fastestFinished);
  }
  if (options_.verbose) {
    llvm::errs() << "lwcc: " << strat << ": simulated step:";
    for (size_t i = 0; i < sel.candidates.size(); ++i)
      llvm::errs() << llvm::formatv(" {0} {1:f3} ms{2}", sel.candidates[i].first,
                                    sel.candidates[i].second * 1e3,
                                    built[i]->fits ? "" : " (over memory)");
    llvm::errs() << "; kept " << sel.kept << "\n";
  }
  selections_[strat] = std::move(sel);
  return llvm::Error::success();
}

} // namespace lwcc
