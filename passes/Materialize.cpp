//===- Materialize.cpp - Per-device shard ops and their communication -----===//
#include "ir/Params.h"
#include "passes/Pass.h"
#include "passes/PassOptions.h"
#include "passes/ShardLayout.h"
#include "passes/TrainingSupport.h"

#include "llvm/Support/FormatVariadic.h"

#include <map>
#include <set>
#include <unordered_map>

namespace lwcc {

namespace {

using shard::Layout;
using shard::splitEven;
using shard::splitSized;
using shard::wholeOn;

class Materializer {
public:
  Materializer(Graph& g, bool fsdp, int64_t minBytes) : g_(g), b_(g) {
    if (fsdp)
      for (Value* p : trainableParams(g))
        if (p->type().sizeInBytes() >= minBytes)
          fsdp_.insert(p);
    for (const auto& v : g.inputs())
      names_.insert(v->name());
    for (const auto& v : g.params())
      names_.insert(v->name());
    for (const auto& op : g.ops())
      for (unsigned i = 0; i < op->numResults(); ++i)
        names_.insert(op->result(i)->name());
  }

  llvm::Error run() {
    std::vector<Op*> original;
    for (auto& op : g_.ops())
      original.push_back(op.get());
    for (Op* op : original) {
      b_.setInsertionPointBefore(op);
      b_.setLoc(op->loc());
      // What an op of a micro-batch needs (its shards, the slices and
      // transfers of its operands) belongs to that micro-batch.
      b_.setMicroBatch(op->annotations().microBatch);
      if (op->kind() == OpKind::Constant)
        continue; // placed where it is read
      if (llvm::Error e = op->kind() == OpKind::Assign ? assign(*op) : materialize(*op))
        return e;
    }
    b_.setInsertionPointToEnd();
    b_.setLoc({});
    b_.setMicroBatch(std::nullopt);
    for (unsigned i = 0; i < g_.outputs().size(); ++i) {
      auto pieces = realize(g_.outputs()[i], wholeOn({0}));
      if (!pieces)
        return pieces.takeError();
      g_.setOutput(i, (*pieces)[0]);
    }
    for (auto it = original.rbegin(); it != original.rend(); ++it) {
      (*it)->dropOperands();
      g_.eraseOp(*it);
    }
    return llvm::Error::success();
  }

private:
  struct Dist {
    Layout layout;
    std::vector<Value*> pieces;
  };

  std::string freshName(const std::string& base, int64_t device) {
    if (base.empty())
      return "";
    std::string n = base + ".d" + std::to_string(device);
    for (int k = 1; !names_.insert(n); ++k)
      n = base + ".d" + std::to_string(device) + "." + std::to_string(k);
    return n;
  }

  Value* scalar(double v, DType dtype, int64_t device) {
    b_.setDevice(device);
    Op* c = b_.create(OpKind::Constant, {}, {TensorType(dtype, {})},
                      {{"value", Attribute(std::vector<double>{v})}});
    return c->result();
  }

  llvm::Expected<Value*> emit(int64_t device, OpKind kind, const std::vector<Value*>& operands,
                              std::vector<NamedAttr> attrs = {}) {
    b_.setDevice(device);
    auto op = b_.createInferred(kind, operands, std::move(attrs));
    if (!op)
      return op.takeError();
    return (*op)->result();
  }

  llvm::Expected<std::vector<Value*>> emitComm(OpKind kind, const std::vector<Value*>& operands,
                                               std::vector<NamedAttr> attrs, unsigned results) {
    b_.setDevice(std::nullopt);
    auto op = b_.createInferred(kind, operands, std::move(attrs), results);
    if (!op)
      return op.takeError();
    std::vector<Value*> out;
    for (unsigned i = 0; i < (*op)->numResults(); ++i)
      out.push_back((*op)->result(i));
    return out;
  }

  llvm::Expected<Value*> sliceOf(Value* v, int64_t device, int64_t dim, int64_t offset,
                                 int64_t size) {
    if (offset == 0 && size == v->type().shape[dim])
      return v;
    return emit(device, OpKind::Slice, {v},
                {{"starts", Attribute(std::vector<int64_t>{offset})},
                 {"ends", Attribute(std::vector<int64_t>{offset + size})},
                 {"axes", Attribute(std::vector<int64_t>{dim})}});
  }

