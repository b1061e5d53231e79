// A surrogate-assisted strategy (issue 19): a cost model trained online on every evaluation of the
// run screens many candidate genomes and only the most promising are measured -- the approach of
// Ansor / MetaSchedule (a learned cost model choosing what to measure), with a Gaussian-process
// model instead of their gradient-boosted trees:
//   features  one-hot per categorical / boolean value; a thermometer code per ordinal (its squared
//             distance grows with the distance in the domain); for a permutation, the pairwise
//             order of its items;
//   model     a Gaussian process with a squared-exponential kernel over those features (length
//             scale: the median distance between training genomes), fitted on log fitness (raw
//             fitness when any is <= 0), standardised; invalid genomes join the training set with
//             a penalty above the worst valid one, so the model learns to avoid them;
//   screening each batch breeds `pool` x batch candidates from the best genomes seen (tournament,
//             group crossover, 1-3 mutation steps, the problem's repair), drops known ones, and
//             measures those with the lowest lower confidence bound mu - kappa * sigma, plus a
//             share `explore` drawn uniformly from the pool.
//   problem   when the problem has the optional features() hook (evo/problem.hpp; KernelProblem's
//             are figures of the lowered program), the first batch is screened too: `pool` x its
//             size random genomes, the lowest a-priori estimates (features()[0]) measured, a share
//             `explore` drawn uniformly; later, a ridge regression on the standardised features
//             is the GP's prior mean and the features join the genome's in its kernel; a
//             candidate the problem calls invalid (no features) is never measured.
// It knows genomes and fitness only (evo never sees kernels). The model is refitted every batch on
// at most `max_train` genomes (the best half, then the most recent), so a batch costs
// O(max_train^3) once and O(pool * max_train^2) to screen.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kevo/evo/strategy.hpp"

namespace kevo::evo {

struct Surrogate {
  std::size_t pop_size = 32;   // the parents' pool (the best seen)
  std::size_t initial = 16;    // the first batch: seeds, then random genomes
  std::size_t batch = 0;       // candidates measured per batch after the first; 0: max(4, pop_size / 4)
  std::size_t pool = 24;       // candidates screened per candidate measured
  std::size_t max_train = 384; // genomes the model is fitted on
  std::size_t min_train = 12;  // below this many evaluations the pool is measured unscreened (random picks)
  double kappa = 1.0;          // exploration weight of the lower confidence bound
  double explore = 0.125;      // share of each batch drawn uniformly from the screened pool
  double ridge = 0.1;          // problem features: the ridge prior's penalty (per training genome)
  double feature_weight = 1.0; // problem features: their weight in the GP's distance, relative to the genes'

  std::vector<Individual> seen;  // state: every evaluation told, in order
  std::vector<Individual> pop;   // derived state: the best pop_size valid ones, best first
  // Derived, not saved: the problem's features() by genome hash (deterministic, so recomputing
  // them after a resume gives the same values); cleared when it reaches kFeatureCacheLimit.
  std::unordered_map<std::uint64_t, std::vector<double>> feature_cache;
  static constexpr std::size_t kFeatureCacheLimit = 1 << 16;

  [[nodiscard]] std::string name() const { return "surrogate"; }
  [[nodiscard]] bool uses_operators() const { return false; }
  void ask(std::size_t n, AskContext& ctx);
  void tell(std::span<Evaluated> results);
  [[nodiscard]] std::string save() const;
  void load(std::string_view bytes, std::span<const Individual> history);
  [[nodiscard]] const std::vector<Individual>& population() const { return pop; }

 private:
  const std::vector<double>& features_of(const Problem& problem, const Genome& g);
  void screen_initial(std::size_t want, AskContext& ctx);
};

}  // namespace kevo::evo
