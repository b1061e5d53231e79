// LlmMutation as an evolution operator against the loopback server: prompts, parsing into
// genomes, feedback, asynchronous calls, cost accounting and cap, cassette replay of a run.
#include <catch2/catch.hpp>

#include "support.hpp"

using namespace kevo;
using namespace kevo::llm;
using namespace kevo::llm::test;

namespace {

// Reply i proposes k schedules derived from i, wrapped in prose; every 5th holds an unparsable
// line and one schedule with a=16 (which the toy problem rejects at evaluation).
std::string scripted_text(std::size_t i, int k = 3) {
  std::string s = "The profile says gene a is the bottleneck, so I vary it.\n\n```schedule\n";
  for (int j = 0; j < k; ++j) {
    const int a = static_cast<int>((i * 7 + static_cast<std::size_t>(j) * 3) % 15) + 1;
    const int b = static_cast<int>((i * 5 + static_cast<std::size_t>(j)) % 16) + 1;
    const int c = static_cast<int>((i + static_cast<std::size_t>(j) * 11) % 16) + 1;
    s += std::to_string(j + 1) + ". a=" + std::to_string(a) + " b=" + std::to_string(b) + " c=" + std::to_string(c) + "\n";
  }
  if (i % 5 == 4) s += "a=99 b=1 c=1\na=16 b=3 c=7\n";
  s += "```\nThese should be faster.\n";
  return s;
}

HttpResponse scripted(const HttpRequest&, std::size_t i) { return ok(scripted_text(i), 2000, 300); }

LlmMutationConfig base_cfg(bool async = false) {
  LlmMutationConfig c;
  c.name = "test";
  c.model = "test-model";
  c.temperature = 0.5;
  c.max_tokens = 400;
  c.proposals_per_call = 3;
  c.asynchronous = async;
  c.prices = {1.0, 4.0};
  return c;
}

LlmClient http(const LoopbackServer& s, int retries = 2, double timeout_s = 5) {
  OpenAiConfig c;
  c.base_url = s.base_url();
  c.model = "test-model";
  c.retries = retries;
  c.timeout_s = timeout_s;
  c.backoff_base_s = 0.01;
  c.backoff_max_s = 0.02;
  return LlmClient(OpenAiClient(c));
}

struct Ctx {
  evo::Problem problem{ToyProblem{}};
  std::vector<evo::Individual> parents, elites;
  Rng rng{7};
  Ctx() {
    Genome p{2, 4, 6};  // a=3 b=5 c=7
    parents.push_back({p, problem.evaluate(std::span<const Genome>(&p, 1))[0], 3, "mutate", 2});
    Genome e{9, 2, 6};  // a=10 b=3 c=7
    elites.push_back({e, problem.evaluate(std::span<const Genome>(&e, 1))[0], 1, "init", 0});
    elites.push_back(parents[0]);
  }
  evo::OperatorContext get() { return {problem, parents, elites, 4, 17, rng}; }
};

}  // namespace

TEST_CASE("the prompt shows context, example, parents and elites with figures and profiles") {
  LoopbackServer server;
  Ctx c;
  LlmMutation op(http(server), base_cfg());
  const auto msgs = op.build_messages(c.get());
  REQUIRE(msgs.size() == 2);
  CHECK(msgs[0].role == "system");
  const std::string& u = msgs[1].content;
  CHECK(u.find("Toy problem: choose integers a, b, c") != std::string::npos);  // problem.context()
  CHECK(u.find("```schedule\na=3 b=5 c=7\n```") != std::string::npos);         // example in text form
  CHECK(u.find("Parent 1: latency 7800 ns, 12.8% of peak") != std::string::npos);
  CHECK(u.find("Elite 1: latency 1100 ns, 90.9% of peak") != std::string::npos);
  CHECK(u.find("bottleneck: gene a") != std::string::npos);                    // profile
  CHECK(u.find("propose 3 new schedules") != std::string::npos);
  CHECK(u.find("Generation 4, 17 evaluations") != std::string::npos);
  CHECK(u.find("{{") == std::string::npos);
  // The parent is not repeated among the elites.
  CHECK(u.find("Elite 2") == std::string::npos);
}

