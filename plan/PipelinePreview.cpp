//===- PipelinePreview.cpp - A pipeline's step priced from one micro-batch -===//
#include "plan/PipelinePreview.h"

#include "cost/Simulator.h"
#include "ir/Params.h"
#include "passes/Schedule.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

namespace lwcc {

std::optional<PipelinePiece> readPipelinePiece(const Graph& g, const CostModel& model,
                                               int64_t replicas) {
  const int64_t R = std::max<int64_t>(1, replicas);
  // Stage s is device s*R (its first replica, standing for the others).
  auto stageOf = [&](int64_t d) -> std::optional<int64_t> {
    if (d % R != 0)
      return std::nullopt;
    return d / R;
  };
  int64_t S = 0;
  for (const auto& op : g.ops())
    if (!op->info().isCommunication() && !op->info().isEvent())
      S = std::max(S, opDevice(*op) / R + 1);
  if (S < 2)
    return std::nullopt;
  const PipelineShape shape = pipelineShapeOf(g);
  // A pipeline of one micro-batch has no micro-batch pass: every op is
  // micro-batch 0's (the update too: it then runs with the backward).
  const bool perMicrobatch = shape.microbatches > 0;
  auto ofMicrobatch = [&](const Op& op) {
    return !perMicrobatch || op.annotations().microBatch.has_value();
  };
  PipelinePiece p;
  p.stages = S;
  p.orderStages = shape.stages;
  for (int64_t s = 0; s < S; ++s) {
    auto it = shape.stageOf.find(s * R);
    p.order.push_back(it == shape.stageOf.end() ? 0 : it->second);
  }
  for (auto* v : {&p.forward, &p.backward, &p.inputBackward, &p.update, &p.accumulate})
    v->assign(static_cast<size_t>(S), 0.0);
  p.gradientBytes.assign(static_cast<size_t>(S), {});
  std::vector<const Op*> ops;
  std::unordered_map<const Op*, size_t> position;
  for (const auto& op : g.ops()) {
    position.emplace(op.get(), ops.size());
    ops.push_back(op.get());
  }
  // A transfer between the first replicas of two stages.
  auto isTransfer = [&](const Op& op) {
    if (op.kind() != OpKind::DeviceCopy || !ofMicrobatch(op))
      return false;
    auto from = stageOf(op.getInt("src")), to = stageOf(op.getInt("dst"));
    return from && to && *from != *to;
  };
  // The backward ops a gradient sent to the stage before is computed from:
  // the schedule runs them first in a backward task.
  std::vector<bool> input(ops.size(), false);
  for (size_t i = ops.size(); i-- > 0;) {
    const Op& op = *ops[i];
    if (!shape.backward[i])
      continue;
    bool needed = isTransfer(op);
    for (unsigned r = 0; r < op.numResults() && !needed; ++r)
      for (const Use& u : op.result(r)->uses())
        needed = needed || (u.user && input[position.at(u.user)]);
    input[i] = needed;
  }
  // A micro-batch's op of stage `s` taking `t` seconds of its compute stream.
  // Per op: seconds of its task's ops (its forward, or its backward's
  // input-gradient part) up to it and with it: where a transfer of what it
  // computes can leave.
  std::vector<double> madeAt(ops.size(), -1.0);
  auto add = [&](size_t i, size_t s, double t) {
    const Op& op = *ops[i];
    if (!ofMicrobatch(op))
      p.update[s] += t; // once a step: the update, what only params feed
    else if (shape.backward[i] || (!shape.feedsBackward[i] && !shape.passedOn[i])) {
      // What no backward needs (running statistics) runs in the backward
      // where it updates a param, in the forward where another stage
      // receives it.
      p.backward[s] += t;
      if (input[i])
        madeAt[i] = p.inputBackward[s] += t;
    } else {
      madeAt[i] = p.forward[s] += t;
    }
  };
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = *ops[i];
    if (op.info().isEvent())
      continue;
    if (op.info().isCommunication()) {
      if (isTransfer(op)) {
        const int64_t from = *stageOf(op.getInt("src")), to = *stageOf(op.getInt("dst"));
        const auto fu = static_cast<size_t>(from);
        const Op* def = op.operand(0)->definingOp();
        const double made = def ? madeAt[position.at(def)] : -1.0;
        p.transfers.push_back(
            {from, to, commBytes(op),
             made >= 0           ? made
             : shape.backward[i] ? p.inputBackward[fu]
                                 : p.forward[fu],
             static_cast<bool>(shape.backward[i]), !shape.feedsBackward[i],
             p.order[static_cast<size_t>(from)] == p.order[static_cast<size_t>(to)]});
        continue;
      }
      // A micro-batch's collective inside a stage (batch norm's statistics
      // over its replicas; the loss summed over them, and its gradient
      // sent back, which read or feed a micro-batch's ops) on the first
      // replica's compute stream.
      if (op.annotations().stream.value_or(0) != 0)
        continue;
      bool perMb = ofMicrobatch(op);
      for (const Value* v : op.operands())
        perMb = perMb || (v->definingOp() && v->definingOp()->annotations().microBatch);
      for (unsigned r = 0; r < op.numResults() && !perMb; ++r)
        for (const Use& u : op.result(r)->uses())
          perMb = perMb || (u.user && u.user->annotations().microBatch);
      if (!perMb)
        continue;
      for (int64_t d : devicesOf(op))
        if (auto s = stageOf(d)) {
          const double t = commBytes(op) > 0 ? model.commSeconds(op) : 0;
          if (shape.backward[i])
            p.backward[static_cast<size_t>(*s)] += t;
          else
            p.forward[static_cast<size_t>(*s)] += t;
          break;
        }
      continue;
    }
    auto s = stageOf(opDevice(op));
    if (!s)
      continue;
    bool free = op.kind() == OpKind::Constant;
    if (op.kind() == OpKind::Assign) {
      const Value* v = op.operand(1);
      free = v->definingOp() && paramWrittenOver(*v->definingOp(), v->resultIndex(), position);
    }
    add(i, static_cast<size_t>(*s), free ? 0 : model.opSeconds(op));
  }
  // Each trained param's gradient, added to the sum once per micro-batch
  // after the first, and all-reduced over the stage's replicas: the params
  // an update computed from the backward assigns (not optimizer state,
  // zero-initialized, nor running statistics, computed in the forward).
  std::vector<std::pair<size_t, const Value*>> trained; // (its update's position, param)
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = *ops[i];
    if (op.kind() != OpKind::Assign)
      continue;
    const Value* param = op.operand(0);
    const Op* def = op.operand(1)->definingOp();
    if (param->kind() != ValueKind::Param || param->zeroInit() || param->frozen() || !def ||
        !shape.backward[position.at(def)] || !isFloat(param->type().dtype))
      continue;
    trained.push_back({position.at(def), param});
  }
  // Last used first: the order backward makes their gradients.
  std::sort(trained.begin(), trained.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [at, v] : trained) {
    auto s = stageOf(v->device().value_or(0));
    if (!s || *s >= S)
      continue;
    const int64_t bytes = v->type().sizeInBytes();
    p.gradientBytes[static_cast<size_t>(*s)].push_back(bytes);
    p.accumulate[static_cast<size_t>(*s)] += model.computeSeconds(
        static_cast<double>(v->type().numElements()), 3.0 * static_cast<double>(bytes));
  }
  // Each stage's transfers leave in the order their values are made (the
  // schedule lists a transfer as soon as what it reads is there).
  std::stable_sort(p.transfers.begin(), p.transfers.end(),
                   [](const PipelinePiece::Transfer& a, const PipelinePiece::Transfer& b) {
                     return a.offset < b.offset;
                   });
  return p;
}

