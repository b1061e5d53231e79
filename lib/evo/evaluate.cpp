// Evaluation: batches on the oneTBB arena (fixed index chunks, so results never depend on which
// thread ran what), sanitised results, then journaled and applied in proposal order.
#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>

#include "engine_impl.hpp"
#include "kevo/core/hash.hpp"
#include "kevo/evo/strategies/common.hpp"

namespace kevo::evo {

using detail::kNoArm;

namespace {

void sanitize(Evaluation& e) {
  if (e.status != Status::ok) return;
  if (e.fitness.empty()) {
    e.status = Status::error;
    e.reason = "problem reported ok without a fitness";
    return;
  }
  for (double f : e.fitness)
    if (!std::isfinite(f)) {
      e.status = Status::error;
      e.reason = "non-finite fitness (NaN or inf) rejected";
      return;
    }
}

std::uint64_t record_hash(const Individual& ind) {
  StableHasher h;
  h.u64(ind.id).u64(ind.genome.size());
  for (auto v : ind.genome) h.i64(v);
  h.u64(static_cast<std::uint64_t>(ind.eval.status)).u64(ind.eval.fitness.size());
  for (double f : ind.eval.fitness) h.f64(f);
  return h.digest();
}

// A failure that a requested stop may have caused (a measurement cut short): not recorded.
bool stopped_failure(const Evaluation& e) { return e.status != Status::ok && e.status != Status::invalid; }

}  // namespace

// The problem a thread evaluates with: its own copy for ThreadSafety::basic problems.
const Problem& Engine::Impl::problem_here() const {
  if (!copies) return problem;
  return copies->local();
}

void Engine::Impl::eval_chunk(std::span<const Genome> gs, Evaluation* out) const {
  auto fail_all = [&](const std::string& why) {
    for (std::size_t i = 0; i < gs.size(); ++i) {
      out[i] = Evaluation{};
      out[i].status = Status::error;
      out[i].reason = why;
    }
  };
  try {
    auto r = problem_here().evaluate(gs);
    if (r.size() != gs.size()) {
      fail_all(fmt::format("problem returned {} evaluations for {} genomes", r.size(), gs.size()));
      return;
    }
    for (std::size_t i = 0; i < gs.size(); ++i) out[i] = std::move(r[i]);
  } catch (const std::exception& ex) {
    fail_all(std::string("evaluate threw: ") + ex.what());
  } catch (...) {
    fail_all("evaluate threw a non-standard exception");
  }
  for (std::size_t i = 0; i < gs.size(); ++i) sanitize(out[i]);
}

std::vector<Evaluation> Engine::Impl::evaluate(std::vector<Genome>& gs) {
  std::vector<Evaluation> out(gs.size());
  if (gs.empty()) return out;
  const std::span<const Genome> all(gs);
  if (cfg.threads <= 1 || problem.thread_safety() == ThreadSafety::none || gs.size() < 2) {
    eval_chunk(all, out.data());
    return out;
  }
  // Fixed chunking by index: each chunk writes its own slots, so the result does not depend
  // on which thread ran which chunk.
  const std::size_t n = gs.size();
  const std::size_t chunks = std::min<std::size_t>(n, static_cast<std::size_t>(cfg.threads) * 4);
  arena->execute([&] {
    tbb::parallel_for(std::size_t{0}, chunks, [&](std::size_t c) {
      const std::size_t lo = c * n / chunks, hi = (c + 1) * n / chunks;
      eval_chunk(all.subspan(lo, hi - lo), out.data() + lo);
    });
  });
  return out;
}

// Applies one evaluated individual to counters, best, archive, bandit and observers.
void Engine::Impl::apply(const Individual& ind, std::uint32_t arm, double parent, double op_cost, bool from_journal) {
  ++evaluations;
  ++by_status[static_cast<std::size_t>(ind.eval.status)];
  const bool ok = ind.eval.ok();
  if (ok) ++valid;
  ++batch_total;
  if (ok) ++batch_valid;
  eval_cost += ind.eval.cost;
  history_hash = mix64(history_hash ^ record_hash(ind));
  const bool new_best = ok && (!best || better(ind, *best));
  if (new_best) {
    best = ind;
    last_improvement = evaluations;
  }
  if (archive) archive->insert(ind);
  if (!strategy->has_population()) keep_best(leaders, ind, cfg.population);
  if (arm != kNoArm) {
    auto& st = arms[arm].stats;
    ++st.evaluated;
    if (ok) ++arms[arm].valid;
    const bool improved = ok && detail::primary(ind) < parent;
    if (improved) ++st.improvements;
    if (new_best) ++st.new_bests;
    credit(arm, new_best ? 1.0 : improved ? 0.5 : 0.0, op_cost + ind.eval.cost);
  }
  if (from_journal) {
    ++replayed;
    return;
  }
  for (const auto& o : observers) {
    if (o.on_evaluation) o.on_evaluation(ind);
    if (new_best && o.on_new_best) o.on_new_best(ind);
  }
}

// Evaluates a batch, journals it, applies it in proposal order; returns the results for tell().
// A stop requested during the batch may leave it unapplied (stop set, nothing returned).
std::vector<Evaluated> Engine::Impl::process(std::vector<Proposal>& batch) {
  std::vector<Genome> to_eval;
  std::vector<std::size_t> where;
  for (std::size_t i = 0; i < batch.size(); ++i)
    if (!batch[i].cached) {
      where.push_back(i);
      to_eval.push_back(std::move(batch[i].genome));
    }
  auto evals = evaluate(to_eval);
  if (stop_flag.load(std::memory_order_relaxed) &&
      std::any_of(evals.begin(), evals.end(), [](const Evaluation& e) { return stopped_failure(e); })) {
    // Stopped while this batch was measured, and some of it failed: those failures may be the
    // stop's doing (a worker killed mid-measurement). Journal the measurements completed before
    // the first such failure -- a resume replays them -- and apply nothing: the run ends at the
    // previous batch. Only that prefix is kept: a record's id is its place in the journal, and
    // the resumed run numbers the re-measured rest in proposal order after it, as the
    // uninterrupted run would have (keeping a completed measurement from behind a cut one would
    // renumber both, and the resumed history would differ).
    std::vector<Individual> kept;
    for (std::size_t k = 0; k < to_eval.size(); ++k) {
      if (stopped_failure(evals[k])) break;
      Individual& ind = kept.emplace_back();
      ind.genome = std::move(to_eval[k]);
      ind.eval = std::move(evals[k]);
      ind.id = next_id++;
      ind.op = batch[where[k]].op;
      ind.generation = generation;
    }
    std::vector<const Individual*> ptrs;
    for (const auto& ind : kept) ptrs.push_back(&ind);
    if (journal) journal->append(ptrs);
    stop = StopReason::requested;
    stopped_mid_batch = true;  // the state proposed this batch: keep the last snapshot, as a kill would
    return {};
  }
  std::vector<Evaluated> out(batch.size());
  std::size_t k = 0;
  std::vector<const Individual*> fresh;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    auto& p = batch[i];
    Individual& ind = out[i].individual;
    out[i].tag = p.tag;
    if (p.cached) {
      ind = *p.cached;
    } else {
      ind.genome = std::move(to_eval[k]);
      ind.eval = std::move(evals[k]);
      ++k;
      ind.id = next_id++;
      ind.op = p.op;
      ind.generation = generation;
      fresh.push_back(&ind);
    }
  }
  if (journal) journal->append(fresh);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    auto& p = batch[i];
    const Individual& ind = out[i].individual;
    seen.insert(p.hash);
    apply(ind, p.arm, p.parent, p.op_cost, p.cached != nullptr);
    if (p.arm != kNoArm) outcomes[p.arm][p.outcome] = ProposalOutcome{ind.genome, ind.eval};
    if (p.cached) replay.erase(p.hash);  // p.cached dangles from here on
  }
  for (std::size_t a = 0; a < arms.size(); ++a)
    if (!outcomes[a].empty()) arms[a].op.feedback(outcomes[a]);
  return out;
}

// Hands results to the strategy (read-only context).
void Engine::Impl::tell(std::span<Evaluated> told) {
  Services view(*this, nullptr, 0, 0);
  strategy->tell(told, view);
}

}  // namespace kevo::evo
