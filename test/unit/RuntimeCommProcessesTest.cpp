// A multi-device CPU step split over processes (cpu/CommOps.h): every
// communication op, performed by each half of four devices over its own
// views and the other half's inputs carried in packInputs' messages, writes
// the bits that one process holding all four writes; a message of another
// op is refused. Also the rows of a batch a process prepares
// (common/MultiDevice.h, DataSource::batch).
#include "common/MultiDevice.h"
#include "cpu/CommOps.h"
#include "lwrt/data.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <gtest/gtest.h>
#include <random>

namespace {

using namespace lwrt;
using namespace lwrt::cpu;

constexpr int kDevices = 4;

/// One op over four devices: each device's input and output shapes (empty:
/// it has none).
struct OpCase {
  const char* name;
  Signature sig;
  std::function<std::vector<int64_t>(int64_t)> in, out;
};

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s)
    n *= d;
  return n;
}

bool has(const std::vector<int64_t>& v, int64_t d) {
  return std::find(v.begin(), v.end(), d) != v.end();
}

/// Every device's buffers of a case: inputs drawn over several orders of
/// magnitude (so that adding in another order gives other bits), outputs
/// zeroed.
struct Buffers {
  std::vector<std::vector<float>> in, out;
  std::vector<Part> parts;

  Buffers(const OpCase& c, uint32_t seed) : in(kDevices), out(kDevices), parts(kDevices) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    std::uniform_int_distribution<int> scale(-6, 6);
    for (int d = 0; d < kDevices; ++d) {
      if (has(c.sig.senders(), d)) {
        in[d].resize(static_cast<size_t>(numel(c.in(d))));
        for (float& x : in[d])
          x = normal(rng) * std::pow(10.0f, static_cast<float>(scale(rng)));
        parts[d].in = {TensorView{in[d].data(), DType::F32, c.in(d)}};
        parts[d].hasIn = true;
      }
      if (has(c.sig.receivers(), d)) {
        out[d].assign(static_cast<size_t>(numel(c.out(d))), 0.0f);
        parts[d].out = {TensorView{out[d].data(), DType::F32, c.out(d)}};
        parts[d].hasOut = true;
      }
    }
  }
};

std::vector<OpCase> cases() {
  // Pieces along dim 1 of [2, 6, 3]: strided, uneven.
  const std::vector<int64_t> sizes{1, 2, 1, 2};
  auto piece = [sizes](int64_t d) { return std::vector<int64_t>{2, sizes[d], 3}; };
  auto whole = [](int64_t) { return std::vector<int64_t>{2, 6, 3}; };
  auto flat = [](int64_t) { return std::vector<int64_t>{5}; };
  return {
      {"all_reduce", {Kind::AllReduce, {0, 1, 2, 3}, -1, -1, 0, {}}, flat, flat},
      {"all_gather", {Kind::AllGather, {0, 1, 2, 3}, -1, -1, 1, sizes}, piece, whole},
      {"reduce_scatter", {Kind::ReduceScatter, {0, 1, 2, 3}, -1, -1, 1, sizes}, whole, piece},
      {"broadcast", {Kind::Broadcast, {0, 2, 3}, 1, -1, 0, {}}, flat, flat},
      {"reduce_to", {Kind::ReduceTo, {0, 1, 3}, -1, 2, 0, {}}, flat, flat},
      {"device_copy", {Kind::DeviceCopy, {3}, 0, -1, 0, {}}, flat, flat},
      {"shard", {Kind::Shard, {0, 1, 2, 3}, 2, -1, 1, sizes}, whole, piece},
      {"unshard", {Kind::Unshard, {0, 1, 2, 3}, -1, 1, 1, sizes}, piece, whole},
  };
}

TEST(RuntimeCommProcesses, EachHalfWritesTheBitsOfOneProcess) {
  for (const OpCase& c : cases()) {
    SCOPED_TRACE(c.name);
    Buffers one(c, 7);
    Parts all(kDevices, nullptr);
    for (int64_t d : c.sig.participants())
      all[static_cast<size_t>(d)] = &one.parts[static_cast<size_t>(d)];
    ASSERT_TRUE(perform(c.sig, all));
    for (int first : {0, 2}) { // the process holding devices first, first + 1
      Buffers mine(c, 7);
      auto local = [&](int64_t d) { return d >= first && d < first + 2; };
      // The other process's message: its senders' inputs.
      std::vector<std::pair<int64_t, const Part*>> theirs;
      for (int64_t d : c.sig.senders())
        if (!local(d))
          theirs.emplace_back(d, &mine.parts[static_cast<size_t>(d)]);
      std::vector<unsigned char> message = packInputs(c.sig, theirs);
      std::vector<std::pair<int64_t, Part>> remote;
      std::string error;
      ASSERT_TRUE(unpackInputs(c.sig, message, remote, &error)) << error;
      ASSERT_EQ(remote.size(), theirs.size());
      Parts parts(kDevices, nullptr);
      for (int64_t d : c.sig.participants())
        if (local(d))
          parts[static_cast<size_t>(d)] = &mine.parts[static_cast<size_t>(d)];
      for (auto& [d, p] : remote) {
        EXPECT_FALSE(p.local);
        parts[static_cast<size_t>(d)] = &p;
      }
      // The other process's outputs stay as they were: it writes its own.
      // (A process holding no receiver only sends: cpu/Comm.cpp performs
      // nothing there.)
      std::vector<std::vector<float>> before = mine.out;
      const auto receivers = c.sig.receivers();
      if (std::any_of(receivers.begin(), receivers.end(), local)) {
        ASSERT_TRUE(perform(c.sig, parts));
      }
      for (int d = 0; d < kDevices; ++d) {
        const auto& want =
            local(d) ? one.out[static_cast<size_t>(d)] : before[static_cast<size_t>(d)];
        const auto& got = mine.out[static_cast<size_t>(d)];
        ASSERT_EQ(got.size(), want.size());
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << "device " << d << " of the process holding " << first << "," << first + 1;
      }
    }
  }
}

