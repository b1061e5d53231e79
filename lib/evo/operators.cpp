#include "kevo/evo/operators.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kevo::evo {
namespace {

// Genes that can change at all (a one-value gene or a one-item permutation cannot).
bool mutable_gene(const Gene& g) noexcept { return g.choices() >= 2; }

// A standard normal draw (Box-Muller on two of the counter-based stream's uniforms).
double normal(Rng& rng) {
  const double u = 1.0 - rng.uniform();  // (0, 1]
  const double v = rng.uniform();
  return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
}

// Reflects a continuous position into [0, steps] (a step past an end comes back inside).
std::int64_t reflect(std::int64_t x, std::int64_t steps) {
  const std::int64_t period = 2 * steps;
  x %= period;
  if (x < 0) x += period;
  return x <= steps ? x : period - x;
}

// Indices of the genes to change: each with probability rate (0: 1/n), at least one.
void pick_genes(const Space& space, double rate, Rng& rng, std::vector<std::size_t>& out) {
  out.clear();
  const std::size_t n = space.size();
  std::size_t movable = 0;
  for (std::size_t i = 0; i < n; ++i) movable += mutable_gene(space.gene(i)) ? 1 : 0;
  if (movable == 0) return;
  const double p = rate > 0 ? rate : 1.0 / static_cast<double>(movable);
  for (std::size_t i = 0; i < n; ++i)
    if (mutable_gene(space.gene(i)) && rng.chance(p)) out.push_back(i);
  if (out.empty()) {
    std::size_t k = rng.below(movable);
    for (std::size_t i = 0; i < n; ++i)
      if (mutable_gene(space.gene(i)) && k-- == 0) {
        out.push_back(i);
        break;
      }
  }
}

void step_gene(const Space& space, std::size_t i, Genome& g, Rng& rng) {
  const Gene& gene = space.gene(i);
  auto s = space.slots(g, i);
  const auto n = static_cast<std::int64_t>(gene.choices());
  switch (gene.kind) {
    case GeneKind::continuous: {
      // A Gaussian step whose scale is drawn log-uniformly between 0.001 and 0.1 of the interval
      // (of its logarithm when log-scaled) -- coarse moves and fine tuning alike, without a
      // per-individual step size to adapt -- reflected at the ends; it always moves.
      constexpr std::int64_t steps = Gene::kContinuousSteps;
      const double sigma = 0.1 * std::pow(10.0, -2.0 * rng.uniform());
      std::int64_t d = std::llround(sigma * static_cast<double>(steps) * normal(rng));
      if (d == 0) d = rng.chance(0.5) ? 1 : -1;
      std::int64_t v = reflect(s[0] + d, steps);
      if (v == s[0]) v = s[0] == 0 ? 1 : s[0] - 1;
      s[0] = static_cast<std::int32_t>(v);
      break;
    }
    case GeneKind::ordinal: {
      const std::int64_t d = rng.chance(0.75) ? 1 : 2;
      std::int64_t v = s[0] + (rng.chance(0.5) ? d : -d);
      // Reflect at the ends so the step always moves and stays in the domain.
      if (v < 0) v = -v;
      if (v >= n) v = 2 * (n - 1) - v;
      v = std::clamp<std::int64_t>(v, 0, n - 1);
      if (v == s[0]) v = s[0] == 0 ? 1 : s[0] - 1;
      s[0] = static_cast<std::int32_t>(v);
      break;
    }
    case GeneKind::permutation: {
      const auto a = rng.below(s.size());
      auto b = rng.below(s.size() - 1);
      if (b >= a) ++b;
      if (rng.chance(0.5)) {
        std::swap(s[a], s[b]);
      } else if (a < b) {  // move item a to position b
        std::rotate(s.begin() + static_cast<std::ptrdiff_t>(a), s.begin() + static_cast<std::ptrdiff_t>(a) + 1,
                    s.begin() + static_cast<std::ptrdiff_t>(b) + 1);
      } else {
        std::rotate(s.begin() + static_cast<std::ptrdiff_t>(b), s.begin() + static_cast<std::ptrdiff_t>(a),
                    s.begin() + static_cast<std::ptrdiff_t>(a) + 1);
      }
      break;
    }
    case GeneKind::categorical:
    case GeneKind::boolean: {
      auto v = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(n - 1)));
      if (v >= s[0]) ++v;
      s[0] = v;
      break;
    }
  }
}

void redraw_gene(const Space& space, std::size_t i, Genome& g, Rng& rng) {
  const Gene& gene = space.gene(i);
  auto s = space.slots(g, i);
  if (gene.kind == GeneKind::permutation) {
    const std::vector<std::int32_t> before(s.begin(), s.end());
    for (int tries = 0; tries < 8; ++tries) {
      for (std::size_t k = s.size(); k > 1; --k) std::swap(s[k - 1], s[rng.below(k)]);
      if (!std::equal(s.begin(), s.end(), before.begin())) return;
    }
    step_gene(space, i, g, rng);
    return;
  }
  auto v = static_cast<std::int32_t>(rng.below(gene.choices() - 1));
  if (v >= s[0]) ++v;
  s[0] = v;
}

