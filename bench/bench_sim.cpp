// Simulator speed: simulated instructions per second on one core (target >= 5 M/s), for a
// blocked bf16 matmul shaped like the NKI tutorial's (DMA on 16 queues, PSUM accumulation,
// evictions, stores) at several sizes. Run: build/release/bench/bench_sim
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kevo/core/io.hpp"
#include "kevo/ir/workloads.hpp"
#include "kevo/lower/lower.hpp"
#include "kevo/runner/sim.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/target/target.hpp"

namespace {

using kevo::lower::AccessPattern;
using kevo::lower::Instr;
using kevo::lower::Memory;
using kevo::lower::Opcode;

// C[M, N] = A[K, M]^T B[K, N]: per (m, n) block, K/128 steps each loading a [128,128] and a
// [128,512] tile into a 4-deep rotation, one matmul per step, an eviction and a store.
kevo::lower::TileProgram blocked_matmul(int M, int N, int K) {
  kevo::lower::TileProgram p;
  p.kernel_name = "bench_matmul";
  auto add_buf = [&](Memory mem, kevo::ir::DType dt, std::vector<std::int64_t> shape, int parts, std::int64_t free, int nbufs) {
    kevo::lower::Buffer b;
    b.mem = mem;
    b.dtype = dt;
    b.shape = std::move(shape);
    b.partitions = parts;
    b.free_elems = free;
    b.nbufs = nbufs;
    p.buffers.push_back(b);
    return static_cast<int>(p.buffers.size() - 1);
  };
  const int A = add_buf(Memory::hbm, kevo::ir::DType::bf16, {K, M}, 1, 0, 1);
  const int B = add_buf(Memory::hbm, kevo::ir::DType::bf16, {K, N}, 1, 0, 1);
  const int C = add_buf(Memory::hbm, kevo::ir::DType::bf16, {M, N}, 1, 0, 1);
  const int sa = add_buf(Memory::sbuf, kevo::ir::DType::bf16, {128, 128}, 128, 128, 4);
  const int sb = add_buf(Memory::sbuf, kevo::ir::DType::bf16, {128, 512}, 128, 512, 4);
  const int ps = add_buf(Memory::psum, kevo::ir::DType::fp32, {128, 512}, 128, 512, 2);
  const int so = add_buf(Memory::sbuf, kevo::ir::DType::bf16, {128, 512}, 128, 512, 2);
  auto onchip = [&](int buf, std::int64_t free, int slot) {
    AccessPattern a;
    a.buffer = buf;
    const auto& b = p.buffers[static_cast<std::size_t>(buf)];
    a.offset = std::int64_t{slot} * b.partitions * b.free_elems;
    a.part_stride = b.free_elems;
    a.part_count = 128;
    a.free_size = {1, 1, static_cast<std::int32_t>(free)};
    return a;
  };
  auto hbm = [&](int buf, std::int64_t r0, std::int64_t c0, std::int64_t cols) {
    AccessPattern a;
    a.buffer = buf;
    const std::int64_t ld = p.buffers[static_cast<std::size_t>(buf)].shape[1];
    a.offset = r0 * ld + c0;
    a.part_stride = ld;
    a.part_count = 128;
    a.free_size = {1, 1, static_cast<std::int32_t>(cols)};
    return a;
  };
  std::vector<std::vector<std::uint32_t>> preds;
  auto add = [&](Instr in, std::vector<std::uint32_t> d) {
    p.instrs.push_back(in);
    preds.push_back(std::move(d));
    return static_cast<std::uint32_t>(p.instrs.size() - 1);
  };
  std::vector<std::uint32_t> slot_reader(4, UINT32_MAX), psum_reader(2, UINT32_MAX), out_reader(2, UINT32_MAX);
  int step = 0, block = 0;
  for (int m = 0; m < M / 128; ++m)
    for (int n = 0; n < N / 512; ++n, ++block) {
      std::uint32_t last_mm = UINT32_MAX;
      const int pslot = block % 2;
      for (int k = 0; k < K / 128; ++k, ++step) {
        const int s = step % 4;
        std::vector<std::uint32_t> war;
        if (slot_reader[static_cast<std::size_t>(s)] != UINT32_MAX) war.push_back(slot_reader[static_cast<std::size_t>(s)]);
        Instr la;
        la.op = Opcode::dma_copy;
        la.at.dma = true;
        la.at.queue = static_cast<std::uint8_t>((2 * step) % 16);
        la.dst = onchip(sa, 128, s);
        la.src[0] = hbm(A, 128LL * k, 128LL * m, 128);
        la.nsrc = 1;
        const auto ia = add(la, war);
        Instr lb = la;
        lb.at.queue = static_cast<std::uint8_t>((2 * step + 1) % 16);
        lb.dst = onchip(sb, 512, s);
        lb.src[0] = hbm(B, 128LL * k, 512LL * n, 512);
        const auto ib = add(lb, war);
        Instr mm;
        mm.op = Opcode::nc_matmul;
        mm.at.engine = kevo::target::Engine::tensor;
        mm.dst = onchip(ps, 512, pslot);
        mm.src[0] = onchip(sa, 128, s);
        mm.src[1] = onchip(sb, 512, s);
        mm.nsrc = 2;
        mm.accumulate = k > 0;
        mm.flops = 2LL * 128 * 128 * 512;
        std::vector<std::uint32_t> d{ia, ib};
        if (last_mm != UINT32_MAX) d.push_back(last_mm);
        else if (psum_reader[static_cast<std::size_t>(pslot)] != UINT32_MAX) d.push_back(psum_reader[static_cast<std::size_t>(pslot)]);
        last_mm = add(mm, d);
        slot_reader[static_cast<std::size_t>(s)] = last_mm;
      }
      Instr ev;
      ev.op = Opcode::tensor_copy;
      ev.at.engine = kevo::target::Engine::vector;
      ev.dst = onchip(so, 512, pslot);
      ev.src[0] = onchip(ps, 512, pslot);
      ev.nsrc = 1;
      std::vector<std::uint32_t> d{last_mm};
      if (out_reader[static_cast<std::size_t>(pslot)] != UINT32_MAX) d.push_back(out_reader[static_cast<std::size_t>(pslot)]);
      const auto iev = add(ev, d);
      psum_reader[static_cast<std::size_t>(pslot)] = iev;
      Instr st;
      st.op = Opcode::dma_copy;
      st.at.dma = true;
      st.at.queue = static_cast<std::uint8_t>(block % 16);
      st.dst = hbm(C, 128LL * m, 512LL * n, 512);
      st.src[0] = onchip(so, 512, pslot);
      st.nsrc = 1;
      out_reader[static_cast<std::size_t>(pslot)] = add(st, {iev});
    }
  p.dep_begin.push_back(0);
  for (const auto& d : preds) {
    p.deps.insert(p.deps.end(), d.begin(), d.end());
    p.dep_begin.push_back(static_cast<std::uint32_t>(p.deps.size()));
  }
  p.stats.instructions = p.instrs.size();
  return p;
}

void BM_SimulateMatmul(benchmark::State& state) {
  const auto t = kevo::target::load_target("trn1");
  if (!t) {
    state.SkipWithError("cannot load target trn1");
    return;
  }
  const int size = static_cast<int>(state.range(0));
  const auto p = blocked_matmul(size, size, size);
  const auto params = kevo::runner::default_sim_params(*t);
  for (auto _ : state) {
    auto r = kevo::runner::simulate(p, *t, params);
    benchmark::DoNotOptimize(r.done_ns.data());
    benchmark::ClobberMemory();
  }
  const double latency = kevo::runner::simulate(p, *t, params).latency_ns;
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(p.instrs.size()));
  state.SetLabel(std::to_string(p.instrs.size()) + " instructions, simulated " + std::to_string(latency / 1e3) + " us");
}
BENCHMARK(BM_SimulateMatmul)->Arg(1024)->Arg(2048)->Arg(4096)->Unit(benchmark::kMillisecond);

