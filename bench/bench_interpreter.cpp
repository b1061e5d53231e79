// Interpreter throughput: the CpuRunner times Interpreter::execute() as the real CPU kernel, so
// this is the speed of kevo's CPU backend. Reports GFLOP/s of a tiled fp32 matmul program next to
// one untiled nc_matmul of the same size (one sgemm call through the same Eigen/BLAS path), and
// instructions/s and elements/s of a vector-heavy elementwise program.
#include <benchmark/benchmark.h>

#include <vector>

#include "../test/verify/program_builder.hpp"
#include "kevo/core/rng.hpp"
#include "kevo/verify.hpp"

using kevo::ir::DType;
using kevo::lower::Instr;
using kevo::lower::Opcode;
using kevo::test::ProgramBuilder;

namespace {

std::vector<float> randv(std::size_t n, std::uint64_t seed) {
  kevo::Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(2 * r.uniform() - 1);
  return v;
}

// C[M,N] = AT[K,M]^T @ B[K,N] with tiles Mt x Nt x Kt, K innermost, 2-slot input buffers; the
// stationary tile is loaded as is (AT layout) or through dma_transpose from A[M,K].
ProgramBuilder matmul_program(int M, int N, int K, int Mt, int Nt, int Kt, bool transpose_a) {
  ProgramBuilder b;
  const int A = transpose_a ? b.hbm("A", {M, K}, 0) : b.hbm("AT", {K, M}, 0);
  const int B = b.hbm("B", {K, N}, 1), C = b.hbm("C", {M, N}, 2);
  const int at = b.sbuf("aT", Kt, Mt, DType::fp32, 2), bs = b.sbuf("b", Kt, Nt, DType::fp32, 2),
            ps = b.psum("acc", Mt, Nt), cs = b.sbuf("c", Mt, Nt);
  int slot = 0;
  for (int m0 = 0; m0 < M; m0 += Mt)
    for (int n0 = 0; n0 < N; n0 += Nt) {
      for (int k0 = 0; k0 < K; k0 += Kt) {
        if (transpose_a)
          b.add(ProgramBuilder::make(Opcode::dma_transpose, b.tile(at, 0, Kt, 0, Mt, slot), {b.rows(A, m0, Mt, k0, Kt)}));
        else
          b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(at, 0, Kt, 0, Mt, slot), {b.rows(A, k0, Kt, m0, Mt)}));
        b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(bs, 0, Kt, 0, Nt, slot), {b.rows(B, k0, Kt, n0, Nt)}));
        Instr mm = ProgramBuilder::make(Opcode::nc_matmul, b.tile(ps, 0, Mt, 0, Nt),
                                        {b.tile(at, 0, Kt, 0, Mt, slot), b.tile(bs, 0, Kt, 0, Nt, slot)});
        mm.accumulate = k0 > 0;
        b.add(mm);
        slot ^= 1;
      }
      b.add(ProgramBuilder::make(Opcode::tensor_copy, b.tile(cs, 0, Mt, 0, Nt), {b.tile(ps, 0, Mt, 0, Nt)}));
      b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(C, m0, Mt, n0, Nt), {b.tile(cs, 0, Mt, 0, Nt)}));
    }
  return b;
}

void BM_InterpretMatmul(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const bool tr = state.range(1) != 0;
  const auto b = matmul_program(n, n, n, 128, 512, 128, tr);
  const kevo::verify::Interpreter I(b.p);
  auto m = I.allocate();
  std::vector<std::vector<float>> t = {randv(static_cast<std::size_t>(n) * n, 1), randv(static_cast<std::size_t>(n) * n, 2), {}};
  I.bind_inputs(m, t);
  for (auto _ : state) {
    I.execute(m);
    benchmark::DoNotOptimize(m.buffers.back().data());
  }
  const double flops = 2.0 * n * n * n;
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["instrs"] = static_cast<double>(b.p.instrs.size());
  state.SetLabel(std::string(tr ? "A via dma_transpose; " : "A pre-transposed; ") + kevo::verify::matmul_backend());
}
BENCHMARK(BM_InterpretMatmul)->Args({512, 0})->Args({1024, 0})->Args({1024, 1})->Unit(benchmark::kMillisecond);

