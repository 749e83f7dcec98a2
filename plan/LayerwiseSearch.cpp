//===- LayerwiseSearch.cpp - Layer-wise parallel config search ------------===//
#include "plan/LayerwiseSearch.h"

#include "ir/Params.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace lwcc {

double backwardTimeFactor(const Op& op) {
  if (!op.info().gradRule)
    return 0;
  if (op.kind() == OpKind::Conv2d || op.kind() == OpKind::Gemm || op.kind() == OpKind::MatMul)
    return op.operand(0)->kind() == ValueKind::Input ? 1 : 2;
  return 1;
}

//===--- The solver ----------------------------------------------------===//

double ConfigGraph::cost(const std::vector<size_t>& choice) const {
  double c = 0;
  for (size_t n = 0; n < nodeCost.size(); ++n)
    c += nodeCost[n][choice[n]];
  for (const Edge& e : edges)
    c += e.cost[choice[e.a]][choice[e.b]];
  return c;
}

namespace {

using Matrix = std::vector<std::vector<double>>;
constexpr double kInf = std::numeric_limits<double>::infinity();
/// The partial choices the branch and bound may visit. Elimination leaves
/// no node of the zoo's graphs to it (nor of coatnet's or deit's); timm's
/// efficientformerv2_s0 leaves 25, which it did not finish in 4 minutes.
constexpr size_t kSearchVisits = 2000000;

class Solver {
public:
  explicit Solver(const ConfigGraph& g) : nodeCost_(g.nodeCost), adj_(g.nodeCost.size()) {
    for (const ConfigGraph::Edge& e : g.edges)
      addEdge(e.a, e.b, e.cost);
  }

  ConfigSolution solve() {
    size_t n = nodeCost_.size();
    std::vector<bool> alive(n, true);
    // 1. Eliminate nodes of degree <= 2 until none is left.
    std::vector<size_t> work(n);
    std::iota(work.begin(), work.end(), 0);
    while (!work.empty()) {
      size_t j = work.back();
      work.pop_back();
      if (!alive[j] || adj_[j].size() > 2)
        continue;
      alive[j] = false;
      for (size_t k : eliminate(j))
        work.push_back(k);
    }
    // 2. Exhaustive search (branch and bound) over what remains.
    std::vector<size_t> rest;
    for (size_t j = 0; j < n; ++j)
      if (alive[j])
        rest.push_back(j);
    ConfigSolution s;
    s.choice.assign(n, 0);
    s.reducedNodes = rest.size();
    search(rest, s.choice, s.exact);
    // 3. The eliminated nodes, last eliminated first.
    for (auto it = records_.rbegin(); it != records_.rend(); ++it) {
      const Record& r = *it;
      if (r.i == kNone)
        s.choice[r.j] = r.best;
      else if (r.k == kNone)
        s.choice[r.j] = r.arg[s.choice[r.i]][0];
      else
        s.choice[r.j] = r.arg[s.choice[r.i]][s.choice[r.k]];
    }
    return s;
  }

private:
  static constexpr size_t kNone = static_cast<size_t>(-1);

  /// Where node j's config comes from once its neighbours are chosen.
  struct Record {
    size_t j, i = kNone, k = kNone;
    size_t best = 0;                      ///< degree 0
    std::vector<std::vector<size_t>> arg; ///< [config of i][config of k or 0]
  };

  /// The cost of edge (a, b) for configs ca of a and cb of b.
  double edge(size_t a, size_t b, size_t ca, size_t cb) const {
    const Matrix& m = adj_[a].at(b);
    return a < b ? m[ca][cb] : m[cb][ca];
  }

