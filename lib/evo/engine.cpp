#include "kevo/evo/engine.hpp"

#include <fmt/format.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <limits>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "checkpoint.hpp"
#include "kevo/core/error.hpp"
#include "kevo/core/hash.hpp"
#include "kevo/evo/operators.hpp"

namespace kevo::evo {

std::string_view to_string(Algorithm a) noexcept {
  switch (a) {
    case Algorithm::ga: return "ga";
    case Algorithm::islands: return "islands";
    case Algorithm::map_elites: return "map_elites";
    case Algorithm::steady_state: return "steady_state";
    case Algorithm::random: return "random";
    case Algorithm::exhaustive: return "exhaustive";
  }
  return "ga";
}
std::string_view to_string(Topology t) noexcept { return t == Topology::ring ? "ring" : "random"; }
std::string_view to_string(StopReason r) noexcept {
  switch (r) {
    case StopReason::none: return "none";
    case StopReason::evaluations: return "evaluations";
    case StopReason::time: return "time";
    case StopReason::cost: return "cost";
    case StopReason::patience: return "patience";
    case StopReason::target: return "target";
    case StopReason::generations: return "generations";
    case StopReason::space_exhausted: return "space_exhausted";
    case StopReason::operators_exhausted: return "operators_exhausted";
    case StopReason::requested: return "requested";
  }
  return "none";
}
std::optional<Algorithm> algorithm_from_string(std::string_view s) noexcept {
  for (auto a : {Algorithm::ga, Algorithm::islands, Algorithm::map_elites, Algorithm::steady_state, Algorithm::random,
                 Algorithm::exhaustive})
    if (to_string(a) == s) return a;
  if (s == "map-elites") return Algorithm::map_elites;
  if (s == "steady-state" || s == "async") return Algorithm::steady_state;
  return std::nullopt;
}
std::optional<Topology> topology_from_string(std::string_view s) noexcept {
  if (s == "ring") return Topology::ring;
  if (s == "random") return Topology::random;
  return std::nullopt;
}

namespace {

constexpr std::uint32_t kNoArm = std::numeric_limits<std::uint32_t>::max();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kDecay = 0.98;       // bandit memory: about the last 50 uses of an operator
constexpr double kExplore = 0.2;      // UCB exploration coefficient (on values scaled to [0, 1])
constexpr double kMinShare = 0.02;    // no operator is starved completely...
constexpr std::uint64_t kMuteAfter = 16;  // ...except an added one whose first 16 tries gave no valid evaluation
constexpr std::size_t kElitesView = 8;

// Stream ids: each algorithmic decision draws from its own counter-based stream so that the
// same seed gives the same choices whatever the thread count or evaluation order.
enum Stream : std::uint64_t { s_init = 1, s_breed = 2, s_random = 3, s_migrate = 4, s_async = 5, s_fill = 6 };

using Clock = std::chrono::steady_clock;

double primary(const Individual& i) noexcept { return i.eval.ok() ? i.eval.fitness[0] : kInf; }

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
  std::uint32_t island = 0;
  double parent = kInf;   // best parent's primary fitness
  double op_cost = 0;     // share of the operator's cost increment
  std::size_t outcome = 0;  // index into the arm's outcome list of this batch
  std::string op;           // name recorded in the Individual
  const Individual* cached = nullptr;  // replayed journal record
};

std::string identity_mismatch(const Config& a, const Config& b) {
  if (a.algorithm != b.algorithm) return "algorithm";
  if (a.seed != b.seed) return "seed";
  if (a.population != b.population) return "population";
  if (a.elites != b.elites) return "elites";
  if (a.tournament != b.tournament) return "tournament";
  if (a.mutation_rate != b.mutation_rate) return "mutation_rate";
  if (a.crossover_rate != b.crossover_rate) return "crossover_rate";
  if (a.builtin_operators != b.builtin_operators) return "builtin_operators";
  if (a.adaptive_operators != b.adaptive_operators) return "adaptive_operators";
  if (a.islands.count != b.islands.count || a.islands.topology != b.islands.topology ||
      a.islands.interval != b.islands.interval || a.islands.rate != b.islands.rate)
    return "islands";
  if (a.archive.bins != b.archive.bins || a.archive.ranges != b.archive.ranges) return "archive";
  if (a.in_flight != b.in_flight) return "in_flight";
  if (a.deterministic != b.deterministic) return "deterministic";
  if (a.exhaustive_limit != b.exhaustive_limit) return "exhaustive_limit";
  if (a.seeds != b.seeds) return "seeds";
  return {};
}

void validate(const Config& c, const Space& space) {
  auto bad = [](const std::string& m) { throw Error("evo config: " + m); };
  if (space.size() == 0) bad("the problem's space has no genes");
  if (c.threads < 1) bad(fmt::format("threads must be >= 1 (got {})", c.threads));
  if (c.population < 2) bad(fmt::format("population must be >= 2 (got {})", c.population));
  if (c.elites >= c.population) bad(fmt::format("elites ({}) must be smaller than population ({})", c.elites, c.population));
  if (c.tournament < 1) bad("tournament must be >= 1");
  if (c.mutation_rate < 0 || c.mutation_rate > 1) bad("mutation_rate must lie in [0, 1]");
  if (c.crossover_rate < 0) bad("crossover_rate must be >= 0");
  if (c.islands.count < 1) bad("islands.count must be >= 1");
  if (c.islands.interval < 0) bad("islands.interval must be >= 0");
  if (c.islands.rate < 0 || c.islands.rate > 1) bad("islands.rate must lie in [0, 1]");
  if (c.checkpoint.snapshot_interval < 1) bad("checkpoint.snapshot_interval must be >= 1");
  if (c.budget.max_seconds < 0 || c.budget.max_cost < 0) bad("budgets must be >= 0");
  if (c.algorithm == Algorithm::exhaustive) {
    const auto card = space.cardinality();
    if (!card || *card > c.exhaustive_limit)
      bad(fmt::format("exhaustive search needs a space of at most {} genomes; this one has about 1e{:.1f}",
                      c.exhaustive_limit, space.log10_cardinality()));
  }
  for (const auto& s : c.seeds)
    if (s.size() != space.width()) bad(fmt::format("a seed genome has width {}, the space {}", s.size(), space.width()));
}

}  // namespace

struct Engine::Impl {
  Problem problem;
  Config cfg;
  const Space* space = nullptr;
  std::uint64_t fingerprint = 0;
  bool det = false;
  std::string det_note;
  std::vector<Arm> arms;
  std::vector<Observer> observers;
  std::atomic<bool> stop_flag{false};
  bool ran = false;

  // Resume inputs, consumed by restore().
  std::optional<detail::SnapshotState> snap;
  std::vector<Individual> journal_records;
  std::uint64_t journal_valid_bytes = 0;
  bool resumed = false;

  // Run state.
  std::uint64_t generation = 0, cursor = 0, evaluations = 0, next_id = 0;
  std::unordered_set<std::uint64_t> seen;
  std::unordered_map<std::uint64_t, Individual> replay;
  std::vector<std::vector<Individual>> islands;
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

