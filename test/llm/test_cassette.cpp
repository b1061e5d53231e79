// Cassettes: record every call, replay without a model, never store the key.
#include <catch2/catch.hpp>

#include "kevo/core/hash.hpp"
#include "support.hpp"

using namespace kevo::llm;
using namespace kevo::llm::test;

namespace {
ChatRequest req(std::string text) {
  ChatRequest r;
  r.messages = {{"user", std::move(text)}};
  r.model = "m";
  return r;
}
}  // namespace

TEST_CASE("a recorded cassette replays the same replies and errors with no model") {
  TempDir dir;
  LoopbackServer server;
  server.script({ok("first"), ok("second"), {400, "nope", {}, 0}, ok("third")});
  OpenAiConfig oc;
  oc.base_url = server.base_url();
  oc.model = "m";
  {
    auto cas = Cassette::open(dir / "c.jsonl", CassetteMode::record);
    CassetteClient rec(cas, LlmClient(OpenAiClient(oc)));
    CHECK(rec.complete(req("x"))->text == "first");
    CHECK(rec.complete(req("x"))->text == "second");  // same request, n-th occurrence
    CHECK_FALSE(rec.complete(req("y")));
    CHECK(rec.complete(req("z"))->text == "third");
    CHECK(cas->size() == 4);
  }
  auto cas = Cassette::open(dir / "c.jsonl", CassetteMode::replay);
  CassetteClient play(cas);
  CHECK(play.complete(req("x"))->text == "first");
  CHECK(play.complete(req("x"))->text == "second");
  auto e = play.complete(req("y"));
  REQUIRE_FALSE(e);
  CHECK(e.error().kind == LlmErrorKind::http);
  CHECK(e.error().http_status == 400);
  auto third = play.complete(req("z"));
  REQUIRE(third);
  CHECK(third->text == "third");
  CHECK(third->prompt_tokens == 100);
  CHECK(server.request_count() == 4);
}

TEST_CASE("replay of a request the cassette lacks is a clear cassette error") {
  TempDir dir;
  { auto cas = Cassette::open(dir / "c.jsonl", CassetteMode::record); }
  CassetteClient play(Cassette::open(dir / "c.jsonl", CassetteMode::replay));
  auto e = play.complete(req("never recorded"));
  REQUIRE_FALSE(e);
  CHECK(e.error().kind == LlmErrorKind::cassette);
  CHECK(e.error().message.find("has no reply") != std::string::npos);
}

TEST_CASE("a corrupt cassette line is reported with its path and line") {
  TempDir dir;
  kevo::write_file_atomic(dir / "bad.jsonl", "\n{\"key\":\"0000000000000001\",\"n\":0,\"reply\":{\"text\":\"x\",\"prompt_tokens\":1,\"completion_tokens\":1}}\n{broken\n");
  try {
    (void)Cassette::open(dir / "bad.jsonl", CassetteMode::replay);
    FAIL("no error");
  } catch (const kevo::Error& e) {
    CHECK(std::string(e.what()).find("bad.jsonl:3:") != std::string::npos);
  }
}

TEST_CASE("a cassette line's wrong or missing field is named rather than the JSON library's message") {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"key":5,"n":0,"reply":{}})", "'key' must be a string"},
      {R"({"key":"0000000000000001","reply":{}})", "'n' is missing"},
      {R"({"key":"0000000000000001","n":-1,"reply":{}})", "'n' must be a whole number >= 0"},
      {R"({"key":"0000000000000001","n":0,"reply":{"text":"x","prompt_tokens":"1","completion_tokens":1}})",
       "'reply.prompt_tokens' must be a whole number >= 0"},
      {R"({"key":"0000000000000001","n":0,"reply":{"text":"x","prompt_tokens":1,"completion_tokens":1,"latency_s":"a"}})",
       "'reply.latency_s' must be a number"},
      {R"({"key":"0000000000000001","n":0,"error":{"kind":"timeout"}})", "'error.message' is missing"},
      {R"({"key":"0000000000000001","n":0})", "neither 'reply' nor 'error'"},
      {R"([1,2])", "not a JSON object"},
      {R"({"key":"0000000000000001","n":0,"request":{"max_tokens":2048},"reply":{"text":"x","prompt_tokens":1,"completion_tokens":1000000000000000}})",
       "'reply.completion_tokens' is 1000000000000000, more than the request's max_tokens 2048"},
  };
  for (const auto& [line, what] : cases) {
    INFO(line);
    kevo::write_file_atomic(dir / "f.jsonl", line + "\n");
    try {
      (void)Cassette::open(dir / "f.jsonl", CassetteMode::replay);
      FAIL("no error");
    } catch (const kevo::Error& e) {
      const std::string m = e.what();
      CHECK(m.find("f.jsonl:1: corrupt cassette line: " + what) != std::string::npos);
      CHECK(m.find("json.exception") == std::string::npos);
    }
  }
}

