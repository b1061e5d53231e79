#include <catch2/catch.hpp>
#include <cstdlib>

#include "kevo/ir/workloads.hpp"
#include "kevo/schedule.hpp"
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
      "eltwise:R=128,C=512,ops=add+gelu+mul"};
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

TEST_CASE("random genomes of every workload print and re-parse identically") {
  const int n = std::getenv("KEVO_ASAN") ? 20 : 200;
  for (const auto& w : all_workloads()) {
    INFO(w);
    auto s = ScheduleSpace::derive(wl(w), trn1());
    for (int i = 0; i < n; ++i) {
      Rng rng(7, static_cast<std::uint64_t>(i));
      auto g = s.genes().random(rng);
      const auto text = s.print(g);
      auto back = s.parse(text);
      INFO(text);
      REQUIRE(back);
      REQUIRE(*back == g);
    }
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
  CHECK(bad(s, "evict gpsimd").message == "bad value 'gpsimd' for evict (allowed: vector, scalar)");
}

TEST_CASE("multi-nest kernels use nest headers, and fuse/engine name ops") {
  auto s = ScheduleSpace::derive(wl("softmax:R=256,C=1024"), trn1());
  auto g = s.parse("fuse e=no\nnest e: layout p=r f=c; tile c=512\nengine s=gpsimd");
  REQUIRE(g);
  CHECK(s.print(*g).find("fuse e=no") != std::string::npos);
  CHECK(s.print(*g).find("nest e: layout p=r f=c; tile r=128 c=512") != std::string::npos);
  CHECK(bad(s, "nest q: bufs 2").message == "unknown nest 'q' (nests: mx, e, s, Y)");
  CHECK(bad(s, "fuse mx=yes").message == "'mx' cannot fuse into the nest before it");
  CHECK(bad(s, "nest mx: layout p=c f=r").message.find("bad layout p=c f=r for nest mx (allowed: p=r f=c)") != std::string::npos);
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
