// A strategy written outside kevo's sources (examples/extend/one_plus_lambda.hpp) gets
// determinism, checkpoints and SIGKILL-safe resume from the engine like the built-ins.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "../../examples/extend/one_plus_lambda.hpp"
#include "problems.hpp"

using namespace kevo;
using namespace kevo::evo;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / fmt::format("kevo-evo-user-{}-{}", ::getpid(), name);
  fs::remove_all(d);
  return d;
}

Config es_config(std::uint64_t evals, int threads = 2) {
  Config c;
  c.seed = 31;
  c.threads = threads;
  c.budget.max_evaluations = evals;
  c.checkpoint.sync = false;
  c.checkpoint.snapshot_interval = 4;
  return c;
}

Problem es_problem(int sleep_us = 0) { return Problem(evotest::Rastrigin(8, false, sleep_us)); }

Result run_es(const Problem& p, Config c, std::vector<Individual>* trace = nullptr) {
  Engine e(p, std::move(c));
  e.set_strategy(extend::OnePlusLambda(8));
  if (trace) e.add_observer(Observer{[trace](const Individual& i) { trace->push_back(i); }, {}, {}});
  return e.run();
}

Result resume_es(const fs::path& dir, const Problem& p, const Config& c) {
  Engine e = Engine::resume(dir, p, c);
  e.set_strategy(extend::OnePlusLambda(8));
  return e.run();
}

bool same_record(const Individual& a, const Individual& b) {
  return a.id == b.id && a.genome == b.genome && a.eval.status == b.eval.status && a.eval.fitness == b.eval.fitness &&
         a.op == b.op && a.generation == b.generation;
}

// The same strategy without save/load: a resume rebuilds it by replaying the whole journal.
struct StatelessEs {
  extend::OnePlusLambda es{8};
  std::string name() const { return es.name(); }
  void ask(std::size_t n, AskContext& ctx) { es.ask(n, ctx); }
  void tell(std::span<Evaluated> r) { es.tell(r); }
};

}  // namespace

TEST_CASE("a user strategy gives the same history with 1, 2 and 4 threads", "[evo][strategy][determinism]") {
  const auto p = es_problem();
  std::vector<Individual> t1, t2, t4;
  auto c = es_config(1200, 1);
  c.checkpoint.dir.clear();
  const auto r1 = run_es(p, c, &t1);
  c.threads = 2;
  const auto r2 = run_es(p, c, &t2);
  c.threads = 4;
  const auto r4 = run_es(p, c, &t4);
  REQUIRE(r1.deterministic);
  CHECK(r1.evaluations == 1200);
  CHECK(r2.history_hash == r1.history_hash);
  CHECK(r4.history_hash == r1.history_hash);
  REQUIRE(t1.size() == 1200);
  REQUIRE(t2.size() == t1.size());
  REQUIRE(t4.size() == t1.size());
  for (std::size_t i = 0; i < t1.size(); ++i) {
    REQUIRE(same_record(t1[i], t2[i]));
    REQUIRE(same_record(t1[i], t4[i]));
  }
  // It searched: the ES's own children and the bandit's both took part, and it beat its start.
  CHECK(std::count_if(t1.begin(), t1.end(), [](const Individual& i) { return i.op == "es"; }) > 600);
  std::uint64_t bred = 0;
  for (const auto& o : r1.operators) bred += o.evaluated;
  CHECK(bred > 100);
  double first_best = 1e300;
  for (std::size_t i = 0; i < 8; ++i)
    if (t1[i].eval.ok()) first_best = std::min(first_best, t1[i].eval.fitness[0]);
  REQUIRE(r1.best);
  CHECK(r1.best->eval.fitness[0] < 0.5 * first_best);
  CHECK_FALSE(r1.elites.empty());  // the engine kept leaders for a strategy without population()
}

TEST_CASE("a user strategy's state is checkpointed: a resumed run continues bit-identically", "[evo][strategy][checkpoint]") {
  const auto p = es_problem();
  const auto ref_dir = fresh_dir("ref"), dir = fresh_dir("part");
  auto c = es_config(1000);
  c.checkpoint.dir = ref_dir;
  const auto ref = run_es(p, c);
  // A run stopped (request_stop, as Ctrl-C does) after its 40th generation: its last snapshot
  // holds the strategy's state, and the resume continues from exactly there.
  c = es_config(1000);
  c.checkpoint.dir = dir;
  {
    Engine e(p, c);
    e.set_strategy(extend::OnePlusLambda(8));
    e.add_observer(Observer{{}, {}, [&e](const GenerationStats& g) {
                              if (g.generation == 40) e.request_stop();
                            }});
    const auto part = e.run();
    CHECK(part.stop_reason == StopReason::requested);
    CHECK(part.generations == 41);
    CHECK(part.evaluations < 1000);
  }
  const auto r = resume_es(dir, p, es_config(1000));
  CHECK(r.evaluations == 1000);
  CHECK(r.history_hash == ref.history_hash);
  REQUIRE(r.best);
  CHECK(r.best->id == ref.best->id);
  const auto a = read_journal(dir), b = read_journal(ref_dir);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) REQUIRE(same_record(a[i], b[i]));

  // Resuming with another strategy is refused, naming both.
  CHECK_THROWS_WITH(Engine::resume(dir, p, es_config(1200)).run(),
                    Catch::Contains("recorded with strategy 'one_plus_lambda' but this engine has 'ga'"));
  fs::remove_all(ref_dir);
  fs::remove_all(dir);
}

