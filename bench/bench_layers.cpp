// Micro benchmarks of every layer a search goes through (issue 9): IR parsing, schedule-space
// sampling, lowering (default schedules up to a 4096x8192x8192 matmul, attention, softmax, SwiGLU)
// and simulation throughput in simulated instructions per second. The engine's overhead and
// checkpoint cost (bench_evo), interpreter (bench_interpreter), tutorial-schedule lowering
// (bench_lower) and matmul simulation (bench_sim) are the module helpers' benchmarks. Counters
// carry the figures the results table quotes; Google Benchmark's JSON is what make_results.py reads.
#include <benchmark/benchmark.h>

#include <stdexcept>
#include <string>
#include <vector>

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
// Only a small matmul: random genomes of large shapes can unroll into millions of instructions
// (see bench/search_quality/size_cap.hpp), which measures that blow-up, not the check.
BENCHMARK(BM_SampleAndValidate)->Arg(0)->Unit(benchmark::kMicrosecond);

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
// Matmuls up to 4096x8192x8192 with the tutorial schedules: bench_lower.cpp. Here the default
// schedules, including the big matmul's, and the non-matmul workloads.
BENCHMARK(BM_Lower)->Arg(2)->Arg(3)->Arg(4)->Arg(5)->Unit(benchmark::kMillisecond);

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
// Matmuls 1024-4096 and the tutorial schedules: bench_sim.cpp. Here the rest.
BENCHMARK(BM_Simulate)->Arg(2)->Arg(3)->Arg(4)->Arg(5)->Unit(benchmark::kMillisecond);

// ---- interpreter ------------------------------------------------------------------------------
// Interpreter throughput is measured by bench/bench_interpreter.cpp (the verify module's own
// benchmark); bench/run_all.sh runs it and the results table quotes it beside these.

// ---- engine and checkpoints ---------------------------------------------------------------------
// The engine's overhead per evaluation on a no-op problem, its 2-thread speed-up and the cost of
// checkpointing (journal + snapshots) are bench/bench_evo.cpp's; lowering the NKI tutorial's
// 4096x8192x8192 schedules is in bench/bench_lower.cpp and matmul simulation in bench/bench_sim.cpp.
// bench/run_all.sh runs them all and the results table quotes them next to these.

}  // namespace

BENCHMARK_MAIN();
