//===- SpecEfficiencyTest.cpp - A spec's calibrated efficiency and its use -===//
#include "TestUtil.h"
#include "cost/CostModel.h"

namespace lwcc {
namespace {

using test::parseOk;

/// Round figures: 1 GFLOP/s, 1 GB/s, 1 us launch.
std::string specWith(const std::string& extra) {
  return R"({"name": "t", "fp32_flops": 1e9, "tf32_flops": 2e9, "mem_bandwidth": 1e9,
  "launch_seconds": 1e-6, "memory_bytes": 1000000, "intra_bandwidth": 1e9,
  "intra_latency": 1e-6, "inter_bandwidth": 1e8, "inter_latency": 1e-5,
  "devices_per_node": 2)" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

std::string errorOf(const std::string& extra) {
  auto s = parseDeviceSpec(specWith(extra), "cal.json");
  return s ? "" : llvm::toString(s.takeError());
}

TEST(SpecEfficiencyTest, ParsedWithItsLookupOrder) {
  auto s = parseDeviceSpec(specWith(R"j("efficiency": {"conv2d@tf32": {"compute_fraction": 0.5,
        "compute_half_flops": 1e4}, "conv2d": {"compute_fraction": 0.25},
        "default@fp32": {"bandwidth_fraction": 0.8}, "default": {"bandwidth_half_bytes": 100}},
      "calibration": {"date": "2026-12-01", "gpu": "emulated GPU (NVIDIA H100 80GB HBM3)",
        "emulated": true, "cudnn": "9.19.0", "models": ["lenet"], "batches": [4, 2],
        "points": 12})j"),
                           "cal.json");
  ASSERT_TRUE(static_cast<bool>(s)) << llvm::toString(s.takeError());
  EXPECT_EQ(s->efficiency.size(), 4u);
  EXPECT_DOUBLE_EQ(s->efficiencyOf("conv2d", "tf32")->computeFraction, 0.5);
  EXPECT_DOUBLE_EQ(s->efficiencyOf("conv2d", "tf32")->computeHalfFlops, 1e4);
  EXPECT_DOUBLE_EQ(s->efficiencyOf("conv2d", "tf32")->bandwidthFraction, 1); // default
  EXPECT_DOUBLE_EQ(s->efficiencyOf("conv2d", "bf16")->computeFraction, 0.25);
  EXPECT_DOUBLE_EQ(s->efficiencyOf("relu", "fp32")->bandwidthFraction, 0.8);
  EXPECT_DOUBLE_EQ(s->efficiencyOf("relu", "tf32")->bandwidthHalfBytes, 100);
  EXPECT_DOUBLE_EQ(s->efficiencyOf("", "fp32")->bandwidthFraction, 0.8);
  ASSERT_TRUE(s->calibration);
  EXPECT_TRUE(s->calibration->emulated);
  EXPECT_EQ(s->calibration->cudnn, "9.19.0");
  EXPECT_EQ(s->calibration->batches, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(s->calibration->points, 12);

  // Its JSON form reads back as the same spec.
  std::string text;
  llvm::raw_string_ostream os(text);
  os << deviceSpecJson(*s);
  auto back = parseDeviceSpec(os.str(), "back.json");
  ASSERT_TRUE(static_cast<bool>(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(back->name, "t");
  EXPECT_EQ(back->efficiency.size(), 4u);
  EXPECT_DOUBLE_EQ(back->efficiencyOf("conv2d", "tf32")->computeHalfFlops, 1e4);
  EXPECT_EQ(back->calibration->gpu, s->calibration->gpu);
  EXPECT_EQ(back->calibration->models, s->calibration->models);
  EXPECT_DOUBLE_EQ(back->tf32Flops, 2e9);

  auto plain = parseDeviceSpec(specWith(""), "plain.json");
  ASSERT_TRUE(static_cast<bool>(plain));
  EXPECT_EQ(plain->efficiencyOf("conv2d", "fp32"), nullptr);
  EXPECT_FALSE(plain->calibration);
}

TEST(SpecEfficiencyTest, ErrorsNameTheFileAndField) {
  auto has = [](const std::string& extra, const std::string& what) {
    std::string e = errorOf(extra);
    EXPECT_NE(e.find(what), std::string::npos) << extra << " gave: " << e;
  };
  has(R"("efficiency": [1])", "cal.json: field 'efficiency' must be an object");
  has(R"("efficiency": {"conv3d": {}})",
      "cal.json: field 'efficiency.conv3d': unknown op kind 'conv3d'");
  has(R"("efficiency": {"gemm@fp8": {}})",
      "cal.json: field 'efficiency.gemm@fp8': unknown precision 'fp8'");
  has(R"("efficiency": {"gemm": {"compute_fraction": 1.5}})",
      "cal.json: field 'efficiency.gemm.compute_fraction' must be in (0, 1], got 1.5");
  has(R"("efficiency": {"gemm": {"bandwidth_fraction": 0}})",
      "field 'efficiency.gemm.bandwidth_fraction' must be in (0, 1]");
  has(R"("efficiency": {"default": {"bandwidth_half_bytes": -1}})",
      "field 'efficiency.default.bandwidth_half_bytes' must be non-negative");
  has(R"("efficiency": {"gemm": {"compute_half_flops": "big"}})",
      "field 'efficiency.gemm.compute_half_flops' must be a number");
  has(R"("efficiency": {"gemm": {"peak": 1}})", "unknown field 'efficiency.gemm.peak'");
  has(R"("calibration": {"date": "2026-12-01", "gpu": "x"})",
      "cal.json: missing field 'calibration.emulated'");
  has(R"("calibration": {"date": "d", "gpu": "x", "emulated": "no"})",
      "field 'calibration.emulated' must be true or false");
  has(R"("calibration": {"date": "d", "gpu": "x", "emulated": false, "batches": [0]})",
      "field 'calibration.batches' must be a list of positive integers");
  has(R"("calibration": {"date": "d", "gpu": "x", "emulated": false, "sm": "sm_90"})",
      "unknown field 'calibration.sm'");
}

TEST(SpecEfficiencyTest, PricesTheOpsOfItsKinds) {
  auto g = parseOk(R"(
graph @g(%x: f32[2,3,8,8] @data) {
  %w = param "w" : f32[4,3,3,3]
  %c = conv2d(%x, %w) {pads = [1, 1, 1, 1]} : f32[2,4,8,8] loc("conv")
  %r = relu(%c) : f32[2,4,8,8] loc("relu")
  return %r
})");
  ASSERT_TRUE(g);
  const Op& conv = *g->ops().front();
  const Op& relu = *std::next(g->ops().begin())->get();
  auto plain = parseDeviceSpec(specWith(""), "plain.json");
  auto cal = parseDeviceSpec(specWith(R"("efficiency": {"conv2d@tf32": {"compute_fraction": 0.5,
        "compute_half_flops": 1e4}, "default": {"bandwidth_fraction": 0.5,
        "bandwidth_half_bytes": 1000}})"),
                             "cal.json");
  ASSERT_TRUE(plain && cal);
  CostModel before(*plain), after(*cal);
  const double flops = before.flops(conv), bytes = before.bytes(conv);
  EXPECT_EQ(after.precision(&conv), "tf32"); // convolutions on TF32 by default
  EXPECT_EQ(after.precision(&relu), "fp32");
  EXPECT_DOUBLE_EQ(before.opSeconds(conv), flops / 2e9 + 1e-6);
  // Half the peak, and half of that at 1e4 FLOPs: (F + 1e4) / (0.5 x 2e9).
  EXPECT_DOUBLE_EQ(after.opSeconds(conv), (flops + 1e4) / 1e9 + 1e-6);
  EXPECT_GT(after.opSeconds(conv), before.opSeconds(conv));
  // relu takes "default": memory-bound at half the bandwidth, plus 1000 bytes.
  const double rb = before.bytes(relu);
  EXPECT_DOUBLE_EQ(before.opSeconds(relu), rb / 1e9 + 1e-6);
  EXPECT_DOUBLE_EQ(after.opSeconds(relu), (rb + 1000) / 0.5e9 + 1e-6);
  // Without TF32 the conv is fp32: no conv2d@fp32 nor conv2d entry, so the
  // default's bandwidth and the compute side at the peak.
  after.setTf32(CostModel::Tf32::Off);
  EXPECT_DOUBLE_EQ(after.opSeconds(conv), std::max(flops / 1e9, (bytes + 1000) / 0.5e9) + 1e-6);
  // A copy of no op (the searches' transfers) takes "default" too.
  EXPECT_DOUBLE_EQ(after.computeSeconds(0, 4000), 5000 / 0.5e9 + 1e-6);
  EXPECT_DOUBLE_EQ(before.computeSeconds(0, 4000), 4000 / 1e9 + 1e-6);
}

} // namespace
} // namespace lwcc
