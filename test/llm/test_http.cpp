// OpenAiClient against a real HTTP server on loopback: protocol, retries, timeouts, errors, keys.
#include <catch2/catch.hpp>

#include "support.hpp"

using namespace kevo::llm;
using namespace kevo::llm::test;

namespace {
constexpr const char* kKey = "sk-test-7f3a9c1e5b2d4f6a8c0e";

OpenAiConfig cfg_for(const LoopbackServer& s) {
  OpenAiConfig c;
  c.base_url = s.base_url();
  c.model = "test-model";
  c.api_key_env = "KEVO_TEST_LLM_KEY";
  c.connect_timeout_s = 2;
  c.timeout_s = 5;
  c.retries = 3;
  c.backoff_base_s = 0.01;
  c.backoff_max_s = 0.05;
  return c;
}

ChatRequest req(std::string text = "propose schedules") {
  ChatRequest r;
  r.messages = {{"system", "you tune kernels"}, {"user", std::move(text)}};
  r.model = "test-model";
  r.temperature = 0.3;
  r.max_tokens = 321;
  return r;
}
}  // namespace

TEST_CASE("the request is an OpenAI chat-completions POST carrying the key as a bearer token") {
  ScopedEnv key("KEVO_TEST_LLM_KEY", kKey);
  LoopbackServer server;
  OpenAiClient client(cfg_for(server));
  auto rep = client.complete(req());
  REQUIRE(rep);
  const auto rs = server.requests();
  REQUIRE(rs.size() == 1);
  CHECK(rs[0].method == "POST");
  CHECK(rs[0].path == "/v1/chat/completions");
  CHECK(rs[0].headers.at("authorization") == std::string("Bearer ") + kKey);
  CHECK(rs[0].headers.at("content-type") == "application/json");
  const auto j = rs[0].json();
  CHECK(j["model"] == "test-model");
  CHECK(j["temperature"].get<double>() == Approx(0.3));
  CHECK(j["max_tokens"] == 321);
  CHECK(j["stream"] == false);
  REQUIRE(j["messages"].size() == 2);
  CHECK(j["messages"][0]["role"] == "system");
  CHECK(j["messages"][1]["content"] == "propose schedules");
}

TEST_CASE("the reply text, token usage and finish reason are read from the reply") {
  LoopbackServer server;
  server.script({{200, chat_json("```\na=1 b=2 c=3\n```", 1234, 567, "length"), {}, 0}});
  auto c = cfg_for(server);
  c.api_key_env.clear();
  auto rep = OpenAiClient(c).complete(req());
  REQUIRE(rep);
  CHECK(rep->text == "```\na=1 b=2 c=3\n```");
  CHECK(rep->prompt_tokens == 1234);
  CHECK(rep->completion_tokens == 567);
  CHECK_FALSE(rep->usage_estimated);
  CHECK(rep->finish_reason == "length");
  CHECK(rep->latency_s > 0);
}

TEST_CASE("a model without api_key_env sends no Authorization header") {
  LoopbackServer server;
  auto c = cfg_for(server);
  c.api_key_env.clear();
  REQUIRE(OpenAiClient(c).complete(req()));
  CHECK(server.requests()[0].headers.count("authorization") == 0);
}

TEST_CASE("a missing key variable is a config error and nothing is sent") {
  ::unsetenv("KEVO_TEST_LLM_KEY_ABSENT");
  LoopbackServer server;
  auto c = cfg_for(server);
  c.api_key_env = "KEVO_TEST_LLM_KEY_ABSENT";
  auto rep = OpenAiClient(c).complete(req());
  REQUIRE_FALSE(rep);
  CHECK(rep.error().kind == LlmErrorKind::config);
  CHECK(rep.error().message.find("KEVO_TEST_LLM_KEY_ABSENT") != std::string::npos);
  CHECK(server.request_count() == 0);
}

TEST_CASE("missing usage is estimated from the text so the cost cap still holds") {
  LoopbackServer server;
  server.script({{200, R"({"choices":[{"message":{"role":"assistant","content":"a=1 b=1 c=1"}}]})", {}, 0}});
  auto c = cfg_for(server);
  c.api_key_env.clear();
  auto rep = OpenAiClient(c).complete(req());
  REQUIRE(rep);
  CHECK(rep->usage_estimated);
  CHECK(rep->prompt_tokens > 0);
  CHECK(rep->completion_tokens > 0);
}

