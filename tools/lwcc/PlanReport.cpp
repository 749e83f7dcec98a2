//===- PlanReport.cpp - lwcc --emit=plan's tables -------------------------===//
#include "tools/lwcc/PlanReport.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FormatVariadic.h"

#include <vector>

namespace lwcc {

/// The memory plan as a table: one row per op result, then the arenas.
void printPlan(const Graph& g, const MemoryPlanStats& stats, llvm::raw_ostream& os) {
  os << llvm::formatv("memory plan of @{0}: {1} ops\n", g.name(), g.numOps());
  os << llvm::formatv("{0,-5} {1,-20} {2,-28} {3,-22} {4,10} {5,10} {6,4}\n", "#", "op", "location",
                      "result", "bytes", "offset", "dev");
  size_t pos = 0;
  for (const auto& op : g.ops()) {
    for (unsigned r = 0; r < op->numResults(); ++r) {
      const TensorType& t = op->result(r)->type();
      os << llvm::formatv("{0,-5} {1,-20} {2,-28} {3,-22} {4,10} {5,10} {6,4}\n", pos,
                          op->mnemonic(), op->loc().name.substr(0, 28), t.str().substr(0, 22),
                          t.sizeInBytes(), (*op->annotations().bufferOffsets)[r],
                          valueDevice(op->result(r)).value_or(0));
    }
    ++pos;
  }
  for (const auto& [device, bytes] : stats.peakBytes)
    os << llvm::formatv("device {0}: arena {1} bytes (peak)\n", device, bytes);
  os << llvm::formatv("{0} buffers, {1} bytes without sharing, {2} written in place, {3} views, "
                      "{4} updates over their params (offset -1: in the state)\n",
                      stats.buffers, stats.totalBytes, stats.inPlace, stats.aliased,
                      stats.overParams);
}

/// The bytes a multi-device training step moves between devices.
int64_t stepCommBytes(const Graph& g) {
  int64_t total = 0;
  for (const auto& op : g.ops())
    total += commBytes(*op);
  return total;
}

/// Per layer (ops grouped by location): the parallel config, the devices,
/// and the bytes communicated per step; then every strategy's total.
void printParallelPlan(const Graph& g, const std::string& strategy, int64_t gpus,
                       const std::map<std::string, int64_t>& strategies, llvm::raw_ostream& os) {
  struct Layer {
    std::string config = "-", devices = "-";
    int64_t ops = 0, bytes = 0;
  };
  std::vector<std::string> order;
  std::map<std::string, Layer> layers;
  for (const auto& op : g.ops()) {
    // Optimizer updates are named after their param: one row for them all.
    std::string name = op->loc().name.empty() ? "(unnamed)" : op->loc().name;
    if (llvm::StringRef(name).startswith("optimizer/"))
      name = "optimizer";
    if (!layers.count(name))
      order.push_back(name);
    Layer& l = layers[name];
    ++l.ops;
    l.bytes += commBytes(*op);
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
  os << llvm::formatv("\nparallel plan of @{0}: --strategy={1} on {2} devices\n", g.name(),
                      strategy, gpus);
  os << llvm::formatv("{0,-32} {1,-14} {2,-16} {3,5} {4,14}\n", "layer", "config", "devices", "ops",
                      "comm bytes");
  for (const std::string& name : order) {
    const Layer& l = layers[name];
    os << llvm::formatv("{0,-32} {1,-14} {2,-16} {3,5} {4,14}\n", name.substr(0, 32), l.config,
                        l.devices.substr(0, 16), l.ops, l.bytes);
  }
  os << llvm::formatv("communicated per step: {0} bytes\n", stepCommBytes(g));
  os << "strategies, bytes communicated per step:";
  for (const auto& [name, bytes] : strategies)
    os << llvm::formatv(" {0} {1}{2}", name, bytes, name == strategy ? " (chosen)" : "");
  os << "\n";
}

} // namespace lwcc