TEST_CASE("a synchronous proposal parses a prose-wrapped reply into genomes") {
  LoopbackServer server;
  server.script({ok("Sure! Based on the profile:\n\n1. `a=11 b=3 c=7`\n2. `a=10 b=4 c=7`\n\nGood luck.")});
  Ctx c;
  LlmMutation op(http(server), base_cfg());
  const auto gs = op.propose(c.get());
  REQUIRE(gs.size() == 2);
  CHECK(gs[0] == Genome{10, 2, 6});
  CHECK(gs[1] == Genome{9, 3, 6});
  const LlmUsage u = op.usage();
  CHECK(u.calls == 1);
  CHECK(u.candidates == 2);
  CHECK(u.accepted == 2);
  const auto body = server.requests()[0].json();
  CHECK(body["model"] == "test-model");
  CHECK(body["max_tokens"] == 400);
}

TEST_CASE("copies of the parent and repeated proposals are dropped") {
  LoopbackServer server;
  server.script({ok("```\na=3 b=5 c=7\na=4 b=5 c=7\n```"), ok("```\na=4 b=5 c=7\na=5 b=5 c=7\n```")});
  Ctx c;
  LlmMutation op(http(server), base_cfg());
  CHECK(op.propose(c.get()) == std::vector<Genome>{{3, 4, 6}});
  CHECK(op.propose(c.get()) == std::vector<Genome>{{4, 4, 6}});
  CHECK(op.usage().duplicates == 2);
}

TEST_CASE("schedules the parser rejects are shown with the reason in the next prompt") {
  LoopbackServer server;
  server.script({ok("```\na=99 b=1 c=1\nz=1 b=1 c=1\n```")});
  Ctx c;
  LlmMutation op(http(server), base_cfg());
  CHECK(op.propose(c.get()).empty());
  CHECK(op.usage().rejected_parse == 2);
  const std::string u = op.build_messages(c.get())[1].content;
  CHECK(u.find("`a=99 b=1 c=1` → rejected by the schedule parser: value of 'a' must be in 1..16") != std::string::npos);
  CHECK(u.find("unknown gene 'z'") != std::string::npos);
}

TEST_CASE("a huge rejected proposal is quoted cut in later prompts") {
  // It was quoted whole: one 100 KB garbage reply made every later prompt 100 KB longer.
  LoopbackServer server;
  const std::string garbage = "a=99 b=1 c=1 " + std::string(100000, 'z');
  server.script({ok("```\n" + garbage + "\n```")});
  Ctx c;
  LlmMutation op(http(server), base_cfg());
  const std::size_t before = op.build_messages(c.get())[1].content.size();
  CHECK(op.propose(c.get()).empty());
  CHECK(op.usage().rejected_parse == 1);
  const std::string u = op.build_messages(c.get())[1].content;
  CHECK(u.size() < before + 2500);
  CHECK_THAT(u, Catch::Contains("`a=99 b=1 c=1 zzz") && Catch::Contains("zzz [... cut: 100013 bytes in all]` → rejected by the schedule parser"));
}

TEST_CASE("evaluation outcomes come back as rejected reasons and measured results") {
  LoopbackServer server;
  server.script({ok("```\na=16 b=1 c=1\na=12 b=3 c=7\n```")});
  Ctx c;
  LlmMutation op(http(server), base_cfg());
  const auto gs = op.propose(c.get());
  REQUIRE(gs.size() == 2);
  const auto evals = c.problem.evaluate(gs);
  std::vector<evo::ProposalOutcome> out{{gs[0], evals[0]}, {gs[1], evals[1]}};
  op.feedback(out);
  const std::string u = op.build_messages(c.get())[1].content;
  CHECK(u.find("`a=16 b=1 c=1` → invalid: sbuf_overflow: a=16 needs 300 KiB") != std::string::npos);
  CHECK(u.find("`a=12 b=3 c=7` → latency 1100 ns") != std::string::npos);
}

