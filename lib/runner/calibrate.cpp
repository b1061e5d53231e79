// Fitting SimParams to measured kernels (docs/CALIBRATE.md). The optimizer is Eigen's
// Levenberg-Marquardt (unsupported/NonLinearOptimization, MINPACK's lmder); this file only
// supplies residuals, a finite-difference Jacobian and the bounds transform.
#include "kevo/runner/calibrate.hpp"

#include <fmt/format.h>

#include <Eigen/Dense>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>
#include <unsupported/Eigen/NonLinearOptimization>

#include "kevo/core/error.hpp"

namespace kevo::runner {

namespace {

// Every parameter of the simulator's physics that a fit may move (docs/SIMULATOR.md lists their
// meaning and sources). The default bounds are the parameters' physical ranges
// (target::kSimParamRanges, which target files are held to too): wide enough for any plausible
// hardware, tight enough that the model stays meaningful.
constexpr SimParamInfo info(std::string_view name, bool log_scale, bool integer, std::string_view meaning) {
  const auto r = target::sim_param_range(name);
  return {name, r.lo, r.hi, log_scale, integer, meaning};
}
constexpr SimParamInfo kParams[] = {
    info("dma_engines", false, false, "DMA engines one transfer is spread over"),
    info("dma_engine_bytes_per_ns", true, false, "bandwidth of one DMA engine (B/ns)"),
    info("dma_descriptor_overhead_ns", false, false, "DMA engine time per descriptor (ns)"),
    info("hbm_efficiency", false, false, "effective HBM bandwidth / the target's hbm_bytes_per_ns"),
    info("dma_fixed_ns", false, false, "latency of one DMA instruction (ns): after its transfer, or its least duration"),
    info("dma_tail_ns", false, false, "completion after a DMA's transfer, where dma_fixed_ns overlaps it (ns)"),
    info("dma_sbuf_transpose_efficiency", false, false, "share of DMA bandwidth an SBUF->SBUF transpose reaches"),
    info("psum_elems_per_cycle", true, false, "per-lane rate of an op with an operand in PSUM"),
    info("matmul_exposed_load", false, false, "LoadStationary paid by a matmul whose operands came late"),
    info("matmul_extra_cycles", false, false, "cycles added to every matmul's issue time"),
    info("engine_overhead_scale", true, false, "scale of every compute engine's fixed overhead"),
};

constexpr double kStartInset = 0.02;  // a start on a bound moves this share of the range inside
constexpr double kAtBound = 0.005;    // within this share of the range: reported at the bound
constexpr double kJacobianStep = 1e-3;  // central differences in u
constexpr double kStallTol = 1e-4;
constexpr std::size_t kStallIterations = 5;

struct Free {
  FitParam p;
  bool log = false;
  [[nodiscard]] double x(double u) const {
    const double s = 1.0 / (1.0 + std::exp(-u));
    if (log) return std::exp(std::log(p.lo) + (std::log(p.hi) - std::log(p.lo)) * s);
    return p.lo + (p.hi - p.lo) * s;
  }
  [[nodiscard]] double share(double x) const {  // position of x in [lo, hi], 0..1 (unclamped)
    if (log) return (std::log(std::max(x, 1e-300)) - std::log(p.lo)) / (std::log(p.hi) - std::log(p.lo));
    return (x - p.lo) / (p.hi - p.lo);
  }
  [[nodiscard]] double u(double x) const {
    const double s = std::clamp(share(x), kStartInset, 1.0 - kStartInset);
    return std::log(s / (1.0 - s));
  }
};

struct Outcome {
  double latency_ns = 0;
  std::array<double, kNumBusy> busy{};
};

Outcome outcome(const SimResult& r) {
  Outcome o;
  o.latency_ns = r.latency_ns;
  const double lat = r.latency_ns > 0 ? r.latency_ns : 1.0;
  for (int e = 0; e < target::kNumEngines; ++e) o.busy[e] = r.engine_busy_ns[e] / lat;
  o.busy[target::kNumEngines] = r.dma_active_ns / lat;
  return o;
}

// The rows, the free parameters and the fixed ones: simulates any set of parameter vectors on
// any subset of rows, spread over this machine's cores (results by index: deterministic).
class Model {
 public:
  Model(const target::Target& t, std::span<const CalibrationRow> rows, std::vector<Free> free, SimParams base)
      : t_(t), rows_(rows), free_(std::move(free)), base_(base) {}

