#include "kevo/gpu/problem.hpp"

#include <fmt/format.h>

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "kevo/core/error.hpp"
#include "kevo/gpu/triton.hpp"
#include "kevo/ir/text.hpp"

namespace kevo::gpu {

struct TritonProblem::State {
  ir::Kernel kernel;
  std::string kernel_text;
  GpuKernel gk;
  GpuTarget target;
  TritonSpace space;
  mutable runner::ProcessRunner worker{runner::ProcessOptions{}};
  mutable std::mutex mu;
  mutable std::map<std::uint64_t, runner::Measurement> cache;  // genome hash -> measurement
  mutable std::size_t calls = 0;
  mutable std::string pending_fields;
  mutable std::unique_ptr<runner::ProcessRunner> retimer;  // a second worker asking more samples (leaders)  // the request fields of the candidate being measured (under mu)
};

TritonProblem::TritonProblem(ir::Kernel kernel, GpuTarget target, runner::ProcessOptions worker) {
  auto gk = classify(kernel);
  if (!gk) throw Error(gk.error());
  auto space = TritonSpace::derive(*gk, target);
  std::string text = ir::print_kernel(kernel);
  auto st = std::make_shared<State>();
  State* raw = st.get();
  // The worker's extra fields ("triton", "problem") are the candidate's being measured; the
  // state outlives its runner, which it owns.
  worker.request_fields = [raw](const runner::Candidate&) { return raw->pending_fields; };
  st->kernel = std::move(kernel);
  st->kernel_text = std::move(text);
  st->gk = *gk;
  st->target = std::move(target);
  st->space = std::move(space);
  st->worker = runner::ProcessRunner(std::move(worker));
  s_ = std::move(st);
}

const Space& TritonProblem::space() const { return s_->space.space(); }
const TritonSpace& TritonProblem::triton_space() const noexcept { return s_->space; }
const GpuKernel& TritonProblem::gpu_kernel() const noexcept { return s_->gk; }
std::string TritonProblem::name() const { return fmt::format("triton:{}:{}", s_->target.name, s_->gk.describe()); }
std::string TritonProblem::to_text(const Genome& g) const { return s_->space.text(g); }
Expected<Genome, std::string> TritonProblem::from_text(std::string_view s) const { return s_->space.parse(s); }
bool TritonProblem::repair(Genome& g, Rng& /*r*/) const { return s_->space.repair(g); }
std::size_t TritonProblem::worker_calls() const noexcept { return s_->calls; }

std::string TritonProblem::context() const {
  return fmt::format("{} on {} ({} SMs, {} B shared memory per block): Triton schedule genes {}", s_->gk.describe(), s_->target.name,
                     s_->target.sm_count, s_->target.smem_bytes_per_block, s_->space.space().describe(s_->space.space().first()));
}

std::string TritonProblem::source(const Genome& g) const {
  return emit_triton(s_->gk, s_->space.decode(g), s_->target);
}

runner::Measurement TritonProblem::measure(const Genome& g, int repeats) const {
  runner::Candidate c;
  c.kernel = &s_->kernel;
  c.kernel_text = s_->kernel_text;
  c.schedule_text = s_->space.text(g);
  nlohmann::json extra;
  extra["triton"] = source(g);
  extra["problem"] = nlohmann::json::parse(s_->gk.to_json());
  extra["gpu_target"] = s_->target.name;
  std::lock_guard lock(s_->mu);
  s_->pending_fields = extra.dump();
  ++s_->calls;
  if (repeats > 0) {
    runner::ProcessOptions o = s_->worker.options();
    if (o.repeats != repeats) {
      // more samples than the search's: a second worker, kept for the next leader
      o.repeats = repeats;
      if (!s_->retimer || s_->retimer->options().repeats != repeats) s_->retimer = std::make_unique<runner::ProcessRunner>(o);
      return s_->retimer->measure_one(c);
    }
  }
  return s_->worker.measure_one(c);
}

std::vector<evo::Evaluation> TritonProblem::evaluate(std::span<const Genome> gs) const {
  std::vector<evo::Evaluation> out;
  out.reserve(gs.size());
  for (const Genome& g : gs) {
    evo::Evaluation e;
    if (auto ok = s_->space.check(g); !ok) {
      e.status = Status::invalid;
      e.reason = ok.error().str();
      out.push_back(std::move(e));
      continue;
    }
    const std::uint64_t h = genome_hash(g);
    runner::Measurement m;
    bool hit = false;
    {
      std::lock_guard lock(s_->mu);
      if (auto it = s_->cache.find(h); it != s_->cache.end()) m = it->second, hit = true;
    }
    if (!hit) {
      m = measure(g);
      std::lock_guard lock(s_->mu);
      if (m.status == Status::ok || m.status == Status::incorrect || m.status == Status::invalid) s_->cache[h] = m;
    }
    e.status = m.status;
    e.profile = m.profile;
    if (m.status != Status::ok) {
      e.reason = fmt::format("{}: {}", to_string(m.status), m.message);
      out.push_back(std::move(e));
      continue;
    }
    const double ns = m.latency.median;
    e.fitness = {ns};
    e.cost = hit ? 0.0 : ns * 1e-9 * static_cast<double>(std::max<std::size_t>(1, m.samples_ns.size()));
    e.metrics.emplace_back("latency_ns", ns);
    const double flops = s_->gk.flops(), bytes = s_->gk.min_bytes();
    if (flops > 0) {
      e.metrics.emplace_back("tflops", flops / ns * 1e-3);
      if (const double peak = s_->target.peak(s_->gk.dtype); peak > 0) e.metrics.emplace_back("fraction_of_peak", flops / (ns * 1e-9) / peak);
    }
    e.metrics.emplace_back("gbytes_per_s", bytes / ns);
    if (s_->gk.family == Family::row) e.metrics.emplace_back("fraction_of_peak", bytes / (ns * 1e-9) / s_->target.hbm_bytes_per_s);
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace kevo::gpu
