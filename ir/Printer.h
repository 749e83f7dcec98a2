//===- Printer.h - The .lwir text form -------------------------*- C++ -*-===//
#pragma once

#include "ir/IR.h"

#include <string>

namespace llvm {
class raw_ostream;
}

namespace lwcc {

/// Prints `g` in the text form that parseGraph reads back. Values without a
/// name are numbered; attributes print in the op table's order; annotations
/// that are unset print nothing.
void printGraph(const Graph& g, llvm::raw_ostream& os);
std::string printGraph(const Graph& g);

/// "@par(n = 4, c = 2, devices = [0, 1, ...]) @dev(1) ..." or "".
std::string annotationsStr(const Annotations& a);

} // namespace lwcc
