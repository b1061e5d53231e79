// The chat-completion interface the LLM operator talks through. A client is any plain class
// with `complete(const ChatRequest&)`; kevo::llm::LlmClient holds it by value (type erasure, as
// pagmo2 does), so the operator never knows whether replies come from HTTP, a command or a cassette.
#pragma once
#include <atomic>
#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "kevo/core/expected.hpp"

namespace kevo::llm {

struct ChatMessage {
  std::string role;     // "system", "user" or "assistant"
  std::string content;
};

struct ChatRequest {
  std::vector<ChatMessage> messages;
  std::string model;          // the server-side model name
  double temperature = 0.7;
  int max_tokens = 1024;
  // Set by the caller to abandon the call early (shutdown); never part of the request's identity.
  const std::atomic<bool>* cancel = nullptr;
};

struct ChatReply {
  std::string text;                   // the assistant message's content
  std::uint64_t prompt_tokens = 0;
  std::uint64_t completion_tokens = 0;
  bool usage_estimated = false;       // the server reported no usage; counts are chars/3 estimates
  double latency_s = 0.0;             // wall time of the successful attempt (recorded, not re-measured, on replay)
  std::string finish_reason;          // "stop", "length", ... where the server says
};

enum class LlmErrorKind : unsigned char {
  config,      // the client cannot be used as configured (missing key variable, bad URL)
  transport,   // connection refused / reset, DNS, TLS
  timeout,     // connect or total timeout, or a command that ran too long
  http,        // a non-success HTTP status that retries did not cure
  malformed,   // the reply is not the JSON the protocol promises
  empty,       // the reply has no choices or no content
  process,     // a command client's command failed (non-zero exit, signal, too much output)
  cassette,    // replay found no recorded reply for this request, or the cassette is unusable
  cancelled,   // the caller cancelled the call
};
const char* to_string(LlmErrorKind k) noexcept;

// Why a call failed. Messages are one line and never contain key material.
struct LlmError {
  LlmErrorKind kind = LlmErrorKind::transport;
  std::string message;
  int http_status = 0;   // the last HTTP status seen, 0 if none
  int attempts = 0;      // how many attempts were made
  [[nodiscard]] std::string str() const;  // "<kind>: <message>"
};

// Stable identity of a request (model, temperature, max_tokens, roles and contents): the
// cassette key. Same request => same hash on every run and machine.
std::uint64_t request_hash(const ChatRequest& r) noexcept;

// complete() is checked before copyability, and LlmClient's constructor excludes LlmClient itself
// before it asks this concept: otherwise asking whether LlmClient is copyable would ask whether it
// can be built from itself again (a recursive constraint that clang refuses).
template <typename T>
concept LlmClientLike = requires(const std::remove_cvref_t<T>& c, const ChatRequest& r) {
                          { c.complete(r) } -> std::same_as<Expected<ChatReply, LlmError>>;
                        } && std::copy_constructible<std::remove_cvref_t<T>>;

namespace detail {
template <typename T> concept HasClientName = requires(const T& c) { { c.name() } -> std::convertible_to<std::string>; };
}

// A client held by value. complete() may be called from several threads at once: every kevo
// client is safe for that (each call owns its connection or process; the cassette locks).
// Copies share the held client, so a copy records into the same cassette.
class LlmClient {
 public:
  template <typename T>
    requires(!std::same_as<std::remove_cvref_t<T>, LlmClient> && LlmClientLike<T>)  // in this order: see LlmClientLike
  LlmClient(T&& c) : p_(std::make_shared<Model<std::remove_cvref_t<T>>>(std::forward<T>(c))) {}  // NOLINT

  [[nodiscard]] Expected<ChatReply, LlmError> complete(const ChatRequest& r) const { return p_->complete(r); }
  // A short description for logs ("openai:http://host/v1 gpt-4o", "command:...", "cassette:...").
  [[nodiscard]] std::string name() const { return p_->name(); }

  template <typename T>
  [[nodiscard]] const T* extract() const noexcept {
    auto* m = dynamic_cast<const Model<T>*>(p_.get());
    return m ? &m->value : nullptr;
  }

 private:
  struct Concept {
    virtual ~Concept() = default;
    [[nodiscard]] virtual Expected<ChatReply, LlmError> complete(const ChatRequest&) const = 0;
    [[nodiscard]] virtual std::string name() const = 0;
  };
  template <typename T>
  struct Model final : Concept {
    template <typename U>
    explicit Model(U&& u) : value(std::forward<U>(u)) {}
    Expected<ChatReply, LlmError> complete(const ChatRequest& r) const override { return value.complete(r); }
    std::string name() const override {
      if constexpr (detail::HasClientName<T>) return value.name(); else return "client";
    }
    T value;
  };
  std::shared_ptr<const Concept> p_;
};

}  // namespace kevo::llm
