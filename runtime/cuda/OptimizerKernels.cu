//===- OptimizerKernels.cu - Dropout, optimizer updates and checks ----------===//
//
// The CUDA kernels of lwrt/cuda_tensor.h that draw dropout masks, update
// weights (SGD, Adam), schedule the learning rate and check gradients for
// non-finite values. The arithmetic is lwrt/dropout.h's, lwrt/optimizer_math.h's
// and lwrt/lr_schedule.h's, shared with the CPU kernels; the host-side checks
// are the CPU's (lwrt/kernel_checks.h), made before any launch.
//
//===----------------------------------------------------------------------===//
#include "cuda/TensorSupport.cuh"
#include "lwrt/cuda_tensor.h"
#include "lwrt/dropout.h"
#include "lwrt/optimizer_math.h"

#include <cstdint>
#include <string>
#include <vector>

namespace lwrt::cuda {

namespace {

//===--- Optimizers -------------------------------------------------------===//

template <typename S, typename T>
__global__ void dropoutKernel(const S* step, T* mask, int64_t n, int64_t seed, double ratio,
                              ShardIndex piece) {
  auto s = static_cast<int64_t>(*step);
  for (int64_t k = firstThread(); k < n; k += gridThreads())
    mask[k] = static_cast<T>(dropoutMaskValue(seed, s, ratio, piece, k));
}

/// A 16-bit mask (mixed precision's dropout): each value rounded to float32
/// and then to the type, as the CPU backend rounds it.
template <typename S>
__global__ void dropout16Kernel(const S* step, uint16_t* mask, int64_t n, int64_t seed,
                                double ratio, ShardIndex piece, bool bf16) {
  auto s = static_cast<int64_t>(*step);
  for (int64_t k = firstThread(); k < n; k += gridThreads())
    mask[k] = narrow16(static_cast<float>(dropoutMaskValue(seed, s, ratio, piece, k)), bf16);
}

template <typename T, typename L>
__global__ void sgdKernel(const T* w, const void* g, GradKind gk, const T* m, const L* lr,
                          const uint8_t* finite, T* wOut, T* mOut, int64_t n, double lrScale,
                          SgdHyper h, const T* scale) {
  double rate = static_cast<double>(*lr) * lrScale;
  const bool skip = finite && *finite == 0; // fp16's overflowed step: nothing changes
  for (int64_t k = firstThread(); k < n; k += gridThreads()) {
    if (skip) {
      mOut[k] = m[k];
      wOut[k] = w[k];
      continue;
    }
    SgdElement e = sgdElement(w[k], scaledGradElement<T>(g, gk, k, scale), m[k], rate, h);
    mOut[k] = static_cast<T>(e.m);
    wOut[k] = static_cast<T>(e.w);
  }
}

/// The slots of one launch of sgdUpdateGroup: the elements of slot s are
/// [start[s], start[s + 1]) of the launch's range.
template <typename T> struct SgdChunk {
  int count = 0;
  int64_t start[kPiecesPerLaunch + 1] = {};
  const T* w[kPiecesPerLaunch];
  const void* g[kPiecesPerLaunch];
  GradKind gk[kPiecesPerLaunch];
  const T* m[kPiecesPerLaunch];
  T* wOut[kPiecesPerLaunch];
  T* mOut[kPiecesPerLaunch];
  double lrScale[kPiecesPerLaunch];
  SgdHyper h[kPiecesPerLaunch];
  const T* scale[kPiecesPerLaunch];
};

template <typename T, typename L>
__global__ void sgdGroupKernel(SgdChunk<T> c, const L* lr, const uint8_t* finite) {
  const double base = static_cast<double>(*lr);
  const bool skip = finite && *finite == 0;
  int s = 0;
  for (int64_t i = firstThread(); i < c.start[c.count]; i += gridThreads()) {
    s = pieceOf(c.start, s, i);
    const int64_t k = i - c.start[s];
    if (skip) {
      c.mOut[s][k] = c.m[s][k];
      c.wOut[s][k] = c.w[s][k];
      continue;
    }
    SgdElement e = sgdElement(c.w[s][k], scaledGradElement<T>(c.g[s], c.gk[s], k, c.scale[s]),
                              c.m[s][k], base * c.lrScale[s], c.h[s]);
    c.mOut[s][k] = static_cast<T>(e.m);
    c.wOut[s][k] = static_cast<T>(e.w);
  }
}

template <typename T> struct AdamChunk {
  int count = 0;
  int64_t start[kPiecesPerLaunch + 1] = {};
  const T* w[kPiecesPerLaunch];
  const void* g[kPiecesPerLaunch];
  GradKind gk[kPiecesPerLaunch];
  const T* m[kPiecesPerLaunch];
  const T* v[kPiecesPerLaunch];
  T* wOut[kPiecesPerLaunch];
  T* mOut[kPiecesPerLaunch];
  T* vOut[kPiecesPerLaunch];
  double lrScale[kPiecesPerLaunch];
  AdamHyper h[kPiecesPerLaunch];
  const T* scale[kPiecesPerLaunch];
};

template <typename T, typename L, typename S>
__global__ void adamGroupKernel(AdamChunk<T> c, const L* lr, const S* step, const uint8_t* finite) {
  // Each slot's bias corrections at t = step + 1, once per block.
  __shared__ AdamCorrection corr[kPiecesPerLaunch];
  if (threadIdx.x == 0)
    for (int s = 0; s < c.count; ++s)
      corr[s] = adamCorrection(c.h[s], static_cast<int64_t>(*step));
  __syncthreads();
  const double base = static_cast<double>(*lr);
  const bool skip = finite && *finite == 0;
  int s = 0;
  for (int64_t i = firstThread(); i < c.start[c.count]; i += gridThreads()) {
    s = pieceOf(c.start, s, i);
    const int64_t k = i - c.start[s];
    if (skip) {
      c.mOut[s][k] = c.m[s][k];
      c.vOut[s][k] = c.v[s][k];
      c.wOut[s][k] = c.w[s][k];
      continue;
    }
    AdamElement e = adamElement(c.w[s][k], scaledGradElement<T>(c.g[s], c.gk[s], k, c.scale[s]),
                                c.m[s][k], c.v[s][k], base * c.lrScale[s], c.h[s], corr[s]);
    c.mOut[s][k] = static_cast<T>(e.m);
    c.vOut[s][k] = static_cast<T>(e.v);
    c.wOut[s][k] = static_cast<T>(e.w);
  }
}

template <typename T, typename L, typename S>
__global__ void adamKernel(const T* w, const void* g, GradKind gk, const T* m, const T* v,
                           const L* lr, const S* step, const uint8_t* finite, T* wOut, T* mOut,
                           T* vOut, int64_t n, double lrScale, AdamHyper h, const T* scale) {
  // Bias corrections at t = step + 1, once per block.
  __shared__ AdamCorrection corr;
  if (threadIdx.x == 0)
    corr = adamCorrection(h, static_cast<int64_t>(*step));
  __syncthreads();
  double rate = static_cast<double>(*lr) * lrScale;
  const bool skip = finite && *finite == 0;
  for (int64_t k = firstThread(); k < n; k += gridThreads()) {
    if (skip) {
      mOut[k] = m[k];
      vOut[k] = v[k];
      wOut[k] = w[k];
      continue;
    }
    AdamElement e =
        adamElement(w[k], scaledGradElement<T>(g, gk, k, scale), m[k], v[k], rate, h, corr);
    mOut[k] = static_cast<T>(e.m);
    vOut[k] = static_cast<T>(e.v);
    wOut[k] = static_cast<T>(e.w);
  }
}

/// An update's optional `finite` flag: absent, or a Bool scalar.
bool flagScalar(const TensorView* finite) {
  return !finite || (finite->dtype == DType::Bool && finite->numel() == 1 && finite->data);
}
const uint8_t* flagOf(const TensorView* finite) {
  return finite ? static_cast<const uint8_t*>(finite->data) : nullptr;
}

template <typename S, typename T>
__global__ void lrScheduleKernel(const S* step, T* lr, LrScheduleParams p) {
  *lr = static_cast<T>(scheduledLr(p, static_cast<int64_t>(*step)));
}

} // namespace

//===--- Randomness -------------------------------------------------------===//

bool dropoutMask(const TensorView& step, const TensorView& mask, const DropoutMaskParams& p) {
  ShardIndex piece;
  if (!intScalar(step) || !(p.ratio >= 0 && p.ratio < 1) ||
      !(isFloat(mask.dtype) || is16(mask.dtype)) || !dropoutPiece(mask.shape, p, piece))
    return LWRT_REJECT("dropoutMask", "takes an integer step scalar, a ratio in [0, 1), a float "
                                      "mask and a piece inside the whole mask, not " +
                                          describe(step) + ", " + std::to_string(p.ratio) +
                                          " and " + describe(mask));
  int64_t n = mask.numel();
  if (n == 0)
    return true;
  return dispatchInt(step.dtype, [&](auto stag) {
    using S = decltype(stag);
    if (is16(mask.dtype)) {
      dropout16Kernel<<<blocksFor(n), kThreads, 0, context().stream>>>(
          step.as<const S>(), static_cast<uint16_t*>(mask.data), n, p.seed, p.ratio, piece,
          mask.dtype == DType::BF16);
      LWRT_CUDA(cudaGetLastError());
      return true;
    }
    return dispatchFloat(mask.dtype, [&](auto tag) {
      using T = decltype(tag);
      dropoutKernel<<<blocksFor(n), kThreads, 0, context().stream>>>(
          step.as<const S>(), mask.as<T>(), n, p.seed, p.ratio, piece);
      LWRT_CUDA(cudaGetLastError());
      return true;
    });
  });
}

//===--- Optimizers -------------------------------------------------------===//

bool sgdUpdate(const TensorView& w, const TensorView& g, const TensorView& m, const TensorView& lr,
               const TensorView* finite, const TensorView& wOut, const TensorView& mOut,
               const SgdParams& p) {
  GradKind gk = GradKind::Same;
  bool ok = floatScalar(lr) && isFloat(w.dtype) && updateGrad(w, g, gk) && flagScalar(finite);
  for (const TensorView* t : {&m, &wOut, &mOut})
    ok = ok && sameLayout(w, *t);
  if (!ok)
    return LWRT_REJECT("sgdUpdate", "takes w, m, w', m' of one float type and shape, g of theirs "
                                    "(or bf16 or fp16 beside float32) and a float lr scalar; w "
                                    "is " +
                                        describe(w) + ", g " + describe(g) + ", lr " +
                                        describe(lr));
  int64_t n = w.numel();
  if (n == 0)
    return true;
  return dispatchFloat(lr.dtype, [&](auto ltag) {
    using L = decltype(ltag);
    return dispatchFloat(w.dtype, [&](auto tag) {
      using T = decltype(tag);
      sgdKernel<<<blocksFor(n), kThreads, 0, context().stream>>>(
          w.as<const T>(), g.data, gk, m.as<const T>(), lr.as<const L>(), flagOf(finite),
          wOut.as<T>(), mOut.as<T>(), n, p.lr_scale,
          SgdHyper{p.momentum, p.weight_decay, p.nesterov != 0},
          static_cast<const T*>(p.grad_scale));
      LWRT_CUDA(cudaGetLastError());
      return true;
    });
  });
}

bool adamUpdate(const TensorView& w, const TensorView& g, const TensorView& m, const TensorView& v,
                const TensorView& lr, const TensorView& step, const TensorView* finite,
                const TensorView& wOut, const TensorView& mOut, const TensorView& vOut,
                const AdamParams& p) {
  GradKind gk = GradKind::Same;
  bool ok = floatScalar(lr) && intScalar(step) && isFloat(w.dtype) && updateGrad(w, g, gk) &&
            flagScalar(finite);
  for (const TensorView* t : {&m, &v, &wOut, &mOut, &vOut})
    ok = ok && sameLayout(w, *t);
  if (!ok)
    return LWRT_REJECT("adamUpdate", "takes w, m, v, w', m', v' of one float type and shape, g of "
                                     "theirs (or bf16 or fp16 beside float32), a float lr scalar "
                                     "and an integer step scalar; w is " +
                                         describe(w) + ", g " + describe(g) + ", lr " +
                                         describe(lr) + ", step " + describe(step));
  int64_t n = w.numel();
  if (n == 0)
    return true;
  return dispatchInt(step.dtype, [&](auto stag) {
    using S = decltype(stag);
    return dispatchFloat(lr.dtype, [&](auto ltag) {
      using L = decltype(ltag);
      return dispatchFloat(w.dtype, [&](auto tag) {
        using T = decltype(tag);
        adamKernel<<<blocksFor(n), kThreads, 0, context().stream>>>(
            w.as<const T>(), g.data, gk, m.as<const T>(), v.as<const T>(), lr.as<const L>(),
            step.as<const S>(), flagOf(finite), wOut.as<T>(), mOut.as<T>(), vOut.as<T>(), n,
            p.lr_scale, AdamHyper{p.beta1, p.beta2, p.epsilon, p.weight_decay, p.decoupled != 0},
            static_cast<const T*>(p.grad_scale));
        LWRT_CUDA(cudaGetLastError());
        return true;
      });
    });
  });
}

bool sgdUpdateGroup(const std::vector<SgdSlot>& slots, const TensorView& lr,
                    const TensorView* finite) {
  if (slots.empty())
    return true;
  bool ok = floatScalar(lr) && isFloat(slots[0].w.dtype) && flagScalar(finite);
  std::vector<GradKind> kinds(slots.size());
  for (size_t k = 0; k < slots.size(); ++k) {
    const SgdSlot& s = slots[k];
    ok = ok && s.w.dtype == slots[0].w.dtype && updateGrad(s.w, s.g, kinds[k]);
    for (const TensorView* t : {&s.m, &s.wOut, &s.mOut})
      ok = ok && sameLayout(s.w, *t);
  }
  if (!ok)
    return LWRT_REJECT("sgdUpdateGroup", "takes slots of w, m, w', m' of one float type and "
                                         "shape each and g of theirs (or bf16 or fp16 beside "
                                         "float32), all of one type, and a float lr scalar");
  return dispatchFloat(lr.dtype, [&](auto ltag) {
    using L = decltype(ltag);
    return dispatchFloat(slots[0].w.dtype, [&](auto tag) {
      using T = decltype(tag);
      for (size_t first = 0; first < slots.size(); first += kPiecesPerLaunch) {
        SgdChunk<T> c;
        for (size_t k = first; k < slots.size() && c.count < kPiecesPerLaunch; ++k, ++c.count) {
          const SgdSlot& s = slots[k];
          c.w[c.count] = s.w.as<const T>();
          c.g[c.count] = s.g.data;
          c.gk[c.count] = kinds[k];
          c.m[c.count] = s.m.as<const T>();
          c.wOut[c.count] = s.wOut.as<T>();
          c.mOut[c.count] = s.mOut.as<T>();
          c.lrScale[c.count] = s.p.lr_scale;
          c.h[c.count] = SgdHyper{s.p.momentum, s.p.weight_decay, s.p.nesterov != 0};
          c.scale[c.count] = static_cast<const T*>(s.p.grad_scale);
          c.start[c.count + 1] = c.start[c.count] + s.w.numel();
        }
        if (c.start[c.count] == 0)
          continue;
        sgdGroupKernel<<<blocksFor(c.start[c.count]), kThreads, 0, context().stream>>>(
            c, lr.as<const L>(), flagOf(finite));
        LWRT_CUDA(cudaGetLastError());
      }
      return true;
    });
  });
}

bool adamUpdateGroup(const std::vector<AdamSlot>& slots, const TensorView& lr,
                     const TensorView& step, const TensorView* finite) {
  if (slots.empty())
    return true;
  bool ok = floatScalar(lr) && intScalar(step) && isFloat(slots[0].w.dtype) && flagScalar(finite);
  std::vector<GradKind> kinds(slots.size());
  for (size_t k = 0; k < slots.size(); ++k) {
    const AdamSlot& s = slots[k];
    ok = ok && s.w.dtype == slots[0].w.dtype && updateGrad(s.w, s.g, kinds[k]);
    for (const TensorView* t : {&s.m, &s.v, &s.wOut, &s.mOut, &s.vOut})
      ok = ok && sameLayout(s.w, *t);
  }
  if (!ok)
    return LWRT_REJECT("adamUpdateGroup", "takes slots of w, m, v, w', m', v' of one float "
                                          "type and shape each and g of theirs (or bf16 or fp16 "
                                          "beside float32), all of one type, a float lr scalar "
                                          "and an integer step scalar");
  return dispatchInt(step.dtype, [&](auto stag) {
    using S = decltype(stag);
    return dispatchFloat(lr.dtype, [&](auto ltag) {
      using L = decltype(ltag);
      return dispatchFloat(slots[0].w.dtype, [&](auto tag) {
        using T = decltype(tag);
        for (size_t first = 0; first < slots.size(); first += kPiecesPerLaunch) {
          AdamChunk<T> c;
          for (size_t k = first; k < slots.size() && c.count < kPiecesPerLaunch; ++k, ++c.count) {
            const AdamSlot& s = slots[k];
            c.w[c.count] = s.w.as<const T>();
            c.g[c.count] = s.g.data;
            c.gk[c.count] = kinds[k];
            c.m[c.count] = s.m.as<const T>();
            c.v[c.count] = s.v.as<const T>();
            c.wOut[c.count] = s.wOut.as<T>();
            c.mOut[c.count] = s.mOut.as<T>();
            c.vOut[c.count] = s.vOut.as<T>();
            c.lrScale[c.count] = s.p.lr_scale;
            c.h[c.count] =
                AdamHyper{s.p.beta1, s.p.beta2, s.p.epsilon, s.p.weight_decay, s.p.decoupled != 0};
            c.scale[c.count] = static_cast<const T*>(s.p.grad_scale);
            c.start[c.count + 1] = c.start[c.count] + s.w.numel();
          }
          if (c.start[c.count] == 0)
            continue;
          adamGroupKernel<<<blocksFor(c.start[c.count]), kThreads, 0, context().stream>>>(
              c, lr.as<const L>(), step.as<const S>(), flagOf(finite));
          LWRT_CUDA(cudaGetLastError());
        }
        return true;
      });
    });
  });
}

bool lrSchedule(const TensorView& step, const TensorView& lr, const LrScheduleParams& p) {
  if (!intScalar(step) || lr.numel() != 1 || !isFloat(lr.dtype))
    return LWRT_REJECT("lrSchedule", "takes an integer step scalar and a float lr scalar, not " +
                                         describe(step) + " and " + describe(lr));
  if (p.kind == LrScheduleKind::Step && p.step_size < 1)
    return LWRT_REJECT("lrSchedule", "step_size " + std::to_string(p.step_size) + " < 1");
  return dispatchInt(step.dtype, [&](auto stag) {
    using S = decltype(stag);
    return dispatchFloat(lr.dtype, [&](auto tag) {
      using T = decltype(tag);
      lrScheduleKernel<<<1, 1, 0, context().stream>>>(step.as<const S>(), lr.as<T>(), p);
      LWRT_CUDA(cudaGetLastError());
      return true;
    });
  });
}

/// Clears *finite where an element of x is infinite or NaN: its exponent
/// bits (`mask`, in units of `U`, the type's width) all ones.
template <typename U>
__global__ void nonFiniteKernel(const U* x, int64_t n, U mask, uint8_t* finite) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if ((x[k] & mask) == mask)
      *finite = 0; // every writer stores the same byte
}

