// emu/CudnnConvAlgos.cpp - the emulated cuDNN's convolution algorithms: support, workspace, sums
//
// Each output element is a sum of products over the element's reduction
// terms, gathered in one canonical order: (c, r, s) for the forward, (k, r,
// s) for the backward data, (n, p, q) for the backward filter, where
// padding and the gaps of a stride read zero and are multiplied as a GPU's
// implicit GEMM multiplies them. Each algorithm then sums those terms in
// its own order, so two algorithms give different bits as on a GPU:
//
//   order        sums                                         algorithms
//   Sequential   one accumulator, canonical order             FWD 0, BWD_DATA 1, BWD_FILTER 1
//   Transposed   the two halves of the order swapped          FWD 1, BWD_DATA 5
//                ((r, s) outer, c inner; ...)
//   Blocked      partial sums of fixed blocks, then in turn   FWD 2 (32), FWD 6 and BWD_DATA 4
//                                                             (R*S), BWD_FILTER 5 (P*Q)
//   Pairwise     products summed as a balanced tree (FFT)     FWD 4, BWD_DATA 2, BWD_FILTER 2
//   Lanes        8 interleaved accumulators, then in turn     FWD 5, BWD_DATA 3, BWD_FILTER 6
//                (FFT_TILING); FWD 7: 2 accumulators
//   Shuffled     partial sums of chunks added in an order     BWD_DATA 0 (S), BWD_FILTER 0 (Q),
//                that changes from run to run (atomics)       BWD_FILTER 3 (32)
//
// The Shuffled ones are the algorithms cuDNN documents as non-deterministic
// (BWD_FILTER_ALGO_0 and _3, BWD_DATA_ALGO_0); they report
// CUDNN_NON_DETERMINISTIC, and each run draws a new order.
//
// Support (CUDNN_STATUS_NOT_SUPPORTED otherwise), after cuDNN's tables:
// FWD_ALGO_DIRECT and BWD_FILTER_ALGO_WINOGRAD are never implemented; the
// FFT, Winograd and tiled-FFT algorithms take stride 1, dilation 1, one
// group, pads smaller than the filter, float data (FFT_TILING double too),
// FFT an input of at most 256 x 256 with its padding, WINOGRAD a 3x3
// filter, WINOGRAD_NONFUSED 3x3 or 5x5; half and bfloat16 data run on the
// implicit-GEMM family only (FWD 0 and 1, BWD_DATA 0 and 1, BWD_FILTER 0,
// 1 and 3); every other algorithm takes every configuration.
//
// Workspace (ConvAlgo::workspace): none for FWD 0 and 6, BWD_DATA 0, 1 and 4,
// BWD_FILTER 0 and 1; FWD 1 a table of filter offsets; FWD 2 one image's
// im2col matrix; the FFT and Winograd-nonfused algorithms the transformed
// tensors; BWD_FILTER 3 four partial copies of dw. A call given fewer bytes
// (or a null workspace) than its algorithm needs returns BAD_PARAM; the
// bytes it needs are checked as device memory and overwritten (NaN bytes)
// when it runs, as a real algorithm uses its workspace for scratch.
//
// TF32: every emulated device is an H100 (sm_90). For float data, a math
// type that allows tensor cores (CUDNN_DEFAULT_MATH, CUDNN_TENSOR_OP_MATH
// and _ALLOW_CONVERSION, taken as TF32) makes the tensor-core algorithms
// (FWD 1, 2 and 7, BWD_DATA 1 and 5, BWD_FILTER 1 and 5) round both
// operands to TF32 (10 mantissa bits, to nearest, ties away from zero, as
// cvt.rna.tf32.f32) before multiplying, accumulating in float32;
// CUDNN_FMA_MATH forbids it. The perf results report CUDNN_TENSOR_OP_MATH
// for an algorithm that uses tensor cores, else the descriptor's FMA or
// default math.
#include "CudnnConv.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <vector>

