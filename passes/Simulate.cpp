//===- Simulate.cpp - The simulate pass -----------------------------------===//
//
// --simulate: the simulator's prediction (cost/Simulator.h) of the graph's
// step as notes, and optionally its timeline as a Chrome trace.
//
//===----------------------------------------------------------------------===//
#include "cost/Simulator.h"
#include "passes/Pass.h"
#include "passes/PassOptions.h"

namespace lwcc {

namespace {

/// --simulate=spec=NAME|FILE[,profile=FILE][,trace=FILE]: replays the graph
/// on the cost model and reports the predicted times as notes; the graph is
/// unchanged.
class SimulatePass : public Pass {
public:
  SimulatePass(CostModel model, std::string trace) : model_(std::move(model)), trace_(trace) {}
  std::string_view name() const override { return "simulate"; }

  llvm::Error run(Graph& g, PassContext& ctx) override {
    auto r = simulate(g, simCosts(model_));
    if (!r)
      return r.takeError();
    if (ctx.diag)
      ctx.diag(Severity::Note, {}, describe(*r));
    if (!trace_.empty()) {
      std::error_code ec;
      llvm::raw_fd_ostream os(trace_, ec);
      if (ec)
        return makeError(trace_ + ": cannot write: " + ec.message());
      writeChromeTrace(r->events, os);
    }
    return llvm::Error::success();
  }

private:
  CostModel model_;
  std::string trace_;
};

} // namespace

llvm::Expected<std::unique_ptr<Pass>> createSimulatePass(std::string_view options) {
  auto opts = PassOptions::parse(
      "simulate", options, "spec",
      {"spec", "devices_per_node", "devices_per_gpu", "profile", "tf32", "trace"});
  if (!opts)
    return opts.takeError();
  auto cost = costModelFromOptions(*opts);
  if (!cost)
    return cost.takeError();
  return std::make_unique<SimulatePass>(std::move(*cost), opts->getString("trace", ""));
}

} // namespace lwcc
