// The trainer's main loop around a generated training step: buffers,
// initial weights, input batches, and the loss of each step.
#include "lwrt/trainer.h"

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>

namespace lwrt {

namespace {

struct Options {
  int64_t steps = 10;
  uint64_t seed = 0;
  std::string weights; // default: <program>.weights
  std::string data = "synthetic";
  std::string dump;
};

int usage(const char* program, const std::string& problem) {
  std::fprintf(stderr,
               "%s: %s\nusage: %s [--steps=N] [--seed=S] [--weights=FILE] "
               "[--data=synthetic|raw:DIR] [--dump=DIR]\n",
               program, problem.c_str(), program);
  return 2;
}

bool parseInt(const std::string& text, int64_t& out) {
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0')
    return false;
  out = v;
  return true;
}

int64_t bytesOf(DType t, const std::vector<int64_t>& shape) {
  int64_t n = dtypeSize(t);
  for (int64_t d : shape)
    n *= d;
  return n;
}

bool readFile(const std::string& path, unsigned char* dst, int64_t bytes, std::string& error) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    error = path + ": cannot open";
    return false;
  }
  int64_t size = static_cast<int64_t>(in.tellg());
  if (size != bytes) {
    error = path + ": holds " + std::to_string(size) + " bytes, expected " + std::to_string(bytes);
    return false;
  }
  in.seekg(0);
  in.read(reinterpret_cast<char*>(dst), bytes);
  if (!in) {
    error = path + ": cannot read";
    return false;
  }
  return true;
}

bool writeFile(const std::string& path, const unsigned char* src, int64_t bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(src), bytes);
  return static_cast<bool>(out);
}

/// Seeded synthetic batches: normal data, uniform labels in [0, classes).
void fillSynthetic(const ModelInfo& m, unsigned char* inputs, uint64_t seed, int64_t step) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(step));
  std::normal_distribution<double> normal(0.0, 1.0);
  for (const InputInfo& in : m.inputs) {
    int64_t n = bytesOf(in.dtype, in.shape) / dtypeSize(in.dtype);
    unsigned char* p = inputs + in.offset;
    for (int64_t k = 0; k < n; ++k) {
      if (in.dtype == DType::I64 || in.dtype == DType::I32) {
        int64_t classes = m.classes > 0 ? m.classes : 2;
        int64_t v = static_cast<int64_t>(rng() % static_cast<uint64_t>(classes));
        if (in.dtype == DType::I64) {
          std::memcpy(p + 8 * k, &v, 8);
        } else {
          int32_t w = static_cast<int32_t>(v);
          std::memcpy(p + 4 * k, &w, 4);
        }
      } else if (in.dtype == DType::F64) {
        double v = normal(rng);
        std::memcpy(p + 8 * k, &v, 8);
      } else {
        float v = static_cast<float>(normal(rng));
        std::memcpy(p + 4 * k, &v, 4);
      }
    }
  }
}

using Buffer = std::unique_ptr<unsigned char, void (*)(void*)>;

/// A zeroed buffer aligned to 256 bytes.
Buffer buffer(int64_t bytes) {
  size_t rounded = static_cast<size_t>((std::max<int64_t>(bytes, 1) + 255) / 256 * 256);
  void* p = std::aligned_alloc(256, rounded);
  if (p)
    std::memset(p, 0, rounded);
  return {static_cast<unsigned char*>(p), std::free};
}

std::string fileSafe(std::string name) {
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
      c = '_';
  return name;
}

} // namespace

