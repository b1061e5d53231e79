// The TOML configuration: what it accepts, and located errors for what it does not.
#include <catch2/catch.hpp>

#include "support.hpp"

using namespace kevo::llm;
using namespace kevo::llm::test;

namespace {
kevo::Diagnostic bad(const std::string& text, const std::filesystem::path& base = ".") {
  auto r = parse_llm_config(text, "llm.toml", base);
  REQUIRE_FALSE(r);
  return r.error();
}
// Concatenation through append: GCC 12 at -O2 reports a false -Warray-bounds on
// std::string(temporary) + const char*.
std::string cat(std::string a, const char* b) {
  a.append(b);
  return a;
}

const char* kMinimal = "[[model]]\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\n";
}  // namespace

TEST_CASE("the shipped examples/llm.toml loads") {
  const LlmConfig c = load_llm_config(std::filesystem::path(KEVO_SOURCE_DIR) / "examples/llm.toml");
  REQUIRE(c.models.size() == 2);
  CHECK(c.cost_cap_usd == 2.0);
  CHECK(c.proposals_per_call == 4);
  CHECK(c.models[0].name == "gpt");
  REQUIRE(c.models[0].http);
  CHECK(c.models[0].http->api_key_env == "OPENAI_API_KEY");
  CHECK(c.models[0].prices.completion_per_mtok == 0.60);
  CHECK(c.models[0].concurrency == 2);
  CHECK(c.models[1].http->api_key_env.empty());
}

TEST_CASE("defaults apply to keys left out") {
  auto c = parse_llm_config(kMinimal);
  REQUIRE(c);
  CHECK(std::isinf(c->cost_cap_usd));
  CHECK(c->asynchronous);
  CHECK(c->models[0].name == "m");
  CHECK(c->models[0].http->retries == 3);
  CHECK_FALSE(c->cassette);
}

TEST_CASE("a model name with control bytes is refused (it is printed in every operator table)") {
  const auto d = bad("[[model]]\nname = \"a\\u001b[31mb\"\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\n");
  CHECK(d.loc.line == 2);
  CHECK(d.message.find("'name' holds control bytes: a\\x1b[31mb") != std::string::npos);
}

TEST_CASE("an unknown key is reported at its line and column") {
  const auto d = bad(std::string(kMinimal) + "temprature = 0.5\n");
  CHECK(d.loc.file == "llm.toml");
  CHECK(d.loc.line == 4);
  CHECK(d.loc.column == 1);
  CHECK(d.message.find("unknown key 'temprature'") != std::string::npos);
  CHECK(d.headline().rfind("llm.toml:4:1:", 0) == 0);
}

TEST_CASE("a value of the wrong type or out of range is located") {
  auto d = bad(std::string(kMinimal) + "max_tokens = \"many\"\n");
  CHECK(d.loc.line == 4);
  CHECK(d.message.find("integer") != std::string::npos);
  d = bad(cat("cost_cap_usd = -1\n", kMinimal));
  CHECK(d.loc.line == 1);
  CHECK(d.message.find("cost_cap_usd") != std::string::npos);
  d = bad(std::string(kMinimal) + "temperature = 9\n");
  CHECK(d.message.find("temperature") != std::string::npos);
}

TEST_CASE("TOML syntax errors are located") {
  const auto d = bad("cost_cap_usd = 1\n[[model]\n");
  CHECK(d.loc.line == 2);
}

TEST_CASE("a pasted key in api_key_env is refused without echoing it") {
  const auto d = bad(std::string(kMinimal) + "api_key_env = \"sk-abc123def456\"\n");
  CHECK(d.message.find("NAME of an environment variable") != std::string::npos);
  CHECK(d.loc.line == 4);
  CHECK(d.str().find("sk-abc123def456") == std::string::npos);
}

TEST_CASE("a model needs exactly one of base_url and command") {
  CHECK(bad("[[model]]\nmodel = \"m\"\n").message.find("base_url") != std::string::npos);
  CHECK(bad("[[model]]\nbase_url = \"http://x/v1\"\nmodel = \"m\"\ncommand = \"cat\"\n").message.find("not both") !=
        std::string::npos);
  CHECK(bad("cost_cap_usd = 1\n").message.find("[[model]]") != std::string::npos);
}

TEST_CASE("two models with one name are refused") {
  const auto d = bad(cat(kMinimal, kMinimal));
  CHECK(d.loc.line == 4);
  CHECK(d.message.find("distinct") != std::string::npos);
}

TEST_CASE("a command model reads its command and timeout") {
  auto c = parse_llm_config("[[model]]\nname = \"cli\"\ncommand = \"cat\"\ntimeout_s = 5\njson_input = true\n");
  REQUIRE(c);
  REQUIRE(c->models[0].command);
  CHECK(c->models[0].command->command == "cat");
  CHECK(c->models[0].command->timeout_s == 5);
  CHECK(c->models[0].command->json_input);
  CHECK(bad("[[model]]\ncommand = \"cat\"\nretries = 2\n").message.find("HTTP models only") != std::string::npos);
}

TEST_CASE("template overrides are read relative to the config and checked for placeholders") {
  TempDir dir;
  kevo::write_file_atomic(dir / "user.txt", "Improve:\n{{parents}}\nGive {{k}} schedules.\n");
  auto c = parse_llm_config(cat("[prompt]\nuser = \"user.txt\"\n", kMinimal), "llm.toml", dir.path());
  REQUIRE(c);
  CHECK(c->templates.user == "Improve:\n{{parents}}\nGive {{k}} schedules.\n");
  CHECK(c->templates.system == default_templates().system);
  kevo::write_file_atomic(dir / "typo.txt", "line one\nshow {{elitez}} here\n");
  const auto d = bad(cat("[prompt]\nuser = \"typo.txt\"\n", kMinimal), dir.path());
  CHECK(d.loc.file == (dir / "typo.txt").string());
  CHECK(d.loc.line == 2);
  CHECK(d.loc.column == 6);
  CHECK(d.message.find("elitez") != std::string::npos);
  CHECK(bad(cat("[prompt]\nuser = \"missing.txt\"\n", kMinimal), dir.path()).message.find("cannot read") !=
        std::string::npos);
}

TEST_CASE("the cassette path is resolved against the config's folder") {
  auto c = parse_llm_config(cat("[cassette]\npath = \"run.jsonl\"\nmode = \"replay\"\n", kMinimal), "x.toml",
                            "/some/dir");
  REQUIRE(c);
  CHECK(c->cassette->path == std::filesystem::path("/some/dir/run.jsonl"));
  CHECK(c->cassette->mode == CassetteMode::replay);
  CHECK(bad(cat("[cassette]\npath = \"r\"\nmode = \"rewind\"\n", kMinimal)).message.find("record") !=
        std::string::npos);
}

TEST_CASE("make_llm_operators builds one operator per model sharing one budget") {
  auto c = parse_llm_config(cat("cost_cap_usd = 3\n", kMinimal) +
                            "[[model]]\nname = \"second\"\ncommand = \"cat\"\nconcurrency = 2\n");
  REQUIRE(c);
  LlmOperators ops = make_llm_operators(*c);
  REQUIRE(ops.operators.size() == 2);
  CHECK(ops.operators[0].name() == "llm:m");
  CHECK(ops.operators[1].name() == "llm:second");
  CHECK(ops.operators[1].config().concurrency == 2);
  CHECK(ops.operators[0].budget() == ops.operators[1].budget());
  CHECK(ops.budget->cap() == 3.0);
  CHECK(ops.usage_json().find("\"llm:second\"") != std::string::npos);
}
