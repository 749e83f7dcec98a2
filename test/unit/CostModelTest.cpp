//===- CostModelTest.cpp - Device specs, profiles and the cost model ------===//
#include "cost/CostModel.h"

#include "TestUtil.h"

namespace lwcc {
namespace {

using test::parseOk;

constexpr const char* kSpec = R"({"name": "t", "fp32_flops": 1e9, "mem_bandwidth": 1e9,
  "launch_seconds": 1e-6, "memory_bytes": 1000000, "intra_bandwidth": 1e9,
  "intra_latency": 1e-6, "inter_bandwidth": 1e8, "inter_latency": 1e-5,
  "devices_per_node": 2})";

DeviceSpec spec() {
  auto s = parseDeviceSpec(kSpec, "t.json");
  EXPECT_TRUE(static_cast<bool>(s));
  return *s;
}

std::string errorOf(llvm::Expected<DeviceSpec> s) {
  if (s)
    return "";
  return llvm::toString(s.takeError());
}

TEST(DeviceSpecTest, Presets) {
  for (const std::string& name : deviceSpecPresets()) {
    auto s = loadDeviceSpec(name);
    ASSERT_TRUE(static_cast<bool>(s)) << name;
    EXPECT_EQ(s->name, name);
    EXPECT_GT(s->fp32Flops, 0) << name;
    EXPECT_GE(s->tf32Flops, s->fp32Flops) << name;
    EXPECT_GT(s->memBandwidth, 0) << name;
    EXPECT_GT(s->memoryBytes, 0) << name;
    EXPECT_GE(s->intraBandwidth, s->interBandwidth) << name;
    // A GPU's trainer holds its libraries' 42 MiB per stream (measured on an
    // H100) and a copy of the input batch; the CPU backend's devices neither.
    EXPECT_EQ(s->workspaceBytesPerStream, name == "cpu" ? 0 : int64_t{42} << 20) << name;
    EXPECT_EQ(s->inputsOnDevice, name != "cpu") << name;
  }
  auto p100 = loadDeviceSpec("p100-cluster");
  ASSERT_TRUE(static_cast<bool>(p100));
  EXPECT_EQ(p100->devicesPerNode, 4);
  EXPECT_DOUBLE_EQ(p100->interBandwidth, 12.5e9); // 100 Gb/s EDR
  EXPECT_EQ(p100->node(3), 0);
  EXPECT_EQ(p100->node(4), 1);
  EXPECT_NE(errorOf(loadDeviceSpec("v100")).find("unknown device spec 'v100'"), std::string::npos);
}

TEST(DeviceSpecTest, JsonErrorsNameTheFileAndField) {
  EXPECT_EQ(spec().tf32Flops, 1e9); // defaults to fp32_flops
  EXPECT_EQ(spec().devicesPerNode, 2);
  std::string missing = kSpec;
  missing.replace(missing.find("\"mem_bandwidth\": 1e9,"), 21, "");
  EXPECT_NE(
      errorOf(parseDeviceSpec(missing, "a.json")).find("a.json: missing field 'mem_bandwidth'"),
      std::string::npos);
  std::string typed = kSpec;
  typed.replace(typed.find("1e-6, \"memory"), 4, "\"x\"");
  EXPECT_NE(errorOf(parseDeviceSpec(typed, "b.json"))
                .find("b.json: field 'launch_seconds' must be a number"),
            std::string::npos);
  std::string extra = kSpec;
  extra.insert(1, "\"fp64\": 1, ");
  EXPECT_NE(errorOf(parseDeviceSpec(extra, "c.json")).find("c.json: unknown field 'fp64'"),
            std::string::npos);
  EXPECT_NE(errorOf(parseDeviceSpec("[1]", "d.json")).find("d.json: a device spec must be"),
            std::string::npos);
  EXPECT_NE(errorOf(loadDeviceSpec("/nonexistent/e.json")).find("/nonexistent/e.json"),
            std::string::npos);
}