  /// The piece of param `p` on `device`: the whole tensor, or `size`
  /// entries of `shard->dim` from `shard->offset`.
  Value* paramPiece(Value* p, int64_t device, std::optional<ShardDim> shard, int64_t size = 0) {
    auto key = shard ? std::make_tuple(p, device, shard->dim, shard->offset, size)
                     : std::make_tuple(p, device, int64_t{-1}, int64_t{0}, int64_t{0});
    auto it = paramPieces_.find(key);
    if (it != paramPieces_.end())
      return it->second;
    Value* q = p;
    if (device != 0 || shard) {
      TensorType t = p->type();
      std::vector<ShardDim> sd;
      std::string base = p->name();
      if (shard) {
        t.shape[shard->dim] = size;
        sd.push_back(*shard);
        base += ".s" + std::to_string(shard->offset);
      }
      q = g_.addParam(freshName(base, device), p->paramName(), t);
      q->setLoc(p->loc());
      q->setZeroInit(p->zeroInit());
      q->setFrozen(p->frozen());
      q->setDevice(device);
      q->setShard(sd);
    }
    paramPieces_.emplace(key, q);
    piecesOf_[p].push_back(q);
    return q;
  }

  /// Whether param `p` read as `want` is kept as shares of its rows and
  /// gathered (shard=fsdp): a trained param read whole on several devices,
  /// with a row for each.
  bool fsdpGathers(const Value* p, const Layout& want) const {
    return fsdp_.count(p) && want.isWhole() && want.devices.size() > 1 && p->type().rank() >= 1 &&
           p->type().shape[0] >= static_cast<int64_t>(want.devices.size());
  }

