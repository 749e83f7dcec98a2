// The CPU backend's neural-network kernels (lwrt/cpu_nn.h) against the
// reference interpreter: each case builds one IR op on random operands, runs
// lwcc::evaluateOp in float64 as the oracle, and runs the runtime kernel on
// the same values (all float-representable) in float32 and in float64.
#include "TestUtil.h"
#include "interp/Interpreter.h"
#include "lwrt/bf16.h"
#include "lwrt/cpu_nn.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <unordered_map>

namespace {

using namespace lwcc;
using Ints = std::vector<int64_t>;
using Views = std::vector<lwrt::TensorView>;
/// Runs a runtime kernel: operand views in, preallocated result views out.
using Kernel = std::function<bool(const Views& in, const Views& out)>;

constexpr double kTolF64 = 1e-10;
constexpr double kTolF32 = 1e-4;

double roundF32(double v) { return static_cast<double>(static_cast<float>(v)); }

/// The worst |got - want| relative to the largest finite |want| (1 when
/// all are 0); equal values (infinities included) count as exact, and a
/// NaN as infinitely wrong.
double relError(const std::vector<double>& want, const std::vector<double>& got) {
  double scale = 0;
  for (double v : want)
    if (std::isfinite(v))
      scale = std::max(scale, std::fabs(v));
  if (scale == 0)
    scale = 1;
  double worst = 0;
  for (size_t k = 0; k < want.size(); ++k) {
    if (want[k] == got[k])
      continue;
    double e = std::fabs(want[k] - got[k]) / scale;
    worst = std::isnan(e) ? std::numeric_limits<double>::infinity() : std::max(worst, e);
  }
  return worst;
}

class KernelCase {
public:
  explicit KernelCase(uint64_t seed) : rng_(seed * 0x9E3779B97F4A7C15ull + 777), b_(g_) {
    note("seed ").note(seed).note(": ");
  }

  int64_t randInt(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  double uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng_);
  }
  bool coin() { return randInt(0, 1) == 1; }
  Shape randShape(int64_t minRank, int64_t maxRank, int64_t maxDim) {
    Shape s(randInt(minRank, maxRank));
    for (int64_t& d : s)
      d = randInt(1, maxDim);
    return s;
  }

  template <typename T> KernelCase& note(const T& what) {
    std::ostringstream os;
    os << what;
    desc_ += os.str();
    return *this;
  }
  KernelCase& noteInts(const char* what, const Ints& v) {
    return note(what).note(Attribute(v).str()).note(" ");
  }
  const std::string& desc() const { return desc_; }

  /// A float64 graph input holding `values` (rounded to float).
  Value* inputOf(const Shape& s, std::vector<double> values) {
    for (double& v : values)
      v = roundF32(v);
    TensorType t(DType::F64, s);
    Value* v = g_.addInput("in" + std::to_string(g_.inputs().size()), t);
    values_[v] = Tensor::fromFloats(t, std::move(values));
    return v;
  }
  /// A float64 graph input with values uniform in [lo, hi].
  Value* input(const Shape& s, double lo = -1.0, double hi = 1.0) {
    std::vector<double> v(TensorType(DType::F64, s).numElements());
    for (double& x : v)
      x = uniform(lo, hi);
    return inputOf(s, std::move(v));
  }
  /// An i64 graph input with values in [0, k).
  Value* labels(int64_t n, int64_t k) {
    TensorType t(DType::I64, {n});
    Value* v = g_.addInput("in" + std::to_string(g_.inputs().size()), t);
    Ints l(n);
    for (int64_t& x : l)
      x = randInt(0, k - 1);
    values_[v] = Tensor::fromInts(t, std::move(l));
    return v;
  }

  /// Builds an op with inferred types; null (and a failure) when it cannot.
  Op* emit(OpKind kind, const std::vector<Value*>& operands, std::vector<NamedAttr> attrs = {},
           unsigned numResults = 1) {
    auto op = b_.createInferred(kind, operands, std::move(attrs), numResults);
    if (!op) {
      ADD_FAILURE() << desc_ << "\ncannot build: " << llvm::toString(op.takeError());
      return nullptr;
    }
    return *op;
  }

