//===- EmaKernels.cu - the weights' moving average on the GPU -------------===//
//
// The trainer's --ema: after each step, every float param range of a
// device's state moves towards the params by lerp (ema += w * (p - ema)),
// one grid-stride kernel per range on the runner's stream, ordered after the
// step. The arithmetic is the CPU backend's (cpu/Runner.cpp): w rounded to
// the element type, one multiply and one add per element, so a param equal
// to its average stays it bit for bit (a frozen one).
//
//===----------------------------------------------------------------------===//
#include "cuda/EmaKernels.cuh"
#include "cuda/KernelSupport.cuh"

namespace lwrt::cuda {

namespace {

template <typename T> __global__ void lerpKernel(T* ema, const T* value, int64_t n, T weight) {
  LWRT_GRID_STRIDE(i, n) {
    const T e = ema[i];
    ema[i] = e + weight * (value[i] - e);
  }
}

} // namespace

bool emaLerp(void* ema, const void* value, int64_t count, DType type, double weight) {
  if (count <= 0)
    return true;
  if (!isFloatType(type))
    return LWRT_REJECT("emaLerp: averages F32 or F64 params");
  const int blocks = static_cast<int>(std::min<int64_t>(blocksFor(count), 4096));
  if (type == DType::F32)
    LWRT_LAUNCH(lerpKernel<float>, blocks, kThreads, static_cast<float*>(ema),
                static_cast<const float*>(value), count, static_cast<float>(weight));
  else
    LWRT_LAUNCH(lerpKernel<double>, blocks, kThreads, static_cast<double*>(ema),
                static_cast<const double*>(value), count, weight);
  return true;
}

} // namespace lwrt::cuda
