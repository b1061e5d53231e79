// The evaluation farm. Rank 0: the engine calls FarmProblem::evaluate (from any thread); jobs go
// into one queue; a communication thread (the only thread that calls MPI while the farm runs)
// hands them one at a time to idle worker ranks and collects results, and a local thread
// evaluates on rank 0's own copy of the problem. Every wait is bounded by FarmOptions::timeout_s.
#include "kevo/mpi/farm.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "comm.hpp"
#include "kevo/core/hash.hpp"

namespace kevo::mpi {

namespace {

constexpr int kHello = 11, kJob = 12, kResult = 13, kStop = 14;

evo::Evaluation failed(std::string why) {
  evo::Evaluation e;
  e.status = Status::error;
  e.reason = std::move(why);
  return e;
}

evo::Evaluation evaluate_one(const evo::Problem& p, const Genome& g, int rank) {
  try {
    auto r = p.evaluate(std::span<const Genome>(&g, 1));
    if (r.size() != 1) return failed(fmt::format("rank {}: problem returned {} evaluations for 1 genome", rank, r.size()));
    return std::move(r[0]);
  } catch (const std::exception& ex) {
    return failed(fmt::format("rank {}: evaluate threw: {}", rank, ex.what()));
  } catch (...) {
    return failed(fmt::format("rank {}: evaluate threw a non-standard exception", rank));
  }
}

struct Batch {
  std::size_t left = 0;
};

struct Job {
  const Genome* genome = nullptr;
  evo::Evaluation* out = nullptr;
  Batch* batch = nullptr;
};

}  // namespace

struct Farm::Impl {
  Session& session;
  MPI_Comm comm = MPI_COMM_NULL;
  evo::Problem local;
  FarmOptions opt;
  std::uint64_t fingerprint = 0;
  int rank = 0, size = 1;

  // Rank 0.
  mutable std::mutex m;
  std::condition_variable cv_work, cv_done;
  std::deque<Job> queue;
  std::string failure;
  std::function<void(const std::string&)> on_fail;
  bool started = false, closing = false, closed = false;
  std::thread comm_thread, local_thread;
  std::vector<int> workers;
  FarmStats st;