  /// The oracle's results of `op`.
  std::vector<Tensor> oracle(const Op& op) {
    std::vector<const Tensor*> operands;
    for (Value* v : op.operands())
      operands.push_back(&values_.at(v));
    auto r = evaluateOp(op, operands, Precision::F64);
    if (!r) {
      ADD_FAILURE() << desc_ << "\noracle failed: " << llvm::toString(r.takeError());
      return {};
    }
    return std::move(*r);
  }
  /// A new input holding result `k` of `op` as the oracle computes it.
  Value* inputFrom(Op* op, unsigned k = 0) {
    if (!op)
      return input({1});
    std::vector<Tensor> r = oracle(*op);
    if (r.size() <= k)
      return input({1});
    return inputOf(r[k].type.shape, r[k].f);
  }

  /// Compares `kernel` with the oracle on `op` in float32 and float64.
  void check(Op* op, const Kernel& kernel) {
    if (!op)
      return;
    std::vector<Tensor> want = oracle(*op);
    if (want.size() != op->numResults())
      return;
    run<float>(*op, want, kernel, kTolF32, "f32");
    run<double>(*op, want, kernel, kTolF64, "f64");
  }

private:
  template <typename T>
  void run(const Op& op, const std::vector<Tensor>& want, const Kernel& kernel, double tol,
           const char* what) {
    lwrt::DType dt = std::is_same_v<T, float> ? lwrt::DType::F32 : lwrt::DType::F64;
    std::vector<std::vector<T>> fbufs;
    std::vector<std::vector<int64_t>> ibufs;
    fbufs.reserve(op.numOperands() + op.numResults());
    ibufs.reserve(op.numOperands());
    Views in, out;
    for (Value* v : op.operands()) {
      const Tensor& t = values_.at(v);
      if (t.isFloatData()) {
        fbufs.emplace_back(t.f.begin(), t.f.end());
        in.push_back({fbufs.back().data(), dt, t.type.shape});
      } else {
        ibufs.push_back(t.i);
        in.push_back({ibufs.back().data(), lwrt::DType::I64, t.type.shape});
      }
    }
    for (const Tensor& t : want) {
      // Garbage that a kernel must overwrite.
      fbufs.emplace_back(t.f.size(), std::numeric_limits<T>::quiet_NaN());
      out.push_back({fbufs.back().data(), dt, t.type.shape});
    }
    ASSERT_TRUE(kernel(in, out)) << what << " kernel refused: " << desc_;
    for (size_t r = 0; r < want.size(); ++r) {
      const std::vector<T>& got = fbufs[fbufs.size() - want.size() + r];
      double err = relError(want[r].f, std::vector<double>(got.begin(), got.end()));
      EXPECT_LT(err, tol) << what << " result #" << r << " of " << op.mnemonic() << ": " << desc_;
    }
  }

  std::mt19937_64 rng_;
  Graph g_{"kernel"};
  Builder b_;
  std::unordered_map<const Value*, Tensor> values_;
  std::string desc_;
};

constexpr int kSeeds = 12;

template <typename Fn> void forSeeds(int n, Fn body) {
  for (int seed = 1; seed <= n; ++seed) {
    KernelCase c(static_cast<uint64_t>(seed));
    body(c);
  }
}

//===--- Convolution ------------------------------------------------------===//

/// A random conv configuration: x, w, attributes and params.
struct ConvSetup {
  Shape xs, ws;
  lwrt::cpu::Conv2dParams p;
  std::vector<NamedAttr> attrs;
};

ConvSetup randomConv(KernelCase& c) {
  ConvSetup s;
  int64_t G = c.randInt(1, 3), Cg = c.randInt(1, 3), Mg = c.randInt(1, 3);
  int64_t N = c.randInt(1, 2);
  Ints st(2), pd(4), dl(2), k(2), in(2);
  for (int i = 0; i < 2; ++i) {
    k[i] = c.randInt(1, 3);
    st[i] = c.randInt(1, 3);
    dl[i] = c.randInt(1, 2);
    pd[i] = c.randInt(0, 2);
    pd[i + 2] = c.randInt(0, 2);
    int64_t span = dl[i] * (k[i] - 1) + 1;
    in[i] = std::max<int64_t>(1, span - pd[i] - pd[i + 2]) + c.randInt(0, 5);
  }
  s.xs = {N, G * Cg, in[0], in[1]};
  s.ws = {G * Mg, Cg, k[0], k[1]};
  for (int i = 0; i < 2; ++i) {
    s.p.strides[i] = st[i];
    s.p.dilations[i] = dl[i];
  }
  for (int i = 0; i < 4; ++i)
    s.p.pads[i] = pd[i];
  s.p.group = G;
  s.attrs = {{"strides", st}, {"pads", pd}, {"dilations", dl}, {"group", G}};
  c.note("x ").note(shapeStr(s.xs)).note(" w ").note(shapeStr(s.ws)).note(" ");
  c.noteInts("strides", st).noteInts("pads", pd).noteInts("dilations", dl).note("group ").note(G);
  return s;
}

