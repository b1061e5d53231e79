// Turning the command line's words into kevo objects: a kernel from a .kir file or a workload
// name, a target by name or file, a runner by name. Failures are UsageErrors (exit code 2).
#pragma once
#include <string>

#include "kevo/ir/kernel.hpp"
#include "kevo/runner/runner.hpp"
#include "kevo/target/target.hpp"
#include "options.hpp"

namespace kevo::cli {

struct Resolved {
  ir::Kernel kernel;
  std::string kernel_source;  // "file.kir" or "workload matmul:..."
  target::Target target;
  std::string target_name;
  runner::Runner runner;
  std::string runner_name;
};

ir::Kernel resolve_kernel(const Options& o, std::string& source);
target::Target resolve_target(const Options& o, std::string& name);
runner::Runner resolve_runner(const Options& o, const target::Target& t);
Resolved resolve_all(const Options& o);

}  // namespace kevo::cli
