// The kernel table and the tuning of a model's hot kernels (kevo/model/tune.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kevo/ir/analysis.hpp"
#include "kevo/model/tune.hpp"
#include "kevo/records/database.hpp"
#include "kevo/records/recorder.hpp"
#include "kevo/search/kernel_problem.hpp"
#include "kevo/search/session.hpp"

namespace kevo::model {

namespace {

// The default schedule, repaired when it does not lower (the search's own repair), measured.
std::pair<Genome, search::ScheduleReport> measure_default(const search::KernelProblem& p) {
  Genome g = p.schedule_space().default_genome();
  auto rep = p.measure_one(g);
  if (rep.measurement && rep.measurement->status == Status::ok) return {g, rep};
  Rng rng(0x6d6f64656cULL);
  Genome r = g;
  if (p.repair(r, rng) && r != g) {
    auto rep2 = p.measure_one(r);
    if (rep2.measurement && rep2.measurement->status == Status::ok) return {r, rep2};
  }
  return {g, rep};
}

}  // namespace

Profile profile(const Model& m, const target::Target& t, const runner::Runner& r) {
  Profile p;
  for (std::size_t i = 0; i < m.kernels.size(); ++i) {
    const auto& k = m.kernels[i];
    KernelRow row;
    row.kernel = i;
    const auto a = ir::analyze(k.kernel);
    row.flops = a.flops;
    row.bytes = a.min_hbm_bytes;
    try {
      search::KernelProblem prob(k.kernel, t, r);
      auto [g, rep] = measure_default(prob);
      if (rep.invalid) {
        row.status = fmt::format("default schedule invalid: {} ({})", rep.invalid->code, rep.invalid->message);
      } else if (!rep.measurement || rep.measurement->status != Status::ok) {
        row.status = rep.measurement ? fmt::format("{}: {}", to_string(rep.measurement->status), rep.measurement->message)
                                     : std::string("not measured");
      } else {
        row.ok = true;
        row.default_ns = rep.measurement->latency_ns();
        row.total_ns = row.default_ns * static_cast<double>(k.count());
      }
    } catch (const std::exception& e) {
      row.status = e.what();
    }
    p.total_ns += row.total_ns;
    p.rows.push_back(std::move(row));
  }
  for (auto& row : p.rows) row.share = p.total_ns > 0 ? row.total_ns / p.total_ns : 0.0;
  return p;
}

std::vector<std::size_t> hot_rows(const Profile& p, double share) {
  std::vector<std::size_t> idx;
  for (std::size_t i = 0; i < p.rows.size(); ++i)
    if (p.rows[i].ok && p.rows[i].total_ns > 0) idx.push_back(i);
  std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return p.rows[a].total_ns > p.rows[b].total_ns; });
  std::vector<std::size_t> hot;
  double covered = 0;
  for (auto i : idx) {
    if (!hot.empty() && covered >= share - 1e-12) break;
    hot.push_back(i);
    covered += p.rows[i].share;
  }
  return hot;
}

std::vector<std::uint64_t> split_budget(const Profile& p, const std::vector<std::size_t>& hot, std::uint64_t budget,
                                        std::uint64_t min_each) {
  double sum = 0;
  for (auto i : hot) sum += p.rows[i].total_ns;
  std::vector<std::uint64_t> out;
  for (auto i : hot) {
    const double f = sum > 0 ? p.rows[i].total_ns / sum : 1.0 / static_cast<double>(hot.size());
    out.push_back(std::max<std::uint64_t>(min_each, static_cast<std::uint64_t>(std::llround(f * static_cast<double>(budget)))));
  }
  return out;
}

