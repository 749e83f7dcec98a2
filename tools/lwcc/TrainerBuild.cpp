//===- TrainerBuild.cpp - Writing and compiling a generated trainer -------===//
#include "tools/lwcc/TrainerBuild.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

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

/// Writes the trainer's source files into `dir`.
static bool writeSources(const GeneratedTrainer& t, const std::string& dir) {
  for (const SourceFile& f : t.files)
    if (!writeText(dir + "/" + f.name, f.text))
      return false;
  return true;
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
  std::string sources; // the compiled files (trainer.h is included)
  for (const SourceFile& f : t.files)
    if (!llvm::StringRef(f.name).endswith(".h"))
      sources += " " + f.name;
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
      target + ".libs LWCC_RUNTIME_LIBS)\n" + blobs + "add_executable(trainer" + sources + ")\n" +
      "set_source_files_properties(" + t.files[0].name +
      " PROPERTIES OBJECT_DEPENDS \"${CMAKE_CURRENT_SOURCE_DIR}/trainer.weights\")\n"
      "target_include_directories(trainer PRIVATE ${LWCC_PREFIX}/include)\n"
      "# The step is calls into the runtime: -Og builds it several times faster\n"
      "# than -O2 and runs it as fast (the kernels are the runtime's); it throws\n"
      "# nothing (what a runtime call throws unwinds through it all the same).\n"
      "target_compile_options(trainer PRIVATE " +
      (cuda ? "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Og,-fno-exceptions>"
            : "-Og -fno-exceptions") +
      ")\n"
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
  if (ec || !writeSources(t, dir) || !writeBlob(dir + "/trainer.weights", t.weights) ||
      (!t.exportTemplate.empty() && !writeBlob(dir + "/trainer.onnx-template", t.exportTemplate)) ||
      !writeText(dir + "/CMakeLists.txt", cmake)) {
    llvm::errs() << dir << ": error: cannot write the trainer's sources\n";
    return 1;
  }
  return 0;
}