TEST_CASE("malformed JSON is a malformed error and is not retried") {
  LoopbackServer server;
  server.script({{200, "{\"choices\": [ {\"message\": ", {}, 0}});
  auto c = cfg_for(server);
  c.api_key_env.clear();
  auto rep = OpenAiClient(c).complete(req());
  REQUIRE_FALSE(rep);
  CHECK(rep.error().kind == LlmErrorKind::malformed);
  CHECK(rep.error().message.find("not JSON") != std::string::npos);
  CHECK(server.request_count() == 1);
}

TEST_CASE("empty choices is an empty error") {
  LoopbackServer server;
  server.script({{200, R"({"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":0}})", {}, 0}});
  auto c = cfg_for(server);
  c.api_key_env.clear();
  auto rep = OpenAiClient(c).complete(req());
  REQUIRE_FALSE(rep);
  CHECK(rep.error().kind == LlmErrorKind::empty);
}

TEST_CASE("null content is an empty error") {
  LoopbackServer server;
  server.script({{200, R"({"choices":[{"message":{"role":"assistant","content":null}}]})", {}, 0}});
  auto c = cfg_for(server);
  c.api_key_env.clear();
  auto rep = OpenAiClient(c).complete(req());
  REQUIRE_FALSE(rep);
  CHECK(rep.error().kind == LlmErrorKind::empty);
}

TEST_CASE("429 and 5xx are retried until a success") {
  LoopbackServer server;
  server.script({{429, R"({"error":{"message":"rate limited"}})", {}, 0},
                 {500, "oops", {}, 0},
                 {503, "busy", {}, 0},
                 ok("a=2 b=2 c=2")});
  auto c = cfg_for(server);
  c.api_key_env.clear();
  auto rep = OpenAiClient(c).complete(req());
  REQUIRE(rep);
  CHECK(rep->text == "a=2 b=2 c=2");
  CHECK(server.request_count() == 4);
}

TEST_CASE("Retry-After in seconds is honoured before the next attempt") {
  LoopbackServer server;
  server.script({{429, "slow down", {{"Retry-After", "1"}}, 0}, ok("a=3 b=3 c=3")});
  auto c = cfg_for(server);
  c.api_key_env.clear();
  REQUIRE(OpenAiClient(c).complete(req()));
  const auto rs = server.requests();
  REQUIRE(rs.size() == 2);
  CHECK(rs[1].at_s - rs[0].at_s >= 0.95);
}

TEST_CASE("a Retry-After beyond retry_after_max_s fails instead of waiting") {
  LoopbackServer server;
  server.script({{429, "come back tomorrow", {{"Retry-After", "86400"}}, 0}});
  auto c = cfg_for(server);
  c.api_key_env.clear();
  c.retry_after_max_s = 5;
  auto rep = OpenAiClient(c).complete(req());
  REQUIRE_FALSE(rep);
  CHECK(rep.error().http_status == 429);
  CHECK(rep.error().message.find("Retry-After") != std::string::npos);
  CHECK(server.request_count() == 1);
}

TEST_CASE("persistent 500s fail after retries + 1 attempts") {
  LoopbackServer server([](const HttpRequest&, std::size_t) { return HttpResponse{500, "internal", {}, 0}; });
  auto c = cfg_for(server);
  c.api_key_env.clear();
  c.retries = 2;
  auto rep = OpenAiClient(c).complete(req());
  REQUIRE_FALSE(rep);
  CHECK(rep.error().kind == LlmErrorKind::http);
  CHECK(rep.error().http_status == 500);
  CHECK(rep.error().attempts == 3);
  CHECK(server.request_count() == 3);
}

TEST_CASE("a 400 is not retried") {
  LoopbackServer server([](const HttpRequest&, std::size_t) { return HttpResponse{400, "bad request", {}, 0}; });
  auto c = cfg_for(server);
  c.api_key_env.clear();
  auto rep = OpenAiClient(c).complete(req());
  REQUIRE_FALSE(rep);
  CHECK(rep.error().http_status == 400);
  CHECK(server.request_count() == 1);
}

