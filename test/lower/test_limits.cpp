#include <catch2/catch.hpp>

#include "kevo/ir/workloads.hpp"
#include "kevo/lower/lower.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/target/target.hpp"

using namespace kevo;

TEST_CASE("a schedule that unrolls into too many instructions is invalid with reason too_large", "[lower]") {
  auto k = ir::workload("matmul:M=4096,N=4096,K=4096,dtype=bf16,layout=tn");
  REQUIRE(k);
  auto t = target::load_target("trn2");
  REQUIRE(t);
  const auto sp = schedule::ScheduleSpace::derive(*k, *t);
  auto g = sp.parse("tile m=32 n=32 k=32; load A@k x2; load B@k x2");
  REQUIRE(g);
  const auto p = lower::lower(sp, *g);
  REQUIRE_FALSE(p);
  CHECK(p.error().code == "too_large");
  CHECK_THAT(p.error().message, Catch::Contains("instructions"));
}

TEST_CASE("a program is counted before it is built when it may outgrow the limit, and the count decides alike", "[lower]") {
  auto k = ir::workload("matmul:M=4096,N=8192,K=8192,dtype=bf16");
  REQUIRE(k);
  auto t = target::load_target("trn2");
  REQUIRE(t);
  const auto sp = schedule::ScheduleSpace::derive(*k, *t);
  // 262,144 matmuls (under the limit by themselves) with a transfer per operand per matmul: the
  // counting pass finds about 790k instructions and rejects it
  auto big = sp.parse("tile m=64 n=128 k=128; block m=1 n=1 k=1; load A@k x2 dma=tile; load B@k x2 dma=tile");
  REQUIRE(big);
  const auto p = lower::lower(sp, *big);
  REQUIRE_FALSE(p);
  CHECK(p.error().code == "too_large");
  CHECK_THAT(p.error().message, Catch::Contains("400000 instructions"));
  // 131,072 matmuls with operands loaded once per block: counted, within the limit, then built
  auto fits = sp.parse("tile m=128 n=128 k=128; block m=4 n=4 k=8; load A@k.b x2 dma=row; load B@k.b x2 dma=row; acc sbuf x1");
  REQUIRE(fits);
  const auto q = lower::lower(sp, *fits);
  INFO((q ? std::string() : q.error().str()));
  REQUIRE(q);
  CHECK(q->instrs.size() > 131072);
  CHECK(q->instrs.size() < 400000);
  CHECK(q->stats.matmul_flops == 2LL * 4096 * 8192 * 8192);
}

TEST_CASE("count_instructions agrees with the lowered program's size", "[lower]") {
  for (const char* w : {"matmul:M=256,N=512,K=256,dtype=bf16", "softmax:R=256,C=512", "attention:B=1,H=1,S=128,D=64,causal=1",
                        "swiglu:M=64,D=128,F=256"}) {
    auto k = ir::workload(w);
    REQUIRE(k);
    const auto sp = schedule::ScheduleSpace::derive(*k, *target::load_target("trn2"));
    for (std::uint64_t i = 0; i < 20; ++i) {
      Rng rng(13, i);
      auto g = sp.genes().random(rng);
      (void)sp.repair(g, rng);
      const auto n = lower::count_instructions(sp, g);
      const auto p = lower::lower(sp, g);
      INFO(w << "\n" << sp.print(g));
      if (!n) CHECK_FALSE(p);  // a plan rejection rejects both alike
      if (p) {
        REQUIRE(n);
        CHECK(*n == p->instrs.size());
      }
    }
  }
}

TEST_CASE("a tensor beyond 2^31 elements is too_large, not a silently truncated stride", "[lower]") {
  // C is 65536 x 65536 = 2^32 elements: its row strides fit, but regions spanning it would not.
  auto k = ir::workload("matmul:M=65536,N=65536,K=128,dtype=bf16");
  REQUIRE(k);
  auto t = target::load_target("trn2");
  REQUIRE(t);
  const auto sp = schedule::ScheduleSpace::derive(*k, *t);
  const auto p = lower::lower(sp, sp.default_genome());
  REQUIRE_FALSE(p);
  CHECK(p.error().code == "too_large");
  CHECK_THAT(p.error().message, Catch::Contains("2^31-1"));
  // The search's instruction count says so too (it threw through `kevo search`, which aborted),
  // and no genome of the space is valid: the plan rejects the kernel before any buffer exists.
  const auto c = lower::count_instructions(sp, sp.default_genome());
  REQUIRE_FALSE(c);
  CHECK(c.error().code == "too_large");
  CHECK(sp.sampled_validity(50, 1) == 0.0);
  // just below the bound lowers
  auto k2 = ir::workload("matmul:M=32768,N=65535,K=128,dtype=bf16");
  REQUIRE(k2);
  const auto sp2 = schedule::ScheduleSpace::derive(*k2, *t);
  const auto n = lower::count_instructions(sp2, sp2.default_genome());
  CHECK(n);
}
