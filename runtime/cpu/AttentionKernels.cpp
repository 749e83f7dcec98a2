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
// The dot products of a row (q_i . k_j for every key, and dout_i . v_j in
// the gradient) are summed for many keys at once: K (and V) of the batch
// entry transposed to doubles once, each key's sum then runs over c in
// order from 0 as attention_detail::score sums it, one key a lane of the
// vector unit, not one dependent add after another. The same sums in the
// same order: the same bits as the row functions (RuntimeAttentionKernelTest).
//
//===----------------------------------------------------------------------===//
#include "Common.h"
#include "Parallel.h"
#include "lwrt/cpu_attention.h"
#include "lwrt/kernel_checks.h"

#include <algorithm>
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

/// Rows of one batch entry transposed to doubles: t[c * rows + j] =
/// x[j, c] of x [rows, width] (K or V of the entry).
template <typename T>
void transposeEntry(const T* x, int64_t rows, int64_t width, std::vector<double>& t) {
  t.resize(static_cast<size_t>(rows * width));
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t c = 0; c < width; ++c)
      t[static_cast<size_t>(c * rows + j)] = static_cast<double>(x[j * width + c]);
}

/// out[c] = sum over r < n of w[r * wStride] * x[r * xStride + c], for
/// c < width, in double, each sum from 0 over r in order (as the row
/// functions' accumulators sum theirs), eight columns at a time held in
/// registers across the rows, not stored and loaded again at each row.
template <typename T>
void weightedRowSum(const double* w, int64_t wStride, const T* x, int64_t xStride, int64_t n,
                    int64_t width, double* out) {
  constexpr int kCols = 8;
  int64_t c0 = 0;
  for (; c0 + kCols <= width; c0 += kCols) {
    double a[kCols] = {};
    for (int64_t r = 0; r < n; ++r) {
      const double wr = w[r * wStride];
      const T* xr = x + r * xStride + c0;
      for (int u = 0; u < kCols; ++u)
        a[u] += wr * static_cast<double>(xr[u]);
    }
    for (int u = 0; u < kCols; ++u)
      out[c0 + u] = a[u];
  }
  for (int64_t c = c0; c < width; ++c) {
    double a = 0;
    for (int64_t r = 0; r < n; ++r)
      a += w[r * wStride] * static_cast<double>(x[r * xStride + c]);
    out[c] = a;
  }
}

/// dots[j] = a . x_j for j < n, of `a` (width values) and x transposed
/// (xt, `rows` a column): each sum from 0 over c in order, as
/// attention_detail::score and attentionScoreGrad sum theirs (a the
/// weights, the columns of xt the rows of weightedRowSum). `ad` holds
/// `width` doubles of scratch.
template <typename T>
void rowDots(const T* a, const double* xt, int64_t width, int64_t rows, int64_t n, double* dots,
             double* ad) {
  for (int64_t c = 0; c < width; ++c)
    ad[c] = static_cast<double>(a[c]);
  weightedRowSum(ad, 1, xt, rows, width, n, dots);
}

/// The keys query row i sees: all, or those up to i when causal.
int64_t keysSeen(const AttentionShape& s, const AttentionParams& p, int64_t i) {
  return p.causal != 0 ? std::min(s.tk, i + 1) : s.tk;
}