TEST(RuntimeNNKernels, Conv2d) {
  forSeeds(kSeeds, [](KernelCase& c) {
    ConvSetup s = randomConv(c);
    bool bias = c.coin();
    std::vector<Value*> ops = {c.input(s.xs), c.input(s.ws)};
    if (bias)
      ops.push_back(c.input({s.ws[0]}));
    c.note(bias ? " bias" : "");
    c.check(c.emit(OpKind::Conv2d, ops, s.attrs), [&](const Views& in, const Views& out) {
      return lwrt::cpu::conv2d(in[0], in[1], bias ? &in[2] : nullptr, out[0], s.p);
    });
  });
}

TEST(RuntimeNNKernels, Conv2dGradInputAndFilter) {
  forSeeds(kSeeds, [](KernelCase& c) {
    ConvSetup s = randomConv(c);
    Value *x = c.input(s.xs), *w = c.input(s.ws);
    Op* fwd = c.emit(OpKind::Conv2d, {x, w}, s.attrs);
    if (!fwd)
      return;
    Value* dy = c.input(fwd->result()->type().shape);
    auto attrs = s.attrs;
    attrs.push_back({"input_shape", s.xs});
    c.check(c.emit(OpKind::Conv2dGradInput, {dy, w}, attrs),
            [&](const Views& in, const Views& out) {
              return lwrt::cpu::conv2dGradInput(in[0], in[1], out[0], s.p);
            });
    attrs = s.attrs;
    attrs.push_back({"filter_shape", s.ws});
    c.check(c.emit(OpKind::Conv2dGradFilter, {x, dy}, attrs),
            [&](const Views& in, const Views& out) {
              return lwrt::cpu::conv2dGradFilter(in[0], in[1], out[0], s.p);
            });
  });
}

//===--- Linear algebra ---------------------------------------------------===//

TEST(RuntimeNNKernels, Gemm) {
  forSeeds(2 * kSeeds, [](KernelCase& c) {
    int64_t maxDim = c.coin() ? 5 : 19;
    int64_t M = c.randInt(1, maxDim), N = c.randInt(1, maxDim), K = c.randInt(1, maxDim);
    lwrt::cpu::GemmParams p;
    p.transA = c.coin();
    p.transB = c.coin();
    p.alpha = c.coin() ? 1.0 : c.uniform(-2, 2);
    p.beta = c.coin() ? 1.0 : c.uniform(-2, 2);
    Shape as = p.transA ? Shape{K, M} : Shape{M, K}, bs = p.transB ? Shape{N, K} : Shape{K, N};
    const Shape cShapes[] = {{}, {N}, {1, N}, {M, 1}, {M, N}, {1}, {1, 1}};
    int64_t ck = c.randInt(-1, 6);
    std::vector<Value*> ops = {c.input(as), c.input(bs)};
    if (ck >= 0)
      ops.push_back(c.input(cShapes[ck]));
    c.note("M N K ").note(M).note(" ").note(N).note(" ").note(K).note(" trans ").note(p.transA);
    c.note(p.transB).note(" alpha ").note(p.alpha).note(" beta ").note(p.beta).note(" C ");
    c.note(ck >= 0 ? shapeStr(cShapes[ck]) : "none");
    Op* op =
        c.emit(OpKind::Gemm, ops,
               {{"transA", p.transA}, {"transB", p.transB}, {"alpha", p.alpha}, {"beta", p.beta}});
    c.check(op, [&](const Views& in, const Views& out) {
      return lwrt::cpu::gemm(in[0], in[1], ck >= 0 ? &in[2] : nullptr, out[0], p);
    });
  });
}

TEST(RuntimeNNKernels, MatMul) {
  forSeeds(2 * kSeeds, [](KernelCase& c) {
    int64_t M = c.randInt(1, 6), N = c.randInt(1, 6), K = c.randInt(1, 6);
    // Batch dims of the larger rank, each side keeping a suffix, some set to 1.
    Shape batch = c.randShape(0, 3, 3);
    auto side = [&]() {
      Shape b(batch.end() - c.randInt(0, static_cast<int64_t>(batch.size())), batch.end());
      for (int64_t& d : b)
        if (c.randInt(0, 3) == 0)
          d = 1;
      return b;
    };
    Shape as = side(), bs = side();
    bool vecA = c.randInt(0, 4) == 0, vecB = c.randInt(0, 4) == 0;
    if (vecA)
      as = {K};
    else {
      as.push_back(M);
      as.push_back(K);
    }
    if (vecB)
      bs = {K};
    else {
      bs.push_back(K);
      bs.push_back(N);
    }
    c.note("a ").note(shapeStr(as)).note(" b ").note(shapeStr(bs));
    c.check(
        c.emit(OpKind::MatMul, {c.input(as), c.input(bs)}),
        [](const Views& in, const Views& out) { return lwrt::cpu::matmul(in[0], in[1], out[0]); });
  });
}

