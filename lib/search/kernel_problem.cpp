#include "kevo/search/kernel_problem.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <mutex>

#include "kevo/core/hash.hpp"
#include "kevo/ir/analysis.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/runner/cache.hpp"
#include "kevo/schedule/plan.hpp"

namespace kevo::search {

namespace {

int engine_index(std::string_view e) {
  static constexpr std::string_view names[] = {"tensor", "vector", "scalar", "gpsimd", "dma"};
  for (int i = 0; i < 5; ++i)
    if (names[i] == e) return i;
  return 5;
}

}  // namespace

struct KernelProblem::State {
  ir::Kernel kernel;
  target::Target target;
  schedule::ScheduleSpace space;
  std::string kernel_text;
  std::uint64_t kernel_hash = 0;
  ir::Analysis analysis;
  mutable std::mutex runner_mu;  // serialises runners that are not thread-safe
  mutable runner::Runner runner;
  runner::RunnerTraits traits;
  KernelProblemOptions opt;
  std::shared_ptr<runner::MeasurementCache> cache;
  mutable std::atomic<std::size_t> hits{0}, calls{0};

  State(ir::Kernel k, target::Target t, runner::Runner r, KernelProblemOptions o)
      : kernel(std::move(k)),
        target(std::move(t)),
        space(schedule::ScheduleSpace::derive(kernel, target)),
        kernel_text(ir::print_kernel(kernel)),
        kernel_hash(ir::kernel_hash(kernel)),
        analysis(ir::analyze(kernel)),
        runner(std::move(r)),
        traits(runner.traits()),
        opt(std::move(o)),
        cache(opt.cache_file.empty() ? std::make_shared<runner::MeasurementCache>(opt.cache_capacity)
                                     : std::make_shared<runner::MeasurementCache>(opt.cache_capacity, opt.cache_file)) {}

  runner::CacheKey key(const std::string& schedule) const {
    return runner::CacheKey{kernel_hash, target.hash(), traits.identity, schedule};
  }

