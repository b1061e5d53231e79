#include <catch2/catch.hpp>

#include "kevo/ir.hpp"

using namespace kevo::ir;

TEST_CASE("the example kernel from the issue parses") {
  const char* src = R"(kernel matmul_gelu(A: bf16[M=2048, K=2048], B: bf16[K, N=2048], bias: fp32[N]) -> (C: bf16[M, N]) {
  acc[m, n] = sum(k) A[m, k] * B[k, n]
  C[m, n]   = gelu(acc[m, n] + bias[n])
})";
  auto k = parse_kernel(src);
  if (!k) FAIL(k.error().str());
  REQUIRE(k->ops.size() == 2);
  CHECK(k->ops[0].kind() == OpKind::contract);
  CHECK(k->ops[1].kind() == OpKind::map);
  auto k2 = parse_kernel(print_kernel(*k));
  if (!k2) FAIL(k2.error().str());
  CHECK(*k2 == *k);
}