/// Scratch of one batch entry's gradient.
struct GradScratch {
  std::vector<double> prob, dscore, acc, kt, vt, dots, dps, row;
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
  w.dots.resize(static_cast<size_t>(s.tk));
  w.dps.resize(static_cast<size_t>(s.tk));
  w.row.resize(static_cast<size_t>(std::max(s.d, s.dv)));
  transposeEntry(k + b * s.tk * s.d, s.tk, s.d, w.kt);
  transposeEntry(v + b * s.tk * s.dv, s.tk, s.dv, w.vt);
  const int64_t mb = mask ? s.maskBase(b) : 0;
  for (int64_t i = 0; i < s.tq; ++i) {
    // attentionScoreGrad of each key the row sees, its two sums for all
    // keys at once.
    const double delta = attentionRowDelta(s, dout, out, b, i);
    const int64_t n = keysSeen(s, p, i);
    rowDots(q + (b * s.tq + i) * s.d, w.kt.data(), s.d, s.tk, n, w.dots.data(), w.row.data());
    rowDots(dout + (b * s.tq + i) * s.dv, w.vt.data(), s.dv, s.tk, n, w.dps.data(), w.row.data());
    const double l = static_cast<double>(lse[b * s.tq + i]);
    for (int64_t j = 0; j < n; ++j)
      attentionScoreGradOf(attention_detail::scoreOfDot(s, p.scale, w.dots[j], mask, mb, i, j),
                           w.dps[j], l, delta, w.prob[i * s.tk + j], w.dscore[i * s.tk + j]);
  }
  // attentionGradQueryRow and attentionGradKeyRow of every row, from the
  // weights and score gradients above: the same sums (each over the keys,
  // or the queries, the row sees, in order), tiled.
  const T* qb = q + b * s.tq * s.d;
  const T* gb = dout + b * s.tq * s.dv;
  for (int64_t i = 0; i < s.tq; ++i) {
    weightedRowSum(w.dscore.data() + i * s.tk, 1, k + b * s.tk * s.d, s.d, keysSeen(s, p, i), s.d,
                   w.acc.data());
    attentionStoreQueryRow(s, p, dq, b, i, w.acc.data());
  }
  for (int64_t j = 0; j < s.tk; ++j) {
    // The queries that see key j: all, or those from j on when causal.
    const int64_t i0 = p.causal != 0 ? std::min(j, s.tq) : 0, n = s.tq - i0;
    double* ak = w.acc.data();
    double* av = w.acc.data() + s.d;
    weightedRowSum(w.dscore.data() + i0 * s.tk + j, s.tk, qb + i0 * s.d, s.d, n, s.d, ak);
    weightedRowSum(w.prob.data() + i0 * s.tk + j, s.tk, gb + i0 * s.dv, s.dv, n, s.dv, av);
    attentionStoreKeyRow(s, p, dk, dv, b, j, ak, av);
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
    const T *qq = q.as<const T>(), *kk = k.as<const T>(), *vv = v.as<const T>();
    T *o = out.as<T>(), *ls = lse.as<T>();
    // Whole batch entries a task where there are enough of them (each
    // transposes its K once), else a few rows.
    const int64_t grain = s.batch >= detail::poolThreads() ? s.tq : kGrain;
    detail::parallelFor(s.batch * s.tq, grain, [&](int64_t first, int64_t last) {
      std::vector<double> acc(static_cast<size_t>(s.dv)), sc(static_cast<size_t>(s.tk)), kt,
          row(static_cast<size_t>(s.d));
      int64_t transposed = -1; // the batch entry kt holds
      for (int64_t r = first; r < last; ++r) {
        const int64_t b = r / s.tq, i = r % s.tq;
        if (b != transposed) {
          transposeEntry(kk + b * s.tk * s.d, s.tk, s.d, kt);
          transposed = b;
        }
        const int64_t n = keysSeen(s, p, i), mb = m ? s.maskBase(b) : 0;
        rowDots(qq + (b * s.tq + i) * s.d, kt.data(), s.d, s.tk, n, sc.data(), row.data());
        // attentionRow of the row from its scores: the maximum, the
        // weights e_j and their sum l in order, then out = sum_j e_j v_j / l
        // (weightedRowSum: each column's sum over j in order).
        double mx = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          sc[j] = attention_detail::scoreOfDot(s, p.scale, sc[j], m, mb, i, j);
          mx = sc[j] > mx ? sc[j] : mx;
        }
        double l = 0;
        for (int64_t j = 0; j < n; ++j) {
          sc[j] = exp(sc[j] - mx);
          l += sc[j];
        }
        weightedRowSum(sc.data(), 1, vv + b * s.tk * s.dv, s.dv, n, s.dv, acc.data());
        attentionStoreRow(s, o, ls, b, i, acc.data(), mx, l);
      }
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
