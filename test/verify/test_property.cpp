// The property the lowering is trusted on: for random (workload at a small shape, random valid
// genome) pairs, the lowered program interpreted in program order AND in the adversarial order
// matches ir's reference evaluator. Thousands of pairs in Release; fewer under KEVO_ASAN.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "kevo/core/rng.hpp"
#include "kevo/ir/builder.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/ir/workloads.hpp"
#include "kevo/lower/lower.hpp"
#include "kevo/schedule/detail/plan.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/target/target.hpp"
#include "kevo/verify.hpp"

namespace {

std::int64_t pick(kevo::Rng& r, std::initializer_list<std::int64_t> v) {
  return *(v.begin() + static_cast<std::ptrdiff_t>(r.below(v.size())));
}
std::string pick_s(kevo::Rng& r, std::initializer_list<const char*> v) {
  return *(v.begin() + static_cast<std::ptrdiff_t>(r.below(v.size())));
}

// A random small instance of workload `name`, or "" for a workload this test does not know.
std::string random_spec(const std::string& name, kevo::Rng& r) {
  const std::string dt = pick_s(r, {"bf16", "fp32", "bf16", "fp32", "fp16", "fp8_e4m3"});
  auto dim = [&] { return pick(r, {16, 32, 48, 64, 96, 130}); };
  if (name == "matmul")
    return fmt::format("matmul:M={},N={},K={},dtype={},layout={}", dim(), dim(), dim(), dt, pick_s(r, {"nn", "tn", "nt"}));
  if (name == "bmm") return fmt::format("bmm:B={},M={},N={},K={},dtype={}", pick(r, {1, 2, 3}), dim(), dim(), dim(), dt);
  if (name == "matmul_bias_act")
    return fmt::format("matmul_bias_act:M={},N={},K={},dtype={},act={}", dim(), dim(), dim(), dt,
                       pick_s(r, {"gelu", "gelu_erf", "relu", "silu", "none"}));
  if (name == "softmax") return fmt::format("softmax:R={},C={},dtype={}", dim(), pick(r, {16, 100, 256, 520}), dt);
  if (name == "layernorm") return fmt::format("layernorm:R={},C={},dtype={}", dim(), pick(r, {16, 100, 256, 512}), dt);
  if (name == "rmsnorm") return fmt::format("rmsnorm:R={},C={},dtype={}", dim(), pick(r, {16, 100, 256, 512}), dt);
  if (name == "attention")
    return fmt::format("attention:B=1,H={},S={},D={},causal={},dtype={}", pick(r, {1, 2}), pick(r, {16, 32, 48, 65}),
                       pick(r, {16, 32, 64}), pick(r, {0, 1}), dt);
  if (name == "swiglu") return fmt::format("swiglu:M={},D={},F={},dtype={}", dim(), pick(r, {32, 64, 128}), dim(), dt);
  if (name == "eltwise") {
    std::string ops;
    const int n = 1 + static_cast<int>(r.below(3));
    for (int i = 0; i < n; ++i) {
      if (i) ops += '+';
      ops += pick_s(r, {"add", "sub", "mul", "max", "min", "exp", "tanh", "gelu", "gelu_erf", "silu",
                                        "relu", "sigmoid", "square", "abs", "neg"});
    }
    return fmt::format("eltwise:R={},C={},ops={},dtype={}", dim(), dim(), ops, dt);
  }
  return "";
}

struct Failure {
  std::string spec, target, schedule, message;
};

}  // namespace

