// The online-softmax pattern (a row max, exp of the row less it, its row sum and maps after them)
// is found structurally, offers its genes, plans within SBUF, and its text form round-trips with
// located errors.
#include <catch2/catch.hpp>

#include "kevo/ir/builder.hpp"
#include "kevo/ir/workloads.hpp"
#include "kevo/schedule.hpp"
#include "kevo/schedule/detail/plan.hpp"
#include "kevo/target.hpp"

using namespace kevo;
using schedule::ScheduleSpace;

namespace {
ScheduleSpace online_space(const std::string& spec, const char* target = "trn2") {
  auto k = ir::workload(spec);
  INFO(spec);
  REQUIRE(k);
  return ScheduleSpace::derive(*k, target::load_target(target).value());
}
int online_genes(const ScheduleSpace& s) {
  int n = 0;
  for (std::size_t i = 0; i < s.genes().size(); ++i) n += s.genes().gene(i).name.starts_with("online.");
  return n;
}
std::string parse_error(const ScheduleSpace& s, const std::string& t) {
  auto e = s.parse(t, "x.schedule");
  REQUIRE_FALSE(e);
  return e.error().str();
}
}  // namespace

TEST_CASE("softmax offers an online nest; norms, attention and kernels without the pattern do not", "[schedule][online]") {
  const auto s = online_space("softmax:R=512,C=32000,dtype=fp32");
  REQUIRE(s.impl().onlines.size() == 1);
  const auto& o = s.impl().onlines[0];
  CHECK(o.name == "Y");
  CHECK(o.row == "r");
  CHECK(o.j == "c");
  CHECK(o.ext_j == 32000);
  CHECK(online_genes(s) == 6);
  // off by default: the default schedule is the row nests it was
  const auto d = s.default_genome();
  CHECK(s.print(d).find("online Y=no r=128 c=2048 bufs=2 queues=2\n") != std::string::npos);
  for (const char* spec : {"layernorm:R=64,C=64", "rmsnorm:R=64,C=64", "matmul:M=64,N=64,K=64",
                           "attention:B=1,H=1,S=128,D=64,causal=1"}) {
    INFO(spec);
    CHECK(online_genes(online_space(spec)) == 0);
  }
  // a max over a non-contiguous index, or an exp of something else, is not the pattern
  using namespace ir;
  const auto t2 = target::load_target("trn2").value();
  {
    KernelBuilder b("colmax");
    b.dim("R", 64).dim("C", 64);
    b.input("X", DType::fp32, {"R", "C"}).output("Y", DType::fp32, {"R", "C"});
    b.reduce(ReduceOp::max, "m", {"c"}, {"r"}, access("X", {"r", "c"}));
    b.map("e", {"r", "c"}, unary(Fn::exp, access("X", {"r", "c"}) - access("m", {"c"})));
    b.reduce(ReduceOp::sum, "s", {"c"}, {"r"}, access("e", {"r", "c"}));
    b.map("Y", {"r", "c"}, access("e", {"r", "c"}) / access("s", {"c"}));
    CHECK(ScheduleSpace::derive(b.build_or_throw(), t2).impl().onlines.empty());
  }
  {
    KernelBuilder b("scaled");
    b.dim("R", 64).dim("C", 64);
    b.input("X", DType::fp32, {"R", "C"}).output("Y", DType::fp32, {"R", "C"});
    b.reduce(ReduceOp::max, "m", {"r"}, {"c"}, access("X", {"r", "c"}));
    b.map("e", {"r", "c"}, unary(Fn::exp, (access("X", {"r", "c"}) - access("m", {"r"})) * 0.5));
    b.reduce(ReduceOp::sum, "s", {"r"}, {"c"}, access("e", {"r", "c"}));
    b.map("Y", {"r", "c"}, access("e", {"r", "c"}) / access("s", {"r"}));
    CHECK(ScheduleSpace::derive(b.build_or_throw(), t2).impl().onlines.empty());
  }
  {
    // e itself an output: the nest would have to store it from both passes
    KernelBuilder b("e_out");
    b.dim("R", 64).dim("C", 64);
    b.input("X", DType::fp32, {"R", "C"}).output("Y", DType::fp32, {"R", "C"}).output("e", DType::fp32, {"R", "C"});
    b.reduce(ReduceOp::max, "m", {"r"}, {"c"}, access("X", {"r", "c"}));
    b.map("e", {"r", "c"}, unary(Fn::exp, access("X", {"r", "c"}) - access("m", {"r"})));
    b.reduce(ReduceOp::sum, "s", {"r"}, {"c"}, access("e", {"r", "c"}));
    b.map("Y", {"r", "c"}, access("e", {"r", "c"}) / access("s", {"r"}));
    CHECK(ScheduleSpace::derive(b.build_or_throw(), t2).impl().onlines.empty());
  }
}