  /// The pieces of `v` laid out as `want`.
  llvm::Expected<std::vector<Value*>> realize(Value* v, const Layout& want) {
    // Each micro-batch gathers a sharded param for its own readers: a
    // gather shared by the micro-batches would hold the whole param from
    // the first micro-batch's forward to the last one's.
    const bool gathers = v->kind() == ValueKind::Param && fsdpGathers(v, want);
    std::string wantKey = want.key();
    if (gathers && b_.microBatch())
      wantKey += "#" + std::to_string(*b_.microBatch());
    auto cached = cache_.find({v, wantKey});
    if (cached != cache_.end())
      return cached->second;
    std::vector<Value*> out;
    auto remember = [&](const Layout& l, std::vector<Value*> pieces) {
      cache_[{v, l.key()}] = std::move(pieces);
    };
    if (v->kind() == ValueKind::Param) {
      if (gathers) {
        // Sharded data parallelism: each device keeps an even share of the
        // rows; the readers get the whole param from an all_gather of them.
        Layout shares = splitEven(0, want.devices, v->type().shape[0]);
        std::vector<Value*> pieces;
        for (size_t i = 0; i < want.devices.size(); ++i)
          pieces.push_back(paramPiece(v, want.devices[i],
                                      ShardDim{0, shares.offsets[i], v->type().shape[0]},
                                      shares.sizes[i]));
        remember(shares, pieces);
        auto ag = emitComm(OpKind::AllGather, pieces,
                           {{"devices", Attribute(want.devices)}, {"axis", Attribute(int64_t{0})}},
                           static_cast<unsigned>(pieces.size()));
        if (!ag)
          return ag.takeError();
        cache_[{v, wantKey}] = *ag;
        return *ag;
      }
      for (size_t i = 0; i < want.devices.size(); ++i) {
        if (want.isSplit())
          out.push_back(paramPiece(v, want.devices[i],
                                   ShardDim{want.dim, want.offsets[i], v->type().shape[want.dim]},
                                   want.sizes[i]));
        else
          out.push_back(paramPiece(v, want.devices[i], std::nullopt));
      }
      remember(want, out);
      return out;
    }
    Dist src;
    if (v->kind() == ValueKind::Input) {
      // Host data: every device reads the rows it needs.
      src.layout = wholeOn(want.devices);
      src.pieces.assign(want.devices.size(), v);
    } else if (v->definingOp()->kind() == OpKind::Constant) {
      src.layout = wholeOn(want.devices);
      for (int64_t d : want.devices)
        src.pieces.push_back(constantOn(*v->definingOp(), d));
    } else {
      auto it = dist_.find(v);
      if (it == dist_.end())
        return makeError(v->loc(), "materialize: no layout for '%" + v->name() + "'");
      src = it->second;
    }
    // Pieces that the source already holds.
    auto direct = [&](const Layout& have, const std::vector<Value*>& pieces) {
      std::vector<Value*> found;
      for (size_t i = 0; i < want.devices.size(); ++i) {
        for (size_t j = 0; j < have.devices.size(); ++j) {
          if (have.devices[j] != want.devices[i] || have.partial || want.partial ||
              have.dim != want.dim ||
              (want.isSplit() &&
               (have.offsets[j] != want.offsets[i] || have.sizes[j] != want.sizes[i])))
            continue;
          found.push_back(pieces[j]);
          break;
        }
        if (found.size() != i + 1)
          return std::vector<Value*>{};
      }
      return found;
    };
    std::vector<Value*> pieces = src.pieces;
    Layout have = src.layout;
    if (auto found = direct(have, pieces); !found.empty())
      return found;
    // The value made whole on its devices by the collective `kind`, once:
    // every reader of the whole value shares it (where each device reads it
    // whole on its own, as a replicated running statistic's update does on
    // each, one collective, not one per device).
    auto wholeOnce = [&](OpKind kind, std::vector<NamedAttr> attrs) -> llvm::Error {
      const Layout whole = wholeOn(have.devices);
      if (auto done = cache_.find({v, whole.key()}); done != cache_.end()) {
        pieces = done->second;
      } else {
        auto made = emitComm(kind, pieces, std::move(attrs), pieces.size());
        if (!made)
          return made.takeError();
        pieces = *made;
        remember(whole, pieces);
      }
      have = whole;
      return llvm::Error::success();
    };
    if (have.partial) {
      std::vector<NamedAttr> devs{{"devices", Attribute(have.devices)}};
      if (want.isSplit() && want.devices == have.devices) {
        devs.push_back({"axis", Attribute(want.dim)});
        devs.push_back({"sizes", Attribute(want.sizes)});
        auto rs = emitComm(OpKind::ReduceScatter, pieces, devs, pieces.size());
        if (!rs)
          return rs.takeError();
        remember(want, *rs);
        return *rs;
      }
      if (want.isWhole() && want.devices.size() == 1) {
        devs.push_back({"dst", Attribute(want.devices[0])});
        auto r = emitComm(OpKind::ReduceTo, pieces, devs, 1);
        if (!r)
          return r.takeError();
        remember(want, *r);
        return *r;
      }
      if (llvm::Error e = wholeOnce(OpKind::AllReduce, devs))
        return e;
    } else if (have.isSplit() && want.isSplit() && want.dim == have.dim) {
      // Re-split along the same dim (halos, other sizes or devices): each
      // piece from the rows of the pieces it overlaps, copied across.
      for (size_t i = 0; i < want.devices.size(); ++i) {
        auto piece = gatherRows(pieces, have, want.devices[i], want.offsets[i], want.sizes[i]);
        if (!piece)
          return piece.takeError();
        out.push_back(*piece);
      }
      remember(want, out);
      return out;
    } else if (have.isSplit()) {
      if (llvm::Error e = wholeOnce(OpKind::AllGather, {{"devices", Attribute(have.devices)},
                                                        {"axis", Attribute(have.dim)}}))
        return e;
    }
    // Whole pieces: copy to the devices that lack one, then cut shards.
    for (size_t i = 0; i < want.devices.size(); ++i) {
      int64_t d = want.devices[i];
      Value* base = nullptr;
      for (size_t j = 0; j < have.devices.size() && !base; ++j)
        if (have.devices[j] == d)
          base = pieces[j];
      if (!base) {
        auto key = std::make_pair(v, "w:" + std::to_string(d));
        auto c = cache_.find(key);
        if (c != cache_.end()) {
          base = c->second[0];
        } else {
          auto copy = emitComm(OpKind::DeviceCopy, {pieces[0]},
                               {{"src", Attribute(have.devices[0])}, {"dst", Attribute(d)}}, 1);
          if (!copy)
            return copy.takeError();
          base = (*copy)[0];
          cache_[key] = {base};
        }
      }
      if (want.isSplit()) {
        auto s = sliceOf(base, d, want.dim, want.offsets[i], want.sizes[i]);
        if (!s)
          return s.takeError();
        base = *s;
      }
      out.push_back(base);
    }
    remember(want, out);
    return out;
  }