TEST_CASE("random workloads under random valid genomes lower to programs that match the reference",
          "[verify][property]") {
  const bool asan = std::getenv("KEVO_ASAN") != nullptr;
  int want_pairs = asan ? 300 : 3000;
  if (const char* n = std::getenv("KEVO_PROPERTY_PAIRS")) want_pairs = std::max(1, std::atoi(n));
  std::vector<kevo::target::Target> targets;
  for (const char* t : {"trn1", "trn2", "trn3"}) {
    auto tt = kevo::target::load_target(t);
    REQUIRE(tt.has_value());
    targets.push_back(*tt);
  }
  std::vector<std::string> names;
  for (const auto& w : kevo::ir::workloads()) names.push_back(w.name);

  kevo::Rng rng(20261129);
  int pairs = 0, attempts = 0, invalid = 0, underivable = 0, flash_pairs = 0, online_pairs = 0, out_pe_pairs = 0, pair_loads = 0, region_transposes = 0,
      k_interleaved = 0, out_interleaved = 0;
  std::map<std::string, int> per_workload;
  std::map<std::string, int> invalid_codes;
  std::vector<Failure> failures;
  double lower_s = 0, check_s = 0, slowest = 0, slowest_lower = 0;
  std::string slowest_lower_what;
  std::size_t instrs = 0;
  std::string slowest_what;
  while (pairs < want_pairs && attempts < want_pairs * 20) {
    ++attempts;
    const std::string& name = names[rng.below(names.size())];
    const std::string spec = random_spec(name, rng);
    if (spec.empty()) continue;
    auto k = kevo::ir::workload(spec);
    INFO(spec);
    REQUIRE(k.has_value());
    const auto& target = targets[rng.below(targets.size())];
    // every other instance in the full space (DeriveOptions::full: dma=pair, dma_transpose_region)
    auto space = kevo::schedule::ScheduleSpace::try_derive(
        *k, target, attempts % 2 == 0 ? kevo::schedule::DeriveOptions::full() : kevo::schedule::DeriveOptions{});
    if (!space) {
      ++underivable;
      continue;
    }
    // a few random genomes per instance, each lowered and (when valid) checked
    for (int g = 0; g < 3 && pairs < want_pairs; ++g) {
      kevo::Genome genome = space->genes().random(rng);
      space->repair(genome, rng);
      const auto t0 = std::chrono::steady_clock::now();
      auto prog = kevo::lower::lower(*space, genome);
      const auto t1 = std::chrono::steady_clock::now();
      const double lt = std::chrono::duration<double>(t1 - t0).count();
      lower_s += lt;
      if (lt > slowest_lower) {
        slowest_lower = lt;
        slowest_lower_what = fmt::format("{} on {} ({} instrs, {:.2f} s): {}", spec, target.name,
                                         prog ? prog->instrs.size() : 0, lt, space->print(genome));
      }
      if (!prog) {
        ++invalid;
        ++invalid_codes[prog.error().code];
        continue;
      }
      ++pairs;
      ++per_workload[name];
      if (auto plan = kevo::schedule::make_plan(*space, genome))
        for (const auto& n : plan->nests) {
          flash_pairs += n.kind == kevo::schedule::NestKind::flash;
          online_pairs += n.kind == kevo::schedule::NestKind::online;
          out_pe_pairs += n.kind == kevo::schedule::NestKind::contract && n.c.store_tr;
          if (n.kind != kevo::schedule::NestKind::contract) continue;
          k_interleaved += n.c.interleave;
          out_interleaved += n.c.out_interleave;
          for (int q = 0; q < 2; ++q) {
            pair_loads += n.c.load_dma[static_cast<std::size_t>(q)] == kevo::schedule::DmaGran::pair;
            region_transposes += n.c.tr_gran[static_cast<std::size_t>(q)] == kevo::schedule::TransposeGran::region;
          }
        }
      const auto r = kevo::verify::check_program(*k, *prog, rng(), 1);
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
      check_s += dt;
      instrs += prog->instrs.size();
      if (dt > slowest) {
        slowest = dt;
        slowest_what = fmt::format("{} ({} instrs, {:.2f} s)", spec, prog->instrs.size(), dt);
      }
      if (!r.ok) failures.push_back({spec, target.name, space->print(genome), r.message});
    }
  }
  std::string summary = fmt::format("{} valid pairs checked ({} attempts, {} invalid genomes, {} kernels not derivable)\n",
                                    pairs, attempts, invalid, underivable);
  summary += fmt::format("lowering {:.2f} s, checking {:.2f} s, {} instructions; slowest check {}\n", lower_s, check_s,
                         instrs, slowest_what);
  summary += fmt::format("slowest lowering {}\n", slowest_lower_what);
  for (const auto& [w, n] : per_workload) summary += fmt::format("  {}: {}\n", w, n);
  summary += fmt::format("  attention as one flash nest: {}\n", flash_pairs);
  summary += fmt::format("  softmax as one online nest: {}\n", online_pairs);
  summary += fmt::format("  contractions with the output transposed on chip (stationary .. out=pe_transpose): {}\n", out_pe_pairs);
  summary += fmt::format("  operand loads in pairs of tiles: {}, 3-D transposes per footprint: {}\n", pair_loads, region_transposes);
  summary += fmt::format("  rows interleaved: k {}, output {}\n", k_interleaved, out_interleaved);
  for (const auto& [c, n] : invalid_codes) summary += fmt::format("  invalid {}: {}\n", c, n);
  summary += fmt::format("{} failures\n", failures.size());
  for (std::size_t i = 0; i < failures.size() && i < 8; ++i)
    summary += fmt::format("FAIL {} on {}\n  schedule: {}\n  {}\n", failures[i].spec, failures[i].target,
                           failures[i].schedule, failures[i].message);
  if (std::getenv("KEVO_PROPERTY_VERBOSE")) fmt::print("{}", summary);
  INFO(summary);
  CHECK(pairs >= want_pairs / 2);
  // random genomes turn flash attention on about half the time (attention is about 1/9 of the
  // pairs; counted against the attention pairs drawn, so another draw of workloads does not move it)
  if (want_pairs >= 300) CHECK(per_workload["attention"] >= want_pairs / 40);
  if (want_pairs >= 300) CHECK(flash_pairs * 4 >= per_workload["attention"]);
  // and the online softmax nest about half the time on softmax
  if (want_pairs >= 300) CHECK(per_workload["softmax"] >= want_pairs / 40);
  if (want_pairs >= 300) CHECK(online_pairs * 4 >= per_workload["softmax"]);
  // a third of the stationary choices of a contraction whose output is laid out like an operand
  if (want_pairs >= 300) CHECK(out_pe_pairs >= want_pairs / 40);
  // the full space's structures are drawn too
  if (want_pairs >= 300) CHECK(pair_loads >= want_pairs / 200);
  if (want_pairs >= 300) CHECK(region_transposes >= want_pairs / 200);
  if (want_pairs >= 300) CHECK(k_interleaved >= want_pairs / 200);
  if (want_pairs >= 300) CHECK(out_interleaved >= want_pairs / 200);
  REQUIRE(failures.empty());
}