  /// Adds `m` ([config of a][config of b]) to edge (a, b): edge elimination
  /// merges parallel edges by summing their costs.
  void addEdge(size_t a, size_t b, const Matrix& m) {
    if (a == b)
      return;
    Matrix oriented = m;
    if (a > b) {
      oriented.assign(nodeCost_[b].size(), std::vector<double>(nodeCost_[a].size()));
      for (size_t x = 0; x < m.size(); ++x)
        for (size_t y = 0; y < m[x].size(); ++y)
          oriented[y][x] = m[x][y];
      std::swap(a, b);
    }
    auto it = adj_[a].find(b);
    if (it == adj_[a].end()) {
      adj_[a][b] = oriented;
      adj_[b][a] = std::move(oriented);
      return;
    }
    for (size_t x = 0; x < oriented.size(); ++x)
      for (size_t y = 0; y < oriented[x].size(); ++y)
        it->second[x][y] += oriented[x][y];
    adj_[b][a] = it->second;
  }

  void removeEdge(size_t a, size_t b) {
    adj_[a].erase(b);
    adj_[b].erase(a);
  }

  /// Eliminates node j (degree <= 2); returns the neighbours whose degree
  /// changed.
  std::vector<size_t> eliminate(size_t j) {
    std::vector<size_t> nb;
    for (const auto& [k, m] : adj_[j])
      nb.push_back(k);
    Record r;
    r.j = j;
    const std::vector<double>& cj = nodeCost_[j];
    if (nb.empty()) {
      r.best = static_cast<size_t>(std::min_element(cj.begin(), cj.end()) - cj.begin());
    } else if (nb.size() == 1) {
      // Node elimination of a leaf: fold it into its neighbour's costs.
      size_t k = nb[0];
      r.i = k;
      r.arg.assign(nodeCost_[k].size(), std::vector<size_t>(1, 0));
      for (size_t ck = 0; ck < nodeCost_[k].size(); ++ck) {
        double best = kInf;
        for (size_t c = 0; c < cj.size(); ++c) {
          double v = cj[c] + edge(j, k, c, ck);
          if (v < best) {
            best = v;
            r.arg[ck][0] = c;
          }
        }
        nodeCost_[k][ck] += best;
      }
      removeEdge(j, k);
    } else {
      // Node elimination: j between i and k becomes an edge (i, k).
      size_t i = nb[0], k = nb[1];
      r.i = i;
      r.k = k;
      size_t ni = nodeCost_[i].size(), nk = nodeCost_[k].size();
      Matrix m(ni, std::vector<double>(nk, kInf));
      r.arg.assign(ni, std::vector<size_t>(nk, 0));
      for (size_t c = 0; c < cj.size(); ++c) {
        std::vector<double> toK(nk);
        for (size_t ck = 0; ck < nk; ++ck)
          toK[ck] = cj[c] + edge(j, k, c, ck);
        for (size_t ci = 0; ci < ni; ++ci) {
          double fromI = edge(i, j, ci, c);
          for (size_t ck = 0; ck < nk; ++ck)
            if (fromI + toK[ck] < m[ci][ck]) {
              m[ci][ck] = fromI + toK[ck];
              r.arg[ci][ck] = c;
            }
        }
      }
      removeEdge(j, i);
      removeEdge(j, k);
      addEdge(i, k, m);
    }
    records_.push_back(std::move(r));
    return nb;
  }

