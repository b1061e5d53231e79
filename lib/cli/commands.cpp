#include "commands.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <string_view>
#include <nlohmann/json.hpp>
#include <thread>

#include "kevo/core/hash.hpp"
#include "kevo/core/io.hpp"
#include "kevo/emit.hpp"
#include "kevo/evo.hpp"
#include "kevo/ir/analysis.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/llm.hpp"
#include "kevo/runner.hpp"
#include "kevo/search.hpp"
#include "kevo/verify.hpp"
#include "progress.hpp"
#include "report.hpp"
#include "resolve.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace kevo::cli {

namespace {

constexpr int kResultVersion = 1;
constexpr std::uint64_t kDefaultBudget = 2000;
constexpr std::size_t kMaxVerifyCandidates = 32;  // candidates checked before giving up naming a best
constexpr double kMaxVerifySeconds = 300;         // no new candidate is checked after this long
constexpr int kExitUnverified = 3;                // valid schedules found, none verified (docs/CLI.md)

std::atomic<evo::Engine*> g_engine{nullptr};
std::atomic<bool> g_interrupted{false};

extern "C" void on_sigint(int) {
  g_interrupted.store(true);
  if (auto* e = g_engine.load()) e->request_stop();
}

evo::Algorithm parse_algorithm(const std::string& a) {
  if (a == "map-elites" || a == "map_elites") return evo::Algorithm::map_elites;
  if (a == "async" || a == "steady-state" || a == "steady_state") return evo::Algorithm::steady_state;
  if (auto x = evo::algorithm_from_string(a)) return *x;
  throw UsageError{fmt::format("--algorithm '{}' is not one of ga, islands, map-elites, async, random, exhaustive", a)};
}

std::string timestamp_dir() {
  const auto t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "runs/%Y%m%d-%H%M%S", &tm);
  std::string d = buf;
  for (int i = 2; fs::exists(d); ++i) d = fmt::format("{}-{}", buf, i);
  return d;
}

json measurement_json(const runner::Measurement& m) {
  json eng = json::object();
  for (const auto& e : m.engines) eng[e.engine] = e.utilisation;
  return json{{"status", std::string(to_string(m.status))},
              {"message", m.message},
              {"latency_ns", m.latency_ns()},
              {"latency_min_ns", m.latency.min},
              {"latency_p10_ns", m.latency.p10},
              {"latency_p90_ns", m.latency.p90},
              {"samples", m.latency.n},
              {"roofline_ns", m.roofline_ns},
              {"fraction_of_peak", m.fraction_of_peak},
              {"bottleneck", m.bottleneck},
              {"utilisation", eng},
              {"bytes_moved", m.bytes_moved},
              {"profile", m.profile}};
}

json history_line(const evo::Individual& ind, const search::KernelProblem& p, double t) {
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
  return j;
}

// Everything needed to rebuild the problem on resume, saved next to the results.
struct RunSpec {
  Options o;
  std::string kernel_source, target_name;
};

void save_spec(const fs::path& dir, const RunSpec& s, const ir::Kernel& k, const target::Target& t) {
  json j{{"version", kResultVersion},
         {"kernel_source", s.kernel_source},
         {"target", s.target_name},
         {"runner", s.o.runner},
         {"algorithm", s.o.algorithm},
         {"seed", s.o.seed},
         {"budget", s.o.budget},
         {"time", s.o.time_limit},
         {"threads", s.o.threads},
         {"population", s.o.population},
         {"patience", s.o.patience},
         {"llm", s.o.llm_config.empty() ? std::string() : fs::absolute(s.o.llm_config).string()}};
  write_file_atomic(dir / "run.json", j.dump(2) + "\n");
  write_file_atomic(dir / "kernel.kir", ir::print_kernel(k));
  (void)t;
  if (fs::exists(s.target_name)) fs::copy_file(s.target_name, dir / "target.json", fs::copy_options::overwrite_existing);
}

