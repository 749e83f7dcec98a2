//===- ReferenceModes.cpp - lwcc's runs on the reference interpreter ------===//
#include "tools/lwcc/ReferenceModes.h"

#include "frontend/Frontend.h"
#include "interp/Eval.h"
#include "interp/Interpreter.h"
#include "ir/Diagnostics.h"
#include "passes/GradCheck.h"
#include "passes/MemoryPlan.h"
#include "tools/lwcc/Options.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <filesystem>
#include <map>

namespace lwcc {

using namespace flags;
namespace fs = std::filesystem;

namespace {

int fail(llvm::Error e) {
  printErrors(llvm::errs(), std::move(e));
  return 1;
}

std::vector<Tensor> readInputs(const Graph& g, const std::string& dir, llvm::Error& err) {
  std::vector<Tensor> inputs;
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    std::string path = (fs::path(dir) / ("input_" + std::to_string(k) + ".pb"));
    auto t = readTensorFile(path);
    if (!t) {
      err = t.takeError();
      return {};
    }
    inputs.push_back(std::move(*t));
  }
  err = llvm::Error::success();
  return inputs;
}

} // namespace

int checkGradientsMode(Module& m, const BuildTrainingStep& buildTrainingGraph) {
  if (gpus > 1) {
    llvm::errs() << "lwcc: --check-gradients checks the step of one device; check the parallel "
                    "step against it with --train-reference\n";
    return 2;
  }
  if (llvm::Error e = buildTrainingGraph(m, false))
    return fail(std::move(e));
  std::vector<Tensor> inputs = randomInputs(*m.graph, checkSeed);
  GradCheckOptions opts;
  opts.seed = checkSeed;
  opts.samplesPerParam = checkSamples;
  auto results = checkGradients(*m.graph, inputs, m.weights, opts);
  if (!results)
    return fail(results.takeError());
  constexpr double kTolerance = 1e-6;
  bool ok = true;
  int64_t kinks = 0, unresolved = 0;
  llvm::outs() << llvm::formatv("{0,-40} {1,8} {2,6} {3,14}\n", "param", "checked", "kinks",
                                "worst rel err");
  for (const ParamGradCheck& r : *results) {
    bool pass = r.worstRelError <= kTolerance;
    ok &= pass;
    kinks += r.kinks;
    unresolved += r.unresolved;
    std::string worst = r.worstIndex < 0 ? "-" : llvm::formatv("{0:e2}", r.worstRelError).str();
    llvm::outs() << llvm::formatv(
        "{0,-40} {1,8} {2,6} {3,14}{4}\n", r.param, r.checked, r.kinks, worst,
        pass ? ""
             : llvm::formatv("  FAIL (element {0}{1}: analytic {2:e6}, numeric {3:e6})",
                             r.worstIndex, r.worstRedrawn ? " at a re-drawn point" : "", r.analytic,
                             r.numeric)
                   .str());
  }
  // Kinks are no failures: there the loss has no derivative to compare with.
  if (kinks > 0)
    llvm::outs() << llvm::formatv(
        "{0} element(s) sat on a kink of the loss (relu at 0, tied maxima: one-sided differences "
        "disagree) and were compared at a re-drawn point; {1} stayed on kinks and were not "
        "compared\n",
        kinks, unresolved);
  llvm::outs() << llvm::formatv("{0} params checked; tolerance {1:e0}: {2}\n", results->size(),
                                kTolerance, ok ? "all within" : "FAILED");
  return ok ? 0 : 1;
}

int checkMemoryPlanMode(Module& m, const BuildTrainingStep& buildTrainingGraph) {
  if (llvm::Error e = buildTrainingGraph(m, true))
    return fail(std::move(e));
  auto stats = planMemory(*m.graph);
  if (!stats)
    return fail(stats.takeError());
  std::vector<Tensor> inputs = randomInputs(*m.graph, checkSeed);
  auto planned = runInArenas(*m.graph, inputs, m.weights);
  if (!planned)
    return fail(planned.takeError());
  auto reference = interpret(*m.graph, inputs, m.weights, Precision::F32);
  if (!reference)
    return fail(reference.takeError());
  size_t differ = 0;
  for (size_t k = 0; k < reference->size(); ++k)
    differ += (*reference)[k].f != (*planned)[k].f || (*reference)[k].i != (*planned)[k].i;
  for (const auto& [device, bytes] : stats->peakBytes)
    llvm::outs() << llvm::formatv("device {0}: arena {1} bytes\n", device, bytes);
  llvm::outs() << llvm::formatv("{0} buffers, {1} bytes without sharing, {2} in place, {3} views; "
                                "{4} of {5} outputs differ from the interpreter\n",
                                stats->buffers, stats->totalBytes, stats->inPlace, stats->aliased,
                                differ, reference->size());
  return differ ? 1 : 0;
}

