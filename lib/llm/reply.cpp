// The reply parser works on lines with hand-written scanning (no std::regex: its backtracking
// recursion overflows the stack on long hostile input, and this function is fuzzed).
#include "kevo/llm/reply.hpp"

#include <algorithm>
#include <cctype>
#include <set>

namespace kevo::llm {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_ident(char c) { return is_alpha(c) || is_digit(c) || c == '_' || c == '.' || c == '[' || c == ']'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

bool starts_with_ci(std::string_view s, std::string_view p) {
  if (s.size() < p.size()) return false;
  for (std::size_t i = 0; i < p.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != p[i]) return false;
  return true;
}

// CRLF and lone CR become LF; NUL bytes are dropped (no schedule grammar contains them).
std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  std::string cur;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\r') {
      lines.push_back(std::move(cur));
      cur.clear();
      if (i + 1 < text.size() && text[i + 1] == '\n') ++i;
    } else if (c == '\n') {
      lines.push_back(std::move(cur));
      cur.clear();
    } else if (c != '\0') {
      cur.push_back(c);
    }
  }
  lines.push_back(std::move(cur));  // the text after the last newline ("" if it ended with one)
  return lines;
}

struct Fence {
  char ch = 0;
  std::size_t len = 0;
  std::string info;
};

// A fence opener: optional indent (<= 3 spaces, or a list marker's width), then 3+ backticks or tildes.
bool fence_of(std::string_view line, Fence& f) {
  std::string_view t = trim(line);
  if (t.size() < 3 || (t[0] != '`' && t[0] != '~')) return false;
  std::size_t n = 0;
  while (n < t.size() && t[n] == t[0]) ++n;
  if (n < 3) return false;
  f.ch = t[0];
  f.len = n;
  f.info = lower(trim(t.substr(n)));
  return true;
}

bool closes(std::string_view line, const Fence& open) {
  std::string_view t = trim(line);
  if (t.size() < open.len) return false;
  for (char c : t)
    if (c != open.ch) return false;
  return true;
}

// Code blocks in a programming language are never schedules; skipping them keeps the model's
// explanatory snippets out of the candidates (they would only come back as parse rejections).
bool foreign_language(const std::string& info) {
  static const std::set<std::string> langs = {"python", "py", "cpp", "c++", "c", "bash", "sh", "shell", "console",
                                              "javascript", "js", "rust", "java", "go", "cuda", "diff", "json"};
  std::string first = info.substr(0, info.find_first_of(" \t{"));
  return langs.count(first) != 0;
}

bool is_separator(std::string_view t) {
  if (t.size() < 3) return false;
  const char c = t[0];
  if (c != '-' && c != '=' && c != '*' && c != '_') return false;
  for (char x : t)
    if (x != c && x != ' ') return false;
  return true;
}

// "Schedule 2:", "### Candidate 3", "**Option 1**", "Proposal #4 -": a header naming the next item.
// Returns the length of the header prefix (0 if the line does not start with one).
std::size_t header_prefix(std::string_view t) {
  std::size_t i = 0;
  while (i < t.size() && (t[i] == '#' || t[i] == '*' || t[i] == '_' || is_space(t[i]))) ++i;
  static const char* words[] = {"schedule", "candidate", "option", "proposal", "variant"};
  std::size_t wl = 0;
  for (const char* w : words) {
    if (starts_with_ci(t.substr(i), w)) {
      wl = std::string_view(w).size();
      break;
    }
  }
  if (wl == 0) return 0;
  std::size_t j = i + wl;
  if (j < t.size() && (is_alpha(t[j]) || t[j] == '=' || t[j] == '.' || t[j] == '_')) return 0;  // "schedules", "schedule=..."
  if (j < t.size() && t[j] == 's') return 0;
  while (j < t.size() && is_space(t[j])) ++j;
  if (j < t.size() && t[j] == '#') ++j;
  const std::size_t digits_at = j;
  while (j < t.size() && is_digit(t[j])) ++j;
  const bool numbered = j > digits_at;
  while (j < t.size() && (t[j] == '*' || t[j] == '_' || is_space(t[j]))) ++j;
  if (j < t.size() && (t[j] == ':' || t[j] == ')' || t[j] == '-' || t[j] == '.')) {
    ++j;
  } else if (!(numbered && j >= t.size())) {
    return 0;  // "Schedule tile.m=..." is not a header; "Schedule 3" alone is
  }
  while (j < t.size() && (t[j] == '*' || t[j] == '_' || is_space(t[j]))) ++j;
  return j;
}

