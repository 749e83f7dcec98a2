//===- OptimizerKernels.cpp - Dropout, optimizer updates and checks ---------===//
//
// The CPU kernels of lwrt/cpu_tensor.h that draw dropout masks, update
// weights (SGD, Adam), schedule the learning rate and check gradients for
// non-finite values. The arithmetic is lwrt/dropout.h's, lwrt/optimizer_math.h's
// and lwrt/lr_schedule.h's, shared with the CUDA kernels.
//
//===----------------------------------------------------------------------===//
#include "Bf16.h"
#include "Common.h"
#include "TensorSupport.h"
#include "lwrt/cpu_tensor.h"
#include "lwrt/dropout.h"
#include "lwrt/f16.h"
#include "lwrt/kernel_checks.h"
#include "lwrt/optimizer_math.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <utility>
#include <vector>

namespace lwrt::cpu {

using namespace detail;

//===--- Randomness -------------------------------------------------------===//

bool dropoutMask(const TensorView& step, const TensorView& mask, const DropoutMaskParams& p) {
  int64_t s = 0;
  ShardIndex piece;
  if (!intScalar(step, s) || !(p.ratio >= 0 && p.ratio < 1) ||
      !dropoutPiece(mask.shape, p, piece) || mask.layout != Layout::RowMajor)
    return false;
  if (detail::Float32Views::narrow(mask.dtype)) { // mixed precision's dropout
    detail::Float32Views w;
    return dropoutMask(step, w.out(mask), p) && w.commit();
  }
  return dispatchFloat(mask.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* ms = mask.as<T>();
    forEachElement(mask.numel(), [&](int64_t k) {
      ms[k] = static_cast<T>(dropoutMaskValue(p.seed, s, p.ratio, piece, k));
    });
    return true;
  });
}

//===--- Optimizers -------------------------------------------------------===//

namespace {

/// An update's optional `finite` flag: false (and `ok` false) unless it is
/// a Bool scalar; true where the step is skipped (the flag is 0).
bool skipStep(const TensorView* finite, bool& ok) {
  ok = !finite || (finite->dtype == DType::Bool && finite->numel() == 1 && finite->data);
  return ok && finite && *static_cast<const uint8_t*>(finite->data) == 0;
}

/// A skipped update's results: each `from` copied to its `to` (nothing to do
/// where the memory plan put them on the same bytes).
bool keep(std::initializer_list<std::pair<const TensorView*, const TensorView*>> pairs) {
  for (const auto& [from, to] : pairs)
    if (from->data != to->data)
      std::memcpy(to->data, from->data, static_cast<size_t>(from->bytes()));
  return true;
}

} // namespace

bool sgdUpdate(const TensorView& w, const TensorView& g, const TensorView& m, const TensorView& lr,
               const TensorView* finite, const TensorView& wOut, const TensorView& mOut,
               const SgdParams& p) {
  double rate = 0;
  GradKind gk = GradKind::Same;
  bool flagOk = false;
  const bool skip = skipStep(finite, flagOk);
  if (!flagOk || !floatScalar(lr, rate) || !updateGrad(w, g, gk))
    return false;
  rate *= p.lr_scale;
  for (const TensorView* t : {&m, &wOut, &mOut})
    if (!sameView(w, *t))
      return false;
  if (skip)
    return keep({{&w, &wOut}, {&m, &mOut}});
  SgdHyper h{p.momentum, p.weight_decay, p.nesterov != 0};
  return dispatchFloat(w.dtype, [&](auto tag) {
    using T = decltype(tag);
    forEachElement(w.numel(), [&](int64_t k) {
      SgdElement e = sgdElement(
          w.as<T>()[k], scaledGradElement<T>(g.data, gk, k, static_cast<const T*>(p.grad_scale)),
          m.as<T>()[k], rate, h);
      mOut.as<T>()[k] = static_cast<T>(e.m);
      wOut.as<T>()[k] = static_cast<T>(e.w);
    });
    return true;
  });
}

