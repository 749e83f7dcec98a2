// lwrt/trainer.h - the main loop around a generated training step
// defines: InputInfo, ParamInfo, OutputInfo, StepBuffers, ModelInfo, trainerMain
//
// lwcc generates, for each model, the step function (one kernel call per
// IR op) and a ModelInfo describing its buffers; trainerMain runs it: it
// allocates the arena, the state (params and optimizer state, initialized
// from the weights file lwcc wrote next to the trainer) and the input
// batch, feeds batches, and reports the loss of each step.
#pragma once

#include "lwrt/tensor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace lwrt {

struct InputInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  bool isLabel;
  int64_t offset; ///< in the input buffer
};

struct ParamInfo {
  std::string name; ///< initializer name
  DType dtype;
  std::vector<int64_t> shape;
  int64_t offset; ///< in the state buffer
  bool zeroInit;  ///< optimizer state and counters: not in the weights file
};

/// A value the step returns (the loss, then the gradients), in the arena.
struct OutputInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  int64_t offset; ///< in the arena
};

struct StepBuffers {
  unsigned char* arena;
  unsigned char* state;
  unsigned char* inputs;
};

struct ModelInfo {
  std::string name;
  std::vector<InputInfo> inputs;
  std::vector<ParamInfo> params;
  std::vector<OutputInfo> outputs; ///< #0 is the loss
  int64_t arenaBytes, stateBytes, inputBytes;
  int64_t classes;    ///< label range of a softmax cross-entropy loss (0: none)
  int64_t lossOffset; ///< arena offset of the loss, a float scalar
  DType lossType;
  /// Writes the constants into the arena once; false with `failed` set.
  bool (*init)(const StepBuffers&, std::string* failed);
  /// One training step; false with `failed` naming the op that failed.
  bool (*step)(const StepBuffers&, std::string* failed);
};

/// The trainer program: `TRAINER [--steps=N] [--seed=S] [--weights=FILE]
/// [--data=synthetic|raw:DIR] [--dump=DIR]`: --dump writes the params
/// (param_<name>.bin) and the outputs of the last step (output_<k>.bin) as
/// raw bytes. Returns the exit status.
int trainerMain(int argc, char** argv, const ModelInfo& model);

} // namespace lwrt
