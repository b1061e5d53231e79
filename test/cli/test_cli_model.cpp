// kevo model FILE.onnx through the real binary, on the fixtures of test/model/data (written by its
// make_fixtures.py). Skipped when this kevo was built without ONNX support.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct ModelRun {
  int rc = -1;
  std::string out, err;
};

fs::path model_scratch() {
  static const fs::path d = [] {
    auto p = fs::temp_directory_path() / fmt::format("kevo_cli_model_test_{}", ::getpid());
    fs::remove_all(p);
    fs::create_directories(p);
    return p;
  }();
  return d;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ModelRun kevo_model(const std::string& args) {
  static int n = 0;
  const auto out = model_scratch() / fmt::format("out{}", n), err = model_scratch() / fmt::format("err{}", n);
  ++n;
  const std::string cmd = fmt::format("cd '{}' && KEVO_DB='{}' '{}' model {} >'{}' 2>'{}' </dev/null", model_scratch().string(),
                                      (model_scratch() / "default.db").string(), KEVO_BIN, args, out.string(), err.string());
  const int st = std::system(cmd.c_str());
  ModelRun r;
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.out = read_all(out);
  r.err = read_all(err);
  return r;
}

std::string fixture(const std::string& name) { return fmt::format("'{}/test/model/data/{}'", KEVO_SOURCE_DIR, name); }

bool have_onnx() {
  static const bool yes = kevo_model(fixture("junk.onnx")).err.find("without ONNX support") == std::string::npos;
  return yes;
}

}  // namespace

TEST_CASE("kevo model: bad files and graphs are one-line located errors, exit 2", "[cli][model]") {
  if (!have_onnx()) {
    WARN("kevo built without ONNX support: skipped");
    return;
  }
  for (const auto& [args, needle] : std::vector<std::pair<std::string, std::string>>{
           {fixture("junk.onnx"), "junk.onnx: not an ONNX model"},
           {fixture("fancy.onnx"), "fancy.onnx: no kernel kevo can express in 1 node(s); node 'contract' (Einsum)"},
           {fixture("mlp.onnx"), "mlp.onnx: input 'x' dim 0 is dynamic ('batch'): bind it with --dim batch=N"},
           {fixture("mlp.onnx") + " --dim batch=x", "--dim 'batch=x': expected NAME=N"},
           // the last value won silently
           {fixture("mlp.onnx") + " --dim batch=4,batch=5", "--dim: 'batch' is given twice"},
           {fixture("mlp.onnx") + " --dim batch=4 --dim batch=5", "--dim: 'batch' is given twice"},
           // a mistyped name was ignored
           {fixture("mlp.onnx") + " --dim batch=4,bacth=5", "--dim bacth: the model has no dynamic dimension named 'bacth' (it has batch)"},
           {fixture("mlp.onnx") + " --dim batch=4 --share 0", "--share 0"},
           {fixture("mlp.onnx") + " --dim batch=4 --dtype fp64", "--dtype 'fp64'"},
           {"/nonexistent/m.onnx", "cannot read /nonexistent/m.onnx: No such file or directory"}}) {
    const auto r = kevo_model(args);
    INFO(args << "\nstderr: " << r.err);
    CHECK(r.rc == 2);
    CHECK(r.err.rfind("kevo: error: ", 0) == 0);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK_THAT(r.err, Catch::Contains(needle));
  }
}

TEST_CASE("kevo model: a kernel that could not be timed is named beside the end-to-end figure", "[cli][model]") {
  if (!have_onnx()) {
    WARN("kevo built without ONNX support: skipped");
    return;
  }
  // (a 550-GFLOP MatMul not timed, a Relu of 1.12 us: the line read "1.12 us -> 1.12 us" alone)
  const auto dir = model_scratch() / "untimed";
  const auto r = kevo_model(fmt::format("{} --no-tune --no-db --out '{}'", fixture("untimed.onnx"), dir.string()));
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("end-to-end (Amdahl, the kernels kevo timed; 1 of 2 not timed and in neither figure: #1 matmul)"));
  const auto j = json::parse(read_all(dir / "result.json"));
  REQUIRE(j["end_to_end"]["untimed"].size() == 1);
  CHECK(j["end_to_end"]["untimed"][0]["kind"] == "matmul");
  CHECK_THAT(j["end_to_end"]["note"].get<std::string>(), Catch::Contains("not in either figure either: #1 matmul"));
}

