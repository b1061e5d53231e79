// Search a kernel's schedules with an LLM among the mutation operators. The models come from a
// TOML file (default examples/llm.toml); every [[model]] is one operator the engine's bandit
// weighs against the classical ones by improvement per dollar.
//   example_llm_search [llm.toml] [max_evaluations]
// Point it at a local server first (docs/LLM.md), e.g. `ollama serve` + the "local" model, and
// set `[cassette] mode = "record"` to keep the run replayable without any model.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <kevo/evo.hpp>
#include <kevo/ir.hpp>
#include <kevo/llm.hpp>
#include <kevo/runner.hpp>
#include <kevo/search.hpp>
#include <kevo/target.hpp>

int main(int argc, char** argv) {
  const std::string llm_file = argc > 1 ? argv[1] : "examples/llm.toml";
  const unsigned long long max_evals = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 300;

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

  kevo::llm::LlmOperators llm;
  try {
    llm = kevo::llm::make_llm_operators(kevo::llm::load_llm_config(llm_file));
  } catch (const kevo::Error& e) {  // ParseError (file:line:col) or an unreadable file / cassette
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }

  kevo::search::KernelProblem problem(*kernel, *target, kevo::runner::SimRunner{});
  kevo::evo::Config config;
  config.seed = 7;
  config.threads = 2;
  config.population = 16;
  config.budget.max_evaluations = max_evals;
  config.budget.max_cost = llm.budget->cap() < 1e300 ? llm.budget->cap() : 0.0;
  // A replayable run needs proposals in a fixed order: synchronous operators (asynchronous = false).
  bool all_sync = true;
  for (const auto& op : llm.operators) all_sync = all_sync && !op.asynchronous();
  config.deterministic = all_sync;
  kevo::evo::Engine engine(problem, config);
  for (const auto& op : llm.operators) engine.add_operator(op, 1.0);  // copies share usage with `llm`

  const auto result = engine.run();
  for (auto& op : llm.operators) op.wait_idle(5);

  std::printf("stop: %s, evaluations: %llu (%llu valid)\n", std::string(kevo::evo::to_string(result.stop_reason)).c_str(),
              static_cast<unsigned long long>(result.evaluations), static_cast<unsigned long long>(result.valid));
  for (const auto& s : result.operators)
    std::printf("  %-16s proposals %6llu  improvements %4llu  cost $%.4f\n", s.name.c_str(),
                static_cast<unsigned long long>(s.proposals), static_cast<unsigned long long>(s.improvements), s.cost);
  if (result.best) {
    std::printf("best latency: %.1f us, %.1f%% of peak (found by %s)\n", result.best->eval.fitness[0] / 1e3,
                100 * result.best->eval.metric("fraction_of_peak"), result.best->op.c_str());
    std::printf("best schedule:\n%s\n", problem.to_text(result.best->genome).c_str());
  }
  std::printf("LLM usage:\n%s\n", llm.usage_json().c_str());
  return result.best ? 0 : 1;
}
