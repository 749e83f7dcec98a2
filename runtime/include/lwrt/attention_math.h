// lwrt/attention_math.h - the formulas of scaled dot-product attention
// defines: AttentionParams, kAttentionMaxLead, kAttentionMaxWidth,
//   AttentionShape, makeAttentionShape, attentionRow, attentionRowDelta,
//   attentionStoreRow, attentionStoreQueryRow, attentionStoreKeyRow,
//   attentionScoreGradOf, attentionScoreGrad, attentionGradQueryRow,
//   attentionGradKeyRow
//
// The attention op (ir/AttentionOps.cpp): softmax(scale * q k^T + mask,
// with keys after the query masked when causal) v, one query row at a
// time, and its gradient one query row (dq) or one key row (dk, dv) at a
// time. Nothing of size Tq x Tk need be stored: a row recomputes its
// scores, or reads those its caller kept (the CPU kernels keep a row's
// scores, or a batch entry's weights and score gradients, each computed
// once by these same functions).
// The reference interpreter (interp/AttentionOps.cpp) and the CPU and CUDA
// kernels (runtime/cpu/AttentionKernels.cpp, runtime/cuda/AttentionKernels.cu)
// call these functions, so each row sums the same terms in the same order,
// in double.
//
// Header-only; under nvcc it compiles for the host and the device.
#pragma once

#include "host_device.h"

#include <math.h>
#include <stdint.h>

namespace lwrt {

/// attention and attention_grad: the scores' factor and whether keys after
/// the query (j > i) are masked.
struct AttentionParams {
  double scale = 1.0;
  int64_t causal = 0;
};

/// The most leading (batch, heads) dims, and the widest row (D or Dv) a
/// kernel's scratch holds.
constexpr int kAttentionMaxLead = 6;
constexpr int64_t kAttentionMaxWidth = 1024;

/// q [lead..., tq, d], k [lead..., tk, d], v [lead..., tk, dv] and the
/// mask's strides: per leading dim (0 where the mask is broadcast), per
/// query row and per key. Plain data: a CUDA kernel takes it by value.
struct AttentionShape {
  int64_t batch = 1, tq = 0, tk = 0, d = 0, dv = 0;
  int lead = 0;
  int64_t leadDims[kAttentionMaxLead] = {};
  int64_t maskLead[kAttentionMaxLead] = {};
  int64_t maskRow = 0, maskCol = 0;
  bool hasMask = false;