TEST_CASE("a reply slower than timeout_s is a timeout error") {
  LoopbackServer server([](const HttpRequest&, std::size_t) { return HttpResponse{200, chat_json("late"), {}, 10000}; });
  auto c = cfg_for(server);
  c.api_key_env.clear();
  c.timeout_s = 0.3;
  c.retries = 1;
  auto rep = OpenAiClient(c).complete(req());
  REQUIRE_FALSE(rep);
  CHECK(rep.error().kind == LlmErrorKind::timeout);
  CHECK(rep.error().attempts == 2);
  CHECK(server.request_count() == 2);
}

TEST_CASE("a refused connection is a transport error after retries") {
  OpenAiConfig c;
  c.base_url = "http://127.0.0.1:" + std::to_string(dead_port()) + "/v1";
  c.model = "m";
  c.retries = 2;
  c.backoff_base_s = 0.001;
  auto rep = OpenAiClient(c).complete(req());
  REQUIRE_FALSE(rep);
  CHECK(rep.error().kind == LlmErrorKind::transport);
  CHECK(rep.error().attempts == 3);
}

TEST_CASE("backoff is exponential with deterministic jitter and Retry-After overrides it") {
  OpenAiConfig c;
  c.backoff_base_s = 1.0;
  c.backoff_max_s = 100.0;
  OpenAiClient a(c), b(c);
  for (int i = 0; i < 5; ++i) {
    const double w = a.backoff_s(42, i, -1);
    CHECK(w == b.backoff_s(42, i, -1));
    CHECK(w >= 0.5 * std::pow(2.0, i));
    CHECK(w < std::pow(2.0, i));
  }
  CHECK(a.backoff_s(42, 0, -1) != a.backoff_s(43, 0, -1));
  CHECK(a.backoff_s(42, 3, 7.0) == 7.0);
  c.backoff_max_s = 2.0;
  CHECK(OpenAiClient(c).backoff_s(1, 10, -1) < 2.0);
}

TEST_CASE("the key is scrubbed from error messages and reply text") {
  ScopedEnv key("KEVO_TEST_LLM_KEY", kKey);
  // A hostile or buggy server echoes the Authorization header back.
  LoopbackServer server([](const HttpRequest& r, std::size_t i) {
    const std::string auth = r.headers.count("authorization") ? r.headers.at("authorization") : "";
    if (i == 0) return HttpResponse{401, "{\"error\":\"bad key " + auth + "\"}", {}, 0};
    return ok("you sent " + auth + "\na=1 b=1 c=1");
  });
  auto c = cfg_for(server);
  auto e = OpenAiClient(c).complete(req());
  REQUIRE_FALSE(e);
  CHECK(e.error().message.find(kKey) == std::string::npos);
  CHECK(e.error().message.find("***") != std::string::npos);
  auto rep = OpenAiClient(c).complete(req());
  REQUIRE(rep);
  CHECK(rep->text.find(kKey) == std::string::npos);
}

TEST_CASE("a cancelled call stops waiting") {
  LoopbackServer server([](const HttpRequest&, std::size_t) { return HttpResponse{200, chat_json("late"), {}, 10000}; });
  auto c = cfg_for(server);
  c.api_key_env.clear();
  std::atomic<bool> cancel{false};
  auto r = req();
  r.cancel = &cancel;
  std::thread t([&] {
    server.wait_requests(1);
    cancel = true;
  });
  auto rep = OpenAiClient(c).complete(r);
  t.join();
  REQUIRE_FALSE(rep);
  CHECK(rep.error().kind == LlmErrorKind::cancelled);
}

TEST_CASE("request_hash depends on every field that changes the answer") {
  auto a = req(), b = req();
  CHECK(request_hash(a) == request_hash(b));
  b.temperature = 0.4;
  CHECK(request_hash(a) != request_hash(b));
  b = req();
  b.messages[1].content += " ";
  CHECK(request_hash(a) != request_hash(b));
  b = req();
  b.model = "other";
  CHECK(request_hash(a) != request_hash(b));
  std::atomic<bool> cancel{false};
  b = req();
  b.cancel = &cancel;
  CHECK(request_hash(a) == request_hash(b));
}

TEST_CASE("max_tokens_field renames the max_tokens field for reasoning models") {
  LoopbackServer server;
  auto c = cfg_for(server);
  c.api_key_env.clear();
  c.max_tokens_field = "max_completion_tokens";
  REQUIRE(OpenAiClient(c).complete(req()));
  const auto j = server.requests()[0].json();
  CHECK(j["max_completion_tokens"] == 321);
  CHECK_FALSE(j.contains("max_tokens"));
}
