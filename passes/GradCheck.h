//===- GradCheck.h - Gradients against finite differences ------*- C++ -*-===//
//
// Checks the @grad outputs of a differentiated graph against central finite
// differences of its loss, in float64. Used by `lwcc --check-gradients` and
// by the per-rule gradient tests.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Interpreter.h"

#include <string>
#include <vector>

namespace lwcc {

struct GradCheckOptions {
  /// Elements checked per param (all of them when it has fewer); the
  /// element with the largest gradient is always among them.
  int64_t samplesPerParam = 6;
  uint64_t seed = 0;
  /// Relative errors are |analytic - numeric| / max(|analytic|, |numeric|,
  /// floor): below `floor` the comparison is absolute, where finite
  /// differences cannot resolve relative error.
  double floor = 1e-3;
  /// Errors above this are retried with other steps (to step over kinks of
  /// relu, max and clip).
  double tolerance = 1e-6;
};

struct ParamGradCheck {
  std::string param; ///< initializer name
  int64_t checked = 0;
  double worstRelError = 0;
  int64_t worstIndex = -1;
  double analytic = 0, numeric = 0; ///< at the worst element
};

/// `g` returns the loss as output #0 and @grad outputs (after autodiff).
/// Only the listed params are perturbed; state updates (assign) are ignored.
llvm::Expected<std::vector<ParamGradCheck>> checkGradients(const Graph& g,
                                                           const std::vector<Tensor>& inputs,
                                                           const WeightMap& weights,
                                                           const GradCheckOptions& opts = {});

/// Seeded random inputs for every graph input: normal floats, and labels in
/// [0, K) for an i64 label of softmax_xent (uniform [0, 4) otherwise).
std::vector<Tensor> randomInputs(const Graph& g, uint64_t seed);

} // namespace lwcc
