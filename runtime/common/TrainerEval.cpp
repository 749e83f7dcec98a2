// The trainer's evaluation on the test split and its --profile report.
#include "Trainer.h"
#include "lwrt/image_data.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

namespace lwrt::trainer {

namespace {

/// The model's one label (or target) input, or null.
const InputInfo* labelInput(const ModelInfo& m) {
  const InputInfo* label = nullptr;
  for (const InputInfo& in : m.inputs)
    if (in.isLabel) {
      if (label)
        return nullptr;
      label = &in;
    }
  return label;
}

double elementAt(const unsigned char* p, DType t, int64_t k) {
  if (t == DType::F64) {
    double v;
    std::memcpy(&v, p + 8 * k, 8);
    return v;
  }
  float f;
  std::memcpy(&f, p + 4 * k, 4);
  return f;
}

} // namespace

std::string Trainer::evaluationProblem() const {
  const InputInfo* label = labelInput(m_);
  if (!label || label->shape.empty())
    return "the model has no single label or target input [N, ...]";
  if (m_.logitsType != DType::F32 && m_.logitsType != DType::F64)
    return "the evaluation output is not float32 or float64";
  if (m_.classes > 0) {
    // [N, classes] logits of [N] labels, or a sequence's [B, T, classes] of
    // [B, T] labels: a row of logits per label.
    if (m_.logitsShape.empty() ||
        numelOf(m_.logitsShape) != numelOf(label->shape) * m_.logitsShape.back())
      return "the logits are not [N, classes] (or [B, T, classes] of [B, T] labels)";
    if (label->dtype != DType::I64 && label->dtype != DType::I32)
      return "the labels are not integers";
    return "";
  }
  if (label->dtype != DType::F32 && label->dtype != DType::F64)
    return "the loss is neither a classification loss (softmax cross-entropy) nor a regression "
           "(mse) with a float target";
  if (numelOf(m_.logitsShape) != numelOf(label->shape))
    return "the evaluation output has " + std::to_string(numelOf(m_.logitsShape)) +
           " elements but the target " + std::to_string(numelOf(label->shape));
  return "";
}

/// On the test split (every example: the last partial batch is padded and
/// the padding not counted): a classifier's accuracy, top-5 and mean
/// cross-entropy, a sequence model's mean cross-entropy per token and its
/// perplexity, a regression's mean squared error (the mse loss's
/// definition: the mean over every element of every example).
bool Trainer::evaluate(int64_t epoch, int64_t step, std::string& error) {
  const InputInfo& label = *labelInput(m_);
  const int64_t n = label.shape[0];
  const int64_t labels = numelOf(label.shape); // a label per row of logits
  const bool classifier = m_.classes > 0;
  const int64_t classes = classifier ? m_.logitsShape.back() : 0;
  const int64_t perExample = numelOf(m_.logitsShape) / n; // a regression's outputs
  // A batch's examples, each `rows` of the batch's labels: a sequence
  // model's labels [B * T] or [B, T] hold T per window (token data, npy's
  // rows of T labels); one per example otherwise.
  const int64_t perBatch = test_ ? test_->batchSize() : n,
                rows = (classifier ? labels : n) / perBatch;
  // Token data and sequences: the loss per token and its perplexity.
  const bool sequence = classifier && (rows > 1 || o_.data.rfind("tokens:", 0) == 0);
  int64_t examples = o_.data == "synthetic" ? n * 10 : test_ ? test_->numExamples() : n;
  int64_t batches = (examples + perBatch - 1) / perBatch, correct = 0, top5 = 0;
  // Label rows evaluated: a sequence's tokens, less those the loss leaves
  // out (--ignore-index's label; --shift-labels: each sequence's first).
  int64_t counted = 0;
  // --shift-labels: the logits at t predict the label at t + 1.
  const bool shifted = sequence && m_.shiftLabels;
  double lossSum = 0;
  std::vector<unsigned char> logits(static_cast<size_t>(bytesOf(m_.logitsType, m_.logitsShape)));
  // Multi-device trainers evaluate on device 0 with the whole params
  // (under mpirun: rank 0, the others send it their devices' params).
  // --eval-ema: the moving average's params (one device: evalBuffers_
  // points at it).
  // Device 0 holds the whole state and the evaluation's arena only while
  // it evaluates (the trainer sets them up here and releases them at the
  // end: the phase is run unrecorded, its buffers new each time).
  if (multi_ &&
      ((o_.evalEma ? !downloadEma(error) : !downloadState(error)) ||
       (leader() && (!allocate(state_, m_.stateBytes, "state", error) ||
                     !allocate(evalArena_, m_.evalArenaBytes, "eval arena", error) ||
                     !allocate(inputs_, m_.inputBytes, "inputs", error) ||
                     !runner_->upload(state_.ptr, (o_.evalEma ? hostEma_ : hostState_).data(),
                                      m_.stateBytes, &error))))) {
    error = "evaluation: " + error;
    return false;
  }
  if (!leader())
    return true;
  struct Release {
    Trainer& t;
    ~Release() {
      if (t.multi_) {
        t.releaseBuffer(t.inputs_);
        t.releaseBuffer(t.evalArena_);
        t.releaseBuffer(t.state_);
      }
    }
  } release{*this};
  if (multi_)
    evalBuffers_ = {evalArena_.ptr, state_.ptr, inputs_.ptr, &o_.hyper};
  // In the training arena (one device), the evaluation's constants are
  // written at each evaluation and the step's again after it (the step
  // has finished: its loss was read before the trainer evaluates), and
  // the step's outputs --dump writes are kept first.
  if (evalInArena_ && !o_.dump.empty() && stepOutputs_.empty()) {
    for (const OutputInfo& out : m_.outputs) {
      stepOutputs_.emplace_back(static_cast<size_t>(bytesOf(out.dtype, out.shape)));
      if (!runner_->download(stepOutputs_.back().data(), arena_.ptr + out.offset,
                             static_cast<int64_t>(stepOutputs_.back().size()), &error)) {
        error = "evaluation: " + error;
        return false;
      }
    }
  }
  if ((multi_ || evalInArena_) &&
      !runner_->run(
          -1, [&](std::string* e) { return m_.evalInit(evalBuffers_, e); }, &error)) {
    error = "evaluation: " + error;
    return false;
  }
  const int evalKey = multi_ ? -1 : 1;
  // A test split's batches are decoded ahead on the data threads.
  std::unique_ptr<BatchFeed> feed;
  if (test_) {
    FeedOptions fo;
    fo.threads = dataThreads();
    fo.depth = fo.threads + 2; // a batch per thread, the one in use and one ready
    feed = createExampleFeed(*runner_, m_.inputBytes, *test_, batches, fo, &error);
    if (!feed) {
      error = "evaluation: " + error;
      return false;
    }
  }
  for (int64_t b = 0; b < batches; ++b) {
    const unsigned char* batch = hostInputs_.data();
    if (o_.data == "synthetic") {
      fillSyntheticInputs(m_, hostInputs_.data(), o_.seed ^ 0x5EED5EED5EEDull, 1000000000ull + b);
    } else if (!test_) {
      std::memcpy(hostInputs_.data(), rawBatch_.data(), rawBatch_.size());
    } else if (!(batch = feed->acquire(b, &error))) {
      error = "evaluation: " + error;
      return false;
    }
    // The labels or targets as the model sees them.
    const std::vector<unsigned char> target(
        batch + label.offset, batch + label.offset + bytesOf(label.dtype, label.shape));
    if (!runner_->upload(inputs_.ptr, batch, m_.inputBytes, &error) ||
        !runner_->run(
            evalKey, [&](std::string* e) { return m_.eval(evalBuffers_, e); }, &error) ||
        !runner_->download(logits.data(), evalArena_.ptr + m_.logitsOffset,
                           static_cast<int64_t>(logits.size()), &error)) {
      error = "evaluation: " + error;
      return false;
    }
    if (feed) // the download waited for the step, and so for the upload
      feed->release(b);
    int64_t valid = std::min(perBatch, examples - b * perBatch) * rows;
    for (int64_t k = 0; k < valid; ++k) {
      if (shifted && k % rows == 0)
        continue;
      const int64_t at = shifted ? k - 1 : k; // the row of logits
      if (!classifier) {
        for (int64_t j = k * perExample; j < (k + 1) * perExample; ++j) {
          const double d =
              elementAt(logits.data(), m_.logitsType, j) - elementAt(target.data(), label.dtype, j);
          lossSum += d * d;
        }
        continue;
      }
      int64_t labelValue = 0;
      if (label.dtype == DType::I64) {
        std::memcpy(&labelValue, target.data() + 8 * k, 8);
      } else {
        int32_t v;
        std::memcpy(&v, target.data() + 4 * k, 4);
        labelValue = v;
      }
      if (sequence && m_.hasIgnoreIndex && labelValue == m_.ignoreIndex)
        continue;
      ++counted;
      std::vector<double> row(static_cast<size_t>(classes));
      for (int64_t j = 0; j < classes; ++j)
        row[j] = elementAt(logits.data(), m_.logitsType, at * classes + j);
      // The label's rank: logits above it, and equal ones before it (the
      // first maximum is the prediction).
      int64_t rank = classes;
      if (labelValue >= 0 && labelValue < classes && std::isfinite(row[labelValue])) {
        rank = 0;
        for (int64_t j = 0; j < classes; ++j)
          rank += row[j] > row[labelValue] || (row[j] == row[labelValue] && j < labelValue);
      }
      correct += rank == 0;
      top5 += rank < 5;
      double mx = *std::max_element(row.begin(), row.end()), sum = 0;
      for (double v : row)
        sum += std::exp(v - mx);
      if (labelValue >= 0 && labelValue < classes)
        lossSum += std::log(sum) + mx - row[labelValue];
    }
    if (b == 0) {
      const int64_t count = numelOf(m_.logitsShape);
      evalLogits_.resize(static_cast<size_t>(count));
      for (int64_t k = 0; k < count; ++k)
        evalLogits_[k] = static_cast<float>(elementAt(logits.data(), m_.logitsType, k));
    }
  }
  EvalRecord r;
  r.epoch = epoch;
  r.step = step;
  char line[256];
  if (sequence) {
    r.loss = lossSum / static_cast<double>(std::max<int64_t>(counted, 1));
    r.perplexity = std::exp(*r.loss);
    std::snprintf(line, sizeof line,
                  "eval  epoch %lld  loss %.4f  perplexity %.4f (%lld tokens of %lld %s)",
                  static_cast<long long>(epoch), *r.loss, *r.perplexity,
                  static_cast<long long>(counted), static_cast<long long>(examples),
                  o_.data.rfind("tokens:", 0) == 0 ? "windows" : "sequences");
  } else if (classifier) {
    r.accuracy = static_cast<double>(correct) / static_cast<double>(examples);
    r.top5 = static_cast<double>(top5) / static_cast<double>(examples);
    r.loss = lossSum / static_cast<double>(examples);
    std::snprintf(line, sizeof line,
                  "eval  epoch %lld  accuracy %.4f (%lld/%lld)  top-5 %.4f  loss %.4f",
                  static_cast<long long>(epoch), *r.accuracy, static_cast<long long>(correct),
                  static_cast<long long>(examples), *r.top5, *r.loss);
  } else {
    r.loss = lossSum / (static_cast<double>(examples * rows) * static_cast<double>(perExample));
    std::snprintf(line, sizeof line,
                  "eval  epoch %lld  loss %.6g (mean squared error over %lld examples)",
                  static_cast<long long>(epoch), *r.loss, static_cast<long long>(examples));
  }
  progress_->message(line);
  if (log_)
    log_->eval(r);
  if (tb_)
    tb_->eval(r);
  if (evalInArena_ && !runner_->run(
                          -1, [&](std::string* e) { return m_.init(buffers_, e); }, &error)) {
    error = "after the evaluation, writing the step's constants again: " + error;
    return false;
  }
  return true;
}

void Trainer::printProfile() {
  if (o_.profile == 0)
    return;
  if (std::string notes = runner_->notes(); !notes.empty())
    std::printf("backend: %s\n", notes.c_str());
  if (profiled_ == 0)
    return;
  // Milliseconds per op label over the profiled steps ("label @device" in
  // a multi-device trainer).
  const std::map<std::string, double> opMs = timeline_.msByOp(multi_ != nullptr);
  double total = 0;
  std::map<std::string, double> byKernel;
  for (const auto& [label, ms] : opMs) {
    total += ms;
    byKernel[label.substr(0, label.find(' '))] += ms;
  }
  auto share = [&](double ms) { return total > 0 ? 100.0 * ms / total : 0.0; };
  if (multi_) // ops of every device: "label @device"
    std::printf("profile: %lld steps on %s, %.3f ms of ops per step over %d devices in %zu ops "
                "(waits left out)\n",
                static_cast<long long>(profiled_), multi_->description().c_str(),
                total / static_cast<double>(profiled_), multi_->numDevices(), opMs.size());
  else
    std::printf("profile: %lld steps on %s, %.3f ms per step in %zu ops\n",
                static_cast<long long>(profiled_), runner_->description().c_str(),
                total / static_cast<double>(profiled_), opMs.size());
  // What --emit=plan counts as `N kernels a step`, counted as the calls
  // were made.
  std::string calls;
  for (const auto& [device, n] : timeline_.callsPerStep())
    calls += (calls.empty() ? "" : ", ") +
             (multi_ ? "device " + std::to_string(device) + ": " : std::string()) +
             std::to_string(static_cast<long long>(std::llround(n)));
  std::printf("kernels launched a step: %s (a kernel, a library call or a collective each)\n",
              calls.c_str());
  std::vector<std::pair<double, std::string>> kernels, ops;
  for (const auto& [k, ms] : byKernel)
    kernels.push_back({ms, k});
  for (const auto& [k, ms] : opMs)
    ops.push_back({ms, k});
  std::sort(kernels.rbegin(), kernels.rend());
  std::sort(ops.rbegin(), ops.rend());
  std::printf("  %-28s %10s %7s\n", "kernel", "ms/step", "share");
  for (const auto& [ms, k] : kernels)
    std::printf("  %-28s %10.3f %6.1f%%\n", k.c_str(), ms / static_cast<double>(profiled_),
                share(ms));
  std::printf("  %-48s %10s %7s\n", "op (slowest 15)", "ms/step", "share");
  for (size_t i = 0; i < ops.size() && i < 15; ++i)
    std::printf("  %-48s %10.3f %6.1f%%\n", ops[i].second.substr(0, 48).c_str(),
                ops[i].first / static_cast<double>(profiled_), share(ops[i].first));
}

} // namespace lwrt::trainer
