// program_features: figures of the tile program a schedule lowers to, for cost models (evo's
// surrogate strategy, through KernelProblem::features, which lowers beside evaluate() in
// kernel_problem.cpp), without running any runner. The cost is one lowering (the "static
// validity" step of every evaluation) plus one pass over its instructions: no
// simulation, no measurement. The per-instruction times below are a datasheet reading of the
// target (engine clock, elements per cycle, fixed overhead and minimum initiation interval,
// matmul cycles, DMA bandwidth and descriptor floor) summed per engine, with no dependencies,
// queues or overlap: a bound in the spirit of the roofline (Williams et al., CACM 2009,
// https://doi.org/10.1145/1498765.1498785), sharpened by instruction overheads, and the kind of
// program features TVM's cost models learn from (Chen et al., "Learning to Optimize Tensor
// Programs", NeurIPS 2018, https://arxiv.org/abs/1805.08166; Ansor, OSDI 2020,
// https://www.usenix.org/conference/osdi20/presentation/zheng).
#include <algorithm>
#include <array>
#include <cmath>

#include "kevo/search/kernel_problem.hpp"

namespace kevo::search {

namespace {

std::size_t dtype_bytes_of(const lower::TileProgram& p, const lower::AccessPattern& ap) {
  if (ap.buffer < 0 || static_cast<std::size_t>(ap.buffer) >= p.buffers.size()) return 4;
  return ir::dtype_bytes(p.buffers[static_cast<std::size_t>(ap.buffer)].dtype);
}

// Elements of one contiguous run of an access pattern (its innermost free dimension when that
// has stride 1, else one element).
std::int64_t run_of(const lower::AccessPattern& ap) {
  for (int d = 2; d >= 0; --d) {
    const auto i = static_cast<std::size_t>(d);
    if (ap.free_size[i] <= 1) continue;
    return ap.free_stride[i] == 1 ? ap.free_size[i] : 1;
  }
  return 1;
}

double safe_log(double v) { return std::log1p(std::max(0.0, v)); }

}  // namespace

std::vector<double> program_features(const lower::TileProgram& p, const target::Target& t) {
  std::array<double, target::kNumEngines> engine_ns{};
  std::array<double, target::kNumEngines> engine_n{};
  double dma_n = 0, dma_bytes = 0, dma_effective = 0, descriptors = 0;
  for (const lower::Instr& in : p.instrs) {
    if (in.at.dma) {
      const auto b = static_cast<double>(dtype_bytes_of(p, in.dst));
      const auto elems = static_cast<double>(in.dst.elems());
      // A transfer's runs are the shorter of its two sides' (a strided side splits the other).
      const auto run = static_cast<double>(std::max<std::int64_t>(
          1, std::min(run_of(in.dst), in.src[0].valid() ? run_of(in.src[0]) : run_of(in.dst))));
      const double runs = std::ceil(elems / run);
      dma_n += 1;
      dma_bytes += elems * b;
      descriptors += runs;
      dma_effective += runs * std::max(run * b, static_cast<double>(t.dma_descriptor_min_bytes));
      continue;
    }
    const auto e = static_cast<std::size_t>(in.at.engine);
    const target::EngineSpec& spec = t.engines[e];
    const double ghz = spec.clock_ghz > 0 ? spec.clock_ghz : 1.0;
    double cycles = 0;
    if (in.op == lower::Opcode::nc_matmul || (in.op == lower::Opcode::nc_transpose && in.at.engine == target::Engine::tensor)) {
      const lower::AccessPattern& moving = in.op == lower::Opcode::nc_matmul ? in.src[1] : in.src[0];
      cycles = std::max(t.matmul_min_cycles, static_cast<double>(moving.free_elems()));
      if (dtype_bytes_of(p, moving) >= 4) cycles *= t.matmul_fp32_factor;
      if (in.op == lower::Opcode::nc_transpose) cycles *= t.transpose_factor;
    } else {
      std::int64_t elems = in.dst.free_elems();
      if (in.nsrc > 0 && in.src[0].valid()) elems = std::max(elems, in.src[0].free_elems());
      const double rate = dtype_bytes_of(p, in.dst) <= 2 ? spec.elems_per_cycle_16bit : spec.elems_per_cycle_32bit;
      cycles = std::max(spec.min_ii_cycles, spec.fixed_overhead_cycles + static_cast<double>(elems) / std::max(rate, 1e-9));
    }
    engine_ns[e] += cycles / ghz;
    engine_n[e] += 1;
  }
  const double dma_bw = std::max(1e-9, std::min(t.hbm_bytes_per_ns, t.dma_queue_bytes_per_ns * std::max(1, t.dma_queues)));
  const auto hbm = static_cast<double>(p.stats.hbm_bytes_read + p.stats.hbm_bytes_written);
  const double dma_ns = std::max(dma_effective / dma_bw + descriptors * t.dma_descriptor_ns,
                                 dma_n * t.dma_fixed_ns / std::max(1, t.dma_queues));
  const double hbm_ns = hbm / std::max(1e-9, t.hbm_bytes_per_ns);
  double estimate = std::max(dma_ns, hbm_ns);
  for (double ns : engine_ns) estimate = std::max(estimate, ns);
  // An instruction is never free: a program's estimate is at least one DMA's latency.
  if (dma_n > 0) estimate = std::max(estimate, t.dma_fixed_ns);
  std::vector<double> f;
  f.reserve(18);
  f.push_back(estimate);
  f.push_back(std::log(std::max(estimate, 1e-3)));
  for (double ns : engine_ns) f.push_back(safe_log(ns));
  f.push_back(safe_log(dma_ns));
  f.push_back(safe_log(hbm_ns));
  for (double n : engine_n) f.push_back(safe_log(n));
  f.push_back(safe_log(dma_n));
  f.push_back(safe_log(descriptors));
  f.push_back(safe_log(dma_bytes));
  const auto sbuf = static_cast<double>(std::max<std::int64_t>(1, t.sbuf_bytes_per_partition));
  const auto psum = static_cast<double>(std::max<std::int64_t>(1, t.psum_bytes_per_partition));
  f.push_back(static_cast<double>(p.stats.sbuf_bytes_per_partition) / sbuf);
  f.push_back(static_cast<double>(p.stats.psum_bytes_per_partition) / psum);
  f.push_back(safe_log(static_cast<double>(p.stats.instructions)));
  return f;
}

}  // namespace kevo::search