  Impl(Session& s, evo::Problem p, FarmOptions o) : session(s), local(std::move(p)), opt(o) {
    MPI_Comm_dup(s.impl().world, &comm);
    rank = s.rank();
    size = s.size();
    fingerprint = space_fingerprint(local.space());
    st.per_rank.assign(static_cast<std::size_t>(size), 0);
    if (rank != 0) {
      detail::Writer w;
      w.u64(fingerprint).str(s.host());
      detail::send_bytes(comm, w.out, 0, kHello);
    }
  }
  ~Impl() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm);
  }

  // Rank 0: every worker's hello (same space?), then the threads.
  void start() {
    if (started) return;
    started = true;
    const auto deadline = detail::deadline_in(opt.timeout_s);
    for (int got = 1; got < size; ++got) {
      auto probed = detail::probe_until(comm, MPI_ANY_SOURCE, kHello, deadline);
      if (!probed) {
        std::string missing;
        for (int r = 1; r < size; ++r)
          if (std::find(workers.begin(), workers.end(), r) == workers.end()) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        throw RankError(fmt::format("mpi farm: rank(s) {} did not join within {} s (each rank must build its problem and "
                                    "create the farm)", missing, opt.timeout_s));
      }
      const auto buf = detail::recv_probed(comm, *probed);
      detail::Reader r(buf, "hello");
      const auto fp = r.u64();
      const auto host = r.str();
      ++st.messages;
      st.bytes += buf.size();
      if (fp != fingerprint)
        throw Error(fmt::format("mpi farm: rank {} on {} built a different search space than rank 0 (fingerprint {:016x}, "
                                "rank 0 has {:016x}); start every rank with the same options and files",
                                probed->MPI_SOURCE, host, fp, fingerprint));
      workers.push_back(probed->MPI_SOURCE);
    }
    std::sort(workers.begin(), workers.end());
    comm_thread = std::thread([this] { comm_loop(); });
    if (opt.coordinator_evaluates || size == 1) local_thread = std::thread([this] { local_loop(); });
  }

  void finish_job(const Job& j, evo::Evaluation e) {  // under m
    *j.out = std::move(e);
    if (--j.batch->left == 0) cv_done.notify_all();
  }

  void fail(std::string why) {  // under m
    if (!failure.empty()) return;
    failure = std::move(why);
    for (auto& j : queue) finish_job(j, failed(failure));
    queue.clear();
    cv_work.notify_all();
  }

  std::vector<evo::Evaluation> evaluate(std::span<const Genome> gs) {
    std::vector<evo::Evaluation> out(gs.size());
    if (gs.empty()) return out;
    Batch b;
    b.left = gs.size();
    std::unique_lock<std::mutex> lk(m);
    if (!started) throw Error("mpi farm: evaluate before start (use Farm::problem())");
    if (!failure.empty() || closing) {
      for (auto& e : out) e = failed(closing ? std::string("mpi farm: closed") : failure);
      return out;
    }
    for (std::size_t i = 0; i < gs.size(); ++i) queue.push_back(Job{&gs[i], &out[i], &b});
    cv_work.notify_all();
    cv_done.wait(lk, [&] { return b.left == 0; });
    return out;
  }

  void local_loop() {
    const evo::Problem mine = local.clone();
    std::unique_lock<std::mutex> lk(m);
    while (true) {
      cv_work.wait(lk, [&] { return closing || !queue.empty(); });
      if (queue.empty()) return;  // closing
      Job j = queue.front();
      queue.pop_front();
      lk.unlock();
      auto e = evaluate_one(mine, *j.genome, 0);
      lk.lock();
      ++st.evaluations;
      ++st.per_rank[0];
      finish_job(j, std::move(e));
    }
  }

  void comm_loop() {
    struct Slot {
      bool busy = false;
      Job job;
      std::uint64_t id = 0;
      detail::Clock::time_point sent;
      std::string buf;
      MPI_Request req = MPI_REQUEST_NULL;
    };
    std::vector<Slot> slots(static_cast<std::size_t>(size));
    std::uint64_t next_id = 0;
    detail::Backoff backoff(std::chrono::microseconds(50));  // one thread, polling only while jobs are out
    std::vector<int> to_send;
    std::string failed_msg;
    bool reported = false;
    while (true) {
      bool did = false;
      to_send.clear();
      {
        std::unique_lock<std::mutex> lk(m);
        if (!failure.empty())
          for (auto& s : slots)
            if (s.busy) {
              finish_job(s.job, failed(failure));
              s.busy = false;
            }
        const bool any_busy = std::any_of(slots.begin(), slots.end(), [](const Slot& s) { return s.busy; });
        if (closing && (queue.empty() || !failure.empty()) && !any_busy) break;
        if (failure.empty())
          for (int w : workers) {
            auto& s = slots[static_cast<std::size_t>(w)];
            if (s.busy || queue.empty()) continue;
            s.job = queue.front();
            queue.pop_front();
            s.busy = true;
            s.id = next_id++;
            to_send.push_back(w);
          }
        if (to_send.empty() && !any_busy) {
          // Nothing out: sleep until work comes (no polling while idle).
          cv_work.wait_for(lk, std::chrono::milliseconds(50));
          continue;
        }
        if (!failure.empty() && !reported) {
          reported = true;
          failed_msg = failure;
        }
      }
      for (int w : to_send) {
        auto& s = slots[static_cast<std::size_t>(w)];
        if (s.req != MPI_REQUEST_NULL) MPI_Wait(&s.req, MPI_STATUS_IGNORE);  // the previous job's send (long done)
        detail::Writer wr;
        wr.u64(s.id).genome(*s.job.genome);
        s.buf = std::move(wr.out);
        s.sent = detail::Clock::now();
        MPI_Isend(s.buf.data(), static_cast<int>(s.buf.size()), MPI_BYTE, w, kJob, comm, &s.req);
        std::lock_guard<std::mutex> g(m);
        ++st.messages;
        st.bytes += s.buf.size();
        did = true;
      }
      while (true) {
        int flag = 0;
        MPI_Status ps;
        MPI_Iprobe(MPI_ANY_SOURCE, kResult, comm, &flag, &ps);
        if (!flag) break;
        const auto now = detail::Clock::now();
        const auto buf = detail::recv_probed(comm, ps);
        did = true;
        auto& s = slots[static_cast<std::size_t>(ps.MPI_SOURCE)];
        std::lock_guard<std::mutex> g(m);
        ++st.messages;
        st.bytes += buf.size();
        try {
          detail::Reader r(buf, fmt::format("result from rank {}", ps.MPI_SOURCE));
          const auto id = r.u64();
          const double eval_s = r.f64();
          auto e = r.evaluation();
          if (!s.busy || id != s.id)
            throw RankError(fmt::format("mpi farm: rank {} returned job {} but was sent {}", ps.MPI_SOURCE, id, s.id));
          ++st.evaluations;
          ++st.remote;
          ++st.per_rank[static_cast<std::size_t>(ps.MPI_SOURCE)];
          st.remote_round_trip_s += std::chrono::duration<double>(now - s.sent).count();
          st.remote_evaluate_s += eval_s;
          s.busy = false;
          finish_job(s.job, std::move(e));
        } catch (const std::exception& ex) {
          fail(ex.what());
        }
      }
      {
        std::lock_guard<std::mutex> g(m);
        const auto now = detail::Clock::now();
        for (int w : workers) {
          const auto& s = slots[static_cast<std::size_t>(w)];
          if (s.busy && std::chrono::duration<double>(now - s.sent).count() > opt.timeout_s)
            fail(fmt::format("mpi farm: rank {} returned no evaluation within {} s (hung, or its runner's limit is above "
                             "the farm's timeout)", w, opt.timeout_s));
        }
        if (!failure.empty() && !reported) {
          reported = true;
          failed_msg = failure;
        }
      }
      if (!failed_msg.empty()) {
        std::function<void(const std::string&)> cb;
        {
          std::lock_guard<std::mutex> g(m);
          cb = on_fail;
        }
        if (cb) cb(failed_msg);
        failed_msg.clear();
      }
      if (did)
        backoff.reset();
      else
        backoff.pause();
    }
    // Sends of jobs whose results came back are complete; a failed rank's may never be.
    std::lock_guard<std::mutex> g(m);
    if (failure.empty())
      for (auto& s : slots)
        if (s.req != MPI_REQUEST_NULL) MPI_Wait(&s.req, MPI_STATUS_IGNORE);
  }

  void close() {
    if (rank != 0) return;
    {
      std::lock_guard<std::mutex> g(m);
      if (closed) return;
      closed = true;
    }
    if (!started) start();  // takes in the hellos, so no message is left unreceived
    {
      std::lock_guard<std::mutex> g(m);
      closing = true;
      cv_work.notify_all();
    }
    if (comm_thread.joinable()) comm_thread.join();
    if (local_thread.joinable()) local_thread.join();
    if (!failure.empty()) return;  // the job ends by MPI_Abort; a hung rank would not take a stop
    std::vector<MPI_Request> reqs(workers.size(), MPI_REQUEST_NULL);
    char none = 0;
    for (std::size_t i = 0; i < workers.size(); ++i) MPI_Isend(&none, 0, MPI_BYTE, workers[i], kStop, comm, &reqs[i]);
    st.messages += workers.size();
    const auto deadline = detail::deadline_in(opt.timeout_s);
    for (std::size_t i = 0; i < reqs.size(); ++i)
      if (!detail::wait_until(reqs[i], deadline))
        throw RankError(fmt::format("mpi farm: rank {} did not take the stop within {} s", workers[i], opt.timeout_s));
  }

  void serve() {
    if (rank == 0) throw Error("mpi farm: serve() is for ranks other than 0");
    while (true) {
      auto probed = detail::probe_until(comm, 0, MPI_ANY_TAG, detail::deadline_in(2 * opt.timeout_s + 60));
      if (!probed)
        throw RankError(fmt::format("mpi farm: rank {}: no word from rank 0 within {} s (rank 0 hung or gone)", rank,
                                    2 * opt.timeout_s + 60));
      const auto buf = detail::recv_probed(comm, *probed);
      if (probed->MPI_TAG == kStop) return;
      if (probed->MPI_TAG != kJob) throw RankError(fmt::format("mpi farm: rank {}: unexpected message tag {} from rank 0", rank, probed->MPI_TAG));
      detail::Reader r(buf, "job");
      const auto id = r.u64();
      const Genome g = r.genome();
      const auto t0 = detail::Clock::now();
      auto e = evaluate_one(local, g, rank);
      const double dt = std::chrono::duration<double>(detail::Clock::now() - t0).count();
      detail::Writer w;
      w.u64(id).f64(dt).evaluation(e);
      detail::send_bytes(comm, w.out, 0, kResult);
    }
  }
};

