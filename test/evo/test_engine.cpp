#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <set>
#include <thread>

#include "kevo/evo/strategies.hpp"
#include "problems.hpp"

using namespace kevo;
using namespace kevo::evo;

namespace {

struct Trace {
  std::vector<std::uint64_t> ids;
  std::vector<Genome> genomes;
  std::vector<double> fitness;
};

Result run_traced(const Problem& p, const Config& c, Trace* t = nullptr) {
  Engine e(p, c);
  if (t)
    e.add_observer(Observer{[t](const Individual& i) {
                              t->ids.push_back(i.id);
                              t->genomes.push_back(i.genome);
                              t->fitness.push_back(i.eval.ok() ? i.eval.fitness[0] : -1.0);
                            },
                            {}, {}});
  return e.run();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

TEST_CASE("same seed gives a bit-identical history for 1, 2 and 4 threads", "[evo][determinism]") {
  const std::uint64_t evals = evotest::asan() ? 300 : 1500;
  for (auto alg : {Algorithm::ga, Algorithm::islands, Algorithm::map_elites, Algorithm::random}) {
    Problem p(evotest::Rastrigin(6));
    auto cfg = evotest::small_config(alg, 77, evals);
    cfg.archive.bins = {6};
    std::vector<Result> rs;
    std::vector<Trace> ts(3);
    int k = 0;
    for (int threads : {1, 2, 4}) {
      cfg.threads = threads;
      rs.push_back(run_traced(p, cfg, &ts[static_cast<std::size_t>(k++)]));
    }
    INFO(to_string(alg));
    REQUIRE(rs[0].deterministic);
    CHECK(rs[0].evaluations == evals);
    for (int i = 1; i < 3; ++i) {
      CHECK(rs[static_cast<std::size_t>(i)].history_hash == rs[0].history_hash);
      CHECK(ts[static_cast<std::size_t>(i)].genomes == ts[0].genomes);
      CHECK(ts[static_cast<std::size_t>(i)].fitness == ts[0].fitness);
      CHECK(rs[static_cast<std::size_t>(i)].best->genome == rs[0].best->genome);
      CHECK(rs[static_cast<std::size_t>(i)].archive.size() == rs[0].archive.size());
    }
  }
}

TEST_CASE("different seeds give different histories", "[evo][determinism]") {
  Problem p(evotest::Rastrigin(6));
  const auto a = run_traced(p, evotest::small_config(Algorithm::ga, 1, 300));
  const auto b = run_traced(p, evotest::small_config(Algorithm::ga, 2, 300));
  CHECK(a.history_hash != b.history_hash);
}

TEST_CASE("the same genome is never evaluated twice in a run", "[evo][dedup]") {
  evotest::SpaceOnly sp;
  sp.sp.add(Gene::ordinal("a", {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  sp.sp.add(Gene::ordinal("b", {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  for (auto alg : {Algorithm::ga, Algorithm::random, Algorithm::islands, Algorithm::steady_state}) {
    Trace t;
    auto cfg = evotest::small_config(alg, 5, 5000);
    cfg.population = 8;
    cfg.threads = 2;
    const auto r = run_traced(Problem(sp), cfg, &t);
    INFO(to_string(alg));
    std::set<Genome> uniq(t.genomes.begin(), t.genomes.end());
    CHECK(uniq.size() == t.genomes.size());
    CHECK(r.evaluations <= 100);
    CHECK(r.duplicates > 0);
  }
}

TEST_CASE("exhaustive search evaluates every genome once and finds the true optimum", "[evo][exhaustive]") {
  Problem p(evotest::Rastrigin(2, true));
  auto cfg = evotest::small_config(Algorithm::exhaustive, 0, 0);
  cfg.threads = 2;
  const auto r = Engine(p, cfg).run();
  CHECK(r.evaluations == 101 * 101);
  CHECK(r.stop_reason == StopReason::space_exhausted);
  REQUIRE(r.best);
  CHECK(r.best->eval.fitness[0] == 0.0);
  CHECK(p.space().describe(r.best->genome) == "x0=0 x1=0");
}

TEST_CASE("exhaustive search refuses a space above its limit with a clear error", "[evo][exhaustive]") {
  Problem p(evotest::Rastrigin(6));
  auto cfg = evotest::small_config(Algorithm::exhaustive, 0, 0);
  CHECK_THROWS_WITH(Engine(p, cfg), Catch::Contains("exhaustive search needs a space of at most 1000000 genomes"));
}

TEST_CASE("bad configurations are clear errors naming the field", "[evo][config]") {
  Problem p(evotest::Rastrigin(2));
  auto cfg = evotest::small_config(Algorithm::ga, 0, 10);
  cfg.elites = 24;
  CHECK_THROWS_WITH(Engine(p, cfg), Catch::Contains("elites (24) must be smaller than population (24)"));
  cfg = evotest::small_config(Algorithm::ga, 0, 10);
  cfg.threads = 0;
  CHECK_THROWS_WITH(Engine(p, cfg), Catch::Contains("threads must be >= 1"));
  CHECK(algorithm_from_string("map_elites") == Algorithm::map_elites);
  CHECK_FALSE(algorithm_from_string("simulated_annealing"));
}

TEST_CASE("GA beats random search on Rastrigin by a margin that holds over many seeds", "[evo][quality]") {
  const int seeds = evotest::asan() ? 5 : 20;
  const std::uint64_t evals = evotest::asan() ? 600 : 2000;
  Problem p(evotest::Rastrigin(8));
  std::vector<double> ga, rnd;
  int wins = 0;
  for (int s = 0; s < seeds; ++s) {
    const auto g = Engine(p, evotest::small_config(Algorithm::ga, static_cast<std::uint64_t>(s), evals)).run();
    const auto r = Engine(p, evotest::small_config(Algorithm::random, static_cast<std::uint64_t>(s), evals)).run();
    ga.push_back(g.best->eval.fitness[0]);
    rnd.push_back(r.best->eval.fitness[0]);
    wins += ga.back() < rnd.back() ? 1 : 0;
  }
  INFO("median GA " << median(ga) << ", median random " << median(rnd));
  CHECK(median(ga) < 0.5 * median(rnd));
  CHECK(wins >= seeds * 9 / 10);
}

TEST_CASE("GA beats random search on a small travelling-salesman permutation", "[evo][quality]") {
  const int seeds = evotest::asan() ? 5 : 20;
  const std::uint64_t evals = evotest::asan() ? 600 : 2000;
  Problem p(evotest::Tsp(12));
  std::vector<double> ga, rnd;
  int wins = 0;
  for (int s = 0; s < seeds; ++s) {
    const auto g = Engine(p, evotest::small_config(Algorithm::ga, static_cast<std::uint64_t>(s), evals)).run();
    const auto r = Engine(p, evotest::small_config(Algorithm::random, static_cast<std::uint64_t>(s), evals)).run();
    ga.push_back(g.best->eval.fitness[0]);
    rnd.push_back(r.best->eval.fitness[0]);
    wins += ga.back() < rnd.back() ? 1 : 0;
  }
  INFO("median GA " << median(ga) << ", median random " << median(rnd));
  CHECK(median(ga) < 0.85 * median(rnd));
  CHECK(wins >= seeds * 9 / 10);
}

TEST_CASE("islands and MAP-Elites also beat random search on Rastrigin", "[evo][quality]") {
  const int seeds = evotest::asan() ? 3 : 10;
  Problem p(evotest::Rastrigin(8));
  for (auto alg : {Algorithm::islands, Algorithm::map_elites, Algorithm::steady_state}) {
    std::vector<double> a, rnd;
    for (int s = 0; s < seeds; ++s) {
      auto cfg = evotest::small_config(alg, static_cast<std::uint64_t>(s), 1500);
      cfg.archive.bins = {6};
      a.push_back(Engine(p, cfg).run().best->eval.fitness[0]);
      rnd.push_back(Engine(p, evotest::small_config(Algorithm::random, static_cast<std::uint64_t>(s), 1500)).run().best->eval.fitness[0]);
    }
    INFO(to_string(alg) << ": median " << median(a) << ", random " << median(rnd));
    CHECK(median(a) < 0.7 * median(rnd));
  }
}

TEST_CASE("evaluation budget stops the run at exactly max_evaluations", "[evo][budget]") {
  Problem p(evotest::Rastrigin(6));
  for (auto alg : {Algorithm::ga, Algorithm::islands, Algorithm::steady_state, Algorithm::random}) {
    auto cfg = evotest::small_config(alg, 1, 517);
    cfg.threads = 2;
    const auto r = Engine(p, cfg).run();
    INFO(to_string(alg));
    CHECK(r.evaluations == 517);
    CHECK(r.stop_reason == StopReason::evaluations);
  }
}

TEST_CASE("target fitness stops the run once reached", "[evo][budget]") {
  Problem p(evotest::Rastrigin(3, true));
  auto cfg = evotest::small_config(Algorithm::ga, 4, 100000);
  cfg.budget.target_fitness = 0.5;
  const auto r = Engine(p, cfg).run();
  CHECK(r.stop_reason == StopReason::target);
  CHECK(r.best->eval.fitness[0] <= 0.5);
  CHECK(r.evaluations < 100000);
}

TEST_CASE("patience stops the run after that many evaluations without a new best", "[evo][budget]") {
  evotest::SpaceOnly flat;  // fitness depends on gene 0 only: improvement stops quickly
  flat.sp.add(Gene::ordinal("a", {0, 1, 2}));
  for (int i = 0; i < 6; ++i) flat.sp.add(Gene::ordinal(fmt::format("n{}", i), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  auto cfg = evotest::small_config(Algorithm::ga, 4, 100000);
  cfg.budget.patience = 200;
  Engine e(Problem(flat), cfg);
  std::uint64_t last_best = 0;
  e.add_observer(Observer{{}, [&](const Individual& i) { last_best = i.id + 1; }, {}});
  const auto r = e.run();
  CHECK(r.stop_reason == StopReason::patience);
  CHECK(r.evaluations - last_best >= 200);
  CHECK(r.evaluations - last_best < 200 + cfg.population);  // checked once per generation
}

TEST_CASE("wall-time, generation and cost budgets stop the run", "[evo][budget]") {
  Problem slow(evotest::Rastrigin(6, false, 200));
  auto cfg = evotest::small_config(Algorithm::ga, 4, 0);
  cfg.budget.max_seconds = 0.3;
  auto r = Engine(slow, cfg).run();
  CHECK(r.stop_reason == StopReason::time);
  CHECK(r.wall_seconds < 3.0);

  cfg = evotest::small_config(Algorithm::ga, 4, 0);
  cfg.budget.max_generations = 5;
  r = Engine(Problem(evotest::Rastrigin(6)), cfg).run();
  CHECK(r.stop_reason == StopReason::generations);
  CHECK(r.generations == 5);

  struct Paid {  // an operator that spends 0.01 per proposal, like an LLM
    double spent = 0;
    std::string name() const { return "paid"; }
    std::size_t arity() const { return 1; }
    double cost() const { return spent; }
    std::vector<Genome> propose(const OperatorContext& ctx) {
      spent += 0.01;
      Genome g = ctx.parents[0].genome;
      mutate_genome(ctx.problem.space(), g, 0, ctx.rng);
      return {g};
    }
  };
  cfg = evotest::small_config(Algorithm::ga, 4, 0);
  cfg.builtin_operators = false;
  cfg.budget.max_cost = 1.0;
  Engine e(Problem(evotest::Rastrigin(6)), cfg);
  e.add_operator(Paid{});
  r = e.run();
  CHECK(r.stop_reason == StopReason::cost);
  CHECK(r.cost >= 0.999);
  CHECK(r.cost < 1.25);
}

TEST_CASE("request_stop ends the run after the current batch", "[evo][budget]") {
  auto cfg = evotest::small_config(Algorithm::ga, 4, 0);
  Engine e(Problem(evotest::Rastrigin(6)), cfg);
  e.add_observer(Observer{{}, {}, [&](const GenerationStats& g) {
                            if (g.generation == 3) e.request_stop();
                          }});
  const auto r = e.run();
  CHECK(r.stop_reason == StopReason::requested);
  CHECK(r.generations == 4);
}

TEST_CASE("bandit shifts proposals to the operator that improves", "[evo][bandit]") {
  struct Useless {  // proposes its parent again: always a duplicate
    std::string name() const { return "useless"; }
    std::size_t arity() const { return 1; }
    std::vector<Genome> propose(const OperatorContext& ctx) const { return {ctx.parents[0].genome}; }
  };
  struct Wild {  // a fresh random genome: valid, but rarely better than a good parent
    std::string name() const { return "wild"; }
    std::size_t arity() const { return 1; }
    std::vector<Genome> propose(const OperatorContext& ctx) const { return {ctx.problem.space().random(ctx.rng)}; }
  };
  auto cfg = evotest::small_config(Algorithm::ga, 8, evotest::asan() ? 800 : 3000);
  cfg.builtin_operators = false;
  Engine e(Problem(evotest::Rastrigin(6, true)), cfg);
  // The plain generational GA: with clearing (the default) the parents are spread over niches,
  // weaker than the best, so a random genome "improves on its parent" about as often as a
  // mutation does on this unimodal sphere and the bandit no longer separates the two.
  Genetic plain = *builtin_strategy(cfg).extract<Genetic>();
  plain.niche_radius = 0;
  e.set_strategy(plain);
  e.add_operator(Useless{});
  e.add_operator(Wild{});
  e.add_operator(Mutate{});
  const auto r = e.run();
  REQUIRE(r.operators.size() == 3);
  const auto& useless = r.operators[0];
  const auto& wild = r.operators[1];
  const auto& mutate = r.operators[2];
  INFO("weights: useless " << useless.weight << ", wild " << wild.weight << ", mutate " << mutate.weight);
  CHECK(mutate.weight > 0.6);
  CHECK(useless.weight < 0.15);
  CHECK(mutate.proposals > useless.proposals + wild.proposals);
  CHECK(useless.duplicates == useless.proposals);
  CHECK(mutate.improvements > wild.improvements);
}

TEST_CASE("an added operator that never proposes a valid genome gets no bandit weight", "[evo][bandit]") {
  struct Hopeless {  // always outside the space (an LLM that never writes a schedule that parses)
    std::string name() const { return "hopeless"; }
    std::size_t arity() const { return 1; }
    std::vector<Genome> propose(const OperatorContext& ctx) const {
      Genome g = ctx.parents[0].genome;
      g[0] = 1000;
      return {g};
    }
  };
  auto cfg = evotest::small_config(Algorithm::ga, 5, 600);
  Engine e(Problem(evotest::Rastrigin(6)), cfg);
  e.add_operator(Hopeless{});
  const auto r = e.run();
  const auto it = std::find_if(r.operators.begin(), r.operators.end(), [](const OperatorStats& s) { return s.name == "hopeless"; });
  REQUIRE(it != r.operators.end());
  CHECK(it->weight == 0);
  CHECK(it->evaluated == 0);
  CHECK(it->proposals >= 16);
  CHECK(it->proposals < 40);  // muted after its 16th try (a batch may already hold a few more)
  for (const auto& s : r.operators)
    if (s.name != "hopeless") CHECK(s.weight > 0);  // the built-ins keep their share
}

TEST_CASE("operators receive feedback on every proposal, dropped ones with a reason", "[evo][operators]") {
  struct Recorder {
    std::shared_ptr<std::vector<std::string>> reasons = std::make_shared<std::vector<std::string>>();
    std::shared_ptr<std::uint64_t> made = std::make_shared<std::uint64_t>(0);
    std::string name() const { return "rec"; }
    std::size_t arity() const { return 1; }
    std::vector<Genome> propose(const OperatorContext& ctx) {
      ++*made;
      Genome g = ctx.parents[0].genome;
      if (ctx.rng.chance(0.3)) g[0] = 1000;  // outside the space
      else mutate_genome(ctx.problem.space(), g, 0, ctx.rng);
      return {g};
    }
    void feedback(std::span<const ProposalOutcome> os) {
      for (const auto& o : os) reasons->push_back(o.eval.ok() ? "ok" : o.eval.reason);
    }
  };
  Recorder rec;
  auto cfg = evotest::small_config(Algorithm::ga, 8, 500);
  cfg.builtin_operators = false;
  Engine e(Problem(evotest::Rastrigin(4, true)), cfg);
  e.add_operator(rec);
  const auto r = e.run();
  CHECK(rec.reasons->size() == *rec.made);
  CHECK(std::count(rec.reasons->begin(), rec.reasons->end(), "outside space") == static_cast<long>(r.outside));
  CHECK(r.outside > 50);
}

TEST_CASE("NaN fitness and a throwing problem become error statuses, never a crash", "[evo][robustness]") {
  struct Nasty {
    kevo::Space sp;
    Nasty() { sp.add(Gene::ordinal("a", {0, 1, 2, 3, 4, 5, 6, 7})); sp.add(Gene::ordinal("b", {0, 1, 2, 3})); }
    const kevo::Space& space() const { return sp; }
    std::vector<Evaluation> evaluate(std::span<const Genome> gs) const {
      std::vector<Evaluation> out(gs.size());
      for (std::size_t i = 0; i < gs.size(); ++i) {
        if (gs[i][0] == 3) throw std::runtime_error("boom");
        out[i].fitness = {gs[i][0] == 5 ? std::nan("") : static_cast<double>(gs[i][0] + gs[i][1])};
      }
      return out;
    }
  };
  auto cfg = evotest::small_config(Algorithm::random, 8, 32);
  cfg.population = 4;
  std::vector<Individual> all;
  Engine e(Problem(Nasty{}), cfg);
  e.add_observer(Observer{[&](const Individual& i) { all.push_back(i); }, {}, {}});
  const auto r = e.run();
  CHECK(r.evaluations == 32);
  CHECK(r.by_status[static_cast<std::size_t>(Status::error)] > 0);
  for (const auto& i : all) {
    // A genome with a = 3 makes the whole evaluate() call throw; a = 5 alone gives NaN.
    if (i.genome[0] == 5 && i.eval.reason.find("threw") == std::string::npos)
      CHECK(i.eval.reason.find("NaN") != std::string::npos);
    if (i.eval.ok()) CHECK(i.genome[0] != 5);
  }
  CHECK(r.best->eval.fitness[0] == 0.0);
}

TEST_CASE("steady-state mode says it is not deterministic", "[evo][async]") {
  auto cfg = evotest::small_config(Algorithm::steady_state, 1, 300);
  cfg.threads = 2;
  cfg.in_flight = 4;
  const auto r = Engine(Problem(evotest::Rastrigin(4)), cfg).run();
  CHECK_FALSE(r.deterministic);
  CHECK(r.determinism_note.find("completion order") != std::string::npos);
  CHECK(r.evaluations == 300);
}

TEST_CASE("generation observer reports counts that add up", "[evo][observers]") {
  auto cfg = evotest::small_config(Algorithm::ga, 1, 240);
  std::vector<GenerationStats> gens;
  std::uint64_t evals = 0, bests = 0;
  Engine e(Problem(evotest::Rastrigin(4)), cfg);
  e.add_observer(Observer{[&](const Individual&) { ++evals; }, [&](const Individual&) { ++bests; },
                          [&](const GenerationStats& g) { gens.push_back(g); }});
  const auto r = e.run();
  REQUIRE(gens.size() == 11);  // 24 initial, then 22 offspring per generation (2 elites kept)
  CHECK(gens.back().evaluations == 240);
  CHECK(evals == 240);
  CHECK(gens.back().best == r.best->eval.fitness[0]);
  std::uint64_t nb = 0, props = 0;
  for (const auto& o : r.operators) nb += o.new_bests, props += o.evaluated;
  CHECK(props == 240 - 24);
  CHECK(bests >= nb);
  for (std::size_t i = 1; i < gens.size(); ++i) CHECK(gens[i].best <= gens[i - 1].best);
}

namespace {

// Counts how many evaluate() calls overlap in time.
struct Concurrency {
  kevo::Space sp;
  ThreadSafety ts;
  std::shared_ptr<std::atomic<int>> now = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<int>> peak = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<bool>> waited = std::make_shared<std::atomic<bool>>(false);
  explicit Concurrency(ThreadSafety t) : ts(t) {
    for (int i = 0; i < 4; ++i) sp.add(Gene::ordinal(fmt::format("g{}", i), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  }
  const kevo::Space& space() const { return sp; }
  bool deterministic() const { return true; }
  ThreadSafety thread_safety() const { return ts; }
  std::vector<Evaluation> evaluate(std::span<const Genome> gs) const {
    const int n = ++*now;
    int p = peak->load();
    while (n > p && !peak->compare_exchange_weak(p, n)) {
    }
    if (ts == ThreadSafety::constant && !waited->exchange(true)) {
      // The first call waits (up to 2 s) for another to overlap it: on a loaded 2-core machine two
      // 300 µs evaluations can miss each other even when the engine runs them concurrently. A
      // serial engine still shows a peak of 1, after the wait.
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (peak->load() < 2 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(300 * static_cast<long>(gs.size())));
    --*now;
    std::vector<Evaluation> out(gs.size());
    for (std::size_t i = 0; i < gs.size(); ++i) out[i].fitness = {static_cast<double>(gs[i][0] + gs[i][1])};
    return out;
  }
};

}  // namespace

TEST_CASE("a problem that is not thread-safe is never evaluated concurrently", "[evo][parallel]") {
  for (auto alg : {Algorithm::ga, Algorithm::steady_state}) {
    Concurrency c(ThreadSafety::none);
    auto cfg = evotest::small_config(alg, 1, 150);
    cfg.threads = 4;
    Engine(Problem(c), cfg).run();
    CHECK(c.peak->load() == 1);
  }
}

TEST_CASE("a thread-safe problem is evaluated on several threads at once", "[evo][parallel]") {
  for (auto alg : {Algorithm::ga, Algorithm::steady_state}) {
    Concurrency c(ThreadSafety::constant);
    auto cfg = evotest::small_config(alg, 1, 150);
    cfg.threads = 3;
    cfg.raise_thread_limit = true;  // 3 threads on a 2-core machine
    Engine(Problem(c), cfg).run();
    INFO(to_string(alg));
    CHECK(c.peak->load() > 1);
  }
}

namespace {
// ThreadSafety::basic in pagmo2's sense: copies may run at once, one object never. Each copy has
// its own in-flight counter (the copy constructor gives it a fresh one) and the object counts
// concurrent calls into itself; a shared counter sees whether copies overlap.
struct BasicProbe {
  kevo::Space sp;
  std::shared_ptr<std::atomic<int>> mine = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<int>> worst = std::make_shared<std::atomic<int>>(0);   // shared by copies
  std::shared_ptr<std::atomic<int>> overall = std::make_shared<std::atomic<int>>(0); // shared by copies
  std::shared_ptr<std::atomic<int>> overall_peak = std::make_shared<std::atomic<int>>(0);
  BasicProbe() {
    for (int i = 0; i < 4; ++i) sp.add(Gene::ordinal(fmt::format("g{}", i), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  }
  BasicProbe(const BasicProbe& o)
      : sp(o.sp), worst(o.worst), overall(o.overall), overall_peak(o.overall_peak) {}  // a copy: its own counter
  const kevo::Space& space() const { return sp; }
  bool deterministic() const { return true; }
  ThreadSafety thread_safety() const { return ThreadSafety::basic; }
  static void raise(std::atomic<int>& peak, int v) {
    int p = peak.load();
    while (v > p && !peak.compare_exchange_weak(p, v)) {
    }
  }
  std::vector<Evaluation> evaluate(std::span<const Genome> gs) const {
    raise(*worst, ++*mine);
    raise(*overall_peak, ++*overall);
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
    while (overall_peak->load() < 2 && std::chrono::steady_clock::now() < until)  // give a copy a chance to overlap
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    std::this_thread::sleep_for(std::chrono::microseconds(300 * static_cast<long>(gs.size())));
    --*overall;
    --*mine;
    std::vector<Evaluation> out(gs.size());
    for (std::size_t i = 0; i < gs.size(); ++i) out[i].fitness = {static_cast<double>(gs[i][0] + gs[i][1])};
    return out;
  }
};

struct ByValueSpace {
  kevo::Space sp;
  kevo::Space space() const { return sp; }  // a temporary: the engine would keep a dangling reference
  std::vector<Evaluation> evaluate(std::span<const Genome> gs) const { return std::vector<Evaluation>(gs.size()); }
};
struct ByReferenceSpace {
  kevo::Space sp;
  const kevo::Space& space() const { return sp; }
  std::vector<Evaluation> evaluate(std::span<const Genome> gs) const { return std::vector<Evaluation>(gs.size()); }
};
}  // namespace

TEST_CASE("a basic problem: copies run at once, one object never", "[evo][parallel]") {
  for (auto alg : {Algorithm::ga, Algorithm::steady_state}) {
    INFO(to_string(alg));
    BasicProbe p;
    auto cfg = evotest::small_config(alg, 1, 150);
    cfg.threads = 3;
    cfg.raise_thread_limit = true;  // 3 threads on a 2-core machine
    Engine(Problem(p), cfg).run();
    CHECK(p.worst->load() == 1);         // no object evaluated two batches at once
    CHECK(p.overall_peak->load() > 1);   // but copies did run concurrently
  }
}

TEST_CASE("a throwing observer ends run() with its exception, in every mode, never a hang", "[evo][robustness]") {
  for (auto alg : {Algorithm::ga, Algorithm::steady_state}) {
    INFO(to_string(alg));
    Concurrency c(ThreadSafety::constant);
    auto cfg = evotest::small_config(alg, 1, 400);
    cfg.threads = 3;
    cfg.raise_thread_limit = true;
    Engine e(Problem(c), cfg);
    int seen = 0;
    Observer o;
    o.on_evaluation = [&](const Individual&) {
      if (++seen == 25) throw std::runtime_error("observer failed (disk full)");
    };
    e.add_observer(std::move(o));
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(e.run(), Catch::Contains("disk full"));
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60));
    CHECK(c.now->load() == 0);  // every evaluation in flight finished before run() unwound
  }
}

TEST_CASE("a problem whose space() returns by value is rejected at compile time", "[evo][concepts]") {
  STATIC_REQUIRE_FALSE(kevo::evo::ProblemLike<ByValueSpace>);
  STATIC_REQUIRE(kevo::evo::ProblemLike<ByReferenceSpace>);
}

TEST_CASE("an asynchronous operator is polled without blocking and its late proposals are used", "[evo][operators]") {
  struct Slow {  // answers every third poll, like an LLM whose request is still in flight
    std::shared_ptr<int> polls = std::make_shared<int>(0);
    std::string name() const { return "slow"; }
    std::size_t arity() const { return 1; }
    bool asynchronous() const { return true; }
    std::vector<Genome> propose(const OperatorContext& ctx) {
      if (++*polls % 3 != 0) return {};
      Genome g = ctx.parents[0].genome;
      reset_genome(ctx.problem.space(), g, 0.5, ctx.rng);
      return {g};
    }
  };
  for (auto alg : {Algorithm::ga, Algorithm::steady_state}) {
    Slow slow;
    auto cfg = evotest::small_config(alg, 3, 600);
    Engine e(Problem(evotest::Rastrigin(4)), cfg);
    e.add_operator(slow, 0.05);
    const auto r = e.run();
    INFO(to_string(alg));
    CHECK(r.evaluations == 600);
    CHECK(*slow.polls >= 20);  // polled every batch, not only when the bandit picks it
    REQUIRE(r.operators.size() == 4);
    CHECK(r.operators[3].evaluated > 3);
  }
}

TEST_CASE("a search with no operators is refused", "[evo][config]") {
  auto cfg = evotest::small_config(Algorithm::ga, 3, 100);
  cfg.builtin_operators = false;
  Engine e(Problem(evotest::Rastrigin(4)), cfg);
  CHECK_THROWS_WITH(e.run(), Catch::Contains("needs operators"));
}

// Config::late_seeds: nothing of them before late_seeds_at evaluations (the history up to there is
// the run without them), each evaluated once in the first batch after it, labelled "late seed",
// and one the run already knows is skipped, not evaluated again.
TEST_CASE("late seeds are evaluated once, in the first batch after late_seeds_at evaluations", "[evo][seeds]") {
  for (auto alg : {Algorithm::ga, Algorithm::random, Algorithm::steady_state}) {
    INFO(to_string(alg));
    const auto history = [&](const Config& cfg) {
      std::vector<Individual> h;
      Engine e(Problem(evotest::Rastrigin(6)), cfg);
      Observer o;
      o.on_evaluation = [&](const Individual& i) { h.push_back(i); };
      e.add_observer(o);
      e.run();
      return h;
    };
    auto cfg = evotest::small_config(alg, 11, 600);
    cfg.threads = 1;
    const auto plain = history(cfg);
    REQUIRE(plain.size() == 600);
    const Genome a(6, 60), b{60, 40, 60, 40, 60, 40};
    cfg.late_seeds = {a, b, plain[5].genome};  // the third was evaluated long before
    cfg.late_seeds_at = 300;
    const auto late = history(cfg);
    REQUIRE(late.size() == 600);
    std::vector<std::size_t> at;
    for (std::size_t i = 0; i < late.size(); ++i)
      if (late[i].op == "late seed") at.push_back(i);
    REQUIRE(at.size() == 2);
    // (steady state: in the order they complete)
    CHECK(((late[at[0]].genome == a && late[at[1]].genome == b) ||
           (alg == Algorithm::steady_state && late[at[0]].genome == b && late[at[1]].genome == a)));
    CHECK(at[0] >= 300);
    CHECK(at[1] < 300 + 2 * cfg.population);
    if (alg != Algorithm::steady_state)  // (its order of completion is not deterministic)
      for (std::size_t i = 0; i < 300; ++i) REQUIRE(late[i].genome == plain[i].genome);
    CHECK(std::count_if(late.begin(), late.end(), [&](const Individual& x) { return x.genome == plain[5].genome; }) == 1);
    // the GA restarts beside them: its population cut to the best, refilled with random genomes
    const auto restarted = std::count_if(late.begin(), late.end(), [](const Individual& x) { return x.op == "restart"; });
    CHECK(restarted == (alg == Algorithm::ga ? static_cast<long>(cfg.population) - 1 : 0));
  }
}
