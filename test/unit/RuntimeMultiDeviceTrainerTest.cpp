// The main loop of a multi-device trainer (common/Trainer.cpp and
// common/MultiDevice.cpp) on a hand-written two-device step: linear
// regression with a replicated weight (each device takes half the batch,
// the gradient and loss all-reduced) and a sharded optimizer-like state.
// Checks the trained params against a plain computation, and that
// checkpoints, resume, --dump and --export go through the logical image,
// and that a profiled step times each device's ops without their waits.
#include "lwrt/checkpoint.h"
#include "lwrt/comm.h"
#include "lwrt/feed.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <thread>

using namespace lwrt;
namespace fs = std::filesystem;

namespace {

constexpr int kN = 8, kF = 4;
bool perturbReplica = false; ///< device 1 nudges its replica of w
bool failOnDevice1 = false;
int slowDevice1Ms = 0; ///< device 1's compute takes this long (profiling)

// Each device's arena: 0 local loss, 16 local gradient [4], 32 loss, 48
// gradient [4] (both summed over devices), 64 a constant from deviceInit.
bool initDevice(const StepBuffers& b, std::string*) {
  reinterpret_cast<float*>(b.arena)[16] = static_cast<float>(b.device + 1);
  return true;
}

bool stepDevice(const StepBuffers& b, std::string* failed) {
  float* a = reinterpret_cast<float*>(b.arena);
  if (a[16] != static_cast<float>(b.device + 1)) {
    *failed = "deviceInit did not run";
    return false;
  }
  if (failOnDevice1 && b.device == 1) {
    *failed = "gemm fc: bad shapes";
    return false;
  }
  const float* x = reinterpret_cast<const float*>(b.inputs);
  const float* t = x + kN * kF;
  float* w = reinterpret_cast<float*>(b.state);
  float loss = 0, g[kF] = {0, 0, 0, 0};
  for (int n = 4 * b.device; n < 4 * b.device + 4; ++n) {
    float pred = 0;
    for (int f = 0; f < kF; ++f)
      pred += x[n * kF + f] * w[f];
    float r = pred - t[n];
    loss += 0.5f * r * r / kN;
    for (int f = 0; f < kF; ++f)
      g[f] += r * x[n * kF + f] / kN;
  }
  a[0] = loss;
  std::memcpy(a + 4, g, sizeof g);
  if (b.device == 1 && slowDevice1Ms > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(slowDevice1Ms));
  if (b.mark)
    b.mark(b.markContext, "gemm fc");
  if (!cpu::allReduce(b, 0, {0, 1},
                      {TensorView{a, DType::F32, {1}}, TensorView{a + 4, DType::F32, {kF}}},
                      {TensorView{a + 8, DType::F32, {1}}, TensorView{a + 12, DType::F32, {kF}}})) {
    *failed = "all_reduce 0";
    return false;
  }
  if (b.mark)
    b.mark(b.markContext, "all_reduce grad-sync");
  const float lr = static_cast<float>(b.hyper->lr);
  for (int f = 0; f < kF; ++f)
    w[f] -= lr * a[12 + f];
  if (perturbReplica && b.device == 1)
    w[0] += 1e-3f;
  // s: features 0..2 on device 0, feature 3 on device 1, at state offset 16.
  float* s = w + 4;
  for (int f = b.device == 0 ? 0 : 3; f < (b.device == 0 ? 3 : 4); ++f)
    s[f - (b.device == 0 ? 0 : 3)] += a[12 + f] * a[12 + f];
  return true;
}

const float kInitialW[kF] = {0.1f, -0.2f, 0.3f, 0.05f};
// An "export template": the bytes around the params' payloads.
const unsigned char kTemplate[] = "HEADER|MIDDLE|TAIL";

ModelInfo fixture() {
  ModelInfo m;
  m.name = "fixture";
  m.target = "cpu";
  m.fingerprint = 0x5eed;
  m.inputs = {{"x", DType::F32, {kN, kF}, false, 0}, {"t", DType::F32, {kN}, false, 128}};
  m.inputBytes = 160;
  m.params = {{"w", DType::F32, {kF}, 0, false}, {"s", DType::F32, {kF}, 16, true}};
  m.stateBytes = 32;
  m.outputs = {{"loss", DType::F32, {}, 32, 1}, {"w_grad", DType::F32, {kF}, 48, 0}};
  m.lossOffset = 32;
  m.defaults.family = Hyper::Sgd;
  m.defaults.lr = 0.1;
  m.weights = reinterpret_cast<const unsigned char*>(kInitialW);
  m.weightsBytes = sizeof kInitialW;
  m.exportTemplate = kTemplate;
  m.exportTemplateBytes = 18;
  m.exportCuts = {{6, 0, 16}, {13, 1, 16}};
  m.numDevices = 2;
  m.deviceArenaBytes = {80, 80};
  m.deviceStateBytes = {32, 32};
  m.placements = {{0, 0, 0}, {0, 1, 0}, {1, 0, 16, 0, 0, 3}, {1, 1, 16, 0, 3, 1}};
  m.deviceInit = {initDevice, initDevice};
  m.deviceSteps = {{0, 0, stepDevice, "step_d0_s0"}, {1, 0, stepDevice, "step_d1_s0"}};
  m.numCommOps = 1;
  m.lossDevice = 1;
  m.samplesPerDevice = {4, 4};
  return m;
}

/// The same training on one thread: w and s after `steps` steps, the last loss.
void reference(const ModelInfo& m, uint64_t seed, int steps, float w[kF], float s[kF],
               float& loss) {
  std::memcpy(w, kInitialW, sizeof kInitialW);
  std::fill(s, s + kF, 0.0f);
  std::vector<unsigned char> in(static_cast<size_t>(m.inputBytes));
  for (int step = 0; step < steps; ++step) {
    fillSyntheticInputs(m, in.data(), seed, static_cast<uint64_t>(step));
    const float* x = reinterpret_cast<const float*>(in.data());
    const float* t = x + kN * kF;
    float part[2] = {0, 0}, g[2][kF] = {};
    for (int d = 0; d < 2; ++d)
      for (int n = 4 * d; n < 4 * d + 4; ++n) {
        float pred = 0;
        for (int f = 0; f < kF; ++f)
          pred += x[n * kF + f] * w[f];
        float r = pred - t[n];
        part[d] += 0.5f * r * r / kN;
        for (int f = 0; f < kF; ++f)
          g[d][f] += r * x[n * kF + f] / kN;
      }
    loss = part[0] + part[1];
    for (int f = 0; f < kF; ++f) {
      float gf = g[0][f] + g[1][f];
      w[f] -= 0.1f * gf;
      s[f] += gf * gf;
    }
  }
}

std::vector<unsigned char> slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), {});
}

