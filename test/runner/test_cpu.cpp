#include <catch2/catch.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "kevo/ir/eval.hpp"
#include "kevo/ir/workloads.hpp"
#include "kevo/lower/lower.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/target/target.hpp"
#include "kevo/runner/cpu.hpp"
#include "kevo/verify/interpreter.hpp"
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
  // double-buffered. Hostile: [32, 32] tiles with a 32-deep k (128 B pieces of each HBM row, 64x
  // the tile calls), n blocks outermost so A's tiles are fetched again for every narrow column of
  // B; one k block spans K (32 k tiles at 1024, 16 at ASan's 512). The gap is 1.5-2x alone
  // (1024^3: ~33 vs 50-90 ms; 512^3: 3.2 vs 7.8 ms); the earlier hostile schedule, 128-row
  // tiles 32 wide, was only ~1.37x and fell under the 1.3x asked below while ctest ran other
  // tests beside it.
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
      "tile m=32 n=32 k=32; block m=1 n=1 k=" + std::to_string(n / 32) +
      "; order n.b m.b k.b n m k; stationary A; load A@k x1 dma=tile q=1; "
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
  // Rounds in alternating orders, best median of each, until the ranking is clear (at least
  // two rounds, at most eight): a burst of load from other processes on a shared machine then
  // cannot decide the ranking on its own. Under `ctest -j 2` on two cores a test beside this
  // one slowed the friendly schedule's two rounds to 59 ms (33 alone) while the hostile one
  // measured 53, so two rounds were not enough; a friendly schedule that is not faster still
  // fails after eight.
  double best_good = 1e300, best_bad = 1e300;
  for (int round = 0; round < 8 && (round < 2 || !(best_good * 1.3 < best_bad)); ++round) {
    const bool good_first = round % 2 == 0;
    std::vector<runner::Candidate> cs = good_first ? std::vector<runner::Candidate>{cg, cb} : std::vector<runner::Candidate>{cb, cg};
    const auto ms = r.measure(cs);
    const auto& mg = ms[good_first ? 0 : 1];
    const auto& mb = ms[good_first ? 1 : 0];
    INFO(mg.message << mb.message);
    REQUIRE(mg.status == Status::ok);
    REQUIRE(mb.status == Status::ok);
    INFO("friendly " << mg.profile << "\nhostile " << mb.profile);
    best_good = std::min(best_good, mg.latency.median);
    best_bad = std::min(best_bad, mb.latency.median);
  }
  CHECK(best_good * 1.3 < best_bad);
}

