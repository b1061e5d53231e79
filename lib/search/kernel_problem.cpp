#include "kevo/search/kernel_problem.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <deque>
#include <limits>
#include <mutex>

#include "kevo/core/error.hpp"
#include "kevo/core/hash.hpp"
#include "kevo/ir/analysis.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/runner/cache.hpp"
#include "kevo/schedule/detail/plan.hpp"

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

  State(schedule::ScheduleSpace sp, runner::Runner r, KernelProblemOptions o)
      : kernel(sp.kernel()),
        target(sp.target()),
        space(std::move(sp)),
        kernel_text(ir::print_kernel(kernel)),
        kernel_hash(ir::kernel_hash(kernel)),
        analysis(ir::analyze(kernel)),
        runner(std::move(r)),
        traits(runner.traits()),
        opt(std::move(o)),
        cache(opt.cache_file.empty() ? std::make_shared<runner::MeasurementCache>(opt.cache_capacity)
                                     : std::make_shared<runner::MeasurementCache>(opt.cache_capacity, opt.cache_file)) {
    // The identity keys the measurement cache (in memory and on disk): two runners without one
    // would share each other's measurements.
    if (traits.identity.empty())
      throw Error("KernelProblem: the runner's traits().identity is empty; give it a name that includes its settings "
                  "(it keys the measurement cache)");
  }

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
    : KernelProblem(schedule::ScheduleSpace::derive(kernel, target), std::move(runner), std::move(opt)) {}

Expected<KernelProblem, schedule::Unsupported> KernelProblem::make(const ir::Kernel& kernel, const target::Target& target,
                                                                   runner::Runner runner, KernelProblemOptions opt) {
  auto space = schedule::ScheduleSpace::try_derive(kernel, target);
  if (!space) return unexpected(std::move(space.error()));
  return KernelProblem(std::move(space).value(), std::move(runner), std::move(opt));
}

KernelProblem::KernelProblem(schedule::ScheduleSpace space, runner::Runner runner, KernelProblemOptions opt)
    : s_(std::make_shared<State>(std::move(space), std::move(runner), std::move(opt))) {
  if (s_->opt.descriptors && s_->opt.descriptor_names.empty())
    throw Error("KernelProblemOptions: a descriptors hook needs descriptor_names (one per value it returns)");
}

