//===- AttentionKernels.cu - attention and its gradient on the GPU --------===//
//
// The kernels of lwrt/cuda_attention.h: one thread per query row (the
// forward, dq) or key row (dk, dv) of every batch entry, each with the
// formulas of lwrt/attention_math.h that the interpreter and the CPU
// kernels run, in the same order and in double: the CPU's bits. A thread's
// sums live in a local array, so the head widths are bounded here
// (kCudaAttentionWidth); nothing of size Tq x Tk is stored. The host-side
// checks are the CPU backend's.
//
//===----------------------------------------------------------------------===//
#include "cuda/KernelSupport.cuh"
#include "lwrt/cuda_attention.h"
#include "lwrt/kernel_checks.h"

#include <cstdint>
#include <vector>

namespace lwrt::cuda {

namespace {

/// The doubles a thread's row sums hold: D (dq), Dv (the forward) or
/// D + Dv (dk and dv).
constexpr int64_t kCudaAttentionWidth = 256;

template <typename T>
__global__ void attentionKernel(AttentionShape s, AttentionParams p, const T* q, const T* k,
                                const T* v, const T* mask, T* out, T* lse) {
  double acc[kCudaAttentionWidth];
  LWRT_GRID_STRIDE(r, s.batch * s.tq) {
    attentionRow(s, p, q, k, v, mask, out, lse, r / s.tq, r % s.tq, acc);
  }
}

template <typename T>
__global__ void attentionGradQueryKernel(AttentionShape s, AttentionParams p, const T* dout,
                                         const T* q, const T* k, const T* v, const T* out,
                                         const T* lse, const T* mask, T* dq) {
  double acc[kCudaAttentionWidth];
  LWRT_GRID_STRIDE(r, s.batch * s.tq) {
    attentionGradQueryRow(s, p, dout, q, k, v, out, lse, mask, dq, r / s.tq, r % s.tq, acc);
  }
}

template <typename T>
__global__ void attentionGradKeyKernel(AttentionShape s, AttentionParams p, const T* dout,
                                       const T* q, const T* k, const T* v, const T* out,
                                       const T* lse, const T* mask, T* dk, T* dv) {
  double acc[kCudaAttentionWidth];
  LWRT_GRID_STRIDE(r, s.batch * s.tk) {
    attentionGradKeyRow(s, p, dout, q, k, v, out, lse, mask, dk, dv, r / s.tk, r % s.tk, acc);
  }
}

/// Whether the kernels' per-thread sums take heads of these widths.
bool fits(const AttentionShape& s) { return s.d + s.dv <= kCudaAttentionWidth; }

} // namespace

bool attention(const TensorView& q, const TensorView& k, const TensorView& v,
               const TensorView* mask, const TensorView& out, const TensorView& lse,
               const AttentionParams& p) {
  AttentionShape s;
  if (!attentionOperands(q, k, v, mask, out, lse, s) || !fits(s))
    return LWRT_REJECT("attention: takes q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] F32 "
                       "or F64 with D + Dv <= 256, a mask broadcastable to [..., Tq, Tk], out "
                       "[..., Tq, Dv] and lse [..., Tq]");
  if (s.batch * s.tq == 0)
    return true;
  return dispatchFloat(q.dtype, [&](auto tag) {
    using T = decltype(tag);
    LWRT_LAUNCH(attentionKernel<T>, blocksFor(s.batch * s.tq), kThreads, s, p, q.as<const T>(),
                k.as<const T>(), v.as<const T>(), mask ? mask->as<const T>() : nullptr, out.as<T>(),
                lse.as<T>());
    return true;
  });
}

bool attentionGrad(const TensorView& dout, const TensorView& q, const TensorView& k,
                   const TensorView& v, const TensorView& out, const TensorView& lse,
                   const TensorView* mask, const TensorView& dq, const TensorView& dk,
                   const TensorView& dv, const AttentionParams& p) {
  AttentionShape s;
  if (!attentionGradOperands(dout, q, k, v, out, lse, mask, dq, dk, dv, s) || !fits(s))
    return LWRT_REJECT("attentionGrad: takes dout, q, k, v, out, lse and a mask as attention "
                       "does, and dq, dk, dv of q's, k's and v's types and shapes");
  return dispatchFloat(q.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* m = mask ? mask->as<const T>() : nullptr;
    if (s.batch * s.tq > 0)
      LWRT_LAUNCH(attentionGradQueryKernel<T>, blocksFor(s.batch * s.tq), kThreads, s, p,
                  dout.as<const T>(), q.as<const T>(), k.as<const T>(), v.as<const T>(),
                  out.as<const T>(), lse.as<const T>(), m, dq.as<T>());
    if (s.batch * s.tk > 0)
      LWRT_LAUNCH(attentionGradKeyKernel<T>, blocksFor(s.batch * s.tk), kThreads, s, p,
                  dout.as<const T>(), q.as<const T>(), k.as<const T>(), v.as<const T>(),
                  out.as<const T>(), lse.as<const T>(), m, dk.as<T>(), dv.as<T>());
    return true;
  });
}

} // namespace lwrt::cuda
