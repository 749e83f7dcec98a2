//===- BatchSplit.h - The batch cut into pieces -----------------*- C++ -*-===//
//
// The machinery the microbatch and fragment passes share (MicroBatcher.h):
// a one-device step whose batch runs in pieces, each op reading the batch
// copied per piece along its samples as its parallel rule says.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include "llvm/Support/Error.h"

#include <set>
#include <string>
#include <vector>

namespace lwcc {

/// Cuts the batch of `g` (dim 0 of its inputs) into `pieces` pieces, the
/// first N % pieces one sample larger: each op that reads the batch runs
/// once per piece (annotated @mb(i), results named x.<suffix>i), partial
/// results combined, running statistics chained through the pieces (see
/// the microbatch pass). With `only`, just those ops run per piece; every
/// other op runs once on the whole batch, reading the pieces concatenated.
llvm::Error splitBatch(Graph& g, int64_t pieces, const std::set<const Op*>* only = nullptr,
                       const std::string& suffix = "mb");

/// The ops of `g` that could run on pieces of the batch as fragments: each
/// reads rows of the batch and its rule splits it along them into results
/// that all hold the pieces' rows (not a batch norm's statistics, a loss or
/// a mean over samples), reading no param chained through the batch. The
/// graph is unchanged.
llvm::Expected<std::vector<Op*>> batchSplittableOps(Graph& g);

/// An error unless `g` is not differentiated yet (`pass` runs before
/// autodiff).
llvm::Error requireNotDifferentiated(const Graph& g, const std::string& pass);

} // namespace lwcc
