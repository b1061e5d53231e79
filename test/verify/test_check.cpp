// check_program, the oracle: hand-lowered programs of ir workloads pass; each kind of lowering
// bug (missing dependency edge, unwritten output, wrong arithmetic, out-of-bounds access) fails
// with a message that says where.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <set>
#include <tuple>
#include <vector>

#include "kevo/ir/workloads.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/lower.hpp"
#include "kevo/schedule.hpp"
#include "kevo/schedule/detail/plan.hpp"
#include "kevo/target.hpp"
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
// The kernel's default schedule on trn2, checked by the oracle over 3 trials.
kevo::verify::CheckResult check_default_schedule(const kevo::ir::Kernel& k) {
  const auto t = kevo::target::load_target("trn2");
  REQUIRE(t);
  const auto sp = kevo::schedule::ScheduleSpace::derive(k, *t);
  const auto p = kevo::lower::lower(sp, sp.default_genome());
  REQUIRE(p);
  return check_program(k, *p, 3);
}
// Lowers `n` genomes of `sp` (the default schedule first, then random ones, repaired) and calls
// `each(program)` for each that lowers, after requiring the target's rules of it (check_program);
// returns how many lowered.
template <class F>
int for_lowered(const kevo::schedule::ScheduleSpace& sp, const kevo::target::Target& t, std::uint64_t seed, int n, F&& each) {
  kevo::Rng rng(seed);
  int lowered = 0;
  for (int i = 0; i < n; ++i) {
    kevo::Genome g = i == 0 ? sp.default_genome() : sp.genes().random(rng);
    sp.repair(g, rng);
    auto p = kevo::lower::lower(sp, g);
    if (!p) continue;
    ++lowered;
    const auto legal = kevo::lower::check_program(*p, t);
    INFO(sp.print(g) << "\n" << (legal ? std::string() : legal.error().message));
    REQUIRE(legal);
    each(*p);
  }
  return lowered;
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
  REQUIRE_THAT(r.message, Catch::Contains("unwritten (or computed from unwritten memory) at C flat index 2080 [32, 32]"));
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

TEST_CASE("compare widens each element by its allowance, and only that element", "[verify][check]") {
  const auto k = matmul(1, 2, 1, "fp32");
  const int c = 2;
  const Tolerance tol{1e-6, 1e-6};
  const std::vector<float> want{0.40554952f, 2.0f};
  const std::vector<float> allowance{1.2e-3f, 0.0f};  // what fp32 arithmetic may cost at each element
  const std::vector<float> close{0.40460f, 2.0f};      // 9.5e-4 off
  const std::vector<float> far{0.40332031f, 2.0f};     // 2.2e-3 off
  CHECK(compare(k, c, close, want, tol).failure == CheckFailure::mismatch);  // without the allowance
  CHECK(compare(k, c, close, want, tol, allowance).ok);
  const auto r = compare(k, c, far, want, tol, allowance);
  CHECK(r.failure == CheckFailure::mismatch);
  CHECK_THAT(r.message, Catch::Contains("+ 0.0012 for fp32 arithmetic's own error here"));
  CHECK(compare(k, c, std::vector<float>{0.40554952f, 2.001f}, want, tol, allowance).failure == CheckFailure::mismatch);
}

TEST_CASE("where the reference is NaN, an element the program never wrote still fails", "[verify][check]") {
  // A NaN reference (log of a negative) was matched by any NaN, the poison of an element never
  // written included.
  const auto k = matmul(1, 3, 1, "bf16");
  const int c = 2;
  const Tolerance tol{1e-2, 1e-2};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> want{nan, 1.0f, 2.0f};
  CHECK(compare(k, c, std::vector<float>{nan, 1.0f, 2.0f}, want, tol).ok);
  CHECK(compare(k, c, std::vector<float>{-nan, 1.0f, 2.0f}, want, tol).ok);
  const auto r = compare(k, c, std::vector<float>{kevo::verify::kUnwritten, 1.0f, 2.0f}, want, tol);
  CHECK(r.failure == CheckFailure::non_finite);
  CHECK_THAT(r.message, Catch::StartsWith("unwritten (or computed from unwritten memory) at C flat index 0"));
  // computed from it (negated, rounded to bf16): still the poison's payload
  const float derived = kevo::ir::round_to(DType::bf16, -kevo::verify::kUnwritten);
  CHECK(kevo::verify::is_unwritten(derived));
  CHECK_FALSE(compare(k, c, std::vector<float>{derived, 1.0f, 2.0f}, want, tol).ok);
  CHECK_FALSE(kevo::verify::is_unwritten(nan));
  CHECK_FALSE(kevo::verify::is_unwritten(std::log(-1.0f)));
  // and a NaN where the reference is finite says which NaN it is
  const auto inv = compare(k, c, std::vector<float>{nan, nan, 2.0f}, want, tol);
  CHECK_THAT(inv.message, Catch::StartsWith("NaN (invalid arithmetic) at C flat index 1"));
}

TEST_CASE("a cancelling kernel verifies: the program is as exact as fp32 arithmetic allows", "[verify][check]") {
  // Every fp32 program of (x + 1e4) - 1e4 is ~1 ulp of 1e4 from the fp64 reference, which the
  // output's own scale (~0.5) does not cover: no schedule verified and the search exited 3.
  auto k = kevo::ir::parse_kernel("kernel cancel(X: fp32[R=64, C=128]) -> (Y: fp32[R, C]) {\n  Y[r, c] = (X[r, c] + 10000.0) - 10000.0\n}\n");
  REQUIRE(k);
  const auto r = check_default_schedule(*k);
  INFO(r.message);
  CHECK(r.ok);
  const auto t = kevo::target::load_target("trn2");
  REQUIRE(t);
  const auto sp = kevo::schedule::ScheduleSpace::derive(*k, *t);
  // A wrong constant is still caught: 1e4 + 1 off by one part in 1e4 fails by 1.0.
  auto wrong = kevo::ir::parse_kernel("kernel cancel(X: fp32[R=64, C=128]) -> (Y: fp32[R, C]) {\n  Y[r, c] = (X[r, c] + 10000.0) - 10001.0\n}\n");
  REQUIRE(wrong);
  const auto pw = kevo::lower::lower(kevo::schedule::ScheduleSpace::derive(*wrong, *t), sp.default_genome());
  REQUIRE(pw);
  CHECK_FALSE(check_program(*k, *pw, 3).ok);
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

TEST_CASE("rounding stages: the coarsest dtype on the way to each tensor and the roundings below fp32", "[verify][check]") {
  auto k = kevo::ir::parse_kernel(R"(kernel t(X: bf16[M=8, K=4], W: bf16[K, N=4]) -> (Y: fp32[M, N], Z: bf16[M, N]) {
  a[m, n] = sum(k) X[m, k] * W[k, n]
  h[m, n] = cast<bf16>(a[m, n])
  g[m, n] = cast<fp8_e4m3>(h[m, n] * 2) + 1
  Y[m, n] = h[m, n] + 1
  Z[m, n] = g[m, n] * h[m, n]
})");
  REQUIRE(k);
  const auto r = kevo::verify::rounding_dtypes(*k);
  const auto at = [&](const char* name) {
    for (std::size_t t = 0; t < k->tensors.size(); ++t)
      if (k->tensors[t].name == name) return r[t];
    FAIL(name);
    return kevo::verify::Rounding{};
  };
  CHECK(at("X").stages == 0);  // given values
  CHECK(at("a").dtype == DType::fp32);
  CHECK(at("a").stages == 0);
  CHECK(at("h").dtype == DType::bf16);
  CHECK(at("h").stages == 1);
  CHECK(at("Y").dtype == DType::bf16);  // fp32 itself, fed by a bf16 temp
  CHECK(at("Y").stages == 1);
  CHECK(at("g").dtype == DType::fp8_e4m3);  // a cast inside the statement
  CHECK(at("g").stages == 2);
  CHECK(at("Z").stages == 3);
  // the rounding part of the tolerance grows as sqrt(stages); one stage is tolerance_for(dtype)
  const std::vector<float> unit(4, 1.0f);
  const auto one = kevo::verify::tolerance_for(kevo::verify::Rounding{DType::bf16, 1}, 1, unit);
  const auto four = kevo::verify::tolerance_for(kevo::verify::Rounding{DType::bf16, 4}, 1, unit);
  CHECK(one.rel == kevo::verify::tolerance_for(DType::bf16).rel);
  CHECK(four.rel > 1.9 * one.rel);
  CHECK(four.rel < 2.1 * one.rel);
}

TEST_CASE("a chain of 20 matmuls through bf16 temps verifies; one wrong matmul in it does not", "[verify][check]") {
  // Each temp is rounded to bf16 by the program (from fp32 PSUM) and the reference (from fp64):
  // 3.6% of the output's rms apart after 20, beyond one stage's 3 bf16 ulps.
  std::string text = "kernel chain(X: bf16[M=256, K=256], ";
  for (int i = 0; i < 20; ++i) text += "W" + std::to_string(i) + ": bf16[K, K]" + (i < 19 ? ", " : ") -> (Y: bf16[M, K]) {\n");
  std::string prev = "X";
  for (int i = 0; i < 19; ++i) {
    text += "  a" + std::to_string(i) + "[m, n] = sum(k) " + prev + "[m, k] * W" + std::to_string(i) + "[k, n]\n";
    text += "  h" + std::to_string(i) + "[m, n] = cast<bf16>(a" + std::to_string(i) + "[m, n])\n";
    prev = "h" + std::to_string(i);
  }
  text += "  Y[m, n] = sum(k) " + prev + "[m, k] * W19[k, n]\n}\n";
  auto k = kevo::ir::parse_kernel(text);
  REQUIRE(k);
  const auto t = kevo::target::load_target("trn2").value();
  const auto s = kevo::schedule::ScheduleSpace::derive(*k, t);
  auto p = kevo::lower::lower(s, s.default_genome());
  REQUIRE(p);
  const auto ok = check_program(*k, *p, 0x5eed, 1);
  INFO(ok.message);
  CHECK(ok.ok);
  // checked against the chain with W8 read transposed by the ninth matmul (the same tensors and
  // shapes; another product), the program fails
  auto wrong = *k;
  for (auto& op : wrong.ops)
    if (op.out == "a8") std::swap(op.expr.args[1].indices[0], op.expr.args[1].indices[1]);
  auto wk = kevo::ir::validate(wrong);
  REQUIRE(wk);
  CHECK_FALSE(check_program(*wk, *p, 0x5eed, 1).ok);
}

TEST_CASE("a mask comparison that a tile decides folds to a constant and the program still matches", "[verify][fold]") {
  // Y = X above-or-on the diagonal, -inf below it (a causal mask) and a strict one, on 256 x 256
  // in 128 x 128 tiles: of the four tiles, one is wholly visible and one wholly masked, and only
  // the two on the diagonal need a mask (an affine_select, its predicate from the positions).
  for (const char* cmp : {"<=", "<", ">", ">="}) {
    INFO(cmp);
    const std::string text = std::string(
        "kernel causal(X: fp32[I=256, J=256]) -> (Y: fp32[I, J]) {\n"
        "  Y[i, j] = select(j ") + cmp + " i, X[i, j], -inf)\n}\n";
    auto k = kevo::ir::parse_kernel(text);
    INFO((k ? std::string() : k.error().str()));
    REQUIRE(k);
    const auto t = kevo::target::load_target("trn2");
    REQUIRE(t);
    const auto s = kevo::schedule::ScheduleSpace::derive(*k, *t);
    auto g = s.parse("tile i=128 j=128");
    INFO((g ? std::string() : g.error().str()));
    REQUIRE(g);
    auto p = kevo::lower::lower(s, *g);
    INFO((p ? std::string() : p.error().str()));
    REQUIRE(p);
    int masks = 0, iota = 0;
    for (const auto& in : p->instrs) {
      masks += in.op == Opcode::affine_select;
      iota += in.op == Opcode::iota;
    }
    CHECK(masks == 2);  // the two diagonal tiles only
    CHECK(iota == 0);
    const auto r = check_program(*k, *p, 3, 2);
    INFO(r.message);
    CHECK(r.ok);
  }
}

TEST_CASE("rest tiles: blocks after the first run tile by tile and still match the reference", "[verify][rest]") {
  struct Case {
    const char* spec;
    const char* schedule;
  };
  const std::string hold = "; load A@root x2 dma=tile q=2; load B@root x2 dma=tile q=2; acc psum x1; store C@auto x2";
  const Case cases[] = {
      // k blocks outermost in each block of several m tiles; edge tiles in every index
      {"matmul:M=300,N=700,K=650,dtype=bf16", "tile m=128 n=512 k=128; block m=4 n=1 k=1; order n.b m.b k.b n m k"},
      {"matmul:M=512,N=1024,K=512,dtype=fp32", "tile m=128 n=256 k=128; block m=2 n=2 k=2; order m.b n.b k.b m n k"},
      // one k block: the k tile loop outside the output tile loops is the one reordered
      {"matmul:M=512,N=600,K=384,dtype=bf16", "tile m=128 n=512 k=128; block m=2 n=2 k=4; order m.b n.b k.b k m n"},
      // stationary B; interleaved k rows
      {"matmul:M=256,N=384,K=512,dtype=bf16", "tile m=128 n=128 k=64; block m=1 n=4 k=2; order m.b n.b k.b n m k; stationary B; rows interleave"},
      // a batch index (the first block of the first batch keeps its order) and an epilogue
      {"bmm:B=3,M=256,N=256,K=384,dtype=bf16", "tile m=128 n=256 k=128; block m=2 n=1 k=1; order n.b m.b k.b n m k; load A@root x2; load W@root x2; acc psum x1"},
      {"matmul_bias_act:M=384,N=512,K=384,dtype=bf16,act=gelu", "tile m=128 n=256 k=128; block m=1 n=2 k=1; order n.b m.b k.b m n k"},
  };
  const auto t = kevo::target::load_target("trn2");
  REQUIRE(t);
  for (const auto& c : cases) {
    INFO(c.spec);
    auto k = kevo::ir::workload(c.spec);
    REQUIRE(k);
    const auto s = kevo::schedule::ScheduleSpace::derive(*k, *t, kevo::schedule::DeriveOptions::full());
    std::string text = c.schedule + hold;
    if (std::string(c.spec).rfind("matmul", 0) != 0) text = c.schedule;
    else if (std::string(c.spec).rfind("matmul_bias_act", 0) == 0)
      text = c.schedule + std::string("; load A@root x2; load W@root x2; acc psum x1");
    auto base = s.parse(text);
    INFO(text << (base ? std::string() : " " + base.error().str()));
    REQUIRE(base);
    auto g = s.parse(text + "; rest tiles");
    REQUIRE(g);
    auto pb = kevo::lower::lower(s, *base);
    auto p = kevo::lower::lower(s, *g);
    INFO((p ? std::string() : p.error().str()));
    REQUIRE(pb);
    REQUIRE(p);
    // the same instructions, in another order
    CHECK(p->instrs.size() == pb->instrs.size());
    bool reordered = false;
    for (std::size_t i = 0; i < p->instrs.size() && !reordered; ++i)
      reordered = p->instrs[i].op != pb->instrs[i].op || p->instrs[i].dst.offset != pb->instrs[i].dst.offset ||
                  p->instrs[i].dst.buffer != pb->instrs[i].dst.buffer;
    CHECK(reordered);
    const auto r = check_program(*k, *p, 7, 2);
    INFO(r.message);
    CHECK(r.ok);
  }
}

TEST_CASE("rest tiles is refused with a reason where a nest cannot run its blocks tile by tile", "[verify][rest]") {
  auto k = kevo::ir::workload("matmul:M=512,N=512,K=512,dtype=bf16");
  REQUIRE(k);
  const auto t = kevo::target::load_target("trn2");
  REQUIRE(t);
  const auto s = kevo::schedule::ScheduleSpace::derive(*k, *t, kevo::schedule::DeriveOptions::full());
  // each statement of the good schedule, then one of them changed
  const std::vector<std::string> good = {"tile m=128 n=512 k=128", "block m=2 n=1 k=1", "order n.b m.b k.b n m k",
                                         "load A@root", "load B@root", "acc psum x1", "store C@auto", "rest tiles"};
  const auto text = [&](std::size_t at, const std::string& with) {
    std::string t;
    for (std::size_t i = 0; i < good.size(); ++i) t += (i ? "; " : "") + (i == at ? with : good[i]);
    return t;
  };
  const std::string base = text(good.size(), "");
  const std::tuple<std::size_t, const char*, const char*> bad[] = {
      {5, "acc sbuf x1 dtype=fp32", "its partial sums are in SBUF"},
      {2, "order k.b m.b n.b n m k", "a block loop of an output index runs inside its outer k loop"},
      {6, "store C@root", "its store is not just outside its outer k loop"},
      {4, "load B@k.b", "an operand is loaded inside its outer k loop"},
      {1, "block m=1 n=1 k=1", "no output tile loop of more than one tile runs inside its outer k loop"},
  };
  for (const auto& [at, with, why] : bad) {
    INFO(with);
    auto g = s.parse(text(at, with));
    INFO((g ? std::string() : g.error().str()));
    REQUIRE(g);
    auto p = kevo::schedule::make_plan(s, *g);
    REQUIRE_FALSE(p);
    CHECK(p.error().code == "unsupported");
    CHECK(p.error().message.find(why) != std::string::npos);
  }
  CHECK(kevo::schedule::make_plan(s, *s.parse(base)));
  CHECK(s.print(*s.parse(base)).find("; rest tiles") != std::string::npos);
  auto one = kevo::schedule::ScheduleSpace::derive(*kevo::ir::workload("matmul:M=256,N=256,K=32,dtype=bf16"), *t,
                                                  kevo::schedule::DeriveOptions::full());
  auto e = one.parse("rest tiles");
  REQUIRE_FALSE(e);
  CHECK(e.error().str().find("'rest' orders the tiles of blocks over k blocks") != std::string::npos);
  // the searched space does not offer it
  auto searched = kevo::schedule::ScheduleSpace::derive(*k, *t);
  auto e2 = searched.parse(base);
  REQUIRE_FALSE(e2);
  CHECK(e2.error().str().find("bad value 'tiles' for rest (allowed: blocks); 'tiles' is in the full space only (--space full)") !=
        std::string::npos);
  CHECK(searched.print(searched.default_genome()).find("rest") == std::string::npos);
}

namespace {
// A schedule with one of the PE array's tiling genes set to `slices`: it parses, prints the gene,
// lowers to matmuls in tiles of `size` at two positions or more (neighbours can overlap), passes
// check_program and matches the reference in program and adversarial order.
struct TiledCase {
  const char* target;
  const char* spec;
  const char* schedule;
  int size;  // the row (kedge) or column (sedge) tile the edge takes
};
void check_tiled(const TiledCase& c, const std::string& gene) {
  INFO(c.spec << " on " << c.target);
  auto k = kevo::ir::workload(c.spec);
  REQUIRE(k);
  const auto t = kevo::target::load_target(c.target);
  REQUIRE(t);
  const auto s = kevo::schedule::ScheduleSpace::derive(*k, *t, kevo::schedule::DeriveOptions::full());
  auto g = s.parse(std::string(c.schedule) + "; " + gene + " slices");
  INFO(c.schedule << (g ? std::string() : " " + g.error().str()));
  REQUIRE(g);
  CHECK(s.print(*g).find(gene + " slices") != std::string::npos);
  auto p = kevo::lower::lower(s, *g);
  INFO((p ? std::string() : p.error().str()));
  REQUIRE(p);
  const bool rows = gene == "kedge";
  std::set<int> at;
  for (const auto& in : p->instrs) {
    const int size = rows ? in.pe_rows : in.pe_cols;
    if (in.op != Opcode::nc_matmul || size == 0) continue;
    CHECK(size == c.size);
    at.insert(rows ? in.pe_row0 : in.pe_col0);
  }
  CHECK(at.size() >= 2);
  CHECK(kevo::lower::check_program(*p, *t));
  const auto r = check_program(*k, *p, 11, 2);
  INFO(r.message);
  CHECK(r.ok);
}
}  // namespace

TEST_CASE("kedge slices: the partial last k tile in the PE array's row tiles matches the reference", "[verify][kedge]") {
  const TiledCase cases[] = {
      // a 20-row edge in 32-row tiles, k tiles outside the output tiles, A transposed per block
      {"trn2", "matmul:M=512,N=600,K=660,dtype=bf16",
       "tile m=128 n=512 k=128; block m=4 n=2 k=8; order n.b m.b k.b k m n; transpose A=dma_transpose_block; load A@m.b x2 dma=row q=2; "
       "load B@n.b x1 dma=row q=2; acc psum x1; store C@auto x2; prologue spread",
       32},
      // a 36-row edge in 64-row tiles; stationary B, A strided, rows interleaved in full k blocks
      {"trn2", "matmul:M=300,N=256,K=932,dtype=bf16",
       "tile m=128 n=128 k=128; block m=4 n=2 k=4; order m.b n.b k.b k n m; stationary B; transpose A=strided; load A@root x1 dma=tile; "
       "load B@root x1 dma=region; acc psum x1; store C@auto x1; rows interleave",
       64},
      // k tiles of 64 rows: a 20-row edge, two 32-row tiles of the k tile's 64 partitions; fp32
      {"trn2", "matmul:M=256,N=512,K=276,dtype=fp32",
       "tile m=128 n=256 k=64; block m=2 n=2 k=2; order m.b n.b k.b k n m; transpose A=strided; load A@root x1; load B@root x1; "
       "acc sbuf x1 dtype=fp32",
       32},
      // NeuronCore-v2: 64-row tiles only
      {"trn1", "matmul:M=512,N=512,K=660,dtype=bf16",
       "tile m=128 n=512 k=128; block m=4 n=1 k=8; order n.b m.b k.b k m n; transpose A=dma_transpose_block; load A@root x1; "
       "load B@root x1; acc psum x1",
       64},
  };
  for (const auto& c : cases) check_tiled(c, "kedge");
}

TEST_CASE("kedge is offered only where it can apply, and refused with pe_transpose", "[verify][kedge]") {
  const auto t = kevo::target::load_target("trn2");
  REQUIRE(t);
  const auto space_of = [&](const char* spec) {
    return kevo::schedule::ScheduleSpace::derive(kevo::ir::workload(spec).value(), *t, kevo::schedule::DeriveOptions::full());
  };
  // K = 512 leaves no partial tile; K = 347 leaves 91 rows, more than a row tile's 64
  for (const char* spec : {"matmul:M=256,N=256,K=512,dtype=bf16", "matmul:M=256,N=256,K=347,dtype=bf16"}) {
    INFO(spec);
    const auto s = space_of(spec);
    CHECK_FALSE(s.genes().find("C.kedge"));
    auto g = s.parse("tile m=128 n=256 k=128; kedge slices");
    REQUIRE_FALSE(g);
    CHECK(g.error().str().find("'kedge'") != std::string::npos);
  }
  // the host has no row tiling
  const auto host = kevo::target::load_target("host").value();
  CHECK_FALSE(kevo::schedule::ScheduleSpace::derive(kevo::ir::workload("matmul:M=256,N=256,K=660,dtype=fp32").value(), host)
                  .genes()
                  .find("C.kedge"));
  const auto s = space_of("matmul:M=256,N=256,K=660,dtype=bf16");
  REQUIRE(s.genes().find("C.kedge"));
  auto g = s.parse("tile m=128 n=256 k=128; transpose A=pe_transpose; kedge slices");
  REQUIRE(g);
  auto p = kevo::lower::lower(s, *g);
  REQUIRE_FALSE(p);
  CHECK(p.error().code == "unsupported");
  CHECK(p.error().message.find("pe_transpose") != std::string::npos);
}

TEST_CASE("sedge slices: the stationary's partial last tile in the PE array's column tiles matches the reference", "[verify][sedge]") {
  const TiledCase cases[] = {
      // a 44-column edge of A in 64-column tiles; three moving tiles rotate over two column tiles;
      // C stored a row of the footprint at a time (split per tile at the edge)
      {"trn2", "matmul:M=300,N=1536,K=256,dtype=bf16",
       "tile m=128 n=512 k=128; block m=2 n=4 k=2; order m.b n.b k.b k m n; transpose A=dma_transpose_block; load A@root x1; "
       "load B@root x1; acc psum x1; store C@root x1 dma=row q=2",
       64},
      // stationary B with a 24-column edge in 32-column tiles; moving A tiles with an edge of their
      // own; SBUF accumulation over k blocks and a memset start; C stored per tile
      {"trn2", "matmul:M=600,N=280,K=384,dtype=bf16",
       "tile m=512 n=128 k=128; block m=2 n=4 k=1; order n.b m.b k.b n m k; stationary B; transpose A=dma_transpose; load A@k x2; "
       "load B@k x2; acc sbuf x1 dtype=fp32 zero=memset; store C@root x1 dma=tile",
       32},
      // both edges at once (a 20-row k edge in row tiles), and rest tiles storing tile by tile
      {"trn2", "matmul:M=280,N=1024,K=660,dtype=bf16",
       "tile m=128 n=512 k=128; block m=4 n=2 k=1; order n.b m.b k.b n k m; transpose A=dma_transpose_block; load A@root x2 dma=tile; "
       "load B@root x2 dma=tile; acc psum x1; store C@auto x2; rest tiles; kedge slices",
       32},
      // NeuronCore-v2: 64-column tiles only
      {"trn1", "matmul:M=300,N=1024,K=256,dtype=bf16",
       "tile m=128 n=512 k=128; block m=4 n=2 k=2; order m.b n.b k.b k m n; transpose A=dma_transpose_block; load A@root x1; "
       "load B@root x1; acc psum x1; store C@root x1 dma=region",
       64},
  };
  for (const auto& c : cases) check_tiled(c, "sedge");
}

TEST_CASE("sedge is offered where a free extent leaves an edge of at most 64 columns, and refused with an epilogue", "[verify][sedge]") {
  const auto t = kevo::target::load_target("trn2");
  REQUIRE(t);
  // M = 512 and N = 384 divide by 128; M = 200 leaves 72 columns, more than a column tile's 64
  for (const char* spec : {"matmul:M=512,N=384,K=300,dtype=bf16", "matmul:M=200,N=256,K=300,dtype=bf16"}) {
    INFO(spec);
    const auto s = kevo::schedule::ScheduleSpace::derive(kevo::ir::workload(spec).value(), *t, kevo::schedule::DeriveOptions::full());
    CHECK_FALSE(s.genes().find("C.sedge"));
    auto g = s.parse("tile m=128 n=256 k=128; sedge slices");
    REQUIRE_FALSE(g);
    CHECK(g.error().str().find("'sedge'") != std::string::npos);
  }
  const auto k = kevo::ir::workload("matmul_bias_act:M=300,N=512,K=256,dtype=bf16,act=gelu").value();
  const auto s = kevo::schedule::ScheduleSpace::derive(k, *t, kevo::schedule::DeriveOptions::full());
  auto g = s.parse("tile m=128 n=512 k=128; sedge slices");
  INFO((g ? std::string() : g.error().str()));
  REQUIRE(g);
  auto p = kevo::lower::lower(s, *g);
  REQUIRE_FALSE(p);
  CHECK(p.error().code == "unsupported");
  CHECK(p.error().message.find("epilogue") != std::string::npos);
}

TEST_CASE("outputs far below unit magnitude are checked at their own scale", "[verify][check]") {
  // A bf16 softmax's outputs are ~1/C. The absolute tolerance was bf16's ulp at 1 (2.3e-2), so an
  // output of all zeros, or every value 10% off, verified.
  auto k = kevo::ir::workload("softmax:R=32,C=1024,dtype=bf16");
  REQUIRE(k);
  const auto inputs = kevo::ir::random_inputs(*k, 7);
  const auto ref = kevo::verify::reference_with_allowance(*k, inputs);
  const int y = static_cast<int>(k->tensor("Y") - k->tensors.data());
  const auto& want = ref.values[static_cast<std::size_t>(y)];
  const auto tol = kevo::verify::tolerance_for(kevo::verify::rounding_dtypes(*k)[static_cast<std::size_t>(y)],
                                               kevo::verify::reduction_depths(*k)[static_cast<std::size_t>(y)], want);
  const auto& allow = ref.error[static_cast<std::size_t>(y)];
  const auto scaled = [&](float f) {
    std::vector<float> v(want);
    for (auto& x : v) x *= f;
    return v;
  };
  CHECK_FALSE(compare(*k, y, std::vector<float>(want.size(), 0.0f), want, tol, allow).ok);
  CHECK_FALSE(compare(*k, y, scaled(0.9f), want, tol, allow).ok);
  CHECK_FALSE(compare(*k, y, scaled(1.1f), want, tol, allow).ok);
  CHECK(compare(*k, y, scaled(1.004f), want, tol, allow).ok);  // half a bf16 ulp: storage rounding
  // and the lowered program itself verifies at that scale
  const auto r = check_default_schedule(*k);
  INFO(r.message);
  CHECK(r.ok);
}

TEST_CASE("fp8 outputs are checked within their own roundings (1.3x off fails) and lowered programs pass", "[verify][check]") {
  // The rounding term was 3 fp8 ulps (37.5%) relative plus 37.5% of the rms: outputs 1.55-1.85x
  // the reference verified for every workload. fp8 keeps no partial sums (acc dtype=out is 2-byte
  // only), so the term is bf16's; the roundings both sides make are each element's allowance.
  const auto t = kevo::target::load_target("trn2").value();
  for (const char* spec : {"matmul:M=256,N=512,K=1024,dtype=fp8_e4m3", "softmax:R=128,C=1024,dtype=fp8_e4m3",
                           "layernorm:R=128,C=512,dtype=fp8_e4m3", "swiglu:M=128,D=256,F=512,dtype=fp8_e4m3",
                           "colsum:R=2048,C=256,dtype=fp8_e4m3"}) {
    INFO(spec);
    auto k = kevo::ir::workload(spec);
    REQUIRE(k);
    const auto inputs = kevo::ir::random_inputs(*k, 7);
    const auto ref = kevo::verify::reference_with_allowance(*k, inputs);
    const auto depths = kevo::verify::reduction_depths(*k);
    const auto rounding = kevo::verify::rounding_dtypes(*k);
    for (std::size_t o = 0; o < k->tensors.size(); ++o) {
      if (k->tensors[o].role != kevo::ir::Role::output) continue;
      const auto& want = ref.values[o];
      const auto tol = kevo::verify::tolerance_for(rounding[o], depths[o], want);
      const auto scaled = [&](float f) {
        std::vector<float> v(want);
        for (auto& x : v) x *= f;
        return compare(*k, static_cast<int>(o), v, want, tol, ref.error[o]).ok;
      };
      CHECK_FALSE(scaled(1.3f));
      CHECK_FALSE(scaled(0.75f));
      CHECK(scaled(1.02f));  // a third of fp8's unit roundoff: a rounding, not an error
    }
    // legit programs: the default and random valid genomes verify
    const auto space = kevo::schedule::ScheduleSpace::derive(*k, t);
    kevo::Rng rng(5);
    int checked = 0;
    for (int i = 0; i < 40 && checked < 10; ++i) {
      kevo::Genome g = i == 0 ? space.default_genome() : space.genes().random(rng);
      space.repair(g, rng);
      auto p = kevo::lower::lower(space, g);
      if (!p) continue;
      ++checked;
      const auto r = check_program(*k, *p, 100 + static_cast<std::uint64_t>(i));
      INFO(space.print(g) << "\n" << r.message);
      CHECK(r.ok);
    }
    CHECK(checked >= 5);
  }
}

TEST_CASE("a chain of 3 matmuls through fp8 temps verifies under random genomes; one wrong matmul in it does not",
          "[verify][check]") {
  // fp8's rounding term is bf16's (above): the temps' fp8 roundings are in the allowance
  const int n = 3;
  std::string text = "kernel chain(X: fp8_e4m3[M=256, K=256], ";
  for (int i = 0; i < n; ++i) text += "W" + std::to_string(i) + ": fp8_e4m3[K, K]" + (i < n - 1 ? ", " : ") -> (Y: fp8_e4m3[M, K]) {\n");
  std::string prev = "X";
  for (int i = 0; i < n - 1; ++i) {
    text += "  a" + std::to_string(i) + "[m, n] = sum(k) " + prev + "[m, k] * W" + std::to_string(i) + "[k, n]\n";
    text += "  h" + std::to_string(i) + "[m, n] = cast<fp8_e4m3>(a" + std::to_string(i) + "[m, n])\n";
    prev = "h" + std::to_string(i);
  }
  text += "  Y[m, n] = sum(k) " + prev + "[m, k] * W" + std::to_string(n - 1) + "[k, n]\n}\n";
  auto k = kevo::ir::parse_kernel(text);
  REQUIRE(k);
  auto wrong = *k;
  for (auto& op : wrong.ops)
    if (op.out == "a1") std::swap(op.expr.args[1].indices[0], op.expr.args[1].indices[1]);
  auto wk = kevo::ir::validate(wrong);
  REQUIRE(wk);
  const auto t = kevo::target::load_target("trn2").value();
  const auto s = kevo::schedule::ScheduleSpace::derive(*k, t);
  kevo::Rng rng(3);
  int checked = 0;
  for (int i = 0; i < 6; ++i) {
    kevo::Genome g = i == 0 ? s.default_genome() : s.genes().random(rng);
    s.repair(g, rng);
    auto p = kevo::lower::lower(s, g);
    if (!p) continue;
    ++checked;
    const auto ok = check_program(*k, *p, 0x5eed + static_cast<std::uint64_t>(i), 2);
    INFO(s.print(g) << "\n" << ok.message);
    CHECK(ok.ok);
    CHECK_FALSE(check_program(*wk, *p, 0x5eed + static_cast<std::uint64_t>(i), 1).ok);
  }
  CHECK(checked >= 3);
}

// NeuronCore-v2's activation(op=nl.reciprocal) takes no bias (aws-neuron-sdk nki.api.shared):
// `1 / (x + k)` and `1 / (x + b[r])` fold their bias into the reciprocal on trn2, not on trn1,
// where the sum is its own instruction; both programs agree with the reference, and the trn2 one
// is refused by trn1's program check.
TEST_CASE("a reciprocal's bias joins its activation only where the engine takes one", "[verify][check]") {
  const auto k = kevo::ir::parse_kernel(
      "kernel rb(x: fp32[R=256, C=512], b: fp32[R]) -> (y: fp32[R, C], z: fp32[R, C]) {\n"
      "  y[r, c] = reciprocal(x[r, c] + 2)\n"
      "  z[r, c] = reciprocal(x[r, c] - b[r])\n"
      "}\n");
  REQUIRE(k);
  const auto t1 = kevo::target::load_target("trn1").value(), t2 = kevo::target::load_target("trn2").value();
  CHECK(t2.engine(kevo::target::Engine::scalar).reciprocal_bias);
  CHECK_FALSE(t1.engine(kevo::target::Engine::scalar).reciprocal_bias);
  struct Seen {
    int with_bias = 0, without = 0;
  };
  const auto lowered = [&](const kevo::target::Target& t) {
    const auto sp = kevo::schedule::ScheduleSpace::derive(*k, t);
    auto p = kevo::lower::lower(sp, sp.default_genome());
    REQUIRE(p);
    REQUIRE(kevo::lower::check_program(*p, t));
    const auto r = check_program(*k, *p, 5);
    INFO(t.name << ": " << r.message);
    CHECK(r.ok);
    return *p;
  };
  const auto seen = [](const kevo::lower::TileProgram& p) {
    Seen s;
    for (const auto& in : p.instrs)
      if (in.op == Opcode::activation && in.fn == kevo::ir::Fn::reciprocal) ++((in.nsrc >= 2 || in.imm0 != 0) ? s.with_bias : s.without);
    return s;
  };
  const auto p2 = lowered(t2), p1 = lowered(t1);
  CHECK(seen(p2).with_bias == 4);  // two row tiles of each output
  CHECK(seen(p2).without == 0);
  CHECK(seen(p1).with_bias == 0);
  CHECK(seen(p1).without == 4);
  const auto refused = kevo::lower::check_program(p2, t1);
  REQUIRE_FALSE(refused);
  CHECK_THAT(refused.error().message, Catch::Contains("a reciprocal activation with a bias, which trn1's scalar engine does not take"));
}

// The two fp8s differ past 240: a kernel whose outputs reach 300 stores inf in trn2's IEEE-style
// fp8_e4m3 and 288 in trn3's OCP fp8_e4m3fn; the reference rounds as the program does in each.
TEST_CASE("fp8_e4m3 outputs past 240 overflow, fp8_e4m3fn ones saturate at 448", "[verify][check]") {
  for (const char* dt : {"fp8_e4m3", "fp8_e4m3fn"}) {
    const auto k = kevo::ir::parse_kernel(fmt::format("kernel big(x: fp32[R=128, C=64]) -> (y: {}[R, C]) {{\n"
                                                      "  y[r, c] = x[r, c] * 0 + 300\n}}\n", dt));
    REQUIRE(k);
    const auto t = kevo::target::load_target(std::string(dt) == "fp8_e4m3" ? "trn2" : "trn3").value();
    const auto sp = kevo::schedule::ScheduleSpace::derive(*k, t);
    const auto p = kevo::lower::lower(sp, sp.default_genome());
    REQUIRE(p);
    const auto inputs = kevo::ir::random_inputs(*k, 1);
    const auto ref = kevo::ir::evaluate(*k, inputs);
    const float want = std::string(dt) == "fp8_e4m3" ? std::numeric_limits<float>::infinity() : 288.0f;
    REQUIRE(k->tensors[1].name == "y");
    for (const float v : ref[1]) REQUIRE(v == want);
    const auto r = check_program(*k, *p, 2);
    INFO(dt << ": " << r.message);
    CHECK(r.ok);
  }
}

// nki.isa.tensor_scalar: "The Scalar Engine on trn2 only supports some operator combinations"
// (multiply then add, multiply, add), the GpSimd engine only rsqrt, and "the operand0 and operand1
// (if used) must be float32"; nki.isa.activation: "In NeuronCore-v2, the bias must be a [N, 1]
// vector". kevo emitted `x - b[r]` as a subtract on the Scalar engine with a bf16 operand, and
// `exp(x + 1)` with a constant bias on trn1.
TEST_CASE("tensor_scalar runs the operators its engine runs on fp32 operands; NC-v2 takes no constant bias", "[verify][check]") {
  const auto k = kevo::ir::parse_kernel(
      "kernel ts(x: fp32[R=256, C=512], b: bf16[R]) -> (y: fp32[R, C], z: fp32[R, C], w: fp32[R, C], v: fp32[R, C], "
      "u: fp32[R, C], m: fp32[R, C], t: fp32[R]) {\n"
      "  y[r, c] = x[r, c] - b[r]\n"
      "  m[r, c] = max(x[r, c], b[r])\n"
      "  t[r] = sum(c) x[r, c]\n"
      "  z[r, c] = x[r, c] - 3\n"
      "  w[r, c] = 3 - x[r, c]\n"
      "  v[r, c] = x[r, c] * 2\n"
      "  u[r, c] = exp(x[r, c] + 1)\n"
      "}\n");
  REQUIRE(k);
  using kevo::target::Engine;
  const auto t1 = kevo::target::load_target("trn1").value(), t2 = kevo::target::load_target("trn2").value();
  // NC-v2's Scalar engine runs no add or multiply ("Add and Multiply are supported on Scalar Engine
  // only from NeuronCore-v3"), NC-v3's these two alone
  CHECK(t1.engine(Engine::scalar).tensor_scalar_ops == kevo::target::EngineSpec::TensorScalarOps::unary);
  CHECK(t2.engine(Engine::scalar).tensor_scalar_ops == kevo::target::EngineSpec::TensorScalarOps::mul_add);
  for (const auto* t : {&t1, &t2}) {
    CHECK(t->engine(Engine::gpsimd).tensor_scalar_ops == kevo::target::EngineSpec::TensorScalarOps::rsqrt);
    CHECK(t->engine(Engine::vector).tensor_scalar_ops == kevo::target::EngineSpec::TensorScalarOps::all);
  }
  CHECK_FALSE(t1.engine(Engine::scalar).immediate_bias);
  CHECK(t2.engine(Engine::scalar).immediate_bias);
  // one program per target and engine gene value, each checked and verified against the reference
  const auto lowered = [&](const kevo::target::Target& t, const std::string& engine) {
    const auto sp = kevo::schedule::ScheduleSpace::derive(*k, t);
    const auto g = sp.parse(fmt::format("engine y={0} z={0} w={0} v={0} u={0} m={0} t={0}", engine));
    REQUIRE(g);
    auto p = kevo::lower::lower(sp, *g);
    REQUIRE(p);
    const auto legal = kevo::lower::check_program(*p, t);
    INFO(t.name << ", " << engine << ": " << (legal ? std::string() : legal.error().message));
    REQUIRE(legal);
    const auto r = check_program(*k, *p, 11);
    INFO(r.message);
    CHECK(r.ok);
    return *p;
  };
  // per output (the nest's name): the tensor_scalars' engine, operators and immediates
  struct Ts {
    Engine engine;
    kevo::ir::Fn fn;
    bool has_op1;
    kevo::ir::Fn fn1;
    double imm0;
  };
  const auto scalars = [](const kevo::lower::TileProgram& p, int group) {
    std::vector<Ts> out;
    for (const auto& in : p.instrs)
      if (in.op == Opcode::tensor_scalar && in.group == group) out.push_back({in.at.engine, in.fn, in.has_op1, in.fn1, in.imm0});
    return out;
  };
  const auto group = [](const kevo::lower::TileProgram& p, const std::string& name) {
    for (std::size_t i = 0; i < p.group_names.size(); ++i)
      if (p.group_names[i] == name) return static_cast<int>(i);
    FAIL("no nest " << name);
    return -1;
  };
  using kevo::ir::Fn;
  for (const auto* t : {&t2, &t1}) {
    INFO(t->name);
    const auto p = lowered(*t, "scalar");
    // the engine of the tensor_scalars the schedule gives the Scalar engine: on trn1 the Vector's
    const Engine ts = t == &t2 ? Engine::scalar : Engine::vector;
    // x - b[r]: -b[r] by a multiply (on trn2 the Scalar engine's, which runs it), added as the
    // bias of the Scalar engine's identity activation
    for (const auto& s : scalars(p, group(p, "y"))) {
      CHECK(s.engine == ts);
      CHECK(s.fn == Fn::mul);
      CHECK(s.imm0 == -1.0);
    }
    int biased_copies = 0;
    for (const auto& in : p.instrs)
      if (in.group == group(p, "y") && in.op == Opcode::activation && in.fn == Fn::cast && in.nsrc == 2) ++biased_copies;
    CHECK(biased_copies == 2);
    // max(x, b[r]) has no Scalar-engine form: the Vector engine's
    for (const auto& s : scalars(p, group(p, "m"))) {
      CHECK(s.engine == Engine::vector);
      CHECK(s.fn == Fn::max);
    }
    CHECK(scalars(p, group(p, "m")).size() == 2);
    // x - 3 is x + -3, and 3 - x is x * -1 + 3, on trn2's Scalar engine as the schedule says; on
    // trn1 both stay subtractions, on the Vector engine
    for (const auto& s : scalars(p, group(p, "z"))) {
      CHECK(s.engine == ts);
      CHECK(s.fn == (t == &t2 ? Fn::add : Fn::sub));
      CHECK_FALSE(s.has_op1);
      CHECK(s.imm0 == (t == &t2 ? -3.0 : 3.0));
    }
    for (const auto& s : scalars(p, group(p, "w"))) {
      CHECK(s.engine == ts);
      if (t == &t2) {
        CHECK(s.fn == Fn::mul);
        CHECK(s.imm0 == -1.0);
        CHECK(s.has_op1);
        CHECK(s.fn1 == Fn::add);
      } else {
        CHECK(s.fn == Fn::sub);
        CHECK(s.imm0 == 3.0);
      }
    }
    for (const auto& s : scalars(p, group(p, "v"))) CHECK(s.engine == ts);
    CHECK(scalars(p, group(p, "y")).size() == 2);  // two row tiles each
    CHECK(scalars(p, group(p, "z")).size() == 2);
    CHECK(scalars(p, group(p, "w")).size() == 2);
    // b[r]'s column is loaded as fp32 (the DMA converts): the subtract's operand
    for (const auto& in : p.instrs)
      if (in.op == Opcode::tensor_scalar)
        for (int s = 1; s < in.nsrc; ++s) CHECK(p.buffers[static_cast<std::size_t>(in.src[static_cast<std::size_t>(s)].buffer)].dtype == kevo::ir::DType::fp32);
    // exp(x + 1): the constant joins the activation as its bias on trn2; on trn1 the sum is a
    // tensor_scalar of its own and the activation has no bias
    int biased = 0, plain = 0;
    for (const auto& in : p.instrs)
      if (in.op == Opcode::activation && in.fn == Fn::exp) ++(in.imm0 != 0 || in.nsrc >= 2 ? biased : plain);
    CHECK(biased == (t == &t2 ? 2 : 0));
    CHECK(plain == (t == &t2 ? 0 : 2));
    CHECK(scalars(p, group(p, "u")).size() == (t == &t2 ? 0u : 2u));
  }
  // GpSimd runs no tensor_scalar kevo emits, and tensor_reduce is the Vector engine's alone
  // ("using Vector Engine", nki.isa.tensor_reduce): both move to the Vector engine
  int reduces = 0;
  for (const auto& in : lowered(t2, "gpsimd").instrs) {
    if (in.op == Opcode::tensor_scalar) CHECK(in.at.engine == Engine::vector);
    if (in.op == Opcode::tensor_reduce) {
      ++reduces;
      CHECK(in.at.engine == Engine::vector);
    }
  }
  CHECK(reduces >= 2);

  // the program check refuses each fault, located
  auto p = lowered(t2, "scalar");
  {
    auto bad = p;
    for (auto& in : bad.instrs)
      if (in.op == Opcode::tensor_scalar && in.fn == Fn::max) in.at.engine = Engine::scalar;
    const auto r = kevo::lower::check_program(bad, t2);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains("max on trn2's scalar engine, which does not run that tensor_scalar"));
  }
  {
    auto bad = p;  // b[r]'s column as it was loaded before: bf16
    for (const auto& in : p.instrs)
      if (in.op == Opcode::tensor_scalar && in.nsrc >= 2) bad.buffers[static_cast<std::size_t>(in.src[1].buffer)].dtype = kevo::ir::DType::bf16;
    const auto r = kevo::lower::check_program(bad, t2);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains("is bf16; a tensor_scalar's operands must be fp32"));
  }
  {
    auto bad = p;
    for (auto& in : bad.instrs)
      if (in.op == Opcode::tensor_reduce) in.at.engine = Engine::gpsimd;
    const auto r = kevo::lower::check_program(bad, t2);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains("(tensor_reduce) runs only on the Vector engine"));
  }
  // trn2's program on trn1: its Scalar-engine multiplies first, then (with those on the Vector
  // engine) exp(x + 1)'s constant bias
  const auto r0 = kevo::lower::check_program(p, t1);
  REQUIRE_FALSE(r0);
  CHECK_THAT(r0.error().message, Catch::Contains("on trn1's scalar engine, which does not run that tensor_scalar"));
  auto moved = p;
  for (auto& in : moved.instrs)
    if (in.op == Opcode::tensor_scalar && in.at.engine == Engine::scalar) in.at.engine = Engine::vector;
  const auto r = kevo::lower::check_program(moved, t1);
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("an activation with the constant bias 1, which trn1's scalar engine does not take"));
}

