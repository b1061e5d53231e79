// The drivers: generational (ask a batch, evaluate it in parallel, journal, apply, tell) and
// asynchronous (refill evaluation slots as they free up, tell each result as it arrives); the
// stopping rules, the per-generation observer call and the Result.
#include <fmt/format.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "engine_impl.hpp"
#include "kevo/core/error.hpp"
#include "kevo/evo/strategies/common.hpp"

namespace kevo::evo {

using detail::kInf;
using detail::kNoArm;

namespace {
bool stopped_failure(const Evaluation& e) { return e.status != Status::ok && e.status != Status::invalid; }
}  // namespace

std::vector<Proposal> Engine::Impl::make_batch() {
  std::vector<Proposal> batch;
  batch_hashes.clear();
  outcomes.assign(arms.size(), {});
  no_operators = false;
  const std::uint64_t room = remaining();
  if (room == 0) return batch;
  const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(room, std::numeric_limits<std::size_t>::max()));
  add_late_seeds(batch, n);
  Services ctx(*this, &batch, n, 0);
  strategy->ask(n, ctx);
  no_operators = ctx.no_operators();
  return batch;
}

void Engine::Impl::run_generational() {
  while (true) {
    if ((stop = check_stop()) != StopReason::none) return;
    auto batch = make_batch();
    if (batch.empty()) {
      if (stop_flag.load(std::memory_order_relaxed)) {  // a stop requested during ask() (AskContext::request_stop)
        stop = StopReason::requested;
        return;
      }
      stop = no_operators ? StopReason::operators_exhausted : StopReason::space_exhausted;
      return;
    }
    auto told = process(batch);
    if (stop != StopReason::none) return;
    tell(told);
    if (archive) archive->calibrate();
    emit_generation();
    ++generation;
    if (generation % static_cast<std::uint64_t>(cfg.checkpoint.snapshot_interval) == 0) snapshot();
  }
}

