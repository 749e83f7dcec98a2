//===- PassOptions.h - key=value options of a pass --------------*- C++ -*-===//
//
// A pass flag may carry options: --append-loss=mse, or
// --optimizer=adamw,lr=0.001,weight_decay=0.01. A bare first value sets the
// pass's main option. Unknown keys and malformed numbers are errors.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "llvm/Support/Error.h"

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace lwcc {

class PassOptions {
public:
  /// Parses `text` for the pass `pass`; `mainKey` names the option a bare
  /// first value sets; `known` lists every accepted key.
  static llvm::Expected<PassOptions> parse(std::string_view pass, std::string_view text,
                                           std::string_view mainKey,
                                           const std::vector<std::string_view>& known);

  bool has(std::string_view key) const { return values_.count(std::string(key)) != 0; }
  std::string getString(std::string_view key, std::string dflt) const;
  llvm::Expected<double> getFloat(std::string_view key, double dflt) const;
  llvm::Expected<int64_t> getInt(std::string_view key, int64_t dflt) const;
  /// An integer in lo..hi: "PASS: KEY must be in LO..HI, got V" otherwise
  /// (">= LO" for hi = INT64_MAX).
  llvm::Expected<int64_t> getIntIn(std::string_view key, int64_t dflt, int64_t lo,
                                   int64_t hi) const;
  /// 0 or 1 as a bool.
  llvm::Expected<bool> getFlag(std::string_view key, bool dflt) const;
  /// One of `choices`: "PASS: unknown KEY 'V' (expected A, B or C)"
  /// otherwise, or `(expected)` in its place when given.
  llvm::Expected<std::string> getChoice(std::string_view key, std::string dflt,
                                        const std::vector<std::string_view>& choices,
                                        std::string_view expected = {}) const;

private:
  std::string pass_;
  std::map<std::string, std::string> values_;
};

class CostModel;
/// The cost model a pass's `spec=NAME|FILE.json` (default h100),
/// `devices_per_node=K` (the spec's devices per node replaced) and
/// `profile=FILE.json` options describe (passes that price ops: layerwise,
/// hypergraph, print-costs, simulate).
llvm::Expected<CostModel> costModelFromOptions(const PassOptions& opts);

} // namespace lwcc
