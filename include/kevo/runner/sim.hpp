// The NeuronCore simulator: an event-driven model of one core, driven by a Target and a small
// calibration layer (SimParams). In-order queues per engine and per DMA queue, dependency edges,
// shared HBM bandwidth, NC-v2 port conflicts and SBUF/PSUM occupancy; deterministic to the bit.
// SimRunner wraps it as a Runner. The model and its calibration are described in docs/SIMULATOR.md.
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kevo/lower/program.hpp"
#include "kevo/runner/runner.hpp"
#include "kevo/target/target.hpp"

namespace kevo::runner {

// Calibration of the simulator on top of the target's datasheet figures. The target file keeps
// the published numbers; these factors are what fitting against measured kernels changed.
// A value < 0 means "take the target's field".
struct SimParams {
  double hbm_efficiency = 1.0;          // effective HBM bandwidth = target.hbm_bytes_per_ns * this
  double dma_queue_bytes_per_ns = -1;   // bandwidth one DMA instruction can reach (> the target's
                                        // per-engine figure when hardware spreads it over engines)
  double dma_fixed_ns = -1;             // issue-to-completion latency of one DMA instruction
  double dma_descriptor_ns = -1;        // queue time per descriptor (contiguous run)
  std::int64_t dma_descriptor_min_bytes = -1;  // runs shorter than this cost this many bytes of bandwidth
  double matmul_extra_cycles = 0;       // added to every matmul's issue time (Tensor-engine cycles)
  double engine_overhead_scale = 1.0;   // scales fixed_overhead_cycles of every compute engine
  bool port_conflicts = true;           // model target.port_conflicts (false: ignore them)

  [[nodiscard]] std::uint64_t hash() const;
  friend bool operator==(const SimParams&, const SimParams&) = default;
};

// The calibrated parameters kevo ships for a target (by Target::name; trn1 fitted against
// measurements.md, the other generations inherit trn1's DMA efficiency). Unknown targets get the
// neutral SimParams{}.
SimParams default_sim_params(const target::Target& t);

// Queue numbering used in SimResult and traces: 0..3 are the compute engines in
// target::Engine order, 4.. are the DMA queues.
inline constexpr int kFirstDmaQueue = target::kNumEngines;

struct SimResult {
  double latency_ns = 0;
  std::array<double, target::kNumEngines> engine_busy_ns{};  // issue time per compute engine
  std::vector<double> queue_busy_ns;   // per queue (engines then DMA queues)
  double dma_active_ns = 0;            // time during which at least one DMA was transferring
  double dma_bytes = 0;                // bytes moved by DMA instructions (payload)
  double hbm_bytes = 0;                // of which to or from HBM
  double dma_effective_bytes = 0;      // bandwidth-equivalent bytes (small runs rounded up)
  std::int64_t dma_descriptors = 0;
  // Time on the critical path attributed to each engine (tensor, vector, scalar, gpsimd, dma).
  std::array<double, target::kNumEngines + 1> critical_ns{};
  std::string bottleneck;              // the largest of critical_ns: "tensor", ..., "dma"
  std::int64_t peak_sbuf_bytes_per_partition = 0;  // of buffers live at the same time
  std::int64_t peak_psum_bytes_per_partition = 0;
  std::size_t instructions = 0;
  // Per instruction: start of issue, end of issue (queue free again), result visible to dependents.
  std::vector<double> start_ns, issue_end_ns, done_ns;
  std::vector<std::uint8_t> queue;     // queue of each instruction
};

// Simulates one program. Throws kevo::Error when the program breaks the TileProgram contract
// (dependency out of order, buffer index out of range, DMA queue beyond target.dma_queues).
SimResult simulate(const lower::TileProgram& p, const target::Target& t, const SimParams& params);

// Roofline bound of a kernel on a target: max over engines of flops / peak and min HBM bytes /
// HBM bandwidth (datasheet figures, not calibrated ones). `kernel` may be null: the program's
// stats are used instead.
struct Roofline {
  double ns = 0;
  double tensor_ns = 0, vector_ns = 0, memory_ns = 0;
  std::int64_t contraction_flops = 0, other_flops = 0, min_hbm_bytes = 0;
  double peak_tensor_flops = 0;  // for the kernel's contraction dtype
};
Roofline roofline(const ir::Kernel* kernel, const lower::TileProgram& p, const target::Target& t);

// Builds the runner-facing Measurement (latency, engines, roofline, fraction of peak, profile).
Measurement to_measurement(const SimResult& r, const lower::TileProgram& p, const target::Target& t,
                           const ir::Kernel* kernel);

// Chrome-trace / Perfetto JSON of a simulated run: one track per engine and DMA queue, one "X"
// event per instruction (name = opcode + group), counters for SBUF/PSUM occupancy.
std::string trace_json(const lower::TileProgram& p, const SimResult& r);
void write_trace(const std::filesystem::path& path, const lower::TileProgram& p, const SimResult& r);

// The simulator as a Runner: deterministic, thread_safety constant.
class SimRunner {
 public:
  // Without params, each candidate's target gets default_sim_params(target).
  SimRunner() = default;
  explicit SimRunner(SimParams params) : params_(params) {}

  std::vector<Measurement> measure(std::span<const Candidate> candidates);
  [[nodiscard]] Measurement measure_one(const Candidate& c) const;
  [[nodiscard]] RunnerTraits traits() const;
  [[nodiscard]] const std::optional<SimParams>& params() const noexcept { return params_; }

 private:
  std::optional<SimParams> params_;
};

}  // namespace kevo::runner