bool allFinite(const std::vector<TensorView>& xs, const TensorView& y, const AllFiniteParams&) {
  if (y.dtype != DType::Bool || y.numel() != 1)
    return LWRT_REJECT("allFinite", "writes a bool scalar, not " + describe(y));
  cudaStream_t s = context().stream;
  LWRT_CUDA(cudaMemsetAsync(y.data, 1, 1, s));
  auto* finite = static_cast<uint8_t*>(y.data);
  for (const TensorView& x : xs) {
    const int64_t n = x.numel();
    if (n == 0)
      continue;
    switch (x.dtype) {
    case DType::F32:
      nonFiniteKernel<<<blocksFor(n), kThreads, 0, s>>>(x.as<const uint32_t>(), n,
                                                        uint32_t{0x7f800000u}, finite);
      break;
    case DType::F64:
      nonFiniteKernel<<<blocksFor(n), kThreads, 0, s>>>(x.as<const uint64_t>(), n,
                                                        uint64_t{0x7ff0000000000000ull}, finite);
      break;
    case DType::F16:
    case DType::BF16:
      nonFiniteKernel<<<blocksFor(n), kThreads, 0, s>>>(
          static_cast<const uint16_t*>(x.data), n,
          static_cast<uint16_t>(x.dtype == DType::F16 ? 0x7c00u : 0x7f80u), finite);
      break;
    default:
      return LWRT_REJECT("allFinite", "takes float tensors, not " + describe(x));
    }
    LWRT_CUDA(cudaGetLastError());
  }
  return true;
}

} // namespace lwrt::cuda