TEST(DeviceSpecTest, ConcurrencyGivesAKernelsShareOfTheDevice) {
  EXPECT_EQ(spec().concurrency, 0); // optional: every kernel fills the device
  std::string with = kSpec;
  with.insert(1, "\"concurrency\": 1024, ");
  auto s = parseDeviceSpec(with, "f.json");
  ASSERT_TRUE(static_cast<bool>(s)) << llvm::toString(s.takeError());
  EXPECT_EQ(s->concurrency, 1024);
  std::string half = kSpec;
  half.insert(1, "\"concurrency\": 10.5, ");
  EXPECT_NE(errorOf(parseDeviceSpec(half, "g.json"))
                .find("g.json: field 'concurrency' must be an integer"),
            std::string::npos);
  auto h100 = loadDeviceSpec("h100");
  ASSERT_TRUE(static_cast<bool>(h100));
  EXPECT_EQ(h100->concurrency, 132 * 2048);
  EXPECT_EQ(loadDeviceSpec("cpu")->concurrency, 0);

  auto g = parseOk(R"(
graph @g(%x: f32[2,3,8,8] @data) {
  %w = param "w" : f32[4,3,3,3]
  %c = conv2d(%x, %w) {pads = [1, 1, 1, 1]} : f32[2,4,8,8] loc("conv")
  %s = reduce_sum(%c) {axes = [0, 1, 2, 3], keepdims = 0} : f32[] loc("sum")
  return %s
})");
  ASSERT_TRUE(g);
  const Op& conv = *g->ops().front();
  const Op& sum = *std::next(g->ops().begin())->get();
  CostModel small(*s), fills(spec());
  EXPECT_DOUBLE_EQ(small.fill(conv), 512.0 / 1024);     // its 512 outputs
  EXPECT_DOUBLE_EQ(small.fill(sum), 512.0 / 64 / 1024); // a reduction: its input / 64
  EXPECT_DOUBLE_EQ(fills.fill(conv), 1.0);
  // A kernel filling a share of the device computes at that share of the
  // peak (a quarter of the op: a quarter of the share); its bytes still
  // move at the full bandwidth.
  const double launch = s->launchSeconds;
  auto expected = [&](double flops, double bytes, double share) {
    return std::max(flops / (small.peakFlops(&conv) * share), bytes / s->memBandwidth) + launch;
  };
  EXPECT_DOUBLE_EQ(small.opSeconds(conv),
                   expected(small.flops(conv), small.bytes(conv), 512.0 / 1024));
  EXPECT_DOUBLE_EQ(fills.opSeconds(conv), expected(small.flops(conv), small.bytes(conv), 1));
  EXPECT_DOUBLE_EQ(small.fill(conv, 0.25), 128.0 / 1024);
  EXPECT_DOUBLE_EQ(small.computeSeconds(small.flops(conv) / 4, small.bytes(conv) / 4, &conv,
                                        small.fill(conv, 0.25)),
                   expected(small.flops(conv) / 4, small.bytes(conv) / 4, 128.0 / 1024));
  EXPECT_DOUBLE_EQ(small.computeSeconds(1e12, 0, nullptr, 0.5),
                   small.computeSeconds(2e12, 0, nullptr, 1));

  // host_cores: the devices of a node share them, each on max(1, cores /
  // devices) of its cores.
  EXPECT_EQ(spec().hostCores, 0);
  EXPECT_EQ(loadDeviceSpec("cpu")->hostCores, 2);
  EXPECT_EQ(h100->hostCores, 0);
  std::string cores = kSpec;
  cores.insert(1, "\"host_cores\": 4, ");
  auto c = parseDeviceSpec(cores, "h.json");
  ASSERT_TRUE(static_cast<bool>(c)) << llvm::toString(c.takeError());
  CostModel shared(*c);
  EXPECT_DOUBLE_EQ(shared.hostFill(conv, 1), 1.0);  // every core
  EXPECT_DOUBLE_EQ(shared.hostFill(conv, 2), 0.5);  // two of four
  EXPECT_DOUBLE_EQ(shared.hostFill(conv, 8), 0.25); // one each, at least
  EXPECT_DOUBLE_EQ(fills.hostFill(conv, 8), 0.0);   // devices with cores of their own
  OpProfile measured;
  measured.entries[{"conv2d", "conv", 0}] = {1e-3, 0, 1};
  EXPECT_DOUBLE_EQ(CostModel(*c, measured).hostFill(conv, 2), 0.0); // a measured time holds it
  EXPECT_DOUBLE_EQ(CostModel(*c, measured).fill(conv), 0.0);        // the device's share too
  EXPECT_DOUBLE_EQ(CostModel(*c, measured).fill(sum), 1.0); // not measured: every kernel fills it

  // wake_seconds: a blocked stream's wake-up, the CPU backend's thread
  // hand-off; GPUs' streams wait in hardware.
  EXPECT_DOUBLE_EQ(h100->wakeSeconds, 0);
  EXPECT_GT(loadDeviceSpec("cpu")->wakeSeconds, 0);
  std::string wakes = kSpec;
  wakes.insert(1, "\"wake_seconds\": 3e-5, ");
  auto w = parseDeviceSpec(wakes, "w.json");
  ASSERT_TRUE(static_cast<bool>(w)) << llvm::toString(w.takeError());
  EXPECT_DOUBLE_EQ(CostModel(*w).wakeSeconds(), 3e-5);
  // A profile says what its trainer measured: none where it never blocked.
  EXPECT_DOUBLE_EQ(CostModel(*w, measured).wakeSeconds(), 0);
  std::string negative = kSpec;
  negative.insert(1, "\"wake_seconds\": -1, ");
  auto bad = parseDeviceSpec(negative, "n.json");
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("n.json: field 'wake_seconds' must be"),
            std::string::npos);
}

