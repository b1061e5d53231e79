// The flash-attention pattern (QKᵀ -> softmax -> PV) is found structurally, offers its genes, and
// its text form round-trips with located errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kevo/ir/builder.hpp"
#include "kevo/ir/workloads.hpp"
#include "kevo/schedule.hpp"
#include "kevo/schedule/detail/plan.hpp"
#include "kevo/target.hpp"

using namespace kevo;
using schedule::ScheduleSpace;

namespace {
ir::Kernel flash_wl(const std::string& spec) {
  auto k = ir::workload(spec);
  INFO(spec);
  REQUIRE(k);
  return *k;
}
const target::Target& flash_tgt(const char* name = "trn2") {
  static const auto t1 = target::load_target("trn1").value();
  static const auto t2 = target::load_target("trn2").value();
  return std::string(name) == "trn1" ? t1 : t2;
}
// softmax(A·Bkᵀ)·W over rows q and kv positions t (index names given), N rows, D contracted, E values.
ir::Kernel softmax_pv(const char* name, std::int64_t N, std::int64_t D, std::int64_t E, const std::string& q = "q",
                      const std::string& t = "t") {
  using namespace ir;
  KernelBuilder b(name);
  b.dim("N", N).dim("D", D).dim("E", E);
  b.input("A", DType::bf16, {"N", "D"}).input("Bk", DType::bf16, {"N", "D"}).input("W", DType::bf16, {"N", "E"});
  b.output("Y", DType::bf16, {"N", "E"});
  b.contract("sc", {q, t}, {"c"}, access("A", {q, "c"}), access("Bk", {t, "c"}));
  b.reduce(ReduceOp::max, "rm", {q}, {t}, access("sc", {q, t}));
  b.map("ex", {q, t}, unary(Fn::exp, access("sc", {q, t}) - access("rm", {q})));
  b.reduce(ReduceOp::sum, "rs", {q}, {t}, access("ex", {q, t}));
  b.contract("o", {q, "u"}, {t}, access("ex", {q, t}), access("W", {t, "u"}));
  b.map("Y", {q, "u"}, access("o", {q, "u"}) / access("rs", {q}));
  return b.build_or_throw();
}
int gene_index(const ScheduleSpace& s, const std::string& name) {
  for (std::size_t i = 0; i < s.genes().size(); ++i)
    if (s.genes().gene(i).name == name) return static_cast<int>(i);
  return -1;
}
bool has_flash_gene(const ScheduleSpace& s) {
  for (std::size_t i = 0; i < s.genes().size(); ++i)
    if (s.genes().gene(i).name.starts_with("flash.")) return true;
  return false;
}

// Attention written with other names, no batch indices, two maps on the scores, the value operand
// first in the second contraction, and two maps after it.
ir::Kernel renamed_attention(std::int64_t n, std::int64_t d, std::int64_t e, bool emit_sum_as_output = false) {
  using namespace ir;
  KernelBuilder b("renamed");
  b.dim("N", n).dim("D", d).dim("E", e);
  b.input("A", DType::fp32, {"N", "D"}).input("Bk", DType::fp32, {"N", "D"}).input("W", DType::fp32, {"N", "E"});
  b.output("Y", DType::fp32, {"N", "E"});
  if (emit_sum_as_output) b.output("rs", DType::fp32, {"N"});
  b.contract("sc", {"q", "t"}, {"c"}, access("A", {"q", "c"}), access("Bk", {"t", "c"}));
  b.map("sc2", {"q", "t"}, access("sc", {"q", "t"}) * 0.25);
  b.map("sc3", {"q", "t"}, access("sc2", {"q", "t"}) + 1.0);
  b.reduce(ReduceOp::max, "rm", {"q"}, {"t"}, access("sc3", {"q", "t"}));
  b.map("ex", {"q", "t"}, unary(Fn::exp, access("sc3", {"q", "t"}) - access("rm", {"q"})));
  b.reduce(ReduceOp::sum, "rs", {"q"}, {"t"}, access("ex", {"q", "t"}));
  b.contract("o", {"q", "u"}, {"t"}, access("W", {"t", "u"}), access("ex", {"q", "t"}));
  b.map("yn", {"q", "u"}, access("o", {"q", "u"}) / access("rs", {"q"}));
  b.map("Y", {"q", "u"}, access("yn", {"q", "u"}) * 2.0);
  return b.build_or_throw();
}
}  // namespace

