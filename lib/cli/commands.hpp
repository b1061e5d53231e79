// The kevo subcommands. Each returns the process exit code; user errors throw UsageError.
#pragma once
#include "options.hpp"

namespace kevo::cli {

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

}  // namespace kevo::cli
