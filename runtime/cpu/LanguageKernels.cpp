//===- LanguageKernels.cpp - gather/scatter elements, nll_loss on the CPU -===//
//
// The kernels of lwrt/cpu_language.h, walking the elements with the structs
// of lwrt/language_math.h (the interpreter and the CUDA kernels use them
// too). A gather or scatter runs its lines on the pool (each line reads or
// writes one line of data, in its own order); the loss sums its targets in
// order on one thread, in double: the same bits on any number of threads.
//
//===----------------------------------------------------------------------===//
#include "Common.h"
#include "Parallel.h"
#include "lwrt/cpu_language.h"
#include "lwrt/kernel_checks.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace lwrt::cpu {

namespace {

/// Lines per task of the pool.
constexpr int64_t kGrain = 64;

/// The indices as int64, or false for another element type.
bool readIndices(const TensorView& v, std::vector<int64_t>& out) {
  out.resize(static_cast<size_t>(v.numel()));
  return dispatchInt(v.dtype, [&](auto tag) {
    using J = decltype(tag);
    const J* src = v.as<const J>();
    for (size_t k = 0; k < out.size(); ++k)
      out[k] = static_cast<int64_t>(src[k]);
    return true;
  });
}

/// The lines of `indices` into `data` along `axis`, the indices as int64,
/// all in range; false otherwise.
bool elementsOf(const TensorView& data, const TensorView& indices, int64_t axis, ElementsLines& w,
                std::vector<int64_t>& idx) {
  if (indices.rank() != data.rank() || !rowMajor({&data, &indices}) ||
      !makeElementsLines(static_cast<int>(data.rank()), data.shape.data(), indices.shape.data(),
                         axis, w) ||
      !readIndices(indices, idx))
    return false;
  return std::all_of(idx.begin(), idx.end(),
                     [&](int64_t v) { return v >= -w.axisLen && v < w.axisLen; });
}

/// fn(index offset, data offset) for every element of indices, lines on the pool.
template <typename Fn>
void forEachElement(const ElementsLines& w, const std::vector<int64_t>& idx, const Fn& fn) {
  detail::parallelFor(w.lines, kGrain, [&](int64_t first, int64_t last) {
    for (int64_t l = first; l < last; ++l) {
      int64_t i0, d0;
      w.lineStart(l, i0, d0);
      for (int64_t j = 0; j < w.perLine; ++j) {
        int64_t at = i0 + j * w.idxStride[w.axis];
        fn(at, w.at(d0, idx[static_cast<size_t>(at)]));
      }
    }
  });
}

/// The targets as int64 and the walk of an nll_loss with input `shape`;
/// false when target or weight do not fit or a target is out of range.
bool nllOf(const std::vector<int64_t>& shape, DType dtype, const TensorView& target,
           const TensorView* weight, int64_t ignore, NllWalk& w, std::vector<int64_t>& t) {
  if (shape.size() < 2)
    return false;
  std::vector<int64_t> ts{shape[0]};
  ts.insert(ts.end(), shape.begin() + 2, shape.end());
  if (target.shape != ts || !readIndices(target, t))
    return false;
  if (weight && (weight->dtype != dtype || weight->shape != std::vector<int64_t>{shape[1]}))
    return false;
  w = makeNllWalk(static_cast<int>(shape.size()), shape.data(), ignore);
  return std::all_of(t.begin(), t.end(), [&](int64_t v) { return w.ignored(v) || w.valid(v); });
}

template <typename T>
double totalWeight(const NllWalk& w, const std::vector<int64_t>& t, const T* weight) {
  double sum = 0;
  for (int64_t j = 0; j < w.targets; ++j)
    sum += w.weightOf(t[static_cast<size_t>(j)], weight);
  return sum;
}

} // namespace

bool gatherElements(const TensorView& data, const TensorView& indices, const TensorView& y,
                    const GatherElementsParams& p) {
  ElementsLines w;
  std::vector<int64_t> idx;
  if (y.dtype != data.dtype || y.shape != indices.shape || !rowMajor({&y}) ||
      !elementsOf(data, indices, p.axis, w, idx))
    return false;
  return dispatchBytes(data.dtype, [&](auto tag) {
    using U = decltype(tag);
    const U* src = data.as<const U>();
    U* dst = y.as<U>();
    forEachElement(w, idx, [&](int64_t at, int64_t from) { dst[at] = src[from]; });
    return true;
  });
}

