// Every opcode of docs/TILE_PROGRAM.md on hand-built programs, against values computed here
// independently (plain loops in double precision), plus bounds checking, poisoning and orders.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "kevo/core/error.hpp"
#include "kevo/core/rng.hpp"
#include "kevo/ir/eval.hpp"
#include "kevo/ir/fn.hpp"
#include "kevo/verify.hpp"
#include "program_builder.hpp"

using kevo::Error;
using kevo::ir::DType;
using kevo::ir::Fn;
using kevo::lower::AccessPattern;
using kevo::lower::Instr;
using kevo::lower::Opcode;
using kevo::test::ProgramBuilder;
using kevo::verify::Interpreter;

namespace {

// Executes `p` once on `inputs` (one vector per kernel tensor, empty for outputs) and returns
// tensor `out`.
std::vector<float> run_program(const kevo::lower::TileProgram& p, std::vector<std::vector<float>> inputs, int out) {
  Interpreter I(p);
  auto m = I.allocate();
  I.bind_inputs(m, inputs);
  I.execute(m);
  return I.output(m, out);
}

std::vector<float> randv(std::size_t n, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  kevo::Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = lo + (hi - lo) * static_cast<float>(r.uniform());
  return v;
}

// One input HBM tensor (tensor 0) of `rows x cols`, one SBUF tile of the same shape loaded from it,
// and an output HBM tensor (tensor 1) stored from buffer `out_buf` when the test calls store().
struct Fixture {
  ProgramBuilder b;
  int rows, cols;
  int in_hbm, out_hbm, x_sb;
  Fixture(int r, int c, DType out_dt = DType::fp32) : rows(r), cols(c) {
    in_hbm = b.hbm("X", {r, c}, 0);
    out_hbm = b.hbm("Y", {r, c}, 1, out_dt);
    x_sb = b.sbuf("x", r, c);
    b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(x_sb, 0, r, 0, c), {b.rows(in_hbm, 0, r, 0, c)}));
  }
  void store(int buf) {
    b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(out_hbm, 0, rows, 0, cols), {b.tile(buf, 0, rows, 0, cols)}));
  }
  std::vector<float> run(const std::vector<float>& x) {
    return run_program(b.p, {x, {}}, 1);
  }
};

double gelu_tanh(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

double ref_unary(Fn f, double x) {
  switch (f) {
    case Fn::exp: return std::exp(x);
    case Fn::log: return std::log(x);
    case Fn::tanh: return std::tanh(x);
    case Fn::gelu_tanh: return gelu_tanh(x);
    case Fn::gelu_erf: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Fn::silu: return x / (1 + std::exp(-x));
    case Fn::relu: return x > 0 ? x : 0;
    case Fn::sigmoid: return 1 / (1 + std::exp(-x));
    case Fn::rsqrt: return 1 / std::sqrt(x);
    case Fn::sqrt: return std::sqrt(x);
    case Fn::square: return x * x;
    case Fn::abs: return std::fabs(x);
    case Fn::neg: return -x;
    case Fn::reciprocal: return 1 / x;
    case Fn::cast: return x;
    default: return NAN;
  }
}

double ref_binary(Fn f, double a, double b) {
  switch (f) {
    case Fn::add: return a + b;
    case Fn::sub: return a - b;
    case Fn::mul: return a * b;
    case Fn::div: return a / b;
    case Fn::max: return std::max(a, b);
    case Fn::min: return std::min(a, b);
    case Fn::lt: return a < b;
    case Fn::le: return a <= b;
    case Fn::gt: return a > b;
    case Fn::ge: return a >= b;
    case Fn::eq: return a == b;
    case Fn::ne: return a != b;
    default: return NAN;
  }
}

}  // namespace

extern "C" {
void openblas_set_num_threads(int) __attribute__((weak));
int openblas_get_num_threads(void) __attribute__((weak));
}

TEST_CASE("constructing an interpreter changes no process-wide setting", "[verify][process]") {
  // The process-wide BLAS set-up is verify::configure_process_blas(), an application's opt-in;
  // an Interpreter (a library object, made in the embedding application's process) touches
  // neither OpenBLAS's thread count nor the environment.
  const char* before_env = std::getenv("OPENBLAS_CORETYPE");
  const std::string env_before = before_env ? before_env : "<unset>";
  if (openblas_set_num_threads) openblas_set_num_threads(3);
  const int threads = openblas_get_num_threads ? openblas_get_num_threads() : -1;
  {
    ProgramBuilder b;
    const int in = b.hbm("X", {4, 5}, 0), out = b.hbm("Y", {4, 5}, 1), sb = b.sbuf("s", 4, 5);
    b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(sb, 0, 4, 0, 5), {b.rows(in, 0, 4, 0, 5)}));
    b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(out, 0, 4, 0, 5), {b.tile(sb, 0, 4, 0, 5)}));
    const auto x = randv(20, 3);
    CHECK(run_program(b.p, {x, {}}, 1) == x);
  }
  CHECK((openblas_get_num_threads ? openblas_get_num_threads() : -1) == threads);
  const char* after_env = std::getenv("OPENBLAS_CORETYPE");
  CHECK((after_env ? std::string(after_env) : std::string("<unset>")) == env_before);
  if (openblas_set_num_threads) openblas_set_num_threads(1);
}

TEST_CASE("dma_copy moves a strided HBM window through SBUF and back unchanged", "[verify][opcode]") {
  ProgramBuilder b;
  const int in = b.hbm("X", {8, 10}, 0), out = b.hbm("Y", {4, 5}, 1), sb = b.sbuf("s", 4, 5);
  // rows 1,3,5,7 and columns 2,4,6,8,10? -> columns 1,3,5,7,9 (stride 2)
  AccessPattern src = b.rows(in, 1, 4, 1, 5);
  src.part_stride = 20;
  src.free_stride = {0, 0, 2};
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(sb, 0, 4, 0, 5), {src}));
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(out, 0, 4, 0, 5), {b.tile(sb, 0, 4, 0, 5)}));
  const auto x = randv(80, 1);
  const auto y = run_program(b.p, {x, {}}, 1);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 5; ++c) REQUIRE(y[r * 5 + c] == x[(1 + 2 * r) * 10 + 1 + 2 * c]);
}

TEST_CASE("dma_copy with partition stride 0 broadcasts one HBM row to every partition", "[verify][opcode]") {
  ProgramBuilder b;
  const int in = b.hbm("X", {1, 6}, 0), out = b.hbm("Y", {3, 6}, 1), sb = b.sbuf("s", 3, 6);
  AccessPattern src = b.rows(in, 0, 3, 0, 6);
  src.part_stride = 0;
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(sb, 0, 3, 0, 6), {src}));
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(out, 0, 3, 0, 6), {b.tile(sb, 0, 3, 0, 6)}));
  const auto x = randv(6, 2);
  const auto y = run_program(b.p, {x, {}}, 1);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 6; ++c) REQUIRE(y[r * 6 + c] == x[c]);
}

