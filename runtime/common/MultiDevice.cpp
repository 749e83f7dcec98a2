// The devices of a multi-device trainer: runners, per-device buffers, the
// group, and the logical state image scattered to and gathered from the
// params' placements (replicas whole, shards a range of one dim).
#include "MultiDevice.h"

#include <algorithm>
#include <cstring>
#include <set>

namespace lwrt {

namespace {

int64_t bytesOf(DType t, const std::vector<int64_t>& shape) {
  int64_t n = dtypeSize(t);
  for (int64_t d : shape)
    n *= d;
  return n;
}

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
  if (n < 2)
    return "a multi-device trainer needs at least 2 devices, has " + std::to_string(n);
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
                    const std::vector<int>& physical, RunnerFactory createRunner,
                    GroupFactory createGroup, std::string& warning, std::string& error) {
  std::unique_ptr<MultiDevice> md(new MultiDevice(m));
  const int n = m.numDevices;
  md->runners_.push_back(first);
  md->physical_.push_back(physical.empty() ? options.device : physical[0]);
  int found = 1; // round-robin: the devices opened so far, 0 .. found - 1
  for (int d = 1; d < n; ++d) {
    RunnerOptions o = options;
    std::unique_ptr<StepRunner> r;
    if (!physical.empty()) {
      o.device = physical[static_cast<size_t>(d)];
      r = createRunner(o, &error);
      if (!r) {
        error = "logical device " + std::to_string(d) + " on device " + std::to_string(o.device) +
                ": " + error;
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
    md->physical_.push_back(o.device);
    md->runners_.push_back(r.get());
    md->owned_.push_back(std::move(r));
  }
  if (m.target == "cuda") {
    std::set<int> distinct(md->physical_.begin(), md->physical_.end());
    if (distinct.size() < md->physical_.size())
      warning = std::to_string(n) + " logical devices share " + std::to_string(distinct.size()) +
                " GPU" + (distinct.size() == 1 ? "" : "s") + " (devices " + joined(md->physical_) +
                "): transfers between them are local copies";
  }
  md->group_ = createGroup(m, md->runners_, &error);
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
  for (int d = 0; d < numDevices(); ++d) {
    Memory arena, state, inputs;
    if (!allocateOn(d, m_.deviceArenaBytes[static_cast<size_t>(d)], "arena", arena, error) ||
        !allocateOn(d, m_.deviceStateBytes[static_cast<size_t>(d)], "state", state, error))
      return false;
    if (!runners_[static_cast<size_t>(d)]->readsHostMemory() &&
        !allocateOn(d, m_.inputBytes, "inputs", inputs, error))
      return false;
    arenas_.push_back(arena.ptr);
    states_.push_back(state.ptr);
    inputs_.push_back(inputs.ptr);
  }
  return true;
}

bool MultiDevice::upload(const unsigned char* hostState, std::string& error) {
  std::vector<unsigned char> piece;
  for (const ParamPlacement& pl : m_.placements) {
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
    if (!r->upload(states_[static_cast<size_t>(pl.device)] + pl.offset, src, bytes, &error)) {
      error = "param '" + p.name + "' to device " + std::to_string(pl.device) + ": " + error;
      return false;
    }
  }
  return true;
}

bool MultiDevice::download(unsigned char* hostState, bool checkReplicas, std::string& error) {
  std::vector<bool> done(m_.params.size(), false);
  std::vector<unsigned char> piece;
  auto fetch = [&](const ParamPlacement& pl, int64_t bytes) {
    piece.assign(static_cast<size_t>(bytes), 0);
    StepRunner* r = runners_[static_cast<size_t>(pl.device)];
    if (!r->download(piece.data(), states_[static_cast<size_t>(pl.device)] + pl.offset, bytes,
                     &error)) {
      error = "param '" + m_.params[static_cast<size_t>(pl.param)].name + "' from device " +
              std::to_string(pl.device) + ": " + error;
      return false;
    }
    return true;
  };
  // Replicas first: the first one of each param is the param.
  std::vector<int> from(m_.params.size(), -1);
  for (const ParamPlacement& pl : m_.placements) {
    if (pl.shardDim >= 0)
      continue;
    const ParamInfo& p = m_.params[static_cast<size_t>(pl.param)];
    const int64_t bytes = bytesOf(p.dtype, p.shape);
    if (done[static_cast<size_t>(pl.param)] && !checkReplicas)
      continue;
    if (!fetch(pl, bytes))
      return false;
    if (!done[static_cast<size_t>(pl.param)]) {
      std::memcpy(hostState + p.offset, piece.data(), piece.size());
      done[static_cast<size_t>(pl.param)] = true;
      from[static_cast<size_t>(pl.param)] = pl.device;
    } else if (std::memcmp(hostState + p.offset, piece.data(), piece.size()) != 0) {
      error = "param '" + p.name + "': the replica on device " + std::to_string(pl.device) +
              " differs from the one on device " +
              std::to_string(from[static_cast<size_t>(pl.param)]);
      return false;
    }
  }
  for (const ParamPlacement& pl : m_.placements) {
    if (pl.shardDim < 0 || done[static_cast<size_t>(pl.param)])
      continue;
    const ParamInfo& p = m_.params[static_cast<size_t>(pl.param)];
    if (!fetch(pl, bytesOf(p.dtype, placedShape(p, pl))))
      return false;
    copyShard(hostState + p.offset, piece.data(), p.shape, dtypeSize(p.dtype), pl.shardDim,
              pl.shardBegin, pl.shardSize, false);
  }
  return true;
}

bool MultiDevice::init(const Hyper* hyper, std::string& error) {
  for (size_t d = 0; d < m_.deviceInit.size(); ++d) {
    PhaseFn fn = m_.deviceInit[d];
    if (!fn)
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

bool MultiDevice::step(const unsigned char* batch, const Hyper* hyper, StepMarks* marks,
                       std::string& error) {
  std::vector<StepBuffers> buffers;
  for (size_t d = 0; d < runners_.size(); ++d) {
    unsigned char* in = inputs_[d];
    if (!in) { // the step reads the prepared batch where it is
      in = const_cast<unsigned char*>(batch);
    } else if (!runners_[d]->upload(in, batch, m_.inputBytes, &error)) {
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
  return runners_[d]->downloadAsync(dst, arenas_[d] + m_.lossOffset, dtypeSize(m_.lossType),
                                    &error);
}

bool MultiDevice::fence(int64_t* id, std::string& error) {
  std::vector<int64_t> ids(runners_.size());
  for (size_t d = 0; d < runners_.size(); ++d)
    if (!runners_[d]->fence(&ids[d], &error))
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
    if (!runners_[d]->waitFence(it->second[d], &error))
      return false;
  fences_.erase(fences_.begin(), std::next(it)); // the earlier ones have passed too
  return true;
}

bool MultiDevice::downloadOutput(const OutputInfo& o, void* dst, std::string& error) {
  const size_t d = static_cast<size_t>(o.device);
  return runners_[d]->download(dst, arenas_[d] + o.offset, bytesOf(o.dtype, o.shape), &error);
}

std::string MultiDevice::takeDeviceError() {
  for (size_t d = 0; d < runners_.size(); ++d) {
    std::string e = runners_[d]->takeDeviceError();
    if (!e.empty())
      return "device " + std::to_string(d) + ": " + e;
  }
  return "";
}

std::string MultiDevice::description() const {
  std::string s = std::to_string(numDevices()) + " devices";
  if (m_.target == "cuda")
    s += " on GPUs " + joined(physical_);
  std::string notes = group_ ? group_->notes() : "";
  return s + " (" + runners_[0]->description() + (notes.empty() ? "" : "; " + notes) + ")";
}

} // namespace lwrt