  std::unique_ptr<detail::JournalWriter> journal;
  std::unique_ptr<tbb::task_arena> arena;
  // ThreadSafety::basic with several threads: one copy of the problem per thread.
  mutable std::unique_ptr<tbb::enumerable_thread_specific<Problem>> copies;
  Clock::time_point start;

  // Scratch reused across batches.
  std::vector<Individual> parent_buf;
  std::vector<Individual> elite_view;
  std::vector<std::vector<ProposalOutcome>> outcomes;
  std::vector<double> weights;
  std::unordered_set<std::uint64_t> batch_hashes;

  static std::unique_ptr<Impl> open(const std::filesystem::path& dir, Problem problem, const Config* override_cfg);

  Impl(Problem p, Config c) : problem(std::move(p)), cfg(std::move(c)) {
    space = &problem.space();
    fingerprint = detail::space_fingerprint(*space);
  }

  // ---- setup ---------------------------------------------------------------------------------

  void init_determinism() {
    det = cfg.deterministic.value_or(problem.deterministic());
    if (cfg.algorithm == Algorithm::steady_state) {
      det = false;
      det_note = "steady_state applies results in completion order, so runs are not reproducible";
    } else if (!det) {
      det_note = cfg.deterministic ? "determinism turned off in the config" : "the problem is not deterministic";
    } else if (cfg.budget.max_seconds > 0) {
      det_note = "deterministic, except where the wall-time budget stops the run";
    }
  }

  void add_builtins() {
    if (!cfg.builtin_operators) return;
    arms.push_back(Arm{Operator(Mutate{cfg.mutation_rate}), 1.0, 0, 0, 0, {}});
    arms.push_back(Arm{Operator(Reset{cfg.mutation_rate}), 0.25, 0, 0, 0, {}});
    if (cfg.crossover_rate > 0) arms.push_back(Arm{Operator(GroupCrossover{cfg.mutation_rate}), cfg.crossover_rate, 0, 0, 0, {}});
  }

  bool uses_archive() const { return cfg.algorithm == Algorithm::map_elites || !cfg.archive.bins.empty() || !cfg.archive.ranges.empty(); }
  std::size_t island_count() const { return cfg.algorithm == Algorithm::islands ? static_cast<std::size_t>(cfg.islands.count) : 1; }
  bool generational() const {
    return cfg.algorithm == Algorithm::ga || cfg.algorithm == Algorithm::islands || cfg.algorithm == Algorithm::map_elites;
  }

  double wall() const { return wall_before + std::chrono::duration<double>(Clock::now() - start).count(); }

  // ---- bandit --------------------------------------------------------------------------------

  void compute_weights() {
    weights.assign(arms.size(), 0.0);
    double total_count = 0, max_value = 0;
    for (const auto& a : arms) total_count += a.count;
    std::vector<double> value(arms.size(), 0.0);
    for (std::size_t i = 0; i < arms.size(); ++i) {
      const auto& a = arms[i];
      value[i] = a.count > 1e-9 && a.cost > 0 ? a.reward / a.cost : 0.0;
      max_value = std::max(max_value, value[i]);
    }
    double sum = 0;
    std::size_t live = 0;
    for (std::size_t i = 0; i < arms.size(); ++i) {
      const auto& a = arms[i];
      if (a.op.exhausted() || a.prior <= 0 || a.muted()) continue;
      ++live;
      double score;
      if (!cfg.adaptive_operators) {
        score = 1.0;
      } else if (a.count < 1e-9) {
        score = 1.0 + kExplore;  // untried: optimistic
      } else {
        // Improvement per unit of cost, relative to the best operator, plus a UCB bonus.
        const double v = max_value > 0 ? value[i] / max_value : 0.0;
        score = v + kExplore * std::sqrt(std::log(total_count + 1.0) / a.count);
      }
      weights[i] = a.prior * score;
      sum += weights[i];
    }
    if (live == 0 || sum <= 0) {
      std::fill(weights.begin(), weights.end(), 0.0);
      return;
    }
    const double floor = kMinShare / static_cast<double>(live);
    double sum2 = 0;
    for (std::size_t i = 0; i < arms.size(); ++i) {
      if (weights[i] <= 0 && (arms[i].op.exhausted() || arms[i].prior <= 0 || arms[i].muted())) continue;
      weights[i] = std::max(weights[i] / sum, floor);
      sum2 += weights[i];
    }
    for (auto& w : weights) w /= sum2;
    for (std::size_t i = 0; i < arms.size(); ++i) arms[i].stats.weight = weights[i];
  }

  std::optional<std::uint32_t> pick_arm(Rng& rng) const {
    double total = 0;
    for (double w : weights) total += w;
    if (total <= 0) return std::nullopt;
    double r = rng.uniform() * total;
    for (std::size_t i = 0; i < weights.size(); ++i) {
      if (weights[i] <= 0) continue;
      if (r < weights[i]) return static_cast<std::uint32_t>(i);
      r -= weights[i];
    }
    for (std::size_t i = weights.size(); i-- > 0;)
      if (weights[i] > 0) return static_cast<std::uint32_t>(i);
    return std::nullopt;
  }

  void credit(std::uint32_t arm, double reward, double raw_cost) {
    if (arm == kNoArm) return;
    cost_sum += raw_cost;
    ++cost_samples;
    const double mean = cost_sum / static_cast<double>(cost_samples);
    const double c = mean > 0 ? std::max(raw_cost / mean, 0.1) : 1.0;
    auto& a = arms[arm];
    a.reward = a.reward * kDecay + reward;
    a.cost = a.cost * kDecay + c;
    a.count = a.count * kDecay + 1.0;
  }

  // ---- selection -----------------------------------------------------------------------------

  const Individual& tournament(const std::vector<Individual>& pop, Rng& rng) const {
    const Individual* winner = &pop[rng.below(pop.size())];
    for (std::size_t k = 1; k < cfg.tournament; ++k) {
      const Individual* c = &pop[rng.below(pop.size())];
      if (better(*c, *winner)) winner = c;
    }
    return *winner;
  }

  void choose_parents(std::size_t island, std::size_t arity, Rng& rng) {
    parent_buf.resize(std::max<std::size_t>(arity, 1));
    const bool from_archive = cfg.algorithm == Algorithm::map_elites && archive && archive->size() >= 2;
    for (std::size_t k = 0; k < parent_buf.size(); ++k) {
      if (from_archive) {
        parent_buf[k] = archive->cells()[rng.below(archive->size())].second;
      } else {
        parent_buf[k] = tournament(islands[island], rng);
      }
    }
  }

  void build_elite_view() {
    elite_view.clear();
    if (cfg.algorithm == Algorithm::map_elites && archive && !archive->empty()) {
      for (const auto& [c, ind] : archive->cells()) elite_view.push_back(ind);
    } else {
      for (const auto& pop : islands)
        for (std::size_t i = 0; i < pop.size() && i < kElitesView; ++i) elite_view.push_back(pop[i]);
    }
    std::sort(elite_view.begin(), elite_view.end(), [](const Individual& a, const Individual& b) { return better(a, b); });
    std::vector<Individual> uniq;
    for (auto& e : elite_view) {
      if (uniq.size() >= kElitesView) break;
      if (std::none_of(uniq.begin(), uniq.end(), [&](const Individual& u) { return u.genome == e.genome; }))
        uniq.push_back(std::move(e));
    }
    elite_view = std::move(uniq);
  }