TEST_CASE("dma_copy between differently shaped patterns pairs elements in (p, f) order", "[verify][opcode]") {
  ProgramBuilder b;
  const int in = b.hbm("X", {2, 12}, 0), out = b.hbm("Y", {2, 12}, 1), sb = b.sbuf("s", 2, 12);
  // SBUF side viewed as [2 x 3x4]; HBM side as [2 x 12]
  AccessPattern t = b.tile(sb, 0, 2, 0, 12);
  t.free_size = {1, 3, 4};
  t.free_stride = {0, 4, 1};
  b.add(ProgramBuilder::make(Opcode::dma_copy, t, {b.rows(in, 0, 2, 0, 12)}));
  // store transposed inside each row: element (p, j) of the row goes to column (j%4)*3 + j/4
  AccessPattern o = b.rows(out, 0, 2, 0, 12);
  o.free_size = {1, 3, 4};
  o.free_stride = {0, 1, 3};
  b.add(ProgramBuilder::make(Opcode::dma_copy, o, {b.tile(sb, 0, 2, 0, 12)}));
  const auto x = randv(24, 3);
  const auto y = run_program(b.p, {x, {}}, 1);
  for (int p = 0; p < 2; ++p)
    for (int j = 0; j < 12; ++j) REQUIRE(y[p * 12 + (j % 4) * 3 + j / 4] == x[p * 12 + j]);
}

TEST_CASE("dma_transpose writes dst[p][f] = src[f][p]", "[verify][opcode]") {
  ProgramBuilder b;
  const int in = b.hbm("X", {5, 7}, 0), out = b.hbm("Y", {7, 5}, 1), sb = b.sbuf("s", 7, 5);
  b.add(ProgramBuilder::make(Opcode::dma_transpose, b.tile(sb, 0, 7, 0, 5), {b.rows(in, 0, 5, 0, 7)}));
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(out, 0, 7, 0, 5), {b.tile(sb, 0, 7, 0, 5)}));
  const auto x = randv(35, 4);
  const auto y = run_program(b.p, {x, {}}, 1);
  for (int p = 0; p < 7; ++p)
    for (int f = 0; f < 5; ++f) REQUIRE(y[p * 5 + f] == x[f * 7 + p]);
}

TEST_CASE("dma_transpose in 3-D writes dst[z][y][x] = src[x][y][z] (several k tiles of A^T in one instruction)",
          "[verify][opcode]") {
  // A [M=6, K=12] read as [m, kt, k] with k tiles of 4 (strides 12, 4, 1); dst: 4 partitions (k)
  // by (kt = 3, m = 6), the layout of a load footprint holding 3 k tiles of A^T
  ProgramBuilder b;
  const int M = 6, K = 12, T = 4, KT = K / T;
  const int in = b.hbm("A", {M, K}, 0), out = b.hbm("Y", {T, KT * M}, 1), sb = b.sbuf("s", T, KT * M);
  AccessPattern src = b.rows(in, 0, M, 0, K);
  src.free_size = {1, KT, T};
  src.free_stride = {0, T, 1};
  b.add(ProgramBuilder::make(Opcode::dma_transpose, b.tile(sb, 0, T, 0, KT * M), {src}));
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(out, 0, T, 0, KT * M), {b.tile(sb, 0, T, 0, KT * M)}));
  const auto x = randv(M * K, 8);
  const auto y = run_program(b.p, {x, {}}, 1);
  for (int k = 0; k < T; ++k)
    for (int kt = 0; kt < KT; ++kt)
      for (int m = 0; m < M; ++m) REQUIRE(y[k * KT * M + kt * M + m] == x[m * K + kt * T + k]);
  // nc_transpose (the PE array) stays 2-D: the same shapes on chip, [M, KT x T] -> [T, KT x M],
  // are a dma_transpose but not an nc_transpose
  for (const Opcode op : {Opcode::dma_transpose, Opcode::nc_transpose}) {
    ProgramBuilder c;
    const int in2 = c.hbm("A", {M, K}, 0), sb2 = c.sbuf("s", M, K), ps = c.psum("p", T, KT * M);
    c.add(ProgramBuilder::make(Opcode::dma_copy, c.tile(sb2, 0, M, 0, K), {c.rows(in2, 0, M, 0, K)}));
    AccessPattern s2 = c.tile(sb2, 0, M, 0, K);
    s2.free_size = {1, KT, T};
    s2.free_stride = {0, T, 1};
    c.add(ProgramBuilder::make(op, c.tile(ps, 0, T, 0, KT * M), {s2}));
    if (op == Opcode::dma_transpose) REQUIRE_NOTHROW(Interpreter(c.p));
    else REQUIRE_THROWS_WITH(Interpreter(c.p), Catch::Contains("is not the transpose of dst"));
  }
}

TEST_CASE("nc_transpose into PSUM transposes an SBUF tile", "[verify][opcode]") {
  Fixture fx(6, 9);
  auto& b = fx.b;
  const int ps = b.psum("pt", 9, 6), sb = b.sbuf("t", 9, 6);
  b.add(ProgramBuilder::make(Opcode::nc_transpose, b.tile(ps, 0, 9, 0, 6), {b.tile(fx.x_sb, 0, 6, 0, 9)}));
  b.add(ProgramBuilder::make(Opcode::tensor_copy, b.tile(sb, 0, 9, 0, 6), {b.tile(ps, 0, 9, 0, 6)}));
  // Y has shape 6x9 but we store the 9x6 transpose flat
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(fx.out_hbm, 0, 6, 0, 9), {b.tile(sb, 0, 9, 0, 6)}));
  const auto x = randv(54, 5);
  const auto y = fx.run(x);
  for (int p = 0; p < 9; ++p)
    for (int f = 0; f < 6; ++f) REQUIRE(y[p * 6 + f] == x[f * 9 + p]);
}

TEST_CASE("nc_matmul computes stationary^T x moving into PSUM in fp32", "[verify][opcode]") {
  const int K = 16, M = 12, N = 20;
  ProgramBuilder b;
  const int a = b.hbm("A", {K, M}, 0), w = b.hbm("B", {K, N}, 1), c = b.hbm("C", {M, N}, 2);
  const int as = b.sbuf("a", K, M), ws = b.sbuf("w", K, N), pc = b.psum("p", M, N), cs = b.sbuf("c", M, N);
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(as, 0, K, 0, M), {b.rows(a, 0, K, 0, M)}));
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(ws, 0, K, 0, N), {b.rows(w, 0, K, 0, N)}));
  b.add(ProgramBuilder::make(Opcode::nc_matmul, b.tile(pc, 0, M, 0, N), {b.tile(as, 0, K, 0, M), b.tile(ws, 0, K, 0, N)}));
  b.add(ProgramBuilder::make(Opcode::tensor_copy, b.tile(cs, 0, M, 0, N), {b.tile(pc, 0, M, 0, N)}));
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(c, 0, M, 0, N), {b.tile(cs, 0, M, 0, N)}));
  const auto A = randv(K * M, 6), B = randv(K * N, 7);
  const auto C = run_program(b.p, {A, B, {}}, 2);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int k = 0; k < K; ++k) s += double{A[k * M + i]} * B[k * N + j];
      REQUIRE(C[i * N + j] == Approx(s).margin(1e-5));
    }
}

