#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdlib>

#include "kevo/ir/text.hpp"
#include "kevo/ir/workloads.hpp"
#include "kevo/schedule.hpp"
#include "kevo/schedule/detail/plan.hpp"
#include "kevo/target.hpp"

using namespace kevo;
using schedule::ScheduleSpace;

namespace {
ir::Kernel wl(const std::string& spec) {
  auto k = ir::workload(spec);
  INFO(spec);
  REQUIRE(k);
  return *k;
}
const target::Target& trn1() {
  static const auto t = target::load_target("trn1").value();
  return t;
}
const std::vector<std::string>& all_workloads() {
  static const std::vector<std::string> w = {
      "matmul:M=256,N=512,K=256,dtype=bf16",          "matmul:M=200,N=300,K=150,dtype=fp32,layout=nt",
      "matmul:M=4096,N=8192,K=8192,dtype=bf16,layout=tn", "matmul:M=64,N=50257,K=256,dtype=bf16",
      "bmm:B=2,M=128,N=256,K=64",                     "matmul_bias_act:M=256,N=512,K=256,act=gelu",
      "softmax:R=256,C=1024",                         "layernorm:R=256,C=512",
      "rmsnorm:R=256,C=512",                          "attention:B=1,H=2,S=256,D=64,causal=1",
      "attention:B=1,H=2,S=256,D=64,causal=0",        "swiglu:M=128,D=256,F=512",
      "eltwise:R=128,C=512,ops=add+gelu+mul",         "conv1d_dw:N=2,C=256,W=300,F=3,pad=1",
      "colsum:R=700,C=300,dtype=fp32"};
  return w;
}
}  // namespace

TEST_CASE("the space of every workload derives, with a valid default schedule") {
  for (const auto& w : all_workloads()) {
    INFO(w);
    auto s = ScheduleSpace::derive(wl(w), trn1());
    CHECK(s.genes().size() > 3);
    auto p = schedule::make_plan(s, s.default_genome());
    INFO((p ? std::string() : p.error().code + ": " + p.error().message));
    CHECK(p);
  }
}

namespace {
// n random genomes of the space (seeds (seed, 0..n-1)) print and parse back to themselves.
void check_round_trips(const ScheduleSpace& s, std::uint64_t seed, int n) {
  for (int i = 0; i < n; ++i) {
    Rng rng(seed, static_cast<std::uint64_t>(i));
    auto g = s.genes().random(rng);
    const auto text = s.print(g);
    auto back = s.parse(text);
    INFO(text);
    REQUIRE(back);
    REQUIRE(*back == g);
  }
}
}  // namespace

TEST_CASE("random genomes of every workload print and re-parse identically") {
  const int n = std::getenv("KEVO_ASAN") ? 20 : 200;
  for (const auto& w : all_workloads()) {
    INFO(w);
    check_round_trips(ScheduleSpace::derive(wl(w), trn1()), 7, n);
  }
}

TEST_CASE("a contraction reading one tensor twice prints schedules that parse back") {
  // The second operand was labelled "X#2", and '#' starts a comment in schedule text: every
  // printed schedule of a matrix squared or a Gram matrix failed to parse, so `kevo search`
  // could not even resume its own seed.
  for (const char* src : {"kernel matsq(A: fp32[N=96, N]) -> (C: fp32[N, N]) {\n  C[i, j] = sum(k) A[i, k] * A[k, j]\n}\n",
                          "kernel gram(A: bf16[M=100, K=70]) -> (G: fp32[M, M]) {\n  G[i, j] = sum(k) A[i, k] * A[j, k]\n}\n"}) {
    auto k = ir::parse_kernel(src);
    REQUIRE(k);
    auto s = ScheduleSpace::derive(*k, trn1());
    const auto dflt = s.print(s.default_genome());
    INFO(dflt);
    CHECK(dflt.find('#') == std::string::npos);
    CHECK(dflt.find(".2") != std::string::npos);  // the second operand has its own label
    check_round_trips(s, 11, 50);
  }
}

TEST_CASE("the space reports its size and a high sampled validity on matmul 2048^3") {
  auto s = ScheduleSpace::derive(wl("matmul:M=2048,N=2048,K=2048,dtype=bf16"), trn1());
  CHECK(s.genes().log10_cardinality() > 10);
  const double v = s.sampled_validity(std::getenv("KEVO_ASAN") ? 50 : 400, 1);
  CHECK(v > 0.5);
}

namespace {
kevo::Diagnostic bad(const ScheduleSpace& s, const std::string& text) {
  auto g = s.parse(text, "x.schedule");
  INFO(text);
  REQUIRE_FALSE(g);
  return g.error();
}
}  // namespace

TEST_CASE("an illegal tile value is located and lists the allowed values") {
  auto s = ScheduleSpace::derive(wl("matmul:M=256,N=512,K=256,dtype=bf16"), trn1());
  auto d = bad(s, "tile m=128 n=96");
  CHECK(d.loc.file == "x.schedule");
  CHECK(d.loc.line == 1);
  CHECK(d.loc.column == 14);
  CHECK(d.message == "bad value '96' for tile n (allowed: 32, 64, 128, 256, 512)");
}

TEST_CASE("sampled validity under a time bound samples the first genomes of the full sample") {
  auto s = ScheduleSpace::derive(wl("matmul:M=256,N=512,K=256,dtype=bf16"), trn1());
  const auto all = s.sampled_validity(60, 7, 1e9);
  CHECK(all.samples == 60);
  CHECK(all.share == s.sampled_validity(60, 7));
  const auto one = s.sampled_validity(60, 7, 0.0);  // the bound is checked after the first genome
  CHECK(one.samples == 1);
  CHECK((one.share == 0.0 || one.share == 1.0));
  // asked every 256 genomes whether to stop (a front end's Ctrl-C): ends at the second ask
  int asked = 0;
  const auto cut = s.sampled_validity(1000, 7, 1e9, [&] { return ++asked == 2; });
  CHECK(asked == 2);
  CHECK(cut.samples == 512);
  CHECK(cut.share == s.sampled_validity(512, 7));
  CHECK(s.sampled_validity(300, 7, 1e9, {}).samples == 300);
}

TEST_CASE("a gene set twice is an error at the repeat, not the last value winning") {
  auto s = ScheduleSpace::derive(wl("matmul:M=256,N=512,K=256,dtype=bf16"), trn1());
  auto d = bad(s, "tile m=64 m=128");
  CHECK(d.loc.column == 13);
  CHECK(d.message == "tile m is given twice in this statement");
  d = bad(s, "load A@k x2; load A@m x4");
  CHECK(d.loc.column == 14);
  CHECK(d.message.find("'C.load.A' is set twice") != std::string::npos);
  d = bad(s, "order m.b n.b k.b m n k; order m.b n.b k.b m k n");
  CHECK(d.message.find("is set twice") != std::string::npos);
  d = bad(s, "load A@k x2 x4");
  CHECK(d.message == "load A buffers is given twice in this statement");
  // one statement setting a gene in two steps is not a repeat
  CHECK(s.parse("acc sbuf x2 dtype=out zero=memset"));
  CHECK(s.parse("tile m=128; tile n=256"));
}