// Length of a list marker ("1. ", "2) ", "(3) ", "- ", "* ", "+ ", "• ") at the start of t.
std::size_t list_marker(std::string_view t) {
  std::size_t i = 0;
  if (t.size() >= 2 && (t[0] == '-' || t[0] == '*' || t[0] == '+') && is_space(t[1])) {
    i = 2;
  } else if (t.size() >= 4 && static_cast<unsigned char>(t[0]) == 0xE2 && static_cast<unsigned char>(t[1]) == 0x80 &&
             static_cast<unsigned char>(t[2]) == 0xA2) {
    i = 3;  // U+2022 bullet
  } else {
    std::size_t j = 0;
    const bool paren = !t.empty() && t[0] == '(';
    if (paren) ++j;
    const std::size_t d = j;
    while (j < t.size() && j - d < 3 && is_digit(t[j])) ++j;
    if (j == d || j >= t.size()) return 0;
    if (paren ? t[j] != ')' : (t[j] != '.' && t[j] != ')')) return 0;
    ++j;
    if (j < t.size() && !is_space(t[j])) return 0;  // "1.5" or "3)x" is content
    i = j;
  }
  while (i < t.size() && is_space(t[i])) ++i;
  return i;
}

// Strips decoration a model puts around an item: list markers, headers, inline backticks, bold.
std::string_view strip_item(std::string_view t, bool& had_marker) {
  had_marker = false;
  t = trim(t);
  for (int round = 0; round < 2; ++round) {
    if (std::size_t m = list_marker(t); m > 0) {
      had_marker = true;
      t = trim(t.substr(m));
    }
    if (std::size_t h = header_prefix(t); h > 0) {
      had_marker = true;
      t = trim(t.substr(h));
    }
  }
  while (t.size() >= 2 && ((t.front() == '`' && t.back() == '`') || (t.front() == '*' && t.back() == '*'))) {
    t = trim(t.substr(1, t.size() - 2));
  }
  if (!t.empty() && t.front() == '`' && t.find('`', 1) == std::string_view::npos) t = trim(t.substr(1));
  if (!t.empty() && t.back() == '`' && t.find('`') == t.size() - 1) t = trim(t.substr(0, t.size() - 1));
  return t;
}

bool is_comment(std::string_view t) { return !t.empty() && (t[0] == '#' || t.substr(0, 2) == "//"); }

// Outside fences, a line is taken as schedule text only if it has an assignment-like token
// ("name=value" or "name: value") and does not read as a sentence.
bool looks_like_schedule(std::string_view t) {
  if (t.empty()) return false;
  bool assign = false;
  for (std::size_t i = 1; i < t.size() && !assign; ++i) {
    if (t[i] == '=' && t[i - 1] != '=' && (i + 1 >= t.size() || t[i + 1] != '=')) assign = true;
    if (t[i] == ':' && is_ident(t[i - 1]) && i + 1 < t.size() && (is_space(t[i + 1]) || is_ident(t[i + 1]))) {
      std::size_t j = i + 1;
      while (j < t.size() && is_space(t[j])) ++j;
      if (j < t.size() && (is_ident(t[j]) || t[j] == '(' || t[j] == '[' || t[j] == '-')) assign = true;
    }
  }
  if (!assign) return false;
  const char last = t.back();
  if (last == '.' || last == '!' || last == '?' || last == ':') return false;
  // Count plain words (letters only, >= 3 long): sentences are mostly those.
  std::size_t words = 0, tokens = 0;
  std::size_t i = 0;
  while (i < t.size()) {
    while (i < t.size() && is_space(t[i])) ++i;
    if (i >= t.size()) break;
    std::size_t j = i;
    bool plain = true;
    while (j < t.size() && !is_space(t[j])) {
      const char c = t[j];
      if (!is_alpha(c) && !((c == ',' || c == ';') && (j + 1 == t.size() || is_space(t[j + 1])))) plain = false;
      ++j;
    }
    ++tokens;
    if (plain && j - i >= 3) ++words;
    i = j;
  }
  return !(tokens >= 5 && words * 10 >= tokens * 6);
}

