// A results directory (what `kevo search --out DIR` writes), for any front end: run.json (how the
// run was asked for, enough to rebuild it on resume), kernel.kir, target.json when the target was
// a file, checkpoint/ (the engine's journal and snapshots) and history.jsonl. Reading and writing
// it here keeps front ends compatible: a run started by one resumes in another.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kevo/core/expected.hpp"
#include "kevo/ir/kernel.hpp"

namespace kevo::search {
class KernelProblem;
}
namespace kevo::evo {
struct Individual;
}

namespace kevo::session {

inline constexpr int kRunDescriptionVersion = 1;

// run.json.
struct RunDescription {
  std::string kernel_source;  // "path.kir" or "workload matmul:..."
  std::string target;         // target name or the path it was given as
  std::string runner = "sim";
  std::string algorithm = "ga";
  std::uint64_t seed = 1;
  std::uint64_t budget = 0;   // evaluations (0: the engine's default)
  double time_limit_s = 0;
  int threads = 0;
  std::size_t population = 0;
  std::size_t patience = 0;
  double eval_timeout_s = 0;
  std::vector<std::string> seed_schedules;  // canonical schedule texts evaluated first
  std::string space = "searched";           // searched|full (schedule::DeriveOptions)
  // evaluations after which the space's expert schedules are offered (evo::Config::late_seeds_at;
  // 0: none, as in runs recorded before them), recorded so that a resume with a larger budget
  // keeps the run's own point
  std::uint64_t late_seeds_at = 0;
  std::string llm_config;                   // absolute path of the LLM TOML, or empty
  // Where the run records its evaluations: the database's absolute path, "none" (--no-db), or ""
  // (the default database; and runs recorded before this field). A resume records there too
  // unless it names another (--db, --no-db).
  std::string records;
};

// The range of a run's numeric option by its long flag name (budget, time, seed, threads,
// population, patience, eval-timeout): one table for the CLI's flags, its configuration keys and
// run.json (docs/CLI.md); nullopt for another name.
struct OptionRange {
  double lo, hi;
  // "[0, 9007199254740992]", "[1, 1e+12]": each bound exact (a shortened 2^53 would misstate the seed's)
  [[nodiscard]] std::string str() const;
};
std::optional<OptionRange> run_option_range(std::string_view name);

// Writes run.json and kernel.kir (atomically), and copies the target file when `target` names one.
void save_run(const std::filesystem::path& dir, const RunDescription& d, const ir::Kernel& kernel);
// Reads run.json; an error names the file and what is wrong (missing, bad JSON, wrong version, a
// missing or mistyped field).
Expected<RunDescription, std::string> load_run(const std::filesystem::path& dir);
// The kernel file and target to rebuild the run from: DIR/kernel.kir, and DIR/target.json when
// the run's target was a file, else its name.
std::filesystem::path run_kernel_file(const std::filesystem::path& dir);
std::string run_target(const std::filesystem::path& dir, const RunDescription& d);
// One history.jsonl line (JSON, no newline): id, generation, op, status, schedule text,
// latency_ns and fraction_of_peak when ok, reason when there is one, t (seconds) when t >= 0.
std::string history_line(const evo::Individual& ind, const search::KernelProblem& p, double t = -1);
// history.jsonl from the engine's journal (DIR/checkpoint): one JSON object per evaluation (id,
// status, op, generation, schedule text, latency_ns and fraction_of_peak when ok, reason).
void write_history(const std::filesystem::path& dir, const search::KernelProblem& p);

}  // namespace kevo::session
