//===- PlanReport.cpp - lwcc --emit=plan's tables -------------------------===//
#include "plan/PlanReport.h"

#include "ir/FusedOps.h"
#include "passes/Schedule.h"
#include "passes/TrainingSupport.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

namespace lwcc {

std::map<int64_t, KernelCount> kernelCounts(const Graph& g, KernelCountOptions o) {
  std::map<int64_t, KernelCount> out;
  const bool groupedUpdates = o.fused;
  // The activations library calls take as their epilogues (on one device
  // and stream; on CUDA run in place, as codegen fuses them).
  std::set<const Op*> epilogues;
  std::map<const Op*, const Op*> epilogueFor; // library call -> its epilogue
  std::set<const Op*> earlier;
  for (const auto& op : g.ops()) {
    earlier.insert(op.get());
    const Op* act = epilogueOf(*op, o.cuda, o.fused);
    if (!act || opDevice(*act) != opDevice(*op) ||
        act->annotations().stream != op->annotations().stream)
      continue;
    // A residual the call adds is written before it (of a region adding two
    // batch norms, the later one takes it, as codegen fuses them).
    if (const Value* residual = epilogueResidual(*act, op->result(0));
        residual && residual->definingOp() && !earlier.count(residual->definingOp()))
      continue;
    // cuDNN's fused convolution writes its relu in place.
    const auto &p = op->annotations().bufferOffsets, &a = act->annotations().bufferOffsets;
    if (o.cuda && op->kind() == OpKind::Conv2d && (!p || !a || (*p)[0] != (*a)[0]))
      continue;
    epilogues.insert(act);
    epilogueFor[op.get()] = act;
  }
  // The relu_grads a batch norm's backward reads through (right before it
  // on its device and stream, as codegen fuses them): no launch, and the
  // backward reads their two operands instead of their result.
  std::set<const Op*> prologues;
  std::map<const Op*, const Op*> prologueFor; // batch_norm_grad -> its relu_grad
  std::map<std::pair<int64_t, int64_t>, const Op*> last;
  for (const auto& op : g.ops()) {
    if (op->kind() == OpKind::Constant || !o.fused)
      continue;
    const Op*& prev = last[{opDevice(*op), op->annotations().stream.value_or(0)}];
    if (const Op* rg = gradPrologueOf(*op); rg && rg == prev) {
      prologues.insert(rg);
      prologueFor[op.get()] = rg;
    }
    prev = op.get();
  }
  const std::set<const Op*> views = o.fused ? paramViews(g) : std::set<const Op*>{};
  // Gradient clipping's products the updates take in (gradScaleOf): no
  // launch, and the update reads the gradient in their place.
  std::set<const Op*> scales;
  for (const auto& op : g.ops())
    if (const Op* mul = o.fused ? gradScaleOf(*op) : nullptr)
      scales.insert(mul);
  // Per device and stream: the first op of the multi-tensor call in
  // progress (only in-place assigns between its ops) and its ops so far, a
  // launch per kMultiTensorPerLaunch of them.
  std::map<std::pair<int64_t, int64_t>, std::pair<const Op*, int64_t>> run;
  auto inPlace = [](const Op& op) {
    const Value* v = op.operand(1);
    const Op* def = v->definingOp();
    return def && def->annotations().bufferOffsets &&
           (*def->annotations().bufferOffsets)[v->resultIndex()] == -1;
  };
  for (const auto& op : g.ops()) {
    // No launch: a constant (written once), an event, an update written in
    // place over its param (assign of nothing).
    if (op->kind() == OpKind::Constant || op->info().isEvent() || epilogues.count(op.get()) ||
        prologues.count(op.get()))
      continue;
    if (op->kind() == OpKind::Assign && inPlace(*op))
      continue;
    if (scales.count(op.get())) { // ends a multi-tensor call, as codegen's do
      run[{opDevice(*op), op->annotations().stream.value_or(0)}] = {nullptr, 0};
      continue;
    }
    // A view or copy (reshape, flatten) whose result the memory plan put on
    // its operand's bytes, or a view of a param that codegen places on the
    // param's bytes (paramViews): nothing to do. Another view of a param or
    // an input is a copy into the arena, as codegen writes it.
    if (views.count(op.get()))
      continue;
    if (op->info().kernel.fn && std::string_view(op->info().kernel.fn) == "copy" &&
        op->numOperands() == 1 && op->annotations().bufferOffsets) {
      const Value* v = op->operand(0);
      const Op* def = v->definingOp();
      if (def && def->annotations().bufferOffsets &&
          (*def->annotations().bufferOffsets)[v->resultIndex()] ==
              (*op->annotations().bufferOffsets)[0] &&
          valueDevice(v) == valueDevice(op->result()))
        continue;
    }
    const bool grouped = groupedUpdates && inMultiTensorCall(*op);
    auto& [first, members] = run[{opDevice(*op), op->annotations().stream.value_or(0)}];
    const bool joins = grouped && first && sameMultiTensorCall(*first, *op) &&
                       (!o.cuda || members % kMultiTensorPerLaunch != 0);
    first = grouped ? (joins ? first : op.get()) : nullptr;
    members = grouped ? (joins ? members + 1 : 1) : 0;
    int64_t bytes = 0;
    for (const Value* v : op->operands())
      bytes += v->type().sizeInBytes();
    for (unsigned r = 0; r < op->numResults(); ++r)
      bytes += op->result(r)->type().sizeInBytes();
    if (auto p = prologueFor.find(op.get()); p != prologueFor.end())
      bytes += p->second->operand(0)->type().sizeInBytes(); // the relu's output too
    if (auto e = epilogueFor.find(op.get()); e != epilogueFor.end())
      if (const Value* residual = epilogueResidual(*e->second, op->result(0)))
        bytes += residual->type().sizeInBytes(); // the residual a batch norm adds
    for (int64_t d : devicesOf(*op)) {
      KernelCount& k = out[d];
      k.kernels += joins ? 0 : 1;
      k.fused += op->kind() == OpKind::Fused;
      k.bytes += op->info().isCommunication() ? 0 : bytes;
    }
  }
  return out;
}

/// The memory plan as a table: one row per op result, then the arenas.
void printPlan(const Graph& g, const MemoryPlanStats& stats, llvm::raw_ostream& os,
               KernelCountOptions counts) {
  os << llvm::formatv("memory plan of @{0}: {1} ops\n", g.name(), g.numOps());
  os << llvm::formatv("{0,-5} {1,-20} {2,-28} {3,-22} {4,10} {5,10} {6,4}\n", "#", "op", "location",
                      "result", "bytes", "offset", "dev");
  size_t pos = 0;
  for (const auto& op : g.ops()) {
    for (unsigned r = 0; r < op->numResults(); ++r) {
      const TensorType& t = op->result(r)->type();
      // The header's columns, written directly: a formatv per row parses
      // its format each time (31,730 rows for Inception-v3 on 16 devices).
      os << llvm::left_justify(std::to_string(pos), 5) << ' '
         << llvm::left_justify(llvm::StringRef(op->mnemonic()), 20) << ' '
         << llvm::left_justify(llvm::StringRef(op->loc().name).substr(0, 28), 28) << ' '
         << llvm::left_justify(t.str().substr(0, 22), 22) << ' '
         << llvm::format_decimal(t.sizeInBytes(), 10) << ' '
         << llvm::format_decimal((*op->annotations().bufferOffsets)[r], 10) << ' '
         << llvm::format_decimal(valueDevice(op->result(r)).value_or(0), 4) << '\n';
    }
    ++pos;
  }
  for (const auto& [device, bytes] : stats.peakBytes)
    os << llvm::formatv("device {0}: arena {1} bytes (peak)\n", device, bytes);
  os << llvm::formatv("{0} buffers, {1} bytes without sharing, {2} written in place, {3} views, "
                      "{4} updates over their params (offset -1: in the state)\n",
                      stats.buffers, stats.totalBytes, stats.inPlace, stats.aliased,
                      stats.overParams);
  for (const auto& [device, k] : kernelCounts(g, counts))
    os << llvm::formatv("device {0}: {1} kernels a step ({2} fused), {3} bytes read and written "
                        "by them\n",
                        device, k.kernels, k.fused, k.bytes);
  for (const auto& [device, m] : stats.breakdown)
    os << llvm::formatv("device {0}: params {1} bytes, other state {2} (optimizer, statistics); "
                        "arena fullest at op {3}, {4} bytes live: activations {5}, gradients "
                        "{6}, constants {7}, gathered params {8}; at most {9} bytes of "
                        "gradients and gathered params live at once\n",
                        device, m.params, m.state, m.at, m.live, m.activations, m.gradients,
                        m.constants, m.gathered, m.gradientPeak);
  if (std::vector<std::string> again = recomputedLayers(g); !again.empty()) {
    os << llvm::formatv("computed again for the backward (--recompute): {0} layer{1}:",
                        again.size(), again.size() == 1 ? "" : "s");
    for (const std::string& l : again)
      os << " " << (l.empty() ? "(unnamed)" : l);
    os << "\n";
  }
  const ShardedParams sharded = shardedParams(g);
  for (const auto& [names, what] :
       {std::make_pair(&sharded.params, "params, gradients and optimizer state (--shard=fsdp)"),
        std::make_pair(&sharded.state, "optimizer state (--shard=zero1, zero2)")}) {
    if (names->empty())
      continue;
    os << llvm::formatv("sharded over their replicas, {0}: {1} params:", what, names->size());
    for (const std::string& n : *names)
      os << " " << n;
    os << "\n";
  }
}

ShardedParams shardedParams(const Graph& g) {
  std::set<std::string> gathered, shared;
  for (const auto& op : g.ops()) {
    if (gathersParamShares(*op))
      gathered.insert(op->operand(0)->paramName());
    if ((op->kind() == OpKind::SgdUpdate || op->kind() == OpKind::AdamUpdate) &&
        op->operand(0)->definingOp() && op->operand(0)->definingOp()->kind() == OpKind::Slice &&
        op->operand(0)->definingOp()->operand(0)->kind() == ValueKind::Param)
      shared.insert(op->operand(0)->definingOp()->operand(0)->paramName());
  }
  ShardedParams out;
  std::set<std::string> seen;
  for (const auto& p : g.params())
    if (seen.insert(p->paramName()).second) {
      if (gathered.count(p->paramName()))
        out.params.push_back(p->paramName());
      else if (shared.count(p->paramName()))
        out.state.push_back(p->paramName());
    }
  return out;
}

std::vector<std::string> recomputedLayers(const Graph& g) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& op : g.ops())
    if (isRecomputed(*op)) {
      llvm::StringRef name(op->loc().name);
      std::string layer = name.consume_back(".recompute") ? name.str() : std::string();
      if (seen.insert(layer).second)
        out.push_back(layer);
    }
  return out;
}