TEST_CASE("attention offers a flash gene with row and kv tile genes; kernels without the pattern do not",
          "[schedule][flash]") {
  auto s = ScheduleSpace::derive(flash_wl("attention:B=1,H=2,S=2048,D=128,causal=1"), flash_tgt());
  const int g = gene_index(s, "flash.o");
  REQUIRE(g >= 0);
  CHECK(s.genes().gene(static_cast<std::size_t>(g)).kind == GeneKind::boolean);
  const int ti = gene_index(s, "flash.o.tile.i"), tj = gene_index(s, "flash.o.tile.j");
  REQUIRE(ti >= 0);
  REQUIRE(tj >= 0);
  CHECK(s.genes().gene(static_cast<std::size_t>(ti)).values == std::vector<std::int64_t>{32, 64, 128});
  CHECK(s.genes().gene(static_cast<std::size_t>(tj)).values == std::vector<std::int64_t>{32, 64, 128, 256, 512});
  CHECK(gene_index(s, "flash.o.bufs") >= 0);
  CHECK(gene_index(s, "flash.o.psum.bufs") >= 0);
  // the extent itself is offered when it is within the limits (S = 200: edge tiles or one tile)
  auto s2 = ScheduleSpace::derive(flash_wl("attention:B=1,H=1,S=200,D=64,causal=0"), flash_tgt());
  CHECK(s2.genes().gene(static_cast<std::size_t>(gene_index(s2, "flash.o.tile.j"))).values ==
        std::vector<std::int64_t>{32, 64, 128, 200});
  // off by default: the default schedule stays the nest-by-nest one
  CHECK(s.genes().at(s.default_genome(), static_cast<std::size_t>(g)) == 0);

  for (const char* w : {"matmul:M=256,N=512,K=256", "softmax:R=256,C=1024", "layernorm:R=256,C=512",
                        "swiglu:M=128,D=256,F=512", "matmul_bias_act:M=256,N=512,K=256,act=gelu", "bmm:B=2,M=64,N=64,K=64"}) {
    INFO(w);
    CHECK_FALSE(has_flash_gene(ScheduleSpace::derive(flash_wl(w), flash_tgt())));
  }
}

TEST_CASE("the flash pattern is found by structure, not by names", "[schedule][flash]") {
  auto s = ScheduleSpace::derive(renamed_attention(96, 32, 48), flash_tgt());
  CHECK(gene_index(s, "flash.o") >= 0);
  CHECK(gene_index(s, "flash.o.tile.q") >= 0);
  CHECK(gene_index(s, "flash.o.tile.t") >= 0);
  auto g = s.parse("flash o=yes q=32 t=64");
  REQUIRE(g);
  auto plan = schedule::make_plan(s, *g);
  REQUIRE(plan);
  // every op of the pattern is in one nest
  REQUIRE(plan->nests.size() == 1);
  CHECK(plan->nests[0].kind == schedule::NestKind::flash);
  CHECK(plan->nests[0].ops.size() == 9);
  CHECK(plan->nests[0].f.tq == 32);
  CHECK(plan->nests[0].f.tkv == 64);
  CHECK(plan->nests[0].f.nkv == 2);
  // a row sum that is also an output is final after the kv loop: still the pattern
  CHECK(has_flash_gene(ScheduleSpace::derive(renamed_attention(96, 32, 48, true), flash_tgt())));
  // probabilities that leave the kernel need every score tile at once: not the pattern
  {
    using namespace ir;
    KernelBuilder b("probs_out");
    b.dim("N", 64).dim("D", 32);
    b.input("A", DType::fp32, {"N", "D"}).input("Bk", DType::fp32, {"N", "D"}).input("W", DType::fp32, {"N", "D"});
    b.output("Y", DType::fp32, {"N", "D"}).output("ex", DType::fp32, {"N", "N"});
    b.contract("sc", {"q", "t"}, {"c"}, access("A", {"q", "c"}), access("Bk", {"t", "c"}));
    b.reduce(ReduceOp::max, "rm", {"q"}, {"t"}, access("sc", {"q", "t"}));
    b.map("ex", {"q", "t"}, unary(Fn::exp, access("sc", {"q", "t"}) - access("rm", {"q"})));
    b.reduce(ReduceOp::sum, "rs", {"q"}, {"t"}, access("ex", {"q", "t"}));
    b.contract("o", {"q", "u"}, {"t"}, access("ex", {"q", "t"}), access("W", {"t", "u"}));
    b.map("Y", {"q", "u"}, access("o", {"q", "u"}) / access("rs", {"q"}));
    CHECK_FALSE(has_flash_gene(ScheduleSpace::derive(b.build_or_throw(), flash_tgt())));
  }
  // a softmax over the other index of the scores is not the pattern either
  {
    using namespace ir;
    KernelBuilder b("colsoftmax");
    b.dim("N", 64).dim("D", 32);
    b.input("A", DType::fp32, {"N", "D"}).input("Bk", DType::fp32, {"N", "D"}).input("W", DType::fp32, {"N", "D"});
    b.output("Y", DType::fp32, {"N", "D"});
    b.contract("sc", {"q", "t"}, {"c"}, access("A", {"q", "c"}), access("Bk", {"t", "c"}));
    b.reduce(ReduceOp::max, "rm", {"q"}, {"t"}, access("sc", {"q", "t"}));
    b.map("ex", {"q", "t"}, unary(Fn::exp, access("sc", {"q", "t"}) + access("rm", {"q"})));  // + instead of -
    b.reduce(ReduceOp::sum, "rs", {"q"}, {"t"}, access("ex", {"q", "t"}));
    b.contract("o", {"q", "u"}, {"t"}, access("ex", {"q", "t"}), access("W", {"t", "u"}));
    b.map("Y", {"q", "u"}, access("o", {"q", "u"}) / access("rs", {"q"}));
    CHECK_FALSE(has_flash_gene(ScheduleSpace::derive(b.build_or_throw(), flash_tgt())));
  }
}

