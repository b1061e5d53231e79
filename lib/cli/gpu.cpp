// kevo search --target <GPU> --runner cmd:WORKER: a search of Triton schedules measured on a GPU
// by a worker (examples/runners/triton_worker.py) over the worker protocol (docs/GPU.md).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "commands.hpp"
#include "kevo/core/io.hpp"
#include "kevo/evo.hpp"
#include "kevo/gpu.hpp"
#include "kevo/runner/process.hpp"
#include "kevo/search.hpp"
#include "options.hpp"
#include "resolve.hpp"

namespace kevo::cli {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kFinalRepeats = 30;        // samples per leader when re-timed at the end
constexpr std::size_t kFinalLeaders = 3;  // distinct leaders re-timed

json metrics_json(const evo::Evaluation& e) {
  json m = json::object();
  for (const auto& [k, v] : e.metrics) m[k] = v;
  return m;
}

}  // namespace

int cmd_gpu_search(Options o) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!o.resume.empty()) throw UsageError{"--resume is not supported for GPU targets (GPU searches are short; run again)"};
  if (o.runner.rfind("cmd:", 0) != 0 || o.runner.size() <= 4)
    throw UsageError{fmt::format("--target {} is a GPU: measure it with --runner 'cmd:python3 examples/runners/triton_worker.py' "
                                 "(docs/GPU.md), not --runner {}", o.target, o.runner)};
  auto t = gpu::load_gpu_target(o.target);
  if (!t) throw UsageError{fmt::format("--target {}: {}", o.target, t.error())};
  std::string ksrc;
  ir::Kernel kernel = resolve_kernel(o, ksrc);
  auto gk = gpu::classify(kernel);
  if (!gk) throw UsageError{fmt::format("{}: {}", ksrc, gk.error())};
  runner::ProcessOptions po;
  const std::string cmd = o.runner.substr(4);
  po.command = {"/bin/sh", "-c", cmd};
  po.cancel = &g_cancel_workers;
  po.timeout_s = o.eval_timeout > 0 ? o.eval_timeout : 180;  // a first Triton compile of a big tile can take a while
  po.repeats = 10;
  po.identity = "gpu-process:" + cmd;
  po.nki_source = [](const runner::Candidate&) { return std::string(); };
  gpu::TritonProblem problem(kernel, *t, po);
  const auto& space = problem.triton_space();

  // A fresh directory by default (a second GPU search of the same kernel replaced the first's
  // files); one that --out names must not hold a run already, and is held while this one runs.
  fs::path dir = o.out.empty() ? fs::path("runs") / fmt::format("gpu-{}-{}", gk->name, t->name) : fs::path(o.out);
  if (o.out.empty())
    for (int i = 2; fs::exists(dir); ++i) dir = fs::path("runs") / fmt::format("gpu-{}-{}-{}", gk->name, t->name, i);
  const auto holds_run = [&] {
    for (const char* f : {"result.json", "history.jsonl", "run.json"})
      if (fs::exists(dir / f)) return true;
    return false;
  };
  if (holds_run()) throw UsageError{fmt::format("--out {} already holds a run; choose another directory", dir.string())};
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UsageError{fmt::format("--out {}: {}", dir.string(), ec.message())};
  DirLock lock(dir, "--out");
  if (holds_run()) throw UsageError{fmt::format("--out {} already holds a run; choose another directory", dir.string())};

  evo::Config c = search::default_search_config(o.seed, 1);
  c.algorithm = evo::Algorithm::ga;
  if (o.algorithm != "ga") throw UsageError{fmt::format("--algorithm {}: GPU searches use ga", o.algorithm)};
  c.threads = 1;  // one GPU: candidates are timed one at a time
  c.population = o.population ? o.population : 12;
  c.budget.max_evaluations = o.budget ? o.budget : 48;
  c.budget.max_seconds = o.time_limit;
  c.budget.patience = o.patience;
  // --seed-schedule first (a Triton schedule as text; an invalid one is refused with its reason),
  // then the space's hand-picked seeds
  for (const auto& arg : o.seed_schedules) {
    std::string name;
    const std::string text = read_schedule_arg(arg, "--seed-schedule", name);
    auto g = space.parse(text);
    if (!g) throw UsageError{fmt::format("--seed-schedule {}: {}", name, g.error())};
    if (auto ok = space.check(*g); !ok) throw UsageError{fmt::format("--seed-schedule {}: {}", name, ok.error().str())};
    if (std::find(c.seeds.begin(), c.seeds.end(), *g) == c.seeds.end()) c.seeds.push_back(*g);
  }
  for (const auto& g : space.seeds())
    if (std::find(c.seeds.begin(), c.seeds.end(), g) == c.seeds.end()) c.seeds.push_back(g);
  if (!o.quiet)
    fmt::print(stderr, "kevo: {} on {} ({} SMs); space of {} genes, 10^{:.1f} schedules; budget {} evaluations; worker: {}\n",
               gk->describe(), t->name, t->sm_count, space.space().size(), space.space().log10_cardinality(),
               c.budget.max_evaluations, cmd);
  evo::Engine engine(evo::Problem(problem), c);
  catch_stop_signals();
  std::ofstream hist(dir / "history.jsonl");
  std::size_t n = 0;
  engine.add_observer(evo::Observer{
      [&](const evo::Individual& ind) {
        ++n;
        json h{{"id", ind.id}, {"op", ind.op}, {"schedule", space.text(ind.genome)}, {"status", std::string(to_string(ind.eval.status))}};
        if (ind.eval.ok()) h["latency_ns"] = ind.eval.fitness[0], h["metrics"] = metrics_json(ind.eval);
        else h["reason"] = ind.eval.reason;
        hist << h.dump() << "\n";
        hist.flush();
        if (stop_signal() != 0) engine.request_stop();
        if (o.quiet) return;
        if (ind.eval.ok())
          fmt::print(stderr, "  [{:3}] ok        {:>10.1f} us {}  {}\n", n, ind.eval.fitness[0] * 1e-3,
                     gk->flops() > 0 ? fmt::format("{:7.1f} TFLOP/s", ind.eval.metric("tflops"))
                                     : fmt::format("{:7.1f} GB/s", ind.eval.metric("gbytes_per_s")),
                     space.text(ind.genome));
        else
          fmt::print(stderr, "  [{:3}] {:9} {}  {}\n", n, to_string(ind.eval.status),
                     ind.eval.reason.substr(0, 160), space.text(ind.genome));
      },
      nullptr, nullptr});
  const evo::Result res = engine.run();
  if (const int sig = stop_signal(); sig != 0) {
    fmt::print(stderr, "kevo: interrupted after {} evaluations; history in {}\n", n, (dir / "history.jsonl").string());
    return 128 + sig;
  }

  // Re-time the distinct valid leaders with more samples (each run re-checks outputs on the device).
  std::vector<evo::Individual> leaders;
  std::set<std::uint64_t> seen;
  std::vector<evo::Individual> all = res.elites;
  if (res.best) all.insert(all.begin(), *res.best);
  for (const auto& ind : all)
    if (ind.eval.ok() && seen.insert(genome_hash(ind.genome)).second && leaders.size() < kFinalLeaders) leaders.push_back(ind);
  json result;
  result["kernel"] = ksrc;
  result["problem"] = json::parse(gk->to_json());
  result["target"] = t->name;
  result["worker"] = cmd;
  result["evaluations"] = res.evaluations;
  result["valid"] = res.valid;
  json by = json::object();
  for (std::size_t s = 0; s < res.by_status.size(); ++s)
    if (res.by_status[s]) by[std::string(to_string(static_cast<Status>(s)))] = res.by_status[s];
  result["by_status"] = by;
  if (leaders.empty()) {
    result["best"] = nullptr;
    write_file_atomic(dir / "result.json", result.dump(2) + "\n");
    fmt::print(stderr, "kevo: no schedule measured ok ({} evaluations); see {}\n", res.evaluations, (dir / "history.jsonl").string());
    if (o.json) fmt::print("{}\n", result.dump(2));
    return kExitNoValid;
  }
  double best_ns = 0;
  const evo::Individual* best = nullptr;
  runner::Measurement best_m;
  const evo::Individual* unretimed = nullptr;  // the best leader whose re-timing failed other than by its output
  json rejected = json::array();
  for (const auto& ind : leaders) {
    runner::Measurement m = problem.measure(ind.genome, kFinalRepeats);
    if (!o.quiet)
      fmt::print(stderr, "kevo: re-timed {}: {} {}\n", space.text(ind.genome), to_string(m.status),
                 m.status == Status::ok ? fmt::format("{:.1f} us (median of {})", m.latency.median * 1e-3, m.samples_ns.size()) : m.message);
    // the device's own output check has the last word: a leader it now finds incorrect is never
    // named best (one was, with the search's figure, when every leader came back incorrect)
    if (m.status == Status::incorrect) {
      rejected.push_back({{"schedule", space.text(ind.genome)}, {"reason", m.message}});
      continue;
    }
    if (m.status != Status::ok) {
      if (unretimed == nullptr) unretimed = &ind;
      continue;
    }
    if (best == nullptr || m.latency.median < best_ns) best = &ind, best_ns = m.latency.median, best_m = m;
  }
  result["rejected_on_retiming"] = rejected;
  if (best == nullptr && unretimed != nullptr) {
    // no leader re-timed ok, and the best that did not fail its output check keeps the search's
    // figure (its output was checked then), said so in latency_source
    best = unretimed;
    best_ns = best->eval.fitness[0];
  }
  if (best == nullptr) {
    result["best"] = nullptr;
    write_file_atomic(dir / "result.json", result.dump(2) + "\n");
    fmt::print(stderr, "kevo: every leader failed the device's output check when re-timed ({}); no best named\n",
               rejected.empty() ? std::string() : rejected.front().value("reason", ""));
    if (o.json) fmt::print("{}\n", result.dump(2));
    return kExitUnverified;
  }
  json b;
  b["schedule"] = space.text(best->genome);
  b["latency_ns"] = best_ns;
  b["latency_source"] = best_m.samples_ns.empty() ? "search (re-timing failed; its output was checked on the device during the search)"
                                                  : "re-timed, outputs re-checked on the device";
  b["samples_ns"] = best_m.samples_ns;
  if (gk->flops() > 0) b["tflops"] = gk->flops() / best_ns * 1e-3;
  b["gbytes_per_s"] = gk->min_bytes() / best_ns;
  b["profile"] = best_m.profile;
  result["best"] = b;
  result["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  write_file_atomic(dir / "best.triton.py", problem.source(best->genome));
  write_file_atomic(dir / "best.schedule", space.text(best->genome) + "\n");
  write_file_atomic(dir / "result.json", result.dump(2) + "\n");
  if (o.json) {
    fmt::print("{}\n", result.dump(2));
  } else {
    fmt::print("best: {}\n  {:.1f} us{}, {} evaluations ({} valid); files in {}\n", b["schedule"].get<std::string>(), best_ns * 1e-3,
               gk->flops() > 0 ? fmt::format(", {:.1f} TFLOP/s", gk->flops() / best_ns * 1e-3)
                               : fmt::format(", {:.1f} GB/s", gk->min_bytes() / best_ns),
               res.evaluations, res.valid, dir.string());
  }
  return 0;
}

}  // namespace kevo::cli