bool scatterElements(const TensorView& data, const TensorView& indices, const TensorView& updates,
                     const TensorView& y, const ScatterElementsParams& p) {
  ElementsLines w;
  std::vector<int64_t> idx;
  if (y.dtype != data.dtype || y.shape != data.shape || updates.dtype != data.dtype ||
      updates.shape != indices.shape || !rowMajor({&y, &updates}) ||
      !elementsOf(data, indices, p.axis, w, idx))
    return false;
  if (p.add)
    return dispatchNumeric(data.dtype, [&](auto tag) {
      using T = decltype(tag);
      const T* u = updates.as<const T>();
      T* dst = y.as<T>();
      if (dst != data.as<const T>())
        std::memmove(dst, data.as<const T>(), static_cast<size_t>(data.numel()) * sizeof(T));
      forEachElement(w, idx, [&](int64_t at, int64_t to) { dst[to] = dst[to] + u[at]; });
      return true;
    });
  return dispatchBytes(data.dtype, [&](auto tag) {
    using U = decltype(tag);
    const U* u = updates.as<const U>();
    U* dst = y.as<U>();
    if (dst != data.as<const U>())
      std::memmove(dst, data.as<const U>(), static_cast<size_t>(data.numel()) * sizeof(U));
    forEachElement(w, idx, [&](int64_t at, int64_t to) { dst[to] = u[at]; });
    return true;
  });
}

bool nllLoss(const TensorView& input, const TensorView& target, const TensorView* weight,
             const TensorView& loss, const NllLossParams& p) {
  NllWalk w;
  std::vector<int64_t> t;
  if (loss.dtype != input.dtype || !rowMajor({&input, &loss}) ||
      !nllOf(input.shape, input.dtype, target, weight, p.ignoreIndex, w, t))
    return false;
  bool none = p.reduction == NllReduction::None;
  if (none ? loss.shape != target.shape : loss.rank() != 0)
    return false;
  return dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = input.as<const T>();
    const T* wts = weight ? weight->as<const T>() : nullptr;
    T* out = loss.as<T>();
    double sum = 0;
    for (int64_t j = 0; j < w.targets; ++j) {
      double term = w.term(x, j, t[static_cast<size_t>(j)], wts);
      if (none)
        out[j] = static_cast<T>(term);
      sum += term;
    }
    if (p.reduction == NllReduction::Sum)
      *out = static_cast<T>(sum);
    else if (p.reduction == NllReduction::Mean)
      *out = static_cast<T>(sum / totalWeight(w, t, wts));
    return true;
  });
}

bool nllLossGrad(const TensorView& dloss, const TensorView& target, const TensorView* weight,
                 const TensorView& dinput, const NllLossParams& p) {
  NllWalk w;
  std::vector<int64_t> t;
  if (dloss.dtype != dinput.dtype || !rowMajor({&dloss, &dinput}) ||
      !nllOf(dinput.shape, dinput.dtype, target, weight, p.ignoreIndex, w, t))
    return false;
  bool none = p.reduction == NllReduction::None;
  if (none ? dloss.shape != target.shape : dloss.rank() != 0)
    return false;
  return dispatchFloat(dinput.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* dl = dloss.as<const T>();
    const T* wts = weight ? weight->as<const T>() : nullptr;
    T* dx = dinput.as<T>();
    std::fill(dx, dx + dinput.numel(), static_cast<T>(0));
    double divisor = p.reduction == NllReduction::Mean ? totalWeight(w, t, wts) : 1.0;
    for (int64_t j = 0; j < w.targets; ++j) {
      int64_t c = t[static_cast<size_t>(j)];
      if (w.ignored(c))
        continue;
      double d = none ? static_cast<double>(dl[j]) : static_cast<double>(*dl) / divisor;
      dx[w.inputAt(j, c)] = static_cast<T>(-w.weightOf(c, wts) * d);
    }
    return true;
  });
}

} // namespace lwrt::cpu