TEST(RuntimeCommProcesses, SumsAddInDeviceOrder) {
  // In float, (1e8 + 1) - 1e8 + 1 is 1; any other order of these four gives
  // 0 or 2: the sum of an all_reduce split over processes is the first.
  OpCase c{"all_reduce",
           {Kind::AllReduce, {0, 1, 2, 3}, -1, -1, 0, {}},
           [](int64_t) { return std::vector<int64_t>{1}; },
           [](int64_t) { return std::vector<int64_t>{1}; }};
  Buffers b(c, 1);
  const float values[] = {1e8f, 1.0f, -1e8f, 1.0f};
  for (int d = 0; d < kDevices; ++d)
    b.in[static_cast<size_t>(d)][0] = values[d];
  std::vector<std::pair<int64_t, const Part*>> theirs{{0, &b.parts[0]}, {1, &b.parts[1]}};
  std::vector<std::pair<int64_t, Part>> remote;
  ASSERT_TRUE(unpackInputs(c.sig, packInputs(c.sig, theirs), remote, nullptr));
  Parts parts{&remote[0].second, &remote[1].second, &b.parts[2], &b.parts[3]};
  ASSERT_TRUE(perform(c.sig, parts));
  EXPECT_EQ(b.out[2][0], 1.0f);
  EXPECT_EQ(b.out[3][0], 1.0f);
}

TEST(RuntimeCommProcesses, AnotherOpsMessageIsRefused) {
  OpCase c = cases()[0];
  Buffers b(c, 3);
  std::vector<unsigned char> message = packInputs(c.sig, {{2, &b.parts[2]}});
  Signature other = c.sig;
  other.devices = {0, 1, 2};
  std::vector<std::pair<int64_t, Part>> remote;
  std::string error;
  EXPECT_FALSE(unpackInputs(other, message, remote, &error));
  EXPECT_NE(error.find("different trainers"), std::string::npos) << error;
  message.resize(message.size() / 2); // cut short
  EXPECT_FALSE(unpackInputs(c.sig, message, remote, &error));
  EXPECT_NE(error.find("malformed"), std::string::npos) << error;
}

TEST(RuntimeCommProcesses, ARankPreparesItsDevicesRows) {
  ModelInfo m;
  m.numDevices = 4;
  // Devices 0-1 read rows 0-3 and 2-5 (halos overlap), 2 none, 3 rows 6-8.
  m.inputRows = {{0, 3}, {2, 5}, {0, 0}, {6, 8}};
  EXPECT_EQ(inputRowsOf(m, {0, 2}, 8), std::make_pair(int64_t(0), int64_t(5)));
  EXPECT_EQ(inputRowsOf(m, {2, 2}, 8), std::make_pair(int64_t(6), int64_t(8)));
  EXPECT_EQ(inputRowsOf(m, {2, 1}, 8), std::make_pair(int64_t(0), int64_t(0)));
  m.inputRows.clear(); // not said: the whole batch
  EXPECT_EQ(inputRowsOf(m, {2, 2}, 8), std::make_pair(int64_t(0), int64_t(8)));
  EXPECT_EQ(localInputRows(m, nullptr, 8), std::make_pair(int64_t(0), int64_t(8)));

  // DataSource::batch writes those rows alone, as the whole batch has them.
  auto data = SyntheticData::create({4, 1, 2, 2}, 10, 3, 16);
  ASSERT_TRUE(data);
  std::vector<float> whole(16), part(16, NAN);
  std::vector<int64_t> labels(4), partLabels(4, -1);
  ASSERT_TRUE(data->batch({1, 2}, whole.data(), labels.data()));
  ASSERT_TRUE(data->batch({1, 2}, part.data(), partLabels.data(), nullptr, {1, 3}));
  for (int k = 0; k < 4; ++k) {
    const bool in = k >= 1 && k < 3;
    EXPECT_EQ(partLabels[static_cast<size_t>(k)], in ? labels[static_cast<size_t>(k)] : -1);
    for (int j = 0; j < 4; ++j) {
      float v = part[static_cast<size_t>(4 * k + j)];
      if (in)
        EXPECT_EQ(v, whole[static_cast<size_t>(4 * k + j)]);
      else
        EXPECT_TRUE(std::isnan(v));
    }
  }
}

} // namespace