  /// Entries [offset, offset + size) along `have.dim` of a value split as
  /// `have`, on `device`: a slice of each piece that holds some of them,
  /// copied to `device` when it lives elsewhere, concatenated.
  llvm::Expected<Value*> gatherRows(const std::vector<Value*>& pieces, const Layout& have,
                                    int64_t device, int64_t offset, int64_t size) {
    std::vector<Value*> parts;
    for (size_t j = 0; j < have.devices.size(); ++j) {
      int64_t from = std::max(offset, have.offsets[j]);
      int64_t to = std::min(offset + size, have.offsets[j] + have.sizes[j]);
      if (from >= to)
        continue;
      auto part = sliceOf(pieces[j], have.devices[j], have.dim, from - have.offsets[j], to - from);
      if (!part)
        return part.takeError();
      Value* p = *part;
      if (have.devices[j] != device) {
        auto copy = emitComm(OpKind::DeviceCopy, {p},
                             {{"src", Attribute(have.devices[j])}, {"dst", Attribute(device)}}, 1);
        if (!copy)
          return copy.takeError();
        p = (*copy)[0];
      }
      parts.push_back(p);
    }
    if (parts.size() == 1)
      return parts[0];
    return emit(device, OpKind::Concat, parts, {{"axis", Attribute(have.dim)}});
  }

  Value* constantOn(const Op& c, int64_t device) {
    auto key = std::make_pair(&c, device);
    auto it = constants_.find(key);
    if (it != constants_.end())
      return it->second;
    b_.setDevice(device);
    std::vector<NamedAttr> attrs = c.attrs();
    Op* copy = b_.create(OpKind::Constant, {}, {c.result()->type()}, attrs);
    copy->setLoc(c.loc());
    copy->result()->setName(freshName(c.result()->name(), device));
    constants_[key] = copy->result();
    return copy->result();
  }

  /// The op's devices and split, from its @par (none: whole on device 0).
  llvm::Error configOf(const Op& op, std::vector<int64_t>& devices, std::optional<int64_t>& dim) {
    const auto& par = op.annotations().par;
    if (!par) {
      devices = {op.annotations().device.value_or(0)};
      return llvm::Error::success();
    }
    devices = par->devices;
    if (devices.empty())
      for (int64_t d = 0; d < par->totalDegree(); ++d)
        devices.push_back(d);
    const Value* split = parSplitValue(op);
    for (const auto& [name, degree] : par->degrees) {
      if (degree == 1)
        continue;
      if (dim)
        return op.emitError("materialize: splitting more than one dim is not supported yet");
      dim = parDimIndex(name, split->type().rank());
      if (!dim)
        return op.emitError("materialize: unknown dim '" + name + "'");
    }
    return llvm::Error::success();
  }