TEST(CostModelTest, ComputeAndCommunication) {
  auto g = parseOk(R"(
graph @g(%x: f32[2,3,8,8] @data) {
  %w = param "w" : f32[4,3,3,3]
  %c = conv2d(%x, %w) {pads = [1, 1, 1, 1]} : f32[2,4,8,8] @dev(1) loc("conv")
  %r = relu(%c) : f32[2,4,8,8] @dev(1) loc("relu")
  %m = device_copy(%r) {src = 1, dst = 2} : f32[2,4,8,8]
  %a0, %a1 = all_reduce(%r, %r) {devices = [1, 1]} : f32[2,4,8,8], f32[2,4,8,8]
  return %m, %a0
}
)");
  ASSERT_TRUE(g);
  CostModel cm(spec());
  auto it = g->ops().begin();
  const Op& conv = **it++;
  const Op& relu = **it++;
  const Op& copy = **it++;
  // 512 outputs of a 27-long dot product.
  EXPECT_DOUBLE_EQ(cm.flops(conv), 512 * 54);
  EXPECT_DOUBLE_EQ(cm.bytes(conv), (384 + 108 + 512) * 4);
  EXPECT_DOUBLE_EQ(cm.opSeconds(conv), 512 * 54 / 1e9 + 1e-6);
  // Bound by memory.
  EXPECT_DOUBLE_EQ(cm.opSeconds(relu), 4096 / 1e9 + 1e-6);
  // Device 1 and 2 sit in different nodes (2 per node).
  EXPECT_DOUBLE_EQ(cm.commSeconds(copy), 2048 / 1e8 + 1e-5);
  EXPECT_DOUBLE_EQ(cm.transferSeconds(2048, 0, 1), 2048 / 1e9 + 1e-6);
  EXPECT_DOUBLE_EQ(cm.transferSeconds(2048, 3, 3), 0);
  EXPECT_DOUBLE_EQ(cm.commSeconds(relu), 0);
  // Ring formulas over 4 devices in two nodes: the inter-node link.
  std::vector<int64_t> four{0, 1, 2, 3};
  EXPECT_DOUBLE_EQ(cm.allReduceSeconds(4000, four), 1.5 * 4000 / 1e8 + 6 * 1e-5);
  EXPECT_DOUBLE_EQ(cm.allGatherSeconds(4000, four), 0.75 * 4000 / 1e8 + 3 * 1e-5);
  EXPECT_DOUBLE_EQ(cm.allReduceSeconds(4000, {2}), 0);
}