class MultiDeviceTrainer : public ::testing::Test {
protected:
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("lwcc_md_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    perturbReplica = failOnDevice1 = false;
    slowDevice1Ms = 0;
  }
  void TearDown() override { fs::remove_all(dir); }

  int train(std::vector<std::string> args, std::string* out = nullptr) {
    args.insert(args.begin(), (dir / "trainer").string());
    std::vector<char*> argv;
    for (std::string& a : args)
      argv.push_back(a.data());
    ::testing::internal::CaptureStdout();
    ::testing::internal::CaptureStderr();
    int rc = trainerMain(static_cast<int>(argv.size()), argv.data(), model, cpu::createRunner,
                         cpu::createGroup);
    std::string o = ::testing::internal::GetCapturedStdout();
    std::string e = ::testing::internal::GetCapturedStderr();
    if (out)
      *out = o + e;
    return rc;
  }
  std::vector<float> floats(const fs::path& p) {
    std::vector<unsigned char> bytes = slurp(p);
    std::vector<float> v(bytes.size() / 4);
    std::memcpy(v.data(), bytes.data(), v.size() * 4);
    return v;
  }

  ModelInfo model = fixture();
  fs::path dir;
};

TEST_F(MultiDeviceTrainer, TrainsLikeOneDeviceAndDumpsTheLogicalParams) {
  std::string out;
  ASSERT_EQ(train({"--steps=5", "--seed=3", "--progress=off", "--dump=" + (dir / "d").string(),
                   "--log=" + (dir / "log.jsonl").string()},
                  &out),
            0)
      << out;
  EXPECT_NE(out.find("fixture on 2 devices (CPU"), std::string::npos) << out;
  // The emulated devices share the cores (--threads' default).
  const unsigned share = std::max(1u, std::thread::hardware_concurrency() / 2);
  EXPECT_NE(out.find(std::to_string(share) + " kernel threads per device"), std::string::npos)
      << out;
  EXPECT_NE(out.find("batches of 8 (4+4 per device) per epoch"), std::string::npos) << out;
  float w[kF], s[kF], loss;
  reference(model, 3, 5, w, s, loss);
  std::vector<float> gotW = floats(dir / "d" / "param_w.bin"),
                     gotS = floats(dir / "d" / "param_s.bin");
  ASSERT_EQ(gotW.size(), 4u);
  ASSERT_EQ(gotS.size(), 4u);
  for (int f = 0; f < kF; ++f) {
    EXPECT_NEAR(gotW[f], w[f], 1e-6 * (1 + std::fabs(w[f]))) << f;
    EXPECT_NEAR(gotS[f], s[f], 1e-6 * (1 + std::fabs(s[f]))) << f;
  }
  // Outputs from their devices: the loss on device 1, the gradient on 0.
  std::vector<float> gotLoss = floats(dir / "d" / "output_0.bin");
  ASSERT_EQ(gotLoss.size(), 1u);
  EXPECT_NEAR(gotLoss[0], loss, 1e-6 * (1 + loss));
  EXPECT_EQ(floats(dir / "d" / "output_1.bin").size(), 4u);
  std::ifstream log(dir / "log.jsonl");
  std::string line;
  int lines = 0;
  std::vector<std::string> memory;
  while (std::getline(log, line)) {
    if (line.find("\"type\":\"memory\"") != std::string::npos) {
      memory.push_back(line);
      continue;
    }
    ++lines;
    EXPECT_NE(line.find("\"batch\":8,\"devices\":2"), std::string::npos) << line;
  }
  EXPECT_EQ(lines, 5);
  // After the last step, each device's memory: its planned arena and state,
  // the trainer's other buffers (none: the CPU's devices read the host's
  // batch) and what the CPU runner measured it gave out (each allocation
  // rounded up to 256 bytes: device 0 its arena, its state and the
  // trainer's own empty arena; device 1 its arena and state). No device
  // holds the whole state, nor the batch, besides its own: those are
  // device 0's only while it evaluates.
  ASSERT_EQ(memory.size(), 2u);
  EXPECT_NE(memory[0].find("\"devices\":[0],\"physical\":0,\"arena_bytes\":80,\"state_bytes\":32,"
                           "\"other_bytes\":0,\"measured_bytes\":768}"),
            std::string::npos)
      << memory[0];
  EXPECT_NE(memory[1].find("\"devices\":[1],\"physical\":1,\"arena_bytes\":80,\"state_bytes\":32,"
                           "\"other_bytes\":0,\"measured_bytes\":512}"),
            std::string::npos)
      << memory[1];
}

