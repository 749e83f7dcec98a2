// What the CPU group's communication ops compute (cpu/CommOps.h): each op
// over its participants' views, writing this process's receivers, and the
// messages that carry other processes' inputs.
#include "cpu/CommOps.h"

#include "cpu/Bf16.h"

#include <algorithm>
#include <cstring>

namespace lwrt::cpu {

namespace {

bool isSumType(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::BF16 || t == DType::F16;
}

bool usable(const TensorView& v) { return v.data != nullptr || v.numel() == 0; }

bool sameType(const TensorView& a, const TensorView& b) {
  return a.dtype == b.dtype && a.shape == b.shape;
}

/// `whole` with dim `axis` set to `rows`.
std::vector<int64_t> withDim(std::vector<int64_t> whole, int64_t axis, int64_t rows) {
  whole[static_cast<size_t>(axis)] = rows;
  return whole;
}

/// Copies `rows` entries of dim `axis` from `src` (from entry srcRow) to
/// `dst` (from entry dstRow); the other dims are those of `src`.
void copyRows(const unsigned char* src, const std::vector<int64_t>& srcShape, int64_t srcRow,
              unsigned char* dst, int64_t dstRows, int64_t dstRow, int64_t axis, int64_t rows,
              int64_t elemBytes) {
  int64_t outer = 1, inner = elemBytes;
  for (int64_t d = 0; d < axis; ++d)
    outer *= srcShape[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < srcShape.size(); ++d)
    inner *= srcShape[d];
  const int64_t srcRows = srcShape[static_cast<size_t>(axis)];
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + (o * dstRows + dstRow) * inner, src + (o * srcRows + srcRow) * inner,
                static_cast<size_t>(rows * inner));
}

/// Into `sum`: the element-wise sum of `views` in their order (the first
/// one copied, the others added), as the reference interpreter adds.
template <typename T> void sumViews(const std::vector<const TensorView*>& views, T* sum) {
  const int64_t n = views[0]->numel();
  const T* first = views[0]->as<const T>();
  for (int64_t i = 0; i < n; ++i)
    sum[i] = first[i];
  for (size_t v = 1; v < views.size(); ++v) {
    const T* x = views[v]->as<const T>();
    for (int64_t i = 0; i < n; ++i)
      sum[i] += x[i];
  }
}

std::vector<unsigned char> sumOf(const std::vector<const TensorView*>& views) {
  std::vector<unsigned char> sum(static_cast<size_t>(views[0]->bytes()));
  const DType t = views[0]->dtype;
  if (t == DType::F32) {
    sumViews(views, reinterpret_cast<float*>(sum.data()));
  } else if (t == DType::F64) {
    sumViews(views, reinterpret_cast<double*>(sum.data()));
  } else {
    // bf16, fp16: widened, summed in float32 in order and rounded once (the
    // interpreter sums exactly and rounds through float32 alike).
    detail::Float32Views f;
    std::vector<const TensorView*> wide;
    for (const TensorView* v : views)
      wide.push_back(&f.in(*v));
    const TensorView out{sum.data(), t, views[0]->shape, views[0]->layout};
    sumViews(wide, f.out(out).as<float>());
    f.commit();
  }
  return sum;
}

void copyOut(const std::vector<unsigned char>& bytes, const TensorView& out) {
  if (!bytes.empty())
    std::memcpy(out.data, bytes.data(), bytes.size());
}

/// The single `in` view of each of `devices`; false when one is missing.
bool inputsOf(const Parts& parts, const std::vector<int64_t>& devices,
              std::vector<const TensorView*>& views) {
  views.clear();
  for (int64_t d : devices) {
    const Part* p = parts[static_cast<size_t>(d)];
    if (!p || !p->hasIn || p->in.size() != 1 || !usable(p->in[0]))
      return false;
    views.push_back(&p->in[0]);
  }
  return true;
}

/// The single `out` view of each local one of `devices` (those of other
/// processes have no part, or a remote one), and its index in `devices`;
/// false when one is missing.
bool localOutputs(const Parts& parts, const std::vector<int64_t>& devices,
                  std::vector<const TensorView*>& views, std::vector<size_t>& index) {
  views.clear();
  index.clear();
  for (size_t i = 0; i < devices.size(); ++i) {
    const Part* p = parts[static_cast<size_t>(devices[i])];
    if (!p || !p->local)
      continue; // another process's: it writes its own
    if (!p->hasOut || p->out.size() != 1 || !usable(p->out[0]))
      return false;
    views.push_back(&p->out[0]);
    index.push_back(i);
  }
  return true;
}

/// Whether `piece` is entries sizes[i] of `axis` of `whole`.
bool isPiece(const Signature& s, size_t i, const TensorView& piece, const TensorView& whole) {
  return s.sizes[i] >= 0 && piece.dtype == whole.dtype &&
         piece.shape == withDim(whole.shape, s.axis, s.sizes[i]);
}

/// The axis and sizes of a split op fit `whole`: sizes add up to its dim.
bool splitFits(const Signature& s, const TensorView& whole) {
  if (s.sizes.size() != s.devices.size() || s.axis < 0 || s.axis >= whole.rank())
    return false;
  int64_t total = 0;
  for (int64_t n : s.sizes) {
    if (n < 0)
      return false;
    total += n;
  }
  return total == whole.shape[static_cast<size_t>(s.axis)];
}

/// The concatenation along the axis of `pieces` (sizes[i] long), shaped as `like`.
std::vector<unsigned char> concatenated(const Signature& s,
                                        const std::vector<const TensorView*>& pieces,
                                        const TensorView& like) {
  std::vector<unsigned char> all(static_cast<size_t>(like.bytes()));
  int64_t row = 0, rows = like.shape[static_cast<size_t>(s.axis)];
  for (size_t i = 0; i < pieces.size(); ++i) {
    copyRows(static_cast<const unsigned char*>(pieces[i]->data), pieces[i]->shape, 0, all.data(),
             rows, row, s.axis, s.sizes[i], dtypeSize(like.dtype));
    row += s.sizes[i];
  }
  return all;
}

/// Rows sizes[0] + ... + sizes[i-1] onwards of `whole` (bytes shaped as
/// `shape`) into each local output.
void scatter(const Signature& s, const unsigned char* whole, const std::vector<int64_t>& shape,
             DType t, const std::vector<const TensorView*>& outs,
             const std::vector<size_t>& index) {
  std::vector<int64_t> offset{0};
  for (int64_t n : s.sizes)
    offset.push_back(offset.back() + n);
  for (size_t k = 0; k < outs.size(); ++k) {
    const size_t i = index[k];
    if (outs[k]->numel() > 0)
      copyRows(whole, shape, offset[i], static_cast<unsigned char*>(outs[k]->data), s.sizes[i], 0,
               s.axis, s.sizes[i], dtypeSize(t));
  }
}

bool performAllReduce(const Signature& s, const Parts& parts) {
  const Part& first = *parts[static_cast<size_t>(s.devices[0])];
  const size_t k = first.in.size();
  for (int64_t d : s.devices) {
    const Part& p = *parts[static_cast<size_t>(d)];
    if (!p.hasIn || p.in.size() != k || (p.local && p.out.size() != k))
      return false;
    for (size_t t = 0; t < k; ++t)
      if (!isSumType(p.in[t].dtype) || !sameType(p.in[t], first.in[t]) || !usable(p.in[t]) ||
          (p.local && (!sameType(p.out[t], first.in[t]) || !usable(p.out[t]))))
        return false;
  }
  for (size_t t = 0; t < k; ++t) {
    std::vector<const TensorView*> ins;
    for (int64_t d : s.devices)
      ins.push_back(&parts[static_cast<size_t>(d)]->in[t]);
    std::vector<unsigned char> sum = sumOf(ins); // outputs may alias inputs
    for (int64_t d : s.devices)
      if (parts[static_cast<size_t>(d)]->local)
        copyOut(sum, parts[static_cast<size_t>(d)]->out[t]);
  }
  return true;
}

bool performAllGather(const Signature& s, const Parts& parts) {
  std::vector<const TensorView*> ins, outs;
  std::vector<size_t> index;
  if (!inputsOf(parts, s.devices, ins) || !localOutputs(parts, s.devices, outs, index) ||
      outs.empty())
    return false;
  const TensorView& whole = *outs[0];
  for (const TensorView* o : outs)
    if (!sameType(*o, whole))
      return false;
  if (!splitFits(s, whole))
    return false;
  for (size_t i = 0; i < ins.size(); ++i)
    if (!isPiece(s, i, *ins[i], whole))
      return false;
  std::vector<unsigned char> all = concatenated(s, ins, whole);
  for (const TensorView* o : outs)
    copyOut(all, *o);
  return true;
}

bool performReduceScatter(const Signature& s, const Parts& parts) {
  std::vector<const TensorView*> ins, outs;
  std::vector<size_t> index;
  if (!inputsOf(parts, s.devices, ins) || !localOutputs(parts, s.devices, outs, index))
    return false;
  for (const TensorView* in : ins)
    if (!isSumType(in->dtype) || !sameType(*in, *ins[0]))
      return false;
  const TensorView& whole = *ins[0];
  if (!splitFits(s, whole))
    return false;
  for (size_t k = 0; k < outs.size(); ++k)
    if (!isPiece(s, index[k], *outs[k], whole))
      return false;
  std::vector<unsigned char> sum = sumOf(ins);
  scatter(s, sum.data(), whole.shape, whole.dtype, outs, index);
  return true;
}

/// broadcast, device_copy: `in` on src to `out` on each local receiver.
bool performCopy(const Signature& s, const Parts& parts) {
  std::vector<const TensorView*> in, outs;
  std::vector<size_t> index;
  if (!inputsOf(parts, {s.src}, in) || !localOutputs(parts, s.devices, outs, index))
    return false;
  for (const TensorView* o : outs)
    if (!sameType(*o, *in[0]))
      return false;
  std::vector<unsigned char> bytes(static_cast<size_t>(in[0]->bytes()));
  if (!bytes.empty())
    std::memcpy(bytes.data(), in[0]->data, bytes.size());
  for (const TensorView* o : outs)
    copyOut(bytes, *o);
  return true;
}

bool performReduceTo(const Signature& s, const Parts& parts) {
  std::vector<const TensorView*> ins, out;
  std::vector<size_t> index;
  if (!inputsOf(parts, s.devices, ins) || !localOutputs(parts, {s.dst}, out, index) ||
      out.size() != 1)
    return false;
  for (const TensorView* in : ins)
    if (!isSumType(in->dtype) || !sameType(*in, *ins[0]))
      return false;
  if (!sameType(*out[0], *ins[0]))
    return false;
  copyOut(sumOf(ins), *out[0]);
  return true;
}

bool performShard(const Signature& s, const Parts& parts) {
  std::vector<const TensorView*> in, outs;
  std::vector<size_t> index;
  if (!inputsOf(parts, {s.src}, in) || !localOutputs(parts, s.devices, outs, index) ||
      !splitFits(s, *in[0]))
    return false;
  const TensorView& whole = *in[0];
  for (size_t k = 0; k < outs.size(); ++k)
    if (!isPiece(s, index[k], *outs[k], whole))
      return false;
  std::vector<unsigned char> bytes(static_cast<size_t>(whole.bytes())); // outputs may alias it
  if (!bytes.empty())
    std::memcpy(bytes.data(), whole.data, bytes.size());
  scatter(s, bytes.data(), whole.shape, whole.dtype, outs, index);
  return true;
}

bool performUnshard(const Signature& s, const Parts& parts) {
  std::vector<const TensorView*> ins, out;
  std::vector<size_t> index;
  if (!inputsOf(parts, s.devices, ins) || !localOutputs(parts, {s.dst}, out, index) ||
      out.size() != 1 || !splitFits(s, *out[0]))
    return false;
  const TensorView& whole = *out[0];
  for (size_t i = 0; i < ins.size(); ++i)
    if (!isPiece(s, i, *ins[i], whole))
      return false;
  copyOut(concatenated(s, ins, whole), whole);
  return true;
}

/// Appends the bytes of `v`.
template <typename T> void put(std::vector<unsigned char>& b, T v) {
  const size_t at = b.size(); // resize and copy: GCC 12 -O3 misreads insert here
  b.resize(at + sizeof(T));
  std::memcpy(b.data() + at, &v, sizeof(T));
}

/// Pads `b` to a multiple of 64 bytes: tensor data starts aligned.
void align(std::vector<unsigned char>& b) { b.resize((b.size() + 63) / 64 * 64, 0); }

} // namespace

