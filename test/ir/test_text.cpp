#include <catch2/catch.hpp>

#include <filesystem>

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
  const std::string doc = kevo::read_file(std::filesystem::path(KEVO_SOURCE_DIR) / "docs" / "KIR.md");
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
    if (block.rfind("$ ", 0) == 0) continue;             // a shell transcript (the error example)
    INFO(block);
    auto parsed = parse_kernel(block, "KIR.md");
    if (!parsed) FAIL(parsed.error().str());
    ++found;
  }
  CHECK(found >= 1);
}

TEST_CASE("the error example in docs/KIR.md is what the parser and the kevo command print") {
  const std::string doc = kevo::read_file(std::filesystem::path(KEVO_SOURCE_DIR) / "docs" / "KIR.md");
  const auto cat = doc.find("$ cat bad.kir\n");
  REQUIRE(cat != std::string::npos);
  const auto cmd = doc.find("$ kevo space bad.kir\n", cat);
  REQUIRE(cmd != std::string::npos);
  const std::string text = doc.substr(cat + 14, cmd - (cat + 14));
  const auto line_end = doc.find('\n', cmd + 21);
  const std::string cli_line = doc.substr(cmd + 21, line_end - (cmd + 21));
  const auto open = doc.find("```\n", doc.find("error().str()", line_end));
  REQUIRE(open != std::string::npos);
  const auto close = doc.find("\n```", open + 4);
  const std::string shown = doc.substr(open + 4, close - (open + 4));
  auto k = parse_kernel(text, "bad.kir");
  REQUIRE_FALSE(k.has_value());
  CHECK(cli_line == "kevo: error: " + k.error().headline());  // what kevo's main prints
  CHECK(shown == k.error().str());
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
