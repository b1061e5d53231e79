// Whole programs: a tiled matmul (DMA transpose loads, K-accumulation in PSUM, eviction, stores)
// against a triple loop in both execution orders; the adversarial order exposing a missing
// dependency edge; and compare()'s rules (NaN and Inf never pass, messages locate the element).
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kevo/core/error.hpp"
#include "kevo/core/rng.hpp"
#include "kevo/ir/kernel.hpp"
#include "kevo/verify.hpp"
#include "program_builder.hpp"

using kevo::ir::DType;
using kevo::lower::AccessPattern;
using kevo::lower::Instr;
using kevo::lower::Opcode;
using kevo::test::ProgramBuilder;
using kevo::verify::Interpreter;

namespace {

std::vector<float> randv(std::size_t n, std::uint64_t seed) {
  kevo::Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(2 * r.uniform() - 1);
  return v;
}

std::vector<double> naive(const std::vector<float>& A, const std::vector<float>& B, int M, int N, int K) {
  std::vector<double> C(static_cast<std::size_t>(M) * N, 0.0);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j)
      for (int k = 0; k < K; ++k) C[i * N + j] += double{A[i * K + k]} * B[k * N + j];
  return C;
}

}  // namespace

TEST_CASE("a tiled matmul program matches a naive triple loop in program and adversarial order", "[verify][program]") {
  auto t = kevo::test::tiled_matmul(96, 80, 64, 32, 40, 16);
  const auto A = randv(96 * 64, 1), B = randv(64 * 80, 2);
  const auto want = naive(A, B, 96, 80, 64);
  Interpreter I(t.p);
  const auto order = kevo::verify::adversarial_order(t.p);
  for (int pass = 0; pass < 2; ++pass) {
    auto m = I.allocate();
    std::vector<std::vector<float>> tv = {A, B, {}};
    I.bind_inputs(m, tv);
    if (pass == 0) I.execute(m);
    else I.execute_in_order(m, order);
    const auto C = I.output(m, 2);
    for (std::size_t i = 0; i < C.size(); ++i) REQUIRE(C[i] == Approx(want[i]).margin(1e-4));
  }
}

TEST_CASE("adversarial_order is a topological order that departs from program order", "[verify][order]") {
  auto t = kevo::test::tiled_matmul(64, 64, 64, 32, 32, 16);
  const auto& p = t.p;
  const auto order = kevo::verify::adversarial_order(p);
  REQUIRE(order.size() == p.instrs.size());
  std::vector<std::size_t> pos(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) pos[order[i]] = i;
  auto sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < sorted.size(); ++i) REQUIRE(sorted[i] == i);
  for (std::size_t i = 0; i < p.instrs.size(); ++i)
    for (auto d : p.preds(i)) REQUIRE(pos[d] < pos[i]);
  bool differs = false;
  for (std::size_t i = 0; i < order.size(); ++i) differs |= order[i] != i;
  REQUIRE(differs);
}

TEST_CASE("adversarial_order rejects an edge that points forward", "[verify][order]") {
  ProgramBuilder b;
  const int s = b.sbuf("s", 1, 1);
  b.add(ProgramBuilder::make(Opcode::memset, b.tile(s, 0, 1, 0, 1)));
  b.add(ProgramBuilder::make(Opcode::memset, b.tile(s, 0, 1, 0, 1)));
  b.p.deps[0] = 1;  // instruction 1 depends on itself
  REQUIRE_THROWS_WITH(kevo::verify::adversarial_order(b.p), Catch::Contains("does not precede it"));
}

namespace {
// Loads two halves of X through one SBUF buffer `s` (copying each half out before reloading);
// `drop_war` omits the write-after-read edge between the first copy and the second load.
ProgramBuilder reuse_program(bool drop_war) {
  ProgramBuilder b;
  const int X = b.hbm("X", {8, 8}, 0), Y = b.hbm("Y", {8, 8}, 1);
  const int s = b.sbuf("s", 4, 8), y = b.sbuf("y", 4, 8), z = b.sbuf("z", 4, 8);
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(s, 0, 4, 0, 8), {b.rows(X, 0, 4, 0, 8)}));  // 0
  const auto copy1 = b.add(ProgramBuilder::make(Opcode::tensor_copy, b.tile(y, 0, 4, 0, 8), {b.tile(s, 0, 4, 0, 8)}));
  if (drop_war) b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(s, 0, 4, 0, 8), {b.rows(X, 4, 4, 0, 8)}), {copy1});
  else b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(s, 0, 4, 0, 8), {b.rows(X, 4, 4, 0, 8)}));
  b.add(ProgramBuilder::make(Opcode::tensor_copy, b.tile(z, 0, 4, 0, 8), {b.tile(s, 0, 4, 0, 8)}));
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(Y, 0, 4, 0, 8), {b.tile(y, 0, 4, 0, 8)}));
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(Y, 4, 4, 0, 8), {b.tile(z, 0, 4, 0, 8)}));
  return b;
}