// The oracle's own power: in real lowered programs, dropping every dependency edge of one random
// instruction must usually change a result under the adversarial order. (Not always: a load that
// refills a buffer with the very data it already holds -- a tile reloaded for the next block --
// has edges no order can expose, and they are harmless to the values.)
TEST_CASE("dropping the dependency edges of an instruction in lowered programs is caught by check_program",
          "[verify][property]") {
  const char* specs[] = {"matmul:M=130,N=96,K=200,dtype=fp32,layout=tn", "bmm:B=2,M=64,N=64,K=64,dtype=fp32",
                         "matmul_bias_act:M=64,N=130,K=64,dtype=fp32,act=gelu", "softmax:R=130,C=100,dtype=fp32",
                         "layernorm:R=64,C=256,dtype=fp32", "rmsnorm:R=32,C=520,dtype=fp32",
                         "attention:B=1,H=2,S=65,D=32,causal=1,dtype=fp32", "swiglu:M=64,D=64,F=96,dtype=fp32",
                         "eltwise:R=48,C=64,ops=add+silu+max,dtype=fp32"};
  auto target = kevo::target::load_target("trn2");
  REQUIRE(target.has_value());
  kevo::Rng rng(3);
  int tried = 0, caught = 0;
  const int n = std::getenv("KEVO_ASAN") ? 40 : 150;
  for (int it = 0; it < n; ++it) {
    const char* spec = specs[rng.below(std::size(specs))];
    auto k = kevo::ir::workload(spec);
    REQUIRE(k.has_value());
    const auto space = kevo::schedule::ScheduleSpace::derive(*k, *target);
    kevo::Genome g = space.genes().random(rng);
    space.repair(g, rng);
    auto p = kevo::lower::lower(space, g);
    if (!p) continue;
    INFO(spec << "\n" << space.print(g));
    REQUIRE(kevo::verify::check_program(*k, *p, it, 1).ok);
    std::vector<std::size_t> with_preds;
    for (std::size_t i = 0; i < p->instrs.size(); ++i)
      if (!p->preds(i).empty()) with_preds.push_back(i);
    if (with_preds.empty()) continue;
    const std::size_t victim = with_preds[rng.below(with_preds.size())];
    kevo::lower::TileProgram q = *p;
    q.deps.clear();
    q.dep_begin.assign(1, 0);
    for (std::size_t i = 0; i < p->instrs.size(); ++i) {
      if (i != victim)
        for (auto d : p->preds(i)) q.deps.push_back(d);
      q.dep_begin.push_back(static_cast<std::uint32_t>(q.deps.size()));
    }
    ++tried;
    caught += !kevo::verify::check_program(*k, q, it, 1).ok;
  }
  INFO(caught << " of " << tried << " mutants caught");
  REQUIRE(tried >= n / 2);
  REQUIRE(caught >= tried * 85 / 100);
}

