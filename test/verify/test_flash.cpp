// Flash-attention programs (one online-softmax nest) match the reference evaluator within the
// dtype tolerances, in program order and in the adversarial order, over shapes, tiles, causal
// masks, transposes and engines.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "kevo/ir/builder.hpp"
#include "kevo/ir/workloads.hpp"
#include "kevo/lower/lower.hpp"
#include "kevo/schedule/detail/plan.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/target/target.hpp"
#include "kevo/verify.hpp"

namespace {

void check_flash(const kevo::ir::Kernel& k, const char* target, const std::string& schedule) {
  const auto t = kevo::target::load_target(target);
  REQUIRE(t.has_value());
  const auto space = kevo::schedule::ScheduleSpace::derive(k, *t);
  auto g = space.parse(schedule);
  INFO(schedule << (g ? std::string() : g.error().str()));
  REQUIRE(g);
  auto plan = kevo::schedule::make_plan(space, *g);
  INFO((plan ? std::string() : plan.error().code + ": " + plan.error().message));
  REQUIRE(plan);
  bool flash = false;
  for (const auto& n : plan->nests) flash = flash || n.kind == kevo::schedule::NestKind::flash;
  REQUIRE(flash);
  auto p = kevo::lower::lower(space, *g);
  INFO((p ? std::string() : p.error().str()));
  REQUIRE(p);
  const auto r = kevo::verify::check_program(k, *p, 5, 2);
  INFO(r.message);
  CHECK(r.ok);
}

// A workload and a flash schedule for it, checked on trn1 and trn2.
struct Case {
  const char* spec;
  const char* schedule;
};
template <std::size_t N>
void check_cases(const Case (&cases)[N]) {
  for (const auto& c : cases) {
    INFO(c.spec);
    auto k = kevo::ir::workload(c.spec);
    REQUIRE(k.has_value());
    for (const char* t : {"trn1", "trn2"}) {
      INFO(t);
      check_flash(*k, t, c.schedule);
    }
  }
}

}  // namespace

TEST_CASE("flash attention programs match the reference over shapes, masks, dtypes and tiles", "[verify][flash]") {
  const Case cases[] = {
      // one tile each way; S not a multiple of the kv tile; several row and kv tiles
      {"attention:B=1,H=2,S=65,D=32,causal=1,dtype=fp32", "flash o=yes"},
      {"attention:B=1,H=2,S=65,D=32,causal=0,dtype=bf16", "flash o=yes i=32 j=32"},
      {"attention:B=2,H=2,S=200,D=64,causal=1,dtype=bf16", "flash o=yes i=64 j=128 bufs=1"},
      {"attention:B=2,H=1,S=200,D=64,causal=0,dtype=fp32", "flash o=yes i=128 j=64 bufs=3"},
      // kv tiles wider than 128 rows: eᵀ and V in 128-row chunks; contracted dim over two tiles (D=160)
      {"attention:B=1,H=1,S=300,D=160,causal=1,dtype=bf16", "flash o=yes i=128 j=256 psum=2; nest s: transpose Q=dma_transpose K=dma_transpose"},
      {"attention:B=1,H=1,S=520,D=48,causal=1,dtype=fp32", "flash o=yes i=128 j=512; nest s: transpose Q=strided K=pe_transpose"},
      {"attention:B=1,H=2,S=130,D=96,causal=0,dtype=fp16", "flash o=yes i=64 j=130; nest s: transpose Q=pe_transpose K=strided; evict scalar"},
      // engines of the softmax ops
      {"attention:B=1,H=1,S=96,D=32,causal=1,dtype=bf16", "flash o=yes i=32 j=64; engine mx=gpsimd l=gpsimd p=scalar O=gpsimd"},
      {"attention:B=1,H=1,S=96,D=16,causal=1,dtype=fp8_e4m3", "flash o=yes i=32 j=32"},
      // a map on GpSimd (no PSUM access): the scores are evicted to SBUF first
      {"attention:B=1,H=2,S=130,D=32,causal=1,dtype=bf16", "flash o=yes i=64 j=64; engine p=gpsimd; nest s: evict scalar"},
      // skewed (the next kv tile's loads and scores before this one's softmax and PV; PV's chunks
      // transposed one ahead): across row tiles and heads, with skipped masked tiles, edge tiles,
      // 128-row chunks, the scores evicted first, and a row tile of a single kv tile
      {"attention:B=2,H=2,S=200,D=64,causal=1,dtype=bf16", "flash o=yes i=64 j=128 bufs=2 psum=2 skew=yes; nest s: transpose Q=dma_transpose K=dma_transpose"},
      {"attention:B=1,H=2,S=300,D=160,causal=0,dtype=bf16", "flash o=yes i=128 j=256 bufs=3 psum=2 skew=yes; nest s: transpose Q=dma_transpose K=dma_transpose"},
      {"attention:B=1,H=2,S=520,D=48,causal=1,dtype=fp32", "flash o=yes i=128 j=512 bufs=2 psum=2 skew=yes; nest s: transpose Q=strided K=strided"},
      {"attention:B=1,H=2,S=130,D=32,causal=1,dtype=bf16", "flash o=yes i=64 j=64 bufs=4 psum=2 skew=yes; engine p=gpsimd; nest s: evict scalar; transpose Q=dma_transpose K=dma_transpose"},
      {"attention:B=2,H=1,S=64,D=32,causal=0,dtype=fp16", "flash o=yes i=32 j=64 bufs=2 psum=2 skew=yes; nest s: transpose Q=dma_transpose K=dma_transpose"},
  };
  check_cases(cases);
}

