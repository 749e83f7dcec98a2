//===- Layouts.h - Which activations CPU trainers keep blocked --*- C++ -*-===//
//
// oneDNN's convolutions want their activations in a blocked layout (nChw8c
// on AVX2) and reorder them from and to the arena's row-major NCHW on every
// call unless the tensor is already blocked. The layout plan picks, once per
// tensor, the activations a CPU trainer keeps in nChw8c: those whose every
// producer and consumer takes that layout, so that reorders are left only
// where a tensor meets a kernel that needs row-major.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <set>

namespace lwcc::codegen {

/// The values of `g` to keep in nChw8c (lwrt::Layout::NChw8c):
///  1. values that must share a layout are grouped: the operands and results
///     of an elementwise op of one shape (relu, clip, add, their gradients,
///     ...), a batch norm's input and output (and gradients), a max pool's
///     input, output and gradients, the parts of a concat or split along the
///     channels, a copy's input and output;
///  2. a group is blocked when each of its values is a float32 [N, C, H, W]
///     with C a multiple of 8 and H * W > 1 (with one pixel both layouts are
///     the same bytes), neither an input, a param nor a graph output, and
///     every op that touches it takes nChw8c there (the kernels that do are
///     listed in Layouts.cpp; a communication op, a reshape or a broadcast
///     does not), and one of them is a convolution (the layout is there for
///     oneDNN).
std::set<const Value*> blockedValues(const Graph& g);

} // namespace lwcc::codegen
