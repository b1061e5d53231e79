#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <thread>

#include "kevo/core/io.hpp"
#include "problems.hpp"

using namespace kevo;
using namespace kevo::evo;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / fmt::format("kevo-evo-test-{}-{}", ::getpid(), name);
  fs::remove_all(d);
  return d;
}

void write_bytes(const fs::path& p, const std::string& s) {
  std::ofstream o(p, std::ios::binary | std::ios::trunc);
  o << s;
}

// Byte offset of record k in a journal (header 24 bytes, then [u32 len][u64 sum][payload]).
std::size_t record_offset(const std::string& data, std::size_t k) {
  std::size_t pos = 24;
  for (std::size_t i = 0; i < k; ++i) {
    std::uint32_t len = 0;
    for (int b = 0; b < 4; ++b) len |= static_cast<std::uint32_t>(static_cast<unsigned char>(data[pos + static_cast<std::size_t>(b)])) << (8 * b);
    pos += 12 + len;
  }
  return pos;
}

bool same_record(const Individual& a, const Individual& b) {
  return a.id == b.id && a.genome == b.genome && a.eval.status == b.eval.status && a.eval.fitness == b.eval.fitness &&
         a.eval.descriptors == b.eval.descriptors && a.op == b.op && a.generation == b.generation;
}

Config kill_config(Algorithm alg) {
  auto cfg = evotest::small_config(alg, 2024, evotest::asan() ? 600 : 2400);
  cfg.threads = 2;
  cfg.checkpoint.sync = false;  // a kill (not a power cut) is what this test simulates
  cfg.checkpoint.snapshot_interval = 3;
  cfg.archive.bins = {5};
  // offered mid-run, so that a resume on either side of them replays them the same
  cfg.late_seeds = {Genome(6, 60), Genome{60, 40, 60, 40, 60, 40}};
  cfg.late_seeds_at = cfg.budget.max_evaluations / 2;
  return cfg;
}

Problem kill_problem() { return Problem(evotest::Rastrigin(6, false, 150)); }

