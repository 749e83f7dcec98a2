// The devices of a multi-device trainer: runners, per-device buffers, the
// group, and the logical state image scattered to and gathered from the
// params' placements (replicas whole, shards a range of one dim).
#include "MultiDevice.h"

#include "Cluster.h"
#include "Trainer.h"

#include <algorithm>
#include <cstring>
#include <set>

namespace lwrt {

namespace {

using trainer::bytesOf;
using trainer::numelOf;

/// The shape of placement `pl` of `p`.
std::vector<int64_t> placedShape(const ParamInfo& p, const ParamPlacement& pl) {
  std::vector<int64_t> shape = p.shape;
  if (pl.shardDim >= 0)
    shape[static_cast<size_t>(pl.shardDim)] = pl.shardSize;
  return shape;
}

/// Copies entries [begin, begin + size) of dim `dim` between a whole tensor
/// of `shape` and its packed shard (toShard: whole -> shard).
void copyShard(unsigned char* whole, unsigned char* piece, const std::vector<int64_t>& shape,
               int64_t elemBytes, int dim, int64_t begin, int64_t size, bool toShard) {
  int64_t outer = 1, inner = elemBytes;
  for (int d = 0; d < dim; ++d)
    outer *= shape[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d)
    inner *= shape[d];
  const int64_t rows = shape[static_cast<size_t>(dim)];
  for (int64_t o = 0; o < outer; ++o) {
    unsigned char* w = whole + (o * rows + begin) * inner;
    unsigned char* s = piece + o * size * inner;
    if (toShard)
      std::memcpy(s, w, static_cast<size_t>(size * inner));
    else
      std::memcpy(w, s, static_cast<size_t>(size * inner));
  }
}

std::string joined(const std::vector<int>& v) {
  std::string s;
  for (int x : v) {
    if (!s.empty())
      s += ','; // not `"," + ...`: a GCC 12 -O3 -Wrestrict false positive
    s += std::to_string(x);
  }
  return s;
}

} // namespace

std::string checkMultiDeviceModel(const ModelInfo& m) {
  const int n = m.numDevices;
  const size_t nd = static_cast<size_t>(n);
  // One device runs here as a group too when its step uses several streams.
  if (n < 1)
    return "a multi-device trainer needs at least 1 device, has " + std::to_string(n);
  if (m.deviceArenaBytes.size() != nd || m.deviceStateBytes.size() != nd ||
      (!m.deviceInit.empty() && m.deviceInit.size() != nd))
    return "the per-device arena, state and init tables do not have " + std::to_string(n) +
           " entries";
  if (m.deviceSteps.empty())
    return "no step functions";
  if (m.lossDevice < 0 || m.lossDevice >= n ||
      m.lossOffset + dtypeSize(m.lossType) > m.deviceArenaBytes[static_cast<size_t>(m.lossDevice)])
    return "the loss is outside device " + std::to_string(m.lossDevice) + "'s arena";
  for (const OutputInfo& o : m.outputs)
    if (o.device < 0 || o.device >= n || o.offset < 0 ||
        o.offset + bytesOf(o.dtype, o.shape) > m.deviceArenaBytes[static_cast<size_t>(o.device)])
      return "output '" + o.name + "' is outside device " + std::to_string(o.device) + "'s arena";
  std::vector<std::vector<const ParamPlacement*>> byParam(m.params.size());
  for (const ParamPlacement& pl : m.placements) {
    if (pl.param < 0 || static_cast<size_t>(pl.param) >= m.params.size())
      return "a placement of param #" + std::to_string(pl.param) + ", which does not exist";
    const ParamInfo& p = m.params[static_cast<size_t>(pl.param)];
    const std::string what = "param '" + p.name + "' on device " + std::to_string(pl.device);
    if (pl.device < 0 || pl.device >= n)
      return what + ": no such device";
    if (pl.shardDim >= static_cast<int>(p.shape.size()) ||
        (pl.shardDim >= 0 &&
         (pl.shardBegin < 0 || pl.shardSize <= 0 ||
          pl.shardBegin + pl.shardSize > p.shape[static_cast<size_t>(pl.shardDim)])))
      return what + ": the shard is outside the param";
    if (pl.offset < 0 || pl.offset + bytesOf(p.dtype, placedShape(p, pl)) >
                             m.deviceStateBytes[static_cast<size_t>(pl.device)])
      return what + ": outside the device's state buffer";
    byParam[static_cast<size_t>(pl.param)].push_back(&pl);
  }
  for (size_t k = 0; k < m.params.size(); ++k) {
    const auto& pls = byParam[k];
    const std::string what = "param '" + m.params[k].name + "'";
    if (pls.empty())
      return what + " is on no device";
    if (std::any_of(pls.begin(), pls.end(), [](auto* pl) { return pl->shardDim < 0; }))
      continue; // a replica holds it whole
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (const ParamPlacement* pl : pls) {
      if (pl->shardDim != pls[0]->shardDim)
        return what + ": shards along different dims";
      ranges.push_back({pl->shardBegin, pl->shardSize});
    }
    std::sort(ranges.begin(), ranges.end());
    int64_t at = 0;
    for (auto [begin, size] : ranges) {
      if (begin != at)
        return what + ": its shards do not cover dim " + std::to_string(pls[0]->shardDim) + " once";
      at += size;
    }
    if (at != m.params[k].shape[static_cast<size_t>(pls[0]->shardDim)])
      return what + ": its shards do not cover dim " + std::to_string(pls[0]->shardDim);
  }
  return "";
}

LocalDevices localDevices(const ModelInfo& m, const Cluster* cluster) {
  const int n = std::max(m.numDevices, 1);
  if (!cluster)
    return {0, n};
  const int per = n / cluster->size();
  return {cluster->rank() * per, per};
}

int physicalDevice(const ModelInfo& m, const Cluster* cluster, const std::vector<int>& physical,
                   int64_t d) {
  if (!physical.empty())
    return physical[static_cast<size_t>(d)];
  if (!cluster)
    return -1;
  const LocalDevices here = localDevices(m, cluster);
  return cluster->localRank() * here.count + static_cast<int>(d - here.first);
}

std::string gpuPlacementHint(const ModelInfo& m, const Cluster& cluster) {
  const LocalDevices here = localDevices(m, &cluster);
  const int first = cluster.localRank() * here.count;
  return "under mpirun, the k-th process on a machine drives its GPUs k*" +
         std::to_string(here.count) + " to k*" + std::to_string(here.count) + "+" +
         std::to_string(here.count - 1) + " (this is process " +
         std::to_string(cluster.localRank()) + " of " + std::to_string(cluster.localSize()) +
         " on " + cluster.host(cluster.rank()) + ": GPUs " + std::to_string(first) + " to " +
         std::to_string(first + here.count - 1) + "); start at most (the machine's GPUs) / " +
         std::to_string(here.count) +
         " processes on each machine (mpirun --host NAME:COUNT), or map them with --devices";
}

std::pair<int64_t, int64_t> localInputRows(const ModelInfo& m, const Cluster* cluster,
                                           int64_t batch) {
  if (!cluster)
    return {0, batch};
  return inputRowsOf(m, localDevices(m, cluster), batch);
}

std::pair<int64_t, int64_t> inputRowsOf(const ModelInfo& m, const LocalDevices& here,
                                        int64_t batch) {
  if (m.inputRows.size() != static_cast<size_t>(std::max(m.numDevices, 1)))
    return {0, batch};
  int64_t first = batch, end = 0;
  for (int d = here.first; d < here.first + here.count; ++d) {
    auto [b, e] = m.inputRows[static_cast<size_t>(d)];
    if (b >= e)
      continue; // reads no input
    first = std::min(first, std::max<int64_t>(b, 0));
    end = std::max(end, std::min(e, batch));
  }
  return first < end ? std::make_pair(first, end) : std::make_pair(int64_t(0), int64_t(0));
}

bool parseDeviceList(const std::string& text, std::vector<int>& out) {
  out.clear();
  size_t at = 0;
  while (at <= text.size()) {
    size_t comma = text.find(',', at);
    std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (item.empty() || item.size() > 6 ||
        !std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return false;
    out.push_back(std::stoi(item));
    if (comma == std::string::npos)
      break;
    at = comma + 1;
  }
  return !out.empty();
}

std::unique_ptr<MultiDevice>
MultiDevice::create(const ModelInfo& m, StepRunner* first, const RunnerOptions& options,
                    const std::vector<int>& physical, Cluster* cluster, RunnerFactory createRunner,
                    GroupFactory createGroup, std::string& warning, std::string& error) {
  std::unique_ptr<MultiDevice> md(new MultiDevice(m));
  const int n = m.numDevices;
  md->cluster_ = cluster;
  md->local_ = localDevices(m, cluster);
  const LocalDevices here = md->local_;
  md->runners_.assign(static_cast<size_t>(n), nullptr);
  md->physical_.assign(static_cast<size_t>(n), -1);
  md->runners_[static_cast<size_t>(here.first)] = first;
  md->physical_[static_cast<size_t>(here.first)] = options.device;
  int found = 1; // round-robin: the devices opened so far, 0 .. found - 1
  for (int d = here.first + 1; d < here.first + here.count; ++d) {
    RunnerOptions o = options;
    o.convWorkspaceBytes = m.convWorkspaceFor(d);
    std::unique_ptr<StepRunner> r;
    if (int want = physicalDevice(m, cluster, physical, d); want >= 0) {
      o.device = want;
      r = createRunner(o, &error);
      if (!r) {
        error = "logical device " + std::to_string(d) + " on device " + std::to_string(o.device) +
                ": " + error;
        if (cluster && m.target == "cuda" && error.find("does not exist") != std::string::npos)
          error += "\n" + gpuPlacementHint(m, *cluster);
        return nullptr;
      }
    } else {
      if (found == d) { // every device so far was distinct: try the next
        o.device = d;
        std::string ignored;
        r = createRunner(o, &ignored);
        if (r)
          ++found;
      }
      if (!r) {
        o.device = d % found;
        r = createRunner(o, &error);
        if (!r) {
          error = "logical device " + std::to_string(d) + ": " + error;
          return nullptr;
        }
      }
    }
    md->physical_[static_cast<size_t>(d)] = o.device;
    md->runners_[static_cast<size_t>(d)] = r.get();
    md->owned_.push_back(std::move(r));
  }
  if (m.target == "cuda") {
    std::vector<int> mine(md->physical_.begin() + here.first,
                          md->physical_.begin() + here.first + here.count);
    std::set<int> distinct(mine.begin(), mine.end());
    if (distinct.size() < mine.size())
      warning = std::to_string(mine.size()) + " logical devices share " +
                std::to_string(distinct.size()) + " GPU" + (distinct.size() == 1 ? "" : "s") +
                " (devices " + joined(mine) + "): transfers between them are local copies";
  }
  md->group_ = createGroup(m, md->runners_, cluster, &error);
  if (!md->group_) {
    error = "device group: " + error;
    return nullptr;
  }
  return md;
}

MultiDevice::~MultiDevice() {
  group_.reset();
  for (const Memory& mem : memory_)
    mem.runner->release(mem.ptr);
}

bool MultiDevice::allocateOn(int device, int64_t bytes, const char* what, Memory& out,
                             std::string& error) {
  StepRunner* r = runners_[static_cast<size_t>(device)];
  out.runner = r;
  out.ptr = static_cast<unsigned char*>(r->allocate(bytes, &error));
  if (!out.ptr) {
    error = std::string(what) + " of device " + std::to_string(device) + ": " + error;
    return false;
  }
  memory_.push_back(out);
  return true;
}

bool MultiDevice::allocate(std::string& error) {
  arenas_.assign(runners_.size(), nullptr);
  states_.assign(runners_.size(), nullptr);
  inputs_.assign(runners_.size(), nullptr);
  for (int d = local_.first; d < local_.first + local_.count; ++d) {
    Memory arena, state, inputs;
    if (!allocateOn(d, m_.deviceArenaBytes[static_cast<size_t>(d)], "arena", arena, error) ||
        !allocateOn(d, m_.deviceStateBytes[static_cast<size_t>(d)], "state", state, error))
      return false;
    if (!runners_[static_cast<size_t>(d)]->readsHostMemory() &&
        !allocateOn(d, deviceInputBytes(m_, d), "inputs", inputs, error))
      return false;
    arenas_[static_cast<size_t>(d)] = arena.ptr;
    states_[static_cast<size_t>(d)] = state.ptr;
    inputs_[static_cast<size_t>(d)] = inputs.ptr;
  }
  return true;
}

std::vector<StateRange> mergeRanges(std::vector<StateRange> ranges) {
  std::sort(ranges.begin(), ranges.end(),
            [](const StateRange& a, const StateRange& b) { return a.offset < b.offset; });
  std::vector<StateRange> merged;
  for (const StateRange& r : ranges) {
    if (r.count == 0)
      continue;
    StateRange* last = merged.empty() ? nullptr : &merged.back();
    if (last && last->type == r.type &&
        last->offset + last->count * dtypeSize(last->type) == r.offset)
      last->count += r.count;
    else
      merged.push_back(r);
  }
  return merged;
}

bool MultiDevice::allocateAverage(const std::vector<bool>& averaged, std::string& error) {
  averages_.assign(runners_.size(), nullptr);
  averaged_.assign(runners_.size(), {});
  for (int d = local_.first; d < local_.first + local_.count; ++d) {
    Memory average;
    if (!allocateOn(d, m_.deviceStateBytes[static_cast<size_t>(d)], "moving average", average,
                    error))
      return false;
    averages_[static_cast<size_t>(d)] = average.ptr;
  }
  std::vector<std::vector<StateRange>> ranges(runners_.size());
  for (const ParamPlacement& pl : m_.placements) {
    const ParamInfo& p = m_.params[static_cast<size_t>(pl.param)];
    if (local_.holds(pl.device) && averaged[static_cast<size_t>(pl.param)])
      ranges[static_cast<size_t>(pl.device)].push_back(
          {pl.offset, numelOf(placedShape(p, pl)), p.dtype});
  }
  for (size_t d = 0; d < ranges.size(); ++d)
    averaged_[d] = mergeRanges(std::move(ranges[d]));
  return true;
}

bool MultiDevice::updateAverage(double weight, std::string& error) {
  for (size_t d = 0; d < averaged_.size(); ++d)
    for (const StateRange& r : averaged_[d])
      if (!runners_[d]->emaUpdate(averages_[d] + r.offset, states_[d] + r.offset, r.count, r.type,
                                  weight, &error)) {
        error = "device " + std::to_string(d) + ": " + error;
        return false;
      }
  return true;
}

bool MultiDevice::upload(const unsigned char* hostState, std::string& error, Copy to) {
  const std::vector<unsigned char*>& states = to == Copy::Average ? averages_ : states_;
  std::vector<unsigned char> piece;
  for (const ParamPlacement& pl : m_.placements) {
    if (!local_.holds(pl.device))
      continue; // its process uploads it
    const ParamInfo& p = m_.params[static_cast<size_t>(pl.param)];
    const int64_t bytes = bytesOf(p.dtype, placedShape(p, pl));
    const unsigned char* src = hostState + p.offset;
    if (pl.shardDim >= 0) {
      piece.assign(static_cast<size_t>(bytes), 0);
      copyShard(const_cast<unsigned char*>(src), piece.data(), p.shape, dtypeSize(p.dtype),
                pl.shardDim, pl.shardBegin, pl.shardSize, true);
      src = piece.data();
    }
    StepRunner* r = runners_[static_cast<size_t>(pl.device)];
    if (!r->upload(states[static_cast<size_t>(pl.device)] + pl.offset, src, bytes, &error)) {
      error = "param '" + p.name + "' to device " + std::to_string(pl.device) + ": " + error;
      return false;
    }
  }
  return true;
}

bool MultiDevice::download(unsigned char* hostState, bool checkReplicas, std::string& error,
                           Copy source) {
  const std::vector<unsigned char*>& states = source == Copy::Average ? averages_ : states_;
  // The placements read, in order: the first replica of each param (every
  // replica with checkReplicas), then the shards of params without one.
  std::vector<const ParamPlacement*> read;
  std::vector<bool> replicated(m_.params.size(), false), seen(m_.params.size(), false);
  for (const ParamPlacement& pl : m_.placements)
    if (pl.shardDim < 0) {
      replicated[static_cast<size_t>(pl.param)] = true;
      if (!seen[static_cast<size_t>(pl.param)] || checkReplicas)
        read.push_back(&pl);
      seen[static_cast<size_t>(pl.param)] = true;
    }
  for (const ParamPlacement& pl : m_.placements)
    if (pl.shardDim >= 0 && !replicated[static_cast<size_t>(pl.param)])
      read.push_back(&pl);
  auto bytesOfPlacement = [&](const ParamPlacement& pl) {
    const ParamInfo& p = m_.params[static_cast<size_t>(pl.param)];
    return bytesOf(p.dtype, placedShape(p, pl));
  };
  std::vector<unsigned char> piece;
  auto fetch = [&](const ParamPlacement& pl, unsigned char* dst) {
    StepRunner* r = runners_[static_cast<size_t>(pl.device)];
    if (!r->download(dst, states[static_cast<size_t>(pl.device)] + pl.offset, bytesOfPlacement(pl),
                     &error)) {
      error = "param '" + m_.params[static_cast<size_t>(pl.param)].name + "' from device " +
              std::to_string(pl.device) + ": " + error;
      return false;
    }
    return true;
  };
  // Under mpirun the other processes send their pieces to rank 0, in order.
  const int ranks = cluster_ ? cluster_->size() : 1;
  if (cluster_ && cluster_->rank() != 0) {
    std::vector<unsigned char> message;
    for (const ParamPlacement* pl : read) {
      if (!local_.holds(pl->device))
        continue;
      const size_t at = message.size();
      message.resize(at + static_cast<size_t>(bytesOfPlacement(*pl)));
      if (!fetch(*pl, message.data() + at))
        return false;
    }
    cluster_->send(0, Cluster::kGather, std::move(message));
    return true;
  }
  std::vector<std::vector<unsigned char>> received(static_cast<size_t>(ranks));
  std::vector<size_t> used(static_cast<size_t>(ranks), 0);
  for (int q = 1; q < ranks; ++q)
    if (!cluster_->receive(q, Cluster::kGather, received[static_cast<size_t>(q)], &error)) {
      error = "gathering the params: " + error;
      return false;
    }
  auto take = [&](const ParamPlacement& pl) {
    const size_t bytes = static_cast<size_t>(bytesOfPlacement(pl));
    piece.resize(bytes);
    if (local_.holds(pl.device))
      return fetch(pl, piece.data());
    const size_t q = static_cast<size_t>(rankOf(pl.device));
    if (received[q].size() - used[q] < bytes) {
      error = "rank " + std::to_string(q) + " sent fewer params than its devices hold";
      return false;
    }
    std::memcpy(piece.data(), received[q].data() + used[q], bytes);
    used[q] += bytes;
    return true;
  };
  std::vector<int> from(m_.params.size(), -1); // the replica each param came from
  for (const ParamPlacement* pl : read) {
    const ParamInfo& p = m_.params[static_cast<size_t>(pl->param)];
    if (!take(*pl))
      return false;
    int& first = from[static_cast<size_t>(pl->param)];
    if (pl->shardDim >= 0) {
      copyShard(hostState + p.offset, piece.data(), p.shape, dtypeSize(p.dtype), pl->shardDim,
                pl->shardBegin, pl->shardSize, false);
    } else if (first < 0) {
      std::memcpy(hostState + p.offset, piece.data(), piece.size());
      first = pl->device;
    } else if (std::memcmp(hostState + p.offset, piece.data(), piece.size()) != 0) {
      error = "param '" + p.name + "': the replica on device " + std::to_string(pl->device) +
              " differs from the one on device " + std::to_string(first);
      return false;
    }
  }
  return true;
}

bool MultiDevice::init(const Hyper* hyper, std::string& error) {
  for (size_t d = 0; d < m_.deviceInit.size(); ++d) {
    PhaseFn fn = m_.deviceInit[d];
    if (!fn || !runners_[d])
      continue;
    StepBuffers b{arenas_[d], states_[d], inputs_[d], hyper};
    b.device = static_cast<int>(d);
    b.group = group_.get();
    if (!runners_[d]->run(
            -1, [&](std::string* e) { return fn(b, e); }, &error)) {
      error = "device " + std::to_string(d) + ": " + error;
      return false;
    }
  }
  return true;
}

int64_t deviceInputBytes(const ModelInfo& m, int d) {
  return m.deviceInputs.empty() ? m.inputBytes : m.deviceInputBytes[static_cast<size_t>(d)];
}

bool MultiDevice::uploadBatch(size_t d, unsigned char* in, const unsigned char* batch,
                              std::string& error) {
  if (m_.deviceInputs.empty())
    return runners_[d]->upload(in, batch, m_.inputBytes, &error);
  // The rows of each input the device holds, packed.
  for (size_t i = 0; i < m_.inputs.size(); ++i) {
    const ModelInfo::DeviceInput& r = m_.deviceInputs[d][i];
    if (r.offset < 0)
      continue;
    const InputInfo& x = m_.inputs[i];
    const int64_t row = bytesOf(x.dtype, x.shape) / x.shape[0];
    if (!runners_[d]->upload(in + r.offset, batch + x.offset + r.begin * row,
                             (r.end - r.begin) * row, &error))
      return false;
  }
  return true;
}

bool MultiDevice::step(const unsigned char* batch, const Hyper* hyper, StepMarks* marks,
                       std::string& error) {
  std::vector<StepBuffers> buffers;
  for (size_t d = 0; d < runners_.size(); ++d) {
    unsigned char* in = inputs_[d];
    if (!runners_[d]) { // another process's device
      buffers.push_back(StepBuffers{nullptr, nullptr, nullptr, hyper});
      continue;
    }
    if (runners_[d]->readsHostMemory()) { // the step reads the prepared batch where it is
      in = const_cast<unsigned char*>(batch);
    } else if (!uploadBatch(d, in, batch, error)) {
      error = "the batch to device " + std::to_string(d) + ": " + error;
      return false;
    }
    buffers.push_back(StepBuffers{arenas_[d], states_[d], in, hyper});
    buffers.back().marks = marks;
  }
  return group_->runStep(buffers, &error);
}

bool MultiDevice::downloadLossAsync(void* dst, std::string& error) {
  const size_t d = static_cast<size_t>(m_.lossDevice);
  if (!runners_[d])
    return true; // shareLoss brings it
  return runners_[d]->downloadAsync(dst, arenas_[d] + m_.lossOffset, dtypeSize(m_.lossType),
                                    &error);
}

bool MultiDevice::downloadParamAsync(int param, void* dst, int64_t bytes, std::string& error) {
  for (const ParamPlacement& pl : m_.placements)
    if (pl.param == param && pl.shardDim < 0 && runners_[static_cast<size_t>(pl.device)]) {
      const size_t d = static_cast<size_t>(pl.device);
      return runners_[d]->downloadAsync(dst, states_[d] + pl.offset, bytes, &error);
    }
  return true;
}

bool MultiDevice::shareLoss(void* loss, std::string& error) {
  if (!cluster_)
    return true;
  const size_t bytes = static_cast<size_t>(dtypeSize(m_.lossType));
  const int owner = rankOf(m_.lossDevice);
  std::vector<unsigned char> value(bytes);
  if (owner == cluster_->rank()) {
    std::memcpy(value.data(), loss, bytes);
    for (int q = 0; q < cluster_->size(); ++q)
      if (q != owner)
        cluster_->send(q, Cluster::kLoss, value);
    return true;
  }
  if (!cluster_->receive(owner, Cluster::kLoss, value, &error) || value.size() != bytes) {
    error = "the loss from rank " + std::to_string(owner) + ": " +
            (error.empty() ? "a message of the wrong size" : error);
    return false;
  }
  std::memcpy(loss, value.data(), bytes);
  return true;
}

bool MultiDevice::fence(int64_t* id, std::string& error) {
  std::vector<int64_t> ids(runners_.size(), -1);
  for (size_t d = 0; d < runners_.size(); ++d)
    if (runners_[d] && !runners_[d]->fence(&ids[d], &error))
      return false;
  *id = nextFence_++;
  fences_[*id] = std::move(ids);
  return true;
}

bool MultiDevice::waitFence(int64_t id, std::string& error) {
  auto it = fences_.find(id);
  if (it == fences_.end())
    return true; // waited for already
  for (size_t d = 0; d < runners_.size(); ++d)
    if (runners_[d] && !runners_[d]->waitFence(it->second[d], &error))
      return false;
  fences_.erase(fences_.begin(), std::next(it)); // the earlier ones have passed too
  return true;
}

bool MultiDevice::downloadOutput(const OutputInfo& o, void* dst, std::string& error) {
  const size_t d = static_cast<size_t>(o.device);
  const int64_t bytes = bytesOf(o.dtype, o.shape);
  const int owner = cluster_ ? rankOf(o.device) : 0, me = cluster_ ? cluster_->rank() : 0;
  if (owner == me) {
    if (!runners_[d]->download(dst, arenas_[d] + o.offset, bytes, &error))
      return false;
    if (me != 0)
      cluster_->send(0, Cluster::kGather,
                     std::vector<unsigned char>(static_cast<unsigned char*>(dst),
                                                static_cast<unsigned char*>(dst) + bytes));
    return true;
  }
  if (me != 0)
    return true; // rank 0 gathers it
  std::vector<unsigned char> value;
  if (!cluster_->receive(owner, Cluster::kGather, value, &error) ||
      static_cast<int64_t>(value.size()) != bytes) {
    error = "output '" + o.name + "' from rank " + std::to_string(owner) + ": " +
            (error.empty() ? "a message of the wrong size" : error);
    return false;
  }
  std::memcpy(dst, value.data(), value.size());
  return true;
}

std::string MultiDevice::takeDeviceError() {
  for (size_t d = 0; d < runners_.size(); ++d) {
    std::string e = runners_[d] ? runners_[d]->takeDeviceError() : "";
    if (!e.empty())
      return "device " + std::to_string(d) + ": " + e;
  }
  return "";
}

std::string MultiDevice::description() const {
  std::string s = std::to_string(numDevices()) + (numDevices() == 1 ? " device" : " devices");
  if (cluster_)
    s += ", " + std::to_string(local_.count) + " in each of " + std::to_string(cluster_->size()) +
         " processes";
  if (m_.target == "cuda") {
    std::vector<int> mine(physical_.begin() + local_.first,
                          physical_.begin() + local_.first + local_.count);
    std::string gpus = mine.size() == 1 ? "GPU " : "GPUs ";
    s += cluster_ ? ", rank 0's on " + gpus + joined(mine) : " on " + gpus + joined(mine);
  }
  std::string notes = group_ ? group_->notes() : "";
  return s + " (" + runners_[static_cast<size_t>(local_.first)]->description() +
         (notes.empty() ? "" : "; " + notes) + ")";
}

} // namespace lwrt