TEST_CASE("the API key never reaches the cassette even when the server echoes it") {
  const std::string secret = "sk-live-0123456789abcdefSECRET";
  ScopedEnv key("KEVO_TEST_CASSETTE_KEY", secret);
  TempDir dir;
  LoopbackServer server([](const HttpRequest& r, std::size_t i) {
    const std::string auth = r.headers.count("authorization") ? r.headers.at("authorization") : "";
    if (i % 2 == 0) return HttpResponse{500, "bad auth " + auth, {}, 0};
    return ok("echo: " + auth);
  });
  OpenAiConfig oc;
  oc.base_url = server.base_url();
  oc.model = "m";
  oc.api_key_env = "KEVO_TEST_CASSETTE_KEY";
  oc.retries = 0;
  {
    CassetteClient rec(Cassette::open(dir / "c.jsonl", CassetteMode::record), LlmClient(OpenAiClient(oc)));
    for (int i = 0; i < 4; ++i) (void)rec.complete(req("q" + std::to_string(i)));
  }
  REQUIRE(server.requests()[0].headers.at("authorization") == "Bearer " + secret);
  for (const auto& [path, text] : all_files(dir.path())) {
    INFO(path);
    CHECK(text.find(secret) == std::string::npos);
    CHECK(text.find("SECRET") == std::string::npos);
  }
}

TEST_CASE("recording again extends the cassette and answers known requests without calling the model") {
  TempDir dir;
  LoopbackServer server;
  server.script({ok("first"), ok("second")});
  OpenAiConfig oc;
  oc.base_url = server.base_url();
  oc.model = "m";
  {
    CassetteClient rec(Cassette::open(dir / "c.jsonl", CassetteMode::record), LlmClient(OpenAiClient(oc)));
    CHECK(rec.complete(req("x"))->text == "first");
  }
  {
    // A resumed run: the known request is answered from the file, the new one reaches the model.
    CassetteClient rec(Cassette::open(dir / "c.jsonl", CassetteMode::record), LlmClient(OpenAiClient(oc)));
    CHECK(rec.complete(req("x"))->text == "first");
    CHECK(rec.complete(req("x"))->text == "second");
    CHECK(rec.cassette()->size() == 2);
  }
  CHECK(server.request_count() == 2);
  CassetteClient play(Cassette::open(dir / "c.jsonl", CassetteMode::replay));
  CHECK(play.complete(req("x"))->text == "first");
  CHECK(play.complete(req("x"))->text == "second");
}

TEST_CASE("recording drops a torn last line left by a killed run") {
  TempDir dir;
  LoopbackServer server;
  OpenAiConfig oc;
  oc.base_url = server.base_url();
  oc.model = "m";
  {
    CassetteClient rec(Cassette::open(dir / "c.jsonl", CassetteMode::record), LlmClient(OpenAiClient(oc)));
    REQUIRE(rec.complete(req("x")));
  }
  kevo::write_file_atomic(dir / "c.jsonl", kevo::read_file(dir / "c.jsonl") + "{\"key\":\"00");
  {
    CassetteClient rec(Cassette::open(dir / "c.jsonl", CassetteMode::record), LlmClient(OpenAiClient(oc)));
    REQUIRE(rec.complete(req("y")));
  }
  CHECK(Cassette::open(dir / "c.jsonl", CassetteMode::replay)->size() == 2);
}

TEST_CASE("a replayed reply billing more than its request's max_tokens is refused, not added to the spend") {
  // An edited cassette reported 1e10 USD spent against a cap of 1. The load refuses a line whose
  // recorded request allowed fewer tokens (above); a line without it is refused when replayed.
  TempDir dir;
  ChatRequest r = req("x");
  r.max_tokens = 10;
  const auto line = [&](int completion_tokens) {
    return "{\"key\":\"" + kevo::hex64(request_hash(r)) + "\",\"n\":0,\"reply\":{\"text\":\"a=1\",\"prompt_tokens\":5,"
           "\"completion_tokens\":" + std::to_string(completion_tokens) + "}}\n";
  };
  kevo::write_file_atomic(dir / "c.jsonl", line(11));
  CassetteClient play(Cassette::open(dir / "c.jsonl", CassetteMode::replay));
  auto e = play.complete(r);
  REQUIRE_FALSE(e);
  CHECK(e.error().kind == LlmErrorKind::cassette);
  CHECK_THAT(e.error().message, Catch::Contains("bills 11 completion tokens, more than its max_tokens 10"));
  kevo::write_file_atomic(dir / "c.jsonl", line(10));
  CassetteClient fine(Cassette::open(dir / "c.jsonl", CassetteMode::replay));
  auto ok = fine.complete(r);
  REQUIRE(ok);
  CHECK(ok->completion_tokens == 10);
}

