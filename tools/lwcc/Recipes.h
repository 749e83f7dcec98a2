//===- Recipes.h - lwcc's fine-tuning and regularization flags --*- C++ -*-===//
//
// The training recipes users bring from torchvision and timm, as lwcc flags:
// --label-smoothing, --freeze, --freeze-bn, --no-decay, --param-group,
// --clip-grad-norm. Each becomes a pass option
// of the training pipeline (passes/Passes.def).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "llvm/Support/CommandLine.h"

#include <string>
#include <vector>

namespace lwcc::recipes {

/// The --help category of these flags.
const llvm::cl::OptionCategory& optionCategory();
/// Checks the recipe flags' values; 0, or 2 (bad usage) with a message.
int checkUsage(const std::string& loss);
/// The append-loss pass with --loss and --label-smoothing.
std::string appendLossPass(const std::string& loss);
/// Options of the optimizer pass (--no-decay, --param-group), each after a
/// ',' ("" when none is given).
std::string optimizerOptions();
/// The passes between append-loss and train-mode (--freeze, --freeze-bn).
std::vector<std::string> beforeTrainMode();
/// The passes right after the optimizer (--clip-grad-norm).
std::vector<std::string> afterOptimizer();

} // namespace lwcc::recipes
