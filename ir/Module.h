//===- Module.h - A graph and the values of its params ---------*- C++ -*-===//
#pragma once

#include "ir/IR.h"
#include "ir/Tensor.h"

#include <memory>

namespace lwcc {

/// What the frontend produces and later stages consume: one graph, and the
/// initial value of every param keyed by its initializer name.
struct Module {
  std::unique_ptr<Graph> graph;
  WeightMap weights;
};

} // namespace lwcc
