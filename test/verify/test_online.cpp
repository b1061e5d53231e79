// Online-softmax programs (lib/nests/online: a running max and sum over a row's tiles, then a
// second read for e and the maps after the sum) match the reference evaluator within the dtype
// tolerances, in program order and in the adversarial order, over shapes, tiles, dtypes, engines,
// batch indices, row statistics that leave the nest and rows whose first tiles are all -inf; the
// row is read from HBM once per tile of each pass, less the first pass's last tile.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <limits>

#include "kevo/ir/builder.hpp"
#include "kevo/ir/workloads.hpp"
#include "kevo/lower/lower.hpp"
#include "kevo/schedule/detail/plan.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/target/target.hpp"
#include "kevo/verify.hpp"

namespace {

kevo::lower::TileProgram check_online(const kevo::ir::Kernel& k, const char* target, const std::string& schedule) {
  const auto t = kevo::target::load_target(target);
  REQUIRE(t.has_value());
  const auto space = kevo::schedule::ScheduleSpace::derive(k, *t);
  auto g = space.parse(schedule);
  INFO(schedule << (g ? std::string() : g.error().str()));
  REQUIRE(g);
  auto plan = kevo::schedule::make_plan(space, *g);
  INFO((plan ? std::string() : plan.error().code + ": " + plan.error().message));
  REQUIRE(plan);
  int online = 0;
  for (const auto& n : plan->nests) online += n.kind == kevo::schedule::NestKind::online;
  REQUIRE(online == 1);
  auto p = kevo::lower::lower(space, *g);
  INFO((p ? std::string() : p.error().str()));
  REQUIRE(p);
  const auto r = kevo::verify::check_program(k, *p, 5, 2);
  INFO(r.message);
  CHECK(r.ok);
  return std::move(*p);
}

}  // namespace

TEST_CASE("online softmax programs match the reference over shapes, tiles, dtypes and engines", "[verify][online]") {
  struct Case {
    const char* spec;
    const char* schedule;
  };
  const Case cases[] = {
      // one tile per row (the nest reads the row once); several tiles with an edge tile; edge row tiles
      {"softmax:R=64,C=100,dtype=fp32", "online Y=yes r=64 c=100"},
      {"softmax:R=130,C=520,dtype=fp32", "online Y=yes r=64 c=128 bufs=1"},
      {"softmax:R=130,C=520,dtype=bf16", "online Y=yes r=128 c=256 bufs=2 queues=4"},
      {"softmax:R=100,C=300,dtype=fp16", "online Y=yes r=32 c=64 bufs=3 queues=2"},
      {"softmax:R=48,C=200,dtype=fp8_e4m3", "online Y=yes r=32 c=32 bufs=4"},
      // engines of the max, the sum and the division; the estimated issue orders
      {"softmax:R=96,C=520,dtype=bf16", "online Y=yes r=32 c=128 bufs=2; engine mx=gpsimd s=gpsimd Y=scalar"},
      {"softmax:R=96,C=520,dtype=fp32", "online Y=yes r=96 c=64 bufs=2 issue=list; engine Y=gpsimd"},
      {"softmax:R=96,C=520,dtype=bf16", "online Y=yes r=64 c=256 bufs=3 issue=ready"},
  };
  for (const auto& c : cases) {
    INFO(c.spec);
    auto k = kevo::ir::workload(c.spec);
    REQUIRE(k.has_value());
    for (const char* t : {"trn1", "trn2"}) {
      INFO(t);
      check_online(*k, t, c.schedule);
    }
  }
}

TEST_CASE("an online nest reads each row once per tile of both passes, less the first pass's last tile", "[verify][online]") {
  auto k = kevo::ir::workload("softmax:R=256,C=1000,dtype=fp32");
  REQUIRE(k.has_value());
  // 1000 columns in tiles of 256: 256, 256, 256 and an edge tile of 232 read twice, the edge once
  const auto p = check_online(*k, "trn2", "online Y=yes r=128 c=256 bufs=2");
  CHECK(p.stats.hbm_bytes_read == 256 * (2 * 1000 - 232) * 4);
  CHECK(p.stats.hbm_bytes_written == 256 * 1000 * 4);
  // one tile per row: one read, as a fused row nest
  const auto one = check_online(*k, "trn2", "online Y=yes r=128 c=1000 bufs=2");
  CHECK(one.stats.hbm_bytes_read == 256 * 1000 * 4);
  // nothing of e goes through HBM
  for (const auto& b : p.buffers)
    if (b.mem == kevo::lower::Memory::hbm) CHECK(b.name != "e");
}