// Starts this test binary again running only the hidden child case, against `dir`.
pid_t spawn_child(const fs::path& dir, Algorithm alg) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("KEVO_EVO_CHILD_DIR", dir.c_str(), 1);
    ::setenv("KEVO_EVO_CHILD_ALG", std::string(to_string(alg)).c_str(), 1);
    ::execl("/proc/self/exe", "test_evo", "[.evo-child]", "--use-colour", "no", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

int kill_after(pid_t pid, int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

}  // namespace

// Not a test: the child process of the kill tests (hidden tag, run only when named).
TEST_CASE("child: run or resume a checkpointed search", "[.evo-child]") {
  const char* dir = std::getenv("KEVO_EVO_CHILD_DIR");
  const char* alg = std::getenv("KEVO_EVO_CHILD_ALG");
  REQUIRE(dir);
  REQUIRE(alg);
  const auto a = *algorithm_from_string(alg);
  Engine::resume(dir, kill_problem(), kill_config(a)).run();
}

TEST_CASE("a run killed with SIGKILL at random moments resumes to the uninterrupted result", "[evo][checkpoint][kill]") {
  for (auto alg : {Algorithm::ga, Algorithm::islands}) {
    INFO(to_string(alg));
    const auto ref_dir = fresh_dir("ref"), dir = fresh_dir("killed");
    auto cfg = kill_config(alg);
    cfg.checkpoint.dir = ref_dir;
    const auto t0 = std::chrono::steady_clock::now();
    const Result ref = Engine(kill_problem(), cfg).run();
    // Kill delays are drawn within the uninterrupted run's own duration (the child also pays
    // for exec and start-up), so the first child is killed mid-run on fast and slow builds alike.
    const auto ref_ms = std::max<std::int64_t>(
        30, std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
    const auto ref_journal = read_journal(ref_dir);
    REQUIRE(ref_journal.size() == ref.evaluations);

    Rng rng(99);
    std::size_t before = 0;
    int killed_mid_run = 0;
    const int rounds = evotest::asan() ? 3 : 6;
    for (int round = 0; round < rounds; ++round) {
      const pid_t pid = spawn_child(dir, alg);
      REQUIRE(pid > 0);
      const int status = kill_after(pid, 10 + static_cast<int>(rng.below(static_cast<std::uint64_t>(ref_ms) * 3 / 4)));
      if (WIFSIGNALED(status)) ++killed_mid_run;
      if (!fs::exists(dir / "journal.kevo")) continue;
      const auto j = read_journal(dir);
      // Nothing completed is ever lost, and the history so far is the uninterrupted one.
      CHECK(j.size() >= before);
      REQUIRE(j.size() <= ref_journal.size());
      for (std::size_t i = 0; i < j.size(); ++i) REQUIRE(same_record(j[i], ref_journal[i]));
      before = j.size();
    }
    CHECK(killed_mid_run > 0);
    // With the run's configuration, as the children resume (and `kevo search --resume` does): on a
    // slow build every child may be killed before its first snapshot, leaving only the journal.
    const Result r = Engine::resume(dir, kill_problem(), kill_config(alg)).run();
    CHECK(r.evaluations == ref.evaluations);
    CHECK(r.history_hash == ref.history_hash);
    REQUIRE(r.best);
    CHECK(r.best->genome == ref.best->genome);
    CHECK(r.best->id == ref.best->id);
    CHECK(r.archive.size() == ref.archive.size());
    CHECK(r.valid == ref.valid);
    CHECK(r.by_status == ref.by_status);
    CHECK(r.duplicates == ref.duplicates);
    const auto j = read_journal(dir);
    REQUIRE(j.size() == ref_journal.size());
    for (std::size_t i = 0; i < j.size(); ++i) REQUIRE(same_record(j[i], ref_journal[i]));
    fs::remove_all(ref_dir);
    fs::remove_all(dir);
  }
}

TEST_CASE("the journal records every evaluation in full, as observers saw it", "[evo][checkpoint]") {
  const auto dir = fresh_dir("full");
  auto cfg = evotest::small_config(Algorithm::ga, 5, 300);
  cfg.checkpoint.dir = dir;
  cfg.checkpoint.sync = false;
  std::vector<Individual> seen;
  Engine e(Problem(evotest::Rastrigin(4)), cfg);
  e.add_observer(Observer{[&](const Individual& i) { seen.push_back(i); }, {}, {}});
  e.run();
  const auto j = read_journal(dir);
  REQUIRE(j.size() == seen.size());
  std::size_t invalid = 0;
  for (std::size_t i = 0; i < j.size(); ++i) {
    REQUIRE(same_record(j[i], seen[i]));
    CHECK(j[i].eval.reason == seen[i].eval.reason);
    invalid += j[i].eval.status == Status::invalid ? 1 : 0;
  }
  CHECK(invalid > 0);  // the "stripe" rejections of the test problem travel with their reason
  fs::remove_all(dir);
}

TEST_CASE("a killed steady-state run keeps every completed evaluation across resumes", "[evo][checkpoint][kill]") {
  const auto dir = fresh_dir("killed-async");
  Rng rng(7);
  std::vector<Individual> before;
  const int rounds = evotest::asan() ? 2 : 4;
  for (int round = 0; round < rounds; ++round) {
    const pid_t pid = spawn_child(dir, Algorithm::steady_state);
    REQUIRE(pid > 0);
    kill_after(pid, 20 + static_cast<int>(rng.below(evotest::asan() ? 400 : 100)));
    if (!fs::exists(dir / "journal.kevo")) continue;
    const auto j = read_journal(dir);
    REQUIRE(j.size() >= before.size());
    for (std::size_t i = 0; i < before.size(); ++i) REQUIRE(same_record(j[i], before[i]));
    before = j;
  }
  const auto cfg = kill_config(Algorithm::steady_state);
  const Result r = Engine::resume(dir, kill_problem(), cfg).run();
  const auto j = read_journal(dir);
  CHECK(r.stop_reason == StopReason::evaluations);
  CHECK(r.evaluations == cfg.budget.max_evaluations);
  CHECK(j.size() == r.evaluations);
  for (std::size_t i = 0; i < before.size(); ++i) REQUIRE(same_record(j[i], before[i]));
  std::set<Genome> uniq;
  for (const auto& i : j) uniq.insert(i.genome);
  CHECK(uniq.size() == j.size());
  fs::remove_all(dir);
}

namespace {

// A finished small run in `dir`; returns its result.
Result small_run(const fs::path& dir) {
  auto cfg = evotest::small_config(Algorithm::ga, 5, 200);
  cfg.checkpoint.dir = dir;
  return Engine(Problem(evotest::Rastrigin(4)), cfg).run();
}

}  // namespace

TEST_CASE("a journal with a foreign header is a clear error", "[evo][checkpoint]") {
  const auto dir = fresh_dir("foreign");
  small_run(dir);
  write_bytes(dir / "journal.kevo", "PK\x03\x04 this is a zip file, not a kevo journal at all");
  CHECK_THROWS_WITH(Engine::resume(dir, Problem(evotest::Rastrigin(4))),
                    Catch::Contains("checkpoint " + (dir / "journal.kevo").string() + ": bad magic"));
  CHECK_THROWS_WITH(read_journal(dir), Catch::Contains("bad magic"));
  fs::remove_all(dir);
}

TEST_CASE("a journal of an unknown version is a clear error", "[evo][checkpoint]") {
  const auto dir = fresh_dir("version");
  small_run(dir);
  auto data = read_file(dir / "journal.kevo");
  data[8] = 99;
  write_bytes(dir / "journal.kevo", data);
  CHECK_THROWS_WITH(read_journal(dir), Catch::Contains("version 99 unsupported"));
  fs::remove_all(dir);
}

TEST_CASE("a corrupt record in the middle of a journal names the record", "[evo][checkpoint]") {
  const auto dir = fresh_dir("corrupt");
  small_run(dir);
  auto data = read_file(dir / "journal.kevo");
  const auto off = record_offset(data, 3);
  data[off + 20] = static_cast<char>(data[off + 20] ^ 0x5a);
  write_bytes(dir / "journal.kevo", data);
  CHECK_THROWS_WITH(Engine::resume(dir, Problem(evotest::Rastrigin(4))), Catch::Contains("checksum mismatch at record 3"));
  fs::remove_all(dir);
}

TEST_CASE("a torn last journal record is dropped and cut off on resume", "[evo][checkpoint]") {
  const auto dir = fresh_dir("torn");
  const auto r0 = small_run(dir);
  const auto good = read_file(dir / "journal.kevo");
  const auto last = record_offset(good, 199);
  // Half of a copy of the last record, as a kill in the middle of write() would leave it.
  write_bytes(dir / "journal.kevo", good + good.substr(last, (good.size() - last) / 2));
  CHECK(read_journal(dir).size() == 200);
  auto cfg = evotest::small_config(Algorithm::ga, 5, 200);
  const auto r = Engine::resume(dir, Problem(evotest::Rastrigin(4)), cfg).run();
  CHECK(r.history_hash == r0.history_hash);
  CHECK(read_file(dir / "journal.kevo") == good);
  fs::remove_all(dir);
}

TEST_CASE("a journal shorter than its snapshot is refused by resume itself, before run", "[evo][checkpoint]") {
  // a front end rewrites its own files from the journal once resume() returns (kevo search
  // --resume rewrote history.jsonl to the 16 records left), so the check cannot wait for run()
  const auto dir = fresh_dir("short");
  small_run(dir);
  const auto good = read_file(dir / "journal.kevo");
  write_bytes(dir / "journal.kevo", good.substr(0, record_offset(good, 16)));
  CHECK(read_journal(dir).size() == 16);
  CHECK_THROWS_WITH(Engine::resume(dir, Problem(evotest::Rastrigin(4))),
                    Catch::Contains("the snapshot covers 200 evaluations but the journal holds only 16"));
  fs::remove_all(dir);
}

TEST_CASE("a corrupt or foreign snapshot is a clear error", "[evo][checkpoint]") {
  const auto dir = fresh_dir("snapshot");
  small_run(dir);
  auto data = read_file(dir / "snapshot.kevo");
  auto flipped = data;
  flipped[flipped.size() - 3] = static_cast<char>(flipped[flipped.size() - 3] ^ 1);
  write_bytes(dir / "snapshot.kevo", flipped);
  CHECK_THROWS_WITH(Engine::resume(dir, Problem(evotest::Rastrigin(4))), Catch::Contains("snapshot.kevo: checksum mismatch"));
  write_bytes(dir / "snapshot.kevo", "not a snapshot");
  CHECK_THROWS_WITH(Engine::resume(dir, Problem(evotest::Rastrigin(4))), Catch::Contains("snapshot.kevo: bad magic"));
  auto reserved = data;  // a header byte outside the checksum: was read as if nothing had happened
  reserved[12] = static_cast<char>(reserved[12] ^ 4);
  write_bytes(dir / "snapshot.kevo", reserved);
  CHECK_THROWS_WITH(Engine::resume(dir, Problem(evotest::Rastrigin(4))),
                    Catch::Contains("snapshot.kevo: corrupt header (reserved bytes 12-15 hold 4, not 0)"));
  write_bytes(dir / "snapshot.kevo", data.substr(0, data.size() / 2));
  CHECK_THROWS_WITH(Engine::resume(dir, Problem(evotest::Rastrigin(4))), Catch::Contains("truncated"));
  fs::remove_all(dir);
}

TEST_CASE("a checkpoint of another search space or configuration is refused", "[evo][checkpoint]") {
  const auto dir = fresh_dir("other");
  small_run(dir);
  CHECK_THROWS_WITH(Engine::resume(dir, Problem(evotest::Rastrigin(5))), Catch::Contains("different search space"));
  auto cfg = evotest::small_config(Algorithm::ga, 6, 200);
  CHECK_THROWS_WITH(Engine::resume(dir, Problem(evotest::Rastrigin(4)), cfg), Catch::Contains("different 'seed'"));
  cfg = evotest::small_config(Algorithm::ga, 5, 200);
  cfg.late_seeds = {Genome(4, 60)};
  cfg.late_seeds_at = 100;
  CHECK_THROWS_WITH(Engine::resume(dir, Problem(evotest::Rastrigin(4)), cfg), Catch::Contains("different 'late_seeds'"));
  cfg = evotest::small_config(Algorithm::ga, 5, 200);
  cfg.checkpoint.dir = dir;
  CHECK_THROWS_WITH(Engine(Problem(evotest::Rastrigin(4)), cfg), Catch::Contains("already holds a run"));
  CHECK_THROWS_WITH(Engine::resume(fresh_dir("empty"), Problem(evotest::Rastrigin(4))), Catch::Contains("no run recorded here"));
  fs::remove_all(dir);
}

TEST_CASE("a checkpoint has one writer: a second engine, resume or process on it is refused until the first ends", "[evo][checkpoint]") {
  const auto dir = fresh_dir("lock");
  small_run(dir);
  const auto journal_before = read_file(dir / "journal.kevo");
  auto cfg = evotest::small_config(Algorithm::ga, 5, 400);
  {
    Engine first = Engine::resume(dir, Problem(evotest::Rastrigin(4)), cfg);
    // the same process, another engine: refused before it reads or writes anything there
    CHECK_THROWS_WITH(Engine::resume(dir, Problem(evotest::Rastrigin(4)), cfg), Catch::Contains("in use by another process"));
    CHECK_THROWS_WITH(Engine::resume(dir, Problem(evotest::Rastrigin(4))), Catch::Contains("in use by another process"));
    auto fresh = evotest::small_config(Algorithm::ga, 5, 200);
    fresh.checkpoint.dir = dir;
    CHECK_THROWS_WITH(Engine(Problem(evotest::Rastrigin(4)), fresh), Catch::Contains("in use by another process"));
    // another process: the same refusal (exit 3 from the child when it was let in)
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int code = 3;
      try {
        (void)Engine::resume(dir, Problem(evotest::Rastrigin(4)), cfg);
      } catch (const Error& e) {
        code = std::string(e.what()).find("in use by another process") != std::string::npos ? 0 : 4;
      } catch (...) {
        code = 5;
      }
      ::_exit(code);
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(read_file(dir / "journal.kevo") == journal_before);  // nothing appended by the refused ones
    const auto r = first.run();
    CHECK(r.evaluations == 400);
  }
  // the first engine is gone: the checkpoint is free again, and whole
  const auto r = Engine::resume(dir, Problem(evotest::Rastrigin(4)), evotest::small_config(Algorithm::ga, 5, 500)).run();
  CHECK(r.evaluations == 500);
  const auto j = read_journal(dir);
  REQUIRE(j.size() == 500);
  for (std::size_t i = 0; i < j.size(); ++i) CHECK(j[i].id == i);
  fs::remove_all(dir);
}

TEST_CASE("resuming a finished run with a larger budget continues it and keeps the journal consistent", "[evo][checkpoint]") {
  const auto dir = fresh_dir("extend");
  small_run(dir);
  auto cfg = evotest::small_config(Algorithm::ga, 5, 400);
  const auto r = Engine::resume(dir, Problem(evotest::Rastrigin(4)), cfg).run();
  CHECK(r.evaluations == 400);
  const auto j = read_journal(dir);
  REQUIRE(j.size() == 400);
  for (std::size_t i = 0; i < j.size(); ++i) CHECK(j[i].id == i);
  fs::remove_all(dir);
}

namespace {
void check_cut_batch_resume(bool interleaved) {
  // On its third batch this problem asks the engine to stop and fails part of the batch, as a
  // process runner does when a signal kills its workers mid-measurement: the second half, or
  // (interleaved, parallel workers) every other candidate.
  struct Cut {
    bool interleaved = false;
    evotest::Rastrigin base{6};
    std::shared_ptr<int> calls = std::make_shared<int>(0);
    std::shared_ptr<std::size_t> cut_size = std::make_shared<std::size_t>(0);
    std::shared_ptr<std::function<void()>> on_cut = std::make_shared<std::function<void()>>();
    const Space& space() const { return base.space(); }
    bool deterministic() const { return true; }
    ThreadSafety thread_safety() const { return ThreadSafety::none; }
    std::vector<Evaluation> evaluate(std::span<const Genome> gs) const {
      auto out = base.evaluate(gs);
      if (++*calls == 3) {
        *cut_size = gs.size();
        (*on_cut)();
        for (std::size_t i = interleaved ? 1 : gs.size() / 2; i < gs.size(); i += interleaved ? 2 : 1) {
          out[i] = Evaluation{};
          out[i].status = Status::error;
          out[i].reason = "cancelled: the search is stopping";
        }
      }
      return out;
    }
  };
  auto cfg = evotest::small_config(Algorithm::ga, 7, 200);
  cfg.threads = 1;
  cfg.checkpoint.sync = false;
  const auto ref_dir = fresh_dir("cut-ref"), dir = fresh_dir("cut");
  cfg.checkpoint.dir = ref_dir;
  const Result ref = Engine(Problem(evotest::Rastrigin(6)), cfg).run();

  cfg.checkpoint.dir = dir;
  Cut cut;
  cut.interleaved = interleaved;
  Engine e(Problem(cut), cfg);
  *cut.on_cut = [&e] { e.request_stop(); };
  const Result stopped = e.run();
  CHECK(stopped.stop_reason == StopReason::requested);
  const auto j = read_journal(dir);
  // What completed before the first cut measurement is kept, and nothing the stop cut short.
  REQUIRE(*cut.cut_size >= 4);
  CHECK(j.size() == stopped.evaluations + (interleaved ? 1 : *cut.cut_size / 2));
  for (const auto& ind : j) CHECK(ind.eval.status != Status::error);

  const Result r = Engine::resume(dir, Problem(evotest::Rastrigin(6))).run();
  CHECK(r.evaluations == ref.evaluations);
  CHECK(r.history_hash == ref.history_hash);  // ids included: the same history as without the stop
  const auto all = read_journal(dir);
  CHECK(all.size() == ref.evaluations);
  for (std::size_t i = 0; i < all.size(); ++i) {
    CHECK(all[i].eval.status != Status::error);
    CHECK(all[i].id == i);
  }
  fs::remove_all(ref_dir);
  fs::remove_all(dir);
}
}  // namespace

TEST_CASE("a stop that cuts a batch short journals what completed; the resume measures the rest", "[evo][checkpoint]") {
  check_cut_batch_resume(false);
}

TEST_CASE("a stop that cuts every other measurement of a batch resumes to the uninterrupted history", "[evo][checkpoint]") {
  check_cut_batch_resume(true);
}
