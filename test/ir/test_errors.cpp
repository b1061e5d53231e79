// Bad kernel text gives one located diagnostic (file:line:column, the line, a caret) saying
// what was expected; malformed input never crashes or hangs.
#include <catch2/catch.hpp>
#include <string>

#include "kevo/core/rng.hpp"
#include "kevo/ir.hpp"

using namespace kevo::ir;

namespace {

struct Bad {
  const char* text;
  int line, column;
  const char* message;  // a substring of the diagnostic's message
};

const std::string kHead = "kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n";

}  // namespace

TEST_CASE("bad kernel texts give located errors that say what is wrong") {
  const std::vector<Bad> cases = {
      {"kernal k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = A[i]\n}\n", 1, 1, "expected 'kernel'"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = B[i]\n}\n", 2, 10, "unknown tensor 'B'; readable here: A"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = A[i, j]\n}\n", 2, 10,
       "tensor 'A' has 1 dimension [M] but is indexed with 2 indices"},
      {"kernel k(A: fp32[M=4, K=3], B: fp32[N=5, K]) -> (C: fp32[M, N]) {\n  C[m, n] = sum(k) A[m, k] * B[k, n]\n}\n",
       2, 30, "index 'k' ranges over K=3 in A[m, k] but over N=5 in B[k, n]"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M], D: fp32[M]) {\n  C[i] = A[i]\n}\n", 1, 40,
       "output 'D' is never written"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = A[i]\n  C[i] = A[i] * 2\n}\n", 3, 3,
       "tensor 'C' is written twice (first at line 2)"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = t[i] + A[i]\n  t[i] = A[i]\n}\n", 2, 10,
       "temp 't' is read before it is written"},
      {"kernel k(A: fp32[M=4, K=2]) -> (C: fp32[M]) {\n  C[m] = sum(m) A[m, m]\n}\n", 2, 14,
       "reduction index 'm' is also an output index of C[m]"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = A[i] +\n}\n", 3, 1, "expected an expression"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = foo(A[i])\n}\n", 2, 10, "unknown function 'foo'"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = exp(A[i], A[i])\n}\n", 2, 20,
       "function 'exp' takes 1 argument"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[N]) {\n  C[i] = A[i]\n}\n", 1, 36,
       "dimension 'N' has no size; give it at its first use as N=<size>"},
      {"kernel k(A: fp32[M=4], B: fp32[M=5]) -> (C: fp32[M]) {\n  C[i] = A[i]+B[i]\n}\n", 1, 34,
       "dimension M is already declared with size 4"},
      {"kernel k(A: int8[M=4]) -> (C: fp32[M]) {\n  C[i] = A[i]\n}\n", 1, 13,
       "expected a dtype (bf16, fp16, fp32, fp8_e4m3, fp8_e4m3fn), found 'int8'"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = A[i] $ 2\n}\n", 2, 15, "unexpected character '$'"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = A[i]\n", 2, 14, "expected '}' to close the kernel body"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  A[i] = C[i]\n}\n", 2, 3, "cannot write input 'A'"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  t[i] = A[i]\n  C[i] = A[i]\n}\n", 2, 3,
       "the result of statement `t[i] = A[i]` never reaches an output"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = cast(A[i])\n}\n", 2, 14, "expected '<' after 'cast'"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = A[i] < 1 < 2\n}\n", 2, 19, "comparisons do not chain"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = sum(j) A[i]\n}\n", 2, 14,
       "reduction index 'j' is not used by any tensor access"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  t[i, j] = A[i]\n  C[i] = sum(j) t[i, j]\n}\n", 2, 8,
       "cannot infer the extent of index 'j' of temp 't'"},
      {"kernel k(A: fp32[M=0]) -> (C: fp32[M]) {\n  C[i] = A[i]\n}\n", 1, 20, "expected the size of dimension M"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = A[i] * 1e999\n}\n", 2, 17, "out of range"},
      {"kernel k(A: fp32[M=4], B: fp32[M]) -> (C: fp32[M]) {\n  C[i] = A[i]\n}\n", 1, 24, "input 'B' is never read"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i, i] = A[i]\n}\n", 2, 8, "index 'i' appears twice in C[i, i]"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = C[i] + A[i]\n}\n", 2, 10,
       "statement reads 'C', the tensor it writes"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = A[i] + k\n}\n", 2, 17,
       "index 'k' is not one of the output indices (i)"},
      {"kernel k(A: fp32[M=4, N=4, O=4, P=4, Q=4]) -> (C: fp32[M]) {\n  C[i] = A[i]\n}\n", 1, 38,
       "tensor 'A' has more than 4 dimensions"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = A[i]\n} extra", 3, 3, "expected end of input"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = A[i] * nan\n}\n", 2, 17, "NaN constants"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = A[i] * 2\n  t[] = sum(i) A[i]\n}\n", 3, 3,
       "never reaches an output"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = A[i]\n  x[i] = mean() A[i]\n}\n", 3, 15,
       "expected the index names 'mean' reduces over"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = exp(sum(j) A[j])\n}\n", 2, 14,
       "a reduction sum(...) may only begin a statement's right-hand side"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M], A: fp32[M]) {\n  C[i] = A[i]\n}\n", 1, 40,
       "tensor 'A' is declared twice"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = A[i] * cast<int4>(A[i])\n}\n", 2, 22,
       "expected a dtype"},
      {"kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = select(A[i] > 0, A[i])\n}\n", 2, 31,
       "function 'select' takes 3 arguments, got 2"},
      {"kernel k(inf: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = A[i]\n}\n", 1, 10, "'inf' is a reserved word"},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    auto k = parse_kernel(c.text, "bad.kir");
    REQUIRE_FALSE(k.has_value());
    const kevo::Diagnostic& d = k.error();
    INFO(d.str());
    CHECK(d.loc.file == "bad.kir");
    CHECK(d.loc.line == c.line);
    CHECK(d.loc.column == c.column);
    CHECK(d.message.find(c.message) != std::string::npos);
  }
}

