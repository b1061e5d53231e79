// Micro benchmarks of every layer a search goes through (issue 9): IR parsing, schedule-space
// sampling, lowering (up to a 4096x8192x8192 matmul), simulation throughput in simulated
// instructions per second, the engine's own overhead per evaluation on a
// no-op problem, and the cost of checkpointing. Counters carry the figures the results table
// quotes (instructions, instr/s); Google Benchmark's JSON output is what bench/make_results.py reads.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "kevo/evo/engine.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/ir/workloads.hpp"
#include "kevo/lower/lower.hpp"
#include "kevo/runner/sim.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/target/target.hpp"

namespace {

using namespace kevo;  // NOLINT: a benchmark program

ir::Kernel kernel(const std::string& spec) {
  auto k = ir::workload(spec);
  if (!k) throw std::runtime_error(spec + ": " + k.error());
  return std::move(k).value();
}
const target::Target& trn2() {
  static const target::Target t = [] {
    auto r = target::load_target("trn2");
    if (!r) throw std::runtime_error(r.error().headline());
    return std::move(r).value();
  }();
  return t;
}

const char* const kSpecs[] = {
    "matmul:M=512,N=512,K=512,dtype=bf16",          // 0
    "matmul:M=2048,N=2048,K=2048,dtype=bf16",       // 1
    "matmul:M=4096,N=8192,K=8192,dtype=bf16",       // 2
    "attention:B=1,H=1,S=2048,D=128,causal=1,dtype=bf16",  // 3
    "softmax:R=4096,C=32000,dtype=fp32",            // 4
    "swiglu:M=1024,D=2048,F=5632,dtype=bf16",       // 5
};

// ---- IR parsing -------------------------------------------------------------------------------
void BM_ParseKernel(benchmark::State& st) {
  const std::string text = ir::print_kernel(kernel(kSpecs[st.range(0)]));
  for (auto _ : st) {
    auto k = ir::parse_kernel(text);
    if (!k) st.SkipWithError("parse failed");
    benchmark::DoNotOptimize(k);
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * text.size()));
  st.SetLabel(kSpecs[st.range(0)]);
}
BENCHMARK(BM_ParseKernel)->Arg(1)->Arg(3)->Arg(5);

// ---- schedule space ---------------------------------------------------------------------------
void BM_DeriveSpace(benchmark::State& st) {
  const auto k = kernel(kSpecs[st.range(0)]);
  for (auto _ : st) benchmark::DoNotOptimize(schedule::ScheduleSpace::derive(k, trn2()));
  st.SetLabel(kSpecs[st.range(0)]);
}
BENCHMARK(BM_DeriveSpace)->Arg(1)->Arg(3)->Arg(5);

void BM_SampleGenome(benchmark::State& st) {
  const auto space = schedule::ScheduleSpace::derive(kernel(kSpecs[st.range(0)]), trn2());
  Rng rng(1);
  for (auto _ : st) {
    Genome g = space.genes().random(rng);
    space.repair(g, rng);
    benchmark::DoNotOptimize(g);
  }
  st.SetItemsProcessed(st.iterations());
  st.SetLabel(kSpecs[st.range(0)]);
}
BENCHMARK(BM_SampleGenome)->Arg(1)->Arg(3)->Arg(5);

// Random genome + repair + lowering: the cost of one static-validity check in the search.
void BM_SampleAndValidate(benchmark::State& st) {
  const auto space = schedule::ScheduleSpace::derive(kernel(kSpecs[st.range(0)]), trn2());
  Rng rng(2);
  std::int64_t valid = 0;
  for (auto _ : st) {
    Genome g = space.genes().random(rng);
    space.repair(g, rng);
    auto p = lower::lower(space, g);
    valid += p ? 1 : 0;
    benchmark::DoNotOptimize(p);
  }
  st.counters["valid_share"] = static_cast<double>(valid) / static_cast<double>(st.iterations());
  st.SetLabel(kSpecs[st.range(0)]);
}
BENCHMARK(BM_SampleAndValidate)->Arg(0)->Arg(1)->Arg(4)->Unit(benchmark::kMicrosecond);

// ---- lowering ---------------------------------------------------------------------------------
void BM_Lower(benchmark::State& st) {
  const auto space = schedule::ScheduleSpace::derive(kernel(kSpecs[st.range(0)]), trn2());
  const Genome g = space.default_genome();
  std::size_t n = 0;
  for (auto _ : st) {
    auto p = lower::lower(space, g);
    if (!p) {
      st.SkipWithError(p.error().str().c_str());
      break;
    }
    n = p->instrs.size();
    benchmark::DoNotOptimize(p);
  }
  st.counters["instructions"] = static_cast<double>(n);
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * n));
  st.SetLabel(kSpecs[st.range(0)]);
}
BENCHMARK(BM_Lower)->Arg(0)->Arg(1)->Arg(2)->Arg(3)->Arg(4)->Arg(5)->Unit(benchmark::kMillisecond);

