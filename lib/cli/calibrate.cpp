// kevo calibrate: fit the simulator's free parameters to measured kernels and write a target file
// carrying them (docs/CALIBRATE.md).
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "commands.hpp"
#include "kevo/calibrate.hpp"
#include "kevo/core/error.hpp"
#include "kevo/core/io.hpp"
#include "kevo/runner/calibrate.hpp"
#include "resolve.hpp"

namespace kevo::cli {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::string quoted(const std::string& s) {
  return s.find_first_of(" \t'\"$") == std::string::npos ? s : "'" + s + "'";
}

json busy_json(const runner::BusyFractions& b) {
  json j = json::object();
  for (int e = 0; e < runner::kNumBusy; ++e)
    if (b[e]) j[std::string(runner::kBusyNames[e])] = *b[e];
  return j;
}

json fit_json(const runner::FitResult& fit) {
  json j;
  j["params"] = json::array();
  for (const auto& p : fit.fitted)
    j["params"].push_back({{"name", p.name}, {"start", p.start}, {"value", p.value}, {"lo", p.lo}, {"hi", p.hi},
                           {"at_lower", p.at_lower}, {"at_upper", p.at_upper}});
  j["rows"] = json::array();
  for (const auto& r : fit.rows)
    j["rows"].push_back({{"name", r.name},
                         {"measured_ns", r.measured_ns},
                         {"start_ns", r.start_ns},
                         {"model_ns", r.model_ns},
                         {"ratio", r.ratio},
                         {"loo_ratio", r.loo_ratio ? json(*r.loo_ratio) : json(nullptr)},
                         {"busy_measured", busy_json(r.busy_measured)},
                         {"busy_model", busy_json(r.busy_model)}});
  j["start_residual_norm"] = fit.start_residual_norm;
  j["residual_norm"] = fit.residual_norm;
  j["rms_log_error"] = fit.rms_log_error;
  j["loo_rms_log_error"] = fit.loo_rms_log_error ? json(*fit.loo_rms_log_error) : json(nullptr);
  j["iterations"] = fit.iterations;
  j["evaluations"] = fit.evaluations;
  j["stop_reason"] = fit.stop_reason;
  return j;
}

}  // namespace

int cmd_calibrate(const Options& o) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  for (std::size_t i = 0; i < o.fit_params.size(); ++i) {
    // checked here, naming the flag (the file's reader would blame its own line 1)
    const std::string& name = o.fit_params[i];
    if (name.empty())
      throw UsageError{"--params: an empty parameter name (comma-separated names, e.g. --params dma_fixed_ns,hbm_efficiency)"};
    try {
      (void)runner::fit_param(name);
    } catch (const Error& e) {
      throw UsageError{fmt::format("--params: {}", printable(e.what()))};
    }
    for (std::size_t k = 0; k < i; ++k)
      if (name == o.fit_params[k]) throw UsageError{fmt::format("--params: '{}' is given twice", printable(name))};
  }
  refuse_gpu_target(o.target, "calibrate");
  calibrate::ReadOptions ro;
  ro.toolchain = o.toolchain;
  ro.params = o.fit_params;
  auto file = calibrate::read_measurements(o.measurements_file, ro);
  if (!file) throw UsageError{file.error().headline()};

  auto prep = calibrate::prepare(*file, o.target);
  if (!prep) throw UsageError{prep.error().headline()};
  auto base_json = calibrate::target_json_text(prep->target_spec);
  if (!base_json) throw UsageError{base_json.error().headline()};
  // both outputs checked before the fit (minutes on a full file), so that a bad --out or
  // --report neither wastes it nor leaves one file written without the other
  const std::string out = o.out.empty() ? prep->target.name + ".fitted.json" : o.out;
  check_writable_file(out);
  if (!o.report_file.empty()) check_writable_file(o.report_file);
  // never over a file the user made that this run reads: the measurements, the kernels, schedules
  // and target files its rows name, the base target (--out one.toml replaced the measurements)
  std::vector<fs::path> inputs{o.measurements_file, o.target};
  for (const auto* rows : {&file->rows, &file->unfitted})
    for (const auto& r : *rows) inputs.insert(inputs.end(), {r.kernel, r.schedule, r.target});
  check_not_input(out, "--out", inputs);
  if (!o.report_file.empty()) {
    check_not_input(o.report_file, "--report", inputs);
    if (fs::absolute(o.report_file).lexically_normal() == fs::absolute(out).lexically_normal())
      throw UsageError{fmt::format("--report {}: is also --out; give two files", o.report_file)};
  }

  runner::FitOptions fo;
  fo.params = file->params;
  if (file->busy_weight) fo.busy_weight = *file->busy_weight;
  // The fit starts from the base target's own parameters (default_sim_params: its "sim" object).
  auto last = clock::now();
  fo.progress = [&](const runner::FitProgress& p) {
    const auto now = clock::now();
    if (now - last < std::chrono::seconds(1)) return;  // at most one line a second
    last = now;
    fmt::print(stderr, "kevo: calibrate: {} iteration {}, residual norm {:.4g} ({:.1f} s)\n", p.phase, p.iteration,
               p.residual_norm, std::chrono::duration<double>(now - t0).count());
  };
  const auto params_in = fo.params.empty() ? runner::default_fit_params() : fo.params;
  // Progress on stderr only once the input is known good: a bad input is one line (exit 2).
  fmt::print(stderr,
             "kevo: calibrate: fitting {} parameters to {} rows on {} ({} rows excluded by --toolchain, {} for other targets, "
             "{} marked fit = false)\n",
             params_in.size(), prep->rows.size(), prep->target.name, file->excluded, prep->other_target, file->unfitted.size());
  const runner::FitResult fit = runner::fit_sim_params(prep->target, prep->rows, fo);

  // Provenance: the command and the rows' sources.
  std::string cmd = "kevo calibrate " + quoted(o.measurements_file);
  if (!o.target.empty()) cmd += " --target " + quoted(o.target);
  if (!o.toolchain.empty()) cmd += " --toolchain " + quoted(o.toolchain);
  if (!o.fit_params.empty()) cmd += fmt::format(" --params {}", fmt::join(o.fit_params, ","));
  std::set<std::string> seen;
  std::vector<std::string> sources;
  std::set<std::string> fitted_rows;  // the rows of this target (a file may hold other generations')
  for (const auto& r : prep->rows) fitted_rows.insert(r.name);
  for (const auto& r : file->rows)
    if (fitted_rows.count(r.name) && seen.insert(r.source).second) sources.push_back(r.source);
  const std::string source = fmt::format("{} ({} rows): {}", o.measurements_file, prep->rows.size(), fmt::join(sources, "; "));

  write_file_atomic(out, calibrate::fitted_target_json(*base_json, fit, cmd, source));
  if (!o.report_file.empty()) {
    std::string md = fmt::format("# Calibration of {} ({})\n\n`{}` wrote `{}`.\n\n", prep->target.name, prep->target_spec,
                                 cmd, out);
    md += fit.markdown();
    write_file_atomic(o.report_file, md);
  }
  if (o.json) {
    json j = fit_json(fit);
    j["measurements"] = o.measurements_file;
    j["target"] = prep->target.name;
    j["base"] = prep->target_spec;
    j["excluded_rows"] = file->excluded;
    j["other_target_rows"] = prep->other_target;
    j["out"] = out;
    j["fitted_by"] = cmd;
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("{}\nwrote {}{}\nsearch with it: kevo search --target {} ...\n", fit.text(), out,
             o.report_file.empty() ? "" : " and " + o.report_file, out);
  return 0;
}

}  // namespace kevo::cli
