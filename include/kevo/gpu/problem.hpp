// TritonProblem: a kernel on a GPU target as an evo::Problem. Evaluating a genome is static
// validity (TritonSpace::check) -> the in-memory cache -> the emitted Triton source sent to a GPU
// worker (runner::ProcessRunner, worker protocol v1 plus the fields "triton" and "problem") which
// compiles it, checks it against PyTorch on the device and times it. Failures are typed statuses.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kevo/core/expected.hpp"
#include "kevo/core/genes.hpp"
#include "kevo/evo/problem.hpp"
#include "kevo/gpu/kernel.hpp"
#include "kevo/gpu/space.hpp"
#include "kevo/gpu/target.hpp"
#include "kevo/ir/kernel.hpp"
#include "kevo/runner/process.hpp"

namespace kevo::gpu {

class TritonProblem {
 public:
  // Throws kevo::Error when the kernel is not one Triton is emitted for (use classify first).
  TritonProblem(ir::Kernel kernel, GpuTarget target, runner::ProcessOptions worker);

  // evo::ProblemLike
  [[nodiscard]] const Space& space() const;
  [[nodiscard]] std::vector<evo::Evaluation> evaluate(std::span<const Genome> gs) const;
  [[nodiscard]] std::string name() const;
  [[nodiscard]] bool deterministic() const { return false; }
  [[nodiscard]] evo::ThreadSafety thread_safety() const { return evo::ThreadSafety::none; }  // one GPU, one worker
  [[nodiscard]] std::string to_text(const Genome& g) const;
  [[nodiscard]] Expected<Genome, std::string> from_text(std::string_view s) const;
  bool repair(Genome& g, Rng& r) const;
  [[nodiscard]] std::string context() const;

  [[nodiscard]] const TritonSpace& triton_space() const noexcept;
  [[nodiscard]] const GpuKernel& gpu_kernel() const noexcept;
  [[nodiscard]] std::string source(const Genome& g) const;  // the emitted Triton module
  // Measures one genome again (re-timing the leaders), bypassing the cache.
  [[nodiscard]] runner::Measurement measure(const Genome& g, int repeats = 0) const;
  [[nodiscard]] std::size_t worker_calls() const noexcept;

 private:
  struct State;
  std::shared_ptr<State> s_;
};

}  // namespace kevo::gpu