TEST_CASE("nc_matmul with accumulate adds to the PSUM tile; without it overwrites", "[verify][opcode]") {
  const int K = 8, M = 4, N = 6;
  ProgramBuilder b;
  const int a = b.hbm("A", {K, M}, 0), w = b.hbm("B", {K, N}, 1), c = b.hbm("C", {M, N}, 2);
  const int as = b.sbuf("a", K, M), ws = b.sbuf("w", K, N), pc = b.psum("p", M, N);
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(as, 0, K, 0, M), {b.rows(a, 0, K, 0, M)}));
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(ws, 0, K, 0, N), {b.rows(w, 0, K, 0, N)}));
  Instr mm = ProgramBuilder::make(Opcode::nc_matmul, b.tile(pc, 0, M, 0, N), {b.tile(as, 0, K, 0, M), b.tile(ws, 0, K, 0, N)});
  b.add(mm);  // overwrite (PSUM starts as NaN poison: must not leak)
  mm.accumulate = true;
  b.add(mm);
  b.add(mm);
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(c, 0, M, 0, N), {b.tile(pc, 0, M, 0, N)}));
  const auto A = randv(K * M, 8), B = randv(K * N, 9);
  const auto C = run_program(b.p, {A, B, {}}, 2);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int k = 0; k < K; ++k) s += double{A[k * M + i]} * B[k * N + j];
      REQUIRE(C[i * N + j] == Approx(3 * s).margin(1e-5));
    }
}

TEST_CASE("nc_matmul reads operands with non-unit free strides", "[verify][opcode]") {
  const int K = 4, M = 3, N = 5;
  ProgramBuilder b;
  const int a = b.hbm("A", {K, 2 * M}, 0), w = b.hbm("B", {K, N}, 1), c = b.hbm("C", {M, N}, 2);
  const int as = b.sbuf("a", K, 2 * M), ws = b.sbuf("w", K, N), pc = b.psum("p", M, N);
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(as, 0, K, 0, 2 * M), {b.rows(a, 0, K, 0, 2 * M)}));
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(ws, 0, K, 0, N), {b.rows(w, 0, K, 0, N)}));
  AccessPattern st = b.tile(as, 0, K, 1, M);  // odd columns
  st.free_stride = {0, 0, 2};
  b.add(ProgramBuilder::make(Opcode::nc_matmul, b.tile(pc, 0, M, 0, N), {st, b.tile(ws, 0, K, 0, N)}));
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(c, 0, M, 0, N), {b.tile(pc, 0, M, 0, N)}));
  const auto A = randv(K * 2 * M, 10), B = randv(K * N, 11);
  const auto C = run_program(b.p, {A, B, {}}, 2);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int k = 0; k < K; ++k) s += double{A[k * 2 * M + 2 * i + 1]} * B[k * N + j];
      REQUIRE(C[i * N + j] == Approx(s).margin(1e-5));
    }
}

TEST_CASE("activation applies fn(x * scale + bias) for every unary function", "[verify][opcode]") {
  const Fn fns[] = {Fn::exp,  Fn::log,   Fn::tanh,   Fn::gelu_tanh, Fn::gelu_erf, Fn::silu, Fn::relu,      Fn::sigmoid,
                    Fn::rsqrt, Fn::sqrt, Fn::square, Fn::abs,       Fn::neg,      Fn::reciprocal, Fn::cast};
  for (Fn f : fns) {
    const bool positive = f == Fn::log || f == Fn::rsqrt || f == Fn::sqrt;
    Fixture fx(4, 33);
    auto& b = fx.b;
    const int y = b.sbuf("y", 4, 33);
    Instr in = ProgramBuilder::make(Opcode::activation, b.tile(y, 0, 4, 0, 33), {b.tile(fx.x_sb, 0, 4, 0, 33)});
    in.fn = f;
    in.scale = 0.5;
    in.imm0 = positive ? 0.75 : -0.25;
    b.add(in);
    fx.store(y);
    const auto x = randv(4 * 33, 20 + static_cast<int>(f), positive ? 0.1f : -3.0f, 3.0f);
    const auto out = fx.run(x);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double want = ref_unary(f, double{x[i]} * 0.5 + in.imm0);
      INFO("fn " << static_cast<int>(f) << " x " << x[i]);
      REQUIRE(out[i] == Approx(want).epsilon(2e-6).margin(1e-6));
    }
  }
}

TEST_CASE("activation takes a per-partition bias operand broadcast along the free dim", "[verify][opcode]") {
  Fixture fx(5, 8);
  auto& b = fx.b;
  const int bias_h = b.hbm("bias", {5, 1}, 2), bias = b.sbuf("bias", 5, 1), y = b.sbuf("y", 5, 8);
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(bias, 0, 5, 0, 1), {b.rows(bias_h, 0, 5, 0, 1)}));
  Instr in = ProgramBuilder::make(Opcode::activation, b.tile(y, 0, 5, 0, 8), {b.tile(fx.x_sb, 0, 5, 0, 8), b.tile(bias, 0, 5, 0, 1)});
  in.fn = Fn::exp;
  in.scale = 2.0;
  b.add(in);
  fx.store(y);
  const auto x = randv(40, 30), bv = randv(5, 31);
  const auto out = run_program(b.p, {x, {}, bv}, 1);
  for (int p = 0; p < 5; ++p)
    for (int f = 0; f < 8; ++f) REQUIRE(out[p * 8 + f] == Approx(std::exp(2.0 * x[p * 8 + f] + bv[p])).epsilon(1e-6));
}

TEST_CASE("activation with reduce_res also writes each partition's sum of the activated values", "[verify][opcode]") {
  // X [4 x 24] viewed as [4 x 2 x 12]; the destination keeps a gap between its two runs of 12
  // (so each partition is two rows of the interpreter's loop), and the sums land, rounded to
  // bf16 once, in column 1 of a bf16 [4 x 3] tile that held 7s before
  ProgramBuilder b;
  const int xh = b.hbm("X", {4, 24}, 0), bh = b.hbm("bias", {4, 1}, 1), yh = b.hbm("Y", {4, 24}, 2), sh = b.hbm("S", {4, 1}, 3);
  const int xs = b.sbuf("x", 4, 24), bs = b.sbuf("b", 4, 1), ys = b.sbuf("y", 4, 32), ss = b.sbuf("s", 4, 3, DType::bf16);
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(xs, 0, 4, 0, 24), {b.rows(xh, 0, 4, 0, 24)}));
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(bs, 0, 4, 0, 1), {b.rows(bh, 0, 4, 0, 1)}));
  Instr ms = ProgramBuilder::make(Opcode::memset, b.tile(ss, 0, 4, 0, 3));
  ms.imm0 = 7.0;
  b.add(ms);
  AccessPattern x = b.tile(xs, 0, 4, 0, 24), y = b.tile(ys, 0, 4, 0, 24);
  x.free_size = {1, 2, 12};
  x.free_stride = {0, 12, 1};
  y.free_size = {1, 2, 12};
  y.free_stride = {0, 16, 1};
  Instr act = ProgramBuilder::make(Opcode::activation, y, {x, b.tile(bs, 0, 4, 0, 1)});
  act.fn = Fn::exp;
  act.scale = 0.5;
  act.reduce = kevo::ir::ReduceOp::sum;
  act.reduce_res() = b.tile(ss, 0, 4, 1, 1);
  REQUIRE(act.writes_reduce_res());
  REQUIRE(act.nsrc == 2);
  b.add(act);
  AccessPattern yout = b.rows(yh, 0, 4, 0, 24);
  yout.free_size = {1, 2, 12};
  yout.free_stride = {0, 12, 1};
  b.add(ProgramBuilder::make(Opcode::dma_copy, yout, {y}));
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(sh, 0, 4, 0, 1), {b.tile(ss, 0, 4, 1, 1)}));
  const auto xv = randv(96, 50), bv = randv(4, 51);
  Interpreter I(b.p);
  auto m = I.allocate();
  const std::vector<std::vector<float>> inputs{xv, bv, {}, {}};
  I.bind_inputs(m, inputs);
  I.execute(m);
  const auto Y = I.output(m, 2), S = I.output(m, 3);
  for (int p = 0; p < 4; ++p) {
    double sum = 0;
    for (int f = 0; f < 24; ++f) {
      const double want = std::exp(0.5 * xv[p * 24 + f] + bv[p]);
      REQUIRE(Y[p * 24 + f] == Approx(want).epsilon(1e-6));
      sum += Y[p * 24 + f];
    }
    INFO("partition " << p);
    REQUIRE(S[p] == Approx(sum).epsilon(1.0 / 256));             // bf16's precision, not the 7s it held
    REQUIRE(S[p] == kevo::ir::round_to(DType::bf16, S[p]));       // rounded to bf16
    REQUIRE(S[p] != kevo::ir::round_to(DType::bf16, static_cast<float>(sum - Y[p * 24])));  // every element counted
  }

  SECTION("a reduce_res that is not [P x 1], or a reduction other than sum, is refused") {
    Instr bad = act;
    bad.reduce_res() = b.tile(ss, 0, 4, 0, 2);
    b.p.instrs[3] = bad;
    REQUIRE_THROWS_WITH(Interpreter(b.p), Catch::Contains("per-partition scalar"));
    bad = act;
    bad.reduce = kevo::ir::ReduceOp::max;
    b.p.instrs[3] = bad;
    REQUIRE_THROWS_WITH(Interpreter(b.p), Catch::Contains("only by sum"));
    bad = act;
    bad.reduce_res() = b.tile(bs, 0, 4, 0, 1);
    b.p.instrs[3] = bad;
    REQUIRE_THROWS_WITH(Interpreter(b.p), Catch::Contains("shares buffer"));
  }
}