TEST_CASE("an asynchronous propose never waits for the model") {
  LoopbackServer server(scripted);
  server.hold();  // no reply leaves the server until released
  Ctx c;
  auto cfg = base_cfg(true);
  cfg.concurrency = 3;
  LlmMutation op(http(server), cfg);
  CHECK(op.asynchronous());
  CHECK(op.propose(c.get()).empty());
  CHECK(op.in_flight() == 3);
  REQUIRE(server.wait_requests(3));
  CHECK(op.propose(c.get()).empty());  // still held: returns at once, starts nothing new
  CHECK(server.request_count() == 3);
  server.release();
  REQUIRE(op.wait_idle(20));
  const auto gs = op.propose(c.get());
  CHECK(gs.size() >= 3);
  CHECK(op.usage().calls == 6);  // three harvested, three new ones started
  op.wait_idle(20);
}

TEST_CASE("cost is token usage times the configured prices") {
  LoopbackServer server;
  server.script({ok("a=1 b=1 c=1", 1000, 500), ok("a=2 b=1 c=1", 3000, 250)});
  Ctx c;
  auto cfg = base_cfg();
  cfg.prices = {2.0, 10.0};
  LlmMutation op(http(server), cfg);
  (void)op.propose(c.get());
  (void)op.propose(c.get());
  const LlmUsage u = op.usage();
  CHECK(u.prompt_tokens == 4000);
  CHECK(u.completion_tokens == 750);
  CHECK(op.cost() == Approx(4000 * 2e-6 + 750 * 10e-6));
  CHECK(u.cost_usd == op.cost());
}

TEST_CASE("failed calls are counted and produce no proposals") {
  LoopbackServer server;
  server.script({{200, "{not json", {}, 0}, {200, R"({"choices":[]})", {}, 0}});
  Ctx c;
  LlmMutation op(http(server), base_cfg());
  CHECK(op.propose(c.get()).empty());
  CHECK(op.propose(c.get()).empty());
  const LlmUsage u = op.usage();
  CHECK(u.calls == 2);
  CHECK(u.failures == 2);
  CHECK(u.last_error.rfind("empty:", 0) == 0);
  CHECK(op.cost() == 0.0);
}

TEST_CASE("the cost cap stops new calls and the spend stays under it") {
  LoopbackServer server(scripted);  // 2000 prompt + 300 completion tokens per reply
  auto cfg = base_cfg(true);
  cfg.concurrency = 2;
  cfg.prices = {1.0, 4.0};  // 0.0032 $ per call; worst case ~0.0016 (400 tok) + prompt estimate
  auto budget = std::make_shared<CostBudget>(0.02);
  LlmMutation op(http(server), cfg, budget);
  evo::Problem p{ToyProblem{}};
  int rounds = 0;
  while (!op.exhausted() && rounds++ < 200) {
    Ctx c;
    (void)op.propose(c.get());
    op.wait_idle(20);
  }
  CHECK(op.exhausted());
  CHECK(budget->spent() <= 0.02);
  const LlmUsage u = op.usage();
  CHECK(u.calls == server.request_count());
  CHECK(u.calls >= 3);
  CHECK(u.skipped_budget >= 1);
  Ctx c;
  CHECK(op.propose(c.get()).empty());
  CHECK(server.request_count() == u.calls);  // nothing starts after exhaustion
}

TEST_CASE("a command that prints megabytes cannot push the spend past the cap") {
  // It was billed its whole output (1,000,000 estimated completion tokens against max_tokens = 10):
  // 1 USD spent under a cap of 0.05.
  auto cfg = base_cfg();
  cfg.max_tokens = 10;
  cfg.prices = {0.0, 1000.0};  // 0.01 USD per call at most
  auto budget = std::make_shared<CostBudget>(0.05);
  LlmMutation op(LlmClient(CommandClient(CommandConfig{"cat > /dev/null; yes 'a=2 b=3 c=4' | head -c 3000000", 20, false, 4 << 20})),
                 cfg, budget);
  for (int i = 0; i < 10 && !op.exhausted(); ++i) {
    Ctx c;
    (void)op.propose(c.get());
  }
  const LlmUsage u = op.usage();
  CHECK(u.calls == 5);
  CHECK(u.failures == 0);
  CHECK(u.completion_tokens == 50);
  CHECK(budget->spent() <= 0.05);
  CHECK(u.accepted == 1);  // a=2 b=3 c=4, whole; the cut second copy is dropped
}