  /// Branch and bound over the remaining nodes, in an order where each node
  /// has as many chosen neighbours as possible, from a bound just above the
  /// greedy choice's cost (each node in that order taking its cheapest
  /// config given the ones before it). It finds the first optimal choice in
  /// that order, as from an infinite bound, unless it visits more than
  /// kSearchVisits partial choices: then the best found so far is kept and
  /// improved node by node (each taking its cheapest config given all its
  /// neighbours', in order, until a sweep changes nothing), and `exact` is
  /// false.
  void search(const std::vector<size_t>& nodes, std::vector<size_t>& choice, bool& exact) {
    exact = true;
    if (nodes.empty())
      return;
    std::vector<size_t> order;
    std::set<size_t> left(nodes.begin(), nodes.end());
    while (!left.empty()) {
      size_t pick = *left.begin();
      int most = -1;
      for (size_t v : left) {
        int placed = 0;
        for (const auto& [u, m] : adj_[v])
          placed += std::find(order.begin(), order.end(), u) != order.end();
        if (placed > most) {
          most = placed;
          pick = v;
        }
      }
      order.push_back(pick);
      left.erase(pick);
    }
    // The least node cost of the nodes after position p: a lower bound.
    std::vector<size_t> current(nodeCost_.size(), 0);
    std::vector<bool> placed(nodeCost_.size(), false);
    std::vector<double> rest(order.size() + 1, 0);
    for (size_t p = order.size(); p-- > 0;) {
      const auto& c = nodeCost_[order[p]];
      rest[p] = rest[p + 1] + *std::min_element(c.begin(), c.end());
    }
    // Node v's cost under config c with its placed neighbours' configs.
    auto added = [&](size_t v, size_t c) {
      double add = nodeCost_[v][c];
      for (const auto& [u, m] : adj_[v])
        if (placed[u] && u != v)
          add += edge(v, u, c, current[u]);
      return add;
    };
    // The greedy choice.
    double greedy = 0;
    for (size_t v : order) {
      size_t bestC = 0;
      double bestAdd = kInf;
      for (size_t c = 0; c < nodeCost_[v].size(); ++c)
        if (double a = added(v, c); a < bestAdd) {
          bestAdd = a;
          bestC = c;
        }
      current[v] = bestC;
      placed[v] = true;
      greedy += bestAdd;
      choice[v] = bestC;
    }
    std::fill(placed.begin(), placed.end(), false);
    double best = greedy + std::max(1.0, std::abs(greedy)) * 1e-9;
    size_t visits = 0;
    std::function<void(size_t, double)> visit = [&](size_t p, double sofar) {
      if (sofar + rest[p] >= best || !exact)
        return;
      if (++visits > kSearchVisits) {
        exact = false;
        return;
      }
      if (p == order.size()) {
        best = sofar;
        for (size_t v : order)
          choice[v] = current[v];
        return;
      }
      size_t v = order[p];
      placed[v] = true;
      for (size_t c = 0; c < nodeCost_[v].size(); ++c) {
        current[v] = c;
        visit(p + 1, sofar + added(v, c));
      }
      placed[v] = false;
    };
    visit(0, 0);
    if (exact)
      return;
    // Improved node by node: every neighbour placed, each node's cost under
    // its own config and its neighbours' current ones.
    for (size_t v : order) {
      current[v] = choice[v];
      placed[v] = true;
    }
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t v : order) {
        size_t bestC = current[v];
        double bestAdd = added(v, bestC);
        for (size_t c = 0; c < nodeCost_[v].size(); ++c)
          if (double a = added(v, c); a < bestAdd) {
            bestAdd = a;
            bestC = c;
          }
        changed = changed || bestC != current[v];
        current[v] = bestC;
      }
    }
    for (size_t v : order)
      choice[v] = current[v];
  }

  std::vector<std::vector<double>> nodeCost_;
  std::vector<std::map<size_t, Matrix>> adj_;
  std::vector<Record> records_;
};

} // namespace

ConfigSolution solveConfigGraph(const ConfigGraph& g) {
  ConfigSolution s = Solver(g).solve();
  s.cost = g.cost(s.choice);
  return s;
}

//===--- The cost function --------------------------------------------===//

namespace {

/// Where a value lives under a config: split along `dim`, whole, or a
/// partial sum, on devices 0..degree-1.
struct Placement {
  int64_t dim = -1;
  int64_t degree = 1;
  bool partial = false;
};

std::vector<int64_t> firstDevices(int64_t k) {
  std::vector<int64_t> d(static_cast<size_t>(k));
  std::iota(d.begin(), d.end(), 0);
  return d;
}

/// Whether the search gives `op` a config (as the other strategies do).
bool isNode(const Op& op) {
  return op.kind() != OpKind::Constant && op.kind() != OpKind::Assign && op.numResults() > 0;
}

class CostFunction {
public:
  CostFunction(const CostModel& cm, int64_t gpus, int64_t bucketBytes)
      : cm_(cm), gpus_(gpus), bucketBytes_(bucketBytes) {
    for (int64_t k = 1; k < gpus; k *= 2)
      degrees_.push_back(k);
    degrees_.push_back(gpus);
  }

