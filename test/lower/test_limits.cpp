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
