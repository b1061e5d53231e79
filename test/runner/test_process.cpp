#include <catch2/catch.hpp>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <unistd.h>

#include <thread>

#include "kevo/runner/process.hpp"

using namespace kevo;
using runner::ProcessOptions;
using runner::ProcessRunner;

namespace {

// The Python worker, for every test but those of the timeout itself: its timeout is generous
// because python3 alone can take over a second to start on a loaded machine (load 10 on 2 cores),
// and a retry starts it again within the same candidate's limit.
ProcessOptions worker_options() {
  ProcessOptions o;
  o.command = {"python3", KEVO_SOURCE_DIR "/test/runner/workers/failing_worker.py"};
  o.timeout_s = 60;
  o.retries = 1;
  o.repeats = 5;
  return o;
}

// For the tests of the timeout itself: a short limit, and a worker in sh that starts in
// milliseconds, so that the limit is spent on the hang (or the slow answers) under test.
ProcessOptions sh_worker_options() {
  ProcessOptions o = worker_options();
  o.command = {"/bin/sh", KEVO_SOURCE_DIR "/test/runner/workers/sh_worker.sh"};
  o.timeout_s = 1.5;
  return o;
}

runner::Candidate with_mode(const std::string& schedule) {
  runner::Candidate c;
  c.kernel_text = "kernel k\n";
  c.schedule_text = schedule;
  return c;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("kevo_test_" + std::to_string(::getpid()) + "_" + name);
}

// Whether process `pid` is dead: gone, or a zombie waiting for init (waits up to a second).
bool dies(pid_t pid) {
  for (int i = 0; i < 100; ++i) {
    std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
    std::string p, comm, state;
    if (!(st >> p >> comm >> state) || state == "Z") return true;
    ::usleep(10000);
  }
  return false;
}
}  // namespace

TEST_CASE("process runner: a healthy persistent worker answers many candidates", "[process]") {
  ProcessRunner r(worker_options());
  std::vector<runner::Candidate> cs(3, with_mode("mode=ok"));
  const auto ms = r.measure(cs);
  REQUIRE(ms.size() == 3);
  for (const auto& m : ms) {
    CHECK(m.status == Status::ok);
    CHECK(m.samples_ns.size() == 5);
    CHECK(m.latency.median == 1002);
    CHECK(m.profile == "fake worker");
  }
  CHECK(r.workers_started() == 1);
}

TEST_CASE("process runner: a hanging worker times out, is killed and replaced", "[process]") {
  ProcessRunner r(sh_worker_options());
  const auto t0 = std::chrono::steady_clock::now();
  const auto m = r.measure_one(with_mode("mode=hang"));
  CHECK(m.status == Status::timeout);
  CHECK(seconds_since(t0) < 5.0);
  CHECK(r.measure_one(with_mode("mode=ok")).status == Status::ok);
  CHECK(r.workers_started() == 2);
}

TEST_CASE("process runner: a timeout kills the worker's whole process group", "[process]") {
  ProcessRunner r(sh_worker_options());
  const auto pidfile = temp_path("pidfile");
  std::filesystem::remove(pidfile);
  const auto m = r.measure_one(with_mode("mode=hang_group pidfile=" + pidfile.string()));
  CHECK(m.status == Status::timeout);
  std::ifstream f(pidfile);
  pid_t child = 0;
  REQUIRE(f >> child);
  REQUIRE(child > 0);
  CHECK(dies(child));
  std::filesystem::remove(pidfile);
}

TEST_CASE("process runner: a worker that exits is reported crashed with its status and stderr", "[process]") {
  ProcessRunner r(worker_options());
  const auto m = r.measure_one(with_mode("mode=die"));
  CHECK(m.status == Status::crashed);
  CHECK(m.message.find("status 3") != std::string::npos);
  CHECK(m.message.find("out of device memory") != std::string::npos);
  CHECK(r.workers_started() == 2);  // one retry, bounded
}

