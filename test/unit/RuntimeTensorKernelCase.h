// RuntimeTensorKernelCase.h - one runtime tensor kernel on random data against the interpreter
// defines: rt, Ints, Views, RunFn, kFloats, kNumeric, kAll, toRt, Buf, optInts, sliceParams, KCase,
//          kSeeds, forCases, broadcastPair
//
// Each case builds one IR op on seeded random shapes, attributes and data,
// evaluates it with the reference interpreter (lwcc::evaluateOp in float64:
// the oracle) and runs the runtime kernel on the same data. Float results
// must agree to a relative 1e-12 (f64) or 1e-5 (f32), integer and bool
// results exactly, dropout masks bit for bit.
#pragma once

#include "RandomChoices.h"
#include "TestUtil.h"
#include "interp/Eval.h"
#include "interp/Interpreter.h"
#include "lwrt/cpu_tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace lwcc::test::kcase {

namespace rt = lwrt::cpu;
using Ints = std::vector<int64_t>;
using Views = std::vector<lwrt::TensorView>;
/// Runs the runtime kernel of `op` on operand and result views.
using RunFn = std::function<bool(const Op& op, const Views& in, const Views& out)>;

constexpr DType kFloats[] = {DType::F32, DType::F64};
constexpr DType kNumeric[] = {DType::F32, DType::F64, DType::I64, DType::I32};
constexpr DType kAll[] = {DType::F32, DType::F64, DType::I64, DType::I32, DType::Bool};

inline lwrt::DType toRt(DType t) { return static_cast<lwrt::DType>(t); }

/// A host buffer holding a tensor in the runtime's layout.
struct Buf {
  std::vector<uint64_t> mem;
  lwrt::TensorView view;
  explicit Buf(const TensorType& t) {
    view.dtype = toRt(t.dtype);
    view.shape = t.shape;
    mem.assign(static_cast<size_t>(view.bytes() + 7) / 8 + 1, 0xA5A5A5A5A5A5A5A5ull);
    view.data = mem.data();
  }
  double getFloat(int64_t k) const {
    return view.dtype == lwrt::DType::F32 ? view.as<float>()[k] : view.as<double>()[k];
  }
  int64_t getInt(int64_t k) const {
    switch (view.dtype) {
    case lwrt::DType::I64:
      return view.as<int64_t>()[k];
    case lwrt::DType::I32:
      return view.as<int32_t>()[k];
    default:
      return view.as<uint8_t>()[k];
    }
  }
  void set(const Tensor& t) {
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
      case DType::I32:
        view.as<int32_t>()[k] = static_cast<int32_t>(t.i[k]);
        break;
      default:
        view.as<uint8_t>()[k] = static_cast<uint8_t>(t.i[k]);
      }
  }
};

inline std::optional<Ints> optInts(const Op& op, const char* name) {
  if (!op.hasAttr(name))
    return std::nullopt;
  return op.getInts(name);
}

inline rt::SliceParams sliceParams(const Op& op) {
  return {op.getInts("starts"), op.getInts("ends"), optInts(op, "axes"), optInts(op, "steps")};
}

/// One op on random data, checked against the oracle.
class KCase : public RandomChoices {
public:
  KCase(uint64_t seed, DType dtype)
      : RandomChoices(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(dtype) * 977 + 1),
        b_(g_), dtype_(dtype) {
    desc_ = "seed " + std::to_string(seed) + " dtype " + std::string(dtypeName(dtype)) + ": ";
  }

  DType dtype() const { return dtype_; }
  void note(const std::string& s) { desc_ += s + " "; }

  enum class Dist { Normal, Positive, AwayFromZero, Unit, NearOne };

  /// A graph input with random values of type t (floats representable in t).
  Value* input(TensorType t, Dist d = Dist::Normal) {
    int64_t n = t.numElements();
    if (!isFloat(t.dtype)) {
      std::vector<int64_t> v(n);
      for (int64_t& x : v)
        x = t.dtype == DType::Bool    ? randInt(0, 1)
            : d == Dist::AwayFromZero ? (coin() ? 1 : -1) * randInt(1, 9)
                                      : randInt(-20, 20);
      return inputOf(Tensor::fromInts(t, std::move(v)));
    }
    std::vector<double> v(n);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (double& x : v) {
      switch (d) {
      case Dist::Normal:
        x = normal(rng_);
        break;
      case Dist::Positive:
        x = uniform(0.5, 2.0);
        break;
      case Dist::AwayFromZero:
        x = (coin() ? 1 : -1) * uniform(0.2, 1.5);
        break;
      case Dist::Unit:
        x = uniform(0.0, 1.0);
        break;
      case Dist::NearOne: // tanh outputs, some close to +-1
        x = (coin() ? 1 : -1) * (coin() ? uniform(0.99, 0.99999) : uniform(0.0, 1.0));
        break;
      }
      if (t.dtype == DType::F32)
        x = static_cast<float>(x);
    }
    return inputOf(Tensor::fromFloats(t, std::move(v)));
  }
  Value* input(const Shape& s, Dist d = Dist::Normal) { return input({dtype_, s}, d); }

  Value* inputOf(Tensor t) {
    std::string name = "x"; // appended: GCC 12 at -O3 warns of a false overlap in "x" + string
    name += std::to_string(data_.size());
    Value* v = g_.addInput(name, t.type);
    index_[v] = data_.size();
    data_.push_back(std::move(t));
    return v;
  }

