// Hand-built tile programs and a trn1-like target for the runner tests, so the simulator's
// behaviour is tested on programs whose timing can be worked out on paper.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kevo/lower/program.hpp"
#include "kevo/target/target.hpp"

namespace kevo::test {

// The datasheet half of targets/trn1.json, written out so these tests do not depend on the target loader.
inline target::Target trn1_like() {
  target::Target t;
  t.name = "trn1-test";
  t.generation = "NeuronCore-v2";
  t.sbuf_bytes_per_partition = 196608;
  t.psum_bytes_per_partition = 16384;
  t.engines[0] = {2.8, 1.0, 0.25, 64, 64};
  t.engines[1] = {1.12, 1.0, 1.0, 60, 64};
  t.engines[2] = {1.4, 1.0, 1.0, 60, 264};
  t.engines[3] = {1.4, 1.0, 1.0, 60, 64};
  t.matmul_min_cycles = 64;
  t.matmul_fp32_factor = 4;
  t.matmul_fixed_cycles = 64;
  t.port_conflicts = true;
  t.dma_queues = 16;
  t.dma_queue_bytes_per_ns = 17;
  t.hbm_bytes_per_ns = 410;
  t.dma_fixed_ns = 2000;
  t.dma_descriptor_ns = 0;
  t.dma_descriptor_min_bytes = 512;
  t.peak_tensor_flops_bf16 = 9.175e13;
  t.peak_tensor_flops_fp8 = 9.175e13;
  t.peak_tensor_flops_fp32 = 2.294e13;
  t.peak_vector_flops = 2.867e11;
  return t;
}

struct ProgramBuilder {
  lower::TileProgram p;
  std::vector<std::vector<std::uint32_t>> preds;

  ProgramBuilder() {
    p.kernel_name = "hand";
    p.target_name = "trn1-test";
  }

  int hbm(const std::string& name, ir::DType dt, std::int64_t rows, std::int64_t cols, int tensor = -1) {
    lower::Buffer b;
    b.name = name;
    b.mem = lower::Memory::hbm;
    b.dtype = dt;
    b.shape = {rows, cols};
    b.tensor = tensor;
    p.buffers.push_back(b);
    return static_cast<int>(p.buffers.size() - 1);
  }
  int onchip(const std::string& name, lower::Memory mem, ir::DType dt, int partitions, std::int64_t free, int nbufs = 1) {
    lower::Buffer b;
    b.name = name;
    b.mem = mem;
    b.dtype = dt;
    b.partitions = partitions;
    b.free_elems = free;
    b.nbufs = nbufs;
    b.shape = {partitions, free};
    p.buffers.push_back(b);
    return static_cast<int>(p.buffers.size() - 1);
  }
  // [parts, free] tile of an on-chip buffer (slot `slot`, starting at partition 0).
  lower::AccessPattern tile(int buf, int parts, std::int64_t free, int slot = 0) const {
    const lower::Buffer& b = p.buffers[static_cast<std::size_t>(buf)];
    lower::AccessPattern ap;
    ap.buffer = buf;
    ap.offset = slot * b.partitions * b.free_elems;
    ap.part_stride = b.free_elems;
    ap.part_count = parts;
    ap.free_stride = {0, 0, 1};
    ap.free_size = {1, 1, static_cast<std::int32_t>(free)};
    return ap;
  }
  // [rows, cols] block of a row-major HBM matrix starting at (r0, c0): one partition per row.
  lower::AccessPattern block(int buf, std::int64_t r0, std::int64_t c0, int rows, std::int64_t cols) const {
    const lower::Buffer& b = p.buffers[static_cast<std::size_t>(buf)];
    lower::AccessPattern ap;
    ap.buffer = buf;
    ap.offset = r0 * b.shape[1] + c0;
    ap.part_stride = b.shape[1];
    ap.part_count = rows;
    ap.free_stride = {0, 0, 1};
    ap.free_size = {1, 1, static_cast<std::int32_t>(cols)};
    return ap;
  }

  bool auto_deps = false;  // when set, add() ignores `deps` and adds conservative per-buffer edges
  std::vector<std::vector<std::uint32_t>> readers, writers;