// nki.isa.nc_matmul: "if one of the input tiles is tfloat32/float32, the other tile must also be
// tfloat32/float32"; nki.isa.activation's functions (nki.api.shared, "Supported Activation
// Functions") do not include nl.negative. kevo multiplied an fp32 A by a bf16 B as loaded, and
// lowered -exp(x) as activation(op=nl.negative).
TEST_CASE("an fp32 operand makes the other fp32 on chip; a negation is a scaled identity activation", "[verify][check]") {
  const auto k = kevo::ir::parse_kernel(
      "kernel mixed(A: fp32[M=256, K=256], B: bf16[N=512, K], X: bf16[R=256, C=512]) -> (C: fp32[M, N], Y: bf16[R, C]) {\n"
      "  C[m, n] = sum(k) A[m, k] * B[n, k]\n"
      "  Y[r, c] = -exp(X[r, c])\n"
      "}\n");
  REQUIRE(k);
  for (const char* name : {"trn1", "trn2"}) {
    INFO(name);
    const auto t = kevo::target::load_target(name).value();
    const auto sp = kevo::schedule::ScheduleSpace::derive(*k, t);
    const int lowered = for_lowered(sp, t, 17, 40, [&](const kevo::lower::TileProgram& p) {
      for (const auto& in : p.instrs) {
        if (in.op == Opcode::nc_matmul) {
          CHECK(p.buffers[static_cast<std::size_t>(in.src[0].buffer)].dtype == kevo::ir::DType::fp32);
          CHECK(p.buffers[static_cast<std::size_t>(in.src[1].buffer)].dtype == kevo::ir::DType::fp32);
        }
        if (in.op == Opcode::activation) CHECK(in.fn != kevo::ir::Fn::neg);
      }
      const auto r = check_program(*k, p, 23);
      INFO(r.message);
      CHECK(r.ok);
    });
    // a bf16 operand that must be fp32 on chip cannot be DMA-transposed: a typed reason
    {
      const auto dt = sp.parse("transpose B=dma_transpose_block");
      REQUIRE(dt);
      const auto refused = kevo::lower::lower(sp, *dt);
      REQUIRE_FALSE(refused);
      CHECK(refused.error().code == "unsupported");
      CHECK_THAT(refused.error().message, Catch::Contains("dma_transpose keeps its input's dtype"));
    }
    CHECK(lowered >= 10);
    // the rules themselves: a matmul of fp32 by bf16, and an activation of nl.negative, are refused
    auto p = kevo::lower::lower(sp, sp.default_genome());
    REQUIRE(p);
    auto bad = *p;
    bool mm = false;
    for (auto& in : bad.instrs)
      if (in.op == Opcode::nc_matmul && !mm) {
        bad.buffers[static_cast<std::size_t>(in.src[1].buffer)].dtype = kevo::ir::DType::bf16;
        mm = true;
      }
    REQUIRE(mm);
    const auto refused = kevo::lower::check_program(bad, t);
    REQUIRE_FALSE(refused);
    CHECK_THAT(refused.error().message, Catch::Contains("multiplies fp32 by bf16: an fp32 operand needs an fp32 other one"));
    auto neg = *p;
    bool act = false;
    for (auto& in : neg.instrs)
      if (in.op == Opcode::activation && in.fn == kevo::ir::Fn::cast && in.scale == -1.0 && !act) {
        in.fn = kevo::ir::Fn::neg;
        in.scale = 1.0;
        act = true;
      }
    REQUIRE(act);
    const auto refused2 = kevo::lower::check_program(neg, t);
    REQUIRE_FALSE(refused2);
    CHECK_THAT(refused2.error().message, Catch::Contains("neg is not an activation function"));
  }
  // the flash nest too: fp32 Q and V against a bf16 K and the exp's P
  const auto att = kevo::ir::parse_kernel(
      "kernel att(Q: fp32[S=256, D=64], K: bf16[S, D], V: fp32[S, D]) -> (O: bf16[S, D]) {\n"
      "  s[i, j] = sum(d) Q[i, d] * K[j, d]\n"
      "  mx[i] = max(j) s[i, j]\n"
      "  e[i, j] = exp(s[i, j] - mx[i])\n"
      "  l[i] = sum(j) e[i, j]\n"
      "  pb[i, j] = cast<bf16>(e[i, j])\n"
      "  o[i, d] = sum(j) pb[i, j] * V[j, d]\n"
      "  O[i, d] = o[i, d] / l[i]\n"
      "}\n");
  REQUIRE(att);
  const auto t = kevo::target::load_target("trn2").value();
  const auto sp = kevo::schedule::ScheduleSpace::derive(*att, t);
  kevo::Rng rng(5);
  int flashes = 0;
  for (int i = 0; i < 30; ++i) {
    kevo::Genome g = sp.parse("flash o=yes").value();
    if (i > 0) {
      g = sp.genes().random(rng);
      sp.repair(g, rng);
    }
    auto p = kevo::lower::lower(sp, g);
    if (!p) continue;
    const auto legal = kevo::lower::check_program(*p, t);
    INFO(sp.print(g) << "\n" << (legal ? std::string() : legal.error().message));
    REQUIRE(legal);
    int mms = 0;
    for (const auto& in : p->instrs)
      if (in.op == Opcode::nc_matmul) {
        ++mms;
        CHECK(p->buffers[static_cast<std::size_t>(in.src[0].buffer)].dtype == kevo::ir::DType::fp32);
        CHECK(p->buffers[static_cast<std::size_t>(in.src[1].buffer)].dtype == kevo::ir::DType::fp32);
      }
    CHECK(mms > 0);
    flashes += sp.print(g).find("flash o=yes") != std::string::npos;
    const auto r = check_program(*att, *p, 29);
    INFO(r.message);
    CHECK(r.ok);
  }
  CHECK(flashes >= 1);
}