TEST_CASE("process runner: a worker that exits leaving a child on its stdout is crashed, not a timeout", "[process]") {
  // The child keeps the pipe open, so stdout never reaches EOF: the runner waited out the whole
  // candidate timeout and reported `timeout`, with the worker's exit status lost.
  auto o = sh_worker_options();
  o.timeout_s = 20;
  o.retries = 0;
  ProcessRunner r(o);
  const auto pidfile = temp_path("orphan");
  std::filesystem::remove(pidfile);
  const auto t0 = std::chrono::steady_clock::now();
  const auto m = r.measure_one(with_mode("mode=orphan_exit pidfile=" + pidfile.string()));
  CHECK(m.status == Status::crashed);
  CHECK(m.message.find("worker exited with status 4 before answering") == 0);
  CHECK(seconds_since(t0) < 10.0);
  std::ifstream f(pidfile);
  pid_t child = 0;
  REQUIRE(f >> child);
  CHECK(dies(child));  // the worker's group is killed with it
  std::filesystem::remove(pidfile);
  // An answer written just before such an exit counts, and the next candidate gets a new worker
  // (at once if the exit is already seen, else by the retry after its request found no reader).
  o.retries = 1;
  ProcessRunner a(o);
  const auto first = a.measure_one(with_mode("mode=answer_exit"));
  CHECK(first.status == Status::ok);
  CHECK(first.latency.median == 7);
  CHECK(a.measure_one(with_mode("mode=ok")).status == Status::ok);
  CHECK(a.workers_started() == 2);
}

TEST_CASE("process runner: a worker killed by a signal is reported crashed", "[process]") {
  ProcessRunner r(worker_options());
  const auto m = r.measure_one(with_mode("mode=segv"));
  CHECK(m.status == Status::crashed);
  CHECK(m.message.find("signal 11") != std::string::npos);
}

TEST_CASE("process runner: a worker that closes stdout is reported crashed", "[process]") {
  auto o = worker_options();
  o.retries = 0;
  ProcessRunner r(o);
  const auto m = r.measure_one(with_mode("mode=close_stdout"));
  CHECK(m.status == Status::crashed);
}

TEST_CASE("process runner: a flooding worker is cut off at the line limit", "[process]") {
  auto o = worker_options();
  o.max_line_bytes = 1 << 16;
  o.retries = 0;
  ProcessRunner r(o);
  const auto t0 = std::chrono::steady_clock::now();
  const auto m = r.measure_one(with_mode("mode=flood"));
  CHECK(m.status == Status::error);
  CHECK(m.message.find("exceeds") != std::string::npos);
  CHECK(seconds_since(t0) < o.timeout_s / 3);  // cut off at the limit, not ended by the timeout
  CHECK(r.measure_one(with_mode("mode=ok")).status == Status::ok);
}

TEST_CASE("process runner: a worker flooding stderr is drained and still answers", "[process]") {
  ProcessRunner r(worker_options());
  CHECK(r.measure_one(with_mode("mode=stderr_flood")).status == Status::ok);
}

TEST_CASE("process runner: a worker logging to stderr before it reads a large request still gets it", "[process]") {
  // The request was written while stderr went unread: a worker blocked on its full stderr pipe
  // never read the rest, and a 300 KB request (attention's are 600 KB) timed out.
  auto o = worker_options();
  o.env = {"START_STDERR_BYTES=400000"};
  o.timeout_s = 20;
  o.retries = 0;
  ProcessRunner r(o);
  const auto m = r.measure_one(with_mode("mode=ok " + std::string(300000, 'x')));
  INFO(m.message);
  CHECK(m.status == Status::ok);
}

TEST_CASE("process runner: a crash while a child it left keeps logging is crashed at once, not a timeout", "[process]") {
  auto o = worker_options();
  o.timeout_s = 20;
  o.retries = 0;
  ProcessRunner r(o);
  const auto t0 = std::chrono::steady_clock::now();
  const auto m = r.measure_one(with_mode("mode=die_with_logger"));
  CHECK(m.status == Status::crashed);
  CHECK(m.message.find("worker exited with status 3") == 0);
  CHECK(seconds_since(t0) < 10.0);
}

TEST_CASE("process runner: blank lines before an answer are skipped; a profile is capped like a message", "[process]") {
  ProcessRunner r(worker_options());
  const auto m = r.measure_one(with_mode("mode=blank_then_ok"));
  INFO(m.message);
  CHECK(m.status == Status::ok);
  CHECK(r.workers_started() == 1);
  const auto b = r.measure_one(with_mode("mode=big_profile"));
  CHECK(b.status == Status::ok);
  CHECK(b.profile.size() < 4096);  // 900 KB per answer grew a search's journal by 11 MB in 12 evaluations
}

