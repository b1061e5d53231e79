// A client for the OpenAI-compatible chat-completions protocol (POST {base_url}/chat/completions),
// spoken by OpenAI, vLLM, the llama.cpp server and Ollama. libcurl stays inside lib/llm; the API
// key is read from an environment variable at call time and scrubbed from everything returned.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "kevo/llm/client.hpp"

namespace kevo::llm {

struct OpenAiConfig {
  std::string base_url = "https://api.openai.com/v1";  // ".../v1"; "/chat/completions" is appended
  std::string model;                // sent as "model" when a request leaves it empty
  std::string api_key_env;          // NAME of the environment variable holding the key; empty = no key
  double connect_timeout_s = 10.0;
  double timeout_s = 120.0;         // whole attempt, connect included
  int retries = 3;                  // extra attempts after the first on 429, 5xx and transport errors
  double backoff_base_s = 1.0;      // attempt i waits base * 2^i, times a jitter in [0.5, 1)
  double backoff_max_s = 30.0;
  double retry_after_max_s = 120.0; // a Retry-After beyond this fails the call instead of waiting
  std::uint64_t seed = 0;           // jitter stream (deterministic per request and attempt)
  // The JSON field carrying max_tokens: OpenAI's reasoning models want "max_completion_tokens".
  std::string max_tokens_field = "max_tokens";
};

class OpenAiClient {
 public:
  explicit OpenAiClient(OpenAiConfig cfg);
  [[nodiscard]] Expected<ChatReply, LlmError> complete(const ChatRequest& r) const;
  [[nodiscard]] std::string name() const;
  [[nodiscard]] const OpenAiConfig& config() const noexcept { return cfg_; }

  // The JSON body sent for a request (exposed for tests and for the command client's json input).
  [[nodiscard]] static std::string request_body(const ChatRequest& r, const std::string& default_model,
                                                const std::string& max_tokens_field = "max_tokens");
  // Parses a chat-completions reply body. Errors are `malformed` or `empty`.
  [[nodiscard]] static Expected<ChatReply, LlmError> parse_reply_body(std::string_view body);
  // The wait before retry `attempt` (0-based): jittered exponential backoff, or Retry-After when given.
  [[nodiscard]] double backoff_s(std::uint64_t request_key, int attempt, double retry_after_s) const;

 private:
  OpenAiConfig cfg_;
};

}  // namespace kevo::llm
