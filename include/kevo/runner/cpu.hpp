// CpuRunner: runs tile programs (lowered for the `host` target) on this machine's CPU for real,
// through the verify::Interpreter (matmul tiles via Eigen/OpenBLAS), and times them: warm-up,
// repeats until a time budget or a target confidence, input sets rotated so that caches do not
// flatter a candidate, one candidate timed at a time. Every timed run's outputs are checked
// against the reference evaluator on the same inputs.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kevo/runner/runner.hpp"

namespace kevo::runner {

struct CpuOptions {
  int warmup = 1;               // untimed (but checked) runs before timing
  int min_repeats = 5;          // timed runs at least
  int max_repeats = 200;        // timed runs at most
  double time_budget_s = 1.0;   // stop timing a candidate after this much timed execution...
  double target_rel_ci = 0.02;  // ...or once the 95% CI of the median is this narrow (relative)
  int input_sets = 3;           // distinct input sets, rotated run by run
  std::uint64_t seed = 0x6b65766f;
  // Roofline and fraction of peak against this machine's measured rates (host_peaks()) in place of
  // the target file's peak_flops and hbm_bytes_per_ns, which describe the machine it was written
  // on. Off: the target's figures, as the simulator uses them.
  bool measured_peaks = true;
  // Set from another thread to stop a measurement at once (kevo eval's or search's Ctrl-C; a
  // 4096^3 fp32 candidate took two minutes whatever the user pressed): the inputs' draw, the
  // reference and every run look at it, and the candidate gets status error with a message
  // starting "cancelled". Not part of the runner's identity.
  const std::atomic<bool>* cancel = nullptr;
};

// This CPU's ceilings for a CpuRunner's roofline, measured once per process on first use (about
// 0.3 s, under the runner's timing lock): the interpreter's largest nc_matmul tile
// (verify::measure_matmul_flops) and memcpy bandwidth (read + write) over a working set of the
// given size, measured once per power-of-two size, so that a kernel whose data fits in cache is
// held to the cache's bandwidth rather than DRAM's.
struct HostPeaks {
  double matmul_flops = 0;  // FLOP/s
  double seconds = 0;       // spent measuring it
};
const HostPeaks& host_peaks();
double host_copy_bytes_per_ns(std::int64_t working_set_bytes);

class CpuRunner {
 public:
  explicit CpuRunner(CpuOptions opt = {});

  std::vector<Measurement> measure(std::span<const Candidate> candidates);
  [[nodiscard]] Measurement measure_one(const Candidate& c) const;
  [[nodiscard]] RunnerTraits traits() const;
  [[nodiscard]] const CpuOptions& options() const noexcept { return opt_; }

 private:
  struct References;  // inputs and reference outputs per (kernel, input set), shared by copies
  CpuOptions opt_;
  std::shared_ptr<References> refs_;
};

}  // namespace kevo::runner
