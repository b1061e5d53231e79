// Library-private: the execution plans the Interpreter builds once per instruction, so that
// execute() needs no bounds checks, shape logic or allocation per instruction.
#pragma once
#include <cstdint>
#include <vector>

#include "kevo/lower/program.hpp"
#include "scalar.hpp"

namespace kevo::verify::detail {

inline constexpr int kMaxOps = 4;  // dst + up to three sources

// An iteration space shared by up to four operands: `nd` dims (innermost last) after dropping
// size-1 dims and merging dims that are contiguous in every operand.
struct Nest {
  int nd = 0;
  int nops = 0;
  std::int64_t n[4] = {1, 1, 1, 1};
  std::int64_t st[4][kMaxOps] = {};
  std::int32_t buf[kMaxOps] = {-1, -1, -1, -1};
  std::int64_t off[kMaxOps] = {};
};

// One operand walked in its own (p, f0, f1, f2) order, for operands whose shapes differ.
struct Walk {
  std::int32_t buf = -1;
  std::int64_t off = 0;
  std::int64_t n[4] = {1, 1, 1, 1};
  std::int64_t st[4] = {};
};

// A matrix operand of nc_matmul: rows = partitions, cols = flattened free elements.
struct MatOperand {
  std::int32_t buf = -1;
  std::int64_t off = 0;
  std::int64_t rows = 0, cols = 0;
  std::int64_t outer = 0;  // element stride between rows (direct only)
  bool direct = false;     // unit inner stride and outer >= cols: mapped in place (BLAS-friendly)
  Walk walk;               // otherwise gathered/scattered through a contiguous copy
};

enum class Kind : std::uint8_t { nest, copy_walk, transpose, matmul, reduce, iota, bn, affine_select };

struct Plan {
  Kind kind = Kind::nest;
  Round round = Round::none;
  // Copies into HBM (kernel outputs and spills) are not read again by the same instruction: rows
  // long enough are written with non-temporal stores (no read-for-ownership of the destination).
  bool stream_dst = false;
  Nest nest;  // Kind::nest (copies, elementwise compute, memset)
  // Kind::copy_walk: dst and src walked separately (same element count, different shapes);
  // Kind::bn (bn_stats, bn_aggr): both walked per partition
  Walk w_dst, w_src;
  // Kind::matmul
  MatOperand mat[3];  // stationary, moving, dst
  // Kind::transpose: dst walked in its order; src partition = dst flat free index, src free
  // offset of dst partition p = table[table_at + p]
  std::uint32_t table_at = 0;
  std::int64_t src_off = 0, src_ps = 0;
  std::int32_t src_buf = -1;
  std::int64_t dst_P = 0, dst_F = 0;
  // transposes: src viewed [tr_a, tr_b, dst_P], dst [dst_P, tr_b, tr_a] (tr_b = 1: a 2-D transpose)
  std::int64_t tr_a = 1, tr_b = 1;
  // Kind::reduce: src = P x outer x inner; outer walked by w_src (first dims), inner as one
  // strided run when it collapses (inner_stride), else walked by w_inner.
  std::int64_t inner_n = 0, inner_stride = 0;
  bool inner_run = true;
  Walk w_inner;
  std::int64_t outer_n = 0;
  // activation with reduce_res: its operand in the nest (a per-partition scalar), its [P, 1]
  // elements (zeroed first, rounded last) and their rounding
  int red_op = -1;
  Round red_round = Round::none;
  Walk w_red;
};

struct Compiled {
  std::vector<Plan> plans;
  std::vector<std::int64_t> tables;
  std::vector<std::int64_t> buffer_elems;
  std::vector<std::uint8_t> buffer_is_input;  // HBM kernel tensor never written by the program
  std::vector<int> inputs, outputs;           // kernel tensor indices
  std::vector<int> tensor_buffer;             // kernel tensor index -> buffer (or -1)
};

}  // namespace kevo::verify::detail
