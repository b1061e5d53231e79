// A compute target described as data: a NeuronCore generation (trn1/trn2/trn3) or this host's
// CPU in the same terms. Loaded from JSON (targets/*.json ship with kevo; users add their own);
// every figure in the shipped files names its source. The simulator, the lowering's validity
// checks and the roofline all read these fields and nothing else.
#pragma once
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kevo/core/error.hpp"
#include "kevo/core/expected.hpp"
#include "kevo/ir/kernel.hpp"

namespace kevo::target {

// Compute engines of a NeuronCore. DMA queues are separate (Target::dma_queues of them).
enum class Engine : std::uint8_t { tensor, vector, scalar, gpsimd };
inline constexpr int kNumEngines = 4;
std::string_view to_string(Engine) noexcept;

struct EngineSpec {
  double clock_ghz = 1.0;
  double elems_per_cycle_16bit = 1.0;   // per partition lane... throughput in free-dim elements/cycle
  double elems_per_cycle_32bit = 1.0;
  double fixed_overhead_cycles = 60.0;  // static cost of every instruction (SBUF/PSUM access bubble)
  double min_ii_cycles = 64.0;          // minimum initiation interval
  // Whether the engine runs nki.isa.tensor_copy. Not the Scalar engine on NeuronCore-v2: "On
  // NeuronCore v2, tensor_copy is not supported on the Scalar Engine. Instead, use
  // nisa.activation with op=nl.copy" (nki.isa.tensor_copy). Optional in target files
  // (engines.<e>.tensor_copy, default true).
  bool tensor_copy = true;
  // Whether the engine's activation(op=nl.reciprocal) takes a bias: "nki.isa.activation(op=nl.reciprocal)
  // doesn't support setting bias on NeuronCore-v2" (aws-neuron-sdk nki/api/nki.api.shared.rst).
  // Optional in target files (engines.<e>.reciprocal_bias, default true); read for the Scalar engine.
  bool reciprocal_bias = true;
  // Whether the engine's activation takes a compile-time constant bias: "In NeuronCore-v2, the
  // bias must be a [N, 1] vector, but starting NeuronCore-v3, bias can either be a compile-time
  // constant scalar or a [N, 1] vector" (aws-neuron-sdk nki.isa.activation). Optional in target
  // files (engines.<e>.immediate_bias, default true); read for the Scalar engine.
  bool immediate_bias = true;
  // The operators nki.isa.tensor_scalar runs on this engine. all: every arithmetic one; mul_add:
  // op0=multiply with op1=add or none, or op0=add alone ("The Scalar Engine on trn2 only supports
  // some operator combinations"); rsqrt: the rsqrt operator alone (its engine parameter:
  // "nki.isa.engine.gpsimd (only allowed for rsqrt)"), which kevo never emits as a tensor_scalar.
  // Both quotes: aws-neuron-sdk nki.isa.tensor_scalar. unary: the unary rsqrt, reciprocal and abs
  // alone, the Scalar engine's operators in the ALU table before add and multiply ("Add and
  // Multiply are supported on Scalar Engine only from NeuronCore-v3", aws-neuron-sdk
  // nki.api.shared, "Supported Math Operators", until release 2.27), none of which kevo emits as a
  // tensor_scalar. The lowering runs any other tensor_scalar given to the engine on the Vector
  // engine, as it does tensor_tensor given to the Scalar engine.
  // Optional in target files (engines.<e>.tensor_scalar_ops: "all", "mul_add", "rsqrt" or "unary";
  // default all).
  enum class TensorScalarOps : std::uint8_t { all, mul_add, rsqrt, unary };
  TensorScalarOps tensor_scalar_ops = TensorScalarOps::all;
};

// Whether `e` runs nki.isa.tensor_scalar with `op0` then `op1` (nullptr: op0 alone).
[[nodiscard]] bool runs_tensor_scalar(const EngineSpec& e, ir::Fn op0, const ir::Fn* op1) noexcept;

// Free elements one bn_stats instruction may read per partition (NKI's nl.tile_size.bn_stats_fmax;
// the same on every NeuronCore generation NKI documents).
inline constexpr std::int64_t kBnStatsFmax = 512;

// Names a target file's "sim.params" may use: the fields of kevo::runner::SimParams that
// runner::set_sim_param sets (runner::sim_param_names() returns the same list; a test holds them equal).
// Any other name is a load error located at the key.
inline constexpr std::string_view kSimParamNames[] = {
    "dma_engines",           "dma_engine_bytes_per_ns", "dma_descriptor_overhead_ns", "hbm_efficiency",
    "dma_fixed_ns",          "dma_tail_ns",             "dma_sbuf_transpose_efficiency", "psum_elems_per_cycle", "matmul_exposed_load",   "matmul_extra_cycles",
    "engine_overhead_scale", "port_conflicts"};

// The physical range of each simulator parameter (docs/SIMULATOR.md gives their meaning): no DMA
// engine faster than 200 B/ns, no descriptor costlier than 500 ns, an HBM efficiency above 0.05,
// and so on. A target file's `sim.params` and kevo calibrate's fitted values and bounds stay inside.
struct SimParamRange {
  std::string_view name;
  double lo, hi;
};
inline constexpr SimParamRange kSimParamRanges[] = {
    {"dma_engines", 1, 32},           {"dma_engine_bytes_per_ns", 1, 200},      {"dma_descriptor_overhead_ns", 0, 500},
    {"hbm_efficiency", 0.05, 1},      {"dma_fixed_ns", 0, 10000},               {"dma_tail_ns", 0, 10000},               {"dma_sbuf_transpose_efficiency", 0.05, 1},
    {"psum_elems_per_cycle", 0.1, 8}, {"matmul_exposed_load", 0, 4},            {"matmul_extra_cycles", 0, 512},
    {"engine_overhead_scale", 0.1, 10}, {"port_conflicts", 0, 1}};
// The range of a parameter named in kSimParamNames ({name, 0, 0} for another name).
constexpr SimParamRange sim_param_range(std::string_view name) {
  for (const auto& r : kSimParamRanges)
    if (r.name == name) return r;
  return {name, 0, 0};
}

struct Target {
  std::string name;        // "trn2"
  std::string generation;  // "NeuronCore-v3"
  bool host = false;       // the CPU target: on-chip buffers are cache levels