TEST(CostModelTest, LogicalDevicesSharingAGpuCopyInsideIt) {
  DeviceSpec s = spec();
  s.devicesPerGpu = 2; // devices 0 and 1 on GPU 0, 2 and 3 on GPU 1: one node (2 GPUs)
  EXPECT_EQ(s.gpu(1), 0);
  EXPECT_EQ(s.gpu(2), 1);
  EXPECT_EQ(s.node(3), 0);
  EXPECT_TRUE(s.sameGpu({0, 1}));
  EXPECT_FALSE(s.sameGpu({1, 2}));
  EXPECT_FALSE(s.sameGpu({1})); // one device shares nothing
  CostModel cm(s);
  // Inside GPU 0: read and written at the memory's bandwidth, one launch.
  EXPECT_DOUBLE_EQ(cm.transferSeconds(2048, 0, 1), 2 * 2048 / 1e9 + 1e-6);
  // Between the GPUs: the node's link, as before.
  EXPECT_DOUBLE_EQ(cm.transferSeconds(2048, 1, 2), 2048 / 1e9 + 1e-6);
  EXPECT_DOUBLE_EQ(cm.linkBandwidth({0, 1}), 1e9 / 2);
  EXPECT_DOUBLE_EQ(cm.linkLatency({0, 1}), 1e-6);
  // An all-reduce of 2 x 1000 bytes on one GPU: two sums (2 then 3 passes
  // of 1000 bytes) and two copies out (2 each), four launches.
  EXPECT_DOUBLE_EQ(cm.allReduceSeconds(1000, {0, 1}), 9000 / 1e9 + 4e-6);
  EXPECT_DOUBLE_EQ(cm.allGatherSeconds(1000, {0, 1}), 4000 / 1e9 + 4e-6);
  EXPECT_DOUBLE_EQ(cm.broadcastSeconds(1000, 0, {1}), 2000 / 1e9 + 1e-6);
  // Across GPUs the ring over the node's links, as before.
  EXPECT_DOUBLE_EQ(cm.allReduceSeconds(1000, {0, 2}), 1000 / 1e9 + 2e-6);
  // The field in JSON, read back; a bad one is an error naming it.
  std::string text = kSpec;
  text.insert(text.size() - 1, ", \"devices_per_gpu\": 4");
  auto four = parseDeviceSpec(text, "t.json");
  ASSERT_TRUE(static_cast<bool>(four)) << llvm::toString(four.takeError());
  EXPECT_EQ(four->devicesPerGpu, 4);
  std::string json;
  llvm::raw_string_ostream(json) << deviceSpecJson(*four);
  auto again = parseDeviceSpec(json, "again.json");
  ASSERT_TRUE(static_cast<bool>(again)) << llvm::toString(again.takeError());
  EXPECT_EQ(again->devicesPerGpu, 4);
  text = kSpec;
  text.insert(text.size() - 1, ", \"devices_per_gpu\": 0");
  EXPECT_EQ(errorOf(parseDeviceSpec(text, "t.json")),
            "t.json: field 'devices_per_gpu' must be a positive integer");
}

