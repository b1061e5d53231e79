// Continuous genes end to end: the engine's strategies optimise a problem over bounded reals
// (one log-scaled) beside a permutation, deterministically, and resume it exactly.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <unistd.h>

#include "kevo/evo/engine.hpp"
#include "kevo/evo/operators.hpp"
#include "problems.hpp"

using namespace kevo;
using namespace kevo::evo;

namespace {

// A shifted sphere over four reals in [-5, 5] (optimum at 1.25, -0.5, 3, 0.1), a learning rate
// in [1e-5, 1] on a log scale (optimum 3e-3), and the order of five items (optimum: identity,
// one unit per inversion).
struct Mixed {
  Space sp;
  Mixed() {
    for (int d = 0; d < 4; ++d) sp.add(Gene::continuous(fmt::format("x{}", d), -5.0, 5.0, false, d < 2 ? "a" : "b"));
    sp.add(Gene::continuous("lr", 1e-5, 1.0, true));
    sp.add(Gene::permutation("order", {"a", "b", "c", "d", "e"}));
  }
  const Space& space() const { return sp; }
  bool deterministic() const { return true; }
  ThreadSafety thread_safety() const { return ThreadSafety::constant; }
  double value(const Genome& g) const {
    static constexpr double opt[4] = {1.25, -0.5, 3.0, 0.1};
    double f = 0;
    for (std::size_t d = 0; d < 4; ++d) f += std::pow(sp.real(g, d) - opt[d], 2);
    f += std::pow(std::log10(sp.real(g, 4)) - std::log10(3e-3), 2);
    const auto perm = sp.slots(g, 5);
    for (std::size_t i = 0; i < perm.size(); ++i)
      for (std::size_t j = i + 1; j < perm.size(); ++j) f += perm[i] > perm[j] ? 1.0 : 0.0;
    return f;
  }
  std::vector<Evaluation> evaluate(std::span<const Genome> gs) const {
    std::vector<Evaluation> out(gs.size());
    for (std::size_t i = 0; i < gs.size(); ++i) out[i].fitness = {value(gs[i])};
    return out;
  }
};

Config config(Algorithm a, std::uint64_t seed, std::uint64_t evals) {
  Config c;
  c.algorithm = a;
  c.seed = seed;
  c.budget.max_evaluations = evals;
  c.threads = 1;
  return c;
}

}  // namespace

TEST_CASE("the GA and the surrogate optimise continuous genes far better than random search", "[evo][continuous]") {
  double ga = 0, sur = 0, rnd = 0;
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    ga += Engine(Problem(Mixed{}), config(Algorithm::ga, seed, 2000)).run().best->eval.fitness[0];
    sur += Engine(Problem(Mixed{}), config(Algorithm::surrogate, seed, 300)).run().best->eval.fitness[0];
    rnd += Engine(Problem(Mixed{}), config(Algorithm::random, seed, 2000)).run().best->eval.fitness[0];
  }
  INFO("mean best: ga " << ga / 3 << ", surrogate " << sur / 3 << ", random " << rnd / 3);
  CHECK(ga / 3 < 0.05);       // within ~0.1 of the optimum in every real, the order sorted
  CHECK(ga < rnd / 10);       // random search over 10^30 genomes stays far off
  CHECK(sur < rnd);           // the surrogate at 300 evaluations beats random search at 2,000
}

TEST_CASE("a search over continuous genes is deterministic across thread counts and resumes exactly", "[evo][continuous]") {
  auto cfg = config(Algorithm::ga, 7, 600);
  const auto ref = Engine(Problem(Mixed{}), cfg).run();
  for (int t : {2, 4}) {
    cfg.threads = t;
    CHECK(Engine(Problem(Mixed{}), cfg).run().history_hash == ref.history_hash);
  }
  cfg.threads = 1;
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("kevo-evo-continuous-{}", ::getpid());
  std::filesystem::remove_all(dir);
  cfg.checkpoint.dir = dir;
  cfg.checkpoint.sync = false;
  {
    Engine e(Problem(Mixed{}), cfg);
    Observer o;
    o.on_generation = [&e](const GenerationStats& g) {
      if (g.generation == 6) e.request_stop();
    };
    e.add_observer(std::move(o));
    CHECK(e.run().stop_reason == StopReason::requested);
  }
  const auto r = Engine::resume(dir, Problem(Mixed{})).run();
  CHECK(r.evaluations == ref.evaluations);
  CHECK(r.history_hash == ref.history_hash);
  std::filesystem::remove_all(dir);
}

TEST_CASE("order crossover as an extra operator solves a permutation problem", "[evo][continuous]") {
  auto cfg = evotest::small_config(Algorithm::ga, 3, 3000);
  Engine e(Problem(evotest::Tsp(12)), cfg);
  e.add_operator(Operator(OrderCrossover{}), 1.0);
  const auto r = e.run();
  REQUIRE(r.best);
  const auto& ops = r.operators;
  const auto it = std::find_if(ops.begin(), ops.end(), [](const OperatorStats& s) { return s.name == "order_crossover"; });
  REQUIRE(it != ops.end());
  CHECK(it->evaluated > 0);
  CHECK(it->improvements > 0);  // its children beat their parents
}
