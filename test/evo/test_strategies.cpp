#include <catch2/catch.hpp>

#include <map>

#include "kevo/evo/strategies.hpp"
#include "problems.hpp"

using namespace kevo;
using namespace kevo::evo;

// History hashes of runs recorded with the engine as it was before the algorithms became strategy
// plug-ins (commit 69f62e2): the plug-ins must walk exactly the same trajectories.
TEST_CASE("the built-in strategies reproduce the trajectories recorded before they were plug-ins", "[evo][strategy]") {
  const std::map<Algorithm, std::uint64_t> want = {{Algorithm::ga, 0x80f23eea95b42653ULL},
                                                   {Algorithm::islands, 0xe8d50af6e2eddcdeULL},
                                                   {Algorithm::map_elites, 0x9218403ad087d929ULL},
                                                   {Algorithm::random, 0x6f4eb9424f82d70bULL}};
  for (const auto& [alg, hash] : want) {
    INFO(to_string(alg));
    auto cfg = evotest::small_config(alg, 77, 1500);
    cfg.archive.bins = {6};
    cfg.seeds = {Genome(6, 50)};
    const auto r = Engine(Problem(evotest::Rastrigin(6)), cfg).run();
    CHECK(r.history_hash == hash);
  }
  auto cfg = evotest::small_config(Algorithm::exhaustive, 0, 3000);
  CHECK(Engine(Problem(evotest::Rastrigin(2, true)), cfg).run().history_hash == 0x0686c9c70d0e5217ULL);
  cfg = evotest::small_config(Algorithm::islands, 3, 800);
  cfg.islands.topology = Topology::random;
  CHECK(Engine(Problem(evotest::Tsp(12)), cfg).run().history_hash == 0xff2314072bda5818ULL);
}

TEST_CASE("a built-in strategy given explicitly is the one Config::algorithm names", "[evo][strategy]") {
  for (auto alg : {Algorithm::ga, Algorithm::islands, Algorithm::map_elites, Algorithm::random}) {
    INFO(to_string(alg));
    auto cfg = evotest::small_config(alg, 5, 600);
    cfg.archive.bins = {6};
    const auto a = Engine(Problem(evotest::Rastrigin(6)), cfg).run();
    auto other = cfg;
    other.algorithm = alg == Algorithm::random ? Algorithm::ga : Algorithm::random;  // overridden below
    Engine e(Problem(evotest::Rastrigin(6)), other);
    e.set_strategy(builtin_strategy(cfg));
    CHECK(e.strategy().name() == to_string(alg));
    const auto b = e.run();
    CHECK(b.history_hash == a.history_hash);
  }
}

namespace {
struct NoTell {
  std::string name() const { return "no_tell"; }
  void ask(std::size_t, AskContext&) {}
};
struct Minimal {
  std::string name() const { return "minimal"; }
  void ask(std::size_t, AskContext&) {}
  void tell(std::span<const Evaluated>) {}
};
// Proposes nothing but its seeds-free first genome repeatedly: the engine's dedup ends the run.
struct FirstOnly {
  std::string name() const { return "first_only"; }
  bool uses_operators() const { return false; }
  void ask(std::size_t, AskContext& ctx) {
    Rng rng = ctx.rng(9);
    ctx.offer(ctx.space().first(), rng, "first");
  }
  void tell(std::span<Evaluated>) {}
};
}  // namespace

TEST_CASE("strategy concepts are checked at compile time", "[evo][strategy][concepts]") {
  STATIC_REQUIRE(StrategyLike<Genetic>);
  STATIC_REQUIRE(StrategyLike<SteadyState>);
  STATIC_REQUIRE(StrategyLike<RandomSearch>);
  STATIC_REQUIRE(StrategyLike<Exhaustive>);
  STATIC_REQUIRE(StrategyLike<Minimal>);
  STATIC_REQUIRE_FALSE(StrategyLike<NoTell>);
  const Strategy s{Minimal{}};
  CHECK_FALSE(s.stateful());
  CHECK_FALSE(s.has_population());
  CHECK(Strategy(Genetic{}).stateful());
  CHECK(Strategy(SteadyState{}).asynchronous());
}

TEST_CASE("a strategy that only proposes known genomes ends the run as space_exhausted", "[evo][strategy]") {
  Engine e(Problem(evotest::Rastrigin(4)), evotest::small_config(Algorithm::ga, 1, 100));
  e.set_strategy(FirstOnly{});
  const auto r = e.run();
  CHECK(r.evaluations == 1);
  CHECK(r.duplicates == 1);
  CHECK(r.stop_reason == StopReason::space_exhausted);
  REQUIRE(r.elites.size() == 1);  // the engine's own leaders
}

TEST_CASE("a strategy that breeds with every operator muted ends as operators_exhausted", "[evo][strategy]") {
  auto cfg = evotest::small_config(Algorithm::ga, 1, 500);
  cfg.builtin_operators = false;
  struct Done {  // an operator that is exhausted from the start (an LLM past its cost cap)
    std::string name() const { return "done"; }
    std::size_t arity() const { return 1; }
    bool exhausted() const { return true; }
    std::vector<Genome> propose(const OperatorContext&) const { return {}; }
  };
  Engine e(Problem(evotest::Rastrigin(4)), cfg);
  e.add_operator(Done{});
  const auto r = e.run();
  CHECK(r.evaluations == 24);  // the first population, then no operator to breed with
  CHECK(r.stop_reason == StopReason::operators_exhausted);
}