TEST_F(MultiDeviceTrainer, ResumesBitIdenticallyFromALogicalCheckpoint) {
  const std::string ck = "--checkpoint-dir=" + (dir / "ck").string();
  ASSERT_EQ(train({"--steps=6", "--seed=7", "--progress=off", "--dump=" + (dir / "a").string(),
                   "--export=" + (dir / "a.onnx").string()}),
            0);
  ASSERT_EQ(train({"--steps=3", "--seed=7", "--progress=off", ck, "--checkpoint-every=3"}), 0);
  // The checkpoint holds the whole params, shards gathered.
  Checkpoint c;
  ASSERT_EQ(readCheckpoint((dir / "ck" / checkpointFileName(3)).string(), model.fingerprint, c),
            "");
  const CheckpointTensor* s = c.find("s");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->shape, (std::vector<int64_t>{kF}));
  float w3[kF], s3[kF], loss;
  reference(model, 7, 3, w3, s3, loss);
  std::vector<float> s3got(kF);
  std::memcpy(s3got.data(), s->data.data(), 16);
  for (int f = 0; f < kF; ++f)
    EXPECT_NEAR(s3got[f], s3[f], 1e-6 * (1 + s3[f])) << f;
  std::string out;
  ASSERT_EQ(train({"--steps=6", "--progress=off", ck, "--resume", "--dump=" + (dir / "b").string(),
                   "--export=" + (dir / "b.onnx").string()},
                  &out),
            0)
      << out;
  for (const char* f : {"param_w.bin", "param_s.bin", "output_0.bin", "output_1.bin"})
    EXPECT_EQ(slurp(dir / "a" / f), slurp(dir / "b" / f)) << f;
  // The export splices the whole tensors into the template.
  std::vector<unsigned char> exported = slurp(dir / "b.onnx"), want;
  want.insert(want.end(), kTemplate, kTemplate + 6);
  for (const char* f : {"param_w.bin"}) {
    std::vector<unsigned char> p = slurp(dir / "b" / f);
    want.insert(want.end(), p.begin(), p.end());
  }
  want.insert(want.end(), kTemplate + 6, kTemplate + 13);
  std::vector<unsigned char> sBytes = slurp(dir / "b" / "param_s.bin");
  want.insert(want.end(), sBytes.begin(), sBytes.end());
  want.insert(want.end(), kTemplate + 13, kTemplate + 18);
  EXPECT_EQ(exported, want);
  EXPECT_EQ(slurp(dir / "a.onnx"), exported);
}

