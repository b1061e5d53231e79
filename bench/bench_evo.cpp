// Engine overhead and parallel scaling of kevo::evo.
//   BM_EngineOverhead: GA on a no-op problem; the time per evaluation is the engine's own cost
//     (breeding, dedup, bookkeeping). Target <= 5 us.
//   BM_EvaluationDominated/threads: each evaluation burns ~200 us of CPU; compare threads 1 vs 2
//     for the speed-up (target >= 1.8x on a machine with two idle cores).
//   BM_Checkpointed/sync: the same GA with a journal and snapshots (sync 0: write only; 1: fdatasync).
#include <benchmark/benchmark.h>

#include <chrono>
#include <filesystem>
#include <unistd.h>

#include <fmt/format.h>

#include "kevo/evo.hpp"

namespace {

using namespace kevo;
using namespace kevo::evo;

struct NoOp {
  Space sp;
  int spin_us = 0;
  explicit NoOp(int spin = 0) : spin_us(spin) {
    std::vector<std::int64_t> v;
    for (int i = 0; i < 100; ++i) v.push_back(i);
    for (int g = 0; g < 10; ++g) sp.add(Gene::ordinal(fmt::format("g{}", g), v));
  }
  const Space& space() const { return sp; }
  bool deterministic() const { return true; }
  ThreadSafety thread_safety() const { return ThreadSafety::constant; }
  std::vector<Evaluation> evaluate(std::span<const Genome> gs) const {
    std::vector<Evaluation> out(gs.size());
    for (std::size_t i = 0; i < gs.size(); ++i) {
      double f = 0;
      for (auto x : gs[i]) f += x;
      if (spin_us) {  // CPU-bound work standing in for a simulator
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
        volatile double sink = 0;
        while (std::chrono::steady_clock::now() < until)
          for (int k = 0; k < 64; ++k) sink = sink + k * 1e-9;
      }
      out[i].fitness = {f};
    }
    return out;
  }
};

Config config(std::uint64_t evals, int threads) {
  Config c;
  c.algorithm = Algorithm::ga;
  c.seed = 1;
  c.population = 64;
  c.threads = threads;
  c.budget.max_evaluations = evals;
  return c;
}

void BM_EngineOverhead(benchmark::State& st) {
  const std::uint64_t evals = 20000;
  Problem p(NoOp{});
  for (auto _ : st) {
    auto r = Engine(p, config(evals, 1)).run();
    benchmark::DoNotOptimize(r.history_hash);
  }
  st.counters["us_per_eval"] = benchmark::Counter(
      static_cast<double>(st.iterations() * evals) / 1e6, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_EngineOverhead)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_EngineOverheadMapElites(benchmark::State& st) {
  const std::uint64_t evals = 20000;
  Problem p(NoOp{});
  auto c = config(evals, 1);
  c.algorithm = Algorithm::map_elites;
  c.archive.bins = {10};
  for (auto _ : st) {
    auto r = Engine(p, c).run();
    benchmark::DoNotOptimize(r.history_hash);
  }
  st.counters["us_per_eval"] = benchmark::Counter(
      static_cast<double>(st.iterations() * evals) / 1e6, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_EngineOverheadMapElites)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_EvaluationDominated(benchmark::State& st) {
  const std::uint64_t evals = 2000;
  Problem p(NoOp{200});
  for (auto _ : st) {
    auto r = Engine(p, config(evals, static_cast<int>(st.range(0)))).run();
    benchmark::DoNotOptimize(r.history_hash);
  }
  st.counters["evals_per_s"] =
      benchmark::Counter(static_cast<double>(st.iterations() * evals), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EvaluationDominated)->Arg(1)->Arg(2)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Checkpointed(benchmark::State& st) {
  const std::uint64_t evals = 5000;
  Problem p(NoOp{});
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("kevo-bench-evo-{}", ::getpid());
  for (auto _ : st) {
    st.PauseTiming();
    std::filesystem::remove_all(dir);
    auto c = config(evals, 1);
    c.checkpoint.dir = dir;
    c.checkpoint.sync = st.range(0) != 0;
    st.ResumeTiming();
    auto r = Engine(p, c).run();
    benchmark::DoNotOptimize(r.history_hash);
  }
  std::filesystem::remove_all(dir);
  st.counters["us_per_eval"] = benchmark::Counter(
      static_cast<double>(st.iterations() * evals) / 1e6, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  // One journal write (and snapshot) per generation of 64.
  st.counters["ms_per_batch"] = benchmark::Counter(
      static_cast<double>(st.iterations() * evals) / 64.0 / 1e3, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_Checkpointed)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