TEST_CASE("cpu runner accepts bf16 partial sums kept in the output dtype (acc sbuf dtype=out) and still catches a lost k tile",
          "[cpu][tolerance]") {
  // The three schedules a `kevo search --runner cpu --budget 20 -w matmul:M=512,N=512,K=512,dtype=bf16`
  // flagged incorrect (seed 1): each keeps its SBUF partial sums in bf16 over 2-4 k blocks, which
  // the plan allows (kAccOutMaxBlocks) and verify::check_program accepts. The runner compared
  // them with an absolute tolerance not scaled to the results' magnitude, so an element whose
  // terms cancel (C[143, 129]: got 0.3984 want 0.4355, rms of C ~3.5) failed on the rounding
  // of its ~3.5-sized partial sums.
  const auto t = target::load_target("host");
  REQUIRE(t.has_value());
  const auto k = ir::workload("matmul:M=512,N=512,K=512,dtype=bf16");
  REQUIRE(k.has_value());
  const auto space = schedule::ScheduleSpace::derive(*k, *t);
  auto lowered = [&](const std::string& text) {
    const auto g = space.parse(text);
    if (!g) FAIL(g.error().str());
    auto p = lower::lower(space, *g);
    if (!p) FAIL(p.error().str());
    return std::move(p).value();
  };
  const std::string text = GENERATE(
      "tile m=128 n=128 k=64; block m=4 n=2 k=2; order k.b n.b m.b n k m; stationary A; transpose A=strided; "
      "load A@n.b x1 dma=tile q=2; load B@m.b x6 dma=tile q=2; acc sbuf x2 dtype=out zero=memset; "
      "store C@auto x2 dma=row q=4; evict vector",
      "tile m=128 n=32 k=32; block m=16 n=8 k=4; order m.b k.b n.b m k n; stationary A; transpose A=strided; "
      "load A@auto x1 dma=row q=2; load B@auto x1 dma=region q=4; acc sbuf x1 dtype=out zero=start; "
      "store C@auto x1 dma=region q=1; evict vector",
      "tile m=64 n=128 k=64; block m=2 n=1 k=1; order n.b k.b m.b k m n; stationary B; transpose A=strided; "
      "load A@root x1 dma=region q=2; load B@k.b x2 dma=tile q=4; acc sbuf x2 dtype=out zero=start; "
      "store C@root x1 dma=row q=1; evict vector");
  INFO(text);
  auto p = lowered(text);
  runner::CpuOptions o;  // default seed and input sets: the ones the search used
  o.warmup = 0;
  o.min_repeats = o.max_repeats = 3;
  runner::CpuRunner r(o);
  runner::Candidate c;
  c.kernel = &*k;
  c.target = &*t;
  c.program = &p;
  const auto m = r.measure_one(c);
  INFO(m.message);
  CHECK(m.status == Status::ok);
  // The oracle agrees: the lowering is right, the difference is bf16 rounding of partial sums.
  const auto v = verify::check_program(*k, p, 7, 1);
  INFO(v.message);
  CHECK(v.ok);

  // A real bug in the same program still fails: one matmul overwrites its PSUM group instead of
  // accumulating (a lost k tile moves an element by ~1/8 of C's magnitude, 3-5x the tolerance).
  // (The third schedule's k blocks are single tiles: no matmul accumulates, its adds are in SBUF.)
  const auto it = std::find_if(p.instrs.begin(), p.instrs.end(),
                               [](const lower::Instr& in) { return in.op == Opcode::nc_matmul && in.accumulate; });
  if (it != p.instrs.end()) {
    it->accumulate = false;
    const auto bad = r.measure_one(c);
    INFO(bad.message);
    CHECK(bad.status == Status::incorrect);
  }
}

TEST_CASE("the partial sums of an acc sbuf dtype=out program are what bf16 rounding after every k block gives",
          "[cpu][tolerance]") {
  // Independent of the interpreter's matmul path: emulate C[i, j] = bf16(... bf16(bf16(S0) + S1) ... + S3)
  // with each 128-deep k-block sum S exact in double, and compare every element with what the
  // program produced. Agreement to one bf16 ulp (a block sum near a rounding boundary may land on
  // either side in fp32 PSUM) shows the lowering writes the schedule, and the error against the
  // reference is the schedule's own rounding.
  const auto t = target::load_target("host");
  REQUIRE(t.has_value());
  const auto k = ir::workload("matmul:M=512,N=512,K=512,dtype=bf16");
  REQUIRE(k.has_value());
  const auto space = schedule::ScheduleSpace::derive(*k, *t);
  const auto g = space.parse(
      "tile m=128 n=128 k=64; block m=4 n=2 k=2; order k.b n.b m.b n k m; stationary A; transpose A=strided; "
      "load A@n.b x1 dma=tile q=2; load B@m.b x6 dma=tile q=2; acc sbuf x2 dtype=out zero=memset; "
      "store C@auto x2 dma=row q=4; evict vector");
  REQUIRE(g);
  const auto p = lower::lower(space, *g);
  REQUIRE(p);
  const verify::Interpreter interp(*p);
  const auto inputs = ir::random_inputs(*k, 11);
  auto mem = interp.allocate();
  interp.bind_inputs(mem, inputs);
  interp.execute(mem);
  const int ia = static_cast<int>(k->tensor("A") - k->tensors.data());
  const int ib = static_cast<int>(k->tensor("B") - k->tensors.data());
  const int ic = static_cast<int>(k->tensor("C") - k->tensors.data());
  const auto got = interp.output(mem, ic);
  const auto& A = inputs[static_cast<std::size_t>(ia)];
  const auto& B = inputs[static_cast<std::size_t>(ib)];
  const auto want = ir::evaluate(*k, inputs)[static_cast<std::size_t>(ic)];
  const int n = 512;
  int off_by_more = 0;
  double max_vs_ref = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      float acc = 0, largest = 0;
      for (int kb = 0; kb < 4; ++kb) {
        double s = 0;
        for (int kk = kb * 128; kk < (kb + 1) * 128; ++kk)
          s += double{A[static_cast<std::size_t>(i * n + kk)]} * B[static_cast<std::size_t>(kk * n + j)];
        acc = ir::round_to(ir::DType::bf16, kb == 0 ? static_cast<float>(s) : acc + static_cast<float>(s));
        largest = std::max(largest, std::fabs(acc));
      }
      const float gv = got[static_cast<std::size_t>(i * n + j)];
      // one bf16 ulp of the largest partial sum: a rounding that went the other way early on
      const double ulp = std::ldexp(1.0, std::ilogb(std::max(largest, 1e-30f)) - 7);
      off_by_more += std::fabs(gv - acc) > ulp * 1.0001;
      max_vs_ref = std::max(max_vs_ref, std::fabs(double{gv} - want[static_cast<std::size_t>(i * n + j)]));
    }
  CHECK(off_by_more == 0);
  INFO("largest |program - reference| " << max_vs_ref);
  CHECK(max_vs_ref > 0.03);  // the rounding is real: larger than the old unscaled bf16 tolerance (0.0235)
}

