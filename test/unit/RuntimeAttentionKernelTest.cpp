//===- RuntimeAttentionKernelTest.cpp - the CPU attention kernels' bits ---===//
//
// The CPU kernels compute each score once (runtime/cpu/AttentionKernels.cpp)
// where lwrt/attention_math.h's row functions, which the interpreter and the
// CUDA kernels run, compute it again: the results must be the same bits,
// with and without a mask, causal or not, on the per-entry path (batch
// entries at least the pool's threads) and the per-row one (fewer).
//
//===----------------------------------------------------------------------===//
#include "lwrt/attention_math.h"
#include "lwrt/cpu_attention.h"
#include "lwrt/kernel_checks.h"

#include <cstdint>
#include <gtest/gtest.h>
#include <random>
#include <vector>

namespace {

using lwrt::DType;
using lwrt::TensorView;

TEST(RuntimeAttentionKernelTest, SameBitsAsTheRowFunctions) {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t batch : {1, 6})
    for (int causal = 0; causal < 2; ++causal)
      for (bool withMask : {false, true}) {
        const int64_t tq = 7, tk = 7, d = 5, dv = 3;
        auto fresh = [&](int64_t n) {
          std::vector<float> x(static_cast<size_t>(n));
          for (float& e : x)
            e = normal(rng);
          return x;
        };
        std::vector<float> q = fresh(batch * tq * d), k = fresh(batch * tk * d),
                           v = fresh(batch * tk * dv), mask = fresh(tq * tk),
                           dout = fresh(batch * tq * dv);
        std::vector<float> out(q.size() / d * dv), lse(static_cast<size_t>(batch * tq));
        std::vector<float> dq(q.size()), dk(k.size()), dvv(v.size());
        TensorView qv{q.data(), DType::F32, {batch, tq, d}},
            kv{k.data(), DType::F32, {batch, tk, d}}, vv{v.data(), DType::F32, {batch, tk, dv}},
            mv{mask.data(), DType::F32, {tq, tk}}, ov{out.data(), DType::F32, {batch, tq, dv}},
            lv{lse.data(), DType::F32, {batch, tq}}, gv{dout.data(), DType::F32, {batch, tq, dv}},
            dqv{dq.data(), DType::F32, {batch, tq, d}}, dkv{dk.data(), DType::F32, {batch, tk, d}},
            dvv_{dvv.data(), DType::F32, {batch, tk, dv}};
        const lwrt::AttentionParams p{0.4, causal};
        const TensorView* m = withMask ? &mv : nullptr;
        ASSERT_TRUE(lwrt::cpu::attention(qv, kv, vv, m, ov, lv, p));
        ASSERT_TRUE(lwrt::cpu::attentionGrad(gv, qv, kv, vv, ov, lv, m, dqv, dkv, dvv_, p));
        lwrt::AttentionShape s;
        ASSERT_TRUE(lwrt::attentionOperands(qv, kv, vv, m, ov, lv, s));
        const float* mp = withMask ? mask.data() : nullptr;
        std::vector<float> wantOut(out.size()), wantLse(lse.size()), wantDq(dq.size()),
            wantDk(dk.size()), wantDv(dvv.size());
        std::vector<double> acc(static_cast<size_t>(d + dv));
        for (int64_t b = 0; b < batch; ++b) {
          for (int64_t i = 0; i < tq; ++i) {
            lwrt::attentionRow(s, p, q.data(), k.data(), v.data(), mp, wantOut.data(),
                               wantLse.data(), b, i, acc.data());
          }
        }
        EXPECT_EQ(out, wantOut);
        EXPECT_EQ(lse, wantLse);
        for (int64_t b = 0; b < batch; ++b) {
          for (int64_t i = 0; i < tq; ++i)
            lwrt::attentionGradQueryRow(s, p, dout.data(), q.data(), k.data(), v.data(), out.data(),
                                        lse.data(), mp, wantDq.data(), b, i, acc.data());
          for (int64_t j = 0; j < tk; ++j)
            lwrt::attentionGradKeyRow(s, p, dout.data(), q.data(), k.data(), v.data(), out.data(),
                                      lse.data(), mp, wantDk.data(), wantDv.data(), b, j,
                                      acc.data());
        }
        EXPECT_EQ(dq, wantDq) << "batch " << batch << " causal " << causal << " mask " << withMask;
        EXPECT_EQ(dk, wantDk);
        EXPECT_EQ(dvv, wantDv);
      }
}

} // namespace