const Space& KernelProblem::space() const { return s_->space.genes(); }
std::string KernelProblem::name() const {
  return s_->opt.objective_name.empty() ? s_->kernel.name : fmt::format("{} [{}]", s_->kernel.name, s_->opt.objective_name);
}
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
bool KernelProblem::repair(Genome& g, Rng& r) const {
  if (!s_->space.repair(g, r)) return false;
  // A schedule that would unroll past max_tile_iterations (or past lowering's instruction limit)
  // is steered back inside: the smallest tile (relative to the largest it may take) grows one
  // step at a time; when no tile can grow, DMA granularity coarsens; when nothing can, fusion and
  // layout choices return to the default schedule's. The space's own repair runs again after
  // each step (a larger tile may need smaller buffers elsewhere).
  const Space& sp = s_->space.genes();
  std::vector<bool> stuck(sp.size(), false);  // a tile whose growth the space's repair undid
  for (int step = 0; step < 64; ++step) {
    auto it = tile_iterations(s_->space, g);
    if (!it) return true;  // a plan rejection is the space's to report
    // Within the tile-iteration limit, a schedule may still unroll past lowering's instruction
    // limit through its transfers; that is counted (cheaply) only where it is possible at all.
    bool fits = *it <= s_->opt.max_tile_iterations;
    if (fits && static_cast<std::size_t>(*it) * 8 > lower::kMaxInstructions) {
      auto n = lower::count_instructions(s_->space, g);
      fits = !n || *n <= lower::kMaxInstructions;
    }
    if (fits) return true;
    std::size_t pick = sp.size();
    double least = 2.0;
    for (std::size_t i = 0; i < sp.size(); ++i) {
      const Gene& gene = sp.gene(i);
      if (stuck[i] || gene.kind != GeneKind::ordinal || gene.name.find(".tile.") == std::string::npos || gene.values.empty())
        continue;
      const auto at = static_cast<std::size_t>(sp.at(g, i));
      if (at + 1 >= gene.values.size()) continue;
      const double rel = static_cast<double>(gene.values[at]) / static_cast<double>(gene.values.back());
      if (rel < least) least = rel, pick = i;
    }
    if (pick == sp.size()) {
      // No tile can grow: coarser transfers (tile -> row -> region) cut the DMA instructions.
      for (std::size_t i = 0; i < sp.size() && pick == sp.size(); ++i) {
        const Gene& gene = sp.gene(i);
        const bool dma = gene.name.ends_with(".dma") || gene.name.find(".dma.") != std::string::npos;
        if (!stuck[i] && dma && gene.kind == GeneKind::categorical &&
            static_cast<std::size_t>(sp.at(g, i)) + 1 < gene.labels.size())
          pick = i;
      }
    }
    if (pick == sp.size()) {
      // Nothing left to grow or coarsen: move a fusion or layout choice back to the default
      // schedule's (fused nests, the natural partition index), which unroll into the fewest tiles.
      const Genome& dflt = s_->space.default_genome();
      for (std::size_t i = 0; i < sp.size(); ++i) {
        const Gene& gene = sp.gene(i);
        const bool shape = gene.name.starts_with("fuse.") || gene.name.ends_with(".layout");
        if (!shape || gene.kind == GeneKind::permutation || sp.at(g, i) == sp.at(dflt, i)) continue;
        const Genome before = g;
        sp.slots(g, i)[0] = sp.at(dflt, i);
        if (s_->space.repair(g, r)) {
          pick = i;
          break;
        }
        g = before;
      }
      if (pick == sp.size()) return true;  // nothing left to change: lowering reports too_large
      continue;
    }
    const Genome before = g;
    const std::int32_t was = sp.at(g, pick);
    ++sp.slots(g, pick)[0];
    bool grew = s_->space.repair(g, r) && sp.at(g, pick) > was;
    if (grew) {  // a tile of a nest that is fused away (or of a flash nest that is off) changes nothing
      const auto now = tile_iterations(s_->space, g);
      grew = now && *now < *it;
    }
    if (!grew) {
      g = before;
      stuck[pick] = true;
    }
  }
  return true;
}
std::vector<std::string> KernelProblem::descriptor_names() const {
  if (s_->opt.descriptors) return s_->opt.descriptor_names;
  return {"sbuf_fraction", "log2_intensity", "bottleneck"};
}
namespace {
// Schedules name the indices of the split view, not the user's: say so, and show it.
std::string view_note(const schedule::ScheduleSpace& sp) {
  const auto& splits = sp.splits();
  if (splits.empty()) return "";
  return fmt::format("Schedules are written over this view of the kernel (long indices split across partitions, indices held as one: {}; "
                     "the same tensors and memory):\n{}\n",
                     fmt::join(splits, "; "), ir::print_kernel(sp.scheduled_kernel()));
}
}  // namespace

std::string KernelProblem::context() const {
  const auto& t = s_->target;
  return fmt::format(
      "Kernel (.kir):\n{}\nTarget {} ({}): {} partitions, SBUF {} KiB/partition, PSUM {} KiB/partition in {} banks; "
      "tile limits: partition <= {}, matmul stationary free <= {}, moving free <= {}; engines tensor, vector, "
      "scalar, gpsimd; {} DMA queues; peak tensor bf16 {:.1f} TFLOP/s, HBM {:.0f} GB/s.\n"
      "Kernel FLOPs {:.3g}, minimum HBM bytes {:.3g}, arithmetic intensity {:.1f} FLOP/B.\n"
      "{}Default schedule:\n{}\n",
      s_->kernel_text, t.name, t.generation, t.partitions, t.sbuf_bytes_per_partition / 1024,
      t.psum_bytes_per_partition / 1024, t.psum_banks, t.pmax, t.stationary_fmax, t.moving_fmax, t.dma_queues,
      t.peak_tensor_flops_bf16 / 1e12, t.hbm_bytes_per_ns, static_cast<double>(s_->analysis.flops),
      static_cast<double>(s_->analysis.min_hbm_bytes), s_->analysis.intensity, view_note(s_->space),
      s_->space.print(s_->space.default_genome()));
}

const ir::Kernel& KernelProblem::kernel() const noexcept { return s_->kernel; }
const target::Target& KernelProblem::target() const noexcept { return s_->target; }
const schedule::ScheduleSpace& KernelProblem::schedule_space() const noexcept { return s_->space; }
runner::RunnerTraits KernelProblem::runner_traits() const { return s_->traits; }
std::string KernelProblem::kernel_text() const { return s_->kernel_text; }
std::uint64_t KernelProblem::kernel_hash() const noexcept { return s_->kernel_hash; }
const KernelProblemOptions& KernelProblem::options() const noexcept { return s_->opt; }
std::size_t KernelProblem::cache_hits() const noexcept { return s_->hits.load(); }
std::size_t KernelProblem::runner_calls() const noexcept { return s_->calls.load(); }

