// Private: the engine's state and its roles, one file each --
//   engine.cpp     the public Engine, configuration checks, determinism, setup;
//   bandit.cpp     operators: the bandit (shares, draws, credit), breeding, admission of candidates
//                  (repair, dedup, replay lookup) -- the services a strategy's ask() uses;
//   evaluate.cpp   parallel evaluation on the oneTBB arena, journaling and applying a batch;
//   resume.cpp     snapshots, restoring a checkpoint, absorbing journal records on resume;
//   loop.cpp       the drivers (generational ask/evaluate/tell, asynchronous), stopping, observers,
//                  the Result.
// The strategy (kevo/evo/strategy.hpp) decides what to try; everything here is around it.
#pragma once
#include <tbb/enumerable_thread_specific.h>
#include <tbb/task_arena.h>

#include <array>
#include <atomic>
#include <chrono>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "checkpoint.hpp"
#include "kevo/core/io.hpp"
#include "kevo/evo/archive.hpp"
#include "kevo/evo/engine.hpp"
#include "kevo/evo/strategy.hpp"

namespace kevo::evo {

namespace detail {

inline constexpr std::uint32_t kNoArm = std::numeric_limits<std::uint32_t>::max();
inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kDecay = 0.98;       // bandit memory: about the last 50 uses of an operator
inline constexpr double kExplore = 0.2;      // UCB exploration coefficient (on values scaled to [0, 1])
inline constexpr double kMinShare = 0.02;    // no operator is starved completely...
inline constexpr std::uint64_t kMuteAfter = 16;  // ...except an added one whose first 16 tries gave no valid evaluation
inline constexpr std::size_t kElitesView = 8;

using Clock = std::chrono::steady_clock;

inline double primary(const Individual& i) noexcept { return i.eval.ok() ? i.eval.fitness[0] : kInf; }

struct Arm {
  Operator op;
  double prior = 1;
  double reward = 0, cost = 0, count = 0;
  OperatorStats stats;
  bool added = false;  // by add_operator (an LLM, ...), not one of the built-ins
  // Not in the snapshot: `valid` is recounted from the journal on resume, `empty_calls` restarts.
  std::uint64_t valid = 0;        // its proposals evaluated ok
  std::uint64_t empty_calls = 0;  // calls that proposed nothing (an LLM reply with no schedule)
  // An added operator that never produced a valid proposal in kMuteAfter tries gets no bandit
  // weight (the built-ins keep their floor: in a space where few schedules are valid they may need
  // many tries before the first).
  [[nodiscard]] bool muted() const { return added && valid == 0 && stats.proposals + empty_calls >= kMuteAfter; }
};

struct Proposal {
  Genome genome;
  std::uint64_t hash = 0;
  std::uint32_t arm = kNoArm;
  std::uint64_t tag = 0;    // the strategy's tag (island)
  double parent = kInf;     // best parent's primary fitness
  double op_cost = 0;       // share of the operator's cost increment
  std::size_t outcome = 0;  // index into the arm's outcome list of this batch
  std::string op;           // name recorded in the Individual
  const Individual* cached = nullptr;  // replayed journal record
};

std::string identity_mismatch(const Config& a, const Config& b);
void validate(const Config& c, const Space& space);

}  // namespace detail

using detail::Proposal;

struct Engine::Impl {
  // The checkpoint directory's lock (when there is one): declared first, released last, after the
  // journal's final write.
  DirLock lock;
  Problem problem;
  Config cfg;
  const Space* space = nullptr;
  std::uint64_t fingerprint = 0;
  bool det = false;
  std::string det_note;
  std::optional<Strategy> strategy;
  std::vector<detail::Arm> arms;
  std::vector<Observer> observers;
  std::atomic<bool> stop_flag{false};
  bool ran = false;

  // Resume inputs, consumed by restore().
  std::optional<detail::SnapshotState> snap;
  std::vector<Individual> journal_records;
  std::uint64_t journal_valid_bytes = 0;
  bool resumed = false;

  // Run state.
  std::uint64_t generation = 0, evaluations = 0, next_id = 0;
  std::unordered_set<std::uint64_t> seen;
  std::unordered_map<std::uint64_t, Individual> replay;
  std::vector<Individual> leaders;  // the best seen, for a strategy without population()
  std::optional<Archive> archive;
  std::uint64_t valid = 0, duplicates = 0, outside = 0, replayed = 0;
  std::array<std::uint64_t, 6> by_status{};
  std::optional<Individual> best;
  std::uint64_t last_improvement = 0;
  double cost = 0, eval_cost = 0, wall_before = 0, cost_sum = 0;
  std::uint64_t cost_samples = 0;
  std::uint64_t history_hash = 0x6b65766f68697374ULL;
  std::uint64_t batch_valid = 0, batch_total = 0;
  StopReason stop = StopReason::none;
  bool stopped_mid_batch = false;  // process() left a batch unapplied (a stop cut measurements short)
  bool no_operators = false;       // the last ask found no usable operator

