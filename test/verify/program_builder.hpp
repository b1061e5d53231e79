// Test helper: builds small TilePrograms by hand (buffers, access patterns, instructions) with
// conservative dependency edges, so each opcode can be tested against independently computed
// values without the lowering.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "kevo/lower/program.hpp"

namespace kevo::test {

struct ProgramBuilder {
  lower::TileProgram p;
  // per buffer: instructions that read / wrote it (for conservative dependency edges)
  std::vector<std::vector<std::uint32_t>> readers, writers;

  ProgramBuilder() {
    p.kernel_name = "hand";
    p.target_name = "trn2";
    p.dep_begin.push_back(0);
  }

  int buffer(lower::Buffer b) {
    p.buffers.push_back(std::move(b));
    readers.emplace_back();
    writers.emplace_back();
    return static_cast<int>(p.buffers.size()) - 1;
  }
  int hbm(std::string name, std::vector<std::int64_t> shape, int tensor, ir::DType dt = ir::DType::fp32) {
    lower::Buffer b;
    b.name = std::move(name);
    b.mem = lower::Memory::hbm;
    b.dtype = dt;
    b.shape = std::move(shape);
    b.tensor = tensor;
    return buffer(std::move(b));
  }
  int sbuf(std::string name, int partitions, std::int64_t free, ir::DType dt = ir::DType::fp32, int nbufs = 1,
           lower::Memory mem = lower::Memory::sbuf) {
    lower::Buffer b;
    b.name = std::move(name);
    b.mem = mem;
    b.dtype = dt;
    b.partitions = partitions;
    b.free_elems = free;
    b.nbufs = nbufs;
    b.shape = {partitions, free};
    return buffer(std::move(b));
  }
  int psum(std::string name, int partitions, std::int64_t free) {
    return sbuf(std::move(name), partitions, free, ir::DType::fp32, 1, lower::Memory::psum);
  }

  // [pc partitions x fn free] tile of an on-chip buffer starting at (slot, p0, f0).
  lower::AccessPattern tile(int buf, int p0, int pc, std::int64_t f0, int fn, int slot = 0) const {
    const auto& b = p.buffers[buf];
    lower::AccessPattern a;
    a.buffer = buf;
    a.offset = std::int64_t{slot} * b.partitions * b.free_elems + std::int64_t{p0} * b.free_elems + f0;
    a.part_stride = b.free_elems;
    a.part_count = pc;
    a.free_size = {1, 1, fn};
    a.free_stride = {0, 0, 1};
    return a;
  }
  // rows r0..r0+rows of a row-major 2-D HBM tensor, columns c0..c0+cols: rows on partitions.
  lower::AccessPattern rows(int buf, std::int64_t r0, int nrows, std::int64_t c0, int ncols) const {
    const auto& b = p.buffers[buf];
    const std::int64_t ld = b.shape.back();
    lower::AccessPattern a;
    a.buffer = buf;
    a.offset = r0 * ld + c0;
    a.part_stride = ld;
    a.part_count = nrows;
    a.free_size = {1, 1, ncols};
    a.free_stride = {0, 0, 1};
    return a;
  }

  // Appends an instruction with conservative edges (any earlier access to a buffer it writes,
  // any earlier write to a buffer it reads), minus those to instructions in `drop`.
  std::uint32_t add(const lower::Instr& in, std::initializer_list<std::uint32_t> drop = {}) {
    const auto id = static_cast<std::uint32_t>(p.instrs.size());
    std::vector<std::uint32_t> preds;
    auto dep = [&](std::uint32_t j) {
      for (auto d : drop)
        if (d == j) return;
      for (auto q : preds)
        if (q == j) return;
      preds.push_back(j);
    };
    for (int s = 0; s < in.nsrc; ++s)
      for (auto w : writers[in.src[s].buffer]) dep(w);
    std::vector<int> written{in.dst.buffer};
    if (in.writes_reduce_res()) written.push_back(in.reduce_res().buffer);
    for (int wb : written) {
      for (auto w : writers[wb]) dep(w);
      for (auto r : readers[wb]) dep(r);
    }
    p.instrs.push_back(in);
    for (auto q : preds) p.deps.push_back(q);
    p.dep_begin.push_back(static_cast<std::uint32_t>(p.deps.size()));
    for (int s = 0; s < in.nsrc; ++s) readers[in.src[s].buffer].push_back(id);
    for (int wb : written) writers[wb].push_back(id);
    return id;
  }