TEST_CASE("an online nest found by structure: batch indices, statistics that leave it, maps reading other inputs",
          "[verify][online]") {
  using namespace kevo::ir;
  // Y[b, q, t] = (e / s) * w[t] + mx * 0 with the log-sum-exp beside it; names unlike softmax's
  KernelBuilder b("lse");
  b.dim("B", 3).dim("N", 70).dim("T", 300);
  b.input("Z", DType::bf16, {"B", "N", "T"}).input("w", DType::bf16, {"T"});
  b.output("Y", DType::bf16, {"B", "N", "T"}).output("rm", DType::fp32, {"B", "N"}).output("lse", DType::fp32, {"B", "N"});
  b.reduce(ReduceOp::max, "rm", {"b", "q"}, {"t"}, access("Z", {"b", "q", "t"}));
  b.map("ex", {"b", "q", "t"}, unary(Fn::exp, access("Z", {"b", "q", "t"}) - access("rm", {"b", "q"})));
  b.reduce(ReduceOp::sum, "rs", {"b", "q"}, {"t"}, access("ex", {"b", "q", "t"}));
  b.map("pn", {"b", "q", "t"}, access("ex", {"b", "q", "t"}) / access("rs", {"b", "q"}));
  b.map("Y", {"b", "q", "t"}, access("pn", {"b", "q", "t"}) * access("w", {"t"}) + access("rm", {"b", "q"}) * 0.0);
  b.map("lse", {"b", "q"}, unary(Fn::log, access("rs", {"b", "q"})) + access("rm", {"b", "q"}));
  const auto k = b.build_or_throw();
  check_online(k, "trn2", "online Y=yes q=32 t=128 bufs=2");
  check_online(k, "trn1", "online Y=yes q=70 t=64 bufs=1 queues=4");
  // the sum leaves for the lse nest through HBM scratch; e and pn do not
  const auto p = check_online(k, "trn2", "online Y=yes q=64 t=256 bufs=2");
  for (const auto& buf : p.buffers)
    if (buf.mem == kevo::lower::Memory::hbm) CHECK((buf.name != "ex" && buf.name != "pn"));
}

TEST_CASE("rows whose first tiles are all -inf stay finite in an online nest", "[verify][online]") {
  // Row q keeps columns t >= q (anti-causal): with 32-wide tiles, rows 32.. have no finite value
  // in tile 0, so their running max is -inf there; exp(-inf - (-inf)) must not poison the sums.
  using namespace kevo::ir;
  KernelBuilder b("anticausal");
  b.dim("N", 100).dim("T", 160);
  b.input("X", DType::fp32, {"N", "T"});
  b.output("Y", DType::fp32, {"N", "T"});
  b.map("sm", {"q", "t"}, select(le(index_value("q"), index_value("t")), access("X", {"q", "t"}),
                                 constant(-std::numeric_limits<double>::infinity())));
  b.reduce(ReduceOp::max, "rm", {"q"}, {"t"}, access("sm", {"q", "t"}));
  b.map("ex", {"q", "t"}, unary(Fn::exp, access("sm", {"q", "t"}) - access("rm", {"q"})));
  b.reduce(ReduceOp::sum, "rs", {"q"}, {"t"}, access("ex", {"q", "t"}));
  b.map("Y", {"q", "t"}, access("ex", {"q", "t"}) / access("rs", {"q"}));
  const auto k = b.build_or_throw();
  check_online(k, "trn2", "online Y=yes q=100 t=32 bufs=2");
  check_online(k, "trn2", "online Y=yes q=64 t=64 bufs=1");
}
