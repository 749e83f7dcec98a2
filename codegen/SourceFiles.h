//===- SourceFiles.h - The trainer's source files and weights blob -*- C++ -*-===//
//
// What generateTrainer writes, put into files: one trainer.cc (.cu), or
// for a step of more than opsPerFile runtime calls trainer.cc (the model
// description and main), trainer.h (what the functions share, inline) and
// trainer_1 .. trainer_K (the functions in order, of about equal calls),
// which the host compiler builds in parallel, each in linear time; the
// plan's hash over the whole source written into main; and the weights
// blob (the initial params that are not zero-initialized, packed in order).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "codegen/Codegen.h"
#include "ir/Tensor.h"

#include <string>
#include <vector>

namespace lwcc::codegen {

/// Stands for the plan's hash in main's text until the source is whole.
constexpr const char* kPlanHashMark = "LWCC_PLAN_HASH";

/// One generated function: its name, its text and the runtime calls in it
/// (what the compiler's time grows with).
struct FunctionText {
  FunctionText(std::string name, std::string text);
  std::string name;
  std::string text;
  size_t ops = 0;
};

/// The sizes of the trainer's buffers, in bytes.
struct SharedSizes {
  int64_t arena = 0, state = 0, input = 0, evalArena = 0;
};

/// The parts of the source that assembleSources puts into files.
struct SourceParts {
  std::string about;    ///< the top comment
  std::string includes; ///< the headers
  std::string blobs;    ///< the assembler's embedded files and their symbols
  std::string shared;   ///< what the functions share (sharedDefinitions)
  std::string main;     ///< the model description and main(), with kPlanHashMark
};

/// Whether the functions go into several files (more than opsPerFile calls).
bool splitsSources(const std::vector<FunctionText>& fns, size_t opsPerFile);

/// What every function uses: the buffer sizes, `at`, the RUN_OP macros, then
/// `shapes` and `offsets` (their definitions); inline when `split`.
std::string sharedDefinitions(const char* ns, const SharedSizes& sizes, const std::string& shapes,
                              const std::string& offsets, bool split);

/// The source files of `parts` and `fns` (see above), main's plan hash set.
std::vector<SourceFile> assembleSources(const SourceParts& parts,
                                        const std::vector<FunctionText>& fns, size_t opsPerFile,
                                        const std::string& modelName, bool cuda);

/// The initial values of `params` that are not zero-initialized, packed in
/// order in their types; an error names a param without a value or of a
/// type the trainer does not hold.
llvm::Expected<std::string> packWeights(const std::vector<const Value*>& params,
                                        const WeightMap& weights);

} // namespace lwcc::codegen
