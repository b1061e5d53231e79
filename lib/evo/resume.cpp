// Snapshots of the engine state (the strategy's own state included, as bytes it wrote), restoring
// them with the journal on resume, and absorbing journal records a resumed run did not reach.
#include <fmt/format.h>

#include <algorithm>

#include "engine_impl.hpp"
#include "kevo/core/error.hpp"
#include "kevo/core/hash.hpp"

namespace kevo::evo {

detail::SnapshotState Engine::Impl::make_snapshot() const {
  detail::SnapshotState s;
  s.config = cfg;
  s.deterministic = det;
  s.records = evaluations;
  s.generation = generation;
  s.strategy = strategy->name();
  s.strategy_stateful = strategy->stateful();
  if (s.strategy_stateful) s.strategy_state = strategy->save();
  if (archive) {
    s.has_archive = true;
    s.archive_ranges = archive->ranges();
    s.archive_calibrated = archive->calibrated();
    for (const auto& [c, ind] : archive->cells()) s.archive_cells.emplace_back(c, ind.id);
    for (const auto& ind : archive->pending()) s.archive_pending.push_back(ind.id);
  }
  for (const auto& ind : leaders) s.leaders.push_back(ind.id);
  s.valid = valid;
  s.by_status = by_status;
  s.duplicates = duplicates;
  s.outside = outside;
  s.has_best = best.has_value();
  s.best_id = best ? best->id : 0;
  s.last_improvement = last_improvement;
  s.cost = cost;
  s.evaluation_cost = eval_cost;
  s.wall_seconds = wall();
  s.cost_sum = cost_sum;
  s.cost_samples = cost_samples;
  s.history_hash = history_hash;
  for (const auto& a : arms) s.arms.push_back(detail::ArmState{a.stats.name, a.prior, a.reward, a.cost, a.count, a.stats});
  return s;
}

void Engine::Impl::snapshot() {
  if (cfg.checkpoint.dir.empty()) return;
  detail::write_snapshot(cfg.checkpoint.dir / detail::kSnapshotName, fingerprint, make_snapshot(), cfg.checkpoint.sync);
}

void Engine::Impl::restore() {
  const auto dir = cfg.checkpoint.dir;
  const auto& s = *snap;
  const std::uint64_t J = journal_records.size();  // >= s.records: open() checked it
  auto fail = [&](const std::string& m) { throw Error(fmt::format("checkpoint {}: {}", dir.string(), m)); };
  if (s.strategy != strategy->name())
    fail(fmt::format("recorded with strategy '{}' but this engine has '{}'; set the same strategy before run()",
                     s.strategy, strategy->name()));
  if (s.arms.size() != arms.size() ||
      !std::equal(arms.begin(), arms.end(), s.arms.begin(), [](const detail::Arm& a, const detail::ArmState& b) { return a.stats.name == b.name; })) {
    std::string have, want;
    for (const auto& a : arms) have += (have.empty() ? "" : ", ") + a.stats.name;
    for (const auto& a : s.arms) want += (want.empty() ? "" : ", ") + a.name;
    fail(fmt::format("recorded with operators [{}] but this engine has [{}]; add the same operators before run()", want, have));
  }
  wall_before = s.wall_seconds;
  // A strategy that saves no state is rebuilt by replaying the whole journal through it: the run
  // starts again from its first batch and takes every recorded result instead of evaluating it.
  const std::uint64_t S = s.strategy_stateful && strategy->stateful() ? s.records : 0;
  auto rec = [&](std::uint64_t id) -> const Individual& {
    if (id >= S) fail(fmt::format("the snapshot refers to evaluation {} beyond its {} records", id, S));
    return journal_records[id];
  };
  if (S > 0) {
    try {
      strategy->load(s.strategy_state, std::span<const Individual>(journal_records.data(), S));
    } catch (const std::exception& e) {
      fail(fmt::format("the state of strategy '{}' is unreadable: {}", s.strategy, e.what()));
    }
    for (std::size_t i = 0; i < arms.size(); ++i) {
      arms[i].reward = s.arms[i].reward;
      arms[i].cost = s.arms[i].cost;
      arms[i].count = s.arms[i].count;
      arms[i].stats = s.arms[i].stats;
    }
    generation = s.generation;
    evaluations = S;
    for (std::uint64_t i = 0; i < S; ++i) {
      seen.insert(genome_hash(journal_records[i].genome));
      if (journal_records[i].eval.ok())
        for (auto& a : arms)
          if (a.stats.name == journal_records[i].op) ++a.valid;
    }
    if (archive && s.has_archive) {
      std::vector<std::pair<std::uint64_t, Individual>> cells;
      for (const auto& [c, id] : s.archive_cells) cells.emplace_back(c, rec(id));
      std::vector<Individual> pending;
      for (auto id : s.archive_pending) pending.push_back(rec(id));
      archive->restore(s.archive_ranges, s.archive_calibrated, std::move(cells), std::move(pending));
    }
    leaders.clear();
    for (auto id : s.leaders) leaders.push_back(rec(id));
    valid = s.valid;
    by_status = s.by_status;
    duplicates = s.duplicates;
    outside = s.outside;
    if (s.has_best) best = rec(s.best_id);
    last_improvement = s.last_improvement;
    cost = s.cost;
    eval_cost = s.evaluation_cost;
    cost_sum = s.cost_sum;
    cost_samples = s.cost_samples;
    history_hash = s.history_hash;
  }
  next_id = J;
  for (std::uint64_t i = S; i < J; ++i) replay.emplace(genome_hash(journal_records[i].genome), std::move(journal_records[i]));
  journal_records.clear();
  journal_records.shrink_to_fit();
  snap.reset();
}

// Applies journal records that the run did not reach again (non-deterministic resume, or a
// changed budget), so no completed evaluation is ever lost; the strategy absorbs them.
void Engine::Impl::absorb_replay() {
  if (replay.empty()) return;
  std::vector<Evaluated> rest;
  rest.reserve(replay.size());
  for (auto& [h, ind] : replay) rest.push_back(Evaluated{std::move(ind), 0});
  replay.clear();
  std::sort(rest.begin(), rest.end(), [](const Evaluated& a, const Evaluated& b) { return a.individual.id < b.individual.id; });
  for (const auto& r : rest) {
    seen.insert(genome_hash(r.individual.genome));
    apply(r.individual, detail::kNoArm, detail::kInf, 0, true);
  }
  Services view(*this, nullptr, 0, 0);
  strategy->absorb(rest, view);
}

std::unique_ptr<Engine::Impl> Engine::Impl::open(const std::filesystem::path& dir, Problem problem, const Config* override_cfg) {
  const auto snap_path = dir / detail::kSnapshotName;
  const auto journal_path = dir / detail::kJournalName;
  const std::uint64_t fp = detail::space_fingerprint(problem.space());
  std::error_code ec;
  // one writer per checkpoint: taken before anything here is read, so a run still writing cannot
  // be read half-way, and before anything is removed or appended
  // (a directory not made yet holds nothing to read: the fresh engine below makes and locks it)
  DirLock lock = std::filesystem::is_directory(dir, ec) ? DirLock(dir, "checkpoint") : DirLock();
  if (!std::filesystem::exists(snap_path, ec)) {
    if (std::filesystem::exists(journal_path, ec)) {
      auto j = detail::read_journal_file(journal_path, fp);
      if (!j.records.empty())
        throw Error(fmt::format("checkpoint {}: journal without snapshot ({} missing)", dir.string(), snap_path.string()));
    }
    if (!override_cfg) throw Error(fmt::format("checkpoint {}: no run recorded here ({} missing)", dir.string(), snap_path.string()));
    // Killed before its first evaluation: start afresh with the given configuration.
    std::filesystem::remove(journal_path, ec);
    Config c = *override_cfg;
    c.checkpoint.dir = dir;
    lock.release();  // the fresh engine takes it again
    return std::move(Engine(std::move(problem), std::move(c)).impl_);
  }
  auto snap = detail::read_snapshot(snap_path, fp);
  Config cfg = snap.config;
  if (override_cfg) {
    if (auto f = detail::identity_mismatch(snap.config, *override_cfg); !f.empty())
      throw Error(fmt::format("checkpoint {}: the run was recorded with a different '{}'; only budgets, threads and "
                              "checkpoint settings may change on resume",
                              dir.string(), f));
    cfg = *override_cfg;
  }
  cfg.checkpoint.dir = dir;
  detail::validate(cfg, problem.space());
  auto impl = std::make_unique<Engine::Impl>(std::move(problem), std::move(cfg));
  impl->lock = std::move(lock);
  impl->init_determinism();
  impl->add_builtins();
  if (std::filesystem::exists(journal_path, ec)) {
    auto j = detail::read_journal_file(journal_path, fp);
    impl->journal_records = std::move(j.records);
    impl->journal_valid_bytes = j.valid_bytes;
  }
  // checked here, not in restore() at run(): a front end rewrites its own files from the journal
  // once resume() returns, and a journal shorter than the snapshot must stop it first
  if (snap.records > impl->journal_records.size())
    throw Error(fmt::format("checkpoint {}: the snapshot covers {} evaluations but the journal holds only {}", dir.string(),
                            snap.records, impl->journal_records.size()));
  impl->snap = std::move(snap);
  impl->resumed = true;
  return impl;
}

}  // namespace kevo::evo
