// Warm starts from tuning records (issue: records from matmul 2048^3, a search at 2304x2048x2560
// reaches the cold search's final best in <= 1/5 of its evaluations, median over 5 seeds).
// Per seed: a cold search of the source shape (--sources N: N searches with different seeds, the
// records a team accumulates over several tuning runs) writes its evaluations into a fresh records database;
// then, at the new shape, a cold search and a search seeded by records::warm_start, each with the
// same budget. Reported: the best of the transferred schedules at the new shape (records::transfer_schedule),
// the evaluations the warm search needs to reach the cold search's final best (the budget + 1 when
// it never does), and their ratio. Simulated trn2, GA, one thread.
//   warm_start [--budget N] [--seeds S] [--from-records N] [--sources N] [--json FILE]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>
#include <vector>

#include "kevo/evo/engine.hpp"
#include "kevo/ir/workloads.hpp"
#include "kevo/records.hpp"
#include "kevo/runner/sim.hpp"
#include "kevo/search/kernel_problem.hpp"
#include "kevo/target/target.hpp"

using namespace kevo;

namespace {

struct Run {
  double best = INFINITY;
  std::vector<double> curve;  // best so far after each evaluation
};

Run run_search(const search::KernelProblem& p, std::uint64_t seed, std::uint64_t budget, std::vector<Genome> seeds,
           records::Recorder* rec) {
  evo::Config cfg;
  cfg.seed = seed;
  cfg.budget.max_evaluations = budget;
  cfg.seeds = std::move(seeds);
  evo::Engine e(evo::Problem(p), cfg);
  Run r;
  evo::Observer o;
  o.on_evaluation = [&](const evo::Individual& ind) {
    if (ind.eval.ok()) r.best = std::min(r.best, ind.eval.fitness[0]);
    r.curve.push_back(r.best);
    if (rec) rec->record(ind);
  };
  e.add_observer(std::move(o));
  e.run();
  return r;
}

std::size_t evals_to_reach(const Run& r, double target) {
  for (std::size_t i = 0; i < r.curve.size(); ++i)
    if (r.curve[i] <= target * (1 + 1e-12)) return i + 1;
  return r.curve.size() + 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t budget = 2000;
  int seeds = 5;
  std::string json_out;
  std::size_t from_records = 8;
  int sources = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--budget" && i + 1 < argc) budget = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--seeds" && i + 1 < argc) seeds = std::atoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc) json_out = argv[++i];
    else if (a == "--sources" && i + 1 < argc) sources = std::max(1, std::atoi(argv[++i]));
    else if (a == "--from-records" && i + 1 < argc) from_records = std::strtoull(argv[++i], nullptr, 10);
    else {
      std::fprintf(stderr, "usage: warm_start [--budget N] [--seeds S] [--from-records N] [--sources N] [--json FILE]\n");
      return 2;
    }
  }
  const auto t = *target::load_target("trn2");
  const auto src = *ir::workload("matmul:M=2048,N=2048,K=2048,dtype=bf16");
  const auto dst = *ir::workload("matmul:M=2304,N=2048,K=2560,dtype=bf16");
  const search::KernelProblem psrc(src, t, runner::SimRunner{}), pdst(dst, t, runner::SimRunner{});
  nlohmann::json rows = nlohmann::json::array();
  std::vector<double> ratios;
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("kevo_warm_start_{}", ::getpid());
  for (int s = 0; s < seeds; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    std::filesystem::remove_all(dir);
    auto db = records::Database::open(dir / "records.db");
    if (!db) {
      std::fprintf(stderr, "warm_start: %s\n", db.error().c_str());
      return 1;
    }
    {
      records::Recorder rec(*db, psrc, "bench", 256);
      // Source searches: seed 100 + s, then (--sources > 1, a team's records accumulated over
      // several tuning runs of the same kernel) 1100 + s, 2100 + s, ...
      for (int j = 0; j < sources; ++j) run_search(psrc, 100 + 1000 * static_cast<std::uint64_t>(j) + s, budget, {}, &rec);
    }
    const Run cold = run_search(pdst, 200 + s, budget, {}, nullptr);
    const auto ws = records::warm_start(*db, pdst.schedule_space(), from_records);
    const Run warm = run_search(pdst, 200 + s, budget, ws.genomes, nullptr);
    const std::size_t need = evals_to_reach(warm, cold.best);
    auto at = [](const Run& r, std::size_t i) { return r.curve.empty() ? INFINITY : r.curve[std::min(i, r.curve.size()) - 1] / 1e3; };
    std::printf("  best so far (us) after 16/100/400/1000/all: cold %.2f %.2f %.2f %.2f %.2f | warm %.2f %.2f %.2f %.2f %.2f\n",
                at(cold, 16), at(cold, 100), at(cold, 400), at(cold, 1000), cold.best / 1e3, at(warm, 16), at(warm, 100),
                at(warm, 400), at(warm, 1000), warm.best / 1e3);
    // The transferred schedules as measured at the new shape: the warm search evaluates them first.
    const double seeds_best = ws.genomes.empty() ? INFINITY : at(warm, ws.genomes.size()) * 1e3;
    const double ratio = static_cast<double>(need) / static_cast<double>(budget);
    ratios.push_back(ratio);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("seed %d: cold best %.2f us after %llu; best transferred schedule %.2f us; warm reaches the cold best after %zu "
                "(%.3f of the budget), warm best %.2f us; %s; %.0f s\n",
                s, cold.best / 1e3, static_cast<unsigned long long>(budget), seeds_best / 1e3, need, ratio, warm.best / 1e3,
                ws.summary().c_str(), secs);
    std::fflush(stdout);
    rows.push_back({{"seed", s}, {"cold_best_ns", cold.best}, {"warm_best_ns", warm.best}, {"seeds_best_ns", seeds_best}, {"evaluations_to_cold_best", need},
                    {"ratio", ratio}, {"seeds_from_records", ws.genomes.size()}, {"warm_start", ws.summary()}});
  }
  std::filesystem::remove_all(dir);
  std::vector<double> sorted = ratios;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  std::printf("median evaluations to the cold best, as a share of the cold budget: %.3f (target <= 0.2)\n", median);
  if (!json_out.empty()) {
    nlohmann::json j{{"budget", budget}, {"seeds", seeds}, {"source", "matmul:M=2048,N=2048,K=2048,dtype=bf16"},
                     {"shape", "matmul:M=2304,N=2048,K=2560,dtype=bf16"}, {"sources", sources}, {"rows", rows}, {"median_ratio", median}};
    std::ofstream(json_out) << j.dump(2) << "\n";
  }
  return 0;
}
