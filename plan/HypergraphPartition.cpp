//===- HypergraphPartition.cpp - Ops onto devices by Zoltan PHG -----------===//
//
// Steps:
//  1. Units: the ops that parallelize would configure (not constants,
//     assigns or ops without results), weighted by `weight`; an op heavier
//     than 1/16 of the average part is cut into units along a dim its
//     parallel rule splits, and light ops next to a cut op follow its cut
//     (cutOps). Unit weights are scaled so the heaviest weighs 1e6 and every
//     unit at least 1 (Zoltan balances float weights; a zero-weight unit
//     would be free to go anywhere).
//  2. Nets: per op result with readers, and per param, the units that hold
//     or need each piece of it, weighted by the piece's bytes (addNets).
//     Graph inputs are host data every device reads: no net.
//  3. Zoltan PHG partitions them into N parts on one MPI rank (MPI is
//     initialized here, once, when the caller has not: a singleton OpenMPI
//     process needs no mpirun), minimising connectivity-1 under
//     IMBALANCE_TOL; units then move from the heaviest part to the
//     lightest while the heaviest exceeds the bound (repairBalance).
//  4. Each op gets @par over the parts of its units: whole on one device,
//     or split along its unit dim with sizes = the entries of the units
//     each device got, devices in increasing order.
//
//===----------------------------------------------------------------------===//
#include "plan/Hypergraph.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>
// MPI's C API only (OpenMPI's C++ bindings would need their own library).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <set>
#include <unordered_map>
#include <zoltan.h>

namespace lwcc {

double HypergraphStats::imbalance() const {
  if (partWeights.empty() || totalWeight <= 0)
    return 1;
  return *std::max_element(partWeights.begin(), partWeights.end()) /
         (totalWeight / static_cast<double>(parts));
}

namespace {

struct Hypergraph {
  std::vector<float> vertexWeights;
  std::vector<std::vector<ZOLTAN_ID_TYPE>> pins; // per net: its vertices
  std::vector<float> netWeights;
};

int numObjects(void* data, int* ierr) {
  *ierr = ZOLTAN_OK;
  return static_cast<int>(static_cast<Hypergraph*>(data)->vertexWeights.size());
}

void objectList(void* data, int, int, ZOLTAN_ID_PTR gids, ZOLTAN_ID_PTR lids, int wdim,
                float* weights, int* ierr) {
  auto* hg = static_cast<Hypergraph*>(data);
  for (size_t i = 0; i < hg->vertexWeights.size(); ++i) {
    gids[i] = lids[i] = static_cast<ZOLTAN_ID_TYPE>(i);
    if (wdim == 1)
      weights[i] = hg->vertexWeights[i];
  }
  *ierr = ZOLTAN_OK;
}

void netsSize(void* data, int* numLists, int* numPins, int* format, int* ierr) {
  auto* hg = static_cast<Hypergraph*>(data);
  *numLists = static_cast<int>(hg->pins.size());
  size_t n = 0;
  for (const auto& p : hg->pins)
    n += p.size();
  *numPins = static_cast<int>(n);
  *format = ZOLTAN_COMPRESSED_EDGE;
  *ierr = ZOLTAN_OK;
}

void netsPins(void* data, int, int numNets, int, int, ZOLTAN_ID_PTR netIds, int* offsets,
              ZOLTAN_ID_PTR pinIds, int* ierr) {
  auto* hg = static_cast<Hypergraph*>(data);
  int k = 0;
  for (int e = 0; e < numNets; ++e) {
    netIds[e] = static_cast<ZOLTAN_ID_TYPE>(e);
    offsets[e] = k;
    for (ZOLTAN_ID_TYPE v : hg->pins[e])
      pinIds[k++] = v;
  }
  *ierr = ZOLTAN_OK;
}

void netWeightsSize(void* data, int* numNets, int* ierr) {
  *numNets = static_cast<int>(static_cast<Hypergraph*>(data)->netWeights.size());
  *ierr = ZOLTAN_OK;
}

void netWeights(void* data, int, int, int numNets, int, ZOLTAN_ID_PTR netIds, ZOLTAN_ID_PTR lids,
                float* weights, int* ierr) {
  auto* hg = static_cast<Hypergraph*>(data);
  for (int e = 0; e < numNets; ++e) {
    netIds[e] = static_cast<ZOLTAN_ID_TYPE>(e);
    if (lids)
      lids[e] = static_cast<ZOLTAN_ID_TYPE>(e);
    weights[e] = hg->netWeights[e];
  }
  *ierr = ZOLTAN_OK;
}

/// The folder OpenMPI keeps this process's session files in, made for it
/// alone (removed at exit).
std::string& ownMpiFolder() {
  static std::string folder;
  return folder;
}

/// One MPI rank for Zoltan, finalized at exit. Called under zoltanMutex.
llvm::Error ensureMpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized)
    return llvm::Error::success();
  if (!std::getenv("OMPI_COMM_WORLD_SIZE")) {
    // Not under mpirun: an isolated singleton, which starts no orted daemon
    // (OpenMPI otherwise needs one on PATH, and aborts the process without).
    setenv("OMPI_MCA_ess_singleton_isolated", "1", /*overwrite=*/0);
    // Every isolated singleton of a user names the same session folder
    // (<tmp>/ompi.HOST.UID/jf.0/1/0), and each removes it at its end: two
    // compiles at once (a build running lwcc in parallel) race, and one's
    // MPI_Init fails when the other removes the folder it is creating
    // (seen about once in 1,600 starts, four at a time). Each process gets
    // a folder of its own under which OpenMPI makes its session's.
    if (!std::getenv("OMPI_MCA_orte_tmpdir_base")) {
      const char* tmp = std::getenv("TMPDIR");
      std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/lwcc-mpi-XXXXXX";
      if (mkdtemp(pattern.data())) {
        ownMpiFolder() = pattern;
        setenv("OMPI_MCA_orte_tmpdir_base", pattern.c_str(), /*overwrite=*/1);
      }
    }
  }
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
    return makeError("hypergraph: MPI_Init failed (Zoltan needs MPI)");
  std::atexit([] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized)
      MPI_Finalize();
    if (!ownMpiFolder().empty()) {
      std::error_code ignored; // a folder left in the temporary folder is no error
      std::filesystem::remove_all(ownMpiFolder(), ignored);
    }
  });
  return llvm::Error::success();
}