TEST_CASE("activation with reduce_res over one free element sums each partition alone", "[verify][opcode]") {
  // [6 x 1]: the interpreter's row runs down the partitions; each sum is its own element
  ProgramBuilder b;
  const int xh = b.hbm("X", {6, 1}, 0), sh = b.hbm("S", {6, 1}, 1);
  const int xs = b.sbuf("x", 6, 1), ys = b.sbuf("y", 6, 1), ss = b.sbuf("s", 6, 1);
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(xs, 0, 6, 0, 1), {b.rows(xh, 0, 6, 0, 1)}));
  Instr act = ProgramBuilder::make(Opcode::activation, b.tile(ys, 0, 6, 0, 1), {b.tile(xs, 0, 6, 0, 1)});
  act.fn = Fn::exp;
  act.reduce = kevo::ir::ReduceOp::sum;
  act.reduce_res() = b.tile(ss, 0, 6, 0, 1);
  b.add(act);
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(sh, 0, 6, 0, 1), {b.tile(ss, 0, 6, 0, 1)}));
  const auto x = randv(6, 52);
  const auto S = run_program(b.p, {x, {}}, 1);
  for (int p = 0; p < 6; ++p) REQUIRE(S[p] == Approx(std::exp(double{x[p]})).epsilon(1e-6));
}

TEST_CASE("affine_select keeps the source where its affine position compares true with zero, else the fill", "[verify][opcode]") {
  // a = 3 + 2p - f (f over [2 x 5] free positions flattened with coefficients -5 and -1), for
  // every comparison; a [4 x 2 x 5] source
  const Fn cmps[] = {Fn::lt, Fn::le, Fn::gt, Fn::ge, Fn::eq, Fn::ne};
  for (Fn f : cmps) {
    ProgramBuilder b;
    const int xh = b.hbm("X", {4, 10}, 0), yh = b.hbm("Y", {4, 10}, 1);
    const int xs = b.sbuf("x", 4, 10), ys = b.sbuf("y", 4, 10);
    b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(xs, 0, 4, 0, 10), {b.rows(xh, 0, 4, 0, 10)}));
    AccessPattern x = b.tile(xs, 0, 4, 0, 10), y = b.tile(ys, 0, 4, 0, 10);
    for (auto* a : {&x, &y}) {
      a->free_size = {1, 2, 5};
      a->free_stride = {0, 5, 1};
    }
    Instr in = ProgramBuilder::make(Opcode::affine_select, y, {x});
    in.at.engine = kevo::target::Engine::gpsimd;
    in.fn = f;
    in.imm0 = 3;
    in.iota_part_coef = 2;
    in.iota_free_coef = {0, -5, -1};
    in.imm1 = -std::numeric_limits<double>::infinity();
    b.add(in);
    b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(yh, 0, 4, 0, 10), {b.tile(ys, 0, 4, 0, 10)}));
    const auto xv = randv(40, 60);
    const auto out = run_program(b.p, {xv, {}}, 1);
    int kept = 0;
    for (int p = 0; p < 4; ++p)
      for (int j = 0; j < 10; ++j) {
        const int a = 3 + 2 * p - j;
        const bool keep = f == Fn::lt ? a < 0 : f == Fn::le ? a <= 0 : f == Fn::gt ? a > 0 : f == Fn::ge ? a >= 0 : f == Fn::eq ? a == 0 : a != 0;
        INFO("fn " << static_cast<int>(f) << " p " << p << " j " << j);
        if (keep) REQUIRE(out[p * 10 + j] == xv[p * 10 + j]);
        else REQUIRE(out[p * 10 + j] == -std::numeric_limits<float>::infinity());
        kept += keep;
      }
    CHECK(kept > 0);
    CHECK(kept < 40);
    // a function that is not a comparison is refused
    b.p.instrs[1].fn = Fn::add;
    REQUIRE_THROWS_WITH(Interpreter(b.p), Catch::Contains("not a comparison"));
  }
}

TEST_CASE("tensor_tensor applies every binary function elementwise", "[verify][opcode]") {
  const Fn fns[] = {Fn::add, Fn::sub, Fn::mul, Fn::div, Fn::max, Fn::min, Fn::lt, Fn::le, Fn::gt, Fn::ge, Fn::eq, Fn::ne};
  for (Fn f : fns) {
    Fixture fx(3, 17);
    auto& b = fx.b;
    const int z = b.sbuf("z", 3, 17), y = b.sbuf("y", 3, 17);
    // second operand: x shifted by one column inside a wider buffer -> some equal pairs via memset
    b.add(ProgramBuilder::make(Opcode::tensor_copy, b.tile(z, 0, 3, 0, 17), {b.tile(fx.x_sb, 0, 3, 0, 17)}));
    Instr ms = ProgramBuilder::make(Opcode::memset, b.tile(z, 0, 3, 0, 8));
    ms.imm0 = 0.25;
    b.add(ms);
    Instr in = ProgramBuilder::make(Opcode::tensor_tensor, b.tile(y, 0, 3, 0, 17), {b.tile(fx.x_sb, 0, 3, 0, 17), b.tile(z, 0, 3, 0, 17)});
    in.fn = f;
    b.add(in);
    fx.store(y);
    auto x = randv(51, 40);
    x[1] = 0.25f;  // an equal pair for eq/ne/le/ge
    const auto out = fx.run(x);
    for (int p = 0; p < 3; ++p)
      for (int c = 0; c < 17; ++c) {
        const double a = x[p * 17 + c], zz = c < 8 ? 0.25 : a;
        INFO("fn " << static_cast<int>(f) << " p " << p << " c " << c);
        REQUIRE(out[p * 17 + c] == Approx(ref_binary(f, a, zz)).epsilon(1e-6));
      }
  }
}