// The contents of inline code spans (`x` or ```x```) on one line.
std::vector<std::string> inline_code(std::string_view line) {
  std::vector<std::string> spans;
  std::size_t i = 0;
  while (i < line.size()) {
    if (line[i] != '`') {
      ++i;
      continue;
    }
    std::size_t n = 0;
    while (i + n < line.size() && line[i + n] == '`') ++n;
    const std::string ticks(n, '`');
    const std::size_t close = line.find(ticks, i + n);
    if (close == std::string_view::npos) break;
    std::string_view inner = trim(line.substr(i + n, close - i - n));
    if (!inner.empty()) spans.emplace_back(inner);
    i = close + n;
  }
  return spans;
}

struct Segment {
  std::vector<std::string> lines;
  bool fenced = false;
  bool unterminated = false;  // a fence that never closed
};

// True when a line reads as a sentence rather than schedule text.
bool prose(std::string_view t) {
  if (t.empty()) return false;
  const char last = t.back();
  if (last == '.' || last == '!' || last == '?' || last == ':') return true;
  std::size_t words = 0, tokens = 0, i = 0;
  while (i < t.size()) {
    while (i < t.size() && is_space(t[i])) ++i;
    if (i >= t.size()) break;
    std::size_t j = i;
    bool plain = true;
    while (j < t.size() && !is_space(t[j])) {
      if (!is_alpha(t[j]) && !(t[j] == ',' && (j + 1 == t.size() || is_space(t[j + 1])))) plain = false;
      ++j;
    }
    ++tokens;
    if (plain && j - i >= 3) ++words;
    i = j;
  }
  return tokens >= 5 && words * 10 >= tokens * 6;
}

bool starts_item(std::string_view t, const std::string& key) {
  if (key.empty() || t.size() < key.size() || t.substr(0, key.size()) != key) return false;
  if (t.size() == key.size() || key.back() == ':') return true;
  const char c = t[key.size()];
  return is_space(c) || c == '=' || c == '@' || c == ':';
}

// Multi-line: cut a segment into items at blank lines, separators, list markers, headers and
// repeated first lines.
void items_multiline(const Segment& seg, std::vector<std::string>& out, std::size_t& dropped, bool truncated,
                     const std::string& key) {
  std::vector<std::vector<std::string>> items;
  std::vector<std::string> cur;
  bool cur_has_key = false;
  auto flush = [&] {
    while (!cur.empty() && trim(cur.back()).empty()) cur.pop_back();
    // Outside fences an item must hold at least one assignment-like line to be a schedule.
    bool any = seg.fenced;
    for (const auto& l : cur) any = any || looks_like_schedule(trim(l));
    if (!cur.empty() && any) items.push_back(std::move(cur));
    cur.clear();
    cur_has_key = false;
  };
  for (const auto& raw : seg.lines) {
    std::string_view t = trim(raw);
    if (t.empty() || is_separator(t)) {
      flush();
      continue;
    }
    bool marker = false;
    std::string_view body = strip_item(raw, marker);
    if (marker) {
      flush();
      if (body.empty()) continue;
      cur_has_key = starts_item(body, key);
      cur.emplace_back(body);
      continue;
    }
    if (!seg.fenced && prose(t)) {
      flush();  // prose ends an item
      continue;
    }
    if (starts_item(t, key)) {
      if (cur_has_key) flush();
      cur_has_key = true;
    }
    cur.emplace_back(raw);
  }
  flush();
  if ((seg.unterminated || truncated) && !items.empty()) {
    items.pop_back();
    ++dropped;
  }
  for (auto& it : items) {
    // Remove the common indentation; trim line ends.
    std::size_t indent = std::string::npos;
    for (const auto& l : it) {
      if (trim(l).empty()) continue;
      std::size_t k = 0;
      while (k < l.size() && is_space(l[k])) ++k;
      indent = std::min(indent, k);
    }
    std::string text;
    for (const auto& l : it) {
      std::string_view v = l;
      v.remove_prefix(std::min(indent, v.size()));
      while (!v.empty() && is_space(v.back())) v.remove_suffix(1);
      if (!text.empty()) text += '\n';
      text += v;
    }
    out.push_back(std::move(text));
  }
}

