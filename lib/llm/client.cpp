#include "kevo/llm/client.hpp"

#include "kevo/core/hash.hpp"

namespace kevo::llm {

const char* to_string(LlmErrorKind k) noexcept {
  switch (k) {
    case LlmErrorKind::config: return "config";
    case LlmErrorKind::transport: return "transport";
    case LlmErrorKind::timeout: return "timeout";
    case LlmErrorKind::http: return "http";
    case LlmErrorKind::malformed: return "malformed";
    case LlmErrorKind::empty: return "empty";
    case LlmErrorKind::process: return "process";
    case LlmErrorKind::cassette: return "cassette";
    case LlmErrorKind::cancelled: return "cancelled";
  }
  return "transport";
}

std::string LlmError::str() const { return std::string(to_string(kind)) + ": " + message; }

std::uint64_t request_hash(const ChatRequest& r) noexcept {
  StableHasher h;
  h.str("kevo.chat.v1").str(r.model).f64(r.temperature).i64(r.max_tokens).u64(r.messages.size());
  for (const auto& m : r.messages) h.str(m.role).str(m.content);
  return h.digest();
}

}  // namespace kevo::llm