bool getsConfig(const Op& op) {
  return op.kind() != OpKind::Constant && op.kind() != OpKind::Assign && op.numResults() > 0;
}

/// No unit is meant to weigh more than this share of a part's average
/// weight W/N: heavier ops are cut. Units of at most 1/16 of a part let a
/// part be filled to within about 6% of the average, inside the 1.1 bound
/// with room for Zoltan's coarsening; coarser units (1/4, 1/8) leave the
/// bound to chance, finer ones only add vertices (the ops cut are few: a
/// sixteenth of a part is 1/256 of AlexNet's work on 16 parts).
constexpr double kUnitsPerPart = 16;

int64_t pow2AtMost(int64_t x) {
  int64_t k = 1;
  while (k * 2 <= x)
    k *= 2;
  return k;
}

/// How one op is cut into units of work: unit i computes the entries
/// [begin(i), begin(i + 1)) of its split value's dim `dim`.
struct OpUnits {
  Op* op = nullptr;
  double weight = 0;
  int64_t dim = -1; ///< -1: one unit, the whole op
  int64_t k = 1;
  int64_t size = 1; ///< the split dim's size
  std::optional<SplitPlan> plan;
  ZOLTAN_ID_TYPE first = 0; ///< its units are first .. first + k - 1

  int64_t begin(int64_t i) const { return size * i / k; }
  /// The dim of `op`'s result `r` its units split, or -1 (each has all of
  /// it, or a partial sum).
  int64_t resultDim(unsigned r) const { return k > 1 ? plan->resultDims[r] : -1; }
  int64_t operandDim(unsigned j) const { return k > 1 ? plan->operandDims[j] : -1; }
};

/// Whether `op` splits along `dim`, into how many pieces at most (the
/// largest power of two the dim's size allows), and how.
std::optional<std::pair<int64_t, SplitPlan>> splitOf(const Op& op, int64_t dim) {
  const Value* sv = parSplitValue(op);
  if (!op.info().parallel || dim >= sv->type().rank() || sv->type().shape[dim] < 2)
    return std::nullopt;
  auto plan = op.info().parallel(op, dim);
  if (!plan || plan->window) // sliding windows (h, w) need halos: not a unit of its own
    return std::nullopt;
  return std::make_pair(pow2AtMost(sv->type().shape[dim]), std::move(*plan));
}