  llvm::Error materialize(Op& op) {
    std::vector<int64_t> devices;
    std::optional<int64_t> dim;
    if (llvm::Error e = configOf(op, devices, dim))
      return e;
    std::optional<SplitPlan> plan;
    Layout split;
    if (dim) {
      if (op.info().parallel)
        plan = op.info().parallel(op, *dim);
      if (!plan)
        return op.emitError(
            llvm::formatv("materialize: the op cannot be split along dim {0}", *dim));
      const Value* sv = parSplitValue(op);
      const std::vector<int64_t>& sizes = op.annotations().par->sizes;
      if (!sizes.empty() && sizes.size() != devices.size())
        return op.emitError("materialize: @par sizes do not match its devices");
      const int64_t g = plan->granule;
      if ((g > 1 &&
           splitUnits(*plan, sv->type().shape[*dim]) < static_cast<int64_t>(devices.size())) ||
          std::any_of(sizes.begin(), sizes.end(), [g](int64_t s) { return s % g != 0; }))
        return op.emitError(llvm::formatv("materialize: dim {0} splits in whole shares of {1} "
                                          "entries, too few for {2} devices or not the @par sizes",
                                          *dim, g, devices.size()));
      split = sizes.empty() ? splitEven(*dim, devices, sv->type().shape[*dim] / g)
                            : splitSized(*dim, devices, sizes);
      for (size_t i = 0; sizes.empty() && i < devices.size(); ++i) {
        split.offsets[i] *= g;
        split.sizes[i] *= g;
      }
      if (sizes.empty() && g == 1 && !plan->window)
        followShares(op, *plan, split);
      if (op.kind() == OpKind::BatchNormTrain && *dim == 0)
        return batchNormOverSamples(op, split);
      if (plan->partial == SplitPlan::Partial::LabelMean)
        return lossOverLabels(op, split);
    }
    // Each operand as the plan needs it.
    std::vector<std::vector<Value*>> operands;
    for (unsigned j = 0; j < op.numOperands(); ++j) {
      Layout want = wholeOn(devices);
      if (plan && plan->operandDims[j] >= 0) {
        want = split;
        want.dim = plan->operandDims[j];
        if (j == 0 && plan->window) // each device's rows and their halo
          for (size_t i = 0; i < devices.size(); ++i) {
            auto [first, last] = plan->window(split.offsets[i], split.offsets[i] + split.sizes[i]);
            want.offsets[i] = first;
            want.sizes[i] = last - first;
          }
      }
      auto pieces = realize(op.operand(j), want);
      if (!pieces)
        return pieces.takeError();
      operands.push_back(std::move(*pieces));
    }
    std::vector<Dist> results(op.numResults());
    for (unsigned r = 0; r < op.numResults(); ++r) {
      results[r].layout = wholeOn(devices);
      if (plan && plan->resultDims[r] >= 0) {
        results[r].layout = split;
        results[r].layout.dim = plan->resultDims[r];
      } else if (plan && plan->partial != SplitPlan::Partial::None) {
        results[r].layout.partial = true;
      }
    }
    for (size_t i = 0; i < devices.size(); ++i) {
      std::vector<Value*> ins;
      for (auto& o : operands)
        ins.push_back(o[i]);
      std::vector<TensorType> types;
      for (unsigned r = 0; r < op.numResults(); ++r) {
        TensorType t = op.result(r)->type();
        if (results[r].layout.isSplit())
          t.shape[results[r].layout.dim] = split.sizes[i];
        types.push_back(t);
      }
      b_.setDevice(devices[i]);
      Op* local = b_.create(op.kind(), ins, types, op.attrs());
      local->annotations().par = op.annotations().par; // kept for the plan's per-layer table
      if (plan && op.info().localize)
        op.info().localize(*local, op, *dim, split.offsets[i]);
      auto inferred = op.info().shapeRule(*local);
      if (!inferred)
        return op.emitError("materialize: a shard is invalid: " +
                            llvm::toString(inferred.takeError()));
      if (*inferred != types)
        return op.emitError("materialize: the shard on device " + std::to_string(devices[i]) +
                            " does not have the shape the split gives");
      for (unsigned r = 0; r < op.numResults(); ++r) {
        Value* y = local->result(r);
        y->setName(freshName(op.result(r)->name(), devices[i]));
        if (plan && plan->partial == SplitPlan::Partial::Mean && results[r].layout.partial) {
          // A mean over this device's share of the split dim, weighed by it.
          double share = static_cast<double>(split.sizes[i]) /
                         static_cast<double>(parSplitValue(op)->type().shape[*dim]);
          auto scaled =
              emit(devices[i], OpKind::Mul, {y, scalar(share, y->type().dtype, devices[i])});
          if (!scaled)
            return scaled.takeError();
          y = *scaled;
        }
        results[r].pieces.push_back(y);
      }
    }
    for (unsigned r = 0; r < op.numResults(); ++r)
      dist_[op.result(r)] = std::move(results[r]);
    return llvm::Error::success();
  }

  /// An even split of an op that reads an operand split along the dim the
  /// plan reads, on the same devices with other shares of the same size
  /// (those of a reshape that splits in whole samples, when the devices do
  /// not divide the batch evenly), takes the operand's shares: nothing
  /// moves between devices.
  void followShares(const Op& op, const SplitPlan& plan, Layout& split) const {
    const int64_t total = parSplitValue(op)->type().shape[static_cast<size_t>(split.dim)];
    for (unsigned j = 0; j < op.numOperands(); ++j) {
      auto it = dist_.find(op.operand(j));
      if (plan.operandDims[j] < 0 || it == dist_.end())
        continue;
      const Layout& have = it->second.layout;
      if (have.dim == plan.operandDims[j] && have.devices == split.devices &&
          op.operand(j)->type().shape[static_cast<size_t>(have.dim)] == total) {
        split.offsets = have.offsets;
        split.sizes = have.sizes;
        return;
      }
    }
  }

