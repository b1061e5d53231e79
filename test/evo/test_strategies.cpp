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