  std::vector<runner::Measurement> run(std::span<const runner::Candidate> c) const {
    calls += c.size();
    if (traits.thread_safety == runner::ThreadSafety::constant) return runner.measure(c);
    std::lock_guard lk(runner_mu);
    return runner.measure(c);
  }
};

KernelProblem::KernelProblem(ir::Kernel kernel, target::Target target, runner::Runner runner, KernelProblemOptions opt)
    : s_(std::make_shared<State>(std::move(kernel), std::move(target), std::move(runner), std::move(opt))) {}

const Space& KernelProblem::space() const { return s_->space.genes(); }
std::string KernelProblem::name() const { return s_->kernel.name; }
bool KernelProblem::deterministic() const { return s_->traits.deterministic; }
evo::ThreadSafety KernelProblem::thread_safety() const {
  // Lowering is pure and the runner is serialised above when it must be, so concurrent
  // evaluate() calls are always safe; they only add parallelism when the runner allows it.
  return evo::ThreadSafety::constant;
}
std::string KernelProblem::to_text(const Genome& g) const { return s_->space.print(g); }
Expected<Genome, std::string> KernelProblem::from_text(std::string_view s) const {
  auto r = s_->space.parse(s, "<proposal>");
  if (!r) return unexpected(r.error().headline());
  return std::move(r).value();
}
bool KernelProblem::repair(Genome& g, Rng& r) const { return s_->space.repair(g, r); }
std::vector<std::string> KernelProblem::descriptor_names() const {
  return {"sbuf_fraction", "log2_intensity", "bottleneck"};
}
std::string KernelProblem::context() const {
  const auto& t = s_->target;
  return fmt::format(
      "Kernel (.kir):\n{}\nTarget {} ({}): {} partitions, SBUF {} KiB/partition, PSUM {} KiB/partition in {} banks; "
      "tile limits: partition <= {}, matmul stationary free <= {}, moving free <= {}; engines tensor, vector, "
      "scalar, gpsimd; {} DMA queues; peak tensor bf16 {:.1f} TFLOP/s, HBM {:.0f} GB/s.\n"
      "Kernel FLOPs {:.3g}, minimum HBM bytes {:.3g}, arithmetic intensity {:.1f} FLOP/B.\n"
      "Default schedule:\n{}\n",
      s_->kernel_text, t.name, t.generation, t.partitions, t.sbuf_bytes_per_partition / 1024,
      t.psum_bytes_per_partition / 1024, t.psum_banks, t.pmax, t.stationary_fmax, t.moving_fmax, t.dma_queues,
      t.peak_tensor_flops_bf16 / 1e12, t.hbm_bytes_per_ns, static_cast<double>(s_->analysis.flops),
      static_cast<double>(s_->analysis.min_hbm_bytes), s_->analysis.intensity,
      s_->space.print(s_->space.default_genome()));
}

const ir::Kernel& KernelProblem::kernel() const noexcept { return s_->kernel; }
const target::Target& KernelProblem::target() const noexcept { return s_->target; }
const schedule::ScheduleSpace& KernelProblem::schedule_space() const noexcept { return s_->space; }
runner::RunnerTraits KernelProblem::runner_traits() const { return s_->traits; }
std::string KernelProblem::kernel_text() const { return s_->kernel_text; }
std::uint64_t KernelProblem::kernel_hash() const noexcept { return s_->kernel_hash; }
std::size_t KernelProblem::cache_hits() const noexcept { return s_->hits.load(); }
std::size_t KernelProblem::runner_calls() const noexcept { return s_->calls.load(); }

Expected<std::int64_t, lower::Invalid> tile_iterations(const schedule::ScheduleSpace& space, const Genome& g) {
  auto plan = schedule::make_plan(space, g);
  if (!plan) return unexpected(lower::Invalid{plan.error().code, plan.error().message});
  std::int64_t total = 0;
  for (const auto& n : plan->nests) {
    std::int64_t it = 1;
    if (n.kind == schedule::NestKind::contract) {
      for (auto t : n.c.ntiles) it *= std::max<std::int64_t>(1, t);
    } else {
      const auto& v = n.v;
      it = ((v.pext + v.ptile - 1) / std::max<std::int64_t>(1, v.ptile)) * ((v.fext + v.ftile - 1) / std::max<std::int64_t>(1, v.ftile));
      for (auto e : v.outer_ext) it *= std::max<std::int64_t>(1, e);
      for (auto e : v.inner_ext) it *= std::max<std::int64_t>(1, e);
      it *= static_cast<std::int64_t>(n.ops.size()) + 1;
    }
    total += it;
  }
  return total;
}

Expected<lower::TileProgram, lower::Invalid> KernelProblem::lower(const Genome& g) const {
  if (!s_->space.genes().contains(g))
    return unexpected(lower::Invalid{"bad_genome", "genome is outside the schedule space"});
  auto iters = tile_iterations(s_->space, g);
  if (!iters) return unexpected(iters.error());
  if (*iters > s_->opt.max_tile_iterations)
    return unexpected(lower::Invalid{
        "too_large", fmt::format("{} tile iterations exceed the limit of {} (every loop is unrolled; use larger tiles)", *iters,
                                 s_->opt.max_tile_iterations)});
  return lower::lower(s_->space, g);
}

evo::Evaluation to_evaluation(const Expected<lower::TileProgram, lower::Invalid>& lowered,
                              const runner::Measurement* m) {
  evo::Evaluation e;
  if (!lowered) {
    e.status = Status::invalid;
    e.reason = lowered.error().str();
    return e;
  }
  const auto& st = lowered->stats;
  e.metrics = {{"sbuf_bytes_per_partition", static_cast<double>(st.sbuf_bytes_per_partition)},
               {"psum_bytes_per_partition", static_cast<double>(st.psum_bytes_per_partition)},
               {"instructions", static_cast<double>(st.instructions)},
               {"flops", static_cast<double>(st.flops)},
               {"hbm_bytes", static_cast<double>(st.hbm_bytes_read + st.hbm_bytes_written)}};
  if (m == nullptr) {
    e.status = Status::error;
    e.reason = "runner returned no measurement";
    return e;
  }
  e.status = m->status;
  e.reason = m->message;
  e.profile = m->profile;
  e.cost = m->latency.n > 0 ? m->latency_ns() * 1e-9 * static_cast<double>(m->latency.n) : 0.0;
  e.metrics.push_back({"latency_ns", m->latency_ns()});
  e.metrics.push_back({"roofline_ns", m->roofline_ns});
  e.metrics.push_back({"fraction_of_peak", m->fraction_of_peak});
  if (m->status == Status::ok) {
    if (!(m->latency_ns() > 0) || !std::isfinite(m->latency_ns())) {
      e.status = Status::error;
      e.reason = fmt::format("runner reported a non-positive latency ({})", m->latency_ns());
      return e;
    }
    e.fitness = {m->latency_ns()};
  }
  const double bytes = std::max(1.0, e.metric("hbm_bytes"));
  e.descriptors = {static_cast<double>(st.sbuf_bytes_per_partition), std::log2(std::max(1e-9, e.metric("flops") / bytes)),
                   static_cast<double>(engine_index(m->bottleneck))};
  return e;
}

std::vector<evo::Evaluation> KernelProblem::evaluate(std::span<const Genome> gs) const {
  std::vector<evo::Evaluation> out(gs.size());
  std::vector<Expected<lower::TileProgram, lower::Invalid>> lowered;
  lowered.reserve(gs.size());
  std::vector<std::optional<runner::Measurement>> got(gs.size());
  std::vector<runner::CacheKey> keys(gs.size());
  std::vector<runner::Candidate> cands;
  std::vector<std::size_t> cand_of;  // candidate index -> genome index
  for (std::size_t i = 0; i < gs.size(); ++i) {
    lowered.push_back(lower(gs[i]));
    if (!lowered.back()) continue;
    keys[i] = s_->key(lowered.back()->schedule_text);
    if (auto hit = s_->cache->find(keys[i])) {
      ++s_->hits;
      got[i] = std::move(hit);
      continue;
    }
    cands.push_back(runner::Candidate{&s_->kernel, &s_->target, &*lowered[i], s_->kernel_text, lowered[i]->schedule_text});
    cand_of.push_back(i);
  }
  if (!cands.empty()) {
    auto ms = s_->run(cands);
    if (ms.size() != cands.size()) {
      runner::Measurement bad;
      bad.status = Status::error;
      bad.message = fmt::format("runner returned {} measurements for {} candidates", ms.size(), cands.size());
      ms.assign(cands.size(), bad);
    }
    for (std::size_t c = 0; c < cands.size(); ++c) {
      const auto i = cand_of[c];
      s_->cache->insert(keys[i], ms[c]);  // transient failures are not kept: a retry may pass
      got[i] = std::move(ms[c]);
    }
  }
  for (std::size_t i = 0; i < gs.size(); ++i) out[i] = to_evaluation(lowered[i], got[i] ? &*got[i] : nullptr);
  return out;
}

std::vector<std::size_t> KernelProblem::remeasure(std::span<const Genome> gs, int rounds,
                                                 std::vector<runner::Measurement>& ms) const {
  std::vector<Expected<lower::TileProgram, lower::Invalid>> progs;
  std::vector<runner::Candidate> cands;
  progs.reserve(gs.size());
  for (const auto& g : gs) progs.push_back(lower(g));
  std::vector<std::size_t> valid;
  for (std::size_t i = 0; i < gs.size(); ++i)
    if (progs[i]) {
      valid.push_back(i);
      cands.push_back(runner::Candidate{&s_->kernel, &s_->target, &*progs[i], s_->kernel_text, progs[i]->schedule_text});
    }
  ms = cands.empty() ? std::vector<runner::Measurement>{} : s_->run(cands);
  std::vector<std::size_t> order;
  if (ms.size() == cands.size() && !cands.empty()) {
    std::lock_guard lk(s_->runner_mu);
    for (auto i : runner::remeasure_top_k(s_->runner, cands, ms, cands.size(), rounds)) order.push_back(valid[i]);
  }
  // Measurements back in genome order (invalid genomes get an invalid Measurement).
  std::vector<runner::Measurement> by_genome(gs.size());
  for (std::size_t c = 0; c < valid.size() && c < ms.size(); ++c) by_genome[valid[c]] = ms[c];
  for (std::size_t i = 0; i < gs.size(); ++i)
    if (!progs[i]) {
      by_genome[i].status = Status::invalid;
      by_genome[i].message = progs[i].error().str();
      order.push_back(i);
    }
  ms = std::move(by_genome);
  return order;
}

ScheduleReport KernelProblem::measure_one(const Genome& g) const {
  ScheduleReport r;
  r.schedule = s_->space.print(g);
  auto p = lower(g);
  if (!p) {
    r.invalid = p.error();
    return r;
  }
  r.stats = p->stats;
  runner::Candidate c{&s_->kernel, &s_->target, &*p, s_->kernel_text, p->schedule_text};
  auto ms = s_->run(std::span<const runner::Candidate>(&c, 1));
  if (!ms.empty()) r.measurement = std::move(ms.front());
  return r;
}

}  // namespace kevo::search