TEST_CASE("process runner: garbage output is an error and the worker is restarted", "[process]") {
  ProcessRunner r(worker_options());
  const auto m = r.measure_one(with_mode("mode=garbage"));
  CHECK(m.status == Status::error);
  CHECK(m.message.find("garbage") != std::string::npos);
  CHECK(m.message.find("compiling kernel") != std::string::npos);
  CHECK(r.measure_one(with_mode("mode=ok")).status == Status::ok);
}

TEST_CASE("process runner: an answer to the wrong request id is an error", "[process]") {
  ProcessRunner r(worker_options());
  const auto m = r.measure_one(with_mode("mode=wrong_id"));
  CHECK(m.status == Status::error);
  CHECK(m.message.find("answered id") != std::string::npos);
}

TEST_CASE("process runner: an answer written before its request is not taken as the answer", "[process]") {
  // The worker answers, then answers the next id at 1 ns before it is asked: that line was read as
  // the next candidate's measurement (and reached a search's named best).
  ProcessRunner r(worker_options());
  const auto first = r.measure_one(with_mode("mode=unasked"));
  REQUIRE(first.status == Status::ok);
  CHECK(first.latency.median > 100);
  // (the extra line is in the pipe by the time the next request is written)
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto next = r.measure_one(with_mode("mode=ok"));
  REQUIRE(next.status == Status::ok);
  CHECK(next.latency.median > 100);
  CHECK(r.workers_started() == 2);  // the worker out of step was replaced
}

TEST_CASE("process runner: an unknown status is an error", "[process]") {
  ProcessRunner r(worker_options());
  const auto m = r.measure_one(with_mode("mode=bad_status"));
  CHECK(m.status == Status::error);
  CHECK(m.message.find("fantastic") != std::string::npos);
  CHECK(r.workers_started() == 1);  // in step with us: no restart
}

TEST_CASE("process runner: a worker's own error report is final and keeps the worker", "[process]") {
  ProcessRunner r(worker_options());
  const auto m = r.measure_one(with_mode("mode=worker_error"));
  CHECK(m.status == Status::error);
  CHECK(m.message == "neuronx-cc: compilation failed");
  CHECK(r.measure_one(with_mode("mode=ok")).status == Status::ok);
  CHECK(r.workers_started() == 1);
}

TEST_CASE("process runner: a crash is retried on a fresh worker", "[process]") {
  const auto marker = temp_path("marker");
  std::filesystem::remove(marker);
  ProcessRunner r(worker_options());
  const auto m = r.measure_one(with_mode("mode=crash_once marker=" + marker.string()));
  CHECK(m.status == Status::ok);
  CHECK(r.workers_started() == 2);
  std::filesystem::remove(marker);
}

TEST_CASE("process runner: a timeout too long for the clock is bounded, not overflowed", "[process]") {
  // 1e300 s or inf in nanoseconds is past int64: the deadline wrapped into the past, so every
  // candidate timed out at once and a crash was "not retried (no time left within 1e+300 s)".
  for (const double t : {1e300, std::numeric_limits<double>::infinity()}) {
    CAPTURE(t);
    const auto marker = temp_path("marker_long");
    std::filesystem::remove(marker);
    auto o = worker_options();
    o.timeout_s = t;
    ProcessRunner r(o);
    CHECK(r.measure_one(with_mode("mode=ok")).status == Status::ok);
    const auto m = r.measure_one(with_mode("mode=crash_once marker=" + marker.string()));
    CHECK(m.status == Status::ok);
    CHECK(m.message.find("no time left") == std::string::npos);
    std::filesystem::remove(marker);
  }
}

TEST_CASE("process runner: a missing worker program is an error, not an exception", "[process]") {
  ProcessOptions o;
  o.command = {"/nonexistent/kevo-worker"};
  ProcessRunner r(o);
  const auto m = r.measure_one(with_mode("mode=ok"));
  CHECK(m.status == Status::error);
  CHECK(m.message.find("cannot start worker") != std::string::npos);
}

TEST_CASE("process runner: one worker per candidate when not persistent", "[process]") {
  auto o = worker_options();
  o.persistent = false;
  ProcessRunner r(o);
  std::vector<runner::Candidate> cs(3, with_mode("mode=ok"));
  for (const auto& m : r.measure(cs)) CHECK(m.status == Status::ok);
  CHECK(r.workers_started() == 3);
}