TEST_F(MultiDeviceTrainer, CheckReplicasFindsReplicasThatDiffer) {
  perturbReplica = true;
  std::string out;
  EXPECT_EQ(train({"--steps=2", "--progress=off", "--dump=" + (dir / "d").string()}, &out), 0)
      << out;
  EXPECT_EQ(
      train({"--steps=2", "--progress=off", "--check-replicas", "--dump=" + (dir / "d").string()},
            &out),
      1);
  EXPECT_NE(out.find("param 'w': the replica on device 1 differs from the one on device 0"),
            std::string::npos)
      << out;
}

TEST_F(MultiDeviceTrainer, AFailingStepFunctionStopsTheRunByName) {
  failOnDevice1 = true;
  std::string out;
  EXPECT_EQ(train({"--steps=2", "--progress=off"}, &out), 1);
  EXPECT_NE(out.find("step 1: step_d1_s0: gemm fc: bad shapes"), std::string::npos) << out;
}

TEST_F(MultiDeviceTrainer, DeviceFlags) {
  std::string out;
  EXPECT_EQ(train({"--help"}, &out), 0);
  EXPECT_NE(out.find("this trainer: fixture, target cpu, 2 logical devices,"), std::string::npos)
      << out;
  EXPECT_NE(out.find("--devices=A,B,..."), std::string::npos) << out;
  EXPECT_EQ(train({"--steps=1", "--progress=off", "--devices=0,0"}, &out), 0) << out;
  EXPECT_EQ(train({"--steps=1", "--devices=0,1,2"}, &out), 2);
  EXPECT_NE(out.find("--devices lists 3 devices; this trainer has 2 logical devices"),
            std::string::npos)
      << out;
  EXPECT_EQ(train({"--steps=1", "--devices=0,x"}, &out), 2);
  EXPECT_EQ(train({"--steps=1", "--devices="}, &out), 2);
  EXPECT_EQ(train({"--steps=1", "--device=1"}, &out), 2);
  model.target = "cuda"; // refused while parsing, before any runner exists
  for (const char* flag : {"--profile=1", "--profile-ops=p.json", "--trace=t.json"}) {
    EXPECT_EQ(train({"--steps=1", flag}, &out), 2) << flag;
    EXPECT_NE(out.find("not yet for multi-device CUDA trainers"), std::string::npos) << out;
  }
}

