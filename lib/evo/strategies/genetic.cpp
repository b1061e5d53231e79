// GA, islands and MAP-Elites: generational breeding through the engine's operator bandit.
#include "kevo/evo/strategies/genetic.hpp"

#include <algorithm>
#include <cmath>

#include "../streams.hpp"
#include "kevo/evo/archive.hpp"
#include "kevo/evo/strategies/common.hpp"
#include "state.hpp"

namespace kevo::evo {

using detail::s_breed;
using detail::s_fill;
using detail::s_init;
using detail::s_migrate;

namespace {
// Fresh uniform genomes for island `island` until the batch holds `target` candidates.
void fill_random(AskContext& ctx, std::size_t target, std::size_t island, Rng base, const char* label) {
  std::size_t tries = 0;
  const std::size_t max_tries = 4 * target + 64;
  while (ctx.size() < target && tries < max_tries) {
    Rng rng = base.fork(tries++);
    ctx.offer(ctx.space().random(rng), rng, label, island);
  }
}
}  // namespace

void Genetic::pick(std::size_t island, std::span<Individual> out, Rng& rng, const Archive* archive) const {
  const bool from_archive = archive_parents && archive && archive->size() >= 2;
  for (auto& p : out) {
    if (from_archive)
      p = archive->cells()[rng.below(archive->size())].second;
    else
      p = kevo::evo::tournament(pops[island], tournament, rng);
  }
}

void Genetic::ask(std::size_t n, AskContext& ctx) {
  const auto count = static_cast<std::size_t>(std::max(1, islands.count));
  if (pops.empty()) pops.resize(count);
  const bool init = std::all_of(pops.begin(), pops.end(), [](const auto& p) { return p.empty(); });
  if (init) {
    const std::size_t want = std::min(n, pop_size * pops.size());
    ctx.offer_seeds(want);
    for (std::size_t is = 0; is < pops.size(); ++is)
      fill_random(ctx, std::min(want, pop_size * (is + 1)), is, ctx.rng(s_init).fork(is), "init");
    return;
  }
  if (!ctx.operators_ready()) return;
  const Archive* archive = ctx.archive();
  if (archive_parents && archive && !archive->empty()) ctx.elites_from_archive();
  const std::uint64_t generation = ctx.generation();
  const Rng gen_rng = ctx.rng(s_breed).fork(generation);
  // Asynchronous operators (e.g. an LLM with requests in flight) are polled once per batch,
  // whatever their bandit share, so finished work is never left waiting; they never block.
  if (!pops[0].empty())
    ctx.poll_asynchronous(gen_rng.fork(0xa5a5), pop_size,
                          [&](std::span<Individual> out, Rng& rng) { pick(0, out, rng, archive); });
  for (std::size_t is = 0; is < pops.size(); ++is) {
    if (pops[is].empty()) {  // only after a non-deterministic resume: seed it afresh
      fill_random(ctx, std::min(ctx.size() + pop_size, n), is, ctx.rng(s_init).fork(generation).fork(is), "init");
      continue;
    }
    if (restart_at > 0 && pops[is].size() == 1 && pop_size > 2) {  // restarted (tell): refilled around its best
      fill_random(ctx, std::min(ctx.size() + pop_size - 1, n), is, ctx.rng(s_fill).fork(generation).fork(is).fork(0x5e5),
                  "restart");
      continue;
    }
    const std::size_t keep = std::min(elites, pops[is].size());
    const std::size_t need = pop_size - keep;
    const std::size_t target = std::min(ctx.size() + need, n);
    const Rng island_rng = gen_rng.fork(is);
    const std::size_t max_steps = 4 * need + 16;
    for (std::size_t step = 0; ctx.size() < target && step < max_steps; ++step) {
      Rng rng = island_rng.fork(step);
      if (!ctx.breed(rng, target - ctx.size(), [&](std::span<Individual> out, Rng& r) { pick(is, out, r, archive); }, is))
        break;
    }
    // Operators kept proposing known genomes: top up with fresh random ones.
    fill_random(ctx, target, is, ctx.rng(s_fill).fork(generation).fork(is), "random");
  }
}

std::size_t niche_radius_for(const Space& space, std::size_t radius) {
  std::size_t movable = 0;
  for (std::size_t i = 0; i < space.size(); ++i) movable += space.gene(i).choices() >= 2 ? 1 : 0;
  return std::min(radius, (movable + 3) / 4);
}

std::size_t gene_distance(const Space& space, const Genome& a, const Genome& b) {
  // One pass over the slots in gene order (a gene's slots are contiguous): clearing calls this
  // O(population^2) times per generation, so no per-gene span or memcmp call.
  if (a.size() != b.size() || a.size() != space.width()) throw Error("gene_distance: genomes do not fit the space");
  std::size_t d = 0, off = 0;
  for (std::size_t i = 0; i < space.size(); ++i) {
    const std::size_t w = space.gene(i).width();
    bool differ = false;
    for (std::size_t j = off; j < off + w; ++j) differ |= a[j] != b[j];
    d += differ ? 1 : 0;
    off += w;
  }
  return d;
}

std::vector<Individual> clear_niches(const Space& space, std::vector<Individual> candidates, std::size_t radius,
                                     std::size_t capacity) {
  sort_best_first(candidates);
  std::vector<Individual> kept;
  std::vector<Individual> cleared;
  kept.reserve(capacity);
  for (auto& c : candidates) {
    if (kept.size() >= capacity) break;
    const bool far = std::all_of(kept.begin(), kept.end(),
                                 [&](const Individual& k) { return gene_distance(space, k.genome, c.genome) >= radius; });
    (far ? kept : cleared).push_back(std::move(c));
  }
  for (std::size_t j = 0; kept.size() < capacity && j < cleared.size(); ++j) kept.push_back(std::move(cleared[j]));
  sort_best_first(kept);
  return kept;
}

// Next generation of each island: clearing over the old population and the offspring (niche_radius
// > 0), or its elites, then the offspring, topped up from the old one.
void Genetic::tell(std::span<Evaluated> results, const StrategyContext& ctx) {
  if (pops.empty()) pops.resize(static_cast<std::size_t>(std::max(1, islands.count)));
  const std::uint64_t told = results.size();
  std::vector<std::vector<Individual>> kids(pops.size());
  for (auto& r : results) kids[std::min<std::size_t>(r.tag, pops.size() - 1)].push_back(std::move(r.individual));
  const std::size_t radius = niche_radius > 0 ? niche_radius_for(ctx.space(), niche_radius) : 0;
  for (std::size_t is = 0; is < pops.size(); ++is) {
    auto& pop = pops[is];
    if (pop.empty()) {
      pop = std::move(kids[is]);
      sort_best_first(pop);
      continue;
    }
    if (radius > 0) {  // clearing over the old population and the offspring together
      std::vector<Individual> candidates = std::move(pop);
      for (auto& k : kids[is]) candidates.push_back(std::move(k));
      pop = clear_niches(ctx.space(), std::move(candidates), radius, pop_size);
      continue;
    }
    const std::size_t keep = std::min(elites, pop.size());
    std::vector<Individual> next(pop.begin(), pop.begin() + static_cast<std::ptrdiff_t>(keep));
    for (auto& k : kids[is]) next.push_back(std::move(k));
    for (std::size_t j = keep; next.size() < pop_size && j < pop.size(); ++j) next.push_back(pop[j]);
    sort_best_first(next);
    if (next.size() > pop_size) next.resize(pop_size);
    pop = std::move(next);
  }
  migrate(ctx.generation(), ctx.seed());
  // the generation that crossed restart_at: every island keeps only its best (ask refills it)
  const std::uint64_t done = ctx.evaluations();
  const bool room = restart_budget == 0 || done + pop_size * pops.size() <= restart_budget;
  if (restart_at > 0 && room && done >= restart_at && done - std::min(done, told) < restart_at)
    for (auto& pop : pops)
      if (pop.size() > 1) pop.resize(1);
}

void Genetic::migrate(std::uint64_t generation, std::uint64_t seed) {
  const std::size_t k = pops.size();
  if (k < 2 || islands.interval == 0 || generation == 0 || generation % static_cast<std::uint64_t>(islands.interval) != 0) return;
  const auto m = static_cast<std::size_t>(std::max<double>(1.0, std::round(islands.rate * static_cast<double>(pop_size))));
  std::vector<std::vector<Individual>> out(k);
  for (std::size_t i = 0; i < k; ++i)
    for (std::size_t j = 0; j < m && j < pops[i].size(); ++j) out[i].push_back(pops[i][j]);
  const Rng mr = Rng(seed).fork(s_migrate).fork(generation);
  for (std::size_t i = 0; i < k; ++i) {
    std::size_t dest = (i + 1) % k;
    if (islands.topology == Topology::random) {
      Rng r = mr.fork(i);
      dest = r.below(k - 1);
      if (dest >= i) ++dest;
    }
    auto& pop = pops[dest];
    for (const auto& mig : out[i]) {
      if (std::any_of(pop.begin(), pop.end(), [&](const Individual& x) { return x.genome == mig.genome; })) continue;
      if (pop.size() < pop_size) {
        pop.push_back(mig);
      } else if (better(mig, pop.back())) {
        pop.back() = mig;
      } else {
        continue;
      }
      sort_best_first(pop);
    }
  }
}

// Records applied outside the breeding order join the first population as the best seen.
void Genetic::absorb(std::span<Evaluated> results) {
  if (pops.empty()) pops.resize(static_cast<std::size_t>(std::max(1, islands.count)));
  for (auto& r : results) keep_best(pops[0], std::move(r.individual), pop_size);
}

std::string Genetic::save() const {
  detail::BuiltinState s;
  for (const auto& p : pops) s.populations.push_back(detail::ids_of(p));
  return detail::encode_builtin_state(s);
}

void Genetic::load(std::string_view bytes, std::span<const Individual> history) {
  const auto s = detail::decode_builtin_state(bytes);
  pops.clear();
  for (const auto& ids : s.populations) pops.push_back(detail::individuals_of(ids, history));
}

void Genetic::population(std::vector<const Individual*>& out) const {
  for (const auto& p : pops)
    for (const auto& i : p) out.push_back(&i);
}

}  // namespace kevo::evo