  // Memories (bytes per partition for the on-chip ones).
  int partitions = 128;
  std::int64_t sbuf_bytes_per_partition = 0;
  std::int64_t psum_bytes_per_partition = 0;
  int psum_banks = 8;
  std::int64_t psum_bank_bytes = 2048;  // per partition

  // Tile limits.
  int pmax = 128;                         // partition dim of any on-chip tile
  int stationary_fmax = 128;              // matmul stationary free size
  int moving_fmax = 512;                  // matmul moving free size
  std::int64_t sbuf_free_max_elems = 65536;  // free elements of one SBUF operand of a compute instruction
  std::int64_t psum_free_max_elems = 4096;

  // Engines.
  EngineSpec engines[kNumEngines];
  double matmul_min_cycles = 64.0;        // max(min(64, N_stationary), N_moving) model
  double matmul_fp32_factor = 4.0;        // fp32 runs at 1/4 rate
  double matmul_fixed_cycles = 64.0;      // pipeline latency of one matmul (overlapped back-to-back)
  double transpose_factor = 1.0;          // nc_transpose cost relative to a matmul of the same size
  // The Tensor engine's row tiling mode (nki.isa.nc_matmul tile_position/tile_size): the smallest
  // row tile a matmul can run in, so that matmuls over at most that many partitions in different
  // row tiles of the PE array run at the same time. 32 on NeuronCore-v3 and later (4 x 32 rows),
  // 64 on NC-v2 (2 x 64), 0 where there is no such mode (the host). Optional in target files.
  int row_tile_min = 0;
  // Whether nc_matmul may accumulate onto PSUM that another instruction (a memset) initialised.
  // false on NeuronCore-v2 and -v3: "not supported and is undefined behavior on hardware"
  // (nki.isa.nc_matmul, accumulation mode); the first matmul of a group must start it.
  bool matmul_accumulate_after_memset = true;
  bool port_conflicts = false;            // NC-v2: Vector/GpSimd share SBUF port, Vector/Scalar share PSUM port