// nki.isa.tensor_copy_predicated: "src and dst must share the same data type". A bf16 output's
// select of an fp32 branch (exp(x)) copied the fp32 tile into the bf16 one under the predicate in
// the tile program (the emitter added a conversion of its own, which no figure included).
TEST_CASE("a select's taken branch is converted to the select's dtype before the predicated copy", "[verify][check]") {
  const auto k = kevo::ir::parse_kernel(
      "kernel sel(X: bf16[R=256, C=512], b: fp32[R]) -> (Y: bf16[R, C], Z: fp32[R, C]) {\n"
      "  Y[r, c] = select(X[r, c] > 0, exp(X[r, c]), X[r, c] * 2)\n"
      "  Z[r, c] = select(X[r, c] > b[r], X[r, c], 0)\n"
      "}\n");
  REQUIRE(k);
  for (const char* name : {"trn1", "trn2"}) {
    INFO(name);
    const auto t = kevo::target::load_target(name).value();
    const auto sp = kevo::schedule::ScheduleSpace::derive(*k, t);
    int converted = 0;
    const int lowered = for_lowered(sp, t, 31, 30, [&](const kevo::lower::TileProgram& p) {
      for (const auto& in : p.instrs)
        if (in.op == Opcode::tensor_copy_predicated && in.nsrc == 2) {
          CHECK(p.buffers[static_cast<std::size_t>(in.src[1].buffer)].dtype == p.buffers[static_cast<std::size_t>(in.dst.buffer)].dtype);
          converted += p.buffers[static_cast<std::size_t>(in.src[1].buffer)].name.find("_conv") != std::string::npos;
        }
      const auto r = check_program(*k, p, 37);
      INFO(r.message);
      CHECK(r.ok);
    });
    CHECK(lowered >= 10);
    CHECK(converted > 0);
  }
}

