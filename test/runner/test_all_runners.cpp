#include <catch2/catch.hpp>

#include <filesystem>

#include "kevo/core/io.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/ir/workloads.hpp"
#include "kevo/lower/lower.hpp"
#include "kevo/runner.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/target/target.hpp"

using namespace kevo;

namespace {

struct Lowered {
  ir::Kernel kernel;
  target::Target target;
  lower::TileProgram program;
  std::string schedule;
};

Lowered lower_default(const std::string& workload, const std::string& target_name) {
  Lowered l;
  auto k = ir::workload(workload);
  REQUIRE(k.has_value());
  l.kernel = *k;
  auto t = target::load_target(target_name);
  REQUIRE(t.has_value());
  l.target = *t;
  const auto space = schedule::ScheduleSpace::derive(l.kernel, l.target);
  const auto g = space.default_genome();
  auto p = lower::lower(space, g);
  if (!p) FAIL(p.error().str());
  l.program = std::move(p).value();
  l.schedule = space.print(g);
  return l;
}

runner::Candidate candidate(const Lowered& l) {
  runner::Candidate c;
  c.kernel = &l.kernel;
  c.target = &l.target;
  c.program = &l.program;
  c.kernel_text = ir::print_kernel(l.kernel);
  c.schedule_text = l.schedule;
  return c;
}

}  // namespace

TEST_CASE("one kernel's default schedule is measured by all three runners", "[runners]") {
  const std::string w = "matmul:M=256,N=512,K=256,dtype=fp32,layout=tn";
  const Lowered on_trn2 = lower_default(w, "trn2");
  const Lowered on_host = lower_default(w, "host");

  runner::Runner sim{runner::SimRunner{}};
  std::vector<runner::Candidate> cs{candidate(on_trn2)};
  const auto ms = sim.measure(cs);
  CHECK(ms[0].status == Status::ok);
  CHECK(ms[0].fraction_of_peak > 0);
  CHECK(ms[0].fraction_of_peak <= 1.0);
  CHECK(ms[0].roofline_ns <= ms[0].latency.median);
  CHECK(sim.traits().deterministic);

  runner::CpuOptions co;
  co.min_repeats = 3;
  co.max_repeats = 5;
  co.time_budget_s = 0.2;
  runner::Runner cpu{runner::CpuRunner{co}};
  std::vector<runner::Candidate> hc{candidate(on_host)};
  const auto mc = cpu.measure(hc);
  INFO(mc[0].message);
  CHECK(mc[0].status == Status::ok);

  runner::ProcessOptions po;
  po.command = {"python3", KEVO_SOURCE_DIR "/test/runner/workers/failing_worker.py"};
  po.timeout_s = 10;
  runner::Runner proc{runner::ProcessRunner{po}};
  auto pc = candidate(on_trn2);
  pc.schedule_text = "mode=echo " + pc.schedule_text;
  std::vector<runner::Candidate> ps{pc};
  const auto mp = proc.measure(ps);
  REQUIRE(mp[0].status == Status::ok);
  // The worker saw the target and the emitted NKI source.
  CHECK(mp[0].profile.find("target=trn2") != std::string::npos);
  CHECK(mp[0].profile.find("nc_matmul") != std::string::npos);
}

TEST_CASE("simulated trace of a lowered program is written to a file", "[runners][trace]") {
  const Lowered l = lower_default("matmul:M=256,N=512,K=256,dtype=bf16,layout=tn", "trn1");
  const auto r = runner::simulate(l.program, l.target, runner::default_sim_params(l.target));
  const auto path = std::filesystem::temp_directory_path() / "kevo_runner_trace_test.json";
  runner::write_trace(path, l.program, r);
  const auto text = read_file(path);
  CHECK(text.find("\"traceEvents\"") != std::string::npos);
  CHECK(text.find("nc_matmul") != std::string::npos);
  std::filesystem::remove(path);
}
