//===- TrainerBuild.h - Writing and compiling a generated trainer -*- C++ -*-===//
#pragma once

#include "codegen/Codegen.h"

#include <string>
#include <vector>

namespace lwcc {

/// How lwcc builds a trainer (its --target, --arch, --nvcc, --cuda-libs, -v).
struct TrainerBuildOptions {
  std::string target = "cuda";       ///< cuda or cpu
  std::string arch = "sm_90";        ///< a cuda trainer's GPU architecture
  std::string nvcc;                  ///< the nvcc to use; empty: CUDA_HOME, /usr/local/cuda, PATH
  std::vector<std::string> cudaLibs; ///< folders of cuDNN, cuBLAS and NCCL
  bool verbose = false;              ///< print the compiler's command line
  /// A cuda trainer built with the host compiler against the emulated CUDA
  /// device (liblwcc_runtime_emu.a) instead of nvcc and the real libraries.
  bool emulateGpu = false;
};

/// <prefix> of this lwcc: the folder above the one holding the executable.
std::string installPrefix(const char* argv0);
/// Writes `text` to `path`; false when it cannot.
bool writeText(const std::string& path, const std::string& text);
bool writeBlob(const std::string& path, const std::string& bytes);
/// Writes the trainer's source, its blobs and a CMakeLists.txt into `dir`;
/// 0, or 1 with a message.
int emitSource(const GeneratedTrainer& t, const std::string& dir, const std::string& prefix,
               const TrainerBuildOptions& o);
/// Compiles the trainer into `exe` (its sources written into `dir`): with
/// the host compiler for the CPU, with nvcc for CUDA; 0, or 1 with a message.
int buildExe(const GeneratedTrainer& t, const std::string& dir, const std::string& exe,
             const std::string& prefix, const TrainerBuildOptions& o);

} // namespace lwcc
