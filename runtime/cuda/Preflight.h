// cuda/Preflight.h - what a CUDA trainer needs of the machine (not installed)
// defines: CudaVersions, cudaNeeds, checkCudaVersions, describeCudaVersions, checkNcclFunctions,
//          missingCudnnFunctions, missingCublasFunctions, missingNcclFunctions
//
// A CUDA trainer links the CUDA runtime statically (only the NVIDIA driver's
// libcuda.so.1 comes from the machine) and cuDNN, cuBLAS and NCCL
// dynamically by their versioned sonames (libcudnn.so.9, libcublas.so.13,
// libnccl.so.2: what pip's wheels hold too), found through the trainer's
// rpath: its own folder, then the CUDA folders of the machine that built it,
// then the system's. Before it touches the GPU it checks what it found and
// says what is missing instead of failing somewhere inside a library:
//  - the driver supports the CUDA major the trainer was built with;
//  - cuDNN is of the headers' major (9), built for that CUDA major, and
//    provides every cuDNN function the runtime calls; likewise cuBLAS (13).
// A minor version older than the build's is fine when it has those
// functions: what the trainer calls decides, not the build's minor version
// (the list of functions is taken from the runtime's objects at build time:
// ListCudaApi.cmake, CudaApi.cpp). Functions are bound lazily (trainers link
// with -z lazy), so a missing one is reported here, not by the loader.
// Plain C++ (no CUDA headers): the CUDA runtime library fills the versions
// and the missing functions in (Context.cu, CudaApi.cpp); the unit tests
// check the verdicts.
#pragma once

#include <string>
#include <vector>

namespace lwrt::cuda {

/// Versions in the libraries' own encodings: CUDA 1000 * major + 10 *
/// minor (13000 = 13.0; the driver's is the newest CUDA it supports, 0
/// without a driver), cuDNN 10000 * major + 100 * minor + patch (9.x), and
/// cuBLAS major, minor, patch.
struct CudaVersions {
  int driver = 0;
  int runtime = 0;
  int cudnn = 0;
  int cudnnCudart = 0; ///< the CUDA runtime cuDNN was built for
  int cublasMajor = 0, cublasMinor = 0, cublasPatch = 0;
  /// Functions the trainer calls that the libraries found lack (empty in
  /// what cudaNeeds returns).
  std::vector<std::string> missingCudnn, missingCublas;
};

/// What this trainer was built against (the headers' versions).
CudaVersions cudaNeeds(int runtime, int cudnn, int cublasMajor, int cublasMinor, int cublasPatch);

/// "" when `found` can run a trainer built against `built`, else what is
/// missing and what to install, one problem per line.
std::string checkCudaVersions(const CudaVersions& found, const CudaVersions& built);

/// "driver CUDA 13.0, cuDNN 9.19.0, cuBLAS 13.1.0" (what was found).
std::string describeCudaVersions(const CudaVersions& found);

/// "" when `missing` (the NCCL functions a multi-device trainer calls that
/// the libnccl.so.2 found lacks) is empty, else why the trainer cannot run
/// and what to install (checked when a multi-device group starts).
std::string checkNcclFunctions(const std::vector<std::string>& missing, int cudaMajor);

/// The functions of each library the CUDA runtime calls that the process
/// cannot find (CudaApi.cpp, in the CUDA runtime library only).
std::vector<std::string> missingCudnnFunctions();
std::vector<std::string> missingCublasFunctions();
std::vector<std::string> missingNcclFunctions();

} // namespace lwrt::cuda