TEST(CostModelTest, SixteenBitOpsAtTheirOwnPeak) {
  EXPECT_EQ(spec().bf16Flops, 1e9); // default: tf32_flops, itself fp32's
  EXPECT_EQ(spec().fp16Flops, 1e9);
  for (const std::string& name : deviceSpecPresets()) {
    auto s = loadDeviceSpec(name);
    ASSERT_TRUE(static_cast<bool>(s)) << name;
    EXPECT_GE(s->bf16Flops, s->fp32Flops) << name;
    EXPECT_GE(s->fp16Flops, s->fp32Flops) << name;
  }
  auto h100 = loadDeviceSpec("h100");
  ASSERT_TRUE(static_cast<bool>(h100));
  EXPECT_DOUBLE_EQ(h100->bf16Flops, 2 * h100->tf32Flops); // dense tensor cores: twice TF32
  EXPECT_DOUBLE_EQ(loadDeviceSpec("cpu")->bf16Flops, loadDeviceSpec("cpu")->fp32Flops);
  std::string with = kSpec;
  with.insert(1, "\"bf16_flops\": 4e9, \"fp16_flops\": 8e9, ");
  auto s = parseDeviceSpec(with, "i.json");
  ASSERT_TRUE(static_cast<bool>(s)) << llvm::toString(s.takeError());
  std::string zero = kSpec;
  zero.insert(1, "\"bf16_flops\": 0, ");
  EXPECT_NE(errorOf(parseDeviceSpec(zero, "j.json")).find("j.json: field 'bf16_flops' must be"),
            std::string::npos);

  // The same convolution on float32, bf16 and fp16 operands: compute-bound
  // at each type's peak; its bytes (half as many in 16 bits) the same way.
  auto g = parseOk(R"(
graph @g(%x: f32[2,3,8,8] @data, %xb: bf16[2,3,8,8] @data, %xh: f16[2,3,8,8] @data) {
  %w = param "w" : f32[4,3,3,3]
  %wb = param "wb" : bf16[4,3,3,3]
  %wh = param "wh" : f16[4,3,3,3]
  %c = conv2d(%x, %w) {pads = [1, 1, 1, 1]} : f32[2,4,8,8] loc("conv")
  %cb = conv2d(%xb, %wb) {pads = [1, 1, 1, 1]} : bf16[2,4,8,8] loc("conv.bf16")
  %ch = conv2d(%xh, %wh) {pads = [1, 1, 1, 1]} : f16[2,4,8,8] loc("conv.fp16")
  %cast = cast(%cb) {to = "f32"} : f32[2,4,8,8] loc("cast")
  return %c, %cb, %ch, %cast
})");
  ASSERT_TRUE(g);
  auto it = g->ops().begin();
  const Op& conv = **it++;
  const Op& convB = **it++;
  const Op& convH = **it++;
  const Op& cast = **it++;
  CostModel cm(*s);
  EXPECT_DOUBLE_EQ(cm.opSeconds(conv), 512 * 54 / 1e9 + 1e-6);
  EXPECT_DOUBLE_EQ(cm.opSeconds(convB), 512 * 54 / 4e9 + 1e-6);
  EXPECT_DOUBLE_EQ(cm.opSeconds(convH), 512 * 54 / 8e9 + 1e-6);
  EXPECT_DOUBLE_EQ(cm.bytes(convB), cm.bytes(conv) / 2);
  EXPECT_DOUBLE_EQ(cm.opSeconds(cast), (1024 + 2048) / 1e9 + 1e-6); // bound by its bytes
  cm.setTf32(CostModel::Tf32::All); // TF32 is for float32 operands; 16-bit ones keep theirs
  EXPECT_DOUBLE_EQ(cm.opSeconds(convB), 512 * 54 / 4e9 + 1e-6);
}

TEST(CostModelTest, Tf32AsTheTrainersRunIt) {
  std::string with = kSpec;
  with.insert(1, "\"tf32_flops\": 4e9, ");
  auto s = parseDeviceSpec(with, "k.json");
  ASSERT_TRUE(static_cast<bool>(s)) << llvm::toString(s.takeError());
  auto g = parseOk(R"(
graph @g(%x: f32[2,3,8,8] @data, %a: f32[16,32] @data) {
  %w = param "w" : f32[4,3,3,3]
  %v = param "v" : f32[32,32]
  %c = conv2d(%x, %w) {pads = [1, 1, 1, 1]} : f32[2,4,8,8] loc("conv")
  %m = gemm(%a, %v) : f32[16,32] loc("fc")
  return %c, %m
})");
  ASSERT_TRUE(g);
  const Op& conv = *g->ops().front();
  const Op& gemm = *std::next(g->ops().begin())->get();
  CostModel cm(*s);
  const double convFlops = 512 * 54, gemmFlops = cm.flops(gemm);
  ASSERT_GT(gemmFlops / 1e9, cm.bytes(gemm) / 1e9); // compute-bound at float32's peak
  // The default, as trainers run without --tf32 / --no-tf32: convolutions
  // on TF32, matrix products in float32.
  EXPECT_DOUBLE_EQ(cm.opSeconds(conv), convFlops / 4e9 + 1e-6);
  EXPECT_DOUBLE_EQ(cm.opSeconds(gemm), gemmFlops / 1e9 + 1e-6);
  cm.setTf32(CostModel::Tf32::All);
  EXPECT_DOUBLE_EQ(cm.opSeconds(gemm), std::max(gemmFlops / 4e9, cm.bytes(gemm) / 1e9) + 1e-6);
  cm.setTf32(CostModel::Tf32::Off);
  EXPECT_DOUBLE_EQ(cm.opSeconds(conv), convFlops / 1e9 + 1e-6);
}

