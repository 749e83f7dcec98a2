//===- TensorReduceKernels.cpp - Reductions, cast and fill on the CPU -------===//
//
// The CPU kernels of lwrt/cpu_tensor.h that reduce, convert and fill:
// reduceSum and reduceMean (also over nChw8c activations), cast and fill.
// Each restates the reference interpreter's formula (interp/Interpreter.cpp) in
// double, or wrapping for integers, and rounds once to the element type.
//
//===----------------------------------------------------------------------===//
#include "Bf16.h"
#include "Common.h"
#include "TensorSupport.h"
#include "lwrt/bf16.h"
#include "lwrt/cpu_tensor.h"
#include "lwrt/f16.h"
#include "lwrt/kernel_checks.h"
#include "lwrt/value_math.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

namespace lwrt::cpu {

using namespace detail;

namespace {

//===--- Reductions -------------------------------------------------------===//

bool reduceBlocked(const TensorView& x, const TensorView& y, const ReduceParams& p, bool mean);

bool reduce(const TensorView& x, const TensorView& y, const ReduceParams& p, bool mean) {
  if (y.layout != Layout::RowMajor)
    return false;
  // bf16 or fp16 (a mixed-precision weight gradient summed over a batch):
  // widened exactly, summed as float32 values are, rounded once.
  if (detail::Float32Views::any({&x, &y})) {
    if (x.dtype != y.dtype || x.layout != Layout::RowMajor)
      return false;
    detail::Float32Views f;
    return reduce(f.in(x), f.out(y), p, mean) && f.commit();
  }
  if (x.layout != Layout::RowMajor)
    return reduceBlocked(x, y, p, mean);
  int64_t rank = x.rank();
  std::vector<bool> reduced;
  std::vector<int64_t> want;
  if (!reducedDims(x.shape, p, reduced, want) || x.dtype != y.dtype || y.shape != want)
    return false;
  // Each output sums its inputs in row-major order (float runs of contiguous
  // inputs in four interleaved partial sums), the outputs spread over the
  // pool: kept dims outside, reduced dims inside, with the input strides of
  // each.
  std::vector<int64_t> stride(rank, 1), keptDims, keptStrides, redDims, redStrides;
  for (int64_t d = rank - 1; d > 0; --d)
    stride[d - 1] = stride[d] * x.shape[d];
  for (int64_t d = 0; d < rank; ++d) {
    (reduced[d] ? redDims : keptDims).push_back(x.shape[d]);
    (reduced[d] ? redStrides : keptStrides).push_back(stride[d]);
  }
  int64_t n = x.numel(), m = y.numel();
  int64_t count = n / std::max<int64_t>(1, m);
  // Reduced dims that are contiguous and innermost fold into one run.
  int64_t run = 1;
  while (!redDims.empty() && redStrides.back() == run) {
    run *= redDims.back();
    redDims.pop_back();
    redStrides.pop_back();
  }
  int64_t outer = 1;
  for (int64_t d : redDims)
    outer *= d;
  return dispatchNumeric(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>;
    if (!std::is_floating_point_v<T> && mean && count == 0 && m > 0)
      return false;
    const T* xs = x.as<T>();
    T* ys = y.as<T>();
    int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(1, count));
    detail::parallelFor(m, grain, [&](int64_t first, int64_t last) {
      for (int64_t k = first; k < last; ++k) {
        int64_t base = 0;
        for (int64_t d = static_cast<int64_t>(keptDims.size()) - 1, rest = k; d >= 0; --d) {
          base += rest % keptDims[d] * keptStrides[d];
          rest /= keptDims[d];
        }
        Acc acc{0};
        for (int64_t o = 0; o < outer; ++o) {
          int64_t at = base;
          for (int64_t d = static_cast<int64_t>(redDims.size()) - 1, rest = o; d >= 0; --d) {
            at += rest % redDims[d] * redStrides[d];
            rest /= redDims[d];
          }
          if constexpr (std::is_floating_point_v<T>) {
            // Four partial sums along a contiguous run (a fixed order: the
            // same bits on any number of threads).
            Acc a0{0}, a1{0}, a2{0}, a3{0};
            int64_t e = 0;
            for (; e + 4 <= run; e += 4) {
              a0 += static_cast<Acc>(xs[at + e]);
              a1 += static_cast<Acc>(xs[at + e + 1]);
              a2 += static_cast<Acc>(xs[at + e + 2]);
              a3 += static_cast<Acc>(xs[at + e + 3]);
            }
            for (; e < run; ++e)
              a0 += static_cast<Acc>(xs[at + e]);
            acc += (a0 + a1) + (a2 + a3);
          } else {
            for (int64_t e = 0; e < run; ++e)
              acc += static_cast<Acc>(xs[at + e]);
          }
        }
        if constexpr (std::is_floating_point_v<T>)
          ys[k] = static_cast<T>(mean ? acc / static_cast<double>(count) : acc);
        else {
          auto s = static_cast<int64_t>(acc);
          ys[k] = static_cast<T>(mean ? s / count : s);
        }
      }
    });
    return true;
  });
}

