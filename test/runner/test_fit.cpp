// fit_sim_params: the fit recovers parameters that generated synthetic measurements, respects
// and reports bounds, and computes leave-one-out ratios.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cmath>

#include "kevo/ir/workloads.hpp"
#include "kevo/lower/lower.hpp"
#include "kevo/runner/calibrate.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/target/target.hpp"

using namespace kevo;
using runner::CalibrationRow;
using runner::FitOptions;
using runner::SimParams;

namespace {

const target::Target& trn2() {
  static const target::Target t = *target::load_target("trn2");
  return t;
}

// trn2 with the serial DMA latency of model version 8 (no dma_tail_ns: dma_fixed_ns after each
// transfer), where the rows below identify dma_fixed_ns; under the shipped overlap (a floor from
// the transfer's start) their transfers outlast it and hide it.
const target::Target& trn2_serial() {
  static const target::Target t = [] {
    auto x = trn2();
    std::erase_if(x.sim_params, [](const auto& kv) { return kv.first == "dma_tail_ns"; });
    for (auto& [name, v] : x.sim_params)
      if (name == "dma_fixed_ns") v = 500;
    return x;
  }();
  return t;
}

// A row: a workload with its default schedule, or with schedule text.
std::shared_ptr<const lower::TileProgram> program(const std::string& workload, const std::string& schedule = "") {
  const auto k = ir::workload(workload);
  REQUIRE(k.has_value());
  const auto space = schedule::ScheduleSpace::derive(*k, trn2());
  Genome g = space.default_genome();
  if (!schedule.empty()) {
    auto parsed = space.parse(schedule);
    if (!parsed) FAIL(parsed.error().str());
    g = *parsed;
  }
  auto p = lower::lower(space, g);
  if (!p) FAIL(p.error().str());
  return std::make_shared<const lower::TileProgram>(std::move(*p));
}

// Synthetic measurements: the simulator itself at `truth`, busy fractions for some rows.
std::vector<CalibrationRow> synthetic_rows(const SimParams& truth) {
  struct Spec {
    const char* workload;
    bool busy;
  };
  const Spec specs[] = {
      {"matmul:M=512,N=1024,K=512,dtype=bf16", true},
      {"matmul:M=256,N=2048,K=1024,dtype=fp32", false},
      {"matmul:M=128,N=512,K=128,dtype=bf16", false},
      {"softmax:R=512,C=1024,dtype=fp32", true},
      {"layernorm:R=256,C=2048,dtype=bf16", false},
      {"rmsnorm:R=1024,C=512,dtype=fp32", false},
  };
  std::vector<CalibrationRow> rows;
  for (const Spec& s : specs) {
    CalibrationRow r;
    r.name = s.workload;
    r.program = program(s.workload);
    const auto res = runner::simulate(*r.program, trn2(), truth);
    r.measured_ns = res.latency_ns;
    if (s.busy) {
      r.busy[0] = res.engine_busy_ns[0] / res.latency_ns;
      r.busy[runner::kNumBusy - 1] = res.dma_active_ns / res.latency_ns;
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace

TEST_CASE("the fit recovers the parameters that generated synthetic measurements", "[fit]") {
  SimParams truth = runner::default_sim_params(trn2_serial());
  truth.hbm_efficiency = 0.41;
  truth.dma_fixed_ns = 1300;
  truth.matmul_extra_cycles = 40;
  truth.engine_overhead_scale = 1.7;
  const auto rows = synthetic_rows(truth);

  FitOptions o;
  o.start = runner::default_sim_params(trn2_serial());  // the shipped trn2 parameters, serial latency
  o.params = {runner::fit_param("hbm_efficiency"), runner::fit_param("dma_fixed_ns"),
              runner::fit_param("matmul_extra_cycles"), runner::fit_param("engine_overhead_scale")};
  const auto t0 = std::chrono::steady_clock::now();
  const auto fit = runner::fit_sim_params(trn2_serial(), rows, o);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(fit.text() << fmt::format("\n{:.2f} s", secs));
  auto value = [&](const char* n) { return runner::calibrate_detail::get_param(fit.params, trn2_serial(), n); };
  CHECK(value("hbm_efficiency") == Approx(0.41).epsilon(0.005));
  CHECK(value("dma_fixed_ns") == Approx(1300).epsilon(0.005));
  CHECK(value("matmul_extra_cycles") == Approx(40).epsilon(0.005));
  CHECK(value("engine_overhead_scale") == Approx(1.7).epsilon(0.005));
  for (const auto& r : fit.rows) {
    INFO(r.name);
    CHECK(r.ratio == Approx(1.0).epsilon(0.002));
    REQUIRE(r.loo_ratio.has_value());
  }
  for (const auto& p : fit.fitted) {
    CHECK_FALSE(p.at_lower);
    CHECK_FALSE(p.at_upper);
  }
}

TEST_CASE("the fit stays inside the bounds and reports the parameters that end on one", "[fit]") {
  SimParams truth = runner::default_sim_params(trn2());
  truth.hbm_efficiency = 0.41;
  truth.dma_fixed_ns = 1300;
  const auto rows = synthetic_rows(truth);
  FitOptions o;
  o.params = {{"hbm_efficiency", 0.05, 0.3}, {"dma_fixed_ns", 0, 5000}};
  o.leave_one_out = false;
  const auto fit = runner::fit_sim_params(trn2(), rows, o);
  INFO(fit.text());
  REQUIRE(fit.fitted.size() == 2);
  const auto& hbm = fit.fitted[0];
  CHECK(hbm.name == "hbm_efficiency");
  CHECK(hbm.value <= 0.3);
  CHECK(hbm.value > 0.29);
  CHECK(hbm.at_upper);
  CHECK_FALSE(hbm.at_lower);
  CHECK_FALSE(fit.fitted[1].at_lower);
  CHECK_FALSE(fit.fitted[1].at_upper);
  CHECK(fit.params.hbm_efficiency == hbm.value);
  for (const auto& r : fit.rows) CHECK_FALSE(r.loo_ratio.has_value());
  CHECK_THAT(fit.text(), Catch::Contains("at upper bound"));
  CHECK_THAT(fit.markdown(), Catch::Contains("| hbm_efficiency | 1 |"));  // the shipped start
  CHECK_THAT(fit.markdown(), Catch::Contains("at upper bound"));
}

TEST_CASE("the default free set (what the shipped targets were fitted on) is recovered too", "[fit]") {
  SimParams truth = runner::default_sim_params(trn2_serial());
  REQUIRE(truth.dma_tail_ns < 0);
  truth.dma_descriptor_overhead_ns = 45;
  truth.dma_fixed_ns = 1300;
  truth.matmul_exposed_load = 0.5;
  truth.hbm_efficiency = 0.35;
  const auto rows = synthetic_rows(truth);
  FitOptions o;  // default params, from the shipped trn2 values
  const auto fit = runner::fit_sim_params(trn2_serial(), rows, o);
  INFO(fit.text());
  auto value = [&](const char* n) { return runner::calibrate_detail::get_param(fit.params, trn2_serial(), n); };
  CHECK(value("dma_descriptor_overhead_ns") == Approx(45).epsilon(0.02));
  CHECK(value("dma_fixed_ns") == Approx(1300).epsilon(0.02));
  CHECK(value("matmul_exposed_load") == Approx(0.5).epsilon(0.02));
  CHECK(value("hbm_efficiency") == Approx(0.35).epsilon(0.02));
  for (const auto& r : fit.rows) CHECK(r.ratio == Approx(1.0).epsilon(0.005));
}

TEST_CASE("fit_sim_params rejects unknown parameters, empty bounds, bad rows", "[fit]") {
  SimParams truth = runner::default_sim_params(trn2());
  auto rows = synthetic_rows(truth);
  FitOptions o;
  o.params = {{"hbm_speed", 0, 1}};
  CHECK_THROWS_WITH(runner::fit_sim_params(trn2(), rows, o), Catch::Contains("unknown simulator parameter 'hbm_speed'"));
  o.params = {{"hbm_efficiency", 0.5, 0.5}};
  CHECK_THROWS_WITH(runner::fit_sim_params(trn2(), rows, o), Catch::Contains("lo < hi"));
  o.params = {runner::fit_param("dma_fixed_ns"), runner::fit_param("dma_fixed_ns")};
  CHECK_THROWS_WITH(runner::fit_sim_params(trn2(), rows, o), Catch::Contains("given twice"));
  o.params.clear();
  CHECK_THROWS(runner::fit_sim_params(trn2(), std::span<const CalibrationRow>{}, o));
  rows[0].busy[1] = 1.5;
  CHECK_THROWS_WITH(runner::fit_sim_params(trn2(), rows, o), Catch::Contains("busy.vector"));
  rows[0].busy[1].reset();
  rows[0].measured_ns = 0;
  CHECK_THROWS_WITH(runner::fit_sim_params(trn2(), rows, o), Catch::Contains("> 0"));
}

TEST_CASE("set_param and get_param agree on every fittable parameter", "[fit]") {
  for (const auto& info : runner::sim_param_table()) {
    SimParams p;
    runner::calibrate_detail::set_param(p, info.name, 7.0);
    CHECK(runner::calibrate_detail::get_param(p, trn2(), info.name) == 7.0);
    CHECK(p != SimParams{});
  }
  // A field < 0 means "the target's figure".
  CHECK(runner::calibrate_detail::get_param(SimParams{}, trn2(), "dma_fixed_ns") == trn2().dma_fixed_ns);
}