TEST(CostModelTest, MeasuredProfile) {
  auto profile = parseOpProfile(R"({"device": "cpu", "ops": [
    {"op": "conv2d", "loc": "conv", "device": 1, "seconds": 0.5},
    {"op": "conv2d", "loc": "conv", "device": 1, "seconds": 0.25},
    {"op": "relu", "loc": "relu", "device": 3, "seconds": 0.125}]})",
                                "p.json");
  ASSERT_TRUE(static_cast<bool>(profile)) << llvm::toString(profile.takeError());
  auto g = parseOk(R"(
graph @g(%x: f32[2,3,8,8] @data) {
  %w = param "w" : f32[4,3,3,3]
  %c = conv2d(%x, %w) {pads = [1, 1, 1, 1]} : f32[2,4,8,8] @dev(1) loc("conv")
  %r = relu(%c) : f32[2,4,8,8] @dev(1) loc("relu")
  %s = sigmoid(%r) : f32[2,4,8,8] @dev(1) loc("sig")
  return %s
}
)");
  ASSERT_TRUE(g);
  CostModel cm(spec(), std::move(*profile));
  auto it = g->ops().begin();
  EXPECT_DOUBLE_EQ(cm.opSeconds(**it++), 0.375);             // the mean of its two entries
  EXPECT_DOUBLE_EQ(cm.opSeconds(**it++), 0.125);             // measured on another device
  EXPECT_DOUBLE_EQ(cm.opSeconds(**it++), 4096 / 1e9 + 1e-6); // not measured: analytic

  auto bad = parseOpProfile(R"({"ops": [{"op": "conv9", "loc": "a", "seconds": 1}]})", "q.json");
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("q.json: ops[0]: unknown op 'conv9'"),
            std::string::npos);
  auto neg = parseOpProfile(R"({"ops": [{"op": "relu", "loc": "a", "seconds": -1}]})", "r.json");
  ASSERT_FALSE(static_cast<bool>(neg));
  EXPECT_NE(llvm::toString(neg.takeError()).find("r.json: ops[0]: field 'seconds'"),
            std::string::npos);
}

