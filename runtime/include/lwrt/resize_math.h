// lwrt/resize_math.h - resize (ONNX Resize and Upsample) and its gradient, one definition
// defines: ResizeMode, ResizeCoord, ResizeNearest, kResize*Names, ResizeParams, ResizePlan,
// ResizeTaps,
//   resizeTaps, resizeTapBounds, makeResizePlan, resizeValue, resizeGradValue
//
// Resize computes each result element from a few elements of its operand:
// per dim, the taps (input indices and weights) that the output index's
// coordinate reads, 1 for nearest, 2 for linear, 4 for cubic; the value is
// the sum over all combinations of one tap per dim of the product of their
// weights times that input element. Its gradient is the adjoint: an input
// element gathers, from every result element whose taps include it, the
// product of those weights times dy. Each input element finds those
// results per dim by a binary search (the taps move monotonically with the
// output index) and adds them in ascending order, so the gradient needs no
// atomics and is the same, bit for bit, on the interpreter (double), the CPU
// and the GPU: all three call resizeValue and resizeGradValue.
//
// The coordinates follow ONNX Resize-19 (coordinate_transformation_mode,
// nearest_mode, cubic_coeff_a, exclude_outside) and PyTorch's interpolate:
// nearest = asymmetric + floor, nearest-exact = half_pixel +
// round_prefer_ceil, (bi)linear and bicubic = half_pixel (pytorch_half_pixel
// for size 1) or align_corners; linear and cubic taps outside the input take
// the edge element (PyTorch's clamping, ONNX's edge padding). A tap of
// weight 0 is left out, so that a scale of 1 reads exactly its own element.
//
// A piece of a resize split over devices (a shard along one dim) sees its
// place in the whole tensors: whole_in and whole_out are the whole operand's
// and result's shapes, in_offsets and out_offsets where the piece's operand
// (with the halo its taps read) and result start in them.
//
// Header-only and free of other lwrt headers except lwrt/shard_index.h;
// under nvcc the LWRT_HOST_DEVICE functions compile for the host and the
// device.
#pragma once

#include "shard_index.h"

#include <math.h>
#include <vector>