//===--- Pooling ----------------------------------------------------------===//

/// Random window attributes and an input that fits them.
struct PoolSetup {
  Shape xs;
  Ints k, st, pd, dl;
  int64_t ceil = 0;
};

PoolSetup randomPool(KernelCase& c, bool dilated) {
  PoolSetup s{{}, Ints(2), Ints(2), Ints(4), Ints(2, 1), c.randInt(0, 1)};
  Ints in(2);
  for (int i = 0; i < 2; ++i) {
    s.k[i] = c.randInt(1, 3);
    s.st[i] = c.randInt(1, 3);
    if (dilated)
      s.dl[i] = c.randInt(1, 2);
    s.pd[i] = c.randInt(0, s.k[i] - 1);
    s.pd[i + 2] = c.randInt(0, s.k[i] - 1);
    int64_t span = s.dl[i] * (s.k[i] - 1) + 1;
    in[i] = std::max<int64_t>(1, span - s.pd[i] - s.pd[i + 2]) + c.randInt(0, 5);
  }
  s.xs = {c.randInt(1, 2), c.randInt(1, 3), in[0], in[1]};
  c.note("x ").note(shapeStr(s.xs)).note(" ").noteInts("kernel", s.k).noteInts("strides", s.st);
  c.noteInts("pads", s.pd).noteInts("dilations", s.dl).note("ceil ").note(s.ceil).note(" ");
  return s;
}

lwrt::cpu::MaxPool2dParams maxParams(const PoolSetup& s) {
  lwrt::cpu::MaxPool2dParams p;
  for (int i = 0; i < 2; ++i) {
    p.kernel[i] = s.k[i];
    p.strides[i] = s.st[i];
    p.dilations[i] = s.dl[i];
  }
  for (int i = 0; i < 4; ++i)
    p.pads[i] = s.pd[i];
  p.ceil_mode = s.ceil;
  return p;
}

TEST(RuntimeNNKernels, MaxPool2dAndGrad) {
  forSeeds(2 * kSeeds, [](KernelCase& c) {
    PoolSetup s = randomPool(c, true);
    lwrt::cpu::MaxPool2dParams p = maxParams(s);
    std::vector<NamedAttr> attrs = {{"kernel", s.k},
                                    {"strides", s.st},
                                    {"pads", s.pd},
                                    {"dilations", s.dl},
                                    {"ceil_mode", s.ceil}};
    // Values with ties now and then: the gradient must pick the first.
    Value* x = c.coin() ? c.input(s.xs) : nullptr;
    if (!x) {
      std::vector<double> v(TensorType(DType::F64, s.xs).numElements());
      for (double& e : v)
        e = static_cast<double>(c.randInt(-3, 3));
      x = c.inputOf(s.xs, std::move(v));
      c.note("ties ");
    }
    Op* fwd = c.emit(OpKind::MaxPool2d, {x}, attrs);
    c.check(fwd, [&](const Views& in, const Views& out) {
      return lwrt::cpu::maxPool2d(in[0], out[0], p);
    });
    if (!fwd)
      return;
    Value* dy = c.input(fwd->result()->type().shape);
    c.check(c.emit(OpKind::MaxPool2dGrad, {x, dy}, attrs), [&](const Views& in, const Views& out) {
      return lwrt::cpu::maxPool2dGrad(in[0], in[1], out[0], p);
    });
  });
}

