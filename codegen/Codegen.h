//===- Codegen.h - Trainer sources from a planned training step -*- C++ -*-===//
//
// Turns a training graph whose memory is planned (every op result has @buf)
// into the source of a trainer for the lwcc runtime: trainer.cc for the CPU
// or trainer.cu for CUDA, with a long step in several files that build in
// parallel (one runtime call per op under its IR statement,
// values named after the model, planned offsets and shapes as named
// constants), on one device or several (one function per device and
// stream), with an evaluation pass from the planned inference graph, and
// the blobs the source embeds: the initial weights and, when the model can
// be exported, the ONNX export template.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Module.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lwcc {

/// Where param #param (an index into the training graph's params) goes in
/// the export template.
struct ExportCutSpec {
  uint64_t offset;
  uint32_t param;
  uint64_t bytes;
};

struct CodegenOptions {
  std::string target = "cpu"; ///< "cpu" or "cuda"
  std::string modelName;
  /// The trainer's default for TF32 math (lwrt::Tf32): "Off",
  /// "Convolutions" (PyTorch's default) or "All".
  std::string tf32 = "Convolutions";
  /// fp16 training: the loss scale a fresh loss_scale param stands for
  /// (passes/LossScale.cpp); 0 without one.
  double lossScaleInit = 0;
  /// The appended loss's label that counts for nothing (--ignore-index),
  /// and whether it takes the logits at t against the labels at t + 1
  /// (--shift-labels): the trainer's evaluation and data loaders read them.
  std::optional<int64_t> ignoreIndex;
  bool shiftLabels = false;
  /// The planned inference graph (params named as the training step's), or
  /// null: the trainer then has no --eval.
  const Graph* eval = nullptr;
  /// File names the source embeds with the assembler's .incbin, found on
  /// its include path (the folder of the source).
  std::string weightsFile = "trainer.weights";
  /// False: no weights in the source; the trainer reads <program>.weights
  /// (or --weights=FILE) at start-up.
  bool embedWeights = true;
  /// Each run of optimizer updates (and of weight casts) as one
  /// multi-tensor call, and a batch norm's relu and relu_grad in its calls
  /// (ir/FusedOps.h); false with --no-fuse: one call per op (a float
  /// convolution's relu stays in cuDNN's plan, the CPU's float batch
  /// norm's and add's in oneDNN's), and every view of a param a copy
  /// (ir/FusedOps.h's paramViews are the param's bytes otherwise).
  bool fuseCalls = true;
  std::string exportFile = "trainer.onnx-template";
  std::string exportTemplate; ///< empty: no --export
  std::vector<ExportCutSpec> exportCuts;
  /// CUDA: per device, the most workspace a convolution's algorithm may take
  /// (convWorkspaceLimits of the memory plan; -1: the runtime's own limit);
  /// empty: the runtime's limit everywhere.
  std::vector<int64_t> convWorkspaceBytes;
  /// A step of more ops than this is written as several source files that
  /// build in parallel (about this many ops each; 0: always one file).
  size_t opsPerFile = 1500;
};

struct SourceFile {
  std::string name;
  std::string text;
};

struct GeneratedTrainer {
  /// trainer.cc (or .cu) first; a step of more than opsPerFile ops also
  /// trainer.h and trainer_1.cc .. trainer_K.cc, compiled each on its own.
  std::vector<SourceFile> files;
  std::string weights;        ///< the non-zero-initialized params, packed in order
  std::string exportTemplate; ///< the export template, or empty
};

/// `m.graph` must be a planned training graph: output #0 the loss, @buf on
/// every op with results; ops on several devices or streams (@dev, @stream)
/// become one function per device and stream, which the graph's record and
/// wait ops order.
llvm::Expected<GeneratedTrainer> generateTrainer(const Module& m, const CodegenOptions& options);

} // namespace lwcc