TEST_CASE("a problem without a text form gets no proposals and a clear reason") {
  struct NoText {
    Space s;
    NoText() { s.add(Gene::boolean("x")); }
    const Space& space() const { return s; }
    std::vector<evo::Evaluation> evaluate(std::span<const Genome> g) const { return std::vector<evo::Evaluation>(g.size()); }
  };
  LoopbackServer server;
  evo::Problem p{NoText{}};
  Rng rng(1);
  LlmMutation op(http(server), base_cfg());
  evo::OperatorContext ctx{p, {}, {}, 0, 0, rng};
  CHECK(op.propose(ctx).empty());
  CHECK(op.usage().last_error.find("no text form") != std::string::npos);
  CHECK(server.request_count() == 0);
}

TEST_CASE("copies held by evo::Operator share one session") {
  LoopbackServer server;
  LlmMutation mine(http(server), base_cfg());
  evo::Operator op(mine);
  Ctx c;
  CHECK(op.name() == "llm:test");
  (void)op.propose(c.get());
  CHECK(mine.usage().calls == 1);
  CHECK(op.cost() == mine.cost());
  CHECK(op.extract<LlmMutation>() != nullptr);
}

TEST_CASE("a search survives every scripted failure and replays identically from its cassette") {
  TempDir dir;
  const std::string secret = "sk-proj-SECRETSECRET-1234567890";
  ScopedEnv key("KEVO_TEST_RUN_KEY", secret);
  const auto write_cfg = [&](const char* mode) {
    kevo::write_file_atomic(dir / "llm.toml", std::string("cost_cap_usd = 1.0\nproposals_per_call = 3\nasynchronous = false\n") +
                                                  "[cassette]\npath = \"run.jsonl\"\nmode = \"" + mode + "\"\n");
  };
  std::vector<std::string> recorded;
  std::vector<LlmUsage> recorded_usage;
  {
    LoopbackServer server(scripted);
    // Every failure the protocol allows, interleaved with good replies.
    server.script({{429, "slow down", {{"Retry-After", "0"}}, 0},
                   ok(scripted_text(100)),
                   {500, "boom", {}, 0},
                   {500, "boom", {}, 0},
                   {500, "boom", {}, 0},  // retries = 2: this call fails for good
                   {200, "{\"choices\":", {}, 0},
                   {200, R"({"choices":[]})", {}, 0},
                   {200, chat_json("too late"), {}, 3000},  // past timeout_s
                   {200, chat_json("too late"), {}, 3000},
                   {200, chat_json("too late"), {}, 3000},
                   ok("I cannot think of anything.")});
    write_cfg("record");
    kevo::write_file_atomic(dir / "llm.toml",
                            kevo::read_file(dir / "llm.toml") + "[[model]]\nname = \"loop\"\nbase_url = \"" + server.base_url() +
                                "\"\nmodel = \"test-model\"\napi_key_env = \"KEVO_TEST_RUN_KEY\"\nprice_prompt_per_mtok = 1\n"
                                "price_completion_per_mtok = 4\nmax_tokens = 400\ntimeout_s = 0.4\nretries = 2\n"
                                "backoff_base_s = 0.01\nbackoff_max_s = 0.02\n");
    LlmOperators ops = make_llm_operators(load_llm_config(dir / "llm.toml"));
    const LoopResult r = run_loop(ops.operators[0], evo::Problem(ToyProblem{}), 14);
    recorded = r.proposals;
    recorded_usage = ops.usage();
    CHECK(recorded_usage[0].failures >= 4);
    CHECK(recorded_usage[0].accepted > 10);
    CHECK(r.best < 3000);  // it improved on the first schedule (a=1 b=1 c=1: 1000 + 100*(100+4+36))
    CHECK(ops.spent_usd() <= 1.0);
    CHECK(ops.cassette->size() == recorded_usage[0].calls);
    for (const auto& rq : server.requests()) CHECK(rq.headers.at("authorization") == "Bearer " + secret);
    const std::string report = ops.usage_json();
    kevo::write_file_atomic(dir / "results.json", report);
  }
  REQUIRE(recorded.size() > 10);
  // Replay: no server, no key, same proposals in the same order.
  ::unsetenv("KEVO_TEST_RUN_KEY");
  std::string text = kevo::read_file(dir / "llm.toml");
  text.replace(text.find("mode = \"record\""), 15, "mode = \"replay\"");
  kevo::write_file_atomic(dir / "llm.toml", text);
  LlmOperators ops = make_llm_operators(load_llm_config(dir / "llm.toml"));
  const LoopResult again = run_loop(ops.operators[0], evo::Problem(ToyProblem{}), 14);
  CHECK(again.proposals == recorded);
  const LlmUsage u = ops.usage()[0];
  CHECK(u.calls == recorded_usage[0].calls);
  CHECK(u.failures == recorded_usage[0].failures);
  CHECK(u.prompt_tokens == recorded_usage[0].prompt_tokens);
  CHECK(u.cost_usd == recorded_usage[0].cost_usd);
  for (const auto& [path, body] : all_files(dir.path())) {
    INFO(path);
    CHECK(body.find(secret) == std::string::npos);
    CHECK(body.find("SECRETSECRET") == std::string::npos);
  }
}

