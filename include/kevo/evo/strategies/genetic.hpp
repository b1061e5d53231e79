// The generational built-ins: GA (one population), islands (several, with migration) and
// MAP-Elites (parents drawn from the archive's cells) -- one plug-in with three names.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kevo/evo/engine.hpp"
#include "kevo/evo/strategy.hpp"

namespace kevo::evo {

struct Genetic {
  std::string label = "ga";        // name(): "ga", "islands" or "map_elites"
  std::size_t pop_size = 32;     // per island
  std::size_t elites = 2;          // copied unchanged into the next generation
  std::size_t tournament = 3;      // tournament size of parent selection
  IslandConfig islands{1, Topology::ring, 5, 0.1};  // count 1: a plain GA
  bool archive_parents = false;    // MAP-Elites: parents uniform over the archive's cells (>= 2 filled)
  // Survivor selection with clearing (docs/EVOLUTION.md, "Leaving local optima"). The next
  // population is drawn from the old one and the offspring together, best first, admitting a
  // candidate only when it differs in at least r genes from every member admitted before it; the
  // cleared ones fill what room is left, best first. r = min(niche_radius, ceil(movable genes / 4)),
  // so near-copies of the best cannot crowd out a second lineage. 0: the plain generational
  // scheme (the `elites` best survive, the offspring replace the rest).
  std::size_t niche_radius = 3;
  // A restart at the late seeds (Config::late_seeds_at, when Config::late_seeds is set; 0: none):
  // the generation that crosses it ends with every island cut to its best, and the next ask
  // fills each afresh with random genomes beside the late seeds the engine adds, so that they
  // meet a spread population rather than one converged on its own lineage (docs/EVOLUTION.md,
  // "Late seeds").
  std::uint64_t restart_at = 0;
  // No restart unless a whole population's evaluations are left (Config::budget.max_evaluations;
  // 0: unlimited), so a run never ends on a population cut to its best.
  std::uint64_t restart_budget = 0;

  std::vector<std::vector<Individual>> pops;  // state: one population per island, best first

  [[nodiscard]] std::string name() const { return label; }
  void ask(std::size_t n, AskContext& ctx);
  void tell(std::span<Evaluated> results, const StrategyContext& ctx);
  void absorb(std::span<Evaluated> results);
  [[nodiscard]] std::string save() const;
  void load(std::string_view bytes, std::span<const Individual> history);
  void population(std::vector<const Individual*>& out) const;
  [[nodiscard]] bool uses_archive() const { return archive_parents; }

 private:
  void pick(std::size_t island, std::span<Individual> out, Rng& rng, const Archive* archive) const;
  void migrate(std::uint64_t generation, std::uint64_t seed);
};

}  // namespace kevo::evo
