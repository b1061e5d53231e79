// kevo's LLM module: chat clients (HTTP, command, cassette), the reply parser, prompt templates,
// the LlmMutation operator and its TOML configuration. Include this one header to use them.
#pragma once
#include "kevo/llm/cassette.hpp"
#include "kevo/llm/client.hpp"
#include "kevo/llm/command.hpp"
#include "kevo/llm/config.hpp"
#include "kevo/llm/mutation.hpp"
#include "kevo/llm/openai.hpp"
#include "kevo/llm/prompt.hpp"
#include "kevo/llm/reply.hpp"
