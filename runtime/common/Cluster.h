// common/Cluster.h - the processes of a trainer that mpirun started (not installed)
// defines: Cluster, launchedRanks
//
// `mpirun -np R ./trainer ...` runs a `--gpus N` trainer as R processes,
// rank r holding the logical devices r*N/R .. (r+1)*N/R - 1. A Cluster is
// this process's view of the others, over OpenMPI: who it is (rank, the
// rank among the processes of its machine), tagged byte messages to and
// from the others, and the job's health. A plain run (no mpirun, or one
// rank) has no Cluster and never starts MPI.
//
// One thread of the Cluster's own makes every MPI call after MPI_Init
// (MPI_THREAD_SERIALIZED: the step's threads and the main loop only queue
// messages and wait for them), all of them nonblocking and polled, so that
// no wait can hang: besides carrying the messages it
//  - sends every other rank a heartbeat each second, and declares a rank
//    lost when nothing came from it for the timeout (--peer-timeout,
//    default 60 s) or when MPI reports an error talking to it;
//  - receives the notice of a rank that stopped (an error, a non-finite
//    loss, a data error: abandon() sends it to every rank).
// Once the job has failed, every wait returns false with failure()'s
// message, naming the rank; a process that has not ended itself 5 s later
// (its main loop busy elsewhere) is ended by that thread: the message on
// stderr, then MPI_Abort, which makes mpirun end every process of the job.
// A rank killed outright (SIGKILL) is noticed by mpirun itself, which ends
// the others at once and names the rank.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace lwrt {

/// The ranks mpirun started this process among (OpenMPI's environment:
/// OMPI_COMM_WORLD_SIZE), or 1 when it did not.
int launchedRanks();

class Cluster {
public:
  /// Message tags: a kind of traffic each, the step's communication ops
  /// from kOpBase on (kOpBase + op). Messages between two ranks under one
  /// tag arrive in the order they were sent.
  enum Tag : int { kControl = 3, kLoss = 4, kGather = 5, kOpBase = 16 };

  /// Starts MPI and the Cluster's thread (call only when launchedRanks()
  /// > 1). `program` prefixes the messages the thread prints itself. Null
  /// with `error` set when MPI cannot start.
  static std::unique_ptr<Cluster> start(const std::string& program, std::string* error);
  /// Stops the thread; MPI_Finalize when finish() succeeded.
  ~Cluster();

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// This process among those of its machine (MPI_COMM_TYPE_SHARED).
  int localRank() const { return localRank_; }
  int localSize() const { return localSize_; }
  /// The machine of rank `r` (MPI_Get_processor_name).
  const std::string& host(int r) const { return hosts_[static_cast<size_t>(r)]; }
  /// "rank 1 (on host-b)".
  std::string describe(int r) const;
  /// The largest tag messages may carry.
  int maxTag() const { return maxTag_; }

  /// A rank silent for this long is lost (--peer-timeout).
  void setTimeout(double seconds);

  /// Queues `bytes` for rank `to` under `tag`; returns at once.
  void send(int to, int tag, std::vector<unsigned char> bytes);
  /// The next message from rank `from` under `tag`. False, with `error`
  /// saying why the job stops, when it failed before the message came, or
  /// when `cancelled` (asked again after each wakeWaiters()) turns true.
  bool receive(int from, int tag, std::vector<unsigned char>& out, std::string* error,
               const std::function<bool()>& cancelled = nullptr);
  /// Has every waiting receive ask its `cancelled` again.
  void wakeWaiters();
  /// Every rank passes `bytes` of the same size; afterwards all hold
  /// `root`'s (MPI_Ibcast). Collective, like barrier().
  bool broadcast(int root, std::vector<unsigned char>& bytes, std::string* error);
  bool barrier(std::string* error);

  /// Start-up: whether every rank holds the same `fields` (name, value).
  /// False with `problem` naming each rank that differs, the field, and
  /// both values, the same on every rank; false with `error` when the job
  /// failed meanwhile.
  bool agree(const std::vector<std::pair<std::string, std::string>>& fields, std::string* problem,
             std::string* error);

  /// A deadlock across processes (every rank waiting for another) shows
  /// as no rank making progress: each says in its heartbeats how far it got
  /// (a count that grows as its step's functions move and as its messages
  /// complete) and whether it waits: while a step runs, whether every
  /// function of it waits (stepActivity, from the group each second, until
  /// stepEnded()), otherwise whether a thread waits for a message.
  /// othersWaiting(s): every other rank has said "waiting" without moving
  /// for `s` seconds.
  void stepActivity(uint64_t progress, bool waiting);
  void stepEnded();
  bool othersWaiting(double seconds) const;

  /// Why the job stops ("rank 1 (on x) is lost: ..."), or "" while healthy.
  std::string failure() const;
  /// This process stops with exit status `code` because of `why` (already
  /// printed): tells every other rank, then ends the job. Never returns.
  [[noreturn]] void abandon(int code, const std::string& why);
  /// The run succeeded here: waits for every rank to get here too, then
  /// lets the destructor finalize MPI. False, with `error`, when the job
  /// failed first.
  bool finish(std::string* error);

  struct Impl; ///< the MPI side (common/Cluster.cpp)

private:
  Cluster() = default;
  int rank_ = 0, size_ = 1, localRank_ = 0, localSize_ = 1, maxTag_ = 32767;
  std::vector<std::string> hosts_;
  std::unique_ptr<Impl> impl_;
};

} // namespace lwrt