  // ---- proposals -----------------------------------------------------------------------------

  // Validates a proposed genome: repair, space membership, dedup. Returns true when it joins the batch.
  bool admit(Genome&& g, Rng& rng, std::uint32_t arm, std::uint32_t island, double parent, double op_cost,
             std::string op, std::vector<Proposal>& batch, bool repair = true) {
    if (arm != kNoArm) ++arms[arm].stats.proposals;
    auto drop = [&](std::string why) {
      if (arm == kNoArm) return;
      ProposalOutcome o;
      o.genome = std::move(g);
      o.eval.status = Status::invalid;
      o.eval.reason = std::move(why);
      outcomes[arm].push_back(std::move(o));
      credit(arm, 0.0, op_cost);
    };
    if (!space->contains(g)) {
      const bool fixed = repair && g.size() == space->width() && problem.repair(g, rng) && space->contains(g);
      if (!fixed) {
        ++outside;
        if (arm != kNoArm) ++arms[arm].stats.outside;
        drop("outside space");
        return false;
      }
    } else if (repair) {
      // A valid genome may still be normalised by the problem (e.g. a cheap fix of a constraint).
      if (!problem.repair(g, rng) || !space->contains(g)) {
        ++outside;
        if (arm != kNoArm) ++arms[arm].stats.outside;
        drop("outside space (repair failed)");
        return false;
      }
    }
    const std::uint64_t h = genome_hash(g);
    if (seen.count(h) || batch_hashes.count(h)) {
      ++duplicates;
      if (arm != kNoArm) ++arms[arm].stats.duplicates;
      drop("duplicate");
      return false;
    }
    batch_hashes.insert(h);
    Proposal p;
    p.genome = std::move(g);
    p.hash = h;
    p.arm = arm;
    p.island = island;
    p.parent = parent;
    p.op_cost = op_cost;
    p.op = std::move(op);
    if (arm != kNoArm) {
      p.outcome = outcomes[arm].size();
      outcomes[arm].push_back(ProposalOutcome{});
    }
    if (auto it = replay.find(h); it != replay.end()) p.cached = &it->second;
    batch.push_back(std::move(p));
    return true;
  }

  // One breeding step from island `island` with stream `rng`; appends at most `room` proposals.
  // Returns false when no operator is usable.
  bool breed_one(std::size_t island, Rng& rng, std::size_t room, std::vector<Proposal>& batch) {
    auto chosen = pick_arm(rng);
    if (!chosen) return false;
    breed_with(*chosen, island, rng, room, batch, true);
    return true;
  }