RunSpec load_spec(const fs::path& dir, const Options& flags) {
  const auto path = dir / "run.json";
  if (!fs::exists(path)) throw UsageError{fmt::format("--resume {}: no run.json there (not a kevo results directory)", dir.string())};
  json j = json::parse(read_file(path), nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("version", 0) != kResultVersion)
    throw UsageError{fmt::format("{}: not a kevo run description (bad JSON or version)", path.string())};
  RunSpec s;
  try {
    s.kernel_source = j.at("kernel_source").get<std::string>();
    s.target_name = j.at("target").get<std::string>();
    s.o.runner = j.at("runner").get<std::string>();
    s.o.algorithm = j.at("algorithm").get<std::string>();
    s.o.seed = j.at("seed").get<std::uint64_t>();
    s.o.budget = j.at("budget").get<std::uint64_t>();
    s.o.time_limit = j.at("time").get<double>();
    s.o.threads = j.at("threads").get<int>();
    s.o.population = j.at("population").get<std::size_t>();
    s.o.patience = j.at("patience").get<std::size_t>();
    s.o.llm_config = j.at("llm").get<std::string>();
  } catch (const json::exception& e) {
    throw UsageError{fmt::format("{}: {}", path.string(), e.what())};
  }
  s.o.kernel_file = (dir / "kernel.kir").string();
  s.o.target = fs::exists(dir / "target.json") ? (dir / "target.json").string() : s.target_name;
  // Flags that may change on resume: budgets, threads, quiet, json.
  if (flags.budget) s.o.budget = flags.budget;
  if (flags.time_limit > 0) s.o.time_limit = flags.time_limit;
  if (flags.threads) s.o.threads = flags.threads;
  s.o.quiet = flags.quiet;
  s.o.cache_file = flags.cache_file;
  s.o.json = flags.json;
  s.o.out = dir.string();
  return s;
}

evo::Config make_config(const Options& o, const fs::path& dir) {
  evo::Config c;
  c.algorithm = parse_algorithm(o.algorithm);
  c.seed = o.seed;
  c.threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  c.raise_thread_limit = true;  // an application: --threads above the core count (workers waiting on devices) is meant
  if (o.population) c.population = o.population;
  c.budget.max_evaluations = o.budget ? o.budget : kDefaultBudget;
  c.budget.max_seconds = o.time_limit;
  c.budget.patience = o.patience;
  c.checkpoint.dir = dir / "checkpoint";
  c.checkpoint.sync = false;  // a kill loses nothing either way; fsync per batch only guards power loss
  return c;
}

void write_history_from_journal(const fs::path& dir, const search::KernelProblem& p) {
  std::string all;
  for (const auto& ind : evo::read_journal(dir / "checkpoint")) all += history_line(ind, p, -1).dump() + "\n";
  write_file_atomic(dir / "history.jsonl", all);
}

std::vector<HistoryPoint> history_points(const fs::path& file) {
  std::vector<HistoryPoint> out;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;
    out.push_back({j.value("id", std::size_t{0}), j.value("latency_ns", 0.0), j.value("status", ""), j.value("op", "")});
  }
  return out;
}

struct BestFiles {
  json best;
  std::vector<EngineBar> engines;
  std::string nki;
};

BestFiles write_best(const fs::path& dir, const search::KernelProblem& p, const evo::Individual& best) {
  BestFiles out;
  const std::string sched = p.to_text(best.genome);
  write_file_atomic(dir / "best.schedule", sched + "\n");
  write_file_atomic(dir / "best.kir", p.kernel_text());
  auto prog = p.lower(best.genome);
  if (!prog) throw Error("the best schedule no longer lowers: " + prog.error().str());
  out.nki = emit::emit_nki(*prog, p.kernel());
  write_file_atomic(dir / "best.nki.py", out.nki);
  const auto sim = runner::simulate(*prog, p.target(), runner::default_sim_params(p.target()));
  write_file_atomic(dir / "best.trace.json", runner::trace_json(*prog, sim));
  const auto an = ir::analyze(p.kernel());
  const auto rep = p.measure_one(best.genome);
  out.best = json{{"schedule", sched},
                  {"latency_ns", best.eval.fitness.empty() ? 0.0 : best.eval.fitness[0]},
                  {"roofline_ns", best.eval.metric("roofline_ns")},
                  {"fraction_of_peak", best.eval.metric("fraction_of_peak")},
                  {"flops", an.flops},
                  {"hbm_bytes", an.min_hbm_bytes},
                  {"program_hbm_bytes", prog->stats.hbm_bytes_read + prog->stats.hbm_bytes_written},
                  {"instructions", prog->stats.instructions},
                  {"sbuf_bytes_per_partition", prog->stats.sbuf_bytes_per_partition},
                  {"psum_bytes_per_partition", prog->stats.psum_bytes_per_partition},
                  {"operator", best.op},
                  {"evaluation", best.id}};
  if (rep.measurement) {
    out.best["measurement"] = measurement_json(*rep.measurement);
    for (const auto& e : rep.measurement->engines) out.engines.push_back({e.engine, e.utilisation});
  }
  return out;
}

