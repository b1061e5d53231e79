// The session module: names to kernels, targets and runners; the results directory's run
// description; history lines. What every front end (the kevo command, the Python module, a
// user's own) shares, tested without the command.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <unistd.h>

#include "kevo/core/io.hpp"
#include "kevo/evo.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/search.hpp"
#include "kevo/session.hpp"

using namespace kevo;
namespace fs = std::filesystem;

namespace {
fs::path fresh_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / fmt::format("kevo-session-test-{}-{}", ::getpid(), name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}
}  // namespace

TEST_CASE("kernels, targets and runners by name, errors as one-line values", "[session]") {
  auto k = session::kernel_from_workload("matmul:M=256,N=256,K=256,dtype=bf16");
  REQUIRE(k);
  CHECK(k->name == "matmul");
  auto bad = session::kernel_from_workload("matmul:M=oops");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error(), Catch::StartsWith("workload matmul:M=oops: "));
  CHECK(bad.error().find('\n') == std::string::npos);

  const auto dir = fresh_dir("kernels");
  write_file_atomic(dir / "k.kir", ir::print_kernel(*k));
  auto back = session::kernel_from_file((dir / "k.kir").string());
  REQUIRE(back);
  CHECK(ir::print_kernel(*back) == ir::print_kernel(*k));
  write_file_atomic(dir / "bad.kir", "kernel broken(\n");
  auto broken = session::kernel_from_file((dir / "bad.kir").string());
  REQUIRE_FALSE(broken);
  CHECK_THAT(broken.error(), Catch::Contains("bad.kir"));
  CHECK_FALSE(session::kernel_from_file((dir / "missing.kir").string()));

  auto t = session::target_by_name("trn2");
  REQUIRE(t);
  CHECK(t->name == "trn2");
  auto nt = session::target_by_name("trn9");
  REQUIRE_FALSE(nt);
  CHECK_THAT(nt.error(), Catch::StartsWith("target trn9: "));

  auto sim = session::runner_by_name("sim", *t);
  REQUIRE(sim);
  CHECK_FALSE(sim->traits().identity.empty());
  auto cpu = session::runner_by_name("cpu", *t);
  REQUIRE_FALSE(cpu);
  CHECK_THAT(cpu.error(), Catch::Contains("needs target host, not trn2"));
  auto host = session::target_by_name("host");
  REQUIRE(host);
  CHECK(session::runner_by_name("cpu", *host));
  auto cmd = session::runner_by_name("cmd:python3 worker.py --device 0", *t, {30.0, nullptr});
  REQUIRE(cmd);
  CHECK_THAT(cmd->traits().identity, Catch::Contains("python3 worker.py --device 0"));
  CHECK_THAT(session::runner_by_name("cmd:", *t).error(), Catch::Contains("needs a command"));
  CHECK_THAT(session::runner_by_name("gpu", *t).error(), Catch::Contains("'gpu' is not one of sim, cpu, cmd:COMMAND"));
  CHECK(session::runner_by_name("sim", *t, {5.0, nullptr}));  // the timeout is a cmd: runner's
  fs::remove_all(dir);
}

