#include "kevo/session/resolve.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "kevo/core/io.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/ir/workloads.hpp"
#include "kevo/runner.hpp"

namespace kevo::session {

Expected<ir::Kernel, std::string> kernel_from_file(const std::string& path) {
  std::string text;
  try {
    text = read_file(path, kMaxTextFileBytes);
  } catch (const Error& e) {
    return unexpected(std::string(e.what()));
  }
  auto k = ir::parse_kernel(text, path);
  if (!k) return unexpected(k.error().headline());
  return std::move(k).value();
}

Expected<ir::Kernel, std::string> kernel_from_workload(const std::string& spec) {
  auto k = ir::workload(spec);
  if (!k) return unexpected(fmt::format("workload {}: {}", excerpt(spec), k.error()));
  return std::move(k).value();
}

Expected<target::Target, std::string> target_by_name(const std::string& name_or_file) {
  auto t = target::load_target(name_or_file);
  if (!t) return unexpected(fmt::format("target {}: {}", name_or_file, t.error().headline()));
  return std::move(t).value();
}

TargetFailure target_failure(const std::string& name_or_file) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(name_or_file, ec)) return TargetFailure::not_found;
  return std::ifstream(name_or_file) ? TargetFailure::parse : TargetFailure::unreadable;
}

Expected<runner::Runner, std::string> runner_by_name(std::string_view name, const target::Target& t, const RunnerOptions& opt) {
  if (name == "sim") {
    // A target file's "sim" parameters (shipped, or fitted by `kevo calibrate`) reach the
    // simulator through default_sim_params(target).
    return runner::Runner(runner::SimRunner{});
  }
  if (name == "cpu") {
    if (!t.host) return unexpected(fmt::format("runner cpu measures this CPU; it needs target host, not {}", t.name));
    runner::CpuOptions co;
    co.cancel = opt.cancel;
    return runner::Runner(runner::CpuRunner(co));
  }
  if (name.rfind("cmd:", 0) == 0) {
    const std::string cmd(name.substr(4));
    if (cmd.empty()) return unexpected(std::string("runner cmd:COMMAND needs a command after 'cmd:'"));
    runner::ProcessOptions po;
    po.command = {"/bin/sh", "-c", cmd};
    po.cancel = opt.cancel;
    if (opt.eval_timeout_s > 0) {
      po.timeout_s = opt.eval_timeout_s;
    } else {
      po.adaptive_timeout = true;
      po.timeout_s = kAdaptiveFirstTimeout;
      po.adaptive_floor_s = kAdaptiveFloor;
      po.adaptive_multiple = kAdaptiveMultiple;
      po.adaptive_min_samples = kAdaptiveMinSamples;
    }
    po.identity = "process:" + cmd;  // the worker gets the emitted NKI source: ProcessRunner's default
    return runner::Runner(runner::ProcessRunner(po));
  }
  return unexpected(fmt::format("runner '{}' is not one of sim, cpu, cmd:COMMAND", name));
}

}  // namespace kevo::session