  // DMA and HBM.
  int dma_queues = 16;
  double dma_queue_bytes_per_ns = 17.0;   // per queue bandwidth
  double hbm_bytes_per_ns = 410.0;        // shared HBM bandwidth available to one core
  double dma_fixed_ns = 2000.0;           // latency of one dma instruction (issue to completion, unloaded)
  double dma_descriptor_ns = 0.0;         // cost per descriptor (one contiguous run per partition row)
  std::int64_t dma_descriptor_min_bytes = 512;  // runs smaller than this still cost a full descriptor
  double dma_transpose_efficiency = 0.9;  // fraction of DMA bandwidth a DMA transpose reaches
  // Whether the DMA engines transpose in their datapath ("Trainium2 DMA engines can perform a
  // tensor transpose while moving data from HBM into SBUF", aws-neuron-sdk trainium2_arch.rst,
  // "DMA Transpose"; the NeuronCore-v2 architecture has no such section and no hardware DGE).
  // false: an nki.isa.dma_transpose is a gather of single elements (dge_mode none: host-computed
  // descriptors, one per element), costed as such. Optional in target files (dma.transposes,
  // default true; false for trn1).
  bool dma_transposes = true;
  // Where the DMA engines transpose: the destination block they write together. "DMA transpose
  // requires all 16x DMA engines to work co-operatively ... [they] should write into a single
  // [nl.par_dim(128), 16] SBUF tile in parallel at a time, where the 16 elements along free
  // dimension must be contiguous. Having a multiple of 128 and a multiple of 16 in the output SBUF
  // partition and inner-most free dimension sizes is a pre-requisite to achieve best DMA throughput
  // ... DMA transpose can [take] flexible tile sizes at the cost of DMA performance"
  // (aws-neuron-sdk nki/guides/architecture/trainium2_arch.rst, "HBM2SBUF DMA transpose"). So a
  // transpose pays every block it touches whole: its destination's partitions rounded up to `pmax`,
  // each contiguous run of its free dim rounded up to this many elements; and, all engines taking
  // part in one transpose at a time, a transposing transfer is one instruction (never split over
  // queues) and the transposes of a kernel run one after another (docs/SIMULATOR.md, "DMA
  // transposes"). 0: no blocks (every size transposes at the same rate). Optional in target files
  // (dma.transpose_block_elems, default 0; 16 on trn2 and trn3).
  int dma_transpose_block_elems = 0;
  // Whether a DMA transpose here is written by all engines a block at a time (above).
  [[nodiscard]] bool dma_transposes_in_blocks() const noexcept { return dma_transposes && dma_transpose_block_elems > 0; }
  // DMA queues a program may name: the dma_queues the copies share, and where the engines
  // transpose in blocks one more, the transposes' own (dma_transpose_queue): they run one after
  // another, all engines on one block at a time, and no copy queues behind them.
  [[nodiscard]] int dma_lanes() const noexcept { return dma_queues + (dma_transposes_in_blocks() ? 1 : 0); }
  [[nodiscard]] int dma_transpose_queue() const noexcept { return dma_transposes_in_blocks() ? dma_queues : -1; }

  // Peaks (FLOP/s of the tensor engine per dtype, and of the vector engine). The roofline reads the
  // Tensor peaks; its engine bound comes from `engines` (runner::roofline), so peak_vector_flops is
  // the datasheet's figure kept for reference (and the target's identity), not a bound.
  double peak_tensor_flops_bf16 = 0, peak_tensor_flops_fp8 = 0, peak_tensor_flops_fp32 = 0;
  double peak_vector_flops = 0;

  // The dtypes the target stores and computes in (the optional "dtypes" array of a target file;
  // absent: every ir::DType). NeuronCore-v2 and -v3 (trn1, trn2) have the IEEE-style fp8_e4m3
  // only: "Data type F8E4M3FN is not supported on TRN1/TRN2" (neuronx-cc error EVRF051); v4
  // (trn3) has both fp8s. A kernel with another dtype cannot be scheduled for the target
  // (schedule::Unsupported::Why::dtype).
  std::vector<ir::DType> dtypes;

  std::vector<std::string> sources;  // provenance of the figures (free text per field group)

  // The simulator's parameters for this generation (the optional "sim" object of the target file:
  // {"params": {name: number}, "fitted_by": "...", "source": "..."}). Names are
  // kSimParamNames (kevo::runner::SimParams fields, applied by runner::set_sim_param); values are
  // physical (bandwidths, nanoseconds, cycles), fitted or derived as the file's "source" says.
  std::vector<std::pair<std::string, double>> sim_params;
  std::string sim_fitted_by;  // who or what wrote the values ("hand fit ...", "kevo calibrate ...")
  std::string sim_source;     // the measurements or documents they come from

  [[nodiscard]] const EngineSpec& engine(Engine e) const noexcept { return engines[static_cast<int>(e)]; }
  [[nodiscard]] double peak_tensor_flops(ir::DType) const noexcept;
  [[nodiscard]] bool stores(ir::DType t) const noexcept {
    return dtypes.empty() || std::find(dtypes.begin(), dtypes.end(), t) != dtypes.end();
  }
  // Stable hash of every field (cache keys).
  [[nodiscard]] std::uint64_t hash() const;
};

// Parses a target JSON text. Unknown or missing fields, wrong types and out-of-range values are
// Diagnostics located at file:line:column.
Expected<Target, Diagnostic> parse_target(std::string_view json, std::string file = "<string>");
// Loads "trn1" | "trn2" | "trn3" | "host" (built in, compiled into the library) or a path to a .json.
Expected<Target, Diagnostic> load_target(std::string_view name_or_path);
// Names of the built-in targets.
std::vector<std::string> builtin_targets();
// The JSON text of a built-in target (what `kevo` can print or save for editing).
std::string builtin_target_json(std::string_view name);

}  // namespace kevo::target