namespace lwrt {

enum class ResizeMode : int32_t { Nearest, Linear, Cubic };
enum class ResizeCoord : int32_t {
  HalfPixel,
  PytorchHalfPixel,
  AlignCorners,
  Asymmetric,
  TfHalfPixelForNn,
  HalfPixelSymmetric
};
/// Simple: floor when upsampling, ceil when downsampling (Upsample and
/// Resize before opset 11, as onnxruntime reads them).
enum class ResizeNearest : int32_t { RoundPreferFloor, RoundPreferCeil, Floor, Ceil, Simple };

/// The IR's (ONNX's) names of the enumerators above, in their order.
inline constexpr const char* kResizeModeNames[] = {"nearest", "linear", "cubic"};
inline constexpr const char* kResizeCoordNames[] = {"half_pixel",           "pytorch_half_pixel",
                                                    "align_corners",        "asymmetric",
                                                    "tf_half_pixel_for_nn", "half_pixel_symmetric"};
inline constexpr const char* kResizeNearestNames[] = {"round_prefer_floor", "round_prefer_ceil",
                                                      "floor", "ceil", "simple"};

/// The attributes of resize and resize_grad (ir/Ops.def): per dim the
/// coordinate scale; the modes; and, for a piece of a split resize, the
/// whole tensors' shapes and the piece's offsets (all four empty: the
/// op is whole).
struct ResizeParams {
  std::vector<double> scales;
  ResizeMode mode = ResizeMode::Nearest;
  ResizeCoord coord = ResizeCoord::HalfPixel;
  ResizeNearest nearest = ResizeNearest::RoundPreferFloor;
  double cubicCoeffA = -0.75;
  int64_t excludeOutside = 0;
  std::vector<int64_t> wholeIn, inOffsets, wholeOut, outOffsets;
};

/// ResizeParams with the shapes, as plain data a CUDA kernel takes by value.
struct ResizePlan {
  int32_t rank = 0;
  int64_t in[kShardMaxRank] = {};  ///< the operand (piece) shape
  int64_t out[kShardMaxRank] = {}; ///< the result (piece) shape
  int64_t wholeIn[kShardMaxRank] = {}, wholeOut[kShardMaxRank] = {};
  int64_t inOffset[kShardMaxRank] = {}, outOffset[kShardMaxRank] = {};
  double scale[kShardMaxRank] = {};
  ResizeMode mode = ResizeMode::Nearest;
  ResizeCoord coord = ResizeCoord::HalfPixel;
  ResizeNearest nearest = ResizeNearest::RoundPreferFloor;
  double cubicA = -0.75;
  int32_t excludeOutside = 0;
};

/// The input elements (indices in the whole input) one output index reads
/// along one dim, with their weights.
struct ResizeTaps {
  int32_t count = 0;
  int64_t index[4] = {};
  double weight[4] = {};
};

/// Where output index `o` (of the whole result) of dim `d` sits in the input.
inline LWRT_HOST_DEVICE double resizeCoordinate(const ResizePlan& p, int d, int64_t o) {
  double s = p.scale[d], x = static_cast<double>(o);
  double in = static_cast<double>(p.wholeIn[d]), out = static_cast<double>(p.wholeOut[d]);
  switch (p.coord) {
  case ResizeCoord::HalfPixel:
    return (x + 0.5) / s - 0.5;
  case ResizeCoord::PytorchHalfPixel:
    return p.wholeOut[d] > 1 ? (x + 0.5) / s - 0.5 : 0.0;
  case ResizeCoord::AlignCorners: {
    // ONNX's resized length is in * scale (out itself where sizes were given).
    double resized = in * s;
    return resized > 1.0 ? x * (in - 1.0) / (resized - 1.0) : 0.0;
  }
  case ResizeCoord::Asymmetric:
    return x / s;
  case ResizeCoord::TfHalfPixelForNn:
    return (x + 0.5) / s;
  case ResizeCoord::HalfPixelSymmetric: {
    double adjustment = out / (s * in);
    double offset = in / 2.0 * (1.0 - adjustment);
    return offset + (x + 0.5) / s - 0.5;
  }
  }
  return x;
}

inline LWRT_HOST_DEVICE int64_t resizeClamp(int64_t i, int64_t n) {
  return i < 0 ? 0 : (i >= n ? n - 1 : i);
}

/// The cubic convolution weight of a tap at distance |t| (Keys, with A).
inline LWRT_HOST_DEVICE double cubicWeight(double t, double a) {
  t = fabs(t);
  if (t <= 1.0)
    return ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0;
  if (t < 2.0)
    return ((a * t - 5.0 * a) * t + 8.0 * a) * t - 4.0 * a;
  return 0.0;
}

/// The taps of output index `o` (of the whole result) along dim `d`.
inline LWRT_HOST_DEVICE ResizeTaps resizeTaps(const ResizePlan& p, int d, int64_t o) {
  ResizeTaps taps;
  int64_t n = p.wholeIn[d];
  double x = resizeCoordinate(p, d, o);
  if (p.mode == ResizeMode::Nearest) {
    double f = floor(x);
    int64_t i = static_cast<int64_t>(f);
    switch (p.nearest) {
    case ResizeNearest::RoundPreferFloor:
      i = x - f > 0.5 ? i + 1 : i;
      break;
    case ResizeNearest::RoundPreferCeil:
      i = x - f >= 0.5 ? i + 1 : i;
      break;
    case ResizeNearest::Floor:
      break;
    case ResizeNearest::Ceil:
      i = static_cast<int64_t>(ceil(x));
      break;
    case ResizeNearest::Simple:
      i = p.scale[d] < 1.0 ? static_cast<int64_t>(ceil(x)) : static_cast<int64_t>(trunc(x));
      break;
    }
    taps.count = 1;
    taps.index[0] = resizeClamp(i, n);
    taps.weight[0] = 1.0;
    return taps;
  }
  if (p.mode == ResizeMode::Linear && x < 0)
    x = 0; // PyTorch clamps; ONNX's edge padding gives the same value
  double f = floor(x);
  int64_t i0 = static_cast<int64_t>(f);
  double t = x - f;
  if (t == 0.0) { // on an input element: it alone
    taps.count = 1;
    taps.index[0] = resizeClamp(i0, n);
    taps.weight[0] = 1.0;
    return taps;
  }
  int first = p.mode == ResizeMode::Linear ? 0 : -1;
  int last = p.mode == ResizeMode::Linear ? 1 : 2;
  double total = 0.0;
  for (int j = first; j <= last; ++j) {
    double w = p.mode == ResizeMode::Linear ? (j == 0 ? 1.0 - t : t)
                                            : cubicWeight(static_cast<double>(j) - t, p.cubicA);
    int64_t i = i0 + j;
    if (p.excludeOutside && (i < 0 || i >= n))
      w = 0.0;
    total += w;
    taps.index[taps.count] = resizeClamp(i, n);
    taps.weight[taps.count] = w;
    ++taps.count;
  }
  // exclude_outside renormalizes what is left; drop the taps of weight 0.
  int32_t kept = 0;
  for (int32_t j = 0; j < taps.count; ++j) {
    double w = p.excludeOutside ? taps.weight[j] / total : taps.weight[j];
    if (w == 0.0)
      continue;
    taps.index[kept] = taps.index[j];
    taps.weight[kept] = w;
    ++kept;
  }
  taps.count = kept;
  return taps;
}

/// Bounds on the tap indices of output index `o` that rise monotonically
/// with `o` (the taps themselves may skip an index of weight 0).
inline LWRT_HOST_DEVICE void resizeTapBounds(const ResizePlan& p, int d, int64_t o, int64_t& lo,
                                             int64_t& hi) {
  int64_t n = p.wholeIn[d];
  double x = resizeCoordinate(p, d, o);
  if (p.mode == ResizeMode::Nearest) {
    lo = hi = resizeTaps(p, d, o).index[0];
    return;
  }
  if (p.mode == ResizeMode::Linear && x < 0)
    x = 0;
  int64_t i0 = static_cast<int64_t>(floor(x));
  lo = resizeClamp(p.mode == ResizeMode::Linear ? i0 : i0 - 1, n);
  hi = resizeClamp(p.mode == ResizeMode::Linear ? i0 + 1 : i0 + 2, n);
}

/// The plan of a resize from `in` to `out` with `params`; false when the
/// shapes or the piece geometry do not fit, or a tap of the piece's result
/// lies outside the piece's operand.
inline bool makeResizePlan(const std::vector<int64_t>& in, const std::vector<int64_t>& out,
                           const ResizeParams& params, ResizePlan& p) {
  size_t r = in.size();
  if (r != out.size() || r > static_cast<size_t>(kShardMaxRank) || params.scales.size() != r)
    return false;
  bool piece = !params.wholeIn.empty() || !params.inOffsets.empty() || !params.wholeOut.empty() ||
               !params.outOffsets.empty();
  if (piece && (params.wholeIn.size() != r || params.inOffsets.size() != r ||
                params.wholeOut.size() != r || params.outOffsets.size() != r))
    return false;
  p = ResizePlan{};
  p.rank = static_cast<int32_t>(r);
  p.mode = params.mode;
  p.coord = params.coord;
  p.nearest = params.nearest;
  p.cubicA = params.cubicCoeffA;
  p.excludeOutside = params.excludeOutside != 0;
  for (size_t d = 0; d < r; ++d) {
    p.in[d] = in[d];
    p.out[d] = out[d];
    p.scale[d] = params.scales[d];
    p.wholeIn[d] = piece ? params.wholeIn[d] : in[d];
    p.wholeOut[d] = piece ? params.wholeOut[d] : out[d];
    p.inOffset[d] = piece ? params.inOffsets[d] : 0;
    p.outOffset[d] = piece ? params.outOffsets[d] : 0;
    if (!(p.scale[d] > 0) || in[d] < 1 || out[d] < 0 || p.inOffset[d] < 0 || p.outOffset[d] < 0 ||
        p.inOffset[d] + in[d] > p.wholeIn[d] || p.outOffset[d] + out[d] > p.wholeOut[d])
      return false;
    for (int64_t o = 0; o < out[d]; ++o) {
      ResizeTaps taps = resizeTaps(p, static_cast<int>(d), o + p.outOffset[d]);
      for (int32_t j = 0; j < taps.count; ++j)
        if (taps.index[j] < p.inOffset[d] || taps.index[j] >= p.inOffset[d] + in[d])
          return false;
    }
  }
  return true;
}

/// Result element k (row-major in the piece's result) of resizing `x`.
template <typename T>
LWRT_HOST_DEVICE double resizeValue(const ResizePlan& p, const T* x, int64_t k) {
  ResizeTaps taps[kShardMaxRank];
  int64_t rest = k;
  for (int d = p.rank - 1; d >= 0; --d) {
    taps[d] = resizeTaps(p, d, rest % p.out[d] + p.outOffset[d]);
    rest /= p.out[d];
  }
  // Every combination of one tap per dim, the last dim fastest.
  int32_t pick[kShardMaxRank] = {};
  double sum = 0.0;
  for (;;) {
    double w = 1.0;
    int64_t at = 0;
    for (int d = 0; d < p.rank; ++d) {
      w *= taps[d].weight[pick[d]];
      at = at * p.in[d] + (taps[d].index[pick[d]] - p.inOffset[d]);
    }
    sum += w * static_cast<double>(x[at]);
    int d = p.rank - 1;
    for (; d >= 0; --d) {
      if (++pick[d] < taps[d].count)
        break;
      pick[d] = 0;
    }
    if (d < 0)
      return sum;
  }
}

/// The weight with which output index `o` of dim `d` reads input index `i`
/// (both in the whole tensors): the sum of its taps at `i`.
inline LWRT_HOST_DEVICE double resizeTapWeight(const ResizePlan& p, int d, int64_t o, int64_t i) {
  ResizeTaps taps = resizeTaps(p, d, o);
  double w = 0.0;
  for (int32_t j = 0; j < taps.count; ++j)
    if (taps.index[j] == i)
      w += taps.weight[j];
  return w;
}

/// dx element k (row-major in the piece's operand) of the resize's
/// gradient: the piece's result elements whose taps read it, in ascending
/// order, each weighted by the product of its taps' weights there.
template <typename T>
LWRT_HOST_DEVICE double resizeGradValue(const ResizePlan& p, const T* dy, int64_t k) {
  int64_t gi[kShardMaxRank], lo[kShardMaxRank], hi[kShardMaxRank], o[kShardMaxRank];
  int64_t rest = k;
  for (int d = p.rank - 1; d >= 0; --d) {
    gi[d] = rest % p.in[d] + p.inOffset[d];
    rest /= p.in[d];
  }
  for (int d = 0; d < p.rank; ++d) {
    // The first result index whose upper tap bound reaches gi, and the last
    // whose lower bound does not pass it (both bounds rise with the index).
    int64_t a = p.outOffset[d], b = p.outOffset[d] + p.out[d];
    while (a < b) {
      int64_t m = a + (b - a) / 2, l, h;
      resizeTapBounds(p, d, m, l, h);
      if (h < gi[d])
        a = m + 1;
      else
        b = m;
    }
    lo[d] = a;
    b = p.outOffset[d] + p.out[d];
    while (a < b) {
      int64_t m = a + (b - a) / 2, l, h;
      resizeTapBounds(p, d, m, l, h);
      if (l <= gi[d])
        a = m + 1;
      else
        b = m;
    }
    hi[d] = a; // exclusive
    if (lo[d] >= hi[d])
      return 0.0;
    o[d] = lo[d];
  }
  double sum = 0.0;
  for (;;) {
    double w = 1.0;
    int64_t at = 0;
    for (int d = 0; d < p.rank && w != 0.0; ++d) {
      w *= resizeTapWeight(p, d, o[d], gi[d]);
      at = at * p.out[d] + (o[d] - p.outOffset[d]);
    }
    if (w != 0.0)
      sum += w * static_cast<double>(dy[at]);
    int d = p.rank - 1;
    for (; d >= 0; --d) {
      if (++o[d] < hi[d])
        break;
      o[d] = lo[d];
    }
    if (d < 0)
      return sum;
  }
}

} // namespace lwrt
