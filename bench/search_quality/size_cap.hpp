// The unrolled-size limit the benchmark programs give search::KernelProblem
// (KernelProblemOptions::max_tile_iterations), shared by search_quality and scaling. Private to
// bench/.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

#include "kevo/core/genes.hpp"
#include "kevo/core/rng.hpp"
#include "kevo/ir/kernel.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/search/kernel_problem.hpp"
#include "kevo/target/target.hpp"

namespace kevo::bench {

// At least `floor` tile iterations, and at least `factor` x the fewest the workload allows (its
// tiles all at their largest), so large problems such as 4096x8192x8192 (fewest: 32,768) keep a
// searchable range while an evaluation stays affordable.
// Genomes beyond it are steered inside by KernelProblem::repair, or rejected as too_large before
// lowering, for every algorithm alike.
inline std::int64_t size_cap(const ir::Kernel& k, const target::Target& t, std::int64_t floor, std::int64_t factor = 1) {
  const auto space = schedule::ScheduleSpace::derive(k, t);
  const Space& sp = space.genes();
  Genome g = space.default_genome();
  for (std::size_t i = 0; i < sp.size(); ++i) {
    const Gene& gene = sp.gene(i);
    if (gene.kind == GeneKind::ordinal && gene.name.find(".tile.") != std::string::npos && !gene.values.empty())
      sp.slots(g, i)[0] = static_cast<std::int32_t>(gene.values.size() - 1);
  }
  Rng rng(1, 0);
  if (space.repair(g, rng))
    if (auto fewest = search::tile_iterations(space, g)) return std::max(floor, factor * *fewest);
  return std::max<std::int64_t>(floor, search::KernelProblemOptions{}.max_tile_iterations);
}

}  // namespace kevo::bench
