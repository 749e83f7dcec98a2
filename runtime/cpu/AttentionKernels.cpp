//===- AttentionKernels.cpp - attention and its gradient on the CPU -------===//
//
// The kernels of lwrt/cpu_attention.h: the rows of every batch entry
// (batch and heads flattened) on the pool, each with the formulas of
// lwrt/attention_math.h that the interpreter and the CUDA kernels run. A
// row's sums run in one order in double, so the bits do not depend on the
// number of threads. The CPU computes each score once where the row
// functions alone compute it again: the forward keeps a query row's
// scores, and the gradient, a batch entry at a time, keeps the entry's
// softmax weights and score gradients (while they fit kMaxPairs) and hands
// them to the row functions: the same terms, the same bits, about half
// the work.
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

/// The most (query, key) pairs of a batch entry whose weights and score
/// gradients the gradient keeps (two doubles each: 16 MiB a thread).
constexpr int64_t kMaxPairs = int64_t(1) << 20;

/// Scratch of one batch entry's gradient.
struct GradScratch {
  std::vector<double> prob, dscore, acc;
};

/// attentionGradQueryRow and attentionGradKeyRow of every row of batch
/// entry b, with its P_ij and dS_ij computed once (attentionScoreGrad) and
/// handed to both.
template <typename T>
void attentionGradEntry(const AttentionShape& s, const AttentionParams& p, const T* dout,
                        const T* q, const T* k, const T* v, const T* out, const T* lse,
                        const T* mask, T* dq, T* dk, T* dv, int64_t b, GradScratch& w) {
  w.prob.resize(static_cast<size_t>(s.tq * s.tk));
  w.dscore.resize(static_cast<size_t>(s.tq * s.tk));
  w.acc.resize(static_cast<size_t>(s.d + s.dv));
  for (int64_t i = 0; i < s.tq; ++i) {
    const double delta = attentionRowDelta(s, dout, out, b, i);
    for (int64_t j = 0; j < s.tk; ++j)
      if (!s.masked(i, j, p.causal))
        attentionScoreGrad(s, p, dout, q, k, v, lse, mask, b, i, j, delta, w.prob[i * s.tk + j],
                           w.dscore[i * s.tk + j]);
  }
  for (int64_t i = 0; i < s.tq; ++i)
    attentionGradQueryRow(s, p, dout, q, k, v, out, lse, mask, dq, b, i, w.acc.data(),
                          w.dscore.data() + i * s.tk);
  for (int64_t j = 0; j < s.tk; ++j)
    attentionGradKeyRow(s, p, dout, q, k, v, out, lse, mask, dk, dv, b, j, w.acc.data(),
                        w.prob.data(), w.dscore.data(), s.tk);
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
      std::vector<double> acc(static_cast<size_t>(s.dv)), sc(static_cast<size_t>(s.tk));
      for (int64_t r = first; r < last; ++r)
        attentionRow(s, p, q.as<const T>(), k.as<const T>(), v.as<const T>(), m, out.as<T>(),
                     lse.as<T>(), r / s.tq, r % s.tq, acc.data(), sc.data());
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
    // A batch entry a task where there are enough of them and their pairs
    // fit; else the rows (fewer entries than threads, long sequences).
    if (s.batch >= detail::poolThreads() && s.tq * s.tk <= kMaxPairs) {
      detail::parallelFor(s.batch, 1, [&](int64_t first, int64_t last) {
        GradScratch w;
        for (int64_t b = first; b < last; ++b)
          attentionGradEntry(s, p, g, qq, kk, vv, o, l, m, dq.as<T>(), dk.as<T>(), dv.as<T>(), b,
                             w);
      });
      return true;
    }
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
