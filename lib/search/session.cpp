// run_search: the search as front ends run it (include/kevo/search/session.hpp).
#include "kevo/search/session.hpp"

#include <thread>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "kevo/core/error.hpp"
#include "kevo/core/io.hpp"
#include "kevo/ir/text.hpp"

namespace kevo::search {

namespace {

// Candidates for the winner, best first: `first`, then the engine's best and elites, then the
// session's valid evaluations by fitness; distinct genomes only, none of `seen`.
std::vector<evo::Individual> candidates(std::vector<evo::Individual> first, const evo::Result& res,
                                        const std::vector<evo::Individual>& history, std::size_t limit,
                                        std::set<std::uint64_t> seen) {
  std::vector<evo::Individual> out;
  auto add = [&](const evo::Individual& ind) {
    if (out.size() >= limit || !ind.eval.ok()) return;
    if (seen.insert(genome_hash(ind.genome)).second) out.push_back(ind);
  };
  for (const auto& ind : first) add(ind);
  if (res.best) add(*res.best);
  for (const auto& ind : res.elites) add(ind);
  if (out.size() < limit) {
    std::vector<const evo::Individual*> ok;
    for (const auto& ind : history)
      if (ind.eval.ok()) ok.push_back(&ind);
    std::stable_sort(ok.begin(), ok.end(),
                     [](const evo::Individual* a, const evo::Individual* b) { return a->eval.fitness[0] < b->eval.fitness[0]; });
    for (const auto* ind : ok) add(*ind);
  }
  return out;
}

// What a resumed run must share with the recorded one beyond the engine's configuration (which
// the engine checks): the kernel, the target and the runner. Written beside the journal by a run
// with a checkpoint; a checkpoint without it (the CLI's, which checks its own run.json, or one
// from before it was written) is not checked here.
constexpr const char* kProblemFile = "problem.json";

nlohmann::json problem_identity(const KernelProblem& problem) {
  return {{"kernel", problem.kernel().name},
          {"kernel_hash", fmt::format("{:016x}", ir::kernel_hash(problem.kernel()))},
          {"target", problem.target().name},
          {"target_hash", fmt::format("{:016x}", problem.target().hash())},
          {"runner", problem.runner_traits().identity}};
}

// Empty when `dir` holds no record or the record matches; else why the resume is refused.
std::string identity_mismatch(const std::filesystem::path& dir, const KernelProblem& problem) {
  std::error_code ec;
  if (!std::filesystem::exists(dir / kProblemFile, ec)) return {};
  nlohmann::json rec;
  try {
    rec = nlohmann::json::parse(read_file(dir / kProblemFile, 1 << 20));
  } catch (const std::exception& e) {
    return fmt::format("{}: {}", (dir / kProblemFile).string(), printable(e.what()));
  }
  const nlohmann::json now = problem_identity(problem);
  for (const char* key : {"kernel_hash", "target", "target_hash", "runner"}) {
    const auto it = rec.find(key);
    if (it == rec.end() || !it->is_string()) return fmt::format("{}: no '{}' recorded", (dir / kProblemFile).string(), key);
    if (*it != now[key])
      return fmt::format("the run was recorded with {} '{}', not '{}'; only budgets, time and threads may change on resume",
                         std::string_view(key) == "kernel_hash" ? "kernel" : key, printable(it->get<std::string>()),
                         printable(now[key].get<std::string>()));
  }
  return {};
}

}  // namespace

void write_problem_identity(const std::filesystem::path& checkpoint_dir, const KernelProblem& problem) {
  write_file_atomic(checkpoint_dir / kProblemFile, problem_identity(problem).dump(2) + "\n");
}

std::string problem_identity_mismatch(const std::filesystem::path& checkpoint_dir, const KernelProblem& problem) {
  return identity_mismatch(checkpoint_dir, problem);
}

std::size_t default_population(evo::Algorithm algorithm) {
  return algorithm == evo::Algorithm::ga ? kDefaultPopulation : evo::Config{}.population;
}

evo::Config default_search_config(std::uint64_t seed, int threads) {
  evo::Config c;
  c.algorithm = evo::Algorithm::ga;
  c.seed = seed;
  c.threads = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  c.raise_thread_limit = true;  // an application: threads above the core count (workers waiting on devices) are meant
  c.budget.max_evaluations = kDefaultBudget;
  c.population = default_population(c.algorithm);
  return c;
}

Expected<std::vector<Genome>, Diagnostic> parse_seed_schedules(const KernelProblem& problem,
                                                               const std::vector<std::string>& texts) {
  std::vector<Genome> out;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    auto g = problem.schedule_space().parse(texts[i], fmt::format("<seed schedule {}>", i + 1));
    if (!g) return unexpected(std::move(g.error()));
    out.push_back(std::move(*g));
  }
  return out;
}