TEST_CASE("cpu runner's fraction of peak is against this machine's measured peaks not the target file's", "[cpu]") {
  const auto k = ir::workload("matmul:M=128,N=512,K=256,dtype=fp32,layout=tn");
  REQUIRE(k.has_value());
  const auto p = matmul_program(128, 512, 256, 512, true);
  auto t = target::load_target("host");
  REQUIRE(t.has_value());
  // A target file written on a machine 100x slower than any this test runs on: taken at its word,
  // every schedule would run at thousands of percent of "peak".
  t->peak_tensor_flops_bf16 = t->peak_tensor_flops_fp8 = t->peak_tensor_flops_fp32 = 1e9;
  t->hbm_bytes_per_ns = 0.1;
  runner::Candidate c;
  c.kernel = &*k;
  c.program = &p;
  c.target = &*t;

  runner::CpuOptions file = quick();
  file.measured_peaks = false;
  const auto mf = runner::CpuRunner(file).measure_one(c);
  REQUIRE(mf.status == Status::ok);
  CHECK(mf.fraction_of_peak > 3);

  const auto mm = runner::CpuRunner(quick()).measure_one(c);
  REQUIRE(mm.status == Status::ok);
  const runner::HostPeaks& hp = runner::host_peaks();
  REQUIRE(hp.matmul_flops > 1e9);
  CHECK(&runner::host_peaks() == &hp);  // measured once
  const double flops = 2.0 * 128 * 512 * 256;
  const double bw = runner::host_copy_bytes_per_ns((128 * 256 + 256 * 512 + 128 * 512) * 4);
  REQUIRE(bw > 0.1);
  CHECK(runner::host_copy_bytes_per_ns((128 * 256 + 256 * 512 + 128 * 512) * 4) == bw);  // one measurement per size
  CHECK(mm.roofline_ns == Approx(std::max(flops / hp.matmul_flops * 1e9, (128 * 256 + 256 * 512 + 128 * 512) * 4 / bw)));
  // No schedule's matmuls outrun the largest tile alone: allow timing noise, not a wrong peak. The
  // peak is measured once per process, and on a machine shared with other tests (ctest -j) it
  // can be measured slow while the kernel later runs alone: 1.44 and 1.47 were seen under a
  // parallel build. A wrong peak, the failure this guards against, reads 10-1000x (`mf` above).
  CHECK(mm.fraction_of_peak > 0);
  CHECK(mm.fraction_of_peak < 3);
  CHECK(mm.profile.find("measured peaks") != std::string::npos);
  CHECK(runner::CpuRunner(quick()).traits().identity != runner::CpuRunner(file).traits().identity);
}

