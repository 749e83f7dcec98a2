// The params' moving average (--ema=DECAY): after every step each device
// moves its copy of the float params towards the params, ema += (1 - d) *
// (param - ema), d the decay (with --ema-warmup min(DECAY, (1 + s) / (10 +
// s)) after step s, counted from 0), on the device's runner behind the step:
// replicas and shards alike, each device its own pieces. The average lives
// in a second state buffer laid out as the state, starts from the initial
// params, goes into checkpoints as "ema/NAME" tensors (a resumed run goes
// on bit for bit), and --eval-ema / --export-ema evaluate and export it
// instead of the params.
#include "Trainer.h"

#include <cstdio>
#include <cstring>

namespace lwrt::trainer {

bool Trainer::setUpEma(std::string& error) {
  if (o_.ema == 0)
    return true;
  // The float params the step trains or updates (batch norm statistics
  // included), not the optimizer's state, the loss scale or the norm.
  averaged_.assign(m_.params.size(), false);
  std::vector<StateRange> ranges;
  for (size_t k = 0; k < m_.params.size(); ++k) {
    const ParamInfo& p = m_.params[k];
    if ((p.dtype != DType::F32 && p.dtype != DType::F64) || p.zeroInit ||
        static_cast<int>(k) == m_.lossScaleParam || static_cast<int>(k) == m_.gradNormParam)
      continue;
    averaged_[k] = true;
    ranges.push_back({p.offset, numelOf(p.shape), p.dtype});
  }
  if (multi_) {
    if (!multi_->allocateAverage(averaged_, error) ||
        !multi_->upload(hostEma_.data(), error, MultiDevice::Copy::Average)) {
      error = "--ema: " + error;
      return false;
    }
    return true;
  }
  emaRanges_ = mergeRanges(std::move(ranges));
  if (!allocate(ema_, m_.stateBytes, "--ema", error) ||
      !runner_->upload(ema_.ptr, hostEma_.data(), m_.stateBytes, &error)) {
    error = "--ema: " + error;
    return false;
  }
  // The evaluation pass reads its params from the average from now on
  // (a CUDA graph of it records the pointer).
  if (o_.evalEma)
    evalBuffers_.state = ema_.ptr;
  return true;
}

bool Trainer::updateEma(int64_t s, std::string& error) {
  double decay = o_.ema;
  if (o_.emaWarmup)
    decay = std::min(decay, (1.0 + static_cast<double>(s)) / (10.0 + static_cast<double>(s)));
  const double weight = 1.0 - decay;
  if (multi_)
    return multi_->updateAverage(weight, error);
  for (const StateRange& r : emaRanges_)
    if (!runner_->emaUpdate(ema_.ptr + r.offset, state_.ptr + r.offset, r.count, r.type, weight,
                            &error))
      return false;
  return true;
}

bool Trainer::downloadEma(std::string& error) {
  if (multi_)
    return multi_->download(hostEma_.data(), o_.checkReplicas, error, MultiDevice::Copy::Average);
  return runner_->download(hostEma_.data(), ema_.ptr, m_.stateBytes, &error);
}

void Trainer::emaTensors(std::vector<NamedTensor>& tensors) const {
  for (size_t k = 0; k < m_.params.size(); ++k)
    if (averaged_[k]) {
      const ParamInfo& p = m_.params[k];
      tensors.push_back(
          {"ema/" + p.name,
           TensorView{const_cast<unsigned char*>(hostEma_.data()) + p.offset, p.dtype, p.shape}});
    }
}

bool Trainer::resumeEma(const Checkpoint& c, const std::string& path, std::string& error) {
  hostEma_ = hostState_;
  size_t found = 0, averaged = 0;
  for (const ParamInfo& p : m_.params) {
    if (p.zeroInit || (p.dtype != DType::F32 && p.dtype != DType::F64))
      continue;
    ++averaged;
    const CheckpointTensor* t = c.find("ema/" + p.name);
    if (!t)
      continue;
    if (t->dtype != p.dtype || t->shape != p.shape ||
        static_cast<int64_t>(t->data.size()) != bytesOf(p.dtype, p.shape)) {
      error = path + ": tensor 'ema/" + p.name + "' does not have the model's type and shape";
      return false;
    }
    std::memcpy(hostEma_.data() + p.offset, t->data.data(), t->data.size());
    ++found;
  }
  if (found == 0 && averaged > 0 && leader())
    std::fprintf(stderr,
                 "%s: warning: %s holds no moving average (written without --ema): it starts "
                 "from the checkpoint's params\n",
                 program_, path.c_str());
  return true;
}

} // namespace lwrt::trainer