  // Asks operator `arm` for proposals from parents of `island`. An operator that returns nothing
  // (an asynchronous one with nothing ready, or one that declined) hands the slot to the first
  // built-in when `fallback` is set, so the slot is not lost.
  void breed_with(std::uint32_t arm, std::size_t island, Rng& rng, std::size_t room, std::vector<Proposal>& batch,
                  bool fallback) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      choose_parents(island, arms[arm].op.arity(), rng);
      double parent = kInf;
      for (const auto& p : parent_buf) parent = std::min(parent, primary(p));
      OperatorContext ctx{problem, std::span<const Individual>(parent_buf), std::span<const Individual>(elite_view),
                          generation, evaluations, rng};
      const double before = arms[arm].op.cost();
      auto genomes = arms[arm].op.propose(ctx);
      const double spent = std::max(0.0, arms[arm].op.cost() - before);
      arms[arm].stats.cost += spent;
      cost += spent;
      if (genomes.empty()) {
        ++arms[arm].empty_calls;
        if (spent > 0) credit(arm, 0.0, spent);
        if (fallback && arm != 0 && cfg.builtin_operators && weights[0] > 0) {
          arm = 0;
          continue;
        }
        return;
      }
      const double share = spent / static_cast<double>(genomes.size());
      const std::string name = arms[arm].stats.name;
      for (auto& g : genomes) {
        if (room == 0) break;
        if (admit(std::move(g), rng, arm, static_cast<std::uint32_t>(island), parent, share, name, batch)) --room;
      }
      return;
    }
  }

  std::uint64_t remaining() const {
    if (cfg.budget.max_evaluations == 0) return std::numeric_limits<std::uint64_t>::max();
    return cfg.budget.max_evaluations > evaluations ? cfg.budget.max_evaluations - evaluations : 0;
  }

  void fill_random(std::vector<Proposal>& batch, std::size_t target, std::uint32_t island, Rng base, const char* op) {
    std::size_t tries = 0;
    const std::size_t max_tries = 4 * target + 64;
    while (batch.size() < target && tries < max_tries) {
      Rng rng = base.fork(tries++);
      Genome g = space->random(rng);
      admit(std::move(g), rng, kNoArm, island, kInf, 0, op, batch);
    }
  }

  std::vector<Proposal> make_batch() {
    std::vector<Proposal> batch;
    batch_hashes.clear();
    outcomes.assign(arms.size(), {});
    const std::uint64_t room = remaining();
    if (room == 0) return batch;
    const Rng root(cfg.seed);
    switch (cfg.algorithm) {
      case Algorithm::exhaustive: {
        const std::uint64_t card = *space->cardinality();
        const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(room, std::max<std::size_t>(cfg.population, 64)));
        while (batch.size() < want && cursor < card) {
          Rng rng = root.fork(s_random).fork(cursor);
          admit(space->nth(cursor++), rng, kNoArm, 0, kInf, 0, "exhaustive", batch, /*repair=*/false);
        }
        return batch;
      }
      case Algorithm::random: {
        const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(room, cfg.population));
        if (generation == 0) add_seeds(batch, want);
        std::size_t tries = 0;
        while (batch.size() < want && tries < 4 * want + 64) {
          Rng rng = root.fork(s_random).fork(cursor++);
          ++tries;
          admit(space->random(rng), rng, kNoArm, 0, kInf, 0, "random", batch);
        }
        return batch;
      }
      default: break;
    }
    if (islands.empty()) islands.resize(island_count());
    const bool init = std::all_of(islands.begin(), islands.end(), [](const auto& p) { return p.empty(); });
    if (init) {
      const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(room, cfg.population * islands.size()));
      add_seeds(batch, want);
      for (std::size_t is = 0; is < islands.size(); ++is) {
        const std::size_t target = std::min(want, cfg.population * (is + 1));
        fill_random(batch, target, static_cast<std::uint32_t>(is), root.fork(s_init).fork(is), "init");
      }
      return batch;
    }
    compute_weights();
    if (std::all_of(weights.begin(), weights.end(), [](double w) { return w <= 0; })) return batch;
    build_elite_view();
    const Rng gen_rng = root.fork(s_breed).fork(generation);
    // Asynchronous operators (e.g. an LLM with requests in flight) are polled once per batch,
    // whatever their bandit share, so finished work is never left waiting; they never block.
    for (std::uint32_t a = 0; a < arms.size() && !islands[0].empty(); ++a)
      if (weights[a] > 0 && arms[a].op.asynchronous() && batch.size() < room) {
        Rng rng = gen_rng.fork(0xa5a5).fork(a);
        breed_with(a, 0, rng, static_cast<std::size_t>(std::min<std::uint64_t>(room - batch.size(), cfg.population)), batch, false);
      }
    for (std::size_t is = 0; is < islands.size(); ++is) {
      if (islands[is].empty()) {  // only after a non-deterministic resume: seed it afresh
        const std::size_t target = static_cast<std::size_t>(std::min<std::uint64_t>(batch.size() + cfg.population, room));
        fill_random(batch, target, static_cast<std::uint32_t>(is), root.fork(s_init).fork(generation).fork(is), "init");
        continue;
      }
      const std::size_t keep = std::min(cfg.elites, islands[is].size());
      const std::size_t need = cfg.population - keep;
      const std::size_t target = static_cast<std::size_t>(std::min<std::uint64_t>(batch.size() + need, room));
      const Rng island_rng = gen_rng.fork(is);
      const std::size_t max_steps = 4 * need + 16;
      for (std::size_t step = 0; batch.size() < target && step < max_steps; ++step) {
        Rng rng = island_rng.fork(step);
        if (!breed_one(is, rng, target - batch.size(), batch)) break;
      }
      // Operators kept proposing known genomes: top up with fresh random ones.
      fill_random(batch, target, static_cast<std::uint32_t>(is), root.fork(s_fill).fork(generation).fork(is), "random");
    }
    return batch;
  }

  void add_seeds(std::vector<Proposal>& batch, std::size_t want) {
    Rng rng = Rng(cfg.seed).fork(s_init).fork(0xfeed);
    for (const auto& s : cfg.seeds) {
      if (batch.size() >= want) break;
      Genome g = s;
      admit(std::move(g), rng, kNoArm, 0, kInf, 0, "seed", batch);
    }
  }

  // ---- evaluation ----------------------------------------------------------------------------

  static void sanitize(Evaluation& e) {
    if (e.status != Status::ok) return;
    if (e.fitness.empty()) {
      e.status = Status::error;
      e.reason = "problem reported ok without a fitness";
      return;
    }
    for (double f : e.fitness)
      if (!std::isfinite(f)) {
        e.status = Status::error;
        e.reason = "non-finite fitness (NaN or inf) rejected";
        return;
      }
  }

  // The problem a thread evaluates with: its own copy for ThreadSafety::basic problems.
  const Problem& problem_here() const {
    if (!copies) return problem;
    return copies->local();
  }

  void eval_chunk(std::span<const Genome> gs, Evaluation* out) const {
    try {
      auto r = problem_here().evaluate(gs);
      if (r.size() != gs.size()) {
        for (std::size_t i = 0; i < gs.size(); ++i) {
          out[i] = Evaluation{};
          out[i].status = Status::error;
          out[i].reason = fmt::format("problem returned {} evaluations for {} genomes", r.size(), gs.size());
        }
        return;
      }
      for (std::size_t i = 0; i < gs.size(); ++i) out[i] = std::move(r[i]);
    } catch (const std::exception& ex) {
      for (std::size_t i = 0; i < gs.size(); ++i) {
        out[i] = Evaluation{};
        out[i].status = Status::error;
        out[i].reason = std::string("evaluate threw: ") + ex.what();
      }
    } catch (...) {
      for (std::size_t i = 0; i < gs.size(); ++i) {
        out[i] = Evaluation{};
        out[i].status = Status::error;
        out[i].reason = "evaluate threw a non-standard exception";
      }
    }
    for (std::size_t i = 0; i < gs.size(); ++i) sanitize(out[i]);
  }

  std::vector<Evaluation> evaluate(const std::vector<Genome>& gs) {
    std::vector<Evaluation> out(gs.size());
    if (gs.empty()) return out;
    const std::span<const Genome> all(gs);
    if (cfg.threads <= 1 || problem.thread_safety() == ThreadSafety::none || gs.size() < 2) {
      eval_chunk(all, out.data());
      return out;
    }
    // Fixed chunking by index: each chunk writes its own slots, so the result does not depend
    // on which thread ran which chunk.
    const std::size_t n = gs.size();
    const std::size_t chunks = std::min<std::size_t>(n, static_cast<std::size_t>(cfg.threads) * 4);
    arena->execute([&] {
      tbb::parallel_for(std::size_t{0}, chunks, [&](std::size_t c) {
        const std::size_t lo = c * n / chunks, hi = (c + 1) * n / chunks;
        eval_chunk(all.subspan(lo, hi - lo), out.data() + lo);
      });
    });
    return out;
  }

  // ---- applying results ----------------------------------------------------------------------

  static std::uint64_t record_hash(const Individual& ind) {
    StableHasher h;
    h.u64(ind.id).u64(ind.genome.size());
    for (auto v : ind.genome) h.i64(v);
    h.u64(static_cast<std::uint64_t>(ind.eval.status)).u64(ind.eval.fitness.size());
    for (double f : ind.eval.fitness) h.f64(f);
    return h.digest();
  }

  // Applies one evaluated individual to counters, best, archive, bandit and observers.
  void apply(const Individual& ind, std::uint32_t arm, double parent, double op_cost, bool from_journal) {
    ++evaluations;
    ++by_status[static_cast<std::size_t>(ind.eval.status)];
    const bool ok = ind.eval.ok();
    if (ok) ++valid;
    ++batch_total;
    if (ok) ++batch_valid;
    eval_cost += ind.eval.cost;
    history_hash = mix64(history_hash ^ record_hash(ind));
    const bool new_best = ok && (!best || better(ind, *best));
    if (new_best) {
      best = ind;
      last_improvement = evaluations;
    }
    if (archive) archive->insert(ind);
    if (arm != kNoArm) {
      auto& st = arms[arm].stats;
      ++st.evaluated;
      if (ok) ++arms[arm].valid;
      const bool improved = ok && primary(ind) < parent;
      if (improved) ++st.improvements;
      if (new_best) ++st.new_bests;
      credit(arm, new_best ? 1.0 : improved ? 0.5 : 0.0, op_cost + ind.eval.cost);
    }
    if (from_journal) {
      ++replayed;
      return;
    }
    for (const auto& o : observers) {
      if (o.on_evaluation) o.on_evaluation(ind);
      if (new_best && o.on_new_best) o.on_new_best(ind);
    }
  }

  // A failure that a requested stop may have caused (a measurement cut short): not recorded.
  static bool stopped_failure(const Evaluation& e) { return e.status != Status::ok && e.status != Status::invalid; }

  // Evaluates a batch, journals it, applies it in proposal order; returns the individuals.
  // A stop requested during the batch may leave it unapplied (stop set, nothing returned).
  std::vector<Individual> process(std::vector<Proposal>& batch) {
    std::vector<Genome> to_eval;
    std::vector<std::size_t> where;
    for (std::size_t i = 0; i < batch.size(); ++i)
      if (!batch[i].cached) {
        where.push_back(i);
        to_eval.push_back(std::move(batch[i].genome));
      }
    auto evals = evaluate(to_eval);
    if (stop_flag.load(std::memory_order_relaxed) &&
        std::any_of(evals.begin(), evals.end(), [](const Evaluation& e) { return stopped_failure(e); })) {
      // Stopped while this batch was measured, and some of it failed: those failures may be the
      // stop's doing (a worker killed mid-measurement). Journal what completed -- a resume replays
      // it -- and apply nothing: the run ends at the previous batch.
      std::vector<Individual> kept;
      for (std::size_t k = 0; k < to_eval.size(); ++k) {
        if (stopped_failure(evals[k])) continue;
        Individual& ind = kept.emplace_back();
        ind.genome = std::move(to_eval[k]);
        ind.eval = std::move(evals[k]);
        ind.id = next_id++;
        ind.op = batch[where[k]].op;
        ind.generation = generation;
      }
      std::vector<const Individual*> ptrs;
      for (const auto& ind : kept) ptrs.push_back(&ind);
      if (journal) journal->append(ptrs);
      stop = StopReason::requested;
      stopped_mid_batch = true;  // the state proposed this batch: keep the last snapshot, as a kill would
      return {};
    }
    std::vector<Individual> out(batch.size());
    std::size_t k = 0;
    std::vector<const Individual*> fresh;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      auto& p = batch[i];
      Individual& ind = out[i];
      if (p.cached) {
        ind = *p.cached;
      } else {
        ind.genome = std::move(to_eval[k]);
        ind.eval = std::move(evals[k]);
        ++k;
        ind.id = next_id++;
        ind.op = p.op;
        ind.generation = generation;
        fresh.push_back(&ind);
      }
    }
    if (journal) journal->append(fresh);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      auto& p = batch[i];
      seen.insert(p.hash);
      apply(out[i], p.arm, p.parent, p.op_cost, p.cached != nullptr);
      if (p.arm != kNoArm) outcomes[p.arm][p.outcome] = ProposalOutcome{out[i].genome, out[i].eval};
      if (p.cached) replay.erase(p.hash);  // p.cached dangles from here on
    }
    for (std::size_t a = 0; a < arms.size(); ++a)
      if (!outcomes[a].empty()) arms[a].op.feedback(outcomes[a]);
    return out;
  }

  static void sort_pop(std::vector<Individual>& pop) {
    std::sort(pop.begin(), pop.end(), [](const Individual& a, const Individual& b) { return better(a, b); });
  }

  // Next generation of each island: its elites, then the offspring, topped up from the old one.
  void next_generation(std::vector<Individual>& offspring, const std::vector<Proposal>& batch) {
    std::vector<std::vector<Individual>> kids(islands.size());
    for (std::size_t i = 0; i < offspring.size(); ++i) kids[batch[i].island].push_back(std::move(offspring[i]));
    for (std::size_t is = 0; is < islands.size(); ++is) {
      auto& pop = islands[is];
      if (pop.empty()) {
        pop = std::move(kids[is]);
        sort_pop(pop);
        continue;
      }
      const std::size_t keep = std::min(cfg.elites, pop.size());
      std::vector<Individual> next(pop.begin(), pop.begin() + static_cast<std::ptrdiff_t>(keep));
      for (auto& k : kids[is]) next.push_back(std::move(k));
      for (std::size_t j = keep; next.size() < cfg.population && j < pop.size(); ++j) next.push_back(pop[j]);
      sort_pop(next);
      if (next.size() > cfg.population) next.resize(cfg.population);
      pop = std::move(next);
    }
  }

  // Keeps the best `population` individuals seen (random/exhaustive/steady-state bookkeeping).
  void keep_best(std::vector<Individual>& pop, Individual ind) {
    if (pop.size() >= cfg.population && !better(ind, pop.back())) return;
    auto it = std::lower_bound(pop.begin(), pop.end(), ind, [](const Individual& a, const Individual& b) { return better(a, b); });
    pop.insert(it, std::move(ind));
    if (pop.size() > cfg.population) pop.pop_back();
  }

  void migrate() {
    const std::size_t k = islands.size();
    if (k < 2 || cfg.islands.interval == 0 || generation == 0 || generation % static_cast<std::uint64_t>(cfg.islands.interval) != 0) return;
    const auto m = static_cast<std::size_t>(
        std::max<double>(1.0, std::round(cfg.islands.rate * static_cast<double>(cfg.population))));
    std::vector<std::vector<Individual>> out(k);
    for (std::size_t i = 0; i < k; ++i)
      for (std::size_t j = 0; j < m && j < islands[i].size(); ++j) out[i].push_back(islands[i][j]);
    const Rng mr = Rng(cfg.seed).fork(s_migrate).fork(generation);
    for (std::size_t i = 0; i < k; ++i) {
      std::size_t dest = (i + 1) % k;
      if (cfg.islands.topology == Topology::random) {
        Rng r = mr.fork(i);
        dest = r.below(k - 1);
        if (dest >= i) ++dest;
      }
      auto& pop = islands[dest];
      for (const auto& mig : out[i]) {
        if (std::any_of(pop.begin(), pop.end(), [&](const Individual& x) { return x.genome == mig.genome; })) continue;
        if (pop.size() < cfg.population) {
          pop.push_back(mig);
        } else if (better(mig, pop.back())) {
          pop.back() = mig;
        } else {
          continue;
        }
        sort_pop(pop);
      }
    }
  }

  // ---- stopping ------------------------------------------------------------------------------

  StopReason check_stop() const {
    if (stop_flag.load(std::memory_order_relaxed)) return StopReason::requested;
    if (cfg.budget.target_fitness && best && primary(*best) <= *cfg.budget.target_fitness) return StopReason::target;
    if (cfg.budget.max_evaluations && evaluations >= cfg.budget.max_evaluations) return StopReason::evaluations;
    if (cfg.budget.patience && evaluations - last_improvement >= cfg.budget.patience && evaluations > 0) return StopReason::patience;
    if (cfg.budget.max_generations && generation >= cfg.budget.max_generations) return StopReason::generations;
    if (cfg.budget.max_cost > 0 && cost >= cfg.budget.max_cost) return StopReason::cost;
    if (cfg.budget.max_seconds > 0 && wall() >= cfg.budget.max_seconds) return StopReason::time;
    return StopReason::none;
  }

  // ---- observers and snapshots ---------------------------------------------------------------

  std::vector<OperatorStats> op_stats() const {
    std::vector<OperatorStats> s;
    for (const auto& a : arms) s.push_back(a.stats);
    return s;
  }

  void emit_generation() {
    GenerationStats gs;
    gs.generation = generation;
    gs.evaluations = evaluations;
    gs.best = best ? primary(*best) : kInf;
    double sum = 0;
    std::size_t n = 0;
    for (const auto& pop : islands)
      for (const auto& ind : pop)
        if (ind.eval.ok()) {
          sum += primary(ind);
          ++n;
        }
    gs.mean = n ? sum / static_cast<double>(n) : kInf;
    gs.valid_share = batch_total ? static_cast<double>(batch_valid) / static_cast<double>(batch_total) : 0.0;
    gs.archive_size = archive ? archive->size() : 0;
    gs.operators = op_stats();
    batch_valid = batch_total = 0;
    for (const auto& o : observers)
      if (o.on_generation) o.on_generation(gs);
  }

  detail::SnapshotState make_snapshot() const {
    detail::SnapshotState s;
    s.config = cfg;
    s.deterministic = det;
    s.records = evaluations;
    s.generation = generation;
    s.cursor = cursor;
    for (const auto& pop : islands) {
      s.islands.emplace_back();
      for (const auto& ind : pop) s.islands.back().push_back(ind.id);
    }
    if (archive) {
      s.has_archive = true;
      s.archive_ranges = archive->ranges();
      s.archive_calibrated = archive->calibrated();
      for (const auto& [c, ind] : archive->cells()) s.archive_cells.emplace_back(c, ind.id);
      for (const auto& ind : archive->pending()) s.archive_pending.push_back(ind.id);
    }
    s.valid = valid;
    s.by_status = by_status;
    s.duplicates = duplicates;
    s.outside = outside;
    s.has_best = best.has_value();
    s.best_id = best ? best->id : 0;
    s.last_improvement = last_improvement;
    s.cost = cost;
    s.evaluation_cost = eval_cost;
    s.wall_seconds = wall();
    s.cost_sum = cost_sum;
    s.cost_samples = cost_samples;
    s.history_hash = history_hash;
    for (const auto& a : arms) s.arms.push_back(detail::ArmState{a.stats.name, a.prior, a.reward, a.cost, a.count, a.stats});
    return s;
  }

  void snapshot() {
    if (cfg.checkpoint.dir.empty()) return;
    detail::write_snapshot(cfg.checkpoint.dir / detail::kSnapshotName, fingerprint, make_snapshot(), cfg.checkpoint.sync);
  }

  // ---- resume --------------------------------------------------------------------------------

  void restore() {
    const auto dir = cfg.checkpoint.dir;
    const auto& s = *snap;
    const std::uint64_t S = s.records, J = journal_records.size();
    auto fail = [&](const std::string& m) { throw Error(fmt::format("checkpoint {}: {}", dir.string(), m)); };
    if (S > J) fail(fmt::format("the snapshot covers {} evaluations but the journal holds only {}", S, J));
    auto rec = [&](std::uint64_t id) -> const Individual& {
      if (id >= S) fail(fmt::format("the snapshot refers to evaluation {} beyond its {} records", id, S));
      return journal_records[id];
    };
    if (s.arms.size() != arms.size() ||
        !std::equal(arms.begin(), arms.end(), s.arms.begin(), [](const Arm& a, const detail::ArmState& b) { return a.stats.name == b.name; })) {
      std::string have, want;
      for (const auto& a : arms) have += (have.empty() ? "" : ", ") + a.stats.name;
      for (const auto& a : s.arms) want += (want.empty() ? "" : ", ") + a.name;
      fail(fmt::format("recorded with operators [{}] but this engine has [{}]; add the same operators before run()", want, have));
    }
    for (std::size_t i = 0; i < arms.size(); ++i) {
      arms[i].reward = s.arms[i].reward;
      arms[i].cost = s.arms[i].cost;
      arms[i].count = s.arms[i].count;
      arms[i].stats = s.arms[i].stats;
    }
    generation = s.generation;
    cursor = s.cursor;
    evaluations = S;
    next_id = J;
    for (std::uint64_t i = 0; i < S; ++i) {
      seen.insert(genome_hash(journal_records[i].genome));
      if (journal_records[i].eval.ok())
        for (auto& a : arms)
          if (a.stats.name == journal_records[i].op) ++a.valid;
    }
    islands.clear();
    for (const auto& ids : s.islands) {
      islands.emplace_back();
      for (auto id : ids) islands.back().push_back(rec(id));
    }
    if (archive && s.has_archive) {
      std::vector<std::pair<std::uint64_t, Individual>> cells;
      for (const auto& [c, id] : s.archive_cells) cells.emplace_back(c, rec(id));
      std::vector<Individual> pending;
      for (auto id : s.archive_pending) pending.push_back(rec(id));
      archive->restore(s.archive_ranges, s.archive_calibrated, std::move(cells), std::move(pending));
    }
    valid = s.valid;
    by_status = s.by_status;
    duplicates = s.duplicates;
    outside = s.outside;
    if (s.has_best) best = rec(s.best_id);
    last_improvement = s.last_improvement;
    cost = s.cost;
    eval_cost = s.evaluation_cost;
    wall_before = s.wall_seconds;
    cost_sum = s.cost_sum;
    cost_samples = s.cost_samples;
    history_hash = s.history_hash;
    for (std::uint64_t i = S; i < J; ++i) replay.emplace(genome_hash(journal_records[i].genome), std::move(journal_records[i]));
    journal_records.clear();
    journal_records.shrink_to_fit();
    snap.reset();
  }

  // Applies journal records that the run did not reach again (non-deterministic resume, or a
  // changed budget), so no completed evaluation is ever lost.
  void absorb_replay() {
    if (replay.empty()) return;
    std::vector<Individual> rest;
    for (auto& [h, ind] : replay) rest.push_back(std::move(ind));
    replay.clear();
    std::sort(rest.begin(), rest.end(), [](const Individual& a, const Individual& b) { return a.id < b.id; });
    if (islands.empty()) islands.resize(island_count());
    for (auto& ind : rest) {
      seen.insert(genome_hash(ind.genome));
      apply(ind, kNoArm, kInf, 0, true);
      keep_best(islands[0], std::move(ind));
    }
  }

  // ---- drivers -------------------------------------------------------------------------------

  void run_generational() {
    while (true) {
      if ((stop = check_stop()) != StopReason::none) return;
      auto batch = make_batch();
      if (batch.empty()) {
        const bool no_ops = generational() && !islands.empty() && !islands[0].empty() &&
                            std::all_of(weights.begin(), weights.end(), [](double w) { return w <= 0; });
        stop = no_ops ? StopReason::operators_exhausted : StopReason::space_exhausted;
        return;
      }
      auto inds = process(batch);
      if (stop != StopReason::none) return;
      if (generational()) {
        next_generation(inds, batch);
        migrate();
      } else {
        if (islands.empty()) islands.resize(1);
        for (auto& ind : inds) keep_best(islands[0], std::move(ind));
      }
      if (archive) archive->calibrate();
      emit_generation();
      ++generation;
      if (generation % static_cast<std::uint64_t>(cfg.checkpoint.snapshot_interval) == 0) snapshot();
    }
  }

  void run_async() {
    const std::size_t n_flight = cfg.in_flight ? cfg.in_flight : 2 * static_cast<std::size_t>(cfg.threads);
    if (islands.empty()) islands.resize(1);
    struct Done {
      Proposal p;
      Evaluation e;
    };
    std::mutex mtx, eval_mtx;
    std::condition_variable cv;
    std::vector<Done> done;
    std::size_t in_flight = 0;
    std::size_t submitted = 0, completed = 0;  // tasks enqueued / finished (completed under mtx)
    std::deque<Proposal> ready;
    const bool serial = problem.thread_safety() == ThreadSafety::none;
    const Rng root = Rng(cfg.seed).fork(s_async);
    std::uint64_t since_generation = 0;
    bool exhausted = false;

    auto submit = [&](Proposal p) {
      ++in_flight;
      ++submitted;
      auto held = std::make_shared<Proposal>(std::move(p));
      arena->enqueue([&, held] {
        Evaluation e;
        {
          std::unique_lock<std::mutex> lk(eval_mtx, std::defer_lock);
          if (serial) lk.lock();
          eval_chunk(std::span<const Genome>(&held->genome, 1), &e);
        }
        std::lock_guard<std::mutex> g(mtx);
        done.push_back(Done{std::move(*held), std::move(e)});
        ++completed;
        cv.notify_one();
      });
    };
    auto finish = [&](Proposal& p, Individual ind) {
      seen.insert(p.hash);
      apply(ind, p.arm, p.parent, p.op_cost, p.cached != nullptr);
      if (p.arm != kNoArm) {
        ProposalOutcome o{ind.genome, ind.eval};
        arms[p.arm].op.feedback(std::span<const ProposalOutcome>(&o, 1));
      }
      if (p.cached) replay.erase(p.hash);
      if (archive) {
        archive->calibrate();
      }
      keep_best(islands[0], std::move(ind));
      if (++since_generation >= cfg.population) {
        since_generation = 0;
        emit_generation();
        ++generation;
        if (generation % static_cast<std::uint64_t>(cfg.checkpoint.snapshot_interval) == 0) snapshot();
      }
    };

    try {
      while (true) {
        if (stop == StopReason::none) stop = check_stop();
        // Budget counts evaluations already running, so the run never overshoots.
        const bool over = cfg.budget.max_evaluations && evaluations + in_flight >= cfg.budget.max_evaluations;
        while (stop == StopReason::none && !over && !exhausted && in_flight < n_flight &&
               (!cfg.budget.max_evaluations || evaluations + in_flight < cfg.budget.max_evaluations)) {
          if (ready.empty()) {
            std::vector<Proposal> got;
            batch_hashes.clear();
            outcomes.assign(arms.size(), {});
            for (int tries = 0; got.empty() && tries < 64; ++tries) {
              Rng rng = root.fork(cursor++);
              const std::size_t have = islands[0].size() + in_flight;
              // Operators that keep proposing known genomes hand over to random ones (as the
              // generational top-up does); only when those fail too is the space exhausted.
              if (have < cfg.population || tries >= 32) {
                if (cursor == 1) add_seeds(got, 1);
                if (got.empty()) admit(space->random(rng), rng, kNoArm, 0, kInf, 0, tries >= 32 ? "random" : "init", got);
              } else {
                compute_weights();
                if (elite_view.empty() || cursor % 16 == 0) build_elite_view();
                // Asynchronous operators are polled at every refill, whatever their share.
                for (std::uint32_t a = 0; a < arms.size(); ++a)
                  if (weights[a] > 0 && arms[a].op.asynchronous()) breed_with(a, 0, rng, 4, got, false);
                if (!got.empty()) break;
                if (!breed_one(0, rng, 4, got)) break;
              }
            }
            for (std::size_t a = 0; a < arms.size(); ++a) {
              // Dropped proposals are reported at once; admitted ones after their evaluation.
              std::vector<ProposalOutcome> dropped;
              for (auto& o : outcomes[a])
                if (!o.genome.empty()) dropped.push_back(std::move(o));
              if (!dropped.empty()) arms[a].op.feedback(dropped);
            }
            if (got.empty()) {
              exhausted = true;
              break;
            }
            for (auto& p : got) ready.push_back(std::move(p));
          }
          Proposal p = std::move(ready.front());
          ready.pop_front();
          if (seen.count(p.hash)) continue;
          seen.insert(p.hash);
          if (p.cached) {
            Individual ind = *p.cached;
            finish(p, std::move(ind));
          } else {
            submit(std::move(p));
          }
        }
        if (in_flight == 0) {
          if (stop == StopReason::none) stop = check_stop();
          if (stop == StopReason::none) stop = exhausted ? StopReason::space_exhausted : StopReason::evaluations;
          return;
        }
        std::vector<Done> got;
        {
          std::unique_lock<std::mutex> lk(mtx);
          cv.wait_for(lk, std::chrono::milliseconds(20), [&] { return !done.empty(); });
          got.swap(done);
        }
        if (stop_flag.load(std::memory_order_relaxed)) {
          // Stopping: failures may be the stop's doing (a measurement cut short); not recorded,
          // so a resume measures those genomes again.
          const auto cut = std::remove_if(got.begin(), got.end(), [](const Done& d) { return stopped_failure(d.e); });
          for (auto it = cut; it != got.end(); ++it) {
            --in_flight;
            seen.erase(it->p.hash);
          }
          got.erase(cut, got.end());
        }
        std::vector<Individual> inds;
        std::vector<const Individual*> ptrs;
        inds.reserve(got.size());
        for (auto& d : got) {
          Individual ind;
          ind.genome = d.p.genome;
          ind.eval = std::move(d.e);
          ind.id = next_id++;
          ind.op = d.p.op;
          ind.generation = generation;
          inds.push_back(std::move(ind));
        }
        for (auto& ind : inds) ptrs.push_back(&ind);
        if (journal) journal->append(ptrs);
        for (std::size_t i = 0; i < got.size(); ++i) {
          --in_flight;
          finish(got[i].p, std::move(inds[i]));
        }
      }
    } catch (...) {
      // Tasks still running refer to this frame: let them finish before unwinding. (Counting
      // `done` against `in_flight` would hang when the throw came from the journal or an observer
      // while a batch taken out of `done` was being applied.)
      std::unique_lock<std::mutex> lk(mtx);
      cv.wait(lk, [&] { return completed >= submitted; });
      throw;
    }
  }

  Result run() {
    if (ran) throw Error("evo: Engine::run() may be called once");
    ran = true;
    start = Clock::now();
    for (std::size_t i = 0; i < arms.size(); ++i) arms[i].stats.name = arms[i].op.name();
    for (std::size_t i = 0; i < arms.size(); ++i)
      for (std::size_t j = 0; j < i; ++j)
        if (arms[i].stats.name == arms[j].stats.name) arms[i].stats.name += fmt::format("#{}", i);
    if (arms.empty() && cfg.algorithm != Algorithm::random && cfg.algorithm != Algorithm::exhaustive)
      throw Error(fmt::format("evo: {} needs operators: keep builtin_operators or call add_operator()", to_string(cfg.algorithm)));
    if (uses_archive()) archive.emplace(cfg.archive);
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const std::size_t want_threads =
        std::max<std::size_t>(static_cast<std::size_t>(cfg.threads),
                              cfg.algorithm == Algorithm::steady_state ? std::max<std::size_t>(cfg.in_flight, 1) : 1);
    std::optional<tbb::global_control> gc;
    if (cfg.raise_thread_limit && static_cast<int>(want_threads) + 1 > hw)
      gc.emplace(tbb::global_control::max_allowed_parallelism, want_threads + 1);
    if (problem.thread_safety() == ThreadSafety::basic && cfg.threads > 1)
      copies = std::make_unique<tbb::enumerable_thread_specific<Problem>>([this] { return problem.clone(); });
    if (cfg.algorithm == Algorithm::steady_state)
      arena = std::make_unique<tbb::task_arena>(cfg.threads, 0);
    else
      arena = std::make_unique<tbb::task_arena>(cfg.threads);
    if (resumed && snap) restore();
    if (!cfg.checkpoint.dir.empty()) {
      if (!resumed) snapshot();  // the configuration is on disk before the first evaluation
      journal = std::make_unique<detail::JournalWriter>(
          cfg.checkpoint.dir / detail::kJournalName, fingerprint, static_cast<std::uint32_t>(space->width()),
          resumed ? std::optional<std::uint64_t>(journal_valid_bytes) : std::nullopt, cfg.checkpoint.sync);
    }
    if (!det) absorb_replay();
    if (cfg.algorithm == Algorithm::steady_state)
      run_async();
    else
      run_generational();
    absorb_replay();
    if (!stopped_mid_batch) snapshot();
    arena.reset();
    copies.reset();
    return result();
  }

  Result result() const {
    Result r;
    r.best = best;
    std::vector<Individual> all;
    for (const auto& pop : islands)
      for (const auto& ind : pop) all.push_back(ind);
    sort_pop(all);
    for (auto& ind : all)
      if (std::none_of(r.elites.begin(), r.elites.end(), [&](const Individual& e) { return e.genome == ind.genome; }))
        r.elites.push_back(std::move(ind));
    if (archive)
      for (const auto& [c, ind] : archive->cells()) {
        r.archive.push_back(ind);
        r.archive_cells.push_back(c);
      }
    r.evaluations = evaluations;
    r.valid = valid;
    r.by_status = by_status;
    r.duplicates = duplicates;
    r.outside = outside;
    r.replayed = replayed;
    r.generations = generation;
    r.wall_seconds = wall();
    r.cost = cost;
    r.evaluation_cost = eval_cost;
    r.stop_reason = stop;
    r.deterministic = det;
    r.determinism_note = det_note;
    r.history_hash = history_hash;
    r.operators = op_stats();
    return r;
  }
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::Engine(Problem problem, Config config) : impl_(std::make_unique<Impl>(std::move(problem), std::move(config))) {
  auto& I = *impl_;
  validate(I.cfg, *I.space);
  I.init_determinism();
  I.add_builtins();
  if (!I.cfg.checkpoint.dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(I.cfg.checkpoint.dir, ec);
    if (ec) throw Error(fmt::format("checkpoint {}: cannot create directory: {}", I.cfg.checkpoint.dir.string(), ec.message()));
    for (const char* f : {detail::kJournalName, detail::kSnapshotName})
      if (std::filesystem::exists(I.cfg.checkpoint.dir / f))
        throw Error(fmt::format("checkpoint {}: already holds a run; resume it or choose another directory",
                                I.cfg.checkpoint.dir.string()));
  }
}

