// Turning the command line's words into kevo objects: a kernel from a .kir file or a workload
// name, a target by name or file, a runner by name. Failures are UsageErrors (exit code 2).
#pragma once
#include <atomic>
#include <cstddef>
#include <string>

#include "kevo/ir/kernel.hpp"
#include "kevo/runner/runner.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/search/kernel_problem.hpp"
#include "kevo/session/resolve.hpp"
#include "kevo/target/target.hpp"
#include "options.hpp"

namespace kevo::cli {

// A UsageError when `target` names a GPU target, which `kevo <command>` does not take.
void refuse_gpu_target(const std::string& target, const char* command);

struct Resolved {
  ir::Kernel kernel;
  std::string kernel_source;  // "file.kir" or "workload matmul:..."
  target::Target target;
  std::string target_name;
  runner::Runner runner;
  std::string runner_name;
};

// Set from kevo search's SIGINT/SIGTERM handler: process workers stop at once (their process
// groups killed), so a stop never waits on a hung worker.
extern std::atomic<bool> g_cancel_workers;
// For commands that measure through workers outside kevo search's own handler (kevo check, kevo
// model, a GPU search): the first SIGINT/SIGTERM cancels the workers (their process groups
// killed, as they sit in groups of their own a terminal's Ctrl-C never reaches), a second ends
// kevo outright. stop_signal() is the signal received, or 0; the command returns 128 + it.
void catch_stop_signals();
int stop_signal() noexcept;
// The handlers' common part (async-signal-safe): the first signal is recorded (stop_signal())
// and cancels the workers, true; a second ends kevo outright (its default action), false.
bool note_stop_signal(int sig) noexcept;

// The per-candidate timeout of --runner cmd: without --eval-timeout (kevo/session/resolve.hpp).
using session::kAdaptiveFirstTimeout;
using session::kAdaptiveFloor;
using session::kAdaptiveMinSamples;
using session::kAdaptiveMultiple;

ir::Kernel resolve_kernel(const Options& o, std::string& source);
target::Target resolve_target(const Options& o, std::string& name);
runner::Runner resolve_runner(const Options& o, const target::Target& t);
Resolved resolve_all(const Options& o);
// The kernel's schedule space on `t`, or a UsageError naming `source` (the .kir file or workload),
// the op and the reason when kevo cannot schedule the kernel (schedule::Unsupported).
schedule::ScheduleSpace resolve_space(const ir::Kernel& k, const target::Target& t, const std::string& source,
                                      const std::string& space = "searched");
// The search problem of `r`; an unsupported kernel is a UsageError as in resolve_space.
search::KernelProblem make_problem(const Resolved& r, search::KernelProblemOptions opt = {}, const std::string& space = "searched");
// The search problem of `r` over its space, already derived by resolve_space.
search::KernelProblem make_problem(schedule::ScheduleSpace space, const Resolved& r, search::KernelProblemOptions opt = {});

// A schedule argument (--schedule, --seed-schedule) as text: "-" reads stdin, an existing file is
// read, and anything else holding '=' or ';' is the schedule text itself ("tile m=128 ..."). `name`
// is what errors are located in: the path, "<stdin>" or "<inline>". `flag` names the option in errors.
std::string read_schedule_arg(const std::string& arg, const std::string& flag, std::string& name);

}  // namespace kevo::cli