TuneResult tune(const Model& m, const Profile& p, const target::Target& t, const runner::Runner& r, const TuneOptions& opt) {
  TuneResult res;
  const auto hot = hot_rows(p, opt.share);
  const auto budgets = split_budget(p, hot, opt.budget);
  auto log = [&](const std::string& s) {
    if (opt.log) opt.log(s);
  };
  res.after_row_ns.resize(p.rows.size());
  for (std::size_t i = 0; i < p.rows.size(); ++i) res.after_row_ns[i] = p.rows[i].total_ns;
  const std::string runner_id = r.traits().identity;
  res.hot = hot.size();
  const auto stop_requested = [&] { return opt.should_stop && opt.should_stop(); };
  for (std::size_t h = 0; h < hot.size(); ++h) {
    if (stop_requested()) {
      res.interrupted = true;
      break;
    }
    const auto& row = p.rows[hot[h]];
    const auto& mk = m.kernels[row.kernel];
    search::KernelProblem prob(mk.kernel, t, r);
    TunedKernel tk;
    tk.row = hot[h];
    tk.budget = budgets[h];
    tk.before_ns = row.default_ns;
    tk.after_ns = row.default_ns;
    // A verified record of this very kernel on this target and runner: not searched again.
    if (opt.db) {
      records::Query q;
      q.kernel_hash = mk.hash;
      q.target = t.name;
      q.runner = runner_id;
      q.ok_only = true;
      q.best_first = true;
      for (const auto& rec : opt.db->find(q)) {
        if (!rec.verified || rec.target_hash != t.hash()) continue;
        auto g = prob.schedule_space().parse(rec.schedule, "records");
        if (!g) continue;
        auto rep = prob.measure_one(*g);
        if (!rep.measurement || rep.measurement->status != Status::ok) continue;
        tk.source = "records";
        tk.schedule = rec.schedule;
        tk.verification.ok = true;
        tk.verification.method = "records";
        tk.verification.detail = fmt::format("verified when recorded (record {})", rec.id);
        tk.after_ns = std::min(row.default_ns, rep.measurement->latency_ns());
        break;
      }
    }
    if (tk.source.empty()) {
      log(fmt::format("searching {} ({}, {}) with {} evaluations ({:.1f}% of the time)", mk.kind, mk.op, mk.shape, tk.budget,
                      100 * row.share));
      search::SearchOptions so;
      so.config = search::default_search_config(opt.seed, opt.threads);
      so.config.budget.max_evaluations = tk.budget;
      so.seed_schedules.push_back(prob.to_text(prob.schedule_space().default_genome()));
      std::optional<records::Recorder> recorder;
      if (opt.db) {
        for (const auto& g : records::warm_start(*opt.db, prob.schedule_space(), 8).genomes)
          so.seed_schedules.push_back(prob.to_text(g));
        recorder.emplace(*opt.db, prob, opt.version);
      }
      search::SearchHooks hooks;
      if (recorder) {
        hooks.on_evaluation = [&](const evo::Individual& ind) { recorder->record(ind); };
        hooks.on_generation = [&] { recorder->flush(); };  // a kill loses at most the batch in flight
      }
      if (opt.should_stop) hooks.should_stop = opt.should_stop;
      auto out = search::run_search(prob, so, hooks);
      tk.source = "search";
      if (out && out->stopped) res.interrupted = true;
      if (!out) {
        tk.verification.message = out.error();
      } else {
        tk.evaluations = out->history.size();
        tk.verification = out->verification;
        if (out->best && !out->best->eval.fitness.empty()) {
          const double ns = out->best->eval.fitness[0];
          tk.schedule = out->best_schedule;
          if (ns < row.default_ns) tk.after_ns = ns;
          if (recorder)
            recorder->record_verified(out->best->genome, ns, out->best_measurement ? out->best_measurement->fraction_of_peak : 0.0);
        }
        if (recorder) recorder->flush();
      }
      log(fmt::format("  {}: {:.0f} ns -> {:.0f} ns ({:.2f}x), {}{}", mk.kind, tk.before_ns, tk.after_ns, tk.speedup(),
                      tk.verification.ok ? "verified (" + tk.verification.method + ")" : "not verified: " + tk.verification.message,
                      res.interrupted ? fmt::format("; stopped after {} of {} evaluations", tk.evaluations, tk.budget) : ""));
    }
    res.after_row_ns[hot[h]] = tk.after_ns * static_cast<double>(mk.count());
    res.tuned.push_back(std::move(tk));
    if (res.interrupted) break;
  }
  for (std::size_t i = 0; i < p.rows.size(); ++i) {
    res.before_ns += p.rows[i].total_ns;
    res.after_ns += res.after_row_ns[i];
  }
  return res;
}

}  // namespace kevo::model