namespace {
std::string err0(const ScheduleSpace& s, const std::string& t) {
  auto e = s.parse(t, "x.schedule");
  REQUIRE_FALSE(e);
  return e.error().str();
}
}  // namespace

TEST_CASE("flash statements print and parse back; bad values are located errors", "[schedule][flash]") {
  auto s = ScheduleSpace::derive(flash_wl("attention:B=1,H=2,S=256,D=64,causal=1"), flash_tgt());
  auto g = s.parse("flash o=yes i=64 j=128 bufs=3 psum=2");
  REQUIRE(g);
  const auto text = s.print(*g);
  CHECK(text.find("flash o=yes i=64 j=128 bufs=3 psum=2 skew=no\n") != std::string::npos);
  auto back = s.parse(text);
  REQUIRE(back);
  CHECK(*back == *g);
  // statements may sit inside a nest's lines and mix with others
  auto g2 = s.parse("nest s: tile i=128; flash o=yes j=256\nfuse p=no");
  REQUIRE(g2);
  CHECK(s.print(*g2).find("flash o=yes i=128 j=256 bufs=2 psum=1 skew=no") != std::string::npos);
  auto g3 = s.parse("flash o=yes bufs=2 psum=2 skew=yes");
  REQUIRE(g3);
  CHECK(s.print(*g3).find("bufs=2 psum=2 skew=yes") != std::string::npos);
  CHECK(*s.parse(s.print(*g3)) == *g3);
  // qblock and issue are printed only where they are not 1 and steps
  auto g4 = s.parse("flash o=yes bufs=2 psum=2 skew=yes qblock=4 issue=list");
  REQUIRE(g4);
  CHECK(s.print(*g4).find("bufs=2 psum=2 skew=yes qblock=4 issue=list\n") != std::string::npos);
  CHECK(*s.parse(s.print(*g4)) == *g4);
  auto g5 = s.parse("flash o=yes qblock=1 issue=steps");
  REQUIRE(g5);
  CHECK(s.print(*g5).find("skew=no\n") != std::string::npos);
  CHECK(err0(s, "flash o=yes qblock=3").find("bad value '3' for flash qblock (allowed: 1, 2, 4)") != std::string::npos);
  CHECK(err0(s, "flash o=yes issue=soon").find("bad value 'soon' for flash issue (allowed: steps, ready, list)") != std::string::npos);
  for (int i = 0; i < 200; ++i) {
    Rng rng(17, static_cast<std::uint64_t>(i));
    auto r = s.genes().random(rng);
    auto p = s.parse(s.print(r));
    REQUIRE(p);
    REQUIRE(*p == r);
  }
  const auto err = [&](const std::string& t) {
    auto e = s.parse(t, "x.schedule");
    REQUIRE_FALSE(e);
    return e.error().str();
  };
  CHECK(err("flash o=maybe").find("x.schedule:1:9: bad value 'maybe' for flash o (allowed: yes, no)") != std::string::npos);
  CHECK(err("flash o=yes j=96").find("x.schedule:1:15: bad value '96' for flash tile j (allowed: 32, 64, 128, 256)") !=
        std::string::npos);
  CHECK(err("flash o=yes i=256").find("bad value '256' for flash tile i (allowed: 32, 64, 128)") != std::string::npos);
  CHECK(err("flash o=yes psum=3").find("bad value '3' for flash psum buffers (allowed: 1, 2)") != std::string::npos);
  CHECK(err("flash o=yes k=2").find("unknown flash option 'k' (allowed: i, j, bufs, psum, skew, qblock, issue)") != std::string::npos);
  CHECK(err("flash o=yes skew=2").find("x.schedule:1:18: bad value '2' for flash skew (allowed: yes, no)") != std::string::npos);
  CHECK(err("flash x=yes").find("x.schedule:1:7: unknown flash nest 'x' (allowed: o)") != std::string::npos);
  auto sm = ScheduleSpace::derive(flash_wl("softmax:R=64,C=64"), flash_tgt());
  auto e = sm.parse("flash Y=yes");
  REQUIRE_FALSE(e);
  CHECK(e.error().str().find("no QKᵀ-softmax-PV pattern") != std::string::npos);
}

