#include <catch2/catch.hpp>
#include <cstdlib>

#include "kevo/ir/workloads.hpp"
#include "kevo/lower/lower.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/target/target.hpp"
#include "kevo/runner/cpu.hpp"
#include "programs.hpp"

using namespace kevo;
using kevo::lower::Memory;
using kevo::lower::Opcode;
using kevo::target::Engine;

namespace {

bool asan() { return std::getenv("KEVO_ASAN") != nullptr; }

// C[M, N] = A[K, M]^T B[K, N] (matmul layout=tn, fp32) as a tile program. `hoisted`: per m tile
// the whole K column of A is loaded once and per (m, n) the K column of B; otherwise every
// (n, m, k) step reloads both tiles (narrow tn-wide moving tiles, m inner: poor reuse).
lower::TileProgram matmul_program(int M, int N, int K, int tn, bool hoisted) {
  test::ProgramBuilder b;
  b.auto_deps = true;
  const int A = b.hbm("A", ir::DType::fp32, K, M, 0);
  const int B = b.hbm("B", ir::DType::fp32, K, N, 1);
  const int C = b.hbm("C", ir::DType::fp32, M, N, 2);
  const int kt = K / 128;
  const int sa = b.onchip("a", Memory::sbuf, ir::DType::fp32, 128, 128, hoisted ? kt : 1);
  const int sb = b.onchip("b", Memory::sbuf, ir::DType::fp32, 128, tn, hoisted ? kt : 1);
  const int ps = b.onchip("acc", Memory::psum, ir::DType::fp32, 128, tn);
  const int so = b.onchip("out", Memory::sbuf, ir::DType::fp32, 128, tn);
  auto body = [&](int m, int n) {
    for (int k = 0; k < kt; ++k) {
      const int slot = hoisted ? k : 0;
      if (!hoisted) {
        b.dma(b.tile(sa, 128, 128, slot), b.block(A, 128LL * k, 128LL * m, 128, 128), 0);
        b.dma(b.tile(sb, 128, tn, slot), b.block(B, 128LL * k, static_cast<std::int64_t>(n) * tn, 128, tn), 1);
      } else if (m >= 0 && n >= 0) {
        b.dma(b.tile(sb, 128, tn, slot), b.block(B, 128LL * k, static_cast<std::int64_t>(n) * tn, 128, tn), 1);
      }
      b.matmul(b.tile(ps, 128, tn), b.tile(sa, 128, 128, slot), b.tile(sb, 128, tn, slot), k > 0);
    }
    b.unary(Opcode::tensor_copy, Engine::vector, b.tile(so, 128, tn), b.tile(ps, 128, tn));
    b.dma(b.block(C, 128LL * m, static_cast<std::int64_t>(n) * tn, 128, tn), b.tile(so, 128, tn), 2);
  };
  if (hoisted) {
    for (int m = 0; m < M / 128; ++m) {
      for (int k = 0; k < kt; ++k) b.dma(b.tile(sa, 128, 128, k), b.block(A, 128LL * k, 128LL * m, 128, 128), 0);
      for (int n = 0; n < N / tn; ++n) body(m, n);
    }
  } else {
    for (int n = 0; n < N / tn; ++n)
      for (int m = 0; m < M / 128; ++m) body(m, n);
  }
  return b.finish();
}

runner::CpuOptions quick() {
  runner::CpuOptions o;
  o.min_repeats = 3;
  o.max_repeats = 8;
  o.time_budget_s = 0.3;
  o.input_sets = 2;
  return o;
}

}  // namespace

TEST_CASE("cpu runner times a correct program and reports its samples", "[cpu]") {
  const auto k = ir::workload("matmul:M=128,N=512,K=256,dtype=fp32,layout=tn");
  REQUIRE(k.has_value());
  const auto p = matmul_program(128, 512, 256, 512, true);
  runner::CpuRunner r(quick());
  runner::Candidate c;
  c.kernel = &*k;
  c.program = &p;
  const auto m = r.measure_one(c);
  INFO(m.message);
  REQUIRE(m.status == Status::ok);
  CHECK(m.samples_ns.size() >= 3);
  CHECK(m.latency.median > 0);
  CHECK(m.latency.ci_low <= m.latency.median);
  CHECK(m.profile.find("GFLOP/s") != std::string::npos);
  CHECK(r.traits().checks_outputs);
}

