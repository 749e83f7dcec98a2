//===- RuntimeGatherNdKernelTest.cpp - gather_nd kernels vs the interpreter ===//
//
// lwrt::cpu::gatherNd and gatherNdGrad on seeded random shapes, batch dims
// and index tuples (negative and repeated ones included), in f32 and f64,
// against the reference interpreter (lwcc::evaluateOp in float64): gathers
// must be exact, scatter-adds agree to a relative 1e-12 (f64) or 1e-6 (f32);
// an index out of range is refused.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"
#include "interp/Interpreter.h"
#include "lwrt/cpu_tensor.h"

#include <cmath>
#include <random>

namespace lwcc::test {
namespace {

using Ints = std::vector<int64_t>;

/// One configuration: data shape, batch dims, index shape and values.
struct NdCase {
  Shape data, indices;
  int64_t batchDims = 0;
  Ints values;
};

NdCase randomCase(std::mt19937_64& rng) {
  auto randInt = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  NdCase n;
  for (int64_t d = randInt(1, 4); d > 0; --d)
    n.data.push_back(randInt(1, 3));
  int64_t rank = static_cast<int64_t>(n.data.size());
  n.batchDims = randInt(0, rank - 1);
  int64_t k = randInt(1, rank - n.batchDims);
  n.indices.assign(n.data.begin(), n.data.begin() + n.batchDims);
  for (int64_t d = randInt(0, 2); d > 0; --d)
    n.indices.push_back(randInt(1, 3));
  n.indices.push_back(k);
  int64_t tuples = TensorType(DType::I64, n.indices).numElements() / k;
  for (int64_t t = 0; t < tuples; ++t)
    for (int64_t j = 0; j < k; ++j) {
      int64_t dim = n.data[n.batchDims + j];
      n.values.push_back(randInt(-dim, dim - 1));
    }
  return n;
}

/// The interpreter's result of `kind` on (first, second) with these attrs.
Tensor oracle(OpKind kind, const Tensor& first, const Tensor& second,
              std::vector<NamedAttr> attrs) {
  Graph g("oracle");
  Builder b(g);
  Value* a = g.addInput("a", first.type);
  Value* c = g.addInput("c", second.type);
  auto op = b.createInferred(kind, {a, c}, std::move(attrs), 1);
  EXPECT_TRUE(!!op) << (op ? "" : llvm::toString(op.takeError()));
  if (!op)
    return Tensor();
  auto r = evaluateOp(**op, {&first, &second}, Precision::F64);
  EXPECT_TRUE(!!r) << (r ? "" : llvm::toString(r.takeError()));
  return r ? (*r)[0] : Tensor();
}

template <typename T> lwrt::DType dtypeOf() {
  return std::is_same_v<T, float> ? lwrt::DType::F32 : lwrt::DType::F64;
}

template <typename T> void checkCase(const NdCase& n, std::mt19937_64& rng, int seed) {
  std::string what = "seed " + std::to_string(seed) + " data " + shapeStr(n.data) + " indices " +
                     shapeStr(n.indices) + " batch_dims " + std::to_string(n.batchDims);
  std::normal_distribution<double> normal;
  DType dt = std::is_same_v<T, float> ? DType::F32 : DType::F64;
  Tensor data(TensorType(dt, n.data));
  for (double& v : data.f)
    v = static_cast<T>(normal(rng));
  Tensor idx = Tensor::fromInts(TensorType(DType::I64, n.indices), n.values);
  std::vector<NamedAttr> attrs = {{"batch_dims", n.batchDims}};
  Tensor y = oracle(OpKind::GatherNd, data, idx, attrs);
  ASSERT_FALSE(y.f.empty() && y.size() != 0) << what;
  std::vector<T> in(data.f.begin(), data.f.end()), out(y.f.size(), T(-7));
  Ints ix = n.values;
  lwrt::TensorView dv{in.data(), dtypeOf<T>(), n.data}, iv{ix.data(), lwrt::DType::I64, n.indices},
      yv{out.data(), dtypeOf<T>(), y.type.shape};
  lwrt::GatherNdParams p{n.batchDims};
  ASSERT_TRUE(lwrt::cpu::gatherNd(dv, iv, yv, p)) << what;
  for (size_t k = 0; k < out.size(); ++k)
    ASSERT_EQ(static_cast<double>(out[k]), y.f[k]) << what << " element " << k;

  // The gradient: dy of the result's shape scattered back into data's.
  Tensor dy(y.type);
  for (double& v : dy.f)
    v = static_cast<T>(normal(rng));
  attrs.push_back({"input_shape", Ints(n.data)});
  Tensor dx = oracle(OpKind::GatherNdGrad, idx, dy, attrs);
  std::vector<T> g(dy.f.begin(), dy.f.end()), got(dx.f.size(), T(-7));
  lwrt::TensorView gv{g.data(), dtypeOf<T>(), dy.type.shape}, xv{got.data(), dtypeOf<T>(), n.data};
  ASSERT_TRUE(lwrt::cpu::gatherNdGrad(iv, gv, xv, p)) << what;
  double tol = std::is_same_v<T, float> ? 1e-6 : 1e-12;
  for (size_t k = 0; k < got.size(); ++k)
    ASSERT_NEAR(static_cast<double>(got[k]), dx.f[k], tol * (1 + std::fabs(dx.f[k])))
        << what << " dx element " << k;

  // An index past the end of its dim is refused.
  Ints bad = n.values;
  bad.back() = n.data[n.batchDims + n.indices.back() - 1];
  lwrt::TensorView bv{bad.data(), lwrt::DType::I64, n.indices};
  EXPECT_FALSE(lwrt::cpu::gatherNd(dv, bv, yv, p)) << what;
  EXPECT_FALSE(lwrt::cpu::gatherNdGrad(bv, gv, xv, p)) << what;
}

TEST(RuntimeGatherNdKernelTest, GatherAndScatterAdd) {
  for (int seed = 1; seed <= 24; ++seed) {
    std::mt19937_64 rng(static_cast<uint64_t>(seed) * 7919);
    NdCase n = randomCase(rng);
    checkCase<float>(n, rng, seed);
    checkCase<double>(n, rng, seed);
  }
}

TEST(RuntimeGatherNdKernelTest, AdaptivePoolIndexing) {
  // The exporter's form: data [H, W, N, C] (H and W moved to the front),
  // index tuples [oh, kh, ow, kw, 2], with repeated taps (2 -> 3 windows).
  NdCase n{{2, 2, 2, 3}, {3, 2, 3, 2, 2}, 0, {}};
  const int64_t taps[3][2] = {{0, 1}, {0, 1}, {1, 1}};
  for (int oh = 0; oh < 3; ++oh)
    for (int kh = 0; kh < 2; ++kh)
      for (int ow = 0; ow < 3; ++ow)
        for (int kw = 0; kw < 2; ++kw) {
          n.values.push_back(taps[oh][kh]);
          n.values.push_back(taps[ow][kw]);
        }
  std::mt19937_64 rng(5);
  checkCase<float>(n, rng, 0);
  checkCase<double>(n, rng, 0);
}

} // namespace
} // namespace lwcc::test