  /// batch_norm_train over a sample split, as a synchronized batch norm:
  /// each device computes its own share's statistics with one device's
  /// batch_norm_train kernel, the whole batch's mean and variance are
  /// combined from them by two all-reduces of per-channel values, and
  /// batch_norm normalizes each share with them. With m_i of the batch's m
  /// samples on device i, its mean mu_i and population variance v_i:
  ///   mean = sum_i (m_i / m) mu_i
  ///   var  = sum_i (m_i / m) (v_i + (mu_i - mean)^2)
  /// (the variance of a union from its parts' moments, with no difference
  /// of large sums: one device's two passes up to float reassociation).
  /// Only per-channel values cross devices and, differentiated, the
  /// backward's per-channel sums; every pass over the activations is one
  /// device's kernel or elementwise ops the fuse pass joins.
#define TRY_V(var, expr)                                                                           \
  auto var##_ = (expr);                                                                            \
  if (!var##_)                                                                                     \
    return var##_.takeError();                                                                     \
  Value* var = *var##_;
  llvm::Error batchNormOverSamples(Op& op, const Layout& split) {
    const std::vector<int64_t>& devices = split.devices;
    auto x = realize(op.operand(0), split);
    if (!x)
      return x.takeError();
    auto scale = realize(op.operand(1), wholeOn(devices));
    if (!scale)
      return scale.takeError();
    auto bias = realize(op.operand(2), wholeOn(devices));
    if (!bias)
      return bias.takeError();
    const TensorType& xt = op.operand(0)->type();
    // A 16-bit x (mixed precision) has its statistics computed from a
    // float32 copy (their gradient is made in one type); batch_norm
    // normalizes x itself with float32 statistics and rounds y once, as
    // one device's kernel does.
    const DType low = xt.dtype, dt = channelDType(low);
    const double epsilon = op.getFloat("epsilon");
    std::vector<NamedAttr> devs{{"devices", Attribute(devices)}};
    size_t p = devices.size();
    std::vector<Value*> localMeans, localVars, shares, weighted;
    for (size_t i = 0; i < p; ++i) {
      int64_t d = devices[i];
      Value* wide = (*x)[i];
      if (dt != low) {
        TRY_V(w, emit(d, OpKind::Cast, {wide}, {{"to", Attribute(std::string(dtypeName(dt)))}}));
        wide = w;
      }
      b_.setDevice(d);
      auto stats = b_.createInferred(OpKind::BatchNormTrain, {wide, (*scale)[i], (*bias)[i]},
                                     {{"epsilon", Attribute(epsilon)}}, 3);
      if (!stats)
        return stats.takeError();
      Value* share =
          scalar(static_cast<double>(split.sizes[i]) / static_cast<double>(xt.shape[0]), dt, d);
      TRY_V(w, emit(d, OpKind::Mul, {(*stats)->result(1), share}));
      localMeans.push_back((*stats)->result(1));
      localVars.push_back((*stats)->result(2));
      shares.push_back(share);
      weighted.push_back(w);
    }
    auto mean = emitComm(OpKind::AllReduce, weighted, devs, p);
    if (!mean)
      return mean.takeError();
    std::vector<Value*> spreads;
    for (size_t i = 0; i < p; ++i) {
      int64_t d = devices[i];
      TRY_V(off, emit(d, OpKind::Sub, {localMeans[i], (*mean)[i]}));
      TRY_V(sq, emit(d, OpKind::Mul, {off, off}));
      TRY_V(moment, emit(d, OpKind::Add, {localVars[i], sq}));
      TRY_V(w, emit(d, OpKind::Mul, {moment, shares[i]}));
      spreads.push_back(w);
    }
    auto var = emitComm(OpKind::AllReduce, spreads, devs, p);
    if (!var)
      return var.takeError();
    Dist y, meanD, varD;
    y.layout = split;
    meanD.layout = varD.layout = wholeOn(devices);
    for (size_t i = 0; i < p; ++i) {
      int64_t d = devices[i];
      TRY_V(out,
            emit(d, OpKind::BatchNorm, {(*x)[i], (*scale)[i], (*bias)[i], (*mean)[i], (*var)[i]},
                 {{"epsilon", Attribute(epsilon)}}));
      out->setName(freshName(op.result(0)->name(), d));
      y.pieces.push_back(out);
      meanD.pieces.push_back((*mean)[i]);
      varD.pieces.push_back((*var)[i]);
    }
    dist_[op.result(0)] = std::move(y);
    dist_[op.result(1)] = std::move(meanD);
    dist_[op.result(2)] = std::move(varD);
    return llvm::Error::success();
  }

  /// A loss's mean over the labels that count (softmax_xent with an ignore
  /// index, nll_loss's mean with one) over split samples: each device counts
  /// its labels that are not ignored (W_d), one all-reduce sums the counts
  /// (W), and each device's loss becomes its part of the whole mean, the
  /// parts summed as a partial result: nll_loss's sum over the shard
  /// divided by W; softmax_xent's mean over the shard's W_d labels weighed
  /// by W_d / W, taken as 0 where the shard has none (its mean is 0 / 0
  /// there; with none in the whole batch the loss is 0 / 0 as on one
  /// device). Differentiated, each shard's gradient is scaled alike; only
  /// the counts cross devices.
  llvm::Error lossOverLabels(Op& op, const Layout& split) {
    const std::vector<int64_t>& devices = split.devices;
    auto x = realize(op.operand(0), split);
    if (!x)
      return x.takeError();
    auto labels = realize(op.operand(1), split);
    if (!labels)
      return labels.takeError();
    const DType dt = op.result()->type().dtype, lt = op.operand(1)->type().dtype;
    const bool nll = op.kind() == OpKind::NllLoss;
    std::vector<NamedAttr> attrs = op.attrs();
    if (nll) {
      std::erase_if(attrs, [](const NamedAttr& a) { return a.name == "reduction"; });
      attrs.push_back({"reduction", Attribute(std::string("sum"))});
    }
    const int64_t ignore = op.getInt("ignore_index");
    std::vector<Value*> counts, losses;
    for (size_t i = 0; i < devices.size(); ++i) {
      int64_t d = devices[i];
      Value* t = (*labels)[i];
      b_.setDevice(d);
      Value* skip = b_.create(OpKind::Constant, {}, {TensorType(lt, {})},
                              {{"ivalue", Attribute(std::vector<int64_t>{ignore})}})
                        ->result();
      TRY_V(ignored,
            emit(d, OpKind::Compare, {t, skip}, {{"kind", Attribute(std::string("equal"))}}));
      TRY_V(kept, emit(d, OpKind::Where, {ignored, scalar(0, dt, d), scalar(1, dt, d)}));
      TRY_V(count, emit(d, OpKind::ReduceSum, {kept}, {{"keepdims", Attribute(int64_t{0})}}));
      TRY_V(loss, emit(d, op.kind(), {(*x)[i], t}, attrs));
      counts.push_back(count);
      losses.push_back(loss);
    }
    auto total = emitComm(OpKind::AllReduce, counts, {{"devices", Attribute(devices)}},
                          static_cast<unsigned>(devices.size()));
    if (!total)
      return total.takeError();
    Dist y;
    y.layout = wholeOn(devices);
    y.layout.partial = true;
    for (size_t i = 0; i < devices.size(); ++i) {
      int64_t d = devices[i];
      Value* part = losses[i];
      if (!nll) {
        TRY_V(any, emit(d, OpKind::Compare, {counts[i], scalar(0, dt, d)},
                        {{"kind", Attribute(std::string("greater"))}}));
        TRY_V(mean, emit(d, OpKind::Where, {any, part, scalar(0, dt, d)}));
        TRY_V(share, emit(d, OpKind::Div, {counts[i], (*total)[i]}));
        TRY_V(weighed, emit(d, OpKind::Mul, {mean, share}));
        part = weighed;
      } else {
        TRY_V(mean, emit(d, OpKind::Div, {part, (*total)[i]}));
        part = mean;
      }
      part->setName(freshName(op.result()->name(), d));
      y.pieces.push_back(part);
    }
    dist_[op.result()] = std::move(y);
    return llvm::Error::success();
  }
#undef TRY_V

  /// assign(p, v): each piece of p takes v's value there.
  llvm::Error assign(Op& op) {
    Value* p = op.operand(0);
    if (p->kind() != ValueKind::Param)
      return op.emitError("materialize: assign targets a non-param");
    if (!piecesOf_.count(p))
      paramPiece(p, 0, std::nullopt);
    for (Value* q : std::vector<Value*>(piecesOf_[p])) {
      int64_t d = q->device().value_or(0);
      Layout want = wholeOn({d});
      if (!q->shard().empty()) {
        want.dim = q->shard()[0].dim;
        want.offsets = {q->shard()[0].offset};
        want.sizes = {q->type().shape[want.dim]};
      }
      auto v = realize(op.operand(1), want);
      if (!v)
        return v.takeError();
      b_.setDevice(d);
      b_.create(OpKind::Assign, {q, (*v)[0]}, {});
    }
    return llvm::Error::success();
  }

  Graph& g_;
  Builder b_;
  NameSet names_;
  std::unordered_map<const Value*, Dist> dist_;
  std::map<std::pair<const Value*, std::string>, std::vector<Value*>> cache_;
  std::map<std::tuple<const Value*, int64_t, int64_t, int64_t, int64_t>, Value*> paramPieces_;
  std::unordered_map<const Value*, std::vector<Value*>> piecesOf_;
  std::map<std::pair<const Op*, int64_t>, Value*> constants_;
  std::set<const Value*> fsdp_; ///< params kept as shares (shard=fsdp)
};

/// Turns the parallel configs (@par) of a training graph before autodiff
/// into per-device ops and the communication they imply:
///  1. Each op with a split runs once per device on its shard, its operands
///     split or whole as its parallel rule says; an op without a split runs
///     whole on each of its devices (without @par: on device 0).
///  2. A value is moved to the layout its reader needs: a partial sum by
///     all_reduce (reduce_scatter when the reader wants it split, reduce_to
///     for one device), a split value by all_gather, a whole value by
///     device_copy to devices that lack it; shards are sliced locally.
///     Params are read in place: each device gets a param of its own, the
///     whole tensor or a shard of it, bound to the same initializer.
///  3. Means over a split dim (losses, reduce_mean) are weighed by each
///     device's share before they are summed: every strategy computes the
///     loss of the whole batch. A loss's mean over the labels that count
///     (an ignore index) is weighed by each device's count of them, the
///     counts all-reduced. Batch norm over split samples computes the
///     whole batch's statistics from all-reduced sums. A reshape that
///     merges rows ([B, T, D] to [B * T, D]) splits in whole operand rows.
///  4. Each assign writes every piece of its param. Graph outputs are
///     gathered whole on device 0.
///  5. With shard=fsdp (ZeRO stage 3), a trained param that ops read whole
///     on several devices (replicas), with a row for each, is kept as even
///     shares of its rows, one per device (the first rows % p one row
///     more), and all_gathered where it is read (with min_bytes=N only a
///     param of at least N bytes: the small ones, whose gathers would cost
///     more latency than their bytes save, stay replicated); its gradient, by the
///     all_gather's rule, is reduce-scattered back to the shares, which
///     the optimizer updates in place (the regather pass gathers the param
///     again for the backward).
/// Autodiff runs after this pass, through the communication ops.
class MaterializePass : public Pass {
public:
  MaterializePass(bool fsdp, int64_t minBytes) : fsdp_(fsdp), minBytes_(minBytes) {}
  std::string_view name() const override { return "materialize"; }

