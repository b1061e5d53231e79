// Test problems for the evolution engine: plain mathematical functions over typed genes.
#pragma once
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

#include "kevo/evo.hpp"

namespace evotest {

inline bool asan() { return std::getenv("KEVO_ASAN") != nullptr; }

// Discretised Rastrigin (or sphere) over `dims` ordinal genes with values -50..50 (x = v / 10).
struct Rastrigin {
  kevo::Space sp;
  bool sphere = false;
  int sleep_us = 0;
  explicit Rastrigin(int dims = 6, bool sphere_ = false, int sleep = 0) : sphere(sphere_), sleep_us(sleep) {
    std::vector<std::int64_t> vals;
    for (int v = -50; v <= 50; ++v) vals.push_back(v);
    for (int d = 0; d < dims; ++d) sp.add(kevo::Gene::ordinal(fmt::format("x{}", d), vals, fmt::format("g{}", d / 2)));
  }
  const kevo::Space& space() const { return sp; }
  bool deterministic() const { return true; }
  kevo::evo::ThreadSafety thread_safety() const { return kevo::evo::ThreadSafety::constant; }
  double value(const kevo::Genome& g) const {
    double f = sphere ? 0.0 : 10.0 * static_cast<double>(sp.size());
    for (std::size_t i = 0; i < sp.size(); ++i) {
      const double x = static_cast<double>(sp.gene(i).values[static_cast<std::size_t>(g[i])]) / 10.0;
      f += sphere ? x * x : x * x - 10.0 * std::cos(2 * M_PI * x);
    }
    return f;
  }
  std::vector<kevo::evo::Evaluation> evaluate(std::span<const kevo::Genome> gs) const {
    std::vector<kevo::evo::Evaluation> out(gs.size());
    for (std::size_t i = 0; i < gs.size(); ++i) {
      if (sleep_us) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      out[i].fitness = {value(gs[i])};
      const double x0 = static_cast<double>(sp.gene(0).values[static_cast<std::size_t>(gs[i][0])]);
      const double x1 = static_cast<double>(sp.gene(1).values[static_cast<std::size_t>(gs[i][1])]);
      out[i].descriptors = {x0, x1};
      // A slice of the space is "invalid" so statuses flow through the engine.
      if (gs[i][0] % 10 == 3) {
        out[i].status = kevo::Status::invalid;
        out[i].reason = "stripe: x0 = -4.7 + k";
        out[i].fitness.clear();
      }
    }
    return out;
  }
};

// A small travelling-salesman problem: one permutation gene over n cities on a circle-ish layout.
struct Tsp {
  kevo::Space sp;
  std::vector<std::pair<double, double>> xy;
  explicit Tsp(int n = 12, std::uint64_t seed = 7) {
    std::vector<std::string> items;
    kevo::Rng r(seed);
    for (int i = 0; i < n; ++i) {
      items.push_back(fmt::format("c{}", i));
      xy.emplace_back(r.uniform() * 100, r.uniform() * 100);
    }
    sp.add(kevo::Gene::permutation("tour", items));
  }
  const kevo::Space& space() const { return sp; }
  bool deterministic() const { return true; }
  kevo::evo::ThreadSafety thread_safety() const { return kevo::evo::ThreadSafety::constant; }
  std::vector<kevo::evo::Evaluation> evaluate(std::span<const kevo::Genome> gs) const {
    std::vector<kevo::evo::Evaluation> out(gs.size());
    for (std::size_t k = 0; k < gs.size(); ++k) {
      const auto& g = gs[k];
      double len = 0;
      for (std::size_t i = 0; i < g.size(); ++i) {
        const auto& a = xy[static_cast<std::size_t>(g[i])];
        const auto& b = xy[static_cast<std::size_t>(g[(i + 1) % g.size()])];
        len += std::hypot(a.first - b.first, a.second - b.second);
      }
      out[k].fitness = {len};
    }
    return out;
  }
};

// Every gene kind, for operator domain tests.
inline kevo::Space mixed_space() {
  kevo::Space s;
  s.add(kevo::Gene::ordinal("tile.m", {1, 2, 4, 8, 16, 32, 64, 128}, "tile"));
  s.add(kevo::Gene::ordinal("tile.n", {1, 2, 4, 8}, "tile"));
  s.add(kevo::Gene::ordinal("one", {7}));
  s.add(kevo::Gene::permutation("order", {"i", "j", "k", "l"}, "nest"));
  s.add(kevo::Gene::categorical("engine", {"pe", "act", "dve", "pool"}, "nest"));
  s.add(kevo::Gene::boolean("double_buffer"));
  s.add(kevo::Gene::ordinal("bufs", {1, 2, 3}));
  return s;
}

struct SpaceOnly {
  kevo::Space sp;
  const kevo::Space& space() const { return sp; }
  bool deterministic() const { return true; }
  std::vector<kevo::evo::Evaluation> evaluate(std::span<const kevo::Genome> gs) const {
    std::vector<kevo::evo::Evaluation> out(gs.size());
    for (std::size_t i = 0; i < gs.size(); ++i) out[i].fitness = {static_cast<double>(gs[i][0])};
    return out;
  }
};

inline kevo::evo::Config small_config(kevo::evo::Algorithm a, std::uint64_t seed, std::uint64_t evals) {
  kevo::evo::Config c;
  c.algorithm = a;
  c.seed = seed;
  c.population = 24;
  c.elites = 2;
  c.budget.max_evaluations = evals;
  c.islands.count = 3;
  c.islands.interval = 2;
  return c;
}

}  // namespace evotest