TEST(CostModelTest, MultiDeviceProfile) {
  // A two-device trainer's profile: each participant's time of the
  // all-reduce, and device 0's relu.
  auto profile = parseOpProfile(R"({"device": "cpu", "devices": 2, "ops": [
    {"op": "relu", "loc": "r", "device": 0, "seconds": 0.5},
    {"op": "all_reduce", "loc": "sync", "device": 0, "seconds": 0.25},
    {"op": "all_reduce", "loc": "sync", "device": 1, "seconds": 0.75}]})",
                                "p.json");
  ASSERT_TRUE(static_cast<bool>(profile)) << llvm::toString(profile.takeError());
  EXPECT_EQ(profile->devices, 2);
  auto parallel = parseOk(R"(
graph @g(%x: f32[256] @data) {
  %a = relu(%x) : f32[256] @dev(0) loc("r")
  %b = relu(%x) : f32[256] @dev(1) loc("r")
  %s0, %s1 = all_reduce(%a, %b) {devices = [0, 1]} : f32[256], f32[256] loc("sync")
  %t0, %t1 = all_reduce(%a, %b) {devices = [0, 1]} : f32[256], f32[256] loc("other")
  %c = relu(%s0) : f32[256] loc("r")
  return %s0, %t1, %c
}
)");
  ASSERT_TRUE(parallel);
  CostModel cm(spec(), *profile);
  auto it = parallel->ops().begin();
  EXPECT_DOUBLE_EQ(cm.opSeconds(**it++), 0.5); // measured on its device
  EXPECT_DOUBLE_EQ(cm.opSeconds(**it++), 0.5); // device 1's, from device 0's: no scaling
  // The mean over the participants, from commSeconds and opSeconds alike.
  EXPECT_DOUBLE_EQ(cm.commSeconds(**it), 0.5);
  EXPECT_DOUBLE_EQ(cm.opSeconds(**it++), 0.5);
  // Not measured: the ring formula, 2(p-1)/p * 1024 / 1e9 + 2(p-1) * 1e-6.
  EXPECT_DOUBLE_EQ(cm.commSeconds(**it++), 1024 / 1e9 + 2e-6);
  EXPECT_DOUBLE_EQ(cm.opSeconds(**it++), 0.5); // device 0 of a parallel graph: no @dev
  // A graph no strategy has split: its ops are whole, the profile's pieces
  // do not price them.
  auto whole = parseOk(R"(
graph @g(%x: f32[256] @data) {
  %a = relu(%x) : f32[256] loc("r")
  return %a
}
)");
  ASSERT_TRUE(whole);
  EXPECT_FALSE(cm.measuredSeconds(*whole->ops().front()));
  EXPECT_DOUBLE_EQ(cm.opSeconds(*whole->ops().front()), 2048 / 1e9 + 1e-6);
  // The same profile without "devices": its largest device counts.
  auto implied = parseOpProfile(
      R"({"ops": [{"op": "relu", "loc": "r", "device": 3, "seconds": 1}]})", "q.json");
  ASSERT_TRUE(static_cast<bool>(implied));
  EXPECT_EQ(implied->devices, 4);
  auto outside = parseOpProfile(
      R"({"devices": 2, "ops": [{"op": "relu", "loc": "r", "device": 2, "seconds": 1}]})",
      "o.json");
  ASSERT_FALSE(static_cast<bool>(outside));
  EXPECT_NE(llvm::toString(outside.takeError()).find("o.json: ops[0]: device 2 of a profile of 2"),
            std::string::npos);
}

TEST(CostModelTest, MeasuredWaitsBeforeCommunication) {
  auto profile = parseOpProfile(R"({"devices": 2, "ops": [
    {"op": "all_reduce", "loc": "sync", "device": 0, "seconds": 0.25, "waited_seconds": 0.5},
    {"op": "all_reduce", "loc": "sync", "device": 1, "seconds": 0.75},
    {"op": "relu", "loc": "r", "device": 0, "seconds": 0.5, "waited_seconds": 0.125}]})",
                                "w.json");
  ASSERT_TRUE(static_cast<bool>(profile)) << llvm::toString(profile.takeError());
  auto g = parseOk(R"(
graph @g(%x: f32[256] @data) {
  %a = relu(%x) : f32[256] @dev(0) loc("r")
  %s0, %s1 = all_reduce(%a, %x) {devices = [0, 1]} : f32[256], f32[256] loc("sync")
  return %s0
}
)");
  ASSERT_TRUE(g);
  CostModel cm(spec(), *profile);
  const Op& relu = *g->ops().front();
  const Op& sum = *std::next(g->ops().begin())->get();
  EXPECT_DOUBLE_EQ(*cm.measuredWaitOn(sum, 0), 0.5);
  EXPECT_DOUBLE_EQ(*cm.measuredWaitOn(sum, 1), 0.0); // measured, never waited
  EXPECT_FALSE(cm.measuredWaitOn(relu, 0));          // communication ops only

  // A device's forward and backward transfers of one layer share a loc: the
  // k-th of them takes the profile's k-th entry, not the mean of both.
  auto twice = parseOpProfile(R"({"devices": 2, "ops": [
    {"op": "device_copy", "loc": "fc", "device": 1, "seconds": 1e-5},
    {"op": "device_copy", "loc": "fc", "device": 1, "seconds": 9e-5, "waited_seconds": 3e-4}]})",
                              "t.json");
  ASSERT_TRUE(static_cast<bool>(twice)) << llvm::toString(twice.takeError());
  auto copies = parseOk(R"(
graph @g(%x: f32[256] @data) {
  %a = device_copy(%x) {src = 0, dst = 1} : f32[256] loc("fc")
  return %a
}
)");
  ASSERT_TRUE(copies);
  CostModel occ(spec(), *twice);
  const Op& copy = *copies->ops().front();
  EXPECT_DOUBLE_EQ(*occ.measuredSecondsOn(copy, 1, 0), 1e-5);
  EXPECT_DOUBLE_EQ(*occ.measuredWaitOn(copy, 1, 0), 0.0);
  EXPECT_DOUBLE_EQ(*occ.measuredSecondsOn(copy, 1, 1), 9e-5);
  EXPECT_DOUBLE_EQ(*occ.measuredWaitOn(copy, 1, 1), 3e-4);
  EXPECT_DOUBLE_EQ(*occ.measuredSecondsOn(copy, 1), 5e-5);   // no occurrence: the mean
  EXPECT_DOUBLE_EQ(*occ.measuredWaitOn(copy, 1, 2), 1.5e-4); // past the profile's: the mean
  auto bad = parseOpProfile(
      R"({"ops": [{"op": "relu", "loc": "a", "seconds": 1, "waited_seconds": -1}]})", "x.json");
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_NE(llvm::toString(bad.takeError())
                .find("x.json: ops[0]: field 'waited_seconds' must be a non-negative number"),
            std::string::npos);
}