// The ceiling: the same product as ONE nc_matmul of K = M = N = n (the interpreter does not enforce
// tile limits), i.e. a single sgemm call through the interpreter's Eigen/BLAS path.
void BM_SingleGemm(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const auto b = matmul_program(n, n, n, n, n, n, false);
  const kevo::verify::Interpreter I(b.p);
  auto m = I.allocate();
  std::vector<std::vector<float>> t = {randv(static_cast<std::size_t>(n) * n, 1), randv(static_cast<std::size_t>(n) * n, 2), {}};
  I.bind_inputs(m, t);
  for (auto _ : state) {
    I.execute(m);
    benchmark::DoNotOptimize(m.buffers.back().data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n * 1e-9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SingleGemm)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond);

// Vector-heavy: per [128 x F] tile, load, activation(exp), tensor_scalar(mul, add),
// tensor_tensor(add), tensor_reduce(max), store: 6 instructions per tile.
void BM_InterpretElementwise(benchmark::State& state) {
  const int F = static_cast<int>(state.range(0));
  const int tiles = 64;
  ProgramBuilder b;
  const int X = b.hbm("X", {128 * tiles, F}, 0), Y = b.hbm("Y", {128 * tiles, F}, 1), R = b.hbm("R", {128 * tiles, 1}, 2);
  const int x = b.sbuf("x", 128, F, DType::fp32, 2), y = b.sbuf("y", 128, F, DType::bf16, 2), r = b.sbuf("r", 128, 1, DType::fp32, 2);
  std::int64_t elems = 0;
  for (int t = 0; t < tiles; ++t) {
    const int s = t & 1;
    b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(x, 0, 128, 0, F, s), {b.rows(X, 128 * t, 128, 0, F)}));
    Instr act = ProgramBuilder::make(Opcode::activation, b.tile(y, 0, 128, 0, F, s), {b.tile(x, 0, 128, 0, F, s)});
    act.fn = kevo::ir::Fn::exp;
    act.scale = 0.5;
    b.add(act);
    Instr ts = ProgramBuilder::make(Opcode::tensor_scalar, b.tile(y, 0, 128, 0, F, s), {b.tile(y, 0, 128, 0, F, s)});
    ts.fn = kevo::ir::Fn::mul;
    ts.imm0 = 3.0;
    ts.has_op1 = true;
    ts.fn1 = kevo::ir::Fn::add;
    ts.imm1 = 1.0;
    b.add(ts);
    Instr tt = ProgramBuilder::make(Opcode::tensor_tensor, b.tile(y, 0, 128, 0, F, s), {b.tile(y, 0, 128, 0, F, s), b.tile(x, 0, 128, 0, F, s)});
    tt.fn = kevo::ir::Fn::add;
    b.add(tt);
    Instr red = ProgramBuilder::make(Opcode::tensor_reduce, b.tile(r, 0, 128, 0, 1, s), {b.tile(y, 0, 128, 0, F, s)});
    red.reduce = kevo::ir::ReduceOp::max;
    b.add(red);
    b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(Y, 128 * t, 128, 0, F), {b.tile(y, 0, 128, 0, F, s)}));
    b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(R, 128 * t, 128, 0, 1), {b.tile(r, 0, 128, 0, 1, s)}));
    elems += 128LL * F * 6;
  }
  const kevo::verify::Interpreter I(b.p);
  auto m = I.allocate();
  std::vector<std::vector<float>> t = {randv(static_cast<std::size_t>(128) * tiles * F, 3), {}, {}};
  I.bind_inputs(m, t);
  for (auto _ : state) {
    I.execute(m);
    benchmark::DoNotOptimize(m.buffers[1].data());
  }
  const auto it = static_cast<double>(state.iterations());
  state.counters["instr/s"] = benchmark::Counter(static_cast<double>(b.p.instrs.size()) * it, benchmark::Counter::kIsRate);
  state.counters["elem/s"] = benchmark::Counter(static_cast<double>(elems) * it, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_InterpretElementwise)->Arg(64)->Arg(512)->Arg(2048)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