TEST_CASE("a diagnostic shows file:line:column, the offending line and a caret under the column") {
  auto k = parse_kernel(kHead + "  C[i] = B[i]\n}\n", "x.kir");
  REQUIRE_FALSE(k.has_value());
  CHECK(k.error().str() ==
        "x.kir:2:10: unknown tensor 'B'; readable here: A\n"
        "    C[i] = B[i]\n"
        "           ^");
}

TEST_CASE("text larger than the input limit is rejected without being parsed") {
  std::string big = kHead + "  C[i] = A[i]\n}\n";
  big += std::string(std::size_t{2} << 20, '#');
  auto k = parse_kernel(big);
  REQUIRE_FALSE(k.has_value());
  CHECK(k.error().message.find("at most") != std::string::npos);
}

TEST_CASE("deep nesting is an error, not a stack overflow") {
  std::string open(5000, '('), close(5000, ')');
  auto a = parse_kernel(kHead + "  C[i] = " + open + "A[i]" + close + "\n}\n");
  REQUIRE_FALSE(a.has_value());
  CHECK(a.error().message.find("nested deeper than") != std::string::npos);
  std::string chain = "A[i]";
  for (int i = 0; i < 20000; ++i) chain += " + A[i]";
  auto b = parse_kernel(kHead + "  C[i] = " + chain + "\n}\n");
  REQUIRE_FALSE(b.has_value());
  CHECK(b.error().message.find("nested deeper than") != std::string::npos);
  // a flat sum nests one level per operator: 256 terms are allowed, and past the limit the
  // message says what counts and what to do
  std::string sum256 = "A[i]";
  for (int i = 1; i < 256; ++i) sum256 += " + A[i]";
  CHECK(parse_kernel(kHead + "  C[i] = " + sum256 + "\n}\n").has_value());
  std::string sum300 = sum256;
  for (int i = 0; i < 44; ++i) sum300 += " + A[i]";
  auto s = parse_kernel(kHead + "  C[i] = " + sum300 + "\n}\n");
  REQUIRE_FALSE(s.has_value());
  CHECK(s.error().message.find("each operator of a chain such as a + b + c count one level") != std::string::npos);
  CHECK(s.error().message.find("split it over several statements") != std::string::npos);
  std::string negs(5000, '-');
  auto c = parse_kernel(kHead + "  C[i] = " + negs + "A[i]\n}\n");
  REQUIRE_FALSE(c.has_value());
  std::string calls;
  for (int i = 0; i < 3000; ++i) calls += "exp(";
  auto d = parse_kernel(kHead + "  C[i] = " + calls + "A[i]" + std::string(3000, ')') + "\n}\n");
  REQUIRE_FALSE(d.has_value());
}

