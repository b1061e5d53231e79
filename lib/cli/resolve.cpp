#include "resolve.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <iterator>

#include "kevo/calibrate.hpp"
#include "kevo/core/io.hpp"
#include "kevo/emit.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/ir/workloads.hpp"
#include "kevo/runner.hpp"
#include "kevo/target/target.hpp"

namespace kevo::cli {

std::atomic<bool> g_cancel_workers{false};

ir::Kernel resolve_kernel(const Options& o, std::string& source) {
  if (!o.kernel_file.empty() && !o.workload.empty())
    throw UsageError{"give either a KERNEL file or --workload, not both"};
  if (!o.kernel_file.empty()) {
    std::string text;
    try {
      text = read_file(o.kernel_file);
    } catch (const Error& e) {
      throw UsageError{e.what()};
    }
    auto k = ir::parse_kernel(text, o.kernel_file);
    if (!k) throw UsageError{k.error().headline()};
    source = o.kernel_file;
    return std::move(k).value();
  }
  const std::string spec = o.workload.empty() ? std::string("matmul:M=2048,N=2048,K=2048,dtype=bf16") : o.workload;
  auto k = ir::workload(spec);
  if (!k) throw UsageError{fmt::format("--workload {}: {}", spec, k.error())};
  source = "workload " + spec;
  return std::move(k).value();
}

target::Target resolve_target(const Options& o, std::string& name) {
  name = o.target;
  if (name.empty()) name = o.runner == "cpu" ? "host" : "trn2";
  auto t = target::load_target(name);
  if (!t) throw UsageError{fmt::format("--target {}: {}", name, t.error().headline())};
  return std::move(t).value();
}

runner::Runner resolve_runner(const Options& o, const target::Target& t) {
  if (o.eval_timeout > 0 && o.runner.rfind("cmd:", 0) != 0)
    throw UsageError{fmt::format("--eval-timeout applies to --runner cmd:COMMAND, not --runner {}", o.runner)};
  if (o.runner == "sim") {
    // A target file's "sim" parameters (shipped, or fitted by `kevo calibrate`) reach the
    // simulator through default_sim_params(target).
    return runner::Runner(runner::SimRunner{});
  }
  if (o.runner == "cpu") {
    if (!t.host) throw UsageError{fmt::format("--runner cpu measures this CPU; it needs --target host, not {}", t.name)};
    return runner::Runner(runner::CpuRunner{});
  }
  if (o.runner.rfind("cmd:", 0) == 0) {
    const std::string cmd = o.runner.substr(4);
    if (cmd.empty()) throw UsageError{"--runner cmd:COMMAND needs a command after 'cmd:'"};
    runner::ProcessOptions po;
    po.command = {"/bin/sh", "-c", cmd};
    po.cancel = &g_cancel_workers;
    if (o.eval_timeout > 0) {
      po.timeout_s = o.eval_timeout;
    } else {
      po.adaptive_timeout = true;
      po.timeout_s = kAdaptiveFirstTimeout;
      po.adaptive_floor_s = kAdaptiveFloor;
      po.adaptive_multiple = kAdaptiveMultiple;
      po.adaptive_min_samples = kAdaptiveMinSamples;
    }
    po.identity = "process:" + cmd;
    po.nki_source = [](const runner::Candidate& c) { return emit::emit_nki(*c.program, *c.kernel); };
    return runner::Runner(runner::ProcessRunner(po));
  }
  throw UsageError{fmt::format("--runner '{}' is not one of sim, cpu, cmd:COMMAND", o.runner)};
}

std::string read_schedule_arg(const std::string& arg, const std::string& flag, std::string& name) {
  if (arg == "-") {
    name = "<stdin>";
    std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    if (std::cin.bad()) throw UsageError{fmt::format("{} -: cannot read stdin", flag)};
    return text;
  }
  std::error_code ec;
  if (std::filesystem::is_regular_file(arg, ec) || arg.find_first_of("=;") == std::string::npos) {
    name = arg;
    try {
      return read_file(arg);
    } catch (const Error& e) {
      throw UsageError{fmt::format("{} {}", flag, e.what())};
    }
  }
  name = "<inline>";
  return arg;
}

Resolved resolve_all(const Options& o) {
  std::string ksrc, tname;
  auto k = resolve_kernel(o, ksrc);
  auto t = resolve_target(o, tname);
  auto r = resolve_runner(o, t);
  return Resolved{std::move(k), std::move(ksrc), std::move(t), std::move(tname), std::move(r), o.runner};
}

}  // namespace kevo::cli
