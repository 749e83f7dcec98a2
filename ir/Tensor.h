//===- Tensor.h - Host tensors for the interpreter and weights -*- C++ -*-===//
//
// A Tensor holds a TensorType and its elements in row-major order: float
// element types in `f` (as double), integer and bool element types in `i`.
// The reference interpreter computes in double and, in f32 mode, rounds each
// float result to float, so one container serves both precisions.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Types.h"

#include <string>
#include <unordered_map>
#include <vector>

namespace lwcc {

struct Tensor {
  TensorType type;
  std::vector<double> f;
  std::vector<int64_t> i;

  Tensor() = default;
  /// Zero-filled storage of the right kind for `t`.
  explicit Tensor(TensorType t);
  static Tensor fromFloats(TensorType t, std::vector<double> values);
  static Tensor fromInts(TensorType t, std::vector<int64_t> values);

  bool isFloatData() const { return isFloat(type.dtype); }
  int64_t size() const { return type.numElements(); }
  /// Element `k` as a double (ints converted).
  double get(int64_t k) const { return isFloatData() ? f[k] : static_cast<double>(i[k]); }
};

/// Initial values of params, keyed by initializer name.
using WeightMap = std::unordered_map<std::string, Tensor>;

} // namespace lwcc