/// The bytes a multi-device training step moves between devices.
int64_t stepCommBytes(const Graph& g) {
  int64_t total = 0;
  for (const auto& op : g.ops())
    total += commBytes(*op);
  return total;
}

llvm::Error printStreamPlan(const Graph& g, const CostModel& model, llvm::raw_ostream& os) {
  struct Lane {
    int64_t ops = 0;
    double seconds = 0;
    std::string first, last;
    bool weightGradients = false;
  };
  std::map<std::pair<int64_t, int64_t>, Lane> lanes;
  bool several = false;
  for (const auto& op : g.ops()) {
    if (op->info().isCommunication() || op->info().isEvent() || op->kind() == OpKind::Constant)
      continue;
    int64_t stream = op->annotations().stream.value_or(0);
    several |= stream != 0;
    Lane& l = lanes[{op->annotations().device.value_or(0), stream}];
    ++l.ops;
    l.seconds += model.opSeconds(*op);
    if (l.first.empty())
      l.first = op->loc().name;
    l.last = op->loc().name;
    l.weightGradients |= op->kind() == OpKind::SgdUpdate || op->kind() == OpKind::AdamUpdate;
  }
  if (!several)
    return llvm::Error::success();
  os << "streams (compute ops, their predicted time on " << model.spec().name << "):\n";
  for (const auto& [key, l] : lanes) {
    os << llvm::formatv("  device {0} stream {1}: {2} ops, {3:f3} ms", key.first, key.second, l.ops,
                        l.seconds * 1e3);
    if (key.second == 1 && l.weightGradients)
      os << " (weight gradients and updates)";
    else if (key.second > 1)
      os << " (branches: " << l.first << " .. " << l.last << ")";
    os << "\n";
  }
  auto sim = simulate(g, simCosts(model));
  if (!sim)
    return sim.takeError();
  auto one = g.clone();
  for (auto& op : one->ops())
    if (!op->info().isCommunication())
      op->annotations().stream.reset();
  auto flat = simulate(*one, simCosts(model));
  if (!flat)
    return flat.takeError();
  os << llvm::formatv("predicted step with these streams: {0:f3} ms; on one stream per device: "
                      "{1:f3} ms\n",
                      sim->stepSeconds * 1e3, flat->stepSeconds * 1e3);
  return llvm::Error::success();
}

