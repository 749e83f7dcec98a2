// The trainer's state on disk: the initial weights (embedded or
// --weights), resume from a checkpoint, checkpoints, --export and --dump.
#include "Trainer.h"
#include "lwrt/autotune.h"
#include "lwrt/bf16.h"
#include "lwrt/checkpoint.h"
#include "lwrt/export.h"
#include "lwrt/f16.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace lwrt::trainer {

namespace {

bool writeFile(const std::string& path, const void* src, int64_t bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(src), bytes);
  return static_cast<bool>(out);
}

std::string fileSafe(std::string name) {
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
      c = '_';
  return name;
}

bool isFloatType(DType t) { return t == DType::F32 || t == DType::F64; }

/// The first non-finite element of the float params in a host state image,
/// as "param[index]", or "".
std::string firstNonFinite(const ModelInfo& m, const unsigned char* state) {
  for (const ParamInfo& p : m.params) {
    if (!isFloatType(p.dtype))
      continue;
    int64_t n = numelOf(p.shape);
    for (int64_t k = 0; k < n; ++k) {
      double v;
      if (p.dtype == DType::F32) {
        float f;
        std::memcpy(&f, state + p.offset + 4 * k, 4);
        v = f;
      } else {
        std::memcpy(&v, state + p.offset + 8 * k, 8);
      }
      if (!std::isfinite(v))
        return p.name + "[" + std::to_string(k) + "]";
    }
  }
  return "";
}

} // namespace

/// The embedded weights, or --weights: the non-zeroInit params, packed.
bool Trainer::loadInitialState(std::string& error) {
  std::vector<unsigned char> file;
  const unsigned char* blob = m_.weights;
  if (!blob && o_.weights.empty())
    o_.weights = std::string(program_) + ".weights";
  if (!o_.weights.empty()) {
    if (!readFile(o_.weights, file, m_.weightsBytes, error)) {
      error = "weights: " + error;
      return false;
    }
    blob = file.data();
  }
  int64_t at = 0;
  for (const ParamInfo& p : m_.params) {
    if (p.zeroInit)
      continue;
    int64_t n = bytesOf(p.dtype, p.shape);
    if (at + n > m_.weightsBytes) {
      error = "weights: the embedded weights are shorter than the params";
      return false;
    }
    std::memcpy(hostState_.data() + p.offset, blob + at, static_cast<size_t>(n));
    at += n;
  }
  return true;
}

bool Trainer::resumeFrom(const std::string& path, std::string& error) {
  Checkpoint c;
  error = readCheckpoint(path, m_.fingerprint, c);
  if (!error.empty())
    return false;
  for (const ParamInfo& p : m_.params) {
    const CheckpointTensor* t = c.find(p.name);
    if (!t) {
      error = path + ": has no tensor '" + p.name + "'";
      return false;
    }
    if (t->dtype != p.dtype || t->shape != p.shape ||
        static_cast<int64_t>(t->data.size()) != bytesOf(p.dtype, p.shape)) {
      error = path + ": tensor '" + p.name + "' does not have the model's type and shape";
      return false;
    }
    std::memcpy(hostState_.data() + p.offset, t->data.data(), t->data.size());
  }
  if (o_.ema > 0 && !resumeEma(c, path, error))
    return false;
  // The kernel choices the run took: this one takes them again (on the
  // same GPU and library versions), whatever the autotune cache holds now.
  if (!c.state.autotune.empty() && !autotuneCache().pin(c.state.autotune, path, &error))
    return false;
  if (c.state.step < 0 || c.state.epoch != c.state.step / batchesPerEpoch_ ||
      c.state.batch != c.state.step % batchesPerEpoch_) {
    error = path + ": its data position (epoch " + std::to_string(c.state.epoch) + ", batch " +
            std::to_string(c.state.batch) + " after " + std::to_string(c.state.step) +
            " steps) does not fit " + std::to_string(batchesPerEpoch_) +
            " batches per epoch: resume with the data options of the run that wrote it";
    return false;
  }
  if (c.state.rng.size() == 8) {
    uint64_t seed;
    std::memcpy(&seed, c.state.rng.data(), 8);
    if (o_.seedGiven && seed != o_.seed)
      std::fprintf(stderr, "%s: warning: resuming with the checkpoint's seed %llu, not --seed\n",
                   program_, static_cast<unsigned long long>(seed));
    o_.seed = seed;
  }
  startStep_ = c.state.step;
  return true;
}