TEST_CASE("tensor_tensor broadcasts an operand with free stride 0", "[verify][opcode]") {
  Fixture fx(4, 10);
  auto& b = fx.b;
  const int y = b.sbuf("y", 4, 10);
  AccessPattern col = b.tile(fx.x_sb, 0, 4, 3, 10);
  col.free_stride = {0, 0, 0};  // column 3 of each partition, repeated
  Instr in = ProgramBuilder::make(Opcode::tensor_tensor, b.tile(y, 0, 4, 0, 10), {b.tile(fx.x_sb, 0, 4, 0, 10), col});
  in.fn = Fn::sub;
  b.add(in);
  fx.store(y);
  const auto x = randv(40, 50);
  const auto out = fx.run(x);
  for (int p = 0; p < 4; ++p)
    for (int c = 0; c < 10; ++c) REQUIRE(out[p * 10 + c] == x[p * 10 + c] - x[p * 10 + 3]);
}

TEST_CASE("tensor_scalar applies op0 with an immediate, reverse0, then op1", "[verify][opcode]") {
  Fixture fx(2, 9);
  auto& b = fx.b;
  const int y = b.sbuf("y", 2, 9);
  Instr in = ProgramBuilder::make(Opcode::tensor_scalar, b.tile(y, 0, 2, 0, 9), {b.tile(fx.x_sb, 0, 2, 0, 9)});
  in.fn = Fn::sub;
  in.imm0 = 3.0;
  in.reverse0 = true;  // 3 - x
  in.has_op1 = true;
  in.fn1 = Fn::mul;
  in.imm1 = -2.0;
  b.add(in);
  fx.store(y);
  const auto x = randv(18, 60);
  const auto out = fx.run(x);
  for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(out[i] == Approx((3.0 - x[i]) * -2.0).epsilon(1e-6));
}

TEST_CASE("tensor_scalar takes per-partition scalar operands", "[verify][opcode]") {
  Fixture fx(3, 7);
  auto& b = fx.b;
  const int sh = b.hbm("S", {3, 2}, 2), s = b.sbuf("s", 3, 2), y = b.sbuf("y", 3, 7);
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(s, 0, 3, 0, 2), {b.rows(sh, 0, 3, 0, 2)}));
  Instr in = ProgramBuilder::make(Opcode::tensor_scalar, b.tile(y, 0, 3, 0, 7),
                                  {b.tile(fx.x_sb, 0, 3, 0, 7), b.tile(s, 0, 3, 0, 1), b.tile(s, 0, 3, 1, 1)});
  in.fn = Fn::max;
  in.has_op1 = true;
  in.fn1 = Fn::div;
  b.add(in);
  fx.store(y);
  const auto x = randv(21, 61);
  const auto sv = randv(6, 62, 0.5f, 1.0f);
  const auto out = run_program(b.p, {x, {}, sv}, 1);
  for (int p = 0; p < 3; ++p)
    for (int f = 0; f < 7; ++f)
      REQUIRE(out[p * 7 + f] == Approx(std::max<double>(x[p * 7 + f], sv[p * 2]) / sv[p * 2 + 1]).epsilon(1e-6));
}

TEST_CASE("tensor_reduce sums, maxes and mins over the innermost free dims", "[verify][opcode]") {
  for (auto op : {kevo::ir::ReduceOp::sum, kevo::ir::ReduceOp::max, kevo::ir::ReduceOp::min}) {
    ProgramBuilder b;
    const int in = b.hbm("X", {4, 24}, 0), out = b.hbm("Y", {4, 2}, 1);
    const int xs = b.sbuf("x", 4, 24), ys = b.sbuf("y", 4, 2);
    b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(xs, 0, 4, 0, 24), {b.rows(in, 0, 4, 0, 24)}));
    AccessPattern src = b.tile(xs, 0, 4, 0, 24);
    src.free_size = {2, 3, 4};  // reduce the inner 3x4 of each half
    src.free_stride = {12, 4, 1};
    Instr r = ProgramBuilder::make(Opcode::tensor_reduce, b.tile(ys, 0, 4, 0, 2), {src});
    r.reduce = op;
    r.reduce_free_dims = 2;
    b.add(r);
    b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(out, 0, 4, 0, 2), {b.tile(ys, 0, 4, 0, 2)}));
    const auto x = randv(96, 70);
    const auto y = run_program(b.p, {x, {}}, 1);
    for (int p = 0; p < 4; ++p)
      for (int h = 0; h < 2; ++h) {
        double s = 0, mx = -1e9, mn = 1e9;
        for (int j = 0; j < 12; ++j) {
          const double v = x[p * 24 + h * 12 + j];
          s += v;
          mx = std::max(mx, v);
          mn = std::min(mn, v);
        }
        const double want = op == kevo::ir::ReduceOp::sum ? s : op == kevo::ir::ReduceOp::max ? mx : mn;
        REQUIRE(y[p * 2 + h] == Approx(want).margin(1e-5));
      }
  }
}

TEST_CASE("tensor_reduce with accumulate combines with the destination", "[verify][opcode]") {
  Fixture fx(3, 40);
  auto& b = fx.b;
  const int acc = b.sbuf("acc", 3, 1);
  Instr ms = ProgramBuilder::make(Opcode::memset, b.tile(acc, 0, 3, 0, 1));
  ms.imm0 = 10.0;
  b.add(ms);
  Instr r = ProgramBuilder::make(Opcode::tensor_reduce, b.tile(acc, 0, 3, 0, 1), {b.tile(fx.x_sb, 0, 3, 0, 20)});
  r.reduce = kevo::ir::ReduceOp::sum;
  r.accumulate = true;
  b.add(r);
  b.add(r);  // twice: 10 + 2 * sum of the first 20 columns
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(fx.out_hbm, 0, 3, 0, 1), {b.tile(acc, 0, 3, 0, 1)}));
  const auto x = randv(120, 71);
  const auto y = run_program(b.p, {x, {}}, 1);
  for (int p = 0; p < 3; ++p) {
    double s = 0;
    for (int j = 0; j < 20; ++j) s += x[p * 40 + j];
    REQUIRE(y[p * 40] == Approx(10 + 2 * s).margin(1e-5));
  }
}

