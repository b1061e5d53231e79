// examples/extend/operator.cpp: a variation operator of the user's own, drawn by kevo's bandit beside
// the built-in mutate / reset / crossover and credited with what its children achieve. Operators see
// genomes and the space's typed genes only, never kernels.
//   operator   searches matmul 1024^3 bf16 on the simulated trn2 with the operator added and prints
//              each operator's share of proposals and of new bests.
#include <cstdio>

#include "kevo/evo.hpp"
#include "kevo/ir.hpp"
#include "kevo/runner.hpp"
#include "kevo/search.hpp"
#include "kevo/target.hpp"

namespace {

// Elite graft: the parent takes one gene group (Gene::group: e.g. the tiles of one loop nest) whole
// from one of the run's four best individuals, then one mutation step.
struct EliteGraft {
  std::string name() const { return "elite_graft"; }
  std::size_t arity() const { return 1; }
  std::vector<kevo::Genome> propose(const kevo::evo::OperatorContext& ctx) const {
    if (ctx.elites.empty()) return {};
    const kevo::Space& sp = ctx.problem.space();
    const auto groups = sp.groups();
    const auto& donor = ctx.elites[ctx.rng.below(std::min<std::size_t>(ctx.elites.size(), 4))].genome;
    kevo::Genome child = ctx.parents[0].genome;
    const std::string& group = groups[ctx.rng.below(groups.size())];
    for (std::size_t i = 0; i < sp.size(); ++i) {
      const auto& g = sp.gene(i);
      if ((g.group.empty() ? g.name : g.group) != group) continue;
      const auto src = sp.slots(donor, i);
      auto dst = sp.slots(child, i);
      std::copy(src.begin(), src.end(), dst.begin());
    }
    // Grafting alone mostly rebuilds genomes the run has seen (the engine drops duplicates):
    // one mutation step (kevo's helper for user operators) makes the child new.
    kevo::evo::mutate_genome(sp, child, 0.0, ctx.rng);
    return {child};
  }
};

}  // namespace

int main() {
  auto kernel = kevo::ir::workload("matmul:M=1024,N=1024,K=1024,dtype=bf16");
  auto target = kevo::target::load_target("trn2");
  if (!kernel || !target) {
    std::fprintf(stderr, "operator: %s\n", !kernel ? kernel.error().c_str() : target.error().str().c_str());
    return 2;
  }
  const kevo::search::KernelProblem problem(*kernel, *target, kevo::runner::SimRunner{});
  kevo::evo::Config cfg;
  cfg.seed = 11;
  cfg.threads = 2;
  cfg.budget.max_evaluations = 600;
  kevo::evo::Engine engine(problem, cfg);
  engine.add_operator(EliteGraft{}, 1.0);
  const auto r = engine.run();
  if (!r.best) {
    std::puts("operator: no valid schedule");
    return 1;
  }
  std::printf("best %.1f us (%.1f%% of peak) after %llu evaluations\n", r.best->eval.fitness[0] / 1e3,
              100 * r.best->eval.metric("fraction_of_peak"), static_cast<unsigned long long>(r.evaluations));
  for (const auto& o : r.operators)
    std::printf("operator %-12s proposals %5llu  evaluated %5llu  improvements %4llu  new bests %3llu  weight %.2f\n",
                o.name.c_str(), static_cast<unsigned long long>(o.proposals), static_cast<unsigned long long>(o.evaluated),
                static_cast<unsigned long long>(o.improvements), static_cast<unsigned long long>(o.new_bests), o.weight);
  return 0;
}