std::vector<int64_t> Signature::participants() const {
  std::vector<int64_t> p = devices;
  if (src >= 0)
    p.push_back(src);
  if (dst >= 0)
    p.push_back(dst);
  std::sort(p.begin(), p.end());
  p.erase(std::unique(p.begin(), p.end()), p.end());
  return p;
}

std::vector<int64_t> Signature::senders() const {
  switch (kind) {
  case Kind::Broadcast:
  case Kind::DeviceCopy:
  case Kind::Shard:
    return {src};
  default:
    return devices;
  }
}

std::vector<int64_t> Signature::receivers() const {
  switch (kind) {
  case Kind::ReduceTo:
  case Kind::Unshard:
    return {dst};
  default: // device_copy's `devices` is {dst}
    return devices;
  }
}

uint64_t Signature::hash() const {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](int64_t v) {
    for (int k = 0; k < 8; ++k)
      h = (h ^ static_cast<uint64_t>((v >> (8 * k)) & 0xFF)) * 0x100000001b3ull;
  };
  mix(static_cast<int64_t>(kind));
  mix(static_cast<int64_t>(devices.size()));
  for (int64_t d : devices)
    mix(d);
  mix(src);
  mix(dst);
  mix(axis);
  mix(static_cast<int64_t>(sizes.size()));
  for (int64_t n : sizes)
    mix(n);
  return h;
}

