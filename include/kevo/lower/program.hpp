// TileProgram: a lowered kernel, shaped like an NKI kernel. Buffers live in HBM, SBUF or PSUM;
// instructions mirror nki.isa (dma_copy, nc_matmul, activation, tensor_tensor, ...) and carry
// their engine, operand access patterns and dependency edges. Runners (simulator, CPU,
// external devices), the interpreter and the NKI emitter consume it; none of them knows the
// schedule that produced it.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kevo/ir/kernel.hpp"
#include "kevo/target/target.hpp"

namespace kevo::lower {

enum class Memory : std::uint8_t { hbm, sbuf, psum };
std::string_view to_string(Memory) noexcept;

struct AccessPattern;

// The partition that linear element `offset` of an on-chip buffer lies on, its slots of
// `slot_elems` = partitions x free_elems elements one after another (dividing only when needed).
[[nodiscard]] inline std::int64_t partition_at(std::int64_t offset, std::int64_t slot_elems, std::int64_t free_elems) noexcept {
  if (offset >= slot_elems) offset %= slot_elems;
  return offset < free_elems ? 0 : offset / free_elems;
}

// A buffer. HBM buffers are kernel tensors (inputs/outputs) or scratch for materialised
// intermediates, stored row-major with `shape`. On-chip buffers are `partitions` rows of
// `free_elems` elements, repeated `nbufs` times for N-buffer rotation; element (slot, p, f) has
// linear index slot * partitions * free_elems + p * free_elems + f.
struct Buffer {
  std::string name;
  Memory mem = Memory::sbuf;
  ir::DType dtype = ir::DType::fp32;
  std::vector<std::int64_t> shape;  // HBM: tensor shape; on-chip: {partitions, free_elems}
  int partitions = 1;               // on-chip only
  std::int64_t free_elems = 0;      // on-chip only: per rotation slot
  int nbufs = 1;                    // on-chip only
  int tensor = -1;                  // index into Kernel::tensors for HBM tensors of the kernel; -1 otherwise

  [[nodiscard]] std::int64_t elements() const noexcept;  // total elements including all slots
  [[nodiscard]] std::int64_t bytes_per_partition() const noexcept;  // on-chip: free_elems * dtype * nbufs
  // On-chip: the partition an access of this buffer starts at (its slots lie one after another,
  // each [partitions, free_elems]).
  [[nodiscard]] std::int64_t start_partition(const AccessPattern& a) const noexcept;
};

// An access pattern, as NKI's: one partition dimension and up to three free dimensions (innermost
// last), over the linear element index of a buffer:
//   element(p, f0, f1, f2) = offset + p * part_stride + f0 * free_stride[0] + f1 * ... + f2 * ...
// Unused free dims have size 1. A stride of 0 broadcasts (DMA from HBM may broadcast along
// partitions; compute instructions may broadcast along free dims).
struct AccessPattern {
  std::int32_t buffer = -1;
  std::int32_t part_count = 1;
  std::int64_t offset = 0;
  // Strides are 32-bit (a program holds tens of thousands of patterns; the lowering rejects a
  // schedule whose strides would not fit, as too_large); offsets span whole HBM tensors.
  std::int32_t part_stride = 0;
  std::array<std::int32_t, 3> free_stride{0, 0, 1};
  std::array<std::int32_t, 3> free_size{1, 1, 1};