TEST_F(MultiDeviceTrainer, ProfilesEachDeviceWithoutItsWaits) {
  // Device 1 computes for 40 ms before the all-reduce; device 0 waits there
  // for it, which is no op's time.
  slowDevice1Ms = 40;
  const std::string profile = (dir / "p.json").string(), trace = (dir / "t.json").string();
  std::string out;
  ASSERT_EQ(train({"--steps=3", "--progress=off", "--profile-ops=" + profile, "--trace=" + trace,
                   "--profile=2"},
                  &out),
            0)
      << out;
  EXPECT_NE(out.find("profile: 2 steps on 2 devices"), std::string::npos) << out;
  EXPECT_NE(out.find("gemm fc @1"), std::string::npos) << out;
  std::vector<unsigned char> bytes = slurp(profile);
  std::string p(bytes.begin(), bytes.end());
  EXPECT_NE(p.find("\"devices\": 2, \"steps\": 2"), std::string::npos) << p;
  // Per device, in (device, launch) order: the op's mean seconds.
  std::vector<std::pair<std::string, double>> entries;
  for (size_t at = p.find("{\"op\""); at != std::string::npos; at = p.find("{\"op\"", at + 1)) {
    size_t sec = p.find("\"seconds\": ", at);
    entries.push_back(
        {p.substr(at, p.find(", \"seconds", at) - at), std::strtod(p.c_str() + sec + 11, nullptr)});
  }
  ASSERT_EQ(entries.size(), 4u) << p;
  EXPECT_EQ(entries[0].first, R"({"op": "gemm", "loc": "fc", "device": 0)");
  EXPECT_EQ(entries[1].first, R"({"op": "all_reduce", "loc": "grad-sync", "device": 0)");
  EXPECT_EQ(entries[2].first, R"({"op": "gemm", "loc": "fc", "device": 1)");
  EXPECT_EQ(entries[3].first, R"({"op": "all_reduce", "loc": "grad-sync", "device": 1)");
  EXPECT_GE(entries[2].second, 0.039); // device 1's compute
  // Device 0's all-reduce starts when device 1 arrives, 40 ms after device 0.
  EXPECT_LT(entries[1].second, 0.02) << p;
  EXPECT_LT(entries[3].second, 0.02) << p;
  bytes = slurp(trace);
  std::string t(bytes.begin(), bytes.end());
  EXPECT_NE(t.find(R"("name":"process_name","ph":"M","pid":1,"tid":0)"), std::string::npos) << t;
  EXPECT_NE(t.find(R"("cat":"comm")"), std::string::npos) << t;
  EXPECT_NE(t.find(R"("ph":"X","pid":1,"tid":0,"ts":)"), std::string::npos) << t;
}

TEST_F(MultiDeviceTrainer, InconsistentDeviceTablesAreErrors) {
  model.placements.pop_back(); // s's shard on device 1 is gone
  std::string out;
  EXPECT_EQ(train({"--steps=1", "--progress=off"}, &out), 1);
  EXPECT_NE(out.find("param 's': its shards do not cover dim 0"), std::string::npos) << out;
  model = fixture();
  model.outputs[0].device = 2;
  EXPECT_EQ(train({"--steps=1", "--progress=off"}, &out), 1);
  EXPECT_NE(out.find("output 'loss' is outside device 2's arena"), std::string::npos) << out;
}

} // namespace
