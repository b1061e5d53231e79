// examples/extend/runner.cpp: a runner of the user's own -- here an analytic cost model standing in
// for a device harness -- plugged into a kernel search. kevo lowers every schedule; the runner only
// sees tile programs and returns measurements. The winner is still checked against the kernel's
// reference by kevo's interpreter before it is named (search::run_search).
//   runner    searches matmul 512x1024x512 bf16 on trn2 with the model, prints the winner and what
//             the simulator says of it.
#include <algorithm>
#include <cstdio>

#include "kevo/ir.hpp"
#include "kevo/runner.hpp"
#include "kevo/search.hpp"
#include "kevo/target.hpp"

namespace {

// max(HBM traffic / bandwidth, flops / Tensor peak) + a fixed cost per instruction. A plain class:
// measure(candidates) and traits() are all the runner concept asks for.
struct CostModelRunner {
  double hbm_gb_per_s = 400.0, tensor_tflops = 80.0, ns_per_instruction = 25.0;

  std::vector<kevo::runner::Measurement> measure(std::span<const kevo::runner::Candidate> cs) {
    std::vector<kevo::runner::Measurement> out;
    out.reserve(cs.size());
    for (const auto& c : cs) {
      const auto& st = c.program->stats;
      const double bytes = static_cast<double>(st.hbm_bytes_read + st.hbm_bytes_written);
      const double ns = std::max(bytes / hbm_gb_per_s, static_cast<double>(st.flops) / (tensor_tflops * 1e3)) +
                        ns_per_instruction * static_cast<double>(st.instructions);
      kevo::runner::Measurement m;
      m.samples_ns = {ns};
      m.latency = kevo::runner::summarize(m.samples_ns);
      m.bytes_moved = bytes;
      out.push_back(std::move(m));
    }
    return out;
  }
  // The identity keys kevo's measurement cache: change it whenever the model's figures change.
  kevo::runner::RunnerTraits traits() const {
    return {"example:cost-model-v1", /*deterministic=*/true, kevo::runner::ThreadSafety::constant, 0.0, false};
  }
};

}  // namespace

int main() {
  namespace search = kevo::search;
  auto kernel = kevo::ir::workload("matmul:M=512,N=1024,K=512,dtype=bf16");
  auto target = kevo::target::load_target("trn2");
  if (!kernel || !target) {
    std::fprintf(stderr, "runner: %s\n", !kernel ? kernel.error().c_str() : target.error().str().c_str());
    return 2;
  }
  const search::KernelProblem problem(*kernel, *target, CostModelRunner{});
  search::SearchOptions opt;
  opt.config.seed = 3;
  opt.config.population = 16;
  opt.config.budget.max_evaluations = 160;
  auto out = search::run_search(problem, opt);
  if (!out) {
    std::fprintf(stderr, "runner: %s\n", out.error().c_str());
    return 2;
  }
  if (!out->best) {
    std::printf("runner: no schedule verified (%s)\n", out->verification.message.c_str());
    return 1;
  }
  std::printf("runner %s: %llu evaluations, best %.1f us under the model, verified by %s\n",
              problem.runner_traits().identity.c_str(), static_cast<unsigned long long>(out->result.evaluations),
              out->best->eval.fitness[0] / 1e3, out->verification.method.c_str());
  std::printf("winner: %s\n", out->best_schedule.c_str());
  // The same schedule on kevo's simulated NeuronCore, for comparison.
  const search::KernelProblem sim(*kernel, *target, kevo::runner::SimRunner{});
  const auto rep = sim.measure_one(out->best->genome);
  // A model blind to some cost (here: DMA efficiency of strided or small transfers) crowns what it
  // cannot see; the comparison shows how far its winner is from the simulator's view.
  if (rep.measurement) std::printf("on the simulated trn2: %.1f us\n", rep.measurement->latency_ns() / 1e3);
  return 0;
}