TEST_CASE("memset fills with the immediate and iota with the affine index formula", "[verify][opcode]") {
  ProgramBuilder b;
  const int out = b.hbm("Y", {4, 6}, 1), s = b.sbuf("s", 4, 6);
  Instr ms = ProgramBuilder::make(Opcode::memset, b.tile(s, 0, 4, 0, 6));
  ms.imm0 = 7.5;
  b.add(ms);
  AccessPattern t = b.tile(s, 0, 4, 0, 6);
  t.free_size = {1, 2, 3};
  t.free_stride = {0, 3, 1};
  Instr io = ProgramBuilder::make(Opcode::iota, t);
  io.imm0 = -1;
  io.iota_part_coef = 10;
  io.iota_free_coef = {0, 100, 1000};
  b.add(io);
  Instr ms2 = ProgramBuilder::make(Opcode::memset, b.tile(s, 3, 1, 4, 2));
  ms2.imm0 = 7.5;
  b.add(ms2);
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(out, 0, 4, 0, 6), {b.tile(s, 0, 4, 0, 6)}));
  Interpreter I(b.p);
  auto m = I.allocate();
  I.execute(m);
  const auto y = I.output(m, 1);
  for (int p = 0; p < 4; ++p)
    for (int a = 0; a < 2; ++a)
      for (int c = 0; c < 3; ++c) {
        const float want = p == 3 && a * 3 + c >= 4 ? 7.5f : static_cast<float>(-1 + 10 * p + 100 * a + 1000 * c);
        REQUIRE(y[p * 6 + a * 3 + c] == want);
      }
}

TEST_CASE("writes round to the destination buffer's dtype (bf16 round-to-nearest-even)", "[verify][rounding]") {
  Fixture fx(1, 4, DType::bf16);
  auto& b = fx.b;
  const int y = b.sbuf("y", 1, 4, DType::bf16);
  b.add(ProgramBuilder::make(Opcode::tensor_copy, b.tile(y, 0, 1, 0, 4), {b.tile(fx.x_sb, 0, 1, 0, 4)}));
  fx.store(y);
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: even mantissa wins (1); 1 + 3*2^-8 rounds up to 1 + 2^-6
  const std::vector<float> x = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-9f, -3.0f - 0x1p-7f - 0x1p-12f};
  const auto out = fx.run(x);
  REQUIRE(out[0] == 1.0f);
  REQUIRE(out[1] == 1.0f + 0x1p-6f);
  REQUIRE(out[2] == 1.0f);
  REQUIRE(out[3] == -3.0f - 0x1p-6f);
}

TEST_CASE("storage rounding agrees bit for bit with ir::round_to for every dtype", "[verify][rounding]") {
  for (DType dt : {DType::bf16, DType::fp16, DType::fp8_e4m3, DType::fp8_e4m3fn}) {
    Fixture fx(4, 1000, dt);
    auto& b = fx.b;
    const int y = b.sbuf("y", 4, 1000, dt);
    b.add(ProgramBuilder::make(Opcode::tensor_copy, b.tile(y, 0, 4, 0, 1000), {b.tile(fx.x_sb, 0, 4, 0, 1000)}));
    fx.store(y);
    kevo::Rng r(99);
    std::vector<float> x(4000);
    for (auto& v : x) {  // magnitudes from deep subnormal to overflow of every format
      const double e = -30.0 + 50.0 * r.uniform();
      v = static_cast<float>((r.chance(0.5) ? -1 : 1) * std::exp2(e));
    }
    x[0] = INFINITY;
    x[1] = -INFINITY;
    x[2] = 0.0f;
    x[3] = 465.0f;
    x[4] = 248.0f;  // fp8_e4m3's tie to inf (E4M3FN: 248)
    x[5] = 247.0f;
    const auto out = fx.run(x);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float want = kevo::ir::round_to(dt, x[i]);
      INFO("dtype " << static_cast<int>(dt) << " x " << x[i]);
      if (std::isnan(want)) REQUIRE(std::isnan(out[i]));
      else REQUIRE(out[i] == want);
    }
  }
}

TEST_CASE("an out-of-bounds access pattern is rejected naming instruction, opcode and operand", "[verify][bounds]") {
  Fixture fx(4, 8);
  auto& b = fx.b;
  const int y = b.sbuf("y", 4, 8);
  AccessPattern bad = b.tile(fx.x_sb, 1, 4, 0, 8);  // partitions 1..4 of a 4-partition buffer
  Instr in = ProgramBuilder::make(Opcode::tensor_tensor, b.tile(y, 0, 4, 0, 8), {b.tile(fx.x_sb, 0, 4, 0, 8), bad});
  b.add(in);
  try {
    Interpreter I(b.p);
    FAIL("no error");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("instruction 1 (tensor_tensor)") != std::string::npos);
    CHECK(msg.find("src[1]") != std::string::npos);
    CHECK(msg.find("'x'") != std::string::npos);
  }
}

TEST_CASE("operand shape mismatches and wrong operand counts are rejected", "[verify][bounds]") {
  Fixture fx(4, 8);
  auto& b = fx.b;
  const int y = b.sbuf("y", 4, 8);
  SECTION("shape") {
    b.add(ProgramBuilder::make(Opcode::tensor_tensor, b.tile(y, 0, 4, 0, 8), {b.tile(fx.x_sb, 0, 4, 0, 8), b.tile(fx.x_sb, 0, 4, 0, 4)}));
    REQUIRE_THROWS_WITH(Interpreter(b.p), Catch::Contains("src[1] shape [4 x 1x1x4] differs from dst shape [4 x 1x1x8]"));
  }
  SECTION("count") {
    b.add(ProgramBuilder::make(Opcode::nc_matmul, b.tile(y, 0, 4, 0, 8), {b.tile(fx.x_sb, 0, 4, 0, 8)}));
    REQUIRE_THROWS_WITH(Interpreter(b.p), Catch::Contains("instruction 1 (nc_matmul): needs 2 source operand(s), has 1"));
  }
  SECTION("matmul shapes") {
    const int ps = b.psum("p", 8, 8);
    b.add(ProgramBuilder::make(Opcode::nc_matmul, b.tile(ps, 0, 8, 0, 8), {b.tile(fx.x_sb, 0, 4, 0, 8), b.tile(fx.x_sb, 0, 2, 0, 8)}));
    REQUIRE_THROWS_WITH(Interpreter(b.p), Catch::Contains("disagree on K"));
  }
}

TEST_CASE("on-chip buffers and outputs start poisoned, so unwritten elements read as NaN", "[verify][poison]") {
  Fixture fx(2, 4);
  auto& b = fx.b;
  const int y = b.sbuf("y", 2, 4);
  b.add(ProgramBuilder::make(Opcode::tensor_copy, b.tile(y, 0, 2, 0, 3), {b.tile(fx.x_sb, 0, 2, 0, 3)}));
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(fx.out_hbm, 0, 2, 0, 3), {b.tile(y, 0, 2, 0, 3)}));
  const auto out = fx.run(randv(8, 80));
  for (int p = 0; p < 2; ++p) {
    for (int c = 0; c < 3; ++c) REQUIRE(std::isfinite(out[p * 4 + c]));
    REQUIRE(std::isnan(out[p * 4 + 3]));
  }
}

TEST_CASE("inputs are the HBM tensors the program never writes; bind_inputs ignores outputs", "[verify][poison]") {
  Fixture fx(2, 4);
  fx.store(fx.x_sb);
  Interpreter I(fx.b.p);
  REQUIRE(I.input_tensors() == std::vector<int>{0});
  REQUIRE(I.output_tensors() == std::vector<int>{1});
  auto m = I.allocate();
  std::vector<std::vector<float>> t = {randv(8, 1), std::vector<float>(8, 5.0f)};
  I.bind_inputs(m, t);
  const auto before = I.output(m, 1);
  for (float v : before) REQUIRE(std::isnan(v));
  I.execute(m);
  REQUIRE(I.output(m, 1) == t[0]);
  I.poison_outputs(m);
  for (float v : I.output(m, 1)) REQUIRE(std::isnan(v));
}