  std::vector<LayerConfig> candidates(const Op& op) const {
    std::vector<LayerConfig> out;
    for (int64_t k : degrees_)
      out.push_back({-1, k});
    if (!op.info().parallel)
      return out;
    const Value* sv = parSplitValue(op);
    for (int64_t d = 0; d < sv->type().rank(); ++d) {
      auto p = op.info().parallel(op, d);
      if (!p)
        continue;
      for (int64_t k : degrees_)
        if (k > 1 && splitUnits(*p, sv->type().shape[d]) >= k)
          out.push_back({d, k});
    }
    return out;
  }

  std::optional<SplitPlan> plan(const Op& op, const LayerConfig& c) const {
    if (c.dim < 0 || c.degree < 2 || !op.info().parallel)
      return std::nullopt;
    return op.info().parallel(op, c.dim);
  }

  /// The share of the split dim the largest shard holds.
  double fraction(const Op& op, const LayerConfig& c) const {
    if (c.dim < 0 || c.degree < 2)
      return 1;
    double size = static_cast<double>(parSplitValue(op)->type().shape[c.dim]);
    return std::ceil(size / static_cast<double>(c.degree)) / size;
  }

  /// Compute (forward and backward), param sync and updates, statistics of
  /// a sample-split batch norm, and gathering graph outputs on device 0.
  double node(const Op& op, const LayerConfig& c) const {
    auto p = plan(op, c);
    double f = p ? fraction(op, c) : 1;
    double bytes = 0;
    if (!op.info().view) {
      for (unsigned j = 0; j < op.numOperands(); ++j)
        bytes += static_cast<double>(op.operand(j)->type().sizeInBytes()) *
                 (p && p->operandDims[j] >= 0 ? f : 1);
      for (unsigned r = 0; r < op.numResults(); ++r)
        bytes += static_cast<double>(op.result(r)->type().sizeInBytes()) *
                 (p && p->resultDims[r] >= 0 ? f : 1);
    }
    double t = cm_.computeSeconds(cm_.flops(op) * f, bytes, &op, cm_.fill(op, f));
    // A measured op (a profile of the whole op, from --gpus 1): its time
    // scaled to the shard, as the analytic time scales. A profile of a
    // multi-device trainer measured pieces, not this whole op: the cost
    // model gives no time for it here (CostModel.h).
    if (auto measured = cm_.measuredSeconds(op))
      t = *measured * f;
    t *= 1 + backwardFactor(op);
    std::vector<int64_t> devs = firstDevices(c.degree);
    for (unsigned j = 0; j < op.numOperands(); ++j) {
      const Value* w = op.operand(j);
      // Only trained params have gradients to sum and an update: running
      // statistics (written by an assign) have neither.
      if (!trainable_.count(w) || !op.info().gradRule)
        continue;
      double wb = static_cast<double>(w->type().sizeInBytes());
      bool whole = !p || p->operandDims[j] < 0;
      // SGD with momentum reads w, g, m and writes w, m.
      double piece = whole ? wb : wb * f;
      t += cm_.computeSeconds(5 * piece / 4, 5 * piece);
      if (whole)
        t += syncSeconds(wb, devs);
    }
    if (p && op.kind() == OpKind::BatchNormTrain && c.dim == 0)
      t += 2 * cm_.allReduceSeconds(static_cast<double>(op.result(1)->type().sizeInBytes()), devs);
    for (unsigned r = 0; r < op.numResults(); ++r)
      if (isOutput(op.result(r)))
        t += relayout(op.result(r), produced(op, c, r), Placement{-1, 1, false});
    return t;
  }

