// The search itself: an Engine evolves genomes of a Problem with a Strategy (a built-in one named by
// Config::algorithm -- GA, islands, MAP-Elites, steady-state asynchronous, random, exhaustive -- or
// any user type, kevo/evo/strategy.hpp), evaluates them in parallel on a oneTBB arena, credits
// operators through an adaptive bandit, journals every evaluation and snapshots its state (the
// strategy's included) so that a killed run resumes without losing work.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kevo/evo/archive.hpp"
#include "kevo/evo/operator.hpp"
#include "kevo/evo/problem.hpp"
#include "kevo/evo/strategy.hpp"

namespace kevo::evo {

enum class Algorithm : std::uint8_t { ga, islands, map_elites, steady_state, random, exhaustive, surrogate };
enum class Topology : std::uint8_t { ring, random };
enum class StopReason : std::uint8_t {
  none,
  evaluations,          // budget.max_evaluations reached
  time,                 // budget.max_seconds reached
  cost,                 // budget.max_cost reached (operator cost, e.g. LLM dollars)
  patience,             // budget.patience evaluations without a new best
  target,               // budget.target_fitness reached
  generations,          // budget.max_generations reached
  space_exhausted,      // every genome of the space was evaluated (or no new one could be found)
  operators_exhausted,  // every operator reported exhausted()
  requested,            // request_stop() (Ctrl-C)
};

std::string_view to_string(Algorithm a) noexcept;
std::string_view to_string(Topology t) noexcept;
std::string_view to_string(StopReason r) noexcept;
std::optional<Algorithm> algorithm_from_string(std::string_view s) noexcept;
std::optional<Topology> topology_from_string(std::string_view s) noexcept;

struct IslandConfig {
  int count = 4;                      // number of populations (Algorithm::islands)
  Topology topology = Topology::ring; // ring: i -> i+1; random: each island picks another
  int interval = 5;                   // generations between migrations
  double rate = 0.1;                  // share of a population sent (at least one individual)
};

// Zero means "no limit" for every field.
struct Budget {
  std::uint64_t max_evaluations = 1000;
  double max_seconds = 0;             // wall time, summed over resumed sessions
  double max_cost = 0;                // sum of operator cost() increments (e.g. dollars)
  std::uint64_t patience = 0;         // evaluations without a new best
  std::optional<double> target_fitness;  // stop once best fitness[0] <= target
  std::uint64_t max_generations = 0;
};

struct CheckpointConfig {
  std::filesystem::path dir;          // empty: no journal, no snapshots
  int snapshot_interval = 1;          // generations between snapshots (steady state: x population evaluations)
  bool sync = true;                   // fdatasync journal batches and fsync snapshots (survive power loss;
                                      // without it a run still survives any kill of the process)
};

struct Config {
  Algorithm algorithm = Algorithm::ga;  // the built-in strategy (Engine::set_strategy replaces it)
  std::uint64_t seed = 0;
  int threads = 1;                    // oneTBB arena size for evaluation
  std::size_t population = 32;        // per island; batch size of random and map_elites (exhaustive: at least 64)
  std::size_t elites = 2;             // individuals copied unchanged into the next generation
  std::size_t tournament = 3;         // tournament size of parent selection
  double mutation_rate = 0.0;         // per-gene probability of the built-in Mutate/Reset (0: 1/genes)
  double crossover_rate = 0.5;        // initial bandit weight of crossover (mutate has 1, reset 0.25)
  bool builtin_operators = true;      // register Mutate, Reset and GroupCrossover
  bool adaptive_operators = true;     // false: operators are drawn with their fixed initial weights
  IslandConfig islands;
  ArchiveConfig archive;              // MAP-Elites grid (beside the GA when bins are set)
  Budget budget;
  CheckpointConfig checkpoint;
  std::size_t in_flight = 0;          // steady_state: evaluations kept running (0: 2 x threads)
  std::optional<bool> deterministic;  // default: problem.deterministic(); steady_state never is
  std::uint64_t exhaustive_limit = 1'000'000;  // largest space Algorithm::exhaustive accepts
  std::vector<Genome> seeds;          // genomes evaluated first (e.g. a hand-written schedule)
  // Genomes offered once `late_seeds_at` evaluations are done (0: never), in the next batch and,
  // until each is evaluated, every batch after it; a genome the run knows is skipped. For good
  // starting points that would capture a search seeded with them from the start (the kernel
  // search's rule-derived schedules: docs/EVOLUTION.md, "Late seeds"). Part of a run's identity.
  std::vector<Genome> late_seeds;
  std::uint64_t late_seeds_at = 0;
  // More evaluation threads than cores (threads or in_flight above the hardware concurrency) need
  // TBB's process-wide limit raised (tbb::global_control) while run() runs: for runners that wait
  // on devices. Off: such threads are capped by TBB at the core count. Not part of a checkpoint.
  bool raise_thread_limit = false;
};

struct OperatorStats {
  std::string name;
  std::uint64_t proposals = 0;     // genomes proposed
  std::uint64_t evaluated = 0;     // proposals that were evaluated (or replayed from the journal)
  std::uint64_t duplicates = 0;    // dropped: genome already evaluated in this run
  std::uint64_t outside = 0;       // dropped: outside the space and not repairable
  std::uint64_t improvements = 0;  // children better than their best parent
  std::uint64_t new_bests = 0;     // children that became the run's best
  double cost = 0;                 // operator cost spent (cost() increments)
  double weight = 0;               // current bandit share of proposals, in [0, 1]
};

struct GenerationStats {
  std::uint64_t generation = 0;
  std::uint64_t evaluations = 0;   // total so far in the run
  double best = 0;                 // best fitness[0] so far (+inf when none is valid)
  double mean = 0;                 // mean fitness[0] of the valid members of the population(s)
  double valid_share = 0;          // share of this generation's evaluations that were valid
  std::size_t archive_size = 0;    // filled MAP-Elites cells
  std::vector<OperatorStats> operators;
};

// Callbacks run on the thread that called run(), in evaluation order; any may be empty.
// Evaluations replayed from a journal on resume do not trigger on_evaluation / on_new_best
// (the killed run reported them already; read_journal() returns the whole history).
struct Observer {
  std::function<void(const Individual&)> on_evaluation;
  std::function<void(const Individual&)> on_new_best;
  std::function<void(const GenerationStats&)> on_generation;
};

struct Result {
  std::optional<Individual> best;          // nullopt when no evaluation was valid
  std::vector<Individual> elites;          // best distinct individuals of the population(s), best first
  std::vector<Individual> archive;         // MAP-Elites elites in cell order (empty without archive)
  std::vector<std::uint64_t> archive_cells;
  std::uint64_t evaluations = 0;           // evaluations in the run (all sessions)
  std::uint64_t valid = 0;
  std::array<std::uint64_t, 6> by_status{};// indexed by kevo::Status
  std::uint64_t duplicates = 0;            // proposals skipped as already evaluated
  std::uint64_t outside = 0;               // proposals dropped as outside the space
  std::uint64_t replayed = 0;              // evaluations taken from the journal on resume
  std::uint64_t generations = 0;
  double wall_seconds = 0;                 // summed over sessions
  double cost = 0;                         // operator cost spent
  double evaluation_cost = 0;              // sum of Evaluation::cost
  StopReason stop_reason = StopReason::none;
  bool deterministic = false;
  std::string determinism_note;            // why a run is not deterministic, when it is not
  std::uint64_t history_hash = 0;          // StableHasher over (id, genome, status, fitness) in id order
  std::vector<OperatorStats> operators;
};

class Engine {
 public:
  // Throws kevo::Error on an unusable configuration (with the field named) or when
  // config.checkpoint.dir already holds a run.
  Engine(Problem problem, Config config);
  // Reopens a checkpoint directory written by an earlier run. The stored configuration is used;
  // the second form replaces it, but only budgets, threads, checkpoint.sync/snapshot_interval may
  // differ (anything else is a kevo::Error naming the field). Operators added with add_operator
  // must be added again, in the same order, before run(). A corrupt or foreign checkpoint is a
  // kevo::Error "checkpoint <path>: ...".
  static Engine resume(const std::filesystem::path& dir, Problem problem);
  static Engine resume(const std::filesystem::path& dir, Problem problem, Config config);

  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;
  ~Engine();