TEST_CASE("a run description round-trips through a results directory; damage is a located error", "[session]") {
  const auto dir = fresh_dir("run");
  const auto k = *session::kernel_from_workload("matmul:M=256,N=256,K=256,dtype=bf16");
  write_file_atomic(dir / "my_target.json", read_file(std::string(KEVO_SOURCE_DIR) + "/targets/trn2.json"));
  session::RunDescription d;
  d.kernel_source = "workload matmul:M=256,N=256,K=256,dtype=bf16";
  d.target = (dir / "my_target.json").string();
  d.runner = "cmd:python3 w.py";
  d.algorithm = "surrogate";
  d.seed = 42;
  d.budget = 777;
  d.time_limit_s = 12.5;
  d.threads = 3;
  d.population = 20;
  d.patience = 99;
  d.eval_timeout_s = 7;
  d.seed_schedules = {"tile m=128 n=128 k=128", "tile m=64 n=128 k=128"};
  const auto out = dir / "results";
  fs::create_directories(out);
  session::save_run(out, d, k);
  auto r = session::load_run(out);
  REQUIRE(r);
  CHECK(r->kernel_source == d.kernel_source);
  CHECK(r->runner == d.runner);
  CHECK(r->algorithm == "surrogate");
  CHECK(r->seed == 42);
  CHECK(r->budget == 777);
  CHECK(r->time_limit_s == 12.5);
  CHECK(r->threads == 3);
  CHECK(r->population == 20);
  CHECK(r->patience == 99);
  CHECK(r->eval_timeout_s == 7);
  CHECK(r->seed_schedules == d.seed_schedules);
  // The kernel and the target file travel with the results: the run rebuilds from DIR alone.
  CHECK(session::kernel_from_file(session::run_kernel_file(out).string()));
  CHECK(session::run_target(out, *r) == (out / "target.json").string());
  CHECK(session::target_by_name(session::run_target(out, *r)));

  CHECK_THAT(session::load_run(dir / "nowhere").error(), Catch::Contains("no run.json there"));
  const std::string good = read_file(out / "run.json");
  write_file_atomic(out / "run.json", "{not json");
  CHECK_THAT(session::load_run(out).error(), Catch::Contains("run.json:1:3: invalid JSON: syntax error"));
  write_file_atomic(out / "run.json", "[1, 2]");
  CHECK_THAT(session::load_run(out).error(), Catch::Contains("run.json: not a kevo run description"));
  // A field's error is located at its value, an unknown field at its key.
  const auto at = good.find("\"threads\": 3");
  REQUIRE(at != std::string::npos);
  const auto line = 1 + std::count(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(at), '\n');
  const auto col = at - good.rfind('\n', at);  // of the key; the value is 11 columns on
  write_file_atomic(out / "run.json", std::string(good).replace(at, 12, "\"threads\": -5"));
  CHECK_THAT(session::load_run(out).error(), Catch::Contains(fmt::format("run.json:{}:{}: 'threads' = -5 is outside", line, col + 11)));
  write_file_atomic(out / "run.json", std::string(good).replace(at, 9, "\"thraeds\""));
  CHECK_THAT(session::load_run(out).error(), Catch::Contains(fmt::format("run.json:{}:{}: unknown field 'thraeds'", line, col)));
  write_file_atomic(out / "run.json", R"({"version": 1, "kernel_source": "x"})");
  auto missing = session::load_run(out);
  REQUIRE_FALSE(missing);
  CHECK_THAT(missing.error(), Catch::Contains("run.json") && Catch::Contains("target"));
  write_file_atomic(out / "run.json", R"({"version": 99})");
  CHECK_FALSE(session::load_run(out));
  fs::remove_all(dir);
}

TEST_CASE("history lines and history.jsonl come from the engine's journal", "[session]") {
  const auto dir = fresh_dir("history");
  const auto k = *session::kernel_from_workload("matmul:M=256,N=256,K=256,dtype=bf16");
  const auto t = *session::target_by_name("trn2");
  const search::KernelProblem p(k, t, *session::runner_by_name("sim", t));
  evo::Config cfg;
  cfg.seed = 4;
  cfg.threads = 1;
  cfg.budget.max_evaluations = 40;
  cfg.checkpoint.dir = dir / "checkpoint";
  cfg.checkpoint.sync = false;
  const auto r = evo::Engine(evo::Problem(p), cfg).run();
  session::write_history(dir, p);
  std::ifstream in(dir / "history.jsonl");
  std::string line;
  std::size_t n = 0, ok = 0;
  while (std::getline(in, line)) {
    ++n;
    CHECK_THAT(line, Catch::Contains("\"schedule\":\"tile "));
    if (line.find("\"status\":\"ok\"") != std::string::npos) {
      ++ok;
      CHECK_THAT(line, Catch::Contains("\"latency_ns\":"));
    } else {
      CHECK_THAT(line, Catch::Contains("\"reason\":"));
    }
  }
  CHECK(n == r.evaluations);
  CHECK(ok == r.valid);
  REQUIRE(r.best);
  CHECK_THAT(session::history_line(*r.best, p, 1.5), Catch::Contains("\"t\":1.5"));
  fs::remove_all(dir);
}