  [[nodiscard]] std::int64_t free_elems() const noexcept {
    return std::int64_t{free_size[0]} * free_size[1] * free_size[2];
  }
  [[nodiscard]] std::int64_t elems() const noexcept { return part_count * free_elems(); }
  [[nodiscard]] bool valid() const noexcept { return buffer >= 0; }
};

enum class Opcode : std::uint8_t {
  dma_copy,       // dst = src (any memories; shapes agree element-wise in (p, f) order)
  dma_transpose,  // dst[p][f] = src[f][p] for 2-D tiles; 3-D: src [a, b, c] -> dst [c, b, a] (c = dst partitions)
  nc_matmul,      // dst(psum)[M, N] (+)= stationary[K, M]^T @ moving[K, N]; src[0]=stationary, src[1]=moving
  nc_transpose,   // dst[f][p] = src[p][f] through the PE array (tensor engine) or a vector engine
  activation,     // dst = fn(src[0] * scale + bias); bias = src[1] ([P,1] per partition) or imm0; with
                  // reduce == sum also the row sums of the activated values into reduce_res() (Instr)
  tensor_tensor,  // dst = fn(src[0], src[1])
  tensor_scalar,  // dst = fn1(fn(src[0], s0), s1); s = imm or [P,1] operands src[1], src[2]
  tensor_reduce,  // dst[P, 1...] = reduce over the innermost free dim(s) of src[0] (reduce_free_dims)
  tensor_copy,    // dst = src (with rounding to dst dtype); also PSUM eviction
  memset,         // dst = imm0
  iota,           // dst = imm0 + imm1 * (index along a chosen loop) -- used for causal masks
  bn_stats,       // dst[P, 6] = (count, mean, variance*count) of the even then the odd free elements of src[0]
                  // [P, F <= kBnStatsFmax] (Vector engine, fp32), as nki.isa.bn_stats
  bn_aggr,        // dst[P, 2] = (mean, variance) aggregated from the (count, mean, variance*count) triples
                  // of src[0] [P, 3n] (bn_stats outputs side by side), as nki.isa.bn_aggr
  tensor_copy_predicated,  // dst = src[1] (or imm0 when nsrc == 1) where the predicate src[0] != 0, dst unchanged
                    // elsewhere (it reads dst) -- select(); Vector engine, as nki.isa.tensor_copy_predicated
  affine_select,  // dst = fn(a, 0) ? src[0] : imm1 with a = imm0 + iota_part_coef * p + sum_i iota_free_coef[i] * f_i
                  // (iota's affine value; fn a comparison) -- a select on index positions (causal masks);
                  // GpSimd, as nki.isa.affine_select
  scalar_tensor_tensor,  // dst = fn1(fn(src[0], s0), src[1]) with s0 = src[2] ([P,1], when nsrc == 3) or
                         // imm0 (s0 fn src[0] with reverse0); Vector engine, as nki.isa.scalar_tensor_tensor
};
using target::kBnStatsFmax;
// How many opcodes there are (for tables indexed by opcode).
inline constexpr std::size_t kOpcodeCount = static_cast<std::size_t>(Opcode::scalar_tensor_tensor) + 1;
std::string_view to_string(Opcode) noexcept;

// Where an instruction runs: a compute engine, or a DMA queue.
struct Placement {
  bool dma = false;
  target::Engine engine = target::Engine::vector;
  std::uint8_t queue = 0;  // DMA queue, 0..dma_queues-1 (a transpose: Target::dma_transpose_queue where it has one)
};

struct Instr {
  // Every member has its default below; a user-provided constructor keeps value-initialisation
  // from zeroing the record first (the lowering builds hundreds of thousands in place).
  Instr() noexcept {}  // NOLINT(modernize-use-equals-default): `= default` would zero it first
  AccessPattern dst;
  std::array<AccessPattern, 3> src{};
  double imm0 = 0.0, imm1 = 0.0, scale = 1.0;
  std::int64_t flops = 0;      // useful FLOPs (matmul: 2*K*M*N) for utilisation figures
  // iota and affine_select: value = imm0 + iota_part_coef * p + sum_i iota_free_coef[i] * f_i (causal masks).
  std::int32_t iota_part_coef = 0;
  std::array<std::int32_t, 3> iota_free_coef{0, 0, 0};
  std::int32_t group = -1;     // which fused loop nest produced it (for traces and profiles)
  Opcode op = Opcode::tensor_copy;
  Placement at;
  std::uint8_t nsrc = 0;
  ir::Fn fn = ir::Fn::add;     // activation function / tensor_tensor op / tensor_scalar op0
  ir::Fn fn1 = ir::Fn::add;    // tensor_scalar op1 (when has_op1)
  bool has_op1 = false;
  bool accumulate = false;     // nc_matmul: add into dst instead of overwriting; tensor_reduce: dst op= result
  bool reverse0 = false;       // tensor_scalar: s0 op x instead of x op s0
  ir::ReduceOp reduce = ir::ReduceOp::none;  // tensor_reduce op; activation: sum (reduce_res) or none
  std::uint8_t reduce_free_dims = 1;         // tensor_reduce: how many innermost free dims are reduced
  // nc_matmul in the Tensor engine's tiling mode (nki.isa.nc_matmul tile_position=(pe_row0, pe_col0),
  // tile_size=(pe_rows, pe_cols)), and matmuls in disjoint tiles of the PE array run at the same
  // time. Row tiles: both operands' partitions lie in PE rows [pe_row0, pe_row0 + pe_rows)
  // (partition p feeds PE row p). Column tiles: the stationary's free size is at most pe_cols, and
  // the result lands on PSUM partitions [pe_col0, pe_col0 + pe_cols). 0 rows or columns: all 128.
  std::uint8_t pe_rows = 0;
  std::uint8_t pe_row0 = 0;
  std::uint8_t pe_cols = 0;
  std::uint8_t pe_col0 = 0;