  [[nodiscard]] SimParams params(const Eigen::VectorXd& u) const {
    SimParams p = base_;
    for (std::size_t j = 0; j < free_.size(); ++j) calibrate_detail::set_param(p, free_[j].p.name, free_[j].x(u[j]));
    return p;
  }
  // out[s][k] = outcome of rows[idx[k]] under settings[s].
  std::vector<std::vector<Outcome>> run(const std::vector<SimParams>& settings, const std::vector<std::size_t>& idx) {
    evaluations_ += static_cast<int>(settings.size());
    std::vector<std::vector<Outcome>> out(settings.size(), std::vector<Outcome>(idx.size()));
    const std::size_t jobs = settings.size() * idx.size();
    std::atomic<std::size_t> next{0};
    std::exception_ptr err;
    std::atomic<bool> failed{false};
    auto work = [&] {
      for (std::size_t j; (j = next.fetch_add(1)) < jobs;) {
        if (failed) return;
        const std::size_t s = j / idx.size(), k = j % idx.size();
        try {
          out[s][k] = outcome(simulate(*rows_[idx[k]].program, t_, settings[s]));
        } catch (...) {
          if (!failed.exchange(true)) err = std::current_exception();
        }
      }
    };
    const std::size_t nt = std::min<std::size_t>(jobs, std::max(1u, std::thread::hardware_concurrency()));
    std::vector<std::thread> threads;
    for (std::size_t i = 1; i < nt; ++i) threads.emplace_back(work);
    work();
    for (auto& th : threads) th.join();
    if (err) std::rethrow_exception(err);
    return out;
  }
  [[nodiscard]] const std::vector<Free>& free() const { return free_; }
  [[nodiscard]] std::span<const CalibrationRow> rows() const { return rows_; }
  [[nodiscard]] int evaluations() const { return evaluations_; }

 private:
  const target::Target& t_;
  std::span<const CalibrationRow> rows_;
  std::vector<Free> free_;
  SimParams base_;
  int evaluations_ = 0;
};

// Residuals of the included rows: log(model / measured), busy_weight * (model - measured) per
// measured busy fraction, then prior_weight * (u - u0) per parameter.
struct Residuals {
  Model* model;
  std::vector<std::size_t> idx;  // included rows
  Eigen::VectorXd u0;
  double busy_weight, prior_weight;
  int m = 0;

  Residuals(Model* md, std::vector<std::size_t> rows, Eigen::VectorXd start, double bw, double pw)
      : model(md), idx(std::move(rows)), u0(std::move(start)), busy_weight(bw), prior_weight(pw) {
    for (std::size_t i : idx) {
      ++m;
      for (const auto& b : model->rows()[i].busy) m += b.has_value();
    }
    m += static_cast<int>(u0.size());
  }
  [[nodiscard]] int inputs() const { return static_cast<int>(u0.size()); }
  [[nodiscard]] int values() const { return m; }