TEST_CASE("an error about a huge token shows its start and its size and not all of it") {
  auto s = ScheduleSpace::derive(wl("matmul:M=256,N=512,K=256,dtype=bf16"), trn1());
  const std::string token(2'000'000, 'z');
  const auto d = bad(s, "tile m=128; " + token);
  CHECK(d.loc.column == 13);
  CHECK(d.message.size() < 500);
  CHECK_THAT(d.message, Catch::StartsWith("unknown statement 'zzz") && Catch::EndsWith("bytes in all)"));
}

TEST_CASE("an unknown statement names the allowed statements") {
  auto s = ScheduleSpace::derive(wl("matmul:M=256,N=512,K=256,dtype=bf16"), trn1());
  auto d = bad(s, "tile m=128\nblok m=2");
  CHECK(d.loc.line == 2);
  CHECK(d.loc.column == 1);
  CHECK(d.message.find("unknown statement 'blok'") != std::string::npos);
  CHECK(d.message.find("block") != std::string::npos);
}

TEST_CASE("bad loop orders, levels, operands and options are located errors") {
  auto s = ScheduleSpace::derive(wl("matmul:M=256,N=512,K=256,dtype=bf16"), trn1());
  CHECK(bad(s, "order m.b n.b k.b m n m").message.find("bad loop 'm' in order") != std::string::npos);
  CHECK(bad(s, "order m.b n.b k.b m n").message.find("incomplete order") != std::string::npos);
  CHECK(bad(s, "load A@q.b").message.find("allowed: auto, root, m.b, n.b, k.b, m, n, k") != std::string::npos);
  CHECK(bad(s, "load Z@m").message == "unknown operand 'Z' (allowed: A, B)");
  CHECK(bad(s, "load A@m y2").message.find("unknown option 'y2'") != std::string::npos);
  CHECK(bad(s, "acc gpu").message == "bad value 'gpu' for acc (allowed: psum, sbuf)");
  CHECK(bad(s, "transpose B=strided").message.find("needs no transpose") != std::string::npos);
  CHECK(bad(s, "tile m 128").message.find("expected '='") != std::string::npos);
  CHECK(bad(s, "evict gpsimd").message == "bad value 'gpsimd' for evict (allowed: vector, scalar, alternate)");
}

TEST_CASE("multi-nest kernels use nest headers, and fuse/engine name ops") {
  auto s = ScheduleSpace::derive(wl("softmax:R=256,C=1024"), trn1());
  auto g = s.parse("fuse e=no\nnest e: layout p=r f=c; tile c=512\nengine s=gpsimd");
  REQUIRE(g);
  CHECK(s.print(*g).find("fuse e=no") != std::string::npos);
  CHECK(s.print(*g).find("nest e: layout p=r f=c; tile r=128 c=512") != std::string::npos);
  CHECK(bad(s, "nest q: bufs 2").message == "unknown nest 'q' (nests: mx, e, s, Y)");
  CHECK(bad(s, "fuse mx=yes").message == "'mx' cannot fuse into the nest before it");
  CHECK(bad(s, "nest mx: layout p=c f=c").message.find("bad layout p=c f=c for nest mx (allowed: p=r f=c; p=c f=r)") !=
        std::string::npos);
}

TEST_CASE("genes the text leaves out take the default schedule's values") {
  auto s = ScheduleSpace::derive(wl("matmul:M=2048,N=2048,K=2048,dtype=bf16"), trn1());
  auto g = s.parse("");
  REQUIRE(g);
  CHECK(*g == s.default_genome());
  auto h = s.parse("# just a comment\n  ;  ; acc sbuf");
  REQUIRE(h);
  CHECK(*h != s.default_genome());
}

TEST_CASE("repair clamps tiles to the target's limits and keeps the genome in the space") {
  auto s = ScheduleSpace::derive(wl("matmul:M=2048,N=2048,K=2048,dtype=bf16"), trn1());
  auto g = s.parse("tile m=512 n=512 k=128");
  REQUIRE(g);
  REQUIRE_FALSE(schedule::make_plan(s, *g));
  Rng rng(1);
  REQUIRE(s.repair(*g, rng));
  CHECK(s.print(*g).find("tile m=128 n=512 k=128") != std::string::npos);
  CHECK(s.genes().contains(*g));
}

TEST_CASE("the space size counts every gene") {
  auto s = ScheduleSpace::derive(wl("matmul:M=2048,N=2048,K=2048,dtype=bf16"), trn1());
  double sum = 0;
  for (const auto& g : s.genes().genes()) sum += g.log10_cardinality();
  CHECK(s.genes().log10_cardinality() == Approx(sum));
  CHECK(s.genes().find("C.order.blocks"));
  CHECK(s.genes().find("C.transpose.A"));       // nn layout: A[M,K] has k innermost
  CHECK_FALSE(s.genes().find("C.transpose.B"));  // B[K,N] is already k-major
}

TEST_CASE("a variance of a mean of the same values offers the bn_stats choice; other reductions do not") {
  auto s = ScheduleSpace::derive(wl("layernorm:R=256,C=1024"), trn1());
  auto g = s.parse("stats var=bn");
  REQUIRE(g);
  CHECK(s.print(*g).find("stats var=bn") != std::string::npos);
  CHECK(s.print(s.default_genome()).find("stats var=reduce") != std::string::npos);
  CHECK(s.parse(s.print(*g)).value() == *g);
  CHECK(bad(s, "stats var=welford").message == "bad value 'welford' for stats var (allowed: reduce, bn)");
  CHECK(bad(s, "stats mu=bn").message.find("'mu' is not a variance of a mean") != std::string::npos);
  // rmsnorm's mean of squares is not centred, softmax has no mean: neither gets the gene
  for (const char* w : {"rmsnorm:R=256,C=1024", "softmax:R=256,C=1024"}) {
    auto t = ScheduleSpace::derive(wl(w), trn1());
    CHECK(t.print(t.default_genome()).find("stats") == std::string::npos);
  }
}

// Issue 17: the structures of the fastest hand kernels (deeper rotation, output-dtype partial
// sums, memset zeroing, per-block DMA transposes).
namespace {
const target::Target& trn2() {
  static const auto t = target::load_target("trn2").value();
  return t;
}
schedule::Plan plan_of(const ScheduleSpace& s, const std::string& text) {
  auto g = s.parse(text);
  INFO(text);
  REQUIRE(g);
  auto p = schedule::make_plan(s, *g);
  INFO((p ? std::string() : p.error().code + ": " + p.error().message));
  REQUIRE(p);
  return *p;
}
std::string reject_code(const ScheduleSpace& s, const std::string& text) {
  auto g = s.parse(text);
  INFO(text);
  REQUIRE(g);
  auto p = schedule::make_plan(s, *g);
  return p ? std::string("ok") : p.error().code;
}
}  // namespace

