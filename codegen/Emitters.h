//===- Emitters.h - The runtime call of each IR op ---------------*- C++ -*-===//
//
// How codegen writes an op as a call into the lwcc runtime: the op table
// names the function and the layout of its arguments (the `kernel` trait);
// here, the parameter struct built from the op's attributes, one row per op
// kind, and the small formatters the generated source uses for numbers,
// lists and element types.
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

/// Formats the parameter struct of an op's runtime call from its
/// attributes ("" for a kernel without one).
using ParamsFn = std::string (*)(const Op&);

/// The parameter formatter of every op whose runtime call (the op table's
/// `kernel` trait, ir/OpTraits.def) takes one: Plain, OptionalLast,
/// OperandList and ResultList kernels. Constants, assigns and
/// communication ops are written by hand (init-time fill, state copy, one
/// device's part of a collective).
const std::map<OpKind, ParamsFn>& paramsFormatters();
std::string concatP(const Op& op);
/// A dim-0 slice's parameter struct with its start and end `shift` rows
/// earlier: for a device that holds its input's rows from `shift` on.
std::string sliceRowsP(const Op& op, int64_t shift);
std::string splitP(const Op& op);
/// The parameter struct of an op whose settings come from the trainer's
/// flags at run time; "" for the others.
std::string hyperParams(const Op& op);

} // namespace lwcc::codegen