void Engine::Impl::run_async() {
  const std::size_t n_flight = cfg.in_flight ? cfg.in_flight : 2 * static_cast<std::size_t>(cfg.threads);
  struct Done {
    Proposal p;
    Evaluation e;
  };
  std::mutex mtx, eval_mtx;
  std::condition_variable cv;
  std::vector<Done> done;
  std::size_t in_flight = 0;
  std::size_t submitted = 0, completed = 0;  // tasks enqueued / finished (completed under mtx)
  std::deque<Proposal> ready;
  const bool serial = problem.thread_safety() == ThreadSafety::none;
  std::uint64_t since_generation = 0;
  bool exhausted = false;

  auto submit = [&](Proposal p) {
    ++in_flight;
    ++submitted;
    // The task owns its proposal and frees it before it counts as complete: TBB destroys a
    // task's functor after the task returns, possibly after run() has returned and the process
    // has exited, so a Proposal held by the functor could outlive the engine (LeakSanitizer
    // reported one). Every submitted task runs: both ways out of this loop wait for all of them.
    Proposal* const raw = new Proposal(std::move(p));
    arena->enqueue([&, raw] {
      std::unique_ptr<Proposal> held(raw);
      Evaluation e;
      {
        std::unique_lock<std::mutex> lk(eval_mtx, std::defer_lock);
        if (serial) lk.lock();
        eval_chunk(std::span<const Genome>(&held->genome, 1), &e);
      }
      Done d{std::move(*held), std::move(e)};
      held.reset();
      std::lock_guard<std::mutex> g(mtx);
      done.push_back(std::move(d));
      ++completed;
      cv.notify_one();
    });
  };
  auto finish = [&](Proposal& p, Individual ind) {
    seen.insert(p.hash);
    apply(ind, p.arm, p.parent, p.op_cost, p.cached != nullptr);
    if (p.arm != kNoArm) {
      ProposalOutcome o{ind.genome, ind.eval};
      arms[p.arm].op.feedback(std::span<const ProposalOutcome>(&o, 1));
    }
    if (p.cached) replay.erase(p.hash);
    if (archive) archive->calibrate();
    Evaluated told{std::move(ind), p.tag};
    tell(std::span<Evaluated>(&told, 1));
    if (++since_generation >= cfg.population) {
      since_generation = 0;
      emit_generation();
      ++generation;
      if (generation % static_cast<std::uint64_t>(cfg.checkpoint.snapshot_interval) == 0) snapshot();
    }
  };

  try {
    while (true) {
      if (stop == StopReason::none) stop = check_stop();
      // Budget counts evaluations already running, so the run never overshoots.
      auto budget_left = [&]() -> std::uint64_t {
        if (!cfg.budget.max_evaluations) return std::numeric_limits<std::uint64_t>::max();
        return cfg.budget.max_evaluations > evaluations + in_flight ? cfg.budget.max_evaluations - evaluations - in_flight : 0;
      };
      while (stop == StopReason::none && !exhausted && in_flight < n_flight && budget_left() > 0) {
        if (ready.empty()) {
          std::vector<Proposal> got;
          batch_hashes.clear();
          outcomes.assign(arms.size(), {});
          const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(n_flight - in_flight, budget_left()));
          add_late_seeds(got, n);
          Services ctx(*this, &got, n, in_flight);
          strategy->ask(n, ctx);
          for (std::size_t a = 0; a < arms.size(); ++a) {
            // Dropped proposals are reported at once; admitted ones after their evaluation.
            std::vector<ProposalOutcome> dropped;
            for (auto& o : outcomes[a])
              if (!o.genome.empty()) dropped.push_back(std::move(o));
            if (!dropped.empty()) arms[a].op.feedback(dropped);
          }
          if (got.empty()) {
            exhausted = true;
            break;
          }
          for (auto& p : got) ready.push_back(std::move(p));
        }
        Proposal p = std::move(ready.front());
        ready.pop_front();
        if (seen.count(p.hash)) continue;
        seen.insert(p.hash);
        if (p.cached) {
          Individual ind = *p.cached;
          finish(p, std::move(ind));
        } else {
          submit(std::move(p));
        }
      }
      if (in_flight == 0) {
        if (stop == StopReason::none) stop = check_stop();
        if (stop == StopReason::none) stop = exhausted ? StopReason::space_exhausted : StopReason::evaluations;
        return;
      }
      std::vector<Done> got;
      {
        std::unique_lock<std::mutex> lk(mtx);
        cv.wait_for(lk, std::chrono::milliseconds(20), [&] { return !done.empty(); });
        got.swap(done);
      }
      if (stop_flag.load(std::memory_order_relaxed)) {
        // Stopping: failures may be the stop's doing (a measurement cut short); not recorded,
        // so a resume measures those genomes again.
        const auto cut = std::remove_if(got.begin(), got.end(), [](const Done& d) { return stopped_failure(d.e); });
        for (auto it = cut; it != got.end(); ++it) {
          --in_flight;
          seen.erase(it->p.hash);
        }
        got.erase(cut, got.end());
      }
      std::vector<Individual> inds;
      std::vector<const Individual*> ptrs;
      inds.reserve(got.size());
      for (auto& d : got) {
        Individual ind;
        ind.genome = d.p.genome;
        ind.eval = std::move(d.e);
        ind.id = next_id++;
        ind.op = d.p.op;
        ind.generation = generation;
        inds.push_back(std::move(ind));
      }
      for (auto& ind : inds) ptrs.push_back(&ind);
      if (journal) journal->append(ptrs);
      for (std::size_t i = 0; i < got.size(); ++i) {
        --in_flight;
        finish(got[i].p, std::move(inds[i]));
      }
    }
  } catch (...) {
    // Tasks still running refer to this frame: let them finish before unwinding. (Counting
    // `done` against `in_flight` would hang when the throw came from the journal or an observer
    // while a batch taken out of `done` was being applied.)
    std::unique_lock<std::mutex> lk(mtx);
    cv.wait(lk, [&] { return completed >= submitted; });
    throw;
  }
}