Expected<SearchOutcome, std::string> run_search(const KernelProblem& problem, const SearchOptions& options,
                                                const SearchHooks& hooks) {
  evo::Config cfg = options.config;
  // the smallest population the front ends allow (2) keeps one elite: the default 2 would fill it
  if (cfg.population >= 1) cfg.elites = std::min(cfg.elites, cfg.population - 1);
  auto seeds = parse_seed_schedules(problem, options.seed_schedules);
  if (!seeds) return unexpected(seeds.error().headline());
  for (auto& g : *seeds) cfg.seeds.push_back(std::move(g));
  if (options.seed_default) {
    const Genome& d = problem.schedule_space().default_genome();
    if (std::find(cfg.seeds.begin(), cfg.seeds.end(), d) == cfg.seeds.end()) cfg.seeds.push_back(d);
  }
  if (options.late_expert_seeds && cfg.late_seeds.empty() && cfg.budget.max_evaluations >= 2) {
    cfg.late_seeds = problem.schedule_space().expert_genomes();
    cfg.late_seeds_at = cfg.budget.max_evaluations / 2;
  }
  SearchOutcome out;
  std::optional<evo::Engine> engine;
  try {
    if (options.resume) {
      if (cfg.checkpoint.dir.empty()) return unexpected(std::string("resume: no checkpoint directory given"));
      // The expert schedules' point is the recorded run's (half of its first budget), not half of
      // this budget; everything else that must match is checked by the engine against the record.
      if (const auto recorded = evo::recorded_config(cfg.checkpoint.dir, problem.space())) {
        cfg.late_seeds = recorded->late_seeds;
        cfg.late_seeds_at = recorded->late_seeds_at;
      }
      // a target or runner other than the recorded one would mix two machines' figures in one
      // history (the engine checks the configuration, the space and the operators); checked first,
      // as another target's space differs in what the engine compares too
      if (const std::string why = identity_mismatch(cfg.checkpoint.dir, problem); !why.empty())
        return unexpected(fmt::format("checkpoint {}: {}", cfg.checkpoint.dir.string(), why));
      engine.emplace(evo::Engine::resume(cfg.checkpoint.dir, evo::Problem(problem), cfg));
    } else {
      engine.emplace(evo::Problem(problem), cfg);
      if (!cfg.checkpoint.dir.empty())
        write_file_atomic(cfg.checkpoint.dir / kProblemFile, problem_identity(problem).dump(2) + "\n");
    }
    if (options.strategy) engine->set_strategy(*options.strategy);
  } catch (const ParseError& e) {
    return unexpected(e.diagnostic().headline());
  } catch (const Error& e) {
    return unexpected(std::string(e.what()));
  }
  evo::Observer obs;
  obs.on_evaluation = [&](const evo::Individual& ind) {
    out.history.push_back(ind);
    if (hooks.on_evaluation) hooks.on_evaluation(ind);
    if (hooks.should_stop && !out.stopped && hooks.should_stop()) {
      out.stopped = true;
      engine->request_stop();
    }
  };
  if (hooks.on_new_best) obs.on_new_best = hooks.on_new_best;
  if (hooks.on_generation) obs.on_generation = [&hooks](const evo::GenerationStats&) { hooks.on_generation(); };
  engine->add_observer(std::move(obs));
  if (hooks.on_engine) hooks.on_engine(&*engine);
  try {
    out.result = engine->run();
  } catch (...) {
    if (hooks.on_engine) hooks.on_engine(nullptr);
    throw;
  }
  if (hooks.on_engine) hooks.on_engine(nullptr);
  const evo::Result& res = out.result;
  const bool requested = out.stopped || res.stop_reason == evo::StopReason::requested;

  // A noisy runner: re-time the leaders together before naming a winner.
  std::vector<evo::Individual> first;
  std::set<std::uint64_t> failed_retime;
  // Valid elites only: failed individuals have no figure to re-time (and must not become leaders).
  std::vector<evo::Individual> leaders;
  for (const auto& e : res.elites)
    if (e.eval.ok() && !e.eval.fitness.empty() && leaders.size() < 5) leaders.push_back(e);
  if (res.best && !problem.runner_traits().deterministic && leaders.size() > 1 && options.remeasure_rounds > 0 &&
      !requested) {
    std::vector<Genome> top;
    for (const auto& l : leaders) top.push_back(l.genome);
    std::vector<runner::Measurement> ms;
    const auto order = problem.remeasure(top, options.remeasure_rounds, ms);
    if (!order.empty() && ms[order.front()].status == Status::ok) {
      for (auto i : order) {
        if (ms[i].status == Status::ok) {
          first.push_back(leaders[i]);
          first.back().eval.fitness = {ms[i].latency_ns()};
        } else {
          failed_retime.insert(genome_hash(leaders[i].genome));
        }
      }
    }
    // A stop requested while re-timing may have cut measurements short (a process runner's
    // workers cancelled): its failures say nothing of the leaders, so the engine's figures stand.
    if (hooks.should_stop && hooks.should_stop()) {
      first.clear();
      failed_retime.clear();
      out.stopped = true;
    }
  }

  // Trust the winner: the first candidate, best first, that verifies against the reference.
  const auto cands = candidates(std::move(first), res, out.history, options.verify_candidates, std::move(failed_retime));
  if (!cands.empty()) {
    std::vector<Genome> gs;
    gs.reserve(cands.size());
    for (const auto& c : cands) gs.push_back(c.genome);
    VerifyOptions vo;
    vo.seed = options.verify_seed;
    const auto t0 = std::chrono::steady_clock::now();
    const double bound = options.verify_seconds;
    const Verifier verify = [&problem, vo, bound, t0](std::size_t i, const Genome& g) {
      if (i > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > bound) {
        Verification v;
        v.message = fmt::format("not checked: verification time bound of {:.0f} s reached", bound);
        return v;
      }
      return verify_schedule(problem, g, vo);
    };
    const VerifiedBest vb = first_verified(gs, options.verify_candidates, verify, hooks.on_verify);
    for (const auto& [i, v] : vb.rejected) out.rejected.push_back({cands[i], v});
    out.verification = vb.verification;
    if (vb.index) {
      out.best = cands[*vb.index];
      out.best_schedule = problem.to_text(out.best->genome);
      out.best_measurement = problem.cached_measurement(out.best->genome);
    }
  }
  // Nothing valid at all: say why, as `kevo eval` of the default schedule would (a search of a
  // kernel too large for any schedule returned no best and no reason)
  if (!out.best && out.verification.message.empty() && res.valid == 0) {
    const Genome& d = problem.schedule_space().default_genome();
    try {
      if (auto p = problem.lower(d); !p)
        out.verification.message = fmt::format("no valid schedule in {} evaluation(s); the default schedule: {}", res.evaluations,
                                               p.error().str());
      else
        out.verification.message = fmt::format("no valid schedule in {} evaluation(s)", res.evaluations);
    } catch (const std::exception& e) {
      out.verification.message = fmt::format("no valid schedule in {} evaluation(s): {}", res.evaluations, printable(e.what()));
    }
  }
  return out;
}

}  // namespace kevo::search
