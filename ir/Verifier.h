//===- Verifier.h - Structural and type checks of a graph ------*- C++ -*-===//
#pragma once

#include "ir/IR.h"

namespace lwcc {

/// Checks, in order for each op: operand and result counts, that operands
/// are defined before use, attribute names, kinds and presence, the op's
/// verify hook, result types against the shape rule, and annotation
/// consistency; then the graph's inputs, params and outputs. Returns the
/// first problem, located at the op.
llvm::Error verifyGraph(const Graph& g);

/// The per-op part of verifyGraph, without the def-before-use check.
llvm::Error verifyOp(const Op& op);

/// The attribute and arity checks alone: what must hold before a shape rule
/// may run on the op.
llvm::Error verifyOpStructure(const Op& op);

} // namespace lwcc
