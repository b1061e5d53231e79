// KernelProblem: the evo::Problem that ties a kernel, a target, a runner and verification
// together. Genomes are schedules; evaluating one is the cascade static validity (lowering) ->
// cache -> measurement -> correctness (where the runner produces outputs). The evolution engine
// sees only genomes and fitness; runners see only tile programs.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kevo/core/expected.hpp"
#include "kevo/core/genes.hpp"
#include "kevo/evo/problem.hpp"
#include "kevo/ir/kernel.hpp"
#include "kevo/lower/lower.hpp"
#include "kevo/runner/runner.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/target/target.hpp"

namespace kevo::search {

struct KernelProblemOptions {
  std::size_t cache_capacity = 1 << 16;  // in-memory measurement cache entries (bounded)
  std::string cache_file;                // optional append-only on-disk cache shared across runs
  // Largest program accepted, in tile iterations (matmul tiles of contraction nests plus tile
  // iterations x ops of vector nests). NKI unrolls every loop, so a schedule of tiny tiles on a
  // large kernel becomes millions of instructions: slow to compile on the device and to lower or
  // simulate here. Such genomes are invalid ("too_large") before lowering.
  std::int64_t max_tile_iterations = std::int64_t{1} << 18;
  // What the search minimises. Empty: the measured latency in ns. Otherwise called on every
  // successful evaluation (its metrics: latency_ns, roofline_ns, fraction_of_peak, flops,
  // hbm_bytes, instructions, sbuf_bytes_per_partition, psum_bytes_per_partition; its profile),
  // returning the fitness vector (first = primary, minimised), e.g. an energy proxy from flops and
  // HBM bytes, or latency with SBUF use as a tie-break. An empty or non-finite result makes the
  // evaluation an error naming the objective. `objective_name` names it in name() -- so a
  // checkpoint of one objective is not resumed under another -- and in reports.
  std::function<std::vector<double>(const evo::Evaluation&)> objective;
  std::string objective_name;
  // MAP-Elites descriptors. Empty: sbuf_fraction, log2_intensity, bottleneck. Otherwise called on
  // every lowered evaluation and must return one value per name in `descriptor_names`.
  std::function<std::vector<double>(const evo::Evaluation&)> descriptors;
  std::vector<std::string> descriptor_names;
};

// The figures of one evaluated schedule, for results files and reports.
struct ScheduleReport {
  std::string schedule;
  std::optional<Invalid> invalid;  // set when the schedule did not lower (then no measurement, no stats)
  std::optional<runner::Measurement> measurement;
  lower::ProgramStats stats;
};

class KernelProblem {
 public:
  // The problem, or why the kernel cannot be scheduled (schedule::ScheduleSpace::try_derive):
  // what front ends call, so that an unsupported kernel is a value they report.
  static Expected<KernelProblem, schedule::Unsupported> make(const ir::Kernel& kernel, const target::Target& target,
                                                             runner::Runner runner, KernelProblemOptions opt = {});
  // Throwing convenience for kernels known to be supported: an unsupported kernel throws
  // kevo::Error (as schedule::ScheduleSpace::derive). Bad options throw kevo::Error either way.
  KernelProblem(ir::Kernel kernel, target::Target target, runner::Runner runner, KernelProblemOptions opt = {});
  // The problem over a space already derived (front ends that derive first to report an
  // unsupported kernel before writing any file, or that derive with options).
  KernelProblem(schedule::ScheduleSpace space, runner::Runner runner, KernelProblemOptions opt = {});

  // evo::ProblemLike
  [[nodiscard]] const Space& space() const;
  [[nodiscard]] std::vector<evo::Evaluation> evaluate(std::span<const Genome> gs) const;
  [[nodiscard]] std::string name() const;
  [[nodiscard]] bool deterministic() const;
  [[nodiscard]] evo::ThreadSafety thread_safety() const;
  [[nodiscard]] std::string to_text(const Genome& g) const;
  [[nodiscard]] Expected<Genome, std::string> from_text(std::string_view s) const;
  // The space's repair (buffer overflows, tile limits), then tiles grown, transfers coarsened
  // and fusion/layout choices returned to the default schedule's until the schedule unrolls
  // within max_tile_iterations and lowering's instruction limit.
  bool repair(Genome& g, Rng& r) const;
  [[nodiscard]] std::vector<std::string> descriptor_names() const;
  [[nodiscard]] std::string context() const;
  // Figures of the lowered program for cost models, without running the runner (lib/search/features.cpp).
  [[nodiscard]] std::vector<double> features(const Genome& g) const;
  [[nodiscard]] const KernelProblemOptions& options() const noexcept;

  [[nodiscard]] const ir::Kernel& kernel() const noexcept;
  [[nodiscard]] const target::Target& target() const noexcept;
  [[nodiscard]] const schedule::ScheduleSpace& schedule_space() const noexcept;
  [[nodiscard]] runner::RunnerTraits runner_traits() const;
  [[nodiscard]] std::string kernel_text() const;
  [[nodiscard]] std::uint64_t kernel_hash() const noexcept;

  // Lowers and measures one schedule outside the search (kevo eval; naming the winner).
  [[nodiscard]] ScheduleReport measure_one(const Genome& g) const;
  // The measurement the cache holds for this schedule (no runner call), if any.
  [[nodiscard]] std::optional<runner::Measurement> cached_measurement(const Genome& g) const;
  // Lowers one genome (for emitting NKI and traces of the best).
  [[nodiscard]] Expected<lower::TileProgram, Invalid> lower(const Genome& g) const;

  // For noisy runners, before naming a winner: measures each genome again `rounds` more times
  // (samples appended) and returns their indices best first by the new median, with `ms` the
  // Measurements (invalid genomes last).
  std::vector<std::size_t> remeasure(std::span<const Genome> gs, int rounds, std::vector<runner::Measurement>& ms) const;

  // Cache counters (hits never reach the runner).
  [[nodiscard]] std::size_t cache_hits() const noexcept;
  [[nodiscard]] std::size_t runner_calls() const noexcept;

 private:
  struct State;
  std::shared_ptr<State> s_;
};

// Tile iterations of a genome's plan (see KernelProblemOptions::max_tile_iterations), or the
// plan's rejection.
Expected<std::int64_t, Invalid> tile_iterations(const schedule::ScheduleSpace& space, const Genome& g);

// program_features's values, in order: [0] a latency estimate in ns (per-engine sums of datasheet
// instruction times, DMA and HBM bytes over bandwidth: their maximum), [1] its log, then log1p of
// tensor/vector/scalar/gpsimd ns, DMA ns, HBM ns, instructions per engine (4), DMA instructions,
// DMA descriptors, DMA bytes, then SBUF and PSUM use as shares of the target's, log1p instructions.
std::vector<double> program_features(const lower::TileProgram& p, const target::Target& t);

// Converts a measurement (or a lowering failure) into the engine's Evaluation.
evo::Evaluation to_evaluation(const Expected<lower::TileProgram, Invalid>& lowered, const runner::Measurement* m);

}  // namespace kevo::search