// How a schedule was verified, in words: "interpreter", "reduced shape R=64,C=96", "runner".
std::string verified_how(const search::Verification& v) {
  if (v.method == "reduced_shape") return "reduced shape " + v.shape;
  return v.method;
}

json verification_json(const search::Verification& v, std::uint64_t seed) {
  json j{{"method", v.method}, {"detail", v.detail}, {"seed", seed}};
  if (!v.shape.empty()) j["shape"] = v.shape;
  return j;
}

// The verifier of `kevo search`: verify_schedule, bounded in time, with a test seam:
// KEVO_TEST_REJECT_VERIFY=N rejects the first N candidates checked (`all`: every one), so the
// fallback and the exit code 3 path can be exercised whatever the lowering gets right.
search::Verifier search_verifier(const search::KernelProblem& p, const search::VerifyOptions& vo, double max_seconds) {
  long reject = 0;
  if (const char* e = std::getenv("KEVO_TEST_REJECT_VERIFY"); e && *e)
    reject = std::string_view(e) == "all" ? std::numeric_limits<long>::max() : std::strtol(e, nullptr, 10);
  const auto t0 = std::chrono::steady_clock::now();
  return [&p, vo, max_seconds, reject, t0](std::size_t i, const Genome& g) {
    search::Verification v;
    if (static_cast<long>(i) < reject) {
      v.conclusive = true;
      v.message = "rejected by KEVO_TEST_REJECT_VERIFY (test seam)";
      return v;
    }
    if (i > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > max_seconds) {
      v.message = fmt::format("not checked: verification time bound of {:.0f} s reached", max_seconds);
      return v;
    }
    return search::verify_schedule(p, g, vo);
  };
}

// Candidates for the winner, best first: `first` (the engine's order, or the re-timed order of
// a noisy runner), then the rest of the elites, then every valid evaluation of the journal by
// latency; distinct genomes only, none of `seen` (genome hashes to leave out).
std::vector<evo::Individual> winner_candidates(std::vector<evo::Individual> first, const evo::Result& res, const fs::path& dir,
                                               std::size_t limit, std::set<std::uint64_t> seen) {
  std::vector<evo::Individual> out;
  auto add = [&](const evo::Individual& ind) {
    if (out.size() >= limit || !ind.eval.ok() || ind.eval.fitness.empty()) return;
    if (seen.insert(genome_hash(ind.genome)).second) out.push_back(ind);
  };
  for (const auto& ind : first) add(ind);
  if (res.best) add(*res.best);
  for (const auto& ind : res.elites) add(ind);
  if (out.size() < limit && fs::exists(dir / "checkpoint")) {
    auto hist = evo::read_journal(dir / "checkpoint");
    std::stable_sort(hist.begin(), hist.end(), [](const evo::Individual& a, const evo::Individual& b) {
      const bool ao = a.eval.ok() && !a.eval.fitness.empty(), bo = b.eval.ok() && !b.eval.fitness.empty();
      if (ao != bo) return ao;
      return ao && a.eval.fitness[0] < b.eval.fitness[0];
    });
    for (const auto& ind : hist) add(ind);
  }
  return out;
}