TEST_CASE("a flash nest found in a kernel with other names, two maps on each side and V first matches the reference",
          "[verify][flash]") {
  using namespace kevo::ir;
  KernelBuilder b("renamed");
  b.dim("N", 150).dim("D", 40).dim("E", 24);
  b.input("A", DType::bf16, {"N", "D"}).input("Bk", DType::bf16, {"N", "D"}).input("W", DType::bf16, {"N", "E"});
  b.input("bias", DType::fp32, {"N"});
  b.output("Y", DType::bf16, {"N", "E"});
  b.contract("sc", {"q", "t"}, {"c"}, access("A", {"q", "c"}), access("Bk", {"t", "c"}));
  b.map("sc2", {"q", "t"}, access("sc", {"q", "t"}) * 0.25 + access("bias", {"t"}));
  b.map("sc3", {"q", "t"}, select(ge(index_value("q"), index_value("t")), access("sc2", {"q", "t"}),
                                  constant(-std::numeric_limits<double>::infinity())));
  b.reduce(ReduceOp::max, "rm", {"q"}, {"t"}, access("sc3", {"q", "t"}));
  b.map("ex", {"q", "t"}, unary(Fn::exp, access("sc3", {"q", "t"}) - access("rm", {"q"})));
  b.reduce(ReduceOp::sum, "rs", {"q"}, {"t"}, access("ex", {"q", "t"}));
  b.contract("o", {"q", "u"}, {"t"}, access("W", {"t", "u"}), access("ex", {"q", "t"}));
  b.map("yn", {"q", "u"}, access("o", {"q", "u"}) / access("rs", {"q"}));
  b.map("Y", {"q", "u"}, access("yn", {"q", "u"}) * 2.0 + access("rm", {"q"}) * 0.0);
  const auto k = b.build_or_throw();
  check_flash(k, "trn2", "flash o=yes q=64 t=64");
  check_flash(k, "trn2", "flash o=yes q=128 t=150 bufs=1");
}

