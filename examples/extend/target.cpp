// examples/extend/target.cpp: a target of the user's own. A target is data (docs/TARGETS.md), so
// adding one is writing a JSON file, and a program can write it too: here a what-if study of a
// NeuronCore with a quarter of trn2's SBUF, derived from the shipped trn2 file. kevo derives the
// schedule space, checks validity and simulates from the file alone; nothing about the hardware
// is compiled in.
//   target [DIR]   writes DIR/trn2-small-sbuf.json (default: the system's temporary directory),
//                  shows that a misspelt field is a located error, searches the same matmul on
//                  trn2 and on the variant, and says what trn2's winner does on the variant.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "kevo/ir.hpp"
#include "kevo/runner.hpp"
#include "kevo/search.hpp"
#include "kevo/target.hpp"

namespace {

struct Outcome {
  std::string schedule;
  double latency_us = 0, share_of_peak = 0;
};

// GA over the kernel's space on `t`, simulated; the winner verified by kevo before it is named.
bool search_on(const kevo::ir::Kernel& k, const kevo::target::Target& t, Outcome& out) {
  namespace search = kevo::search;
  const search::KernelProblem problem(k, t, kevo::runner::SimRunner{});
  search::SearchOptions opt;
  opt.config.seed = 1;
  opt.config.population = 24;
  opt.config.budget.max_evaluations = 240;
  auto r = search::run_search(problem, opt);
  if (!r || !r->best) {
    std::fprintf(stderr, "target: the search on %s found no verified schedule: %s\n", t.name.c_str(),
                 !r ? r.error().c_str() : r->verification.message.c_str());
    return false;
  }
  out.schedule = r->best_schedule;
  const double ns = r->best->eval.fitness[0];
  out.latency_us = ns / 1e3;
  out.share_of_peak = static_cast<double>(kevo::ir::analyze(k).contraction_flops) / (ns * 1e-9) / t.peak_tensor_flops(kevo::ir::DType::bf16);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  using nlohmann::json;
  const fs::path dir = argc > 1 ? fs::path(argv[1]) : fs::temp_directory_path();
  fs::create_directories(dir);

  // 1. The variant: trn2's file with the SBUF cut to 48 KiB per partition, its source saying so.
  json j = json::parse(kevo::target::builtin_target_json("trn2"));
  j["name"] = "trn2-small-sbuf";
  j["memory"]["sbuf_bytes_per_partition"] = 48 * 1024;
  j["sources"]["memory"] = "what-if study: trn2 (targets/trn2.json) with 48 KiB of SBUF per partition instead of 192";
  const fs::path file = dir / "trn2-small-sbuf.json";
  std::ofstream(file) << j.dump(2) << '\n';
  auto small = kevo::target::load_target(file.string());
  if (!small) {
    std::fprintf(stderr, "target: %s\n", small.error().str().c_str());
    return 2;
  }
  std::printf("target %s: loaded from %s, SBUF %lld KiB per partition\n", small->name.c_str(), file.string().c_str(),
              static_cast<long long>(small->sbuf_bytes_per_partition / 1024));

  // 2. A mistake in a target file is an error naming the file, line and field; never a default.
  json bad = j;
  bad["memory"]["psum_bankz"] = 8;
  const auto rejected = kevo::target::parse_target(bad.dump(2), "bad.json");
  if (rejected) {
    std::fprintf(stderr, "target: a misspelt field was accepted\n");
    return 1;
  }
  std::printf("a misspelt field: %s\n", rejected.error().str().c_str());

  // 3. The same search on both; the space, validity and costs follow the file.
  auto kernel = kevo::ir::workload("matmul:M=2048,N=2048,K=2048,dtype=bf16");
  auto trn2 = kevo::target::load_target("trn2");
  if (!kernel || !trn2) {
    std::fprintf(stderr, "target: %s\n", !kernel ? kernel.error().c_str() : trn2.error().str().c_str());
    return 2;
  }
  Outcome on_trn2, on_small;
  if (!search_on(*kernel, *trn2, on_trn2) || !search_on(*kernel, *small, on_small)) return 1;
  for (const auto* o : {&on_trn2, &on_small})
    std::printf("best on %s: %.1f us, %.1f%% of the Tensor-engine peak\n  %s\n",
                o == &on_trn2 ? "trn2" : small->name.c_str(), o->latency_us, 100.0 * o->share_of_peak,
                o->schedule.c_str());

  // 4. trn2's winner, written as schedule text, on the variant: lowered against its SBUF.
  const kevo::search::KernelProblem small_problem(*kernel, *small, kevo::runner::SimRunner{});
  const auto genome = small_problem.schedule_space().parse(on_trn2.schedule);
  if (!genome) {
    std::printf("trn2's winner on %s: not in its space (%s)\n", small->name.c_str(), genome.error().str().c_str());
    return 0;
  }
  const auto rep = small_problem.measure_one(*genome);
  if (rep.invalid)
    std::printf("trn2's winner on %s: invalid, %s\n", small->name.c_str(), rep.invalid->str().c_str());
  else if (rep.measurement)
    std::printf("trn2's winner on %s: valid, %.1f us\n", small->name.c_str(), rep.measurement->latency_ns() / 1e3);
  return 0;
}