TEST_CASE("process protocol: the request carries version, id, texts, target and repeats", "[process]") {
  auto c = with_mode("mode=ok");
  const auto j = nlohmann::json::parse(runner::protocol_request(c, 42, 7, "def kernel(): pass"));
  CHECK(j["v"] == 1);
  CHECK(j["id"] == 42);
  CHECK(j["kernel"] == "kernel k\n");
  CHECK(j["schedule"] == "mode=ok");
  CHECK(j["nki"] == "def kernel(): pass");
  CHECK(j["target"] == "");
  CHECK(j["repeats"] == 7);
}

TEST_CASE("process protocol: extra request fields are added, never replacing the protocol's", "[process]") {
  auto c = with_mode("mode=ok");
  const auto j = nlohmann::json::parse(
      runner::protocol_request(c, 42, 7, "", R"({"triton":"import triton","problem":{"M":64},"id":9})"));
  CHECK(j["triton"] == "import triton");
  CHECK(j["problem"]["M"] == 64);
  CHECK(j["id"] == 42);
  auto o = worker_options();
  o.request_fields = [](const runner::Candidate&) -> std::string { throw std::runtime_error("no source"); };
  ProcessRunner r(o);
  const auto m = r.measure_one(c);
  CHECK(m.status == Status::error);
  CHECK(m.message.find("extra fields: no source") != std::string::npos);
}

TEST_CASE("process protocol: responses are validated field by field", "[process]") {
  using runner::protocol_parse_response;
  CHECK(protocol_parse_response(R"({"v":1,"id":3,"status":"ok","latency_ns":[5,6,7]})", 3).latency.median == 6);
  CHECK(protocol_parse_response(R"({"v":2,"id":3,"status":"ok","latency_ns":[5]})", 3).message.find("version") != std::string::npos);
  CHECK(protocol_parse_response(R"({"v":1,"id":3,"status":"ok"})", 3).message.find("without latency") != std::string::npos);
  CHECK(protocol_parse_response(R"({"v":1,"id":3,"status":"ok","latency_ns":[-1]})", 3).status == Status::error);
  // samples no kernel time can be: a unit error below 1 ns, above a day
  CHECK(protocol_parse_response(R"({"v":1,"id":3,"status":"ok","latency_ns":[1e-300]})", 3).status == Status::error);
  CHECK(protocol_parse_response(R"({"v":1,"id":3,"status":"ok","latency_ns":[5000,0.5]})", 3).message.find("outside [1 ns, 1 day]") !=
        std::string::npos);
  CHECK(protocol_parse_response(R"({"v":1,"id":3,"status":"ok","latency_ns":[1e300]})", 3).status == Status::error);
  CHECK(protocol_parse_response(R"({"v":1,"id":3,"status":"ok","latency_ns":[1,86400e9]})", 3).status == Status::ok);
  CHECK(protocol_parse_response(R"({"v":1,"id":3,"status":"timeout","message":"device hung"})", 3).status == Status::timeout);
  CHECK(protocol_parse_response("[1,2]", 3).status == Status::error);
  CHECK(protocol_parse_response("", 3).status == Status::error);
  // a profile nested 50,000 levels deep overflowed a search thread's stack when dumped: refused
  // by its depth before parsing; brackets inside strings do not count
  const std::string deep = std::string(50000, '[') + std::string(50000, ']');
  const auto d = protocol_parse_response(R"({"v":1,"id":3,"status":"ok","latency_ns":[5000],"profile":)" + deep + "}", 3);
  CHECK(d.status == Status::error);
  CHECK(d.message.find("nests 50001 levels") != std::string::npos);
  const auto nested = protocol_parse_response(R"({"v":1,"id":3,"status":"ok","latency_ns":[5000],"profile":{"a":[[{"b":[1]}]]}})", 3);
  CHECK(nested.status == Status::ok);
  CHECK(nested.profile == R"({"a":[[{"b":[1]}]]})");
  const auto text = protocol_parse_response(R"({"v":1,"id":3,"status":"ok","latency_ns":[5000],"profile":")" + std::string(200, '[') + R"("})", 3);
  CHECK(text.status == Status::ok);
  // a worker's message is escaped and cut at 2 KB: an ESC reached the terminal through the
  // summary, and 500 KB were kept per evaluation in history.jsonl
  const auto loud = protocol_parse_response(R"({"v":1,"id":3,"status":"error","message":"\u001b[31m)" + std::string(500000, 'm') + R"("})", 3);
  CHECK(loud.status == Status::error);
  CHECK(loud.message.find('\x1b') == std::string::npos);
  CHECK(loud.message.rfind("\\x1b[31mmmm", 0) == 0);
  CHECK(loud.message.size() < 2100);
  CHECK(loud.message.find("(500005 bytes)") != std::string::npos);
}

TEST_CASE("process runner: a candidate costs at most one timeout, however its retries go", "[process]") {
  auto o = sh_worker_options();
  o.retries = 5;  // each attempt prints garbage after 1 s: six attempts would take 6 s
  ProcessRunner r(o);
  const auto t0 = std::chrono::steady_clock::now();
  const auto m = r.measure_one(with_mode("mode=slow_garbage delay=1.0"));
  const double took = seconds_since(t0);
  CHECK(m.status != Status::ok);
  // one 1.5 s timeout and the kill; the margin is for a loaded machine (ctest -j, sanitizers), far
  // below the 6 s of attempts that each had a timeout of their own
  CHECK(took < o.timeout_s + 2.0);
  CHECK(r.workers_started() <= 3);
}

TEST_CASE("process runner: cancel ends a hanging attempt at once and refuses later candidates", "[process]") {
  auto o = worker_options();
  o.timeout_s = 60;
  std::atomic<bool> cancel{false};
  o.cancel = &cancel;
  ProcessRunner r(o);
  REQUIRE(r.measure_one(with_mode("mode=ok")).status == Status::ok);
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    cancel.store(true);
  });
  const auto t0 = std::chrono::steady_clock::now();
  const auto m = r.measure_one(with_mode("mode=hang"));
  const double took = seconds_since(t0);
  t.join();
  CHECK(m.status == Status::error);
  CHECK_THAT(m.message, Catch::StartsWith("cancelled"));
  CHECK(took < 10);  // the cancel 0.3 s in, not the 60 s timeout (margin for a loaded machine)
  const auto t1 = std::chrono::steady_clock::now();
  const auto later = r.measure_one(with_mode("mode=ok"));
  CHECK(later.status == Status::error);
  CHECK_THAT(later.message, Catch::StartsWith("cancelled"));
  CHECK(seconds_since(t1) < 5);
  CHECK(r.workers_started() == 1);  // the cancelled one was not replaced
}

