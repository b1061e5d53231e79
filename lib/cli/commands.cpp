#include "commands.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>

#include "kevo/core/hash.hpp"
#include "kevo/core/io.hpp"
#include "kevo/emit.hpp"
#include "kevo/evo.hpp"
#include "kevo/ir/analysis.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/ir/workloads.hpp"
#include "kevo/llm.hpp"
#include "kevo/records.hpp"
#include "mpi.hpp"
#include "kevo/runner.hpp"
#include "kevo/gpu/target.hpp"
#include "kevo/search.hpp"
#include "kevo/session.hpp"
#include "kevo/target/target.hpp"
#include "kevo/verify.hpp"
#include "progress.hpp"
#include "report.hpp"
#include "resolve.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace kevo::cli {

namespace {

constexpr int kResultVersion = 1;
constexpr std::size_t kMaxVerifyCandidates = 32;  // candidates checked before giving up naming a best
constexpr double kMaxVerifySeconds = 300;         // no new candidate is checked after this long
constexpr std::size_t kWarmStartSeeds = 8;          // schedules a search takes from records (docs/RECORDS.md)
constexpr const char* kVersionString = KEVO_VERSION_STRING;

std::atomic<evo::Engine*> g_engine{nullptr};
// The run's LLM operators while it runs: a stop signal cancels their calls in flight, so that a
// hung model (a synchronous command model waits up to its timeout_s, 300 s by default) cannot
// hold the batch, and the stop, open
std::atomic<llm::LlmOperators*> g_llm{nullptr};

// Stops a run (async-signal-safe): the LLM operators' calls in flight and later ones cancelled,
// the engine stopped after the batch in flight.
void stop_run(evo::Engine* engine, llm::LlmOperators* llm_ops) noexcept {
  if (llm_ops)
    for (auto& op : llm_ops->operators) op.cancel();
  if (engine) engine->request_stop();
}

// SIGINT/SIGTERM: the engine stops after the batch in flight and the process workers are killed at
// once (g_cancel_workers), so the stop takes well under 2 s; a second signal ends kevo outright
// (the journal is append-only: nothing completed is lost either way).
extern "C" void on_stop_signal(int sig) {
  if (note_stop_signal(sig)) stop_run(g_engine.load(), g_llm.load());
}

// Failures by kind (status): how many, and the first reason of each, from the whole journal.
json failures_json(const std::vector<evo::Individual>& hist) {
  json out = json::object();
  for (const auto& ind : hist) {
    if (ind.eval.ok()) continue;
    const std::string kind(to_string(ind.eval.status));
    if (!out.contains(kind)) out[kind] = {{"count", 0}, {"first_reason", ind.eval.reason}};
    out[kind]["count"] = out[kind]["count"].get<std::uint64_t>() + 1;
  }
  return out;
}

evo::Algorithm parse_algorithm(const std::string& a) {
  if (a == "map-elites" || a == "map_elites") return evo::Algorithm::map_elites;
  if (a == "async" || a == "steady-state" || a == "steady_state") return evo::Algorithm::steady_state;
  if (auto x = evo::algorithm_from_string(a)) return *x;
  throw UsageError{fmt::format("--algorithm '{}' is not one of ga, islands, map-elites, async, random, exhaustive, surrogate", a)};
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

// Everything needed to rebuild the problem on resume, saved next to the results
// (session::RunDescription, run.json).
struct RunSpec {
  Options o;
  std::string kernel_source, target_name;
  std::vector<std::string> seed_texts;  // --seed-schedule, as canonical schedule text
  std::uint64_t late_seeds_at = 0;      // the expert schedules' point (search::SearchOptions::late_expert_seeds)
};

void save_spec(const fs::path& dir, const RunSpec& s, const ir::Kernel& k) {
  session::RunDescription d;
  d.kernel_source = s.kernel_source;
  d.target = s.target_name;
  d.runner = s.o.runner;
  d.algorithm = s.o.algorithm;
  d.seed = s.o.seed;
  d.budget = s.o.budget;
  d.time_limit_s = s.o.time_limit;
  d.threads = s.o.threads;
  d.population = s.o.population;
  d.patience = s.o.patience;
  d.eval_timeout_s = s.o.eval_timeout;
  d.seed_schedules = s.seed_texts;
  d.late_seeds_at = s.late_seeds_at;
  d.space = s.o.space;
  d.llm_config = s.o.llm_config.empty() ? std::string() : fs::absolute(s.o.llm_config).string();
  d.records = s.o.no_db ? std::string("none") : s.o.db_file.empty() ? std::string() : fs::absolute(s.o.db_file).string();
  session::save_run(dir, d, k);
}

// An error in a value run.json recorded, named as run.json's field rather than as the flag it stands
// for: "DIR/run.json: 'algorithm' = 'bogus' is not one of ...".
std::string as_recorded(const std::string& dir, const std::string& m) {
  static constexpr std::pair<std::string_view, std::string_view> kFlags[] = {
      {"--algorithm ", "algorithm"}, {"--runner ", "runner"}, {"--target ", "target"}, {"--llm ", "llm"}};
  const std::string file = (fs::path(dir) / "run.json").string();
  for (const auto& [flag, field] : kFlags)
    if (m.starts_with(flag)) return fmt::format("{}: '{}' = {}", file, field, m.substr(flag.size()));
  return fmt::format("{}: {}", file, m);
}

RunSpec load_spec(const fs::path& dir, const Options& flags) {
  auto d = session::load_run(dir);
  if (!d) throw UsageError{"--resume " + d.error()};
  RunSpec s;
  s.kernel_source = d->kernel_source;
  s.target_name = d->target;
  s.o.runner = d->runner;
  s.o.algorithm = d->algorithm;
  s.o.seed = d->seed;
  s.o.budget = d->budget;
  s.o.time_limit = d->time_limit_s;
  s.o.threads = d->threads;
  // run.json records the population the run used. One written before it did (population 0) ran
  // with evo::Config's default, which the kernel search's default no longer is.
  s.o.population = d->population ? d->population : evo::Config{}.population;
  s.o.patience = d->patience;
  s.o.llm_config = d->llm_config;
  s.o.eval_timeout = d->eval_timeout_s;
  s.seed_texts = d->seed_schedules;
  s.late_seeds_at = d->late_seeds_at;
  s.o.space = d->space;
  s.o.kernel_file = session::run_kernel_file(dir).string();
  s.o.target = session::run_target(dir, *d);
  // A flag that names what the run is (its kernel, target, runner, search) cannot change on
  // resume: given with a value other than the recorded one it is an error, not ignored (given:
  // on the command line or in --config, whatever its value; `-s 1` on a run of seed 5 was ignored
  // as the default).
  const auto fixed = [&](bool given, bool differs, const std::string& flag, const std::string& recorded) {
    if (given && differs)
      throw UsageError{fmt::format("--resume {}: {} cannot change on resume (the run was recorded with {}); only --budget, --time, "
                                   "--threads, --eval-timeout, --cache, --db, --no-db, --quiet and --json may",
                                   dir.string(), flag, recorded.empty() ? "none" : recorded)};
  };
  fixed(!flags.kernel_file.empty(), true, "a KERNEL file", s.kernel_source);
  fixed(!flags.workload.empty(), true, "--workload", s.kernel_source);
  fixed(!flags.target.empty(), flags.target != d->target, "--target", d->target);
  fixed(flags.set("runner"), flags.runner != d->runner, "--runner", d->runner);
  const auto alg = [](const std::string& a) {  // map_elites and map-elites name one algorithm
    const auto x = evo::algorithm_from_string(a);
    return x ? std::string(evo::to_string(*x)) : a;
  };
  fixed(flags.set("algorithm"), alg(flags.algorithm) != alg(d->algorithm), "--algorithm", d->algorithm);
  fixed(flags.set("seed"), flags.seed != d->seed, "--seed", std::to_string(d->seed));
  fixed(flags.set("population"), flags.population != s.o.population, "--population", std::to_string(s.o.population));
  fixed(flags.set("patience"), flags.patience != d->patience, "--patience", std::to_string(d->patience));
  fixed(flags.set("space"), flags.space != d->space, "--space", d->space);
  fixed(!flags.seed_schedules.empty(), true, "--seed-schedule", "the schedules in run.json");
  if (!flags.llm_config.empty()) fixed(true, fs::absolute(flags.llm_config).string() != d->llm_config, "--llm", d->llm_config);
  if (!flags.out.empty()) {
    // one directory however it is written: a trailing slash, a symbolic link
    std::error_code e1, e2;
    const bool same = fs::equivalent(flags.out, dir, e1) && !e1;
    fixed(true, !same && fs::absolute(flags.out).lexically_normal() != fs::absolute(dir).lexically_normal(), "--out", dir.string());
  }
  // Flags that may change on resume: budgets, threads, timeouts, quiet, json, where to record;
  // given with any value (`--time 0` lifts a time limit, `--threads 0` takes every core).
  if (flags.set("budget")) s.o.budget = flags.budget;
  if (flags.set("time")) s.o.time_limit = flags.time_limit;
  if (flags.set("threads")) s.o.threads = flags.threads;
  if (flags.set("eval-timeout")) s.o.eval_timeout = flags.eval_timeout;
  // Records go where the run's first session sent them (run.json's "records") unless this one
  // names another place: a resume of a --no-db run recorded into the default database.
  if (flags.no_db || !flags.db_file.empty()) {
    s.o.no_db = flags.no_db;
    s.o.db_file = flags.db_file;
  } else {
    s.o.no_db = d->records == "none";
    s.o.db_file = d->records == "none" ? std::string() : d->records;
  }
  s.o.llm_optional = flags.llm_optional;
  s.o.quiet = flags.quiet;
  s.o.cache_file = flags.cache_file;
  s.o.json = flags.json;
  s.o.out = dir.string();
  return s;
}

evo::Config make_config(const Options& o, const fs::path& dir) {
  evo::Config c = search::default_search_config(o.seed, o.threads);  // kevo search's defaults, shared with bench/shapes
  c.algorithm = parse_algorithm(o.algorithm);
  c.population = o.population ? o.population : search::default_population(c.algorithm);
  // the smallest population the flags allow (2) keeps one elite: the default 2 would fill it
  c.elites = std::min(c.elites, c.population - 1);
  if (o.budget) c.budget.max_evaluations = o.budget;
  c.budget.max_seconds = o.time_limit;
  c.budget.patience = o.patience;
  c.checkpoint.dir = dir / "checkpoint";
  c.checkpoint.sync = false;  // a kill loses nothing either way; fsync per batch only guards power loss
  return c;
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
  lower::ProgramStats stats;
  Table program;  // the tile program's instruction mix (what a host run executed)
};

// The spread of a measurement without its latency (the one latency of a best lives next to it).
json noise_json(const runner::Measurement& m) {
  json eng = json::object();
  for (const auto& e : m.engines) eng[e.engine] = e.utilisation;
  return json{{"status", std::string(to_string(m.status))},
              {"message", m.message},
              {"samples", m.latency.n},
              {"latency_min_ns", m.latency.min},
              {"latency_p10_ns", m.latency.p10},
              {"latency_p90_ns", m.latency.p90},
              {"latency_ci_low_ns", m.latency.ci_low},
              {"latency_ci_high_ns", m.latency.ci_high},
              {"bottleneck", m.bottleneck},
              {"utilisation", eng},
              {"bytes_moved", m.bytes_moved},
              {"profile", m.profile}};
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// The tile program by loop nest and instruction, with where each runs: for a host run, the
// program the CpuRunner interpreted and timed.
Table program_table(const lower::TileProgram& prog) {
  std::map<std::tuple<std::string, std::string, std::string>, std::pair<std::size_t, std::int64_t>> mix;
  for (const auto& in : prog.instrs) {
    const std::string nest = in.group >= 0 && static_cast<std::size_t>(in.group) < prog.group_names.size()
                                 ? prog.group_names[static_cast<std::size_t>(in.group)]
                                 : std::string("-");
    const std::string where = in.at.dma ? fmt::format("dma q{}", in.at.queue) : std::string(target::to_string(in.at.engine));
    auto& [count, flops] = mix[{nest, std::string(lower::to_string(in.op)), where}];
    ++count;
    flops += in.flops;
  }
  Table t;
  t.header = {"nest", "instruction", "placement", "count", "FLOPs"};
  for (const auto& [k, v] : mix)
    t.rows.push_back({std::get<0>(k), std::get<1>(k), std::get<2>(k), fmt::format("{}", v.first), fmt::format("{}", v.second)});
  std::sort(t.rows.begin(), t.rows.end(), [](const auto& x, const auto& y) {
    if (x[0] != y[0]) return natural_less(x[0], y[0]);
    if (x[2] != y[2]) return natural_less(x[2], y[2]);
    return x[1] < y[1];
  });
  return t;
}

// A text file describing the program a host run executed: the figures of the tile program, its
// buffers and its instruction mix.
std::string program_text(const lower::TileProgram& prog, const Table& mix, const runner::Measurement* m) {
  std::string s = fmt::format("# The tile program of the best schedule, as the CPU runner executed it on this host\n"
                              "# (verify::Interpreter: every instruction in program order, outputs checked against the reference).\n"
                              "kernel       {}\nschedule     {}\ninstructions {} ({} DMA)\nFLOPs        {}\nHBM bytes    {} read, {} written\n"
                              "SBUF         {} bytes/partition\nPSUM         {} bytes/partition\n",
                              prog.kernel_name, trimmed(prog.schedule_text), prog.stats.instructions, prog.stats.dma_instructions,
                              prog.stats.flops, prog.stats.hbm_bytes_read, prog.stats.hbm_bytes_written,
                              prog.stats.sbuf_bytes_per_partition, prog.stats.psum_bytes_per_partition);
  if (m != nullptr && m->status == Status::ok)
    s += fmt::format("host timing  median {} over {} timed runs, p10 {}, p90 {}, 95% CI [{}, {}]\n", format_ns(m->latency.median),
                     m->latency.n, format_ns(m->latency.p10), format_ns(m->latency.p90), format_ns(m->latency.ci_low),
                     format_ns(m->latency.ci_high));
  s += "\nbuffers:\n";
  for (const auto& b : prog.buffers) {
    std::string shape;
    for (auto x : b.shape) shape += (shape.empty() ? "" : "x") + std::to_string(x);
    s += fmt::format("  {:<24} {:<5} {:<6} {}{}\n", b.name, lower::to_string(b.mem), ir::to_string(b.dtype), shape,
                     b.nbufs > 1 ? fmt::format(" x{} buffers", b.nbufs) : std::string());
  }
  s += "\ninstructions (by loop nest, instruction and placement):\n";
  for (const auto& r : mix.rows) s += fmt::format("  {:<16} {:<16} {:<10} {:>8} {:>14}\n", r[0], r[1], r[2], r[3], r[4]);
  return s;
}

// Writes the winner's files. `m`: its measurement after the search (re-measured for a noisy
// runner; for the simulator the same figure with its engine breakdown); every latency figure of
// the best comes from it, so progress, summary, result.json, kevo show and the report agree.
// Without it (an interrupted run) the search's figure is the one. `host`: the runner measured
// this CPU: the program it ran is written (best.program.txt), not a simulated NeuronCore trace.
BestFiles write_best(const fs::path& dir, const search::KernelProblem& p, const evo::Individual& best,
                     const std::optional<runner::Measurement>& m, bool host) {
  BestFiles out;
  const std::string sched = p.to_text(best.genome);
  write_file_atomic(dir / "best.schedule", sched + "\n");
  write_file_atomic(dir / "best.kir", p.kernel_text());
  auto prog = p.lower(best.genome);
  if (!prog) throw Error("the best schedule no longer lowers: " + prog.error().str());
  out.nki = emit::emit_nki(*prog, p.kernel());
  write_file_atomic(dir / "best.nki.py", out.nki);
  out.stats = prog->stats;
  out.program = program_table(*prog);
  const bool measured = m && m->status == Status::ok && m->latency_ns() > 0;
  if (host) {
    write_file_atomic(dir / "best.program.txt", program_text(*prog, out.program, measured ? &*m : nullptr));
  } else {
    const auto sim = runner::simulate(*prog, p.target(), runner::default_sim_params(p.target()));
    write_file_atomic(dir / "best.trace.json", runner::trace_json(*prog, sim));
  }
  const auto an = ir::analyze(p.kernel());
  const double search_ns = best.eval.fitness.empty() ? 0.0 : best.eval.fitness[0];
  out.best = json{{"schedule", sched},
                  {"latency_ns", measured ? m->latency_ns() : search_ns},
                  {"roofline_ns", measured ? m->roofline_ns : best.eval.metric("roofline_ns")},
                  {"fraction_of_peak", measured ? m->fraction_of_peak : best.eval.metric("fraction_of_peak")},
                  {"latency_source", measured ? "final measurement" : "search"},
                  {"search_latency_ns", search_ns},
                  {"flops", an.flops},
                  {"hbm_bytes", an.min_hbm_bytes},
                  {"program_hbm_bytes", prog->stats.hbm_bytes_read + prog->stats.hbm_bytes_written},
                  {"instructions", prog->stats.instructions},
                  {"sbuf_bytes_per_partition", prog->stats.sbuf_bytes_per_partition},
                  {"psum_bytes_per_partition", prog->stats.psum_bytes_per_partition},
                  {"operator", best.op},
                  {"evaluation", best.id}};
  if (m) {
    out.best["measurement"] = noise_json(*m);
    for (const auto& e : m->engines) out.engines.push_back({e.engine, e.utilisation});
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
    if (i > 0 && stop_signal() != 0) {
      v.message = "not checked: the search was interrupted";
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

// What the figures of a run are, in words, for the header, the summary, result.json and the
// report: a model (the simulator), or measurements (this CPU, an external worker).
std::string figures_kind(const std::string& runner) {
  if (runner == "sim") return "model";
  if (runner == "cpu") return "measured on this CPU";
  return "measured by the worker";
}
// The plain warning of a simulated host: the simulator given the host target's parameters.
std::string host_model_note(const std::string& runner, const target::Target& t) {
  if (runner != "sim" || !t.host) return {};
  return "--runner sim on --target host: every latency here is the simulator's model of a NeuronCore-like machine with "
         "the host target's parameters, not a measurement of this CPU (--runner cpu measures it)";
}

std::string ratio_text(double x) { return x >= 10 ? fmt::format("{:.1f}x", x) : fmt::format("{:.2f}x", x); }

void write_report(const fs::path& dir, const json& result, const search::KernelProblem& p, const BestFiles* best, bool host) {
  ReportData d;
  d.title = fmt::format("kevo: {} on {}", result.value("kernel", ""), result.value("target", ""));
  d.host = host;
  for (const char* k : {"kernel_source", "target", "runner", "figures", "algorithm", "seed", "evaluations", "valid", "invalid",
                        "failed", "stop_reason"})
    if (result.contains(k)) d.summary.push_back({k, result[k].is_string() ? result[k].get<std::string>() : result[k].dump()});
  if (result.contains("timing")) {
    const auto& t = result["timing"];
    std::string parts;
    for (const auto& [key, name] : {std::pair{"setup_seconds", "setup"}, std::pair{"search_seconds", "search"},
                                    std::pair{"remeasure_seconds", "re-measurement"}, std::pair{"verify_seconds", "verification"},
                                    std::pair{"final_measure_seconds", "final measurement"},
                                    std::pair{"default_schedule_seconds", "default schedule"}})
      if (t.value(key, 0.0) > 0) parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", name, format_seconds(t.value(key, 0.0)));
    d.summary.push_back({"wall time", format_seconds(result.value("wall_seconds", 0.0)) + (parts.empty() ? "" : " (" + parts + ")")});
  }
  d.note = result.value("figures_note", "");
  if (best) {
    const json& b = best->best;
    d.summary.push_back({"best latency", format_ns(b.value("latency_ns", 0.0))});
    d.summary.push_back({"fraction of peak", fmt::format("{:.1f}%", 100 * b.value("fraction_of_peak", 0.0))});
    d.summary.push_back({"roofline", format_ns(b.value("roofline_ns", 0.0))});
    d.final_ns = b.value("latency_ns", 0.0);
    d.final_label = b.value("remeasured", false) ? "named best (re-measured)" : "named best";
    const json& v = b.contains("verification") ? b["verification"] : json::object();
    const std::string method = v.value("method", "");
    const std::string verified = b.value("verified", false)
                                     ? (method == "reduced_shape" ? "yes: reduced shape " + v.value("shape", "") : "yes: " + method) +
                                           (v.value("detail", "").empty() ? "" : " (" + v.value("detail", "") + ")")
                                     : "no";
    d.summary.push_back({"verified", verified});
    d.verification_text = "The named best was checked against the reference evaluator before it was named: " + verified + ".";
    d.verification.header = {"", "schedule", "latency", "method", "result"};
    d.verification.rows.push_back({"named best", b.value("schedule", ""), format_ns(b.value("latency_ns", 0.0)),
                                   method == "reduced_shape" ? "reduced shape " + v.value("shape", "") : method,
                                   "verified" + (v.value("detail", "").empty() ? std::string() : ": " + v.value("detail", ""))});
    if (b.contains("unverified_better") && !b["unverified_better"].empty()) {
      const auto& u = b["unverified_better"];
      d.warning = fmt::format("{} faster candidate(s) failed verification and were skipped; the first ({}) failed with: {}",
                              u.size(), format_ns(u[0].value("latency_ns", 0.0)), u[0].value("reason", ""));
      for (const auto& c : u)
        d.verification.rows.push_back({"skipped", c.value("schedule", ""), format_ns(c.value("latency_ns", 0.0)), c.value("method", ""),
                                       "failed: " + c.value("reason", "")});
    }
    d.schedule = b.value("schedule", "");
    d.engines = best->engines;
    d.nki = best->nki;
    if (host) {
      d.program = best->program;
      const json& m = b.contains("measurement") ? b["measurement"] : json::object();
      d.host_timing.rows = {{"median (the best latency)", format_ns(b.value("latency_ns", 0.0))},
                            {"timed runs", fmt::format("{}", m.value("samples", 0))},
                            {"min / p10 / p90", fmt::format("{} / {} / {}", format_ns(m.value("latency_min_ns", 0.0)),
                                                            format_ns(m.value("latency_p10_ns", 0.0)),
                                                            format_ns(m.value("latency_p90_ns", 0.0)))},
                            {"95% CI of the median", fmt::format("[{}, {}]", format_ns(m.value("latency_ci_low_ns", 0.0)),
                                                                 format_ns(m.value("latency_ci_high_ns", 0.0)))},
                            {"GFLOP/s", b.value("latency_ns", 0.0) > 0
                                            ? fmt::format("{:.1f}", b.value("flops", 0.0) / b.value("latency_ns", 0.0))
                                            : std::string("-")},
                            {"the search measured it at", format_ns(b.value("search_latency_ns", 0.0))},
                            {"program", fmt::format("{} instructions ({} DMA); best.program.txt", best->stats.instructions,
                                                    best->stats.dma_instructions)},
                            {"runner", result.value("runner_identity", "")}};
      d.nki_heading = "Extra: the same schedule as NKI source (not what was measured)";
      d.nki_note = "This run measured the tile program above on this CPU. best.nki.py is the same schedule written as an NKI "
                   "kernel for a NeuronCore; it was not run here.";
    } else {
      d.spans = spans_from_trace((dir / "best.trace.json").string());
      if (fs::exists(dir / "best.trace.json")) d.trace_file = "best.trace.json";
    }
  }
  if (result.contains("verification_failed")) {
    const auto& f = result["verification_failed"];
    d.summary.push_back({"verified", "no: no candidate verified"});
    d.warning = fmt::format("No schedule is named best: {} candidate(s) were checked against the reference and none matched; "
                            "the first failed with: {}",
                            f.value("checked", 0), f.value("first_reason", ""));
    d.verification_text = "No candidate verified; no best is named.";
    d.verification.header = {"", "schedule", "latency", "method", "result"};
    for (const auto& c : f.value("candidates", json::array()))
      d.verification.rows.push_back({"rejected", c.value("schedule", ""), format_ns(c.value("latency_ns", 0.0)), c.value("method", ""),
                                     "failed: " + c.value("reason", "")});
  } else if (!best) {
    d.verification_text = "No best was named (nothing was measured successfully, or the run was interrupted first).";
  }
  // The winner against the default schedule, measured by the same runner.
  if (result.contains("default_schedule") && result["default_schedule"].is_object()) {
    const auto& ds = result["default_schedule"];
    d.baseline.header = {"", "latency", "fraction of peak", "schedule"};
    if (best)
      d.baseline.rows.push_back({"named best", format_ns(best->best.value("latency_ns", 0.0)),
                                 fmt::format("{:.1f}%", 100 * best->best.value("fraction_of_peak", 0.0)),
                                 best->best.value("schedule", "")});
    if (ds.value("status", "") == "ok") {
      d.baseline.rows.push_back({"default schedule", format_ns(ds.value("latency_ns", 0.0)),
                                 fmt::format("{:.1f}%", 100 * ds.value("fraction_of_peak", 0.0)), ds.value("schedule", "")});
      if (ds.contains("speedup"))
        d.baseline_text = fmt::format("The named best is {} the default schedule of the space (both measured by the {} runner).",
                                      ds["speedup"].get<double>() >= 1 ? ratio_text(ds["speedup"].get<double>()) + " faster than"
                                                                       : ratio_text(1 / ds["speedup"].get<double>()) + " slower than",
                                      result.value("runner", ""));
    } else {
      d.baseline_text = fmt::format("The default schedule of the space did not give a figure: {} ({}).", ds.value("status", ""),
                                    ds.value("reason", ""));
      d.baseline.rows.push_back({"default schedule", "-", "-", ds.value("schedule", "")});
    }
  } else {
    d.baseline_text = "The default schedule was not measured (no best named, or the run was interrupted).";
  }
  if (result.contains("operators")) {
    d.operators.header = {"operator", "proposals", "evaluated", "valid", "better", "new bests", "duplicates", "outside", "failures",
                          "weight"};
    for (const auto& op : result["operators"]) {
      std::string fails;
      for (auto it = op["failures"].begin(); it != op["failures"].end(); ++it)
        fails += fmt::format("{}{} {}", fails.empty() ? "" : ", ", it.value().get<std::uint64_t>(), it.key());
      d.operators.rows.push_back({op.value("name", ""), op["proposals"].dump(), op["evaluated"].dump(), op["valid"].dump(),
                                  op["improvements"].dump(), op["new_bests"].dump(), op["duplicates"].dump(), op["outside"].dump(),
                                  fails.empty() ? "-" : fails, fmt::format("{:.2f}", op.value("weight", 0.0))});
    }
  }
  if (result.contains("llm") && result["llm"].is_object() && result["llm"].contains("operators")) {
    // One row per model: calls, tokens, cost; the cap and the total below.
    const auto& u = result["llm"];
    d.llm.header = {"operator", "model", "calls", "failures", "prompt tokens", "completion tokens", "cost", "candidates", "accepted"};
    for (const auto& m : u["operators"])
      d.llm.rows.push_back({m.value("op", ""), m.value("model", ""), m["calls"].dump(), m["failures"].dump(), m["prompt_tokens"].dump(),
                            m["completion_tokens"].dump(), fmt::format("${:.4f}", m.value("cost_usd", 0.0)), m["candidates"].dump(),
                            m["accepted"].dump()});
    d.llm_text = fmt::format("Spent ${:.4f}{}.", result.value("llm_cost_usd", 0.0),
                             u.contains("cost_cap_usd") && u["cost_cap_usd"].is_number()
                                 ? fmt::format(" of a ${:.2f} cap", u["cost_cap_usd"].get<double>())
                                 : std::string());
  } else {
    d.llm_text = "No LLM was used in this search (no --llm).";
  }
  d.kernel_text = p.kernel_text();
  d.history = history_points(dir / "history.jsonl");
  write_file_atomic(dir / "report.html", render_report(d));
}

// The start check of --llm: each HTTP model's key variable is set and its endpoint answers a
// one-token probe (not in cassette replay, where no model is contacted). Returns the problems,
// one line each.
std::vector<std::string> check_llm(const llm::LlmConfig& cfg) {
  std::vector<std::string> bad;
  if (cfg.cassette && cfg.cassette->mode == llm::CassetteMode::replay) {
    // no model is called: the cassette must be there and hold calls (an empty one failed every
    // proposal and the search ran on without its LLM, exit 0)
    try {
      if (llm::Cassette::open(cfg.cassette->path, llm::CassetteMode::replay)->size() == 0)
        bad.push_back(fmt::format("cassette {} holds no recorded calls: nothing to replay", cfg.cassette->path.string()));
    } catch (const Error& e) {
      bad.push_back(e.what());
    }
    return bad;
  }
  for (const auto& m : cfg.models) {
    if (!m.http) continue;
    const auto& h = *m.http;
    if (!h.api_key_env.empty()) {
      const char* key = std::getenv(h.api_key_env.c_str());
      if (key == nullptr || *key == '\0') {
        bad.push_back(fmt::format("model '{}': the environment variable {} (api_key_env) is not set", m.name, h.api_key_env));
        continue;
      }
    }
    llm::OpenAiConfig probe_cfg = h;
    probe_cfg.retries = 0;
    probe_cfg.connect_timeout_s = std::min(probe_cfg.connect_timeout_s, 5.0);
    probe_cfg.timeout_s = std::min(probe_cfg.timeout_s, 15.0);
    llm::ChatRequest req;
    req.messages = {{"user", "Reply with OK."}};
    req.model = m.model;
    req.temperature = 0;
    req.max_tokens = 1;
    auto got = llm::OpenAiClient(probe_cfg).complete(req);
    if (!got && got.error().kind != llm::LlmErrorKind::empty && got.error().kind != llm::LlmErrorKind::malformed)
      bad.push_back(fmt::format("model '{}' at {}: {}", m.name, h.base_url, got.error().str()));
  }
  return bad;
}

// Removes a results directory this command created if the start fails before the run begins.
struct DirGuard {
  fs::path dir;
  bool armed = false;
  ~DirGuard() {
    if (!armed) return;
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

}  // namespace

namespace {
int cmd_search_on(Options o, MpiSearch* mpi);
}  // namespace

// Under mpirun/srun (lib/cli/mpi.hpp) an error on any rank ends the whole job: the other ranks
// would otherwise wait for it.
int cmd_search(Options o) {
  if (!o.target.empty() && gpu::is_gpu_target(o.target)) return cmd_gpu_search(std::move(o));  // docs/GPU.md
  auto mpi = MpiSearch::start(o);
  if (!mpi) return cmd_search_on(std::move(o), nullptr);
  try {
    return cmd_search_on(std::move(o), mpi.get());
  } catch (const UsageError& e) {
    mpi->fail(2, e.message);
  } catch (const std::exception& e) {
    mpi->fail(2, e.what());
  }
}

namespace {
int cmd_search_on(Options o, MpiSearch* mpi) {
  const auto t_cmd0 = std::chrono::steady_clock::now();
  auto seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  const bool resuming = !o.resume.empty();
  const std::string resume_dir = o.resume;  // (o becomes run.json's options below)
  // Flags that contradict each other, or modify one that is not there, are mistakes, not choices
  // kevo makes silently (--no-db --db F recorded nothing where F was meant).
  if (o.no_db && !o.db_file.empty()) throw UsageError{fmt::format("--no-db and --db {}: give one or the other", o.db_file)};
  RunSpec spec;
  if (resuming) {
    spec = load_spec(o.resume, o);
    o = spec.o;
  } else {
    spec.o = o;
  }
  if (o.llm_optional && o.llm_config.empty()) throw UsageError{"--llm-optional: there is no --llm to make optional"};
  // On resume the target, runner, algorithm and LLM configuration are run.json's (flags that would
  // change them are refused): an error in one names run.json's field, not a flag nobody gave.
  const auto recorded = [&](auto&& step) {
    if (!resuming) return step();
    try {
      return step();
    } catch (const UsageError& e) {
      throw UsageError{as_recorded(resume_dir, e.message)};
    } catch (const Error& e) {
      throw UsageError{as_recorded(resume_dir, e.what())};
    }
  };
  auto r = recorded([&] { return resolve_all(o); });
  // A kernel kevo cannot schedule: exit 2 before any file is written. The problem is built on
  // this space once the files are checked (its measurement cache file is created then).
  auto space = resolve_space(r.kernel, r.target, r.kernel_source, o.space);
  if (!resuming) {
    spec.kernel_source = r.kernel_source;
    spec.target_name = r.target_name;
  } else {
    r.kernel_source = spec.kernel_source;
  }
  fs::path dir = o.out.empty() ? fs::path(timestamp_dir()) : fs::path(o.out);
  if (mpi) {  // the other ranks: the same problem, then serve rank 0's farm or run their islands
    dir = mpi->shared_dir(dir);
    if (!mpi->coordinator()) return mpi->serve(make_problem(std::move(space), r), make_config(o, dir), resuming, dir);
  }
  const auto holds_run = [&] {
    return UsageError{fmt::format("--out {} already holds a run; use --resume {} or another directory", dir.string(), dir.string())};
  };
  if (!resuming && fs::exists(dir / "checkpoint")) throw holds_run();
  // One process per results directory: a second --resume (or a run still going there) is refused
  // before this one writes anything, rather than two of them appending to one journal.
  DirLock run_lock;
  if (resuming) run_lock = DirLock(dir, "--resume");
  auto config = recorded([&] { return make_config(o, dir); });  // validates --algorithm before any file is written
  // The LLM configuration is read and checked before any file is written too.
  std::optional<llm::LlmConfig> llm_cfg;
  if (!o.llm_config.empty()) {
    llm_cfg = recorded([&] { return llm::load_llm_config(o.llm_config); });
    const auto bad = check_llm(*llm_cfg);
    if (!bad.empty() && !o.llm_optional)
      throw UsageError{fmt::format("--llm {}: {}{}", o.llm_config, bad.front(),
                                   bad.size() > 1 ? fmt::format(" (and {} more)", bad.size() - 1) : std::string())};
    // A replay cassette that is missing, empty or corrupt cannot come good later: the search goes
    // on without the LLM. A model that failed its probe may answer later: it stays.
    const bool replay = llm_cfg->cassette && llm_cfg->cassette->mode == llm::CassetteMode::replay;
    for (const auto& b : bad)
      fmt::print(stderr, "kevo: warning: --llm {}: {} (--llm-optional: searching {})\n", o.llm_config, b,
                 replay ? "without the LLM" : "on");
    if (replay && !bad.empty()) llm_cfg.reset();
  }
  // The records database: opened before any file is written (a bad file is exit 2).
  std::optional<records::Database> db;
  if (!o.no_db) {
    const fs::path db_path = o.db_file.empty() ? records::Database::default_path() : fs::path(o.db_file);
    auto d = records::Database::open(db_path);
    if (!d) throw UsageError{fmt::format("--db: {}", d.error())};
    db.emplace(std::move(*d));
  }
  DirGuard guard{dir};
  if (!resuming) {
    guard.armed = !fs::exists(dir);
    // The topmost folder this creates (runs/ for the default runs/<timestamp>) goes on failure.
    while (guard.armed && guard.dir.has_parent_path() && !guard.dir.parent_path().empty() && !fs::exists(guard.dir.parent_path()))
      guard.dir = guard.dir.parent_path();
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw UsageError{fmt::format("--out {}: {}", dir.string(), ec.message())};
    // another process may have made the directory or begun a run there since the checks above:
    // then it is theirs, and stays
    try {
      run_lock = DirLock(dir, "--out");
    } catch (...) {
      guard.armed = false;
      throw;
    }
    if (fs::exists(dir / "checkpoint")) {
      guard.armed = false;
      throw holds_run();
    }
  }
  search::KernelProblemOptions popt;
  popt.cache_file = o.cache_file;
  const search::KernelProblem problem = make_problem(std::move(space), r, popt);
  // --seed-schedule: parsed here (errors located in the file), saved as text for --resume.
  if (!resuming)
    for (const auto& arg : o.seed_schedules) {
      std::string name;
      const std::string text = read_schedule_arg(arg, "--seed-schedule", name);
      // no statement at all parses as the default schedule, which is seeded anyway: an empty
      // file is a mistake to report, not a seed to drop without a word
      bool any = false;
      for (std::size_t at = 0; at < text.size() && !any;) {
        const auto nl = std::min(text.find('\n', at), text.size());
        const auto line = std::string_view(text).substr(at, nl - at);
        const auto first = line.find_first_not_of(" \t\r;");
        any = first != std::string_view::npos && line[first] != '#';
        at = nl + 1;
      }
      if (!any) throw UsageError{fmt::format("{}: no schedule statement (an empty seed; the default schedule is seeded anyway)", name)};
      auto g = problem.schedule_space().parse(text, name);
      if (!g) throw UsageError{g.error().headline()};
      spec.seed_texts.push_back(problem.to_text(*g));
    }
  records::WarmStart warm;
  if (!resuming && db && !o.no_warm_start) {
    warm = records::warm_start(*db, problem.schedule_space(), kWarmStartSeeds);
    std::set<std::string> have(spec.seed_texts.begin(), spec.seed_texts.end());
    for (const auto& g : warm.genomes)
      if (have.insert(problem.to_text(g)).second) spec.seed_texts.push_back(problem.to_text(g));
    if (!warm.genomes.empty() && !o.quiet && !o.json) fmt::print(stderr, "kevo: warm start: {}\n", warm.summary());
  }
  if (!resuming) {  // the default schedule is a seed too (search::SearchOptions::seed_default)
    const std::string d = problem.to_text(problem.schedule_space().default_genome());
    if (std::find(spec.seed_texts.begin(), spec.seed_texts.end(), d) == spec.seed_texts.end()) spec.seed_texts.push_back(d);
  }
  for (std::size_t i = 0; i < spec.seed_texts.size(); ++i) {
    // a schedule's own line and column are within its text, not within run.json: name the entry
    const std::string entry = fmt::format("{}: seed_schedules[{}]", (dir / "run.json").string(), i);
    auto g = problem.schedule_space().parse(spec.seed_texts[i], entry);
    if (!g) throw UsageError{g.error().loc.line > 0 ? fmt::format("{} (the schedule's line {}, column {}): {}", entry, g.error().loc.line,
                                                                  g.error().loc.column, printable(g.error().message))
                                                    : g.error().headline()};
    config.seeds.push_back(*g);
  }
  // the space's expert schedules halfway through the evaluation budget, as search::run_search
  // offers them; on resume, at the point the run recorded (none for runs recorded before them)
  if (!resuming) spec.late_seeds_at = config.budget.max_evaluations >= 2 ? config.budget.max_evaluations / 2 : 0;
  if (spec.late_seeds_at > 0) {
    config.late_seeds = problem.schedule_space().expert_genomes();
    config.late_seeds_at = spec.late_seeds_at;
  }
  if (!resuming) {
    spec.o.population = config.population;  // the one used, so --resume never depends on a default
    save_spec(dir, spec, problem.kernel());
  }

  std::optional<evo::Engine> engine;
  const evo::Problem engine_problem = mpi ? mpi->problem(problem) : evo::Problem(problem);  // farm: evaluated over the ranks
  if (mpi) config = mpi->config(config, resuming);
  if (resuming) {
    // a checkpoint of another target or runner (copied in, or a target file redefined) would mix
    // two machines' figures in one history: refused before any file is rewritten, and before the
    // engine compares the rest of the configuration (another target's space offers other expert
    // schedules, a difference that says less than the target's)
    if (const std::string why = search::problem_identity_mismatch(dir / "checkpoint", problem); !why.empty())
      throw UsageError{fmt::format("--resume {}: {}", dir.string(), why)};
    engine.emplace(evo::Engine::resume(dir / "checkpoint", engine_problem, config));
    session::write_history(dir, problem);
  } else {
    engine.emplace(engine_problem, config);
    search::write_problem_identity(dir / "checkpoint", problem);
  }
  if (mpi) mpi->attach(*engine);
  // The LLM operators (one per configured model), added in the same order on resume.
  std::optional<llm::LlmOperators> llm_ops;
  if (llm_cfg) {
    llm_ops = llm::make_llm_operators(*llm_cfg);
    for (auto& op : llm_ops->operators) engine->add_operator(evo::Operator(op));
  }
  std::size_t history_done = 0;
  const evo::Individual* journal_best = nullptr;  // a resume's progress line starts from the killed run's best
  std::vector<evo::Individual> journaled;
  if (resuming) {
    journaled = evo::read_journal(dir / "checkpoint");
    history_done = journaled.size();
    for (const auto& ind : journaled)
      if (ind.eval.ok() && !ind.eval.fitness.empty() && (!journal_best || ind.eval.fitness[0] < journal_best->eval.fitness[0]))
        journal_best = &ind;
  }

  const bool host_run = o.runner == "cpu";  // what ran is the tile program on this CPU
  const std::string model_note = host_model_note(o.runner, problem.target());
  if (!o.quiet && !o.json) {
    fmt::print(stderr, "kevo: {} on {} with runner {}, {} (seed {}), budget {} evaluations{} -> {}\n", r.kernel_source,
               r.target.name, o.runner, o.algorithm, o.seed, config.budget.max_evaluations,
               o.time_limit > 0 ? fmt::format(", {} s", o.time_limit) : std::string(), dir.string());
    if (!model_note.empty()) fmt::print(stderr, "kevo: note: {}\n", model_note);
    // a finished run resumed: say so, rather than report a search that never ran
    if (resuming && config.budget.max_evaluations > 0 && history_done >= config.budget.max_evaluations)
      fmt::print(stderr, "kevo: note: {} already holds {} evaluations, the budget of {}: nothing more to search (a larger --budget continues it)\n",
                 dir.string(), history_done, config.budget.max_evaluations);
  }
  Progress progress(o.quiet || o.json, config.budget.max_evaluations, o.time_limit, history_done);
  if (journal_best) progress.new_best(journal_best->eval.fitness[0], journal_best->eval.metric("fraction_of_peak"));
  std::FILE* hist = std::fopen((dir / "history.jsonl").c_str(), "a");
  if (!hist) throw Error("cannot open " + (dir / "history.jsonl").string());
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<records::Recorder> recorder;
  if (db) recorder.emplace(*db, problem, std::string(kVersionString));
  evo::Observer obs;
  // A records failure (disk full, a locked file past its wait) must not stop the search: one
  // warning, then no more recording.
  auto recording = [&](auto&& f) {
    if (!recorder) return;
    try {
      f();
    } catch (const std::exception& e) {
      fmt::print(stderr, "kevo: warning: records: {}; recording stops\n", e.what());
      recorder.reset();
    }
  };
  obs.on_evaluation = [&](const evo::Individual& ind) {
    recording([&] { recorder->record(ind); });
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto line = session::history_line(ind, problem, t) + "\n";
    std::fwrite(line.data(), 1, line.size(), hist);
    std::fflush(hist);
    progress.evaluation(ind.eval.ok());
  };
  obs.on_new_best = [&](const evo::Individual& ind) {
    progress.new_best(ind.eval.fitness[0], ind.eval.metric("fraction_of_peak"));
  };
  // The records follow the journal batch by batch: a run killed outright (SIGKILL, power) loses
  // at most the batch it was evaluating, which its resume evaluates again (replayed evaluations
  // are not reported twice, so records written only every 32 would have lost up to 31 for good).
  obs.on_generation = [&](const evo::GenerationStats&) { recording([&] { recorder->flush(); }); };
  engine->add_observer(obs);

  guard.armed = false;  // from here on the directory holds a run
  g_engine.store(&*engine);
  if (llm_ops) g_llm.store(&*llm_ops);
  auto old_int = std::signal(SIGINT, on_stop_signal);
  auto old_term = std::signal(SIGTERM, on_stop_signal);
  if (stop_signal() != 0) stop_run(&*engine, llm_ops ? &*llm_ops : nullptr);  // a signal before the engine was registered
  evo::Result res;
  const double setup_seconds = seconds_since(t_cmd0);
  const auto t_search0 = std::chrono::steady_clock::now();
  progress.start();
  try {
    res = engine->run();
  } catch (...) {
    g_engine.store(nullptr);
    g_llm.store(nullptr);
    std::fclose(hist);
    throw;
  }
  g_engine.store(nullptr);
  g_llm.store(nullptr);
  std::fclose(hist);
  const nlohmann::json mpi_json = mpi ? mpi->finish(*engine, res) : nlohmann::json();  // releases the other ranks
  progress.end_search();
  const double search_seconds = seconds_since(t_search0);
  const int stop_sig = stop_signal();
  const bool interrupted = res.stop_reason == evo::StopReason::requested;

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
              {"figures", figures_kind(o.runner)},
              {"seed", o.seed},
              {"algorithm", o.algorithm},
              {"evaluations", res.evaluations},
              {"valid", res.valid},
              {"invalid", res.by_status[static_cast<int>(Status::invalid)]},
              {"failed", failed},
              {"duplicates_skipped", res.duplicates},
              {"wall_seconds", 0.0},  // the whole command's real time, set once the results are complete
              {"stop_reason", std::string(evo::to_string(res.stop_reason))},
              {"deterministic", res.deterministic},
              {"determinism_note", res.determinism_note},
              {"history_hash", hex64(res.history_hash)},
              {"space_log10_size", problem.space().log10_cardinality()}};
  if (mpi) result["mpi"] = mpi_json;
  if (db) {
    recording([&] { recorder->flush(); });
    result["records"] = {{"db", db->path().string()},
                         {"recorded", recorder ? recorder->written() : 0},
                         {"warm_start", resuming ? json("see the first session") : json(warm.summary())},
                         {"warm_start_schedules", warm.genomes.size()}};
  }
  // The operator table: the engine's counts, and from the journal (the whole run, resumes included)
  // how many of each operator's evaluations were valid and how the rest failed, by kind.
  const auto journal = evo::read_journal(dir / "checkpoint");
  std::map<std::string, std::pair<std::uint64_t, json>> by_op;  // name -> (valid, {kind: count})
  for (const auto& ind : journal) {
    auto& [ok_count, kinds] = by_op.try_emplace(ind.op, 0, json::object()).first->second;
    if (ind.eval.ok()) {
      ++ok_count;
    } else {
      const std::string kind(to_string(ind.eval.status));
      kinds[kind] = kinds.value(kind, std::uint64_t{0}) + 1;
    }
  }
  json ops = json::array();
  for (const auto& s : res.operators) {
    const auto it = by_op.find(s.name);
    ops.push_back({{"name", s.name}, {"proposals", s.proposals}, {"evaluated", s.evaluated},
                   {"valid", it == by_op.end() ? 0 : it->second.first}, {"improvements", s.improvements},
                   {"new_bests", s.new_bests}, {"duplicates", s.duplicates}, {"outside", s.outside},
                   {"failures", it == by_op.end() ? json::object() : it->second.second}, {"cost", s.cost},
                   {"weight", s.weight}});
  }
  result["operators"] = ops;
  result["failures"] = failures_json(journal);
  if (llm_ops) {
    result["llm"] = json::parse(llm_ops->usage_json(), nullptr, false);
    result["llm_cost_usd"] = llm_ops->spent_usd();
  }
  if (!model_note.empty()) result["figures_note"] = model_note;
  std::optional<BestFiles> best;
  std::vector<evo::Individual> first;  // the engine's order, or the re-timed one of a noisy runner
  std::set<std::uint64_t> failed_retime;  // leaders that failed when re-timed (incorrect output, crash)
  std::map<std::uint64_t, runner::Measurement> retimed;  // genome hash -> its re-measurement (ok ones)
  std::map<std::uint64_t, double> search_ns;             // genome hash -> the search's figure of a re-measured leader
  double remeasure_seconds = 0, verify_seconds = 0, final_seconds = 0, default_seconds = 0;
  // The leaders worth re-timing: valid elites only (a population may hold failed individuals when
  // few evaluations succeeded; they have no figure to compare with).
  std::vector<evo::Individual> leaders;
  for (const auto& e : res.elites)
    if (e.eval.ok() && !e.eval.fitness.empty() && leaders.size() < 5) leaders.push_back(e);
  if (!interrupted && res.best && !problem.runner_traits().deterministic && leaders.size() > 1) {
    // A noisy runner: re-time the leaders together before naming a winner.
    const auto t = std::chrono::steady_clock::now();
    std::vector<Genome> top;
    for (const auto& l : leaders) top.push_back(l.genome);
    constexpr int kRounds = 3;
    progress.phase(fmt::format("re-measuring the {} leaders, {} more rounds each (the search's figures are single noisy measurements)",
                               top.size(), kRounds));
    std::vector<runner::Measurement> ms;
    const auto order = problem.remeasure(top, kRounds, ms);
    // A signal during re-timing cancels the workers: those failures say nothing about the leaders.
    // Otherwise a leader that fails when re-timed (the device's output check, a crash) is never a
    // candidate again, whether or not another leader re-timed ok (it stayed one when none did).
    if (stop_signal() == 0)
      for (auto i : order)
        if (ms[i].status != Status::ok) failed_retime.insert(genome_hash(leaders[i].genome));
    if (stop_signal() == 0 && !order.empty() && ms[order.front()].status == Status::ok) {
      for (auto i : order)
        if (ms[i].status == Status::ok) {
          // The figures that follow from the latency are recomputed from the re-measured median.
          auto& m = ms[i];
          if (m.roofline_ns > 0 && m.latency.median > 0) m.fraction_of_peak = m.roofline_ns / m.latency.median;
          m.profile = fmt::format("re-measured: median {} over {} timed runs (the search's and {} more rounds), 95% CI [{}, {}]",
                                  format_ns(m.latency.median), m.latency.n, kRounds, format_ns(m.latency.ci_low),
                                  format_ns(m.latency.ci_high));
          search_ns[genome_hash(leaders[i].genome)] = leaders[i].eval.fitness[0];
          first.push_back(leaders[i]);
          first.back().eval.fitness = {m.latency_ns()};
          retimed[genome_hash(leaders[i].genome)] = m;
        }
      result["remeasured_top"] = top.size();
      progress.phase_done(fmt::format("re-measured: the leader {} over {} timed runs (the search measured it at {})",
                                      format_ns(ms[order.front()].latency_ns()), ms[order.front()].latency.n,
                                      format_ns(leaders[order.front()].eval.fitness[0])));
    } else {
      progress.phase_done("re-measurement gave no figure; the search's order stands");
    }
    remeasure_seconds = seconds_since(t);
  }
  // Trust the winner: candidates best first, each checked against the reference evaluator; the
  // first that verifies is named best, faster ones that failed are listed.
  std::optional<evo::Individual> winner;
  search::Verification winner_v;
  json unverified = json::array();
  search::VerifiedBest vb;
  const auto cands = winner_candidates(std::move(first), res, dir, kMaxVerifyCandidates, failed_retime);
  if (!cands.empty()) {
    const auto t = std::chrono::steady_clock::now();
    std::vector<Genome> gs;
    for (const auto& c : cands) gs.push_back(c.genome);
    search::VerifyOptions vo;
    vo.seed = o.seed ^ 0x5eedULL;
    vb = search::first_verified(gs, kMaxVerifyCandidates, search_verifier(problem, vo, kMaxVerifySeconds),
                                [&](std::size_t i, std::size_t n) {
                                  progress.phase(fmt::format("verifying candidate {}/{} ({}) against the reference", i + 1, n,
                                                             format_ns(cands[i].eval.fitness[0])));
                                });
    for (const auto& [i, v] : vb.rejected) {
      unverified.push_back({{"schedule", problem.to_text(cands[i].genome)},
                            {"latency_ns", cands[i].eval.fitness[0]},
                            {"method", v.method},
                            {"reason", v.message}});
      // recorded as incorrect, so the records never rank it best (its ok evaluation did)
      const Genome& rejected = cands[i].genome;  // (clang captures no structured binding)
      const std::string& why = v.message;
      recording([&] { recorder->record_rejected(rejected, why); });
    }
    if (vb.index) {
      winner = cands[*vb.index];
      winner_v = vb.verification;
      progress.phase_done(fmt::format("candidate {} verified: {}", *vb.index + 1, verified_how(winner_v)));
    } else {
      progress.phase_done(fmt::format("none of {} candidate(s) verified", vb.checked));
    }
    verify_seconds = seconds_since(t);
  }
  int rc = 0;
  // The winner's one figure: its re-measurement (a noisy runner), else one measurement now (the
  // simulator: the same latency as in the search, with its engine breakdown). A device that now
  // reports the winner's output incorrect has the last word: it is not named best.
  std::optional<runner::Measurement> m;
  if (winner && !interrupted && stop_signal() == 0) {
    const auto t = std::chrono::steady_clock::now();
    if (auto it = retimed.find(genome_hash(winner->genome)); it != retimed.end()) {
      m = it->second;
    } else {
      progress.phase("measuring the named best once more");
      m = problem.measure_one(winner->genome).measurement;
      if (m && m->status == Status::ok)
        progress.phase_done(fmt::format("named best: {}", format_ns(m->latency_ns())));
      else if (m && m->status == Status::incorrect)
        progress.phase_done(fmt::format("the device reports the verified candidate's output incorrect ({}): no best named", m->message));
      else
        progress.phase_done(fmt::format("the named best's measurement failed ({}); the search's figure stands",
                                        m ? m->message : std::string("no measurement")));
    }
    final_seconds = seconds_since(t);
    if (m && m->status == Status::incorrect) {
      unverified.push_back({{"schedule", problem.to_text(winner->genome)},
                            {"latency_ns", winner->eval.fitness[0]},
                            {"method", "device output check (final measurement)"},
                            {"reason", m->message}});
      recording([&] { recorder->record_rejected(winner->genome, "device output check: " + m->message); });
      winner.reset();
      m.reset();
    }
  }
  if (winner) {
    evo::Individual as_searched = *winner;  // the search's own figure (history.jsonl), not the re-measured one
    if (auto it = search_ns.find(genome_hash(winner->genome)); it != search_ns.end()) as_searched.eval.fitness = {it->second};
    best = write_best(dir, problem, as_searched, m, host_run);
    best->best["remeasured"] = retimed.count(genome_hash(winner->genome)) > 0;
    best->best["verified"] = true;
    best->best["verification"] = verification_json(winner_v, o.seed ^ 0x5eedULL);
    best->best["unverified_better"] = unverified;
    result["best"] = best->best;
    recording([&] {
      recorder->record_verified(winner->genome, best->best["latency_ns"].get<double>(), best->best["fraction_of_peak"].get<double>());
    });
    // The winner against the space's default schedule, measured by the same runner.
    if (!interrupted && stop_signal() == 0) {
      const auto t = std::chrono::steady_clock::now();
      const Genome dg = problem.schedule_space().default_genome();
      json ds{{"schedule", problem.to_text(dg)}};
      if (genome_hash(dg) == genome_hash(winner->genome)) {
        ds["status"] = "ok";
        ds["latency_ns"] = best->best["latency_ns"];
        ds["fraction_of_peak"] = best->best["fraction_of_peak"];
        ds["speedup"] = 1.0;
        ds["note"] = "the named best is the default schedule";
      } else {
        progress.phase("measuring the default schedule for comparison");
        const auto rep = problem.measure_one(dg);
        if (rep.invalid) {
          ds["status"] = "invalid";
          ds["reason"] = rep.invalid->str();
        } else if (!rep.measurement || rep.measurement->status != Status::ok || !(rep.measurement->latency_ns() > 0)) {
          ds["status"] = rep.measurement ? std::string(to_string(rep.measurement->status)) : std::string("error");
          ds["reason"] = rep.measurement ? rep.measurement->message : std::string("no measurement");
        } else {
          ds["status"] = "ok";
          ds["latency_ns"] = rep.measurement->latency_ns();
          ds["fraction_of_peak"] = rep.measurement->fraction_of_peak;
          ds["samples"] = rep.measurement->latency.n;
          ds["speedup"] = rep.measurement->latency_ns() / best->best["latency_ns"].get<double>();
        }
        progress.phase_done(ds["status"] == "ok"
                                ? fmt::format("default schedule: {}; the named best is {} {}", format_ns(ds["latency_ns"].get<double>()),
                                              ratio_text(ds["speedup"].get<double>() >= 1 ? ds["speedup"].get<double>()
                                                                                          : 1 / ds["speedup"].get<double>()),
                                              ds["speedup"].get<double>() >= 1 ? "faster" : "slower")
                                : fmt::format("default schedule: {} ({})", ds["status"].get<std::string>(), ds.value("reason", "")));
      }
      result["default_schedule"] = ds;
      default_seconds = seconds_since(t);
    }
  } else {
    result["best"] = nullptr;
    if (res.valid == 0 && !interrupted) {
      // Nothing valid: say why the default schedule is not (a kernel with no schedule at all, e.g.
      // a tensor past kevo's addressing or a read no layout tiles), rather than only "0 valid".
      const Genome dg = problem.schedule_space().default_genome();
      if (auto why = lower::lower(problem.schedule_space(), dg); !why)
        result["default_schedule"] = {{"schedule", problem.to_text(dg)}, {"status", "invalid"}, {"reason", why.error().str()}};
    }
    if (!cands.empty()) {
      result["verification_failed"] = {{"first_reason", unverified.empty() ? std::string() : unverified.front().value("reason", "")},
                                       {"checked", vb.checked},
                                       {"candidates", unverified}};
      rc = kExitUnverified;
    }
  }
  if (res.valid == 0 && !interrupted && rc == 0) rc = kExitNoValid;
  result["results_dir"] = dir.string();
  // Real time: the whole command (setup, search, re-measurement, verification, the winner's and
  // the default schedule's measurements), each phase counted.
  const double wall = seconds_since(t_cmd0);
  result["wall_seconds"] = wall;
  result["timing"] = {{"setup_seconds", setup_seconds},
                      {"search_seconds", search_seconds},
                      {"remeasure_seconds", remeasure_seconds},
                      {"verify_seconds", verify_seconds},
                      {"final_measure_seconds", final_seconds},
                      {"default_schedule_seconds", default_seconds},
                      {"search_seconds_all_sessions", res.wall_seconds}};
  write_file_atomic(dir / "result.json", result.dump(2) + "\n");
  write_report(dir, result, problem, best ? &*best : nullptr, host_run);
  if (best)
    progress.finish(best->best["latency_ns"].get<double>(), best->best["fraction_of_peak"].get<double>(),
                    best->best.value("remeasured", false) ? "re-measured, verified" : "verified", wall);
  else
    progress.finish(0, 0, "no best named", wall);

  if (o.json) {
    fmt::print("{}\n", result.dump(2));
  } else {
    // -q keeps this line and the results path; the rest is for the full summary.
    std::string phases = fmt::format("search {}", format_seconds(search_seconds));
    if (remeasure_seconds > 0) phases += ", re-measurement " + format_seconds(remeasure_seconds);
    if (verify_seconds > 0) phases += ", verification " + format_seconds(verify_seconds);
    if (final_seconds + default_seconds > 0) phases += ", final measurements " + format_seconds(final_seconds + default_seconds);
    fmt::print("kevo: {} evaluations ({} valid, {} invalid, {} failed) in {} ({}); stopped: {}\n", res.evaluations, res.valid,
               result["invalid"].get<std::uint64_t>(), failed, format_seconds(wall), phases, evo::to_string(res.stop_reason));
    if (!o.quiet && !model_note.empty()) fmt::print("note: {}\n", model_note);
    const auto& fails = result["failures"];
    if (!o.quiet || rc == kExitNoValid)
      for (auto it = fails.begin(); it != fails.end(); ++it)
        fmt::print("  {:<9} {:>6}  first: {}\n", it.key(), it.value()["count"].get<std::uint64_t>(),
                   printable(it.value()["first_reason"].get<std::string>()));
    const bool ops_ran = std::any_of(result["operators"].begin(), result["operators"].end(),
                                     [](const json& op) { return op["proposals"].get<std::uint64_t>() > 0; });
    if (!o.quiet && ops_ran) {
      fmt::print("  {:<14} {:>9} {:>6} {:>6} {:>6}  {}\n", "operator", "proposals", "valid", "better", "weight",
                 "dropped / failed");
      for (const auto& op : result["operators"]) {
        std::string why = fmt::format("{} duplicate, {} outside", op["duplicates"].get<std::uint64_t>(),
                                      op["outside"].get<std::uint64_t>());
        for (auto it = op["failures"].begin(); it != op["failures"].end(); ++it)
          why += fmt::format(", {} {}", it.value().get<std::uint64_t>(), it.key());
        fmt::print("  {:<14} {:>9} {:>6} {:>6} {:>6.2f}  {}\n", op["name"].get<std::string>(), op["proposals"].get<std::uint64_t>(),
                   op["valid"].get<std::uint64_t>(), op["improvements"].get<std::uint64_t>(), op["weight"].get<double>(), why);
      }
    }
    // An LLM model whose calls failed says so here, not only in result.json (a missing model file,
    // a replay that diverged from its cassette): one line per model, its last error.
    if (!o.quiet && result.contains("llm") && result["llm"].contains("operators"))
      for (const auto& m : result["llm"]["operators"])
        if (m.value("failures", std::uint64_t{0}) > 0)
          fmt::print("kevo: {}: {} of {} calls failed; last: {}\n", printable(m.value("op", "")),
                     m.value("failures", std::uint64_t{0}), m.value("calls", std::uint64_t{0}),
                     printable(m.value("last_error", "")));
    if (o.quiet) {
    } else if (best) {
      fmt::print("best: {}  ({:.1f}% of peak, roofline {}, bottleneck {})  verified: {}\n",
                 format_ns(best->best["latency_ns"].get<double>()), 100 * best->best["fraction_of_peak"].get<double>(),
                 format_ns(best->best["roofline_ns"].get<double>()),
                 best->best.contains("measurement") && !best->best["measurement"].value("bottleneck", "").empty()
                     ? best->best["measurement"].value("bottleneck", "-")
                     : "-",
                 verified_how(winner_v));
      fmt::print("schedule: {}\n", trimmed(best->best["schedule"].get<std::string>()));
      if (result.contains("default_schedule")) {
        const auto& ds = result["default_schedule"];
        if (ds.value("status", "") == "ok") {
          const double sp = ds["speedup"].get<double>();
          fmt::print("default schedule: {}; the named best is {} {} (same runner)\n", format_ns(ds["latency_ns"].get<double>()),
                     ratio_text(sp >= 1 ? sp : 1 / sp), sp >= 1 ? "faster" : "slower");
        } else {
          fmt::print("default schedule: {} ({})\n", ds.value("status", ""), ds.value("reason", ""));
        }
      }
      if (!unverified.empty())
        fmt::print("warning: {} faster candidate(s) failed verification and were not named best (first: {}: {})\n",
                   unverified.size(), format_ns(unverified[0]["latency_ns"].get<double>()),
                   unverified[0]["reason"].get<std::string>());
    } else if (result.contains("verification_failed")) {
      fmt::print("no verified schedule: {} candidate(s) checked, none matched the reference (first: {}); no best named\n",
                 vb.checked, result["verification_failed"]["first_reason"].get<std::string>());
    } else if (interrupted) {
      fmt::print("no best yet: interrupted before a candidate was measured successfully\n");
    } else {
      fmt::print("no valid schedule found: no candidate was measured successfully\n");
      if (result.contains("default_schedule"))
        fmt::print("the default schedule is invalid: {}\n", result["default_schedule"]["reason"].get<std::string>());
    }
    std::string files;
    for (const char* f : {"result.json", "history.jsonl", "best.schedule", "best.program.txt", "best.nki.py", "best.trace.json",
                          "report.html"})
      if (fs::exists(dir / f))
        files += (files.empty() ? "" : ", ") + std::string(f) +
                 (host_run && std::string_view(f) == "best.nki.py" ? " (extra: the schedule as NKI, not what ran)" : "");
    fmt::print("results: {}/ ({})\n", dir.string(), files);
  }
  std::signal(SIGINT, old_int);
  std::signal(SIGTERM, old_term);
  if (interrupted) {
    // (with this session's budget: run.json keeps the first session's, and a resume without it
    // searched nothing after a stopped `--resume R -n 30000`)
    fmt::print(stderr, "kevo: interrupted; checkpoint written. Resume with: kevo search --resume {}{}\n", dir.string(),
               o.budget ? fmt::format(" --budget {}", o.budget) : std::string());
    return 128 + (stop_sig != 0 ? stop_sig : SIGINT);
  }
  if (const int late = stop_signal(); late != 0) {  // during re-timing or verification: the search itself was complete
    fmt::print(stderr, "kevo: interrupted while naming the best; the search was complete and its results are written\n");
    return 128 + late;
  }
  if (rc == kExitUnverified && !o.json) fmt::print(stderr, "kevo: no schedule verified; exit code {}\n", kExitUnverified);
  if (rc == kExitNoValid && !o.json)
    fmt::print(stderr, "kevo: no candidate was measured successfully ({} evaluations: {} invalid, {} failed); exit code {}\n",
               res.evaluations, result["invalid"].get<std::uint64_t>(), failed, kExitNoValid);
  return rc;
}

}  // namespace

int cmd_eval(const Options& o) {
  refuse_gpu_target(o.target, "eval");
  auto r = resolve_all(o);
  const search::KernelProblem problem = make_problem(r, {}, o.space);
  Genome g;
  if (o.schedule_file.empty()) {
    g = problem.schedule_space().default_genome();
  } else {
    std::string name;
    const std::string text = read_schedule_arg(o.schedule_file, "--schedule", name);
    auto parsed = problem.schedule_space().parse(text, name);
    if (!parsed) throw UsageError{parsed.error().headline()};
    g = *parsed;
  }
  // Ctrl-C/SIGTERM while a worker measures: its process group is killed, not orphaned (a cpu
  // runner's measurement is cut short).
  const auto old_int = std::signal(SIGINT, on_stop_signal);
  const auto old_term = std::signal(SIGTERM, on_stop_signal);
  // A measurement other than the simulator's takes seconds to minutes (the cpu runner at 4096^3
  // fp32: two): a phase line, redrawn with its seconds while it lasts, as a search's are.
  std::optional<Progress> progress;
  if (o.runner != "sim") {
    progress.emplace(o.quiet || o.json, 0, 0.0, 0);
    progress->phase(fmt::format("measuring with runner {}", o.runner.rfind("cmd:", 0) == 0 ? std::string("cmd") : o.runner));
    progress->start();
  }
  const auto rep = problem.measure_one(g);
  std::signal(SIGINT, old_int);
  std::signal(SIGTERM, old_term);
  const int stop_sig = stop_signal();
  if (progress) progress->phase_done(stop_sig != 0 ? "measurement cut short" : "measured");
  if (stop_sig != 0) {
    fmt::print(stderr, "kevo: interrupted\n");
    return 128 + stop_sig;
  }
  const auto an = ir::analyze(problem.kernel());
  json j{{"kernel", problem.kernel().name}, {"target", problem.target().name}, {"runner", o.runner},
         {"schedule", rep.schedule},          {"flops", an.flops},                {"hbm_bytes", an.min_hbm_bytes}};
  int rc = 0;
  if (rep.invalid) {
    j["status"] = "invalid";
    j["reason"] = rep.invalid->str();
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
  if (!rep.invalid && rep.measurement && rep.measurement->status == Status::ok) {
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
  fmt::print("kernel   {} on {} ({})\nschedule {}\n", printable(problem.kernel().name), printable(problem.target().name), printable(o.runner), rep.schedule);
  if (rep.invalid) {
    fmt::print("status   invalid: {}\n", rep.invalid->str());
    return rc;
  }
  const auto& m = *rep.measurement;
  fmt::print("status   {}{}\n", to_string(m.status), m.message.empty() ? "" : ": " + printable(m.message));
  fmt::print("latency  {} (p10 {}, p90 {}, {} samples)\nroofline {}  fraction of peak {:.1f}%  bottleneck {}\n",
             format_ns(m.latency_ns()), format_ns(m.latency.p10), format_ns(m.latency.p90), m.latency.n, format_ns(m.roofline_ns),
             100 * m.fraction_of_peak, m.bottleneck.empty() ? "-" : m.bottleneck);
  for (const auto& e : m.engines) fmt::print("  {:<8} {:5.1f}% busy\n", e.engine, 100 * e.utilisation);
  // the profile's DMA lines (a simulated run's): the traffic, and which tensor's runs cost bandwidth
  for (std::size_t at = 0; at < m.profile.size();) {
    const std::size_t end = std::min(m.profile.find('\n', at), m.profile.size());
    if (m.profile.compare(at, 3, "DMA") == 0) fmt::print("{}\n", printable(m.profile.substr(at, end - at)));
    at = end + 1;
  }
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
  refuse_gpu_target(o.target, "space");
  std::string ksrc, tname;
  auto k = resolve_kernel(o, ksrc);
  auto t = resolve_target(o, tname);
  const auto sp = resolve_space(k, t, ksrc, o.space);
  const auto& s = sp.genes();
  // at most 10 s of sampling: a kernel of hundreds of ops lowers in tens of ms per genome
  constexpr double kSampleSeconds = 10;
  const auto sampled = o.samples ? sp.sampled_validity(o.samples, 1, kSampleSeconds) : schedule::ScheduleSpace::Validity{};
  const double validity = sampled.share;
  std::optional<std::string> default_invalid;
  if (auto why = lower::lower(sp, sp.default_genome()); !why) default_invalid = why.error().str();
  if (o.json) {
    json genes = json::array();
    for (const auto& g : s.genes())
      genes.push_back({{"name", g.name}, {"kind", to_string(g.kind)}, {"group", g.group}, {"values", g.labels}});
    json j{{"kernel", k.name},           {"target", t.name},       {"genes", genes},
           {"log10_size", s.log10_cardinality()}, {"sampled_validity", validity}, {"samples", sampled.samples},
           {"default_schedule", sp.print(sp.default_genome())}};
    if (default_invalid) j["default_invalid"] = *default_invalid;
    if (auto c = s.cardinality()) j["size"] = *c;
    if (!sp.splits().empty()) {
      j["splits"] = sp.splits();
      j["scheduled_kernel"] = ir::print_kernel(sp.scheduled_kernel());
    }
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("kernel {} on {}: {} genes, 10^{:.1f} schedules", k.name, t.name, s.size(), s.log10_cardinality());
  if (auto c = s.cardinality()) fmt::print(" ({})", *c);
  fmt::print("\nsampled validity: {:.1f}% of {} random genomes lower{}\n", 100 * validity, sampled.samples,
             sampled.samples < o.samples ? fmt::format(" (sampling stopped after {:.0f} s of the {} asked)", kSampleSeconds, o.samples) : "");
  for (const auto& line : sp.splits())
    fmt::print("scheduled view (docs/SCHEDULE.md): {}; schedules name these indices\n", line);
  for (const auto& g : s.genes()) {
    std::string vals;
    for (std::size_t i = 0; i < g.labels.size() && i < 12; ++i) vals += (i ? " " : "") + g.labels[i];
    if (g.labels.size() > 12) vals += fmt::format(" ... ({} values)", g.labels.size());
    fmt::print("  {:<28} {:<12} {}\n", g.name, to_string(g.kind), vals);
  }
  fmt::print("default schedule:\n  {}\n", sp.print(sp.default_genome()));
  if (default_invalid) fmt::print("the default schedule is invalid: {}\n", *default_invalid);
  return 0;
}

// A field of a results file, or `def` where it is absent or null; a field of the wrong type is
// an error naming the file and the field (a hand-edited result.json is bad input, not a crash).
// Every number kevo writes there (counts, seconds, nanoseconds, fractions of peak, speedups, the
// seed) is finite and >= 0, whole where T is; strings are printed through printable().
template <class T>
T jv(const fs::path& file, const json& o, const char* key, T def, std::string_view in = {}) {
  if (!o.is_object() || !o.contains(key) || o.at(key).is_null()) return def;
  const json& v = o.at(key);
  const auto bad = [&](const std::string& what) {
    return UsageError{fmt::format("{}: '{}{}{}' {}, not what kevo wrote there", file.string(), in, in.empty() ? "" : ".", key, what)};
  };
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    if (!v.is_number()) throw bad(fmt::format("is a {}", v.type_name()));
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < 0 || x > 9.007199254740992e15 || x > static_cast<double>(std::numeric_limits<T>::max()) ||
        (std::is_integral_v<T> && x != std::floor(x)))
      throw bad(fmt::format("= {}", excerpt(v.dump())));
    return static_cast<T>(x);
  } else {
    try {
      return v.get<T>();
    } catch (const json::exception&) {
      throw bad(fmt::format("is a {}", v.type_name()));
    }
  }
}
inline std::string jv(const fs::path& file, const json& o, const char* key, const char* def, std::string_view in = {}) {
  return printable(jv<std::string>(file, o, key, std::string(def), in));
}

int cmd_show(const Options& o) {
  const fs::path dir = o.out;
  if (!fs::is_directory(dir)) throw UsageError{fmt::format("{}: no such results directory", dir.string())};
  const auto rj = dir / "result.json";
  if (fs::exists(rj)) {
    json j = json::parse(read_file(rj), nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw UsageError{fmt::format("{}: not valid JSON", rj.string())};
    // Every field is read (and checked) into `out` before anything is printed: a bad field is
    // one error line, not half a summary; --json prints the file only once it reads.
    std::string out;
    const auto put = [&out]<class... A>(fmt::format_string<A...> f, A&&... a) { fmt::format_to(std::back_inserter(out), f, std::forward<A>(a)...); };
    for (const char* k : {"best", "default_schedule", "failures", "verification_failed"})
      if (j.contains(k) && !j[k].is_null() && !j[k].is_object())
        throw UsageError{fmt::format("{}: '{}' is a {}, not what kevo wrote there", rj.string(), k, j[k].type_name())};
    if (const auto ver = jv(rj, j, "version", std::uint64_t{1}); ver != 1)
      throw UsageError{fmt::format("{}: 'version' = {} (this kevo reads version 1)", rj.string(), ver)};
    put("run {}: {} on {} ({} runner, {}, seed {})\n", dir.string(), jv(rj, j, "kernel", "?"), jv(rj, j, "target", "?"),
               jv(rj, j, "runner", "?"), jv(rj, j, "algorithm", "?"), jv(rj, j, "seed", std::uint64_t{0}));
    put("{} evaluations: {} valid, {} invalid, {} failed; {}; stopped: {}\n", jv(rj, j, "evaluations", 0), jv(rj, j, "valid", 0),
               jv(rj, j, "invalid", 0), jv(rj, j, "failed", 0), format_seconds(jv(rj, j, "wall_seconds", 0.0)), jv(rj, j, "stop_reason", "?"));
    if (j.contains("figures_note")) put("note: {}\n", jv(rj, j, "figures_note", ""));
    if (j.contains("failures") && j["failures"].is_object())
      for (auto it = j["failures"].begin(); it != j["failures"].end(); ++it)
        if (it.value().is_object())
          put("  {:<9} {:>6}  first: {}\n", printable(it.key()), jv(rj, it.value(), "count", 0, "failures." + it.key()), jv(rj, it.value(), "first_reason", "", "failures." + it.key()));
    if (j.contains("best") && j["best"].is_object()) {
      const auto& b = j["best"];
      put("best: {} ({:.1f}% of peak)\nschedule: {}\n", format_ns(jv(rj, b, "latency_ns", 0.0, "best")),
                 100 * jv(rj, b, "fraction_of_peak", 0.0, "best"), printable_lines(jv<std::string>(rj, b, "schedule", "", "best")));
      if (j.contains("default_schedule") && j["default_schedule"].is_object()) {
        const auto& ds = j["default_schedule"];
        if (jv(rj, ds, "status", "", "default_schedule") == "ok" && jv(rj, ds, "speedup", 0.0, "default_schedule") > 0) {
          const double sp = jv(rj, ds, "speedup", 1.0, "default_schedule");
          put("default schedule: {}; the best is {} {}\n", format_ns(jv(rj, ds, "latency_ns", 0.0, "default_schedule")), ratio_text(sp >= 1 ? sp : 1 / sp),
                     sp >= 1 ? "faster" : "slower");
        } else {
          put("default schedule: {} ({})\n", jv(rj, ds, "status", "?", "default_schedule"), jv(rj, ds, "reason", "", "default_schedule"));
        }
      }
      if (jv(rj, b, "verified", false, "best") && b.contains("verification") && b["verification"].is_object()) {
        const auto& v = b["verification"];
        const std::string m = jv(rj, v, "method", "?", "best.verification");
        put("verified: {} ({})\n", m == "reduced_shape" ? "reduced shape " + jv(rj, v, "shape", "", "best.verification") : m, jv(rj, v, "detail", "", "best.verification"));
      } else if (b.contains("verified") && b["verified"].is_boolean()) {
        put("verified: {}{}\n", b["verified"].get<bool>() ? "yes" : "NO", b.contains("verify_message") ? " — " + jv(rj, b, "verify_message", "", "best") : "");
      } else {
        put("verified: unknown (a result.json from before verification was recorded)\n");
      }
      if (b.contains("unverified_better") && b["unverified_better"].is_array() && !b["unverified_better"].empty()) {
        const auto& u = b["unverified_better"];
        put("warning: {} faster candidate(s) failed verification and were skipped:\n", u.size());
        for (const auto& c : u)
          put("  {}  {}\n", format_ns(jv(rj, c, "latency_ns", 0.0, "best.unverified_better")), jv(rj, c, "reason", "", "best.unverified_better"));
      }
    } else if (j.contains("verification_failed") && j["verification_failed"].is_object()) {
      const auto& f = j["verification_failed"];
      put("no best: none of {} candidate(s) verified (first: {})\n", jv(rj, f, "checked", 0, "verification_failed"), jv(rj, f, "first_reason", "", "verification_failed"));
    }
    if (o.json) fmt::print("{}\n", j.dump(2));
    else fmt::print("{}", out);
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

int cmd_workloads(const Options& o) {
  const auto ws = ir::workloads();
  if (o.json) {
    json j = json::array();
    for (const auto& w : ws)
      j.push_back({{"name", w.name}, {"parameters", w.parameters}, {"example", w.example}, {"summary", w.summary}});
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  for (const auto& w : ws) fmt::print("{:<12} {}\n{:<12} parameters: {}\n{:<12} e.g. --workload {}\n", w.name, w.summary, "",
                                      w.parameters, "", w.example);
  return 0;
}

int cmd_targets(const Options& o) {
  std::vector<target::Target> ts;
  for (const auto& n : target::builtin_targets()) {
    auto t = target::load_target(n);
    if (!t) throw Error(fmt::format("built-in target {}: {}", n, t.error().headline()));
    ts.push_back(std::move(t).value());
  }
  if (o.json) {
    json j = json::array();
    for (const auto& t : ts)
      j.push_back({{"name", t.name}, {"generation", t.generation}, {"host", t.host},
                   {"peak_tensor_flops_bf16", t.peak_tensor_flops_bf16}, {"hbm_bytes_per_ns", t.hbm_bytes_per_ns}});
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  for (const auto& t : ts)
    fmt::print("{:<6} {:<16} {}\n", t.name, t.generation,
               t.host ? std::string("this CPU (--runner cpu)")
                      : fmt::format("{:.0f} TFLOP/s bf16, {:.0f} GB/s HBM per core", t.peak_tensor_flops_bf16 / 1e12,
                                    t.hbm_bytes_per_ns));
  fmt::print("(kevo targets show NAME prints one as JSON; --target FILE.json takes your own: docs/TARGETS.md)\n");
  return 0;
}

int cmd_target_show(const std::string& name) {
  const auto names = target::builtin_targets();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    std::string all;
    for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
    throw UsageError{fmt::format("targets show {}: no such built-in target (built in: {})", name, all)};
  }
  const std::string text = target::builtin_target_json(name);
  fmt::print("{}{}", text, !text.empty() && text.back() == '\n' ? "" : "\n");
  return 0;
}

}  // namespace kevo::cli