TEST_CASE("a flash nest with no map on the scores, and one whose row statistics and output leave it, match the reference",
          "[verify][flash]") {
  using namespace kevo::ir;
  const auto t = kevo::target::load_target("trn2");
  REQUIRE(t.has_value());
  {
    // unnormalised output, row max and row sum as outputs (as a split-kv or backward pass wants);
    // the sum also read by a map after the pattern
    KernelBuilder b("stats");
    b.dim("N", 100).dim("D", 32).dim("E", 40);
    b.input("A", DType::bf16, {"N", "D"}).input("Bk", DType::bf16, {"N", "D"}).input("W", DType::bf16, {"N", "E"});
    b.output("o", DType::bf16, {"N", "E"}).output("rm", DType::fp32, {"N"}).output("lse", DType::fp32, {"N"});
    b.contract("sc", {"q", "t"}, {"c"}, access("A", {"q", "c"}), access("Bk", {"t", "c"}));
    b.reduce(ReduceOp::max, "rm", {"q"}, {"t"}, access("sc", {"q", "t"}));
    b.map("ex", {"q", "t"}, unary(Fn::exp, access("sc", {"q", "t"}) - access("rm", {"q"})));
    b.reduce(ReduceOp::sum, "rs", {"q"}, {"t"}, access("ex", {"q", "t"}));
    b.contract("o", {"q", "u"}, {"t"}, access("ex", {"q", "t"}), access("W", {"t", "u"}));
    b.map("lse", {"q"}, unary(Fn::log, access("rs", {"q"})) + access("rm", {"q"}));
    const auto k = b.build_or_throw();
    check_flash(k, "trn2", "flash o=yes q=32 t=64");
    check_flash(k, "trn1", "flash o=yes q=100 t=100 bufs=1");
    const auto sp = kevo::schedule::ScheduleSpace::derive(k, *t);
    auto p = kevo::lower::lower(sp, *sp.parse("flash o=yes q=32 t=64"));
    REQUIRE(p);
    // rs goes to HBM scratch for the lse nest; nothing per tile does
    for (const auto& buf : p->buffers)
      if (buf.mem == kevo::lower::Memory::hbm) CHECK((buf.name != "sc" && buf.name != "ex"));
  }
  {
    KernelBuilder b("plain");
    b.dim("N", 100).dim("D", 32).dim("E", 40);
    b.input("A", DType::fp32, {"N", "D"}).input("Bk", DType::fp32, {"N", "D"}).input("W", DType::fp32, {"N", "E"});
    b.output("Y", DType::fp32, {"N", "E"});
    b.contract("sc", {"q", "t"}, {"c"}, access("A", {"q", "c"}), access("Bk", {"t", "c"}));
    b.reduce(ReduceOp::max, "rm", {"q"}, {"t"}, access("sc", {"q", "t"}));
    b.map("ex", {"q", "t"}, unary(Fn::exp, access("sc", {"q", "t"}) - access("rm", {"q"})));
    b.reduce(ReduceOp::sum, "rs", {"q"}, {"t"}, access("ex", {"q", "t"}));
    b.contract("o", {"q", "u"}, {"t"}, access("ex", {"q", "t"}), access("W", {"t", "u"}));
    b.map("Y", {"q", "u"}, access("o", {"q", "u"}) / access("rs", {"q"}));
    const auto k = b.build_or_throw();
    check_flash(k, "trn2", "flash o=yes q=32 t=64");
    check_flash(k, "trn1", "flash o=yes q=100 t=100 bufs=1");
  }
}

TEST_CASE("rows masked out of the first kv tiles a flash nest computes stay finite (anti-causal and window masks)",
          "[verify][flash]") {
  // Query q sees keys t >= q (anti-causal) or |q - t| <= 40 (a window): with 64-wide kv tiles,
  // rows 64..127 of the first row tile have no visible key in kv tile 0, which other rows keep
  // from being skipped. The running max of those rows is -inf there; exp(-inf - (-inf)) must not
  // poison their sums.
  using namespace kevo::ir;
  for (int window : {0, 1}) {
    KernelBuilder b(window ? "window" : "anticausal");
    b.dim("N", 200).dim("D", 32).dim("E", 48);
    b.input("A", DType::bf16, {"N", "D"}).input("Bk", DType::bf16, {"N", "D"}).input("W", DType::bf16, {"N", "E"});
    b.output("Y", DType::bf16, {"N", "E"});
    b.contract("sc", {"q", "t"}, {"c"}, access("A", {"q", "c"}), access("Bk", {"t", "c"}));
    const double ninf = -std::numeric_limits<double>::infinity();
    Expr visible = window ? le(index_value("q"), index_value("t") + 40.0) : le(index_value("q"), index_value("t"));
    Expr masked = select(std::move(visible), access("sc", {"q", "t"}), constant(ninf));
    if (window) masked = select(le(index_value("t"), index_value("q") + 40.0), std::move(masked), constant(ninf));
    b.map("sm", {"q", "t"}, std::move(masked));
    b.reduce(ReduceOp::max, "rm", {"q"}, {"t"}, access("sm", {"q", "t"}));
    b.map("ex", {"q", "t"}, unary(Fn::exp, access("sm", {"q", "t"}) - access("rm", {"q"})));
    b.reduce(ReduceOp::sum, "rs", {"q"}, {"t"}, access("ex", {"q", "t"}));
    b.contract("o", {"q", "u"}, {"t"}, access("ex", {"q", "t"}), access("W", {"t", "u"}));
    b.map("Y", {"q", "u"}, access("o", {"q", "u"}) / access("rs", {"q"}));
    const auto k = b.build_or_throw();
    check_flash(k, "trn2", "flash o=yes q=128 t=64");
    check_flash(k, "trn2", "flash o=yes q=128 t=32 bufs=1");
  }
}