  /// Creates the op with inferred types; null (and a failure) if it cannot.
  Op* op(OpKind kind, const std::vector<Value*>& operands, std::vector<NamedAttr> attrs = {},
         unsigned numResults = 1) {
    auto op = b_.createInferred(kind, operands, std::move(attrs), numResults);
    if (!op) {
      ADD_FAILURE() << desc_ << "cannot build: " << llvm::toString(op.takeError());
      return nullptr;
    }
    return *op;
  }
  Op* constant(TensorType t, std::vector<NamedAttr> attrs) {
    Op* c = b_.create(OpKind::Constant, {}, {std::move(t)}, std::move(attrs));
    return c;
  }

  /// Runs the oracle and the kernel and compares every result element;
  /// `exact` asks float results to be bit-identical to the oracle's rounded.
  void check(Op* op, const RunFn& run, bool exact = false) {
    if (!op)
      return;
    std::string what = desc_ + std::string(op->mnemonic()) + " " + describeAttrs(*op);
    std::vector<const Tensor*> operands;
    std::vector<Buf> ins;
    Views inViews, outViews;
    for (Value* v : op->operands()) {
      const Tensor& t = data_.at(index_.at(v));
      operands.push_back(&t);
      ins.emplace_back(t.type);
      ins.back().set(t);
    }
    auto want = evaluateOp(*op, operands, Precision::F64);
    ASSERT_TRUE(!!want) << what << llvm::toString(want.takeError());
    std::vector<Buf> outs;
    for (unsigned r = 0; r < op->numResults(); ++r)
      outs.emplace_back(op->result(r)->type());
    for (const Buf& b : ins)
      inViews.push_back(b.view);
    for (const Buf& b : outs)
      outViews.push_back(b.view);
    ASSERT_TRUE(run(*op, inViews, outViews)) << what << "kernel refused";
    for (unsigned r = 0; r < op->numResults(); ++r)
      compare((*want)[r], outs[r], exact, what + "result #" + std::to_string(r));
  }

  /// The kernel must refuse (return false) on this op's data.
  void expectRefused(Op* op, const RunFn& run) {
    if (!op)
      return;
    std::vector<Buf> ins, outs;
    Views inViews, outViews;
    for (Value* v : op->operands()) {
      ins.emplace_back(data_.at(index_.at(v)).type);
      ins.back().set(data_.at(index_.at(v)));
      inViews.push_back(ins.back().view);
    }
    for (unsigned r = 0; r < op->numResults(); ++r) {
      outs.emplace_back(op->result(r)->type());
      outViews.push_back(outs.back().view);
    }
    EXPECT_FALSE(run(*op, inViews, outViews)) << desc_ << op->mnemonic();
  }

private:
  static std::string describeAttrs(const Op& op) {
    std::string s;
    for (const NamedAttr& a : op.attrs())
      s += a.name + "=" + a.value.str() + " ";
    for (Value* v : op.operands())
      s += v->type().str() + " ";
    return s;
  }

  static void compare(const Tensor& want, const Buf& got, bool exact, const std::string& what) {
    ASSERT_EQ(got.view.numel(), want.size()) << what;
    for (int64_t k = 0; k < want.size(); ++k) {
      if (!want.isFloatData()) {
        ASSERT_EQ(got.getInt(k), want.i[k]) << what << " element " << k;
        continue;
      }
      double w = want.f[k], gv = got.getFloat(k);
      if (exact) {
        double rounded = got.view.dtype == lwrt::DType::F32 ? static_cast<float>(w) : w;
        ASSERT_EQ(std::memcmp(&rounded, &gv, sizeof(double)), 0)
            << what << " element " << k << ": " << gv << " vs " << w;
        continue;
      }
      if (std::isnan(w) && std::isnan(gv))
        continue;
      if (std::isinf(w) && gv == w)
        continue;
      double tol = got.view.dtype == lwrt::DType::F32 ? 1e-5 : 1e-12;
      ASSERT_LE(std::fabs(gv - w), tol * std::max(std::fabs(w), 1e-30))
          << what << " element " << k << ": got " << gv << ", want " << w;
    }
  }

  Graph g_;
  Builder b_;
  DType dtype_;
  std::string desc_;
  std::vector<Tensor> data_;
  std::unordered_map<const Value*, size_t> index_;
};

constexpr int kSeeds = 5;

/// Runs body(case) for every seed and each of `dtypes`.
template <typename Range, typename Body> void forCases(const Range& dtypes, Body body) {
  for (int seed = 0; seed < kSeeds; ++seed)
    for (DType t : dtypes) {
      KCase c(static_cast<uint64_t>(seed), t);
      body(c);
    }
}

/// Two shapes that broadcast together, with leading dims dropped and some dims 1.
inline std::pair<Shape, Shape> broadcastPair(KCase& c) {
  Shape out = c.randShape(0, 4);
  auto part = [&] {
    Shape s(out.begin() + c.randInt(0, static_cast<int64_t>(out.size())), out.end());
    for (int64_t& d : s)
      if (c.randInt(0, 2) == 0)
        d = 1;
    return s;
  };
  return {part(), part()};
}

} // namespace lwcc::test::kcase
