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
  // Multi-line mode: the leading word(s) of a schedule's first line (e.g. "fuse", "nest acc:").
  // A line starting with them begins a new schedule when the current one already has such a line,
  // so schedules written back to back without a blank line are still told apart.
  std::string item_start;
};

// The item_start key of a schedule text: its first word, plus the second when that one ends
// with ':' ("nest acc:"); comment lines are skipped. Empty for an empty text.
[[nodiscard]] std::string item_start_of(std::string_view schedule_text);

struct ParsedReply {
  std::vector<std::string> candidates;  // in reply order, unique, trimmed, LF line ends
  std::size_t duplicates = 0;           // candidates dropped as exact repeats
  std::size_t dropped_partial = 0;      // incomplete trailing items dropped
  bool fenced = false;                  // candidates came from fenced blocks
};

[[nodiscard]] ParsedReply parse_reply(std::string_view reply, const ReplyParseOptions& opt = {});

}  // namespace kevo::llm
