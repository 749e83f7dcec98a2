//===- RuntimeTensorKernelTest.cpp - lwrt/cpu_tensor.h vs the interpreter -===//
//
// Each case builds one IR op on seeded random shapes, attributes and data,
// evaluates it with the reference interpreter (lwcc::evaluateOp in float64:
// the oracle) and runs the runtime kernel on the same data. Float results
// must agree to a relative 1e-12 (f64) or 1e-5 (f32), integer and bool
// results exactly, dropout masks bit for bit.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"
#include "interp/Eval.h"
#include "interp/Interpreter.h"
#include "lwrt/cpu_tensor.h"
#include "lwrt/dropout.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <random>

namespace lwcc::test {
namespace {

namespace rt = lwrt::cpu;
using Ints = std::vector<int64_t>;
using Views = std::vector<lwrt::TensorView>;
/// Runs the runtime kernel of `op` on operand and result views.
using RunFn = std::function<bool(const Op& op, const Views& in, const Views& out)>;

constexpr DType kFloats[] = {DType::F32, DType::F64};
constexpr DType kNumeric[] = {DType::F32, DType::F64, DType::I64, DType::I32};
constexpr DType kAll[] = {DType::F32, DType::F64, DType::I64, DType::I32, DType::Bool};

lwrt::DType toRt(DType t) { return static_cast<lwrt::DType>(t); }

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

std::optional<Ints> optInts(const Op& op, const char* name) {
  if (!op.hasAttr(name))
    return std::nullopt;
  return op.getInts(name);
}

rt::SliceParams sliceParams(const Op& op) {
  return {op.getInts("starts"), op.getInts("ends"), optInts(op, "axes"), optInts(op, "steps")};
}

/// One op on random data, checked against the oracle.
class KCase {
public:
  KCase(uint64_t seed, DType dtype)
      : rng_(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(dtype) * 977 + 1), b_(g_),
        dtype_(dtype) {
    desc_ = "seed " + std::to_string(seed) + " dtype " + std::string(dtypeName(dtype)) + ": ";
  }

  DType dtype() const { return dtype_; }
  int64_t randInt(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  double uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng_);
  }
  bool coin() { return randInt(0, 1) == 1; }
  Shape randShape(int64_t minRank, int64_t maxRank, int64_t maxDim = 4) {
    Shape s(randInt(minRank, maxRank));
    for (int64_t& d : s)
      d = randInt(1, maxDim);
    return s;
  }
  int64_t spellAxis(int64_t axis, int64_t rank) { return coin() ? axis - rank : axis; }
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
    Value* v = g_.addInput("x" + std::to_string(data_.size()), t.type);
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

