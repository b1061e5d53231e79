// A journal write that fails mid-run (a full disk) ends run() with a clear error in every mode --
// never a hang -- and what was committed before it resumes (issue 19: the steady-state engine
// used to wait forever for a batch whose append had thrown).
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "problems.hpp"

using namespace kevo;
using namespace kevo::evo;
namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kBudget = 3000;
constexpr rlim_t kFileLimit = 48 * 1024;  // bytes a file may grow to: the journal hits it mid-run

Config journal_config(Algorithm alg, const fs::path& dir) {
  auto cfg = evotest::small_config(alg, 77, kBudget);
  cfg.threads = 2;
  cfg.checkpoint.dir = dir;
  cfg.checkpoint.sync = false;
  cfg.checkpoint.snapshot_interval = 4;
  return cfg;
}

Problem journal_problem() { return Problem(evotest::Rastrigin(6)); }

}  // namespace

// Not a test: the child process, run under a file-size limit (hidden tag, run only when named).
TEST_CASE("child: a search whose journal cannot grow", "[.evo-journal-child]") {
  const char* dir = std::getenv("KEVO_EVO_JOURNAL_DIR");
  const char* alg = std::getenv("KEVO_EVO_JOURNAL_ALG");
  REQUIRE(dir);
  REQUIRE(alg);
  Engine e(journal_problem(), journal_config(*algorithm_from_string(alg), dir));
  CHECK_THROWS_WITH(e.run(), Catch::Contains("write failed") && Catch::Contains("File too large"));
}

TEST_CASE("a failing journal write ends run() with its error in every mode, and the journal resumes",
          "[evo][checkpoint][robustness]") {
  for (auto alg : {Algorithm::ga, Algorithm::steady_state}) {
    INFO(to_string(alg));
    const auto dir = fs::temp_directory_path() / fmt::format("kevo-evo-journal-{}-{}", ::getpid(), to_string(alg));
    fs::remove_all(dir);
    const auto t0 = std::chrono::steady_clock::now();
    const pid_t pid = ::fork();
    if (pid == 0) {
      const rlimit lim{kFileLimit, kFileLimit};
      ::setrlimit(RLIMIT_FSIZE, &lim);
      ::signal(SIGXFSZ, SIG_IGN);  // the write returns EFBIG instead of killing the process
      ::alarm(240);                // a hang is a failure, not a stuck suite
      ::setenv("KEVO_EVO_JOURNAL_DIR", dir.c_str(), 1);
      ::setenv("KEVO_EVO_JOURNAL_ALG", std::string(to_string(alg)).c_str(), 1);
      ::execl("/proc/self/exe", "test_evo", "[.evo-journal-child]", "--use-colour", "no", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    REQUIRE(pid > 0);
    int status = 0;
    ::waitpid(pid, &status, 0);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO("child status " << status << " after " << secs << " s");
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);  // the child's own checks: run() threw the write error
    // The journal stopped at the limit, not empty and not beyond it ...
    const auto size = fs::file_size(dir / "journal.kevo");
    CHECK(size > kFileLimit / 2);
    CHECK(size <= kFileLimit);
    // ... and with room again the run resumes from it to its budget.
    const auto r = Engine::resume(dir, journal_problem(), journal_config(alg, dir)).run();
    CHECK(r.evaluations == kBudget);
    CHECK(r.replayed > 0);
    fs::remove_all(dir);
  }
}