TEST_CASE("a strategy without save/load resumes by replaying the whole journal", "[evo][strategy][checkpoint]") {
  const auto p = es_problem();
  const auto dir = fresh_dir("stateless");
  Config c = es_config(900);
  c.checkpoint.dir.clear();
  Engine ref_engine(p, c);
  ref_engine.set_strategy(StatelessEs{});
  const auto ref = ref_engine.run();

  c = es_config(500);
  c.checkpoint.dir = dir;
  Engine first(p, c);
  first.set_strategy(StatelessEs{});
  first.run();
  Engine again = Engine::resume(dir, p, es_config(900));
  again.set_strategy(StatelessEs{});
  const auto r = again.run();
  CHECK(r.replayed == 500);  // every journaled result was taken again, none re-evaluated
  CHECK(r.evaluations == 900);
  CHECK(r.history_hash == ref.history_hash);
  fs::remove_all(dir);
}

// Not a test: the child process of the kill test (hidden tag, run only when named).
TEST_CASE("child: run or resume a user-strategy search", "[.evo-user-child]") {
  const char* dir = std::getenv("KEVO_EVO_USER_DIR");
  REQUIRE(dir);
  auto c = es_config(evotest::asan() ? 600 : 2000);
  c.checkpoint.dir = dir;
  Engine e = fs::exists(fs::path(dir) / "snapshot.kevo") ? Engine::resume(dir, es_problem(150), c) : Engine(es_problem(150), c);
  e.set_strategy(extend::OnePlusLambda(8));
  e.run();
}

TEST_CASE("a user-strategy run killed with SIGKILL resumes to the uninterrupted history", "[evo][strategy][kill]") {
  const auto ref_dir = fresh_dir("kill-ref"), dir = fresh_dir("killed");
  auto c = es_config(evotest::asan() ? 600 : 2000);
  c.checkpoint.dir = ref_dir;
  const auto t0 = std::chrono::steady_clock::now();
  const auto ref = run_es(es_problem(150), c);
  const auto ref_ms = std::max<std::int64_t>(
      30, std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
  const auto ref_journal = read_journal(ref_dir);
  REQUIRE(ref_journal.size() == ref.evaluations);

  Rng rng(5);
  int killed = 0;
  std::size_t before = 0;
  for (int round = 0; round < (evotest::asan() ? 3 : 5); ++round) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::setenv("KEVO_EVO_USER_DIR", dir.c_str(), 1);
      ::execl("/proc/self/exe", "test_evo", "[.evo-user-child]", "--use-colour", "no", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10 + static_cast<int>(rng.below(static_cast<std::uint64_t>(ref_ms) * 3 / 4))));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) ++killed;
    if (!fs::exists(dir / "journal.kevo")) continue;
    const auto j = read_journal(dir);
    CHECK(j.size() >= before);
    REQUIRE(j.size() <= ref_journal.size());
    for (std::size_t i = 0; i < j.size(); ++i) REQUIRE(same_record(j[i], ref_journal[i]));
    before = j.size();
  }
  CHECK(killed > 0);
  c.checkpoint.dir = dir;
  const auto r = resume_es(dir, es_problem(150), c);
  CHECK(r.evaluations == ref.evaluations);
  CHECK(r.history_hash == ref.history_hash);
  const auto j = read_journal(dir);
  REQUIRE(j.size() == ref_journal.size());
  for (std::size_t i = 0; i < j.size(); ++i) REQUIRE(same_record(j[i], ref_journal[i]));
  fs::remove_all(ref_dir);
  fs::remove_all(dir);
}

namespace {
// Offers random genomes; after `stop_at` evaluations asks the engine to stop, offering nothing.
struct StopsItself {
  std::uint64_t stop_at;
  [[nodiscard]] std::string name() const { return "stops-itself"; }
  void ask(std::size_t n, AskContext& ctx) {
    if (ctx.evaluations() >= stop_at) {
      ctx.request_stop();
      return;
    }
    for (std::size_t i = 0; i < std::min<std::size_t>(n, 8); ++i) {  // small batches: the budget would be one
      Rng r = ctx.rng(7).fork(ctx.evaluations()).fork(i);
      ctx.offer(ctx.space().random(r), r, "random");
    }
  }
  void tell(std::span<Evaluated>) {}
};
}  // namespace

TEST_CASE("a strategy may stop the run from ask(): stop reason 'requested', not an exhausted space", "[evo][strategy]") {
  Engine e(es_problem(), es_config(1000, 1));
  e.set_strategy(StopsItself{24});
  const Result r = e.run();
  CHECK(r.stop_reason == StopReason::requested);
  CHECK(r.evaluations >= 24);
  CHECK(r.evaluations < 1000);
}