TEST_CASE("issue 17 genes round-trip in the text and default to today's schedule") {
  auto s = ScheduleSpace::derive(wl("matmul:M=2048,N=2048,K=2048,dtype=bf16"), trn2());
  const auto d = s.print(s.default_genome());
  // the defaults: fp32 partials, start-flag zeroing, per-tile transposes, double buffering
  CHECK(d.find("acc psum x2 zero=start") != std::string::npos);
  CHECK(d.find("transpose A=pe_transpose") != std::string::npos);
  CHECK(d.find("load A@auto x2 dma=tile q=1;") != std::string::npos);
  const std::string text =
      "tile m=128 n=512 k=128; block m=4 n=2 k=4; order m.b n.b k.b k m n; stationary A; transpose A=dma_transpose_block; "
      "load A@k x16 dma=row q=2; load B@k x12 dma=row q=1; acc sbuf x8 dtype=out zero=memset; "
      "store C@n.b x1 dma=tile q=1; evict vector";
  auto g = s.parse(text);
  REQUIRE(g);
  const auto printed = s.print(*g);
  CHECK(printed.find("transpose A=dma_transpose_block") != std::string::npos);
  CHECK(printed.find("load A@k x16 dma=row q=2;") != std::string::npos);
  CHECK(printed.find("acc sbuf x8 dtype=out zero=memset") != std::string::npos);
  auto back = s.parse(printed);
  REQUIRE(back);
  CHECK(*back == *g);
  // options that do not exist are located errors that list what is allowed
  auto bad = s.parse("acc sbuf x2 dtype=fp16");
  REQUIRE(!bad);
  CHECK(bad.error().message.find("fp32, out") != std::string::npos);
  auto bad2 = s.parse("acc psum x2 dtype=out");  // no SBUF partial sums to keep
  REQUIRE(!bad2);
  CHECK(bad2.error().message.find("needs acc sbuf") != std::string::npos);
  CHECK(s.parse("acc psum x2 dtype=fp32"));  // accepted, and what psum does anyway
  auto bad4 = s.parse("transpose B=dma_transpose_block");  // B is laid out with k on rows
  REQUIRE(!bad4);
  auto bad3 = s.parse("acc psum x5");
  REQUIRE(!bad3);
  CHECK(bad3.error().message.find("1, 2, 3, 4, 6, 8") != std::string::npos);
}

TEST_CASE("deeper rotation: load slots up to 16 within SBUF, PSUM rotation up to the target's 8 banks") {
  auto s = ScheduleSpace::derive(wl("matmul:M=2048,N=2048,K=2048,dtype=bf16"), trn2());
  const std::string base = "tile m=128 n=512 k=128; block m=1 n=1 k=1; order m.b n.b k.b m n k; stationary A; ";
  // [128, 512] bf16 tiles: 16 slots are 16 KiB per partition
  auto p = plan_of(s, base + "transpose A=dma_transpose; load A@k x16; load B@k x16; acc psum x8");
  const auto& n = p.nests[0];
  CHECK(n.c.load_bufs[0] == 16);
  CHECK(n.c.load_bufs[1] == 16);
  CHECK(n.c.psum_bufs == 8);
  CHECK(n.buffers[static_cast<std::size_t>(n.c.buf_load[1])].nbufs == 16);
  CHECK(n.buffers[static_cast<std::size_t>(n.c.buf_psum)].nbufs == 8);
  // one accumulation group x 8 slots fills the 8 banks; with PE transposes of A (2 more banks) it does not fit
  CHECK(reject_code(s, base + "transpose A=dma_transpose; acc psum x8") == "ok");
  CHECK(reject_code(s, base + "transpose A=pe_transpose; acc psum x8") == "psum_banks");
  const std::string base_n2 = "tile m=128 n=512 k=128; block m=1 n=2 k=1; order m.b n.b k.b m n k; stationary A; ";
  CHECK(reject_code(s, base_n2 + "transpose A=dma_transpose; acc psum x6") == "psum_banks");
  CHECK(reject_code(s, base_n2 + "transpose A=dma_transpose; acc psum x4") == "ok");
  // 16 slots of a whole-k footprint ([128, 16 x 512] bf16 = 16 KiB each) are 256 KiB: past trn2's 224 KiB
  CHECK(reject_code(s, base + "load B@n.b x16") == "sbuf_overflow");
  CHECK(reject_code(s, base + "load B@n.b x12") == "ok");
  // repair steps the depth down until it fits
  auto g = s.parse(base + "load B@n.b x16");
  REQUIRE(g);
  Rng rng(1);
  REQUIRE(s.repair(*g, rng));
  CHECK(schedule::make_plan(s, *g));
}

TEST_CASE("acc dtype=out keeps SBUF partial sums in C's dtype, bounded in k blocks for 2-byte dtypes") {
  auto s = ScheduleSpace::derive(wl("matmul:M=1024,N=1024,K=8192,dtype=bf16"), trn2());
  const std::string base = "tile m=128 n=512 k=128; order m.b n.b k.b m n k; stationary A; ";
  const auto c_buf = [](const schedule::Plan& p) {
    const auto& n = p.nests[0];
    return n.buffers[static_cast<std::size_t>(n.c.buf_c)];
  };
  // 8 k blocks of 8 tiles: fp32 partials by default, bf16 on request (half the bytes)
  const auto p32 = plan_of(s, base + "block k=8; acc sbuf x1 dtype=fp32");
  const auto p16 = plan_of(s, base + "block k=8; acc sbuf x1 dtype=out");
  CHECK(c_buf(p32).dtype == ir::DType::fp32);
  CHECK(c_buf(p16).dtype == ir::DType::bf16);
  CHECK(c_buf(p16).bytes_per_partition() * 2 == c_buf(p32).bytes_per_partition());
  CHECK(p16.nests[0].c.acc_out_dtype);
  // PSUM accumulation has no partial sums in SBUF: C's staging tile is bf16 anyway
  const auto pp = plan_of(s, base + "block k=8; acc psum x1");
  CHECK(!pp.nests[0].c.acc_out_dtype);
  CHECK(c_buf(pp).dtype == ir::DType::bf16);
  // 16 k blocks round 16 times: rejected, and repair goes back to fp32 partials
  CHECK(reject_code(s, base + "block k=4; acc sbuf x1 dtype=out") == "precision");
  auto g = s.parse(base + "block k=4; acc sbuf x1 dtype=out");
  REQUIRE(g);
  Rng rng(1);
  REQUIRE(s.repair(*g, rng));
  CHECK(s.print(*g).find("dtype=fp32") != std::string::npos);
  // an fp32 output has nothing to round: any number of k blocks
  auto s32 = ScheduleSpace::derive(wl("matmul:M=256,N=512,K=8192,dtype=fp32"), trn2());
  CHECK(reject_code(s32, base + "block k=1; acc sbuf x1 dtype=out") == "ok");
  // fp16 partial sums can overflow (65504) where the fp32 sum does not: none, at any block count
  auto s16 = ScheduleSpace::derive(wl("matmul:M=256,N=512,K=8192,dtype=fp16"), trn2());
  CHECK(reject_code(s16, base + "block k=8; acc sbuf x1 dtype=out") == "precision");
  CHECK(reject_code(s16, base + "block k=8; acc sbuf x1 dtype=fp32") == "ok");
}

