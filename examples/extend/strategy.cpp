// examples/extend/strategy.cpp: a user strategy (one_plus_lambda.hpp) plugged into kevo's engine,
// with a checkpoint directory so that a killed run resumes where it stopped.
//   strategy [DIR]   runs (or resumes, when DIR holds a run) a (1+8)-ES on a 12-dimensional
//                    discretised Rastrigin function and prints the best value found.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "kevo/evo.hpp"
#include "one_plus_lambda.hpp"

namespace {

// Rastrigin over 12 ordinal genes with values -50..50 (x = v / 10); minimum 0 at x = 0.
struct Rastrigin {
  kevo::Space sp;
  Rastrigin() {
    std::vector<std::int64_t> vals;
    for (int v = -50; v <= 50; ++v) vals.push_back(v);
    for (int d = 0; d < 12; ++d) sp.add(kevo::Gene::ordinal("x" + std::to_string(d), vals));
  }
  const kevo::Space& space() const { return sp; }
  bool deterministic() const { return true; }
  kevo::evo::ThreadSafety thread_safety() const { return kevo::evo::ThreadSafety::constant; }
  std::vector<kevo::evo::Evaluation> evaluate(std::span<const kevo::Genome> gs) const {
    std::vector<kevo::evo::Evaluation> out(gs.size());
    for (std::size_t k = 0; k < gs.size(); ++k) {
      double f = 10.0 * static_cast<double>(sp.size());
      for (std::size_t i = 0; i < sp.size(); ++i) {
        const double x = static_cast<double>(sp.gene(i).values[static_cast<std::size_t>(gs[k][i])]) / 10.0;
        f += x * x - 10.0 * std::cos(2 * M_PI * x);
      }
      out[k].fitness = {f};
    }
    return out;
  }
};

}  // namespace

int main(int argc, char** argv) {
  namespace evo = kevo::evo;
  try {
    evo::Config cfg;
    cfg.seed = 7;
    cfg.threads = 2;
    cfg.budget.max_evaluations = 4000;
    if (argc > 1) cfg.checkpoint.dir = argv[1];
    const bool resume = argc > 1 && std::filesystem::exists(cfg.checkpoint.dir / "snapshot.kevo");
    evo::Engine engine = resume ? evo::Engine::resume(cfg.checkpoint.dir, Rastrigin{}, cfg) : evo::Engine(Rastrigin{}, cfg);
    engine.set_strategy(extend::OnePlusLambda(8));
    const evo::Result r = engine.run();
    const auto* es = engine.strategy().extract<extend::OnePlusLambda>();
    std::printf("strategy %s: %llu evaluations (%llu replayed), best %.4f, sigma %.3f, history %016llx\n",
                engine.strategy().name().c_str(), static_cast<unsigned long long>(r.evaluations),
                static_cast<unsigned long long>(r.replayed), r.best ? r.best->eval.fitness[0] : -1.0,
                es ? es->sigma() : 0.0, static_cast<unsigned long long>(r.history_hash));
    return r.best ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strategy: %s\n", e.what());
    return 2;
  }
}