TEST(RuntimeNNKernels, AvgPool2dAndGrad) {
  forSeeds(2 * kSeeds, [](KernelCase& c) {
    PoolSetup s = randomPool(c, false);
    lwrt::cpu::AvgPool2dParams p;
    for (int i = 0; i < 2; ++i) {
      p.kernel[i] = s.k[i];
      p.strides[i] = s.st[i];
    }
    for (int i = 0; i < 4; ++i)
      p.pads[i] = s.pd[i];
    p.ceil_mode = s.ceil;
    p.count_include_pad = c.randInt(0, 1);
    c.note("count_include_pad ").note(p.count_include_pad);
    std::vector<NamedAttr> attrs = {{"kernel", s.k},
                                    {"strides", s.st},
                                    {"pads", s.pd},
                                    {"ceil_mode", s.ceil},
                                    {"count_include_pad", p.count_include_pad}};
    Op* fwd = c.emit(OpKind::AvgPool2d, {c.input(s.xs)}, attrs);
    c.check(fwd, [&](const Views& in, const Views& out) {
      return lwrt::cpu::avgPool2d(in[0], out[0], p);
    });
    if (!fwd)
      return;
    Value* dy = c.input(fwd->result()->type().shape);
    attrs.push_back({"input_shape", s.xs});
    c.check(c.emit(OpKind::AvgPool2dGrad, {dy}, attrs), [&](const Views& in, const Views& out) {
      return lwrt::cpu::avgPool2dGrad(in[0], out[0], p);
    });
  });
}

TEST(RuntimeNNKernels, GlobalAvgPool) {
  forSeeds(kSeeds, [](KernelCase& c) {
    Shape xs = c.randShape(3, 5, 4);
    c.note("x ").note(shapeStr(xs));
    c.check(c.emit(OpKind::GlobalAvgPool, {c.input(xs)}), [](const Views& in, const Views& out) {
      return lwrt::cpu::globalAvgPool(in[0], out[0]);
    });
  });
}

//===--- Normalization ----------------------------------------------------===//

TEST(RuntimeNNKernels, LrnAndGrad) {
  forSeeds(kSeeds, [](KernelCase& c) {
    Shape xs = {c.randInt(1, 2), c.randInt(1, 7), c.randInt(1, 4), c.randInt(1, 4)};
    lwrt::cpu::LrnParams p;
    p.size = c.randInt(1, 5);
    p.alpha = c.coin() ? 1e-4 : c.uniform(0.1, 2.0);
    p.beta = c.uniform(0.5, 1.0);
    p.bias = c.uniform(1.0, 2.0);
    c.note("x ").note(shapeStr(xs)).note(" size ").note(p.size).note(" alpha ").note(p.alpha);
    c.note(" beta ").note(p.beta).note(" bias ").note(p.bias);
    std::vector<NamedAttr> attrs = {
        {"size", p.size}, {"alpha", p.alpha}, {"beta", p.beta}, {"bias", p.bias}};
    Value* x = c.input(xs, -2.0, 2.0);
    Op* fwd = c.emit(OpKind::Lrn, {x}, attrs);
    c.check(fwd,
            [&](const Views& in, const Views& out) { return lwrt::cpu::lrn(in[0], out[0], p); });
    Value* y = c.inputFrom(fwd);
    c.check(c.emit(OpKind::LrnGrad, {x, y, c.input(xs)}, attrs),
            [&](const Views& in, const Views& out) {
              return lwrt::cpu::lrnGrad(in[0], in[1], in[2], out[0], p);
            });
  });
}

TEST(RuntimeNNKernels, BatchNorm) {
  forSeeds(kSeeds, [](KernelCase& c) {
    Shape xs = c.randShape(2, 4, 4);
    int64_t C = xs[1];
    lwrt::cpu::BatchNormParams p;
    p.epsilon = c.coin() ? 1e-5 : c.uniform(1e-3, 0.5);
    c.note("x ").note(shapeStr(xs)).note(" eps ").note(p.epsilon);
    Op* op = c.emit(
        OpKind::BatchNorm,
        {c.input(xs, -2, 2), c.input({C}), c.input({C}), c.input({C}), c.input({C}, 0.2, 2.0)},
        {{"epsilon", p.epsilon}});
    c.check(op, [&](const Views& in, const Views& out) {
      return lwrt::cpu::batchNorm(in[0], in[1], in[2], in[3], in[4], out[0], p);
    });
  });
}

TEST(RuntimeNNKernels, BatchNormTrainAndGrad) {
  forSeeds(kSeeds, [](KernelCase& c) {
    Shape xs = c.randShape(2, 4, 4);
    if (xs[0] * (xs.size() > 2 ? xs[2] : 1) < 2)
      xs[0] = 2; // at least two elements per channel
    int64_t C = xs[1];
    lwrt::cpu::BatchNormTrainParams p;
    p.epsilon = c.coin() ? 1e-5 : c.uniform(1e-3, 0.5);
    c.note("x ").note(shapeStr(xs)).note(" eps ").note(p.epsilon);
    Value *x = c.input(xs, -2, 3), *scale = c.input({C}), *bias = c.input({C});
    Op* fwd = c.emit(OpKind::BatchNormTrain, {x, scale, bias}, {{"epsilon", p.epsilon}}, 3);
    c.check(fwd, [&](const Views& in, const Views& out) {
      return lwrt::cpu::batchNormTrain(in[0], in[1], in[2], out[0], out[1], out[2], p);
    });
    Value *mean = c.inputFrom(fwd, 1), *var = c.inputFrom(fwd, 2);
    Op* grad = c.emit(OpKind::BatchNormGrad, {x, scale, mean, var, c.input(xs)},
                      {{"epsilon", p.epsilon}}, 3);
    c.check(grad, [&](const Views& in, const Views& out) {
      return lwrt::cpu::batchNormGrad(in[0], in[1], in[2], in[3], in[4], out[0], out[1], out[2], p);
    });
  });
}