// ---- simulation -------------------------------------------------------------------------------
void BM_Simulate(benchmark::State& st) {
  const auto space = schedule::ScheduleSpace::derive(kernel(kSpecs[st.range(0)]), trn2());
  auto p = lower::lower(space, space.default_genome());
  if (!p) {
    st.SkipWithError(p.error().str().c_str());
    return;
  }
  const auto params = runner::default_sim_params(trn2());
  for (auto _ : st) benchmark::DoNotOptimize(runner::simulate(*p, trn2(), params));
  // items/s = simulated instructions per second (issue 5's target: >= 5e6 per core)
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * p->instrs.size()));
  st.counters["instructions"] = static_cast<double>(p->instrs.size());
  st.SetLabel(kSpecs[st.range(0)]);
}
BENCHMARK(BM_Simulate)->Arg(0)->Arg(1)->Arg(2)->Arg(3)->Arg(4)->Arg(5)->Unit(benchmark::kMillisecond);

// ---- interpreter ------------------------------------------------------------------------------
// Interpreter throughput is measured by bench/bench_interpreter.cpp (the verify module's own
// benchmark); bench/run_all.sh runs it and the results table quotes it beside these.

// ---- engine -----------------------------------------------------------------------------------
// A problem whose evaluation costs nothing: what is left is the engine's own work per evaluation
// (selection, variation, dedup, bookkeeping, observers).
struct NoopProblem {
  Space s = [] {
    Space sp;
    for (char c = 'a'; c < 'a' + 12; ++c) sp.add(Gene::ordinal(std::string(1, c), {1, 2, 4, 8, 16, 32, 64, 128}));
    sp.add(Gene::permutation("order", {"a", "b", "c", "d", "e"}));
    return sp;
  }();
  [[nodiscard]] const Space& space() const { return s; }
  [[nodiscard]] std::vector<evo::Evaluation> evaluate(std::span<const Genome> gs) const {
    std::vector<evo::Evaluation> out(gs.size());
    for (std::size_t i = 0; i < gs.size(); ++i) {
      double f = 0;
      for (auto v : gs[i]) f += v;
      out[i].fitness = {f};
      out[i].descriptors = {static_cast<double>(gs[i][0]), static_cast<double>(gs[i][1])};
    }
    return out;
  }
  [[nodiscard]] bool deterministic() const { return true; }
  [[nodiscard]] evo::ThreadSafety thread_safety() const { return evo::ThreadSafety::constant; }
};

void engine_run(benchmark::State& st, evo::Algorithm alg, bool checkpoint, bool sync) {
  const std::uint64_t evals = 4096;
  const auto dir = std::filesystem::temp_directory_path() / "kevo-bench-layers-ckpt";
  std::uint64_t done = 0;
  for (auto _ : st) {
    st.PauseTiming();
    std::filesystem::remove_all(dir);
    evo::Config cfg;
    cfg.algorithm = alg;
    cfg.seed = 1;
    cfg.budget.max_evaluations = evals;
    if (checkpoint) {
      cfg.checkpoint.dir = dir;
      cfg.checkpoint.sync = sync;
    }
    st.ResumeTiming();
    evo::Engine e(evo::Problem(NoopProblem{}), cfg);
    auto r = e.run();
    done += r.evaluations;
  }
  std::filesystem::remove_all(dir);
  // items/s = evaluations per second; the per-evaluation overhead is its inverse
  st.SetItemsProcessed(static_cast<std::int64_t>(done));
  st.counters["us_per_eval"] =
      benchmark::Counter(static_cast<double>(done) * 1e-6, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
void BM_EngineNoop_GA(benchmark::State& st) { engine_run(st, evo::Algorithm::ga, false, false); }
void BM_EngineNoop_MapElites(benchmark::State& st) { engine_run(st, evo::Algorithm::map_elites, false, false); }
void BM_EngineNoop_Random(benchmark::State& st) { engine_run(st, evo::Algorithm::random, false, false); }
// Checkpointing: the journal (one record per evaluation, flushed per batch, optionally fdatasync'd)
// plus a snapshot every generation; the difference to BM_EngineNoop_GA is the checkpoint's cost.
void BM_EngineCheckpoint_NoSync(benchmark::State& st) { engine_run(st, evo::Algorithm::ga, true, false); }
void BM_EngineCheckpoint_Sync(benchmark::State& st) { engine_run(st, evo::Algorithm::ga, true, true); }
BENCHMARK(BM_EngineNoop_GA)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EngineNoop_MapElites)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EngineNoop_Random)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EngineCheckpoint_NoSync)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EngineCheckpoint_Sync)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