TEST_CASE("acc zero and the per-block DMA transpose resolve into the plan") {
  auto s = ScheduleSpace::derive(wl("matmul:M=2048,N=2048,K=2048,dtype=bf16"), trn2());
  const auto p = plan_of(s, "transpose A=dma_transpose_block; load A@k x2; acc sbuf x2 zero=memset");
  CHECK(p.nests[0].c.acc_zero == schedule::AccZero::memset);
  // PSUM zeroed by a memset: undefined on NeuronCore-v2/v3 hardware (nki.isa.nc_matmul)
  CHECK(reject_code(s, "transpose A=dma_transpose_block; load A@k x2; acc psum x2 zero=memset") == "unsupported");
  auto s3 = ScheduleSpace::derive(wl("matmul:M=2048,N=2048,K=2048,dtype=bf16"), *target::load_target("trn3"));
  CHECK(reject_code(s3, "transpose A=dma_transpose_block; load A@k x2; acc psum x2 zero=memset") == "ok");
  CHECK(p.nests[0].c.tr[0] == schedule::Transpose::dma_transpose);
  CHECK(p.nests[0].c.tr_gran[0] == schedule::TransposeGran::block);
  const auto q = plan_of(s, "transpose A=dma_transpose; load A@k x2");
  CHECK(q.nests[0].c.tr[0] == schedule::Transpose::dma_transpose);
  CHECK(q.nests[0].c.tr_gran[0] == schedule::TransposeGran::tile);
  // a per-block DMA transpose moves 2-byte elements only, as the per-tile one
  auto s32 = ScheduleSpace::derive(wl("matmul:M=256,N=512,K=256,dtype=fp32"), trn2());
  CHECK(reject_code(s32, "transpose A=dma_transpose_block") == "unsupported");
}

TEST_CASE("the prologue gene: own by default (schedule files keep their meaning), spread resolves into the plan") {
  auto s = ScheduleSpace::derive(wl("matmul:M=2048,N=2048,K=2048,dtype=bf16"), trn2());
  CHECK(s.print(s.default_genome()).find("; prologue own") != std::string::npos);
  CHECK_FALSE(plan_of(s, "load A@k x2").nests[0].c.prologue_spread);
  CHECK(plan_of(s, "load A@k x2; prologue spread").nests[0].c.prologue_spread);
  auto g = s.parse("tile m=128; prologue spread");
  REQUIRE(g);
  CHECK(s.print(*g).find("; prologue spread") != std::string::npos);
  auto bad = s.parse("tile m=128; prologue all", "f.schedule");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().headline().find("f.schedule:1:22") != std::string::npos);
  CHECK(bad.error().headline().find("allowed: own, spread") != std::string::npos);
  // a kernel without a contraction has no such gene
  auto sv = ScheduleSpace::derive(wl("softmax:R=256,C=1024"), trn2());
  CHECK(sv.print(sv.default_genome()).find("prologue") == std::string::npos);
}

TEST_CASE("the rows gene: natural by default, interleave orders a full k block's rows; none where k has one tile") {
  auto s = ScheduleSpace::derive(wl("matmul:M=256,N=264,K=1000,dtype=bf16"), trn2());
  CHECK(s.print(s.default_genome()).find("; rows natural") != std::string::npos);
  const std::string blk = "tile k=128; block k=2; ";
  CHECK_FALSE(plan_of(s, blk + "rows natural").nests[0].c.interleave);
  const auto p = plan_of(s, blk + "rows interleave");
  CHECK(p.nests[0].c.interleave);
  // K = 1000: 8 tiles (7 of 128, then 104 rows) in blocks of 2; tile 3 is the second of block 1,
  // rows 257, 259, ...; block 3 (tiles 6 and 7) has a partial tile and keeps the natural order
  const auto& c = p.nests[0].c;
  CHECK(c.k_rows(3) == std::pair<std::int64_t, std::int64_t>{257, 2});
  CHECK(c.k_rows(4) == std::pair<std::int64_t, std::int64_t>{512, 2});
  CHECK(c.k_rows(6) == std::pair<std::int64_t, std::int64_t>{768, 1});
  CHECK(c.k_rows(7) == std::pair<std::int64_t, std::int64_t>{896, 1});
  // one tile per block orders nothing: the plan is natural whatever the gene says
  CHECK_FALSE(plan_of(s, "tile k=128; block k=1; rows interleave").nests[0].c.interleave);
  auto g = s.parse(blk + "rows interleave");
  REQUIRE(g);
  CHECK(s.print(*g).find("; rows interleave") != std::string::npos);
  CHECK(s.parse(s.print(*g)).value() == *g);
  auto bad = s.parse("tile m=128; rows shuffled", "f.schedule");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().headline().find("f.schedule:1:18") != std::string::npos);
  // the output's rows (interleave_out, interleave_all) are searched where the output's rows are
  // shorter than 1 KiB (N = 264 bf16: 528 B), in the full space only elsewhere (N = 512 bf16:
  // 1 KiB), and not with an epilogue: the plan says so
  CHECK(bad.error().headline().find("allowed: natural, interleave, interleave_out, interleave_all") != std::string::npos);
  CHECK(plan_of(s, "tile m=128 k=128; block m=2 k=2; rows interleave_out").nests[0].c.out_interleave);
  auto wide = ScheduleSpace::derive(wl("matmul:M=256,N=512,K=1000,dtype=bf16"), trn2());
  auto bad_wide = wide.parse("tile m=128; rows shuffled", "f.schedule");
  REQUIRE_FALSE(bad_wide);
  CHECK(bad_wide.error().headline().find("allowed: natural, interleave)") != std::string::npos);
  auto out = wide.parse(blk + "rows interleave_out", "o.schedule");
  REQUIRE_FALSE(out);
  CHECK(out.error().headline().find("--space full") != std::string::npos);
  // fp32 rows of 256 elements are 1 KiB: not short
  auto wide32 = ScheduleSpace::derive(wl("matmul:M=256,N=256,K=1000,dtype=fp32"), trn2());
  CHECK_FALSE(wide32.parse(blk + "rows interleave_out"));
  auto short32 = ScheduleSpace::derive(wl("matmul:M=256,N=255,K=1000,dtype=fp32"), trn2());
  CHECK(short32.parse(blk + "rows interleave_out"));
  auto full = ScheduleSpace::derive(wl("matmul:M=256,N=264,K=1000,dtype=bf16"), trn2(), schedule::DeriveOptions::full());
  const auto po = plan_of(full, "tile m=128 k=128; block m=2 k=2; rows interleave_out");
  CHECK(po.nests[0].c.out_interleave);
  CHECK_FALSE(po.nests[0].c.interleave);
  CHECK(po.nests[0].c.s_rows(1) == std::pair<std::int64_t, std::int64_t>{1, 2});
  CHECK(plan_of(full, "tile m=128 k=128; block m=2 k=2; rows interleave_all").nests[0].c.interleave);
  auto epi = ScheduleSpace::derive(wl("matmul_bias_act:M=256,N=512,K=256,act=gelu"), trn2(), schedule::DeriveOptions::full());
  auto ge = epi.parse("tile m=128 k=128; block m=2 k=2; rows interleave_out");
  REQUIRE(ge);
  auto pe = schedule::make_plan(epi, *ge);
  REQUIRE_FALSE(pe);
  CHECK(pe.error().code == "unsupported");
  CHECK(pe.error().message.find("epilogue") != std::string::npos);
  // K = 128 can be two tiles of 64: the gene is there
  auto s2 = ScheduleSpace::derive(wl("matmul:M=256,N=256,K=128,dtype=bf16"), trn2());
  CHECK(plan_of(s2, "tile k=64; block k=2; rows interleave").nests[0].c.interleave);
  // K = 32 is one tile at every tile size: no gene, and the statement says why
  auto s1 = ScheduleSpace::derive(wl("matmul:M=256,N=256,K=32,dtype=bf16"), trn2());
  CHECK(s1.print(s1.default_genome()).find("rows") == std::string::npos);
  auto none = s1.parse("rows interleave", "g.schedule");
  REQUIRE_FALSE(none);
  CHECK(none.error().headline().find("g.schedule:1:1") != std::string::npos);
  CHECK(none.error().headline().find("one tile at every tile size") != std::string::npos);
}

