//===- GradClipKernels.cpp - square_sum and clip_coef on the CPU ----------===//
//
// The kernels of lwrt/cpu_grad_clip.h. The sum of squares is one loop in
// operand and element order, in double (the interpreter's order): the same
// bits on any number of threads.
//
//===----------------------------------------------------------------------===//
#include "lwrt/cpu_grad_clip.h"

#include <cstdint>

namespace lwrt::cpu {

namespace {

template <typename T> double sumOfSquares(const TensorView& x) {
  const T* v = x.as<const T>();
  double sum = 0;
  for (int64_t k = 0, n = x.numel(); k < n; ++k)
    sum += squareTerm(v[k]);
  return sum;
}

bool isScalar(const TensorView& v, DType t) { return v.dtype == t && v.numel() == 1 && v.data; }

} // namespace

bool squareSum(const std::vector<TensorView>& xs, const TensorView& y, const SquareSumParams&) {
  if ((y.dtype != DType::F32 && y.dtype != DType::F64) || !isScalar(y, y.dtype))
    return false;
  double sum = 0;
  for (const TensorView& x : xs) {
    if (x.dtype != y.dtype || x.layout != Layout::RowMajor || (x.numel() > 0 && !x.data))
      return false;
    sum += y.dtype == DType::F32 ? sumOfSquares<float>(x) : sumOfSquares<double>(x);
  }
  if (y.dtype == DType::F32)
    *y.as<float>() = static_cast<float>(sum);
  else
    *y.as<double>() = sum;
  return true;
}

bool clipCoef(const TensorView& s, const TensorView& norm, const TensorView& coef,
              const ClipCoefParams& p) {
  if (!isScalar(s, s.dtype) || !isScalar(norm, s.dtype) || !isScalar(coef, s.dtype))
    return false;
  if (s.dtype == DType::F32) {
    auto r = clipCoefficient(*s.as<const float>(), p.max_norm);
    *norm.as<float>() = r.norm;
    *coef.as<float>() = r.coef;
  } else if (s.dtype == DType::F64) {
    auto r = clipCoefficient(*s.as<const double>(), p.max_norm);
    *norm.as<double>() = r.norm;
    *coef.as<double>() = r.coef;
  } else {
    return false;
  }
  return true;
}

} // namespace lwrt::cpu
