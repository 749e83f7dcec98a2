//===- RuntimeZooKernelTest.cpp - Model-collection CPU kernels vs the interpreter ===//
//
// The activations, prelu, max/min and resize kernels of lwrt/cpu_activation.h
// and lwrt/cpu_resize.h on seeded random shapes, attributes and data,
// against the reference interpreter (lwcc::evaluateOp in float64): results
// within a relative 1e-5 (f32) or bit for bit (f64: kernels and interpreter
// call the same functions of lwrt/activation_math.h and lwrt/resize_math.h
// in double), integers exactly. ResizeSplitTest.cpp checks resize split
// over devices.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"
#include "interp/Interpreter.h"
#include "lwrt/cpu_activation.h"
#include "lwrt/cpu_resize.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <gtest/gtest.h>
#include <iterator>
#include <random>

namespace lwcc::test {
namespace {

namespace rt = lwrt::cpu;
using Views = std::vector<lwrt::TensorView>;

/// A host buffer with a tensor's elements in the runtime's layout.
struct Buf {
  std::vector<uint64_t> mem;
  lwrt::TensorView view;
  explicit Buf(const Tensor& t) {
    view.dtype = static_cast<lwrt::DType>(t.type.dtype);
    view.shape = t.type.shape;
    mem.assign(static_cast<size_t>(view.bytes() + 7) / 8 + 1, 0xA5A5A5A5A5A5A5A5ull);
    view.data = mem.data();
    for (int64_t k = 0; k < t.size(); ++k)
      switch (t.type.dtype) {
      case DType::F32:
        view.as<float>()[k] = static_cast<float>(t.f[k]);
        break;
      case DType::F64:
        view.as<double>()[k] = t.f[k];
        break;
      case DType::I64:
        view.as<int64_t>()[k] = t.i[k];
        break;
      case DType::Bool:
        view.as<uint8_t>()[k] = static_cast<uint8_t>(t.i[k]);
        break;
      default:
        view.as<int32_t>()[k] = static_cast<int32_t>(t.i[k]);
      }
  }
  double get(int64_t k) const {
    switch (view.dtype) {
    case lwrt::DType::F32:
      return view.as<float>()[k];
    case lwrt::DType::F64:
      return view.as<double>()[k];
    case lwrt::DType::I64:
      return static_cast<double>(view.as<int64_t>()[k]);
    case lwrt::DType::Bool:
      return view.as<uint8_t>()[k];
    default:
      return view.as<int32_t>()[k];
    }
  }
};

class Case {
public:
  Case(uint64_t seed, DType t) : rng_(seed * 7919 + static_cast<uint64_t>(t)), b_(g_), t_(t) {}
  DType dtype() const { return t_; }
  int64_t randInt(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  double uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng_);
  }
  Shape randShape(int64_t lo, int64_t hi, int64_t maxDim = 4) {
    Shape s(randInt(lo, hi));
    for (int64_t& d : s)
      d = randInt(1, maxDim);
    return s;
  }

  /// "x0", "x1", ...: the next input's name (appended: GCC 12's -O3 warns
  /// of a false overlap in `"x" + std::string`).
  std::string inputName() const {
    std::string name = "x";
    name += std::to_string(data_.size());
    return name;
  }

  /// An input of random values (scaled by `scale`; integers in [-9, 9]),
  /// with a few exact kinks (0, +-3) among the floats.
  Value* input(const Shape& s, double scale = 2.0) {
    TensorType t(t_, s);
    Tensor v(t);
    for (int64_t k = 0; k < v.size(); ++k) {
      if (!isFloat(t_)) {
        v.i[k] = randInt(-9, 9);
        continue;
      }
      int64_t pick = randInt(0, 9);
      double x = pick == 0 ? 0.0 : pick == 1 ? 3.0 * (randInt(0, 1) ? 1 : -1) : uniform(-1, 1);
      v.f[k] = t_ == DType::F32 ? static_cast<float>(x * scale) : x * scale;
    }
    Value* in = g_.addInput(inputName(), t);
    index_[in] = data_.size();
    data_.push_back(std::move(v));
    return in;
  }