TEST_CASE("a shifted reduction with one output index has no schedule: its default says why and stays in the space") {
  // its only layout puts h and r into one shifted position; the plan's fix hint had no value left
  // (-1), repair wrote it into the default genome, and print threw "genome does not belong"
  const auto k = ir::parse_kernel("kernel k(X: fp32[H=64], Wt: fp32[R=3]) -> (Y: fp32[H]) {\n  Y[h] = sum(r) X[h + r] * Wt[r]\n}\n");
  REQUIRE(k);
  const auto s = ScheduleSpace::derive(*k, trn1());
  const auto d = s.default_genome();
  REQUIRE(s.genes().contains(d));
  CHECK(s.print(d).find("layout p=h f=r") != std::string::npos);
  const auto p = schedule::make_plan(s, d);
  REQUIRE_FALSE(p);
  CHECK(p.error().str().find("diagonal band") != std::string::npos);
  Rng rng(3);
  for (int i = 0; i < 50; ++i) {
    Genome g = s.genes().random(rng);
    CHECK_FALSE(s.repair(g, rng));
    CHECK(s.genes().contains(g));  // a failed repair leaves a genome of the space
  }
}

TEST_CASE("a reduction over shifted inputs offers output-index layouts, window and chunk genes; other ops do not") {
  auto s = ScheduleSpace::derive(wl("conv1d_dw:N=2,C=256,W=300,F=3,pad=1"), trn1());
  std::vector<std::string> names;
  for (std::size_t i = 0; i < s.genes().size(); ++i) names.push_back(s.genes().gene(i).name);
  CHECK(std::find(names.begin(), names.end(), "Y.window") != names.end());
  // pad: how a border tile is zeroed; `pad tile` (nl.zeros then a load) by default
  CHECK(std::find(names.begin(), names.end(), "Y.pad") != names.end());
  CHECK(s.print(s.default_genome()).find("pad tile") != std::string::npos);
  {
    auto ph = s.parse("layout p=c f=w; tile c=128 w=256; pad halo");
    REQUIRE(ph);
    CHECK(s.print(*ph).find("pad halo") != std::string::npos);
    const auto pp = schedule::make_plan(s, *ph);
    REQUIRE(pp);
    CHECK(pp->nests[0].v.pad_halo);
    CHECK_FALSE(schedule::make_plan(s, s.default_genome())->nests[0].v.pad_halo);
    CHECK_FALSE(s.parse("pad zeros"));
    CHECK(s.parse("pad zeros").error().message.find("allowed: tile, halo") != std::string::npos);
    CHECK(s.parse("frobnicate 3").error().message.find("window, chunk, hold, pad)") != std::string::npos);
    // a map stencil has it too; a kernel without shifted reads does not
    const auto blur = ScheduleSpace::derive(
        ir::parse_kernel("kernel b(X: fp32[R=64, C=64]) -> (Y: fp32[R, C]) {\n  Y[r, c] = X[r, c - 1] + X[r, c + 1]\n}\n").value(), trn1());
    CHECK(blur.print(*blur.parse("pad halo")).find("pad halo") != std::string::npos);
    const auto mm = ScheduleSpace::derive(wl("matmul:M=256,N=256,K=256,dtype=bf16"), trn1());
    for (std::size_t i = 0; i < mm.genes().size(); ++i) CHECK(mm.genes().gene(i).name.find(".pad") == std::string::npos);
    CHECK_FALSE(mm.parse("pad halo"));
  }
  CHECK(std::find(names.begin(), names.end(), "Y.chunk") != names.end());
  // the default layout keeps the tap index off the partitions of the shifted dim: valid
  const std::string d = s.print(s.default_genome());
  CHECK(d.find("window no") != std::string::npos);
  CHECK(d.find("layout p=w f=f") == std::string::npos);
  auto g = s.parse("layout p=c f=w; tile c=128 w=256; window fold; chunk 64");
  REQUIRE(g);
  CHECK(s.print(*g).find("window fold; chunk 64") != std::string::npos);
  const auto p = schedule::make_plan(s, *g);
  REQUIRE(p);
  CHECK(p->nests[0].v.fold);
  CHECK(p->nests[0].v.chunk == 64);
  CHECK_FALSE(p->nests[0].v.hold_psum);
  // hold: the filter (the operand that does not move with w) in PSUM, one [128, 3] fp32 tile per slot
  CHECK(std::find(names.begin(), names.end(), "Y.hold") != names.end());
  CHECK(s.print(*g).find("hold sbuf") != std::string::npos);
  auto h = s.parse("layout p=c f=w; tile c=128 w=256; window fold; chunk 64; hold psum; bufs 2");
  REQUIRE(h);
  CHECK(s.print(*h).find("hold psum") != std::string::npos);
  const auto ph = schedule::make_plan(s, *h);
  REQUIRE(ph);
  CHECK(ph->nests[0].v.hold_psum);
  CHECK(ph->nests[0].v.hold_arg == 1);  // X[n, c, w + f - 1] * Wt[c, f]: Wt
  const auto& hb = ph->nests[0].buffers[static_cast<std::size_t>(ph->nests[0].v.buf_hold)];
  CHECK(hb.psum);
  CHECK(hb.free_elems == 3);
  CHECK(hb.nbufs == 2);
  CHECK(ph->nests[0].psum_bytes == 2 * 3 * 4);
  CHECK_FALSE(s.parse("hold maybe"));
  CHECK(s.parse("hold maybe").error().message.find("allowed: sbuf, psum") != std::string::npos);
  // a filter of 600 fp32 taps (2400 B) does not fit one 2 KiB PSUM bank: unsupported, fixed by hold sbuf
  auto s600 = ScheduleSpace::derive(wl("conv1d_dw:N=1,C=128,W=64,F=600,pad=0"), trn1());
  auto big = s600.parse("layout p=c f=w; tile c=128 w=64; window fold; chunk 8; hold psum");
  REQUIRE(big);
  const auto rb = schedule::make_plan(s600, *big);
  REQUIRE_FALSE(rb);
  CHECK(rb.error().code == "unsupported");
  CHECK(rb.error().message.find("PSUM bank") != std::string::npos);
  CHECK(s600.genes().gene(static_cast<std::size_t>(rb.error().fix_gene)).name == "Y.hold");
  // each multiply reads [P, chunk, taps] from PSUM: at most 4096 free elements, a tile_limit fixed
  // by the chunk (with hold sbuf the same chunk is valid: SBUF allows 65536)
  auto s17 = ScheduleSpace::derive(wl("conv1d_dw:N=1,C=32,W=256,F=17,pad=8"), trn1());
  auto wide17 = s17.parse("layout p=c f=w; tile c=32 w=256; window fold; chunk 256; hold psum");
  REQUIRE(wide17);
  const auto r17 = schedule::make_plan(s17, *wide17);
  REQUIRE_FALSE(r17);
  CHECK(r17.error().code == "tile_limit");
  CHECK(r17.error().message.find("from PSUM") != std::string::npos);
  CHECK(s17.genes().gene(static_cast<std::size_t>(r17.error().fix_gene)).name == "Y.chunk");
  CHECK(s17.genes().gene(static_cast<std::size_t>(r17.error().fix_gene)).values[static_cast<std::size_t>(r17.error().fix_value)] == 128);
  CHECK(schedule::make_plan(s17, *s17.parse("layout p=c f=w; tile c=32 w=256; window fold; chunk 256; hold sbuf")));
  Rng rng17(17);
  REQUIRE(s17.repair(*wide17, rng17));
  CHECK(schedule::make_plan(s17, *wide17));
  // bad values are located errors listing the choices
  auto bad = s.parse("window maybe");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("no, yes, fold") != std::string::npos);
  // a fold too wide for one instruction (4096 columns x 32 taps > 65536 free elements on trn1)
  // is a tile_limit whose fix is the chunk
  auto s32 = ScheduleSpace::derive(wl("conv1d_dw:N=1,C=128,W=4096,F=32,pad=16"), trn1());
  auto wide = s32.parse("layout p=c f=w; tile c=128 w=4096; window fold; chunk 4096");
  REQUIRE(wide);
  const auto r = schedule::make_plan(s32, *wide);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == "tile_limit");
  CHECK(s32.genes().gene(static_cast<std::size_t>(r.error().fix_gene)).name == "Y.chunk");
  Rng rng(3);
  REQUIRE(s32.repair(*wide, rng));
  CHECK(schedule::make_plan(s32, *wide));
  // a plain reduction and a map stencil have neither gene
  for (const char* w : {"softmax:R=64,C=128"}) {
    auto t = ScheduleSpace::derive(wl(w), trn1());
    for (std::size_t i = 0; i < t.genes().size(); ++i) CHECK(t.genes().gene(i).name.find(".window") == std::string::npos);
  }
}