TEST_CASE("process runner: the adaptive timeout follows the p90 of ok answers, with a floor and a bound", "[process]") {
  auto o = sh_worker_options();
  o.timeout_s = 30;
  o.adaptive_timeout = true;
  o.adaptive_min_samples = 3;
  o.adaptive_floor_s = 1.5;
  o.adaptive_multiple = 2;
  ProcessRunner r(o);
  CHECK(r.current_timeout() == 30);  // the bound until enough answers were seen
  for (int i = 0; i < 3; ++i) REQUIRE(r.measure_one(with_mode("mode=ok")).status == Status::ok);
  // Fast answers (the first includes the worker's start): the floor, or twice the slowest.
  const double t = r.current_timeout();
  CHECK(t >= 1.5);
  CHECK(t < 10);
  const auto t0 = std::chrono::steady_clock::now();
  const auto m = r.measure_one(with_mode("mode=hang"));
  CHECK(m.status == Status::timeout);
  CHECK(seconds_since(t0) < t + 3.0);  // the adaptive limit, not the 30 s bound
  CHECK_THAT(m.message, Catch::Contains("within the candidate's"));
}

TEST_CASE("process runner: an adaptive timeout leaves a fresh worker its start-up time", "[process]") {
  // The adaptive limit is the steady state's (3 x the p90 of ok answers, floor 0.3 s here): a
  // worker that takes 1.5 s to start, restarted after ten quick answers, timed out on every later
  // candidate (and was restarted again for each).
  auto o = worker_options();
  o.env = {"START_SLEEP=1.5"};
  o.timeout_s = 30;
  o.retries = 0;
  o.adaptive_timeout = true;
  o.adaptive_min_samples = 3;
  o.adaptive_multiple = 3;
  o.adaptive_floor_s = 0.3;
  ProcessRunner r(o);
  for (int i = 0; i < 11; ++i) REQUIRE(r.measure_one(with_mode("mode=ok")).status == Status::ok);
  CHECK(r.current_timeout() < 1.0);
  r.stop();  // (a crash, a kill on an unasked line: the next candidate starts a worker)
  const auto m = r.measure_one(with_mode("mode=ok"));
  INFO(m.message);
  CHECK(m.status == Status::ok);
}
