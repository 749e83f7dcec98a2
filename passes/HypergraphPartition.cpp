//===- HypergraphPartition.cpp - Ops onto devices by Zoltan PHG -----------===//
//
// Steps:
//  1. Vertices: the ops that parallelize would configure (not constants,
//     assigns or ops without results), weighted by `weight`, scaled so the
//     heaviest weighs 1e6 and every vertex at least 1 (Zoltan balances
//     float weights; a zero-weight op would be free to go anywhere).
//  2. Nets: every op result with readers, and every param read by several
//     ops; pins: the writer (for results) and the readers; weight: bytes.
//     Graph inputs are host data every device reads: no net.
//  3. Zoltan PHG partitions them into N parts on one MPI rank (MPI is
//     initialized here, once, when the caller has not: a singleton OpenMPI
//     process needs no mpirun), minimising connectivity-1 under
//     IMBALANCE_TOL.
//  4. Each op gets @par(devices = [its part]).
//
//===----------------------------------------------------------------------===//
#include "ir/CostModel.h"
#include "passes/Hypergraph.h"
#include "passes/Pass.h"
#include "passes/PassOptions.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cstdlib>
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

/// One MPI rank for Zoltan, finalized at exit.
llvm::Error ensureMpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized)
    return llvm::Error::success();
  // Not under mpirun: an isolated singleton, which starts no orted daemon
  // (OpenMPI otherwise needs one on PATH, and aborts the process without).
  if (!std::getenv("OMPI_COMM_WORLD_SIZE"))
    setenv("OMPI_MCA_ess_singleton_isolated", "1", /*overwrite=*/0);
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
    return makeError("hypergraph: MPI_Init failed (Zoltan needs MPI)");
  std::atexit([] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized)
      MPI_Finalize();
  });
  return llvm::Error::success();
}

bool getsConfig(const Op& op) {
  return op.kind() != OpKind::Constant && op.kind() != OpKind::Assign && op.numResults() > 0;
}

} // namespace

llvm::Expected<HypergraphStats>
partitionHypergraph(Graph& g, int64_t parts, double imbalanceTol,
                    const std::function<double(const Op&)>& weight) {
  for (const auto& op : g.ops())
    if (op->annotations().par || op->annotations().device || op->info().isCommunication())
      return op->emitError("hypergraph: the graph is already parallelized");
  // 1. Vertices.
  std::vector<Op*> ops;
  std::unordered_map<const Op*, ZOLTAN_ID_TYPE> vertexOf;
  std::vector<double> raw;
  for (auto& op : g.ops())
    if (getsConfig(*op)) {
      vertexOf[op.get()] = static_cast<ZOLTAN_ID_TYPE>(ops.size());
      ops.push_back(op.get());
      double w = weight(*op);
      raw.push_back(std::isfinite(w) && w > 0 ? w : 0);
    }
  Hypergraph hg;
  double heaviest = raw.empty() ? 0 : *std::max_element(raw.begin(), raw.end());
  for (double w : raw)
    hg.vertexWeights.push_back(heaviest > 0 ? std::max(1.0f, static_cast<float>(w / heaviest * 1e6))
                                            : 1.0f);
  // 2. Nets.
  std::vector<int64_t> netBytes;
  auto addNet = [&](const Value* v, const Op* writer) {
    std::set<ZOLTAN_ID_TYPE> pins;
    if (writer && vertexOf.count(writer))
      pins.insert(vertexOf.at(writer));
    for (const Use& u : v->uses())
      if (u.user && vertexOf.count(u.user))
        pins.insert(vertexOf.at(u.user));
    if (pins.size() < 2)
      return;
    hg.pins.emplace_back(pins.begin(), pins.end());
    netBytes.push_back(v->type().sizeInBytes());
    hg.netWeights.push_back(static_cast<float>(std::max<int64_t>(1, netBytes.back())));
  };
  for (const auto& p : g.params())
    addNet(p.get(), nullptr);
  for (Op* op : ops)
    for (unsigned r = 0; r < op->numResults(); ++r)
      addNet(op->result(r), op);

  HypergraphStats stats;
  stats.parts = parts;
  stats.imbalanceTol = imbalanceTol;
  stats.vertices = static_cast<int64_t>(ops.size());
  stats.nets = static_cast<int64_t>(hg.pins.size());
  std::vector<int> partOf(ops.size(), 0);

  // 3. Zoltan PHG.
  if (parts > 1 && !ops.empty()) {
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
                                     "ops into {2} parts",
                                     rc, ops.size(), parts)
                           .str());
  }

  // 4. The configs, and what the partition costs.
  stats.partWeights.assign(parts, 0);
  for (size_t i = 0; i < ops.size(); ++i) {
    ParallelConfig cfg;
    cfg.devices = {partOf[i]};
    ops[i]->annotations().par = std::move(cfg);
    stats.partWeights[partOf[i]] += hg.vertexWeights[i];
    stats.totalWeight += hg.vertexWeights[i];
  }
  for (size_t e = 0; e < hg.pins.size(); ++e) {
    std::set<int> touched;
    for (ZOLTAN_ID_TYPE v : hg.pins[e])
      touched.insert(partOf[v]);
    stats.cutBytes += static_cast<int64_t>(touched.size() - 1) * netBytes[e];
  }
  float maxVertex = hg.vertexWeights.empty()
                        ? 0
                        : *std::max_element(hg.vertexWeights.begin(), hg.vertexWeights.end());
  stats.boundFeasible = maxVertex <= imbalanceTol * stats.totalWeight / static_cast<double>(parts);
  return stats;
}

} // namespace lwcc