TEST_CASE("LayerNorm through bn_stats/bn_aggr matches the reference at every chunking and dtype", "[verify][property]") {
  int checked = 0;
  for (const char* dt : {"fp32", "bf16"})
    for (int C : {16, 100, 512, 513, 1100, 1536}) {
      const std::string spec = fmt::format("layernorm:R=72,C={},dtype={}", C, dt);
      auto k = kevo::ir::workload(spec);
      REQUIRE(k);
      for (const char* tn : {"trn1", "trn2"}) {
        auto t = kevo::target::load_target(tn);
        REQUIRE(t);
        const auto space = kevo::schedule::ScheduleSpace::derive(*k, *t);
        for (const char* extra : {"", "; nest mu: tile r=32; bufs 1", "; engine xc=gpsimd Y=scalar"}) {
          auto g = space.parse(std::string("stats var=bn") + extra);
          REQUIRE(g);
          auto p = kevo::lower::lower(space, *g);
          INFO(spec << " on " << tn << "\n" << space.print(*g));
          if (!p) FAIL(p.error().str());
          REQUIRE(std::count_if(p->instrs.begin(), p->instrs.end(),
                                [](const auto& in) { return in.op == kevo::lower::Opcode::bn_aggr; }) > 0);
          const auto r = kevo::verify::check_program(*k, *p, 11, 2);
          if (!r.ok) FAIL(r.message);
          ++checked;
        }
      }
    }
  CHECK(checked == 72);
}