  /// Moving result `r` of `producer` (config cp) to operand `j` of
  /// `consumer` (config cc), and its gradient back.
  double edge(const Op& producer, const LayerConfig& cp, unsigned r, const Op& consumer,
              const LayerConfig& cc, unsigned j) const {
    const Value* v = producer.result(r);
    double t = relayout(v, produced(producer, cp, r), wanted(consumer, cc, j));
    bool grad = isFloat(v->type().dtype) && producer.info().gradRule;
    return grad ? 2 * t : t;
  }

  void setGraph(const Graph& g) {
    outputs_.clear();
    outputs_.insert(g.outputs().begin(), g.outputs().end());
    trainable_.clear();
    syncBytes_ = 0;
    for (const Value* p : trainableParams(g)) {
      trainable_.insert(p);
      syncBytes_ += static_cast<double>(p->type().sizeInBytes());
    }
  }

private:
  /// The all-reduce of a whole param's gradient over `devs`. Bucketed, a
  /// bucket (bucketBytes_, or every gradient when they fit in fewer bytes)
  /// pays the ring's 2(p-1) latencies once: a param pays them in proportion
  /// to its bytes.
  double syncSeconds(double bytes, const std::vector<int64_t>& devs) const {
    double t = cm_.allReduceSeconds(bytes, devs);
    if (bucketBytes_ <= 0 || devs.size() < 2 || bytes <= 0)
      return t;
    double latency = 2 * static_cast<double>(devs.size() - 1) * cm_.linkLatency(devs);
    double bucket = std::min(static_cast<double>(bucketBytes_), syncBytes_);
    return t - latency + latency * std::min(1.0, bytes / std::max(bucket, 1.0));
  }

  bool isOutput(const Value* v) const { return outputs_.count(v) > 0; }

  static double backwardFactor(const Op& op) { return backwardTimeFactor(op); }

  Placement produced(const Op& op, const LayerConfig& c, unsigned r) const {
    auto p = plan(op, c);
    Placement l{-1, c.degree, false};
    if (p && p->resultDims[r] >= 0)
      l.dim = p->resultDims[r];
    else if (p && p->partial != SplitPlan::Partial::None)
      l.partial = true;
    return l;
  }

  Placement wanted(const Op& op, const LayerConfig& c, unsigned j) const {
    auto p = plan(op, c);
    Placement l{-1, c.degree, false};
    if (p && p->operandDims[j] >= 0)
      l.dim = p->operandDims[j];
    return l;
  }

  /// Materialize's re-layout of `v` from `have` to `want`, priced: a
  /// partial sum is reduce-scattered, reduced to one device or all-reduced;
  /// a split value all-gathered; a whole value copied from device 0 to the
  /// devices that lack it, then sliced.
  double relayout(const Value* v, Placement have, const Placement& want) const {
    if (!have.partial && have.dim == want.dim &&
        (have.dim < 0 ? want.degree <= have.degree : want.degree == have.degree))
      return 0;
    double b = static_cast<double>(v->type().sizeInBytes());
    std::vector<int64_t> devs = firstDevices(have.degree);
    double t = 0;
    if (have.partial) {
      if (want.dim >= 0 && want.degree == have.degree)
        return cm_.reduceScatterSeconds(b, devs);
      if (want.dim < 0 && want.degree == 1)
        return cm_.broadcastSeconds(b, 0, devs);
      t += cm_.allReduceSeconds(b, devs);
    } else if (have.dim >= 0) {
      t += cm_.allGatherSeconds(b, devs);
    }
    for (int64_t d = have.degree; d < want.degree; ++d)
      t += cm_.transferSeconds(static_cast<int64_t>(b), 0, d);
    if (want.dim >= 0 && want.degree > 1)
      t += cm_.computeSeconds(0, 2 * b / static_cast<double>(want.degree));
    return t;
  }

