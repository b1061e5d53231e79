#include <catch2/catch.hpp>

#include "kevo/core/io.hpp"
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

TEST_CASE("every kernel example in docs/KIR.md parses") {
  const std::string doc = kevo::read_file(std::string(KEVO_SOURCE_DIR) + "/docs/KIR.md");
  int found = 0;
  for (std::size_t p = doc.find("```\n"); p != std::string::npos; p = doc.find("```\n", p)) {
    const std::size_t start = p + 4;
    const std::size_t end = doc.find("```", start);
    if (end == std::string::npos) break;
    const std::string block = doc.substr(start, end - start);
    p = end + 3;
    const auto k = block.find("kernel ");
    if (k == std::string::npos || block.find("kernel     :=") != std::string::npos) continue;
    if (block.find("^") != std::string::npos) continue;  // a diagnostic, not a kernel
    INFO(block);
    auto parsed = parse_kernel(block, "KIR.md");
    if (!parsed) FAIL(parsed.error().str());
    ++found;
  }
  CHECK(found >= 1);
}

TEST_CASE("the builder example in docs/KIR.md builds the same kernel as its text") {
  using namespace kevo::ir;
  KernelBuilder b("matmul_gelu");
  b.dim("M", 2048).dim("N", 2048).dim("K", 2048);
  b.input("A", DType::bf16, {"M", "K"}).input("B", DType::bf16, {"K", "N"}).input("bias", DType::fp32, {"N"});
  b.output("C", DType::bf16, {"M", "N"});
  b.contract("acc", {"m", "n"}, {"k"}, access("A", {"m", "k"}), access("B", {"k", "n"}));
  b.map("C", {"m", "n"}, unary(Fn::gelu_tanh, access("acc", {"m", "n"}) + access("bias", {"n"})));
  auto k = b.build();
  if (!k) FAIL(k.error().str());
  auto p = parse_kernel(R"(kernel matmul_gelu(A: bf16[M=2048, K=2048], B: bf16[K, N=2048], bias: fp32[N]) -> (C: bf16[M, N]) {
    acc[m, n] = sum(k) A[m, k] * B[k, n]
    C[m, n]   = gelu(acc[m, n] + bias[n])
  })");
  REQUIRE(p.has_value());
  CHECK(*k == *p);
}