Engine Engine::resume(const std::filesystem::path& dir, Problem problem) {
  return Engine(Impl::open(dir, std::move(problem), nullptr));
}
Engine Engine::resume(const std::filesystem::path& dir, Problem problem, Config config) {
  return Engine(Impl::open(dir, std::move(problem), &config));
}

std::unique_ptr<Engine::Impl> Engine::Impl::open(const std::filesystem::path& dir, Problem problem, const Config* override_cfg) {
  const auto snap_path = dir / detail::kSnapshotName;
  const auto journal_path = dir / detail::kJournalName;
  const std::uint64_t fp = detail::space_fingerprint(problem.space());
  std::error_code ec;
  if (!std::filesystem::exists(snap_path, ec)) {
    if (std::filesystem::exists(journal_path, ec)) {
      auto j = detail::read_journal_file(journal_path, fp);
      if (!j.records.empty())
        throw Error(fmt::format("checkpoint {}: journal without snapshot ({} missing)", dir.string(), snap_path.string()));
    }
    if (!override_cfg) throw Error(fmt::format("checkpoint {}: no run recorded here ({} missing)", dir.string(), snap_path.string()));
    // Killed before its first evaluation: start afresh with the given configuration.
    std::filesystem::remove(journal_path, ec);
    Config c = *override_cfg;
    c.checkpoint.dir = dir;
    return std::move(Engine(std::move(problem), std::move(c)).impl_);
  }
  auto snap = detail::read_snapshot(snap_path, fp);
  Config cfg = snap.config;
  if (override_cfg) {
    if (auto f = identity_mismatch(snap.config, *override_cfg); !f.empty())
      throw Error(fmt::format("checkpoint {}: the run was recorded with a different '{}'; only budgets, threads and "
                              "checkpoint settings may change on resume",
                              dir.string(), f));
    cfg = *override_cfg;
  }
  cfg.checkpoint.dir = dir;
  validate(cfg, problem.space());
  auto impl = std::make_unique<Engine::Impl>(std::move(problem), std::move(cfg));
  impl->init_determinism();
  impl->add_builtins();
  if (std::filesystem::exists(journal_path, ec)) {
    auto j = detail::read_journal_file(journal_path, fp);
    impl->journal_records = std::move(j.records);
    impl->journal_valid_bytes = j.valid_bytes;
  }
  impl->snap = std::move(snap);
  impl->resumed = true;
  return impl;
}

Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;
Engine::~Engine() = default;

