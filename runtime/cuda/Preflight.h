// cuda/Preflight.h - what a CUDA trainer needs of the machine (not installed)
// defines: CudaVersions, cudaNeeds, checkCudaVersions, describeCudaVersions
//
// A CUDA trainer links the CUDA runtime statically (only the NVIDIA driver's
// libcuda.so.1 comes from the machine) and cuDNN and cuBLAS dynamically
// (found through the trainer's rpath: its own folder, then the CUDA folders
// of the machine that built it, then the system's). Before it touches the
// GPU it compares the versions it finds with the ones it was built against
// and says what is missing instead of failing somewhere inside a library.
// Plain C++ (no CUDA headers): the CUDA runtime library fills the versions
// in (Context.cu); the unit tests check the verdicts.
#pragma once

#include <string>

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
};

/// What this trainer was built against (the headers' versions).
CudaVersions cudaNeeds(int runtime, int cudnn, int cublasMajor, int cublasMinor, int cublasPatch);

/// "" when `found` can run a trainer built against `built`, else what is
/// missing and what to install, one problem per line.
std::string checkCudaVersions(const CudaVersions& found, const CudaVersions& built);

/// "driver CUDA 13.0, cuDNN 9.19.0, cuBLAS 13.1.0" (what was found).
std::string describeCudaVersions(const CudaVersions& found);

} // namespace lwrt::cuda