bool adamUpdate(const TensorView& w, const TensorView& g, const TensorView& m, const TensorView& v,
                const TensorView& lr, const TensorView& step, const TensorView* finite,
                const TensorView& wOut, const TensorView& mOut, const TensorView& vOut,
                const AdamParams& p) {
  double rate = 0;
  int64_t s = 0;
  GradKind gk = GradKind::Same;
  bool flagOk = false;
  const bool skip = skipStep(finite, flagOk);
  if (!flagOk || !floatScalar(lr, rate) || !intScalar(step, s) || !updateGrad(w, g, gk))
    return false;
  rate *= p.lr_scale;
  for (const TensorView* t : {&m, &v, &wOut, &mOut, &vOut})
    if (!sameView(w, *t))
      return false;
  if (skip)
    return keep({{&w, &wOut}, {&m, &mOut}, {&v, &vOut}});
  AdamHyper h{p.beta1, p.beta2, p.epsilon, p.weight_decay, p.decoupled != 0};
  AdamCorrection corr = adamCorrection(h, s);
  return dispatchFloat(w.dtype, [&](auto tag) {
    using T = decltype(tag);
    forEachElement(w.numel(), [&](int64_t k) {
      AdamElement e = adamElement(
          w.as<T>()[k], scaledGradElement<T>(g.data, gk, k, static_cast<const T*>(p.grad_scale)),
          m.as<T>()[k], v.as<T>()[k], rate, h, corr);
      mOut.as<T>()[k] = static_cast<T>(e.m);
      vOut.as<T>()[k] = static_cast<T>(e.v);
      wOut.as<T>()[k] = static_cast<T>(e.w);
    });
    return true;
  });
}

namespace {

/// fn(slot, first, end) for the elements [first, end) of each slot that a
/// thread takes, in one pass over them all: the slot's pointers and
/// hyperparameters set once a piece, not once an element.
template <typename Slot, typename Fn> void forEachSlotRange(const std::vector<Slot>& slots, Fn fn) {
  std::vector<int64_t> elements;
  for (const Slot& s : slots)
    elements.push_back(s.w.numel());
  forEachPieceRange(elements,
                    [&](size_t p, int64_t first, int64_t end) { fn(slots[p], first, end); });
}

} // namespace

bool sgdUpdateGroup(const std::vector<SgdSlot>& slots, const TensorView& lr,
                    const TensorView* finite) {
  double rate = 0;
  bool flagOk = false;
  const bool skip = skipStep(finite, flagOk);
  if (slots.empty() || !flagOk || !floatScalar(lr, rate))
    return slots.empty();
  std::vector<GradKind> kinds(slots.size());
  for (size_t k = 0; k < slots.size(); ++k) {
    const SgdSlot& s = slots[k];
    if (!updateGrad(s.w, s.g, kinds[k]) || s.w.dtype != slots[0].w.dtype)
      return false;
    for (const TensorView* t : {&s.m, &s.wOut, &s.mOut})
      if (!sameView(s.w, *t))
        return false;
  }
  if (skip) {
    for (const SgdSlot& s : slots)
      keep({{&s.w, &s.wOut}, {&s.m, &s.mOut}});
    return true;
  }
  return dispatchFloat(slots[0].w.dtype, [&](auto tag) {
    using T = decltype(tag);
    forEachSlotRange(slots, [&](const SgdSlot& s, int64_t first, int64_t end) {
      const SgdHyper h{s.p.momentum, s.p.weight_decay, s.p.nesterov != 0};
      const double r = rate * s.p.lr_scale;
      const GradKind gk = kinds[static_cast<size_t>(&s - slots.data())];
      const T *w = s.w.as<T>(), *m = s.m.as<T>();
      const auto* scale = static_cast<const T*>(s.p.grad_scale);
      T *wOut = s.wOut.as<T>(), *mOut = s.mOut.as<T>();
      for (int64_t k = first; k < end; ++k) {
        SgdElement e = sgdElement(w[k], scaledGradElement<T>(s.g.data, gk, k, scale), m[k], r, h);
        mOut[k] = static_cast<T>(e.m);
        wOut[k] = static_cast<T>(e.w);
      }
    });
    return true;
  });
}

