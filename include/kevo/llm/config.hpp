// The LLM section of a search, from a TOML file (`kevo search --llm FILE`): one operator per
// [[model]] table (HTTP or command), a shared cost cap, an optional cassette, prompt overrides.
// Bad keys and values are reported as file:line:column. See docs/LLM.md and examples/llm.toml.
#pragma once
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kevo/core/error.hpp"
#include "kevo/core/expected.hpp"
#include "kevo/llm/cassette.hpp"
#include "kevo/llm/command.hpp"
#include "kevo/llm/mutation.hpp"
#include "kevo/llm/openai.hpp"
#include "kevo/llm/prompt.hpp"

namespace kevo::llm {

struct ModelConfig {
  std::string name;                 // operator "llm:<name>"; defaults to `model`
  std::optional<OpenAiConfig> http; // exactly one of http / command
  std::optional<CommandConfig> command;
  std::string model;
  Prices prices;
  double temperature = 0.7;
  int max_tokens = 2048;
  int concurrency = 1;
};

struct CassetteConfig {
  std::filesystem::path path;       // relative paths are resolved against the config file's folder
  CassetteMode mode = CassetteMode::record;
};

struct LlmConfig {
  std::string source;               // the file it came from
  std::vector<ModelConfig> models;
  double cost_cap_usd = std::numeric_limits<double>::infinity();
  int proposals_per_call = 4;
  bool asynchronous = true;
  std::optional<CassetteConfig> cassette;
  PromptTemplates templates = default_templates();
  std::size_t elites_in_prompt = 4;
  std::size_t rejected_in_prompt = 8;
  std::size_t recent_in_prompt = 6;
  std::size_t profile_chars = 1500;
  std::uint64_t seed = 0;           // backoff jitter
};

// Parses TOML text. Template files and the cassette path are resolved against `base_dir`.
[[nodiscard]] Expected<LlmConfig, Diagnostic> parse_llm_config(std::string_view text, std::string file = "<llm config>",
                                                               const std::filesystem::path& base_dir = ".");
// Reads and parses a file; throws kevo::ParseError (located) or kevo::Error (unreadable file).
[[nodiscard]] LlmConfig load_llm_config(const std::filesystem::path& path);

// The operators of a configuration, sharing one CostBudget and (if configured) one Cassette.
struct LlmOperators {
  std::vector<LlmMutation> operators;
  std::shared_ptr<CostBudget> budget;
  std::shared_ptr<Cassette> cassette;   // null without a cassette

  [[nodiscard]] std::vector<LlmUsage> usage() const;
  [[nodiscard]] double spent_usd() const { return budget ? budget->spent() : 0.0; }
  [[nodiscard]] std::string usage_json() const;  // kevo::llm::usage_json of all operators
};

// Builds the clients (HTTP, command, wrapped in the cassette when one is set; in replay mode no
// model is contacted at all) and the operators. Throws kevo::Error if the cassette cannot be opened.
[[nodiscard]] LlmOperators make_llm_operators(const LlmConfig& cfg);

}  // namespace kevo::llm
