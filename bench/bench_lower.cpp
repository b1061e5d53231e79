// Lowering speed: the evolution engine and simulator lower thousands of genomes per second, and
// the largest tutorial program (4096x8192x8192 matmul) must lower in milliseconds.
#include <benchmark/benchmark.h>

#include <string>

#include "kevo/core/io.hpp"
#include "kevo/ir/workloads.hpp"
#include "kevo/lower.hpp"
#include "kevo/schedule.hpp"
#include "kevo/target.hpp"

namespace {

// Fresh: lower() into a new program each time (allocating and page-faulting its storage).
// Reused: lower_into() one program object, as a search loop does (search::KernelProblem).
void lower_file(benchmark::State& st, const char* workload, const char* file, bool reuse) {
  const auto t = kevo::target::load_target("trn1").value();
  const auto s = kevo::schedule::ScheduleSpace::derive(kevo::ir::workload(workload).value(), t);
  const auto g = s.parse(kevo::read_file(std::string(KEVO_SOURCE_DIR) + "/examples/schedules/" + file)).value();
  std::size_t n = 0;
  kevo::lower::TileProgram prog;
  for (auto _ : st) {
    if (reuse) {
      if (!kevo::lower::lower_into(s, g, prog)) st.SkipWithError("invalid");
      n = prog.instrs.size();
      benchmark::DoNotOptimize(prog.instrs.data());
    } else {
      auto p = kevo::lower::lower(s, g);
      n = p->instrs.size();
      benchmark::DoNotOptimize(p);
    }
  }
  st.counters["instructions"] = static_cast<double>(n);
  st.counters["instr_per_s"] = benchmark::Counter(static_cast<double>(n) * static_cast<double>(st.iterations()),
                                                  benchmark::Counter::kIsRate);
}

constexpr const char* kBig = "matmul:M=4096,N=8192,K=8192,dtype=bf16,layout=tn";
void BM_LowerTutorial5_4096x8192x8192(benchmark::State& st) { lower_file(st, kBig, "nki_tutorial_5_optimized.schedule", false); }
void BM_LowerTutorial2_4096x8192x8192(benchmark::State& st) { lower_file(st, kBig, "nki_tutorial_2_tiled.schedule", false); }
void BM_LowerTutorial5_4096x8192x8192_reused(benchmark::State& st) { lower_file(st, kBig, "nki_tutorial_5_optimized.schedule", true); }
void BM_LowerTutorial2_4096x8192x8192_reused(benchmark::State& st) { lower_file(st, kBig, "nki_tutorial_2_tiled.schedule", true); }

// Random genomes of a mid-size matmul and a fused row kernel: the evolution engine's workload.
void random_genomes(benchmark::State& st, const char* workload) {
  const auto t = kevo::target::load_target("trn1").value();
  const auto s = kevo::schedule::ScheduleSpace::derive(kevo::ir::workload(workload).value(), t);
  std::uint64_t i = 0, valid = 0;
  for (auto _ : st) {
    kevo::Rng rng(1, i++);
    auto g = s.genes().random(rng);
    if (s.repair(g, rng)) {
      auto p = kevo::lower::lower(s, g);
      valid += p.has_value();
      benchmark::DoNotOptimize(p);
    }
  }
  st.counters["valid_share"] = static_cast<double>(valid) / static_cast<double>(std::max<std::uint64_t>(1, i));
}
void BM_LowerRandom_matmul1024(benchmark::State& st) { random_genomes(st, "matmul:M=1024,N=1024,K=1024,dtype=bf16"); }
void BM_LowerRandom_softmax(benchmark::State& st) { random_genomes(st, "softmax:R=1024,C=2048"); }

}  // namespace

BENCHMARK(BM_LowerTutorial5_4096x8192x8192)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LowerTutorial2_4096x8192x8192)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LowerTutorial5_4096x8192x8192_reused)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LowerTutorial2_4096x8192x8192_reused)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LowerRandom_matmul1024)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LowerRandom_softmax)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