namespace lwemu::dnn {

/// The validated geometry of (x, w, conv, y), or the status cuDNN returns.
cudnnStatus_t convGeometry(const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                           const cudnnConvolutionStruct* cv, const cudnnTensorStruct* y,
                           ConvGeom& g) {
  if (!x->set || !w->set || !cv->set || !y->set)
    return CUDNN_STATUS_BAD_PARAM;
  if (x->type != y->type || x->type != w->type)
    return CUDNN_STATUS_BAD_PARAM;
  const int G = cv->groups;
  if (x->dims[1] != w->c * G || w->k % G != 0 || y->dims[1] != w->k || y->dims[0] != x->dims[0])
    return CUDNN_STATUS_BAD_PARAM;
  const int effR = (w->h - 1) * cv->dilH + 1, effS = (w->w - 1) * cv->dilW + 1;
  const int roomH = x->dims[2] + 2 * cv->padH - effR, roomW = x->dims[3] + 2 * cv->padW - effS;
  if (roomH < 0 || roomW < 0) // the filter is larger than the padded input
    return CUDNN_STATUS_BAD_PARAM;
  if (y->dims[2] != roomH / cv->strideH + 1 || y->dims[3] != roomW / cv->strideW + 1)
    return CUDNN_STATUS_NOT_SUPPORTED; // not cudnnGetConvolution2dForwardOutputDim's size
  // Float data computes in float, double in double, 16-bit data in float
  // (TRUE_HALF_CONFIG, half computed in half, is not emulated).
  const cudnnDataType_t want = x->type == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  if (cv->computeType != want)
    return CUDNN_STATUS_NOT_SUPPORTED;
  g.N = x->dims[0];
  g.C = x->dims[1];
  g.H = x->dims[2];
  g.W = x->dims[3];
  g.K = w->k;
  g.Cg = w->c;
  g.G = G;
  g.Kg = w->k / G;
  g.R = w->h;
  g.S = w->w;
  g.P = y->dims[2];
  g.Q = y->dims[3];
  g.padH = cv->padH;
  g.padW = cv->padW;
  g.strH = cv->strideH;
  g.strW = cv->strideW;
  g.dilH = cv->dilH;
  g.dilW = cv->dilW;
  g.flip = cv->mode == CUDNN_CONVOLUTION;
  std::copy(x->strides, x->strides + 4, g.xs);
  std::copy(y->strides, y->strides + 4, g.ys);
  if (w->format == CUDNN_TENSOR_NCHW) { // KCRS
    g.ws = 1;
    g.wr = g.S;
    g.wc = int64_t{g.R} * g.S;
    g.wk = g.wc * g.Cg;
  } else { // KRSC
    g.wc = 1;
    g.ws = g.Cg;
    g.wr = int64_t{g.S} * g.Cg;
    g.wk = g.wr * g.R;
  }
  g.xElems = extentElems(*x);
  g.yElems = extentElems(*y);
  g.wElems = int64_t{g.K} * g.Cg * g.R * g.S;
  g.type = x->type;
  g.math = cv->math;
  return CUDNN_STATUS_SUCCESS;
}

/// What algorithm `algo` of direction `dir` does on `g` (see the top).
ConvAlgo convAlgo(ConvDir dir, int algo, const ConvGeom& g) {
  ConvAlgo a;
  const bool f32 = g.type == CUDNN_DATA_FLOAT, f64 = g.type == CUDNN_DATA_DOUBLE;
  const bool wide = f32 || f64; // not 16-bit
  const bool unit = g.strH == 1 && g.strW == 1 && g.dilH == 1 && g.dilW == 1 && g.G == 1 &&
                    g.padH < g.R && g.padW < g.S;
  const bool fftFits = g.H + 2 * g.padH <= 256 && g.W + 2 * g.padW <= 256;
  const bool k3 = g.R == 3 && g.S == 3, k5 = g.R == 5 && g.S == 5;
  const size_t e = f64 ? 8 : 4, complex = 2 * e;
  // The FFT algorithms' transformed x, w and y.
  const int64_t Hf = g.H + 2 * g.padH, Wf = g.W + 2 * g.padW;
  const int64_t tensors = int64_t{g.N} * g.C + int64_t{g.K} * g.Cg + int64_t{g.N} * g.K;
  const size_t fftBytes = static_cast<size_t>(tensors * Hf * (Wf / 2 + 1)) * complex;
  const int64_t tiles32 = ((Hf + 31 - g.R) / (33 - g.R)) * ((Wf + 31 - g.S) / (33 - g.S));
  const size_t tiledBytes =
      static_cast<size_t>((int64_t{g.N} * g.C + int64_t{g.N} * g.K) * tiles32 +
                          int64_t{g.K} * g.Cg) *
      32 * 17 * complex;
  const int64_t tiles4 = ((g.P + 3) / 4) * ((g.Q + 3) / 4);
  const size_t winogradBytes =
      static_cast<size_t>((int64_t{g.N} * g.C + int64_t{g.N} * g.K) * tiles4 +
                          int64_t{g.K} * g.Cg) *
      36 * e;
  auto set = [&](bool ok, SumOrder o, int64_t param, bool tc, size_t ws, bool det = true) {
    a.supported = ok;
    a.order = o;
    a.param = param;
    a.tensorCores = tc;
    a.workspace = ws;
    a.deterministic = det;
  };
  const int64_t RS = int64_t{g.R} * g.S, PQ = int64_t{g.P} * g.Q;
  switch (dir) {
  case ConvDir::Fwd:
    switch (algo) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM:
      set(true, SumOrder::Sequential, 0, false, 0);
      break;
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM:
      set(true, SumOrder::Transposed, RS, true, static_cast<size_t>(g.Cg * RS) * sizeof(int));
      break;
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM:
      set(wide, SumOrder::Blocked, 32, true, static_cast<size_t>(g.C * RS * PQ) * e);
      break;
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT:
      break; // not implemented by cuDNN
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT:
      set(f32 && unit && fftFits, SumOrder::Pairwise, 0, false, fftBytes);
      break;
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING:
      set(wide && unit && g.R <= 32 && g.S <= 32, SumOrder::Lanes, 8, false, tiledBytes);
      break;
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD:
      set(f32 && unit && k3, SumOrder::Blocked, RS, false, 0);
      break;
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED:
      set(f32 && unit && (k3 || k5), SumOrder::Lanes, 2, true, winogradBytes);
      break;
    }
    break;
  case ConvDir::BwdData:
    switch (algo) {
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_0:
      set(true, SumOrder::Shuffled, g.S, false, 0, false);
      break;
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1:
      set(true, SumOrder::Sequential, 0, true, 0);
      break;
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT:
      set(f32 && unit && fftFits, SumOrder::Pairwise, 0, false, fftBytes);
      break;
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING:
      set(wide && unit && g.R <= 32 && g.S <= 32, SumOrder::Lanes, 8, false, tiledBytes);
      break;
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD:
      set(f32 && unit && k3, SumOrder::Blocked, RS, false, 0);
      break;
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED:
      set(f32 && unit && (k3 || k5), SumOrder::Transposed, RS, true, winogradBytes);
      break;
    }
    break;
  case ConvDir::BwdFilter:
    switch (algo) {
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0:
      set(true, SumOrder::Shuffled, g.Q, false, 0, false);
      break;
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1:
      set(true, SumOrder::Sequential, 0, true, 0);
      break;
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT:
      set(f32 && unit && fftFits, SumOrder::Pairwise, 0, false, fftBytes);
      break;
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3:
      set(true, SumOrder::Shuffled, 32, false, static_cast<size_t>(g.wElems) * 4 * e, false);
      break;
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD:
      break; // not implemented by cuDNN
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED:
      set(f32 && unit && (k3 || k5), SumOrder::Blocked, PQ, true, winogradBytes);
      break;
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING:
      set(wide && unit && g.R <= 32 && g.S <= 32, SumOrder::Lanes, 8, false, tiledBytes);
      break;
    }
    break;
  }
  return a;
}