std::vector<float> run_order(const kevo::lower::TileProgram& p, const std::vector<float>& x, bool adversarial) {
  Interpreter I(p);
  auto m = I.allocate();
  std::vector<std::vector<float>> t = {x, {}};
  I.bind_inputs(m, t);
  if (adversarial) I.execute_in_order(m, kevo::verify::adversarial_order(p));
  else I.execute(m);
  return I.output(m, 1);
}
}  // namespace

TEST_CASE("a missing write-after-read edge changes the result under the adversarial order", "[verify][order]") {
  const auto x = randv(64, 5);
  const auto good = reuse_program(false), bad = reuse_program(true);
  REQUIRE(run_order(good.p, x, false) == x);
  REQUIRE(run_order(good.p, x, true) == x);
  REQUIRE(run_order(bad.p, x, false) == x);  // program order hides the bug...
  REQUIRE(run_order(bad.p, x, true) != x);   // ...the adversarial order exposes it
}

TEST_CASE("execute_in_order rejects an order that is not a permutation", "[verify][order]") {
  const auto b = reuse_program(false);
  Interpreter I(b.p);
  auto m = I.allocate();
  const std::vector<std::uint32_t> dup = {0, 1, 1, 3, 4, 5};
  REQUIRE_THROWS_WITH(I.execute_in_order(m, dup), Catch::Contains("not a permutation"));
}

namespace {
kevo::ir::Kernel tiny_kernel() {
  kevo::ir::Kernel k{std::string(1, 't'), {}, {}, {}};
  k.dims = {{"M", 2}, {"N", 3}};
  k.tensors = {{"Y", DType::fp32, {"M", "N"}, kevo::ir::Role::output}};
  return k;
}
}  // namespace

TEST_CASE("compare never passes NaN, even with an infinite tolerance", "[verify][compare]") {
  const auto k = tiny_kernel();
  const std::vector<float> want = {1, 2, 3, 4, 5, 6};
  auto got = want;
  got[4] = NAN;
  const auto r = kevo::verify::compare(k, 0, got, want, {INFINITY, INFINITY});
  REQUIRE_FALSE(r.ok);
  REQUIRE_THAT(r.message, Catch::Contains("NaN") && Catch::Contains("Y flat index 4 [1, 1]"));
}

TEST_CASE("compare rejects Inf where the reference is finite", "[verify][compare]") {
  const auto k = tiny_kernel();
  const std::vector<float> want = {1, 2, 3, 4, 5, 6};
  auto got = want;
  got[0] = INFINITY;
  REQUIRE_FALSE(kevo::verify::compare(k, 0, got, want, {1e30, 1}).ok);
}

TEST_CASE("compare names tensor, flat and multi-index, got and want on a mismatch", "[verify][compare]") {
  const auto k = tiny_kernel();
  const std::vector<float> want = {1, 2, 3, 4, 5, 6};
  auto got = want;
  got[5] = 6.5f;
  const auto r = kevo::verify::compare(k, 0, got, want, {0.1, 0.01});
  REQUIRE_FALSE(r.ok);
  REQUIRE_THAT(r.message, Catch::Contains("Y flat index 5 [1, 2]: got 6.5 want 6"));
  REQUIRE(r.max_abs_err == Approx(0.5));
  got[5] = 6.05f;
  REQUIRE(kevo::verify::compare(k, 0, got, want, {0.1, 0.01}).ok);
}

TEST_CASE("tolerances widen with coarser dtypes and deeper reductions", "[verify][compare]") {
  using kevo::verify::tolerance_for;
  REQUIRE(tolerance_for(DType::fp32).rel < tolerance_for(DType::fp16).rel);
  REQUIRE(tolerance_for(DType::fp16).rel < tolerance_for(DType::bf16).rel);
  // fp8's rounding term is bf16's: no program keeps fp8 partial sums (the term's reason), and every
  // rounding the program and the reference share is in the per-element allowance
  REQUIRE(tolerance_for(DType::bf16).rel == tolerance_for(DType::fp8_e4m3).rel);
  REQUIRE(tolerance_for(DType::fp32, 4096).abs > tolerance_for(DType::fp32, 1).abs);
  REQUIRE(tolerance_for(DType::bf16).rel >= 0x1p-7);  // at least one bf16 ulp
  REQUIRE(tolerance_for(DType::fp32, 4096).rel < 1e-3);
}