// Blend crossover (BLX-0.25) of one continuous gene: uniform in the parents' interval widened by
// a quarter of its length on each side, clamped to the domain.
std::int32_t blend(std::int32_t a, std::int32_t b, Rng& rng) {
  const double lo = std::min(a, b), hi = std::max(a, b), w = hi - lo;
  const double x = lo - 0.25 * w + rng.uniform() * 1.5 * w;
  return static_cast<std::int32_t>(std::clamp<double>(std::round(x), 0.0, Gene::kContinuousSteps));
}

// Order crossover (OX1) of one permutation: a slice [i, j) from a, the other items in b's order.
void order_cross(std::span<const std::int32_t> a, std::span<const std::int32_t> b, std::span<std::int32_t> child, Rng& rng) {
  const std::size_t n = a.size();
  if (n < 2) return;
  std::size_t i = rng.below(n), j = rng.below(n);
  if (i > j) std::swap(i, j);
  ++j;
  std::vector<char> taken(n, 0);
  for (std::size_t k = i; k < j; ++k) {
    child[k] = a[k];
    taken[static_cast<std::size_t>(a[k])] = 1;
  }
  std::size_t out = j % n;
  for (std::size_t k = 0; k < n; ++k) {
    const auto v = b[(j + k) % n];
    if (taken[static_cast<std::size_t>(v)]) continue;
    child[out] = v;
    out = (out + 1) % n;
  }
}

thread_local std::vector<std::size_t> t_genes;

}  // namespace

void mutate_genome(const Space& space, Genome& g, double rate, Rng& rng) {
  pick_genes(space, rate, rng, t_genes);
  for (auto i : t_genes) step_gene(space, i, g, rng);
}

void reset_genome(const Space& space, Genome& g, double rate, Rng& rng) {
  pick_genes(space, rate, rng, t_genes);
  for (auto i : t_genes) redraw_gene(space, i, g, rng);
}

std::vector<Genome> Mutate::propose(const OperatorContext& ctx) const {
  if (ctx.parents.empty()) return {};
  std::vector<Genome> out(1, ctx.parents[0].genome);
  mutate_genome(ctx.problem.space(), out[0], rate, ctx.rng);
  return out;
}

std::vector<Genome> Reset::propose(const OperatorContext& ctx) const {
  if (ctx.parents.empty()) return {};
  std::vector<Genome> out(1, ctx.parents[0].genome);
  reset_genome(ctx.problem.space(), out[0], rate, ctx.rng);
  return out;
}

namespace {
// The one child of two parents, built by `cross(space, a, b, child)` on a copy of the first; a
// child equal to a parent is mutated once when `mutate_copies`. Shared by the crossovers.
template <typename Cross>
std::vector<Genome> crossover(const OperatorContext& ctx, bool mutate_copies, double mutation_rate, Cross&& cross) {
  if (ctx.parents.size() < 2) return {};
  const Space& space = ctx.problem.space();
  const Genome& a = ctx.parents[0].genome;
  const Genome& b = ctx.parents[1].genome;
  std::vector<Genome> out(1, a);
  Genome& child = out[0];
  if (a.size() != space.width() || b.size() != space.width()) return out;
  cross(space, a, b, child);
  if (mutate_copies && (child == a || child == b)) mutate_genome(space, child, mutation_rate, ctx.rng);
  return out;
}
}  // namespace

std::vector<Genome> GroupCrossover::propose(const OperatorContext& ctx) const {
  return crossover(ctx, mutate_copies, mutation_rate, [&](const Space& space, const Genome& a, const Genome& b, Genome& child) {
    // One coin per named group (in first-appearance order), one per ungrouped gene.
    const auto groups = space.groups();
    std::vector<char> group_from_b(groups.size());
    for (auto& c : group_from_b) c = ctx.rng.chance(0.5) ? 1 : 0;
    for (std::size_t i = 0; i < space.size(); ++i) {
      const Gene& gene = space.gene(i);
      bool from_b;
      if (gene.group.empty()) {
        from_b = ctx.rng.chance(0.5);
      } else {
        const auto gi = static_cast<std::size_t>(std::find(groups.begin(), groups.end(), gene.group) - groups.begin());
        from_b = group_from_b[gi] != 0;
      }
      if (gene.kind == GeneKind::continuous) {
        space.slots(child, i)[0] = blend(space.at(a, i), space.at(b, i), ctx.rng);
      } else if (from_b) {
        const auto src = space.slots(b, i);
        auto dst = space.slots(child, i);
        std::copy(src.begin(), src.end(), dst.begin());
      }
    }
  });
}

std::vector<Genome> OrderCrossover::propose(const OperatorContext& ctx) const {
  return crossover(ctx, mutate_copies, mutation_rate, [&](const Space& space, const Genome& a, const Genome& b, Genome& child) {
    for (std::size_t i = 0; i < space.size(); ++i) {
      const Gene& gene = space.gene(i);
      if (gene.kind == GeneKind::permutation)
        order_cross(space.slots(a, i), space.slots(b, i), space.slots(child, i), ctx.rng);
      else if (gene.kind == GeneKind::continuous)
        space.slots(child, i)[0] = blend(space.at(a, i), space.at(b, i), ctx.rng);
      else if (ctx.rng.chance(0.5))
        space.slots(child, i)[0] = space.at(b, i);
    }
  });
}

}  // namespace kevo::evo
