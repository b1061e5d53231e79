#include "resolve.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <optional>
#include <csignal>
#include <string_view>
#include <utility>

#include "kevo/core/io.hpp"
#include "kevo/gpu/target.hpp"
#include "kevo/session/resolve.hpp"

namespace kevo::cli {

std::atomic<bool> g_cancel_workers{false};

namespace {
std::atomic<int> g_worker_stop{0};
extern "C" void on_worker_stop(int sig) { note_stop_signal(sig); }
}  // namespace

bool note_stop_signal(int sig) noexcept {
  if (g_worker_stop.exchange(sig) != 0) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return false;
  }
  g_cancel_workers.store(true);
  return true;
}

void catch_stop_signals() {
  std::signal(SIGINT, on_worker_stop);
  std::signal(SIGTERM, on_worker_stop);
}
int stop_signal() noexcept { return g_worker_stop.load(); }

ir::Kernel resolve_kernel(const Options& o, std::string& source) {
  if (!o.kernel_file.empty() && !o.workload.empty())
    throw UsageError{"give either a KERNEL file or --workload, not both"};
  if (!o.kernel_file.empty()) {
    auto k = session::kernel_from_file(o.kernel_file);
    if (!k) throw UsageError{k.error()};
    source = o.kernel_file;
    return std::move(k).value();
  }
  const std::string spec = o.workload.empty() ? std::string("matmul:M=2048,N=2048,K=2048,dtype=bf16") : o.workload;
  auto k = session::kernel_from_workload(spec);
  if (!k) throw UsageError{"--" + k.error()};
  source = "workload " + spec;
  return std::move(k).value();
}

// eval, space, calibrate and model take NeuronCore and host targets; a GPU target is searched by
// `kevo search` (its Triton schedules are timed by a GPU worker: docs/GPU.md).
void refuse_gpu_target(const std::string& target, const char* command) {
  if (!target.empty() && gpu::is_gpu_target(target))
    throw UsageError{fmt::format("--target {}: a GPU target; kevo {} takes NeuronCore and host targets (kevo search -t {} searches "
                                 "Triton schedules on a GPU worker: docs/GPU.md)",
                                 target, command, target)};
}

target::Target resolve_target(const Options& o, std::string& name) {
  name = o.target;
  if (name.empty()) name = o.runner == "cpu" ? "host" : "trn2";
  auto t = session::target_by_name(name);
  if (!t) throw UsageError{"--" + t.error()};
  return std::move(t).value();
}

runner::Runner resolve_runner(const Options& o, const target::Target& t) {
  if (o.eval_timeout > 0 && o.runner.rfind("cmd:", 0) != 0)
    throw UsageError{fmt::format("--eval-timeout applies to --runner cmd:COMMAND, not --runner {}", o.runner)};
  session::RunnerOptions ro;
  ro.eval_timeout_s = o.eval_timeout;
  ro.cancel = &g_cancel_workers;
  auto r = session::runner_by_name(o.runner, t, ro);
  if (!r) {
    // The library names "runner ..." and "target ...": the command's flags are --runner and --target.
    std::string m = r.error();
    for (const char* w : {"runner ", "target "})
      for (std::size_t at = m.find(w); at != std::string::npos; at = m.find(w, at + 3))
        if (at == 0 || m[at - 1] == ' ') m.insert(at, "--"), at += 2;
    throw UsageError{m};
  }
  return std::move(r).value();
}

std::string read_schedule_arg(const std::string& arg, const std::string& flag, std::string& name) {
  if (arg == "-") {
    name = "<stdin>";
    try {
      return read_stream(std::cin, "stdin", kMaxTextFileBytes);
    } catch (const Error& e) {
      throw UsageError{fmt::format("{} -: {}", flag, e.what())};
    }
  }
  std::error_code ec;
  if (std::filesystem::is_regular_file(arg, ec) || arg.find_first_of("=;") == std::string::npos) {
    name = arg;
    try {
      return read_file(arg, kMaxTextFileBytes);
    } catch (const Error& e) {
      throw UsageError{fmt::format("{} {}", flag, e.what())};
    }
  }
  name = "<inline>";
  return arg;
}

namespace {
// Where op `op` is written in kernel file `file`: the first statement line whose target is
// `op[` (line and column, 1-based), so that an error derive finds in an op points at it as a
// parse error does. Nothing when the file cannot be read or the statement is not found.
std::optional<std::pair<std::size_t, std::size_t>> statement_position(const std::string& file, const std::string& op) {
  std::error_code ec;
  if (op.empty() || !std::filesystem::is_regular_file(file, ec)) return std::nullopt;
  std::string text;
  try {
    text = read_file(file, kMaxTextFileBytes);
  } catch (const Error&) {
    return std::nullopt;
  }
  bool body = false;
  std::size_t line = 0, at = 0;
  while (at <= text.size()) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view l(text.data() + at, end - at);
    ++line;
    const std::size_t c = l.find_first_not_of(" \t");
    if (body && c != std::string_view::npos && l.substr(c).starts_with(op)) {
      const std::string_view rest = l.substr(c + op.size());
      const std::size_t b = rest.find_first_not_of(" \t");
      if (b != std::string_view::npos && rest[b] == '[') return std::make_pair(line, c + 1);
    }
    if (l.find('{') != std::string_view::npos) body = true;
    at = end + 1;
  }
  return std::nullopt;
}

UsageError unsupported(const schedule::Unsupported& u, const std::string& source) {
  if (const auto pos = statement_position(source, u.op))
    return UsageError{fmt::format("{}:{}:{}: {} [{}]", source, pos->first, pos->second, u.str(), u.code())};
  return UsageError{fmt::format("{}: {} [{}]", source, u.str(), u.code())};
}
}  // namespace

schedule::ScheduleSpace resolve_space(const ir::Kernel& k, const target::Target& t, const std::string& source,
                                      const std::string& space) {
  auto s = schedule::ScheduleSpace::try_derive(k, t, space == "full" ? schedule::DeriveOptions::full() : schedule::DeriveOptions{});
  if (!s) throw unsupported(s.error(), source);
  return std::move(s).value();
}

search::KernelProblem make_problem(const Resolved& r, search::KernelProblemOptions opt, const std::string& space) {
  return search::KernelProblem(resolve_space(r.kernel, r.target, r.kernel_source, space), r.runner, std::move(opt));
}

search::KernelProblem make_problem(schedule::ScheduleSpace space, const Resolved& r, search::KernelProblemOptions opt) {
  return search::KernelProblem(std::move(space), r.runner, std::move(opt));
}

Resolved resolve_all(const Options& o) {
  std::string ksrc, tname;
  auto k = resolve_kernel(o, ksrc);
  auto t = resolve_target(o, tname);
  auto r = resolve_runner(o, t);
  return Resolved{std::move(k), std::move(ksrc), std::move(t), std::move(tname), std::move(r), o.runner};
}

}  // namespace kevo::cli
