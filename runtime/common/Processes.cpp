// A trainer's start and end as several processes under mpirun
// (Processes.h): MPI, the check that the ranks run the same trainer with
// the same flags and from the same state, and the job's end.
#include "Processes.h"

#include "lwrt/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace lwrt {

namespace {

std::string hex(uint64_t v) {
  char text[24];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

} // namespace

int launchedRank() {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  return launchedRanks() > 1 && rank ? std::atoi(rank) : 0;
}

int startProcesses(int argc, char** argv, const ModelInfo& m, std::unique_ptr<Cluster>& cluster) {
  const char* program = argc > 0 ? argv[0] : "trainer";
  cluster.reset();
  if (launchedRanks() <= 1)
    return 0;
  std::string error;
  cluster = Cluster::start(program, &error);
  if (!cluster) {
    std::fprintf(stderr, "%s: error: cannot start MPI under mpirun: %s\n", program, error.c_str());
    return 1;
  }
  const int rank = cluster->rank(), ranks = cluster->size();
  // The same trainer and the same flags everywhere: the trainer's plan and
  // weights (a hash of each) and its flags, as given.
  std::string flags;
  for (int i = 1; i < argc; ++i) {
    if (i > 1)
      flags += ' '; // not `" " + ...`: a GCC 12 -O3 -Wrestrict false positive
    flags += argv[i];
  }
  const uint64_t weights = m.weights ? fnv1a64(m.weights, static_cast<size_t>(m.weightsBytes)) : 0;
  const std::string trainer = m.name + ", target " + m.target + ", " +
                              std::to_string(std::max(m.numDevices, 1)) + " devices, plan " +
                              hex(m.planHash ? m.planHash : m.fingerprint) + ", weights " +
                              (m.weights ? hex(weights) : "from a file");
  std::string problem;
  if (!cluster->agree({{"trainer", trainer}, {"flags", flags}}, &problem, &error)) {
    if (problem.empty()) // the job failed meanwhile
      return endProcesses(cluster.get(), program, 1, error);
    std::fprintf(stderr, "%s (rank %d): error: refused to start: %s\n", program, rank,
                 problem.c_str());
    if (!cluster->finish(&error))
      cluster->abandon(1, "refused to start: " + problem);
    cluster.reset();
    return 1;
  }
  const int devices = std::max(m.numDevices, 1);
  if (devices % ranks != 0) {
    if (rank == 0)
      std::fprintf(stderr,
                   "%s: error: this trainer has %d logical device%s, which %d processes cannot "
                   "share evenly: run it as a number of processes that divides %d (mpirun -np R)\n",
                   program, devices, devices == 1 ? "" : "s", ranks, devices);
    if (!cluster->finish(&error))
      cluster->abandon(2, error);
    cluster.reset();
    return 2;
  }
  return 0;
}

int endProcesses(Cluster* cluster, const char* program, int status, const std::string& why) {
  if (!cluster)
    return status;
  std::string error;
  if (status == 0 || status == 2) {
    if (cluster->finish(&error))
      return status;
    std::fprintf(stderr, "%s (rank %d): error: %s\n", program, cluster->rank(), error.c_str());
    cluster->abandon(1, error);
  }
  cluster->abandon(status, why.empty() ? "exit status " + std::to_string(status) : why);
}

bool agreeOnState(Cluster& cluster, const unsigned char* state, size_t bytes, int64_t step,
                  uint64_t seed, std::string& error) {
  const std::string here = "step " + std::to_string(step) + ", seed " + std::to_string(seed) +
                           ", params " + hex(fnv1a64(state, bytes));
  std::string problem;
  if (cluster.agree({{"starting point (weights or checkpoint read)", here}}, &problem, &error))
    return true;
  if (!problem.empty())
    error = "refused to start: " + problem +
            ": every rank must read the same --weights and --resume files";
  return false;
}

} // namespace lwrt