  void fill(const Eigen::VectorXd& u, const std::vector<Outcome>& o, Eigen::VectorXd& f) const {
    f.resize(m);
    int r = 0;
    for (std::size_t k = 0; k < idx.size(); ++k) {
      const CalibrationRow& row = model->rows()[idx[k]];
      f[r++] = std::log(std::max(o[k].latency_ns, 1e-3) / row.measured_ns);
      for (int e = 0; e < kNumBusy; ++e)
        if (row.busy[e]) f[r++] = busy_weight * (o[k].busy[e] - *row.busy[e]);
    }
    for (Eigen::Index j = 0; j < u.size(); ++j) f[r++] = prior_weight * (u[j] - u0[j]);
  }
  int operator()(const Eigen::VectorXd& u, Eigen::VectorXd& f) {
    fill(u, model->run({model->params(u)}, idx)[0], f);
    return 0;
  }
  int df(const Eigen::VectorXd& u, Eigen::MatrixXd& J) {
    const Eigen::Index n = u.size();
    std::vector<SimParams> settings;
    for (Eigen::Index j = 0; j < n; ++j)
      for (double sign : {+1.0, -1.0}) {
        Eigen::VectorXd v = u;
        v[j] += sign * kJacobianStep;
        settings.push_back(model->params(v));
      }
    const auto out = model->run(settings, idx);
    J.resize(m, n);
    Eigen::VectorXd fp, fm;
    for (Eigen::Index j = 0; j < n; ++j) {
      Eigen::VectorXd v = u;
      v[j] += kJacobianStep;
      fill(v, out[2 * j], fp);
      v[j] -= 2 * kJacobianStep;
      fill(v, out[2 * j + 1], fm);
      J.col(j) = (fp - fm) / (2 * kJacobianStep);
    }
    return 0;
  }
};

const char* status_text(Eigen::LevenbergMarquardtSpace::Status s) {
  using namespace Eigen::LevenbergMarquardtSpace;
  switch (s) {
    case RelativeReductionTooSmall: return "converged (relative reduction of the residuals below ftol)";
    case RelativeErrorTooSmall: return "converged (relative change of the parameters below xtol)";
    case RelativeErrorAndReductionTooSmall: return "converged (residuals and parameters)";
    case CosinusTooSmall: return "converged (residuals orthogonal to the Jacobian)";
    case TooManyFunctionEvaluation: return "stopped: too many evaluations";
    case FtolTooSmall: return "stopped: ftol too small, no further reduction possible";
    case XtolTooSmall: return "stopped: xtol too small, no further improvement possible";
    case GtolTooSmall: return "stopped: gtol too small";
    case Running: return "stopped: iteration limit";
    default: return "stopped";
  }
}

struct Solve {
  Eigen::VectorXd u;
  int iterations = 0;
  double norm = 0;
  std::string stop;
};

Solve solve(Residuals& res, Eigen::VectorXd u, int max_iterations, double tol, const std::string& phase,
            const std::function<void(const FitProgress&)>& progress) {
  Eigen::LevenbergMarquardt<Residuals> lm(res);
  lm.parameters.maxfev = 100000;  // the iteration limit below is what stops a long fit
  lm.parameters.ftol = tol;
  lm.parameters.xtol = tol;
  auto st = lm.minimizeInit(u);
  if (st == Eigen::LevenbergMarquardtSpace::ImproperInputParameters)
    throw Error("kevo: calibrate: the solver refused the problem (fewer residuals than parameters?)");
  Solve s;
  s.norm = lm.fvec.norm();
  st = Eigen::LevenbergMarquardtSpace::Running;
  std::vector<double> norms{s.norm};
  bool stalled = false;
  while (s.iterations < max_iterations) {
    st = lm.minimizeOneStep(u);
    ++s.iterations;
    s.norm = lm.fnorm;
    norms.push_back(s.norm);
    if (progress) progress(FitProgress{phase, s.iterations, s.norm});
    if (st != Eigen::LevenbergMarquardtSpace::Running) break;
    // Parameters creeping towards a bound (u -> +-inf) reduce the residuals ever less without
    // meeting MINPACK's tests: stop when the norm gained under kStallTol in kStallIterations.
    if (norms.size() > kStallIterations &&
        norms[norms.size() - 1 - kStallIterations] - s.norm <= kStallTol * norms[norms.size() - 1 - kStallIterations]) {
      stalled = true;
      break;
    }
  }
  s.u = std::move(u);
  s.stop = stalled ? fmt::format("converged (residual norm changed less than {:g} in {} iterations)", kStallTol,
                                 kStallIterations)
                   : status_text(st);
  return s;
}

std::string fmt_ms(double ns) { return fmt::format("{:.4g} ms", ns / 1e6); }

std::string fmt_value(double v) {
  if (v != 0 && (std::abs(v) < 1e-3 || std::abs(v) >= 1e6)) return fmt::format("{:.4e}", v);
  return fmt::format("{:.5g}", v);
}

std::string busy_text(const FitRowResult& r) {
  std::string s;
  for (int e = 0; e < kNumBusy; ++e)
    if (r.busy_measured[e]) {
      if (!s.empty()) s += ", ";
      s += fmt::format("{} {:.3f}→{:.3f}", kBusyNames[e], *r.busy_measured[e], r.busy_model[e].value_or(0));
    }
  return s.empty() ? "–" : s;
}

std::string bound_text(const FitParamResult& p) {
  return p.at_lower ? "at lower bound" : p.at_upper ? "at upper bound" : "";
}

}  // namespace

std::span<const SimParamInfo> sim_param_table() { return kParams; }

const SimParamInfo* find_sim_param(std::string_view name) {
  for (const auto& p : kParams)
    if (p.name == name) return &p;
  return nullptr;
}

FitParam fit_param(std::string_view name) {
  const SimParamInfo* i = find_sim_param(name);
  if (!i) {
    std::vector<std::string_view> names;
    for (const auto& p : kParams) names.push_back(p.name);
    throw Error(fmt::format("unknown simulator parameter '{}' (fittable: {})", name, fmt::join(names, ", ")));
  }
  return FitParam{std::string(name), i->lo, i->hi};
}

std::vector<FitParam> default_fit_params() {
  // what the shipped targets were fitted on (docs/SIMULATOR.md): per-descriptor DMA cost, DMA
  // latency, the exposed stationary load, and the HBM share
  return {fit_param("dma_descriptor_overhead_ns"), fit_param("dma_fixed_ns"), fit_param("matmul_exposed_load"),
          fit_param("hbm_efficiency")};
}

namespace calibrate_detail {

void set_param(SimParams& p, std::string_view name, double v) {
  if (!set_sim_param(p, name, v)) throw Error(fmt::format("unknown simulator parameter '{}'", name));
}

double get_param(const SimParams& p, const target::Target& t, std::string_view name) {
  const auto v = get_sim_param(p, name);
  if (!v) throw Error(fmt::format("unknown simulator parameter '{}'", name));
  if (*v >= 0) return *v;
  // a negative field means "the target's own figure" (sim.hpp): the value the simulator uses
  if (name == "dma_engines") return 1;
  if (name == "dma_engine_bytes_per_ns") return t.dma_queue_bytes_per_ns;
  if (name == "dma_descriptor_overhead_ns") return 0;
  if (name == "dma_fixed_ns") return t.dma_fixed_ns;
  if (name == "dma_sbuf_transpose_efficiency") return t.dma_transpose_efficiency;
  if (name == "psum_elems_per_cycle") return t.engines[static_cast<std::size_t>(target::Engine::vector)].elems_per_cycle_32bit;
  return *v;
}

}  // namespace calibrate_detail

FitResult fit_sim_params(const target::Target& t, std::span<const CalibrationRow> rows, const FitOptions& options) {
  if (rows.empty()) throw Error("kevo: calibrate: no measurement rows to fit");
  for (const auto& r : rows) {
    if (!r.program) throw Error(fmt::format("kevo: calibrate: row '{}' has no program", r.name));
    if (!(r.measured_ns > 0)) throw Error(fmt::format("kevo: calibrate: row '{}': measured latency must be > 0", r.name));
    for (int e = 0; e < kNumBusy; ++e)
      if (r.busy[e] && !(*r.busy[e] >= 0 && *r.busy[e] <= 1))
        throw Error(fmt::format("kevo: calibrate: row '{}': busy.{} must be in [0, 1]", r.name, kBusyNames[e]));
  }
  const std::vector<FitParam> params = options.params.empty() ? default_fit_params() : options.params;
  std::vector<Free> free;
  for (const auto& p : params) {
    const SimParamInfo* info = find_sim_param(p.name);
    if (!info) (void)fit_param(p.name);  // throws, naming the fittable ones
    if (!(p.lo < p.hi)) throw Error(fmt::format("kevo: calibrate: bounds of '{}' must have lo < hi", p.name));
    for (const auto& f : free)
      if (f.p.name == p.name) throw Error(fmt::format("calibrate: parameter '{}' is given twice", p.name));
    free.push_back(Free{p, info->log_scale && p.lo > 0});
  }
  const SimParams start = options.start ? *options.start : default_sim_params(t);

  Model model(t, rows, free, start);
  const auto n = static_cast<Eigen::Index>(free.size());
  Eigen::VectorXd u0(n);
  for (Eigen::Index j = 0; j < n; ++j) u0[j] = free[j].u(calibrate_detail::get_param(start, t, free[j].p.name));

  std::vector<std::size_t> all(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) all[i] = i;
  Residuals res(&model, all, u0, options.busy_weight, options.prior_weight);

  FitResult out;
  const auto start_outcomes = model.run({start}, all)[0];
  {
    Eigen::VectorXd f;
    res.fill(u0, start_outcomes, f);
    out.start_residual_norm = f.norm();
  }
  const Solve full = solve(res, u0, options.max_iterations, 1e-9, "fit", options.progress);
  out.params = model.params(full.u);
  out.iterations = full.iterations;
  out.stop_reason = full.stop;

  const auto fit_outcomes = model.run({out.params}, all)[0];
  {
    Eigen::VectorXd f;
    res.fill(full.u, fit_outcomes, f);
    out.residual_norm = f.norm();
  }
  out.evaluations = model.evaluations();

  for (Eigen::Index j = 0; j < n; ++j) {
    const Free& fr = free[j];
    FitParamResult p;
    p.name = fr.p.name;
    p.lo = fr.p.lo;
    p.hi = fr.p.hi;
    p.start = calibrate_detail::get_param(start, t, fr.p.name);
    p.value = calibrate_detail::get_param(out.params, t, fr.p.name);
    const double s = fr.share(fr.x(full.u[j]));
    p.at_lower = s < kAtBound;
    p.at_upper = s > 1.0 - kAtBound;
    out.fitted.push_back(p);
  }
  double sq = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    FitRowResult r;
    r.name = rows[i].name;
    r.measured_ns = rows[i].measured_ns;
    r.start_ns = start_outcomes[i].latency_ns;
    r.model_ns = fit_outcomes[i].latency_ns;
    r.ratio = r.model_ns / r.measured_ns;
    r.busy_measured = rows[i].busy;
    for (int e = 0; e < kNumBusy; ++e) r.busy_model[e] = fit_outcomes[i].busy[e];
    sq += std::pow(std::log(r.ratio), 2);
    out.rows.push_back(std::move(r));
  }
  out.rms_log_error = std::sqrt(sq / static_cast<double>(rows.size()));