/// Runs `commands` (each a program and its arguments), `jobs` at a time;
/// false, with a message, when one fails.
static bool runAll(const std::vector<std::vector<std::string>>& commands, unsigned jobs,
                   bool verbose) {
  std::atomic<size_t> next{0};
  std::atomic<bool> ok{true};
  std::mutex printing;
  auto work = [&] {
    for (size_t k; ok && (k = next++) < commands.size();) {
      const std::vector<std::string>& args = commands[k];
      if (verbose) {
        std::lock_guard<std::mutex> lock(printing);
        llvm::errs() << "lwcc:";
        for (const std::string& a : args)
          llvm::errs() << " " << a;
        llvm::errs() << "\n";
      }
      std::vector<llvm::StringRef> refs(args.begin(), args.end());
      std::string message;
      if (llvm::sys::ExecuteAndWait(args[0], refs, llvm::None, {}, 0, 0, &message) != 0) {
        std::lock_guard<std::mutex> lock(printing);
        if (ok.exchange(false))
          llvm::errs() << "lwcc: error: compiling the trainer failed"
                       << (message.empty() ? "" : ": ") << message << "\n";
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned k = 1; k < std::min<size_t>(jobs, commands.size()); ++k)
    pool.emplace_back(work);
  work();
  for (std::thread& t : pool)
    t.join();
  return ok;
}

/// Compiles the trainer into `exe`: with the host compiler for the CPU (and
/// the emulated GPU), with nvcc for CUDA. A trainer of several files is
/// compiled a file per process, one per core, then linked.
int buildExe(const GeneratedTrainer& t, const std::string& dir, const std::string& exe,
             const std::string& prefix, const TrainerBuildOptions& o) {
  const std::string& target = o.target;
  if (!writeSources(t, dir) || !writeBlob(dir + "/trainer.weights", t.weights) ||
      (!t.exportTemplate.empty() && !writeBlob(dir + "/trainer.onnx-template", t.exportTemplate))) {
    llvm::errs() << dir << ": error: cannot write the trainer's sources\n";
    return 1;
  }
  std::vector<std::string> units;
  for (const SourceFile& f : t.files)
    if (!llvm::StringRef(f.name).endswith(".h"))
      units.push_back(dir + "/" + f.name);
  std::string runtime = target == "cuda" && o.emulateGpu ? "emu" : target;
  std::string lib = runtimeLibrary(prefix, runtime);
  if (lib.empty())
    return 1;
  // The step is calls into the runtime's kernels: -Og builds it several
  // times faster than -O2 and runs it as fast (tools/bench/build_time.py),
  // and without exception tables a third faster again: the generated code
  // throws and catches nothing, and what a runtime call throws still
  // unwinds through it (the unwind tables stay) to the runtime's handler.
  // `driver`: the compiler and what both compiling and linking take;
  // `compile`: what only compiling takes; `link`: what follows the objects.
  std::vector<std::string> driver, compile, link;
  if (runtime == "emu" || target == "cpu") {
    auto cxx = llvm::sys::findProgramByName("c++");
    if (!cxx) {
      llvm::errs() << "lwcc: error: no host C++ compiler (c++) on PATH\n";
      return 1;
    }
    driver = {*cxx};
    compile = {"-std=c++20", "-Og", "-fno-exceptions"};
    if (runtime == "emu") {
      // The generated CUDA source as host C++: lwemu/cuda_emu.h gives it
      // what nvcc would (the trainer itself launches no kernel), the CUDA
      // headers declare what the emulated runtime defines.
      compile.insert(compile.end(),
                     {"-x", "c++", "-include", prefix + "/include/lwemu/cuda_emu.h"});
      for (const std::string& f : runtimeLinkFlags(prefix, "emu", "cflags"))
        compile.push_back(f);
    }
    compile.push_back("-I" + prefix + "/include");
    link = {"-x", "none", lib};
    for (const std::string& f : runtimeLinkFlags(prefix, runtime))
      link.push_back(f);
  } else {
    std::string why;
    auto cuda = findCuda(o, why);
    if (!cuda) {
      llvm::errs() << "lwcc: error: " << why << "\n";
      return 1;
    }
    // The CUDA runtime is linked statically: the machine that runs the
    // trainer needs the NVIDIA driver, cuDNN, cuBLAS and NCCL (docs/gpus.md,
    // "What a machine needs"), linked by their versioned sonames (the .libs
    // file). Those are looked up (RUNPATH, so LD_LIBRARY_PATH comes first)
    // beside the trainer, then in --cuda-libs and this toolkit's folders by
    // their version-free path, then resolved, then in the system's. Lazy
    // binding lets the start-up preflight name a function an older library
    // lacks instead of the loader failing on it (cuda/Preflight.h).
    driver = {cuda->nvcc, "-arch=" + o.arch, "-cudart=static"};
    compile = {"-std=c++20", "-Xcompiler=-Og,-fno-exceptions", "-I" + prefix + "/include"};
    link = {lib, "-Xlinker=--enable-new-dtags", "-Xlinker=-z,lazy", "-Xlinker=-rpath=$ORIGIN"};
    for (const std::string& d : cuda->libDirs) {
      link.push_back("-L" + d);
      link.push_back("-Xlinker=-rpath=" + d);
    }
    for (const std::string& f : runtimeLinkFlags(prefix, target))
      link.push_back(f);
  }
  // One file: compiled and linked in one command; several: each compiled
  // on its own, then the objects linked.
  std::vector<std::vector<std::string>> compiles;
  std::vector<std::string> linking = driver;
  if (units.size() == 1)
    linking.insert(linking.end(), compile.begin(), compile.end());
  for (const std::string& u : units) {
    if (units.size() == 1) {
      linking.push_back(u);
      continue;
    }
    std::vector<std::string> args = driver;
    args.insert(args.end(), compile.begin(), compile.end());
    args.insert(args.end(), {"-c", u, "-o", u + ".o"});
    compiles.push_back(std::move(args));
    linking.push_back(u + ".o");
  }
  linking.insert(linking.end(), link.begin(), link.end());
  linking.insert(linking.end(), {"-o", exe});
  const unsigned jobs = std::max(1u, std::thread::hardware_concurrency());
  return runAll(compiles, jobs, o.verbose) && runAll({linking}, 1, o.verbose) ? 0 : 1;
}

} // namespace lwcc