void cut(OpUnits& u, int64_t dim, int64_t k, SplitPlan plan) {
  u.dim = dim;
  u.size = parSplitValue(*u.op)->type().shape[dim];
  u.k = std::min(k, pow2AtMost(u.size));
  u.plan = std::move(plan);
  if (u.k < 2) {
    u.dim = -1;
    u.k = 1;
    u.plan.reset();
  }
}

/// 1. Cuts each op heavier than `unitMax` into the fewest (a power of two)
///    units of at most `unitMax` along the batch dim n, or the channels c
///    where n has too few entries (the dim that gives more units when
///    neither has enough).
/// 2. Cuts each lighter op the same way as a cut neighbour it shares a
///    value with, split along the same dim of that value: forward from
///    producers, then backward from readers, so that the chains between
///    heavy ops (activations, pools, losses) can follow their units instead
///    of gathering them.
void cutOps(std::vector<OpUnits>& units, double unitMax) {
  std::unordered_map<const Op*, OpUnits*> unitsOf;
  for (OpUnits& u : units)
    unitsOf[u.op] = &u;
  std::vector<bool> heavy(units.size());
  for (size_t n = 0; n < units.size(); ++n) {
    OpUnits& u = units[n];
    heavy[n] = u.weight > unitMax;
    if (!heavy[n])
      continue;
    int64_t want = 1;
    while (static_cast<double>(want) * unitMax < u.weight && want < (int64_t{1} << 20))
      want *= 2;
    std::optional<std::pair<int64_t, SplitPlan>> best;
    int64_t bestDim = -1;
    for (int64_t d : {0, 1}) {
      auto s = splitOf(*u.op, d);
      if (s && (!best || (best->first < want && s->first > best->first))) {
        best = std::move(s);
        bestDim = d;
      }
    }
    if (best)
      cut(u, bestDim, want, std::move(best->second));
  }
  auto follow = [&](OpUnits& u, bool forward) {
    for (int64_t d : {0, 1}) {
      auto s = splitOf(*u.op, d);
      if (!s)
        continue;
      const SplitPlan& p = s->second;
      if (forward) {
        for (unsigned j = 0; j < u.op->numOperands(); ++j) {
          const Value* v = u.op->operand(j);
          auto it = v->kind() == ValueKind::Result ? unitsOf.find(v->definingOp()) : unitsOf.end();
          if (p.operandDims[j] >= 0 && it != unitsOf.end() &&
              it->second->resultDim(v->resultIndex()) == p.operandDims[j])
            return cut(u, d, it->second->k, p);
        }
      } else {
        for (unsigned r = 0; r < u.op->numResults(); ++r)
          for (const Use& use : u.op->result(r)->uses()) {
            auto it = use.user ? unitsOf.find(use.user) : unitsOf.end();
            if (p.resultDims[r] >= 0 && it != unitsOf.end() &&
                it->second->operandDim(use.index) == p.resultDims[r])
              return cut(u, d, it->second->k, p);
          }
      }
    }
  };
  for (size_t n = 0; n < units.size(); ++n)
    if (!heavy[n] && units[n].k == 1)
      follow(units[n], /*forward=*/true);
  for (size_t n = units.size(); n-- > 0;)
    if (!heavy[n] && units[n].k == 1)
      follow(units[n], /*forward=*/false);
}

/// The nets of value `v` (bytes `bytes`) among the units that write or
/// read it: `reach` lists each such op with the dim of `v` its units split
/// (-1: every unit holds or needs all of it). Along the dim the writer
/// splits (else the first reader's), every interval between unit
/// boundaries is a net of its bytes over the units that hold it, and every
/// unit of the ops that split `v` otherwise or not at all.
void addNets(const Value& v, const std::vector<std::pair<const OpUnits*, int64_t>>& reach,
             std::map<std::vector<ZOLTAN_ID_TYPE>, double>& nets) {
  double bytes = static_cast<double>(v.type().sizeInBytes());
  int64_t dim = -1;
  for (const auto& [u, d] : reach)
    if (d >= 0) {
      dim = d;
      break;
    }
  int64_t size = dim >= 0 ? v.type().shape[dim] : 1;
  auto along = [&](const OpUnits& u, int64_t d) { return d >= 0 && d == dim && u.size == size; };
  std::set<int64_t> bounds{0, size};
  for (const auto& [u, d] : reach)
    if (along(*u, d))
      for (int64_t i = 1; i < u->k; ++i)
        bounds.insert(u->begin(i));
  for (auto b = bounds.begin(); std::next(b) != bounds.end(); ++b) {
    int64_t from = *b, to = *std::next(b);
    std::set<ZOLTAN_ID_TYPE> pins;
    for (const auto& [u, d] : reach) {
      if (!along(*u, d)) {
        for (int64_t i = 0; i < u->k; ++i)
          pins.insert(u->first + static_cast<ZOLTAN_ID_TYPE>(i));
        continue;
      }
      int64_t i = 0;
      while (u->begin(i + 1) <= from)
        ++i;
      pins.insert(u->first + static_cast<ZOLTAN_ID_TYPE>(i));
    }
    if (pins.size() >= 2)
      nets[std::vector<ZOLTAN_ID_TYPE>(pins.begin(), pins.end())] +=
          bytes * static_cast<double>(to - from) / static_cast<double>(size);
  }
}