  const CostModel& cm_;
  int64_t gpus_;
  std::vector<int64_t> degrees_;
  std::set<const Value*> outputs_;
  std::unordered_set<const Value*> trainable_; ///< params with gradients
  int64_t bucketBytes_ = 0;
  double syncBytes_ = 0; ///< the trained params' bytes: every gradient
};

/// The ops that get configs and the problem over their candidates.
struct Problem {
  std::vector<Op*> ops;
  std::vector<std::vector<LayerConfig>> configs;
  ConfigGraph graph;
};

Problem buildProblem(const Graph& g, CostFunction& cf,
                     const std::function<std::vector<LayerConfig>(const Op&)>& candidates) {
  Problem pb;
  cf.setGraph(g);
  std::unordered_map<const Op*, size_t> index;
  for (const auto& op : g.ops())
    if (isNode(*op)) {
      index[op.get()] = pb.ops.size();
      pb.ops.push_back(op.get());
      pb.configs.push_back(candidates(*op));
    }
  for (size_t n = 0; n < pb.ops.size(); ++n) {
    std::vector<double> costs;
    for (const LayerConfig& c : pb.configs[n])
      costs.push_back(cf.node(*pb.ops[n], c));
    pb.graph.nodeCost.push_back(std::move(costs));
  }
  for (size_t n = 0; n < pb.ops.size(); ++n) {
    const Op& consumer = *pb.ops[n];
    for (unsigned j = 0; j < consumer.numOperands(); ++j) {
      const Value* v = consumer.operand(j);
      if (v->kind() != ValueKind::Result)
        continue;
      auto it = index.find(v->definingOp());
      if (it == index.end())
        continue;
      size_t m = it->second;
      const Op& producer = *pb.ops[m];
      ConfigGraph::Edge e{m, n, {}};
      for (const LayerConfig& cp : pb.configs[m]) {
        std::vector<double> row;
        for (const LayerConfig& cc : pb.configs[n])
          row.push_back(cf.edge(producer, cp, v->resultIndex(), consumer, cc, j));
        e.cost.push_back(std::move(row));
      }
      pb.graph.edges.push_back(std::move(e));
    }
  }
  return pb;
}

} // namespace

llvm::Expected<LayerwiseResult> searchLayerwise(Graph& g, const CostModel& cm, int64_t gpus,
                                                int64_t bucketBytes) {
  auto start = std::chrono::steady_clock::now();
  CostFunction cf(cm, gpus, bucketBytes);
  Problem pb = buildProblem(g, cf, [&](const Op& op) { return cf.candidates(op); });
  ConfigSolution s = solveConfigGraph(pb.graph);
  for (size_t n = 0; n < pb.ops.size(); ++n) {
    Op& op = *pb.ops[n];
    const LayerConfig& c = pb.configs[n][s.choice[n]];
    ParallelConfig par;
    par.devices = firstDevices(c.degree);
    if (c.dim >= 0)
      par.degrees.emplace_back(parDimName(c.dim, parSplitValue(op)->type().rank()), c.degree);
    op.annotations().par = std::move(par);
  }
  LayerwiseResult r;
  r.predictedSeconds = s.cost;
  r.searchSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.ops = pb.ops.size();
  r.reducedNodes = s.reducedNodes;
  r.exact = s.exact;
  return r;
}

llvm::Expected<double> layerwiseCostOf(const Graph& g, const CostModel& cm, int64_t gpus,
                                       int64_t bucketBytes) {
  CostFunction cf(cm, gpus, bucketBytes);
  std::optional<llvm::Error> err;
  auto configOf = [&](const Op& op) -> std::vector<LayerConfig> {
    LayerConfig c;
    const auto& par = op.annotations().par;
    if (!par)
      return {c};
    c.degree = std::max<int64_t>(1, static_cast<int64_t>(par->devices.size()));
    for (const auto& [name, degree] : par->degrees) {
      if (degree < 2)
        continue;
      auto d = parDimIndex(name, parSplitValue(op)->type().rank());
      if (d)
        c.dim = *d;
      else if (!err)
        err = op.emitError("layerwise cost: unknown dim '" + name + "'");
      c.degree = degree;
    }
    return {c};
  };
  Problem pb = buildProblem(g, cf, configOf);
  if (err)
    return std::move(*err);
  return pb.graph.cost(std::vector<size_t>(pb.ops.size(), 0));
}

} // namespace lwcc