void Engine::add_operator(Operator op, double initial_weight) {
  if (!(initial_weight >= 0)) throw Error("evo: an operator's initial weight must be >= 0");
  // An asynchronous operator hands back proposals whenever its background work completes, so
  // which generation receives them depends on timing: such a run cannot be reproduced.
  if (op.asynchronous() && impl_->det) {
    impl_->det = false;
    impl_->det_note = "operator '" + op.name() + "' is asynchronous: its proposals arrive by timing, so runs are not reproducible";
  }
  impl_->arms.push_back(Arm{std::move(op), initial_weight, 0, 0, 0, {}});
  impl_->arms.back().added = true;
}
void Engine::add_observer(Observer observer) { impl_->observers.push_back(std::move(observer)); }
Result Engine::run() { return impl_->run(); }
void Engine::request_stop() noexcept { impl_->stop_flag.store(true, std::memory_order_relaxed); }
const Config& Engine::config() const noexcept { return impl_->cfg; }
bool Engine::deterministic() const noexcept { return impl_->det; }

std::vector<Individual> read_journal(const std::filesystem::path& dir_or_file) {
  std::error_code ec;
  const auto path = std::filesystem::is_directory(dir_or_file, ec) ? dir_or_file / detail::kJournalName : dir_or_file;
  return detail::read_journal_file(path, std::nullopt).records;
}

}  // namespace kevo::evo
