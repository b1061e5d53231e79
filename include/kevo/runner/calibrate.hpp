// Fitting the simulator's free parameters (SimParams) to measured kernels: bounded least squares
// on log latency, plus per-engine busy fractions where measured, with Eigen's Levenberg-Marquardt
// (MINPACK's lmder) on a smooth reparameterisation of each parameter into its bounds. The fit sees
// lowered TilePrograms only; reading measurement files and lowering schedules is module
// `calibrate`'s job. The method and the report are described in docs/CALIBRATE.md.
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kevo/lower/program.hpp"
#include "kevo/runner/sim.hpp"
#include "kevo/target/target.hpp"

namespace kevo::runner {

// Busy fractions of a run: tensor, vector, scalar, gpsimd (issue time / latency) and dma (time
// during which at least one DMA was transferring / latency), in this order.
inline constexpr int kNumBusy = target::kNumEngines + 1;
inline constexpr std::array<std::string_view, kNumBusy> kBusyNames = {"tensor", "vector", "scalar", "gpsimd", "dma"};
using BusyFractions = std::array<std::optional<double>, kNumBusy>;

// One measured kernel, lowered once: what the fit compares the simulator against.
struct CalibrationRow {
  std::string name;
  std::shared_ptr<const lower::TileProgram> program;
  double measured_ns = 0;  // > 0
  BusyFractions busy;      // measured fractions in [0, 1], where known
};

// A parameter the fit may move, with its bounds [lo, hi]. Values are mapped to an unbounded u by
// x = lo + (hi - lo) * sigmoid(u) (or the same on log x when the parameter is log-scaled and
// lo > 0), so the solver never leaves the bounds.
struct FitParam {
  std::string name;
  double lo = 0, hi = 1;
};

// What kevo knows about each SimParams field it can fit: default bounds and scale.
struct SimParamInfo {
  std::string_view name;
  double lo, hi;         // default bounds
  bool log_scale;        // reparameterise log x (the range spans orders of magnitude)
  bool integer;          // the field is an integer (rounded; the model is a step function of it)
  std::string_view meaning;
};
std::span<const SimParamInfo> sim_param_table();
const SimParamInfo* find_sim_param(std::string_view name);  // nullptr when unknown
// The default free set: dma_descriptor_overhead_ns, dma_fixed_ns, matmul_exposed_load, hbm_efficiency.
std::vector<FitParam> default_fit_params();
// `name` with its default bounds; throws kevo::Error when `name` is not a fittable field.
FitParam fit_param(std::string_view name);

namespace calibrate_detail {
// Name -> SimParams field through runner::set_sim_param, throwing kevo::Error for an unknown name.
void set_param(SimParams& p, std::string_view name, double value);
// The value the simulator uses for `name` (fields < 0 mean "the target's figure": resolved here).
double get_param(const SimParams& p, const target::Target& t, std::string_view name);
}  // namespace calibrate_detail

struct FitProgress {
  std::string phase;  // "fit", or "leave-one-out 3/5"
  int iteration = 0;
  double residual_norm = 0;
};

struct FitOptions {
  std::vector<FitParam> params;      // the free parameters; empty: default_fit_params()
  std::optional<SimParams> start;    // fixed values and start of the free ones; empty: default_sim_params(target)
  double busy_weight = 1.0;          // weight of a busy-fraction residual (a latency residual is log(model/measured))
  double prior_weight = 1e-4;        // weight of u - u_start per parameter: keeps unidentified parameters at the start
  int max_iterations = 100;          // Levenberg-Marquardt iterations of the full fit
  bool leave_one_out = true;
  int loo_max_iterations = 15;       // per refit without one row (starting from the full fit)
  std::function<void(const FitProgress&)> progress;  // called after each iteration
};

struct FitParamResult {
  std::string name;
  double start = 0, value = 0, lo = 0, hi = 0;
  bool at_lower = false, at_upper = false;  // within 0.5% of the range (in the fitted scale) of a bound
};

struct FitRowResult {
  std::string name;
  double measured_ns = 0;
  double start_ns = 0;  // the model at the start
  double model_ns = 0;  // the model at the fit
  double ratio = 0;     // model_ns / measured_ns
  BusyFractions busy_measured, busy_model;  // busy_model: every engine, at the fit
  std::optional<double> loo_ratio;          // the model refitted without this row, / measured
};

struct FitResult {
  SimParams params;                   // the start with the fitted values set
  std::vector<FitParamResult> fitted;
  std::vector<FitRowResult> rows;
  double start_residual_norm = 0, residual_norm = 0;  // Euclidean norm of the residuals (with the prior)
  double rms_log_error = 0;           // sqrt(mean(log(ratio)^2)) over the rows
  std::optional<double> loo_rms_log_error;
  int iterations = 0;   // of the full fit
  int evaluations = 0;  // parameter settings simulated by the full fit (each on every row), Jacobians included
  std::string stop_reason;

  // Markdown: a summary, a parameter table (start, fitted, bounds, at bound) and a row table
  // (measured, model, ratio, leave-one-out ratio, busy measured -> model).
  [[nodiscard]] std::string markdown() const;
  // The same as aligned plain text (what the CLI prints).
  [[nodiscard]] std::string text() const;
};

// Fits `options.params` so that simulate(row.program, t, params) matches the rows. Throws
// kevo::Error for no rows, an unknown or duplicate parameter, bounds with lo >= hi, or a row with measured_ns <= 0, a busy fraction outside [0, 1]
// or no program.
FitResult fit_sim_params(const target::Target& t, std::span<const CalibrationRow> rows, const FitOptions& options = {});

}  // namespace kevo::runner
