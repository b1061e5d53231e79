// check_program, the oracle: hand-lowered programs of ir workloads pass; each kind of lowering
// bug (missing dependency edge, unwritten output, wrong arithmetic, out-of-bounds access) fails
// with a message that says where.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "kevo/ir/workloads.hpp"
#include "kevo/verify.hpp"
#include "program_builder.hpp"

using kevo::ir::DType;
using kevo::lower::Opcode;
using kevo::verify::check_program;
using kevo::verify::CheckFailure;
using kevo::verify::compare;
using kevo::verify::Tolerance;

namespace {
kevo::ir::Kernel matmul(int M, int N, int K, const char* dt) {
  auto k = kevo::ir::workload("matmul:M=" + std::to_string(M) + ",N=" + std::to_string(N) + ",K=" + std::to_string(K) +
                              ",dtype=" + dt);
  REQUIRE(k.has_value());
  return *k;
}
}  // namespace

TEST_CASE("a correct hand-lowered fp32 matmul passes check_program", "[verify][check]") {
  const auto k = matmul(96, 80, 64, "fp32");
  const auto b = kevo::test::tiled_matmul(96, 80, 64, 32, 40, 16);
  const auto r = check_program(k, b.p, 1, 3);
  INFO(r.message);
  REQUIRE(r.ok);
  REQUIRE(r.max_abs_err < 1e-4);
}

TEST_CASE("a correct bf16 matmul passes within bf16 tolerance", "[verify][check]") {
  const auto k = matmul(64, 128, 96, "bf16");
  const auto b = kevo::test::tiled_matmul(64, 128, 96, 32, 64, 32, DType::bf16);
  const auto r = check_program(k, b.p, 2, 2);
  INFO(r.message);
  REQUIRE(r.ok);
}

TEST_CASE("a missing write-after-read edge on a reused buffer fails in the adversarial order", "[verify][check]") {
  const auto k = matmul(64, 64, 64, "fp32");
  const auto good = kevo::test::tiled_matmul(64, 64, 64, 32, 32, 16, DType::fp32, 1, false);
  REQUIRE(check_program(k, good.p, 3).ok);
  const auto bad = kevo::test::tiled_matmul(64, 64, 64, 32, 32, 16, DType::fp32, 1, true);
  const auto r = check_program(k, bad.p, 3);
  REQUIRE_FALSE(r.ok);
  REQUIRE_THAT(r.message, Catch::Contains("adversarial order") && Catch::Contains("C flat index"));
  CHECK(r.order == 1);  // program order passed: the bug is the edge, not the arithmetic
  CHECK((r.failure == CheckFailure::mismatch || r.failure == CheckFailure::non_finite));
}

TEST_CASE("an output tile the program never stores fails as unwritten", "[verify][check]") {
  const auto k = matmul(64, 64, 32, "fp32");
  auto b = kevo::test::tiled_matmul(64, 64, 32, 32, 32, 32);
  // drop the last store (nothing depends on it)
  REQUIRE(b.p.instrs.back().op == Opcode::dma_copy);
  b.p.instrs.pop_back();
  b.p.dep_begin.pop_back();
  b.p.deps.resize(b.p.dep_begin.back());
  const auto r = check_program(k, b.p, 4);
  REQUIRE_FALSE(r.ok);
  REQUIRE_THAT(r.message, Catch::Contains("NaN (unwritten or invalid) at C flat index 2080 [32, 32]"));
  CHECK(r.failure == CheckFailure::non_finite);
  CHECK(r.order == 0);
}

TEST_CASE("wrong arithmetic fails naming tensor, index, got and want", "[verify][check]") {
  const auto k = matmul(32, 32, 32, "fp32");
  auto b = kevo::test::tiled_matmul(32, 32, 32, 32, 32, 16);
  for (auto& in : b.p.instrs)
    if (in.op == Opcode::nc_matmul) in.accumulate = false;  // forgets the first K half
  const auto r = check_program(k, b.p, 5);
  REQUIRE_FALSE(r.ok);
  REQUIRE_THAT(r.message, Catch::Contains("program order: C flat index 0 [0, 0]: got "));
  REQUIRE_THAT(r.message, Catch::Contains(" want "));
  CHECK(r.failure == CheckFailure::mismatch);
  CHECK(r.order == 0);
}

TEST_CASE("an out-of-bounds program is a failed check, not an exception", "[verify][check]") {
  const auto k = matmul(32, 32, 32, "fp32");
  auto b = kevo::test::tiled_matmul(32, 32, 32, 32, 32, 16);
  REQUIRE(b.p.instrs[4].op == Opcode::dma_copy);
  b.p.instrs[4].src[0].offset += 1;  // the second B tile, one element past the end
  const auto r = check_program(k, b.p, 6);
  REQUIRE_FALSE(r.ok);
  REQUIRE_THAT(r.message, Catch::Contains("instruction 4 (dma_copy): src[0]"));
  CHECK(r.failure == CheckFailure::error);
}

TEST_CASE("compare names how an output fails: finite values apart, a non-finite value, a wrong size", "[verify][check]") {
  const auto k = matmul(1, 2, 1, "fp32");
  const int c = 2;  // A, B, C
  REQUIRE(k.tensors[c].name == "C");
  const Tolerance tol{1e-6, 1e-6};
  const std::vector<float> want{1.0f, 2.0f};
  CHECK(compare(k, c, std::vector<float>{1.0f, 2.0f}, want, tol).failure == CheckFailure::none);
  CHECK(compare(k, c, std::vector<float>{1.0f, 2.5f}, want, tol).failure == CheckFailure::mismatch);
  CHECK(compare(k, c, std::vector<float>{std::nanf(""), 2.5f}, want, tol).failure == CheckFailure::non_finite);  // the first failure counts
  CHECK(compare(k, c, std::vector<float>{1.0f, 2.0f}, std::vector<float>{1.0f, INFINITY}, tol).failure == CheckFailure::non_finite);
  CHECK(compare(k, c, std::vector<float>{1.0f}, want, tol).failure == CheckFailure::size);
  CHECK(kevo::verify::to_string(CheckFailure::non_finite) == "non_finite");
}

TEST_CASE("reduction depth accumulates along the chain of ops", "[verify][check]") {
  auto k = kevo::ir::workload("softmax:R=4,C=300,dtype=fp32");
  REQUIRE(k.has_value());
  const auto d = kevo::verify::reduction_depths(*k);
  const auto* y = k->tensor("Y");
  REQUIRE(y != nullptr);
  const auto yi = static_cast<std::size_t>(y - k->tensors.data());
  REQUIRE(d[yi] >= 600);  // max over C, then sum over C
  REQUIRE(d[0] == 0);     // the input
}