TEST(CostModelTest, ProfileSyncFields) {
  // What a multi-device trainer measured outside its ops.
  auto profile = parseOpProfile(R"({"devices": 2, "step_gap_seconds": 4e-5,
    "wake_seconds": 2.5e-5, "wakes_per_step": 3,
    "stream_starts": [{"device": 0, "stream": 0, "seconds": 0},
                      {"device": 1, "stream": 1, "seconds": 1.5e-5}],
    "ops": [{"op": "relu", "loc": "r", "device": 0, "seconds": 1e-3}]})",
                                "p.json");
  ASSERT_TRUE(static_cast<bool>(profile)) << llvm::toString(profile.takeError());
  CostModel cm(spec(), *profile);
  EXPECT_DOUBLE_EQ(cm.stepGapSeconds(), 4e-5);
  EXPECT_DOUBLE_EQ(cm.wakeSeconds(), 2.5e-5);
  EXPECT_DOUBLE_EQ(cm.streamStartSeconds(1, 1), 1.5e-5);
  EXPECT_DOUBLE_EQ(cm.streamStartSeconds(1, 0), 0); // not listed: with the step
  // Without a profile, or a profile that does not say: nothing outside ops.
  CostModel plain(spec());
  EXPECT_DOUBLE_EQ(plain.stepGapSeconds(), 0);
  EXPECT_DOUBLE_EQ(plain.wakeSeconds(), 0);
  EXPECT_DOUBLE_EQ(plain.streamStartSeconds(1, 1), 0);

  auto gap = parseOpProfile(R"({"step_gap_seconds": -1, "ops": []})", "g.json");
  ASSERT_FALSE(static_cast<bool>(gap));
  EXPECT_NE(llvm::toString(gap.takeError())
                .find("g.json: field 'step_gap_seconds' must be a non-negative number"),
            std::string::npos);
  auto wake = parseOpProfile(R"({"wake_seconds": "fast", "ops": []})", "w.json");
  ASSERT_FALSE(static_cast<bool>(wake));
  EXPECT_NE(llvm::toString(wake.takeError())
                .find("w.json: field 'wake_seconds' must be a non-negative number"),
            std::string::npos);
  auto starts = parseOpProfile(
      R"({"stream_starts": [{"device": 0, "stream": 0, "seconds": 0}, {"device": 1}], "ops": []})",
      "s.json");
  ASSERT_FALSE(static_cast<bool>(starts));
  EXPECT_NE(llvm::toString(starts.takeError()).find("s.json: stream_starts[1]: an entry must be"),
            std::string::npos);
  auto notList = parseOpProfile(R"({"stream_starts": 3, "ops": []})", "l.json");
  ASSERT_FALSE(static_cast<bool>(notList));
  EXPECT_NE(
      llvm::toString(notList.takeError()).find("l.json: field 'stream_starts' must be an array"),
      std::string::npos);
}

} // namespace
} // namespace lwcc
