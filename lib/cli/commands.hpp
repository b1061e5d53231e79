// The kevo subcommands. Each returns the process exit code; user errors throw UsageError.
#pragma once
#include <functional>
#include <utility>

#include "options.hpp"

namespace CLI {
class App;
}

namespace kevo::cli {

// Exit codes of kevo search beyond 0, 1 (internal error) and 2 (usage error) (docs/CLI.md): valid
// schedules found but none verified; no candidate measured ok (all invalid or failed).
inline constexpr int kExitUnverified = 3;
inline constexpr int kExitNoValid = 4;

int cmd_search(Options o);
// kevo search with a GPU --target (lib/cli/gpu.cpp): Triton schedules timed by a GPU worker.
int cmd_gpu_search(Options o);
int cmd_eval(const Options& o);
int cmd_space(const Options& o);
int cmd_show(const Options& o);
int cmd_calibrate(const Options& o);
int cmd_workloads(const Options& o);
int cmd_targets(const Options& o);
int cmd_target_show(const std::string& name);
int cmd_db(const Options& o);
int cmd_check(const Options& o);
// kevo model (lib/cli/model.cpp): adds the subcommand to `app`; the function runs it once parsed.
std::pair<CLI::App*, std::function<int()>> add_model_command(CLI::App& app);

}  // namespace kevo::cli