// Codegen's batch norm fusions (ir/FusedOps.h: epilogueOf, gradPrologueOf):
// batchNormTrainAct writes the bytes of batchNormTrain then relu, and
// batchNormGradAct those of reluGrad then batchNormGrad, in float32 and in
// bf16, also with dx written over dy (the memory plan may put it there).
TEST(RuntimeNNKernels, BatchNormFusedWithRelu) {
  const int64_t N = 3, C = 4, H = 5, W = 5, n = N * C * H * W;
  std::mt19937 gen(17);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  auto vec = [&](int64_t k) {
    std::vector<float> v(static_cast<size_t>(k));
    for (float& e : v)
      e = u(gen);
    return v;
  };
  const std::vector<float> x32 = vec(n), dy32 = vec(n);
  std::vector<float> scale = vec(C), bias = vec(C);
  lwrt::cpu::BatchNormTrainParams p;
  const lwrt::Activation relu{lwrt::Activation::Relu};
  for (lwrt::DType t : {lwrt::DType::F32, lwrt::DType::BF16}) {
    SCOPED_TRACE(t == lwrt::DType::F32 ? "f32" : "bf16");
    const size_t es = t == lwrt::DType::F32 ? 4 : 2;
    using Bytes = std::vector<uint8_t>;
    auto bytes = [&](const std::vector<float>& v) {
      Bytes b(v.size() * es);
      for (size_t k = 0; k < v.size(); ++k) {
        if (t == lwrt::DType::F32) {
          std::memcpy(b.data() + 4 * k, &v[k], 4);
        } else {
          uint16_t h = lwrt::floatToBf16(v[k]);
          std::memcpy(b.data() + 2 * k, &h, 2);
        }
      }
      return b;
    };
    auto act = [&](Bytes& b) { return lwrt::TensorView{b.data(), t, {N, C, H, W}}; };
    auto vecView = [&](std::vector<float>& v) {
      return lwrt::TensorView{v.data(), lwrt::DType::F32, {C}};
    };
    Bytes x = bytes(x32), dy = bytes(dy32), y0(n * es), y1(n * es), y2(n * es);
    std::vector<float> mean(C), var(C), mean2(C), var2(C);
    ASSERT_TRUE(lwrt::cpu::batchNormTrain(act(x), vecView(scale), vecView(bias), act(y0),
                                          vecView(mean), vecView(var), p));
    ASSERT_TRUE(lwrt::cpu::relu(act(y0), act(y1)));
    ASSERT_TRUE(lwrt::cpu::batchNormTrainAct(act(x), vecView(scale), vecView(bias), act(y2),
                                             vecView(mean2), vecView(var2), p, relu));
    EXPECT_EQ(y1, y2);
    EXPECT_EQ(mean, mean2);
    EXPECT_EQ(var, var2);
    // Some outputs are 0 (the mask matters).
    EXPECT_NE(std::count(y1.begin(), y1.end(), 0), 0);

    Bytes g(n * es), dx1(n * es), dx2(n * es), dyOver = dy;
    std::vector<float> ds1(C), db1(C), ds2(C), db2(C), ds3(C), db3(C);
    ASSERT_TRUE(lwrt::cpu::reluGrad(act(y1), act(dy), act(g)));
    ASSERT_TRUE(lwrt::cpu::batchNormGrad(act(x), vecView(scale), vecView(mean), vecView(var),
                                         act(g), act(dx1), vecView(ds1), vecView(db1), p));
    ASSERT_TRUE(lwrt::cpu::batchNormGradAct(act(x), vecView(scale), vecView(mean), vecView(var),
                                            act(y1), act(dy), act(dx2), vecView(ds2), vecView(db2),
                                            p, relu));
    EXPECT_EQ(dx1, dx2);
    EXPECT_EQ(ds1, ds2);
    EXPECT_EQ(db1, db2);
    ASSERT_TRUE(lwrt::cpu::batchNormGradAct(act(x), vecView(scale), vecView(mean), vecView(var),
                                            act(y1), act(dyOver), act(dyOver), vecView(ds3),
                                            vecView(db3), p, relu));
    EXPECT_EQ(dx1, dyOver);
    EXPECT_EQ(ds1, ds3);
    // Only a ReLU fuses into the backward.
    EXPECT_FALSE(lwrt::cpu::batchNormGradAct(act(x), vecView(scale), vecView(mean), vecView(var),
                                             act(y1), act(dy), act(dx2), vecView(ds2), vecView(db2),
                                             p, lwrt::Activation{lwrt::Activation::Clip, 0, 6}));
  }
}