/// A float32 nChw8c [N, C, H, W] summed over n, h and w into [C] (a conv's
/// bias gradient), each channel in the row-major kernel's order.
bool reduceBlocked(const TensorView& x, const TensorView& y, const ReduceParams& p, bool mean) {
  if (x.layout != Layout::NChw8c || x.dtype != DType::F32 || y.dtype != DType::F32 ||
      x.rank() != 4 || x.shape[1] % 8 != 0 || p.keepdims || !p.axes ||
      *p.axes != std::vector<int64_t>{0, 2, 3} || y.shape != std::vector<int64_t>{x.shape[1]})
    return false;
  const int64_t N = x.shape[0], blocks = x.shape[1] / 8, run = x.shape[2] * x.shape[3];
  const float* xs = x.as<float>();
  float* ys = y.as<float>();
  detail::parallelFor(blocks, 1, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      double acc[8] = {};
      for (int64_t n = 0; n < N; ++n) {
        const float* in = xs + (n * blocks + b) * run * 8;
        double a[4][8] = {};
        int64_t e = 0;
        for (; e + 4 <= run; e += 4)
          for (int k = 0; k < 4; ++k)
            for (int l = 0; l < 8; ++l)
              a[k][l] += in[(e + k) * 8 + l];
        for (; e < run; ++e)
          for (int l = 0; l < 8; ++l)
            a[0][l] += in[e * 8 + l];
        for (int l = 0; l < 8; ++l)
          acc[l] += (a[0][l] + a[1][l]) + (a[2][l] + a[3][l]);
      }
      for (int l = 0; l < 8; ++l)
        ys[b * 8 + l] = static_cast<float>(mean ? acc[l] / static_cast<double>(N * run) : acc[l]);
    }
  });
  return true;
}

} // namespace

//===--- Reductions -------------------------------------------------------===//

bool reduceMean(const TensorView& x, const TensorView& y, const ReduceParams& p) {
  return reduce(x, y, p, true);
}
bool reduceSum(const TensorView& x, const TensorView& y, const ReduceParams& p) {
  return reduce(x, y, p, false);
}

//===--- Conversion and values --------------------------------------------===//

bool castGroup(const std::vector<CastPair>& pairs) {
  if (pairs.empty())
    return true;
  const DType low = pairs[0].y.dtype;
  std::vector<int64_t> elements;
  for (const CastPair& c : pairs) {
    if ((low != DType::BF16 && low != DType::F16) || c.x.dtype != DType::F32 || c.y.dtype != low ||
        c.x.shape != c.y.shape || c.x.layout != Layout::RowMajor || c.y.layout != Layout::RowMajor)
      return false;
    elements.push_back(c.x.numel());
  }
  forEachPieceRange(elements, [&](size_t p, int64_t first, int64_t end) {
    const float* xs = pairs[p].x.as<float>();
    auto* ys = static_cast<uint16_t*>(pairs[p].y.data);
    if (low == DType::BF16)
      for (int64_t k = first; k < end; ++k)
        ys[k] = floatToBf16(xs[k]);
    else
      for (int64_t k = first; k < end; ++k)
        ys[k] = floatToF16(xs[k]);
  });
  return true;
}

bool cast(const TensorView& x, const TensorView& y) {
  if (x.shape != y.shape || x.layout != y.layout)
    return false;
  const bool bf16 = x.dtype == DType::BF16 || y.dtype == DType::BF16;
  if (bf16 || x.dtype == DType::F16 || y.dtype == DType::F16) {
    // bf16 or fp16 to and from float32 (rounded to nearest even,
    // lwrt/bf16.h and lwrt/f16.h), and either to itself; they meet no
    // other type in a step.
    if (x.data == nullptr || y.data == nullptr || x.layout != Layout::RowMajor)
      return x.numel() == 0 && y.numel() == 0;
    const DType low = bf16 ? DType::BF16 : DType::F16;
    if (x.dtype == DType::F32 && y.dtype == low) {
      const float* xs = x.as<float>();
      auto* ys = static_cast<uint16_t*>(y.data);
      if (bf16)
        forEachElement(x.numel(), [&](int64_t k) { ys[k] = floatToBf16(xs[k]); });
      else
        forEachElement(x.numel(), [&](int64_t k) { ys[k] = floatToF16(xs[k]); });
      return true;
    }
    if (x.dtype == low && y.dtype == DType::F32) {
      const auto* xs = static_cast<const uint16_t*>(x.data);
      float* ys = y.as<float>();
      if (bf16)
        forEachElement(x.numel(), [&](int64_t k) { ys[k] = bf16ToFloat(xs[k]); });
      else
        forEachElement(x.numel(), [&](int64_t k) { ys[k] = f16ToFloat(xs[k]); });
      return true;
    }
    if (x.dtype == low && y.dtype == low) {
      std::memmove(y.data, x.data, static_cast<size_t>(x.bytes()));
      return true;
    }
    return false;
  }
  return dispatchValue(x.dtype, [&](auto from) {
    using From = decltype(from);
    return dispatchValue(y.dtype, [&](auto to) {
      using To = decltype(to);
      const From* xs = x.as<From>();
      To* ys = y.as<To>();
      const bool toBool = y.dtype == DType::Bool;
      forEachElement(x.numel(), [&](int64_t k) { ys[k] = castValue<To>(xs[k], toBool); });
      return true;
    });
  });
}

bool fill(const TensorView& y, const FillParams& p) {
  int64_t n = y.numel();
  if (detail::Float32Views::any({&y})) { // float32 values, each rounded to the type
    detail::Float32Views f;
    return fill(f.out(y), p) && f.commit();
  }
  return dispatchValue(y.dtype, [&](auto tag) {
    using T = decltype(tag);
    size_t have = std::is_floating_point_v<T> ? p.value.size() : p.ivalue.size();
    if (have != 1 && static_cast<int64_t>(have) != n)
      return false;
    T* ys = y.as<T>();
    forEachElement(n, [&](int64_t k) { ys[k] = fillValue<T>(p, k, y.dtype); });
    return true;
  });
}

} // namespace lwrt::cpu