  static lower::Instr make(lower::Opcode op, lower::AccessPattern dst, std::initializer_list<lower::AccessPattern> srcs = {}) {
    lower::Instr in;
    in.op = op;
    in.dst = dst;
    int k = 0;
    for (const auto& s : srcs) in.src[k++] = s;
    in.nsrc = static_cast<std::uint8_t>(k);
    in.at.dma = op == lower::Opcode::dma_copy || op == lower::Opcode::dma_transpose;
    return in;
  }
};

// C[M,N] = A[M,K] @ B[K,N] (tensors 0, 1, 2 as in ir::workload("matmul:...")): A tiles arrive
// transposed by dma_transpose (stationary [Kt, Mt]), inputs rotate through `slots` buffers, K
// accumulates in PSUM, a tensor_copy evicts to SBUF, a DMA stores. `drop_war` omits the
// write-after-read edge from the matmul that last read a slot to the load that refills it.
inline ProgramBuilder tiled_matmul(int M, int N, int K, int Mt, int Nt, int Kt, ir::DType dt = ir::DType::fp32,
                                   int slots = 2, bool drop_war = false) {
  ProgramBuilder b;
  b.p.kernel_name = "matmul";
  const int A = b.hbm("A", {M, K}, 0, dt), B = b.hbm("B", {K, N}, 1, dt), C = b.hbm("C", {M, N}, 2, dt);
  const int at = b.sbuf("aT", Kt, Mt, dt, slots), bs = b.sbuf("b", Kt, Nt, dt, slots), ps = b.psum("acc", Mt, Nt),
            cs = b.sbuf("c", Mt, Nt, dt);
  std::vector<std::uint32_t> last_reader(static_cast<std::size_t>(slots), ~0u);
  int slot = 0;
  for (int m0 = 0; m0 < M; m0 += Mt)
    for (int n0 = 0; n0 < N; n0 += Nt) {
      for (int k0 = 0; k0 < K; k0 += Kt) {
        const std::uint32_t prev = drop_war ? last_reader[static_cast<std::size_t>(slot)] : ~0u;
        b.add(ProgramBuilder::make(lower::Opcode::dma_transpose, b.tile(at, 0, Kt, 0, Mt, slot), {b.rows(A, m0, Mt, k0, Kt)}), {prev});
        b.add(ProgramBuilder::make(lower::Opcode::dma_copy, b.tile(bs, 0, Kt, 0, Nt, slot), {b.rows(B, k0, Kt, n0, Nt)}), {prev});
        lower::Instr mm = ProgramBuilder::make(lower::Opcode::nc_matmul, b.tile(ps, 0, Mt, 0, Nt),
                               {b.tile(at, 0, Kt, 0, Mt, slot), b.tile(bs, 0, Kt, 0, Nt, slot)});
        mm.accumulate = k0 > 0;
        mm.at.engine = target::Engine::tensor;
        last_reader[static_cast<std::size_t>(slot)] = b.add(mm);
        slot = (slot + 1) % slots;
      }
      b.add(ProgramBuilder::make(lower::Opcode::tensor_copy, b.tile(cs, 0, Mt, 0, Nt), {b.tile(ps, 0, Mt, 0, Nt)}));
      b.add(ProgramBuilder::make(lower::Opcode::dma_copy, b.rows(C, m0, Mt, n0, Nt), {b.tile(cs, 0, Mt, 0, Nt)}));
    }
  return b;
}

}  // namespace kevo::test