  // Leave one out: refit without row i, starting from the full fit (a few iterations suffice when
  // the row did not dominate the fit), and predict row i with those parameters.
  if (options.leave_one_out && rows.size() >= 2) {
    double loo_sq = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      std::vector<std::size_t> rest;
      for (std::size_t k = 0; k < rows.size(); ++k)
        if (k != i) rest.push_back(k);
      Residuals r_i(&model, rest, u0, options.busy_weight, options.prior_weight);
      // A looser tolerance than the full fit's: the prediction, not the last digit, is wanted.
      const Solve s = solve(r_i, full.u, options.loo_max_iterations, 1e-5,
                            fmt::format("leave-one-out {}/{}", i + 1, rows.size()), options.progress);
      const double ns = model.run({model.params(s.u)}, {i})[0][0].latency_ns;
      out.rows[i].loo_ratio = ns / rows[i].measured_ns;
      loo_sq += std::pow(std::log(*out.rows[i].loo_ratio), 2);
    }
    out.loo_rms_log_error = std::sqrt(loo_sq / static_cast<double>(rows.size()));
  }
  return out;
}

std::string FitResult::markdown() const {
  std::string s;
  s += fmt::format("Fit: {} rows, {} free parameters, {} iterations, {} evaluations; {}.\n\n", rows.size(),
                   fitted.size(), iterations, evaluations, stop_reason);
  s += fmt::format("Residual norm {:.4g} at the start, {:.4g} fitted; rms |log(model/measured)| {:.3f}", start_residual_norm,
                   residual_norm, rms_log_error);
  if (loo_rms_log_error) s += fmt::format(", leave-one-out {:.3f}", *loo_rms_log_error);
  s += ".\n\n| parameter | start | fitted | bounds | |\n|---|---|---|---|---|\n";
  for (const auto& p : fitted)
    s += fmt::format("| {} | {} | {} | [{}, {}] | {} |\n", p.name, fmt_value(p.start), fmt_value(p.value), fmt_value(p.lo),
                     fmt_value(p.hi), bound_text(p));
  s += "\n| row | measured | model (start) | model | model / measured | leave-one-out | busy measured→model |\n"
       "|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows)
    s += fmt::format("| {} | {} | {} | {} | {:.3f} | {} | {} |\n", r.name, fmt_ms(r.measured_ns), fmt_ms(r.start_ns),
                     fmt_ms(r.model_ns), r.ratio, r.loo_ratio ? fmt::format("{:.3f}", *r.loo_ratio) : std::string("–"),
                     busy_text(r));
  return s;
}