std::string Signature::str() const {
  static const char* names[] = {"all_reduce", "all_gather",  "reduce_scatter", "broadcast",
                                "reduce_to",  "device_copy", "shard",          "unshard"};
  std::string s = names[static_cast<int>(kind)];
  s += " over devices ";
  for (size_t k = 0; k < devices.size(); ++k) {
    if (k)
      s += ','; // not `"," + ...`: a GCC 12 -O3 -Wrestrict false positive
    s += std::to_string(devices[k]);
  }
  if (src >= 0)
    s += " from " + std::to_string(src);
  if (dst >= 0)
    s += " to " + std::to_string(dst);
  return s;
}

bool perform(const Signature& s, const Parts& parts) {
  switch (s.kind) {
  case Kind::AllReduce:
    return performAllReduce(s, parts);
  case Kind::AllGather:
    return performAllGather(s, parts);
  case Kind::ReduceScatter:
    return performReduceScatter(s, parts);
  case Kind::Broadcast:
  case Kind::DeviceCopy:
    return performCopy(s, parts);
  case Kind::ReduceTo:
    return performReduceTo(s, parts);
  case Kind::Shard:
    return performShard(s, parts);
  case Kind::Unshard:
    return performUnshard(s, parts);
  }
  return false;
}

// A message: u64 signature hash, u64 parts; per part i64 device, u64 views;
// per view u64 dtype, u64 rank, i64 dims[rank], u64 bytes, then the data
// from the next multiple of 64 bytes, padded to one.
std::vector<unsigned char> packInputs(const Signature& s,
                                      const std::vector<std::pair<int64_t, const Part*>>& parts) {
  std::vector<unsigned char> b;
  put<uint64_t>(b, s.hash());
  put<uint64_t>(b, parts.size());
  for (const auto& [device, part] : parts) {
    put<int64_t>(b, device);
    put<uint64_t>(b, part->in.size());
    for (const TensorView& v : part->in) {
      put<uint64_t>(b, static_cast<uint64_t>(v.dtype));
      put<uint64_t>(b, v.shape.size());
      for (int64_t d : v.shape)
        put<int64_t>(b, d);
      put<uint64_t>(b, static_cast<uint64_t>(v.bytes()));
      align(b);
      const size_t at = b.size();
      b.resize(at + static_cast<size_t>(v.bytes()));
      if (v.bytes() > 0)
        std::memcpy(b.data() + at, v.data, static_cast<size_t>(v.bytes()));
      align(b);
    }
  }
  return b;
}

