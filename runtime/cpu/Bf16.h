// cpu/Bf16.h - bf16 and fp16 operands through the float32 kernels (not installed)
// defines: Float32Views
//
// The CPU backend computes a bf16 or fp16 op (a convolution, its
// gradients, a gemm) in float32: its 16-bit operands widened exactly,
// float32 accumulation, and its result rounded to its type once, both
// conversions by the cast kernel (lwrt/bf16.h's and lwrt/f16.h's
// rounding), which is what a GPU's 16-bit kernels compute up to the order
// of their sums.
#pragma once

#include "lwrt/cpu_tensor.h"
#include "lwrt/tensor.h"

#include <deque>
#include <initializer_list>
#include <vector>

namespace lwrt::cpu::detail {

class Float32Views {
public:
  /// Whether `t` is one of the 16-bit float types.
  static bool narrow(DType t) { return t == DType::BF16 || t == DType::F16; }
  /// Whether any of `views` (null ones skipped) is bf16 or fp16.
  static bool any(std::initializer_list<const TensorView*> views) {
    for (const TensorView* v : views)
      if (v && narrow(v->dtype))
        return true;
    return false;
  }
  /// `v` itself unless it is bf16 or fp16; else a float32 copy of it (exact).
  const TensorView& in(const TensorView& v) {
    if (!narrow(v.dtype))
      return v;
    TensorView& f = widened(v);
    ok_ = cast(v, f) && ok_;
    return f;
  }
  /// `v` itself unless it is bf16 or fp16; else a float32 stand-in that
  /// commit() rounds into `v`.
  const TensorView& out(const TensorView& v) {
    if (!narrow(v.dtype))
      return v;
    TensorView& f = widened(v);
    outs_.push_back({&v, &f});
    return f;
  }
  /// Rounds the stand-ins into their 16-bit views (the cast kernel); false
  /// when a view could not be converted.
  bool commit() {
    for (const auto& [to, from] : outs_)
      ok_ = cast(*from, *to) && ok_;
    return ok_;
  }

private:
  TensorView& widened(const TensorView& v) {
    buffers_.emplace_back(static_cast<size_t>(v.numel()));
    views_.push_back(TensorView{buffers_.back().data(), DType::F32, v.shape, v.layout});
    return views_.back();
  }
  std::deque<std::vector<float>> buffers_;
  std::deque<TensorView> views_;
  std::vector<std::pair<const TensorView*, const TensorView*>> outs_;
  bool ok_ = true;
};

} // namespace lwrt::cpu::detail
