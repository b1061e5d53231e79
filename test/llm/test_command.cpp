// CommandClient: prompt on stdin, reply from stdout, errors and timeouts that kill the group.
#include <catch2/catch.hpp>

#include <fstream>

#include "support.hpp"

using namespace kevo::llm;
using namespace kevo::llm::test;

namespace {
ChatRequest req(std::string text = "give me schedules") {
  ChatRequest r;
  r.messages = {{"system", "SYSTEM PART"}, {"user", std::move(text)}};
  r.model = "local-model";
  r.max_tokens = 77;
  return r;
}

// True when the process is gone or a zombie (killed, waiting for its new parent to reap it).
bool dead(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  if (!f) return true;
  std::string stat;
  std::getline(f, stat);
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && (stat[close + 2] == 'Z' || stat[close + 2] == 'X');
}

// Whether the process dies within two seconds.
bool dies(pid_t pid) {
  for (int i = 0; i < 200; ++i) {
    if (dead(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}
}  // namespace

TEST_CASE("the command reads the prompt on stdin and its stdout is the reply") {
  CommandClient c(CommandConfig{"cat", 10, false, 1 << 20});
  auto rep = c.complete(req("USER PART"));
  REQUIRE(rep);
  CHECK(rep->text == "SYSTEM PART\n\nUSER PART\n");
  CHECK(rep->usage_estimated);
  CHECK(rep->completion_tokens > 0);
}

TEST_CASE("json_input sends the chat-completions body on stdin") {
  CommandClient c(CommandConfig{"cat", 10, true, 1 << 20});
  auto rep = c.complete(req());
  REQUIRE(rep);
  const auto j = nlohmann::json::parse(rep->text);
  CHECK(j["model"] == "local-model");
  CHECK(j["max_tokens"] == 77);
  CHECK(j["messages"][1]["content"] == "give me schedules");
}

TEST_CASE("the command sees the model settings in its environment") {
  CommandClient c(CommandConfig{"echo \"$KEVO_LLM_MODEL $KEVO_LLM_MAX_TOKENS\"", 10, false, 1 << 20});
  auto rep = c.complete(req());
  REQUIRE(rep);
  CHECK(rep->text == "local-model 77\n");
}

TEST_CASE("a non-zero exit is a process error quoting stderr") {
  CommandClient c(CommandConfig{"echo model not found >&2; exit 3", 10, false, 1 << 20});
  auto rep = c.complete(req());
  REQUIRE_FALSE(rep);
  CHECK(rep.error().kind == LlmErrorKind::process);
  CHECK(rep.error().message.find("status 3") != std::string::npos);
  CHECK(rep.error().message.find("model not found") != std::string::npos);
}

TEST_CASE("a command that prints nothing is an empty error") {
  CommandClient c(CommandConfig{"true", 10, false, 1 << 20});
  auto rep = c.complete(req());
  REQUIRE_FALSE(rep);
  CHECK(rep.error().kind == LlmErrorKind::empty);
}

TEST_CASE("a timeout kills the whole process group, children included") {
  TempDir dir;
  const auto pidfile = dir / "child.pid";
  // The shell starts a sleeping child in the background and waits for it.
  CommandClient c(CommandConfig{"sleep 30 & echo $! > '" + pidfile.string() + "'; wait", 0.5, false, 1 << 20});
  auto rep = c.complete(req());
  REQUIRE_FALSE(rep);
  CHECK(rep.error().kind == LlmErrorKind::timeout);
  CHECK_THAT(rep.error().message, Catch::EndsWith("timed out after 0.5 s; its process group was killed"));  // was "0.500000 s"
  REQUIRE(std::filesystem::exists(pidfile));
  const pid_t child = std::stoi(kevo::read_file(pidfile));
  CHECK(dies(child));
}

TEST_CASE("a command that ignores a large prompt does not kill the caller with SIGPIPE") {
  CommandClient c(CommandConfig{"echo a=1 b=1 c=1", 10, false, 1 << 20});
  auto rep = c.complete(req(std::string(4 << 20, 'x')));
  REQUIRE(rep);
  CHECK(rep->text == "a=1 b=1 c=1\n");
}

TEST_CASE("output beyond max_output_bytes is a process error") {
  CommandClient c(CommandConfig{"yes a=1", 10, false, 4096});
  auto rep = c.complete(req());
  REQUIRE_FALSE(rep);
  CHECK(rep.error().kind == LlmErrorKind::process);
}

TEST_CASE("a command that exits leaving a child on its stdout answers at its exit, not at the timeout") {
  // The background child inherits stdout, so the pipe never reaches EOF: the client waited out the
  // whole timeout and reported `timeout`, losing the reply the command had printed.
  TempDir dir;
  const auto pidfile = dir / "child.pid";
  CommandClient c(CommandConfig{"echo a=1 b=2; sleep 30 & echo $! > '" + pidfile.string() + "'", 20, false, 1 << 20});
  const auto t0 = std::chrono::steady_clock::now();
  auto rep = c.complete(req());
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(rep);
  CHECK(rep->text == "a=1 b=2\n");
  CHECK(took < 10);
  REQUIRE(std::filesystem::exists(pidfile));
  const pid_t child = std::stoi(kevo::read_file(pidfile));
  CHECK(dies(child));  // what it left behind is killed with its group
  CommandClient f(CommandConfig{"echo no model >&2; sleep 30 & exit 3", 20, false, 1 << 20});
  auto bad = f.complete(req());
  REQUIRE_FALSE(bad);
  CHECK(bad.error().kind == LlmErrorKind::process);
  CHECK(bad.error().message.find("status 3: no model") != std::string::npos);
}

TEST_CASE("a background child that keeps writing does not hide the command's exit") {
  // The exit was looked for only when a poll found no data: a child printing to stderr every
  // 10 ms kept every poll busy, so each call ran to the timeout and lost the reply.
  TempDir dir;
  const auto pidfile = dir / "child.pid";
  CommandClient c(CommandConfig{"(while :; do printf . >&2; sleep 0.01; done) & echo $! > '" + pidfile.string() +
                                    "'; echo a=1 b=2; exit 0",
                                5, false, 1 << 20});
  const auto t0 = std::chrono::steady_clock::now();
  auto rep = c.complete(req());
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(rep);
  CHECK(rep->text == "a=1 b=2\n");
  CHECK(took < 1.5);  // (it exits at once; the reply is taken within one poll)
  REQUIRE(std::filesystem::exists(pidfile));
  CHECK(dies(std::stoi(kevo::read_file(pidfile))));
}

TEST_CASE("a command that logs megabytes to stderr still answers; only stdout has a limit") {
  // stderr shared stdout's overflow flag with a 64 KiB limit: a model loader's log killed the
  // command, lost its reply and said it "wrote more than 4194304 bytes".
  CommandClient c(CommandConfig{"head -c 3000000 /dev/zero | tr '\\0' x >&2; echo a=1 b=2", 20, false, 1 << 20});
  auto rep = c.complete(req());
  REQUIRE(rep);
  CHECK(rep->text == "a=1 b=2\n");
  // A failure quotes the end of stderr, where a tool says what went wrong after its log.
  CommandClient f(CommandConfig{"head -c 200000 /dev/zero | tr '\\0' x >&2; echo >&2; echo 'error: model file not found' >&2; exit 1",
                                20, false, 1 << 20});
  auto bad = f.complete(req());
  REQUIRE_FALSE(bad);
  CHECK(bad.error().kind == LlmErrorKind::process);
  CHECK_THAT(bad.error().message, Catch::Contains("exited with status 1: ...xxx") &&
                                      Catch::EndsWith("error: model file not found"));
  // Too much on stdout is the error, and says which stream.
  CommandClient big(CommandConfig{"yes a=1", 10, false, 4096});
  auto over = big.complete(req());
  REQUIRE_FALSE(over);
  CHECK_THAT(over.error().message, Catch::Contains("printed more than 4096 bytes on stdout"));
}

TEST_CASE("a command's reply is cut at max_tokens and billed at most max_tokens, as an API stops there") {
  // A command printing 1 MB was billed 333,334 completion tokens against max_tokens = 77.
  CommandClient c(CommandConfig{"yes a=1 b=2 | head -c 1000000", 10, false, 4 << 20});
  auto rep = c.complete(req());
  REQUIRE(rep);
  CHECK(rep->text.size() == 77 * 3);
  CHECK(rep->text.rfind("a=1 b=2\na=1 b=2\n", 0) == 0);
  CHECK(rep->completion_tokens == 77);
  CHECK(rep->finish_reason == "length");
  // Not across a UTF-8 sequence; a reply within the limit is whole.
  CommandClient u(CommandConfig{"yes 'é' | tr -d '\\n' | head -c 1000", 10, false, 4 << 20});
  auto cut = u.complete(req());
  REQUIRE(cut);
  CHECK(cut->text.size() == 77 * 3 - 1);  // 115 two-byte characters, not half of the 116th
  CHECK(cut->text.back() == '\xa9');
  CommandClient s(CommandConfig{"echo a=1 b=2", 10, false, 4 << 20});
  auto whole = s.complete(req());
  REQUIRE(whole);
  CHECK(whole->text == "a=1 b=2\n");
  CHECK(whole->completion_tokens == 3);
  CHECK(whole->finish_reason == "stop");
}
