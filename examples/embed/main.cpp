// A downstream program: define a kernel, search its schedules on a simulated trn2 NeuronCore,
// print the best schedule. Build it against an installed kevo:
//   cmake -S examples/embed -B build-embed -DCMAKE_PREFIX_PATH=/opt/kevo && cmake --build build-embed
#include <cstdio>

#include <kevo/evo.hpp>
#include <kevo/ir.hpp>
#include <kevo/runner.hpp>
#include <kevo/search.hpp>
#include <kevo/target.hpp>

int main() {
  // The algorithm, written once in .kir (ir::workload("matmul:...") builds the same from a name).
  auto kernel = kevo::ir::parse_kernel(R"(
    kernel matmul_relu(A: bf16[M=512, K=512], B: bf16[K, N=1024]) -> (C: bf16[M, N]) {
      acc[m, n] = sum(k) A[m, k] * B[k, n]
      C[m, n] = relu(acc[m, n])
    })");
  if (!kernel) {
    std::fprintf(stderr, "%s\n", kernel.error().str().c_str());
    return 2;
  }
  auto target = kevo::target::load_target("trn2");
  if (!target) {
    std::fprintf(stderr, "%s\n", target.error().str().c_str());
    return 2;
  }

  // Kernel + target + runner = a problem the evolution engine can search.
  kevo::search::KernelProblem problem(*kernel, *target, kevo::runner::SimRunner{});
  kevo::evo::Config config;
  config.seed = 7;
  config.threads = 2;
  config.population = 16;
  config.budget.max_evaluations = 200;
  kevo::evo::Engine engine(problem, config);
  const auto result = engine.run();

  if (!result.best) {
    std::puts("no valid schedule found");
    return 1;
  }
  std::printf("evaluations: %llu (%llu valid)\n", static_cast<unsigned long long>(result.evaluations),
              static_cast<unsigned long long>(result.valid));
  std::printf("best latency: %.1f us, %.1f%% of peak\n", result.best->eval.fitness[0] / 1e3,
              100 * result.best->eval.metric("fraction_of_peak"));
  std::printf("best schedule: %s\n", problem.to_text(result.best->genome).c_str());
  return 0;
}
