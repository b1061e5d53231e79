// scaling: how kevo's search cost grows (issue 9).
//   default mode: wall time and evaluations/s of the same deterministic search on 1 and 2 threads
//     (and whether both histories are bit-identical); lowering and simulation time against
//     instruction count over problem sizes.
//   --rss: peak resident memory of one long search (100,000 evaluations of a 4096^3 matmul on
//     simulated trn2) with its history streamed to a checkpoint journal on disk and the measurement
//     cache bounded. Run it in its own process so ru_maxrss is that search's alone.
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kevo/verify/interpreter.hpp"
#include "kevo/core/io.hpp"
#include "kevo/evo/engine.hpp"
#include "kevo/ir/workloads.hpp"
#include "kevo/lower/lower.hpp"
#include "kevo/runner/sim.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/search/kernel_problem.hpp"
#include "kevo/target/target.hpp"
#include "size_cap.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace kevo;  // NOLINT: a program

namespace {

// The unrolled-size limit floor (size_cap.hpp); the same as search_quality's default.
constexpr std::int64_t kCap = 4096;

ir::Kernel kernel(const std::string& spec) {
  auto k = ir::workload(spec);
  if (!k) throw Error(fmt::format("workload {}: {}", spec, k.error()));
  return std::move(k).value();
}
target::Target tgt(const std::string& name) {
  auto t = target::load_target(name);
  if (!t) throw Error(fmt::format("target {}: {}", name, t.error().headline()));
  return std::move(t).value();
}

json threads_part(std::uint64_t evals, const std::string& spec) {
  json rows = json::array();
  std::uint64_t hash1 = 0;
  double wall1 = 0;
  for (int th : {1, 2}) {
    search::KernelProblemOptions po;
    po.cache_capacity = 0;  // each evaluation really lowers and simulates
    po.max_tile_iterations = bench::size_cap(kernel(spec), tgt("trn2"), kCap);
    search::KernelProblem kp(kernel(spec), tgt("trn2"), runner::Runner(runner::SimRunner{}), po);
    evo::Config cfg;
    cfg.algorithm = evo::Algorithm::ga;
    cfg.seed = 7;
    cfg.threads = th;
    cfg.budget.max_evaluations = evals;
    const auto t0 = std::chrono::steady_clock::now();
    evo::Engine engine(evo::Problem(kp), cfg);
    auto res = engine.run();
    const double wall = bench::seconds_since(t0);
    if (th == 1) {
      hash1 = res.history_hash;
      wall1 = wall;
    }
    rows.push_back({{"threads", th},
                    {"evaluations", res.evaluations},
                    {"wall_s", wall},
                    {"evals_per_s", static_cast<double>(res.evaluations) / wall},
                    {"speedup", wall1 / wall},
                    {"history_hash", fmt::format("{:016x}", res.history_hash)},
                    {"same_history_as_1_thread", res.history_hash == hash1}});
    fmt::print(stderr, "[threads {}] {} evals in {:.2f} s ({:.0f}/s)\n", th, res.evaluations, wall,
               static_cast<double>(res.evaluations) / wall);
  }
  return {{"spec", spec}, {"target", "trn2"}, {"algorithm", "ga"}, {"rows", rows}};
}

json sizes_part(double budget_s) {
  const std::vector<std::string> specs = {
      "matmul:M=256,N=256,K=256,dtype=bf16",    "matmul:M=512,N=512,K=512,dtype=bf16",
      "matmul:M=1024,N=1024,K=1024,dtype=bf16", "matmul:M=2048,N=2048,K=2048,dtype=bf16",
      "matmul:M=4096,N=4096,K=4096,dtype=bf16", "matmul:M=4096,N=8192,K=8192,dtype=bf16",
      "matmul:M=8192,N=8192,K=8192,dtype=bf16", "softmax:R=1024,C=4096,dtype=fp32",
      "softmax:R=4096,C=32000,dtype=fp32",      "layernorm:R=8192,C=4096,dtype=fp32",
      "attention:B=1,H=1,S=2048,D=128,causal=0,dtype=bf16", "attention:B=1,H=8,S=2048,D=128,causal=0,dtype=bf16"};
  const auto t = tgt("trn2");
  const auto params = runner::default_sim_params(t);
  json rows = json::array();
  for (const auto& spec : specs) {
    try {
      auto k = kernel(spec);
      auto space = schedule::ScheduleSpace::derive(k, t);
      const auto g = space.default_genome();
      auto p = lower::lower(space, g);
      if (!p) {
        rows.push_back({{"spec", spec}, {"error", p.error().str()}});
        continue;
      }
      const double lower_s = bench::time_median([&] { (void)lower::lower(space, g); }, 3, 100, budget_s);
      const double sim_s = bench::time_median([&] { (void)runner::simulate(*p, t, params); }, 3, 100, budget_s);
      const double n = static_cast<double>(p->instrs.size());
      rows.push_back({{"spec", spec},
                      {"instructions", p->instrs.size()},
                      {"lower_ms", lower_s * 1e3},
                      {"simulate_ms", sim_s * 1e3},
                      {"lower_ns_per_instr", lower_s * 1e9 / n},
                      {"simulate_ns_per_instr", sim_s * 1e9 / n},
                      {"sim_minstr_per_s", n / sim_s * 1e-6}});
      fmt::print(stderr, "[size] {}: {} instrs, lower {:.2f} ms, simulate {:.2f} ms\n", spec, p->instrs.size(),
                 lower_s * 1e3, sim_s * 1e3);
    } catch (const std::exception& e) {
      rows.push_back({{"spec", spec}, {"error", e.what()}});
    }
  }
  return {{"target", "trn2"}, {"schedule", "default schedule of each workload"}, {"rows", rows}};
}

json rss_part(std::uint64_t evals, const fs::path& dir, int threads) {
  const std::string spec = "matmul:M=4096,N=4096,K=4096,dtype=bf16";
  fs::remove_all(dir);
  search::KernelProblemOptions po;
  po.cache_capacity = 4096;  // bounded measurement cache
  // Schedules at most as large as the largest tiles allow (8,192 tile iterations; no 4,096 floor): a 100,000-
  // evaluation search then fits the suite's half hour; memory does not depend on it.
  po.max_tile_iterations = bench::size_cap(kernel(spec), tgt("trn2"), 0, 1);
  search::KernelProblem kp(kernel(spec), tgt("trn2"), runner::Runner(runner::SimRunner{}), po);
  evo::Config cfg;
  cfg.algorithm = evo::Algorithm::ga;
  cfg.seed = 3;
  cfg.threads = threads;
  cfg.budget.max_evaluations = evals;
  cfg.checkpoint.dir = dir;  // history streamed to the journal, not kept by the caller
  cfg.checkpoint.snapshot_interval = 50;
  const double rss0 = bench::peak_rss_bytes();
  const auto t0 = std::chrono::steady_clock::now();
  evo::Engine engine(evo::Problem(kp), cfg);
  std::uint64_t seen = 0;
  evo::Observer obs;
  obs.on_generation = [&](const evo::GenerationStats& s) {
    if (s.evaluations / 10000 != seen / 10000)
      fmt::print(stderr, "[rss] {} evals, {:.0f} s, peak RSS {:.0f} MiB\n", s.evaluations, bench::seconds_since(t0),
                 bench::peak_rss_bytes() / (1 << 20));
    seen = s.evaluations;
  };
  engine.add_observer(obs);
  auto res = engine.run();
  const double wall = bench::seconds_since(t0);
  std::uintmax_t disk = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) disk += e.file_size();
  const double rss = bench::peak_rss_bytes();
  json j = {{"spec", spec},
            {"target", "trn2"},
            {"threads", threads},
            {"evaluations", res.evaluations},
            {"valid", res.valid},
            {"duplicates_skipped", res.duplicates},
            {"stop_reason", std::string(evo::to_string(res.stop_reason))},
            {"wall_s", wall},
            {"peak_rss_bytes", rss},
            {"rss_before_search_bytes", rss0},
            {"checkpoint_bytes", disk},
            {"cache_capacity", po.cache_capacity},
            {"max_tile_iterations", po.max_tile_iterations},
            {"goal_bytes", 1024.0 * 1024 * 1024}};
  if (res.best) j["best_fop"] = res.best->eval.metric("fraction_of_peak");
  fs::remove_all(dir);
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  kevo::verify::configure_process_blas();  // an application: one-thread OpenBLAS for the interpreter
  try {
    bench::Args a(argc, argv, {"--quick", "--rss"}, {"--evals", "--rss-evals", "--threads", "--out", "--dir", "--time-budget"});
    const bool quick = a.flag("--quick");
    const std::string out = a.str("--out", a.flag("--rss") ? "scaling_rss.json" : "scaling.json");
    json j;
    if (a.flag("--rss")) {
      const auto evals = static_cast<std::uint64_t>(a.integer("--rss-evals", quick ? 2000 : 100000));
      const fs::path dir = a.str("--dir", (fs::temp_directory_path() / "kevo-rss-checkpoint").string());
      j = {{"benchmark", "scaling_rss"}, {"rss", rss_part(evals, dir, static_cast<int>(a.integer("--threads", 2)))}};
    } else {
      const auto evals = static_cast<std::uint64_t>(a.integer("--evals", quick ? 128 : 1000));
      j = {{"benchmark", "scaling"},
           {"threads", threads_part(evals, "matmul:M=2048,N=2048,K=2048,dtype=bf16")},
           {"sizes", sizes_part(a.real("--time-budget", quick ? 0.2 : 1.0))}};
    }
    write_file_atomic(out, j.dump(1));
    fmt::print(stderr, "scaling: wrote {}\n", out);
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "scaling: {}\n", e.what());
    return 1;
  }
}
