// LlmMutation inside the real evo::Engine: a deterministic search replays bit-identically from
// its cassette, and an asynchronous search stays under its cost cap.
#include <catch2/catch.hpp>

#include "kevo/core/hash.hpp"
#include "kevo/evo/engine.hpp"
#include "support.hpp"

using namespace kevo;
using namespace kevo::llm;
using namespace kevo::llm::test;

namespace {

// Proposals derived from the prompt's own text, so different prompts get different replies.
HttpResponse from_prompt(const HttpRequest& r, std::size_t i) {
  const auto h = kevo::stable_hash(r.body);
  std::string s = "Ideas based on the bottleneck:\n```schedule\n";
  for (std::uint64_t j = 0; j < 3; ++j) {
    const auto v = kevo::mix64(h + j);
    s += "a=" + std::to_string(v % 15 + 1) + " b=" + std::to_string((v >> 8) % 16 + 1) + " c=" +
         std::to_string((v >> 16) % 16 + 1) + "\n";
  }
  s += "```\n";
  if (i % 6 == 5) return HttpResponse{503, "overloaded", {}, 0};
  return ok(s, 1500, 120);
}

// The toy problem with a measurement that takes time, so replies arrive during the search.
struct SlowToy : ToyProblem {
  std::vector<evo::Evaluation> evaluate(std::span<const Genome> gs) const {
    std::this_thread::sleep_for(std::chrono::milliseconds(3) * gs.size());
    return ToyProblem::evaluate(gs);
  }
};

evo::Config engine_cfg() {
  evo::Config c;
  c.algorithm = evo::Algorithm::ga;
  c.seed = 11;
  c.population = 8;
  c.threads = 1;
  c.budget.max_evaluations = 80;
  c.deterministic = true;
  return c;
}

std::string model_toml(const std::string& base_url) {
  return "[[model]]\nname = \"loop\"\nbase_url = \"" + base_url +
         "\"\nmodel = \"m\"\nprice_prompt_per_mtok = 1\nprice_completion_per_mtok = 4\nmax_tokens = 300\n"
         "retries = 0\ntimeout_s = 5\n";
}

}  // namespace

TEST_CASE("a deterministic engine search with the LLM operator replays bit-identically from its cassette") {
  TempDir dir;
  evo::Result recorded;
  std::uint64_t calls = 0;
  {
    LoopbackServer server(from_prompt);
    kevo::write_file_atomic(dir / "llm.toml", "asynchronous = false\n[cassette]\npath = \"c.jsonl\"\nmode = \"record\"\n" +
                                                  model_toml(server.base_url()));
    LlmOperators ops = make_llm_operators(load_llm_config(dir / "llm.toml"));
    evo::Engine eng(evo::Problem(ToyProblem{}), engine_cfg());
    eng.add_operator(ops.operators[0], 2.0);
    recorded = eng.run();
    calls = ops.usage()[0].calls;
    CHECK(ops.usage()[0].accepted > 0);
    CHECK(ops.usage()[0].failures > 0);  // the 503s
  }
  REQUIRE(calls > 0);
  REQUIRE(recorded.deterministic);
  // Replay: the model section points at a dead port; only the cassette answers.
  kevo::write_file_atomic(dir / "llm.toml", "asynchronous = false\n[cassette]\npath = \"c.jsonl\"\nmode = \"replay\"\n" +
                                                model_toml("http://127.0.0.1:" + std::to_string(dead_port()) + "/v1"));
  LlmOperators ops = make_llm_operators(load_llm_config(dir / "llm.toml"));
  evo::Engine eng(evo::Problem(ToyProblem{}), engine_cfg());
  eng.add_operator(ops.operators[0], 2.0);
  const evo::Result again = eng.run();
  CHECK(again.history_hash == recorded.history_hash);
  CHECK(again.evaluations == recorded.evaluations);
  CHECK(ops.usage()[0].calls == calls);
  CHECK(ops.usage()[0].last_error.find("cassette") == std::string::npos);
  const auto llm_stats = std::find_if(again.operators.begin(), again.operators.end(),
                                      [](const evo::OperatorStats& s) { return s.name == "llm:loop"; });
  REQUIRE(llm_stats != again.operators.end());
  CHECK(llm_stats->evaluated > 0);
}

TEST_CASE("an asynchronous engine search stops calling the model at its cost cap") {
  LoopbackServer server(from_prompt);
  auto cfg = parse_llm_config("cost_cap_usd = 0.01\nasynchronous = true\n" + model_toml(server.base_url()));
  REQUIRE(cfg);
  cfg->models[0].concurrency = 2;
  LlmOperators ops = make_llm_operators(*cfg);
  auto ec = engine_cfg();
  ec.budget.max_evaluations = 300;
  ec.deterministic = false;
  evo::Engine eng(evo::Problem(SlowToy{}), ec);
  eng.add_operator(ops.operators[0], 4.0);
  const evo::Result r = eng.run();
  ops.operators[0].wait_idle(20);
  CHECK(r.evaluations > 0);
  CHECK(ops.spent_usd() <= 0.01);
  CHECK(ops.usage()[0].calls >= 3);
  CHECK(server.request_count() == ops.usage()[0].calls);  // retries = 0: one request per call
}
