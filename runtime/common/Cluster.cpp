// The processes of a trainer under mpirun (Cluster.h): MPI on a thread of
// its own, every call nonblocking and polled, heartbeats, lost ranks and
// the notices of ranks that stopped.
#include "Cluster.h"

#define OMPI_SKIP_MPICXX 1
#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mpi.h>
#include <mutex>
#include <set>
#include <sys/prctl.h>
#include <thread>

namespace lwrt {

namespace {

using Clock = std::chrono::steady_clock;

/// Tags of the Cluster's own traffic (Cluster::Tag holds the callers').
constexpr int kHeartbeatTag = 1, kAbortTag = 2;
/// A failed job ends this long after its failure is known here, whatever
/// the main loop is doing.
constexpr double kGraceSeconds = 5;

std::string mpiError(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length));
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

/// What a heartbeat says of its sender's step (Cluster::setActivity).
struct Activity {
  uint64_t progress = 0;
  uint64_t waiting = 0;
};

} // namespace

int launchedRanks() {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (!size || !*size)
    return 1;
  int n = std::atoi(size);
  return n > 1 ? n : 1;
}

/// One message or collective the thread carries.
struct Request {
  enum Kind { Send, Receive, Broadcast, Barrier } kind = Send;
  int peer = -1, tag = 0;
  std::vector<unsigned char> data;
  bool started = false, done = false;
  MPI_Request request = MPI_REQUEST_NULL;
};

