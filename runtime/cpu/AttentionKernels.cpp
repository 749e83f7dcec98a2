//===- AttentionKernels.cpp - attention and its gradient on the CPU -------===//
//
// The kernels of lwrt/cpu_attention.h: the rows of every batch entry
// (batch and heads flattened) on the pool, each with the formulas of
// lwrt/attention_math.h that the interpreter and the CUDA kernels run. A
// row's sums run in one order in double, so the bits do not depend on the
// number of threads. The CPU computes each score once where those
// functions compute it again: the forward keeps a query row's scores, and
// the gradient, a batch entry at a time, keeps the entry's softmax weights
// and score gradients (while they fit kMaxPairs) and sums them into dq, dk
// and dv in the functions' orders: the same terms, the same bits, about
// half the work.
//
//===----------------------------------------------------------------------===//
#include "Common.h"
#include "Parallel.h"
#include "lwrt/cpu_attention.h"
#include "lwrt/kernel_checks.h"

#include <cmath>
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

/// attentionRow with each score computed once (`sc`: tk doubles).
template <typename T>
void attentionRowOnce(const AttentionShape& s, const AttentionParams& p, const T* q, const T* k,
                      const T* v, const T* mask, T* out, T* lse, int64_t b, int64_t i, double* acc,
                      double* sc) {
  using attention_detail::score;
  const T* qi = q + (b * s.tq + i) * s.d;
  const T* kb = k + b * s.tk * s.d;
  const T* vb = v + b * s.tk * s.dv;
  const int64_t mb = mask ? s.maskBase(b) : 0;
  double m = -INFINITY;
  for (int64_t j = 0; j < s.tk; ++j)
    if (!s.masked(i, j, p.causal)) {
      sc[j] = score(s, p.scale, qi, kb + j * s.d, mask, mb, i, j);
      m = sc[j] > m ? sc[j] : m;
    }
  for (int64_t c = 0; c < s.dv; ++c)
    acc[c] = 0;
  double l = 0;
  for (int64_t j = 0; j < s.tk; ++j) {
    if (s.masked(i, j, p.causal))
      continue;
    const double e = exp(sc[j] - m);
    l += e;
    const T* vj = vb + j * s.dv;
    for (int64_t c = 0; c < s.dv; ++c)
      acc[c] += e * static_cast<double>(vj[c]);
  }
  T* oi = out + (b * s.tq + i) * s.dv;
  for (int64_t c = 0; c < s.dv; ++c)
    oi[c] = static_cast<T>(acc[c] / l);
  lse[b * s.tq + i] = static_cast<T>(m + log(l));
}

/// Scratch of one batch entry's gradient.
struct GradScratch {
  std::vector<double> prob, dscore, delta, acc;
};

/// attentionGradQueryRow and attentionGradKeyRow of every row of batch
/// entry b, each P_ij and dS_ij computed once (scoreGrad's terms: delta_i
/// summed alone in the same order as beside dp) and summed in their orders.
template <typename T>
void attentionGradEntry(const AttentionShape& s, const AttentionParams& p, const T* dout,
                        const T* q, const T* k, const T* v, const T* out, const T* lse,
                        const T* mask, T* dq, T* dk, T* dv, int64_t b, GradScratch& w) {
  using attention_detail::score;
  const int64_t mb = mask ? s.maskBase(b) : 0;
  w.prob.resize(static_cast<size_t>(s.tq * s.tk));
  w.dscore.resize(static_cast<size_t>(s.tq * s.tk));
  w.delta.resize(static_cast<size_t>(s.tq));
  w.acc.resize(static_cast<size_t>(s.d + s.dv));
  for (int64_t i = 0; i < s.tq; ++i) {
    const T* di = dout + (b * s.tq + i) * s.dv;
    const T* oi = out + (b * s.tq + i) * s.dv;
    double delta = 0;
    for (int64_t c = 0; c < s.dv; ++c)
      delta += static_cast<double>(di[c]) * static_cast<double>(oi[c]);
    w.delta[i] = delta;
    const T* qi = q + (b * s.tq + i) * s.d;
    const double li = static_cast<double>(lse[b * s.tq + i]);
    for (int64_t j = 0; j < s.tk; ++j) {
      if (s.masked(i, j, p.causal))
        continue;
      const T* kj = k + (b * s.tk + j) * s.d;
      const T* vj = v + (b * s.tk + j) * s.dv;
      const double prob = exp(score(s, p.scale, qi, kj, mask, mb, i, j) - li);
      double dp = 0;
      for (int64_t c = 0; c < s.dv; ++c)
        dp += static_cast<double>(di[c]) * static_cast<double>(vj[c]);
      w.prob[i * s.tk + j] = prob;
      w.dscore[i * s.tk + j] = prob * (dp - delta);
    }
  }
  double* acc = w.acc.data();
  for (int64_t i = 0; i < s.tq; ++i) { // dq_i = scale sum_j dS_ij k_j
    for (int64_t c = 0; c < s.d; ++c)
      acc[c] = 0;
    for (int64_t j = 0; j < s.tk; ++j) {
      if (s.masked(i, j, p.causal))
        continue;
      const double ds = w.dscore[i * s.tk + j];
      const T* kj = k + (b * s.tk + j) * s.d;
      for (int64_t c = 0; c < s.d; ++c)
        acc[c] += ds * static_cast<double>(kj[c]);
    }
    T* dqi = dq + (b * s.tq + i) * s.d;
    for (int64_t c = 0; c < s.d; ++c)
      dqi[c] = static_cast<T>(p.scale * acc[c]);
  }
  double* ak = acc;
  double* av = acc + s.d;
  for (int64_t j = 0; j < s.tk; ++j) { // dk_j = scale sum_i dS_ij q_i, dv_j = sum_i P_ij dout_i
    for (int64_t c = 0; c < s.d; ++c)
      ak[c] = 0;
    for (int64_t c = 0; c < s.dv; ++c)
      av[c] = 0;
    for (int64_t i = 0; i < s.tq; ++i) {
      if (s.masked(i, j, p.causal))
        continue;
      const double ds = w.dscore[i * s.tk + j], prob = w.prob[i * s.tk + j];
      const T* qi = q + (b * s.tq + i) * s.d;
      const T* di = dout + (b * s.tq + i) * s.dv;
      for (int64_t c = 0; c < s.d; ++c)
        ak[c] += ds * static_cast<double>(qi[c]);
      for (int64_t c = 0; c < s.dv; ++c)
        av[c] += prob * static_cast<double>(di[c]);
    }
    T* dkj = dk + (b * s.tk + j) * s.d;
    T* dvj = dv + (b * s.tk + j) * s.dv;
    for (int64_t c = 0; c < s.d; ++c)
      dkj[c] = static_cast<T>(p.scale * ak[c]);
    for (int64_t c = 0; c < s.dv; ++c)
      dvj[c] = static_cast<T>(av[c]);
  }
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
        attentionRowOnce(s, p, q.as<const T>(), k.as<const T>(), v.as<const T>(), m, out.as<T>(),
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