  std::uint32_t add(lower::Instr in, std::vector<std::uint32_t> deps = {}) {
    const auto id = static_cast<std::uint32_t>(p.instrs.size());
    if (auto_deps) {
      readers.resize(p.buffers.size());
      writers.resize(p.buffers.size());
      deps.clear();
      auto dep = [&](std::uint32_t j) {
        if (std::find(deps.begin(), deps.end(), j) == deps.end()) deps.push_back(j);
      };
      // Per buffer: the last writer and the readers since it (enough for RAW, WAW and WAR edges).
      for (int k = 0; k < in.nsrc; ++k)
        for (auto w : writers[static_cast<std::size_t>(in.src[static_cast<std::size_t>(k)].buffer)]) dep(w);
      auto& dw = writers[static_cast<std::size_t>(in.dst.buffer)];
      auto& dr = readers[static_cast<std::size_t>(in.dst.buffer)];
      for (auto w : dw) dep(w);
      for (auto r : dr) dep(r);
      for (int k = 0; k < in.nsrc; ++k) readers[static_cast<std::size_t>(in.src[static_cast<std::size_t>(k)].buffer)].push_back(id);
      dw.assign(1, id);
      dr.clear();
    }
    p.instrs.push_back(in);
    preds.push_back(std::move(deps));
    return id;
  }
  std::uint32_t dma(lower::AccessPattern dst, lower::AccessPattern src, int queue, std::vector<std::uint32_t> deps = {}) {
    lower::Instr in;
    in.op = lower::Opcode::dma_copy;
    in.at.dma = true;
    in.at.queue = static_cast<std::uint8_t>(queue);
    in.dst = dst;
    in.src[0] = src;
    in.nsrc = 1;
    return add(in, std::move(deps));
  }
  std::uint32_t matmul(lower::AccessPattern dst, lower::AccessPattern stat, lower::AccessPattern mov, bool acc,
                       std::vector<std::uint32_t> deps = {}) {
    lower::Instr in;
    in.op = lower::Opcode::nc_matmul;
    in.at.engine = target::Engine::tensor;
    in.dst = dst;
    in.src[0] = stat;
    in.src[1] = mov;
    in.nsrc = 2;
    in.accumulate = acc;
    in.flops = 2LL * stat.part_count * stat.free_elems() * mov.free_elems();
    return add(in, std::move(deps));
  }
  std::uint32_t unary(lower::Opcode op, target::Engine e, lower::AccessPattern dst, lower::AccessPattern src,
                      std::vector<std::uint32_t> deps = {}) {
    lower::Instr in;
    in.op = op;
    in.at.engine = e;
    in.dst = dst;
    in.src[0] = src;
    in.nsrc = 1;
    in.fn = op == lower::Opcode::activation ? ir::Fn::exp : ir::Fn::add;
    return add(in, std::move(deps));
  }

  lower::TileProgram finish() {
    p.dep_begin.assign(1, 0);
    p.deps.clear();
    for (auto& d : preds) {
      for (auto x : d) p.deps.push_back(x);
      p.dep_begin.push_back(static_cast<std::uint32_t>(p.deps.size()));
    }
    p.stats = {};
    for (const auto& in : p.instrs) {
      p.stats.instructions++;
      p.stats.flops += in.flops;
      if (in.op == lower::Opcode::nc_matmul) p.stats.matmul_flops += in.flops;
      if (in.at.dma) {
        p.stats.dma_instructions++;
        const auto& s = p.buffers[static_cast<std::size_t>(in.src[0].buffer)];
        const auto& d = p.buffers[static_cast<std::size_t>(in.dst.buffer)];
        const auto bytes = in.src[0].elems() * static_cast<std::int64_t>(ir::dtype_bytes(s.dtype));
        if (s.mem == lower::Memory::hbm) p.stats.hbm_bytes_read += bytes;
        if (d.mem == lower::Memory::hbm) p.stats.hbm_bytes_written += bytes;
      }
    }
    return p;
  }
};

}  // namespace kevo::test