  /// The mask's offset of batch entry b (its leading coordinates).
  LWRT_HOST_DEVICE int64_t maskBase(int64_t b) const {
    int64_t off = 0;
    for (int a = lead - 1; a >= 0; --a) {
      off += (b % leadDims[a]) * maskLead[a];
      b /= leadDims[a];
    }
    return off;
  }
  LWRT_HOST_DEVICE bool masked(int64_t i, int64_t j, int64_t causal) const {
    return causal != 0 && j > i;
  }
};

/// The shape of an attention of these operand shapes (mask: maskRank < 0
/// for none), or false when they do not fit together.
inline bool makeAttentionShape(int rank, const int64_t* q, const int64_t* k, const int64_t* v,
                               int maskRank, const int64_t* mask, AttentionShape& s) {
  if (rank < 2 || rank - 2 > kAttentionMaxLead)
    return false;
  s.lead = rank - 2;
  s.batch = 1;
  for (int a = 0; a < s.lead; ++a) {
    if (k[a] != q[a] || v[a] != q[a])
      return false;
    s.leadDims[a] = q[a];
    s.batch *= q[a];
  }
  s.tq = q[rank - 2];
  s.d = q[rank - 1];
  s.tk = k[rank - 2];
  s.dv = v[rank - 1];
  if (k[rank - 1] != s.d || v[rank - 2] != s.tk)
    return false;
  s.hasMask = maskRank >= 0;
  if (!s.hasMask)
    return true;
  if (maskRank > rank)
    return false;
  // Strides of the mask aligned to [lead..., tq, tk] from the right.
  int64_t stride = 1;
  for (int a = rank - 1; a >= 0; --a) {
    int m = a - (rank - maskRank);
    int64_t full = a == rank - 1 ? s.tk : a == rank - 2 ? s.tq : q[a];
    int64_t st = 0;
    if (m >= 0) {
      if (mask[m] != 1 && mask[m] != full)
        return false;
      st = mask[m] == 1 ? 0 : stride;
      stride *= mask[m];
    }
    if (a == rank - 1)
      s.maskCol = st;
    else if (a == rank - 2)
      s.maskRow = st;
    else
      s.maskLead[a] = st;
  }
  return true;
}

namespace attention_detail {

/// The score of q_i . k_j = `dot` (summed from 0 over c = 0.. in order, in
/// double): scale * dot + mask_ij.
template <typename M>
LWRT_HOST_DEVICE double scoreOfDot(const AttentionShape& s, double scale, double dot, const M* mask,
                                   int64_t maskBase, int64_t i, int64_t j) {
  double sc = scale * dot;
  if (mask)
    sc += static_cast<double>(mask[maskBase + i * s.maskRow + j * s.maskCol]);
  return sc;
}

/// scale * q_i . k_j + mask_ij, of batch entry b (pointers at its rows).
template <typename Q, typename M>
LWRT_HOST_DEVICE double score(const AttentionShape& s, double scale, const Q* qi, const Q* kj,
                              const M* mask, int64_t maskBase, int64_t i, int64_t j) {
  double dot = 0;
  for (int64_t c = 0; c < s.d; ++c)
    dot += static_cast<double>(qi[c]) * static_cast<double>(kj[c]);
  return scoreOfDot(s, scale, dot, mask, maskBase, i, j);
}

} // namespace attention_detail

/// Writes query row i's out = acc / l and lse = m + log(l) (the row's
/// weighted sum of values, its weights' sum and their maximum score).
template <typename T, typename L>
LWRT_HOST_DEVICE void attentionStoreRow(const AttentionShape& s, T* out, L* lse, int64_t b,
                                        int64_t i, const double* acc, double m, double l) {
  T* oi = out + (b * s.tq + i) * s.dv;
  for (int64_t c = 0; c < s.dv; ++c)
    oi[c] = static_cast<T>(acc[c] / l);
  lse[b * s.tq + i] = static_cast<L>(m + log(l));
}

/// Writes query row i's dq = scale * acc.
template <typename T>
LWRT_HOST_DEVICE void attentionStoreQueryRow(const AttentionShape& s, const AttentionParams& p,
                                             T* dq, int64_t b, int64_t i, const double* acc) {
  T* dqi = dq + (b * s.tq + i) * s.d;
  for (int64_t c = 0; c < s.d; ++c)
    dqi[c] = static_cast<T>(p.scale * acc[c]);
}

/// Writes key row j's dk = scale * ak and dv = av.
template <typename T>
LWRT_HOST_DEVICE void attentionStoreKeyRow(const AttentionShape& s, const AttentionParams& p, T* dk,
                                           T* dv, int64_t b, int64_t j, const double* ak,
                                           const double* av) {
  T* dkj = dk + (b * s.tk + j) * s.d;
  T* dvj = dv + (b * s.tk + j) * s.dv;
  for (int64_t c = 0; c < s.d; ++c)
    dkj[c] = static_cast<T>(p.scale * ak[c]);
  for (int64_t c = 0; c < s.dv; ++c)
    dvj[c] = static_cast<T>(av[c]);
}

/// Query row i of batch entry b: out[b, i, :] and lse[b, i] (the log of
/// the softmax's denominator, max included). `acc` holds dv doubles.
/// T: the element type, L: lse's; a fully masked row gives NaN, as
/// softmax over -inf does. `scores`, when given (tk doubles), keeps the
/// row's scores, each computed once instead of twice: the same values.
template <typename T, typename L>
LWRT_HOST_DEVICE void attentionRow(const AttentionShape& s, const AttentionParams& p, const T* q,
                                   const T* k, const T* v, const T* mask, T* out, L* lse, int64_t b,
                                   int64_t i, double* acc, double* scores = nullptr) {
  using attention_detail::score;
  const T* qi = q + (b * s.tq + i) * s.d;
  const T* kb = k + b * s.tk * s.d;
  const T* vb = v + b * s.tk * s.dv;
  int64_t mb = mask ? s.maskBase(b) : 0;
  double m = -INFINITY;
  for (int64_t j = 0; j < s.tk; ++j)
    if (!s.masked(i, j, p.causal)) {
      double sc = score(s, p.scale, qi, kb + j * s.d, mask, mb, i, j);
      if (scores)
        scores[j] = sc;
      m = sc > m ? sc : m;
    }
  for (int64_t c = 0; c < s.dv; ++c)
    acc[c] = 0;
  double l = 0;
  for (int64_t j = 0; j < s.tk; ++j) {
    if (s.masked(i, j, p.causal))
      continue;
    double e = exp((scores ? scores[j] : score(s, p.scale, qi, kb + j * s.d, mask, mb, i, j)) - m);
    l += e;
    for (int64_t c = 0; c < s.dv; ++c)
      acc[c] += e * static_cast<double>(vb[j * s.dv + c]);
  }
  attentionStoreRow(s, out, lse, b, i, acc, m, l);
}

/// dout_i . out_i of query row i of batch entry b: the term every score
/// gradient of the row subtracts.
template <typename T>
LWRT_HOST_DEVICE double attentionRowDelta(const AttentionShape& s, const T* dout, const T* out,
                                          int64_t b, int64_t i) {
  const T* di = dout + (b * s.tq + i) * s.dv;
  const T* oi = out + (b * s.tq + i) * s.dv;
  double delta = 0;
  for (int64_t c = 0; c < s.dv; ++c)
    delta += static_cast<double>(di[c]) * static_cast<double>(oi[c]);
  return delta;
}

/// attentionScoreGrad from the score S_ij, dp = dout_i . v_j (summed from
/// 0 over c = 0.. in order, in double), lse_i and delta_i.
inline LWRT_HOST_DEVICE void attentionScoreGradOf(double score, double dp, double lse, double delta,
                                                  double& prob, double& dscore) {
  prob = exp(score - lse);
  dscore = prob * (dp - delta);
}

/// The softmax's weight P_ij and the gradient of the score, dS_ij =
/// P_ij (dout_i . v_j - delta_i), delta_i = attentionRowDelta(b, i).
template <typename T, typename L>
LWRT_HOST_DEVICE void attentionScoreGrad(const AttentionShape& s, const AttentionParams& p,
                                         const T* dout, const T* q, const T* k, const T* v,
                                         const L* lse, const T* mask, int64_t b, int64_t i,
                                         int64_t j, double delta, double& prob, double& dscore) {
  using attention_detail::score;
  const T* qi = q + (b * s.tq + i) * s.d;
  const T* kj = k + (b * s.tk + j) * s.d;
  const T* vj = v + (b * s.tk + j) * s.dv;
  const T* di = dout + (b * s.tq + i) * s.dv;
  int64_t mb = mask ? s.maskBase(b) : 0;
  double dp = 0;
  for (int64_t c = 0; c < s.dv; ++c)
    dp += static_cast<double>(di[c]) * static_cast<double>(vj[c]);
  attentionScoreGradOf(score(s, p.scale, qi, kj, mask, mb, i, j), dp,
                       static_cast<double>(lse[b * s.tq + i]), delta, prob, dscore);
}

/// dq[b, i, :] = scale * sum_j dS_ij k_j. `acc` holds d doubles. `dscores`,
/// when given, is row i's dS_i0.. (as attentionScoreGrad computes them),
/// read instead of computed.
template <typename T, typename L>
LWRT_HOST_DEVICE void
attentionGradQueryRow(const AttentionShape& s, const AttentionParams& p, const T* dout, const T* q,
                      const T* k, const T* v, const T* out, const L* lse, const T* mask, T* dq,
                      int64_t b, int64_t i, double* acc, const double* dscores = nullptr) {
  for (int64_t c = 0; c < s.d; ++c)
    acc[c] = 0;
  const double delta = dscores ? 0 : attentionRowDelta(s, dout, out, b, i);
  for (int64_t j = 0; j < s.tk; ++j) {
    if (s.masked(i, j, p.causal))
      continue;
    double prob, ds;
    if (dscores)
      ds = dscores[j];
    else
      attentionScoreGrad(s, p, dout, q, k, v, lse, mask, b, i, j, delta, prob, ds);
    const T* kj = k + (b * s.tk + j) * s.d;
    for (int64_t c = 0; c < s.d; ++c)
      acc[c] += ds * static_cast<double>(kj[c]);
  }
  attentionStoreQueryRow(s, p, dq, b, i, acc);
}

/// dk[b, j, :] = scale * sum_i dS_ij q_i and dv[b, j, :] = sum_i P_ij
/// dout_i. `acc` holds d + dv doubles. `probs` and `dscores`, when given,
/// hold P_ij and dS_ij of the batch entry at [i * stride + j], read instead
/// of computed.
template <typename T, typename L>
LWRT_HOST_DEVICE void
attentionGradKeyRow(const AttentionShape& s, const AttentionParams& p, const T* dout, const T* q,
                    const T* k, const T* v, const T* out, const L* lse, const T* mask, T* dk, T* dv,
                    int64_t b, int64_t j, double* acc, const double* probs = nullptr,
                    const double* dscores = nullptr, int64_t stride = 0) {
  double* ak = acc;
  double* av = acc + s.d;
  for (int64_t c = 0; c < s.d; ++c)
    ak[c] = 0;
  for (int64_t c = 0; c < s.dv; ++c)
    av[c] = 0;
  for (int64_t i = 0; i < s.tq; ++i) {
    if (s.masked(i, j, p.causal))
      continue;
    double prob, ds;
    if (probs) {
      prob = probs[i * stride + j];
      ds = dscores[i * stride + j];
    } else {
      attentionScoreGrad(s, p, dout, q, k, v, lse, mask, b, i, j,
                         attentionRowDelta(s, dout, out, b, i), prob, ds);
    }
    const T* qi = q + (b * s.tq + i) * s.d;
    const T* di = dout + (b * s.tq + i) * s.dv;
    for (int64_t c = 0; c < s.d; ++c)
      ak[c] += ds * static_cast<double>(qi[c]);
    for (int64_t c = 0; c < s.dv; ++c)
      av[c] += prob * static_cast<double>(di[c]);
  }
  attentionStoreKeyRow(s, p, dk, dv, b, j, ak, av);
}

} // namespace lwrt
