#include "kevo/session/results.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <optional>

#include <nlohmann/json.hpp>

#include "kevo/core/io.hpp"
#include "kevo/core/json_doc.hpp"
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
         {"late_seeds_at", d.late_seeds_at},
         {"llm", d.llm_config},
         {"records", d.records}};
  write_file_atomic(dir / "run.json", j.dump(2) + "\n");
  write_file_atomic(dir / "kernel.kir", ir::print_kernel(kernel));
  std::error_code ec;
  if (fs::is_regular_file(d.target, ec)) fs::copy_file(d.target, dir / "target.json", fs::copy_options::overwrite_existing);
}

std::string OptionRange::str() const {
  const auto exact = [](double v) {
    std::string g = fmt::format("{:g}", v);
    if (std::stod(g) == v) return g;
    return v == std::floor(v) && std::abs(v) < 1e18 ? fmt::format("{:.0f}", v) : fmt::format("{}", v);
  };
  return fmt::format("[{}, {}]", exact(lo), exact(hi));
}

std::optional<OptionRange> run_option_range(std::string_view name) {
  if (name == "budget") return OptionRange{1, 1e12};
  if (name == "time") return OptionRange{0, 1e9};
  if (name == "seed") return OptionRange{0, 9.007199254740992e15};
  if (name == "threads") return OptionRange{0, 1024};
  if (name == "population") return OptionRange{2, 1e7};
  if (name == "patience") return OptionRange{0, 1e12};
  if (name == "eval-timeout") return OptionRange{0.001, 86400};
  return std::nullopt;
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
  // The located tree first: a syntax error, and later any field's error, is reported at its line
  // and column.
  const auto tree = jsondoc::parse(text, path.string());
  if (!tree) return unexpected(tree.error().headline());
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return unexpected(fmt::format("{}: not a kevo run description (not a JSON object)", path.string()));
  // Every field typed and in the range its flag has (docs/CLI.md): a run.json edited by hand is an
  // error naming the field, never a run with a wrapped-around budget.
  struct Bad {
    std::string what;
  };
  static constexpr const char* kFields[] = {"version", "kernel_source", "target", "runner", "algorithm", "seed", "budget", "time",
                                            "threads", "population", "patience", "eval_timeout", "seed_schedules", "space", "late_seeds_at",
                                            "llm", "records"};
  RunDescription d;
  try {
    for (const auto& [k, v] : j.items()) {
      (void)v;
      if (std::find(std::begin(kFields), std::end(kFields), k) == std::end(kFields)) throw Bad{fmt::format("unknown field '{}'", k)};
    }
    const auto field = [&](const char* k) -> const json& {
      if (!j.contains(k)) throw Bad{fmt::format("'{}' is missing", k)};
      return j.at(k);
    };
    const auto str = [&](const char* k, bool may_be_empty = false) {
      const json& v = field(k);
      if (!v.is_string()) throw Bad{fmt::format("'{}' must be a string", k)};
      if (!may_be_empty && v.get<std::string>().empty()) throw Bad{fmt::format("'{}' must not be empty", k)};
      return v.get<std::string>();
    };
    // a number in the range r (run_option_range: the flag's); whole where `whole`; 0 allowed
    // besides the range where `zero` (the engine's or algorithm's default, an adaptive timeout)
    const auto num = [&](const char* k, OptionRange r, bool whole, bool zero = false) {
      const auto [lo, hi] = r;
      const json& v = field(k);
      if (!v.is_number() || v.is_boolean()) throw Bad{fmt::format("'{}' must be a number", k)};
      const double x = v.get<double>();
      if (!std::isfinite(x)) throw Bad{fmt::format("'{}' must be finite", k)};
      // an integer past 2^53 would round to its neighbour as a double (a seed that changed on resume)
      if (v.is_number_unsigned() && v.get<std::uint64_t>() > (std::uint64_t{1} << 53))
        throw Bad{fmt::format("'{}' = {} is outside {}", k, v.get<std::uint64_t>(), r.str())};
      if (whole && x != std::floor(x)) throw Bad{fmt::format("'{}' = {} must be a whole number", k, x)};
      if (!(zero && x == 0) && (x < lo || x > hi)) throw Bad{fmt::format("'{}' = {} is outside {}", k, x, r.str())};
      return x;
    };
    if (num("version", {0, 1e9}, true) != kRunDescriptionVersion)
      throw Bad{fmt::format("'version' = {} (this kevo reads version {})", field("version").dump(), kRunDescriptionVersion)};
    d.kernel_source = str("kernel_source");
    d.target = str("target");
    d.runner = str("runner");
    d.algorithm = str("algorithm");
    d.seed = static_cast<std::uint64_t>(num("seed", *run_option_range("seed"), true));
    d.budget = static_cast<std::uint64_t>(num("budget", *run_option_range("budget"), true, true));  // 0: the engine's default
    d.time_limit_s = num("time", *run_option_range("time"), false);
    d.threads = static_cast<int>(num("threads", *run_option_range("threads"), true));
    d.population = static_cast<std::size_t>(num("population", *run_option_range("population"), true, true));  // 0: the algorithm's default
    d.patience = static_cast<std::size_t>(num("patience", *run_option_range("patience"), true));
    d.llm_config = str("llm", true);  // "": no LLM
    if (j.contains("eval_timeout")) d.eval_timeout_s = num("eval_timeout", *run_option_range("eval-timeout"), false, true);  // 0: adaptive
    if (j.contains("seed_schedules")) {
      const json& v = field("seed_schedules");
      if (!v.is_array()) throw Bad{"'seed_schedules' must be an array of schedule texts"};
      for (const auto& x : v) {
        if (!x.is_string()) throw Bad{"'seed_schedules' must be an array of schedule texts"};
        d.seed_schedules.push_back(x.get<std::string>());
      }
    }
    if (j.contains("late_seeds_at")) d.late_seeds_at = static_cast<std::uint64_t>(num("late_seeds_at", *run_option_range("budget"), true, true));
    if (j.contains("records")) d.records = str("records", true);
    if (j.contains("space")) {
      d.space = str("space");
      if (d.space != "searched" && d.space != "full") throw Bad{fmt::format("'space' = '{}' (searched or full)", d.space)};
    }
  } catch (const Bad& b) {
    // at the field's value where the message names one ('threads' = -5 ...), else at the top
    std::size_t pos = tree->pos;
    for (std::size_t i = 0; i < tree->members.size(); ++i) {
      const auto& key = tree->members[i].first;
      if (b.what.starts_with("'" + key + "'")) pos = tree->members[i].second.pos;
      if (b.what == "unknown field '" + key + "'") pos = tree->key_pos[i];
    }
    return unexpected(make_diagnostic(text, pos, path.string(), b.what).headline());
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