bool Trainer::saveCheckpoint(int64_t step, std::string& error) {
  if (!downloadState(error) || (o_.ema > 0 && !downloadEma(error)))
    return false;
  if (!leader()) { // rank 0 writes it
    lastCheckpoint_ = step;
    return true;
  }
  std::string bad = firstNonFinite(m_, hostState_.data());
  if (!bad.empty()) {
    error = "after step " + std::to_string(step) + " " + bad +
            " is not finite: no checkpoint written" +
            (lastCheckpoint_ >= 0 ? " (" + checkpointFileName(lastCheckpoint_) + " is kept)" : "");
    return false;
  }
  CheckpointState st;
  st.fingerprint = m_.fingerprint;
  st.step = step;
  st.epoch = step / batchesPerEpoch_;
  st.batch = step % batchesPerEpoch_;
  st.rng.resize(8);
  std::memcpy(st.rng.data(), &o_.seed, 8);
  st.autotune = autotuneCache().usedText();
  std::vector<NamedTensor> tensors;
  for (const ParamInfo& p : m_.params)
    tensors.push_back({p.name, TensorView{hostState_.data() + p.offset, p.dtype, p.shape}});
  if (o_.ema > 0)
    emaTensors(tensors);
  std::error_code ec;
  std::filesystem::create_directories(o_.checkpointDir, ec);
  std::string path = o_.checkpointDir + "/" + checkpointFileName(step);
  error = writeCheckpoint(path, st, tensors);
  if (!error.empty())
    return false;
  lastCheckpoint_ = step;
  error = keepLastCheckpoints(o_.checkpointDir, static_cast<int>(o_.keepCheckpoints));
  return error.empty();
}

bool Trainer::writeExport(std::string& error) {
  if (m_.exportTemplateBytes == 0) {
    error = "--export: this trainer holds no export template (lwcc could not map the model's "
            "initializers to its params)";
    return false;
  }
  // --export-ema: the moving average's params.
  if (o_.exportEma ? !downloadEma(error) : !downloadState(error))
    return false;
  if (!leader())
    return true;
  const unsigned char* image = o_.exportEma ? hostEma_.data() : hostState_.data();
  std::vector<const void*> params;
  for (const ParamInfo& p : m_.params)
    params.push_back(image + p.offset);
  error = writeOnnxExport(o_.exportPath, m_.exportTemplate,
                          static_cast<size_t>(m_.exportTemplateBytes), m_.exportCuts, params);
  return error.empty();
}

bool Trainer::dump(std::string& error) {
  std::error_code ec;
  if (leader())
    std::filesystem::create_directories(o_.dump, ec);
  if (!downloadState(error) || (o_.ema > 0 && !downloadEma(error)))
    return false;
  for (size_t k = 0; k < m_.params.size() && leader(); ++k) {
    const ParamInfo& p = m_.params[k];
    std::string path = o_.dump + "/param_" + fileSafe(p.name) + ".bin";
    if (!writeFile(path, hostState_.data() + p.offset, bytesOf(p.dtype, p.shape))) {
      error = path + ": cannot write";
      return false;
    }
    // --ema: the moving average of each averaged param beside it.
    path = o_.dump + "/ema_param_" + fileSafe(p.name) + ".bin";
    if (o_.ema > 0 && averaged_[k] &&
        !writeFile(path, hostEma_.data() + p.offset, bytesOf(p.dtype, p.shape))) {
      error = path + ": cannot write";
      return false;
    }
  }
  for (size_t k = 0; k < m_.outputs.size(); ++k) {
    const OutputInfo& out = m_.outputs[k];
    std::vector<unsigned char> bytes(static_cast<size_t>(bytesOf(out.dtype, out.shape)));
    if (!stepOutputs_.empty()) // an evaluation in arena_ came after the step
      bytes = stepOutputs_[k];
    else if (multi_ ? !multi_->downloadOutput(out, bytes.data(), error)
                    : !runner_->download(bytes.data(), arena_.ptr + out.offset,
                                         static_cast<int64_t>(bytes.size()), &error))
      return false;
    if (!leader())
      continue;
    if (out.dtype == DType::BF16 || out.dtype == DType::F16) {
      // A mixed-precision step's weight gradient, read by its update as it
      // is: written as float32, as a float32 step writes it (the same values).
      std::vector<unsigned char> wide(bytes.size() * 2);
      for (size_t e = 0; e < bytes.size() / 2; ++e) {
        uint16_t h = 0;
        std::memcpy(&h, bytes.data() + 2 * e, 2);
        const float f = out.dtype == DType::BF16 ? bf16ToFloat(h) : f16ToFloat(h);
        std::memcpy(wide.data() + 4 * e, &f, 4);
      }
      bytes = std::move(wide);
    }
    std::string path = o_.dump + "/output_" + std::to_string(k) + ".bin";
    if (!writeFile(path, bytes.data(), static_cast<int64_t>(bytes.size()))) {
      error = path + ": cannot write";
      return false;
    }
  }
  if (!evalLogits_.empty() && leader()) {
    std::string path = o_.dump + "/eval_logits.bin";
    if (!writeFile(path, evalLogits_.data(), static_cast<int64_t>(evalLogits_.size() * 4))) {
      error = path + ": cannot write";
      return false;
    }
  }
  return true;
}

} // namespace lwrt::trainer
