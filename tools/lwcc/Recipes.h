//===- Recipes.h - lwcc's fine-tuning and regularization flags --*- C++ -*-===//
//
// The training recipes users bring from torchvision and timm, as lwcc flags:
// --label-smoothing, --freeze, --freeze-bn, --no-decay, --param-group,
// --clip-grad-norm. Each becomes a choice of the compile pipeline
// (plan/Pipelines.h).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "plan/Pipelines.h"

#include "llvm/Support/CommandLine.h"

#include <string>
#include <vector>

namespace lwcc::recipes {

/// The --help category of these flags.
const llvm::cl::OptionCategory& optionCategory();
/// Checks the recipe flags' values; 0, or 2 (bad usage) with a message.
int checkUsage(const std::string& loss);
/// The recipe flags' choices in the compile pipeline's options: the loss's
/// label smoothing, the frozen params, the optimizer's weight decay rules and
/// parameter groups, gradient clipping.
void addTo(TrainingPipelineOptions& o);
/// Whether --clip-grad-norm was given.
bool clipsGradients();

} // namespace lwcc::recipes