  /// A bool input of random 0s and 1s.
  Value* boolInput(const Shape& s) {
    TensorType t(DType::Bool, s);
    Tensor v(t);
    for (int64_t& b : v.i)
      b = randInt(0, 1);
    Value* in = g_.addInput(inputName(), t);
    index_[in] = data_.size();
    data_.push_back(std::move(v));
    return in;
  }

  Op* op(OpKind kind, const std::vector<Value*>& operands, std::vector<NamedAttr> attrs = {},
         unsigned numResults = 1) {
    auto o = b_.createInferred(kind, operands, std::move(attrs), numResults);
    EXPECT_TRUE(!!o) << (o ? "" : llvm::toString(o.takeError()));
    return o ? *o : nullptr;
  }

  /// The interpreter's results of `o` (f64) and the kernel's; compares them.
  void check(Op* o, const std::function<bool(const Views&, const Views&)>& run) {
    if (!o)
      return;
    std::vector<const Tensor*> operands;
    std::vector<Buf> ins, outs;
    Views in, out;
    for (Value* v : o->operands()) {
      operands.push_back(&data_.at(index_.at(v)));
      ins.emplace_back(data_.at(index_.at(v)));
    }
    for (unsigned r = 0; r < o->numResults(); ++r)
      outs.emplace_back(Tensor(o->result(r)->type()));
    for (Buf& b : ins)
      in.push_back(b.view);
    for (Buf& b : outs)
      out.push_back(b.view);
    auto want = evaluateOp(*o, operands, Precision::F64);
    ASSERT_TRUE(!!want) << llvm::toString(want.takeError());
    ASSERT_TRUE(run(in, out)) << o->mnemonic() << ": the kernel refused";
    for (size_t r = 0; r < outs.size(); ++r)
      for (int64_t k = 0; k < (*want)[r].size(); ++k) {
        double w = (*want)[r].get(k), got = outs[r].get(k);
        double tol = t_ == DType::F32 ? 1e-5 * std::max(std::fabs(w), 1e-6) : 0.0;
        ASSERT_LE(std::fabs(got - w), tol)
            << o->mnemonic() << " result " << r << " element " << k << ": " << got << " vs " << w;
      }
  }

private:
  std::mt19937_64 rng_;
  Graph g_{"kernels"};
  Builder b_;
  DType t_;
  std::vector<Tensor> data_;
  std::unordered_map<const Value*, size_t> index_;
};

constexpr DType kFloats[] = {DType::F32, DType::F64};

template <typename Body> void forCases(std::initializer_list<DType> types, Body body) {
  for (uint64_t seed = 0; seed < 5; ++seed)
    for (DType t : types) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " " + std::string(dtypeName(t)));
      Case c(seed, t);
      body(c);
    }
}

TEST(RuntimeZooKernel, Activations) {
  using Fwd =
      bool (*)(const lwrt::TensorView&, const lwrt::TensorView&, const lwrt::ActivationParams&);
  using Bwd = bool (*)(const lwrt::TensorView&, const lwrt::TensorView&, const lwrt::TensorView&,
                       const lwrt::ActivationParams&);
  struct A {
    OpKind kind, grad;
    Fwd fwd;
    Bwd bwd;
  };
  const A acts[] = {
#define X(E, fn) {OpKind::E, OpKind::E##Grad, rt::fn, rt::fn##Grad},
      LWRT_ACTIVATIONS(X)
#undef X
  };
  forCases({DType::F32, DType::F64}, [&](Case& c) {
    Shape s = c.randShape(0, 4);
    for (const A& a : acts) {
      std::vector<NamedAttr> attrs;
      lwrt::ActivationParams p;
      const OpInfo& info = opInfo(a.kind);
      for (const char* n : {"alpha", "beta", "gamma"})
        if (const AttrSpec* spec = info.findAttr(n)) {
          double v = spec->defaultValue.getFloat() * c.uniform(0.5, 1.5);
          attrs.push_back({n, v});
          (std::string(n) == "alpha" ? p.alpha : std::string(n) == "beta" ? p.beta : p.gamma) = v;
        }
      c.check(c.op(a.kind, {c.input(s)}, attrs),
              [&](const Views& in, const Views& out) { return a.fwd(in[0], out[0], p); });
      c.check(c.op(a.grad, {c.input(s), c.input(s)}, attrs),
              [&](const Views& in, const Views& out) { return a.bwd(in[0], in[1], out[0], p); });
    }
  });
}