TEST_CASE("two variances of one mean: the first takes bn_stats, the second reduces, both match the reference",
          "[verify][property]") {
  using namespace kevo::ir;
  KernelBuilder b("twovar");
  b.dim("R", 64).dim("C", 600);
  b.input("X", DType::fp32, {"R", "C"}).output("v1", DType::fp32, {"R"}).output("v2", DType::fp32, {"R"});
  b.output("mu", DType::fp32, {"R"});
  b.reduce(ReduceOp::mean, "mu", {"r"}, {"c"}, access("X", {"r", "c"}));
  b.map("xc", {"r", "c"}, access("X", {"r", "c"}) - access("mu", {"r"}));
  b.reduce(ReduceOp::mean, "v1", {"r"}, {"c"}, unary(Fn::square, access("xc", {"r", "c"})));
  b.reduce(ReduceOp::mean, "v2", {"r"}, {"c"}, access("xc", {"r", "c"}) * access("xc", {"r", "c"}));
  const auto k = b.build_or_throw();
  auto t = kevo::target::load_target("trn2");
  REQUIRE(t);
  const auto space = kevo::schedule::ScheduleSpace::derive(k, *t);
  auto g = space.parse("stats v1=bn v2=bn");
  REQUIRE(g);
  auto p = kevo::lower::lower(space, *g);
  REQUIRE(p);
  CHECK(std::count_if(p->instrs.begin(), p->instrs.end(), [](const auto& in) { return in.op == kevo::lower::Opcode::bn_aggr; }) == 1);
  const auto r = kevo::verify::check_program(k, *p, 5, 2);
  if (!r.ok) FAIL(r.message);
}

// select picks a branch; it does not blend them. A NaN or an infinity in the branch not taken
// (log of a negative, exp of a large value) must not reach the result, under any schedule: the
// guarded log, a guarded max over a row, and an overflow on the side not taken. These were
// lowered as a*c + b*(1-c), which made them NaN (every schedule failed verification).
TEST_CASE("select keeps NaN and infinity of the branch not taken out of the result under random schedules",
          "[verify][property]") {
  const char* kernels[] = {
      "kernel safelog(X: fp32[R=40, C=72]) -> (Y: fp32[R, C]) {\n  Y[r, c] = select(X[r, c] > 0.0, log(X[r, c]), 0.0)\n}\n",
      "kernel safemax(X: fp32[R=40, C=72]) -> (Y: fp32[R]) {\n  t[r, c] = select(X[r, c] > 0.0, log(X[r, c]), -inf)\n"
      "  Y[r] = max(c) t[r, c]\n}\n",
      "kernel sideinf(X: fp32[R=40, C=72]) -> (Y: bf16[R, C]) {\n  Y[r, c] = select(X[r, c] > 0.5, X[r, c], exp(X[r, c] * 100.0))\n}\n",
      "kernel bothsides(X: bf16[R=40, C=72], Z: fp32[R, C]) -> (Y: fp32[R, C]) {\n"
      "  Y[r, c] = select(X[r, c] < 0.0, sqrt(X[r, c] * -1.0), log(Z[r, c]))\n}\n",
      // a condition that is not a comparison (relu: 0 for the negatives) is compared with zero
      "kernel notcmp(X: fp32[R=40, C=72]) -> (Y: fp32[R, C]) {\n  Y[r, c] = select(relu(X[r, c]), log(X[r, c]), 0.0)\n}\n",
  };
  auto t = kevo::target::load_target("trn2");
  REQUIRE(t);
  kevo::Rng rng(1205);
  for (const char* text : kernels) {
    auto k = kevo::ir::parse_kernel(text);
    REQUIRE(k);
    INFO(text);
    const auto space = kevo::schedule::ScheduleSpace::derive(*k, *t);
    int checked = 0;
    for (int i = 0; i < 24; ++i) {
      kevo::Genome g = i == 0 ? space.default_genome() : space.genes().random(rng);
      space.repair(g, rng);
      auto p = kevo::lower::lower(space, g);
      if (!p) continue;
      INFO(space.print(g));
      CHECK(std::count_if(p->instrs.begin(), p->instrs.end(), [](const auto& in) {
              return in.op == kevo::lower::Opcode::tensor_copy_predicated;
            }) > 0);
      const auto r = kevo::verify::check_program(*k, *p, 7 + static_cast<std::uint64_t>(i), 2);
      if (!r.ok) FAIL(r.message);
      ++checked;
    }
    CHECK(checked >= 12);
  }
}