TEST_CASE("over-capacity flash genomes are rejected with typed reasons that repair fixes", "[schedule][flash]") {
  auto s = ScheduleSpace::derive(flash_wl("attention:B=1,H=8,S=512,D=128,causal=1,dtype=bf16"), flash_tgt());
  // PE transposes of Q and K plus double-buffered scores and PV: 9 PSUM banks of 8
  auto g = s.parse("flash o=yes psum=2; nest s: transpose Q=pe_transpose K=pe_transpose");
  REQUIRE(g);
  auto p = schedule::make_plan(s, *g);
  REQUIRE_FALSE(p);
  CHECK(p.error().code == "psum_banks");
  CHECK(p.error().message == "flash.o: needs 9 PSUM banks (scores and PV x 2 rotations, eT staging, Q transposes, K transposes), "
                             "trn2 has 8");
  Rng rng(1);
  auto fixed = *g;
  REQUIRE(s.repair(fixed, rng));
  CHECK(schedule::make_plan(s, fixed));
  CHECK(s.print(fixed).find("flash o=yes") != std::string::npos);
  // DMA transposes leave room for the rotation
  CHECK(schedule::make_plan(s, *s.parse("flash o=yes psum=2; nest s: transpose Q=dma_transpose K=dma_transpose")));

  // skew: tile j+1's K, V and scores are written before tile j's PV reads tile j's, so each needs a
  // second slot; repair gives it one
  const std::string dt = "; nest s: transpose Q=dma_transpose K=dma_transpose";
  for (const char* bad : {"flash o=yes bufs=1 psum=2 skew=yes", "flash o=yes bufs=2 psum=1 skew=yes"}) {
    INFO(bad);
    auto gs = s.parse(bad + dt);
    REQUIRE(gs);
    auto ps = schedule::make_plan(s, *gs);
    REQUIRE_FALSE(ps);
    CHECK(ps.error().code == "illegal_order");
    CHECK(ps.error().message.find("skew=yes issues the next kv tile's loads and scores before this tile's PV") != std::string::npos);
    REQUIRE(s.repair(*gs, rng));
    CHECK(schedule::make_plan(s, *gs));
  }
  CHECK(schedule::make_plan(s, *s.parse("flash o=yes bufs=2 psum=2 skew=yes" + dt)));

  // SBUF: a wide contracted index with a narrow value dim, quadruple-buffered K tiles
  auto w = ScheduleSpace::derive(softmax_pv("wide", 512, 8192, 64), flash_tgt("trn1"));
  auto gw = w.parse("flash o=yes t=512 bufs=4");
  REQUIRE(gw);
  auto pw = schedule::make_plan(w, *gw);
  REQUIRE_FALSE(pw);
  CHECK(pw.error().code == "sbuf_overflow");
  CHECK(pw.error().message.find("(nest flash.o)") != std::string::npos);
  REQUIRE(w.repair(*gw, rng));
  CHECK(schedule::make_plan(w, *gw));

  // a value dim wider than one PV matmul is a tile_limit that turns flash off
  auto big = ScheduleSpace::derive(flash_wl("attention:B=1,H=1,S=256,D=1024,causal=0"), flash_tgt());
  auto gb = big.parse("flash o=yes");
  REQUIRE(gb);
  auto pb = schedule::make_plan(big, *gb);
  REQUIRE_FALSE(pb);
  CHECK(pb.error().code == "tile_limit");
}

