// cpu/Bf16.h - bf16 operands through the float32 kernels (not installed)
// defines: Float32Views
//
// The CPU backend computes a bf16 op (a convolution, its gradients, a gemm)
// in float32: its bf16 operands widened exactly, float32 accumulation, and
// its result rounded to bf16 once, both conversions by the cast kernel
// (lwrt/bf16.h's rounding), which is what a GPU's bf16 kernels compute up to
// the order of their sums.
#pragma once

#include "lwrt/cpu_tensor.h"
#include "lwrt/tensor.h"

#include <deque>
#include <initializer_list>
#include <vector>

namespace lwrt::cpu::detail {

class Float32Views {
public:
  /// Whether any of `views` (null ones skipped) is bf16.
  static bool any(std::initializer_list<const TensorView*> views) {
    for (const TensorView* v : views)
      if (v && v->dtype == DType::BF16)
        return true;
    return false;
  }
  /// `v` itself unless it is bf16; else a float32 copy of it (exact).
  const TensorView& in(const TensorView& v) {
    if (v.dtype != DType::BF16)
      return v;
    TensorView& f = widened(v);
    ok_ = cast(v, f) && ok_;
    return f;
  }
  /// `v` itself unless it is bf16; else a float32 stand-in that commit()
  /// rounds into `v`.
  const TensorView& out(const TensorView& v) {
    if (v.dtype != DType::BF16)
      return v;
    TensorView& f = widened(v);
    outs_.push_back({&v, &f});
    return f;
  }
  /// Rounds the stand-ins into their bf16 views (the cast kernel); false
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