TEST(RuntimeZooKernel, PRelu) {
  forCases({DType::F32, DType::F64}, [](Case& c) {
    Shape xs = c.randShape(1, 4);
    // The slope: the trailing dims of x, some of them 1.
    Shape ss(xs.begin() + c.randInt(0, static_cast<int64_t>(xs.size())), xs.end());
    for (int64_t& d : ss)
      if (c.randInt(0, 1))
        d = 1;
    c.check(c.op(OpKind::PRelu, {c.input(xs), c.input(ss)}),
            [](const Views& in, const Views& out) { return rt::prelu(in[0], in[1], out[0]); });
    c.check(c.op(OpKind::PReluGrad, {c.input(xs), c.input(ss), c.input(xs)}, {}, 2),
            [](const Views& in, const Views& out) {
              return rt::preluGrad(in[0], in[1], in[2], out[0], out[1]);
            });
  });
}

/// A shape that broadcasts to `out`: a random suffix of it, each dim 1
/// a third of the time.
Shape broadcastPart(Case& c, const Shape& out) {
  Shape s(out.begin() + c.randInt(0, static_cast<int64_t>(out.size())), out.end());
  for (int64_t& d : s)
    if (c.randInt(0, 2) == 0)
      d = 1;
  return s;
}

TEST(RuntimeZooKernel, MaxAndMin) {
  forCases({DType::F32, DType::F64, DType::I64, DType::I32}, [](Case& c) {
    Shape out = c.randShape(0, 4);
    auto part = [&] { return broadcastPart(c, out); };
    for (bool isMax : {true, false}) {
      Shape sa = part(), sb = part();
      auto fwd = isMax ? rt::maximum : rt::minimum;
      c.check(c.op(isMax ? OpKind::Max : OpKind::Min, {c.input(sa, 1.0), c.input(sb, 1.0)}),
              [&](const Views& in, const Views& o) { return fwd(in[0], in[1], o[0]); });
      if (!isFloat(c.dtype()))
        continue;
      // Ties on purpose: values from a handful (scale 1 rounds many to 0 and 3).
      Value* a = c.input(sa, 1.0);
      Value* b = c.input(sb, 1.0);
      auto y = shape::broadcast(sa, sb);
      ASSERT_TRUE(!!y);
      auto bwd = isMax ? rt::maximumGrad : rt::minimumGrad;
      c.check(
          c.op(isMax ? OpKind::MaxGrad : OpKind::MinGrad, {a, b, c.input(*y)}, {}, 2),
          [&](const Views& in, const Views& o) { return bwd(in[0], in[1], in[2], o[0], o[1]); });
    }
  });
}

TEST(RuntimeZooKernel, CompareAndWhere) {
  forCases({DType::F32, DType::F64, DType::I64, DType::I32}, [](Case& c) {
    Shape out = c.randShape(0, 4);
    auto part = [&] { return broadcastPart(c, out); };
    for (const char* kind : lwrt::kCompareKindNames) {
      Shape sa = part(), sb = part();
      lwrt::CompareParams p;
      for (size_t k = 0; k < std::size(lwrt::kCompareKindNames); ++k)
        if (std::string(kind) == lwrt::kCompareKindNames[k])
          p.kind = static_cast<lwrt::CompareKind>(k);
      // Scale 1: many values equal (the kinks 0 and 3 recur). The logical
      // kinds (and, or, xor) take bools.
      bool logical = p.kind == lwrt::CompareKind::And || p.kind == lwrt::CompareKind::Or ||
                     p.kind == lwrt::CompareKind::Xor;
      Value* a = logical ? c.boolInput(sa) : c.input(sa, 1.0);
      Value* b = logical ? c.boolInput(sb) : c.input(sb, 1.0);
      Op* cmp = c.op(OpKind::Compare, {a, b}, {{"kind", std::string(kind)}});
      c.check(cmp,
              [&](const Views& in, const Views& o) { return rt::compare(in[0], in[1], o[0], p); });
      c.check(c.op(OpKind::Where, {c.boolInput(part()), c.input(part()), c.input(part())}),
              [](const Views& in, const Views& o) { return rt::where(in[0], in[1], in[2], o[0]); });
    }
  });
}