TEST_CASE("random attention genomes, flash ones included, are valid after repair at a high rate", "[schedule][flash]") {
  auto s = ScheduleSpace::derive(flash_wl("attention:B=1,H=8,S=2048,D=128,causal=1"), flash_tgt());
  const int fg = gene_index(s, "flash.o");
  int flash = 0, valid = 0, flash_valid = 0;
  const int n = std::getenv("KEVO_ASAN") ? 60 : 300;
  for (int i = 0; i < n; ++i) {
    Rng rng(23, static_cast<std::uint64_t>(i));
    auto g = s.genes().random(rng);
    const bool ok = s.repair(g, rng);
    const bool on = s.genes().at(g, static_cast<std::size_t>(fg)) == 1;
    flash += on;
    valid += ok;
    flash_valid += ok && on;
  }
  INFO(valid << " valid of " << n << ", " << flash << " with flash on, " << flash_valid << " of them valid");
  CHECK(valid >= n * 85 / 100);
  CHECK(flash >= n / 4);
  CHECK(flash_valid >= flash * 85 / 100);
}

TEST_CASE("flash tiles of indices named like the statement's options round-trip through the text") {
  const auto s = ScheduleSpace::derive(softmax_pv("clash", 256, 32, 32, "bufs", "psum"), flash_tgt());
  auto g = s.parse("flash o=yes bufs=64 psum=128 bufs=3 psum=2");
  REQUIRE(g);
  const std::string text = s.print(*g);
  CHECK(text.find("flash o=yes bufs=64 psum=128 bufs=3 psum=2") != std::string::npos);
  CHECK(s.parse(text).value() == *g);
  Rng rng(5);
  for (int i = 0; i < 50; ++i) {
    const Genome r = s.genes().random(rng);
    CHECK(s.parse(s.print(r)).value() == r);
  }
}

TEST_CASE("a flash nest holds P in the dtype of a cast between the sum and PV; without one P is e in fp32",
          "[schedule][flash]") {
  // attention in bf16 writes pb = cast<bf16>(e) for PV (the sum stays over fp32 e), as flash
  // kernels do: P's transposes and the PV matmul run at the 16-bit rate. The exp writes P itself
  // (its row sums are of the unrounded values), so with a cast there is no fp32 e tile at all
  for (const char* dt : {"bf16", "fp16", "fp32"}) {
    INFO(dt);
    auto s = ScheduleSpace::derive(flash_wl(std::string("attention:B=1,H=2,S=256,D=64,causal=1,dtype=") + dt), flash_tgt());
    REQUIRE(s.impl().flashes.size() == 1);
    const auto& fs = s.impl().flashes[0];
    const bool cast = std::string(dt) != "fp32";
    CHECK((fs.ecast >= 0) == cast);
    auto g = s.parse("flash o=yes i=128 j=128");
    REQUIRE(g);
    const auto p = schedule::make_plan(s, *g);
    REQUIRE(p);
    const auto& n = p->nests[0];
    REQUIRE(n.kind == schedule::NestKind::flash);
    const auto want = cast ? *ir::dtype_from_string(dt) : ir::DType::fp32;
    CHECK((n.f.buf_ec >= 0) == cast);
    CHECK(n.buffers[static_cast<std::size_t>(n.f.buf_et)].dtype == want);
    CHECK((n.f.buf_e >= 0) == !cast);
    if (cast) CHECK(n.buffers[static_cast<std::size_t>(n.f.buf_ec)].dtype == want);
    else CHECK(n.buffers[static_cast<std::size_t>(n.f.buf_e)].dtype == ir::DType::fp32);
  }
}
