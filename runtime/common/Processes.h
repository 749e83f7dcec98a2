// common/Processes.h - a trainer's start and end as several processes under mpirun (not installed)
// defines: launchedRank, startProcesses, endProcesses, agreeOnState
//
// trainerMain (common/TrainerFlags.cpp) calls startProcesses before it reads its
// flags and endProcesses with its exit status: a plain run (no mpirun, or
// one rank) has no Cluster and passes through both unchanged.
#pragma once

#include "Cluster.h"
#include "lwrt/trainer.h"

#include <memory>
#include <string>

namespace lwrt {

/// This process's rank under mpirun (OMPI_COMM_WORLD_RANK), 0 otherwise:
/// only rank 0 prints the usage text, --help and --list-params.
int launchedRank();

/// Under mpirun with more than one rank: starts MPI, then checks that
/// every rank runs the same trainer (model, devices, a hash of the plan and
/// of the embedded weights) with the same flags, and that the ranks divide
/// its logical devices. Returns 0 with `cluster` set, 0 without one for a
/// plain run, or the exit status after printing why (1: MPI did not start,
/// or the ranks differ; 2: the ranks do not divide the devices).
int startProcesses(int argc, char** argv, const ModelInfo& m, std::unique_ptr<Cluster>& cluster);

/// The end of a run that returned `status` (`why`: its error). Status 0
/// (and 2, a usage error every rank made alike) waits for every rank and
/// finalizes MPI; any other ends the whole job, telling the other ranks
/// `why`, and does not return. Returns the exit status.
int endProcesses(Cluster* cluster, const char* program, int status, const std::string& why);

/// Whether every rank starts from the same state: the params (`state`,
/// `bytes`), the step and the seed. False with `error` naming the ranks
/// that differ (their --weights or --resume files are not the same).
bool agreeOnState(Cluster& cluster, const unsigned char* state, size_t bytes, int64_t step,
                  uint64_t seed, std::string& error);

} // namespace lwrt