struct Cluster::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  std::string program;
  int rank = 0, size = 1;
  const Cluster* owner = nullptr;

  std::mutex mu;
  std::condition_variable done; ///< a request completed, or the job failed
  std::condition_variable wake; ///< work for the thread
  std::deque<std::shared_ptr<Request>> queued;
  std::string failure;
  Clock::time_point failedAt;
  double timeout = 60;
  bool stop = false;
  bool abandoning = false;
  int abandonCode = 1;
  std::string abandonWhy;
  std::thread thread;

  // The thread's own.
  std::vector<std::shared_ptr<Request>> active;
  std::vector<Clock::time_point> lastHeard;
  std::vector<MPI_Request> beats; ///< the heartbeat in flight to each rank
  std::vector<Activity> sent;     ///< its bytes, kept until it has left
  Clock::time_point lastBeat;

  // Under mu: this process's activity (its step's, while one runs; else
  // whether a thread waits for another rank), and the others' from their
  // heartbeats.
  Activity mine;
  bool inStep = false;
  int blocked = 0;        ///< threads waiting in await()
  uint64_t completed = 0; ///< messages and collectives that completed
  std::vector<Activity> theirs;
  std::vector<Clock::time_point> theirsSince; ///< when theirs last changed

  void fail(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!failure.empty())
        return;
      failure = why;
      failedAt = Clock::now();
    }
    done.notify_all();
  }
  void lost(int peer, const std::string& why) { fail(owner->describe(peer) + " is lost: " + why); }

  /// Starts what can start at once: sends and collectives.
  void start(Request& r) {
    int st = MPI_SUCCESS;
    switch (r.kind) {
    case Request::Send:
      if (r.data.size() > static_cast<size_t>(INT_MAX)) {
        fail("a message of " + std::to_string(r.data.size()) +
             " bytes is over MPI's 2 GiB per message");
        return;
      }
      st = MPI_Isend(r.data.data(), static_cast<int>(r.data.size()), MPI_BYTE, r.peer, r.tag, comm,
                     &r.request);
      r.started = true;
      if (st != MPI_SUCCESS)
        lost(r.peer, "MPI_Isend: " + mpiError(st));
      return;
    case Request::Broadcast:
      st = MPI_Ibcast(r.data.data(), static_cast<int>(r.data.size()), MPI_BYTE, r.peer, comm,
                      &r.request);
      break;
    case Request::Barrier:
      st = MPI_Ibarrier(comm, &r.request);
      break;
    case Request::Receive:
      return; // once its message is there (poll)
    }
    r.started = true;
    if (st != MPI_SUCCESS)
      fail("MPI collective: " + mpiError(st));
  }

  /// Matches receives with arrived messages, tests what is in flight.
  /// True when something moved.
  bool poll() {
    bool moved = false;
    for (auto& r : active) {
      if (r->done)
        continue;
      if (r->kind == Request::Receive && !r->started) {
        int flag = 0;
        MPI_Message message;
        MPI_Status status;
        int st = MPI_Improbe(r->peer, r->tag, comm, &flag, &message, &status);
        if (st != MPI_SUCCESS) {
          lost(r->peer, "MPI_Improbe: " + mpiError(st));
          continue;
        }
        if (!flag)
          continue;
        int count = 0;
        MPI_Get_count(&status, MPI_BYTE, &count);
        r->data.resize(static_cast<size_t>(count));
        st = MPI_Imrecv(r->data.data(), count, MPI_BYTE, &message, &r->request);
        r->started = true;
        moved = true;
        if (st != MPI_SUCCESS) {
          lost(r->peer, "MPI_Imrecv: " + mpiError(st));
          continue;
        }
      }
      if (!r->started || r->request == MPI_REQUEST_NULL)
        continue;
      int flag = 0;
      int st = MPI_Test(&r->request, &flag, MPI_STATUS_IGNORE);
      if (st != MPI_SUCCESS) {
        if (r->kind == Request::Send || r->kind == Request::Receive)
          lost(r->peer, "MPI: " + mpiError(st));
        else
          fail("MPI collective: " + mpiError(st));
        continue;
      }
      if (!flag)
        continue;
      moved = true;
      if (r->kind == Request::Receive)
        lastHeard[static_cast<size_t>(r->peer)] = Clock::now();
      {
        std::lock_guard<std::mutex> lock(mu);
        r->done = true;
        ++completed;
      }
      done.notify_all();
    }
    active.erase(std::remove_if(active.begin(), active.end(), [](auto& r) { return r->done; }),
                 active.end());
    return moved;
  }

  /// Heartbeats in and out, and the notices of ranks that stopped.
  bool control(bool beating) {
    bool moved = false;
    const auto now = Clock::now();
    for (;;) {
      int flag = 0;
      MPI_Status status;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kHeartbeatTag, comm, &flag, &status) != MPI_SUCCESS || !flag)
        break;
      Activity a;
      MPI_Recv(&a, sizeof a, MPI_BYTE, status.MPI_SOURCE, kHeartbeatTag, comm, MPI_STATUS_IGNORE);
      const size_t peer = static_cast<size_t>(status.MPI_SOURCE);
      lastHeard[peer] = now;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (a.progress != theirs[peer].progress || a.waiting != theirs[peer].waiting)
          theirsSince[peer] = now;
        theirs[peer] = a;
      }
      moved = true;
    }
    for (;;) {
      int flag = 0;
      MPI_Status status;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kAbortTag, comm, &flag, &status) != MPI_SUCCESS || !flag)
        break;
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      std::string why(static_cast<size_t>(std::max(count, 0)), '\0');
      MPI_Recv(why.data(), count, MPI_BYTE, status.MPI_SOURCE, kAbortTag, comm, MPI_STATUS_IGNORE);
      fail(owner->describe(status.MPI_SOURCE) + " stopped: " + why);
      moved = true;
    }
    if (beating && seconds(now - lastBeat) >= 1) {
      lastBeat = now;
      Activity here;
      {
        std::lock_guard<std::mutex> lock(mu);
        here.progress = mine.progress + completed;
        here.waiting = inStep ? mine.waiting : blocked > 0;
      }
      for (int peer = 0; peer < size; ++peer) {
        MPI_Request& b = beats[static_cast<size_t>(peer)];
        if (peer == rank)
          continue;
        if (b != MPI_REQUEST_NULL) { // the last one still in flight: no pile-up
          int flag = 0;
          if (MPI_Test(&b, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || !flag)
            continue;
        }
        sent[static_cast<size_t>(peer)] = here;
        int st = MPI_Isend(&sent[static_cast<size_t>(peer)], sizeof(Activity), MPI_BYTE, peer,
                           kHeartbeatTag, comm, &b);
        if (st != MPI_SUCCESS)
          lost(peer, "MPI_Isend: " + mpiError(st));
      }
      double limit;
      {
        std::lock_guard<std::mutex> lock(mu);
        limit = timeout;
      }
      for (int peer = 0; peer < size; ++peer)
        if (peer != rank && seconds(now - lastHeard[static_cast<size_t>(peer)]) > limit) {
          char text[96];
          std::snprintf(text, sizeof text, "nothing heard from it for %.0f s (--peer-timeout)",
                        limit);
          lost(peer, text);
        }
    }
    return moved;
  }

  /// The notices to every other rank, then the end of the job.
  [[noreturn]] void endJob(int code, const std::string& why, bool notify) {
    std::vector<MPI_Request> sent;
    if (notify)
      for (int peer = 0; peer < size; ++peer) {
        if (peer == rank)
          continue;
        sent.emplace_back(MPI_REQUEST_NULL);
        MPI_Isend(why.data(), static_cast<int>(why.size()), MPI_BYTE, peer, kAbortTag, comm,
                  &sent.back());
      }
    // Up to 2 s for the notices to leave, then a moment for the others to
    // say why they stop, before MPI_Abort ends them all.
    const auto until = Clock::now() + std::chrono::seconds(2);
    while (Clock::now() < until) {
      int all = 1;
      if (!sent.empty() && MPI_Testall(static_cast<int>(sent.size()), sent.data(), &all,
                                       MPI_STATUSES_IGNORE) != MPI_SUCCESS)
        break;
      if (all)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (notify)
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(comm, code);
    std::_Exit(code); // MPI_Abort does not return
  }

  void loop() {
    // Short sleeps wake on time (the default timer slack adds 50 us to each).
    prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
    lastHeard.assign(static_cast<size_t>(size), Clock::now());
    beats.assign(static_cast<size_t>(size), MPI_REQUEST_NULL);
    sent.assign(static_cast<size_t>(size), Activity{});
    lastBeat = Clock::now() - std::chrono::seconds(2);
    int idle = 0;
    for (;;) {
      std::deque<std::shared_ptr<Request>> fresh;
      bool stopping, ending, failed;
      int code;
      std::string why, failedWhy;
      Clock::time_point failedTime;
      {
        std::lock_guard<std::mutex> lock(mu);
        fresh.swap(queued);
        stopping = stop;
        ending = abandoning;
        code = abandonCode;
        why = abandonWhy;
        failed = !failure.empty();
        failedWhy = failure;
        failedTime = failedAt;
      }
      if (ending) // the others know already when the failure came from them
        endJob(code, why, !failed);
      if (failed && seconds(Clock::now() - failedTime) > kGraceSeconds) {
        // The main loop has not ended the process itself (busy elsewhere).
        std::fprintf(stderr, "%s (rank %d): error: %s; ending the job\n", program.c_str(), rank,
                     failedWhy.c_str());
        endJob(1, failedWhy, false);
      }
      for (auto& r : fresh) {
        start(*r);
        active.push_back(r);
      }
      bool moved = !fresh.empty();
      moved = poll() || moved;
      moved = control(!stopping) || moved;
      if (stopping && active.empty())
        break;
      idle = moved ? 0 : idle + 1;
      if (!active.empty()) {
        // Something in flight: poll at once for a while, then every few
        // microseconds up to every 100 (a yield would wait for every other
        // runnable thread of a loaded machine: milliseconds).
        if (idle >= 64)
          std::this_thread::sleep_for(std::chrono::microseconds(std::min(idle - 63, 100)));
      } else {
        std::unique_lock<std::mutex> lock(mu);
        wake.wait_for(lock, std::chrono::milliseconds(20),
                      [&] { return !queued.empty() || stop || abandoning; });
      }
    }
    for (MPI_Request& b : beats) // heartbeats are 16 bytes: sent by now
      if (b != MPI_REQUEST_NULL)
        MPI_Wait(&b, MPI_STATUS_IGNORE);
  }

  void post(std::shared_ptr<Request> r) {
    {
      std::lock_guard<std::mutex> lock(mu);
      queued.push_back(std::move(r));
    }
    wake.notify_all();
  }

  /// Waits for `r`; false with `error` when the job failed first (or the
  /// caller gave up).
  bool await(const std::shared_ptr<Request>& r, std::string* error,
             const std::function<bool()>& cancelled = nullptr) {
    std::unique_lock<std::mutex> lock(mu);
    ++blocked;
    done.wait(lock, [&] { return r->done || !failure.empty() || (cancelled && cancelled()); });
    --blocked;
    if (r->done)
      return true;
    if (error)
      *error = failure.empty() ? "cancelled" : failure;
    return false;
  }
};