TEST(RuntimeNNKernels, LayerNormAndGrad) {
  // Any rank and axis; odd seeds the ConvNeXt form (channels last, the
  // last axis only).
  for (int seed = 1; seed <= kSeeds; ++seed) {
    KernelCase c(static_cast<uint64_t>(seed));
    Shape xs = seed % 2 ? Shape{2, 3, 3, c.randInt(2, 8)} : c.randShape(1, 4, 4);
    int64_t rank = static_cast<int64_t>(xs.size());
    int64_t axis = seed % 2 ? rank - 1 : c.randInt(0, rank - 1);
    lwrt::cpu::LayerNormParams p{axis, c.coin() ? 1e-5 : c.uniform(1e-3, 0.5)};
    c.note("x ").note(shapeStr(xs)).note(" axis ").note(axis).note(" eps ").note(p.epsilon);
    Shape ns(xs.begin() + axis, xs.end());
    Value *x = c.input(xs, -2, 3), *scale = c.input(ns), *bias = c.input(ns);
    Op* fwd =
        c.emit(OpKind::LayerNorm, {x, scale, bias}, {{"axis", axis}, {"epsilon", p.epsilon}}, 3);
    c.check(fwd, [&](const Views& in, const Views& out) {
      return lwrt::cpu::layerNorm(in[0], in[1], in[2], out[0], out[1], out[2], p);
    });
    Value *mean = c.inputFrom(fwd, 1), *inv = c.inputFrom(fwd, 2);
    Op* grad = c.emit(OpKind::LayerNormGrad, {x, scale, mean, inv, c.input(xs)},
                      {{"axis", axis}, {"epsilon", p.epsilon}}, 3);
    c.check(grad, [&](const Views& in, const Views& out) {
      return lwrt::cpu::layerNormGrad(in[0], in[1], in[2], in[3], in[4], out[0], out[1], out[2], p);
    });
  }
}

//===--- Softmax and losses -----------------------------------------------===//

void softmaxCase(KernelCase& c, bool log) {
  Shape xs = c.randShape(1, 4, 5);
  int64_t rank = static_cast<int64_t>(xs.size());
  int64_t axis = c.randInt(0, rank - 1);
  if (c.coin())
    axis -= rank;
  lwrt::cpu::SoftmaxParams p{axis};
  c.note("x ").note(shapeStr(xs)).note(" axis ").note(axis);
  Value* x = c.input(xs, -4, 4);
  Op* fwd = c.emit(log ? OpKind::LogSoftmax : OpKind::Softmax, {x}, {{"axis", axis}});
  c.check(fwd, [&](const Views& in, const Views& out) {
    return log ? lwrt::cpu::logSoftmax(in[0], out[0], p) : lwrt::cpu::softmax(in[0], out[0], p);
  });
  Value* y = c.inputFrom(fwd);
  Op* grad = c.emit(log ? OpKind::LogSoftmaxGrad : OpKind::SoftmaxGrad, {y, c.input(xs)},
                    {{"axis", axis}});
  c.check(grad, [&](const Views& in, const Views& out) {
    return log ? lwrt::cpu::logSoftmaxGrad(in[0], in[1], out[0], p)
               : lwrt::cpu::softmaxGrad(in[0], in[1], out[0], p);
  });
}

TEST(RuntimeNNKernels, SoftmaxAndGrad) {
  forSeeds(kSeeds, [](KernelCase& c) { softmaxCase(c, false); });
}

TEST(RuntimeNNKernels, LogSoftmaxAndGrad) {
  forSeeds(kSeeds, [](KernelCase& c) { softmaxCase(c, true); });
}

