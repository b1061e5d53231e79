// examples/extend/problem.cpp: a problem of the user's own, outside kernels, over continuous genes.
// The engine knows genomes and fitness only, so any experiment with typed genes can use its
// strategies, journal, resume and parallel evaluation. Here: fitting a damped oscillator
// x(t) = A exp(-t / tau) cos(omega t + phi) to noiseless samples of a hidden one, with the decay
// time searched on a log scale (it spans orders of magnitude), the phase linearly, and the
// order of three preprocessing passes as a permutation (only one order is lossless).
//   problem   prints the recovered parameters and the fit's error; exits 1 if the fit is poor.
#include <cmath>
#include <cstdio>
#include <vector>

#include "kevo/evo.hpp"

namespace {

constexpr double kA = 1.7, kTau = 0.035, kOmega = 40.0, kPhi = 0.6;

struct OscillatorFit {
  kevo::Space sp;
  std::vector<double> t, y;
  OscillatorFit() {
    sp.add(kevo::Gene::continuous("amplitude", 0.1, 10.0, /*log_scale=*/true));
    sp.add(kevo::Gene::continuous("tau", 1e-4, 10.0, /*log_scale=*/true));
    sp.add(kevo::Gene::continuous("omega", 1.0, 100.0));
    sp.add(kevo::Gene::continuous("phi", -3.14159, 3.14159));
    sp.add(kevo::Gene::permutation("passes", {"detrend", "window", "normalise"}));
    for (int i = 0; i < 200; ++i) {
      t.push_back(i * 5e-4);
      y.push_back(kA * std::exp(-t.back() / kTau) * std::cos(kOmega * t.back() + kPhi));
    }
  }
  const kevo::Space& space() const { return sp; }
  bool deterministic() const { return true; }
  kevo::evo::ThreadSafety thread_safety() const { return kevo::evo::ThreadSafety::constant; }
  std::vector<kevo::evo::Evaluation> evaluate(std::span<const kevo::Genome> gs) const {
    std::vector<kevo::evo::Evaluation> out(gs.size());
    for (std::size_t k = 0; k < gs.size(); ++k) {
      const auto& g = gs[k];
      const double a = sp.real(g, 0), tau = sp.real(g, 1), w = sp.real(g, 2), phi = sp.real(g, 3);
      double err = 0;
      for (std::size_t i = 0; i < t.size(); ++i) {
        const double d = a * std::exp(-t[i] / tau) * std::cos(w * t[i] + phi) - y[i];
        err += d * d;
      }
      // The passes lose information unless detrending comes before windowing: a penalty per
      // pair in the wrong order (a stand-in for a pipeline whose order matters).
      const auto order = sp.slots(g, 4);
      double penalty = 0;
      for (std::size_t i = 0; i < order.size(); ++i)
        for (std::size_t j = i + 1; j < order.size(); ++j) penalty += order[i] > order[j] ? 0.5 : 0.0;
      out[k].fitness = {std::sqrt(err / static_cast<double>(t.size())) + penalty};
    }
    return out;
  }
};

}  // namespace

int main() {
  kevo::evo::Config cfg;
  cfg.seed = 11;
  cfg.budget.max_evaluations = 20000;
  cfg.threads = 2;
  kevo::evo::Engine engine(kevo::evo::Problem(OscillatorFit{}), cfg);
  engine.add_operator(kevo::evo::Operator(kevo::evo::OrderCrossover{}), 0.5);
  const auto r = engine.run();
  if (!r.best) return 1;
  const OscillatorFit p;
  const auto& g = r.best->genome;
  std::printf("problem oscillator_fit: %llu evaluations, rms error %.3g, amplitude %.4g (true %.4g), tau %.4g (%.4g), "
              "omega %.4g (%.4g), phi %.4g (%.4g), passes %s, history %016llx\n",
              static_cast<unsigned long long>(r.evaluations), r.best->eval.fitness[0], p.sp.real(g, 0), kA, p.sp.real(g, 1),
              kTau, p.sp.real(g, 2), kOmega, p.sp.real(g, 3), kPhi, p.sp.describe(g).substr(p.sp.describe(g).rfind("passes=") + 7).c_str(),
              static_cast<unsigned long long>(r.history_hash));
  return r.best->eval.fitness[0] < 0.05 ? 0 : 1;
}