  std::unique_ptr<detail::JournalWriter> journal;
  std::unique_ptr<tbb::task_arena> arena;
  // ThreadSafety::basic with several threads: one copy of the problem per thread.
  mutable std::unique_ptr<tbb::enumerable_thread_specific<Problem>> copies;
  detail::Clock::time_point start;

  // Scratch reused across batches.
  std::vector<Individual> parent_buf;
  std::vector<Individual> elite_view;
  std::vector<std::vector<ProposalOutcome>> outcomes;
  std::vector<double> weights;
  std::unordered_set<std::uint64_t> batch_hashes;
  std::vector<const Individual*> members;

  // The services of one ask() (and the read-only view tell() gets).
  class Services;

  static std::unique_ptr<Impl> open(const std::filesystem::path& dir, Problem problem, const Config* override_cfg);
  Impl(Problem p, Config c);

  // engine.cpp: setup
  void init_determinism();
  void add_builtins();
  [[nodiscard]] bool uses_archive() const;
  [[nodiscard]] double wall() const;
  [[nodiscard]] std::uint64_t remaining() const;

  // bandit.cpp: operators and admission
  void compute_weights();
  std::optional<std::uint32_t> pick_arm(Rng& rng) const;
  void credit(std::uint32_t arm, double reward, double raw_cost);
  bool admit(Genome&& g, Rng& rng, std::uint32_t arm, std::uint64_t tag, double parent, double op_cost, std::string op,
             std::vector<Proposal>& batch, bool repair = true);
  void breed_with(std::uint32_t arm, Rng& rng, std::size_t room, AskContext::ParentPicker pick, std::uint64_t tag,
                  std::vector<Proposal>& batch, bool fallback, bool& elites_ready, bool elites_archive);
  void build_elite_view(bool from_archive);
  void add_seeds(std::vector<Proposal>& batch, std::size_t want, std::uint64_t tag);
  // Config::late_seeds not yet evaluated, once late_seeds_at evaluations are done (before the
  // strategy's ask, tagged 0: the GA's first island)
  void add_late_seeds(std::vector<Proposal>& batch, std::size_t room);
  // The strategy's members (or the engine's leaders), in `members`.
  void collect_members();

  // evaluate.cpp: evaluation, journal, application
  [[nodiscard]] const Problem& problem_here() const;
  void eval_chunk(std::span<const Genome> gs, Evaluation* out) const;
  std::vector<Evaluation> evaluate(std::vector<Genome>& gs);
  void apply(const Individual& ind, std::uint32_t arm, double parent, double op_cost, bool from_journal);
  std::vector<Evaluated> process(std::vector<Proposal>& batch);
  void tell(std::span<Evaluated> told);

  // resume.cpp: snapshots and resume
  [[nodiscard]] detail::SnapshotState make_snapshot() const;
  void snapshot();
  void restore();
  void absorb_replay();

  // loop.cpp: drivers, stopping, observers, result
  std::vector<Proposal> make_batch();
  void run_generational();
  void run_async();
  Result run();
  [[nodiscard]] StopReason check_stop() const;
  [[nodiscard]] std::vector<OperatorStats> op_stats() const;
  void emit_generation();
  [[nodiscard]] Result result();
};

class Engine::Impl::Services final : public AskContext {
 public:
  // batch == nullptr: the read-only view given to tell().
  Services(Impl& e, std::vector<Proposal>* batch, std::size_t room, std::size_t in_flight)
      : e_(e), batch_(batch), room_(room), in_flight_(in_flight) {}

  const Problem& problem() const override { return e_.problem; }
  std::uint64_t seed() const override { return e_.cfg.seed; }
  std::uint64_t generation() const override { return e_.generation; }
  std::uint64_t evaluations() const override { return e_.evaluations; }
  const Individual* best() const override { return e_.best ? &*e_.best : nullptr; }
  const Archive* archive() const override { return e_.archive ? &*e_.archive : nullptr; }

  std::size_t size() const override { return batch_ ? batch_->size() : 0; }
  bool offer(Genome genome, Rng& rng, std::string_view label, std::uint64_t tag, bool repair) override;
  void offer_seeds(std::size_t until, std::uint64_t tag) override;
  bool operators_ready() override;
  bool breed(Rng& rng, std::size_t room, ParentPicker pick, std::uint64_t tag) override;
  void poll_asynchronous(Rng base, std::size_t room, ParentPicker pick, std::uint64_t tag) override;
  void elites_from_archive() override { elites_archive_ = true; }
  std::size_t in_flight() const override { return in_flight_; }
  void request_stop() override { e_.stop_flag.store(true, std::memory_order_relaxed); }

  [[nodiscard]] bool no_operators() const { return no_operators_; }

 private:
  Impl& e_;
  std::vector<Proposal>* batch_;
  std::size_t room_;
  std::size_t in_flight_;
  bool weights_ready_ = false;
  bool no_operators_ = false;
  bool elites_ready_ = false;
  bool elites_archive_ = false;
};

}  // namespace kevo::evo
