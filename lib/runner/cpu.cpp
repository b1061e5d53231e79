// CpuRunner. Preparation (interpreter checks, buffer allocation, reference evaluation) runs
// outside any lock, so several threads may prepare at once; the timing loop holds one
// process-wide mutex so that two candidates never share the CPU while either is being timed.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <map>
#include <mutex>

#include "kevo/core/error.hpp"
#include "kevo/core/hash.hpp"
#include "kevo/ir/eval.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/runner/cpu.hpp"
#include "kevo/runner/sim.hpp"
#include "kevo/target/target.hpp"
#include "kevo/verify/interpreter.hpp"

namespace kevo::runner {

namespace {

// The message of a measurement cut short by CpuOptions::cancel (ProcessRunner's words).
constexpr const char* kCancelled = "cancelled: the run is stopping";

std::mutex& timing_mutex() {
  static std::mutex m;
  return m;
}

// Best memcpy rate (read + write bytes per ns) over `bytes` of footprint: half source, half
// destination, copied until about 20 ms have passed (at least 3 copies).
double measure_copy(std::int64_t bytes) {
  using Clock = std::chrono::steady_clock;
  const auto half = static_cast<std::size_t>(std::max<std::int64_t>(bytes / 2, 4096));
  std::vector<char> src(half, 1), dst(half, 0);
  std::memcpy(dst.data(), src.data(), half);  // page in
  double best = 0;
  const auto stop = Clock::now() + std::chrono::milliseconds(20);
  for (int rep = 0; rep < 3 || Clock::now() < stop; ++rep) {
    src[static_cast<std::size_t>(rep) % half] = static_cast<char>(rep);
    const auto t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), half);
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    if (ns > 0) best = std::max(best, 2.0 * static_cast<double>(half) / ns);
    if (rep > 10000) break;
  }
  if (dst[half - 1] != src[half - 1]) throw Error("cpu: memcpy measurement lost its copy");
  return best;
}

}  // namespace

const HostPeaks& host_peaks() {
  static const HostPeaks peaks = [] {
    verify::configure_process_blas();  // the backend the interpreter will time, not OpenBLAS's defaults
    std::lock_guard lock(timing_mutex());
    const auto t0 = std::chrono::steady_clock::now();
    HostPeaks p;
    p.matmul_flops = verify::measure_matmul_flops(0.25);
    p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return p;
  }();
  return peaks;
}

double host_copy_bytes_per_ns(std::int64_t working_set_bytes) {
  // one measurement per power of two from 64 KiB to 256 MiB
  int bucket = 16;
  while (bucket < 28 && (std::int64_t{1} << bucket) < working_set_bytes) ++bucket;
  static std::mutex mu;
  static std::map<int, double> rates;
  {
    std::lock_guard lock(mu);
    if (auto it = rates.find(bucket); it != rates.end()) return it->second;
  }
  double rate = 0;
  {
    std::lock_guard lock(timing_mutex());
    rate = measure_copy(std::int64_t{1} << bucket);
  }
  std::lock_guard lock(mu);
  return rates.emplace(bucket, rate).first->second;
}

struct CpuRunner::References {
  struct Set {
    std::vector<std::vector<float>> inputs;     // per kernel tensor (inputs only)
    std::vector<std::vector<float>> reference;  // per kernel tensor (outputs filled): fp64 values
    std::vector<std::vector<float>> allowance;  // per element: what fp32 arithmetic may cost there (verify::compare)
  };
  std::mutex mu;
  std::map<std::pair<std::uint64_t, int>, std::shared_ptr<const Set>> sets;

  // A cancel (CpuOptions::cancel) throws out of the draw or the reference; nothing is kept.
  std::shared_ptr<const Set> get(const ir::Kernel& k, std::uint64_t kernel_hash, std::uint64_t seed, int set,
                                 const std::atomic<bool>* cancel) {
    {
      std::lock_guard lock(mu);
      if (auto it = sets.find({kernel_hash, set}); it != sets.end()) return it->second;
    }
    auto s = std::make_shared<Set>();
    s->inputs = ir::random_inputs(k, seed + static_cast<std::uint64_t>(set) * 0x9e3779b97f4a7c15ULL, cancel);
    auto [values, allowance] = verify::reference_with_allowance(k, s->inputs, cancel);  // the oracle's (verify::check_program)
    s->reference = std::move(values);
    s->allowance = std::move(allowance);
    std::lock_guard lock(mu);
    if (sets.size() > 64) sets.clear();  // bounded: a long search over many kernels must not grow without end
    return sets.emplace(std::make_pair(kernel_hash, set), std::move(s)).first->second;
  }
};