/// Moves units from the heaviest part to the lightest while the heaviest
/// exceeds `tol` times the average: each time the unit lighter than the
/// gap between the two (so the larger of them shrinks) whose move adds the
/// least cut per unit of weight moved. Returns the moves.
int64_t repairBalance(const Hypergraph& hg, std::vector<int>& partOf, int64_t parts, double tol) {
  size_t nv = hg.vertexWeights.size();
  std::vector<std::vector<size_t>> netsOf(nv);
  std::vector<std::vector<int>> count(hg.pins.size(), std::vector<int>(parts, 0));
  for (size_t e = 0; e < hg.pins.size(); ++e)
    for (ZOLTAN_ID_TYPE v : hg.pins[e]) {
      netsOf[v].push_back(e);
      ++count[e][partOf[v]];
    }
  std::vector<double> weight(parts, 0);
  double total = 0;
  for (size_t v = 0; v < nv; ++v) {
    weight[partOf[v]] += hg.vertexWeights[v];
    total += hg.vertexWeights[v];
  }
  double bound = tol * total / static_cast<double>(parts);
  int64_t moves = 0;
  for (size_t step = 0; step < nv * static_cast<size_t>(parts); ++step) {
    int heavy = static_cast<int>(std::max_element(weight.begin(), weight.end()) - weight.begin());
    int light = static_cast<int>(std::min_element(weight.begin(), weight.end()) - weight.begin());
    if (weight[heavy] <= bound)
      break;
    double gap = weight[heavy] - weight[light];
    std::optional<size_t> best;
    double bestScore = 0;
    for (size_t v = 0; v < nv; ++v) {
      if (partOf[v] != heavy || !(hg.vertexWeights[v] < gap))
        continue;
      double delta = 0;
      for (size_t e : netsOf[v])
        delta += (count[e][light] == 0 ? hg.netWeights[e] : 0) -
                 (count[e][heavy] == 1 ? hg.netWeights[e] : 0);
      double score = delta / hg.vertexWeights[v];
      if (!best || score < bestScore) {
        best = v;
        bestScore = score;
      }
    }
    if (!best)
      break;
    for (size_t e : netsOf[*best]) {
      --count[e][heavy];
      ++count[e][light];
    }
    partOf[*best] = light;
    weight[heavy] -= hg.vertexWeights[*best];
    weight[light] += hg.vertexWeights[*best];
    ++moves;
  }
  return moves;
}

double imbalanceOf(const Hypergraph& hg, const std::vector<int>& partOf, int64_t parts) {
  HypergraphStats s;
  s.parts = parts;
  s.partWeights.assign(parts, 0);
  for (size_t v = 0; v < partOf.size(); ++v) {
    s.partWeights[partOf[v]] += hg.vertexWeights[v];
    s.totalWeight += hg.vertexWeights[v];
  }
  return s.imbalance();
}

/// MPI and Zoltan from one thread at a time (the planner prices candidates
/// on several).
std::mutex& zoltanMutex() {
  static std::mutex m;
  return m;
}