int trainerMain(int argc, char** argv, const ModelInfo& m) {
  const char* program = argc > 0 ? argv[0] : "trainer";
  Options o;
  o.weights = std::string(program) + ".weights";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* key) -> const char* {
      size_t n = std::strlen(key);
      return a.compare(0, n, key) == 0 ? a.c_str() + n : nullptr;
    };
    if (const char* v = value("--steps=")) {
      if (!parseInt(v, o.steps) || o.steps < 0)
        return usage(program, "--steps takes a count");
    } else if (const char* v = value("--seed=")) {
      int64_t s;
      if (!parseInt(v, s))
        return usage(program, "--seed takes an integer");
      o.seed = static_cast<uint64_t>(s);
    } else if (const char* v = value("--weights=")) {
      o.weights = v;
    } else if (const char* v = value("--data=")) {
      o.data = v;
      if (o.data != "synthetic" && o.data.rfind("raw:", 0) != 0)
        return usage(program, "--data is synthetic or raw:DIR");
    } else if (const char* v = value("--dump=")) {
      o.dump = v;
    } else {
      return usage(program, "unknown argument '" + a + "'");
    }
  }

  Buffer arena = buffer(m.arenaBytes), state = buffer(m.stateBytes), inputs = buffer(m.inputBytes);
  if (!arena || !state || !inputs) {
    std::fprintf(stderr, "%s: cannot allocate %lld bytes of buffers\n", program,
                 static_cast<long long>(m.arenaBytes + m.stateBytes + m.inputBytes));
    return 1;
  }
  std::string error;
  if (!readFile(o.weights, state.get(), m.stateBytes, error)) {
    std::fprintf(stderr, "%s: weights: %s\n", program, error.c_str());
    return 1;
  }
  StepBuffers b{arena.get(), state.get(), inputs.get()};
  std::string failed;
  if (!m.init(b, &failed)) {
    std::fprintf(stderr, "%s: initializing '%s' failed\n", program, failed.c_str());
    return 1;
  }
  if (o.data.rfind("raw:", 0) == 0) {
    std::string dir = o.data.substr(4);
    for (size_t k = 0; k < m.inputs.size(); ++k)
      if (!readFile(dir + "/input_" + std::to_string(k) + ".bin", inputs.get() + m.inputs[k].offset,
                    bytesOf(m.inputs[k].dtype, m.inputs[k].shape), error)) {
        std::fprintf(stderr, "%s: data: %s\n", program, error.c_str());
        return 1;
      }
  }
  for (int64_t s = 0; s < o.steps; ++s) {
    if (o.data == "synthetic")
      fillSynthetic(m, inputs.get(), o.seed, s);
    auto start = std::chrono::steady_clock::now();
    if (!m.step(b, &failed)) {
      std::fprintf(stderr, "%s: step %lld: op '%s' failed\n", program,
                   static_cast<long long>(s + 1), failed.c_str());
      return 1;
    }
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    double loss = 0;
    if (m.lossType == DType::F64) {
      std::memcpy(&loss, arena.get() + m.lossOffset, 8);
    } else {
      float f;
      std::memcpy(&f, arena.get() + m.lossOffset, 4);
      loss = f;
    }
    std::printf("step %lld/%lld  loss %.9g  %.1f ms\n", static_cast<long long>(s + 1),
                static_cast<long long>(o.steps), loss, ms);
    std::fflush(stdout);
    if (!std::isfinite(loss)) {
      std::fprintf(stderr, "%s: the loss is %g at step %lld\n", program, loss,
                   static_cast<long long>(s + 1));
      return 1;
    }
  }
  if (!o.dump.empty()) {
    for (const ParamInfo& p : m.params) {
      std::string path = o.dump + "/param_" + fileSafe(p.name) + ".bin";
      if (!writeFile(path, state.get() + p.offset, bytesOf(p.dtype, p.shape))) {
        std::fprintf(stderr, "%s: cannot write %s\n", program, path.c_str());
        return 1;
      }
    }
    for (size_t k = 0; k < m.outputs.size(); ++k) {
      const OutputInfo& out = m.outputs[k];
      std::string path = o.dump + "/output_" + std::to_string(k) + ".bin";
      if (!writeFile(path, arena.get() + out.offset, bytesOf(out.dtype, out.shape))) {
        std::fprintf(stderr, "%s: cannot write %s\n", program, path.c_str());
        return 1;
      }
    }
  }
  return 0;
}

} // namespace lwrt