namespace {

struct FarmProblem {
  std::shared_ptr<Farm::Impl> f;
  [[nodiscard]] const Space& space() const { return f->local.space(); }
  [[nodiscard]] std::vector<evo::Evaluation> evaluate(std::span<const Genome> gs) const { return f->evaluate(gs); }
  [[nodiscard]] std::string name() const { return f->local.name(); }
  [[nodiscard]] bool deterministic() const { return f->local.deterministic(); }
  [[nodiscard]] evo::ThreadSafety thread_safety() const { return evo::ThreadSafety::constant; }
  [[nodiscard]] std::string to_text(const Genome& g) const { return f->local.to_text(g); }
  [[nodiscard]] Expected<Genome, std::string> from_text(std::string_view s) const { return f->local.from_text(s); }
  bool repair(Genome& g, Rng& r) const { return f->local.repair(g, r); }
  [[nodiscard]] std::vector<std::string> descriptor_names() const { return f->local.descriptor_names(); }
  [[nodiscard]] std::string context() const { return f->local.context(); }
};
// The same, passing on the local problem's features (for cost models such as the surrogate):
// computed on rank 0 from its own copy, like repair. Only when the local problem has them, since
// a features() member that returns nothing would call every genome invalid.
struct FarmProblemWithFeatures : FarmProblem {
  [[nodiscard]] std::vector<double> features(const Genome& g) const { return f->local.features(g); }
};

}  // namespace