TEST_CASE("online statements print and parse back; bad values are located errors", "[schedule][online]") {
  const auto s = online_space("softmax:R=512,C=32000,dtype=fp32");
  auto g = s.parse("online Y=yes r=64 c=4096 bufs=3 queues=4 issue=list");
  REQUIRE(g);
  const auto text = s.print(*g);
  CHECK(text.find("online Y=yes r=64 c=4096 bufs=3 queues=4 issue=list\n") != std::string::npos);
  CHECK(*s.parse(text) == *g);
  auto plan = schedule::make_plan(s, *g);
  REQUIRE(plan);
  REQUIRE(plan->nests.size() == 1);
  CHECK(plan->nests[0].kind == schedule::NestKind::online);
  CHECK(plan->nests[0].name == "online.Y");
  CHECK(plan->nests[0].o.nj == 8);
  CHECK(plan->nests[0].o.nr == 8);
  for (int i = 0; i < 200; ++i) {
    Rng rng(29, static_cast<std::uint64_t>(i));
    auto r = s.genes().random(rng);
    auto p = s.parse(s.print(r));
    REQUIRE(p);
    REQUIRE(*p == r);
  }
  CHECK(parse_error(s, "online Y=maybe").find("x.schedule:1:10: bad value 'maybe' for online Y (allowed: yes, no)") !=
        std::string::npos);
  CHECK(parse_error(s, "online Y=yes c=1000").find("bad value '1000' for online tile c") != std::string::npos);
  CHECK(parse_error(s, "online Y=yes bufs=5").find("bad value '5' for online bufs (allowed: 1, 2, 3, 4)") != std::string::npos);
  CHECK(parse_error(s, "online Y=yes k=2").find("unknown online option 'k' (allowed: r, c, bufs, queues, issue)") !=
        std::string::npos);
  CHECK(parse_error(s, "online Z=yes").find("x.schedule:1:8: unknown online nest 'Z' (allowed: Y)") != std::string::npos);
  CHECK(parse_error(online_space("layernorm:R=64,C=64"), "online Y=yes").find("no row max, exp and row sum") != std::string::npos);
}

TEST_CASE("an online nest that overflows SBUF is rejected with a typed reason that repair fixes", "[schedule][online]") {
  // fp32 tiles of 32000 columns: A's tile and e's tile, 125 KiB each per partition, x4
  const auto s = online_space("softmax:R=512,C=32000,dtype=fp32");
  auto g = s.parse("online Y=yes c=32000 bufs=4");
  REQUIRE(g);
  auto p = schedule::make_plan(s, *g);
  REQUIRE_FALSE(p);
  CHECK(p.error().code == "sbuf_overflow");
  CHECK(p.error().message.find("(nest online.Y)") != std::string::npos);
  Rng rng(3);
  REQUIRE(s.repair(*g, rng));
  CHECK(schedule::make_plan(s, *g));
  // random genomes: valid after repair at a high rate, the online nest on about half the time
  int on = 0, valid = 0;
  const int og = [&] {
    for (std::size_t i = 0; i < s.genes().size(); ++i)
      if (s.genes().gene(i).name == "online.Y") return static_cast<int>(i);
    return -1;
  }();
  REQUIRE(og >= 0);
  for (int i = 0; i < 200; ++i) {
    Rng r(31, static_cast<std::uint64_t>(i));
    auto x = s.genes().random(r);
    valid += s.repair(x, r);
    on += s.genes().at(x, static_cast<std::size_t>(og)) == 1;
  }
  CHECK(valid >= 170);
  CHECK(on >= 50);
}