void write_report(const fs::path& dir, const json& result, const search::KernelProblem& p, const BestFiles* best) {
  ReportData d;
  d.title = fmt::format("kevo: {} on {}", result.value("kernel", ""), result.value("target", ""));
  for (const char* k : {"kernel_source", "target", "runner", "algorithm", "seed", "evaluations", "valid", "invalid",
                        "failed", "wall_seconds", "stop_reason"})
    if (result.contains(k)) d.summary.push_back({k, result[k].is_string() ? result[k].get<std::string>() : result[k].dump()});
  if (best) {
    d.summary.push_back({"best latency", format_ns(best->best.value("latency_ns", 0.0))});
    d.summary.push_back({"fraction of peak", fmt::format("{:.1f}%", 100 * best->best.value("fraction_of_peak", 0.0))});
    d.summary.push_back({"roofline", format_ns(best->best.value("roofline_ns", 0.0))});
    const json& v = best->best.contains("verification") ? best->best["verification"] : json::object();
    const std::string method = v.value("method", "");
    d.summary.push_back({"verified", best->best.value("verified", false)
                                         ? (method == "reduced_shape" ? "yes: reduced shape " + v.value("shape", "") : "yes: " + method) +
                                               (v.value("detail", "").empty() ? "" : " (" + v.value("detail", "") + ")")
                                         : "no"});
    if (best->best.contains("unverified_better") && !best->best["unverified_better"].empty()) {
      const auto& u = best->best["unverified_better"];
      d.warning = fmt::format("{} faster candidate(s) failed verification and were skipped; the first ({}) failed with: {}",
                              u.size(), format_ns(u[0].value("latency_ns", 0.0)), u[0].value("reason", ""));
    }
    d.schedule = best->best.value("schedule", "");
    d.engines = best->engines;
    d.nki = best->nki;
    d.spans = spans_from_trace((dir / "best.trace.json").string());
  }
  if (result.contains("verification_failed")) {
    const auto& f = result["verification_failed"];
    d.summary.push_back({"verified", "no: no candidate verified"});
    d.warning = fmt::format("No schedule is named best: {} candidate(s) were checked against the reference and none matched; "
                            "the first failed with: {}",
                            f.value("checked", 0), f.value("first_reason", ""));
  }
  d.kernel_text = p.kernel_text();
  d.history = history_points(dir / "history.jsonl");
  write_file_atomic(dir / "report.html", render_report(d));
}

}  // namespace