TEST_CASE("an asynchronous search against the server stays under its cost cap") {
  LoopbackServer server([](const HttpRequest& r, std::size_t i) {
    if (i % 4 == 1) return HttpResponse{503, "overloaded", {}, 0};
    HttpResponse h = scripted(r, i);
    h.delay_ms = static_cast<int>(i % 3) * 20;
    return h;
  });
  auto cfg = base_cfg(true);
  cfg.concurrency = 3;
  auto budget = std::make_shared<CostBudget>(0.05);
  LlmMutation op(http(server, 1), cfg, budget);
  const LoopResult r = run_loop(op, evo::Problem(ToyProblem{}), 400, 3, [&](evo::Operator& o) {
    if (!o.exhausted()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  });
  op.wait_idle(20);
  CHECK(budget->spent() <= 0.05);
  CHECK(op.exhausted());
  CHECK(server.request_count() >= op.usage().calls);  // 503s were retried inside calls
  CHECK_FALSE(r.proposals.empty());
  CHECK(r.best < 3000);
}

namespace {
// The toy problem printed over three lines with a trailing newline, like kevo's schedules.
struct MultiToy : ToyProblem {
  std::string to_text(const Genome& g) const {
    return "a=" + std::to_string(g[0] + 1) + "\nb=" + std::to_string(g[1] + 1) + "\nc=" + std::to_string(g[2] + 1) + "\n";
  }
};
}  // namespace

TEST_CASE("multi-line schedules are read whole, even back to back in one block") {
  LoopbackServer server;
  server.script({ok("```schedule\na=11\nb=3\nc=6\na=10\nb=3\nc=7\n```\n```\na=9\nb=3\nc=7\n```")});
  evo::Problem p{MultiToy{}};
  Genome g0{0, 0, 0};
  std::vector<evo::Individual> parents{{g0, p.evaluate(std::span<const Genome>(&g0, 1))[0], 0, "init", 0}};
  Rng rng(1);
  LlmMutation op(http(server), base_cfg());
  const evo::OperatorContext ctx{p, parents, parents, 0, 1, rng};
  CHECK(op.build_messages(ctx)[1].content.find("```schedule\na=1\nb=1\nc=1\n```") != std::string::npos);
  const auto gs = op.propose(ctx);
  CHECK(gs == std::vector<Genome>{{10, 2, 5}, {9, 2, 6}, {8, 2, 6}});
}
