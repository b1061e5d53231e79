// A search as front ends run it: a kernel problem searched by the engine, the winner re-timed when
// the runner is noisy and named only once it verifies against the reference evaluator (runners by
// name, results directories and reports: the session module, kevo/session.hpp). The Python module and the C API (include/kevo/kevo.h) are thin users of
// this; so is anything else that embeds kevo and wants the CLI's guarantees without its files.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kevo/core/error.hpp"
#include "kevo/core/expected.hpp"
#include "kevo/evo/engine.hpp"
#include "kevo/runner/runner.hpp"
#include "kevo/search/kernel_problem.hpp"
#include "kevo/search/verify_best.hpp"
#include "kevo/target/target.hpp"

namespace kevo::search {

// The search `kevo search` runs by default (lib/cli builds its configuration from this, flags on
// top): the built-in GA with evo::Config's defaults except a population of kDefaultPopulation,
// kDefaultBudget evaluations, `seed`, and `threads` evaluation threads (0: one per core, raising
// TBB's limit as an application does).
inline constexpr std::uint64_t kDefaultBudget = 2000;
// The GA's, 16 rather than evo::Config's 32: at 2,000 evaluations the kernel search gains more
// from twice the generations than from a wider population (docs/BENCHMARKS.md, "The kernel
// search's population", measured on 9 tuned and 13 held-out matmul shapes and on `make run`'s job).
inline constexpr std::size_t kDefaultPopulation = 16;
// The population `kevo search` gives `algorithm` when none is asked for: kDefaultPopulation for
// the GA (the only algorithm it was measured for), evo::Config's default for every other one.
std::size_t default_population(evo::Algorithm algorithm);

// What a resumed run must share with the recorded one beyond the engine's configuration: the
// kernel, the target (and its definition) and the runner, kept as problem.json in the checkpoint
// directory. run_search writes and checks it; a front end with its own checkpoint (kevo search)
// does the same with these. The check passes where no record is (a checkpoint from before it);
// else it returns why the resume is refused, or "".
void write_problem_identity(const std::filesystem::path& checkpoint_dir, const KernelProblem& problem);
std::string problem_identity_mismatch(const std::filesystem::path& checkpoint_dir, const KernelProblem& problem);
evo::Config default_search_config(std::uint64_t seed = 1, int threads = 0);

struct SearchOptions {
  evo::Config config;                       // algorithm, seed, threads, population, budget, checkpoint
  std::vector<std::string> seed_schedules;  // schedule texts evaluated first (added to config.seeds)
  // The space's default schedule joins the seeds (after seed_schedules; repaired when it does not
  // plan, as a 1,000-op chain fused whole overflows SBUF), so the first batch measures it and a
  // search with a deterministic runner never names a schedule slower than the default.
  bool seed_default = true;
  // The space's rule-written schedules (ScheduleSpace::expert_genomes) are offered halfway through
  // an evaluation budget (evo::Config::late_seeds, late_seeds_at = max_evaluations / 2; nothing
  // without one). Seeded from the start they capture the search; halfway they join a population
  // that has found its own way (docs/EVOLUTION.md, "Late seeds"). Config::late_seeds given by the
  // caller are kept as they are.
  bool late_expert_seeds = true;
  std::size_t verify_candidates = 8;        // leaders checked against the reference, best first
  double verify_seconds = 120;              // after the first candidate, no new check starts past this
  int remeasure_rounds = 3;                 // noisy runners: extra measurements of the top 5 before naming a winner
  std::uint64_t verify_seed = 0x5eed;
  // A strategy of the caller's own (a plug-in, see kevo/evo/strategy.hpp) in place of the built-in
  // that config.algorithm names.
  std::optional<evo::Strategy> strategy;
  // Reopen config.checkpoint.dir, a run interrupted (or finished) there, instead of starting one:
  // its journal is replayed and the run goes on to config's budget. Only the budgets, threads and
  // checkpoint settings may differ from the recorded run (anything else is an error naming the
  // field); the expert schedules come at the point the run recorded. A directory that holds no
  // evaluation yet starts afresh.
  bool resume = false;
};

// Called on the thread that called run_search, in evaluation order.
struct SearchHooks {
  std::function<void(const evo::Individual&)> on_evaluation;
  std::function<void(const evo::Individual&)> on_new_best;
  // After each generation (one batch of evaluations, all of them through on_evaluation first): a
  // caller that buffers what on_evaluation gives it (records::Recorder) writes it out here, so that
  // a kill loses at most the batch in flight.
  std::function<void()> on_generation;
  std::function<void(std::size_t i, std::size_t n)> on_verify;  // verifying candidate i of n
  // Polled after every evaluation: true stops the search (the current batch finishes first).
  // Polled after re-timing the leaders too: true then discards the re-timing (its measurements
  // may have been cut short) and the engine's figures rank the candidates.
  std::function<bool()> should_stop;
  // Called with the engine once it is made and with nullptr once its run has ended (before the
  // winner is verified): a signal handler can call its request_stop() in between, so that a stop
  // does not wait for the next evaluation (a process runner's candidate can take minutes).
  std::function<void(evo::Engine*)> on_engine;
};

// A stop of a running search that another thread or a signal handler requests at once
// (request() is async-signal-safe: atomics only). It stops the engine first, then sets the
// runner's cancel flag (session::RunnerOptions::cancel: a cmd: runner kills its workers), so that
// a measurement the cancel cuts short finds the stop set and is not counted. Wire it with
// hooks(): should_stop and on_engine. A request made before the engine exists stops it before its
// first batch. reset() clears a request (the Python module and the C API hold one each).
class AsyncStop {
 public:
  void request() noexcept {
    in_flight_.fetch_add(1, std::memory_order_acq_rel);
    requested_.store(true, std::memory_order_release);
    if (evo::Engine* e = engine_.load(std::memory_order_acquire)) e->request_stop();
    cancel_.store(true, std::memory_order_release);
    in_flight_.fetch_sub(1, std::memory_order_acq_rel);
  }
  [[nodiscard]] bool requested() const noexcept { return requested_.load(std::memory_order_acquire); }
  [[nodiscard]] const std::atomic<bool>* runner_cancel() const noexcept { return &cancel_; }
  void reset() noexcept {
    requested_.store(false, std::memory_order_release);
    cancel_.store(false, std::memory_order_release);
  }
  // SearchHooks::on_engine. Clearing waits for a request in flight, so that none calls
  // request_stop() on an engine being destroyed.
  void engine(evo::Engine* e) noexcept {
    engine_.store(e, std::memory_order_release);
    if (e != nullptr && requested()) e->request_stop();
    if (e == nullptr)
      while (in_flight_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  }

 private:
  std::atomic<bool> requested_{false}, cancel_{false};
  std::atomic<int> in_flight_{0};
  std::atomic<evo::Engine*> engine_{nullptr};
};

struct UnverifiedCandidate {
  evo::Individual individual;
  Verification verification;
};

struct SearchOutcome {
  evo::Result result;                        // the engine's own figures (best by fitness, unverified)
  std::vector<evo::Individual> history;      // every evaluation of this session, in order
  std::optional<evo::Individual> best;       // the verified winner (fitness re-timed for noisy runners)
  Verification verification;                 // of `best`, or of the last candidate checked when none verified
  std::vector<UnverifiedCandidate> rejected; // faster candidates that failed verification
  std::optional<runner::Measurement> best_measurement;  // the winner's measurement, when the cache holds it
  std::string best_schedule;                 // the winner's schedule text (empty without a winner)
  bool stopped = false;                      // should_stop ended it
};

// `texts` (SearchOptions::seed_schedules) read in `problem`'s space, each named "<seed schedule
// N>" in a located message: what run_search seeds with. Front ends call it first to report a seed
// that does not parse as a parse error, apart from run_search's other failures.
Expected<std::vector<Genome>, Diagnostic> parse_seed_schedules(const KernelProblem& problem,
                                                               const std::vector<std::string>& texts);

// Searches `problem`. Bad seed schedules and unusable configurations are errors (a located
// message); I/O failures of the checkpoint directory throw kevo::Error.
Expected<SearchOutcome, std::string> run_search(const KernelProblem& problem, const SearchOptions& options,
                                                const SearchHooks& hooks = {});

}  // namespace kevo::search