TEST_CASE("execute rejects memory allocated for another program", "[verify][bounds]") {
  Fixture a(2, 4), b2(3, 4);
  a.store(a.x_sb);
  Interpreter I(a.b.p), J(b2.b.p);
  auto m = J.allocate();
  REQUIRE_THROWS_AS(I.execute(m), Error);
}

TEST_CASE("a transposing strided dma_copy (blocked fast path) matches element-wise transposition", "[verify][opcode]") {
  // A[M=37, K=50] read as a [K partitions x M free] tile: partition stride 1, free stride K
  ProgramBuilder b;
  const int in = b.hbm("A", {37, 50}, 0), out = b.hbm("Y", {50, 37}, 1, DType::bf16), sb = b.sbuf("aT", 50, 37, DType::bf16);
  AccessPattern src;
  src.buffer = in;
  src.part_stride = 1;
  src.part_count = 50;
  src.free_size = {1, 1, 37};
  src.free_stride = {0, 0, 50};
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(sb, 0, 50, 0, 37), {src}));
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(out, 0, 50, 0, 37), {b.tile(sb, 0, 50, 0, 37)}));
  const auto x = randv(37 * 50, 90);
  const auto y = run_program(b.p, {x, {}}, 1);
  for (int k = 0; k < 50; ++k)
    for (int i = 0; i < 37; ++i) REQUIRE(y[k * 37 + i] == kevo::ir::round_to(DType::bf16, x[i * 50 + k]));
}

TEST_CASE("tensor_reduce max/min over long rows: NaN propagates, infinities and exact extremes kept",
          "[verify][opcode]") {
  // Rows of 40 take the lane-parallel max/min path; a NaN anywhere (body lane or tail) must win,
  // as it does element by element.
  constexpr int P = 5, C = 40;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (auto op : {kevo::ir::ReduceOp::max, kevo::ir::ReduceOp::min}) {
    ProgramBuilder b;
    const int in = b.hbm("X", {P, C}, 0), out = b.hbm("Y", {P, 1}, 1);
    const int xs = b.sbuf("x", P, C), ys = b.sbuf("y", P, 1);
    b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(xs, 0, P, 0, C), {b.rows(in, 0, P, 0, C)}));
    Instr r = ProgramBuilder::make(Opcode::tensor_reduce, b.tile(ys, 0, P, 0, 1), {b.tile(xs, 0, P, 0, C)});
    r.reduce = op;
    r.reduce_free_dims = 1;
    b.add(r);
    b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(out, 0, P, 0, 1), {b.tile(ys, 0, P, 0, 1)}));
    auto x = randv(P * C, 91);
    x[0 * C + 3] = nan;    // row 0: NaN in the lane body
    x[1 * C + 37] = nan;   // row 1: NaN in the tail
    x[2 * C + 11] = inf;   // row 2: +inf
    x[3 * C + 20] = -inf;  // row 3: -inf
    const auto y = run_program(b.p, {x, {}}, 1);
    const bool is_max = op == kevo::ir::ReduceOp::max;
    REQUIRE(std::isnan(y[0]));
    REQUIRE(std::isnan(y[1]));
    for (int p = 2; p < P; ++p) {
      float want = is_max ? -inf : inf;
      for (int j = 0; j < C; ++j) want = is_max ? std::max(want, x[p * C + j]) : std::min(want, x[p * C + j]);
      INFO("row " << p);
      REQUIRE(y[p] == want);
    }
  }
}

TEST_CASE("activation in place (dst == src) equals the out-of-place result bit for bit", "[verify][opcode]") {
  for (Fn f : {Fn::exp, Fn::gelu_tanh, Fn::relu, Fn::cast}) {
    const auto x = randv(4 * 40, 93, -3.0f, 3.0f);
    std::vector<float> res[2];
    for (int inplace = 0; inplace < 2; ++inplace) {
      Fixture fx(4, 40);
      auto& b = fx.b;
      const int y = inplace ? fx.x_sb : b.sbuf("y", 4, 40);
      Instr in = ProgramBuilder::make(Opcode::activation, b.tile(y, 0, 4, 0, 40), {b.tile(fx.x_sb, 0, 4, 0, 40)});
      in.fn = f;
      in.scale = 0.75;
      in.imm0 = 0.125;
      b.add(in);
      fx.store(y);
      res[inplace] = fx.run(x);
    }
    for (std::size_t i = 0; i < x.size(); ++i) {
      INFO("fn " << static_cast<int>(f) << " i " << i);
      REQUIRE(res[0][i] == res[1][i]);
      REQUIRE(res[0][i] == Approx(ref_unary(f, double{x[i]} * 0.75 + 0.125)).epsilon(2e-6).margin(1e-6));
    }
  }
}

TEST_CASE("activation exp/tanh/gelu/sigmoid/silu stay within 4 ulp and keep special values", "[verify][opcode]") {
  // The interpreter may evaluate these through a vector math library; every element (row body
  // and tail) must stay within 4 ulp of the exact value (gelu: plus its cancellation term), and NaN / infinities / underflow must
  // come out as the scalar functions give them.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  constexpr int R = 3, C = 1003;
  for (Fn f : {Fn::exp, Fn::tanh, Fn::gelu_tanh, Fn::sigmoid, Fn::silu}) {
    Fixture fx(R, C);
    auto& b = fx.b;
    const int y = b.sbuf("y", R, C);
    Instr in = ProgramBuilder::make(Opcode::activation, b.tile(y, 0, R, 0, C), {b.tile(fx.x_sb, 0, R, 0, C)});
    in.fn = f;
    in.scale = 1.0;
    in.imm0 = 0.0;
    b.add(in);
    fx.store(y);
    auto x = randv(R * C, 95, f == Fn::exp ? -87.0f : -12.0f, f == Fn::exp ? 88.0f : 12.0f);
    const float specials[] = {nan, inf, -inf, 0.0f, -0.0f, 1e-30f, -1e-30f, 100.0f, -110.0f};
    for (std::size_t k = 0; k < std::size(specials); ++k) {
      x[k * 7] = specials[k];
      x[x.size() - 1 - k] = specials[k];  // the row tail too
    }
    const auto out = fx.run(x);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float got = out[i];
      const float scalar = kevo::ir::fn_apply_unary(f, x[i]);
      INFO("fn " << static_cast<int>(f) << " x " << x[i] << " got " << got << " scalar " << scalar);
      if (std::isnan(scalar) || std::isinf(scalar) || scalar == 0.0f) {
        if (std::isnan(scalar)) REQUIRE(std::isnan(got));
        else REQUIRE(got == scalar);
        continue;
      }
      const double want = static_cast<double>(kevo::ir::fn_apply_unary(f, double{x[i]}));
      const double ulp = std::nextafter(std::fabs(static_cast<float>(want)), inf) - std::fabs(static_cast<float>(want));
      // gelu's 1 + tanh(.) cancels for negative x: its error is ulps of 1, times 0.5 |x|
      const double cancel = f == Fn::gelu_tanh ? 0.5 * std::fabs(double{x[i]}) * 0x1p-21 : 0.0;
      REQUIRE(std::fabs(got - want) <= 4 * ulp + cancel);
    }
  }
}