namespace {

// matmul layout=tn fp32 M x N x K with matmul_program's schedule, as a candidate.
struct MatmulCase {
  ir::Kernel k;
  lower::TileProgram p;
  MatmulCase(int M, int N, int K, bool hoisted)
      : k(*ir::workload("matmul:M=" + std::to_string(M) + ",N=" + std::to_string(N) + ",K=" + std::to_string(K) +
                        ",dtype=fp32,layout=tn")),
        p(matmul_program(M, N, K, 512, hoisted)) {}
  [[nodiscard]] runner::Candidate candidate() const {
    runner::Candidate c;
    c.kernel = &k;
    c.program = &p;
    return c;
  }
};

// Measures `c` with `o`, setting o.cancel `after` into it from another thread; the seconds from
// the flag to measure_one's return.
double cancelled_after(runner::CpuOptions o, const runner::Candidate& c, std::chrono::milliseconds after, runner::Measurement& m) {
  using Clock = std::chrono::steady_clock;
  std::atomic<bool> cancel{false};
  std::atomic<Clock::rep> set_at{0};
  o.cancel = &cancel;
  runner::CpuRunner r(o);
  std::thread setter([&] {
    std::this_thread::sleep_for(after);
    set_at = Clock::now().time_since_epoch().count();
    cancel = true;
  });
  m = r.measure_one(c);
  const auto done = Clock::now();
  setter.join();
  return std::chrono::duration<double>(done - Clock::time_point(Clock::duration(set_at.load()))).count();
}

}  // namespace

TEST_CASE("a cancel stops the cpu runner at once in its reference and in its timed runs", "[cpu]") {
  // kevo eval --runner cpu of a 4096^3 fp32 matmul ran two minutes after Ctrl-C: neither the
  // reference nor the timing loop looked at the stop
  {
    const MatmulCase mc(128, 512, 256, true);
    const runner::Candidate c = mc.candidate();
    std::atomic<bool> cancel{true};
    runner::CpuOptions o = quick();
    o.cancel = &cancel;
    runner::CpuRunner r(o);
    const auto m = r.measure_one(c);
    CHECK(m.status == Status::error);
    CHECK(m.message.rfind("cancelled", 0) == 0);
    cancel = false;  // the same runner measures once the flag is down
    const auto again = r.measure_one(c);
    INFO(again.message);
    CHECK(again.status == Status::ok);
    CHECK(r.traits().identity == runner::CpuRunner(quick()).traits().identity);  // not part of the identity
  }
  // in the timed runs: a thousand runs asked for (seconds), the flag set 0.3 s in
  {
    const MatmulCase mc(512, 512, 512, false);
    runner::CpuOptions o = quick();
    o.min_repeats = o.max_repeats = 1000;
    o.time_budget_s = 1000;
    o.input_sets = 1;
    runner::Measurement m;
    const double late = cancelled_after(o, mc.candidate(), std::chrono::milliseconds(300), m);
    INFO(m.message << "; returned " << late << " s after the flag");
    CHECK(m.status == Status::error);
    CHECK(m.message.rfind("cancelled", 0) == 0);
    CHECK(late < 1.0);
  }
  // in the reference: 2048^3 in fp64 with its error estimate (seconds per input set), the flag
  // set 0.2 s in
  {
    const MatmulCase mc(2048, 2048, 2048, true);
    runner::Measurement m;
    const double late = cancelled_after(quick(), mc.candidate(), std::chrono::milliseconds(200), m);
    INFO(m.message << "; returned " << late << " s after the flag");
    CHECK(m.status == Status::error);
    CHECK(m.message.rfind("cancelled", 0) == 0);
    CHECK(late < 1.0);
  }
}

TEST_CASE("the interpreter's matmul rate is measured on this machine", "[cpu]") {
  const double a = verify::measure_matmul_flops(0.05);
  CHECK(a > 1e9);    // any CPU this runs on does a GFLOP/s
  CHECK(a < 1e13);   // one core does not do 10 TFLOP/s
}