  llvm::Error run(Graph& g, PassContext&) override {
    for (size_t i = 0; i < g.outputs().size(); ++i)
      if (g.outputGradOf(i))
        return makeError("materialize: graph @" + g.name() +
                         " is differentiated already (materialize runs before autodiff)");
    if (isMultiDevice(g))
      return makeError("materialize: graph @" + g.name() + " is materialized already");
    return Materializer(g, fsdp_, minBytes_).run();
  }

private:
  bool fsdp_;
  int64_t minBytes_;
};

} // namespace

llvm::Expected<std::unique_ptr<Pass>> createMaterializePass(std::string_view options) {
  auto opts = PassOptions::parse("materialize", options, "shard", {"shard", "min_bytes"});
  if (!opts)
    return opts.takeError();
  auto shard = opts->getChoice("shard", "none", {"none", "fsdp"});
  if (!shard)
    return shard.takeError();
  auto minBytes = opts->getIntIn("min_bytes", 0, 0, INT64_MAX);
  if (!minBytes)
    return minBytes.takeError();
  if (*minBytes > 0 && *shard != "fsdp")
    return makeError("materialize: min_bytes=" + std::to_string(*minBytes) +
                     " needs shard=fsdp (it says which params are kept as shares)");
  return std::make_unique<MaterializePass>(*shard == "fsdp", *minBytes);
}

} // namespace lwcc