  // Registers a variation operator (after the built-ins); initial_weight is its prior share.
  void add_operator(Operator op, double initial_weight = 1.0);
  // Replaces the built-in strategy named by Config::algorithm (call before run()). A resumed run
  // needs the same strategy again (same name, same parameters); its state comes from the snapshot.
  void set_strategy(Strategy strategy);
  void add_observer(Observer observer);
  // Runs until a budget or stop condition; call once.
  Result run();
  // Thread-safe and async-signal-safe: the current batch finishes and is journaled, then run()
  // returns with StopReason::requested. If some of that batch failed (timeout, crashed, error,
  // incorrect: possibly measurements the stop cut short), only its ok and invalid evaluations are
  // journaled, none is applied and the last snapshot stays (as after a kill); a resume replays
  // them and measures the rest again.
  void request_stop() noexcept;

  [[nodiscard]] const Config& config() const noexcept;
  [[nodiscard]] bool deterministic() const noexcept;
  [[nodiscard]] const Strategy& strategy() const noexcept;

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Every evaluation recorded in a checkpoint directory (or journal file), in id order; a torn
// last record is dropped. Throws kevo::Error for a corrupt or foreign journal.
std::vector<Individual> read_journal(const std::filesystem::path& dir_or_file);

// The configuration the run in checkpoint directory `dir` was recorded with, read from its
// snapshot alone (not the journal); nullopt when no snapshot is there yet. Throws kevo::Error for
// a corrupt snapshot or one of another space.
std::optional<Config> recorded_config(const std::filesystem::path& dir, const Space& space);

}  // namespace kevo::evo
