#include "kevo/session/results.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "kevo/core/io.hpp"
#include "kevo/evo/engine.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/search/kernel_problem.hpp"

namespace kevo::session {

namespace fs = std::filesystem;
using nlohmann::json;

void save_run(const fs::path& dir, const RunDescription& d, const ir::Kernel& kernel) {
  json j{{"version", kRunDescriptionVersion},
         {"kernel_source", d.kernel_source},
         {"target", d.target},
         {"runner", d.runner},
         {"algorithm", d.algorithm},
         {"seed", d.seed},
         {"budget", d.budget},
         {"time", d.time_limit_s},
         {"threads", d.threads},
         {"population", d.population},
         {"patience", d.patience},
         {"eval_timeout", d.eval_timeout_s},
         {"seed_schedules", d.seed_schedules},
         {"space", d.space},
         {"llm", d.llm_config}};
  write_file_atomic(dir / "run.json", j.dump(2) + "\n");
  write_file_atomic(dir / "kernel.kir", ir::print_kernel(kernel));
  std::error_code ec;
  if (fs::is_regular_file(d.target, ec)) fs::copy_file(d.target, dir / "target.json", fs::copy_options::overwrite_existing);
}

Expected<RunDescription, std::string> load_run(const fs::path& dir) {
  const auto path = dir / "run.json";
  std::error_code ec;
  if (!fs::exists(path, ec)) return unexpected(fmt::format("{}: no run.json there (not a kevo results directory)", dir.string()));
  std::string text;
  try {
    text = read_file(path);
  } catch (const Error& e) {
    return unexpected(std::string(e.what()));
  }
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("version", 0) != kRunDescriptionVersion)
    return unexpected(fmt::format("{}: not a kevo run description (bad JSON or version)", path.string()));
  RunDescription d;
  try {
    d.kernel_source = j.at("kernel_source").get<std::string>();
    d.target = j.at("target").get<std::string>();
    d.runner = j.at("runner").get<std::string>();
    d.algorithm = j.at("algorithm").get<std::string>();
    d.seed = j.at("seed").get<std::uint64_t>();
    d.budget = j.at("budget").get<std::uint64_t>();
    d.time_limit_s = j.at("time").get<double>();
    d.threads = j.at("threads").get<int>();
    d.population = j.at("population").get<std::size_t>();
    d.patience = j.at("patience").get<std::size_t>();
    d.llm_config = j.at("llm").get<std::string>();
    d.eval_timeout_s = j.value("eval_timeout", 0.0);
    if (j.contains("seed_schedules")) d.seed_schedules = j.at("seed_schedules").get<std::vector<std::string>>();
    d.space = j.value("space", std::string("searched"));
  } catch (const json::exception& e) {
    return unexpected(fmt::format("{}: {}", path.string(), e.what()));
  }
  return d;
}

fs::path run_kernel_file(const fs::path& dir) { return dir / "kernel.kir"; }

std::string run_target(const fs::path& dir, const RunDescription& d) {
  std::error_code ec;
  return fs::exists(dir / "target.json", ec) ? (dir / "target.json").string() : d.target;
}

std::string history_line(const evo::Individual& ind, const search::KernelProblem& p, double t) {
  json j{{"id", ind.id},
         {"generation", ind.generation},
         {"op", ind.op},
         {"status", std::string(to_string(ind.eval.status))},
         {"schedule", p.to_text(ind.genome)}};
  if (ind.eval.ok()) {
    j["latency_ns"] = ind.eval.fitness[0];
    j["fraction_of_peak"] = ind.eval.metric("fraction_of_peak");
  }
  if (!ind.eval.reason.empty()) j["reason"] = ind.eval.reason;
  if (t >= 0) j["t"] = t;
  return j.dump();
}

void write_history(const fs::path& dir, const search::KernelProblem& p) {
  std::string all;
  for (const auto& ind : evo::read_journal(dir / "checkpoint")) all += history_line(ind, p, -1) + "\n";
  write_file_atomic(dir / "history.jsonl", all);
}

}  // namespace kevo::session