bool unpackInputs(const Signature& s, const std::vector<unsigned char>& bytes,
                  std::vector<std::pair<int64_t, Part>>& out, std::string* error) {
  size_t at = 0;
  bool ok = true;
  auto take = [&](auto& v) {
    if (!ok || at + sizeof(v) > bytes.size()) {
      ok = false;
      return;
    }
    std::memcpy(&v, bytes.data() + at, sizeof(v));
    at += sizeof(v);
  };
  auto bad = [&](const std::string& why) {
    if (error)
      *error = why;
    return false;
  };
  uint64_t hash = 0, count = 0;
  take(hash);
  take(count);
  if (!ok || hash != s.hash())
    return bad("the other process calls it with other attributes (not " + s.str() +
               "): the processes run different trainers");
  out.clear();
  for (uint64_t k = 0; ok && k < count; ++k) {
    int64_t device = -1;
    uint64_t views = 0;
    take(device);
    take(views);
    Part p;
    p.local = false;
    p.hasIn = true;
    for (uint64_t v = 0; ok && v < views && v < (1u << 20); ++v) {
      uint64_t dtype = 0, rank = 0, size = 0;
      take(dtype);
      take(rank);
      std::vector<int64_t> shape(rank < 16 ? rank : 0);
      for (int64_t& d : shape)
        take(d);
      take(size);
      at = (at + 63) / 64 * 64;
      if (!ok || rank >= 16 || dtype > static_cast<uint64_t>(DType::Bool) || at > bytes.size() ||
          size > bytes.size() - at)
        return bad("a malformed message");
      TensorView t{const_cast<unsigned char*>(bytes.data() + at), static_cast<DType>(dtype), shape};
      if (t.bytes() != static_cast<int64_t>(size))
        return bad("a malformed message");
      at = (at + size + 63) / 64 * 64;
      p.in.push_back(t);
    }
    out.emplace_back(device, std::move(p));
  }
  return ok ? true : bad("a malformed message");
}

} // namespace lwrt::cpu
