#include <catch2/catch.hpp>

#include <map>

#include "kevo/evo/strategies.hpp"
#include "problems.hpp"

using namespace kevo;
using namespace kevo::evo;

// History hashes of runs recorded with the engine as it was before the algorithms became strategy
// plug-ins (commit 69f62e2): the plug-ins must walk exactly the same trajectories. The ga and
// islands hashes were re-pinned when clearing became the GA's survivor selection (issue 17,
// Genetic::niche_radius = 3); map_elites (parents from the archive), random and exhaustive kept theirs.
TEST_CASE("the built-in strategies reproduce the trajectories recorded before they were plug-ins", "[evo][strategy]") {
  const std::map<Algorithm, std::uint64_t> want = {{Algorithm::ga, 0x3df798c865e4bc12ULL},
                                                   {Algorithm::islands, 0x822ef9eac3932b94ULL},
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
  CHECK(Engine(Problem(evotest::Tsp(12)), cfg).run().history_hash == 0x741187f6cf4bbcd8ULL);
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


TEST_CASE("clearing admits far candidates before near better ones, then fills best first", "[evo][strategy][niche]") {
  kevo::Space sp;
  for (int d = 0; d < 6; ++d) sp.add(kevo::Gene::ordinal(fmt::format("x{}", d), {0, 1, 2, 3}));
  sp.add(kevo::Gene::permutation("order", {"i", "j", "k"}));
  auto ind = [](std::vector<std::int32_t> g, double f, std::uint64_t id) {
    Individual i;
    i.genome = Genome(g.begin(), g.end());
    i.eval.fitness = {f};
    i.id = id;
    return i;
  };
  const auto best = ind({0, 0, 0, 0, 0, 0, 0, 1, 2}, 1.0, 0);
  const auto near = ind({1, 1, 0, 0, 0, 0, 0, 1, 2}, 2.0, 1);  // 2 genes from best
  const auto far = ind({1, 1, 1, 0, 0, 0, 0, 1, 2}, 3.0, 2);   // 3 genes from best
  const auto moved = ind({0, 0, 0, 0, 0, 0, 2, 1, 0}, 4.0, 3); // the permutation differs: 1 gene
  CHECK(gene_distance(sp, best.genome, near.genome) == 2);
  CHECK(gene_distance(sp, best.genome, moved.genome) == 1);
  CHECK(gene_distance(sp, far.genome, far.genome) == 0);
  // Capacity 2: best, then far (near is cleared by best although better than far).
  auto two = clear_niches(sp, {moved, near, far, best}, 3, 2);
  REQUIRE(two.size() == 2);
  CHECK(two[0].id == 0);
  CHECK(two[1].id == 2);
  // Room left: the cleared ones fill it best first, and the result is sorted best first.
  auto all = clear_niches(sp, {moved, far, near, best}, 3, 4);
  REQUIRE(all.size() == 4);
  CHECK(all[0].id == 0);
  CHECK(all[1].id == 1);
  CHECK(all[2].id == 2);
  CHECK(all[3].id == 3);
  // Radius 1 clears nothing among distinct genomes: plain truncation to the best.
  auto trunc = clear_niches(sp, {moved, far, near, best}, 1, 3);
  CHECK(trunc.back().id == 2);
  // The radius shrinks with the genome: min(r, ceil(movable genes / 4)).
  CHECK(niche_radius_for(sp, 3) == 2);
  CHECK(niche_radius_for(sp, 1) == 1);
}

namespace {
// The least number of genes in which any two of the GA's final population differ from its best.
std::size_t pairs_within(const Space& sp, const std::vector<Individual>& pop, std::size_t radius) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < pop.size(); ++i)
    for (std::size_t j = i + 1; j < pop.size(); ++j) n += gene_distance(sp, pop[i].genome, pop[j].genome) < radius ? 1 : 0;
  return n;
}
}  // namespace

TEST_CASE("the GA's clearing keeps its population spread over niches where the plain GA collapses", "[evo][strategy][niche]") {
  const evotest::Rastrigin problem(12);
  auto run = [&](std::size_t radius) {
    auto cfg = evotest::small_config(Algorithm::ga, 3, 1500);
    Engine e(Problem(problem), cfg);
    Genetic g = *builtin_strategy(cfg).extract<Genetic>();
    CHECK(g.niche_radius == 3);  // on by default
    g.niche_radius = radius;
    e.set_strategy(g);
    e.run();
    std::vector<const Individual*> ptrs;
    e.strategy().population(ptrs);
    std::vector<Individual> pop;
    for (auto* p : ptrs) pop.push_back(*p);
    return pop;
  };
  const auto plain = run(0);
  const auto cleared = run(3);
  REQUIRE(plain.size() == 24);
  REQUIRE(cleared.size() == 24);
  const std::size_t plain_close = pairs_within(problem.space(), plain, 3);
  const std::size_t cleared_close = pairs_within(problem.space(), cleared, 3);
  INFO("pairs closer than 3 genes: plain " << plain_close << ", cleared " << cleared_close);
  // 24 members make 276 pairs. The plain GA holds near-copies of its best lineages (38 pairs when
  // written); clearing keeps niche winners apart (only cleared fill-ins may sit close).
  CHECK(plain_close > 20);
  CHECK(cleared_close * 4 < plain_close);
}

TEST_CASE("on multimodal Rastrigin the GA with clearing ends better than the plain GA, over seeds", "[evo][strategy][niche]") {
  auto best = [](std::uint64_t seed, std::size_t radius) {
    auto cfg = evotest::small_config(Algorithm::ga, seed, 1500);
    Engine e(Problem(evotest::Rastrigin(6)), cfg);
    Genetic g = *builtin_strategy(cfg).extract<Genetic>();
    g.niche_radius = radius;
    e.set_strategy(g);
    return e.run().best->eval.fitness[0];
  };
  double plain = 0, cleared = 0;
  for (std::uint64_t s = 1; s <= 10; ++s) {
    plain += best(s, 0) / 10;
    cleared += best(s, 3) / 10;
  }
  INFO("mean best: plain " << plain << ", cleared " << cleared);  // 4.31 and 2.20 when written
  CHECK(cleared < 0.75 * plain);
}
