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
