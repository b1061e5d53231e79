// Names to kevo objects, for any front end: a kernel from a .kir file or a built-in workload
// spec, a target by name or JSON file, a runner by name ("sim", "cpu", "cmd:COMMAND"). What the
// `kevo` command accepts, as a library: errors are values (one line naming what and where).
#pragma once
#include <atomic>
#include <cstddef>
#include <string>
#include <string_view>

#include "kevo/core/expected.hpp"
#include "kevo/ir/kernel.hpp"
#include "kevo/runner/runner.hpp"
#include "kevo/target/target.hpp"

namespace kevo::session {

// The per-candidate timeout of a cmd: runner without an explicit one: this bound until
// kAdaptiveMinSamples candidates answered ok, then max(floor, multiple x their p90), at most the bound.
inline constexpr double kAdaptiveFirstTimeout = 120;
inline constexpr double kAdaptiveFloor = 10;
inline constexpr double kAdaptiveMultiple = 5;
inline constexpr std::size_t kAdaptiveMinSamples = 5;

struct RunnerOptions {
  double eval_timeout_s = 0;                 // cmd: a fixed per-candidate timeout; 0: adaptive (above); other runners ignore it
  // Set to stop measurements at once: cmd: its workers' process groups killed; cpu: the run and
  // the reference it checks against cut short. Either way the candidate's status is error with a
  // message starting "cancelled".
  const std::atomic<bool>* cancel = nullptr;
};

// A kernel from a .kir file (parse errors located in it).
Expected<ir::Kernel, std::string> kernel_from_file(const std::string& path);
// A built-in workload, e.g. "matmul:M=2048,N=2048,K=2048,dtype=bf16" (ir/workloads.hpp).
Expected<ir::Kernel, std::string> kernel_from_workload(const std::string& spec);
// A target by name (trn1, trn2, trn3, host) or a target JSON file.
Expected<target::Target, std::string> target_by_name(const std::string& name_or_file);
// Why target::load_target(name_or_file) failed, for front ends that type their errors: a name
// that is neither a built-in nor a regular file, a file that cannot be read, or one that was read
// and did not parse (bad JSON or a bad field).
enum class TargetFailure { not_found, unreadable, parse };
TargetFailure target_failure(const std::string& name_or_file);
// A runner by name: "sim" (the target's simulator), "cpu" (this CPU; needs a host target) or
// "cmd:COMMAND" (an external worker over the process protocol, docs/PROTOCOL.md).
Expected<runner::Runner, std::string> runner_by_name(std::string_view name, const target::Target& t,
                                                     const RunnerOptions& opt = {});

}  // namespace kevo::session
