// Options of the kevo command: defaults, then a TOML configuration file, then flags.
#pragma once
#include <cstdint>
#include <optional>
#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace CLI {
class Option;
}

namespace kevo::cli {

// Exit code 2 with one line on stderr: bad flags, files, kernels, schedules, configs.
struct UsageError {
  std::string message;
};

struct Options {
  // what
  std::string kernel_file;  // .kir
  std::string workload;     // NAME:ARGS
  std::string target;       // trn1|trn2|trn3|host|FILE.json ("" = trn2, or host for --runner cpu)
  std::string runner = "sim";
  std::string schedule_file;  // eval: a file, "-" (stdin) or the schedule text itself
  std::vector<std::string> seed_schedules;  // search: schedules evaluated first (same forms)
  std::string space = "searched";  // searched|full: the schedule space (schedule::DeriveOptions)
  // how
  std::string algorithm = "ga";
  std::uint64_t budget = 0;  // evaluations (0 = default for the algorithm)
  double time_limit = 0;     // seconds (0 = none)
  std::uint64_t seed = 1;
  int threads = 0;  // 0 = all cores
  std::size_t population = 0;
  std::size_t patience = 0;
  std::string llm_config;
  bool llm_optional = false;  // an LLM that fails its start check is a warning, not exit 2
  double eval_timeout = 0;    // seconds per candidate for --runner cmd: (0 = adaptive)
  std::string mpi_mode;       // under mpirun/srun: farm (default) | islands | off (lib/cli/mpi.cpp)
  double mpi_timeout = 1800;  // seconds a rank waits for another before the job ends (docs/SCALING.md)
  // where
  std::string out;
  std::string resume;
  std::string config_file;
  // the keys --config set (not overridden by a flag), each with its file:line:column: an error in
  // one of their values names the file's line, not the flag it stands for
  std::map<std::string, std::string> configured_at;
  // the long names of the flags given on the command line (main.cpp's given()): with
  // configured_at, what the user set, whatever its value (a resume refuses a changed one)
  std::vector<std::string> given_flags;
  [[nodiscard]] bool set(const std::string& name) const {
    return configured_at.count(name) > 0 || std::find(given_flags.begin(), given_flags.end(), name) != given_flags.end();
  }
  std::string cache_file;
  std::string db_file;           // records database ("" = records::Database::default_path())
  bool no_db = false;            // record nothing, take nothing from records
  bool no_warm_start = false;    // record, but start cold
  bool quiet = false;
  bool json = false;
  std::size_t samples = 1000;  // kevo space: sampled validity
  // kevo calibrate (--out is the fitted target file)
  std::string measurements_file;     // TOML rows
  std::string report_file;           // markdown fit report
  std::string toolchain;             // keep only rows of this toolchain
  std::vector<std::string> fit_params;  // replaces [fit] params
  // kevo db / kevo check
  std::string db_action;             // list, show, best, export, import, gc
  std::string db_arg;                // KERNEL (show, best) or FILE (export, import)
  std::string check_file;            // TOML list of kernels to check ("" = every kernel with records)
  double check_tolerance = 0.02;     // relative slow-down allowed beyond the recorded noise
  std::string junit_file;            // JUnit XML report of kevo check
  std::size_t keep_best = 16;        // kevo db gc
};

// The allowed range of a numeric option, by its long name (budget, time, seed, threads,
// population, patience, samples, eval-timeout): one table for flags and configuration files.
struct NumericRange {
  double lo, hi;
};
NumericRange numeric_range(const std::string& name);
// Checks a numeric flag against the range its configuration key has (numeric_range), before any
// conversion: "--budget -5" is an error naming the flag and value, never a wrapped-around count.
// Every subcommand's flag of that name takes the same range.
CLI::Option* bounded(CLI::Option* opt, const std::string& name);

// Applies a TOML configuration file: keys are the long flag names (kernel, workload, target,
// runner, algorithm, budget, time, seed, threads, population, patience, eval-timeout, llm, out).
// Only keys not set on the command line are taken. Throws UsageError naming file:line:column.
void apply_config(Options& o, const std::string& path, const std::vector<std::string>& set_by_flags);
// `message` (an error naming a flag) named as the --config line that gave the value instead, when
// the config file gave it.
std::string as_configured(const Options& o, const std::string& message);

}  // namespace kevo::cli
