// The built-in strategies' shared pieces: the factory from a Config, selection helpers and the
// saved state (cursor and populations as journal ids).
#include <fmt/format.h>

#include <algorithm>
#include <cereal/archives/portable_binary.hpp>
#include <cereal/types/vector.hpp>
#include <sstream>

#include "kevo/core/error.hpp"
#include "kevo/evo/archive.hpp"
#include "kevo/evo/strategies.hpp"
#include "../streams.hpp"
#include "state.hpp"

namespace kevo::evo {

const Individual& tournament(std::span<const Individual> pop, std::size_t size, Rng& rng) {
  const Individual* winner = &pop[rng.below(pop.size())];
  for (std::size_t k = 1; k < size; ++k) {
    const Individual* c = &pop[rng.below(pop.size())];
    if (better(*c, *winner)) winner = c;
  }
  return *winner;
}

void sort_best_first(std::vector<Individual>& pop) {
  std::sort(pop.begin(), pop.end(), [](const Individual& a, const Individual& b) { return better(a, b); });
}

void keep_best(std::vector<Individual>& pop, Individual ind, std::size_t capacity) {
  if (pop.size() >= capacity && !better(ind, pop.back())) return;
  auto it = std::lower_bound(pop.begin(), pop.end(), ind, [](const Individual& a, const Individual& b) { return better(a, b); });
  pop.insert(it, std::move(ind));
  if (pop.size() > capacity) pop.pop_back();
}

Strategy builtin_strategy(const Config& c) {
  switch (c.algorithm) {
    case Algorithm::ga:
    case Algorithm::islands:
    case Algorithm::map_elites: {
      Genetic g;
      g.label = std::string(to_string(c.algorithm));
      g.pop_size = c.population;
      g.elites = c.elites;
      g.tournament = c.tournament;
      g.islands = c.islands;
      if (c.algorithm != Algorithm::islands) g.islands.count = 1;
      g.archive_parents = c.algorithm == Algorithm::map_elites;
      if (!c.late_seeds.empty()) g.restart_at = c.late_seeds_at;
      g.restart_budget = c.budget.max_evaluations;
      return g;
    }
    case Algorithm::steady_state: return SteadyState{c.population, c.tournament, 0, {}};
    case Algorithm::random: return RandomSearch{c.population, 0, {}};
    case Algorithm::exhaustive: return Exhaustive{c.population, 0, {}};
    case Algorithm::surrogate: {
      Surrogate s;
      s.pop_size = c.population;
      return s;
    }
  }
  throw Error("evo: unknown algorithm");
}

namespace detail {

std::string encode_builtin_state(const BuiltinState& s) {
  std::ostringstream ss;
  {
    cereal::PortableBinaryOutputArchive ar(ss);
    ar(s.cursor, s.populations);
  }
  return std::move(ss).str();
}

BuiltinState decode_builtin_state(std::string_view bytes) {
  BuiltinState s;
  std::istringstream in{std::string(bytes)};
  cereal::PortableBinaryInputArchive ar(in);
  ar(s.cursor, s.populations);
  return s;
}

std::vector<std::uint64_t> ids_of(const std::vector<Individual>& pop) {
  std::vector<std::uint64_t> ids;
  ids.reserve(pop.size());
  for (const auto& i : pop) ids.push_back(i.id);
  return ids;
}

std::vector<Individual> individuals_of(const std::vector<std::uint64_t>& ids, std::span<const Individual> history) {
  std::vector<Individual> out;
  out.reserve(ids.size());
  for (auto id : ids) {
    if (id >= history.size())
      throw Error(fmt::format("the snapshot refers to evaluation {} beyond its {} records", id, history.size()));
    out.push_back(history[id]);
  }
  return out;
}
std::string save_one(std::uint64_t cursor, const std::vector<Individual>& pop) {
  return encode_builtin_state({cursor, {ids_of(pop)}});
}
void load_one(std::string_view bytes, std::span<const Individual> history, std::uint64_t& cursor, std::vector<Individual>& pop) {
  auto s = decode_builtin_state(bytes);
  cursor = s.cursor;
  pop.clear();
  if (!s.populations.empty()) pop = individuals_of(s.populations[0], history);
}

}  // namespace detail

// ---- the samplers ------------------------------------------------------------------------------


void RandomSearch::ask(std::size_t n, AskContext& ctx) {
  const std::size_t want = std::min(n, pop_size);
  if (ctx.generation() == 0) ctx.offer_seeds(want);
  const Rng root = ctx.rng(detail::s_random);
  std::size_t tries = 0;
  while (ctx.size() < want && tries < 4 * want + 64) {
    Rng rng = root.fork(cursor++);
    ++tries;
    ctx.offer(ctx.space().random(rng), rng, "random");
  }
}
void RandomSearch::tell(std::span<Evaluated> results) {
  for (auto& r : results) keep_best(pop, std::move(r.individual), pop_size);
}
std::string RandomSearch::save() const { return detail::save_one(cursor, pop); }
void RandomSearch::load(std::string_view b, std::span<const Individual> h) { detail::load_one(b, h, cursor, pop); }

void Exhaustive::ask(std::size_t n, AskContext& ctx) {
  const auto card = ctx.space().cardinality();
  if (!card) return;
  const std::size_t want = std::min(n, std::max<std::size_t>(pop_size, 64));
  const Rng root = ctx.rng(detail::s_random);
  while (ctx.size() < want && cursor < *card) {
    Rng rng = root.fork(cursor);
    ctx.offer(ctx.space().nth(cursor++), rng, "exhaustive", 0, /*repair=*/false);
  }
}
void Exhaustive::tell(std::span<Evaluated> results) {
  for (auto& r : results) keep_best(pop, std::move(r.individual), pop_size);
}
std::string Exhaustive::save() const { return detail::save_one(cursor, pop); }
void Exhaustive::load(std::string_view b, std::span<const Individual> h) { detail::load_one(b, h, cursor, pop); }

}  // namespace kevo::evo
