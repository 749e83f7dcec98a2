//===- PrintCosts.cpp - Each op's cost on a device spec, as notes ---------===//
#include "passes/Pass.h"
#include "passes/PassOptions.h"
#include "plan/CostModel.h"

#include "llvm/Support/FormatVariadic.h"

namespace lwcc {

namespace {

/// Notes, at each op's location, what the cost model prices it at on the
/// device spec (CostModel.h):
///  1. a compute op: its FLOPs, the bytes it reads and writes, and its time
///     (measured when the profile has it);
///  2. a communication op: the bytes it moves between devices (commBytes)
///     and its time over the links it uses.
/// The graph is not changed.
class PrintCostsPass : public Pass {
public:
  explicit PrintCostsPass(CostModel cm) : cm_(std::move(cm)) {}
  std::string_view name() const override { return "print-costs"; }

  llvm::Error run(Graph& g, PassContext& ctx) override {
    if (!ctx.diag)
      return llvm::Error::success();
    double total = 0;
    for (const auto& op : g.ops()) {
      double t = cm_.opSeconds(*op);
      total += t;
      std::string msg = op->info().isCommunication()
                            ? llvm::formatv("cost: {0} bytes {1} seconds {2:e4}", op->mnemonic(),
                                            commBytes(*op), t)
                                  .str()
                            : llvm::formatv("cost: {0} flops {1} bytes {2} seconds {3:e4}",
                                            op->mnemonic(), static_cast<int64_t>(cm_.flops(*op)),
                                            static_cast<int64_t>(cm_.bytes(*op)), t)
                                  .str();
      ctx.diag(Severity::Note, op->loc(), msg);
    }
    ctx.diag(
        Severity::Note, {},
        llvm::formatv("cost: @{0} on {1}: {2:e4} seconds in all", g.name(), cm_.spec().name, total)
            .str());
    return llvm::Error::success();
  }

private:
  CostModel cm_;
};

} // namespace

llvm::Expected<std::unique_ptr<Pass>> createPrintCostsPass(std::string_view options) {
  auto opts = PassOptions::parse("print-costs", options, "spec",
                                 {"spec", "devices_per_node", "profile", "tf32"});
  if (!opts)
    return opts.takeError();
  auto cm = costModelFromOptions(*opts);
  if (!cm)
    return cm.takeError();
  return std::make_unique<PrintCostsPass>(std::move(*cm));
}

} // namespace lwcc