/// Zoltan PHG's parts for the vertices of `hg`.
llvm::Expected<std::vector<int>> zoltanParts(Hypergraph& hg, int64_t parts, double imbalanceTol) {
  std::lock_guard<std::mutex> lock(zoltanMutex());
  std::vector<int> partOf(hg.vertexWeights.size(), 0);
  if (llvm::Error e = ensureMpi())
    return e;
  float version = 0;
  if (Zoltan_Initialize(0, nullptr, &version) != ZOLTAN_OK)
    return makeError("hypergraph: Zoltan_Initialize failed");
  Zoltan_Struct* zz = Zoltan_Create(MPI_COMM_SELF);
  if (!zz)
    return makeError("hypergraph: Zoltan_Create failed");
  std::string tol = llvm::formatv("{0}", imbalanceTol).str();
  std::string nparts = std::to_string(parts);
  const std::pair<const char*, const char*> params[] = {
      {"DEBUG_LEVEL", "0"},
      // Zoltan's random numbers restart from this seed on every call: the
      // same graph gets the same parts however often lwcc partitions it.
      {"SEED", "123456789"},
      {"LB_METHOD", "HYPERGRAPH"},
      {"HYPERGRAPH_PACKAGE", "PHG"},
      {"LB_APPROACH", "PARTITION"},
      {"PHG_CUT_OBJECTIVE", "CONNECTIVITY"},
      {"NUM_GID_ENTRIES", "1"},
      {"NUM_LID_ENTRIES", "1"},
      {"OBJ_WEIGHT_DIM", "1"},
      {"EDGE_WEIGHT_DIM", "1"},
      {"RETURN_LISTS", "PARTS"},
      {"PHG_EDGE_SIZE_THRESHOLD", "1.0"},
      {"NUM_GLOBAL_PARTS", nparts.c_str()},
      {"IMBALANCE_TOL", tol.c_str()},
  };
  for (const auto& [key, value] : params)
    Zoltan_Set_Param(zz, key, value);
  Zoltan_Set_Num_Obj_Fn(zz, numObjects, &hg);
  Zoltan_Set_Obj_List_Fn(zz, objectList, &hg);
  Zoltan_Set_HG_Size_CS_Fn(zz, netsSize, &hg);
  Zoltan_Set_HG_CS_Fn(zz, netsPins, &hg);
  Zoltan_Set_HG_Size_Edge_Wts_Fn(zz, netWeightsSize, &hg);
  Zoltan_Set_HG_Edge_Wts_Fn(zz, netWeights, &hg);
  int changes = 0, gidEntries = 0, lidEntries = 0, numImport = 0, numExport = 0;
  ZOLTAN_ID_PTR importGids = nullptr, importLids = nullptr, exportGids = nullptr,
                exportLids = nullptr;
  int *importProcs = nullptr, *importParts = nullptr, *exportProcs = nullptr,
      *exportParts = nullptr;
  int rc = Zoltan_LB_Partition(zz, &changes, &gidEntries, &lidEntries, &numImport, &importGids,
                               &importLids, &importProcs, &importParts, &numExport, &exportGids,
                               &exportLids, &exportProcs, &exportParts);
  if (rc == ZOLTAN_OK || rc == ZOLTAN_WARN)
    for (int i = 0; i < numExport; ++i)
      partOf[exportGids[i]] = exportParts[i];
  Zoltan_LB_Free_Part(&importGids, &importLids, &importProcs, &importParts);
  Zoltan_LB_Free_Part(&exportGids, &exportLids, &exportProcs, &exportParts);
  Zoltan_Destroy(&zz);
  if (rc != ZOLTAN_OK && rc != ZOLTAN_WARN)
    return makeError(llvm::formatv("hypergraph: Zoltan PHG failed (code {0}) partitioning {1} "
                                   "units into {2} parts",
                                   rc, partOf.size(), parts)
                         .str());
  return partOf;
}

} // namespace

std::jthread startMpiEarly() {
  return std::jthread([] {
    std::lock_guard<std::mutex> lock(zoltanMutex());
    // An error is met again, and reported, where a partition needs MPI.
    llvm::consumeError(ensureMpi());
  });
}

