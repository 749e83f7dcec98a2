//===- Parser.h - Reads the .lwir text form --------------------*- C++ -*-===//
#pragma once

#include "ir/IR.h"

#include <memory>
#include <string_view>

namespace llvm {
class SourceMgr;
}

namespace lwcc {

/// Parses the graph in buffer `bufferId` of `sm`. Errors carry the buffer's
/// name and line:col. The result is well formed (every name defined once,
/// before use, every op known) but not verified: run verifyGraph next.
llvm::Expected<std::unique_ptr<Graph>> parseGraph(llvm::SourceMgr& sm, unsigned bufferId);

/// Parses text held in memory; `name` stands for the file in messages.
llvm::Expected<std::unique_ptr<Graph>> parseGraph(std::string_view text,
                                                  std::string_view name = "<string>");

/// Whether `name` can be printed after '%' or '@' without quotes.
bool isBareName(std::string_view name);

} // namespace lwcc