// nki.isa.tensor_reduce overwrites its destination: a row sum over four 128-column steps is one
// reduce into the accumulator, then three reduces into the partial tile, each added by a
// tensor_tensor, in the program itself (simulated and verified as emitted).
TEST_CASE("a reduction over several free-index steps adds each later step's partial by a tensor_tensor", "[verify][check]") {
  const auto k = kevo::ir::parse_kernel("kernel rm(X: fp32[R=256, C=512]) -> (M: fp32[R], S: fp32[R]) {\n"
                                        "  M[r] = mean(c) X[r, c]\n  S[r] = max(c) X[r, c]\n}\n");
  REQUIRE(k);
  const auto t = kevo::target::load_target("trn2").value();
  const auto sp = kevo::schedule::ScheduleSpace::derive(*k, t);
  auto g = sp.parse("nest M: layout p=r f=c; tile r=128 c=128\nnest S: layout p=r f=c; tile r=128 c=128");
  REQUIRE(g);
  auto p = kevo::lower::lower(sp, *g);
  REQUIRE(p);
  REQUIRE(kevo::lower::check_program(*p, t));
  int reduces = 0, adds = 0, maxes = 0;
  for (const auto& in : p->instrs) {
    if (in.op == Opcode::tensor_reduce) {
      ++reduces;
      CHECK_FALSE(in.accumulate);
    }
    if (in.op == Opcode::tensor_tensor) ++(in.fn == kevo::ir::Fn::add ? adds : maxes);
  }
  CHECK(reduces == 2 * 2 * 4);  // two ops, two row tiles, four column steps
  CHECK(adds == 2 * 3);
  CHECK(maxes == 2 * 3);
  const auto r = check_program(*k, *p, 41);
  INFO(r.message);
  CHECK(r.ok);
}