TEST_CASE("a dtype the target does not store is a typed value: OCP fp8 on trn1/trn2, IEEE-style fp8 everywhere", "[schedule][errors]") {
  const auto trn2 = target::load_target("trn2").value(), trn3 = target::load_target("trn3").value();
  const auto fn = wl("matmul:M=256,N=256,K=128,dtype=fp8_e4m3fn");
  for (const auto* t : {&trn1(), &trn2}) {
    const auto s = ScheduleSpace::try_derive(fn, *t);
    INFO(t->name);
    REQUIRE_FALSE(s);
    CHECK(s.error().why == schedule::Unsupported::Why::dtype);
    CHECK(s.error().code() == "dtype");
    CHECK(s.error().op.empty());
    CHECK_THAT(s.error().str(), Catch::Contains("tensor 'A' is fp8_e4m3fn, which target '" + t->name + "' does not store") &&
                                    Catch::Contains("IEEE-style fp8_e4m3 (largest finite 240, not 448)"));
  }
  CHECK(ScheduleSpace::try_derive(fn, trn3));
  CHECK(ScheduleSpace::try_derive(fn, target::load_target("host").value()));
  for (const auto* t : {&trn1(), &trn2, &trn3}) CHECK(ScheduleSpace::try_derive(wl("matmul:M=256,N=256,K=128,dtype=fp8_e4m3"), *t));
  // a cast inside a statement counts too, named at its op
  auto k = ir::parse_kernel("kernel c(x: bf16[R=128, C=64]) -> (y: bf16[R, C]) {\n  y[r, c] = cast<fp8_e4m3fn>(x[r, c])\n}\n");
  REQUIRE(k);
  const auto c = ScheduleSpace::try_derive(*k, trn2);
  REQUIRE_FALSE(c);
  CHECK(c.error().op == "y");
  CHECK_THAT(c.error().message, Catch::StartsWith("a cast is fp8_e4m3fn"));
  CHECK(ScheduleSpace::try_derive(*k, trn3));
}

TEST_CASE("a kernel the schedule space cannot handle is a typed value from try_derive; derive throws it", "[schedule][errors]") {
  // a scalar op: no loop index to lay on the partitions
  auto k = ir::parse_kernel("kernel scalar(x: fp32[]) -> (y: fp32[]) {\n  y[] = x[] * 2\n}\n", "scalar.kir");
  REQUIRE(k);
  const auto s = ScheduleSpace::try_derive(*k, trn1());
  REQUIRE_FALSE(s);
  CHECK(s.error().why == schedule::Unsupported::Why::no_layout);
  CHECK(s.error().code() == "no_layout");
  CHECK(s.error().kernel == "scalar");
  CHECK(s.error().op == "y");
  CHECK(s.error().str() == "kernel 'scalar', op 'y': has no loop index to lay out");
  // a product summed over two indices (k and l) was contraction_indices; side by side in both
  // operands they are contracted as one index (a contraction nest over kl), else it is a reduction
  auto two = ir::parse_kernel(
      "kernel two_k(A: fp32[M=64, K=32, L=4], B: fp32[K, L, N=64]) -> (C: fp32[M, N]) {\n"
      "  C[m, n] = sum(k, l) A[m, k, l] * B[k, l, n]\n"
      "}\n");
  REQUIRE(two);
  const auto two_s = ScheduleSpace::try_derive(*two, trn1());
  REQUIRE(two_s);
  CHECK(two_s->print(two_s->default_genome()).find("tile m=64 n=64 kl=128") != std::string::npos);
  auto swapped = ir::parse_kernel(
      "kernel two_k(A: fp32[M=64, K=32, L=4], B: fp32[L, K, N=64]) -> (C: fp32[M, N]) {\n"
      "  C[m, n] = sum(k, l) A[m, k, l] * B[l, k, n]\n"
      "}\n");
  REQUIRE(swapped);
  const auto swapped_s = ScheduleSpace::try_derive(*swapped, trn1());
  REQUIRE(swapped_s);
  CHECK(swapped_s->print(swapped_s->default_genome()).find("layout p=") != std::string::npos);  // a vector nest
  // the throwing convenience throws kevo::Error carrying the same reason
  try {
    (void)ScheduleSpace::derive(*k, trn1());
    FAIL("derive accepted an unsupported kernel");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == "kevo: " + s.error().str());
  }
  // a supported kernel derives through both
  const auto ok = ScheduleSpace::try_derive(wl("matmul:M=256,N=512,K=256,dtype=bf16"), trn1());
  REQUIRE(ok);
  CHECK(ok->genes().size() == ScheduleSpace::derive(wl("matmul:M=256,N=512,K=256,dtype=bf16"), trn1()).genes().size());
}

TEST_CASE("planning rejects with the one invalid-schedule type: a code, a message and a repair hint", "[schedule][errors]") {
  auto s = ScheduleSpace::derive(wl("matmul:M=256,N=512,K=256,dtype=bf16"), trn1());
  // every rejection of random genomes names a reason; at least one carries a gene to change
  std::size_t rejected = 0, hinted = 0;
  for (std::uint64_t i = 0; i < 200; ++i) {
    Rng rng(41, i);
    const Expected<schedule::Plan, kevo::Invalid> p = schedule::make_plan(s, s.genes().random(rng));
    if (p) continue;
    ++rejected;
    CHECK_FALSE(p.error().code.empty());
    CHECK_FALSE(p.error().message.empty());
    CHECK(p.error().str() == p.error().code + ": " + p.error().message);
    if (p.error().has_fix()) {
      ++hinted;
      CHECK(static_cast<std::size_t>(p.error().fix_gene) < s.genes().size());
      CHECK(static_cast<std::size_t>(p.error().fix_value) < s.genes().gene(static_cast<std::size_t>(p.error().fix_gene)).choices());
    }
  }
  CHECK(rejected > 0);
  CHECK(hinted > 0);
}