// qblock: a block of row tiles shares each K and V tile (loaded by the first row tile of the block
// to run it, read by the others), each row tile keeping its own Qᵀ, running max, sum and
// accumulator; issue: the nest's instructions ordered by an estimated schedule. Every combination
// matches the reference — causal (skipped tiles differ between the block's row tiles), edge row
// tiles, a block larger than the row tiles there are, skewed and not — and qblock = 2 reads K and
// V from HBM half as often.
TEST_CASE("flash row tiles sharing K and V (qblock) and the nest's issue order match the reference", "[verify][flash]") {
  const Case cases[] = {
      {"attention:B=1,H=2,S=200,D=64,causal=1,dtype=bf16", "flash o=yes i=64 j=64 bufs=2 psum=2 skew=yes qblock=2; nest s: transpose Q=dma_transpose K=dma_transpose"},
      {"attention:B=2,H=1,S=300,D=32,causal=0,dtype=fp32", "flash o=yes i=64 j=128 bufs=1 qblock=4"},
      {"attention:B=1,H=1,S=96,D=32,causal=1,dtype=bf16", "flash o=yes i=32 j=32 bufs=3 psum=2 skew=yes qblock=4 issue=list; nest s: transpose Q=dma_transpose K=dma_transpose"},
      {"attention:B=1,H=2,S=130,D=32,causal=1,dtype=bf16", "flash o=yes i=64 j=64 bufs=2 psum=2 skew=yes qblock=2 issue=ready; engine p=gpsimd; nest s: transpose Q=dma_transpose K=dma_transpose"},
      {"attention:B=1,H=1,S=64,D=32,causal=0,dtype=bf16", "flash o=yes i=64 j=32 qblock=4 issue=list"},  // one row tile
  };
  check_cases(cases);
  // K and V traffic: S = 512 in row tiles of 128 (4 of them), kv tiles of 128, non-causal
  const auto t = kevo::target::load_target("trn2");
  REQUIRE(t.has_value());
  auto k = kevo::ir::workload("attention:B=1,H=1,S=512,D=64,causal=0,dtype=bf16");
  REQUIRE(k.has_value());
  const auto space = kevo::schedule::ScheduleSpace::derive(*k, *t);
  std::int64_t read[3] = {};
  int i = 0;
  for (const char* qb : {"1", "2", "4"}) {
    auto g = space.parse(std::string("flash o=yes i=128 j=128 bufs=2 psum=2 skew=yes qblock=") + qb + "; nest s: transpose Q=dma_transpose K=dma_transpose");
    REQUIRE(g);
    auto p = kevo::lower::lower(space, *g);
    REQUIRE(p);
    read[i++] = p->stats.hbm_bytes_read;
  }
  const std::int64_t tensor = 512 * 64 * 2;  // Q, K or V once
  CHECK(read[0] == tensor + 4 * 2 * tensor);  // Q once, K and V per row tile
  CHECK(read[1] == tensor + 2 * 2 * tensor);
  CHECK(read[2] == tensor + 1 * 2 * tensor);
}