Farm::Farm(Session& session, evo::Problem local, FarmOptions options)
    : impl_(std::make_shared<Impl>(session, std::move(local), options)) {
  if (!(options.timeout_s > 0)) throw Error(fmt::format("mpi farm: timeout must be > 0 s (got {})", options.timeout_s));
}

Farm::~Farm() {
  try {
    impl_->close();
  } catch (const std::exception& e) {
    fmt::print(stderr, "kevo: {}\n", e.what());
  }
}

evo::Problem Farm::problem() {
  if (impl_->rank != 0) throw Error("mpi farm: problem() is rank 0's (the other ranks call serve())");
  impl_->start();
  if (impl_->local.has_features()) return evo::Problem(FarmProblemWithFeatures{{impl_}});
  return evo::Problem(FarmProblem{impl_});
}

evo::Config Farm::adapt(evo::Config cfg) const {
  if (cfg.algorithm == evo::Algorithm::steady_state) {
    cfg.threads = std::max(cfg.threads, evaluators());
    cfg.in_flight = 0;  // 2 x threads: one evaluation running and one queued per evaluating rank
    cfg.raise_thread_limit = true;
  }
  return cfg;
}

void Farm::on_failure(std::function<void(const std::string&)> callback) {
  std::lock_guard<std::mutex> g(impl_->m);
  impl_->on_fail = std::move(callback);
}

std::string Farm::failure() const {
  std::lock_guard<std::mutex> g(impl_->m);
  return impl_->failure;
}

void Farm::close() { impl_->close(); }
void Farm::serve() { impl_->serve(); }

int Farm::evaluators() const noexcept {
  return impl_->size - 1 + ((impl_->opt.coordinator_evaluates || impl_->size == 1) ? 1 : 0);
}

FarmStats Farm::stats() const {
  std::lock_guard<std::mutex> g(impl_->m);
  return impl_->st;
}

}  // namespace kevo::mpi