Expected<std::int64_t, Invalid> tile_iterations(const schedule::ScheduleSpace& space, const Genome& g) {
  auto plan = schedule::make_plan(space, g);
  if (!plan) return unexpected(std::move(plan.error()));
  std::int64_t total = 0;
  for (const auto& n : plan->nests) {
    std::int64_t it = 1;
    if (n.kind == schedule::NestKind::contract) {
      for (auto t : n.c.ntiles) it *= std::max<std::int64_t>(1, t);
    } else if (n.kind == schedule::NestKind::flash) {
      // per (batch, row tile, kv tile): the QKᵀ tiles, the PV chunks and the softmax ops
      const auto& f = n.f;
      it = f.outer * f.nq * f.nkv * (f.nk + f.chunks + static_cast<std::int64_t>(n.ops.size()));
    } else if (n.kind == schedule::NestKind::online) {
      // per (batch, row tile): two passes over the row's tiles
      const auto& o = n.o;
      it = o.outer * o.nr * 2 * o.nj * (static_cast<std::int64_t>(n.ops.size()) + 1);
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

namespace {

// Validity checks before lowering, then lowering into `out` (whose storage is reused).
Expected<void, Invalid> lower_checked(const schedule::ScheduleSpace& space, std::int64_t max_iterations, const Genome& g,
                                      lower::TileProgram& out) {
  if (!space.genes().contains(g)) return unexpected(Invalid{"bad_genome", "genome is outside the schedule space"});
  auto iters = tile_iterations(space, g);
  if (!iters) return unexpected(std::move(iters.error()));
  if (*iters > max_iterations)
    return unexpected(Invalid{"too_large", fmt::format("{} tile iterations exceed the limit of {} (every loop is unrolled; use larger "
                                                       "tiles)",
                                                       *iters, max_iterations)});
  return lower::lower_into(space, g, out);
}

// Lowered programs reused by one thread's evaluate() calls: a large program's instruction
// storage is allocated (and page-faulted) once instead of per genome. An evaluate() call runs
// its genomes in waves that hold at most kWaveBytes of instructions, and programs grown beyond
// kKeepBytes are released afterwards, so a thread holds a bounded amount between calls.
constexpr std::size_t kWaveBytes = std::size_t{96} << 20;
constexpr std::size_t kKeepBytes = std::size_t{48} << 20;
std::size_t held_bytes(const lower::TileProgram& p) {
  return p.instrs.capacity() * sizeof(lower::Instr) + (p.deps.capacity() + p.dep_begin.capacity()) * sizeof(std::uint32_t) +
         p.dep_kind.capacity();
}
thread_local std::deque<lower::TileProgram> t_programs;  // deque: growing it moves no program a candidate points to
thread_local int t_depth = 0;  // a nested evaluate() on the same thread (a runner that searches) gets its own

// The evaluation of a lowered program (stats, measurement) or of an invalid schedule (why).
evo::Evaluation evaluation_of(const lower::ProgramStats* stats, const Invalid* why, const runner::Measurement* m);

}  // namespace

Expected<lower::TileProgram, Invalid> KernelProblem::lower(const Genome& g) const {
  lower::TileProgram p;
  if (auto done = lower_checked(s_->space, s_->opt.max_tile_iterations, g, p); !done) return unexpected(std::move(done.error()));
  return p;
}

std::vector<double> KernelProblem::features(const Genome& g) const {
  // A surrogate asks for features of many candidates per measured one: lower into one program
  // per thread whose storage is reused (released past kKeepBytes, as evaluate()'s are).
  thread_local lower::TileProgram prog;
  struct Release {
    ~Release() {
      if (held_bytes(prog) > kKeepBytes) prog = lower::TileProgram{};
    }
  } release;
  if (!lower_checked(s_->space, s_->opt.max_tile_iterations, g, prog)) return {};
  auto f = program_features(prog, s_->target);
  // The estimate is of latency: under another objective the problem has no estimate of fitness[0].
  if (s_->opt.objective) f[0] = std::numeric_limits<double>::quiet_NaN();
  return f;
}

evo::Evaluation to_evaluation(const Expected<lower::TileProgram, Invalid>& lowered, const runner::Measurement* m) {
  if (!lowered) return evaluation_of(nullptr, &lowered.error(), m);
  return evaluation_of(&lowered->stats, nullptr, m);
}

namespace {

evo::Evaluation evaluation_of(const lower::ProgramStats* stats, const Invalid* why, const runner::Measurement* m) {
  evo::Evaluation e;
  if (why != nullptr || stats == nullptr) {
    e.status = Status::invalid;
    e.reason = why != nullptr ? why->str() : "the schedule did not lower";
    return e;
  }
  const auto& st = *stats;
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

}  // namespace

namespace {
// The user's objective and descriptor hooks (KernelProblemOptions) over a built evaluation.
void apply_hooks(const KernelProblemOptions& opt, evo::Evaluation& e) {
  if (e.status == Status::invalid) return;
  auto fail = [&](std::string why) {
    e.status = Status::error;
    e.reason = std::move(why);
    e.fitness.clear();
  };
  if (opt.descriptors) {
    try {
      e.descriptors = opt.descriptors(e);
    } catch (const std::exception& x) {
      return fail(fmt::format("descriptors hook threw: {}", x.what()));
    }
    if (e.descriptors.size() != opt.descriptor_names.size())
      return fail(fmt::format("descriptors hook returned {} values for {} names", e.descriptors.size(), opt.descriptor_names.size()));
  }
  if (opt.objective && e.status == Status::ok) {
    const std::string name = opt.objective_name.empty() ? std::string("objective") : fmt::format("objective '{}'", opt.objective_name);
    std::vector<double> f;
    try {
      f = opt.objective(e);
    } catch (const std::exception& x) {
      return fail(fmt::format("{} threw: {}", name, x.what()));
    }
    if (f.empty()) return fail(fmt::format("{} returned no value", name));
    for (double v : f)
      if (!std::isfinite(v)) return fail(fmt::format("{} returned {} (not finite)", name, v));
    e.fitness = std::move(f);
  }
}
}  // namespace

std::vector<evo::Evaluation> KernelProblem::evaluate(std::span<const Genome> gs) const {
  std::vector<evo::Evaluation> out(gs.size());
  std::deque<lower::TileProgram> own;
  auto& progs = t_depth == 0 ? t_programs : own;
  ++t_depth;
  struct Leave {
    ~Leave() { --t_depth; }
  } leave;
  std::size_t i = 0;
  while (i < gs.size()) {
    // One wave: lower genomes into reused programs until the wave's instructions reach kWaveBytes,
    // answer what the cache knows, measure the rest in one runner call.
    const std::size_t first = i;
    std::size_t held = 0;
    std::vector<Expected<void, Invalid>> why;
    std::vector<runner::CacheKey> keys;
    std::vector<std::optional<runner::Measurement>> got;
    std::vector<runner::Candidate> cands;
    std::vector<std::size_t> cand_of;  // candidate index -> index within the wave
    while (i < gs.size() && (i == first || held < kWaveBytes)) {
      const std::size_t w = i - first;
      if (progs.size() <= w) progs.emplace_back();
      auto& prog = progs[w];
      why.push_back(lower_checked(s_->space, s_->opt.max_tile_iterations, gs[i], prog));
      keys.emplace_back();
      got.emplace_back();
      ++i;
      if (!why.back()) continue;
      held += held_bytes(prog);
      keys[w] = s_->key(prog.schedule_text);
      if (auto hit = s_->cache->find(keys[w])) {
        ++s_->hits;
        got[w] = std::move(hit);
        continue;
      }
      cands.push_back(runner::Candidate{&s_->kernel, &s_->target, &prog, s_->kernel_text, prog.schedule_text});
      cand_of.push_back(w);
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
        const auto w = cand_of[c];
        s_->cache->insert(keys[w], ms[c]);  // transient failures are not kept: a retry may pass
        got[w] = std::move(ms[c]);
      }
    }
    for (std::size_t w = 0; w < why.size(); ++w) {
      out[first + w] = why[w] ? evaluation_of(&progs[w].stats, nullptr, got[w] ? &*got[w] : nullptr)
                              : evaluation_of(nullptr, &why[w].error(), nullptr);
      apply_hooks(s_->opt, out[first + w]);
    }
  }
  for (auto& p : progs)
    if (held_bytes(p) > kKeepBytes) p = lower::TileProgram{};
  return out;
}

std::vector<std::size_t> KernelProblem::remeasure(std::span<const Genome> gs, int rounds,
                                                 std::vector<runner::Measurement>& ms) const {
  std::vector<Expected<lower::TileProgram, Invalid>> progs;
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

std::optional<runner::Measurement> KernelProblem::cached_measurement(const Genome& g) const {
  if (!s_->space.genes().contains(g)) return std::nullopt;
  return s_->cache->find(s_->key(s_->space.print(g)));
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
