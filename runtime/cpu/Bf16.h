// cpu/Bf16.h - bf16 operands through the float32 kernels (not installed)
// defines: Float32Views
//
// The CPU backend computes a bf16 op (a convolution, its gradients, a gemm)
// in float32: its bf16 operands widened exactly, float32 accumulation, and
// its result rounded to bf16 once (lwrt/bf16.h), which is what a GPU's bf16
// kernels compute up to the order of their sums.
#pragma once

#include "lwrt/bf16.h"
#include "lwrt/tensor.h"

#include <cstdint>
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
    const auto* src = static_cast<const uint16_t*>(v.data);
    float* dst = static_cast<float*>(f.data);
    for (int64_t k = 0, n = v.numel(); k < n; ++k)
      dst[k] = bf16ToFloat(src[k]);
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
  /// Rounds the stand-ins into their bf16 views; true.
  bool commit() {
    for (const auto& [to, from] : outs_) {
      const float* src = static_cast<const float*>(from->data);
      auto* dst = static_cast<uint16_t*>(to->data);
      for (int64_t k = 0, n = to->numel(); k < n; ++k)
        dst[k] = floatToBf16(src[k]);
    }
    return true;
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
};

} // namespace lwrt::cpu::detail
