//===- GradCheck.h - Gradients against finite differences ------*- C++ -*-===//
//
// Checks the @grad outputs of a differentiated graph against central finite
// differences of its loss, in float64. Used by `lwcc --check-gradients` and
// by the per-rule gradient tests.
//
// A loss built from relu, max pooling, clip or abs is not differentiable
// everywhere: where a probed element sits on a kink (a relu input at 0, a
// tie between two maxima), finite differences average two slopes and agree
// with no gradient rule. The checker tells such a point from a wrong
// gradient by its one-sided differences: at a kink they disagree with each
// other, at a smooth point they agree (and then a disagreement with the
// analytic gradient is a real one). A kink is reported, and the element is
// compared at a re-drawn probe point nearby instead, where the loss is
// smooth again; the analytic gradient is recomputed there.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "interp/Interpreter.h"

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
  /// Errors above this are retried with other steps (to step over kinks
  /// near the probe point), then tested for a kink at the point itself.
  double tolerance = 1e-6;
  /// Probe points re-drawn for an element at a kink before it is given up
  /// as unresolved (neither passed nor failed).
  int redraws = 4;
};

struct ParamGradCheck {
  std::string param; ///< initializer name
  int64_t checked = 0;
  /// Elements whose probe point was at a kink (one-sided differences
  /// disagree), compared at a re-drawn point instead...
  int64_t kinks = 0;
  /// ...and of those, the ones at a kink at every re-drawn point too (not
  /// compared, so not in worstRelError).
  int64_t unresolved = 0;
  /// The worst relative error over the compared elements (at the re-drawn
  /// point for a kink).
  double worstRelError = 0;
  int64_t worstIndex = -1;
  double analytic = 0, numeric = 0; ///< at the worst element
  bool worstRedrawn = false;        ///< the worst element was compared at a re-drawn point
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