bool adamUpdateGroup(const std::vector<AdamSlot>& slots, const TensorView& lr,
                     const TensorView& step, const TensorView* finite) {
  double rate = 0;
  int64_t st = 0;
  bool flagOk = false;
  const bool skip = skipStep(finite, flagOk);
  if (slots.empty() || !flagOk || !floatScalar(lr, rate) || !intScalar(step, st))
    return slots.empty();
  std::vector<AdamCorrection> corr;
  std::vector<GradKind> kinds(slots.size());
  for (const AdamSlot& s : slots) {
    if (!updateGrad(s.w, s.g, kinds[corr.size()]) || s.w.dtype != slots[0].w.dtype)
      return false;
    for (const TensorView* t : {&s.m, &s.v, &s.wOut, &s.mOut, &s.vOut})
      if (!sameView(s.w, *t))
        return false;
    corr.push_back(adamCorrection(
        AdamHyper{s.p.beta1, s.p.beta2, s.p.epsilon, s.p.weight_decay, s.p.decoupled != 0}, st));
  }
  if (skip) {
    for (const AdamSlot& s : slots)
      keep({{&s.w, &s.wOut}, {&s.m, &s.mOut}, {&s.v, &s.vOut}});
    return true;
  }
  return dispatchFloat(slots[0].w.dtype, [&](auto tag) {
    using T = decltype(tag);
    forEachSlotRange(slots, [&](const AdamSlot& s, int64_t first, int64_t end) {
      const AdamHyper h{s.p.beta1, s.p.beta2, s.p.epsilon, s.p.weight_decay, s.p.decoupled != 0};
      const auto slot = static_cast<size_t>(&s - slots.data());
      const AdamCorrection c = corr[slot];
      const GradKind gk = kinds[slot];
      const double r = rate * s.p.lr_scale;
      const T *w = s.w.as<T>(), *m = s.m.as<T>(), *v = s.v.as<T>();
      const auto* scale = static_cast<const T*>(s.p.grad_scale);
      T *wOut = s.wOut.as<T>(), *mOut = s.mOut.as<T>(), *vOut = s.vOut.as<T>();
      for (int64_t k = first; k < end; ++k) {
        AdamElement e =
            adamElement(w[k], scaledGradElement<T>(s.g.data, gk, k, scale), m[k], v[k], r, h, c);
        mOut[k] = static_cast<T>(e.m);
        vOut[k] = static_cast<T>(e.v);
        wOut[k] = static_cast<T>(e.w);
      }
    });
    return true;
  });
}

bool lrSchedule(const TensorView& step, const TensorView& lr, const LrScheduleParams& p) {
  int64_t s = 0;
  if (!intScalar(step, s) || lr.numel() != 1)
    return false;
  if (p.kind == LrScheduleKind::Step && p.step_size < 1)
    return false;
  double rate = scheduledLr(p, s);
  return dispatchFloat(lr.dtype, [&](auto tag) {
    using T = decltype(tag);
    *lr.as<T>() = static_cast<T>(rate);
    return true;
  });
}

bool allFinite(const std::vector<TensorView>& xs, const TensorView& y, const AllFiniteParams&) {
  if (y.dtype != DType::Bool || y.numel() != 1 || !y.data)
    return false;
  bool finite = true;
  for (const TensorView& x : xs) {
    const int64_t n = x.numel();
    if (n > 0 && !x.data)
      return false;
    if (x.dtype == DType::F32) {
      const float* v = x.as<float>();
      for (int64_t k = 0; k < n && finite; ++k)
        finite = isFiniteFloat(v[k]);
    } else if (x.dtype == DType::F64) {
      const double* v = x.as<double>();
      for (int64_t k = 0; k < n && finite; ++k)
        finite = std::isfinite(v[k]);
    } else if (x.dtype == DType::F16 || x.dtype == DType::BF16) {
      // Infinite or NaN: the exponent bits all ones.
      const uint16_t mask = x.dtype == DType::F16 ? 0x7c00u : 0x7f80u;
      const auto* v = static_cast<const uint16_t*>(x.data);
      for (int64_t k = 0; k < n && finite; ++k)
        finite = (v[k] & mask) != mask;
    } else {
      return false;
    }
  }
  *static_cast<uint8_t*>(y.data) = finite ? 1 : 0;
  return true;
}

} // namespace lwrt::cpu