std::unique_ptr<Cluster> Cluster::start(const std::string& program, std::string* error) {
  auto bad = [&](const std::string& why) -> std::unique_ptr<Cluster> {
    if (error)
      *error = why;
    return nullptr;
  };
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
    return bad("MPI_Init_thread failed");
  if (provided < MPI_THREAD_SERIALIZED)
    return bad("this MPI library does not support threads (MPI_THREAD_SERIALIZED)");
  std::unique_ptr<Cluster> c(new Cluster());
  c->impl_ = std::make_unique<Impl>();
  Impl& im = *c->impl_;
  im.owner = c.get();
  im.program = program;
  MPI_Comm_dup(MPI_COMM_WORLD, &im.comm);
  // Errors come back as codes: a lost rank is reported, not fatal inside MPI.
  MPI_Comm_set_errhandler(im.comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(im.comm, &c->rank_);
  MPI_Comm_size(im.comm, &c->size_);
  im.rank = c->rank_;
  im.size = c->size_;
  im.theirs.assign(static_cast<size_t>(c->size_), Activity{});
  im.theirsSince.assign(static_cast<size_t>(c->size_), Clock::now());
  MPI_Comm local;
  MPI_Comm_split_type(im.comm, MPI_COMM_TYPE_SHARED, c->rank_, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &c->localRank_);
  MPI_Comm_size(local, &c->localSize_);
  MPI_Comm_free(&local);
  void* tagUb = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tagUb, &flag);
  if (flag && tagUb)
    c->maxTag_ = *static_cast<int*>(tagUb);
  // Every rank's machine, for the messages (nonblocking: a rank that died
  // since MPI_Init fails this after a minute instead of hanging it).
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  constexpr int kName = 256;
  std::vector<char> mine(kName, '\0'), all(static_cast<size_t>(kName * c->size_), '\0');
  std::memcpy(mine.data(), name, static_cast<size_t>(std::min(length, kName - 1)));
  MPI_Request request;
  MPI_Iallgather(mine.data(), kName, MPI_CHAR, all.data(), kName, MPI_CHAR, im.comm, &request);
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  for (int done = 0; !done;) {
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || Clock::now() > deadline)
      return bad("the ranks did not all start: exchanging host names failed");
    if (!done)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (int r = 0; r < c->size_; ++r)
    c->hosts_.emplace_back(all.data() + r * kName);
  im.thread = std::thread([&im] { im.loop(); });
  return c;
}

