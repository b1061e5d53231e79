// The public Engine: construction and configuration checks, determinism, operators and the
// strategy, resume entry points. The roles behind it live in bandit.cpp, evaluate.cpp, resume.cpp
// and loop.cpp (see engine_impl.hpp).
#include "kevo/evo/engine.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "engine_impl.hpp"
#include "kevo/core/error.hpp"
#include "kevo/evo/operators.hpp"
#include "kevo/evo/strategies.hpp"

namespace kevo::evo {

std::string_view to_string(Algorithm a) noexcept {
  switch (a) {
    case Algorithm::ga: return "ga";
    case Algorithm::islands: return "islands";
    case Algorithm::map_elites: return "map_elites";
    case Algorithm::steady_state: return "steady_state";
    case Algorithm::random: return "random";
    case Algorithm::exhaustive: return "exhaustive";
    case Algorithm::surrogate: return "surrogate";
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
                 Algorithm::exhaustive, Algorithm::surrogate})
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

namespace detail {

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
  if (a.late_seeds != b.late_seeds || a.late_seeds_at != b.late_seeds_at) return "late_seeds";
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
  for (const auto& s : c.late_seeds)
    if (s.size() != space.width()) bad(fmt::format("a late seed genome has width {}, the space {}", s.size(), space.width()));
}

}  // namespace detail

Engine::Impl::Impl(Problem p, Config c) : problem(std::move(p)), cfg(std::move(c)) {
  space = &problem.space();
  fingerprint = detail::space_fingerprint(*space);
  strategy.emplace(builtin_strategy(cfg));
}

// Deterministic unless the config or the problem says otherwise, the strategy is asynchronous
// (results in completion order) or an added operator is (proposals arrive by timing).
void Engine::Impl::init_determinism() {
  det = cfg.deterministic.value_or(problem.deterministic());
  det_note.clear();
  if (strategy->asynchronous()) {
    det = false;
    det_note = strategy->name() == "steady_state"
                   ? "steady_state applies results in completion order, so runs are not reproducible"
                   : "strategy '" + strategy->name() + "' applies results in completion order, so runs are not reproducible";
    return;
  }
  if (!det) {
    det_note = cfg.deterministic ? "determinism turned off in the config" : "the problem is not deterministic";
    return;
  }
  for (const auto& a : arms)
    if (a.added && a.op.asynchronous()) {
      det = false;
      det_note = "operator '" + a.op.name() + "' is asynchronous: its proposals arrive by timing, so runs are not reproducible";
      return;
    }
  if (cfg.budget.max_seconds > 0) det_note = "deterministic, except where the wall-time budget stops the run";
}

void Engine::Impl::add_builtins() {
  if (!cfg.builtin_operators) return;
  arms.push_back(detail::Arm{Operator(Mutate{cfg.mutation_rate}), 1.0, 0, 0, 0, {}});
  arms.push_back(detail::Arm{Operator(Reset{cfg.mutation_rate}), 0.25, 0, 0, 0, {}});
  if (cfg.crossover_rate > 0)
    arms.push_back(detail::Arm{Operator(GroupCrossover{cfg.mutation_rate}), cfg.crossover_rate, 0, 0, 0, {}});
}

bool Engine::Impl::uses_archive() const {
  return strategy->uses_archive() || !cfg.archive.bins.empty() || !cfg.archive.ranges.empty();
}

double Engine::Impl::wall() const {
  return wall_before + std::chrono::duration<double>(detail::Clock::now() - start).count();
}

std::uint64_t Engine::Impl::remaining() const {
  if (cfg.budget.max_evaluations == 0) return std::numeric_limits<std::uint64_t>::max();
  return cfg.budget.max_evaluations > evaluations ? cfg.budget.max_evaluations - evaluations : 0;
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::Engine(Problem problem, Config config) : impl_(std::make_unique<Impl>(std::move(problem), std::move(config))) {
  auto& I = *impl_;
  detail::validate(I.cfg, *I.space);
  I.init_determinism();
  I.add_builtins();
  if (!I.cfg.checkpoint.dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(I.cfg.checkpoint.dir, ec);
    if (ec) throw Error(fmt::format("checkpoint {}: cannot create directory: {}", I.cfg.checkpoint.dir.string(), ec.message()));
    if (!I.lock.held()) I.lock = DirLock(I.cfg.checkpoint.dir, "checkpoint");
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

Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;
Engine::~Engine() = default;

void Engine::add_operator(Operator op, double initial_weight) {
  if (!(initial_weight >= 0)) throw Error("evo: an operator's initial weight must be >= 0");
  impl_->arms.push_back(detail::Arm{std::move(op), initial_weight, 0, 0, 0, {}});
  impl_->arms.back().added = true;
  impl_->init_determinism();
}
void Engine::set_strategy(Strategy strategy) {
  if (impl_->ran) throw Error("evo: set_strategy() must come before run()");
  impl_->strategy.emplace(std::move(strategy));
  impl_->init_determinism();
}
void Engine::add_observer(Observer observer) { impl_->observers.push_back(std::move(observer)); }
Result Engine::run() { return impl_->run(); }
void Engine::request_stop() noexcept { impl_->stop_flag.store(true, std::memory_order_relaxed); }
const Config& Engine::config() const noexcept { return impl_->cfg; }
bool Engine::deterministic() const noexcept { return impl_->det; }
const Strategy& Engine::strategy() const noexcept { return *impl_->strategy; }

std::vector<Individual> read_journal(const std::filesystem::path& dir_or_file) {
  std::error_code ec;
  const bool dir = std::filesystem::is_directory(dir_or_file, ec);
  const auto path = dir ? dir_or_file / detail::kJournalName : dir_or_file;
  // a checkpoint directory with no journal yet: a run killed before its first batch, which
  // resume() starts afresh (its history is empty, not an error that leaves it unresumable)
  if (dir && !std::filesystem::exists(path, ec)) return {};
  return detail::read_journal_file(path, std::nullopt).records;
}

std::optional<Config> recorded_config(const std::filesystem::path& dir, const Space& space) {
  const auto path = dir / detail::kSnapshotName;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  return detail::read_snapshot(path, detail::space_fingerprint(space)).config;
}

}  // namespace kevo::evo