namespace {

std::string fileSafe(std::string name) {
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
      c = '_';
  return name;
}

/// A float tensor as --train-reference dumps it: in float64 when the
/// interpreter ran in float64, so that nothing is rounded away.
Tensor dumped(const Tensor& t) {
  Tensor out = t;
  if (precision == Precision::F64 && out.isFloatData())
    out.type.dtype = DType::F64;
  return out;
}

} // namespace

int trainReferenceMode(Module& m, const BuildTrainingStep& buildTrainingGraph) {
  if (inputsDir.empty() || dumpDir.empty()) {
    llvm::errs() << "lwcc: --train-reference needs --inputs DIR and --dump DIR\n";
    return 2;
  }
  if (llvm::Error e = buildTrainingGraph(m, true))
    return fail(std::move(e));
  llvm::Error err = llvm::Error::success();
  std::vector<Tensor> inputs = readInputs(*m.graph, inputsDir, err);
  if (err)
    return fail(std::move(err));
  std::error_code ec;
  fs::create_directories(dumpDir.getValue(), ec);
  WeightMap state = m.weights;
  const Graph& g = *m.graph;
  for (int64_t s = 0; s < steps; ++s) {
    auto outs = runStep(g, inputs, state, precision);
    if (!outs)
      return fail(outs.takeError());
    auto write = [&](const Tensor& t, const std::string& file) -> bool {
      if (llvm::Error e = writeTensorFile(dumped(t), file, fs::path(dumpDir.getValue()) / file)) {
        printErrors(llvm::errs(), std::move(e));
        return false;
      }
      return true;
    };
    if (!write((*outs)[0], "loss_" + std::to_string(s) + ".pb"))
      return 1;
    if (s == 0) {
      // One gradient per initializer: the shards of a split param together.
      std::map<std::string, Tensor> grads;
      for (size_t o = 1; o < outs->size(); ++o)
        if (const Value* p = g.outputGradOf(o)) {
          if (p->shard().empty()) {
            // A float32 param's bf16 or fp16 gradient (mixed precision's,
            // read by its update as it is) in the param's type: the same
            // values.
            Tensor t = (*outs)[o];
            t.type.dtype = p->type().dtype;
            grads[p->paramName()] = std::move(t);
            continue;
          }
          auto it = grads.try_emplace(p->paramName(), Tensor(p->wholeType())).first;
          kernels::writeShard(*p, (*outs)[o], it->second);
        }
      for (const auto& [name, t] : grads)
        if (!write(t, "grad_" + fileSafe(name) + ".pb"))
          return 1;
    }
    double l = (*outs)[0].f[0];
    llvm::outs() << llvm::formatv("step {0,4}/{1}  loss {2:f6}\n", s + 1, steps.getValue(), l);
    llvm::outs().flush();
    if (!std::isfinite(l)) {
      llvm::errs() << "lwcc: the loss is " << l << " at step " << s << "\n";
      return 1;
    }
  }
  for (const auto& p : g.params())
    if (isFloat(p->type().dtype) && !p->zeroInit())
      if (auto it = state.find(p->paramName()); it != state.end())
        if (llvm::Error e = writeTensorFile(dumped(it->second), p->paramName(),
                                            fs::path(dumpDir.getValue()) /
                                                ("param_" + fileSafe(p->paramName()) + ".pb")))
          return fail(std::move(e));
  return 0;
}

int runReferenceMode(const Module& m) {
  if (inputsDir.empty() || outputsDir.empty()) {
    llvm::errs() << "lwcc: --run-reference needs --inputs DIR and --outputs DIR\n";
    return 2;
  }
  std::vector<Tensor> inputs;
  for (size_t k = 0; k < m.graph->inputs().size(); ++k) {
    std::string path = (fs::path(inputsDir.getValue()) / ("input_" + std::to_string(k) + ".pb"));
    auto t = readTensorFile(path);
    if (!t)
      return fail(t.takeError());
    inputs.push_back(std::move(*t));
  }
  auto outputs = interpret(*m.graph, inputs, m.weights, precision);
  if (!outputs)
    return fail(outputs.takeError());
  std::error_code ec;
  fs::create_directories(outputsDir.getValue(), ec);
  if (ec) {
    llvm::errs() << outputsDir << ": error: cannot create: " << ec.message() << "\n";
    return 1;
  }
  for (size_t k = 0; k < outputs->size(); ++k) {
    std::string path = fs::path(outputsDir.getValue()) / ("output_" + std::to_string(k) + ".pb");
    if (llvm::Error e = writeTensorFile((*outputs)[k], m.graph->outputs()[k]->name(), path))
      return fail(std::move(e));
  }
  return 0;
}

} // namespace lwcc
