//===- CommOps.cpp - Communication ops: shapes, placement, gradients ------===//
//
// The collectives and transfers of Ops.def's COMM_OP rows. They are ordinary
// ops: the interpreter runs them (interp/CommOps.cpp), autodiff differentiates
// through them with the rules below, and the verifier checks that each
// operand lives where the op's placement rule says.
//
// Gradients pair up: all_reduce with itself, all_gather with reduce_scatter,
// broadcast with reduce_to, shard with unshard, device_copy with the copy
// back. A result that receives no gradient counts as zeros on its device.
//
//===----------------------------------------------------------------------===//
#include "ir/GradRules.h"
#include "ir/OpTable.h"

#include "llvm/Support/FormatVariadic.h"

#include <numeric>
#include <set>

namespace lwcc {

namespace {

template <typename... Args> llvm::Error fail(const char* fmt, Args&&... args) {
  return makeError(llvm::formatv(fmt, std::forward<Args>(args)...).str());
}

const TensorType& ty(const Op& op, unsigned i) { return op.operand(i)->type(); }

int64_t numDevices(const Op& op) { return static_cast<int64_t>(op.getInts("devices").size()); }

/// Operands that must all have operand #0's type, for ops of one tensor per device.
llvm::Error expectOnePerDevice(const Op& op) {
  if (static_cast<int64_t>(op.numOperands()) != numDevices(op))
    return fail("has {0} operands for {1} devices (one per device)", op.numOperands(),
                numDevices(op));
  return llvm::Error::success();
}

llvm::Error expectSameType(const Op& op, unsigned i, unsigned j) {
  if (ty(op, i) != ty(op, j))
    return fail("operand #{0} {1} differs from operand #{2} {3}", i, ty(op, i).str(), j,
                ty(op, j).str());
  return llvm::Error::success();
}

llvm::Expected<int64_t> axisOf(const Op& op, int64_t rank) {
  int64_t axis = op.getInt("axis");
  if (axis < 0 || axis >= rank)
    return fail("axis {0} is out of range for rank {1}", axis, rank);
  return axis;
}

/// `sizes` must have one entry per device, each >= 0, summing to `total`.
llvm::Error expectSizes(const Op& op, int64_t total) {
  const auto& sizes = op.getInts("sizes");
  if (static_cast<int64_t>(sizes.size()) != numDevices(op))
    return fail("'sizes' has {0} entries for {1} devices", sizes.size(), numDevices(op));
  int64_t sum = 0;
  for (int64_t s : sizes) {
    if (s < 0)
      return fail("'sizes' entries must be >= 0, got {0}", s);
    sum += s;
  }
  if (sum != total)
    return fail("'sizes' add up to {0}, but the split dim has {1}", sum, total);
  return llvm::Error::success();
}

TensorType withDim(TensorType t, int64_t axis, int64_t size) {
  t.shape[axis] = size;
  return t;
}

/// One float tensor per device, all of operand #0's type: what a sum takes.
llvm::Error expectSummands(const Op& op) {
  if (llvm::Error e = expectOnePerDevice(op))
    return e;
  for (unsigned i = 1; i < op.numOperands(); ++i)
    if (llvm::Error e = expectSameType(op, 0, i))
      return e;
  if (!isFloat(ty(op, 0).dtype))
    return fail("sums float tensors, got {0}", ty(op, 0).str());
  return llvm::Error::success();
}

/// Operand #0 cut along `axis` into the pieces `sizes` gives.
llvm::Expected<std::vector<TensorType>> cutBySizes(const Op& op) {
  auto axis = axisOf(op, ty(op, 0).rank());
  if (!axis)
    return axis.takeError();
  if (llvm::Error e = expectSizes(op, ty(op, 0).shape[*axis]))
    return e;
  std::vector<TensorType> out;
  for (int64_t s : op.getInts("sizes"))
    out.push_back(withDim(ty(op, 0), *axis, s));
  return out;
}

} // namespace

//===--- Shape rules ------------------------------------------------------===//

namespace shape {

Rule allReduce(const Op& op) {
  int64_t p = numDevices(op);
  if (p == 0 || op.numOperands() % p != 0)
    return fail("has {0} operands, not a multiple of its {1} devices", op.numOperands(), p);
  std::vector<TensorType> out;
  for (unsigned i = 0; i < op.numOperands(); ++i) {
    if (llvm::Error e = expectSameType(op, i - i % p, i))
      return e;
    if (!isFloat(ty(op, i).dtype))
      return fail("sums float tensors, got {0}", ty(op, i).str());
    out.push_back(ty(op, i));
  }
  return out;
}

Rule allGather(const Op& op) {
  if (llvm::Error e = expectOnePerDevice(op))
    return e;
  auto axis = axisOf(op, ty(op, 0).rank());
  if (!axis)
    return axis.takeError();
  TensorType whole = ty(op, 0);
  for (unsigned i = 1; i < op.numOperands(); ++i) {
    const TensorType& t = ty(op, i);
    bool same = t.dtype == whole.dtype && t.rank() == whole.rank();
    for (int64_t d = 0; same && d < t.rank(); ++d)
      same = d == *axis || t.shape[d] == whole.shape[d];
    if (!same)
      return fail("operand #{0} {1} does not match operand #0 {2} outside axis {3}", i, t.str(),
                  ty(op, 0).str(), *axis);
    whole.shape[*axis] += t.shape[*axis];
  }
  return std::vector<TensorType>(op.numOperands(), whole);
}

Rule reduceScatter(const Op& op) {
  if (llvm::Error e = expectSummands(op))
    return e;
  return cutBySizes(op);
}

Rule broadcastTo(const Op& op) {
  return std::vector<TensorType>(op.getInts("devices").size(), ty(op, 0));
}

Rule reduceTo(const Op& op) {
  if (llvm::Error e = expectSummands(op))
    return e;
  return std::vector<TensorType>{ty(op, 0)};
}

Rule shard(const Op& op) { return cutBySizes(op); }

Rule unshard(const Op& op) {
  auto parts = allGather(op);
  if (!parts)
    return parts.takeError();
  return std::vector<TensorType>{parts->front()};
}

} // namespace shape

//===--- Verify hook and placement ----------------------------------------===//

llvm::Error verify::comm(const Op& op) {
  const Annotations& a = op.annotations();
  if (a.device || a.par)
    return makeError("takes no @dev or @par: its attributes place its operands and results");
  if (const OpInfo& info = op.info(); info.findAttr("devices")) {
    const auto& devs = op.getInts("devices");
    if (devs.empty())
      return makeError("'devices' is empty");
    std::set<int64_t> unique(devs.begin(), devs.end());
    if (unique.size() != devs.size())
      return makeError("'devices' lists a device twice");
    if (*unique.begin() < 0)
      return makeError("device ids must be >= 0");
    if (static_cast<int64_t>(op.numResults()) !=
        (op.kind() == OpKind::ReduceTo || op.kind() == OpKind::Unshard
             ? 1
             : (op.kind() == OpKind::AllReduce ? static_cast<int64_t>(op.numOperands())
                                               : numDevices(op))))
      return makeError(
          llvm::formatv("has {0} results for {1} devices", op.numResults(), numDevices(op)).str());
  }
  for (const char* key : {"src", "dst"})
    if (op.info().findAttr(key) && op.getInt(key) < 0)
      return makeError(std::string("'") + key + "' must be >= 0");
  return llvm::Error::success();
}

int64_t place::perDevice(const Op& op, bool, unsigned index) {
  const auto& devs = op.getInts("devices");
  return devs[index % devs.size()];
}

int64_t place::fromSrc(const Op& op, bool result, unsigned index) {
  return result ? op.getInts("devices")[index] : op.getInt("src");
}

int64_t place::toDst(const Op& op, bool result, unsigned index) {
  return result ? op.getInt("dst") : op.getInts("devices")[index];
}

int64_t place::copy(const Op& op, bool result, unsigned) {
  return op.getInt(result ? "dst" : "src");
}

int64_t commBytes(const Op& op) {
  if (!op.info().isCommunication())
    return 0;
  auto bytes = [](const Value* v) { return v->type().sizeInBytes(); };
  int64_t p = op.info().findAttr("devices") ? numDevices(op) : 1;
  int64_t total = 0;
  switch (op.kind()) {
  case OpKind::AllReduce:
    // Reduce-scatter then all-gather around the ring: each device sends
    // 2(p-1) chunks of 1/p of its tensor.
    for (unsigned i = 0; i < op.numOperands(); i += static_cast<unsigned>(p))
      total += 2 * (p - 1) * bytes(op.operand(i));
    return total;
  case OpKind::AllGather:
    // Each device receives every shard but its own.
    for (Value* v : op.operands())
      total += (p - 1) * bytes(v);
    return total;
  case OpKind::ReduceScatter:
    // Each device receives the other devices' parts of its slice.
    for (unsigned i = 0; i < op.numResults(); ++i)
      total += (p - 1) * bytes(op.result(i));
    return total;
  case OpKind::Broadcast:
  case OpKind::ReduceTo:
    // To (from) every device but the root.
    for (unsigned i = 0; i < static_cast<unsigned>(p); ++i)
      if (op.getInts("devices")[i] != op.getInt(op.kind() == OpKind::Broadcast ? "src" : "dst"))
        total += bytes(op.kind() == OpKind::Broadcast ? op.operand(0) : op.result(0));
    return total;
  case OpKind::DeviceCopy:
    return op.getInt("src") == op.getInt("dst") ? 0 : bytes(op.result(0));
  case OpKind::Shard:
    for (unsigned i = 0; i < op.numResults(); ++i)
      if (op.getInts("devices")[i] != op.getInt("src"))
        total += bytes(op.result(i));
    return total;
  case OpKind::Unshard:
    for (unsigned i = 0; i < op.numOperands(); ++i)
      if (op.getInts("devices")[i] != op.getInt("dst"))
        total += bytes(op.operand(i));
    return total;
  default:
    return 0;
  }
}

//===--- Gradient rules ---------------------------------------------------===//

namespace {

/// dys[i], or zeros of result i's type on its device when none flows there.
std::vector<Value*> gradsOrZeros(GradContext& c) {
  std::vector<Value*> out;
  for (unsigned i = 0; i < c.op.numResults(); ++i) {
    if (c.dy(i)) {
      out.push_back(c.dy(i));
      continue;
    }
    std::optional<int64_t> saved = c.builder.device();
    c.builder.setDevice(c.op.info().placement(c.op, true, i));
    Value* z = c.builder
                   .create(OpKind::Constant, {}, {c.y(i)->type()},
                           {{"value", Attribute(std::vector<double>{0.0})}})
                   ->result();
    c.builder.setDevice(saved);
    out.push_back(z);
  }
  return out;
}

llvm::Error setAll(GradContext& c, llvm::Expected<std::vector<Value*>> dxs) {
  if (!dxs)
    return dxs.takeError();
  for (unsigned i = 0; i < c.op.numOperands(); ++i)
    if (c.need(i))
      c.dxs[i] = (*dxs)[i];
  return llvm::Error::success();
}

std::vector<int64_t> operandSizes(const Op& op, int64_t axis) {
  std::vector<int64_t> sizes;
  for (Value* v : op.operands())
    sizes.push_back(v->type().shape[axis]);
  return sizes;
}

} // namespace

namespace grad {

// y_i = sum_j x_j on every device i, so dx_j = sum_i dy_i: an all_reduce.
llvm::Error allReduce(GradContext& c) {
  return setAll(c, c.emitN(OpKind::AllReduce, gradsOrZeros(c),
                           {{"devices", Attribute(c.op.getInts("devices"))}}, c.op.numOperands()));
}

// y_i = concat_j x_j, so dx_j = slice j of sum_i dy_i: a reduce_scatter.
llvm::Error allGather(GradContext& c) {
  int64_t axis = c.op.getInt("axis");
  return setAll(c, c.emitN(OpKind::ReduceScatter, gradsOrZeros(c),
                           {{"devices", Attribute(c.op.getInts("devices"))},
                            {"axis", Attribute(axis)},
                            {"sizes", Attribute(operandSizes(c.op, axis))}},
                           c.op.numOperands()));
}

// y_i = slice i of sum_j x_j, so dx_j = concat_i dy_i: an all_gather.
llvm::Error reduceScatter(GradContext& c) {
  return setAll(c, c.emitN(OpKind::AllGather, gradsOrZeros(c),
                           {{"devices", Attribute(c.op.getInts("devices"))},
                            {"axis", Attribute(c.op.getInt("axis"))}},
                           c.op.numOperands()));
}

// y_i = x on every device, so dx = sum_i dy_i on src: a reduce_to.
llvm::Error broadcastTo(GradContext& c) {
  auto dx = c.emitN(
      OpKind::ReduceTo, gradsOrZeros(c),
      {{"devices", Attribute(c.op.getInts("devices"))}, {"dst", Attribute(c.op.getInt("src"))}}, 1);
  return setAll(c, std::move(dx));
}

// y = sum_j x_j on dst, so dx_j = dy on every device: a broadcast.
llvm::Error reduceTo(GradContext& c) {
  return setAll(c, c.emitN(OpKind::Broadcast, {c.dy()},
                           {{"src", Attribute(c.op.getInt("dst"))},
                            {"devices", Attribute(c.op.getInts("devices"))}},
                           c.op.numOperands()));
}

llvm::Error deviceCopy(GradContext& c) {
  return setAll(
      c,
      c.emitN(OpKind::DeviceCopy, {c.dy()},
              {{"src", Attribute(c.op.getInt("dst"))}, {"dst", Attribute(c.op.getInt("src"))}}, 1));
}

// y_i = slice i of x, so dx = concat_i dy_i on src: an unshard.
llvm::Error shard(GradContext& c) {
  return setAll(c, c.emitN(OpKind::Unshard, gradsOrZeros(c),
                           {{"devices", Attribute(c.op.getInts("devices"))},
                            {"dst", Attribute(c.op.getInt("src"))},
                            {"axis", Attribute(c.op.getInt("axis"))}},
                           1));
}

// y = concat_j x_j on dst, so dx_j = slice j of dy on device j: a shard.
llvm::Error unshard(GradContext& c) {
  int64_t axis = c.op.getInt("axis");
  return setAll(c, c.emitN(OpKind::Shard, {c.dy()},
                           {{"src", Attribute(c.op.getInt("dst"))},
                            {"devices", Attribute(c.op.getInts("devices"))},
                            {"axis", Attribute(axis)},
                            {"sizes", Attribute(operandSizes(c.op, axis))}},
                           c.op.numOperands()));
}

} // namespace grad

} // namespace lwcc
