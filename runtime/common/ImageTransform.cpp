// torchvision's transforms for the image loaders: the crop of an example
// (RandomResizedCrop's draw, the evaluation's resize and center crop), PIL's
// antialiased bilinear resampling of that crop to the model's input, the
// flip and the normalization, written as planar floats. Randomness comes
// from a counter-based generator seeded per example, so an example's crop
// is a function of (seed, epoch, index) alone.
//
// Resampling is most of a loader thread's time after decoding: it runs
// along y first (whole rows at once, which the compiler vectorizes; this
// file is built with -O3 outside Debug builds) and then along x, where the
// flip, the normalization and the planar layout come for free.
#include "lwrt/image.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

namespace lwrt {

namespace {

/// splitmix64: a draw from `state`, which advances.
uint64_t nextRandom(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Uniform in [0, 1) with 53 bits.
double uniform(uint64_t& state) { return static_cast<double>(nextRandom(state) >> 11) * 0x1p-53; }

/// Uniform in [lo, hi], both included (torch.randint(lo, hi + 1)).
int64_t uniformInt(uint64_t& state, int64_t lo, int64_t hi) {
  uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  uint64_t limit = UINT64_MAX - UINT64_MAX % span; // no modulo bias
  for (;;) {
    uint64_t r = nextRandom(state);
    if (r < limit)
      return lo + static_cast<int64_t>(r % span);
  }
}

/// Python's round(): halves to even.
int64_t roundHalfEven(double v) { return static_cast<int64_t>(std::nearbyint(v)); }

/// torchvision's RandomResizedCrop.get_params (scale 0.08-1, ratio 3/4-4/3):
/// ten tries at a random area and log-uniform aspect, then a center crop of
/// the aspect clamped into the range.
CropBox randomResizedCrop(int64_t width, int64_t height, uint64_t& state) {
  const double area = static_cast<double>(width) * static_cast<double>(height);
  const double minRatio = 3.0 / 4.0, maxRatio = 4.0 / 3.0;
  const double logLo = std::log(minRatio), logHi = std::log(maxRatio);
  for (int attempt = 0; attempt < 10; ++attempt) {
    double target = area * (0.08 + (1.0 - 0.08) * uniform(state));
    double aspect = std::exp(logLo + (logHi - logLo) * uniform(state));
    int64_t w = roundHalfEven(std::sqrt(target * aspect));
    int64_t h = roundHalfEven(std::sqrt(target / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      int64_t top = uniformInt(state, 0, height - h);
      int64_t left = uniformInt(state, 0, width - w);
      return {static_cast<double>(left), static_cast<double>(top), static_cast<double>(w),
              static_cast<double>(h)};
    }
  }
  double inRatio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (inRatio < minRatio)
    h = roundHalfEven(static_cast<double>(w) / minRatio);
  else if (inRatio > maxRatio)
    w = roundHalfEven(static_cast<double>(h) * maxRatio);
  return {static_cast<double>((width - w) / 2), static_cast<double>((height - h) / 2),
          static_cast<double>(w), static_cast<double>(h)};
}

/// The shorter side of CenterCrop's resize: torchvision's
/// int(size / fraction).
int64_t centerCropSide(int64_t outH, int64_t outW, double fraction) {
  return static_cast<int64_t>(static_cast<double>(std::min(outH, outW)) / fraction);
}

/// Resize(shorter side to min(outH, outW) / fraction), then CenterCrop(outH,
/// outW), as a box of the source image (resizing and then cropping reads the
/// same pixels with the same weights as resampling that box).
CropBox centerCrop(int64_t width, int64_t height, int64_t outH, int64_t outW, double fraction) {
  const int64_t side = centerCropSide(outH, outW, fraction);
  const int64_t shortIn = std::min(width, height), longIn = std::max(width, height);
  const int64_t longOut = static_cast<int64_t>(
      static_cast<double>(side) * static_cast<double>(longIn) / static_cast<double>(shortIn));
  double newW = static_cast<double>(width <= height ? side : longOut);
  double newH = static_cast<double>(width <= height ? longOut : side);
  // An input far from square against an image of the other shape: grow the
  // resize until the crop fits (torchvision would pad with zeros instead).
  double grow = std::max({1.0, static_cast<double>(outW) / newW, static_cast<double>(outH) / newH});
  if (grow > 1.0) {
    newW = std::ceil(newW * grow);
    newH = std::ceil(newH * grow);
  }
  const double top = static_cast<double>(roundHalfEven((newH - static_cast<double>(outH)) / 2.0));
  const double left = static_cast<double>(roundHalfEven((newW - static_cast<double>(outW)) / 2.0));
  const double sx = static_cast<double>(width) / newW, sy = static_cast<double>(height) / newH;
  return {left * sx, top * sy, static_cast<double>(outW) * sx, static_cast<double>(outH) * sy};
}

/// PIL's precompute_coeffs for its bilinear (triangle) filter: per output
/// pixel, the first source pixel, how many it reads and their normalized
/// weights (`stride` per output pixel).
struct Taps {
  std::vector<int64_t> first, count;
  std::vector<float> weights;
  int stride = 0;
};

void computeTaps(double box0, double boxSize, int64_t inSize, int64_t outSize, Taps& t) {
  const double scale = boxSize / static_cast<double>(outSize);
  const double filterScale = std::max(scale, 1.0);
  const double support = filterScale; // the triangle's support is 1
  t.stride = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.first.assign(static_cast<size_t>(outSize), 0);
  t.count.assign(static_cast<size_t>(outSize), 0);
  t.weights.assign(static_cast<size_t>(outSize * t.stride), 0.0f);
  double k[64];
  for (int64_t x = 0; x < outSize; ++x) {
    const double center = box0 + (static_cast<double>(x) + 0.5) * scale;
    int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    int64_t hi = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), inSize);
    if (hi <= lo) { // a box at the border: the nearest pixel
      lo = std::clamp<int64_t>(static_cast<int64_t>(center), 0, inSize - 1);
      hi = lo + 1;
    }
    hi = std::min<int64_t>({hi, lo + t.stride, lo + 64});
    double sum = 0;
    for (int64_t i = lo; i < hi; ++i) {
      double d = std::fabs((static_cast<double>(i) - center + 0.5) / filterScale);
      k[i - lo] = d < 1.0 ? 1.0 - d : 0.0;
      sum += k[i - lo];
    }
    // Zero weights at either end read nothing.
    int64_t a = 0, b = hi - lo;
    while (b - a > 1 && k[a] == 0.0)
      ++a;
    while (b - a > 1 && k[b - 1] == 0.0)
      --b;
    t.first[static_cast<size_t>(x)] = lo + a;
    t.count[static_cast<size_t>(x)] = b - a;
    float* w = t.weights.data() + x * t.stride;
    for (int64_t i = a; i < b; ++i)
      w[i - a] = static_cast<float>(sum > 0 ? k[i] / sum : 1.0 / static_cast<double>(b - a));
  }
}

/// Keeps a tap range inside [lo, hi) (the pixels decoded): a caller that
/// decoded too little loses weight at the edge instead of reading outside.
inline void clipTaps(int64_t lo, int64_t hi, int64_t& first, int64_t& count, int64_t& skip) {
  skip = std::max<int64_t>(0, lo - first);
  count = std::min(first + count, hi) - (first + skip);
  first += skip;
  if (count < 0)
    count = 0;
}

/// Output pixels of the pass along x, for K taps (0: any count, `taps`):
/// C source channels to OC planes, normalized and mirrored with `flip`.
template <int C, int OC, int K>
void resampleRowsFixed(const float* columns, int64_t span, const int64_t* at, const float* weights,
                       int64_t taps, int64_t outH, int64_t outW, bool flip, const Normalize& norm,
                       float* out) {
  const int64_t n = K > 0 ? K : taps, area = outH * outW;
  for (int64_t y = 0; y < outH; ++y) {
    const float* row = columns + y * span;
    float* o = out + y * outW;
    for (int64_t x = 0; x < outW; ++x) {
      const float* p = row + at[x];
      const float* w = weights + x * n;
      float acc[C] = {};
      for (int64_t k = 0; k < n; ++k)
        for (int c = 0; c < C; ++c)
          acc[c] += w[k] * p[k * C + c];
      const int64_t i = flip ? outW - 1 - x : x;
      for (int c = 0; c < OC; ++c)
        o[c * area + i] = acc[C == 1 ? 0 : c] * norm.scale[c] + norm.shift[c];
    }
  }
}

/// The pass along x of resampleInto: each row of `columns` (span floats,
/// source columns [xlo, xhi) interleaved) to outW pixels, normalized and
/// written planar. The taps are padded to one count for the whole image
/// (zero weights), and the common counts have loops of their own that the
/// compiler unrolls.
template <int C, int OC>
void resampleRows(const float* columns, int64_t span, int64_t xlo, int64_t xhi, const Taps& tx,
                  int64_t outH, int64_t outW, bool flip, const Normalize& norm, float* out) {
  thread_local std::vector<int64_t> at;
  thread_local std::vector<float> weights;
  const int64_t width = xhi - xlo;
  int64_t taps = 1;
  for (int64_t x = 0; x < outW; ++x)
    taps = std::max(taps, tx.count[static_cast<size_t>(x)]);
  taps = std::min(taps, std::max<int64_t>(width, 1));
  // Each output pixel's first column (in `columns`) and `taps` weights; a
  // window that would run past xhi starts earlier, with leading zeros.
  at.resize(static_cast<size_t>(outW));
  weights.assign(static_cast<size_t>(outW * taps), 0.0f);
  for (int64_t x = 0; x < outW; ++x) {
    int64_t first = tx.first[static_cast<size_t>(x)], count = tx.count[static_cast<size_t>(x)],
            skip;
    clipTaps(xlo, xhi, first, count, skip);
    const int64_t start = std::clamp<int64_t>(first - xlo, 0, std::max<int64_t>(width - taps, 0));
    at[static_cast<size_t>(x)] = start * C;
    const float* w = tx.weights.data() + x * tx.stride + skip;
    for (int64_t k = 0; k < count; ++k) {
      const int64_t slot = first - xlo - start + k;
      if (slot >= 0 && slot < taps)
        weights[static_cast<size_t>(x * taps + slot)] = w[k];
    }
  }
  auto run = [&](auto k) {
    resampleRowsFixed<C, OC, decltype(k)::value>(columns, span, at.data(), weights.data(), taps,
                                                 outH, outW, flip, norm, out);
  };
  switch (taps) {
  case 1:
    return run(std::integral_constant<int, 1>());
  case 2:
    return run(std::integral_constant<int, 2>());
  case 3:
    return run(std::integral_constant<int, 3>());
  case 4:
    return run(std::integral_constant<int, 4>());
  case 5:
    return run(std::integral_constant<int, 5>());
  case 6:
    return run(std::integral_constant<int, 6>());
  default:
    return run(std::integral_constant<int, 0>());
  }
}

} // namespace

CropBox sampleCrop(Augment augment, int64_t width, int64_t height, int64_t outH, int64_t outW,
                   uint64_t sampleSeed, double cropFraction) {
  uint64_t state = sampleSeed;
  CropBox box{0, 0, static_cast<double>(width), static_cast<double>(height), false};
  switch (augment) {
  case Augment::Standard:
    box = randomResizedCrop(width, height, state);
    box.flip = uniform(state) < 0.5;
    break;
  case Augment::Flip:
    box.flip = uniform(state) < 0.5;
    break;
  case Augment::None:
    break;
  case Augment::CenterCrop:
    box = centerCrop(width, height, outH, outW, cropFraction);
    break;
  }
  return box;
}

std::string describeTransform(Augment augment, int64_t outH, int64_t outW, double cropFraction) {
  const std::string size = std::to_string(outH) + "x" + std::to_string(outW);
  switch (augment) {
  case Augment::Standard:
    return "RandomResizedCrop(" + size + ") + RandomHorizontalFlip";
  case Augment::Flip:
    return "Resize(" + size + ") + RandomHorizontalFlip";
  case Augment::None:
    return "Resize(" + size + ")";
  case Augment::CenterCrop:
    return "Resize(" + std::to_string(centerCropSide(outH, outW, cropFraction)) +
           ") + CenterCrop(" + size + ")";
  }
  return "";
}

Normalize Normalize::of(const std::vector<float>& mean, const std::vector<float>& std) {
  Normalize n;
  for (size_t c = 0; c < 3; ++c) {
    float m = mean.empty() ? 0.0f : mean[std::min(c, mean.size() - 1)];
    float s = std.empty() ? 1.0f : std[std::min(c, std.size() - 1)];
    n.scale[c] = 1.0f / (255.0f * s);
    n.shift[c] = -m / s;
  }
  return n;
}

void resampleSpan(double box0, double boxSize, int64_t inSize, int64_t outSize, int64_t& lo,
                  int64_t& hi) {
  const double scale = boxSize / static_cast<double>(outSize);
  const double support = std::max(scale, 1.0);
  const double first = box0 + 0.5 * scale,
               last = box0 + (static_cast<double>(outSize) - 0.5) * scale;
  lo = std::clamp<int64_t>(static_cast<int64_t>(first - support + 0.5) - 1, 0, inSize - 1);
  hi = std::clamp<int64_t>(static_cast<int64_t>(last + support + 0.5) + 1, lo + 1, inSize);
}

void resampleInto(const Pixels& src, const CropBox& box, int64_t outH, int64_t outW, int outC,
                  const Normalize& norm, float* out) {
  thread_local Taps tx, ty;
  thread_local std::vector<float> columns;
  computeTaps(box.x0, box.width, src.imageWidth, outW, tx);
  computeTaps(box.y0, box.height, src.imageHeight, outH, ty);
  const int C = src.channels;
  // The source columns some output pixel reads.
  int64_t xlo = tx.first.front(), xhi = xlo;
  for (int64_t x = 0; x < outW; ++x)
    xhi = std::max(xhi, tx.first[static_cast<size_t>(x)] + tx.count[static_cast<size_t>(x)]);
  xlo = std::max(xlo, src.x0);
  xhi = std::min(xhi, src.x0 + src.width);
  const int64_t span = std::max<int64_t>(xhi - xlo, 0) * C;
  // Along y first, over those columns: contiguous rows, so the loops run
  // on vectors. Output row y goes to columns[y * span].
  if (columns.size() < static_cast<size_t>(outH * span)) // grown only: every element is written
    columns.resize(static_cast<size_t>(outH * span));
  const size_t stride = static_cast<size_t>(src.width * C);
  const unsigned char* base = src.data.data() + (xlo - src.x0) * C;
  for (int64_t y = 0; y < outH; ++y) {
    int64_t first = ty.first[static_cast<size_t>(y)], count = ty.count[static_cast<size_t>(y)],
            skip;
    clipTaps(src.y0, src.y0 + src.height, first, count, skip);
    const float* w = ty.weights.data() + y * ty.stride + skip;
    float* __restrict dst = columns.data() + y * span;
    if (count == 0)
      std::fill(dst, dst + span, 0.0f);
    for (int64_t k = 0; k < count; ++k) {
      const unsigned char* __restrict row = base + static_cast<size_t>(first + k - src.y0) * stride;
      const float wk = w[k];
      if (k == 0)
        for (int64_t i = 0; i < span; ++i)
          dst[i] = wk * static_cast<float>(row[i]);
      else
        for (int64_t i = 0; i < span; ++i)
          dst[i] += wk * static_cast<float>(row[i]);
    }
  }
  // Then along x, normalized, flipped and written planar; a gray source
  // fills every channel.
  if (C == 3)
    resampleRows<3, 3>(columns.data(), span, xlo, xhi, tx, outH, outW, box.flip, norm, out);
  else if (outC == 3)
    resampleRows<1, 3>(columns.data(), span, xlo, xhi, tx, outH, outW, box.flip, norm, out);
  else
    resampleRows<1, 1>(columns.data(), span, xlo, xhi, tx, outH, outW, box.flip, norm, out);
}

bool transformEncoded(const unsigned char* data, size_t size, const TransformSpec& spec,
                      uint64_t sampleSeed, float* out, std::string* error) {
  ImageHeader header;
  if (!readImageHeader(data, size, header, error))
    return false;
  const CropBox box = sampleCrop(spec.augment, header.width, header.height, spec.outH, spec.outW,
                                 sampleSeed, spec.cropFraction);
  // JPEG's DCT-domain scaling: the smallest of 1/8, 1/4, 1/2 at which the
  // crop still has at least the input's pixels (the resampling then shrinks
  // it by less than 2); libjpeg-turbo's scaled IDCTs do the rest for free.
  int scale = 8;
  if (header.format == ImageFormat::Jpeg)
    for (int s : {1, 2, 4})
      if (box.width * s / 8 >= static_cast<double>(spec.outW) &&
          box.height * s / 8 >= static_cast<double>(spec.outH)) {
        scale = s;
        break;
      }
  const int64_t sw = (header.width * scale + 7) / 8, sh = (header.height * scale + 7) / 8;
  const double fx = static_cast<double>(sw) / static_cast<double>(header.width),
               fy = static_cast<double>(sh) / static_cast<double>(header.height);
  const CropBox scaled{box.x0 * fx, box.y0 * fy, box.width * fx, box.height * fy, box.flip};
  int64_t xlo, xhi, ylo, yhi;
  resampleSpan(scaled.x0, scaled.width, sw, spec.outW, xlo, xhi);
  resampleSpan(scaled.y0, scaled.height, sh, spec.outH, ylo, yhi);
  thread_local Pixels pixels;
  if (!decodeImage(data, size, spec.outC, scale, xlo, ylo, xhi - xlo, yhi - ylo, pixels, error))
    return false;
  if (pixels.imageWidth != sw || pixels.imageHeight != sh) {
    if (error)
      *error = "the decoder's scaled size differs from the header's";
    return false;
  }
  resampleInto(pixels, scaled, spec.outH, spec.outW, spec.outC, spec.norm, out);
  return true;
}

void transformPixels(const Pixels& image, const TransformSpec& spec, uint64_t sampleSeed,
                     float* out) {
  const CropBox box = sampleCrop(spec.augment, image.imageWidth, image.imageHeight, spec.outH,
                                 spec.outW, sampleSeed, spec.cropFraction);
  if (image.channels == 3 && spec.outC == 1) { // luma first, as PIL's convert("L")
    thread_local Pixels gray;
    gray = image;
    gray.channels = 1;
    const size_t n = static_cast<size_t>(image.width * image.height);
    gray.data.resize(n);
    for (size_t k = 0; k < n; ++k) {
      const unsigned char* p = image.data.data() + 3 * k;
      gray.data[k] = static_cast<unsigned char>(
          (p[0] * 19595u + p[1] * 38470u + p[2] * 7471u + 0x8000u) >> 16);
    }
    resampleInto(gray, box, spec.outH, spec.outW, spec.outC, spec.norm, out);
    return;
  }
  resampleInto(image, box, spec.outH, spec.outW, spec.outC, spec.norm, out);
}

} // namespace lwrt