CpuRunner::CpuRunner(CpuOptions opt) : opt_(opt), refs_(std::make_shared<References>()) {
  opt_.input_sets = std::max(1, opt_.input_sets);
  opt_.min_repeats = std::max(1, opt_.min_repeats);
  opt_.max_repeats = std::max(opt_.min_repeats, opt_.max_repeats);
  opt_.warmup = std::max(0, opt_.warmup);
}

RunnerTraits CpuRunner::traits() const {
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = 0;
  RunnerTraits t;
  // Timings from another machine or other settings are not interchangeable: both go in the key.
  // v2: outputs checked with the oracle's magnitude-scaled tolerance (cached `incorrect` verdicts of
  // v1 do not carry over). v3: roofline against this machine's measured peaks (m1) or the target's.
  // v4: the oracle's fp64 reference and its allowance for fp32 arithmetic's own error. v5: the
  // absolute tolerance at the reference's own scale, rms (was max(1, rms)). v6: fp8's rounding term
  // is bf16's (was fp8's 3 ulps).
  t.identity = fmt::format("cpu:v6:{}:w{}r{}-{}:b{:g}:ci{:g}:s{}:m{}", host, opt_.warmup, opt_.min_repeats, opt_.max_repeats,
                           opt_.time_budget_s, opt_.target_rel_ci, opt_.input_sets, opt_.measured_peaks ? 1 : 0);
  t.deterministic = false;
  t.thread_safety = ThreadSafety::constant;
  t.cost_seconds = opt_.time_budget_s + 0.1;
  t.checks_outputs = true;
  return t;
}