TEST_CASE("cpu runner rejects a deliberately wrong program as incorrect", "[cpu]") {
  const auto k = ir::workload("matmul:M=128,N=512,K=256,dtype=fp32,layout=tn");
  REQUIRE(k.has_value());
  auto p = matmul_program(128, 512, 256, 512, true);
  // Corrupt one instruction: the second matmul overwrites instead of accumulating.
  int seen = 0;
  for (auto& in : p.instrs)
    if (in.op == Opcode::nc_matmul && ++seen == 2) in.accumulate = false;
  REQUIRE(seen == 2);
  runner::CpuRunner r(quick());
  runner::Candidate c;
  c.kernel = &*k;
  c.program = &p;
  const auto m = r.measure_one(c);
  CHECK(m.status == Status::incorrect);
  CHECK(m.message.find("input set 0") != std::string::npos);
}

TEST_CASE("cpu runner reports an out-of-bounds program as an error", "[cpu]") {
  const auto k = ir::workload("matmul:M=128,N=512,K=256,dtype=fp32,layout=tn");
  REQUIRE(k.has_value());
  auto p = matmul_program(128, 512, 256, 512, true);
  p.instrs[0].src[0].offset = 1 << 30;
  runner::CpuRunner r(quick());
  runner::Candidate c;
  c.kernel = &*k;
  c.program = &p;
  CHECK(r.measure_one(c).status == Status::error);
  c.kernel = nullptr;
  CHECK(r.measure_one(c).status == Status::error);
}

TEST_CASE("cpu runner ranks a cache-friendly matmul schedule ahead of a cache-hostile one", "[cpu][slow]") {
  // Both lowered for the host target from schedule text. Friendly: [128, 512] moving tiles, loads
  // double-buffered. Hostile: 32-wide moving tiles (128 B pieces of each HBM row), n blocks
  // outermost so A's tiles are fetched again for every narrow column of B.
  const int n = asan() ? 512 : 1024;  // 512: the smallest size whose space has 512-wide tiles
  const auto t = target::load_target("host");
  REQUIRE(t.has_value());
  const auto k = ir::workload("matmul:M=" + std::to_string(n) + ",N=" + std::to_string(n) + ",K=" + std::to_string(n) +
                              ",dtype=fp32,layout=tn");
  REQUIRE(k.has_value());
  const auto space = schedule::ScheduleSpace::derive(*k, *t);
  auto lowered = [&](const std::string& text) {
    const auto g = space.parse(text);
    if (!g) FAIL(g.error().str());
    auto p = lower::lower(space, *g);
    if (!p) FAIL(p.error().str());
    return std::move(p).value();
  };
  const auto good = lowered(
      "tile m=128 n=512 k=128; block m=1 n=1 k=1; order m.b n.b k.b m n k; stationary A; load A@auto x2 dma=tile q=1; "
      "load B@auto x2 dma=tile q=1; acc psum x2; store C@auto x2 dma=tile q=1; evict vector");
  const auto bad = lowered(
      "tile m=128 n=32 k=128; block m=1 n=1 k=8; order n.b m.b k.b n m k; stationary A; load A@k x1 dma=tile q=1; "
      "load B@k x1 dma=tile q=1; acc psum x1; store C@n x1 dma=tile q=1; evict vector");
  runner::CpuOptions o = quick();
  o.min_repeats = 3;
  o.max_repeats = 3;
  runner::CpuRunner r(o);
  runner::Candidate cg, cb;
  cg.kernel = cb.kernel = &*k;
  cg.target = cb.target = &*t;
  cg.program = &good;
  cb.program = &bad;
  // Two rounds in opposite orders, best median of each: a burst of load from other processes
  // on a shared machine then cannot decide the ranking on its own.
  double best_good = 1e300, best_bad = 1e300;
  for (int round = 0; round < 2; ++round) {
    std::vector<runner::Candidate> cs = round == 0 ? std::vector<runner::Candidate>{cg, cb} : std::vector<runner::Candidate>{cb, cg};
    const auto ms = r.measure(cs);
    const auto& mg = ms[round == 0 ? 0 : 1];
    const auto& mb = ms[round == 0 ? 1 : 0];
    INFO(mg.message << mb.message);
    REQUIRE(mg.status == Status::ok);
    REQUIRE(mb.status == Status::ok);
    INFO("friendly " << mg.profile << "\nhostile " << mb.profile);
    best_good = std::min(best_good, mg.latency.median);
    best_bad = std::min(best_bad, mb.latency.median);
  }
  CHECK(best_good * 1.3 < best_bad);
}