  // An activation with reduce == sum (nki.isa.activation with reduce_op=add, reduce_res and
  // reduce_cmd=reset_reduce) also writes, per partition, the sum over all its free elements of
  // the activated values (in fp32, before rounding to dst's dtype) into reduce_res(), a [P, 1]
  // pattern on dst's partitions held in the otherwise unused src[2]. It is a second destination:
  // nsrc does not count it, and everything that asks what an instruction writes asks this too.
  [[nodiscard]] bool writes_reduce_res() const noexcept { return op == Opcode::activation && reduce != ir::ReduceOp::none; }
  [[nodiscard]] const AccessPattern& reduce_res() const noexcept { return src[2]; }
  [[nodiscard]] AccessPattern& reduce_res() noexcept { return src[2]; }
};

// Aggregate facts about a program, filled by the lowering.
struct ProgramStats {
  std::int64_t sbuf_bytes_per_partition = 0;  // peak allocation
  std::int64_t psum_bytes_per_partition = 0;
  std::int64_t hbm_bytes_read = 0;
  std::int64_t hbm_bytes_written = 0;
  std::int64_t flops = 0;
  std::int64_t matmul_flops = 0;
  std::size_t instructions = 0;
  std::size_t dma_instructions = 0;
};

// What a dependency edge orders (TileProgram::dep_kind).
enum DepKind : std::uint8_t {
  // it carries data or orders two writes (RAW, WAW)
  kDepData = 0,
  // it only orders a write after an earlier *read* of the same elements (a write-after-read: no
  // data flows along it and the predecessor writes nothing the instruction touches)
  kDepWar = 1,
  // a fence: the instruction waits for the predecessor and for every instruction before it on
  // the predecessor's queue (a DMA queue starts ready transfers out of program order, so its
  // last instruction's end alone does not mean the queue has drained). A nest whose buffers do
  // not fit beside the ones before it waits so (lower::Builder::begin_nest); it may also carry data.
  kDepFence = 2,
};

struct TileProgram {
  std::string kernel_name;
  std::string target_name;
  std::string schedule_text;
  std::vector<Buffer> buffers;
  std::vector<Instr> instrs;        // a topological order: every dependency precedes its user
  // Dependency edges in CSR form: the predecessors of instr i are
  // deps[dep_begin[i] .. dep_begin[i+1]).
  std::vector<std::uint32_t> dep_begin;
  std::vector<std::uint32_t> deps;
  // Parallel to deps (or empty, as in hand-built programs: then every edge carries data): what
  // each edge orders (DepKind).
  std::vector<std::uint8_t> dep_kind;
  std::vector<std::string> group_names;  // one per fused loop nest
  ProgramStats stats;

  [[nodiscard]] std::span<const std::uint32_t> preds(std::size_t i) const noexcept {
    return {deps.data() + dep_begin[i], deps.data() + dep_begin[i + 1]};
  }
};

}  // namespace kevo::lower