TEST(RuntimeNNKernels, SoftmaxXentAndGrad) {
  forSeeds(kSeeds, [](KernelCase& c) {
    int64_t N = c.randInt(1, 8), K = c.randInt(1, 9);
    // Label smoothing: none in half the cases, else E in [0, 1].
    double e = c.randInt(0, 1) ? 0.0 : c.randInt(0, 10) / 10.0;
    c.note("N ").note(N).note(" K ").note(K).note(" E ").note(e);
    std::vector<NamedAttr> attrs;
    if (e != 0)
      attrs.push_back({"label_smoothing", Attribute(e)});
    lwrt::XentParams p{e};
    Value *z = c.input({N, K}, -5, 5), *l = c.labels(N, K);
    c.check(c.emit(OpKind::SoftmaxXent, {z, l}, attrs), [&](const Views& in, const Views& out) {
      return lwrt::cpu::softmaxXent(in[0], in[1], out[0], p);
    });
    c.check(c.emit(OpKind::SoftmaxXentGrad, {z, l, c.input({}, -2, 2)}, attrs),
            [&](const Views& in, const Views& out) {
              return lwrt::cpu::softmaxXentGrad(in[0], in[1], in[2], out[0], p);
            });
  });
}

TEST(RuntimeNNKernels, MseLossAndGrad) {
  forSeeds(kSeeds, [](KernelCase& c) {
    Shape s = c.randShape(0, 3, 5);
    c.note("x ").note(shapeStr(s));
    Value *pred = c.input(s), *target = c.input(s);
    c.check(c.emit(OpKind::MseLoss, {pred, target}), [](const Views& in, const Views& out) {
      return lwrt::cpu::mseLoss(in[0], in[1], out[0]);
    });
    c.check(c.emit(OpKind::MseLossGrad, {pred, target, c.input({}, -2, 2)}),
            [](const Views& in, const Views& out) {
              return lwrt::cpu::mseLossGrad(in[0], in[1], in[2], out[0]);
            });
  });
}

//===--- Refusals ---------------------------------------------------------===//

TEST(RuntimeNNKernels, RefusesOtherTypesAndMismatchedShapes) {
  std::vector<float> f(64, 1.0f), g(64, 0.0f);
  std::vector<int64_t> ints(64, 7);
  lwrt::TensorView x{f.data(), lwrt::DType::F32, {1, 1, 4, 4}};
  lwrt::TensorView y{g.data(), lwrt::DType::F32, {1, 1, 4, 4}};
  // Other element types.
  lwrt::TensorView xi{ints.data(), lwrt::DType::I64, {1, 1, 4, 4}};
  lwrt::TensorView xh{f.data(), lwrt::DType::F16, {1, 1, 4, 4}};
  EXPECT_FALSE(lwrt::cpu::softmax(xi, y, {}));
  EXPECT_FALSE(lwrt::cpu::maxPool2d(xh, y, {}));
  EXPECT_FALSE(lwrt::cpu::globalAvgPool(xi, y));
  // Mixed float types.
  std::vector<double> d(64);
  lwrt::TensorView yd{d.data(), lwrt::DType::F64, {1, 1, 4, 4}};
  EXPECT_FALSE(lwrt::cpu::softmax(x, yd, {}));
  EXPECT_FALSE(lwrt::cpu::lrn(x, yd, {}));
  // Shapes that do not fit.
  lwrt::TensorView w{f.data(), lwrt::DType::F32, {1, 2, 3, 3}};
  EXPECT_FALSE(lwrt::cpu::conv2d(x, w, nullptr, y, {}));
  lwrt::TensorView a{f.data(), lwrt::DType::F32, {3, 4}}, b{f.data(), lwrt::DType::F32, {3, 4}};
  lwrt::TensorView m{g.data(), lwrt::DType::F32, {3, 4}};
  EXPECT_FALSE(lwrt::cpu::gemm(a, b, nullptr, m, {}));
  EXPECT_FALSE(lwrt::cpu::matmul(a, b, m));
  // Labels out of range, and the shape check of a loss.
  lwrt::TensorView z{f.data(), lwrt::DType::F32, {2, 4}}, loss{g.data(), lwrt::DType::F32, {}};
  lwrt::TensorView labels{ints.data(), lwrt::DType::I64, {2}};
  EXPECT_FALSE(lwrt::cpu::softmaxXent(z, labels, loss, {}));
  ints[0] = ints[1] = 3;
  EXPECT_TRUE(lwrt::cpu::softmaxXent(z, labels, loss, {}));
  EXPECT_NEAR(g[0], std::log(4.0), 1e-6);
  EXPECT_FALSE(lwrt::cpu::mseLoss(z, a, loss));
}

} // namespace
