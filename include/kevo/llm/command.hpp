// A client that pipes the prompt to a shell command (`/bin/sh -c`) and reads the reply from its
// stdout: for local model CLIs. The command runs in its own process group, and a timeout or a
// cancel kills the whole group, so a wrapper script's children do not outlive the call.
#pragma once
#include <cstddef>
#include <string>

#include "kevo/llm/client.hpp"

namespace kevo::llm {

struct CommandConfig {
  std::string command;                  // run as /bin/sh -c COMMAND
  double timeout_s = 300.0;
  bool json_input = false;              // stdin gets the chat-completions JSON body instead of plain text
  std::size_t max_output_bytes = 4u << 20;
};

class CommandClient {
 public:
  explicit CommandClient(CommandConfig cfg);
  // stdin: the messages' contents separated by blank lines (or the JSON body); the environment
  // also carries KEVO_LLM_MODEL, KEVO_LLM_TEMPERATURE and KEVO_LLM_MAX_TOKENS.
  [[nodiscard]] Expected<ChatReply, LlmError> complete(const ChatRequest& r) const;
  [[nodiscard]] std::string name() const { return "command:" + cfg_.command; }
  [[nodiscard]] const CommandConfig& config() const noexcept { return cfg_; }

 private:
  CommandConfig cfg_;
};

}  // namespace kevo::llm