double previewPipeline(const PipelinePiece& piece, const CostModel& model,
                       const PipelinePreviewOptions& o) {
  const int64_t S = piece.stages, R = std::max<int64_t>(1, o.replicas),
                M = std::max<int64_t>(1, o.microbatches);
  const DeviceSpec& spec = model.spec();
  auto dev = [&](int64_t s, int64_t r) { return s * R + r; };
  const auto D = static_cast<size_t>(S * R);
  // Incoming transfers per stage and direction; the streams they take (the
  // schedule's banks: C colours each way, C one more than the most stages
  // a transfer crosses).
  std::vector<std::array<int64_t, 2>> need(static_cast<size_t>(S), {0, 0});
  int64_t reach = 1;
  auto place = [&](int64_t s) { return piece.order[static_cast<size_t>(s)]; };
  for (const auto& t : piece.transfers) {
    if (t.computeStreams)
      continue;
    ++need[static_cast<size_t>(t.to)][t.backward || t.state ? 1 : 0];
    if (!t.state) // as the schedule counts them: the transfers backward needs
      reach = std::max(reach, std::abs(place(t.to) - place(t.from)));
  }
  const int64_t colours = reach + 1;
  // (kind, id) of a port: 0 send, 1 receive, 2 node send, 3 node receive.
  std::map<std::pair<int, int64_t>, LinkBusy> ports;
  std::map<std::pair<int64_t, int64_t>, double> streamFree; // (device, stream)
  auto take = [&](std::vector<std::pair<int, int64_t>> used, double ready, double d,
                  const std::vector<std::pair<int64_t, int64_t>>& streams) {
    double t = ready;
    for (const auto& s : streams)
      t = std::max(t, streamFree[s]);
    std::vector<const LinkBusy*> busy;
    for (const auto& k : used)
      busy.push_back(&ports[k]);
    t = earliestGap(t, d, busy);
    const double end = t + d;
    for (const auto& s : streams)
      streamFree[s] = end;
    if (d > 0)
      for (const auto& k : used)
        occupy(ports[k], t, end);
    return end;
  };
  // Copies on the compute streams of two stages (running statistics): the
  // schedule runs each as soon as the sender's forward of its micro-batch
  // has made it, which the receiver, of the same place in the order, meets
  // in its own forward of the micro-batch: taken here once both forwards
  // are done, holding both streams. Per pair of stages, their bytes.
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> synced;
  for (const auto& t : piece.transfers)
    if (t.computeStreams)
      synced[{std::min(t.from, t.to), std::max(t.from, t.to)}].push_back(t.bytes);
  // A device whose forward is done but whose copy waits for the other
  // stage's forward of the micro-batch: blocked until then. Per (device,
  // other device, micro-batch): when the first of the two was done.
  std::vector<int64_t> blocked(D, 0);
  std::map<std::tuple<int64_t, int64_t, int64_t>, double> firstDone;
  const PipelineOrder order = o.gpipe ? PipelineOrder::GPipe : PipelineOrder::OneFOneB;
  std::vector<std::vector<PipelineTask>> seq(D);
  std::vector<size_t> pos(D, 0);
  std::vector<double> free(D, 0);
  // Per device, micro-batch and direction: transfers arrived, the last one's
  // arrival.
  std::vector<std::vector<std::array<int64_t, 2>>> got(
      D, std::vector<std::array<int64_t, 2>>(static_cast<size_t>(M), {0, 0}));
  std::vector<std::vector<std::array<double, 2>>> at(
      D, std::vector<std::array<double, 2>>(static_cast<size_t>(M), {0.0, 0.0}));
  for (int64_t s = 0; s < S; ++s)
    for (int64_t r = 0; r < R; ++r)
      seq[static_cast<size_t>(dev(s, r))] = pipelineTasks(place(s), piece.orderStages, M, order);
  size_t left = D * static_cast<size_t>(2 * M);
  while (left > 0) {
    // The device whose next task can start earliest.
    size_t best = D;
    double bestStart = std::numeric_limits<double>::infinity();
    for (size_t d = 0; d < D; ++d) {
      if (pos[d] >= seq[d].size() || blocked[d] > 0)
        continue;
      const PipelineTask& task = seq[d][pos[d]];
      const auto s = static_cast<size_t>(static_cast<int64_t>(d) / R);
      const int k = task.backward() ? 1 : 0;
      const auto m = static_cast<size_t>(task.mb);
      if (got[d][m][k] < need[s][k])
        continue;
      const double start = std::max(free[d], at[d][m][k]);
      if (start < bestStart) {
        bestStart = start;
        best = d;
      }
    }
    if (best == D)
      return std::numeric_limits<double>::infinity(); // no order: not a pipeline
    const PipelineTask task = seq[best][pos[best]++];
    --left;
    const int64_t s = static_cast<int64_t>(best) / R, r = static_cast<int64_t>(best) % R;
    const auto su = static_cast<size_t>(s);
    const double dur = task.backward()
                           ? piece.backward[su] + (task.mb > 0 ? piece.accumulate[su] : 0)
                           : piece.forward[su];
    const double end = bestStart + dur;
    free[best] = end;
    if (!task.backward())
      for (const auto& [pair, bytes] : synced) {
        if (pair.first != s && pair.second != s)
          continue;
        const int64_t self = static_cast<int64_t>(best),
                      other = dev(pair.first == s ? pair.second : pair.first, r);
        const auto key = std::make_tuple(std::min(self, other), std::max(self, other), task.mb);
        auto it = firstDone.find(key);
        if (it == firstDone.end()) { // the other's forward comes later
          firstDone.emplace(key, free[best]);
          ++blocked[best];
          continue;
        }
        double t = std::max(it->second, free[best]);
        for (int64_t b : bytes)
          t += model.transferSeconds(b, self, other);
        free[best] = t;
        const auto o = static_cast<size_t>(other);
        free[o] = std::max(free[o], t);
        --blocked[o];
        firstDone.erase(it);
      }
    for (const auto& t : piece.transfers) {
      if (t.from != s || t.backward != task.backward() || t.computeStreams)
        continue;
      const double ready = std::min(bestStart + t.offset, end);
      const int64_t src = dev(t.from, r), dst = dev(t.to, r);
      const int64_t stream =
          transferStream(kFirstTransferStream, colours, place(t.from), t.backward);
      std::vector<std::pair<int, int64_t>> used = {{0, src}, {1, dst}};
      if (spec.node(src) != spec.node(dst)) {
        used.push_back({2, spec.node(src)});
        used.push_back({3, spec.node(dst)});
      }
      const double arrived = take(used, ready, model.transferSeconds(t.bytes, src, dst),
                                  {{src, stream}, {dst, stream}});
      const auto to = static_cast<size_t>(dst), m = static_cast<size_t>(task.mb);
      const int k = t.backward || t.state ? 1 : 0;
      ++got[to][m][k];
      at[to][m][k] = std::max(at[to][m][k], arrived);
    }
  }
  // Each stage's gradients all-reduced over its replicas (grad-sync's
  // buckets on stream 1) once its last backward is done, then its update.
  double step = 0;
  for (int64_t s = 0; s < S; ++s) {
    const auto su = static_cast<size_t>(s);
    double t = 0;
    std::vector<int64_t> group;
    for (int64_t r = 0; r < R; ++r) {
      group.push_back(dev(s, r));
      t = std::max(t, free[static_cast<size_t>(dev(s, r))]);
    }
    if (R > 1) {
      std::vector<std::pair<int, int64_t>> used;
      std::vector<std::pair<int64_t, int64_t>> streams;
      std::set<int64_t> nodes;
      for (int64_t d : group) {
        used.push_back({0, d});
        used.push_back({1, d});
        streams.push_back({d, 1});
        nodes.insert(spec.node(d));
      }
      if (nodes.size() > 1)
        for (int64_t n : nodes) {
          used.push_back({2, n});
          used.push_back({3, n});
        }
      int64_t bucket = 0;
      auto flush = [&] {
        if (bucket > 0)
          t = take(used, t, model.allReduceSeconds(static_cast<double>(bucket), group), streams);
        bucket = 0;
      };
      for (int64_t bytes : piece.gradientBytes[su]) {
        if (bucket > 0 && o.bucketBytes > 0 && bucket + bytes > o.bucketBytes)
          flush();
        bucket += bytes;
      }
      flush();
    }
    for (int64_t d : group)
      step = std::max(step, std::max(t, free[static_cast<size_t>(d)]) + piece.update[su]);
  }
  return step;
}

} // namespace lwcc