namespace {
// A chain of `n` elementwise maps: T0 = X * a + b, T1 = T0 * a + b, ..., Y = T(n-2) + 1.
ir::Kernel chain_kernel(int n) {
  std::string text = "kernel chain(X: fp32[R=256, C=512]) -> (Y: fp32[R, C]) {\n";
  std::string prev = "X";
  for (int i = 0; i + 1 < n; ++i) {
    text += "  T" + std::to_string(i) + "[r, c] = " + prev + "[r, c] * 1.0001 + 0.5\n";
    prev = "T" + std::to_string(i);
  }
  text += "  Y[r, c] = " + prev + "[r, c] + 1\n}\n";
  auto k = ir::parse_kernel(text);
  REQUIRE(k);
  return *k;
}
}  // namespace

TEST_CASE("repair fixes as many nests as a long chain has: random genomes of a 1000-op chain plan", "[schedule][repair]") {
  // Drawn at random, a 1,000-op chain has hundreds of nests that each need a fix (one per plan);
  // a fixed bound of 64 fixes left every genome unrepaired, and a search evaluated nothing.
  auto s = ScheduleSpace::derive(chain_kernel(1000), target::load_target("trn2").value());
  for (std::uint64_t i = 0; i < 3; ++i) {
    Rng rng(7, i);
    Genome g = s.genes().random(rng);
    REQUIRE(s.repair(g, rng));
    const auto p = schedule::make_plan(s, g);
    INFO(i << ": " << (p ? std::string() : p.error().str()));
    CHECK(p);
  }
}

TEST_CASE("a temp read by a later nest is stored; a temp read only inside its nest is not", "[schedule]") {
  // planning asks, per nest, which of its outputs ops outside it read (SpaceImpl::readers)
  auto s = ScheduleSpace::derive(chain_kernel(4), target::load_target("trn2").value());
  const auto stored = [&](const char* text, const std::string& tensor) {
    auto g = s.parse(text);
    REQUIRE(g);
    const auto p = schedule::make_plan(s, *g);
    REQUIRE(p);
    for (const auto& n : p->nests)
      for (std::size_t i = 0; i < n.tc.ops.size(); ++i)
        if (s.kernel().ops[static_cast<std::size_t>(n.tc.ops[i])].out == tensor) return static_cast<bool>(n.tc.store[i]);
    FAIL("no op writes " << tensor);
    return false;
  };
  CHECK_FALSE(stored("fuse T1=yes T2=yes Y=yes", "T1"));  // one nest: T1 stays on chip
  CHECK(stored("fuse T1=yes T2=no Y=yes", "T1"));         // T2's nest reads T1 from HBM
  CHECK_FALSE(stored("fuse T1=yes T2=no Y=yes", "T0"));   // read by T1, in T0's nest
  CHECK(stored("fuse T1=yes T2=no Y=yes", "Y"));          // an output is always stored
}

// ScheduleSpace::expert_genomes: the rule-written templates of a contraction (three: wide blocks,
// tall blocks, the moving operand streamed once by k block) where a kernel has one, every one of them planning, none the default; none where
// no rule applies.
TEST_CASE("expert schedules: valid, distinct from the default, written for contractions only", "[schedule][experts]") {
  const auto trn2 = target::load_target("trn2").value();
  for (const auto& w : all_workloads()) {
    INFO(w);
    const auto k = wl(w);
    auto s = ScheduleSpace::derive(k, trn2);
    const auto& ex = s.expert_genomes();
    // a contraction, or a column sum (a contraction nest against implicit ones: a stationary gene)
    bool contraction = std::any_of(k.ops.begin(), k.ops.end(), [](const ir::Op& o) { return o.kind() == ir::OpKind::contract; });
    for (std::size_t i = 0; i < s.genes().size(); ++i)
      contraction = contraction || s.genes().gene(i).name.find(".stationary") != std::string::npos;
    if (!contraction) {
      CHECK(ex.empty());
      continue;
    }
    CHECK(!ex.empty());
    for (std::size_t i = 0; i < ex.size(); ++i) {
      INFO(s.print(ex[i]));
      CHECK(schedule::make_plan(s, ex[i]));
      CHECK(ex[i] != s.default_genome());
      for (std::size_t j = 0; j < i; ++j) CHECK(ex[i] != ex[j]);
    }
  }
  // a plain matmul gets the templates as written: the first with A by row at its m block
  auto s = ScheduleSpace::derive(wl("matmul:M=2048,N=2048,K=2048,dtype=bf16"), trn2);
  REQUIRE(s.expert_genomes().size() == 3);
  const std::string t = s.print(s.expert_genomes()[0]);
  CHECK_THAT(t, Catch::Contains("block m=4 n=2 k=4; order m.b n.b k.b k m n; stationary A; transpose A=dma_transpose_block; "
                                "load A@m.b x2 dma=row q=4; load B@n.b x2 dma=row q=4"));
  CHECK_THAT(t, Catch::Contains("evict alternate; prologue spread"));
  CHECK_THAT(t, Catch::Contains("rows interleave"));
  CHECK_THAT(s.print(s.expert_genomes()[1]), Catch::Contains("block m=8 n=1 k=8; order n.b m.b k.b k m n"));
  // the third: k blocks outside the m blocks, B streamed once a k block at a time, fp32 partial
  // sums in SBUF (here repaired to single buffers: 2048 x 2048 fp32 partial sums fill most of SBUF)
  const std::string t3 = s.print(s.expert_genomes()[2]);
  CHECK_THAT(t3, Catch::Contains("block m=2 n=8 k=4; order n.b k.b m.b k m n; stationary A; "
                                 "transpose A=dma_transpose_block; load A@n.b x1 dma=tile q=1; load B@k.b x"));
  CHECK_THAT(t3, Catch::Contains("dma=region q=2; acc sbuf x"));
  CHECK_THAT(t3, Catch::Contains("dtype=fp32 zero=start"));
}