void items_single(const Segment& seg, std::vector<std::string>& out, std::size_t& dropped, bool truncated) {
  std::vector<std::string> items;
  for (const auto& raw : seg.lines) {
    std::string_view t = trim(raw);
    if (t.empty() || is_separator(t) || is_comment(t)) continue;
    bool marker = false;
    std::string_view body = strip_item(raw, marker);
    if (body.empty() || is_comment(body)) continue;
    if (!seg.fenced && !looks_like_schedule(body)) {
      // Prose that quotes a schedule inline: "Try `a=5 b=5` next." or "Try ```a=5 b=5``` next."
      for (const auto& span : inline_code(raw))
        if (looks_like_schedule(span)) items.push_back(span);
      continue;
    }
    items.emplace_back(body);
  }
  if ((seg.unterminated || truncated) && !items.empty()) {
    items.pop_back();
    ++dropped;
  }
  for (auto& s : items) out.push_back(std::move(s));
}

}  // namespace

std::string item_start_of(std::string_view text) {
  for (const auto& raw : split_lines(text)) {
    std::string_view t = trim(raw);
    if (t.empty() || is_comment(t)) continue;
    std::size_t a = 0;
    while (a < t.size() && !is_space(t[a]) && t[a] != '=' && t[a] != '@' && t[a] != ':') ++a;
    std::string key(t.substr(0, a));
    if (a < t.size() && t[a] == ':') return key + ":";
    if (a < t.size() && t[a] != ' ' && t[a] != '\t') return key;  // "a=3": the name alone
    std::size_t b = a;
    while (b < t.size() && is_space(t[b])) ++b;
    std::size_t c = b;
    while (c < t.size() && !is_space(t[c])) ++c;
    if (c > b && t[c - 1] == ':') {
      key += ' ';
      key.append(t.substr(b, c - b));
    }
    return key;
  }
  return {};
}

ParsedReply parse_reply(std::string_view reply, const ReplyParseOptions& opt) {
  ParsedReply r;
  std::vector<std::string> lines = split_lines(reply);
  const bool ends_with_newline = !reply.empty() && (reply.back() == '\n' || reply.back() == '\r');
  // A reply cut mid-line leaves its last line incomplete.
  const bool cut = opt.truncated || !ends_with_newline;

  std::vector<Segment> fenced;
  Segment outside;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    Fence f;
    if (!fence_of(lines[i], f)) {
      outside.lines.push_back(lines[i]);
      continue;
    }
    // "```a=1 b=2```" on one line: a block of one line.
    std::string_view t = trim(lines[i]);
    const std::string close(f.len, f.ch);
    if (t.size() > 2 * f.len && t.substr(t.size() - f.len) == close) {
      Segment s;
      s.fenced = true;
      s.lines.emplace_back(trim(t.substr(f.len, t.size() - 2 * f.len)));
      if (!foreign_language(f.info)) fenced.push_back(std::move(s));
      continue;
    }
    Segment s;
    s.fenced = true;
    std::size_t j = i + 1;
    for (; j < lines.size() && !closes(lines[j], f); ++j) s.lines.push_back(lines[j]);
    s.unterminated = j >= lines.size();
    if (s.unterminated && !cut && !s.lines.empty() && s.lines.back().empty()) s.lines.pop_back();
    // An unterminated fence whose text ended on a newline lost nothing mid-line: keep every
    // complete line in single-line mode (the model forgot the closing fence).
    if (s.unterminated && !opt.truncated && ends_with_newline && !opt.multiline) s.unterminated = false;
    if (!foreign_language(f.info)) fenced.push_back(std::move(s));
    i = j;  // skip the closing fence
  }

  std::vector<std::string> raw;
  if (!fenced.empty()) {
    r.fenced = true;
    for (const auto& s : fenced) {
      const bool last = &s == &fenced.back();
      if (opt.multiline)
        items_multiline(s, raw, r.dropped_partial, last && opt.truncated && !s.unterminated, opt.item_start);
      else
        items_single(s, raw, r.dropped_partial, last && opt.truncated && !s.unterminated);
    }
  } else {
    if (opt.multiline)
      items_multiline(outside, raw, r.dropped_partial, opt.truncated, opt.item_start);
    else
      items_single(outside, raw, r.dropped_partial, opt.truncated);
  }

  std::set<std::string> seen;
  for (auto& c : raw) {
    if (c.empty()) continue;
    if (!seen.insert(c).second) {
      ++r.duplicates;
      continue;
    }
    if (r.candidates.size() >= opt.max_candidates) break;
    r.candidates.push_back(std::move(c));
  }
  return r;
}

}  // namespace kevo::llm