/// Random resize attributes for x of shape `xs`: two resized trailing dims.
std::vector<NamedAttr> resizeAttrs(Case& c, const Shape& xs) {
  static const char* modes[] = {"nearest", "linear", "cubic"};
  static const char* coords[] = {"half_pixel", "pytorch_half_pixel",   "align_corners",
                                 "asymmetric", "tf_half_pixel_for_nn", "half_pixel_symmetric"};
  static const char* nearests[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil",
                                   "simple"};
  std::vector<double> scales(xs.size(), 1.0);
  Shape out = xs;
  for (size_t d = xs.size() >= 2 ? xs.size() - 2 : 0; d < xs.size(); ++d) {
    static const double choices[] = {0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0};
    scales[d] = choices[c.randInt(0, 6)];
    out[d] = std::max<int64_t>(1, static_cast<int64_t>(std::floor(xs[d] * scales[d])));
  }
  std::string mode = modes[c.randInt(0, 2)];
  return {{"sizes", out},
          {"scales", scales},
          {"mode", mode},
          {"coordinate_transformation_mode", std::string(coords[c.randInt(0, 5)])},
          {"nearest_mode", std::string(nearests[c.randInt(0, 4)])},
          {"cubic_coeff_a", c.randInt(0, 1) ? -0.75 : -0.5},
          {"exclude_outside", c.randInt(0, 1)}};
}

TEST(RuntimeZooKernel, Resize) {
  forCases({DType::F32, DType::F64}, [](Case& c) {
    for (int rep = 0; rep < 4; ++rep) {
      Shape xs = c.randShape(1, 4, 5);
      auto attrs = resizeAttrs(c, xs);
      Op* y = c.op(OpKind::Resize, {c.input(xs)}, attrs);
      if (!y)
        return;
      auto params = [&](const Op& op) {
        lwrt::ResizeParams q;
        q.scales = op.getFloats("scales");
        auto index = [&](const char* attr, const auto& names) {
          for (size_t k = 0; k < std::size(names); ++k)
            if (op.getString(attr) == names[k])
              return static_cast<int32_t>(k);
          return int32_t{0};
        };
        q.mode = static_cast<lwrt::ResizeMode>(index("mode", lwrt::kResizeModeNames));
        q.coord = static_cast<lwrt::ResizeCoord>(
            index("coordinate_transformation_mode", lwrt::kResizeCoordNames));
        q.nearest =
            static_cast<lwrt::ResizeNearest>(index("nearest_mode", lwrt::kResizeNearestNames));
        q.cubicCoeffA = op.getFloat("cubic_coeff_a");
        q.excludeOutside = op.getInt("exclude_outside");
        return q;
      };
      lwrt::ResizeParams p = params(*y);
      c.check(y, [&](const Views& in, const Views& out) { return rt::resize(in[0], out[0], p); });
      std::vector<NamedAttr> gradAttrs = attrs;
      gradAttrs.push_back({"input_shape", xs});
      Op* dx = c.op(OpKind::ResizeGrad, {c.input(y->result()->type().shape)}, gradAttrs);
      c.check(dx,
              [&](const Views& in, const Views& out) { return rt::resizeGrad(in[0], out[0], p); });
    }
  });
}

} // namespace
} // namespace lwcc::test