std::string FitResult::text() const {
  std::string s;
  s += fmt::format("fit: {} rows, {} parameters, {} iterations, {}\n", rows.size(), fitted.size(), iterations, stop_reason);
  s += fmt::format("residual norm {:.4g} -> {:.4g}, rms |log(model/measured)| {:.3f}", start_residual_norm, residual_norm,
                   rms_log_error);
  if (loo_rms_log_error) s += fmt::format(", leave-one-out {:.3f}", *loo_rms_log_error);
  s += "\n\n";
  std::size_t w = 9;
  for (const auto& p : fitted) w = std::max(w, p.name.size());
  s += fmt::format("{:<{}}  {:>11}  {:>11}  {:>23}\n", "parameter", w, "start", "fitted", "bounds");
  for (const auto& p : fitted)
    s += fmt::format("{:<{}}  {:>11}  {:>11}  {:>23}  {}\n", p.name, w, fmt_value(p.start), fmt_value(p.value),
                     fmt::format("[{}, {}]", fmt_value(p.lo), fmt_value(p.hi)), bound_text(p));
  std::size_t rw = 3;
  for (const auto& r : rows) rw = std::max(rw, r.name.size());
  s += fmt::format("\n{:<{}}  {:>12}  {:>12}  {:>12}  {:>6}  {:>6}  {}\n", "row", rw, "measured", "start", "model", "ratio",
                   "LOO", "busy measured->model");
  for (const auto& r : rows)
    s += fmt::format("{:<{}}  {:>12}  {:>12}  {:>12}  {:>6.3f}  {:>6}  {}\n", r.name, rw, fmt_ms(r.measured_ns),
                     fmt_ms(r.start_ns), fmt_ms(r.model_ns), r.ratio,
                     r.loo_ratio ? fmt::format("{:.3f}", *r.loo_ratio) : std::string("-"), busy_text(r));
  return s;
}

}  // namespace kevo::runner