  std::mt19937_64 rng_;
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

//===--- Elementwise -------------------------------------------------------===//

TEST(RuntimeTensorKernelTest, UnaryFloat) {
  using D = KCase::Dist;
  struct U {
    OpKind kind;
    D dist;
    bool (*fn)(const lwrt::TensorView&, const lwrt::TensorView&);
  };
  const U unaries[] = {
      {OpKind::Relu, D::Normal, rt::relu},   {OpKind::Sigmoid, D::Normal, rt::sigmoid},
      {OpKind::Tanh, D::Normal, rt::tanh},   {OpKind::Erf, D::Normal, rt::erf},
      {OpKind::Exp, D::Normal, rt::exp},     {OpKind::Log, D::Positive, rt::log},
      {OpKind::Sqrt, D::Positive, rt::sqrt}, {OpKind::Reciprocal, D::AwayFromZero, rt::reciprocal}};
  forCases(kFloats, [&](KCase& c) {
    Shape s = c.randShape(0, 4);
    for (const U& u : unaries)
      c.check(c.op(u.kind, {c.input(s, u.dist)}),
              [&](const Op&, const Views& in, const Views& out) { return u.fn(in[0], out[0]); });
    c.check(c.op(OpKind::LeakyRelu, {c.input(s)}, {{"alpha", c.uniform(0.0, 0.5)}}),
            [](const Op& op, const Views& in, const Views& out) {
              return rt::leakyRelu(in[0], out[0], {op.getFloat("alpha")});
            });
    double lo = c.uniform(-1.0, 0.0), hi = c.uniform(0.0, 1.0);
    std::vector<NamedAttr> clipAttrs;
    if (c.coin())
      clipAttrs = {{"min", lo}, {"max", hi}};
    else
      clipAttrs = {{"max", hi}};
    c.check(c.op(OpKind::Clip, {c.input(s)}, clipAttrs),
            [](const Op& op, const Views& in, const Views& out) {
              return rt::clip(in[0], out[0], {op.getFloat("min"), op.getFloat("max")});
            });
  });
}

TEST(RuntimeTensorKernelTest, UnaryNumeric) {
  forCases(kNumeric, [](KCase& c) {
    Shape s = c.randShape(0, 4);
    c.check(c.op(OpKind::Neg, {c.input(s)}),
            [](const Op&, const Views& in, const Views& out) { return rt::neg(in[0], out[0]); });
    c.check(c.op(OpKind::Abs, {c.input(s)}),
            [](const Op&, const Views& in, const Views& out) { return rt::abs(in[0], out[0]); });
    c.check(c.op(OpKind::Sign, {c.input(s)}),
            [](const Op&, const Views& in, const Views& out) { return rt::sign(in[0], out[0]); });
  });
}

/// Two shapes that broadcast together, with leading dims dropped and some dims 1.
std::pair<Shape, Shape> broadcastPair(KCase& c) {
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

TEST(RuntimeTensorKernelTest, Binary) {
  using D = KCase::Dist;
  struct B {
    OpKind kind;
    bool (*fn)(const lwrt::TensorView&, const lwrt::TensorView&, const lwrt::TensorView&);
  };
  const B binaries[] = {{OpKind::Add, rt::add},
                        {OpKind::Sub, rt::sub},
                        {OpKind::Mul, rt::mul},
                        {OpKind::Div, rt::div},
                        {OpKind::Pow, rt::pow}};
  forCases(kNumeric, [&](KCase& c) {
    for (const B& b : binaries) {
      if (b.kind == OpKind::Pow && !isFloat(c.dtype()))
        continue;
      for (int rep = 0; rep < 2; ++rep) {
        auto [sa, sb] = broadcastPair(c);
        Value* x = c.input(sa, b.kind == OpKind::Pow ? D::Positive : D::Normal);
        Value* y = c.input(sb, b.kind == OpKind::Div ? D::AwayFromZero : D::Normal);
        c.check(c.op(b.kind, {x, y}), [&](const Op&, const Views& in, const Views& out) {
          return b.fn(in[0], in[1], out[0]);
        });
      }
    }
    if (!isFloat(c.dtype())) { // integer division by zero is refused
      Value* x = c.input(Shape{3});
      Value* z = c.inputOf(Tensor::fromInts({c.dtype(), {3}}, {1, 0, 2}));
      c.expectRefused(c.op(OpKind::Div, {x, z}), [](const Op&, const Views& in, const Views& out) {
        return rt::div(in[0], in[1], out[0]);
      });
    }
  });
}

TEST(RuntimeTensorKernelTest, Backward) {
  using D = KCase::Dist;
  forCases(kFloats, [](KCase& c) {
    Shape s = c.randShape(0, 4);
    c.check(c.op(OpKind::ReluGrad, {c.input(s), c.input(s)}),
            [](const Op&, const Views& in, const Views& out) {
              return rt::reluGrad(in[0], in[1], out[0]);
            });
    c.check(c.op(OpKind::LeakyReluGrad, {c.input(s), c.input(s)}, {{"alpha", c.uniform(0, 0.3)}}),
            [](const Op& op, const Views& in, const Views& out) {
              return rt::leakyReluGrad(in[0], in[1], out[0], {op.getFloat("alpha")});
            });
    c.check(c.op(OpKind::SigmoidGrad, {c.input(s, D::Unit), c.input(s)}),
            [](const Op&, const Views& in, const Views& out) {
              return rt::sigmoidGrad(in[0], in[1], out[0]);
            });
    c.check(c.op(OpKind::TanhGrad, {c.input(s, D::NearOne), c.input(s)}),
            [](const Op&, const Views& in, const Views& out) {
              return rt::tanhGrad(in[0], in[1], out[0]);
            });
    c.check(c.op(OpKind::ClipGrad, {c.input(s), c.input(s)},
                 {{"min", c.uniform(-1, 0)}, {"max", c.uniform(0, 1)}}),
            [](const Op& op, const Views& in, const Views& out) {
              return rt::clipGrad(in[0], in[1], out[0], {op.getFloat("min"), op.getFloat("max")});
            });
  });
}

//===--- Reductions --------------------------------------------------------===//

TEST(RuntimeTensorKernelTest, Reduce) {
  forCases(kNumeric, [](KCase& c) {
    for (OpKind kind : {OpKind::ReduceMean, OpKind::ReduceSum})
      for (int rep = 0; rep < 3; ++rep) {
        Shape s = c.randShape(0, 4);
        int64_t rank = static_cast<int64_t>(s.size());
        std::vector<NamedAttr> attrs{{"keepdims", static_cast<int64_t>(c.coin())}};
        if (rep > 0) {
          Ints axes;
          for (int64_t d = 0; d < rank; ++d)
            if (c.coin())
              axes.push_back(c.spellAxis(d, rank));
          std::shuffle(axes.begin(), axes.end(), std::mt19937_64(rep));
          attrs.push_back({"axes", axes});
        }
        c.check(c.op(kind, {c.input(s)}, attrs),
                [](const Op& op, const Views& in, const Views& out) {
                  rt::ReduceParams p{optInts(op, "axes"), op.getInt("keepdims")};
                  return op.kind() == OpKind::ReduceMean ? rt::reduceMean(in[0], out[0], p)
                                                         : rt::reduceSum(in[0], out[0], p);
                });
      }
  });
}

//===--- Data movement -----------------------------------------------------===//

TEST(RuntimeTensorKernelTest, CopyLike) {
  auto copyFn = [](const Op&, const Views& in, const Views& out) {
    return rt::copy(in[0], out[0]);
  };
  forCases(kAll, [&](KCase& c) {
    Shape s = c.randShape(0, 4);
    int64_t n = TensorType(DType::F32, s).numElements();
    c.check(c.op(OpKind::Reshape, {c.input(s)}, {{"shape", Ints{n, 1}}}), copyFn);
    c.check(c.op(OpKind::Flatten, {c.input(s)},
                 {{"axis", c.randInt(0, static_cast<int64_t>(s.size()))}}),
            copyFn);
    c.check(c.op(OpKind::Identity, {c.input(s)}), copyFn);
    if (isFloat(c.dtype()))
      c.check(c.op(OpKind::Dropout, {c.input(s)}, {{"ratio", 0.3}}), copyFn);
  });
}

TEST(RuntimeTensorKernelTest, Transpose) {
  forCases(kAll, [](KCase& c) {
    for (int rep = 0; rep < 3; ++rep) {
      Shape s = c.randShape(0, 5, 4);
      Ints perm(s.size());
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), std::mt19937_64(c.randInt(0, 1000)));
      c.check(c.op(OpKind::Transpose, {c.input(s)}, {{"perm", perm}}),
              [](const Op& op, const Views& in, const Views& out) {
                return rt::transpose(in[0], out[0], {op.getInts("perm")});
              });
    }
  });
}

TEST(RuntimeTensorKernelTest, ConcatAndSplit) {
  forCases(kAll, [](KCase& c) {
    Shape s = c.randShape(1, 4);
    int64_t rank = static_cast<int64_t>(s.size()), axis = c.randInt(0, rank - 1);
    std::vector<Value*> parts;
    for (int64_t k = 0, n = c.randInt(1, 3); k < n; ++k) {
      Shape p = s;
      p[axis] = c.randInt(0, 3);
      parts.push_back(c.input(p));
    }
    c.check(c.op(OpKind::Concat, parts, {{"axis", c.spellAxis(axis, rank)}}),
            [](const Op& op, const Views& in, const Views& out) {
              return rt::concat(in, out[0], {op.getInt("axis")});
            });
    Ints sizes;
    for (int64_t left = s[axis]; left > 0;) {
      sizes.push_back(c.randInt(0, left));
      left -= sizes.back();
    }
    if (c.coin())
      sizes.push_back(0);
    c.check(c.op(OpKind::Split, {c.input(s)}, {{"axis", c.spellAxis(axis, rank)}, {"split", sizes}},
                 static_cast<unsigned>(sizes.size())),
            [](const Op& op, const Views& in, const Views& out) {
              return rt::split(in[0], out, {op.getInt("axis"), op.getInts("split")});
            });
  });
}

/// Random slice attributes for shape `s`: clamped and out-of-range bounds,
/// negative steps, axes in random order and spelling.
std::vector<NamedAttr> randomSlice(KCase& c, const Shape& s) {
  int64_t rank = static_cast<int64_t>(s.size());
  Ints axes(rank), starts, ends, steps, spelled;
  std::iota(axes.begin(), axes.end(), 0);
  std::shuffle(axes.begin(), axes.end(), std::mt19937_64(c.randInt(0, 1000)));
  axes.resize(c.randInt(1, rank));
  for (int64_t a : axes) {
    int64_t d = s[a];
    starts.push_back(c.randInt(-d - 2, d + 2));
    ends.push_back(c.randInt(0, 4) == 0 ? (c.coin() ? INT64_MAX : INT64_MIN)
                                        : c.randInt(-d - 2, d + 2));
    steps.push_back((c.coin() ? 1 : -1) * c.randInt(1, 3));
    spelled.push_back(c.spellAxis(a, rank));
  }
  std::vector<NamedAttr> attrs{{"starts", starts}, {"ends", ends}};
  attrs.push_back({"axes", spelled});
  if (c.coin() || std::any_of(steps.begin(), steps.end(), [](int64_t v) { return v != 1; }))
    attrs.push_back({"steps", steps});
  return attrs;
}

TEST(RuntimeTensorKernelTest, Slice) {
  forCases(kAll, [](KCase& c) {
    for (int rep = 0; rep < 3; ++rep) {
      Shape s = c.randShape(1, 4, 5);
      c.check(c.op(OpKind::Slice, {c.input(s)}, randomSlice(c, s)),
              [](const Op& op, const Views& in, const Views& out) {
                return rt::slice(in[0], out[0], sliceParams(op));
              });
    }
  });
  // Without axes and steps.
  forCases(kFloats, [](KCase& c) {
    Shape s = c.randShape(2, 3, 5);
    c.check(c.op(OpKind::Slice, {c.input(s)}, {{"starts", Ints{1, -3}}, {"ends", Ints{-1, 100}}}),
            [](const Op& op, const Views& in, const Views& out) {
              return rt::slice(in[0], out[0], sliceParams(op));
            });
  });
}

TEST(RuntimeTensorKernelTest, SliceGrad) {
  forCases(kFloats, [](KCase& c) {
    for (int rep = 0; rep < 3; ++rep) {
      Shape s = c.randShape(1, 4, 5);
      std::vector<NamedAttr> attrs = randomSlice(c, s);
      Op* fwd = c.op(OpKind::Slice, {c.input(s)}, attrs);
      if (!fwd)
        return;
      attrs.push_back({"input_shape", Ints(s)});
      Value* dy = c.input(fwd->result()->type().shape);
      c.check(c.op(OpKind::SliceGrad, {dy}, attrs),
              [](const Op& op, const Views& in, const Views& out) {
                return rt::sliceGrad(in[0], out[0], sliceParams(op));
              });
    }
  });
}

TEST(RuntimeTensorKernelTest, Gather) {
  forCases(kAll, [](KCase& c) {
    for (int rep = 0; rep < 2; ++rep) {
      Shape s = c.randShape(1, 3);
      int64_t rank = static_cast<int64_t>(s.size()), axis = c.randInt(0, rank - 1), n = s[axis];
      Shape is = c.randShape(0, 2, 3);
      Ints ix(TensorType(DType::I64, is).numElements());
      for (int64_t& v : ix)
        v = c.randInt(-n, n - 1);
      DType it = c.coin() ? DType::I64 : DType::I32;
      Value* data = c.input(s);
      Value* idx = c.inputOf(Tensor::fromInts({it, is}, ix));
      auto fn = [](const Op& op, const Views& in, const Views& out) {
        return rt::gather(in[0], in[1], out[0], {op.getInt("axis")});
      };
      c.check(c.op(OpKind::Gather, {data, idx}, {{"axis", c.spellAxis(axis, rank)}}), fn);
      Value* bad = c.inputOf(Tensor::fromInts({it, {2}}, {0, c.coin() ? n : -n - 1}));
      c.expectRefused(c.op(OpKind::Gather, {data, bad}, {{"axis", axis}}), fn);
    }
  });
}

TEST(RuntimeTensorKernelTest, GatherGrad) {
  forCases(kFloats, [](KCase& c) {
    for (int rep = 0; rep < 2; ++rep) {
      Shape s = c.randShape(1, 3);
      int64_t rank = static_cast<int64_t>(s.size()), axis = c.randInt(0, rank - 1), n = s[axis];
      Shape is = c.randShape(0, 2, 4); // repeated indices sum
      Ints ix(TensorType(DType::I64, is).numElements());
      for (int64_t& v : ix)
        v = c.randInt(-n, n - 1);
      Shape dys(s.begin(), s.begin() + axis);
      dys.insert(dys.end(), is.begin(), is.end());
      dys.insert(dys.end(), s.begin() + axis + 1, s.end());
      Value* idx = c.inputOf(Tensor::fromInts({c.coin() ? DType::I64 : DType::I32, is}, ix));
      c.check(c.op(OpKind::GatherGrad, {idx, c.input(dys)},
                   {{"axis", c.spellAxis(axis, rank)}, {"input_shape", Ints(s)}}),
              [](const Op& op, const Views& in, const Views& out) {
                return rt::gatherGrad(in[0], in[1], out[0], {op.getInt("axis")});
              });
    }
  });
}

TEST(RuntimeTensorKernelTest, Expand) {
  forCases(kAll, [](KCase& c) {
    for (int rep = 0; rep < 3; ++rep) {
      auto [xs, target] = broadcastPair(c);
      c.check(
          c.op(OpKind::Expand, {c.input(xs)}, {{"shape", Ints(target)}}),
          [](const Op&, const Views& in, const Views& out) { return rt::expand(in[0], out[0]); });
    }
  });
}

TEST(RuntimeTensorKernelTest, Pad) {
  const char* modes[] = {"constant", "reflect", "edge"};
  forCases(kAll, [&](KCase& c) {
    for (int m = 0; m < 3; ++m)
      for (int rep = 0; rep < 2; ++rep) {
        Shape s = c.randShape(0, 3, 4);
        int64_t rank = static_cast<int64_t>(s.size());
        Ints pads(2 * rank);
        for (int64_t k = 0; k < 2 * rank; ++k) {
          int64_t d = s[k % rank];
          pads[k] = m == 1 ? c.randInt(d > 1 ? -1 : 0, d - 1) : c.randInt(d > 1 ? -1 : 0, 3);
        }
        // (The reference would store a constant of 2 into a bool tensor as 2;
        // bool views hold 0 or 1.)
        double value = c.dtype() == DType::Bool
                           ? static_cast<double>(c.randInt(0, 1))
                           : c.randInt(-3, 3) + (isFloat(c.dtype()) ? 0.25 : 0.0);
        c.check(
            c.op(OpKind::Pad, {c.input(s)}, {{"pads", pads}, {"mode", modes[m]}, {"value", value}}),
            [](const Op& op, const Views& in, const Views& out) {
              const std::string& mode = op.getString("mode");
              rt::PadMode pm = mode == "reflect" ? rt::PadMode::Reflect
                               : mode == "edge"  ? rt::PadMode::Edge
                                                 : rt::PadMode::Constant;
              return rt::pad(in[0], out[0], {op.getInts("pads"), pm, op.getFloat("value")});
            });
      }
  });
}

//===--- Conversion and values ---------------------------------------------===//

TEST(RuntimeTensorKernelTest, Cast) {
  forCases(kAll, [](KCase& c) {
    for (DType to : kAll) {
      Shape s = c.randShape(0, 3);
      Value* x = c.input(s);
      if (isFloat(c.dtype()) && c.coin()) { // scaled, with exact zeros and integers
        Tensor t = Tensor::fromFloats({c.dtype(), s}, {});
        for (int64_t k = 0; k < t.type.numElements(); ++k)
          t.f.push_back(c.randInt(0, 3) == 0 ? c.randInt(-2, 2) : c.uniform(-1e4, 1e4));
        if (c.dtype() == DType::F32)
          for (double& v : t.f)
            v = static_cast<float>(v);
        x = c.inputOf(std::move(t));
      }
      c.check(c.op(OpKind::Cast, {x}, {{"to", std::string(dtypeName(to))}}),
              [](const Op&, const Views& in, const Views& out) { return rt::cast(in[0], out[0]); });
    }
  });
}

TEST(RuntimeTensorKernelTest, Fill) {
  forCases(kAll, [](KCase& c) {
    Shape s = c.randShape(0, 3);
    int64_t n = TensorType(DType::F32, s).numElements();
    bool splat = c.coin();
    std::vector<NamedAttr> attrs;
    if (isFloat(c.dtype())) {
      std::vector<double> v(splat ? 1 : n);
      for (double& x : v)
        x = c.uniform(-2, 2);
      attrs.push_back({"value", v});
    } else {
      Ints v(splat ? 1 : n);
      for (int64_t& x : v)
        x = c.dtype() == DType::Bool ? c.randInt(0, 1) : c.randInt(-100, 100);
      attrs.push_back({"ivalue", v});
    }
    c.check(c.constant({c.dtype(), s}, attrs), [](const Op& op, const Views&, const Views& out) {
      rt::FillParams p;
      if (op.hasAttr("value"))
        p.value = op.getFloats("value");
      if (op.hasAttr("ivalue"))
        p.ivalue = op.getInts("ivalue");
      return rt::fill(out[0], p);
    });
  });
}

//===--- Randomness and optimizers -----------------------------------------===//

lwrt::DropoutMaskParams dropoutParams(const Op& op) {
  lwrt::DropoutMaskParams p{op.getFloat("ratio"), op.getInt("seed"), {}, {}};
  if (op.hasAttr("whole_shape")) {
    p.whole_shape = op.getInts("whole_shape");
    p.offsets = op.getInts("offsets");
  }
  return p;
}

TEST(RuntimeTensorKernelTest, DropoutMaskBitIdentical) {
  forCases(kFloats, [](KCase& c) {
    for (int rep = 0; rep < 3; ++rep) {
      DType st = c.coin() ? DType::I64 : DType::I32;
      Value* step = c.inputOf(Tensor::fromInts({st, {}}, {c.randInt(0, 100000)}));
      double ratio = rep == 0 ? 0.0 : c.uniform(0.05, 0.95);
      int64_t seed = c.randInt(-1000000, 1000000);
      c.check(
          c.op(OpKind::DropoutMask, {step},
               {{"ratio", ratio},
                {"seed", seed},
                {"shape", Ints(c.randShape(0, 3, 6))},
                {"dtype", std::string(dtypeName(c.dtype()))}}),
          [](const Op& op, const Views& in, const Views& out) {
            return rt::dropoutMask(in[0], out[0], dropoutParams(op));
          },
          /*exact=*/true);
    }
  });
}

TEST(RuntimeTensorKernelTest, SgdUpdate) {
  forCases(kFloats, [](KCase& c) {
    for (int nesterov = 0; nesterov < 2; ++nesterov) {
      Shape s = c.randShape(0, 3);
      Value* lr = c.input(TensorType(c.coin() ? DType::F32 : DType::F64, {}), KCase::Dist::Unit);
      c.check(c.op(OpKind::SgdUpdate, {c.input(s), c.input(s), c.input(s), lr},
                   {{"momentum", c.uniform(0, 0.99)},
                    {"weight_decay", c.uniform(0, 0.01)},
                    {"nesterov", nesterov}},
                   2),
              [](const Op& op, const Views& in, const Views& out) {
                return rt::sgdUpdate(
                    in[0], in[1], in[2], in[3], out[0], out[1],
                    {op.getFloat("momentum"), op.getFloat("weight_decay"), op.getInt("nesterov")});
              });
    }
  });
}

TEST(RuntimeTensorKernelTest, AdamUpdate) {
  using D = KCase::Dist;
  forCases(kFloats, [](KCase& c) {
    for (int decoupled = 0; decoupled < 2; ++decoupled) {
      Shape s = c.randShape(0, 3);
      Value* lr = c.input(TensorType(c.coin() ? DType::F32 : DType::F64, {}), D::Unit);
      Value* step = c.inputOf(Tensor::fromInts({DType::I64, {}}, {c.randInt(0, 50)}));
      c.check(c.op(OpKind::AdamUpdate,
                   {c.input(s), c.input(s), c.input(s), c.input(s, D::Positive), lr, step},
                   {{"beta1", c.uniform(0.8, 0.95)},
                    {"beta2", c.uniform(0.9, 0.999)},
                    {"weight_decay", c.uniform(0, 0.1)},
                    {"decoupled", decoupled}},
                   3),
              [](const Op& op, const Views& in, const Views& out) {
                rt::AdamParams p{op.getFloat("beta1"), op.getFloat("beta2"), op.getFloat("epsilon"),
                                 op.getFloat("weight_decay"), op.getInt("decoupled")};
                return rt::adamUpdate(in[0], in[1], in[2], in[3], in[4], in[5], out[0], out[1],
                                      out[2], p);
              });
    }
  });
}

TEST(RuntimeTensorKernelTest, LrSchedule) {
  const char* kinds[] = {"constant", "step", "cosine"};
  forCases(std::array<DType, 1>{DType::F32}, [&](KCase& c) {
    for (int k = 0; k < 3; ++k)
      for (int rep = 0; rep < 4; ++rep) {
        int64_t warmup = c.coin() ? 0 : c.randInt(1, 10), total = c.randInt(1, 100);
        Value* step = c.inputOf(
            Tensor::fromInts({c.coin() ? DType::I64 : DType::I32, {}}, {c.randInt(0, 120)}));
        c.check(c.op(OpKind::LrSchedule, {step},
                     {{"kind", kinds[k]},
                      {"base_lr", c.uniform(0.001, 0.5)},
                      {"warmup_steps", warmup},
                      {"total_steps", total},
                      {"step_size", c.randInt(1, 30)},
                      {"gamma", c.uniform(0.1, 0.9)},
                      {"min_lr", c.uniform(0, 0.001)}}),
                [](const Op& op, const Views& in, const Views& out) {
                  const std::string& kind = op.getString("kind");
                  rt::LrScheduleParams p{kind == "step"     ? rt::LrScheduleKind::Step
                                         : kind == "cosine" ? rt::LrScheduleKind::Cosine
                                                            : rt::LrScheduleKind::Constant,
                                         op.getFloat("base_lr"),
                                         op.getInt("warmup_steps"),
                                         op.getInt("total_steps"),
                                         op.getInt("step_size"),
                                         op.getFloat("gamma"),
                                         op.getFloat("min_lr")};
                  return rt::lrSchedule(in[0], out[0], p);
                });
      }
  });
}

/// The memory plan writes an update's new weight and state over the old
/// ones (MemoryPlan.h, kOverParam): the kernels must give the same bits
/// in place as into separate buffers.
TEST(RuntimeTensorKernelTest, UpdatesInPlaceEqualOutOfPlace) {
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n = 1000;
  auto fresh = [&](bool positive = false) {
    std::vector<float> v(n);
    for (float& x : v)
      x = positive ? std::fabs(normal(rng)) : normal(rng);
    return v;
  };
  auto view = [&](std::vector<float>& v) {
    return lwrt::TensorView{v.data(), lwrt::DType::F32, {n}};
  };
  float lr = 0.05f;
  int64_t step = 6;
  lwrt::TensorView lrView{&lr, lwrt::DType::F32, {}}, stepView{&step, lwrt::DType::I64, {}};
  for (int nesterov = 0; nesterov < 2; ++nesterov) {
    std::vector<float> w = fresh(), g = fresh(), m = fresh();
    std::vector<float> wOut(n), mOut(n), wIn = w, mIn = m;
    lwrt::SgdParams p{0.9, 5e-4, nesterov};
    ASSERT_TRUE(rt::sgdUpdate(view(w), view(g), view(m), lrView, view(wOut), view(mOut), p));
    ASSERT_TRUE(rt::sgdUpdate(view(wIn), view(g), view(mIn), lrView, view(wIn), view(mIn), p));
    EXPECT_EQ(wIn, wOut);
    EXPECT_EQ(mIn, mOut);
  }
  for (int decoupled = 0; decoupled < 2; ++decoupled) {
    std::vector<float> w = fresh(), g = fresh(), m = fresh(), v = fresh(true);
    std::vector<float> wOut(n), mOut(n), vOut(n), wIn = w, mIn = m, vIn = v;
    lwrt::AdamParams p{0.9, 0.999, 1e-8, 0.01, decoupled};
    ASSERT_TRUE(rt::adamUpdate(view(w), view(g), view(m), view(v), lrView, stepView, view(wOut),
                               view(mOut), view(vOut), p));
    ASSERT_TRUE(rt::adamUpdate(view(wIn), view(g), view(mIn), view(vIn), lrView, stepView,
                               view(wIn), view(mIn), view(vIn), p));
    EXPECT_EQ(wIn, wOut);
    EXPECT_EQ(mIn, mOut);
    EXPECT_EQ(vIn, vOut);
  }
}

/// A mask split along n, c, h or w (rank 4), evenly and unevenly, and a
/// piece of a piece (two split dims): every piece, drawn by the parallel
/// rule's localize hook, the interpreter and the CPU kernel, holds the
/// whole mask's elements at its place.
TEST(RuntimeTensorKernelTest, DropoutMaskPiecesAreTheWholeMask) {
  const Ints whole = {5, 6, 7, 4};
  const double ratio = 0.4;
  const int64_t seed = 91, step = 17;
  Graph g;
  Builder b(g);
  Value* stepValue = g.addInput("step", TensorType(DType::I64, {}));
  auto mask = b.createInferred(
      OpKind::DropoutMask, {stepValue},
      {{"ratio", ratio}, {"seed", seed}, {"shape", whole}, {"dtype", std::string("f32")}});
  ASSERT_TRUE(!!mask) << llvm::toString(mask.takeError());
  Tensor stepTensor = Tensor::fromInts({DType::I64, {}}, {step});
  auto wholeMask = evaluateOp(**mask, {&stepTensor}, Precision::F64);
  ASSERT_TRUE(!!wholeMask) << llvm::toString(wholeMask.takeError());
  std::vector<int64_t> strides = kernels::stridesOf(whole);
  int64_t dropped = 0;
  for (int64_t k = 0; k < (*wholeMask)[0].size(); ++k)
    dropped += (*wholeMask)[0].f[k] == 0.0;
  ASSERT_GT(dropped, 0);
  ASSERT_LT(dropped, (*wholeMask)[0].size());

  // The piece of `global` along `dim` from `offset`, `size` long.
  auto pieceOf = [&](const Op& global, int64_t dim, int64_t offset, int64_t size) {
    Ints shape = global.result()->type().shape;
    shape[dim] = size;
    Op* local =
        b.create(OpKind::DropoutMask, {stepValue}, {TensorType(DType::F32, shape)}, global.attrs());
    global.info().localize(*local, global, dim, offset);
    return local;
  };
  // Checks a piece's mask, from the interpreter and the CPU kernel, against
  // the whole mask at its offsets.
  auto checkPiece = [&](const Op& piece, const std::string& what) {
    SCOPED_TRACE(what);
    const Ints& off = piece.getInts("offsets");
    EXPECT_EQ(piece.getInts("whole_shape"), whole);
    auto ref = evaluateOp(piece, {&stepTensor}, Precision::F64);
    ASSERT_TRUE(!!ref) << llvm::toString(ref.takeError());
    const Ints& shape = piece.result()->type().shape;
    std::vector<float> got(static_cast<size_t>((*ref)[0].size()));
    lwrt::TensorView out{got.data(), lwrt::DType::F32, shape};
    lwrt::TensorView stepView{&stepTensor.i[0], lwrt::DType::I64, {}};
    ASSERT_TRUE(rt::dropoutMask(stepView, out, dropoutParams(piece)));
    kernels::forEachIndex(shape, [&](const std::vector<int64_t>& idx, int64_t k) {
      int64_t w = 0;
      for (size_t d = 0; d < idx.size(); ++d)
        w += (idx[d] + off[d]) * strides[d];
      ASSERT_EQ((*ref)[0].f[k], (*wholeMask)[0].f[w]) << "interpreter, element " << k;
      ASSERT_EQ(got[k], static_cast<float>((*wholeMask)[0].f[w])) << "kernel, element " << k;
    });
  };
  for (int64_t dim = 0; dim < 4; ++dim) {
    // Even (2 pieces where the dim is even, else 1 + the rest) and uneven
    // pieces: sizes that cover the dim.
    std::vector<Ints> splits = {{whole[dim] / 2, whole[dim] - whole[dim] / 2},
                                {1, whole[dim] - 3, 2}};
    if (whole[dim] % 2 == 0)
      splits.push_back({whole[dim] / 2, whole[dim] / 2});
    for (const Ints& sizes : splits) {
      int64_t offset = 0;
      for (int64_t size : sizes) {
        Op* piece = pieceOf(**mask, dim, offset, size);
        checkPiece(*piece, "dim " + std::to_string(dim) + " piece at " + std::to_string(offset) +
                               " of " + std::to_string(size));
        // A piece of the piece, along the next dim: offsets in two dims.
        int64_t next = (dim + 1) % 4;
        Op* inner = pieceOf(*piece, next, 1, whole[next] - 2);
        checkPiece(*inner, "and along dim " + std::to_string(next) + " from 1");
        offset += size;
      }
    }
  }
  // A piece that does not fit in the whole mask is refused by both.
  Op* bad = pieceOf(**mask, 2, 5, 3);
  EXPECT_FALSE(!!evaluateOp(*bad, {&stepTensor}, Precision::F64));
  std::vector<float> out(5 * 6 * 3 * 4);
  lwrt::TensorView outView{out.data(), lwrt::DType::F32, {5, 6, 3, 4}};
  lwrt::TensorView stepView{&stepTensor.i[0], lwrt::DType::I64, {}};
  EXPECT_FALSE(rt::dropoutMask(stepView, outView, dropoutParams(*bad)));
}

// The RNG is one definition (lwrt/dropout.h) for the interpreter and both
// backends; its values are fixed, as checkpoints resume the masks' stream.
TEST(RuntimeTensorKernelTest, DropoutUniformIsFixed) {
  EXPECT_EQ(lwrt::dropoutUniform(7, 3, 0), 0x1.29921ca472d0bp-1);
  EXPECT_EQ(lwrt::dropoutUniform(7, 3, 1), 0x1.bd24ae025c182p-1);
  EXPECT_EQ(lwrt::dropoutUniform(7, 3, 12345), 0x1.cd450ce6f7dccp-2);
  for (int64_t k = 0; k < 1000; k += 7)
    EXPECT_EQ(kernels::dropoutUniform(-3 + k, k * 13, k), lwrt::dropoutUniform(-3 + k, k * 13, k));
}

} // namespace
} // namespace lwcc::test