TEST_CASE("kevo model: the table's shares add up, hot kernels tuned and verified, records reused", "[cli][model]") {
  if (!have_onnx()) {
    WARN("kevo built without ONNX support: skipped");
    return;
  }
  const auto dir = model_scratch() / "run1";
  const auto db = model_scratch() / "records.db";
  const auto r = kevo_model(fmt::format("{} --dim batch=64 --budget 120 --share 0.6 -j 1 --db '{}' --out '{}'", fixture("mlp.onnx"),
                                        db.string(), dir.string()));
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("end-to-end (Amdahl"));
  CHECK_THAT(r.out, Catch::Contains("Transpose"));  // listed, not dropped
  const auto res = json::parse(read_all(dir / "result.json"));
  REQUIRE(res["kernels"].size() == 3);
  double share = 0, total = 0, after = 0;
  std::size_t tuned = 0;
  for (const auto& k : res["kernels"]) {
    share += k["share"].get<double>();
    total += k["total_ns"].get<double>();
    after += k["after_total_ns"].get<double>();
    CHECK(fs::exists(dir / k["kir"].get<std::string>()));
    if (k.contains("tuned")) {
      ++tuned;
      CHECK(k["tuned"]["verified"].get<bool>());
      CHECK(k["tuned"]["source"] == "search");
      CHECK(k["tuned"]["after_ns"].get<double>() <= k["tuned"]["before_ns"].get<double>());
    }
  }
  CHECK(share == Approx(1.0).epsilon(1e-12));
  CHECK(total == Approx(res["end_to_end"]["before_ns"].get<double>()).epsilon(1e-12));
  CHECK(after == Approx(res["end_to_end"]["after_ns"].get<double>()).epsilon(1e-12));
  CHECK(res["end_to_end"]["speedup"].get<double>() ==
        Approx(res["end_to_end"]["before_ns"].get<double>() / res["end_to_end"]["after_ns"].get<double>()));
  CHECK(tuned >= 2);  // 0.6 of the time needs at least two of three kernels of similar size
  CHECK(res["not_expressed"][0]["op"] == "Transpose");
  const auto html = read_all(dir / "report.html");
  CHECK_THAT(html, Catch::Contains("<svg"));
  CHECK_THAT(html, Catch::Contains("class=\"before\""));
  CHECK_THAT(html, Catch::Contains("class=\"after\""));
  CHECK_THAT(html, Catch::Contains("Transpose"));

  // The same model again with the same records: the tuned kernels come from the records, no search.
  const auto dir2 = model_scratch() / "run2";
  const auto r2 = kevo_model(fmt::format("{} --dim batch=64 --budget 120 --share 0.6 -j 1 --db '{}' --out '{}'", fixture("mlp.onnx"),
                                         db.string(), dir2.string()));
  REQUIRE(r2.rc == 0);
  const auto res2 = json::parse(read_all(dir2 / "result.json"));
  std::size_t from_records = 0;
  for (const auto& k : res2["kernels"])
    if (k.contains("tuned")) {
      from_records += k["tuned"]["source"] == "records";
      CHECK(k["tuned"]["evaluations"] == 0);
    }
  CHECK(from_records == tuned);
  CHECK(res2["end_to_end"]["after_ns"].get<double>() == Approx(res["end_to_end"]["after_ns"].get<double>()));

  // --no-tune: the table only; --json prints result.json.
  const auto r3 = kevo_model(fmt::format("{} --dim batch=64 --no-tune --json --out '{}'", fixture("mlp.onnx"), (model_scratch() / "run3").string()));
  REQUIRE(r3.rc == 0);
  const auto j3 = json::parse(r3.out);
  CHECK(j3["end_to_end"]["speedup"].get<double>() == 1.0);
}

TEST_CASE("kevo model: Ctrl-C stops the tuning at once and keeps what it found (exit 130)", "[cli][model][hostile]") {
  if (!have_onnx()) {
    WARN("kevo built without ONNX support: skipped");
    return;
  }
  // Before, the flag a Ctrl-C set was read only after every hot kernel's search had run to its
  // budget (here about 850,000 evaluations for the first kernel alone), and nothing was written.
  const auto dir = model_scratch() / "stopped";
  const auto db = model_scratch() / "stopped.db";
  const auto log = model_scratch() / "stopped.out";
  const std::string cmd = fmt::format("cd '{}' && exec '{}' model {} --dim batch=512 --budget 2000000 -j 1 --db '{}' --out '{}' >'{}' 2>&1 </dev/null",
                                      model_scratch().string(), KEVO_BIN, fixture("mlp.onnx"), db.string(), dir.string(), log.string());
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  REQUIRE(pid > 0);
  for (int i = 0; i < 600 && read_all(log).find("searching matmul_bias_act") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // a few thousand evaluations in
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(pid, SIGINT);
  int st = 0;
  ::waitpid(pid, &st, 0);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(read_all(log));
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 130);
  CHECK(took < 30);  // the batch in flight and the winner's verification, not the budget
  CHECK_THAT(read_all(log), Catch::Contains("interrupted: stopped by a signal after 1 of 3 searched kernels"));
  const auto res = json::parse(read_all(dir / "result.json"));
  CHECK(res["interrupted"].get<bool>());
  std::size_t tuned = 0;
  for (const auto& k : res["kernels"])
    if (k.contains("tuned")) {
      ++tuned;
      CHECK(k["tuned"]["verified"].get<bool>());
      CHECK(k["tuned"]["evaluations"].get<std::uint64_t>() > 0);
      CHECK(k["tuned"]["evaluations"].get<std::uint64_t>() < k["tuned"]["budget"].get<std::uint64_t>());
      CHECK(k["tuned"]["after_ns"].get<double>() <= k["tuned"]["before_ns"].get<double>());
    }
  CHECK(tuned == 1);
  CHECK(res["end_to_end"]["after_ns"].get<double>() <= res["end_to_end"]["before_ns"].get<double>());
  CHECK_THAT(read_all(dir / "report.html"), Catch::Contains("Interrupted: stopped by a signal"));

  // The stopped search's winner went to the records: the next run takes that kernel from them.
  const auto r2 = kevo_model(fmt::format("{} --dim batch=512 --budget 60 -j 1 --db '{}' --out '{}'", fixture("mlp.onnx"), db.string(),
                                         (model_scratch() / "after_stop").string()));
  INFO(r2.out << r2.err);
  REQUIRE(r2.rc == 0);
  const auto res2 = json::parse(read_all(model_scratch() / "after_stop" / "result.json"));
  CHECK_FALSE(res2["interrupted"].get<bool>());
  std::size_t from_records = 0;
  for (const auto& k : res2["kernels"])
    if (k.contains("tuned")) from_records += k["tuned"]["source"] == "records";
  CHECK(from_records == 1);
}