TEST_CASE("long dma_copy rows into HBM (streamed stores) copy every element exactly, at any alignment",
          "[verify][opcode]") {
  // Rows of >= 1024 elements into HBM take the non-temporal store path; unaligned starts (column
  // offsets 0..3) and lengths that are not a multiple of 4 exercise its head and tail.
  constexpr int P = 3, C = 1031, W = C + 5;
  for (int c0 = 0; c0 < 4; ++c0) {
    ProgramBuilder b;
    const int in = b.hbm("X", {P, C}, 0), out = b.hbm("Y", {P, W}, 1), sb = b.sbuf("s", P, C);
    b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(sb, 0, P, 0, C), {b.rows(in, 0, P, 0, C)}));
    b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(out, 0, P, c0, C), {b.tile(sb, 0, P, 0, C)}));
    const auto x = randv(P * C, 97 + c0);
    const auto y = run_program(b.p, {x, {}}, 1);
    for (int p = 0; p < P; ++p)
      for (int j = 0; j < W; ++j) {
        INFO("c0 " << c0 << " row " << p << " col " << j);
        if (j < c0 || j >= c0 + C) REQUIRE(std::isnan(y[p * W + j]));  // untouched poison
        else REQUIRE(y[p * W + j] == x[p * C + j - c0]);
      }
  }
}

TEST_CASE("bn_stats gives even/odd (count, mean, variance*count) and bn_aggr their mean and variance", "[verify][opcode]") {
  // rows of 1100: bn_stats on chunks of 512, 512 and 76 (its limit is 512 free elements), one
  // bn_aggr over the three outputs side by side; results copied into the first columns of Y.
  const int R = 8, C = 1100;
  Fixture f(R, C);
  auto& b = f.b;
  const int stats = b.sbuf("stats", R, 18), agg = b.sbuf("agg", R, 2), y = b.sbuf("y", R, C);
  b.add(ProgramBuilder::make(Opcode::memset, b.tile(y, 0, R, 0, C)));
  for (int c = 0; c < 3; ++c) {
    const int f0 = 512 * c, n = std::min(512, C - f0);
    b.add(ProgramBuilder::make(Opcode::bn_stats, b.tile(stats, 0, R, 6 * c, 6), {b.tile(f.x_sb, 0, R, f0, n)}));
  }
  b.add(ProgramBuilder::make(Opcode::bn_aggr, b.tile(agg, 0, R, 0, 2), {b.tile(stats, 0, R, 0, 18)}));
  b.add(ProgramBuilder::make(Opcode::tensor_copy, b.tile(y, 0, R, 0, 2), {b.tile(agg, 0, R, 0, 2)}));
  b.add(ProgramBuilder::make(Opcode::tensor_copy, b.tile(y, 0, R, 2, 18), {b.tile(stats, 0, R, 0, 18)}));
  f.store(y);
  const auto x = randv(static_cast<std::size_t>(R * C), 5, -3.0f, 5.0f);
  const auto out = f.run(x);
  for (int r = 0; r < R; ++r) {
    const float* row = x.data() + static_cast<std::ptrdiff_t>(r) * C;
    double s = 0;
    for (int i = 0; i < C; ++i) s += row[i];
    const double mean = s / C;
    double v = 0;
    for (int i = 0; i < C; ++i) v += (row[i] - mean) * (row[i] - mean);
    const float* o = out.data() + static_cast<std::ptrdiff_t>(r) * C;
    CHECK(o[0] == Approx(mean).epsilon(1e-5));
    CHECK(o[1] == Approx(v / C).epsilon(1e-5));
    // the third chunk (76 elements from 1024): 38 even, 38 odd
    for (int parity = 0; parity < 2; ++parity) {
      double n = 0, sum = 0;
      for (int i = 1024 + parity; i < C; i += 2) n += 1, sum += row[i];
      double m2 = 0;
      for (int i = 1024 + parity; i < C; i += 2) m2 += (row[i] - sum / n) * (row[i] - sum / n);
      const float* t = o + 2 + 12 + 3 * parity;
      CHECK(t[0] == 38.0f);
      CHECK(t[1] == Approx(sum / n).epsilon(1e-5));
      CHECK(t[2] == Approx(m2).epsilon(1e-5));
    }
  }
}

TEST_CASE("bn_stats over more than 512 free elements and bn_aggr over a non-triple are rejected", "[verify][opcode]") {
  {
    Fixture f(4, 600);
    const int stats = f.b.sbuf("stats", 4, 6);
    f.b.add(ProgramBuilder::make(Opcode::bn_stats, f.b.tile(stats, 0, 4, 0, 6), {f.b.tile(f.x_sb, 0, 4, 0, 600)}));
    CHECK_THROWS_WITH(Interpreter(f.b.p), Catch::Contains("more than 512"));
  }
  {
    Fixture f(4, 64);
    const int agg = f.b.sbuf("agg", 4, 2);
    f.b.add(ProgramBuilder::make(Opcode::bn_aggr, f.b.tile(agg, 0, 4, 0, 2), {f.b.tile(f.x_sb, 0, 4, 0, 64)}));
    CHECK_THROWS_WITH(Interpreter(f.b.p), Catch::Contains("triples"));
  }
}

TEST_CASE("tensor_copy_predicated copies its source or immediate where the predicate is not zero and keeps dst elsewhere",
          "[verify][opcode]") {
  const int R = 4, C = 6;
  for (const bool imm : {false, true}) {
    Fixture f(R, C);
    auto& b = f.b;
    const int pred = b.sbuf("pred", R, C), y = b.sbuf("y", R, C);
    // pred = (x > 0), y = -7, then y = x (or 2.5) where pred
    Instr cmp = ProgramBuilder::make(Opcode::tensor_scalar, b.tile(pred, 0, R, 0, C), {b.tile(f.x_sb, 0, R, 0, C)});
    cmp.fn = Fn::gt;
    cmp.imm0 = 0.0;
    b.add(cmp);
    Instr ms = ProgramBuilder::make(Opcode::memset, b.tile(y, 0, R, 0, C));
    ms.imm0 = -7.0;
    b.add(ms);
    Instr cp = ProgramBuilder::make(Opcode::tensor_copy_predicated, b.tile(y, 0, R, 0, C),
                                           {b.tile(pred, 0, R, 0, C), b.tile(f.x_sb, 0, R, 0, C)});
    if (imm) cp.nsrc = 1;
    cp.imm0 = 2.5;
    b.add(cp);
    f.store(y);
    auto x = randv(static_cast<std::size_t>(R * C), 3, -1.0f, 1.0f);
    x[0] = std::numeric_limits<float>::quiet_NaN();  // NaN > 0 is false: dst kept
    x[1] = std::numeric_limits<float>::infinity();
    const auto out = f.run(x);
    for (int i = 0; i < R * C; ++i) {
      INFO("element " << i << " x " << x[static_cast<std::size_t>(i)] << " imm " << imm);
      const float want = x[static_cast<std::size_t>(i)] > 0 ? (imm ? 2.5f : x[static_cast<std::size_t>(i)]) : -7.0f;
      CHECK(out[static_cast<std::size_t>(i)] == want);
    }
  }
}