Cluster::~Cluster() {
  if (!impl_)
    return;
  bool finished;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    finished = impl_->stop;
    impl_->stop = true;
  }
  impl_->wake.notify_all();
  if (impl_->thread.joinable())
    impl_->thread.join();
  if (finished) { // every rank passed finish()'s barrier
    MPI_Comm_free(&impl_->comm);
    MPI_Finalize();
  }
}

std::string Cluster::describe(int r) const {
  std::set<std::string> machines(hosts_.begin(), hosts_.end());
  std::string s = "rank " + std::to_string(r);
  if (machines.size() > 1 && r >= 0 && r < size_)
    s += " (on " + hosts_[static_cast<size_t>(r)] + ")";
  return s;
}

void Cluster::setTimeout(double seconds) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->timeout = seconds;
}

void Cluster::send(int to, int tag, std::vector<unsigned char> bytes) {
  auto r = std::make_shared<Request>();
  r->kind = Request::Send;
  r->peer = to;
  r->tag = tag;
  r->data = std::move(bytes);
  impl_->post(std::move(r));
}

bool Cluster::receive(int from, int tag, std::vector<unsigned char>& out, std::string* error,
                      const std::function<bool()>& cancelled) {
  auto r = std::make_shared<Request>();
  r->kind = Request::Receive;
  r->peer = from;
  r->tag = tag;
  impl_->post(r);
  if (!impl_->await(r, error, cancelled))
    return false;
  out = std::move(r->data);
  return true;
}

