// The evaluation farm: rank 0 runs the engine and its strategy; every rank (rank 0 included, unless
// coordinator_evaluates is off) evaluates candidates on its own copy of the problem -- its own
// runner, its own device. Genomes go out one per message, an Evaluation comes back: two messages
// per evaluation. Results land in their proposal slot, so a deterministic problem gives the same
// history for the same seed at any rank count (and a farm run resumes on another rank count).
//
//   kevo::mpi::Session s;
//   kevo::mpi::Farm farm(s, evo::Problem(my_problem), {});     // collective: every rank
//   if (s.rank() == 0) {
//     evo::Engine engine(farm.problem(), farm.adapt(cfg));       // any engine use, resume included
//     auto r = engine.run();
//     farm.close();                                              // releases the other ranks
//   } else {
//     farm.serve();                                              // evaluates until rank 0 closes
//   }
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kevo/evo/engine.hpp"
#include "kevo/evo/problem.hpp"
#include "kevo/mpi/session.hpp"

namespace kevo::mpi {

struct FarmOptions {
  // Longest wait for one evaluation sent to a rank (and for a worker rank, for word from rank 0);
  // past it the farm fails: evaluations in flight come back as Status::error naming the rank, the
  // failure callback runs (the CLI: engine.request_stop(), then MPI_Abort) and later batches fail at
  // once. Keep it above the runner's own per-candidate limit (its retries included).
  double timeout_s = 1800;
  bool coordinator_evaluates = true;  // rank 0 evaluates too (one of its threads), besides running the strategy
};

struct FarmStats {
  std::uint64_t evaluations = 0;       // evaluated through the farm (rank 0's own included)
  std::uint64_t remote = 0;            // of those, by other ranks
  std::uint64_t messages = 0;          // point-to-point messages (hello and stop included)
  std::uint64_t bytes = 0;             // payload bytes of those messages
  double remote_round_trip_s = 0;      // summed: job sent -> result received, remote evaluations
  double remote_evaluate_s = 0;        // summed: the worker's own evaluate() time of those
  std::vector<std::uint64_t> per_rank; // evaluations by rank
  // Mean MPI overhead of a remote evaluation: round trip minus the worker's evaluate() time.
  [[nodiscard]] double overhead_s() const { return remote ? (remote_round_trip_s - remote_evaluate_s) / double(remote) : 0.0; }
};

class Farm {
 public:
  // Collective over the session's ranks. Each rank passes its own problem, built the same way
  // (the same space: checked by fingerprint at start; a different one is a kevo::Error on rank 0).
  Farm(Session& session, evo::Problem local, FarmOptions options = {});
  ~Farm();  // closes (rank 0) without throwing
  Farm(const Farm&) = delete;
  Farm& operator=(const Farm&) = delete;

  // Rank 0: the problem the engine evaluates through (thread-safe; repair, text forms and
  // descriptors are the local problem's). Waits for every worker's hello on first use.
  [[nodiscard]] evo::Problem problem();
  // Rank 0: cfg fitted to the farm: the steady-state mode keeps one evaluation in flight per
  // evaluating rank (in_flight, threads, raise_thread_limit); generational modes are unchanged.
  [[nodiscard]] evo::Config adapt(evo::Config cfg) const;
  // Rank 0: called once, from the farm's thread, when a rank fails (the message says which and why).
  void on_failure(std::function<void(const std::string&)> callback);
  // Rank 0: the failure message, empty while the farm is healthy.
  [[nodiscard]] std::string failure() const;
  // Rank 0: tells every worker to return from serve() (bounded by timeout_s). Idempotent.
  void close();
  // Other ranks: evaluates what rank 0 sends until it closes the farm; throws RankError when rank 0
  // sends nothing for timeout_s.
  void serve();
  // Evaluating ranks (workers + rank 0 when it evaluates).
  [[nodiscard]] int evaluators() const noexcept;
  // Rank 0: message and timing counts so far.
  [[nodiscard]] FarmStats stats() const;

  struct Impl;  // defined in lib/mpi (MPI stays out of this header)

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace kevo::mpi