int cmd_search(Options o) {
  const bool resuming = !o.resume.empty();
  RunSpec spec;
  if (resuming) {
    spec = load_spec(o.resume, o);
    o = spec.o;
  } else {
    spec.o = o;
  }
  auto r = resolve_all(o);
  if (!resuming) {
    spec.kernel_source = r.kernel_source;
    spec.target_name = r.target_name;
  } else {
    r.kernel_source = spec.kernel_source;
  }
  const fs::path dir = o.out.empty() ? fs::path(timestamp_dir()) : fs::path(o.out);
  if (!resuming) {
    if (fs::exists(dir / "checkpoint"))
      throw UsageError{fmt::format("--out {} already holds a run; use --resume {} or another directory", dir.string(), dir.string())};
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw UsageError{fmt::format("--out {}: {}", dir.string(), ec.message())};
  }
  const auto config = make_config(o, dir);  // validates --algorithm before any file is written
  search::KernelProblemOptions popt;
  popt.cache_file = o.cache_file;
  search::KernelProblem problem(r.kernel, r.target, r.runner, popt);
  if (!resuming) save_spec(dir, spec, problem.kernel(), problem.target());

  std::optional<evo::Engine> engine;
  if (resuming) {
    engine.emplace(evo::Engine::resume(dir / "checkpoint", evo::Problem(problem), config));
    write_history_from_journal(dir, problem);
  } else {
    engine.emplace(evo::Problem(problem), config);
  }
  // The LLM operators (one per configured model), added in the same order on resume.
  std::optional<llm::LlmOperators> llm_ops;
  if (!o.llm_config.empty()) {
    llm_ops = llm::make_llm_operators(llm::load_llm_config(o.llm_config));
    for (auto& op : llm_ops->operators) engine->add_operator(evo::Operator(op));
  }
  std::size_t history_done = 0;
  if (resuming) history_done = evo::read_journal(dir / "checkpoint").size();

  if (!o.quiet && !o.json)
    fmt::print(stderr, "kevo: {} on {} with runner {}, {} (seed {}), budget {} evaluations{} -> {}\n", r.kernel_source,
               r.target.name, o.runner, o.algorithm, o.seed, config.budget.max_evaluations,
               o.time_limit > 0 ? fmt::format(", {} s", o.time_limit) : std::string(), dir.string());
  Progress progress(o.quiet || o.json, config.budget.max_evaluations, o.time_limit, history_done);
  std::FILE* hist = std::fopen((dir / "history.jsonl").c_str(), "a");
  if (!hist) throw Error("cannot open " + (dir / "history.jsonl").string());
  const auto t0 = std::chrono::steady_clock::now();
  evo::Observer obs;
  obs.on_evaluation = [&](const evo::Individual& ind) {
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto line = history_line(ind, problem, t).dump() + "\n";
    std::fwrite(line.data(), 1, line.size(), hist);
    std::fflush(hist);
    progress.evaluation(ind.eval.ok(), ind.eval.ok() ? ind.eval.fitness[0] : 0, ind.eval.metric("fraction_of_peak"));
  };
  obs.on_new_best = [&](const evo::Individual& ind) {
    progress.new_best(ind.eval.fitness[0], ind.eval.metric("fraction_of_peak"));
  };
  engine->add_observer(obs);

  g_engine.store(&*engine);
  auto old = std::signal(SIGINT, on_sigint);
  std::signal(SIGTERM, on_sigint);
  evo::Result res;
  try {
    res = engine->run();
  } catch (...) {
    g_engine.store(nullptr);
    std::fclose(hist);
    throw;
  }
  g_engine.store(nullptr);
  std::signal(SIGINT, old);
  std::signal(SIGTERM, SIG_DFL);
  std::fclose(hist);
  progress.finish();

  const std::uint64_t failed = res.by_status[static_cast<int>(Status::incorrect)] + res.by_status[static_cast<int>(Status::timeout)] +
                               res.by_status[static_cast<int>(Status::crashed)] + res.by_status[static_cast<int>(Status::error)];
  json result{{"version", kResultVersion},
              {"kernel", problem.kernel().name},
              {"kernel_source", r.kernel_source},
              {"kernel_hash", hex64(problem.kernel_hash())},
              {"target", problem.target().name},
              {"target_hash", hex64(problem.target().hash())},
              {"runner", o.runner},
              {"runner_identity", problem.runner_traits().identity},
              {"seed", o.seed},
              {"algorithm", o.algorithm},
              {"evaluations", res.evaluations},
              {"valid", res.valid},
              {"invalid", res.by_status[static_cast<int>(Status::invalid)]},
              {"failed", failed},
              {"duplicates_skipped", res.duplicates},
              {"wall_seconds", res.wall_seconds},
              {"stop_reason", std::string(evo::to_string(res.stop_reason))},
              {"deterministic", res.deterministic},
              {"determinism_note", res.determinism_note},
              {"history_hash", hex64(res.history_hash)},
              {"space_log10_size", problem.space().log10_cardinality()}};
  json ops = json::array();
  for (const auto& s : res.operators)
    ops.push_back({{"name", s.name}, {"proposals", s.proposals}, {"evaluated", s.evaluated}, {"improvements", s.improvements},
                   {"new_bests", s.new_bests}, {"cost", s.cost}, {"weight", s.weight}});
  result["operators"] = ops;
  if (llm_ops) {
    result["llm"] = json::parse(llm_ops->usage_json(), nullptr, false);
    result["llm_cost_usd"] = llm_ops->spent_usd();
  }
  std::optional<BestFiles> best;
  std::vector<evo::Individual> first;  // the engine's order, or the re-timed one of a noisy runner
  std::set<std::uint64_t> failed_retime;  // leaders that failed when re-timed (incorrect output, crash)
  if (res.best && !problem.runner_traits().deterministic && res.elites.size() > 1) {
    // A noisy runner: re-time the leaders together before naming a winner.
    std::vector<Genome> top;
    for (std::size_t i = 0; i < res.elites.size() && i < 5; ++i) top.push_back(res.elites[i].genome);
    std::vector<runner::Measurement> ms;
    const auto order = problem.remeasure(top, 3, ms);
    if (!order.empty() && ms[order.front()].status == Status::ok) {
      for (auto i : order)
        if (ms[i].status == Status::ok) {
          first.push_back(res.elites[i]);
          first.back().eval.fitness = {ms[i].latency_ns()};
        } else {
          failed_retime.insert(genome_hash(res.elites[i].genome));  // never a candidate again
        }
      result["remeasured_top"] = top.size();
    }
  }
  // Trust the winner: candidates best first, each checked against the reference evaluator; the
  // first that verifies is named best, faster ones that failed are listed.
  std::optional<evo::Individual> winner;
  search::Verification winner_v;
  json unverified = json::array();
  search::VerifiedBest vb;
  const auto cands = winner_candidates(std::move(first), res, dir, kMaxVerifyCandidates, failed_retime);
  if (!cands.empty()) {
    std::vector<Genome> gs;
    for (const auto& c : cands) gs.push_back(c.genome);
    search::VerifyOptions vo;
    vo.seed = o.seed ^ 0x5eedULL;
    const bool talk = !o.quiet && !o.json;
    vb = search::first_verified(gs, kMaxVerifyCandidates, search_verifier(problem, vo, kMaxVerifySeconds),
                                [&](std::size_t i, std::size_t n) {
                                  if (talk) fmt::print(stderr, "kevo: verifying candidate {}/{}\n", i + 1, n);
                                });
    for (const auto& [i, v] : vb.rejected)
      unverified.push_back({{"schedule", problem.to_text(cands[i].genome)},
                            {"latency_ns", cands[i].eval.fitness[0]},
                            {"method", v.method},
                            {"reason", v.message}});
    if (vb.index) {
      winner = cands[*vb.index];
      winner_v = vb.verification;
    }
  }
  int rc = 0;
  if (winner) {
    best = write_best(dir, problem, *winner);
    best->best["verified"] = true;
    best->best["verification"] = verification_json(winner_v, o.seed ^ 0x5eedULL);
    best->best["unverified_better"] = unverified;
    result["best"] = best->best;
  } else {
    result["best"] = nullptr;
    if (!cands.empty()) {
      result["verification_failed"] = {{"first_reason", vb.rejected.empty() ? std::string() : vb.rejected.front().second.message},
                                       {"checked", vb.checked},
                                       {"candidates", unverified}};
      rc = kExitUnverified;
    }
  }
  write_file_atomic(dir / "result.json", result.dump(2) + "\n");
  write_report(dir, result, problem, best ? &*best : nullptr);

  if (o.json) {
    fmt::print("{}\n", result.dump(2));
  } else if (!o.quiet || res.stop_reason == evo::StopReason::requested) {
    fmt::print("kevo: {} evaluations ({} valid, {} invalid, {} failed) in {:.1f} s; stopped: {}\n", res.evaluations,
               res.valid, result["invalid"].get<std::uint64_t>(), failed, res.wall_seconds, evo::to_string(res.stop_reason));
    if (best) {
      fmt::print("best: {}  ({:.1f}% of peak, roofline {}, bottleneck {})  verified: {}\n",
                 format_ns(best->best["latency_ns"].get<double>()), 100 * best->best["fraction_of_peak"].get<double>(),
                 format_ns(best->best["roofline_ns"].get<double>()),
                 best->best.contains("measurement") ? best->best["measurement"].value("bottleneck", "-") : "-",
                 verified_how(winner_v));
      fmt::print("schedule: {}\n", best->best["schedule"].get<std::string>());
      if (!unverified.empty())
        fmt::print("warning: {} faster candidate(s) failed verification and were not named best (first: {}: {})\n",
                   unverified.size(), format_ns(unverified[0]["latency_ns"].get<double>()),
                   unverified[0]["reason"].get<std::string>());
    } else if (result.contains("verification_failed")) {
      fmt::print("no verified schedule: {} candidate(s) checked, none matched the reference (first: {}); no best named\n",
                 vb.checked, result["verification_failed"]["first_reason"].get<std::string>());
    } else {
      fmt::print("no valid schedule found\n");
    }
    fmt::print("results: {}/ (result.json, history.jsonl, best.schedule, best.nki.py, best.trace.json, report.html)\n",
               dir.string());
  }
  if (res.stop_reason == evo::StopReason::requested) {
    fmt::print(stderr, "kevo: interrupted; checkpoint written. Resume with: kevo search --resume {}\n", dir.string());
    return 130;
  }
  if (rc == kExitUnverified && !o.json) fmt::print(stderr, "kevo: no schedule verified; exit code {}\n", kExitUnverified);
  return rc;
}