Measurement CpuRunner::measure_one(const Candidate& c) const {
  using Clock = std::chrono::steady_clock;
  Measurement m;
  if (c.program == nullptr || c.kernel == nullptr) {
    m.status = Status::error;
    m.message = "cpu: the CpuRunner needs the kernel (for reference outputs) and the program";
    return m;
  }
  const ir::Kernel& k = *c.kernel;
  const auto cancelled = [&] { return opt_.cancel != nullptr && opt_.cancel->load(std::memory_order_acquire); };
  if (cancelled()) {
    m.status = Status::error;
    m.message = kCancelled;
    return m;
  }
  try {
    const verify::Interpreter interp(*c.program);  // validates every access pattern once
    const std::uint64_t kh = ir::kernel_hash(k);
    std::vector<std::shared_ptr<const References::Set>> sets;
    std::vector<verify::Memory> mems;
    for (int s = 0; s < opt_.input_sets; ++s) {
      sets.push_back(refs_->get(k, kh, opt_.seed, s, opt_.cancel));
      mems.push_back(interp.allocate());
      interp.bind_inputs(mems.back(), sets.back()->inputs);
    }
    std::vector<int> outputs;
    for (std::size_t t = 0; t < k.tensors.size(); ++t)
      if (k.tensors[t].role == ir::Role::output) outputs.push_back(static_cast<int>(t));
    // The oracle's tolerance (verify::check_program's): by storage dtype and accumulated reduction
    // length, its absolute part scaled by the reference's magnitude (docs/RUNNERS.md).
    const std::vector<std::int64_t> depths = verify::reduction_depths(k);
    const std::vector<verify::Rounding> rounding = verify::rounding_dtypes(k);
    std::vector<std::vector<verify::Tolerance>> tols(sets.size());
    for (std::size_t s = 0; s < sets.size(); ++s)
      for (int t : outputs) {
        const auto ut = static_cast<std::size_t>(t);
        tols[s].push_back(verify::tolerance_for(rounding[ut], depths[ut], sets[s]->reference[ut]));
      }

    // Checks one finished run; false (with m filled in) on a mismatch.
    auto check = [&](int set, int run) {
      for (std::size_t o = 0; o < outputs.size(); ++o) {
        const int t = outputs[o];
        const auto got = interp.output(mems[static_cast<std::size_t>(set)], t);
        const auto& want = sets[static_cast<std::size_t>(set)]->reference[static_cast<std::size_t>(t)];
        const verify::CheckResult r = verify::compare(k, t, got, want, tols[static_cast<std::size_t>(set)][o],
                                                      sets[static_cast<std::size_t>(set)]->allowance[static_cast<std::size_t>(t)]);
        if (!r.ok) {
          m.status = Status::incorrect;
          m.message = fmt::format("{} (input set {}, run {})", r.message, set, run);
          return false;
        }
      }
      return true;
    };

    std::lock_guard lock(timing_mutex());
    int run = 0;
    for (int w = 0; w < opt_.warmup; ++w, ++run) {
      const int s = run % opt_.input_sets;
      interp.poison_outputs(mems[static_cast<std::size_t>(s)]);
      interp.execute(mems[static_cast<std::size_t>(s)], opt_.cancel);
      if (!check(s, run)) return m;
    }
    double timed = 0;
    for (int rep = 0; rep < opt_.max_repeats; ++rep, ++run) {
      const int s = run % opt_.input_sets;
      verify::Memory& mem = mems[static_cast<std::size_t>(s)];
      interp.poison_outputs(mem);
      const auto t0 = Clock::now();
      interp.execute(mem, opt_.cancel);
      const auto t1 = Clock::now();
      const double ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
      m.samples_ns.push_back(std::max(ns, 1.0));
      timed += ns * 1e-9;
      if (!check(s, run)) return m;
      if (rep + 1 >= opt_.min_repeats) {
        if (timed >= opt_.time_budget_s) break;
        const LatencySummary sum = summarize(m.samples_ns);
        if (sum.median > 0 && (sum.ci_high - sum.ci_low) / sum.median <= opt_.target_rel_ci && m.samples_ns.size() >= 6) break;
      }
    }
  } catch (const std::exception& e) {
    m = Measurement{};
    m.status = Status::error;
    m.message = cancelled() ? std::string(kCancelled) : fmt::format("cpu: {}", e.what());
    return m;
  }
  m.status = Status::ok;
  m.latency = summarize(m.samples_ns);
  m.bytes_moved = static_cast<double>(c.program->stats.hbm_bytes_read + c.program->stats.hbm_bytes_written);
  const double flops = static_cast<double>(c.program->stats.flops);
  double here_bw = 0;  // the measured copy bandwidth the roofline used, bytes/ns
  if (c.target != nullptr) {
    Roofline rf = roofline(c.kernel, *c.program, *c.target);
    if (opt_.measured_peaks) {
      // This machine's ceilings, not the target file's (docs/RUNNERS.md, "Fraction of peak").
      target::Target here = *c.target;
      const double mm = host_peaks().matmul_flops;
      if (mm > 0) here.peak_tensor_flops_bf16 = here.peak_tensor_flops_fp8 = here.peak_tensor_flops_fp32 = mm;
      here_bw = host_copy_bytes_per_ns(std::max<std::int64_t>(rf.min_hbm_bytes, 1));
      if (here_bw > 0) here.hbm_bytes_per_ns = here_bw;
      rf = roofline(c.kernel, *c.program, here);
    }
    m.roofline_ns = rf.ns;
    if (m.latency.median > 0) m.fraction_of_peak = rf.ns / m.latency.median;
  }
  m.profile = fmt::format("cpu: median {:.3f} ms over {} timed runs ({} input sets), 95% CI [{:.3f}, {:.3f}] ms; {:.1f} GFLOP/s",
                          m.latency.median / 1e6, m.samples_ns.size(), opt_.input_sets, m.latency.ci_low / 1e6,
                          m.latency.ci_high / 1e6, m.latency.median > 0 ? flops / m.latency.median : 0.0);
  if (here_bw > 0)
    m.profile += fmt::format("; roofline against this CPU's measured peaks: {:.1f} GFLOP/s (largest matmul tile), {:.1f} GB/s (memcpy of the kernel's data size)",
                             host_peaks().matmul_flops / 1e9, here_bw);
  return m;
}

std::vector<Measurement> CpuRunner::measure(std::span<const Candidate> candidates) {
  std::vector<Measurement> out;
  out.reserve(candidates.size());
  for (const Candidate& c : candidates) out.push_back(measure_one(c));
  return out;
}

}  // namespace kevo::runner