void Cluster::wakeWaiters() {
  { std::lock_guard<std::mutex> lock(impl_->mu); }
  impl_->done.notify_all();
}

bool Cluster::broadcast(int root, std::vector<unsigned char>& bytes, std::string* error) {
  auto r = std::make_shared<Request>();
  r->kind = Request::Broadcast;
  r->peer = root;
  r->data = bytes;
  impl_->post(r);
  if (!impl_->await(r, error))
    return false;
  bytes = std::move(r->data);
  return true;
}

bool Cluster::barrier(std::string* error) {
  auto r = std::make_shared<Request>();
  r->kind = Request::Barrier;
  impl_->post(r);
  return impl_->await(r, error);
}

bool Cluster::agree(const std::vector<std::pair<std::string, std::string>>& fields,
                    std::string* problem, std::string* error) {
  auto pack = [](const std::vector<std::pair<std::string, std::string>>& f) {
    std::vector<unsigned char> b;
    for (const auto& [name, value] : f) {
      b.insert(b.end(), name.begin(), name.end());
      b.push_back(0);
      b.insert(b.end(), value.begin(), value.end());
      b.push_back(0);
    }
    return b;
  };
  auto unpack = [](const std::vector<unsigned char>& b) {
    std::vector<std::string> parts;
    std::string cur;
    for (unsigned char ch : b) {
      if (ch == 0) {
        parts.push_back(cur);
        cur.clear();
      } else {
        cur += static_cast<char>(ch);
      }
    }
    return parts;
  };
  std::vector<unsigned char> verdict;
  if (rank_ != 0) {
    send(0, kControl, pack(fields));
    if (!receive(0, kControl, verdict, error))
      return false;
  } else {
    std::string text;
    for (int r = 1; r < size_; ++r) {
      std::vector<unsigned char> theirs;
      if (!receive(r, kControl, theirs, error))
        return false;
      std::vector<std::string> t = unpack(theirs);
      if (t.size() != 2 * fields.size()) {
        text += (text.empty() ? "" : "; ") + describe(r) + " runs another program";
        continue;
      }
      for (size_t k = 0; k < fields.size(); ++k) {
        if (t[2 * k] == fields[k].first && t[2 * k + 1] == fields[k].second)
          continue;
        auto quote = [](const std::string& s) {
          return "'" + (s.size() > 300 ? s.substr(0, 300) + "..." : s) + "'";
        };
        text += (text.empty() ? "" : "; ") + describe(r) + " differs from rank 0 in its " +
                fields[k].first + ": " + quote(t[2 * k + 1]) + " vs " + quote(fields[k].second);
        break;
      }
    }
    verdict.assign(text.begin(), text.end());
    for (int r = 1; r < size_; ++r)
      send(r, kControl, verdict);
  }
  if (problem)
    problem->assign(verdict.begin(), verdict.end());
  return verdict.empty();
}

void Cluster::stepActivity(uint64_t progress, bool waiting) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->mine = Activity{progress, waiting ? 1u : 0u};
  impl_->inStep = true;
}

void Cluster::stepEnded() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->inStep = false;
  ++impl_->mine.progress;
}

bool Cluster::othersWaiting(double seconds) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const auto now = Clock::now();
  for (int r = 0; r < size_; ++r)
    if (r != rank_ && (!impl_->theirs[static_cast<size_t>(r)].waiting ||
                       lwrt::seconds(now - impl_->theirsSince[static_cast<size_t>(r)]) < seconds))
      return false;
  return true;
}

std::string Cluster::failure() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->failure;
}

void Cluster::abandon(int code, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->abandoning = true;
    impl_->abandonCode = code;
    impl_->abandonWhy = why;
  }
  impl_->wake.notify_all();
  // The thread ends the job; should it be gone, or MPI_Abort not end this
  // process, exit anyway.
  const auto until = Clock::now() + std::chrono::seconds(15);
  while (Clock::now() < until && impl_->thread.joinable())
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(code);
}

bool Cluster::finish(std::string* error) {
  if (!barrier(error))
    return false;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->wake.notify_all();
  impl_->thread.join();
  return true;
}

} // namespace lwrt