int cmd_eval(const Options& o) {
  auto r = resolve_all(o);
  search::KernelProblem problem(r.kernel, r.target, r.runner);
  Genome g;
  if (o.schedule_file.empty()) {
    g = problem.schedule_space().default_genome();
  } else {
    std::string text;
    try {
      text = read_file(o.schedule_file);
    } catch (const Error& e) {
      throw UsageError{e.what()};
    }
    auto parsed = problem.schedule_space().parse(text, o.schedule_file);
    if (!parsed) throw UsageError{parsed.error().headline()};
    g = *parsed;
  }
  const auto rep = problem.measure_one(g);
  const auto an = ir::analyze(problem.kernel());
  json j{{"kernel", problem.kernel().name}, {"target", problem.target().name}, {"runner", o.runner},
         {"schedule", rep.schedule},          {"flops", an.flops},                {"hbm_bytes", an.min_hbm_bytes}};
  int rc = 0;
  if (!rep.invalid.code.empty()) {
    j["status"] = "invalid";
    j["reason"] = rep.invalid.str();
    j["latency_ns"] = nullptr;
    rc = 1;
  } else if (rep.measurement) {
    const auto mj = measurement_json(*rep.measurement);
    for (auto it = mj.begin(); it != mj.end(); ++it) j[it.key()] = it.value();
    j["instructions"] = rep.stats.instructions;
    j["sbuf_bytes_per_partition"] = rep.stats.sbuf_bytes_per_partition;
    j["psum_bytes_per_partition"] = rep.stats.psum_bytes_per_partition;
    if (rep.measurement->status != Status::ok) rc = 1;
  }
  // Correctness against the reference: a schedule that ran but computes the wrong values fails.
  std::optional<search::Verification> ver;
  if (rep.invalid.code.empty() && rep.measurement && rep.measurement->status == Status::ok) {
    search::VerifyOptions vo;
    vo.seed = o.seed ^ 0x5eedULL;
    ver = search_verifier(problem, vo, 1e9)(0, g);  // KEVO_TEST_REJECT_VERIFY applies here too
    j["verified"] = ver->ok;
    j["verification"] = {{"method", ver->method}, {"detail", ver->detail}, {"seed", vo.seed}};
    if (!ver->shape.empty()) j["verification"]["shape"] = ver->shape;
    if (!ver->ok) {
      j["verification"]["message"] = ver->message;
      rc = 1;
    }
  } else {
    j["verified"] = nullptr;
  }
  if (o.json) {
    fmt::print("{}\n", j.dump(2));
    return rc;
  }
  fmt::print("kernel   {} on {} ({})\nschedule {}\n", problem.kernel().name, problem.target().name, o.runner, rep.schedule);
  if (!rep.invalid.code.empty()) {
    fmt::print("status   invalid: {}\n", rep.invalid.str());
    return rc;
  }
  const auto& m = *rep.measurement;
  fmt::print("status   {}{}\n", to_string(m.status), m.message.empty() ? "" : ": " + m.message);
  fmt::print("latency  {} (p10 {}, p90 {}, {} samples)\nroofline {}  fraction of peak {:.1f}%  bottleneck {}\n",
             format_ns(m.latency_ns()), format_ns(m.latency.p10), format_ns(m.latency.p90), m.latency.n, format_ns(m.roofline_ns),
             100 * m.fraction_of_peak, m.bottleneck.empty() ? "-" : m.bottleneck);
  for (const auto& e : m.engines) fmt::print("  {:<8} {:5.1f}% busy\n", e.engine, 100 * e.utilisation);
  if (ver) {
    if (ver->ok)
      fmt::print("verified: yes — {} ({})\n", verified_how(*ver), ver->detail);
    else
      fmt::print("verified: no — {}{}\n", ver->message,
                 ver->method == "none" ? std::string() : fmt::format(" [{}: {}]", verified_how(*ver), ver->detail));
  }
  fmt::print("program  {} instructions, SBUF {} KiB/partition, PSUM {} KiB/partition\n", rep.stats.instructions,
             rep.stats.sbuf_bytes_per_partition / 1024.0, rep.stats.psum_bytes_per_partition / 1024.0);
  return rc;
}

