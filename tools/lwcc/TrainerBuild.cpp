//===- TrainerBuild.cpp - Writing and compiling a generated trainer -------===//
#include "tools/lwcc/TrainerBuild.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>

namespace lwcc {

namespace fs = std::filesystem;

/// <prefix> of this lwcc: the folder above the one holding the executable.
std::string installPrefix(const char* argv0) {
  std::string exe =
      llvm::sys::fs::getMainExecutable(argv0, reinterpret_cast<void*>(&installPrefix));
  return llvm::sys::path::parent_path(llvm::sys::path::parent_path(exe)).str();
}

bool writeText(const std::string& path, const std::string& text) {
  std::error_code ec;
  llvm::raw_fd_ostream out(path, ec, llvm::sys::fs::OF_None);
  if (ec)
    return false;
  out << text;
  return !out.has_error();
}

bool writeBlob(const std::string& path, const std::string& bytes) { return writeText(path, bytes); }

/// The CUDA toolkit lwcc builds cuda trainers with: nvcc and the folders of
/// cuDNN and cuBLAS (as reached through nvcc's path, e.g. the version-free
/// /usr/local/cuda/lib64, and resolved, e.g. /usr/local/cuda-13.0/lib64).
namespace {
struct CudaToolkit {
  std::string nvcc;
  std::vector<std::string> libDirs;
};
} // namespace

static std::optional<CudaToolkit> findCuda(const TrainerBuildOptions& o, std::string& why) {
  CudaToolkit t;
  if (!o.nvcc.empty()) {
    t.nvcc = o.nvcc;
  } else {
    std::vector<std::string> tries;
    if (const char* home = std::getenv("CUDA_HOME"))
      tries.push_back(std::string(home) + "/bin/nvcc");
    tries.push_back("/usr/local/cuda/bin/nvcc");
    for (const std::string& c : tries)
      if (fs::exists(c)) {
        t.nvcc = c;
        break;
      }
    if (t.nvcc.empty())
      if (auto p = llvm::sys::findProgramByName("nvcc"))
        t.nvcc = *p;
  }
  if (t.nvcc.empty() || !fs::exists(t.nvcc)) {
    why = "no nvcc found (give --nvcc=PATH or set CUDA_HOME), or build a CPU trainer with "
          "--target=cpu";
    return std::nullopt;
  }
  // Folders of this machine, as the trainer is linked here (--emit=source
  // writes them as given: the source may be built elsewhere).
  for (const std::string& d : o.cudaLibs) {
    std::error_code ec;
    if (!fs::is_directory(d, ec)) {
      why = "--cuda-libs: " + d + " is not a folder";
      return std::nullopt;
    }
    t.libDirs.push_back(fs::absolute(fs::path(d)).lexically_normal().string());
  }
  fs::path given = fs::absolute(fs::path(t.nvcc)).lexically_normal().parent_path().parent_path();
  fs::path resolved = fs::weakly_canonical(fs::path(t.nvcc)).parent_path().parent_path();
  for (const fs::path& root : {given, resolved})
    for (const char* sub : {"lib64", "lib", "targets/x86_64-linux/lib"})
      if (fs::exists(root / sub) &&
          std::find(t.libDirs.begin(), t.libDirs.end(), (root / sub).string()) == t.libDirs.end())
        t.libDirs.push_back((root / sub).string());
  return t;
}

/// The runtime library of `target` under `prefix`, or "" with a message.
static std::string runtimeLibrary(const std::string& prefix, const std::string& target) {
  std::string lib = prefix + "/lib/liblwcc_runtime_" + target + ".a";
  if (!fs::exists(lib) || !fs::exists(prefix + "/include/lwrt/trainer.h") ||
      !fs::exists(prefix + "/lib/liblwcc_runtime_" + target + ".libs")) {
    llvm::errs() << "lwcc: error: the " << target << " runtime is not installed under " << prefix
                 << " (expected include/lwrt/ and lib/liblwcc_runtime_" << target << ".a and .libs"
                 << (target == "cuda"  ? "; lwcc was built without nvcc"
                     : target == "emu" ? "; lwcc was built without the CUDA headers"
                                       : "")
                 << ")\n";
    return "";
  }
  return lib;
}

/// The system libraries a trainer of `target` links besides the runtime
/// library: <prefix>/lib/liblwcc_runtime_<target>.libs, one flag a line
/// (runtime/CMakeLists.txt writes it).
static std::vector<std::string> runtimeLinkFlags(const std::string& prefix,
                                                 const std::string& target,
                                                 const std::string& kind = "libs") {
  std::vector<std::string> flags;
  auto text = llvm::MemoryBuffer::getFile(prefix + "/lib/liblwcc_runtime_" + target + "." + kind);
  if (!text)
    return flags;
  llvm::SmallVector<llvm::StringRef, 8> lines;
  (*text)->getBuffer().split(lines, '\n', -1, false);
  for (llvm::StringRef line : lines)
    if (!line.trim().empty())
      flags.push_back(line.trim().str());
  return flags;
}

/// --cuda-libs as a CMake list (absolute folders).
static std::string cudaLibsList(const std::vector<std::string>& cudaLibs) {
  std::string out;
  for (const std::string& d : cudaLibs) {
    if (!out.empty())
      out += ';';
    out += fs::absolute(fs::path(d)).lexically_normal().string();
  }
  return out;
}

/// Writes the trainer's source, its blobs and a CMakeLists.txt into `dir`.
int emitSource(const GeneratedTrainer& t, const std::string& dir, const std::string& prefix,
               const TrainerBuildOptions& o) {
  const std::string& target = o.target;
  std::error_code ec;
  fs::create_directories(dir, ec);
  bool cuda = target == "cuda";
  std::string sm = o.arch.substr(3);
  std::string blobs = "configure_file(trainer.weights trainer.weights COPYONLY)\n";
  if (!t.exportTemplate.empty())
    blobs += "configure_file(trainer.onnx-template trainer.onnx-template COPYONLY)\n";
  std::string cmake =
      "# Builds the trainer lwcc generated. LWCC_PREFIX is the folder holding\n"
      "# lwcc's include/ (runtime headers) and lib/ (liblwcc_runtime_" +
      target +
      ".a).\n"
      "# The source embeds trainer.weights" +
      (t.exportTemplate.empty() ? "" : " and trainer.onnx-template") +
      " with the assembler's .incbin,\n"
      "# which finds them in the build folder: build this project on its own.\n"
      "cmake_minimum_required(VERSION 3.20)\nproject(trainer " +
      (cuda ? "CXX CUDA" : "CXX") + ")\n" + "set(CMAKE_CXX_STANDARD 20)\n" +
      (cuda ? "set(CMAKE_CUDA_STANDARD 20)\nset(CMAKE_CUDA_ARCHITECTURES " + sm +
                  ")\nfind_package(CUDAToolkit REQUIRED)\n"
                  "# Folders holding libcudnn.so.9, libcublas.so.13 and libnccl.so.2 besides\n"
                  "# the toolkit's (pip's nvidia wheels: site-packages/nvidia/*/lib).\n"
                  "set(LWCC_CUDA_LIBS \"" +
                  cudaLibsList(o.cudaLibs) +
                  "\" CACHE STRING \"folders of cuDNN, cuBLAS and NCCL\")\n"
            : std::string()) +
      "set(LWCC_PREFIX \"" + prefix + "\" CACHE PATH \"lwcc install prefix\")\n" +
      "# The system libraries the runtime needs, one flag a line.\n"
      "file(STRINGS ${LWCC_PREFIX}/lib/liblwcc_runtime_" +
      target + ".libs LWCC_RUNTIME_LIBS)\n" + blobs + "add_executable(trainer " + t.fileName +
      ")\n" + "set_source_files_properties(" + t.fileName +
      " PROPERTIES OBJECT_DEPENDS \"${CMAKE_CURRENT_SOURCE_DIR}/trainer.weights\")\n"
      "target_include_directories(trainer PRIVATE ${LWCC_PREFIX}/include)\n"
      "target_link_libraries(trainer PRIVATE ${LWCC_PREFIX}/lib/liblwcc_runtime_" +
      target + ".a " + (cuda ? "CUDA::cudart_static " : "") + "${LWCC_RUNTIME_LIBS})\n" +
      (cuda ? "# cuDNN, cuBLAS and NCCL by their versioned sonames (the .libs file), found\n"
              "# beside the trainer first (the CUDA runtime is static), then where they\n"
              "# were linked; bound lazily, so that the start-up check names a function\n"
              "# an older library lacks.\n"
              "target_link_directories(trainer PRIVATE ${LWCC_CUDA_LIBS} "
              "${CUDAToolkit_LIBRARY_DIR})\n"
              "target_link_options(trainer PRIVATE \"LINKER:-z,lazy\")\n"
              "set_target_properties(trainer PROPERTIES BUILD_RPATH "
              "\"\\$ORIGIN;${LWCC_CUDA_LIBS};${CUDAToolkit_LIBRARY_DIR}\")\n"
            : "");
  if (ec || !writeText(dir + "/" + t.fileName, t.source) ||
      !writeBlob(dir + "/trainer.weights", t.weights) ||
      (!t.exportTemplate.empty() && !writeBlob(dir + "/trainer.onnx-template", t.exportTemplate)) ||
      !writeText(dir + "/CMakeLists.txt", cmake)) {
    llvm::errs() << dir << ": error: cannot write the trainer's sources\n";
    return 1;
  }
  return 0;
}

/// Compiles the trainer into `exe`: with the host compiler for the CPU,
/// with nvcc for CUDA.
int buildExe(const GeneratedTrainer& t, const std::string& dir, const std::string& exe,
             const std::string& prefix, const TrainerBuildOptions& o) {
  const std::string& target = o.target;
  std::string src = dir + "/" + t.fileName;
  if (!writeText(src, t.source) || !writeBlob(dir + "/trainer.weights", t.weights) ||
      (!t.exportTemplate.empty() && !writeBlob(dir + "/trainer.onnx-template", t.exportTemplate))) {
    llvm::errs() << dir << ": error: cannot write the trainer's sources\n";
    return 1;
  }
  std::string runtime = target == "cuda" && o.emulateGpu ? "emu" : target;
  std::string lib = runtimeLibrary(prefix, runtime);
  if (lib.empty())
    return 1;
  std::vector<std::string> args;
  std::string program;
  if (runtime == "emu") {
    // The generated CUDA source as host C++: lwemu/cuda_emu.h gives it what
    // nvcc would (the trainer itself launches no kernel), the CUDA headers
    // declare what the emulated runtime defines.
    auto cxx = llvm::sys::findProgramByName("c++");
    if (!cxx) {
      llvm::errs() << "lwcc: error: no host C++ compiler (c++) on PATH\n";
      return 1;
    }
    program = *cxx;
    args = {program,
            "-std=c++20",
            "-O2",
            "-x",
            "c++",
            "-include",
            prefix + "/include/lwemu/cuda_emu.h",
            "-I" + prefix + "/include"};
    for (const std::string& f : runtimeLinkFlags(prefix, "emu", "cflags"))
      args.push_back(f);
    args.insert(args.end(), {src, "-x", "none", lib});
    for (const std::string& f : runtimeLinkFlags(prefix, "emu"))
      args.push_back(f);
    args.push_back("-o");
    args.push_back(exe);
  } else if (target == "cuda") {
    std::string why;
    auto cuda = findCuda(o, why);
    if (!cuda) {
      llvm::errs() << "lwcc: error: " << why << "\n";
      return 1;
    }
    program = cuda->nvcc;
    // The CUDA runtime is linked statically: the machine that runs the
    // trainer needs the NVIDIA driver, cuDNN, cuBLAS and NCCL (docs/gpus.md,
    // "What a machine needs"), linked by their versioned sonames (the .libs file).
    // Those are looked up (RUNPATH, so LD_LIBRARY_PATH comes first) beside
    // the trainer, then in --cuda-libs and this toolkit's folders by their
    // version-free path, then resolved, then in the system's. Lazy binding
    // lets the start-up preflight name a function an older library lacks
    // instead of the loader failing on it (cuda/Preflight.h).
    args = {program,
            "-std=c++20",
            "-O2",
            "-arch=" + o.arch,
            "-cudart=static",
            "-I" + prefix + "/include",
            src,
            lib};
    args.push_back("-Xlinker=--enable-new-dtags");
    args.push_back("-Xlinker=-z,lazy");
    args.push_back("-Xlinker=-rpath=$ORIGIN");
    for (const std::string& d : cuda->libDirs) {
      args.push_back("-L" + d);
      args.push_back("-Xlinker=-rpath=" + d);
    }
    for (const std::string& f : runtimeLinkFlags(prefix, target))
      args.push_back(f);
  } else {
    auto cxx = llvm::sys::findProgramByName("c++");
    if (!cxx) {
      llvm::errs() << "lwcc: error: no host C++ compiler (c++) on PATH\n";
      return 1;
    }
    program = *cxx;
    args = {program, "-std=c++20", "-O2", "-I" + prefix + "/include", src, lib};
    for (const std::string& f : runtimeLinkFlags(prefix, target))
      args.push_back(f);
    args.push_back("-o");
    args.push_back(exe);
  }
  if (runtime == "cuda") {
    args.push_back("-o");
    args.push_back(exe);
  }
  if (o.verbose) {
    llvm::errs() << "lwcc:";
    for (const std::string& a : args)
      llvm::errs() << " " << a;
    llvm::errs() << "\n";
  }
  std::vector<llvm::StringRef> refs(args.begin(), args.end());
  std::string message;
  int rc = llvm::sys::ExecuteAndWait(program, refs, llvm::None, {}, 0, 0, &message);
  if (rc != 0) {
    llvm::errs() << "lwcc: error: compiling the trainer failed" << (message.empty() ? "" : ": ")
                 << message << "\n";
    return 1;
  }
  return 0;
}

} // namespace lwcc