llvm::Expected<HypergraphStats>
partitionHypergraph(Graph& g, int64_t parts, double imbalanceTol,
                    const std::function<double(const Op&)>& weight) {
  for (const auto& op : g.ops())
    if (op->annotations().par || op->annotations().device || op->info().isCommunication())
      return op->emitError("hypergraph: the graph is already parallelized");
  // 1. Units: the ops, the heavy ones (and their light neighbours) cut.
  std::vector<OpUnits> units;
  double total = 0;
  for (auto& op : g.ops())
    if (getsConfig(*op)) {
      OpUnits u;
      u.op = op.get();
      double w = weight(*op);
      u.weight = std::isfinite(w) && w > 0 ? w : 0;
      total += u.weight;
      units.push_back(std::move(u));
    }
  if (parts > 1 && total > 0)
    cutOps(units, total / static_cast<double>(parts) / kUnitsPerPart);
  std::unordered_map<const Op*, const OpUnits*> unitsOf;
  std::vector<double> raw;
  for (OpUnits& u : units) {
    u.first = static_cast<ZOLTAN_ID_TYPE>(raw.size());
    unitsOf[u.op] = &u;
    for (int64_t i = 0; i < u.k; ++i)
      raw.push_back(u.weight * static_cast<double>(u.begin(i + 1) - u.begin(i)) /
                    static_cast<double>(u.size));
  }
  Hypergraph hg;
  double heaviest = raw.empty() ? 0 : *std::max_element(raw.begin(), raw.end());
  for (double w : raw)
    hg.vertexWeights.push_back(heaviest > 0 ? std::max(1.0f, static_cast<float>(w / heaviest * 1e6))
                                            : 1.0f);
  // 2. Nets. Graph inputs are host data every device reads: no net.
  std::map<std::vector<ZOLTAN_ID_TYPE>, double> nets;
  auto netsOf = [&](const Value* v, const OpUnits* writer) {
    std::vector<std::pair<const OpUnits*, int64_t>> reach;
    if (writer)
      reach.emplace_back(writer, writer->resultDim(v->resultIndex()));
    for (const Use& use : v->uses())
      if (use.user && unitsOf.count(use.user)) {
        const OpUnits* reader = unitsOf.at(use.user);
        reach.emplace_back(reader, reader->operandDim(use.index));
      }
    addNets(*v, reach, nets);
  };
  for (const auto& p : g.params())
    netsOf(p.get(), nullptr);
  for (const OpUnits& u : units)
    for (unsigned r = 0; r < u.op->numResults(); ++r)
      netsOf(u.op->result(r), &u);
  std::vector<double> netBytes;
  for (auto& [pins, bytes] : nets) {
    hg.pins.push_back(pins);
    netBytes.push_back(bytes);
    hg.netWeights.push_back(static_cast<float>(std::max(1.0, bytes)));
  }

  HypergraphStats stats;
  stats.parts = parts;
  stats.imbalanceTol = imbalanceTol;
  stats.ops = static_cast<int64_t>(units.size());
  for (const OpUnits& u : units)
    stats.splitOps += u.k > 1;
  stats.vertices = static_cast<int64_t>(raw.size());
  stats.nets = static_cast<int64_t>(hg.pins.size());

  // 3. Zoltan PHG, then the repair of its balance.
  std::vector<int> partOf(raw.size(), 0);
  if (parts > 1 && !raw.empty()) {
    auto zoltan = zoltanParts(hg, parts, imbalanceTol);
    if (!zoltan)
      return zoltan.takeError();
    partOf = std::move(*zoltan);
    stats.zoltanImbalance = imbalanceOf(hg, partOf, parts);
    stats.repairMoves = repairBalance(hg, partOf, parts, imbalanceTol);
  }

  // 4. The configs: the parts of an op's units, each with the entries of
  //    its units (in device order), and what the partition costs.
  for (const OpUnits& u : units) {
    std::map<int64_t, int64_t> pieces; // part -> entries of the split dim
    for (int64_t i = 0; i < u.k; ++i)
      pieces[partOf[u.first + i]] += u.begin(i + 1) - u.begin(i);
    ParallelConfig cfg;
    for (const auto& [part, size] : pieces) {
      cfg.devices.push_back(part);
      if (pieces.size() > 1)
        cfg.sizes.push_back(size);
    }
    if (pieces.size() > 1)
      cfg.degrees.emplace_back(parDimName(u.dim, parSplitValue(*u.op)->type().rank()),
                               static_cast<int64_t>(pieces.size()));
    u.op->annotations().par = std::move(cfg);
  }
  stats.partWeights.assign(parts, 0);
  for (size_t v = 0; v < raw.size(); ++v) {
    stats.partWeights[partOf[v]] += hg.vertexWeights[v];
    stats.totalWeight += hg.vertexWeights[v];
  }
  for (size_t e = 0; e < hg.pins.size(); ++e) {
    std::set<int> touched;
    for (ZOLTAN_ID_TYPE v : hg.pins[e])
      touched.insert(partOf[v]);
    stats.cutBytes += static_cast<int64_t>(static_cast<double>(touched.size() - 1) * netBytes[e]);
  }
  float maxVertex = hg.vertexWeights.empty()
                        ? 0
                        : *std::max_element(hg.vertexWeights.begin(), hg.vertexWeights.end());
  stats.boundFeasible = maxVertex <= imbalanceTol * stats.totalWeight / static_cast<double>(parts);
  return stats;
}

} // namespace lwcc