llvm::Expected<std::vector<StrategyPlan>>
planStrategies(Planner& planner, const Graph& g, const std::vector<std::string>& names,
               const std::string& chosen,
               const std::function<PlanChoice(const std::string&)>& fixedPlan,
               const CostModel* reprice) {
  std::vector<StrategyPlan> out(names.size());
  // The selections' rows first: layerwise's selection prices data, owt and
  // model among its candidates, several at a time (PlannerOptions::threads),
  // so their rows find them priced. The rows stay in the order of `names`.
  std::vector<size_t> order(names.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_partition(order.begin(), order.end(),
                        [&](size_t i) { return planner.selects(names[i]); });
  // The other rows' plans (hypergraph's) priced in the threads the
  // selections leave free.
  for (size_t i : order)
    if (!planner.selects(names[i]))
      planner.priceSoon(fixedPlan(names[i]));
  // The plan the chosen selection keeps: its step is the caller's, which
  // the caller memory-plans (the rows of that plan get its peak bytes
  // there, not from a plan of the same step here).
  // (Known once its row comes: the selections run in the rows' order.)
  std::optional<PlanChoice> chosenKept;
  for (size_t i : order) {
    const std::string& name = names[i];
    StrategyPlan& p = out[i];
    p.name = name;
    auto plan = planner.plan(g, name, fixedPlan(name));
    if (!plan) {
      if (name == chosen)
        return plan.takeError();
      p.error = llvm::toString(plan.takeError());
      continue;
    }
    if (name == chosen && planner.selects(name))
      chosenKept = *plan;
    const PlanEvaluation* ev = planner.evaluated(*plan);
    p.chosenPlan = chosenKept && Planner::samePlan(*plan, *chosenKept) && ev && !ev->memoryPlanned;
    if (!p.chosenPlan) {
      if (planner.selects(name))
        if (llvm::Error e = planner.planKeptMemory(name))
          return e;
      auto evaluated = planner.evaluate(g, *plan);
      if (!evaluated)
        return evaluated.takeError();
      ev = *evaluated;
    }
    // The chosen strategy's build error is reported when the module's step
    // is built.
    p.error = ev->error;
    if (p.error.empty()) {
      p.sim = ev->sim;
      p.peakBytes = ev->peakBytes;
    }
    if (p.error.empty() && reprice) {
      auto sim = planner.simulateOn(g, *plan, *reprice);
      if (!sim)
        return sim.takeError();
      p.sim = std::move(*sim);
    }
  }
  return out;
}

llvm::Error writeSimulatedTrace(const Graph& g, const CostModel& model, const std::string& file) {
  auto sim = simulate(g, simCosts(model));
  if (!sim)
    return sim.takeError();
  std::error_code ec;
  llvm::raw_fd_ostream os(file, ec);
  if (ec)
    return makeError(file + ": cannot write: " + ec.message());
  writeChromeTrace(sim->events, os);
  return llvm::Error::success();
}

std::vector<LayerPlan> layerPlans(const Graph& g, const CostModel& model) {
  std::vector<LayerPlan> out;
  std::map<std::string, size_t> index;
  for (const auto& op : g.ops()) {
    // Optimizer updates are named after their param: one row for them all.
    std::string name = op->loc().name.empty() ? "(unnamed)" : op->loc().name;
    if (llvm::StringRef(name).startswith("optimizer/"))
      name = "optimizer";
    auto [it, added] = index.emplace(name, out.size());
    if (added) {
      out.emplace_back();
      out.back().name = name;
    }
    LayerPlan& l = out[it->second];
    ++l.ops;
    l.commBytes += commBytes(*op);
    if (!op->info().isCommunication())
      l.computeSeconds += model.opSeconds(*op);
    const auto& par = op->annotations().par;
    if (par && l.config == "-") {
      // Appended piece by piece: GCC 12's -O3 misreads `"x" + std::string`
      // (a -Wrestrict false positive).
      std::string cfg, devs;
      for (const auto& [dim, degree] : par->degrees) {
        if (!cfg.empty())
          cfg += ", ";
        cfg += dim;
        cfg += " = ";
        cfg += std::to_string(degree);
      }
      for (int64_t d : par->devices) {
        if (!devs.empty())
          devs += ',';
        devs += std::to_string(d);
      }
      l.config = cfg.empty() ? "whole" : cfg;
      l.devices = devs.empty() ? "-" : devs;
    }
  }
  return out;
}

namespace {

double maxOver(const std::map<int64_t, double>& m) {
  double x = 0;
  for (const auto& [d, s] : m)
    x = std::max(x, s);
  return x;
}

int64_t maxOver(const std::map<int64_t, int64_t>& m) {
  int64_t x = 0;
  for (const auto& [d, b] : m)
    x = std::max(x, b);
  return x;
}

} // namespace

PipelinePlan pipelinePlan(const Graph& g, const StrategyPlan& s, const std::string& schedule) {
  PipelinePlan p;
  PipelineShape shape = pipelineShapeOf(g);
  p.stages = shape.stages;
  p.microbatches = shape.microbatches;
  p.schedule = schedule;
  if (!p.microbatches)
    return p;
  std::map<int64_t, StagePlan> devices;
  for (const auto& [d, stage] : shape.stageOf) {
    StagePlan& sp = devices[d];
    sp.device = d;
    sp.stage = stage;
    auto it = s.sim.computeSeconds.find(d);
    sp.computeSeconds = it == s.sim.computeSeconds.end() ? 0 : it->second;
    sp.bubble =
        s.sim.stepSeconds > 0 ? std::max(0.0, 1 - sp.computeSeconds / s.sim.stepSeconds) : 0;
    auto pk = s.peakBytes.find(d);
    sp.peakBytes = pk == s.peakBytes.end() ? 0 : pk->second;
  }
  size_t k = 0;
  for (const auto& op : g.ops()) {
    bool backward = shape.backward[k++];
    if (op->kind() == OpKind::Constant)
      continue;
    if (op->kind() == OpKind::DeviceCopy) {
      int64_t src = op->getInt("src"), dst = op->getInt("dst");
      if (shape.stageOf[src] != shape.stageOf[dst])
        devices[src].bytesOut += op->result()->type().sizeInBytes();
      continue;
    }
    if (op->info().isCommunication())
      continue;
    StagePlan& sp = devices[opDevice(*op)];
    ++sp.ops;
    if (!op->loc().name.empty() && !llvm::StringRef(op->loc().name).startswith("optimizer") &&
        op->loc().name != "loss.grad") {
      if (sp.first.empty())
        sp.first = op->loc().name;
      if (!backward) // forward ops name the stage's last layer
        sp.last = op->loc().name;
    }
  }
  for (auto& [d, sp] : devices)
    p.devices.push_back(sp);
  return p;
}

namespace {

/// The plans a selection left out because their step is not one device's,
/// and the fastest of them where the report priced it (its pipeline row)
/// beside the plan kept.
void printChangesStep(const PlanSelection& selection, const std::vector<StrategyPlan>& strategies,
                      llvm::raw_ostream& os) {
  if (selection.changesStep.empty())
    return;
  os << "  left out, their step not one device's:";
  for (const std::string& name : selection.changesStep)
    os << " " << name;
  os << ": " << selection.changesStepWhy << "\n";
  const StrategyPlan* pipeline = nullptr;
  const StrategyPlan* kept = nullptr;
  for (const StrategyPlan& s : strategies) {
    if (!s.error.empty())
      continue;
    if (s.name == "pipeline")
      pipeline = &s;
    if (s.name == "layerwise")
      kept = &s;
  }
  if (pipeline && kept && pipeline->sim.stepSeconds < kept->sim.stepSeconds)
    os << llvm::formatv(
        "  the fastest of them, the pipeline row's plan, predicts {0:f3} ms against "
        "the kept plan's {1:f3} ms\n",
        pipeline->sim.stepSeconds * 1e3, kept->sim.stepSeconds * 1e3);
}

} // namespace

void printParallelPlan(const Graph& g, const CostModel& model, const std::string& strategy,
                       int64_t gpus, const std::vector<StrategyPlan>& strategies,
                       const std::map<std::string, PlanSelection>& selections,
                       const std::string& schedule, llvm::raw_ostream& os) {
  os << llvm::formatv("\nparallel plan of @{0}: --strategy={1} on {2} devices, priced on {3}\n",
                      g.name(), strategy, gpus, model.spec().name);
  os << llvm::formatv("{0,-32} {1,-14} {2,-16} {3,5} {4,12} {5,14}\n", "layer", "config", "devices",
                      "ops", "compute ms", "comm bytes");
  for (const LayerPlan& l : layerPlans(g, model))
    os << llvm::formatv("{0,-32} {1,-14} {2,-16} {3,5} {4,12:f3} {5,14}\n", l.name.substr(0, 32),
                        l.config, l.devices.substr(0, 16), l.ops, l.computeSeconds * 1e3,
                        l.commBytes);
  os << llvm::formatv("communicated per step: {0} bytes\n", stepCommBytes(g));
  os << "\nstrategies, predicted by the simulator (per device: the busiest device):\n";
  os << llvm::formatv("{0,-12} {1,12} {2,12} {3,12} {4,14} {5,14}\n", "strategy", "step ms",
                      "compute ms", "comm ms", "comm bytes", "peak bytes");
  for (const StrategyPlan& s : strategies)
    if (!s.error.empty())
      os << llvm::formatv("{0,-12} {1,12} (no plan: {2})\n", s.name, "-",
                          llvm::StringRef(s.error).rtrim());
    else
      os << llvm::formatv("{0,-12} {1,12:f3} {2,12:f3} {3,12:f3} {4,14} {5,14}{6}\n", s.name,
                          s.sim.stepSeconds * 1e3, maxOver(s.sim.computeSeconds) * 1e3,
                          maxOver(s.sim.commSeconds) * 1e3, s.sim.commBytes, maxOver(s.peakBytes),
                          s.name == strategy ? "  (chosen)" : "");
  for (const auto& [name, selection] : selections) {
    os << name
       << (name == "layerwise" ? ": the search's plan, the uniform ones and the pipelines"
                               : ": the pipelines")
       << " on the simulator:";
    for (const auto& [candidate, seconds] : selection.candidates)
      os << llvm::formatv(" {0} {1:f3} ms", candidate, seconds * 1e3);
    os << "; kept "
       << (selection.kept == "layerwise" ? "the search's plan" : selection.kept + "'s configs")
       << "\n";
    printChangesStep(selection, strategies, os);
  }
  for (const StrategyPlan& s : strategies) {
    if (s.name != strategy)
      continue;
    PipelinePlan p = pipelinePlan(g, s, schedule);
    if (!p.microbatches)
      break;
    double bubble = 0;
    for (const StagePlan& sp : p.devices)
      bubble = std::max(bubble, sp.bubble);
    os << llvm::formatv("\n{0} stage(s), {1} micro-batches, {2} schedule; bubble: the fraction of "
                        "the step a device's compute is idle (largest {3:f3}; a uniform pipeline's "
                        "(S-1)/(M+S-1) = {4:f3})\n",
                        p.stages, p.microbatches, p.schedule, bubble,
                        static_cast<double>(p.stages - 1) /
                            static_cast<double>(p.microbatches + p.stages - 1));
    os << llvm::formatv("{0,6} {1,5} {2,6} {3,-40} {4,11} {5,7} {6,14} {7,12}\n", "device", "stage",
                        "ops", "layers", "compute ms", "bubble", "peak bytes", "bytes out");
    for (const StagePlan& sp : p.devices)
      os << llvm::formatv("{0,6} {1,5} {2,6} {3,-40} {4,11:f3} {5,7:f3} {6,14} {7,12}\n", sp.device,
                          sp.stage, sp.ops, (sp.first + " .. " + sp.last).substr(0, 40),
                          sp.computeSeconds * 1e3, sp.bubble, sp.peakBytes, sp.bytesOut);
  }
  for (const StrategyPlan& s : strategies) {
    if (s.name != strategy)
      continue;
    for (const auto& [d, bytes] : s.peakBytes) {
      auto get = [&](const std::map<int64_t, double>& m) {
        auto it = m.find(d);
        return it == m.end() ? 0.0 : it->second;
      };
      os << llvm::formatv("{0}: device {1}: compute {2:f3} ms, communication {3:f3} ms, peak {4} "
                          "bytes\n",
                          s.name, d, get(s.sim.computeSeconds) * 1e3, get(s.sim.commSeconds) * 1e3,
                          bytes);
    }
  }
}

void writePlanJson(const std::string& chosen, double searchSeconds, const std::string& spec,
                   const std::vector<StrategyPlan>& strategies, const PlanSelection* selection,
                   const std::vector<LayerPlan>& layers, const PipelinePlan* pipeline,
                   const MemoryPlanStats* memory, const std::vector<std::string>& recomputed,
                   const ShardedParams& sharded, llvm::raw_ostream& os) {
  llvm::json::Object strats;
  for (const StrategyPlan& s : strategies) {
    if (!s.error.empty()) {
      strats[s.name] = llvm::json::Object{{"error", s.error}};
      continue;
    }
    llvm::json::Array compute, comm, peaks;
    for (const auto& [d, b] : s.peakBytes) {
      auto get = [&](const std::map<int64_t, double>& m) {
        auto it = m.find(d);
        return it == m.end() ? 0.0 : it->second;
      };
      compute.push_back(get(s.sim.computeSeconds));
      comm.push_back(get(s.sim.commSeconds));
      peaks.push_back(b);
    }
    strats[s.name] = llvm::json::Object{
        {"step_s", s.sim.stepSeconds},        {"comm_bytes", s.sim.commBytes},
        {"peak_bytes", maxOver(s.peakBytes)}, {"compute_s", std::move(compute)},
        {"comm_s", std::move(comm)},          {"peak_bytes_per_device", std::move(peaks)}};
  }
  llvm::json::Array rows;
  for (const LayerPlan& l : layers)
    rows.push_back(llvm::json::Object{{"name", l.name},
                                      {"config", l.config},
                                      {"devices", l.devices},
                                      {"ops", l.ops},
                                      {"compute_s", l.computeSeconds},
                                      {"comm_bytes", l.commBytes}});
  llvm::json::Object top{{"chosen", chosen},
                         {"search_s", searchSeconds},
                         {"device_spec", spec},
                         {"strategies", std::move(strats)},
                         {"layers", std::move(rows)}};
  if (selection) {
    llvm::json::Object candidates;
    for (const auto& [name, seconds] : selection->candidates)
      candidates[name] = seconds;
    llvm::json::Object leftOut;
    for (const auto& [name, why] : selection->leftOut)
      leftOut[name] = why;
    llvm::json::Array changesStep;
    for (const std::string& name : selection->changesStep)
      changesStep.push_back(name);
    top["search_check"] = llvm::json::Object{{"kept", selection->kept},
                                             {"candidates", std::move(candidates)},
                                             {"left_out", std::move(leftOut)},
                                             {"changes_step", std::move(changesStep)}};
  }
  if (pipeline && pipeline->microbatches) {
    llvm::json::Array devs;
    for (const StagePlan& sp : pipeline->devices)
      devs.push_back(llvm::json::Object{{"device", sp.device},
                                        {"stage", sp.stage},
                                        {"ops", sp.ops},
                                        {"first", sp.first},
                                        {"last", sp.last},
                                        {"compute_s", sp.computeSeconds},
                                        {"bubble", sp.bubble},
                                        {"peak_bytes", sp.peakBytes},
                                        {"bytes_out", sp.bytesOut}});
    top["pipeline"] = llvm::json::Object{{"stages", pipeline->stages},
                                         {"microbatches", pipeline->microbatches},
                                         {"schedule", pipeline->schedule},
                                         {"devices", std::move(devs)}};
  }
  if (memory) {
    llvm::json::Array devs;
    for (const auto& [device, m] : memory->breakdown)
      devs.push_back(llvm::json::Object{
          {"device", device},
          {"params_bytes", m.params},
          {"state_bytes", m.state},
          {"arena_bytes", memory->peakBytes.count(device) ? memory->peakBytes.at(device) : 0},
          {"live_at_op", static_cast<int64_t>(m.at)},
          {"live_bytes", m.live},
          {"activation_bytes", m.activations},
          {"gradient_bytes", m.gradients},
          {"constant_bytes", m.constants},
          {"gathered_param_bytes", m.gathered},
          {"gradient_peak_bytes", m.gradientPeak}});
    top["memory"] = std::move(devs);
  }
  llvm::json::Array layersAgain;
  for (const std::string& l : recomputed)
    layersAgain.push_back(l);
  top["recomputed_layers"] = std::move(layersAgain);
  llvm::json::Array fsdp, zero;
  for (const std::string& n : sharded.params)
    fsdp.push_back(n);
  for (const std::string& n : sharded.state)
    zero.push_back(n);
  top["sharded_params"] =
      llvm::json::Object{{"params", std::move(fsdp)}, {"optimizer_state", std::move(zero)}};
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(top))) << "\n";
}

} // namespace lwcc
