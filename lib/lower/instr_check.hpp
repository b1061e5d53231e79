// Private to the lowering: the per-instruction structural rules of a target (tile limits,
// partition-start alignment, engine access to PSUM), written once and used both while a program
// is built (Builder::emit, so a bad schedule stops at its first bad instruction) and by
// check_program over a finished program.
#pragma once
#include <fmt/format.h>

#include <cstdint>
#include <vector>

#include "kevo/lower/lower.hpp"
#include "kevo/lower/program.hpp"

namespace kevo::lower::detail {

// What the rules need of a buffer, kept flat so the check touches no strings.
struct BufFacts {
  Memory mem = Memory::hbm;
  ir::DType dtype = ir::DType::fp32;
  int partitions = 1;
  std::int64_t free_elems = 1;
  std::int64_t slot_elems = 1;  // partitions * free_elems
  static BufFacts of(const Buffer& b) noexcept {
    BufFacts f;
    f.mem = b.mem;
    f.dtype = b.dtype;
    f.partitions = b.partitions;
    f.free_elems = std::max<std::int64_t>(1, b.free_elems);
    f.slot_elems = std::max<std::int64_t>(1, static_cast<std::int64_t>(b.partitions) * b.free_elems);
    return f;
  }
};

// Which rule an instruction breaks, found without touching a string (this runs for every
// instruction the lowering emits); `operand` is -1 for the destination, else the source index.
enum class Broken : std::uint8_t {
  none, no_buffer, partitions, partition_start, past_partitions, free_limit, gpsimd_psum, stationary, moving, bn_stats_free, bn_engine, predicated_psum,
  row_tile, col_tile, gpsimd_only, transpose_dtype, divide, no_tensor_copy, reciprocal_bias, immediate_bias, tensor_scalar_ops,
  scalar_operand, matmul_dtypes, activation_fn, tensor_tensor_psum, pe_memory, dma_psum, dma_transpose_form, predicated_dtype
};

// The functions nki.isa.activation takes as `op` that kevo's IR has (aws-neuron-sdk
// nki.api.shared, "Supported Activation Functions for NKI ISA"); nl.negative is not one of them.
inline bool activation_function(ir::Fn f) noexcept {
  switch (f) {
    case ir::Fn::cast: case ir::Fn::exp: case ir::Fn::log: case ir::Fn::tanh: case ir::Fn::gelu_tanh: case ir::Fn::gelu_erf:
    case ir::Fn::silu: case ir::Fn::relu: case ir::Fn::sigmoid: case ir::Fn::rsqrt: case ir::Fn::sqrt: case ir::Fn::square:
    case ir::Fn::abs: case ir::Fn::reciprocal:
      return true;
    default:
      return false;
  }
}
struct Finding {
  Broken what = Broken::none;
  int operand = -1;
};

// Whether a compute engine may run over partitions [start, start + n): 0 for more than 64, 0 or
// 64 for more than 32, a multiple of 32 otherwise.
inline bool compute_start_ok(std::int64_t start, std::int64_t n) noexcept {
  return n > 64 ? start == 0 : n > 32 ? (start == 0 || start == 64) : start % 32 == 0;
}

// The partition an on-chip access starts at (dividing only when needed).
inline std::int64_t start_partition(const AccessPattern& a, const BufFacts& b) noexcept {
  return partition_at(a.offset, b.slot_elems, b.free_elems);
}

inline Broken check_ap(const Instr& in, const AccessPattern& a, const std::vector<BufFacts>& facts, const target::Target& t) noexcept {
  if (a.buffer < 0 || static_cast<std::size_t>(a.buffer) >= facts.size()) return Broken::no_buffer;
  const BufFacts& b = facts[static_cast<std::size_t>(a.buffer)];
  if (b.mem == Memory::hbm) return Broken::none;
  if (a.part_count > t.pmax) return Broken::partitions;
  const std::int64_t start = start_partition(a, b);
  const int n = a.part_count;
  const bool compute = !in.at.dma;
  if (compute && !compute_start_ok(start, n)) return Broken::partition_start;
  if (start + n > b.partitions) return Broken::past_partitions;
  if (compute) {
    if (a.free_elems() > (b.mem == Memory::psum ? t.psum_free_max_elems : t.sbuf_free_max_elems)) return Broken::free_limit;
    if (b.mem == Memory::psum && in.at.engine == target::Engine::gpsimd) return Broken::gpsimd_psum;
  }
  return Broken::none;
}

inline Finding find_broken(const Instr& in, const std::vector<BufFacts>& facts, const target::Target& t) noexcept {
  if (auto w = check_ap(in, in.dst, facts, t); w != Broken::none) return {w, -1};
  for (int s = 0; s < in.nsrc; ++s)
    if (auto w = check_ap(in, in.src[static_cast<std::size_t>(s)], facts, t); w != Broken::none) return {w, s};
  if (in.writes_reduce_res())
    if (auto w = check_ap(in, in.reduce_res(), facts, t); w != Broken::none) return {w, 2};
  const auto mem = [&](const AccessPattern& a) { return facts[static_cast<std::size_t>(a.buffer)].mem; };
  if (in.at.dma) {
    // dma_copy: "Both src and dst tiles can be in HBM or SBUF" ("no longer supports reading
    // directly from PSUM"); dma_transpose: "dst ... must be a tile in SBUF", src.dtype == dst.dtype,
    // 2-byte elements (nki.isa.dma_copy, nki.isa.dma_transpose)
    if (mem(in.dst) == Memory::psum) return {Broken::dma_psum, -1};
    if (in.nsrc >= 1 && mem(in.src[0]) == Memory::psum) return {Broken::dma_psum, 0};
    if (in.op == Opcode::dma_transpose && in.nsrc >= 1) {
      const ir::DType sd = facts[static_cast<std::size_t>(in.src[0].buffer)].dtype, dd = facts[static_cast<std::size_t>(in.dst.buffer)].dtype;
      if (mem(in.dst) != Memory::sbuf || sd != dd || ir::dtype_bytes(sd) != 2) return {Broken::dma_transpose_form, -1};
    }
  }
  // the PE array reads SBUF and writes PSUM ("the stationary and moving must be SBUF tiles, and dst
  // tile must be a PSUM tile", nki.isa.nc_matmul; "Tensor Engine nc_transpose must read the input
  // tile from SBUF and write the transposed result to PSUM", nki.isa.nc_transpose)
  if ((in.op == Opcode::nc_matmul || (in.op == Opcode::nc_transpose && in.at.engine == target::Engine::tensor)) && !in.at.dma) {
    if (mem(in.dst) != Memory::psum) return {Broken::pe_memory, -1};
    for (int s = 0; s < (in.op == Opcode::nc_matmul ? 2 : 1); ++s)
      if (mem(in.src[static_cast<std::size_t>(s)]) != Memory::sbuf) return {Broken::pe_memory, s};
  }
  if (in.op == Opcode::nc_matmul) {
    if (in.src[0].free_elems() > t.stationary_fmax) return {Broken::stationary, 0};
    if (in.src[1].free_elems() > t.moving_fmax) return {Broken::moving, 1};
    // "if one of the input tiles is tfloat32/float32, the other tile must also be tfloat32/float32"
    if ((ir::dtype_bytes(facts[static_cast<std::size_t>(in.src[0].buffer)].dtype) == 4) !=
        (ir::dtype_bytes(facts[static_cast<std::size_t>(in.src[1].buffer)].dtype) == 4))
      return {Broken::matmul_dtypes, 1};
  }
  if (in.op == Opcode::activation && !activation_function(in.fn)) return {Broken::activation_fn, -1};
  // nki.isa.tensor_tensor: "the two input tiles, data1 and data2 cannot both reside in PSUM"
  if (in.op == Opcode::tensor_tensor && in.nsrc >= 2 && facts[static_cast<std::size_t>(in.src[0].buffer)].mem == Memory::psum &&
      facts[static_cast<std::size_t>(in.src[1].buffer)].mem == Memory::psum)
    return {Broken::tensor_tensor_psum, 1};
  if (in.pe_cols != 0) {
    // column tiling mode: as rows, with the stationary's free size inside the tile's columns and
    // the result on the PSUM partitions of those columns
    const int cols = in.pe_cols, col0 = in.pe_col0;
    if (in.op != Opcode::nc_matmul || t.row_tile_min <= 0 || cols < t.row_tile_min || cols > t.pmax || (cols & (cols - 1)) != 0 ||
        col0 % cols != 0 || col0 + cols > t.pmax)
      return {Broken::col_tile, -1};
    if (in.src[0].free_elems() > cols) return {Broken::col_tile, 0};
    const std::int64_t start = start_partition(in.dst, facts[static_cast<std::size_t>(in.dst.buffer)]);
    if (start < col0 || start + in.dst.part_count > col0 + cols) return {Broken::col_tile, -2};
  }
  if (in.pe_rows != 0) {
    // row tiling mode: a matmul, a tile size the target has (row_tile_min up to the whole array),
    // a position on a multiple of it, and both operands' partitions inside the tile's PE rows
    const int rows = in.pe_rows, row0 = in.pe_row0;
    if (in.op != Opcode::nc_matmul || t.row_tile_min <= 0 || rows < t.row_tile_min || rows > t.pmax || (rows & (rows - 1)) != 0 ||
        row0 % rows != 0 || row0 + rows > t.pmax)
      return {Broken::row_tile, -1};
    for (int s = 0; s < 2; ++s) {
      const AccessPattern& a = in.src[static_cast<std::size_t>(s)];
      const std::int64_t start = start_partition(a, facts[static_cast<std::size_t>(a.buffer)]);
      if (start < row0 || start + a.part_count > row0 + rows) return {Broken::row_tile, s};
    }
  }
  // nki.isa.tensor_reduce runs on the Vector engine only (it takes no engine)
  if (in.op == Opcode::tensor_reduce && !in.at.dma && in.at.engine != target::Engine::vector) return {Broken::bn_engine, -1};
  if (in.op == Opcode::bn_stats || in.op == Opcode::bn_aggr) {
    if (in.at.engine != target::Engine::vector) return {Broken::bn_engine, -1};
    if (in.op == Opcode::bn_stats && in.src[0].free_elems() > kBnStatsFmax) return {Broken::bn_stats_free, 0};
  }
  // nki.isa.nc_transpose: "the output dst tile must have the same data type as that of data"
  if (in.op == Opcode::nc_transpose && in.nsrc >= 1 &&
      facts[static_cast<std::size_t>(in.dst.buffer)].dtype != facts[static_cast<std::size_t>(in.src[0].buffer)].dtype)
    return {Broken::transpose_dtype, -1};
  // nki.isa.tensor_copy: "On NeuronCore v2, tensor_copy is not supported on the Scalar Engine"
  if (in.op == Opcode::tensor_copy && !in.at.dma && !t.engine(in.at.engine).tensor_copy) return {Broken::no_tensor_copy, -1};
  // "nki.isa.activation(op=nl.reciprocal) doesn't support setting bias on NeuronCore-v2"
  if (in.op == Opcode::activation && in.fn == ir::Fn::reciprocal && !t.engine(in.at.engine).reciprocal_bias &&
      (in.nsrc >= 2 || in.imm0 != 0))
    return {Broken::reciprocal_bias, in.nsrc >= 2 ? 1 : -1};
  // "In NeuronCore-v2, the bias must be a [N, 1] vector" (nki.isa.activation)
  if (in.op == Opcode::activation && !t.engine(in.at.engine).immediate_bias && in.nsrc < 2 && in.imm0 != 0)
    return {Broken::immediate_bias, -1};
  if (in.op == Opcode::tensor_scalar && !in.at.dma) {
    // the engine's operators (target::EngineSpec::tensor_scalar_ops), and "the operand0 and
    // operand1 (if used) must be float32" (nki.isa.tensor_scalar)
    if (!target::runs_tensor_scalar(t.engine(in.at.engine), in.fn, in.has_op1 ? &in.fn1 : nullptr)) return {Broken::tensor_scalar_ops, -1};
    for (int s = 1; s < in.nsrc; ++s)
      if (facts[static_cast<std::size_t>(in.src[static_cast<std::size_t>(s)].buffer)].dtype != ir::DType::fp32)
        return {Broken::scalar_operand, s};
  }
  // the ISA's operators have no divide (aws-neuron-sdk nki.api.shared, "Supported Math Operators")
  if ((in.op == Opcode::tensor_scalar || in.op == Opcode::tensor_tensor || in.op == Opcode::scalar_tensor_tensor) &&
      (in.fn == ir::Fn::div || ((in.has_op1 || in.op == Opcode::scalar_tensor_tensor) && in.fn1 == ir::Fn::div)))
    return {Broken::divide, -1};
  if (in.op == Opcode::affine_select && in.at.engine != target::Engine::gpsimd) return {Broken::gpsimd_only, -1};
  if (in.op == Opcode::tensor_copy_predicated) {
    if (in.at.engine != target::Engine::vector) return {Broken::bn_engine, -1};  // nki.isa.tensor_copy_predicated
    // "Either src or predicate may be in PSUM, but not both"
    if (in.nsrc == 2 && facts[static_cast<std::size_t>(in.src[0].buffer)].mem == Memory::psum &&
        facts[static_cast<std::size_t>(in.src[1].buffer)].mem == Memory::psum)
      return {Broken::predicated_psum, 1};
    // "src and dst must share the same data type"
    if (in.nsrc == 2 && facts[static_cast<std::size_t>(in.src[1].buffer)].dtype != facts[static_cast<std::size_t>(in.dst.buffer)].dtype)
      return {Broken::predicated_dtype, 1};
  }
  return {};
}

// The reason for a finding, as the lowering reports it. `names` gives buffer names.
inline Invalid describe(const Finding& f, const Instr& in, std::size_t i, const std::vector<BufFacts>& facts,
                        const std::vector<Buffer>& names, const target::Target& t) {
  const std::string where = fmt::format("instruction {} ({})", i, to_string(in.op));
  const AccessPattern& a = f.operand < 0 ? in.dst : in.src[static_cast<std::size_t>(f.operand)];
  if (f.what == Broken::col_tile) {
    if (f.operand == -1)
      return {"unsupported", fmt::format("{}: column tile of {} PE columns at column {} is not one {} offers (row_tile_min {})", where,
                                         static_cast<int>(in.pe_cols), static_cast<int>(in.pe_col0), t.name, t.row_tile_min)};
    if (f.operand == 0)
      return {"internal", fmt::format("{}: stationary free size {} exceeds its column tile of {}", where, in.src[0].free_elems(),
                                      static_cast<int>(in.pe_cols))};
    const std::int64_t st = start_partition(in.dst, facts[static_cast<std::size_t>(in.dst.buffer)]);
    return {"internal", fmt::format("{}: result partitions {}..{} lie outside its column tile {}..{}", where, st,
                                    st + in.dst.part_count - 1, static_cast<int>(in.pe_col0), in.pe_col0 + in.pe_cols - 1)};
  }
  const auto fact = [&] { return facts[static_cast<std::size_t>(a.buffer)]; };
  switch (f.what) {
    case Broken::none: return {"internal", fmt::format("{} breaks no rule", where)};
    case Broken::no_buffer: return {"internal", fmt::format("{} names no buffer", where)};
    case Broken::partitions:
      return {"tile_limit", fmt::format("{} spans {} partitions, {} allows {}", where, a.part_count, t.name, t.pmax)};
    case Broken::partition_start:
      return {"partition_start", fmt::format("{} starts {} partitions at partition {}", where, a.part_count, start_partition(a, fact()))};
    case Broken::past_partitions:
      return {"internal", fmt::format("{} runs past the {} partitions of {}", where, fact().partitions,
                                      names[static_cast<std::size_t>(a.buffer)].name)};
    case Broken::free_limit: {
      const Memory m = fact().mem;
      return {"tile_limit", fmt::format("{} reads {} free elements from {}, {} allows {}", where, a.free_elems(), to_string(m), t.name,
                                        m == Memory::psum ? t.psum_free_max_elems : t.sbuf_free_max_elems)};
    }
    case Broken::gpsimd_psum: return {"unsupported", fmt::format("{} on GpSimd cannot access PSUM", where)};
    case Broken::stationary:
      return {"tile_limit", fmt::format("{}: stationary free size {} exceeds {}", where, a.free_elems(), t.stationary_fmax)};
    case Broken::moving: return {"tile_limit", fmt::format("{}: moving free size {} exceeds {}", where, a.free_elems(), t.moving_fmax)};
    case Broken::bn_stats_free:
      return {"tile_limit", fmt::format("{} reads {} free elements, bn_stats allows {}", where, a.free_elems(), kBnStatsFmax)};
    case Broken::bn_engine: return {"unsupported", fmt::format("{} runs only on the Vector engine", where)};
    case Broken::gpsimd_only: return {"unsupported", fmt::format("{} runs only on the GpSimd engine", where)};
    case Broken::predicated_psum: return {"unsupported", fmt::format("{}: the predicate and the source are both in PSUM", where)};
    case Broken::transpose_dtype:
      return {"internal", fmt::format("{} writes {} {} from {} {}: a transpose keeps its input's dtype", where,
                                      ir::to_string(facts[static_cast<std::size_t>(in.dst.buffer)].dtype),
                                      names[static_cast<std::size_t>(in.dst.buffer)].name,
                                      ir::to_string(facts[static_cast<std::size_t>(in.src[0].buffer)].dtype),
                                      names[static_cast<std::size_t>(in.src[0].buffer)].name)};
    case Broken::divide: return {"internal", fmt::format("{} divides: NKI's ISA has no divide operator", where)};
    case Broken::matmul_dtypes:
      return {"internal", fmt::format("{} multiplies {} by {}: an fp32 operand needs an fp32 other one", where,
                                      ir::to_string(facts[static_cast<std::size_t>(in.src[0].buffer)].dtype),
                                      ir::to_string(facts[static_cast<std::size_t>(in.src[1].buffer)].dtype))};
    case Broken::pe_memory:
      return {"internal", fmt::format("{}: its {} is in {}; the PE array reads SBUF and writes PSUM", where,
                                      f.operand < 0 ? std::string("destination") : fmt::format("source {}", f.operand), to_string(fact().mem))};
    case Broken::dma_psum: return {"internal", fmt::format("{}: a DMA neither reads nor writes PSUM", where)};
    case Broken::dma_transpose_form:
      return {"internal", fmt::format("{}: a DMA transpose writes SBUF in its source's dtype, of 2-byte elements", where)};
    case Broken::predicated_dtype:
      return {"internal", fmt::format("{}: copies {} into {}; a predicated copy keeps its dtype", where,
                                      ir::to_string(facts[static_cast<std::size_t>(in.src[1].buffer)].dtype),
                                      ir::to_string(facts[static_cast<std::size_t>(in.dst.buffer)].dtype))};
    case Broken::tensor_tensor_psum: return {"internal", fmt::format("{}: both inputs are in PSUM", where)};
    case Broken::activation_fn:
      return {"internal", fmt::format("{}: {} is not an activation function", where, ir::to_string(in.fn))};
    case Broken::no_tensor_copy:
      return {"internal", fmt::format("{}: {} has no tensor_copy on the {} engine (an activation copies there)", where, t.name,
                                      target::to_string(in.at.engine))};
    case Broken::reciprocal_bias:
      return {"internal", fmt::format("{}: a reciprocal activation with a bias, which {}'s {} engine does not take", where, t.name,
                                      target::to_string(in.at.engine))};
    case Broken::immediate_bias:
      return {"internal", fmt::format("{}: an activation with the constant bias {}, which {}'s {} engine does not take (a [P, 1] "
                                      "tile only)",
                                      where, in.imm0, t.name, target::to_string(in.at.engine))};
    case Broken::tensor_scalar_ops:
      return {"internal", fmt::format("{}: {}{} on {}'s {} engine, which does not run that tensor_scalar", where, ir::to_string(in.fn),
                                      in.has_op1 ? fmt::format(" then {}", ir::to_string(in.fn1)) : std::string(), t.name,
                                      target::to_string(in.at.engine))};
    case Broken::scalar_operand:
      return {"unsupported", fmt::format("{}: its operand {} is {}; a tensor_scalar's operands must be fp32", where,
                                         names[static_cast<std::size_t>(a.buffer)].name, ir::to_string(fact().dtype))};
    case Broken::col_tile: break;  // above
    case Broken::row_tile:
      if (f.operand < 0)
        return {"unsupported", fmt::format("{}: row tile of {} PE rows at row {} is not one {} offers (row_tile_min {})", where,
                                           static_cast<int>(in.pe_rows), static_cast<int>(in.pe_row0), t.name, t.row_tile_min)};
      return {"internal", fmt::format("{}: {} partitions {}..{} lie outside its row tile {}..{}", where,
                                      f.operand == 0 ? "stationary" : "moving", start_partition(a, fact()),
                                      start_partition(a, fact()) + a.part_count - 1, static_cast<int>(in.pe_row0),
                                      in.pe_row0 + in.pe_rows - 1)};
  }
  return {"internal", fmt::format("{} breaks an unknown rule", where)};
}

// The first rule instruction `i` breaks, or nothing.
inline Expected<void, Invalid> check_instr(const Instr& in, std::size_t i, const std::vector<BufFacts>& facts,
                                           const std::vector<Buffer>& names, const target::Target& t) {
  const Finding f = find_broken(in, facts, t);
  if (f.what == Broken::none) return {};
  return unexpected(describe(f, in, i, facts, names, t));
}

}  // namespace kevo::lower::detail