TEST_CASE("truncations and byte flips of valid kernels never crash the parser") {
  const bool asan = std::getenv("KEVO_ASAN") != nullptr;
  std::vector<std::string> texts;
  for (const auto& w : workloads()) texts.push_back(print_kernel(*workload(w.name)));
  kevo::Rng rng(2024);
  static constexpr char kAlphabet[] = "()[]{},:=+-*<>/#_ \n\tabkmnijsCAB019.e";
  int parsed = 0, rejected = 0;
  const int rounds = asan ? 1000 : 10000;
  for (int r = 0; r < rounds; ++r) {
    std::string t = texts[rng.below(texts.size())];
    switch (rng.below(4)) {
      case 0: t.resize(rng.below(t.size())); break;
      case 1:
        for (int f = 0, n = 1 + static_cast<int>(rng.below(4)); f < n; ++f)
          t[rng.below(t.size())] = static_cast<char>(rng.below(256));
        break;
      case 2:
        for (int f = 0, n = 1 + static_cast<int>(rng.below(4)); f < n; ++f)
          t[rng.below(t.size())] = kAlphabet[rng.below(sizeof kAlphabet - 1)];
        break;
      default: {
        const auto a = rng.below(t.size()), len = rng.below(20);
        t.erase(a, len);
        t.insert(rng.below(t.size()), texts[0].substr(rng.below(texts[0].size() - 10), 10));
      }
    }
    auto k = parse_kernel(t);
    if (k) {
      ++parsed;
      // anything accepted must print and re-parse to itself
      auto again = parse_kernel(print_kernel(*k));
      REQUIRE(again.has_value());
      REQUIRE(*again == *k);
    } else {
      ++rejected;
      REQUIRE(k.error().loc.line >= 1);
      REQUIRE(!k.error().message.empty());
    }
  }
  CHECK(rejected > rounds / 2);
  CHECK(parsed > 0);
}

TEST_CASE("validate reports errors in C++-built kernels with the statement") {
  KernelBuilder b("bad");
  b.dim("M", 4).input("A", DType::fp32, {"M"}).output("C", DType::fp32, {"M"});
  b.map("C", {"i"}, access("A", {"i", "j"}));
  auto k = b.build();
  REQUIRE_FALSE(k.has_value());
  CHECK(k.error().loc.line == 0);
  CHECK(k.error().message == "in statement `C[i] = A[i, j]`: tensor 'A' has 1 dimension [M] but is indexed with 2 indices");
  CHECK_THROWS_AS(b.build_or_throw(), kevo::Error);
}

TEST_CASE("validate rejects temps whose dtype is not their statement's, unknown dims and unused dims") {
  Kernel k;
  k.name = "k";
  k.dims = {{"M", 4}, {"Z", 3}};
  k.tensors = {{"A", DType::fp32, {"M"}, Role::input}, {"C", DType::fp32, {"M"}, Role::output}};
  k.ops = {Op{"C", {"i"}, ReduceOp::none, {}, access("A", {"i"})}};
  auto r = validate(k);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message.find("dimension 'Z' is declared but no tensor uses it") != std::string::npos);
  k.dims.pop_back();
  CHECK(validate(k).has_value());
  // a temp is fp32, or T when its whole right-hand side is cast<T>(...)
  k.tensors.push_back({"t", DType::bf16, {"M"}, Role::temp});
  k.ops = {Op{"t", {"i"}, ReduceOp::none, {}, access("A", {"i"})}, Op{"C", {"i"}, ReduceOp::none, {}, access("t", {"i"})}};
  r = validate(k);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message.find("temp 't' is declared bf16 but its statement makes it fp32") != std::string::npos);
  k.ops[0].expr = cast(DType::bf16, access("A", {"i"}));
  REQUIRE(validate(k).has_value());
  CHECK(validate(k)->tensor("t")->dtype == DType::bf16);
  k.ops = {Op{"C", {"i"}, ReduceOp::none, {}, access("A", {"i"})}};
  k.tensors.back().dtype = DType::fp32;
  r = validate(k);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message.find("temp 't' is declared but never written") != std::string::npos);
  k.tensors.pop_back();
  k.tensors[0].dims = {"Q"};
  r = validate(k);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message.find("unknown dimension 'Q'") != std::string::npos);
}
