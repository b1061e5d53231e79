// Turns a model's free-form reply into candidate schedule texts, without trusting it: fenced
// blocks or none, prose around them, numbered or bulleted lists, CRLF, duplicates, a list cut off
// by max_tokens. Candidates are plain text for Problem::from_text; nothing in a reply is executed.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kevo::llm {

struct ReplyParseOptions {
  // false: one schedule per line (the problem prints a genome on one line);
  // true: a schedule spans lines, and schedules are separated by fences, blank lines, `---`,
  // list markers or "Schedule N:" headers.
  bool multiline = false;
  // The reply stopped at max_tokens: its last item is incomplete and is dropped.
  bool truncated = false;
  std::size_t max_candidates = 64;
};

struct ParsedReply {
  std::vector<std::string> candidates;  // in reply order, unique, trimmed, LF line ends
  std::size_t duplicates = 0;           // candidates dropped as exact repeats
  std::size_t dropped_partial = 0;      // incomplete trailing items dropped
  bool fenced = false;                  // candidates came from fenced blocks
};

[[nodiscard]] ParsedReply parse_reply(std::string_view reply, const ReplyParseOptions& opt = {});

}  // namespace kevo::llm