TEST_CASE("a reply that is not UTF-8 is recorded exactly and replays the same run") {
  // The cassette wrote invalid bytes as U+FFFD: the replayed reply differed from the live one, a
  // rejected line quoted in the next prompt changed its hash, and the replay found no reply.
  TempDir dir;
  kevo::write_file_atomic(dir / "model.sh",
                          "n=$(wc -c | tr -d ' ')\n"
                          "printf '```\\na=%d b=%d c=3\\nz=1\\377 b=1\\n```\\n' $((n % 15 + 1)) $((n / 15 % 16 + 1))\n");
  const auto write_cfg = [&](const char* mode) {
    kevo::write_file_atomic(dir / "llm.toml", std::string("asynchronous = false\n[cassette]\npath = \"run.jsonl\"\nmode = \"") +
                                                  mode + "\"\n[[model]]\nname = \"cli\"\ncommand = \"sh '" +
                                                  (dir / "model.sh").string() + "'\"\n");
  };
  write_cfg("record");
  std::vector<std::string> recorded;
  {
    LlmOperators ops = make_llm_operators(load_llm_config(dir / "llm.toml"));
    recorded = run_loop(ops.operators[0], kevo::evo::Problem(ToyProblem{}), 6).proposals;
    CHECK(ops.usage()[0].failures == 0);
    CHECK(ops.usage()[0].rejected_parse == 6);  // each z=1\377 line, quoted in the next prompt
  }
  REQUIRE(recorded.size() >= 3);
  CHECK_THAT(kevo::read_file(dir / "run.jsonl"), Catch::Contains("\"text_base64\":"));
  write_cfg("replay");
  LlmOperators ops = make_llm_operators(load_llm_config(dir / "llm.toml"));
  CHECK(run_loop(ops.operators[0], kevo::evo::Problem(ToyProblem{}), 6).proposals == recorded);
  CHECK(ops.usage()[0].failures == 0);
  CHECK(ops.usage()[0].last_error.empty());
}

TEST_CASE("any bytes of a reply or an error come back from the cassette exactly") {
  TempDir dir;
  const std::vector<std::string> texts = {"\xff", "a\xff", "ab\xff", "abc\xff", "caf\xc3\xa9 \xc3", "\xed\xa0\x80", "ok"};
  {
    CassetteClient rec(Cassette::open(dir / "c.jsonl", CassetteMode::record),
                       LlmClient(CommandClient(CommandConfig{"cat", 10, false, 1 << 20})));
    for (const auto& t : texts) REQUIRE(rec.complete(req(t)));
    CassetteClient fail(rec.cassette(), LlmClient(CommandClient(CommandConfig{"printf 'bad \\377' >&2; exit 1", 10, false, 1 << 20})));
    REQUIRE_FALSE(fail.complete(req("fails")));
  }
  CassetteClient play(Cassette::open(dir / "c.jsonl", CassetteMode::replay));
  for (const auto& t : texts) {
    auto r = play.complete(req(t));
    REQUIRE(r);
    CHECK(r->text == t + "\n");
  }
  auto e = play.complete(req("fails"));
  REQUIRE_FALSE(e);
  CHECK_THAT(e.error().message, Catch::EndsWith("exited with status 1: bad \xff"));
  // Older cassettes hold only "text"; a broken "text_base64" is named.
  kevo::write_file_atomic(dir / "b.jsonl", R"({"key":"0000000000000001","n":0,"reply":{"text_base64":"YW=j","prompt_tokens":1,"completion_tokens":1}})"
                                           "\n");
  try {
    (void)Cassette::open(dir / "b.jsonl", CassetteMode::replay);
    FAIL("no error");
  } catch (const kevo::Error& ex) {
    CHECK_THAT(ex.what(), Catch::EndsWith("b.jsonl:1: corrupt cassette line: 'reply.text_base64' is not base64"));
  }
}