// The NKI tutorial kernels as kevo lowers them (4096 x 8192 x 8192 bf16 on trn1): the programs
// the calibration test simulates; 0 = tiled (99k instructions), 1 = optimized.
void BM_SimulateTutorial(benchmark::State& state) {
  const auto t = kevo::target::load_target("trn1");
  const auto k = kevo::ir::workload("matmul:M=4096,N=8192,K=8192,dtype=bf16,layout=tn");
  if (!t || !k) {
    state.SkipWithError("cannot load target or workload");
    return;
  }
  const char* file = state.range(0) == 0 ? "/examples/schedules/nki_tutorial_2_tiled.schedule"
                                         : "/examples/schedules/nki_tutorial_5_optimized.schedule";
  const auto space = kevo::schedule::ScheduleSpace::derive(*k, *t);
  const auto g = space.parse(kevo::read_file(std::string(KEVO_SOURCE_DIR) + file));
  if (!g) {
    state.SkipWithError(g.error().headline().c_str());
    return;
  }
  const auto p = kevo::lower::lower(space, *g);
  if (!p) {
    state.SkipWithError(p.error().str().c_str());
    return;
  }
  const auto params = kevo::runner::default_sim_params(*t);
  for (auto _ : state) {
    auto r = kevo::runner::simulate(*p, *t, params);
    benchmark::DoNotOptimize(r.done_ns.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(p->instrs.size()));
  state.SetLabel(std::to_string(p->instrs.size()) + " instructions");
}
BENCHMARK(BM_SimulateTutorial)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
