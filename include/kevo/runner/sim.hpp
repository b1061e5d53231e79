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
#include <string_view>
#include <vector>

#include "kevo/lower/program.hpp"
#include "kevo/runner/runner.hpp"
#include "kevo/target/target.hpp"

namespace kevo::runner {

// The simulator's physical parameters on top of the target's datasheet figures: what the
// datasheet leaves open (how many DMA engines one transfer uses, what a descriptor costs, how long
// a transfer takes to land) and what was fitted against measured kernels. Each generation's values
// live in its target file ("sim.params", applied by default_sim_params); docs/SIMULATOR.md lists
// every field with its meaning, value per generation and source. A negative value means "take the
// target's datasheet field"; SimParams{} is the uncalibrated datasheet reading (one DMA engine per
// transfer, small runs rounded up to target.dma_descriptor_min_bytes).
struct SimParams {
  double dma_engines = -1;                 // DMA engines one transfer may use (< 0: 1); at the
                                           // core's count its partitions pick them (model v8)
  double dma_engine_bytes_per_ns = -1;     // bandwidth of one DMA engine (< 0: target.dma_queue_bytes_per_ns)
  double dma_descriptor_overhead_ns = -1;  // engine time per descriptor (contiguous run): a run of b bytes
                                           // moves at eff(b) = b / (b + rate * this) of the engine rate
                                           // (< 0: runs < target.dma_descriptor_min_bytes cost that many bytes)
  double hbm_efficiency = 1.0;             // HBM bytes per ns one core reaches = target.hbm_bytes_per_ns * this
  double dma_fixed_ns = -1;                // latency of one DMA (< 0: target.dma_fixed_ns): with dma_tail_ns < 0
                                           // added after its bandwidth phase; else the least time from
                                           // its start to its completion, overlapping the transfer
  double dma_tail_ns = -1;                 // >= 0: a DMA completes max(dma_fixed_ns after its start, this
                                           // after its bandwidth phase) (model v9; < 0: the serial latency)
  double dma_sbuf_transpose_efficiency = -1;  // fraction of DMA bandwidth an SBUF->SBUF dma_transpose reaches
                                              // (< 0: target.dma_transpose_efficiency, the HBM->SBUF figure)
  double psum_elems_per_cycle = -1;        // per-lane rate of a Vector/Scalar/GpSimd op with an operand in
                                           // PSUM (< 0: the engine's own rate for the dtype)
  double matmul_exposed_load = 0;          // a matmul whose operands arrived after the Tensor engine went
                                           // idle pays its LoadStationary: this x a multiply of the
                                           // stationary's size (loads of ready operands overlap the multiply)
  double matmul_extra_cycles = 0;          // added to every matmul's issue time (Tensor-engine cycles)
  double engine_overhead_scale = 1.0;      // scales fixed_overhead_cycles of every compute engine
  bool port_conflicts = true;              // model target.port_conflicts (false: ignore them)

  [[nodiscard]] std::uint64_t hash() const;
  friend bool operator==(const SimParams&, const SimParams&) = default;
};

// Every field of SimParams by name (the names a target file's "sim.params" may use, in the order
// docs/SIMULATOR.md lists them; equal to target::kSimParamNames).
std::vector<std::string> sim_param_names();
// Sets one field by name; false for an unknown name (port_conflicts: value != 0).
bool set_sim_param(SimParams& p, std::string_view name, double value);
// Reads one field by name (nullopt for an unknown name).
std::optional<double> get_sim_param(const SimParams& p, std::string_view name);

// The parameters kevo simulates a target with: SimParams{} with the target file's "sim.params"
// applied by name (docs/SIMULATOR.md). A target without a "sim" object gets SimParams{}.
// Throws kevo::Error on a name set_sim_param does not know (the target loader rejects those first).
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
  // The DMA traffic of each HBM tensor (the HBM side of its transfers; SBUF <-> SBUF transfers
  // under the name "on-chip"), in order of first transfer: which tensor's runs cost bandwidth.
  struct DmaTensor {
    std::string name;
    double bytes = 0, effective_bytes = 0;  // payload; bandwidth-equivalent (descriptors, transposes)
    std::int64_t descriptors = 0, transfers = 0, transposes = 0;
  };
  std::vector<DmaTensor> dma_tensors;
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

// Roofline bound of a kernel on a target (datasheet figures, not calibrated ones): no schedule of
// the kernel runs faster than `ns`, the largest of
//   tensor_ns    contraction FLOPs at the Tensor engine's peak for the kernel's dtype;
//   memory_ns    the minimum HBM bytes (inputs read once, outputs written once) at HBM bandwidth;
//   vector_ns    the other work on the engines: the larger of
//     activation_ns  evaluations of functions only an activation computes (exp, tanh, ...) at the
//                    Scalar engine's element rate, and
//     engines_ns     all elementwise operations at every engine's element rate together (one after
//                    another on the host), an element of one instruction carrying at most
//                    kMaxOpsPerElement of them on that engine.
// The work counts are ir::analyze's domain counts (docs/KIR.md, "Analysis"). `kernel` may be null:
// the program's own counts are used instead.
struct Roofline {
  double ns = 0;
  double tensor_ns = 0, vector_ns = 0, memory_ns = 0;
  double activation_ns = 0, engines_ns = 0;
  std::int64_t contraction_flops = 0, other_flops = 0, min_hbm_bytes = 0;
  std::int64_t elementwise_ops = 0, activation_evals = 0;
  double peak_tensor_flops = 0;  // for the kernel's contraction dtype
  // which bound is `ns`: "tensor", "memory", "activation" or "engines"
  [[nodiscard]] const char* limit() const noexcept;
};
// The most elementwise operations one element of one instruction carries, per engine (tensor,
// vector, scalar, gpsimd): an activation fn(x * scale + bias) with its row sum, and the Vector
// engine's bn_stats (a sum, and a difference, square and sum for the variance), 4; tensor_scalar's
// two operators, 2; a matmul summing partitions with weights (a product and a sum), 2.
inline constexpr double kMaxOpsPerElement[4] = {2, 4, 4, 2};
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
