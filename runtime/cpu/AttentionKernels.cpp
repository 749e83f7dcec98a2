//===- AttentionKernels.cpp - attention and its gradient on the CPU -------===//
//
// The kernels of lwrt/cpu_attention.h: the rows of every batch entry
// (batch and heads flattened) on the pool, each with the formulas of
// lwrt/attention_math.h that the interpreter and the CUDA kernels run. A
// row's sums run in one order in double, so the bits do not depend on the
// number of threads.
//
//===----------------------------------------------------------------------===//
#include "Common.h"
#include "Parallel.h"
#include "lwrt/cpu_attention.h"
#include "lwrt/kernel_checks.h"

#include <vector>

namespace lwrt::cpu {

namespace {

/// Rows per task of the pool.
constexpr int64_t kGrain = 4;

/// Whether the CPU kernels take heads of these widths.
bool fits(const AttentionShape& s) {
  return s.d <= kAttentionMaxWidth && s.dv <= kAttentionMaxWidth;
}

} // namespace

bool attention(const TensorView& q, const TensorView& k, const TensorView& v,
               const TensorView* mask, const TensorView& out, const TensorView& lse,
               const AttentionParams& p) {
  AttentionShape s;
  if (!attentionOperands(q, k, v, mask, out, lse, s) || !fits(s))
    return false;
  return dispatchFloat(q.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* m = mask ? mask->as<const T>() : nullptr;
    detail::parallelFor(s.batch * s.tq, kGrain, [&](int64_t first, int64_t last) {
      std::vector<double> acc(static_cast<size_t>(s.dv));
      for (int64_t r = first; r < last; ++r)
        attentionRow(s, p, q.as<const T>(), k.as<const T>(), v.as<const T>(), m, out.as<T>(),
                     lse.as<T>(), r / s.tq, r % s.tq, acc.data());
    });
    return true;
  });
}

bool attentionGrad(const TensorView& dout, const TensorView& q, const TensorView& k,
                   const TensorView& v, const TensorView& out, const TensorView& lse,
                   const TensorView* mask, const TensorView& dq, const TensorView& dk,
                   const TensorView& dv, const AttentionParams& p) {
  AttentionShape s;
  if (!attentionGradOperands(dout, q, k, v, out, lse, mask, dq, dk, dv, s) || !fits(s))
    return false;
  return dispatchFloat(q.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* m = mask ? mask->as<const T>() : nullptr;
    const T *g = dout.as<const T>(), *qq = q.as<const T>(), *kk = k.as<const T>(),
            *vv = v.as<const T>(), *o = out.as<const T>(), *l = lse.as<const T>();
    detail::parallelFor(s.batch * s.tq, kGrain, [&](int64_t first, int64_t last) {
      std::vector<double> acc(static_cast<size_t>(s.d));
      for (int64_t r = first; r < last; ++r)
        attentionGradQueryRow(s, p, g, qq, kk, vv, o, l, m, dq.as<T>(), r / s.tq, r % s.tq,
                              acc.data());
    });
    detail::parallelFor(s.batch * s.tk, kGrain, [&](int64_t first, int64_t last) {
      std::vector<double> acc(static_cast<size_t>(s.d + s.dv));
      for (int64_t r = first; r < last; ++r)
        attentionGradKeyRow(s, p, g, qq, kk, vv, o, l, m, dk.as<T>(), dv.as<T>(), r / s.tk,
                            r % s.tk, acc.data());
    });
    return true;
  });
}

} // namespace lwrt::cpu
