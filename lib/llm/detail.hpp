// Helpers private to lib/llm.
#pragma once
#include <string>
#include <string_view>

namespace kevo::llm::detail {

// Replaces every occurrence of `secret` in `s` by "***" (no-op for an empty secret).
inline std::string scrub(std::string s, std::string_view secret) {
  if (secret.empty()) return s;
  std::size_t pos = 0;
  while ((pos = s.find(secret, pos)) != std::string::npos) {
    s.replace(pos, secret.size(), "***");
    pos += 3;
  }
  return s;
}

// One line, at most `max` bytes, control characters shown as spaces: for error messages that
// quote a server's or a command's output.
inline std::string one_line(std::string_view s, std::size_t max = 200) {
  std::string r;
  for (char c : s) {
    if (r.size() >= max) {
      r += "...";
      break;
    }
    r += (static_cast<unsigned char>(c) < 0x20) ? ' ' : c;
  }
  return r;
}

// The end of a command's stderr as one line: where a tool that logs a lot (a model loader) says
// what went wrong. At most `max` bytes, "..." in front when cut.
inline std::string last_words(std::string_view s, std::size_t max = 200) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  if (s.size() <= max) return one_line(s, max);
  std::size_t from = s.size() - max;
  while (from < s.size() && (static_cast<unsigned char>(s[from]) & 0xC0) == 0x80) ++from;
  return "..." + one_line(s.substr(from), max);
}

// The largest n <= max that does not split a UTF-8 sequence of `s` (where the bytes are UTF-8):
// where text is cut to a length.
inline std::size_t utf8_cut(std::string_view s, std::size_t max) {
  if (max >= s.size()) return s.size();
  std::size_t n = max;
  while (n > 0 && max - n < 3 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80 ? max : n;
}

// Tokens are estimated at one per 3 characters where a server reports no usage: an over-estimate
// for English and schedules, so the cost cap errs on the safe side. A command's reply is cut at
// max_tokens by the same figure.
inline constexpr std::size_t kCharsPerToken = 3;
inline unsigned long long estimate_tokens(std::size_t chars) { return (chars + kCharsPerToken - 1) / kCharsPerToken; }

}  // namespace kevo::llm::detail
