//===- OnnxText.h - ONNX's textual syntax, non-finite literals --*- C++ -*-===//
//
// An .onnxtext file is read with ONNX's own parser (onnx/defs/parser.h). The
// ONNX release lwcc builds with knows no non-finite float literal: `-inf`
// makes std::stof throw inside the parser, and `inf` or `nan` is no literal
// at all. parseOnnxText reads them, as newer ONNX releases do:
//  1. Lex the text (comments, strings, numbers, words, brackets) and find the
//     non-finite literals: the words `inf`, `infinity` and `nan` (in any
//     case) where a float literal stands: among a tensor's values `{...}`,
//     after the `=` of an attribute list `<...>` (unless a graph's `(`
//     follows), and in a list `[...]` that follows an `=`. With a minus sign
//     (`-inf`) a word is a literal anywhere: no name starts with `-`.
//  2. Write each as a finite stand-in: +-S for an infinity, +-N for a NaN,
//     where S and N are float32 values (exact in double too) that no number
//     of the text equals; then parse.
//  3. Put the non-finite values back wherever the parser stores a float:
//     FLOAT and DOUBLE tensors (initializers, attribute values) and float
//     attributes, in the graph, its subgraphs and the functions. A parse
//     error's message shows the literals as written.
// An exception from inside the parser (an integer out of range) becomes an
// error naming the file and the line.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace onnx {
class ModelProto;
} // namespace onnx

namespace lwcc {

/// Parses `text` (the contents of `file`) as an ONNX model in the textual
/// syntax, non-finite float literals included.
llvm::Error parseOnnxText(llvm::StringRef text, const std::string& file, onnx::ModelProto& model);

} // namespace lwcc