namespace lwcc {

namespace {

class HypergraphPass : public Pass {
public:
  HypergraphPass(int64_t gpus, double imbalance, CostModel model)
      : gpus_(gpus), imbalance_(imbalance), model_(std::move(model)) {}
  std::string_view name() const override { return "hypergraph"; }

  llvm::Error run(Graph& g, PassContext& ctx) override {
    // An op's forward time stands for its work: its backward ops run where
    // it runs and cost about twice as much, for every op alike.
    auto stats = partitionHypergraph(g, gpus_, imbalance_,
                                     [&](const Op& op) { return model_.opSeconds(op); });
    if (!stats)
      return stats.takeError();
    if (ctx.diag) {
      std::string weights;
      for (double w : stats->partWeights)
        weights += (weights.empty() ? "" : ", ") + llvm::formatv("{0:f0}", w).str();
      ctx.diag(Severity::Note, {},
               llvm::formatv("hypergraph: {0} ops, {1} nets into {2} parts; part weights [{3}], "
                             "max/avg {4:f3} {5} {6:f3}{7}; cut {8} bytes",
                             stats->vertices, stats->nets, stats->parts, weights,
                             stats->imbalance(),
                             stats->imbalance() <= stats->imbalanceTol + 1e-9 ? "<=" : ">",
                             stats->imbalanceTol,
                             stats->boundFeasible ? ""
                                                  : " (the bound is unreachable: one op weighs "
                                                    "more than a part may)",
                             stats->cutBytes)
                   .str());
    }
    return llvm::Error::success();
  }

private:
  int64_t gpus_;
  double imbalance_;
  CostModel model_;
};

} // namespace

llvm::Expected<std::unique_ptr<Pass>> createHypergraphPass(std::string_view options) {
  auto opts =
      PassOptions::parse("hypergraph", options, "gpus", {"gpus", "imbalance", "spec", "profile"});
  if (!opts)
    return opts.takeError();
  auto gpus = opts->getInt("gpus", 1);
  if (!gpus)
    return gpus.takeError();
  if (*gpus < 1 || *gpus > 1024)
    return makeError("hypergraph: gpus must be in 1..1024, got " + std::to_string(*gpus));
  auto imbalance = opts->getFloat("imbalance", 1.1);
  if (!imbalance)
    return imbalance.takeError();
  if (!(*imbalance >= 1.0) || *imbalance > 100)
    return makeError(
        llvm::formatv("hypergraph: imbalance must be in 1..100, got {0}", *imbalance).str());
  auto cost = costModelFromOptions(*opts);
  if (!cost)
    return cost.takeError();
  return std::make_unique<HypergraphPass>(*gpus, *imbalance, std::move(*cost));
}

} // namespace lwcc