Result Engine::Impl::run() {
  if (ran) throw Error("evo: Engine::run() may be called once");
  ran = true;
  start = detail::Clock::now();
  for (std::size_t i = 0; i < arms.size(); ++i) arms[i].stats.name = arms[i].op.name();
  for (std::size_t i = 0; i < arms.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (arms[i].stats.name == arms[j].stats.name) arms[i].stats.name += fmt::format("#{}", i);
  if (arms.empty() && strategy->uses_operators())
    throw Error(fmt::format("evo: {} needs operators: keep builtin_operators or call add_operator()", strategy->name()));
  if (uses_archive()) archive.emplace(cfg.archive);
  const bool async = strategy->asynchronous();
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::size_t want_threads =
      std::max<std::size_t>(static_cast<std::size_t>(cfg.threads), async ? std::max<std::size_t>(cfg.in_flight, 1) : 1);
  std::optional<tbb::global_control> gc;
  if (cfg.raise_thread_limit && static_cast<int>(want_threads) + 1 > hw)
    gc.emplace(tbb::global_control::max_allowed_parallelism, want_threads + 1);
  if (problem.thread_safety() == ThreadSafety::basic && cfg.threads > 1)
    copies = std::make_unique<tbb::enumerable_thread_specific<Problem>>([this] { return problem.clone(); });
  if (async)
    arena = std::make_unique<tbb::task_arena>(cfg.threads, 0);
  else
    arena = std::make_unique<tbb::task_arena>(cfg.threads);
  if (resumed && snap) restore();
  if (!cfg.checkpoint.dir.empty()) {
    if (!resumed) snapshot();  // the configuration is on disk before the first evaluation
    journal = std::make_unique<detail::JournalWriter>(
        cfg.checkpoint.dir / detail::kJournalName, fingerprint, static_cast<std::uint32_t>(space->width()),
        resumed ? std::optional<std::uint64_t>(journal_valid_bytes) : std::nullopt, cfg.checkpoint.sync);
  }
  if (!det) absorb_replay();
  if (async)
    run_async();
  else
    run_generational();
  absorb_replay();
  if (!stopped_mid_batch) snapshot();
  arena.reset();
  copies.reset();
  journal.reset();  // closed: nothing more is written to the checkpoint, which another engine may now resume
  lock.release();
  return result();
}

StopReason Engine::Impl::check_stop() const {
  const auto& b = cfg.budget;
  if (stop_flag.load(std::memory_order_relaxed)) return StopReason::requested;
  if (b.target_fitness && best && detail::primary(*best) <= *b.target_fitness) return StopReason::target;
  if (b.max_evaluations && evaluations >= b.max_evaluations) return StopReason::evaluations;
  if (b.patience && evaluations - last_improvement >= b.patience && evaluations > 0) return StopReason::patience;
  if (b.max_generations && generation >= b.max_generations) return StopReason::generations;
  if (b.max_cost > 0 && cost >= b.max_cost) return StopReason::cost;
  if (b.max_seconds > 0 && wall() >= b.max_seconds) return StopReason::time;
  return StopReason::none;
}

std::vector<OperatorStats> Engine::Impl::op_stats() const {
  std::vector<OperatorStats> s;
  for (const auto& a : arms) s.push_back(a.stats);
  return s;
}

void Engine::Impl::emit_generation() {
  const bool any = std::any_of(observers.begin(), observers.end(), [](const Observer& o) { return bool(o.on_generation); });
  if (!any) {
    batch_valid = batch_total = 0;
    return;
  }
  GenerationStats gs;
  gs.generation = generation;
  gs.evaluations = evaluations;
  gs.best = best ? detail::primary(*best) : kInf;
  double sum = 0;
  std::size_t n = 0;
  collect_members();
  for (const Individual* ind : members)
    if (ind->eval.ok()) {
      sum += detail::primary(*ind);
      ++n;
    }
  gs.mean = n ? sum / static_cast<double>(n) : kInf;
  gs.valid_share = batch_total ? static_cast<double>(batch_valid) / static_cast<double>(batch_total) : 0.0;
  gs.archive_size = archive ? archive->size() : 0;
  gs.operators = op_stats();
  batch_valid = batch_total = 0;
  for (const auto& o : observers)
    if (o.on_generation) o.on_generation(gs);
}

Result Engine::Impl::result() {
  Result r;
  r.best = best;
  collect_members();
  std::vector<Individual> all;
  all.reserve(members.size());
  for (const Individual* ind : members) all.push_back(*ind);
  sort_best_first(all);
  for (auto& ind : all)
    if (std::none_of(r.elites.begin(), r.elites.end(), [&](const Individual& e) { return e.genome == ind.genome; }))
      r.elites.push_back(std::move(ind));
  if (archive)
    for (const auto& [c, ind] : archive->cells()) {
      r.archive.push_back(ind);
      r.archive_cells.push_back(c);
    }
  r.evaluations = evaluations;
  r.valid = valid;
  r.by_status = by_status;
  r.duplicates = duplicates;
  r.outside = outside;
  r.replayed = replayed;
  r.generations = generation;
  r.wall_seconds = wall();
  r.cost = cost;
  r.evaluation_cost = eval_cost;
  r.stop_reason = stop;
  r.deterministic = det;
  r.determinism_note = det_note;
  r.history_hash = history_hash;
  r.operators = op_stats();
  return r;
}

}  // namespace kevo::evo