// A sum across partitions (a column sum: the reduced index is not the access's innermost) roots a
// contraction nest against implicit ones, which have no genes of their own and no load statement;
// a row sum stays a Vector-engine reduction.
TEST_CASE("a column sum is a contraction against implicit ones; a row sum is not") {
  const auto t = target::load_target("trn2").value();
  const auto parse = [](const char* text) {
    auto k = ir::parse_kernel(text);
    INFO(text);
    REQUIRE(k);
    return *k;
  };
  const auto col = parse("kernel colsum(X: fp32[R=2048, C=512]) -> (S: fp32[C]) {\n  S[c] = sum(r) X[r, c]\n}\n");
  const auto s = ScheduleSpace::derive(col, t);
  std::vector<std::string> names;
  for (std::size_t i = 0; i < s.genes().size(); ++i) names.push_back(s.genes().gene(i).name);
  const auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  CHECK(has("S.stationary"));
  CHECK(has("S.load.X"));
  CHECK_FALSE(has("S.load.ones"));
  CHECK_FALSE(has("S.bufs.ones"));
  CHECK_FALSE(has("S.transpose.X"));  // X's innermost index c is a free index: no transpose
  const auto& st = s.genes().gene(static_cast<std::size_t>(std::find(names.begin(), names.end(), "S.stationary") - names.begin()));
  CHECK(st.labels == std::vector<std::string>{"ones", "X"});
  const std::string def = s.print(s.default_genome());
  INFO(def);
  CHECK(def.find("stationary ones") != std::string::npos);
  CHECK(def.find("load X@") != std::string::npos);
  CHECK(def.find("load ones") == std::string::npos);
  // every printed genome parses back to itself
  Rng rng(3);
  for (int i = 0; i < 50; ++i) {
    const auto g = s.genes().random(rng);
    const auto back = s.parse(s.print(g));
    INFO(s.print(g));
    REQUIRE(back);
    CHECK(s.print(*back) == s.print(g));
  }
  // the ones cannot be loaded: a located error naming them
  const auto bad = s.parse("stationary X; load ones@root x1");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("'ones' is the implicit ones of the column sum S") != std::string::npos);
  // a tensor named `ones` keeps its name; the implicit operand then reads `ones`, the tensor `ones.2`
  const auto named = ScheduleSpace::derive(
      parse("kernel c2(ones: bf16[R=256, C=256]) -> (S: bf16[C]) {\n  S[c] = sum(r) ones[r, c]\n}\n"), t);
  CHECK(named.print(named.default_genome()).find("load ones.2@") != std::string::npos);
  // a column mean too (scaled by 1 / R after the sum)
  const auto mean = ScheduleSpace::derive(
      parse("kernel colmean(X: fp32[R=256, C=512]) -> (S: fp32[C]) {\n  S[c] = mean(r) X[r, c]\n}\n"), t);
  CHECK(mean.print(mean.default_genome()).find("stationary ones") != std::string::npos);
  // a row sum, a sum over two indices, a column max and a sum of an expression stay Vector-engine reductions
  for (const char* text : {"kernel rowsum(X: fp32[R=256, C=512]) -> (S: fp32[R]) {\n  S[r] = sum(c) X[r, c]\n}\n",
                           "kernel total(X: fp32[R=256, C=512]) -> (S: fp32[]) {\n  S[] = sum(r, c) X[r, c]\n}\n",
                           "kernel colmax(X: fp32[R=256, C=512]) -> (S: fp32[C]) {\n  S[c] = max(r) X[r, c]\n}\n",
                           "kernel colexp(X: fp32[R=256, C=512]) -> (S: fp32[C]) {\n  S[c] = sum(r) exp(X[r, c])\n}\n"}) {
    const auto v = ScheduleSpace::derive(parse(text), t);
    INFO(text);
    for (std::size_t i = 0; i < v.genes().size(); ++i) CHECK(v.genes().gene(i).name.find(".stationary") == std::string::npos);
  }
}

TEST_CASE("a vector nest that reads a contiguous index down the partitions chooses how its loads transpose") {
  const auto t = target::load_target("trn2").value();
  const auto derive = [&](const char* text) {
    auto k = ir::parse_kernel(text);
    INFO(text);
    REQUIRE(k);
    return ScheduleSpace::derive(*k, t);
  };
  const auto gene_of = [](const ScheduleSpace& s, const std::string& n) -> const Gene* {
    for (std::size_t i = 0; i < s.genes().size(); ++i)
      if (s.genes().gene(i).name == n) return &s.genes().gene(i);
    return nullptr;
  };
  // a column max: offered, and by default a DMA transpose (2-byte) or the PE array (4-byte)
  const auto b16 = derive("kernel colmax(X: bf16[R=2048, C=512]) -> (S: bf16[C]) {\n  S[c] = max(r) X[r, c]\n}\n");
  const Gene* g = gene_of(b16, "S.transpose");
  REQUIRE(g);
  CHECK(g->labels == std::vector<std::string>{"strided", "dma_transpose", "pe_transpose"});
  CHECK(b16.print(b16.default_genome()).find("layout p=c f=r; tile c=128 r=") != std::string::npos);
  CHECK(b16.print(b16.default_genome()).find("transpose dma_transpose") != std::string::npos);
  const auto f32 = derive("kernel colmax(X: fp32[R=2048, C=512]) -> (S: fp32[C]) {\n  S[c] = max(r) X[r, c]\n}\n");
  CHECK(f32.print(f32.default_genome()).find("transpose pe_transpose") != std::string::npos);
  // a DMA transpose of 4-byte elements is invalid, the fix the PE array
  auto dma32 = f32.parse("layout p=c f=r; transpose dma_transpose");
  REQUIRE(dma32);
  const auto plan = schedule::make_plan(f32, *dma32);
  REQUIRE_FALSE(plan);
  CHECK(plan.error().code == "unsupported");
  CHECK(f32.genes().gene(static_cast<std::size_t>(plan.error().fix_gene)).name == "S.transpose");
  CHECK(plan.error().fix_value == 2);
  CHECK(plan.error().message.find("dma_transpose moves 2-byte elements only; X is fp32") != std::string::npos);
  // a one-index map has no free index to transpose against: no gene
  CHECK_FALSE(gene_of(derive("kernel scale(X: bf16[R=256]) -> (S: bf16[R]) {\n  S[r] = X[r] * 2\n}\n"), "S.transpose"));
  // printed genomes parse back to themselves; a bad value names the allowed ones
  Rng rng(4);
  for (int i = 0; i < 50; ++i) {
    const auto r = b16.genes().random(rng);
    const auto back = b16.parse(b16.print(r));
    INFO(b16.print(r));
    REQUIRE(back);
    CHECK(b16.print(*back) == b16.print(r));
  }
  const auto bad = b16.parse("transpose pe");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("bad value 'pe' for transpose") != std::string::npos);
}

TEST_CASE("a reduced index may run down the partitions; where no output index can, it is the default") {
  const auto t = target::load_target("trn2").value();
  const auto derive = [&](const char* text) {
    auto k = ir::parse_kernel(text);
    INFO(text);
    REQUIRE(k);
    return ScheduleSpace::derive(*k, t);
  };
  const auto layouts = [](const ScheduleSpace& s, const std::string& n) {
    for (std::size_t i = 0; i < s.genes().size(); ++i)
      if (s.genes().gene(i).name == n) return s.genes().gene(i).labels;
    return std::vector<std::string>{};
  };
  // a whole sum: rows down the partitions first (before, one partition held everything)
  const auto total = derive("kernel total(X: fp32[R=2048, C=2048]) -> (S: fp32[]) {\n  S[] = sum(r, c) X[r, c]\n}\n");
  CHECK(layouts(total, "S.layout") == std::vector<std::string>{"r,c", "c,r", "-,c", "-,r"});
  CHECK(total.print(total.default_genome()).find("layout p=r f=c; tile r=128 c=2048") != std::string::npos);
  const auto plan = schedule::make_plan(total, total.default_genome());
  REQUIRE(plan);
  CHECK(plan->nests[0].v.p_reduced);
  // a column max: the output's index first (a transposed load), the reduced one last
  const auto cm = derive("kernel cm(X: fp32[R=2048, C=512]) -> (S: fp32[C]) {\n  S[c] = max(r) X[r, c]\n}\n");
  CHECK(layouts(cm, "S.layout") == std::vector<std::string>{"c,r", "r,c"});
  // shifted reductions keep their layouts (windows and folds assume an output index down the partitions)
  const auto conv = derive(
      "kernel c1(X: fp32[C=64, W=512], K: fp32[C, F=3]) -> (Y: fp32[C, W]) {\n  Y[c, w] = sum(f) X[c, w + f] * K[c, f]\n}\n");
  REQUIRE_FALSE(layouts(conv, "Y.layout").empty());
  for (const auto& l : layouts(conv, "Y.layout")) CHECK(l.rfind("f,", 0) != 0);
}
