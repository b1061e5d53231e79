// Steady state: one refill at a time as evaluation threads free up (the engine's asynchronous
// driver); each result joins the population when it beats the worst member.
#include "kevo/evo/strategies/steady_state.hpp"

#include "../streams.hpp"
#include "kevo/evo/strategies/common.hpp"
#include "state.hpp"

namespace kevo::evo {

void SteadyState::ask(std::size_t n, AskContext& ctx) {
  const Rng root = ctx.rng(detail::s_async);
  auto pick = [&](std::span<Individual> out, Rng& rng) {
    for (auto& p : out) p = kevo::evo::tournament(pop, tournament, rng);
  };
  for (int tries = 0; ctx.size() == 0 && tries < 64; ++tries) {
    Rng rng = root.fork(cursor++);
    const std::size_t have = pop.size() + ctx.in_flight();
    // Operators that keep proposing known genomes hand over to random ones (as the generational
    // top-up does); only when those fail too is the space exhausted.
    if (have < pop_size || pop.empty() || tries >= 32) {
      if (cursor == 1) ctx.offer_seeds(1);
      if (ctx.size() == 0) ctx.offer(ctx.space().random(rng), rng, tries >= 32 ? "random" : "init");
    } else {
      if (!ctx.operators_ready()) break;
      // Asynchronous operators are polled at every refill, whatever their share.
      ctx.poll_asynchronous(rng, n, pick);
      if (ctx.size() > 0) break;
      if (!ctx.breed(rng, n, pick)) break;
    }
  }
}

void SteadyState::tell(std::span<Evaluated> results) {
  for (auto& r : results) keep_best(pop, std::move(r.individual), pop_size);
}

std::string SteadyState::save() const { return detail::save_one(cursor, pop); }
void SteadyState::load(std::string_view b, std::span<const Individual> h) { detail::load_one(b, h, cursor, pop); }

}  // namespace kevo::evo
