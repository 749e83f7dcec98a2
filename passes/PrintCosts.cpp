//===- PrintCosts.cpp - Each op's cost on a device spec, as notes ---------===//
#include "cost/CostModel.h"
#include "ir/FusedOps.h"
#include "passes/Pass.h"
#include "passes/PassOptions.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

namespace lwcc {

namespace {

/// Notes, at each op's location, what the cost model prices it at on the
/// device spec (CostModel.h):
///  1. a compute op: its FLOPs, the bytes it reads and writes, and its time
///     (measured when the profile has it);
///  2. a communication op: the bytes it moves between devices (commBytes)
///     and its time over the links it uses.
/// With json=FILE it also writes the compute ops' figures there, keyed as
/// a trainer's --profile-ops file keys its times (tools/gpu/calibrate.py
/// pairs the two):
///   {"spec": {the spec's JSON form}, "ops": [{"op": "conv2d", "loc": "conv1",
///    "device": 0, "stream": 0, "flops": F, "bytes": B, "precision": "tf32",
///    "peak_flops": P, "fill": S, "multi_tensor": false, "seconds": T}, ...]}
/// in graph order (the compute ops that launch a kernel: no views,
/// constants, events or communication); "precision" and "peak_flops" say
/// which of the spec's peaks prices it, "fill" its share of the device,
/// "multi_tensor" whether codegen may put it in one call with the ops of
/// its kind beside it (an optimizer update, a cast to 16 bits).
/// The graph is not changed.
class PrintCostsPass : public Pass {
public:
  PrintCostsPass(CostModel cm, std::string json) : cm_(std::move(cm)), json_(std::move(json)) {}
  std::string_view name() const override { return "print-costs"; }

  llvm::Error run(Graph& g, PassContext& ctx) override {
    if (!json_.empty())
      if (llvm::Error e = writeJson(g))
        return e;
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
  llvm::Error writeJson(const Graph& g) const {
    llvm::json::Array ops;
    for (const auto& op : g.ops()) {
      if (op->info().isCommunication() || op->info().isEvent() || op->info().view ||
          op->kind() == OpKind::Constant)
        continue;
      ops.push_back(llvm::json::Object{{"op", std::string(op->mnemonic())},
                                       {"loc", op->loc().name},
                                       {"device", op->annotations().device.value_or(0)},
                                       {"stream", op->annotations().stream.value_or(0)},
                                       {"flops", cm_.flops(*op)},
                                       {"bytes", cm_.bytes(*op)},
                                       {"precision", std::string(cm_.precision(op.get()))},
                                       {"peak_flops", cm_.peakFlops(op.get())},
                                       {"fill", cm_.fill(*op)},
                                       {"multi_tensor", inMultiTensorCall(*op)},
                                       {"seconds", cm_.opSeconds(*op)}});
    }
    std::error_code ec;
    llvm::raw_fd_ostream os(json_, ec);
    if (ec)
      return makeError(json_ + ": cannot write: " + ec.message());
    os << llvm::formatv("{0:1}",
                        llvm::json::Value(llvm::json::Object{{"spec", deviceSpecJson(cm_.spec())},
                                                             {"ops", std::move(ops)}}))
       << "\n";
    return llvm::Error::success();
  }

  CostModel cm_;
  std::string json_;
};

} // namespace

llvm::Expected<std::unique_ptr<Pass>> createPrintCostsPass(std::string_view options) {
  auto opts = PassOptions::parse(
      "print-costs", options, "spec",
      {"spec", "devices_per_node", "devices_per_gpu", "profile", "tf32", "json"});
  if (!opts)
    return opts.takeError();
  auto cm = costModelFromOptions(*opts);
  if (!cm)
    return cm.takeError();
  return std::make_unique<PrintCostsPass>(std::move(*cm), opts->getString("json", ""));
}

} // namespace lwcc
