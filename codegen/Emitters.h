//===- Emitters.h - The runtime call of each IR op ---------------*- C++ -*-===//
//
// How codegen writes an op as a call into the lwcc runtime: the function,
// the layout of its arguments and the parameter struct built from the op's
// attributes, one row per op kind, and the small formatters the generated
// source uses for numbers, lists and element types.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace lwcc::codegen {

constexpr int64_t kAlign = 256;
inline int64_t alignUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

/// "DType::F32" and so on.
std::string dtypeEnum(DType t);
/// A double as C++ source (kInf for infinities).
std::string num(double v);
/// "{1, 2, 3}"
std::string ints(const std::vector<int64_t>& v);
std::string floats(const std::vector<double>& v);

/// How an op's arguments are laid out in its runtime call.
enum class Args {
  Plain,       ///< operands, then results
  OptionalLast ///< like Plain, but the last operand is a pointer (null when absent)
};

/// The runtime function, argument layout and parameter struct of an op.
struct Emitter {
  const char* fn;
  Args args;
  std::string (*params)(const Op&);
};

/// The emitter of each op kind; Concat, Split, Constant, Assign and the
/// communication ops are written by hand (lists of views, init-time fill,
/// state copy, one device's part of a collective).
const std::map<OpKind, Emitter>& emitters();
std::string concatP(const Op& op);
std::string splitP(const Op& op);
/// The parameter struct of an op whose settings come from the trainer's
/// flags at run time; "" for the others.
std::string hyperParams(const Op& op);

} // namespace lwcc::codegen