int cmd_space(const Options& o) {
  std::string ksrc, tname;
  auto k = resolve_kernel(o, ksrc);
  auto t = resolve_target(o, tname);
  const auto sp = schedule::ScheduleSpace::derive(k, t);
  const auto& s = sp.genes();
  const double validity = o.samples ? sp.sampled_validity(o.samples, 1) : 0.0;
  if (o.json) {
    json genes = json::array();
    for (const auto& g : s.genes())
      genes.push_back({{"name", g.name}, {"kind", to_string(g.kind)}, {"group", g.group}, {"values", g.labels}});
    json j{{"kernel", k.name},           {"target", t.name},       {"genes", genes},
           {"log10_size", s.log10_cardinality()}, {"sampled_validity", validity}, {"samples", o.samples},
           {"default_schedule", sp.print(sp.default_genome())}};
    if (auto c = s.cardinality()) j["size"] = *c;
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("kernel {} on {}: {} genes, 10^{:.1f} schedules", k.name, t.name, s.size(), s.log10_cardinality());
  if (auto c = s.cardinality()) fmt::print(" ({})", *c);
  fmt::print("\nsampled validity: {:.1f}% of {} random genomes lower\n", 100 * validity, o.samples);
  for (const auto& g : s.genes()) {
    std::string vals;
    for (std::size_t i = 0; i < g.labels.size() && i < 12; ++i) vals += (i ? " " : "") + g.labels[i];
    if (g.labels.size() > 12) vals += fmt::format(" ... ({} values)", g.labels.size());
    fmt::print("  {:<28} {:<12} {}\n", g.name, to_string(g.kind), vals);
  }
  fmt::print("default schedule:\n  {}\n", sp.print(sp.default_genome()));
  return 0;
}

int cmd_show(const Options& o) {
  const fs::path dir = o.out;
  if (!fs::is_directory(dir)) throw UsageError{fmt::format("{}: no such results directory", dir.string())};
  const auto rj = dir / "result.json";
  if (fs::exists(rj)) {
    json j = json::parse(read_file(rj), nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw UsageError{fmt::format("{}: not valid JSON", rj.string())};
    if (o.json) {
      fmt::print("{}\n", j.dump(2));
      return 0;
    }
    fmt::print("run {}: {} on {} ({} runner, {}, seed {})\n", dir.string(), j.value("kernel", "?"), j.value("target", "?"),
               j.value("runner", "?"), j.value("algorithm", "?"), j.value("seed", 0));
    fmt::print("{} evaluations: {} valid, {} invalid, {} failed; {:.1f} s; stopped: {}\n", j.value("evaluations", 0),
               j.value("valid", 0), j.value("invalid", 0), j.value("failed", 0), j.value("wall_seconds", 0.0),
               j.value("stop_reason", "?"));
    if (j.contains("best") && j["best"].is_object()) {
      const auto& b = j["best"];
      fmt::print("best: {} ({:.1f}% of peak)\nschedule: {}\n", format_ns(b.value("latency_ns", 0.0)),
                 100 * b.value("fraction_of_peak", 0.0), b.value("schedule", ""));
      if (b.value("verified", false) && b.contains("verification") && b["verification"].is_object()) {
        const auto& v = b["verification"];
        const std::string m = v.value("method", "?");
        fmt::print("verified: {} ({})\n", m == "reduced_shape" ? "reduced shape " + v.value("shape", "") : m, v.value("detail", ""));
      } else if (b.contains("verified") && b["verified"].is_boolean()) {
        fmt::print("verified: {}{}\n", b["verified"].get<bool>() ? "yes" : "NO", b.contains("verify_message") ? " — " + b.value("verify_message", "") : "");
      } else {
        fmt::print("verified: unknown (a result.json from before verification was recorded)\n");
      }
      if (b.contains("unverified_better") && b["unverified_better"].is_array() && !b["unverified_better"].empty()) {
        const auto& u = b["unverified_better"];
        fmt::print("warning: {} faster candidate(s) failed verification and were skipped:\n", u.size());
        for (const auto& c : u)
          fmt::print("  {}  {}\n", format_ns(c.value("latency_ns", 0.0)), c.value("reason", ""));
      }
    } else if (j.contains("verification_failed") && j["verification_failed"].is_object()) {
      const auto& f = j["verification_failed"];
      fmt::print("no best: none of {} candidate(s) verified (first: {})\n", f.value("checked", 0), f.value("first_reason", ""));
    }
    return 0;
  }
  // An interrupted run: summarise its journal.
  if (!fs::exists(dir / "checkpoint")) throw UsageError{fmt::format("{}: neither result.json nor a checkpoint", dir.string())};
  const auto hist = evo::read_journal(dir / "checkpoint");
  std::size_t valid = 0;
  const evo::Individual* best = nullptr;
  for (const auto& ind : hist) {
    if (!ind.eval.ok()) continue;
    ++valid;
    if (!best || ind.eval.fitness[0] < best->eval.fitness[0]) best = &ind;
  }
  if (o.json) {
    json j{{"interrupted", true}, {"evaluations", hist.size()}, {"valid", valid}};
    if (best) j["best"] = {{"latency_ns", best->eval.fitness[0]}, {"fraction_of_peak", best->eval.metric("fraction_of_peak")}};
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("run {} (interrupted): {} evaluations, {} valid\n", dir.string(), hist.size(), valid);
  if (best)
    fmt::print("best so far: {} ({:.1f}% of peak)\n", format_ns(best->eval.fitness[0]), 100 * best->eval.metric("fraction_of_peak"));
  fmt::print("resume with: kevo search --resume {}\n", dir.string());
  return 0;
}

}  // namespace kevo::cli