namespace {

/// Whether the algorithm rounds its operands to TF32 (see the top).
bool usesTf32(const ConvAlgo& a, const ConvGeom& g) {
  return a.tensorCores && g.type == CUDNN_DATA_FLOAT && g.math != CUDNN_FMA_MATH;
}

/// f rounded to TF32: 10 mantissa bits, to nearest, ties away from zero.
float toTf32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) != 0x7f800000u) { // finite: a carry into the exponent is right
    u += 0x1000u;
    u &= 0xffffe000u;
  }
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// Scratch of one reduction: Pairwise's products, Shuffled's partial sums
/// and their order.
template <typename A> struct Scratch {
  std::vector<A> prod, part;
  std::vector<int64_t> perm;
};

/// The sum of a[i] * b[i] over L terms in the algorithm's order.
template <typename A>
A reduce(const A* a, const A* b, int64_t L, const ConvAlgo& info, uint64_t seed,
         Scratch<A>& scratch) {
  A acc = 0;
  switch (info.order) {
  case SumOrder::Sequential:
    for (int64_t i = 0; i < L; ++i)
      acc += a[i] * b[i];
    return acc;
  case SumOrder::Transposed: {
    const int64_t inner = info.param, outer = L / inner;
    for (int64_t j = 0; j < inner; ++j)
      for (int64_t i = 0; i < outer; ++i)
        acc += a[i * inner + j] * b[i * inner + j];
    return acc;
  }
  case SumOrder::Blocked:
    for (int64_t start = 0; start < L; start += info.param) {
      A partial = 0;
      for (int64_t i = start; i < std::min(L, start + info.param); ++i)
        partial += a[i] * b[i];
      acc += partial;
    }
    return acc;
  case SumOrder::Pairwise: {
    std::vector<A>& t = scratch.prod;
    t.resize(static_cast<size_t>(L));
    for (int64_t i = 0; i < L; ++i)
      t[static_cast<size_t>(i)] = a[i] * b[i];
    for (size_t n = t.size(); n > 1;) { // one level of the tree: neighbours added in place
      const size_t half = n / 2;
      for (size_t i = 0; i < half; ++i)
        t[i] = t[2 * i] + t[2 * i + 1];
      if (n % 2) // the odd one out moves up a level unchanged
        t[half] = t[n - 1];
      n = half + n % 2;
    }
    return L > 0 ? t[0] : A(0);
  }
  case SumOrder::Lanes: {
    A lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const int64_t n = info.param;
    for (int64_t i = 0; i < L; ++i)
      lanes[i % n] += a[i] * b[i];
    for (int64_t l = 0; l < n; ++l)
      acc += lanes[l];
    return acc;
  }
  case SumOrder::Shuffled: {
    const int64_t chunk = info.param, chunks = (L + chunk - 1) / chunk;
    std::vector<A>& part = scratch.part;
    std::vector<int64_t>& perm = scratch.perm;
    part.assign(static_cast<size_t>(chunks), A(0));
    for (int64_t i = 0; i < L; ++i)
      part[static_cast<size_t>(i / chunk)] += a[i] * b[i];
    perm.resize(static_cast<size_t>(chunks));
    std::iota(perm.begin(), perm.end(), 0);
    uint64_t state = seed;
    for (int64_t i = chunks - 1; i > 0; --i) { // Fisher-Yates: the order the atomics land in
      state = mix(state);
      std::swap(perm[static_cast<size_t>(i)],
                perm[static_cast<size_t>(state % static_cast<uint64_t>(i + 1))]);
    }
    for (int64_t k : perm)
      acc += part[static_cast<size_t>(k)];
    return acc;
  }
  }
  return acc;
}

/// `elems` elements of `p` as the accumulation type (TF32-rounded when `tf32`).
template <typename E>
std::vector<typename E::Acc> loadAll(const void* p, int64_t elems, bool tf32) {
  std::vector<typename E::Acc> v(static_cast<size_t>(elems));
  for (int64_t i = 0; i < elems; ++i) {
    v[static_cast<size_t>(i)] = E::load(p, i);
    if constexpr (std::is_same_v<typename E::Acc, float>)
      if (tf32)
        v[static_cast<size_t>(i)] = toTf32(v[static_cast<size_t>(i)]);
  }
  return v;
}

/// Runs direction `dir` of `g` with algorithm `info`: Fwd y = conv(x, w),
/// BwdData dx = conv^T(dy, w), BwdFilter dw = corr(x, dy); then the blend
/// into `out`. The operands are (x, w) / (dy, w) / (x, dy).
///
/// The terms of one output element are two vectors in the canonical order:
/// one operand's gathered (zero for padding and stride gaps), the other's
/// laid out contiguously beforehand. The gathered one is shared by every
/// output channel of a group (forward, backward filter) or every input
/// channel of a group (backward data), so it is gathered once for them.
template <typename E>
void compute(ConvDir dir, const ConvGeom& g, const ConvAlgo& info, const void* in1, const void* in2,
             void* out, Scale sc, uint64_t seed) {
  using A = typename E::Acc;
  const bool tf32 = usesTf32(info, g);
  const int64_t RS = int64_t{g.R} * g.S;
  Scratch<A> scratch;
  auto xoff = [&](int64_t n, int64_t c, int64_t h, int64_t w) {
    return n * g.xs[0] + c * g.xs[1] + h * g.xs[2] + w * g.xs[3];
  };
  auto yoff = [&](int64_t n, int64_t k, int64_t p, int64_t q) {
    return n * g.ys[0] + k * g.ys[1] + p * g.ys[2] + q * g.ys[3];
  };
  // Each output element's own seed (for Shuffled), whatever the loop order.
  auto put = [&](int64_t offset, const A* a, const A* b, int64_t L) {
    A res = reduce(a, b, L, info, mix(seed ^ static_cast<uint64_t>(offset)), scratch);
    blend<E>(out, offset, res, sc);
  };
  if (dir == ConvDir::Fwd) {
    const std::vector<A> x = loadAll<E>(in1, g.xElems, tf32), w0 = loadAll<E>(in2, g.wElems, tf32);
    const int64_t L = g.Cg * RS; // (c, r, s)
    std::vector<A> w(static_cast<size_t>(g.K * L)), ta(static_cast<size_t>(L));
    for (int k = 0; k < g.K; ++k)
      for (int c = 0; c < g.Cg; ++c)
        for (int r = 0; r < g.R; ++r)
          for (int s = 0; s < g.S; ++s)
            w[static_cast<size_t>((k * g.Cg + c) * RS + r * g.S + s)] =
                w0[static_cast<size_t>(g.woff(k, c, r, s))];
    for (int n = 0; n < g.N; ++n)
      for (int grp = 0; grp < g.G; ++grp)
        for (int p = 0; p < g.P; ++p)
          for (int q = 0; q < g.Q; ++q) {
            size_t t = 0;
            for (int c = 0; c < g.Cg; ++c)
              for (int r = 0; r < g.R; ++r) {
                const int h = p * g.strH - g.padH + r * g.dilH;
                for (int s = 0; s < g.S; ++s, ++t) {
                  const int wc = q * g.strW - g.padW + s * g.dilW;
                  ta[t] = h < 0 || h >= g.H || wc < 0 || wc >= g.W
                              ? A(0)
                              : x[static_cast<size_t>(xoff(n, grp * g.Cg + c, h, wc))];
                }
              }
            for (int kk = 0; kk < g.Kg; ++kk) {
              const int k = grp * g.Kg + kk;
              put(yoff(n, k, p, q), ta.data(), &w[static_cast<size_t>(k * L)], L);
            }
          }
  } else if (dir == ConvDir::BwdData) {
    const std::vector<A> dy = loadAll<E>(in1, g.yElems, tf32), w0 = loadAll<E>(in2, g.wElems, tf32);
    const int64_t L = g.Kg * RS; // (k, r, s) within the group
    // w as [group][c][k][r][s]: the terms of one input channel, contiguous.
    std::vector<A> w(static_cast<size_t>(int64_t{g.C} * L)), ta(static_cast<size_t>(L));
    for (int c = 0; c < g.C; ++c)
      for (int kk = 0; kk < g.Kg; ++kk)
        for (int r = 0; r < g.R; ++r)
          for (int s = 0; s < g.S; ++s)
            w[static_cast<size_t>(c * L + kk * RS + r * g.S + s)] =
                w0[static_cast<size_t>(g.woff(c / g.Cg * g.Kg + kk, c % g.Cg, r, s))];
    for (int n = 0; n < g.N; ++n)
      for (int grp = 0; grp < g.G; ++grp)
        for (int h = 0; h < g.H; ++h)
          for (int wc = 0; wc < g.W; ++wc) {
            size_t t = 0;
            for (int kk = 0; kk < g.Kg; ++kk)
              for (int r = 0; r < g.R; ++r) {
                const int ph = h + g.padH - r * g.dilH;
                const bool rowHit = ph >= 0 && ph % g.strH == 0 && ph / g.strH < g.P;
                for (int s = 0; s < g.S; ++s, ++t) {
                  const int qw = wc + g.padW - s * g.dilW;
                  const bool hit = rowHit && qw >= 0 && qw % g.strW == 0 && qw / g.strW < g.Q;
                  ta[t] = hit ? dy[static_cast<size_t>(
                                    yoff(n, grp * g.Kg + kk, ph / g.strH, qw / g.strW))]
                              : A(0);
                }
              }
            for (int cl = 0; cl < g.Cg; ++cl) {
              const int c = grp * g.Cg + cl;
              put(xoff(n, c, h, wc), ta.data(), &w[static_cast<size_t>(c * L)], L);
            }
          }
  } else {
    const std::vector<A> x = loadAll<E>(in1, g.xElems, tf32), dy0 = loadAll<E>(in2, g.yElems, tf32);
    const int64_t PQ = int64_t{g.P} * g.Q, L = g.N * PQ; // (n, p, q)
    // dy as [k][n][p][q]: the terms of one output channel, contiguous.
    std::vector<A> dy(static_cast<size_t>(g.K * L)), ta(static_cast<size_t>(L));
    for (int k = 0; k < g.K; ++k)
      for (int n = 0; n < g.N; ++n)
        for (int p = 0; p < g.P; ++p)
          for (int q = 0; q < g.Q; ++q)
            dy[static_cast<size_t>(k * L + n * PQ + p * g.Q + q)] =
                dy0[static_cast<size_t>(yoff(n, k, p, q))];
    for (int grp = 0; grp < g.G; ++grp)
      for (int c = 0; c < g.Cg; ++c)
        for (int r = 0; r < g.R; ++r)
          for (int s = 0; s < g.S; ++s) {
            size_t t = 0;
            for (int n = 0; n < g.N; ++n)
              for (int p = 0; p < g.P; ++p) {
                const int h = p * g.strH - g.padH + r * g.dilH;
                for (int q = 0; q < g.Q; ++q, ++t) {
                  const int wc = q * g.strW - g.padW + s * g.dilW;
                  ta[t] = h < 0 || h >= g.H || wc < 0 || wc >= g.W
                              ? A(0)
                              : x[static_cast<size_t>(xoff(n, grp * g.Cg + c, h, wc))];
                }
              }
            for (int kk = 0; kk < g.Kg; ++kk) {
              const int k = grp * g.Kg + kk;
              put(g.woff(k, c, r, s), ta.data(), &dy[static_cast<size_t>(k * L)], L);
            }
          }
  }
}

} // namespace

cudnnMathType_t convMath(const ConvAlgo& a, const ConvGeom& g) {
  if (a.tensorCores && g.type != CUDNN_DATA_DOUBLE && g.math != CUDNN_FMA_MATH)
    return CUDNN_TENSOR_OP_MATH;
  return g.math == CUDNN_FMA_MATH ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
}

/// Runs one algorithm (a task on the handle's stream): the workspace scribbled
/// over first, then the computation.
void runConv(ConvDir dir, const ConvGeom& g, const ConvAlgo& info, const void* in1, const void* in2,
             void* out, Scale sc, void* ws, uint64_t seed) {
  if (info.workspace > 0)
    std::memset(ws, 0xff, info.workspace);
  withType(g.type, [&](auto e) { compute<decltype(e)>(dir, g, info, in1, in2, out, sc, seed); });
}

} // namespace lwemu::dnn
